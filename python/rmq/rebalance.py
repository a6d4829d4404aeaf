"""RocketMQ's client-side queue allocation strategies, with RocketMQ's exact results.

Every consumer of a group runs the same strategy over the same inputs (all queues of a topic, all live consumer
ids) and keeps the queues assigned to itself; no coordinator is involved, so the strategies must be
deterministic and agree bit for bit with the Java client (`org.apache.rocketmq.client.consumer.rebalance`).
This module is pure Python: it touches no store and no network.

Ordering rule: like RocketMQ, no strategy sorts its inputs; `mq_all` and `cid_all` are used in the order
given, and a different order gives a different allocation. RocketMQ's client sorts both lists before calling
(queues by topic, then broker name, then queue id; consumer ids as strings, all in Java's `String.compareTo`
order). Callers must do the same, or call `allocate_sorted`, which does it for them.

Errors: RocketMQ's `IllegalArgumentException`s, and the cases where the Java code would crash with a
`NullPointerException`, raise `RebalanceError`.
"""

from __future__ import annotations

import hashlib
import inspect
from abc import ABC, abstractmethod
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from rmq import _args
from rmq._native import ArgumentTypeError, InvalidArgumentError

__all__ = [
    "STRATEGIES",
    "AllocateMachineRoomNearby",
    "AllocateMessageQueueAveragely",
    "AllocateMessageQueueAveragelyByCircle",
    "AllocateMessageQueueByConfig",
    "AllocateMessageQueueByMachineRoom",
    "AllocateMessageQueueConsistentHash",
    "AllocateStrategy",
    "MachineRoomResolver",
    "MessageQueue",
    "RebalanceError",
    "allocate_sorted",
    "java_string_key",
    "md5_hash",
    "strategy_by_name",
]


class RebalanceError(InvalidArgumentError):
    """Invalid allocation input or configuration (RocketMQ's `IllegalArgumentException`); an
    `rmq.InvalidArgumentError`, so also a `ValueError`."""


@dataclass(frozen=True, order=True)
class MessageQueue:
    """One queue of a topic on one broker (RocketMQ's `MessageQueue`).

    Instances order by (topic, broker_name, queue_id), as RocketMQ sorts them. Python's `<` compares strings
    by code point, which agrees with Java's UTF-16 `String.compareTo` except when a character above U+FFFF
    meets one in U+E000..U+FFFF at the same position; `allocate_sorted` uses Java's order, so prefer it (or
    `sorted(mqs, key=MessageQueue.java_sort_key)`) when names may contain such characters.
    """

    topic: str
    broker_name: str
    queue_id: int

    def __post_init__(self) -> None:
        _args.text(self.topic, "topic")
        _args.text(self.broker_name, "broker_name")
        _args.java_int(self.queue_id, "queue_id")

    def __str__(self) -> str:
        """RocketMQ's `MessageQueue.toString()`; the consistent-hash strategy hashes this text."""
        return f"MessageQueue [topic={self.topic}, brokerName={self.broker_name}, queueId={self.queue_id}]"

    def java_sort_key(self) -> tuple[bytes, bytes, int]:
        """A key that sorts queues exactly as RocketMQ's `MessageQueue.compareTo` does."""
        return (java_string_key(self.topic), java_string_key(self.broker_name), self.queue_id)


def java_string_key(s: str) -> bytes:
    """A key that sorts strings as Java's `String.compareTo` does (lexicographic by UTF-16 code unit)."""
    return s.encode("utf-16-be", "surrogatepass")


class AllocateStrategy(ABC):
    """A queue allocation strategy (RocketMQ's `AllocateMessageQueueStrategy`)."""

    @property
    @abstractmethod
    def name(self) -> str:
        """The strategy's RocketMQ name, e.g. "AVG"."""

    @abstractmethod
    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """Returns the queues of `mq_all` that consumer `current_cid` should consume, in allocation order.

        `mq_all` and `cid_all` are used in the order given and must already be sorted as RocketMQ's client
        sorts them (see `allocate_sorted`). `consumer_group` is informational only. Raises `RebalanceError`
        if `current_cid` is empty or either list is empty; returns [] if `current_cid` is not in `cid_all`.
        """

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


def allocate_sorted(
    strategy: AllocateStrategy,
    consumer_group: str,
    current_cid: str,
    mq_all: Iterable[MessageQueue],
    cid_all: Iterable[str],
) -> list[MessageQueue]:
    """Sorts `mq_all` and `cid_all` as RocketMQ's client does (Java string order), then calls `strategy`.

    The result therefore does not depend on the order in which this consumer learned of queues or peers.
    """
    if not isinstance(strategy, AllocateStrategy):
        raise ArgumentTypeError(f"strategy must be an AllocateStrategy, got {type(strategy).__name__}")
    _args.text(consumer_group, "consumer_group")
    mqs = sorted(_queues(mq_all), key=MessageQueue.java_sort_key)
    cids = sorted(_cids(cid_all), key=java_string_key)
    return strategy.allocate(consumer_group, current_cid, mqs, cids)


