"""Queue allocation strategies (`rmq.rebalance`) against RocketMQ's results (spec section C).

Vectors marked "(run)" or "(test)" in the spec come from running RocketMQ's classes or from its own tests. Those
marked "(Java)" here were produced by running RocketMQ's `ConsistentHashRouter`/`MD5Hash` code and Java's
`Collections.sort` on a JDK with UTF-8 as default charset. The Hypothesis properties are section C.7's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import FrozenInstanceError
from itertools import chain
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq.rebalance import (
    STRATEGIES,
    AllocateMachineRoomNearby,
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueByConfig,
    AllocateMessageQueueByMachineRoom,
    AllocateMessageQueueConsistentHash,
    AllocateStrategy,
    MessageQueue,
    RebalanceError,
    allocate_sorted,
    java_string_key,
    md5_hash,
    strategy_by_name,
)

AVG = AllocateMessageQueueAveragely()
CIRCLE = AllocateMessageQueueAveragelyByCircle()
PREFIX_CIDS = [f"CID_PREFIX{i}" for i in range(4)]


def queues(n: int, topic: str = "topic", broker: str = "brokerName") -> list[MessageQueue]:
    return [MessageQueue(topic, broker, i) for i in range(n)]


def ids(mqs: Sequence[MessageQueue]) -> list[int]:
    return [mq.queue_id for mq in mqs]


def shares(strategy: AllocateStrategy, mqs: Sequence[MessageQueue], cids: Sequence[str]) -> dict[str, list[int]]:
    """Queue ids allocated to every consumer id, as each consumer would compute them."""
    return {cid: ids(strategy.allocate("group", cid, mqs, cids)) for cid in cids}


def owners(strategy: AllocateStrategy, mqs: Sequence[MessageQueue], cids: Sequence[str]) -> dict[MessageQueue, str]:
    """The consumer owning each queue; fails if a queue is allocated twice."""
    owner: dict[MessageQueue, str] = {}
    for cid in cids:
        for mq in strategy.allocate("group", cid, mqs, cids):
            assert mq not in owner, f"{mq} allocated to {owner[mq]} and {cid}"
            owner[mq] = cid
    return owner


class RoomByPrefix:
    """Machine room = text before the first "-" of the broker name or consumer id (RocketMQ's test resolver)."""

    def broker_deploy_in(self, mq: MessageQueue) -> str | None:
        return mq.broker_name.split("-")[0]

    def consumer_deploy_in(self, cid: str) -> str | None:
        return cid.split("-")[0]


class TableResolver:
    def __init__(self, brokers: dict[str, str | None], consumers: dict[str, str | None]) -> None:
        self.brokers = brokers
        self.consumers = consumers

    def broker_deploy_in(self, mq: MessageQueue) -> str | None:
        return self.brokers[mq.broker_name]

    def consumer_deploy_in(self, cid: str) -> str | None:
        return self.consumers[cid]


# --- MessageQueue ---------------------------------------------------------------------------------------------


def test_message_queue_str_is_rocketmq_to_string() -> None:
    mq = MessageQueue("topic_test", "brokerName", 0)
    assert str(mq) == "MessageQueue [topic=topic_test, brokerName=brokerName, queueId=0]"


def test_message_queue_orders_by_topic_broker_id_and_is_frozen() -> None:
    mqs = [MessageQueue("b", "a", 0), MessageQueue("a", "b", 1), MessageQueue("a", "b", 0), MessageQueue("a", "a", 9)]
    assert sorted(mqs) == [mqs[3], mqs[2], mqs[1], mqs[0]]
    assert sorted(mqs, key=MessageQueue.java_sort_key) == sorted(mqs)
    with pytest.raises(FrozenInstanceError):
        mqs[0].queue_id = 3  # type: ignore[misc]


def test_java_string_order_differs_from_code_point_order_above_bmp() -> None:
    words = ["\ufffd", "\U0001f600", "a", "\u00e9", "ab", "\uff21"]
    # (Java) Collections.sort: a ab é 😀 Ａ �  (UTF-16 code units: D83D < FF21 < FFFD)
    assert sorted(words, key=java_string_key) == ["a", "ab", "\u00e9", "\U0001f600", "\uff21", "\ufffd"]
    assert sorted(words) != sorted(words, key=java_string_key)


# --- Common precondition check ---------------------------------------------------------------------------------

CHECKED: list[AllocateStrategy] = [
    AVG,
    CIRCLE,
    AllocateMessageQueueByMachineRoom({"room1"}),
    AllocateMessageQueueConsistentHash(3),
    AllocateMachineRoomNearby(AVG, RoomByPrefix()),
]


@pytest.mark.parametrize("strategy", CHECKED, ids=lambda s: s.name)
@pytest.mark.parametrize(
    ("cid", "mqs", "cids", "message"),
    [
        ("", queues(4), ["c0"], "currentCID is empty"),
        ("c0", [], ["c0"], "mqAll is null or mqAll empty"),
        ("c0", queues(4), [], "cidAll is null or cidAll empty"),
    ],
)
def test_precondition_errors(
    strategy: AllocateStrategy, cid: str, mqs: list[MessageQueue], cids: list[str], message: str
) -> None:
    with pytest.raises(RebalanceError) as info:
        strategy.allocate("group", cid, mqs, cids)
    assert str(info.value) == message
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("strategy", CHECKED, ids=lambda s: s.name)
def test_consumer_not_in_list_gets_nothing(strategy: AllocateStrategy) -> None:
    mqs = queues(10, broker="room1@broker-a")
    assert strategy.allocate("group", "CID_PREFIX4", mqs, PREFIX_CIDS) == []
    assert any(strategy.allocate("group", cid, mqs, PREFIX_CIDS) for cid in PREFIX_CIDS)


# --- C.1 AVG -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n_queues", "cids", "expected"),
    [
        (10, ["c0", "c1", "c2", "c3"], {"c0": [0, 1, 2], "c1": [3, 4, 5], "c2": [6, 7], "c3": [8, 9]}),
        (4, ["c0", "c1", "c2", "c3", "c4", "c5"], {"c0": [0], "c1": [1], "c2": [2], "c3": [3], "c4": [], "c5": []}),
        (8, ["c0", "c1", "c2"], {"c0": [0, 1, 2], "c1": [3, 4, 5], "c2": [6, 7]}),
        (4, ["c1", "c0"], {"c1": [0, 1], "c0": [2, 3]}),  # unsorted cidAll: used as given
    ],
)
def test_avg_golden(n_queues: int, cids: list[str], expected: dict[str, list[int]]) -> None:
    assert AVG.name == "AVG"
    assert shares(AVG, queues(n_queues), cids) == expected


