"""A damaged consume-queue entry never moves a message to another queue offset.

Tried as a user would on main: one entry in the middle of a queue (queue offset 23 of 25) whose commitlog
offset was overwritten to point past the end of the log. The open cut the queue there (RocketMQ's
`truncateDirtyLogicFiles`), but dispatch restarted where the furthest queue ended, after the records of the
entries cut: the message of queue offset 23 was lost from its queue, the one of 24 was written at 23, and the
next put would have been given 24 again, all without a word; the next open found it and repaired it. Now the
cut is reported and the queue is dispatched again from its new last entry."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rmq
from conftest import small_config

CFG = small_config(max_hash_slot_num=16, max_index_num=32)
N = 150
QUEUES = [(t, q) for t in ("A", "B") for q in range(3)]


def topic_queue(i: int) -> tuple[str, int]:
    return ("A", "B")[i % 2], i % 3


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[tuple[str, int], list[int]]]:
    """N messages over two topics of three queues, closed cleanly; each queue's commitlog offsets in order."""
    root = tmp_path_factory.mktemp("cq") / "s"
    queues: dict[tuple[str, int], list[int]] = {k: [] for k in QUEUES}
    with rmq.MessageStore(root, CFG) as s:
        for i in range(N):
            t, q = topic_queue(i)
            queues[(t, q)].append(s.put(t, b"m%03d" % i + b"." * (50 + i % 30), queue_id=q, keys=f"k{i}").wrote_offset)
    return root, queues


def assert_every_message_at_its_queue_offset(root: Path, queues: dict[tuple[str, int], list[int]]) -> None:
    with rmq.MessageStore(root, CFG) as s:
        for (t, q), offsets in queues.items():
            entries = s._cq_entries(t, q, 0, 1000)
            assert [e[1] for e in entries] == offsets, (t, q)
            for qo, off, _, _ in entries:
                m = s.read(off)
                assert m is not None and m.queue_offset == qo
            assert s.get_max_offset_in_queue(t, q) == len(offsets)
        # The next put takes the next queue offset, never one a message holds.
        assert s.put("B", b"next", queue_id=2).queue_offset == len(queues[("B", 2)])
    with rmq.MessageStore(root, CFG) as s:
        assert s.recovery_report["rebuilt_queues"] == [], s.recovery_report["rebuilt_reasons"]


def test_an_entry_damaged_to_point_past_the_log_in_the_middle_of_a_queue(
    template: tuple[Path, dict[tuple[str, int], list[int]]], tmp_path: Path
) -> None:
    src, queues = template
    root = tmp_path / "s"
    shutil.copytree(src, root)
    n = len(queues[("B", 2)])
    victim = n - 2  # with one good entry after it
    cq = root / "consumequeue" / "B" / "2" / f"{0:020d}"
    data = bytearray(cq.read_bytes())
    data[victim * 20 + 4 : victim * 20 + 10] = b"pppppp"  # its commitlog offset far past the end, and its size
    cq.write_bytes(data)
    with rmq.MessageStore(root, CFG) as s:
        assert s.recovery_report["rebuilt_queues"] == ["B/2"]
        assert f"entry {victim} points past the end" in s.recovery_report["rebuilt_reasons"][0]
    assert_every_message_at_its_queue_offset(root, queues)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    which=st.sampled_from(QUEUES),
    where=st.floats(0, 1, exclude_max=True),
    field=st.sampled_from([(0, 8), (4, 10), (8, 12), (0, 20)]),
    fill=st.sampled_from([b"\x00", b"\x70", b"\xff", b"\x01"]),
    abort=st.booleans(),
)
def test_any_damaged_entry_leaves_every_message_at_its_queue_offset(
    template: tuple[Path, dict[tuple[str, int], list[int]]], tmp_path_factory: pytest.TempPathFactory,
    which: tuple[str, int], where: float, field: tuple[int, int], fill: bytes, abort: bool,
) -> None:  # fmt: skip
    """Any entry of any queue with its offset, size or whole bytes overwritten, with or without an abort file:
    after one open every message is at its own queue offset, the next put takes the next one, and the open
    after that repairs nothing. (The open checks only the newest entries of each queue after a clean close;
    an older entry's damage, which does not move the queue's end, is the reader's to find: `get_message`
    reports it and `rmq check` lists it. Such examples are not this test's.)"""
    src, queues = template
    root = tmp_path_factory.mktemp("any") / "s"
    shutil.copytree(src, root)
    t, q = which
    victim = int(where * len(queues[which]))
    cq = root / "consumequeue" / t / str(q) / f"{0:020d}"
    data = bytearray(cq.read_bytes())
    a, b = field
    before = bytes(data[victim * 20 + a : victim * 20 + b])
    data[victim * 20 + a : victim * 20 + b] = fill * (b - a)
    cq.write_bytes(data)
    if abort:
        (root / "abort").write_bytes(b"")
    with rmq.MessageStore(root, CFG, read_only=True) as s:
        found = s.recovery_report["rebuilt_queues"]
    if not found and before != fill * (b - a):
        # Not found at open (an older entry after a clean close): left to the reader. Nothing moved either.
        with rmq.MessageStore(root, CFG, read_only=True) as s:
            entries = s._cq_entries(t, q, 0, 1000)
            assert len(entries) == len(queues[which])
        return
    assert_every_message_at_its_queue_offset(root, queues)


