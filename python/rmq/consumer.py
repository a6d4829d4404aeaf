"""The pull consumer and long polling, on top of `MessageStore.get_message`.

rmq runs RocketMQ's broker and client halves in one process: a pull goes straight to the store's read path
(`get_message`, in Rust with the GIL released), and its `GetMessageStatus` is translated the way the broker's
`PullMessageProcessor` and the client's `PullAPIWrapper` translate it:

| store status | broker response | `PullStatus` |
|---|---|---|
| FOUND | SUCCESS | FOUND |
| NO_MATCHED_MESSAGE, MESSAGE_WAS_REMOVING | PULL_RETRY_IMMEDIATELY | NO_MATCHED_MSG |
| OFFSET_OVERFLOW_ONE, OFFSET_FOUND_NULL | PULL_NOT_FOUND | NO_NEW_MSG |
| OFFSET_OVERFLOW_BADLY, OFFSET_TOO_SMALL | PULL_OFFSET_MOVED | OFFSET_ILLEGAL |
| NO_MESSAGE_IN_QUEUE, NO_MATCHED_LOGIC_QUEUE | PULL_NOT_FOUND at 0, else OFFSET_MOVED | NO_NEW_MSG, OFFSET_ILLEGAL |

Long polling (`ArrivalWaiter`): a pull that finds nothing new waits on the store's native arrival signal (the
reput service advances it when entries reach a queue) or a timeout, instead of polling. A read-only store has no
reput service (another process writes it): there a pull that finds nothing refreshes the store first
(`MessageStore.refresh()`), and a long poll refreshes and pulls again every `READ_ONLY_POLL` seconds.
"""

from __future__ import annotations

import enum
import threading
import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rmq import _args, _native
from rmq._native import ArgumentTypeError, GetMessageStatus, MessageExt
from rmq.rebalance import MessageQueue

if TYPE_CHECKING:
    from rmq.offsets import ConsumerOffsetManager
    from rmq.store import MessageStore

#: The broker name rmq gives its one store in `MessageQueue`s.
BROKER_NAME = "broker-a"
#: `defaultTopicQueueNums`: queues a topic is taken to have before any message reaches them.
DEFAULT_TOPIC_QUEUE_NUMS = 4
#: The most queues a topic may be configured to have (`queue_nums`, `topic_queue_nums`).
MAX_TOPIC_QUEUE_NUMS = 1 << 16
READ_ONLY_POLL = 0.1
"""Seconds between refreshes of a read-only store (another process writes it) while a consumer waits for
messages: nothing signals arrivals there."""


class PullStatus(enum.Enum):
    """The client's `PullStatus`."""

    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