def _queues(mq_all: object) -> list[MessageQueue]:
    """`mq_all` as a list, every item a `MessageQueue` (`ArgumentTypeError` otherwise)."""
    if not isinstance(mq_all, Iterable) or isinstance(mq_all, str | bytes):
        raise ArgumentTypeError(f"mq_all must be an iterable of MessageQueue, got {type(mq_all).__name__}")
    out = list(mq_all)
    for mq in out:
        if not isinstance(mq, MessageQueue):
            raise ArgumentTypeError(f"mq_all items must be MessageQueue, got {type(mq).__name__}")
    return out


def _cids(cid_all: object) -> list[str]:
    """`cid_all` as a list, every item a `str` (`ArgumentTypeError` otherwise)."""
    if not isinstance(cid_all, Iterable) or isinstance(cid_all, str | bytes):
        raise ArgumentTypeError(f"cid_all must be an iterable of str, got {type(cid_all).__name__}")
    out = list(cid_all)
    for cid in out:
        if not isinstance(cid, str):
            raise ArgumentTypeError(f"cid_all items must be str, got {type(cid).__name__}")
    return out


def _check(current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]) -> bool:
    """RocketMQ's common precondition check: raises on empty input, False if `current_cid` is not a member.

    Wrong types raise `ArgumentTypeError`.
    """
    if not isinstance(current_cid, str):
        raise ArgumentTypeError(f"current_cid must be a str, got {type(current_cid).__name__}")
    _queues(mq_all)
    _cids(cid_all)
    if not current_cid:
        raise RebalanceError("currentCID is empty")
    if not mq_all:
        raise RebalanceError("mqAll is null or mqAll empty")
    if not cid_all:
        raise RebalanceError("cidAll is null or cidAll empty")
    return current_cid in cid_all


class AllocateMessageQueueAveragely(AllocateStrategy):
    """Contiguous blocks in `cid_all` order; the first `len(mq_all) % len(cid_all)` consumers get one extra.

    10 queues over 4 consumers: [0, 1, 2], [3, 4, 5], [6, 7], [8, 9]. With duplicate consumer ids, every copy
    acts as the first one, so the blocks of later copies go to nobody (as in RocketMQ).
    """

    @property
    def name(self) -> str:
        return "AVG"

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        if not _check(current_cid, mq_all, cid_all):
            return []
        n_mq, n_cid = len(mq_all), len(cid_all)
        index = list(cid_all).index(current_cid)
        mod = n_mq % n_cid
        extra = mod > 0 and index < mod
        if n_mq <= n_cid:
            average = 1
        else:
            average = n_mq // n_cid + 1 if extra else n_mq // n_cid
        start = index * average if extra else index * average + mod
        count = min(average, n_mq - start)
        return list(mq_all[start : start + count]) if count > 0 else []


class AllocateMessageQueueAveragelyByCircle(AllocateStrategy):
    """Round robin: the consumer at index k of `cid_all` gets queues k, k + n, k + 2n, ... (n = len(cid_all))."""

    @property
    def name(self) -> str:
        return "AVG_BY_CIRCLE"

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        if not _check(current_cid, mq_all, cid_all):
            return []
        index = list(cid_all).index(current_cid)
        return list(mq_all[index :: len(cid_all)])


class AllocateMessageQueueByConfig(AllocateStrategy):
    """Every consumer gets the configured `queues`, whatever the arguments.

    Like RocketMQ, skips the precondition check: empty inputs and unknown consumer ids still get the list.
    """

    def __init__(self, queues: Iterable[MessageQueue]) -> None:
        self._queues = tuple(_queues(queues))

    @property
    def name(self) -> str:
        return "CONFIG"

    @property
    def queues(self) -> tuple[MessageQueue, ...]:
        """The configured queue list."""
        return self._queues

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        return list(self._queues)