def test_a_queue_rebuilt_over_a_damaged_record_says_its_messages_moved(
    template: tuple[Path, dict[tuple[str, int], list[int]]], tmp_path: Path
) -> None:
    """A damaged consume-queue entry, and a damaged record of the same queue after it in a segment a clean open
    does not validate: the queue is rebuilt from the commitlog, the damaged record is skipped, and the messages
    after it land one queue offset early (RocketMQ's rule: appended at the queue's end). That is reported once,
    naming the record and both offsets, beside the damage skipped; on main only the damage was."""
    src, queues = template
    root = tmp_path / "s"
    shutil.copytree(src, root)
    offsets = queues[("A", 1)]
    seg_size = CFG.mapped_file_size_commit_log
    newest_three = offsets[-1] // seg_size - 2
    q_bad = next(i for i, o in enumerate(offsets) if i > 6 and o // seg_size < newest_three and o % seg_size > 0)
    record = offsets[q_bad]
    seg = root / "commitlog" / f"{record // seg_size * seg_size:020d}"
    data = bytearray(seg.read_bytes())
    data[record % seg_size + 5] ^= 0x40  # its magic code
    seg.write_bytes(data)
    cq = root / "consumequeue" / "A" / "1" / f"{0:020d}"
    data = bytearray(cq.read_bytes())
    data[6 * 20 : 6 * 20 + 8] = bytes(8)  # entry 6's commitlog offset: 0, before entry 5's record
    cq.write_bytes(data)
    with rmq.MessageStore(root, CFG) as s:
        assert s.recovery_report["rebuilt_queues"] == ["A/1"]
        reasons = [r for _, r, _ in s.dispatch_issues()[1]]
        moved = [r for r in reasons if "carries queue offset" in r]
        assert len(moved) == 1 and f"carries queue offset {q_bad + 1} but A/1 is at {q_bad}" in moved[0], reasons
        assert any("bad magic code" in r for r in reasons), reasons


@pytest.mark.parametrize("lost", [1, 3, 25])
def test_newest_entries_lost_after_a_clean_close_are_dispatched_again_and_said(
    template: tuple[Path, dict[tuple[str, int], list[int]]], tmp_path: Path, lost: int
) -> None:
    """Tried as a user would on main: the newest entries of one queue zeroed after a clean close. The open took
    the queue's end as the last entry left: the messages of the lost entries were never read again, the next
    put was given the queue offset of the first of them, and nothing was said (RocketMQ's open does the same).
    Now the open finds the queue's messages after its last entry in the log, says so and dispatches them
    again (all 25 lost: the queue's file is all zeros)."""
    src, queues = template
    root = tmp_path / "s"
    shutil.copytree(src, root)
    t, q = "A", 1
    n = len(queues[(t, q)])
    cq = root / "consumequeue" / t / str(q) / f"{0:020d}"
    data = bytearray(cq.read_bytes())
    data[(n - lost) * 20 : n * 20] = bytes(lost * 20)
    cq.write_bytes(data)
    with rmq.MessageStore(root, CFG, read_only=True) as s:
        assert s.recovery_report["rebuilt_queues"] == [f"{t}/{q}"]
        (why,) = s.recovery_report["rebuilt_reasons"]
        assert f"ends at queue offset {n - lost} after a clean close" in why, why
        assert s.get_max_offset_in_queue(t, q) == n
    assert_every_message_at_its_queue_offset(root, queues)


def test_a_queue_whose_directory_is_gone_after_a_clean_close_stays_gone(
    template: tuple[Path, dict[tuple[str, int], list[int]]], tmp_path: Path
) -> None:
    """A topic deleted by a broker (`deleteTopics` removes its consume queues, the records stay until
    retention) is not brought back by the search for lost entries: a queue without a consume queue is left
    alone, as RocketMQ's open leaves it."""
    src, _ = template
    root = tmp_path / "s"
    shutil.copytree(src, root)
    shutil.rmtree(root / "consumequeue" / "A" / "1")
    with rmq.MessageStore(root, CFG) as s:
        assert s.recovery_report["rebuilt_queues"] == []
        assert s.get_max_offset_in_queue("A", 1) == 0


FIXTURE = Path(__file__).parent / "fixtures" / "rocketmq-5.3.1" / "store"
FIXTURE_CFG = rmq.StoreConfig(
    mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=160, max_hash_slot_num=64, max_index_num=128
)


def queue_answers(root: Path, read_only: bool) -> dict[tuple[str, int], list[int]]:
    with rmq.MessageStore(root, FIXTURE_CFG, read_only=read_only) as s:
        assert s.recovery_report["rebuilt_queues"] == [], s.recovery_report["rebuilt_reasons"]
        return {
            (t, q): [s.get_commitlog_offset_in_queue(t, q, k) for k in range(s.get_max_offset_in_queue(t, q))]
            for t in s.topics()
            for q in s.queue_ids(t)
        }


@pytest.mark.parametrize("damage", ["totalsize", "zeroed page"])
@pytest.mark.parametrize("read_only", [True, False], ids=["read-only", "writable"])
def test_a_damaged_record_in_an_older_segment_leaves_its_queue_as_rocketmq_serves_it(
    tmp_path: Path, damage: str, read_only: bool
) -> None:
    """QA, on a store RocketMQ 5.3.1 wrote and closed cleanly: one bit of a record's TOTALSIZE flipped, in segment 2
    of 6. The open took the record's unreadable bytes for a bad consume-queue entry, cut its queue there and
    dispatched it again without the record: every later message of the queue one queue offset lower than its
    record says, and than RocketMQ (which never looks at that segment) serves; `rmq recover` wrote that. The
    entry is kept now, and get_message reports the record."""
    clean = queue_answers(FIXTURE, read_only=True)
    root = tmp_path / "s"
    shutil.copytree(FIXTURE, root)
    (t, q), offsets = max(clean.items(), key=lambda kv: len(kv[1]))
    k, record = next((k, o) for k, o in enumerate(offsets) if 65536 * 2 <= o < 65536 * 3 and k > 0)
    seg = root / "commitlog" / f"{record // 65536 * 65536:020d}"
    data = bytearray(seg.read_bytes())
    if damage == "totalsize":
        data[record % 65536 + 2] ^= 0x10
    else:
        page = record % 65536 // 4096 * 4096
        data[page : page + 4096] = bytes(4096)
    seg.write_bytes(data)
    assert queue_answers(root, read_only) == clean
    with rmq.MessageStore(root, FIXTURE_CFG, read_only=True) as s:
        r = s.get_message("g", t, q, k, 1)
        assert any(d[1] == record for d in r.damaged), r.damaged


def test_a_newest_queue_file_left_empty_lists_its_queue_once(tmp_path: Path) -> None:
    """A queue's newest consume-queue file truncated to nothing after a clean close is found by two checks (the
    queue ends at a file boundary; the log holds messages of it after its last entry). The recovery report listed
    the queue twice, with a reason each; it is listed once, with both reasons, and every message comes back."""
    cfg = small_config(mapped_file_size_consume_queue=20 * 8)
    root = tmp_path / "s"
    with rmq.MessageStore(root, cfg) as s:
        for i in range(20):
            s.put("T", b"m%d" % i)
        assert s.wait_dispatched(10)
    newest = sorted((root / "consumequeue" / "T" / "0").iterdir())[-1]
    newest.write_bytes(b"")
    for read_only in (True, False):
        with rmq.MessageStore(root, cfg, read_only=read_only) as s:
            assert s.recovery_report["rebuilt_queues"] == ["T/0"], s.recovery_report["rebuilt_reasons"]
            (why,) = s.recovery_report["rebuilt_reasons"]
            assert "after a clean close" in why and "; also: " in why, why
            got = [m.body for o in (0, 8, 16) for m in s.get_message("G", "T", 0, o, 8).messages]
            assert got == [b"m%d" % i for i in range(20)]
