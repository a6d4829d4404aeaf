"""Push consumers: consumer groups sharing a topic's queues, with retries, a dead-letter queue and
at-least-once delivery (RocketMQ's `DefaultMQPushConsumer`; the broker's consumer manager is `rmq.group`).

- Members of a group (`PushConsumer`s with the same `group` on the same store, in this process or others)
  divide the topic's queues with a rebalance strategy (`rmq.rebalance`, AVG by default) and re-divide them
  whenever one starts, shuts down or dies (`rmq.group`: who owns which queue, heartbeats, leases). Each member
  also takes its share of the group's retry topic `%RETRY%<group>`. While its process's lease has run out by its
  own clock (it was paused, its heartbeat stalled) a member pulls, consumes and commits nothing; its next
  heartbeat drops, uncommitted, the queues another member took over meanwhile.
- Each member runs one pull thread (long polling: it sleeps until the reput service reports an arrival) and a
  pool of `consume_thread_nums` consume threads that call the listener with up to
  `consume_message_batch_max_size` messages.
- A listener returning `RECONSUME_LATER` (or raising) sends each message of the batch back as the broker's
  `consumerSendMsgBack` does (`MessageStore.send_message_back`): to `%RETRY%<group>` with reconsumeTimes + 1,
  the properties RETRY_TOPIC / ORIGIN_MESSAGE_ID and delay level `ConsumeContext.delay_level_when_next_consume`
  (0, the default: 3 + reconsumeTimes), so retries come back after the level's delay (10 s, 30 s, 1 min, ...
  with the default `message_delay_level`; the store's schedule service delivers them), or to `%DLQ%<group>`
  once it was reconsumed `max_reconsume_times` times or when the listener set the level to -1.
- At-least-once: the committed offset of a queue only passes messages whose consumption finished (the smallest
  in-flight offset, as `ProcessQueue` computes it). With `persist_offsets_each_batch` (the default) each batch's
  commit is appended to the offsets journal (`consumerOffset.json.journal`, replayed by `load()`), so a killed
  process redelivers at most its in-flight messages; the JSON snapshot is rewritten on rebalance and shutdown.
- `orderly=True` takes a `MessageListenerOrderly` and consumes each queue in order, one thread per queue at a time,
  suspending and retrying in place (`rmq.orderly`).
- `message_model=MessageModel.BROADCASTING`: every consumer of the group gets every message of every queue and
  keeps its own offsets (`rmq.local_offsets.LocalFileOffsetStore`); there is no rebalance among members, no retry
  topic, and a message whose consumption fails is dropped (logged), as RocketMQ's client does.
"""

from __future__ import annotations

import enum
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from rmq import _args, _native
from rmq._native import ArgumentTypeError, BoundaryType, GetMessageResult, GetMessageStatus, MessageExt
from rmq.consumer import MAX_TOPIC_QUEUE_NUMS, READ_ONLY_POLL, ArrivalWaiter, PullStatus, pull_status, topic_queues
from rmq.group import LEASE_RECHECK, ConsumerGroup
from rmq.local_offsets import LocalFileOffsetStore
from rmq.orderly import (
    DEFAULT_SUSPEND_MILLIS,
    IN_LISTENER,
    ORDERLY_MAX_RECONSUME_TIMES,
    MessageListenerOrderly,
    OrderlyProcessQueue,
    OrderlyService,
)
from rmq.rebalance import AllocateMessageQueueAveragely, AllocateStrategy, MessageQueue, allocate_sorted

if TYPE_CHECKING:
    from rmq.offsets import ConsumerOffsetManager
    from rmq.store import MessageStore

log = logging.getLogger(__name__)

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
#: Seconds before messages whose send-back failed are consumed again (the client's 5000 ms).
SEND_BACK_RETRY = 5.0
#: `DefaultMQPushConsumer.maxReconsumeTimes` −1: 16 for concurrent consumers (orderly ones: Integer.MAX_VALUE).
DEFAULT_MAX_RECONSUME_TIMES = 16
#: Properties the store writes itself; a message sent back gets them anew (UNIQ_KEY is carried over).
_STORE_PROPERTIES = {"TAGS", "KEYS", "WAIT", "CLUSTER", "INNER_NUM", "INNER_BASE", "DELAY", "__CRC32#"}


class ConsumeStatus(enum.Enum):
    """What a listener returns (`ConsumeConcurrentlyStatus`)."""

    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class ConsumeFromWhere(enum.Enum):
    """Where a group starts in a queue it has no committed offset for."""

    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


class MessageModel(enum.Enum):
    """How a group's consumers share messages (`MessageModel`)."""

    #: The group's members divide the queues; each message is consumed by one member; offsets are the group's.
    CLUSTERING = "CLUSTERING"
    #: Every member consumes every message and keeps its own offsets.
    BROADCASTING = "BROADCASTING"