class AllocateMessageQueueByMachineRoom(AllocateStrategy):
    """Splits the queues of the configured machine rooms (`consumeridcs`) among all consumers.

    A queue is eligible if its broker name reads `room@broker` with `room` in `consumeridcs`, split as Java's
    `brokerName.split("@")` does (trailing empty parts dropped, so `a@b@` counts as room `a` while `a@` and
    `a@b@c` do not); other queues go to nobody. The k-th consumer gets the k-th block of
    `len(eligible) // len(cid_all)` eligible queues, plus one leftover from the tail if k < the remainder.
    `consumeridcs=None` (never set; RocketMQ would throw NullPointerException) means no room: nobody gets
    anything.
    """

    def __init__(self, consumeridcs: Iterable[str] | None = None) -> None:
        self._consumeridcs = frozenset(_cids(consumeridcs)) if consumeridcs is not None else frozenset()

    @property
    def name(self) -> str:
        return "MACHINE_ROOM"

    @property
    def consumeridcs(self) -> frozenset[str]:
        """The machine rooms whose queues are allocated."""
        return self._consumeridcs

    def is_eligible(self, mq: MessageQueue) -> bool:
        """Whether `mq`'s broker name places it in one of the configured rooms."""
        parts = mq.broker_name.split("@")
        while parts and not parts[-1]:
            parts.pop()  # Java's String.split drops trailing empty strings
        return len(parts) == 2 and parts[0] in self._consumeridcs

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        if not _check(current_cid, mq_all, cid_all):
            return []
        index = list(cid_all).index(current_cid)
        eligible = [mq for mq in mq_all if self.is_eligible(mq)]
        n_cid = len(cid_all)
        block, rem = divmod(len(eligible), n_cid)
        result = eligible[index * block : index * block + block]
        if rem > index:
            result.append(eligible[index + block * n_cid])
        return result


def md5_hash(key: str) -> int:
    """RocketMQ's default ring hash: the first 4 bytes of MD5(UTF-8 key), big-endian, unsigned (0..2**32-1).

    A lone surrogate is encoded as "?", as Java's `String.getBytes` does.
    """
    if not isinstance(key, str):
        raise ArgumentTypeError(f"key must be a str, got {type(key).__name__}")
    digest = hashlib.md5(key.encode("utf-8", "replace"), usedforsecurity=False).digest()
    return int.from_bytes(digest[:4], "big")


class AllocateMessageQueueConsistentHash(AllocateStrategy):
    """Consistent hashing: a queue goes to the consumer owning the first ring position at or after its hash.

    The ring holds `virtual_node_cnt` positions per consumer id, at `hash_function(f"{cid}-{i}")`, added in
    `cid_all` order; when two virtual nodes hash to the same position the later one replaces the earlier.
    A consumer id listed again continues numbering from the count of its virtual nodes still on the ring
    (RocketMQ's `getExistingReplicas`). A queue is routed by `hash_function(str(mq))`, wrapping past the
    largest position to the smallest. `virtual_node_cnt=0` builds an empty ring: nobody gets anything.
    `hash_function` defaults to `md5_hash`; positions compare as Python ints.
    """

    def __init__(self, virtual_node_cnt: int = 10, hash_function: Callable[[str], int] | None = None) -> None:
        if isinstance(virtual_node_cnt, bool) or not isinstance(virtual_node_cnt, int):
            raise ArgumentTypeError(f"virtual_node_cnt must be an int, got {type(virtual_node_cnt).__name__}")
        if virtual_node_cnt < 0:
            raise RebalanceError(f"illegal virtualNodeCnt :{virtual_node_cnt}")
        _args.java_int(virtual_node_cnt, "virtual_node_cnt")
        if hash_function is not None and not callable(hash_function):
            raise ArgumentTypeError(f"hash_function must be callable, got {type(hash_function).__name__}")
        self._virtual_node_cnt = virtual_node_cnt
        self._hash = hash_function if hash_function is not None else md5_hash

    @property
    def name(self) -> str:
        return "CONSISTENT_HASH"

    @property
    def virtual_node_cnt(self) -> int:
        """Virtual nodes per consumer id."""
        return self._virtual_node_cnt

    def ring(self, cid_all: Sequence[str]) -> list[tuple[int, str]]:
        """The hash ring built from `cid_all`: (position, consumer id) pairs in position order."""
        owner: dict[int, str] = {}
        live: dict[str, int] = {}  # virtual nodes of each cid still on the ring
        for cid in cid_all:
            existing = live.get(cid, 0)
            for i in range(self._virtual_node_cnt):
                position = self._hash(f"{cid}-{i + existing}")
                replaced = owner.get(position)
                if replaced is not None:
                    live[replaced] -= 1
                owner[position] = cid
                live[cid] = live.get(cid, 0) + 1
        return sorted(owner.items())

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        if not _check(current_cid, mq_all, cid_all):
            return []
        ring = self.ring(cid_all)
        if not ring:
            return []
        positions = [position for position, _ in ring]
        result = []
        for mq in mq_all:
            i = bisect_left(positions, self._hash(str(mq)))
            if ring[i % len(ring)][1] == current_cid:
                result.append(mq)
        return result