def test_avg_sizes_10_over_4() -> None:  # AllocateMessageQueueAveragelyTest
    assert [len(v) for v in shares(AVG, queues(10), PREFIX_CIDS).values()] == [3, 3, 2, 2]


def test_allocate_sorted_sorts_as_the_client_does() -> None:
    mqs = [MessageQueue("topic", "b", 1), MessageQueue("topic", "b", 0), MessageQueue("topic", "a", 3)]
    assert AVG.allocate("group", "c0", mqs, ["c1", "c0"]) == [MessageQueue("topic", "a", 3)]  # as given
    assert allocate_sorted(AVG, "group", "c0", mqs, ["c1", "c0"]) == [
        MessageQueue("topic", "a", 3),
        MessageQueue("topic", "b", 0),
    ]
    assert allocate_sorted(AVG, "group", "c1", iter(mqs), iter(["c1", "c0"])) == [MessageQueue("topic", "b", 1)]


def test_allocate_sorted_uses_java_order_for_unicode_ids() -> None:
    cids = ["\ufffd-cid", "\U0001f600-cid"]  # Java sorts the emoji (UTF-16 D83D) first, Python last
    assert allocate_sorted(AVG, "group", "\U0001f600-cid", queues(4), cids) == queues(4)[:2]
    assert allocate_sorted(AVG, "group", "\ufffd-cid", queues(4), cids) == queues(4)[2:]