@dataclass
class ConsumeContext:
    """Passed to the listener with each batch (`ConsumeConcurrentlyContext`).

    `delay_level_when_next_consume` decides where a batch the listener does not consume goes: 0 (the default)
    lets the broker decide (delay level 3 + reconsumeTimes), > 0 is that delay level (clamped to the highest
    level of `message_delay_level`), -1 sends the messages straight to the dead-letter queue.
    """

    queue: MessageQueue
    consumer_id: str
    delay_level_when_next_consume: int = 0


MessageListener = Callable[[list[MessageExt], ConsumeContext], ConsumeStatus]


def retry_topic(group: str) -> str:
    """`%RETRY%<group>`."""
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    """`%DLQ%<group>`."""
    return DLQ_GROUP_TOPIC_PREFIX + group


class ProcessQueue:
    """The messages of one queue pulled and not yet consumed (`ProcessQueue`), and the offset to commit."""

    def __init__(self, mq: MessageQueue, next_offset: int, *, orderly: bool = False) -> None:
        self.mq = mq
        self.next_offset = next_offset
        self.dropped = False
        self.lock = threading.Lock()
        self._in_flight: dict[int, None] = {}  # queue offsets, ascending (insertion order)
        #: An orderly consumer's messages and consume lock (`rmq.orderly`); None for concurrent consumers.
        self.orderly = OrderlyProcessQueue() if orderly else None
        self._consuming = 0  # listener calls of this queue running now
        self._idle = threading.Condition(self.lock)

    def begin_consume(self) -> bool:
        """Marks a listener call started; False (nothing marked) when the queue was dropped."""
        with self.lock:
            if self.dropped:
                return False
            self._consuming += 1
            return True

    def end_consume(self) -> None:
        """Marks a listener call finished (the caller holds `lock`)."""
        self._consuming -= 1
        if self._consuming == 0:
            self._idle.notify_all()

    def wait_idle(self) -> None:
        """Waits until no listener call of this queue is running (the caller holds `lock`, set `dropped`)."""
        while self._consuming:
            if not self._idle.wait(10.0):
                log.warning("%s: still waiting for a listener call to finish before releasing the queue", self.mq)

    def add(self, queue_offsets: Sequence[int], next_offset: int) -> None:
        with self.lock:
            for q in queue_offsets:
                self._in_flight[q] = None
            self.next_offset = next_offset

    def in_flight(self) -> int:
        return self.orderly.count() if self.orderly is not None else len(self._in_flight)

    def remove(self, queue_offsets: Sequence[int]) -> int:
        """Marks offsets consumed; returns the offset to commit (caller holds `lock`)."""
        for q in queue_offsets:
            self._in_flight.pop(q, None)
        return self.commit_offset()

    def commit_offset(self) -> int:
        """The smallest in-flight offset, or the next offset to pull when nothing is in flight."""
        if self.orderly is not None:
            first = self.orderly.first_unconsumed()
            return self.next_offset if first is None else first
        return next(iter(self._in_flight), self.next_offset)


@dataclass
class ConsumerStats:
    """Counters of one push consumer."""

    consumed: int = 0
    sent_to_retry: int = 0
    sent_to_dlq: int = 0
    listener_errors: int = 0
    #: Messages whose send-back to the retry topic or DLQ failed; each is consumed again in this process later.
    send_back_failures: int = 0
    #: Orderly: batches suspended (SUSPEND_CURRENT_QUEUE_A_MOMENT, an exception, or None) to be retried in place.
    suspended: int = 0
    #: Broadcasting: messages whose consumption failed, dropped as RocketMQ's client drops them.
    dropped_failures: int = 0
    pulls: int = 0
    #: Rounds of the pull loop that failed outside a queue's pull (logged; the loop waits and goes on).
    pull_loop_errors: int = 0
    #: Offset commits that failed (a full disk under a journaled commit; logged): the offset stays where it was,
    #: consumption goes on, and the next commit of the queue (a later batch) moves it past these messages.
    commit_failures: int = 0
    rebalances: int = 0
    #: Queues dropped without committing because another member took them while this member's lease had run out
    #: (its process was paused or its heartbeat stalled; `rmq.group`).
    queues_lost: int = 0
    queues_history: list[list[MessageQueue]] = field(default_factory=list)


class _Solo:
    """A broadcasting consumer's group: itself alone. It takes every queue, keeps no registry and rebalances
    with nobody (the same calls as `rmq.group.ConsumerGroup`)."""

    def __init__(self) -> None:
        self.members: list[PushConsumer] = []
        self.lock = threading.RLock()

    def join(self, consumer: PushConsumer) -> None:
        with self.lock:
            self.members = [consumer]
            self.rebalance()

    def leave(self, consumer: PushConsumer) -> None:
        with self.lock:
            self.members = []
            consumer._drop_except({})
            consumer._apply_allocation({})

    def rebalance(self) -> None:
        with self.lock:
            for m in self.members:
                plan = m._allocation([m.consumer_id])
                m._drop_except(plan)
                m._apply_allocation(plan)

    def holds_lease(self) -> bool:
        return True  # nobody else takes its queues