class MachineRoomResolver(Protocol):
    """Tells `AllocateMachineRoomNearby` where brokers and consumers run. None or "" is rejected."""

    def broker_deploy_in(self, mq: MessageQueue) -> str | None:
        """The machine room of the broker hosting `mq`."""
        ...

    def consumer_deploy_in(self, cid: str) -> str | None:
        """The machine room of consumer `cid`."""
        ...


class AllocateMachineRoomNearby(AllocateStrategy):
    """Prefers queues in the consumer's own machine room, delegating the split to `inner`.

    Queues in the current consumer's room are allocated by `inner` among that room's consumers only. Queues of
    rooms with no consumer at all are allocated by `inner` among all consumers, room by room in Java string
    order of room names; rooms that have consumers are left to them. The result is the own-room share
    followed by those orphan shares. Raises `RebalanceError` if the resolver gives no room for any queue or
    consumer id.
    """

    def __init__(self, inner: AllocateStrategy, resolver: MachineRoomResolver) -> None:
        if inner is None:
            raise RebalanceError("allocateMessageQueueStrategy is null")
        if not isinstance(inner, AllocateStrategy):
            raise ArgumentTypeError(f"inner must be an AllocateStrategy, got {type(inner).__name__}")
        if resolver is None:
            raise RebalanceError("machineRoomResolver is null")
        self._inner = inner
        self._resolver = resolver

    @property
    def name(self) -> str:
        return f"MACHINE_ROOM_NEARBY-{self._inner.name}"

    @property
    def inner(self) -> AllocateStrategy:
        """The strategy that splits each room's queues."""
        return self._inner

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        if not _check(current_cid, mq_all, cid_all):
            return []
        room_queues: dict[str, list[MessageQueue]] = {}
        for mq in mq_all:
            room = self._resolver.broker_deploy_in(mq)
            if not room:
                raise RebalanceError(f"Machine room is null for mq {mq}")
            room_queues.setdefault(room, []).append(mq)
        room_consumers: dict[str, list[str]] = {}
        for cid in cid_all:
            room = self._resolver.consumer_deploy_in(cid)
            if not room:
                raise RebalanceError(f"Machine room is null for consumer id {cid}")
            room_consumers.setdefault(room, []).append(cid)

        result: list[MessageQueue] = []
        current_room = self._resolver.consumer_deploy_in(current_cid) or ""
        own = room_queues.pop(current_room, [])
        if own:
            result += self._inner.allocate(consumer_group, current_cid, own, room_consumers.get(current_room, []))
        for room in sorted(room_queues, key=java_string_key):
            if room not in room_consumers:
                result += self._inner.allocate(consumer_group, current_cid, room_queues[room], cid_all)
        return result


#: Constructors of the strategies by RocketMQ name (see `strategy_by_name` for MACHINE_ROOM_NEARBY-*).
STRATEGIES: dict[str, Callable[..., AllocateStrategy]] = {
    "AVG": AllocateMessageQueueAveragely,
    "AVG_BY_CIRCLE": AllocateMessageQueueAveragelyByCircle,
    "CONFIG": AllocateMessageQueueByConfig,
    "MACHINE_ROOM": AllocateMessageQueueByMachineRoom,
    "CONSISTENT_HASH": AllocateMessageQueueConsistentHash,
}

_NEARBY_PREFIX = "MACHINE_ROOM_NEARBY-"


def strategy_by_name(name: str, **kwargs: Any) -> AllocateStrategy:
    """Builds the strategy RocketMQ calls `name`, passing `kwargs` to its constructor.

    `MACHINE_ROOM_NEARBY-<inner>` needs a `resolver` keyword; the other keywords go to the inner strategy.
    Raises `RebalanceError` for an unknown name or a missing resolver.
    """
    _args.text(name, "name")
    if name.startswith(_NEARBY_PREFIX):
        resolver = kwargs.pop("resolver", None)
        if resolver is None:
            raise RebalanceError(f"{name} needs a resolver= keyword argument")
        return AllocateMachineRoomNearby(strategy_by_name(name[len(_NEARBY_PREFIX) :], **kwargs), resolver)
    factory = STRATEGIES.get(name)
    if factory is None:
        known = ", ".join([*STRATEGIES, _NEARBY_PREFIX + "<inner>"])
        raise RebalanceError(f"unknown allocation strategy {name!r} (known: {known})")
    try:
        inspect.signature(factory).bind(**kwargs)
    except TypeError as e:
        raise ArgumentTypeError(f"{name}: {e}") from None
    return factory(**kwargs)