# --- C.2 AVG_BY_CIRCLE -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n_queues", "cids", "expected"),
    [
        (10, PREFIX_CIDS, {c: q for c, q in zip(PREFIX_CIDS, [[0, 4, 8], [1, 5, 9], [2, 6], [3, 7]], strict=True)}),
        (8, ["c0", "c1", "c2"], {"c0": [0, 3, 6], "c1": [1, 4, 7], "c2": [2, 5]}),
        (4, ["c0", "c1", "c2", "c3", "c4", "c5"], {"c0": [0], "c1": [1], "c2": [2], "c3": [3], "c4": [], "c5": []}),
    ],
)
def test_avg_by_circle_golden(n_queues: int, cids: list[str], expected: dict[str, list[int]]) -> None:
    assert CIRCLE.name == "AVG_BY_CIRCLE"
    assert shares(CIRCLE, queues(n_queues), cids) == expected


# --- C.3 CONFIG --------------------------------------------------------------------------------------------------


def test_by_config_gives_everyone_the_list() -> None:
    configured = queues(4)
    strategy = AllocateMessageQueueByConfig(configured)
    assert strategy.name == "CONFIG"
    assert shares(strategy, queues(8), ["c0", "c1"]) == {"c0": [0, 1, 2, 3], "c1": [0, 1, 2, 3]}


def test_by_config_skips_the_precondition_check() -> None:
    strategy = AllocateMessageQueueByConfig(queues(3)[1:])
    assert shares(strategy, queues(4), ["c0", "c1"]) == {"c0": [1, 2], "c1": [1, 2]}
    assert ids(strategy.allocate("group", "unknown", queues(4), ["c0", "c1"])) == [1, 2]
    assert ids(strategy.allocate("group", "", [], [])) == [1, 2]
    assert strategy.queues == tuple(queues(3)[1:])


# --- C.4 MACHINE_ROOM --------------------------------------------------------------------------------------------


def two_rooms() -> list[MessageQueue]:
    return [MessageQueue("topic", "room1@broker-a" if i < 5 else "room2@broker-b", i) for i in range(10)]


@pytest.mark.parametrize(
    ("idcs", "n_cids", "expected"),
    [
        ({"room1"}, 2, [[0, 1, 4], [2, 3]]),  # (test)
        ({"room1"}, 3, [[0, 3], [1, 4], [2]]),
        ({"room1"}, 7, [[0], [1], [2], [3], [4], [], []]),
        ({"room1", "room2"}, 3, [[0, 1, 2, 9], [3, 4, 5], [6, 7, 8]]),
    ],
)
def test_machine_room_golden(idcs: set[str], n_cids: int, expected: list[list[int]]) -> None:
    strategy = AllocateMessageQueueByMachineRoom(idcs)
    assert strategy.name == "MACHINE_ROOM"
    cids = [f"CID_PREFIX{i}" for i in range(n_cids)]
    assert list(shares(strategy, two_rooms(), cids).values()) == expected


def test_machine_room_broker_names_without_at_give_nothing() -> None:
    strategy = AllocateMessageQueueByMachineRoom({"room1", "broker-a"})
    assert shares(strategy, queues(10, broker="broker-a"), PREFIX_CIDS[:2]) == {"CID_PREFIX0": [], "CID_PREFIX1": []}


def test_machine_room_unset_idcs_means_no_room() -> None:
    strategy = AllocateMessageQueueByMachineRoom()  # RocketMQ: NullPointerException
    assert strategy.consumeridcs == frozenset()
    assert shares(strategy, two_rooms(), PREFIX_CIDS[:2]) == {"CID_PREFIX0": [], "CID_PREFIX1": []}


@pytest.mark.parametrize(
    ("broker", "eligible"),
    [
        ("room1@b", True),
        ("room1@b@", True),  # Java's split drops trailing empty parts: ["room1", "b"]
        ("room1@", False),
        ("room1@@", False),
        ("room1@a@b", False),
        ("@b", False),
        ("room1", False),
        ("room2@b", False),
    ],
)
def test_machine_room_splits_broker_name_like_java(broker: str, eligible: bool) -> None:
    strategy = AllocateMessageQueueByMachineRoom({"room1"})
    mq = MessageQueue("topic", broker, 0)
    assert strategy.is_eligible(mq) is eligible
    assert strategy.allocate("group", "c0", [mq], ["c0"]) == ([mq] if eligible else [])