@dataclass(frozen=True)
class PullResult:
    """One pull: status, where to pull next, the queue's bounds, and the messages (decoded lazily)."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt]


def pull_status(status: GetMessageStatus, offset: int) -> PullStatus:
    """Translates a store status as the broker and the client do (see the module table)."""
    if status == GetMessageStatus.FOUND:
        return PullStatus.FOUND
    if status in (GetMessageStatus.NO_MATCHED_MESSAGE, GetMessageStatus.MESSAGE_WAS_REMOVING):
        return PullStatus.NO_MATCHED_MSG
    if status in (GetMessageStatus.OFFSET_OVERFLOW_ONE, GetMessageStatus.OFFSET_FOUND_NULL):
        return PullStatus.NO_NEW_MSG
    if status in (GetMessageStatus.NO_MESSAGE_IN_QUEUE, GetMessageStatus.NO_MATCHED_LOGIC_QUEUE):
        return PullStatus.NO_NEW_MSG if offset == 0 else PullStatus.OFFSET_ILLEGAL
    return PullStatus.OFFSET_ILLEGAL


class ArrivalWaiter:
    """Long polling for one store: waits until a queue holds messages past an offset, woken by the store's
    native arrival signal (RocketMQ's `PullRequestHoldService` + `NotifyMessageArrivingListener`): the reput
    service advances `store.arrival_seq` after every round that adds consume-queue entries, and the waits run
    in Rust with the GIL released.

    One per store (`ArrivalWaiter.of(store)`).
    """

    _by_store: weakref.WeakKeyDictionary[MessageStore, ArrivalWaiter] = weakref.WeakKeyDictionary()
    _registry_lock = threading.Lock()

    def __init__(self, store: MessageStore) -> None:
        self._store = weakref.ref(store)

    @classmethod
    def of(cls, store: MessageStore) -> ArrivalWaiter:
        """The store's waiter, created on first use."""
        with cls._registry_lock:
            waiter = cls._by_store.get(store)
            if waiter is None:
                waiter = cls(store)
                cls._by_store[store] = waiter
            return waiter

    @property
    def arrivals(self) -> int:
        """The store's arrival sequence (it also advances on `notify_all`); 0 once the store is gone."""
        store = self._store()
        return 0 if store is None else store.arrival_seq

    def notify_all(self) -> None:
        """Wakes every waiter (on shutdown or rebalance)."""
        store = self._store()
        if store is not None:
            store.wake_arrival_waiters()

    def wait_beyond(self, topic: str, queue_id: int, offset: int, timeout: float) -> bool:
        """Waits until (topic, queue_id) has a dispatched message at or after `offset`, or `timeout` seconds.

        Returns whether there is one (False too when the store closes). Wakes on arrivals, never polls.
        """
        _args.text(topic, "topic")
        _args.java_int(queue_id, "queue_id")
        _args.java_long(offset, "offset")
        timeout = _args.seconds(timeout)
        store = self._store()
        if store is None or store.closed:
            return False
        return store.wait_queue_beyond(topic, queue_id, offset, timeout)

    def wait_arrival_since(self, seen: int, timeout: float) -> None:
        """Waits up to `timeout` seconds for an arrival anywhere, unless one came since `arrivals` was `seen`."""
        timeout = _args.seconds(timeout)
        store = self._store()
        if store is not None:
            store.wait_arrival(seen, timeout)


def as_queue(mq: MessageQueue | tuple[str, int]) -> MessageQueue:
    """A `MessageQueue` of this store from either form (`ArgumentTypeError` for anything else)."""
    if isinstance(mq, MessageQueue):
        return mq
    if not isinstance(mq, tuple) or len(mq) != 2:
        raise ArgumentTypeError(f"a queue is a MessageQueue or a (topic, queue_id) tuple, got {mq!r:.80}")
    topic, queue_id = mq
    return MessageQueue(topic, BROKER_NAME, queue_id)


def topic_queues(store: MessageStore, topic: str, queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS) -> list[MessageQueue]:
    """The topic's queues, sorted, as the client's route has them.

    A topic configured in `config/topics.json` (`store.create_topic`) has `0..read_queue_nums-1`, or none when
    its perm is not readable (`topicRouteData2TopicSubscribeInfo`). Any other topic has the queues holding
    messages plus `0..queue_nums-1` (at most `MAX_TOPIC_QUEUE_NUMS`).
    """
    queue_nums = _args.integer(queue_nums, "queue_nums", 0, MAX_TOPIC_QUEUE_NUMS)
    lookup = getattr(store, "topic_config", None)
    config = lookup(topic) if lookup is not None else None
    if config is not None:
        n = config.read_queue_nums if config.readable else 0
        return [MessageQueue(topic, BROKER_NAME, q) for q in range(n)]
    ids = set(store.queue_ids(topic)) | set(range(queue_nums))
    return [MessageQueue(topic, BROKER_NAME, q) for q in sorted(ids)]


class PullConsumer:
    """`DefaultLitePullConsumer` / `DefaultMQPullConsumer` in one process: the caller chooses queues and
    offsets; committed offsets go to a `ConsumerOffsetManager` if one is given.
    """

    def __init__(self, store: MessageStore, group: str, *, offsets: ConsumerOffsetManager | None = None) -> None:
        from rmq.offsets import ConsumerOffsetManager

        if not isinstance(store, _native.MessageStore):
            raise ArgumentTypeError(f"store must be an rmq.MessageStore, got {type(store).__name__}")
        _args.group(group)
        if offsets is not None and not isinstance(offsets, ConsumerOffsetManager):
            raise ArgumentTypeError(f"offsets must be a ConsumerOffsetManager or None, got {type(offsets).__name__}")
        self.store = store
        self.group = group
        self.offsets = offsets
        self._waiter = ArrivalWaiter.of(store)

    def fetch_subscribe_message_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's queues (see `topic_queues`)."""
        return topic_queues(self.store, topic)

    def pull(
        self, mq: MessageQueue | tuple[str, int], offset: int, max_nums: int = 32, subscription: str | None = "*"
    ) -> PullResult:
        """One pull of up to `max_nums` messages from `offset` whose tag matches `subscription`.

        On a read-only store (another process writes it) a pull that finds nothing at `offset` (NO_NEW_MSG or
        OFFSET_ILLEGAL) takes in what the writer added since (`store.refresh()`) and pulls again."""
        q = as_queue(mq)
        _args.java_long(offset, "offset")
        _args.positive(max_nums, "max_nums")
        r = self.store.get_message(self.group, q.topic, q.queue_id, offset, max_nums, subscription)
        status = pull_status(r.status, offset)
        if self.store.read_only and status in (PullStatus.NO_NEW_MSG, PullStatus.OFFSET_ILLEGAL):
            self.store.refresh()
            r = self.store.get_message(self.group, q.topic, q.queue_id, offset, max_nums, subscription)
            status = pull_status(r.status, offset)
        msgs = r.messages if status == PullStatus.FOUND else []
        return PullResult(status, r.next_begin_offset, r.min_offset, r.max_offset, msgs)

    def pull_block_if_not_found(
        self,
        mq: MessageQueue | tuple[str, int],
        offset: int,
        max_nums: int = 32,
        subscription: str | None = "*",
        timeout: float = 15.0,
    ) -> PullResult:
        """A long-polling pull: when nothing new is there, waits up to `timeout` seconds for an arrival.

        On a read-only store, where nothing signals arrivals, it pulls again (refreshing the store) every
        `READ_ONLY_POLL` seconds until a message is there or the timeout. `timeout` must be finite and not
        negative (`InvalidArgumentError`).
        """
        q = as_queue(mq)
        deadline = time.monotonic() + _args.seconds(timeout)
        while True:
            r = self.pull(q, offset, max_nums, subscription)
            remaining = deadline - time.monotonic()
            if r.status != PullStatus.NO_NEW_MSG or remaining <= 0:
                return r
            if self.store.read_only:
                self._waiter.wait_beyond(q.topic, q.queue_id, offset, min(remaining, READ_ONLY_POLL))
            elif not self._waiter.wait_beyond(q.topic, q.queue_id, offset, remaining):
                return self.pull(q, offset, max_nums, subscription)

    def update_consume_offset(self, mq: MessageQueue | tuple[str, int], offset: int) -> None:
        """Commits `offset` (the next message to consume) for the queue."""
        q = as_queue(mq)
        if self.offsets is None:
            raise RuntimeError("no ConsumerOffsetManager was given")
        self.offsets.commit_offset(self.group, q.topic, q.queue_id, offset)

    def fetch_consume_offset(self, mq: MessageQueue | tuple[str, int]) -> int:
        """The committed offset of the queue, −1 if none."""
        q = as_queue(mq)
        if self.offsets is None:
            raise RuntimeError("no ConsumerOffsetManager was given")
        return self.offsets.query_offset(self.group, q.topic, q.queue_id)