def _check_push_args(a: dict[str, object]) -> None:
    """Checks `PushConsumer`'s arguments: typed errors, nothing started."""
    from rmq.offsets import ConsumerOffsetManager

    def instance(name: str, cls: type | tuple[type, ...], what: str) -> None:
        if not isinstance(a[name], cls):
            raise ArgumentTypeError(f"{name} must be {what}, got {type(a[name]).__name__}")

    instance("store", _native.MessageStore, "an rmq.MessageStore")
    _args.group(a["group"])
    _args.topic(a["topic"])
    if not callable(a["listener"]):
        raise ArgumentTypeError(f"listener must be callable, got {type(a['listener']).__name__}")
    _args.boolean(a["orderly"], "orderly")
    instance("message_model", MessageModel, "a MessageModel")
    if a["message_model"] is MessageModel.BROADCASTING:
        if a["offsets"] is not None:
            instance("offsets", LocalFileOffsetStore, "a LocalFileOffsetStore or None when broadcasting")
        lod = a["local_offset_store_dir"]
        if lod is not None and not isinstance(lod, str | os.PathLike):
            raise ArgumentTypeError(f"local_offset_store_dir must be a str or os.PathLike, got {type(lod).__name__}")
    else:
        if a["offsets"] is None:
            raise ArgumentTypeError(
                "a clustering consumer needs offsets=ConsumerOffsetManager(store.consumer_offset_path), where its "
                "group's committed offsets live (offsets=None is for broadcasting consumers, whose offsets are local)"
            )
        instance("offsets", ConsumerOffsetManager, "a ConsumerOffsetManager")
        if a["local_offset_store_dir"] is not None:
            raise _native.InvalidArgumentError("local_offset_store_dir is for broadcasting consumers")
    _args.integer(a["suspend_current_queue_time_millis"], "suspend_current_queue_time_millis", 0, _args.JAVA_INT_MAX)
    _args.text(a["subscription"], "subscription")
    if a["consumer_id"] is not None:
        _args.name(a["consumer_id"], "consumer_id")
    if a["strategy"] is not None:
        instance("strategy", AllocateStrategy, "an AllocateStrategy or None")
    for name in ("consume_thread_nums", "consume_message_batch_max_size", "pull_batch_size"):
        _args.positive(a[name], name, 1 << 16)
    _args.positive(a["pull_threshold_for_queue"], "pull_threshold_for_queue")
    if a["max_reconsume_times"] != -1:
        _args.integer(a["max_reconsume_times"], "max_reconsume_times", 0, _args.JAVA_INT_MAX)
    instance("consume_from_where", ConsumeFromWhere, "a ConsumeFromWhere")
    if a["consume_timestamp"] is not None:
        _args.java_long(a["consume_timestamp"], "consume_timestamp")
    elif a["consume_from_where"] is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
        raise _native.InvalidArgumentError("CONSUME_FROM_TIMESTAMP needs consume_timestamp")
    _args.boolean(a["persist_offsets_each_batch"], "persist_offsets_each_batch")
    _args.positive(a["topic_queue_nums"], "topic_queue_nums", MAX_TOPIC_QUEUE_NUMS)
    if _args.seconds(a["poll_timeout"], "poll_timeout") == 0:
        raise _native.InvalidArgumentError("poll_timeout must be positive")


_ids = itertools.count()
FLOW_CONTROL_DELAY = 0.05
"""Seconds before a throttled queue is pulled again (`PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL` = 50 ms)."""
PULL_EXCEPTION_DELAY = 3.0
"""Seconds the pull loop waits after a round of it failed outside a queue's pull (a rebalance, a read-only
store's refresh), as RocketMQ's client waits `PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION` (3 s); the loop goes on."""