def test_machine_room_empty_room_name() -> None:
    mq = MessageQueue("topic", "@b", 0)
    assert AllocateMessageQueueByMachineRoom({""}).allocate("group", "c0", [mq], ["c0"]) == [mq]


# --- C.5 CONSISTENT_HASH -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("CID-0-0", 1900518137),
        ("MessageQueue [topic=topic_test, brokerName=brokerName, queueId=0]", 2171879703),
        ("\u00e9-0", 795419618),  # (Java)
        ("\u6d88\u8d39\u8005-3", 3930683456),  # (Java)
        ("\U0001f600-0", 1552967531),  # (Java)
        ("x\ud800y", 4261721551),  # (Java) a lone surrogate is encoded as "?"
    ],
)
def test_md5_hash_spot_checks(key: str, expected: int) -> None:
    assert md5_hash(key) == expected


@pytest.mark.parametrize(
    ("vnodes", "expected"),
    [(10, {"CID-0": [1, 3, 4, 5], "CID-1": [0, 2]}), (3, {"CID-0": [0, 3, 5], "CID-1": [1, 2, 4]})],
)
def test_consistent_hash_golden_two_consumers(vnodes: int, expected: dict[str, list[int]]) -> None:
    strategy = AllocateMessageQueueConsistentHash(vnodes)
    assert strategy.name == "CONSISTENT_HASH"
    assert shares(strategy, queues(6, topic="topic_test"), ["CID-0", "CID-1"]) == expected


def test_consistent_hash_golden_four_consumers_and_removal() -> None:
    strategy = AllocateMessageQueueConsistentHash()
    assert strategy.virtual_node_cnt == 10
    assert shares(strategy, queues(10), PREFIX_CIDS) == {
        "CID_PREFIX0": [1, 6, 7, 8, 9],
        "CID_PREFIX1": [0, 3],
        "CID_PREFIX2": [2, 5],
        "CID_PREFIX3": [4],
    }
    assert shares(strategy, queues(10), PREFIX_CIDS[1:]) == {
        "CID_PREFIX1": [0, 3, 6, 7, 9],
        "CID_PREFIX2": [1, 2, 5],
        "CID_PREFIX3": [4, 8],
    }


def test_consistent_hash_unicode_golden() -> None:  # (Java)
    cids = ["\u6d88\u8d39\u8005-1", "consumer-\u00e9", "\U0001f600-cid", "\ufffd-cid"]
    mqs = queues(12, topic="\u4e3b\u9898", broker="broker-\u00e9")
    strategy = AllocateMessageQueueConsistentHash(5)
    got = {cid: ids(allocate_sorted(strategy, "group", cid, mqs, cids)) for cid in cids}
    assert got == {cids[0]: [6, 7, 10], cids[1]: [3, 4, 5, 9], cids[2]: [2, 8], cids[3]: [0, 1, 11]}


def test_consistent_hash_zero_virtual_nodes_gives_nobody_anything() -> None:
    strategy = AllocateMessageQueueConsistentHash(0)
    assert strategy.ring(PREFIX_CIDS) == []
    assert shares(strategy, queues(10), PREFIX_CIDS) == {cid: [] for cid in PREFIX_CIDS}


def test_consistent_hash_negative_virtual_nodes() -> None:
    with pytest.raises(RebalanceError, match=r"^illegal virtualNodeCnt :-1$"):
        AllocateMessageQueueConsistentHash(-1)


def test_consistent_hash_ring_collision_later_node_wins() -> None:
    strategy = AllocateMessageQueueConsistentHash(1, hash_function=lambda key: 5)
    assert strategy.ring(["a", "b"]) == [(5, "b")]
    assert shares(strategy, queues(3), ["a", "b"]) == {"a": [], "b": [0, 1, 2]}


def test_consistent_hash_existing_replicas_count_only_surviving_nodes() -> None:  # (Java)
    # "b-0" overwrites "a-0"; when "a" comes again it has 0 nodes left, so it re-adds "a-0" (not "a-1").
    table = {"a-0": 10, "b-0": 10, "a-1": 20}
    strategy = AllocateMessageQueueConsistentHash(1, hash_function=lambda key: table.get(key, 5))
    assert strategy.ring(["a", "b", "a"]) == [(10, "a")]
    assert shares(strategy, queues(1), ["a", "b", "a"]) == {"a": [0], "b": []}


