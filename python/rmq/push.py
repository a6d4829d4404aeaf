"""Push consumers: consumer groups sharing a topic's queues, with retries, a dead-letter queue and
at-least-once delivery (RocketMQ's `DefaultMQPushConsumer` and the broker's consumer manager, in one process).

- Members of a group (`PushConsumer`s with the same `group` on the same store) divide the topic's queues
  with a rebalance strategy (`rmq.rebalance`, AVG by default) and re-divide them whenever one starts or
  shuts down. Each member also takes its share of the group's retry topic `%RETRY%<group>`.
- Each member runs one pull thread (long polling: it sleeps until the reput service reports an arrival) and a
  pool of `consume_thread_nums` consume threads that call the listener with up to
  `consume_message_batch_max_size` messages.
- A listener returning `RECONSUME_LATER` (or raising) sends each message of the batch back: to
  `%RETRY%<group>` with reconsumeTimes + 1 and the properties RETRY_TOPIC / ORIGIN_MESSAGE_ID, or to
  `%DLQ%<group>` once it was reconsumed `max_reconsume_times` times. Retries are redelivered at once: rmq has no
  delay-level scheduler yet.
- At-least-once: the committed offset of a queue only passes messages whose consumption finished (the smallest
  in-flight offset, as `ProcessQueue` computes it). With `persist_offsets_each_batch` (the default) each batch's
  commit is appended to the offsets journal (`consumerOffset.json.journal`, replayed by `load()`), so a killed
  process redelivers at most its in-flight messages; the JSON snapshot is rewritten on rebalance and shutdown.
"""

from __future__ import annotations

import enum
import itertools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rmq import _args, _native
from rmq._native import ArgumentTypeError, BoundaryType, MessageExt
from rmq.consumer import MAX_TOPIC_QUEUE_NUMS, ArrivalWaiter, PullStatus, pull_status, topic_queues
from rmq.rebalance import AllocateMessageQueueAveragely, AllocateStrategy, MessageQueue, allocate_sorted

if TYPE_CHECKING:
    from rmq.offsets import ConsumerOffsetManager
    from rmq.store import MessageStore

log = logging.getLogger(__name__)

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
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


@dataclass
class ConsumeContext:
    """Passed to the listener with each batch."""

    queue: MessageQueue
    consumer_id: str


MessageListener = Callable[[list[MessageExt], ConsumeContext], ConsumeStatus]


def retry_topic(group: str) -> str:
    """`%RETRY%<group>`."""
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    """`%DLQ%<group>`."""
    return DLQ_GROUP_TOPIC_PREFIX + group


class ProcessQueue:
    """The messages of one queue pulled and not yet consumed (`ProcessQueue`), and the offset to commit."""

    def __init__(self, mq: MessageQueue, next_offset: int) -> None:
        self.mq = mq
        self.next_offset = next_offset
        self.dropped = False
        self.lock = threading.Lock()
        self._in_flight: dict[int, None] = {}  # queue offsets, ascending (insertion order)

    def add(self, queue_offsets: Sequence[int], next_offset: int) -> None:
        with self.lock:
            for q in queue_offsets:
                self._in_flight[q] = None
            self.next_offset = next_offset

    def in_flight(self) -> int:
        return len(self._in_flight)

    def remove(self, queue_offsets: Sequence[int]) -> int:
        """Marks offsets consumed; returns the offset to commit (caller holds `lock`)."""
        for q in queue_offsets:
            self._in_flight.pop(q, None)
        return self.commit_offset()

    def commit_offset(self) -> int:
        """The smallest in-flight offset, or the next offset to pull when nothing is in flight."""
        return next(iter(self._in_flight), self.next_offset)


@dataclass
class ConsumerStats:
    """Counters of one push consumer."""

    consumed: int = 0
    sent_to_retry: int = 0
    sent_to_dlq: int = 0
    listener_errors: int = 0
    pulls: int = 0
    rebalances: int = 0
    queues_history: list[list[MessageQueue]] = field(default_factory=list)