class PushConsumer:
    """A member of a consumer group, consuming `topic` (and the group's retry topic) with `listener`.

    `start()` joins the group (the group rebalances), `shutdown()` finishes in-flight batches, commits and
    persists offsets and leaves (the others take over its queues). Offsets live in `offsets`, shared by the
    group's members (`ConsumerOffsetManager`, `consumerOffset.json`).

    `orderly=True`: `listener` is a `MessageListenerOrderly` (`rmq.orderly`); `suspend_current_queue_time_millis`
    is the pause before a suspended queue is retried. `max_reconsume_times=-1` (the default) is Java's: 16 for a
    concurrent consumer, Integer.MAX_VALUE for an orderly one.

    `message_model=MessageModel.BROADCASTING`: `offsets` is this consumer's `LocalFileOffsetStore`, by default
    `<local_offset_store_dir>/<consumer_id>/<group>/offsets.json` (give a stable `consumer_id` to resume after a
    restart; the default id holds the process id, as Java's client id does).
    """

    def __init__(
        self,
        store: MessageStore,
        group: str,
        topic: str,
        listener: MessageListener | MessageListenerOrderly,
        *,
        offsets: ConsumerOffsetManager | LocalFileOffsetStore | None = None,
        subscription: str = "*",
        consumer_id: str | None = None,
        strategy: AllocateStrategy | None = None,
        consume_thread_nums: int = 4,
        consume_message_batch_max_size: int = 1,
        pull_batch_size: int = 32,
        pull_threshold_for_queue: int = 1000,
        max_reconsume_times: int = -1,
        consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp: int | None = None,
        persist_offsets_each_batch: bool = True,
        topic_queue_nums: int = 4,
        poll_timeout: float = 5.0,
        orderly: bool = False,
        suspend_current_queue_time_millis: int = DEFAULT_SUSPEND_MILLIS,
        message_model: MessageModel = MessageModel.CLUSTERING,
        local_offset_store_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        _check_push_args(locals())
        self.store = store
        self.group = group
        self.topic = topic
        self.listener = listener
        self.message_model = message_model
        self.consumer_id = consumer_id or f"127.0.0.1@{os.getpid()}#{next(_ids)}"
        if offsets is None:
            offsets = LocalFileOffsetStore(self.consumer_id, group, local_offset_store_dir=local_offset_store_dir)
        self.offsets: ConsumerOffsetManager | LocalFileOffsetStore = offsets
        # A broadcasting consumer has no retry topic (Java subscribes it only when clustering).
        self.subscriptions = (
            {topic: subscription} if self.broadcasting else {topic: subscription, retry_topic(group): "*"}
        )
        self.strategy: AllocateStrategy = strategy or AllocateMessageQueueAveragely()
        self.consume_message_batch_max_size = consume_message_batch_max_size
        self.pull_batch_size = pull_batch_size
        self.pull_threshold_for_queue = pull_threshold_for_queue
        if max_reconsume_times == -1:
            max_reconsume_times = ORDERLY_MAX_RECONSUME_TIMES if orderly else DEFAULT_MAX_RECONSUME_TIMES
        self.max_reconsume_times = max_reconsume_times
        self.consume_from_where = consume_from_where
        self.consume_timestamp = consume_timestamp
        self.persist_offsets_each_batch = persist_offsets_each_batch
        self.topic_queue_nums = topic_queue_nums
        self.poll_timeout = poll_timeout
        self.stats = ConsumerStats()
        self._consume_thread_nums = consume_thread_nums
        self._pqs: dict[MessageQueue, ProcessQueue] = {}
        self._pqs_lock = threading.Lock()
        self._releasing: dict[MessageQueue, ProcessQueue] = {}  # orderly queues dropped, not yet released
        self._running = threading.Event()
        self._shutdown_lock = threading.Lock()  # one shutdown at a time
        self._shutdown_thread_lock = threading.Lock()
        self._shutdown_thread: threading.Thread | None = None  # the one a listener asked for
        self._started = threading.Event()  # start() has returned (or raised)
        self._stopping = threading.Event()
        self._waiter = ArrivalWaiter.of(store)
        # A broadcasting consumer is a group of its own: it takes every queue and rebalances with nobody.
        self._group: ConsumerGroup | _Solo = _Solo() if self.broadcasting else ConsumerGroup.of(store, group)
        self._orderly: OrderlyService | None = None
        if orderly:
            self._orderly = OrderlyService(
                self,
                listener,  # type: ignore[arg-type]
                suspend_current_queue_time_millis,
                dlq_topic=dlq_topic(group),
                store_properties=frozenset(_STORE_PROPERTIES),
            )
        self._pool: ThreadPoolExecutor | None = None
        self._thread: threading.Thread | None = None
        self._persist_lock = threading.Lock()
        self._route: dict[str, tuple[int, ...]] = {}
        self._last_route_check = 0.0

    # -- lifecycle ---------------------------------------------------------------------------------------

    def start(self) -> PushConsumer:
        """Starts the threads and joins the group. A consumer starts once: after `shutdown()`, make a new one. If
        joining fails (the store closed, no space for the group's registry), the threads are stopped again and
        the error raised."""
        if self._thread is not None or self._stopping.is_set():
            raise RuntimeError("this consumer was started before; a consumer starts once (make a new one)")
        if self.store.closed:
            raise _native.StoreClosedError("the store is closed")
        self._running.set()
        self._pool = ThreadPoolExecutor(self._consume_thread_nums, thread_name_prefix=f"rmq-consume-{self.group}")
        if self._orderly is not None:
            self._orderly.start()
        self._thread = threading.Thread(target=self._pull_loop, name=f"rmq-pull-{self.consumer_id}", daemon=True)
        self._thread.start()
        self._fence()
        try:
            self._group.join(self)
        except BaseException:
            self._stop_threads()
            if self._orderly is not None:
                self._orderly.close()
            self._unfence()
            raise
        finally:
            self._started.set()  # a shutdown its listener asked for meanwhile goes on once joined
        return self

    def _fence(self) -> None:
        """The group's offsets are written by this process only while its lease holds (`rmq.group`)."""
        if isinstance(self._group, ConsumerGroup) and not isinstance(self.offsets, LocalFileOffsetStore):
            self.offsets.fence(self.group, self._group.holds_lease)

    def _unfence(self) -> None:
        if isinstance(self._group, ConsumerGroup) and not isinstance(self.offsets, LocalFileOffsetStore):
            self.offsets.unfence(self.group, self._group.holds_lease)

    def _stop_threads(self) -> None:
        """Stops pulling, and waits for the batches in the listener to finish."""
        self._running.clear()
        self._stopping.set()
        self._waiter.notify_all()
        if self._thread is not None:
            self._thread.join()
        if self._orderly is not None:
            self._orderly.stop()  # each queue's loop ends after its current batch
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def shutdown(self) -> None:
        """Leaves the group after finishing in-flight batches; commits and persists offsets. Idempotent. Every
        step is taken even when one fails (a full disk: the group's registry or the offsets cannot be written),
        and the first failure is raised at the end; the queues of a member that could not record its leaving
        are taken over by the others when its lease runs out."""
        if getattr(IN_LISTENER, "consumer", None) is self:
            if not self._running.is_set():
                return
            # Called by this consumer's own listener, whose batch the shutdown waits for (and whose thread it
            # would join): it runs on a thread of its own and finishes once the listener has returned. Joining
            # here raised "cannot join current thread" half-way, and the member kept its queues.
            with self._shutdown_thread_lock:
                if self._shutdown_thread is None:
                    thread = threading.Thread(target=self._shutdown_in_background, name=f"{self.consumer_id}-shutdown")
                    thread.start()
                    self._shutdown_thread = thread
            return
        # Returns once the member is out: after the shutdown its listener started, or another thread's.
        with self._shutdown_thread_lock:
            background = self._shutdown_thread
        if background is not None:
            background.join()
        with self._shutdown_lock:
            self._shutdown_locked()

    def _shutdown_in_background(self) -> None:
        self._started.wait()
        try:
            with self._shutdown_lock:
                self._shutdown_locked()
        except Exception:
            log.exception("%s: the shutdown its listener asked for failed", self.consumer_id)

    def _shutdown_locked(self) -> None:
        if not self._running.is_set():
            return
        self._stop_threads()
        errors: list[Exception] = []
        try:
            self._group.leave(self)  # orderly: every queue released, its offset committed
        except Exception as e:
            errors.append(e)
        if self._orderly is not None:
            self._orderly.close()
        try:
            self.offsets.persist()
        except Exception as e:
            errors.append(e)
        finally:
            self._unfence()
        if errors:
            raise errors[0]

    def __enter__(self) -> PushConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def group_owners(self) -> dict[MessageQueue, list[str]]:
        """Every queue owned in this member's group and the ids of its owners, read between rebalances (a
        consistent view: each subscribed queue has exactly one owner)."""
        with self._group.lock:
            out: dict[MessageQueue, list[str]] = {}
            for m in self._group.members:
                for mq in m.assigned_queues():
                    out.setdefault(mq, []).append(m.consumer_id)
            return out

    @property
    def broadcasting(self) -> bool:
        return self.message_model is MessageModel.BROADCASTING

    @property
    def orderly(self) -> bool:
        return self._orderly is not None

    def assigned_queues(self) -> list[MessageQueue]:
        """The queues this member owns now, sorted."""
        with self._pqs_lock:
            return sorted(mq for mq, pq in self._pqs.items() if not pq.dropped)

    # -- rebalance (called by the group under its lock) ----------------------------------------------------

    def _allocation(self, cids: list[str]) -> dict[MessageQueue, str]:
        self._route = {t: tuple(self.store.queue_ids(t)) for t in self.subscriptions}
        plan: dict[MessageQueue, str] = {}
        for topic, sub in self.subscriptions.items():
            nums = 1 if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) else self.topic_queue_nums
            mqs = topic_queues(self.store, topic, nums)
            for mq in allocate_sorted(self.strategy, self.group, self.consumer_id, mqs, cids):
                plan[mq] = sub
        return plan

    def _drop_except(self, plan: dict[MessageQueue, str]) -> None:
        settled = self._settle_releasing()
        with self._pqs_lock:
            gone = [mq for mq in self._pqs if mq not in plan]
        for mq in gone:
            with self._pqs_lock:
                pq = self._pqs.pop(mq, None)
            if pq is None:
                continue
            if self._orderly is not None:
                self._orderly.drop(pq)  # released once its batch in the listener (if any) is done and committed
                with self._pqs_lock:
                    self._releasing[mq] = pq
                continue
            with pq.lock:
                pq.dropped = True
                pq.wait_idle()  # released only once no listener call of it runs
                self.offsets.commit_offset(self.group, mq.topic, mq.queue_id, pq.commit_offset())
        if gone or settled:
            self._persist()

    def _discard_except(self, held: set[MessageQueue]) -> None:
        """Drops, without committing, the queues this member holds that the group's registry no longer gives it:
        another member took them while this member's lease had run out, and their offsets are that member's now.
        A batch of them still in the listener finishes, and nothing is committed for it."""
        with self._pqs_lock:
            lost = [self._pqs.pop(mq) for mq in [mq for mq in self._pqs if mq not in held]]
            lost += [self._releasing.pop(mq) for mq in [mq for mq in self._releasing if mq not in held]]
            if lost:
                self.stats.queues_lost += len(lost)
                self.stats.queues_history.append(sorted(self._pqs))
        if self._orderly is not None:
            self._orderly.keep_pending(held)
        for pq in lost:
            if self._orderly is not None:
                self._orderly.discard(pq)
            else:
                with pq.lock:
                    pq.dropped = True
            log.warning(
                "%s: %s was taken over by another member while this member's lease had run out; dropped without "
                "committing (offset %d)",
                self.consumer_id,
                pq.mq,
                pq.commit_offset(),
            )
        if lost and not isinstance(self.offsets, LocalFileOffsetStore):
            self.offsets.disown(self.group, [(pq.mq.topic, pq.mq.queue_id) for pq in lost])

    def refresh_offsets(self) -> None:
        """Takes in the offsets other processes persisted (the group's previous owners of queues just acquired)."""
        if not isinstance(self.offsets, LocalFileOffsetStore):  # a broadcasting consumer's offsets are its own
            self.offsets.refresh()

    def releasing_queues(self) -> list[MessageQueue]:
        """Orderly: the queues dropped whose batch in the listener has not returned yet (or whose release is not
        persisted yet); the group keeps them this member's until a later rebalance."""
        with self._pqs_lock:
            return sorted(self._releasing)

    def _settle_releasing(self) -> bool:
        """Forgets the dropped orderly queues released since; True when there were any (their offsets, committed
        on release, are to be persisted before the group hands them over)."""
        with self._pqs_lock:
            done = [mq for mq, pq in self._releasing.items() if pq.orderly is None or pq.orderly.released]
            for mq in done:
                del self._releasing[mq]
        return bool(done)

    def _apply_allocation(self, plan: dict[MessageQueue, str]) -> None:
        self._drop_except(plan)
        with self._pqs_lock:
            new = [mq for mq in plan if mq not in self._pqs]
            if self._orderly is not None:
                new = self._orderly.admit(new)  # only the queues it could lock; the others wait (adopt_pending)
            for mq in new:
                self._pqs[mq] = ProcessQueue(mq, self._start_offset(mq), orderly=self._orderly is not None)
            self.stats.rebalances += 1
            self.stats.queues_history.append(sorted(self._pqs))
        self._waiter.notify_all()

    def _adopt_pending(self) -> None:
        """Orderly: takes the allocated queues whose previous owner has released them since the rebalance."""
        if self._orderly is None or not self._orderly.pending():
            return
        with self._group.lock:  # between rebalances: the pending set is the current allocation's
            got = self._orderly.adopt()
            with self._pqs_lock:
                for mq in got:
                    self._pqs[mq] = ProcessQueue(mq, self._start_offset(mq), orderly=True)
                if got:
                    self.stats.queues_history.append(sorted(self._pqs))

    def _start_offset(self, mq: MessageQueue) -> int:
        committed = self.offsets.query_offset(self.group, mq.topic, mq.queue_id)
        if committed >= 0:
            return committed
        if mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return 0
        if self.consume_from_where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
            return max(self.store.get_min_offset_in_queue(mq.topic, mq.queue_id), 0)
        if self.consume_from_where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
            assert self.consume_timestamp is not None
            ts = self.consume_timestamp
            return self.store.get_offset_in_queue_by_time(mq.topic, mq.queue_id, ts, BoundaryType.LOWER)
        return self.store.get_max_offset_in_queue(mq.topic, mq.queue_id)

    # -- pulling -----------------------------------------------------------------------------------------

    def _queues_changed(self) -> bool:
        """Whether a subscribed topic gained a queue since the last rebalance (checked about once a second)."""
        now = time.monotonic()
        if now - self._last_route_check < 1.0:
            return False
        self._last_route_check = now
        route = {t: tuple(self.store.queue_ids(t)) for t in self.subscriptions}
        changed = route != self._route
        self._route = route
        return changed

    def _pull_loop(self) -> None:
        # Nothing may end this thread but a shutdown or a closed store: a consumer whose pull thread died would
        # hold its queues and consume nothing, with no sign of it.
        while self._running.is_set():
            try:
                if not self._pull_round():
                    return
            except Exception:
                if self.store.closed or not self._running.is_set():
                    return
                self.stats.pull_loop_errors += 1
                log.exception(
                    "%s: a round of the pull loop failed; going on in %.1f s", self.group, PULL_EXCEPTION_DELAY
                )
                self._stopping.wait(PULL_EXCEPTION_DELAY)

    def _pull_round(self) -> bool:
        """One round over the queues (rebalancing first if the topic's queues changed), then, if nothing was
        pulled, the wait for an arrival. False when the consumer stops meanwhile or the store closed."""
        if self._queues_changed():
            self._group.rebalance()
        if not self._group.holds_lease():
            # The lease ran out (the process was paused, the heartbeat stalled): the queues may be another
            # member's by now. Nothing is pulled until a heartbeat renews it and drops what was taken over.
            self._stopping.wait(LEASE_RECHECK)
            return True
        seen = self._waiter.arrivals
        self._adopt_pending()
        progressed = throttled = False
        with self._pqs_lock:
            queues = list(self._pqs.values())
        for pq in queues:
            if not self._running.is_set():
                return False
            if not self._group.holds_lease():
                return True
            if pq.dropped:
                continue
            if pq.in_flight() >= self.pull_threshold_for_queue:
                throttled = True
                continue
            try:
                progressed |= self._pull_once(pq)
            except Exception:
                if self.store.closed:
                    return False
                log.exception("pull of %s failed", pq.mq)
        if not progressed:
            # Flow control: a queue with too much in flight is tried again after 50 ms, as RocketMQ's client
            # does (PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL); otherwise wait for an arrival (long polling).
            timeout = FLOW_CONTROL_DELAY if throttled else self.poll_timeout
            if self.store.read_only:
                # Another process writes: take in its messages, and poll (no reput signals arrivals here).
                self.store.refresh()
                timeout = min(timeout, READ_ONLY_POLL)
            self._waiter.wait_arrival_since(seen, timeout)
        return True

    def _pull_once(self, pq: ProcessQueue) -> bool:
        mq = pq.mq
        offset = pq.next_offset
        sub = self.subscriptions.get(mq.topic, "*")
        r = self.store.get_message(self.group, mq.topic, mq.queue_id, offset, self.pull_batch_size, sub)
        self.stats.pulls += 1
        status = pull_status(r.status, offset)
        if status is PullStatus.FOUND:
            msgs = r.messages
            qoffs = r.queue_offsets
            if any(m.queue_offset != q for m, q in zip(msgs, qoffs, strict=True)):
                # Each entry names a record of another queue offset: the queue's entries are not where the
                # records say they belong (a gap after damage, or a wrong view of the queue).
                log.warning(
                    "%s: the pull at offset %d found queue offsets %s holding records of queue offsets %s",
                    mq,
                    offset,
                    qoffs[:8],
                    [m.queue_offset for m in msgs[:8]],
                )
            if self._orderly is not None:
                self._orderly.submit(pq, msgs, r.next_begin_offset)
                return True
            pq.add(qoffs, r.next_begin_offset)
            assert self._pool is not None
            step = self.consume_message_batch_max_size
            for i in range(0, len(msgs), step):
                self._pool.submit(self._consume, pq, msgs[i : i + step], qoffs[i : i + step])
            return True
        if status is PullStatus.NO_NEW_MSG:
            if r.next_begin_offset != offset and r.next_begin_offset > offset:
                self._log_move(mq, offset, r)
                pq.add((), r.next_begin_offset)  # OFFSET_FOUND_NULL: skip to the next file
                return True
            return False
        # NO_MATCHED_MSG (filtered entries are consumed) or OFFSET_ILLEGAL (corrected): move and commit.
        if r.damaged or r.status != GetMessageStatus.NO_MATCHED_MESSAGE:  # not a tag filter's plain skip
            self._log_move(mq, offset, r)
        with pq.lock:
            if pq.dropped:
                return False
            pq.next_offset = r.next_begin_offset
            commit = pq.commit_offset()
            self.offsets.commit_offset(self.group, mq.topic, mq.queue_id, commit)
        return status is PullStatus.NO_MATCHED_MSG

    def _log_move(self, mq: MessageQueue, offset: int, r: GetMessageResult) -> None:
        """A pull that moves the queue's offset without delivering what lies between (a correction, a skip
        over removed or damaged entries, a roll to the next file) is worth a line: it is how messages go
        unconsumed."""
        log.warning(
            "%s: the pull at offset %d answered %s (queue min %d, max %d, %d damaged); the next offset is %d",
            mq,
            offset,
            r.status,
            r.min_offset,
            r.max_offset,
            len(r.damaged),
            r.next_begin_offset,
        )

    # -- consuming ---------------------------------------------------------------------------------------

    def _consume(self, pq: ProcessQueue, msgs: list[MessageExt], qoffs: list[int]) -> None:
        # Not while the lease has run out: the queue may be another member's by now. The batch waits for the next
        # heartbeat, which keeps the queue (the batch is consumed) or drops it (the new owner delivers it).
        while not self._group.holds_lease():
            if pq.dropped or self._stopping.is_set():
                return  # uncommitted: delivered again
            self._stopping.wait(LEASE_RECHECK)
        if not pq.begin_consume():
            return
        back_failed: list[tuple[MessageExt, int]] = []
        try:
            ctx = ConsumeContext(pq.mq, self.consumer_id)
            try:
                IN_LISTENER.consumer = self
                status = cast(MessageListener, self.listener)(msgs, ctx)
            except Exception:
                log.exception("listener failed; the batch will be reconsumed")
                self.stats.listener_errors += 1
                status = ConsumeStatus.RECONSUME_LATER
            finally:
                IN_LISTENER.consumer = None
            if status is not ConsumeStatus.CONSUME_SUCCESS and self.broadcasting:
                # ConsumeMessageConcurrentlyService: BROADCASTING drops a failed message (logs it), never sends it
                # back.
                for m in msgs:
                    log.warning("BROADCASTING, the message consume failed, drop it: %s of %s", m.msg_id, m.topic)
                self.stats.dropped_failures += len(msgs)
            elif status is not ConsumeStatus.CONSUME_SUCCESS:
                for m, q in zip(msgs, qoffs, strict=True):
                    try:
                        self._send_back(m, ctx)
                    except Exception:
                        # As the client does when sendMessageBack fails: the message stays in the queue (its offset
                        # is not committed past) and is consumed again here later, reconsume times + 1.
                        log.exception(
                            "sending %s back failed; it is consumed again in %.0f s", m.msg_id, SEND_BACK_RETRY
                        )
                        self.stats.send_back_failures += 1
                        back_failed.append((m.with_reconsume_times(m.reconsume_times + 1), q))
            else:
                self.stats.consumed += len(msgs)
        finally:
            done = qoffs
            if back_failed:
                keep = {q for _, q in back_failed}
                done = [q for q in qoffs if q not in keep]
                self._consume_later(pq, back_failed)
            with pq.lock:
                pq.end_consume()
                commit = pq.remove(done)
                if not pq.dropped:
                    mq = pq.mq
                    journal = self.persist_offsets_each_batch
                    try:
                        self.offsets.commit_offset(self.group, mq.topic, mq.queue_id, commit, journal=journal)
                    except Exception:
                        # Not in the pool's future, where nobody would see it.
                        self.stats.commit_failures += 1
                        log.exception(
                            "%s: committing offset %d of %s failed; consuming goes on", self.group, commit, mq
                        )

    def _consume_later(self, pq: ProcessQueue, items: list[tuple[MessageExt, int]]) -> None:
        """`submitConsumeRequestLater`: consumes `items` again after `SEND_BACK_RETRY` seconds unless the consumer
        stopped (then they stay uncommitted and are delivered again after a restart)."""

        def submit() -> None:
            if not self._running.is_set() or pq.dropped or self._pool is None:
                return
            try:
                self._pool.submit(self._consume, pq, [m for m, _ in items], [q for _, q in items])
            except RuntimeError:  # the pool shut down meanwhile
                pass

        t = threading.Timer(SEND_BACK_RETRY, submit)
        t.daemon = True
        t.start()

    def _send_back(self, m: MessageExt, ctx: ConsumeContext) -> None:
        """`consumerSendMsgBack` (the store builds the message as the broker does): to the retry topic with
        reconsumeTimes + 1 and the context's delay level, or to the DLQ."""
        level = _args.integer(
            ctx.delay_level_when_next_consume, "delay_level_when_next_consume", _args.JAVA_INT_MIN, _args.JAVA_INT_MAX
        )
        _, _, to_dlq, _ = self.store.send_message_back(
            m.commitlog_offset, self.group, delay_level=level, max_reconsume_times=self.max_reconsume_times
        )
        if to_dlq:
            self.stats.sent_to_dlq += 1
        else:
            self.stats.sent_to_retry += 1

    def _persist(self) -> None:
        # Per-batch persists skip fsync: they survive a process crash, and after a power loss the periodic or
        # shutdown persist (fsynced) bounds the redelivery.
        with self._persist_lock:
            self.offsets.persist(sync=False)