def test_consistent_hash_duplicate_consumer_continues_numbering() -> None:  # (Java)
    seen: list[str] = []

    def recording(key: str) -> int:
        seen.append(key)
        return md5_hash(key)

    strategy = AllocateMessageQueueConsistentHash(2, hash_function=recording)
    strategy.allocate("group", "A", [MessageQueue("t", "b", 0)], ["A", "B", "A"])
    assert seen == ["A-0", "A-1", "B-0", "B-1", "A-2", "A-3", "MessageQueue [topic=t, brokerName=b, queueId=0]"]


def test_consistent_hash_wraps_past_the_largest_position() -> None:
    table = {"a-0": 100, "b-0": 200, "MessageQueue [topic=t, brokerName=b, queueId=0]": 201}
    strategy = AllocateMessageQueueConsistentHash(1, hash_function=lambda key: table.get(key, 150))
    mqs = [MessageQueue("t", "b", 0), MessageQueue("t", "b", 1)]
    assert shares(strategy, mqs, ["a", "b"]) == {"a": [0], "b": [1]}


# --- C.6 MACHINE_ROOM_NEARBY -------------------------------------------------------------------------------------


def room_queues(rooms: dict[str, int]) -> list[MessageQueue]:
    return [MessageQueue("topic", f"{room}-broker", i) for room, n in rooms.items() for i in range(n)]


def test_nearby_golden_orphan_room_shared() -> None:
    strategy = AllocateMachineRoomNearby(AVG, RoomByPrefix())
    assert strategy.name == "MACHINE_ROOM_NEARBY-AVG"
    assert strategy.inner is AVG
    mqs = room_queues({"IDC1": 2, "IDC2": 2})
    cids = ["IDC1-CID-0", "IDC1-CID-1", "IDC3-CID-0"]
    got = {cid: [str(mq) for mq in strategy.allocate("group", cid, mqs, cids)] for cid in cids}
    assert got == {
        "IDC1-CID-0": [str(mqs[0]), str(mqs[2])],
        "IDC1-CID-1": [str(mqs[1]), str(mqs[3])],
        "IDC3-CID-0": [],
    }


def test_nearby_golden_rooms_keep_their_queues() -> None:
    strategy = AllocateMachineRoomNearby(AVG, RoomByPrefix())
    mqs = room_queues({"IDC1": 4, "IDC2": 3})
    cids = ["IDC1-CID-0", "IDC2-CID-0", "IDC2-CID-1"]
    assert {cid: strategy.allocate("group", cid, mqs, cids) for cid in cids} == {
        "IDC1-CID-0": mqs[:4],
        "IDC2-CID-0": mqs[4:6],
        "IDC2-CID-1": mqs[6:],
    }


def test_nearby_orphan_rooms_follow_java_room_order() -> None:
    # Rooms "\ufffd" and "\U0001f600" have no consumer; Java's TreeMap puts the emoji room first.
    mqs = [MessageQueue("t", "x", 0), MessageQueue("t", "y", 0)]
    resolver = TableResolver({"x": "\ufffd", "y": "\U0001f600"}, {"c": "home"})
    strategy = AllocateMachineRoomNearby(AVG, resolver)
    assert strategy.allocate("group", "c", mqs, ["c"]) == [mqs[1], mqs[0]]


@pytest.mark.parametrize("missing", [None, ""])
def test_nearby_rejects_queue_without_room(missing: str | None) -> None:
    resolver = TableResolver({"a": "R1", "b": missing}, {"c": "R1"})
    strategy = AllocateMachineRoomNearby(AVG, resolver)
    with pytest.raises(RebalanceError) as info:
        strategy.allocate("group", "c", [MessageQueue("t", "a", 0), MessageQueue("t", "b", 1)], ["c"])
    assert str(info.value) == "Machine room is null for mq MessageQueue [topic=t, brokerName=b, queueId=1]"