class _Group:
    """The broker's view of one consumer group on one store: its live members, rebalanced together."""

    _groups: weakref.WeakKeyDictionary[MessageStore, dict[str, _Group]] = weakref.WeakKeyDictionary()
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.members: list[PushConsumer] = []
        self.lock = threading.RLock()

    @classmethod
    def of(cls, store: MessageStore, group: str) -> _Group:
        with cls._lock:
            groups = cls._groups.setdefault(store, {})
            g = groups.get(group)
            if g is None:
                g = groups[group] = _Group()
            return g

    def join(self, consumer: PushConsumer) -> None:
        with self.lock:
            if any(m.consumer_id == consumer.consumer_id for m in self.members):
                raise ValueError(f"consumer id {consumer.consumer_id!r} already in group {consumer.group!r}")
            self.members.append(consumer)
            self.rebalance()

    def leave(self, consumer: PushConsumer) -> None:
        with self.lock:
            self.members = [m for m in self.members if m is not consumer]
            consumer._apply_allocation({})
            self.rebalance()

    def rebalance(self) -> None:
        """Every member drops the queues it loses before any member takes a queue, so no queue ever has two
        owners."""
        with self.lock:
            cids = [m.consumer_id for m in self.members]
            plans = [(m, m._allocation(cids)) for m in self.members]
            for m, plan in plans:
                m._drop_except(plan)
            for m, plan in plans:
                m._apply_allocation(plan)


def _check_push_args(a: dict[str, object]) -> None:
    """Checks `PushConsumer`'s arguments: typed errors, nothing started."""
    from rmq.offsets import ConsumerOffsetManager

    def instance(name: str, cls: type | tuple[type, ...], what: str) -> None:
        if not isinstance(a[name], cls):
            raise ArgumentTypeError(f"{name} must be {what}, got {type(a[name]).__name__}")

    instance("store", _native.MessageStore, "an rmq.MessageStore")
    _args.name(a["group"], "group")
    _args.name(a["topic"], "topic")
    if not callable(a["listener"]):
        raise ArgumentTypeError(f"listener must be callable, got {type(a['listener']).__name__}")
    instance("offsets", ConsumerOffsetManager, "a ConsumerOffsetManager")
    _args.text(a["subscription"], "subscription")
    if a["consumer_id"] is not None:
        _args.name(a["consumer_id"], "consumer_id")
    if a["strategy"] is not None:
        instance("strategy", AllocateStrategy, "an AllocateStrategy or None")
    for name in ("consume_thread_nums", "consume_message_batch_max_size", "pull_batch_size"):
        _args.positive(a[name], name, 1 << 16)
    _args.positive(a["pull_threshold_for_queue"], "pull_threshold_for_queue")
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


