"""`get_message` against a model (Hypothesis): for random stores (two queues, tags that include the colliding
pair `Aa`/`BB`, consume-queue files of 300 or 1000 entries so reads stop at file ends or at the scan limit)
and random reads (any offset, batch size and subscription), the status, the messages, the next begin offset,
min/max and the filtered count are exactly what spec §13 says."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import rmq
from conftest import small_config

S = rmq.GetMessageStatus
TAGS = [None, "A", "B", "Aa", "BB"]  # "Aa" and "BB" share String.hashCode 2112
# Reads alternate between these on one store (whose last parsed expression is cached): repeated tags and
# spaces, and one of many tags, matched by binary search.
SUBSCRIPTIONS = [
    None,
    "*",
    "A",
    "Aa",
    "BB",
    "A || BB",
    "Aa || B",
    "C",
    " B||A ||  B",
    " || ".join([f"t{i}" for i in range(3000)] + ["Aa"]),
]
SCAN_ENTRIES = 16000 // 20  # maxFilterMessageSize / CQ_STORE_UNIT_SIZE
COUNT_CAP = 32  # maxTransferCountOnMessageInMemory


def java_hash(s: str) -> int:
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def sub_tags(sub: str | None) -> set[str] | None:
    if sub is None or sub.strip() == "*":
        return None
    return {t.strip() for t in sub.split("||") if t.strip()}


@dataclass
class Read:
    queue_id: int
    offset: int
    max_msgs: int
    sub: str | None


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[int, list[tuple[int, str | None]], list[Read]]:
    # 300-entry consume-queue files make reads stop at file ends; 1000-entry ones at the 800-entry scan limit.
    cq_entries = draw(st.sampled_from([300, 1000]))
    n = draw(st.integers(1, 1300))
    tag_choice = draw(st.lists(st.sampled_from(TAGS), min_size=1, max_size=8))
    queue_bias = draw(st.integers(0, 2))  # 0: all in queue 0; else alternate
    puts = [(0 if queue_bias == 0 else i % 2, tag_choice[i % len(tag_choice)]) for i in range(n)]
    reads = draw(
        st.lists(
            st.builds(
                Read,
                queue_id=st.integers(0, 2),
                offset=st.one_of(
                    st.integers(-3, n + 3), st.sampled_from([0, 150, 290, 299, 300, 301, 599, 600, 999, 1000])
                ),
                max_msgs=st.integers(1, 40),
                sub=st.sampled_from(SUBSCRIPTIONS),
            ),
            min_size=1,
            max_size=25,
        )
    )
    return cq_entries, puts, reads


def expected(queue: list[str | None], read: Read, cq_entries: int) -> tuple[S, int, list[int], int]:
    """(status, next begin offset, queue offsets returned, filtered count) per spec §13."""
    mx = len(queue)
    if mx == 0:
        return S.NO_MESSAGE_IN_QUEUE, 0, [], 0
    if read.offset < 0:
        return S.OFFSET_TOO_SMALL, 0, [], 0
    if read.offset == mx:
        return S.OFFSET_OVERFLOW_ONE, mx, [], 0
    if read.offset > mx:
        return S.OFFSET_OVERFLOW_BADLY, mx, [], 0
    wanted = sub_tags(read.sub)
    hashes = None if wanted is None else {java_hash(t) for t in wanted}
    end = min(mx, (read.offset // cq_entries + 1) * cq_entries, read.offset + max(SCAN_ENTRIES, read.max_msgs))
    cap = min(read.max_msgs, COUNT_CAP)
    taken: list[int] = []
    filtered = 0
    q = read.offset
    while q < end and len(taken) < cap:
        tag = queue[q]
        if wanted is None:
            taken.append(q)
        else:
            assert hashes is not None
            code = java_hash(tag) if tag else 0
            if code in hashes:
                if tag in wanted:
                    taken.append(q)
                else:
                    filtered += 1  # same tagsCode, another tag: caught by the exact check
        q += 1
    return (S.FOUND if taken else S.NO_MATCHED_MESSAGE), q, taken, filtered


@given(scenarios())
# The 800-entry scan limit binds: nothing matches in a 1000-entry file, and sparse matches within it.
@example((1000, [(0, "A")] * 1000, [Read(0, 150, 32, "C"), Read(0, 0, 5, "B"), Read(0, 100, 40, "A || B")]))
@example((1000, [(0, "A" if i % 500 == 0 else "B") for i in range(1000)], [Read(0, 1, 32, "A"), Read(0, 0, 2, "A")]))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_get_message_matches_the_model(scenario: tuple[int, list[tuple[int, str | None]], list[Read]]) -> None:
    cq_entries, puts, reads = scenario
    config = small_config(mapped_file_size_commit_log=1 << 20, mapped_file_size_consume_queue=20 * cq_entries)
    queues: dict[int, list[str | None]] = {0: [], 1: [], 2: []}
    with (
        tempfile.TemporaryDirectory() as d,
        rmq.MessageStore(d, config) as s,
    ):
        for qid, tag in puts:
            s.put("T", b"q%d-%d" % (qid, len(queues[qid])), queue_id=qid, tags=tag)
            queues[qid].append(tag)
        assert s.wait_dispatched()
        for read in reads:
            queue = queues[read.queue_id]
            status, next_offset, offsets, filtered = expected(queue, read, cq_entries)
            r = s.get_message("G", "T", read.queue_id, read.offset, read.max_msgs, read.sub)
            got = (r.status, r.next_begin_offset, r.queue_offsets)
            assert got == (status, next_offset, offsets), read
            assert (r.min_offset, r.max_offset) == ((0, len(queue)) if queue else (0, 0))
            assert r.filter_message_count == filtered
            assert [m.body for m in r.messages] == [b"q%d-%d" % (read.queue_id, q) for q in offsets]
            assert [m.tags for m in r.messages] == [queue[q] for q in offsets]
            assert not r.suggest_pulling_from_slave