@pytest.mark.parametrize("missing", [None, ""])
def test_nearby_rejects_consumer_without_room(missing: str | None) -> None:
    resolver = TableResolver({"a": "R1"}, {"c": "R1", "d": missing})
    strategy = AllocateMachineRoomNearby(AVG, resolver)
    with pytest.raises(RebalanceError) as info:
        strategy.allocate("group", "c", [MessageQueue("t", "a", 0)], ["c", "d"])
    assert str(info.value) == "Machine room is null for consumer id d"


def test_nearby_rejects_missing_constructor_arguments() -> None:
    with pytest.raises(RebalanceError, match="allocateMessageQueueStrategy is null"):
        AllocateMachineRoomNearby(cast(Any, None), RoomByPrefix())
    with pytest.raises(RebalanceError, match="machineRoomResolver is null"):
        AllocateMachineRoomNearby(AVG, cast(Any, None))


# --- Names and factory -------------------------------------------------------------------------------------------


def test_strategy_by_name() -> None:
    assert sorted(STRATEGIES) == ["AVG", "AVG_BY_CIRCLE", "CONFIG", "CONSISTENT_HASH", "MACHINE_ROOM"]
    for name in ["AVG", "AVG_BY_CIRCLE", "CONSISTENT_HASH", "MACHINE_ROOM"]:
        assert strategy_by_name(name).name == name
    assert strategy_by_name("CONFIG", queues=queues(2)).allocate("g", "x", [], []) == queues(2)
    ch = strategy_by_name("CONSISTENT_HASH", virtual_node_cnt=3)
    assert isinstance(ch, AllocateMessageQueueConsistentHash)
    assert ch.virtual_node_cnt == 3
    nearby = strategy_by_name("MACHINE_ROOM_NEARBY-CONSISTENT_HASH", resolver=RoomByPrefix(), virtual_node_cnt=3)
    assert nearby.name == "MACHINE_ROOM_NEARBY-CONSISTENT_HASH"
    assert isinstance(nearby, AllocateMachineRoomNearby)
    assert isinstance(nearby.inner, AllocateMessageQueueConsistentHash)
    assert nearby.inner.virtual_node_cnt == 3
    assert repr(AVG) == "<AllocateMessageQueueAveragely AVG>"


def test_strategy_by_name_errors() -> None:
    with pytest.raises(RebalanceError, match="unknown allocation strategy 'LIFO'"):
        strategy_by_name("LIFO")
    with pytest.raises(RebalanceError, match="needs a resolver"):
        strategy_by_name("MACHINE_ROOM_NEARBY-AVG")
    with pytest.raises(RebalanceError, match="illegal virtualNodeCnt :-2"):
        strategy_by_name("CONSISTENT_HASH", virtual_node_cnt=-2)


# --- Properties (C.7) --------------------------------------------------------------------------------------------

TOPICS = ["topic", "T2", "\u4e3b\u9898"]
BROKERS = ["brokerName", "room1@a", "\u00e9-b"]
message_queues = st.builds(MessageQueue, st.sampled_from(TOPICS), st.sampled_from(BROKERS), st.integers(0, 30))
mq_lists = st.lists(message_queues, min_size=1, max_size=40, unique=True).map(
    lambda mqs: sorted(mqs, key=MessageQueue.java_sort_key)
)
# A leading "-" would give RoomByPrefix an empty machine room.
consumer_ids = st.text(min_size=1, max_size=6).filter(lambda cid: not cid.startswith("-"))
cid_lists = st.lists(consumer_ids, min_size=1, max_size=12, unique=True).map(
    lambda cids: sorted(cids, key=java_string_key)
)
hash_functions: st.SearchStrategy[Callable[[str], int] | None] = st.sampled_from(
    [None, lambda key: md5_hash(key) % 7]  # the second makes ring collisions common
)
PARTITIONING: list[Callable[[], AllocateStrategy]] = [
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    lambda: AllocateMessageQueueConsistentHash(3),
    lambda: AllocateMessageQueueConsistentHash(1, hash_function=lambda key: md5_hash(key) % 7),
    lambda: AllocateMachineRoomNearby(AllocateMessageQueueAveragely(), RoomByPrefix()),
]