class PushConsumer:
    """A member of a consumer group, consuming `topic` (and the group's retry topic) with `listener`.

    `start()` joins the group (the group rebalances), `shutdown()` finishes in-flight batches, commits and
    persists offsets and leaves (the others take over its queues). Offsets live in `offsets`, shared by the
    group's members (`ConsumerOffsetManager`, `consumerOffset.json`).
    """

    def __init__(
        self,
        store: MessageStore,
        group: str,
        topic: str,
        listener: MessageListener,
        *,
        offsets: ConsumerOffsetManager,
        subscription: str = "*",
        consumer_id: str | None = None,
        strategy: AllocateStrategy | None = None,
        consume_thread_nums: int = 4,
        consume_message_batch_max_size: int = 1,
        pull_batch_size: int = 32,
        pull_threshold_for_queue: int = 1000,
        max_reconsume_times: int = 16,
        consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp: int | None = None,
        persist_offsets_each_batch: bool = True,
        topic_queue_nums: int = 4,
        poll_timeout: float = 5.0,
    ) -> None:
        _check_push_args(locals())
        self.store = store
        self.group = group
        self.topic = topic
        self.listener = listener
        self.offsets = offsets
        self.subscriptions = {topic: subscription, retry_topic(group): "*"}
        self.consumer_id = consumer_id or f"127.0.0.1@{os.getpid()}#{next(_ids)}"
        self.strategy: AllocateStrategy = strategy or AllocateMessageQueueAveragely()
        self.consume_message_batch_max_size = consume_message_batch_max_size
        self.pull_batch_size = pull_batch_size
        self.pull_threshold_for_queue = pull_threshold_for_queue
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
        self._running = threading.Event()
        self._waiter = ArrivalWaiter.of(store)
        self._group = _Group.of(store, group)
        self._pool: ThreadPoolExecutor | None = None
        self._thread: threading.Thread | None = None
        self._persist_lock = threading.Lock()
        self._route: dict[str, tuple[int, ...]] = {}
        self._last_route_check = 0.0

    # -- lifecycle ---------------------------------------------------------------------------------------

    def start(self) -> PushConsumer:
        """Starts the threads and joins the group."""
        if self._thread is not None:
            raise RuntimeError("already started")
        self._running.set()
        self._pool = ThreadPoolExecutor(self._consume_thread_nums, thread_name_prefix=f"rmq-consume-{self.group}")
        self._thread = threading.Thread(target=self._pull_loop, name=f"rmq-pull-{self.consumer_id}", daemon=True)
        self._thread.start()
        self._group.join(self)
        return self

    def shutdown(self) -> None:
        """Leaves the group after finishing in-flight batches; commits and persists offsets. Idempotent."""
        if not self._running.is_set():
            return
        self._running.clear()
        self._waiter.notify_all()
        if self._thread is not None:
            self._thread.join()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self._group.leave(self)
        self.offsets.persist()

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
        with self._pqs_lock:
            gone = [mq for mq in self._pqs if mq not in plan]
        for mq in gone:
            with self._pqs_lock:
                pq = self._pqs.pop(mq, None)
            if pq is not None:
                with pq.lock:
                    pq.dropped = True
                    self.offsets.commit_offset(self.group, mq.topic, mq.queue_id, pq.commit_offset())
        if gone:
            self._persist()

    def _apply_allocation(self, plan: dict[MessageQueue, str]) -> None:
        self._drop_except(plan)
        with self._pqs_lock:
            new = [mq for mq in plan if mq not in self._pqs]
            for mq in new:
                self._pqs[mq] = ProcessQueue(mq, self._start_offset(mq))
            self.stats.rebalances += 1
            self.stats.queues_history.append(sorted(self._pqs))
        self._waiter.notify_all()

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
        while self._running.is_set():
            if self._queues_changed():
                self._group.rebalance()
            seen = self._waiter.arrivals
            progressed = throttled = False
            with self._pqs_lock:
                queues = list(self._pqs.values())
            for pq in queues:
                if not self._running.is_set():
                    return
                if pq.dropped:
                    continue
                if pq.in_flight() >= self.pull_threshold_for_queue:
                    throttled = True
                    continue
                try:
                    progressed |= self._pull_once(pq)
                except Exception:
                    if self.store.closed:
                        return
                    log.exception("pull of %s failed", pq.mq)
            if not progressed:
                # Flow control: a queue with too much in flight is tried again after 50 ms, as RocketMQ's client
                # does (PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL); otherwise wait for an arrival (long polling).
                timeout = FLOW_CONTROL_DELAY if throttled else self.poll_timeout
                self._waiter.wait_arrival_since(seen, timeout)

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
            pq.add(qoffs, r.next_begin_offset)
            assert self._pool is not None
            step = self.consume_message_batch_max_size
            for i in range(0, len(msgs), step):
                self._pool.submit(self._consume, pq, msgs[i : i + step], qoffs[i : i + step])
            return True
        if status is PullStatus.NO_NEW_MSG:
            if r.next_begin_offset != offset and r.next_begin_offset > offset:
                pq.add((), r.next_begin_offset)  # OFFSET_FOUND_NULL: skip to the next file
                return True
            return False
        # NO_MATCHED_MSG (filtered entries are consumed) or OFFSET_ILLEGAL (corrected): move and commit.
        with pq.lock:
            if pq.dropped:
                return False
            pq.next_offset = r.next_begin_offset
            commit = pq.commit_offset()
            self.offsets.commit_offset(self.group, mq.topic, mq.queue_id, commit)
        return status is PullStatus.NO_MATCHED_MSG

    # -- consuming ---------------------------------------------------------------------------------------

    def _consume(self, pq: ProcessQueue, msgs: list[MessageExt], qoffs: list[int]) -> None:
        if pq.dropped:
            return
        ctx = ConsumeContext(pq.mq, self.consumer_id)
        try:
            status = self.listener(msgs, ctx)
        except Exception:
            log.exception("listener failed; the batch will be reconsumed")
            self.stats.listener_errors += 1
            status = ConsumeStatus.RECONSUME_LATER
        if status is not ConsumeStatus.CONSUME_SUCCESS:
            for m in msgs:
                self._send_back(m)
        else:
            self.stats.consumed += len(msgs)
        with pq.lock:
            commit = pq.remove(qoffs)
            if not pq.dropped:
                mq = pq.mq
                journal = self.persist_offsets_each_batch
                self.offsets.commit_offset(self.group, mq.topic, mq.queue_id, commit, journal=journal)

    def _send_back(self, m: MessageExt) -> None:
        """`consumerSendMsgBack`: to the retry topic with reconsumeTimes + 1, or to the DLQ."""
        props = {k: v for k, v in m.properties.items() if k not in _STORE_PROPERTIES}
        props.setdefault("RETRY_TOPIC", m.topic)
        props.setdefault("ORIGIN_MESSAGE_ID", m.msg_id)
        to_dlq = m.reconsume_times >= self.max_reconsume_times
        topic = dlq_topic(self.group) if to_dlq else retry_topic(self.group)
        keys = m.keys
        self.store.put(
            topic,
            m.body,
            queue_id=0,
            tags=m.tags,
            keys=keys or None,
            properties=props,
            flag=m.flag,
            born_timestamp=m.born_timestamp,
            born_host=m.born_host,
            reconsume_times=m.reconsume_times + 1,
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