def avg_oracle(mqs: Sequence[MessageQueue], n_cids: int, index: int) -> list[MessageQueue]:
    """Block `index` of `mqs` cut into `n_cids` contiguous blocks, the first ones one longer."""
    sizes = [len(mqs) // n_cids + (1 if k < len(mqs) % n_cids else 0) for k in range(n_cids)]
    start = sum(sizes[:index])
    return list(mqs[start : start + sizes[index]])


@settings(max_examples=60, deadline=None)
@given(mqs=mq_lists, cids=cid_lists, make=st.sampled_from(PARTITIONING))
def test_partitioning_strategies_are_disjoint_and_cover(
    mqs: list[MessageQueue], cids: list[str], make: Callable[[], AllocateStrategy]
) -> None:
    strategy = make()
    owner = owners(strategy, mqs, cids)  # disjoint
    assert set(owner) == set(mqs)  # coverage


@settings(max_examples=60, deadline=None)
@given(mqs=mq_lists, cids=cid_lists)
def test_avg_and_circle_are_balanced(mqs: list[MessageQueue], cids: list[str]) -> None:
    for strategy in [AVG, CIRCLE]:
        sizes = [len(strategy.allocate("group", cid, mqs, cids)) for cid in cids]
        assert max(sizes) - min(sizes) <= 1
        assert sum(sizes) == len(mqs)
    avg = [AVG.allocate("group", cid, mqs, cids) for cid in cids]
    assert avg == [avg_oracle(mqs, len(cids), k) for k in range(len(cids))]
    assert list(chain(*avg)) == mqs  # contiguous blocks in consumer order
    for k, cid in enumerate(cids):
        assert CIRCLE.allocate("group", cid, mqs, cids) == mqs[k :: len(cids)]


@settings(max_examples=60, deadline=None)
@given(mqs=mq_lists, cids=cid_lists, idcs=st.sets(st.sampled_from(["", "room1", "room2", "r\u00e9"])), data=st.data())
def test_machine_room_covers_exactly_the_eligible_queues(
    mqs: list[MessageQueue], cids: list[str], idcs: set[str], data: st.DataObject
) -> None:
    rooms = st.sampled_from(["", "room1", "room2", "r\u00e9", "other"])
    name = st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="@"), min_size=1, max_size=4
    )
    brokers = st.one_of(st.builds(lambda r, b: f"{r}@{b}", rooms, name), name)
    mqs = [MessageQueue(mq.topic, data.draw(brokers), mq.queue_id) for mq in mqs]
    strategy = AllocateMessageQueueByMachineRoom(idcs)
    eligible = [mq for mq in mqs if "@" in mq.broker_name and mq.broker_name.split("@")[0] in idcs]
    got = [strategy.allocate("group", cid, mqs, cids) for cid in cids]
    assert Counter(chain(*got)) == Counter(eligible)
    sizes = [len(share) for share in got]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=40, deadline=None)
@given(
    mqs=mq_lists,
    cids=cid_lists.filter(lambda cids: len(cids) >= 2),
    vnodes=st.integers(1, 5),
    hash_function=hash_functions,
)
def test_consistent_hash_removing_a_consumer_moves_only_its_queues(
    mqs: list[MessageQueue], cids: list[str], vnodes: int, hash_function: Callable[[str], int] | None
) -> None:
    strategy = AllocateMessageQueueConsistentHash(vnodes, hash_function)
    before = owners(strategy, mqs, cids)
    after = owners(strategy, mqs, cids[1:])
    assert set(after) == set(mqs)
    for mq, owner in before.items():
        if owner != cids[0]:
            assert after[mq] == owner


@settings(max_examples=40, deadline=None)
@given(mqs=mq_lists, cids=cid_lists, vnodes=st.integers(1, 5), hash_function=hash_functions)
def test_consistent_hash_adding_a_consumer_takes_only_queues_for_itself(
    mqs: list[MessageQueue], cids: list[str], vnodes: int, hash_function: Callable[[str], int] | None
) -> None:
    strategy = AllocateMessageQueueConsistentHash(vnodes, hash_function)
    before = owners(strategy, mqs, cids)
    grown = sorted({*cids, "CID-NEW"}, key=java_string_key)
    after = owners(strategy, mqs, grown)
    assert set(after) == set(mqs)
    for mq, owner in after.items():
        if owner != "CID-NEW":
            assert before[mq] == owner


ALL_STRATEGIES: list[Callable[[], AllocateStrategy]] = [
    *PARTITIONING,
    lambda: AllocateMessageQueueByMachineRoom({"room1"}),
    lambda: AllocateMessageQueueByConfig(queues(3)),
]


@settings(max_examples=60, deadline=None)
@given(mqs=mq_lists, cids=cid_lists, make=st.sampled_from(ALL_STRATEGIES), data=st.data())
def test_allocation_is_deterministic_and_independent_of_input_order(
    mqs: list[MessageQueue], cids: list[str], make: Callable[[], AllocateStrategy], data: st.DataObject
) -> None:
    shuffled_mqs = data.draw(st.permutations(mqs))
    shuffled_cids = data.draw(st.permutations(cids))
    first, second = make(), make()
    for cid in cids:
        expected = first.allocate("group", cid, mqs, cids)
        assert second.allocate("other-group", cid, tuple(mqs), tuple(cids)) == expected
        assert allocate_sorted(second, "group", cid, shuffled_mqs, shuffled_cids) == expected


@settings(max_examples=60, deadline=None)
@given(
    mqs=st.lists(message_queues, min_size=1, max_size=30),
    cids=st.lists(st.sampled_from(["c0", "c1", "\u00e9", "\U0001f600"]), min_size=1, max_size=8),
)
def test_duplicate_ids(mqs: list[MessageQueue], cids: list[str]) -> None:
    distinct = list(dict.fromkeys(cids))
    for cid in distinct:  # every copy of a consumer id acts as its first copy
        first = cids.index(cid)
        assert AVG.allocate("group", cid, mqs, cids) == avg_oracle(mqs, len(cids), first)
        assert CIRCLE.allocate("group", cid, mqs, cids) == mqs[first :: len(cids)]
    # Allocation is by position: a queue listed twice is allocated twice, and with distinct consumers the
    # multiset of allocations is exactly mq_all.
    for strategy in [AVG, CIRCLE, AllocateMessageQueueConsistentHash(2)]:
        got = Counter(chain(*(strategy.allocate("group", cid, mqs, distinct) for cid in distinct)))
        assert got == Counter(mqs)
    # A consistent-hash consumer listed k times owns k * vnodes ring slots but still one share.
    ch = AllocateMessageQueueConsistentHash(2)
    got = Counter(chain(*(ch.allocate("group", cid, mqs, cids) for cid in distinct)))
    assert got == Counter(mqs)
    expected_ring = {md5_hash(f"{cid}-{i}"): cid for cid in distinct for i in range(2 * cids.count(cid))}
    assert ch.ring(cids) == sorted(expected_ring.items())


@settings(max_examples=40, deadline=None)
@given(
    room_sizes=st.dictionaries(
        st.sampled_from(["IDC1", "IDC2", "IDC3", "\u673a\u623f"]), st.integers(1, 6), min_size=1
    ),
    consumer_rooms=st.lists(st.sampled_from(["IDC1", "IDC2", "IDC3", "IDC4", "\u673a\u623f"]), min_size=1, max_size=8),
    inner=st.sampled_from(PARTITIONING[:3]),
)
def test_nearby_keeps_queues_in_their_room(
    room_sizes: dict[str, int], consumer_rooms: list[str], inner: Callable[[], AllocateStrategy]
) -> None:
    mqs = sorted(room_queues(room_sizes), key=MessageQueue.java_sort_key)
    cids = sorted((f"{room}-CID-{i}" for i, room in enumerate(consumer_rooms)), key=java_string_key)
    strategy = AllocateMachineRoomNearby(inner(), RoomByPrefix())
    owner = owners(strategy, mqs, cids)
    assert set(owner) == set(mqs)
    staffed = set(consumer_rooms)
    for mq, cid in owner.items():
        room = mq.broker_name.split("-")[0]
        if room in staffed:
            assert cid.split("-")[0] == room
