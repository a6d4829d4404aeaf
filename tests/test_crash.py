"""Crashes and damaged files: a real kill -9 of a writing process at random points, torn tails (garbage, and
cut at every byte), corruption in the middle of the last segment, zero-filled and empty trailing segments.

Nothing acknowledged may be lost or duplicated; a torn tail left by a killed process is discarded; bytes a kill
cannot leave (damage) make opening fail with `CorruptionError` and leave every file as it was, unless the store
is opened with recovery="truncate" or "salvage".
"""

from __future__ import annotations

import inspect
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import rmq
from conftest import SEGMENT, SMALL, SMALL_DERIVED, small_config, snapshot


def body(i: int) -> bytes:
    """Message i's body: its index, then a length that varies so records straddle segment ends differently."""
    return b"%d:" % i + bytes([i % 251 + 1]) * (i % 97)


# The writer: one line per acknowledged put, `offset queue_offset i queue_id` per message (a batch: 3 messages).
CHILD = (
    inspect.getsource(body)
    + f"SMALL_DERIVED = {SMALL_DERIVED!r}\n"
    + textwrap.dedent(
        """
    import sys
    import rmq

    store = rmq.MessageStore(sys.argv[1], rmq.StoreConfig(mapped_file_size_commit_log=4096, **SMALL_DERIVED))
    i = int(sys.argv[2])
    print("ready", flush=True)
    while True:
        q = i % 3
        if i % 10 == 9:
            r = store.put_batch("Crash", [body(i), body(i + 1), body(i + 2)], queue_id=q)
            acks = ["%d %d %d %d" % (o, r.queue_offset + k, i + k, q) for k, o in enumerate(r.offsets)]
            print(" ".join(acks), flush=True)
            i += 3
        else:
            r = store.put("Crash", body(i), queue_id=q, keys=["k%d" % i, "g%d" % (i // 4)])
            print(r.wrote_offset, r.queue_offset, i, q, flush=True)
            i += 1
    """
    )
)
Ack = tuple[int, int, int, int]  # offset, queue offset, i, queue id


def crashed(store_dir: Path) -> None:
    """Makes the store look as a process killed during its last put leaves it: the abort file of the run that
    did not close, and no consume-queue or index entry for the unfinished put (nothing dispatches a record
    before its commit word is written). The derived files are rebuilt on open."""
    (store_dir / "abort").write_bytes(b"")
    for d in ("consumequeue", "index"):
        shutil.rmtree(store_dir / d, ignore_errors=True)


def index_of(m: rmq.MessageExt) -> int:
    return int(m.body.split(b":", 1)[0])


def run_and_kill(store_dir: Path, start: int, kill_after_lines: int, rng: random.Random) -> list[Ack]:
    """Starts a writer at message `start`, reads `kill_after_lines` acknowledgements, then SIGKILLs it."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(store_dir), str(start)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    acked: list[Ack] = []
    try:
        assert child.stdout is not None
        first = child.stdout.readline()
        assert first == b"ready\n", child.stderr.read() if child.stderr else first
        for _ in range(kill_after_lines):
            line = child.stdout.readline()
            assert line, "the writer stopped early"
            nums = [int(x) for x in line.split()]
            acked.extend((nums[k], nums[k + 1], nums[k + 2], nums[k + 3]) for k in range(0, len(nums), 4))
        if rng.random() < 0.5:
            time.sleep(rng.random() / 200)  # let the writer run on a little: kill somewhere in a later put
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=60) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=60)
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()
    return acked


def check_log(store: rmq.MessageStore, acked: list[Ack]) -> int:
    """Every acknowledged message is where the writer was told; the log holds messages 0..n-1 exactly once."""
    msgs = list(store.scan())
    indices = [index_of(m) for m in msgs]
    assert indices == list(range(len(msgs)))  # in order, nothing duplicated, nothing missing in between
    assert len(msgs) >= (max(a[2] for a in acked) + 1 if acked else 0)
    by_offset = {m.commitlog_offset: m for m in msgs}
    for off, qoff, i, q in acked:
        m = by_offset[off]
        assert (index_of(m), m.queue_offset, m.queue_id, m.body) == (i, qoff, q, body(i))
    per_queue: dict[int, list[int]] = {}
    for m in msgs:
        per_queue.setdefault(m.queue_id, []).append(m.queue_offset)
    for q, offsets in per_queue.items():
        assert offsets == list(range(len(offsets)))
        assert store.next_queue_offset("Crash", q) == len(offsets)
        # Opening dispatched whatever the crash left undone: each queue lists exactly its messages.
        assert store.get_max_offset_in_queue("Crash", q) == len(offsets)
        entries = [(e.queue_offset, e.commitlog_offset, e.size) for e in store.iter_queue("Crash", q)]
        assert entries == [(m.queue_offset, m.commitlog_offset, m.store_size) for m in msgs if m.queue_id == q]
    # Every key finds its message once (single puts carry k<i> and a group key g<i//4>; all carry UNIQ_KEY).
    for m in msgs[-40:]:
        found = store.query_message("Crash", m.uniq_key, 64).messages
        assert [f.commitlog_offset for f in found] == [m.commitlog_offset]
        if m.keys:
            found = store.query_message("Crash", m.keys[0], 64).messages
            assert [f.commitlog_offset for f in found] == [m.commitlog_offset]
    return len(msgs)


@pytest.mark.parametrize("seed", [11, 22, 33, 44])
def test_kill_9_loses_nothing_acknowledged(store_dir: Path, seed: int) -> None:
    rng = random.Random(seed)
    acked: list[Ack] = []
    stored = 0
    for _ in range(3):
        acked += run_and_kill(store_dir, stored, rng.randint(1, 600), rng)
        with rmq.MessageStore(store_dir, SMALL) as store:
            assert store.unclean_shutdown
            assert store.open_report["end_offset"] == store.max_offset
            stored = check_log(store, acked)
    with rmq.MessageStore(store_dir, SMALL) as store:
        assert not store.unclean_shutdown
        nexts = {q: store.next_queue_offset("Crash", q) for q in range(3)}
        for q in range(3):
            r = store.put("Crash", body(stored), queue_id=q)
            assert r.queue_offset == nexts[q]
            acked.append((r.wrote_offset, r.queue_offset, stored, q))
            stored += 1
    with rmq.MessageStore(store_dir, SMALL) as store:
        assert not store.unclean_shutdown and store.open_report["discarded_bytes"] == 0
        assert [index_of(m) for m in store.scan()] == list(range(stored))
        assert len(store.commitlog_files()) > 1


# --- torn tails -------------------------------------------------------------------------------------------


def write_messages(store_dir: Path, count: int, cfg: rmq.StoreConfig = SMALL) -> tuple[list[int], int]:
    with rmq.MessageStore(store_dir, cfg) as store:
        offsets = [store.put("T", b"m%02d" % i + b"x" * 47).wrote_offset for i in range(count)]
        return offsets, store.max_offset


def segment_of(store_dir: Path, offset: int) -> Path:
    return store_dir / "commitlog" / f"{offset - offset % SEGMENT:020d}"


@pytest.mark.parametrize("garbage", ["random", "ff", "stale record"])
@pytest.mark.parametrize("count", [10, 19])  # 19: the last record is alone at the start of the last segment
def test_torn_tail_is_discarded(store_dir: Path, garbage: str, count: int) -> None:
    offsets, end = write_messages(store_dir, count)
    last = offsets[-1]
    seg = segment_of(store_dir, last)
    assert (last % SEGMENT == 0) == (count == 19)
    data = bytearray(seg.read_bytes())
    pos, size = last % SEGMENT, end - last
    half = size // 2
    if garbage == "random":
        tail = random.Random(7).randbytes(size - half)
    elif garbage == "ff":
        tail = b"\xff" * (size - half)
    else:  # bytes of an older record: a valid magic code, but not a record that belongs here
        tail = bytes(data[0 : size - half])
    data[pos + half : pos + size] = tail
    seg.write_bytes(bytes(data))
    crashed(store_dir)
    with rmq.MessageStore(store_dir, SMALL) as store:
        assert store.unclean_shutdown is True
        report = store.open_report
        assert report["discarded_bytes"] > 0 and report["end_offset"] == last == store.max_offset
        assert report["torn_bytes"] == report["discarded_bytes"] and report["damage"] == []
        assert [m.commitlog_offset for m in store.scan()] == offsets[:-1]
        assert store.read(last) is None
        assert store.next_queue_offset("T", 0) == count - 1
        again = store.put("T", b"after the tear")
        assert (again.wrote_offset, again.queue_offset) == (last, count - 1)
    assert seg.read_bytes()[pos + again.wrote_bytes : pos + size] == bytes(size - again.wrote_bytes)
    with rmq.MessageStore(store_dir, SMALL) as store:
        assert store.open_report["discarded_bytes"] == 0
        assert [m.commitlog_offset for m in store.scan()] == [*offsets[:-1], last]
        m = store.read(last)
        assert m is not None and m.body == b"after the tear" and m.queue_offset == count - 1


def test_torn_tail_cut_at_every_byte_before_the_body_ends(store_dir: Path) -> None:
    """A write that stopped after `cut` bytes of the last record (the rest still zeros). Without a whole-record
    CRC only the body is checksummed, so the cuts checked here are those that damage the header or body."""
    offsets, end = write_messages(store_dir, 10)
    last, seg = offsets[-1], segment_of(store_dir, offsets[-1])
    body_end = 88 + 50  # v1, IPv4 hosts: the body starts at 88
    original = seg.read_bytes()
    for cut in range(0, body_end):
        data = bytearray(original)
        data[last + cut : end] = bytes(end - last - cut)
        seg.write_bytes(bytes(data))
        crashed(store_dir)
        with rmq.MessageStore(store_dir, SMALL) as store:
            assert store.max_offset == last, cut
            assert len(list(store.scan())) == 9
    seg.write_bytes(original)


def test_torn_tail_cut_at_every_byte_with_whole_record_crc(store_dir: Path) -> None:
    cfg = small_config(enabled_append_prop_crc=True, force_verify_prop_crc=True)
    offsets, end = write_messages(store_dir, 10, cfg)
    last, seg = offsets[-1], segment_of(store_dir, offsets[-1])
    original = seg.read_bytes()
    for cut in range(0, end - last):
        data = bytearray(original)
        data[last + cut : end] = bytes(end - last - cut)
        seg.write_bytes(bytes(data))
        crashed(store_dir)
        with rmq.MessageStore(store_dir, cfg) as store:
            assert store.max_offset == last, cut
            assert [m.commitlog_offset for m in store.scan()] == offsets[:-1]
    seg.write_bytes(original)
    with rmq.MessageStore(store_dir, cfg) as store:
        assert [m.commitlog_offset for m in store.scan()] == offsets


# --- corruption in the middle -----------------------------------------------------------------------------

CORRUPTIONS = {
    "body byte": 88 + 10,
    "total size": 3,
    "magic": 5,
    "physical offset": 35,
}


@pytest.mark.parametrize("field", list(CORRUPTIONS))
@pytest.mark.parametrize("which", ["first of the last segment", "middle of the last segment"])
def test_corrupt_record_before_valid_ones_refuses_to_open(store_dir: Path, field: str, which: str) -> None:
    offsets, _ = write_messages(store_dir, 60)
    in_last = [o for o in offsets if o >= offsets[-1] - offsets[-1] % SEGMENT]
    assert len(in_last) > 4
    bad = in_last[0] if which.startswith("first") else in_last[2]
    seg = segment_of(store_dir, bad)
    data = bytearray(seg.read_bytes())
    at = bad % SEGMENT + CORRUPTIONS[field]
    data[at] ^= 0x5A
    seg.write_bytes(bytes(data))
    before = snapshot(store_dir)
    for _ in range(2):  # the failed open released the lock: the second attempt fails the same way
        with pytest.raises(rmq.CorruptionError) as info:
            rmq.MessageStore(store_dir, SMALL)
        assert info.value.offset == bad and info.value.path == str(seg)
        assert info.value.status is None and str(bad) in str(info.value)
        assert snapshot(store_dir) == before
    data[at] ^= 0x5A
    seg.write_bytes(bytes(data))
    with rmq.MessageStore(store_dir, SMALL) as store:
        assert not store.unclean_shutdown
        assert [m.commitlog_offset for m in store.scan()] == offsets


def test_body_crc_not_checked_when_check_crc_on_recover_is_off(store_dir: Path) -> None:
    offsets, _ = write_messages(store_dir, 60)
    bad = [o for o in offsets if o >= offsets[-1] - offsets[-1] % SEGMENT][1]
    seg = segment_of(store_dir, bad)
    data = bytearray(seg.read_bytes())
    data[bad % SEGMENT + 100] ^= 0xFF
    seg.write_bytes(bytes(data))
    cfg = small_config(check_crc_on_recover=False)
    with rmq.MessageStore(store_dir, cfg) as store:
        assert [m.commitlog_offset for m in store.scan()] == offsets
        m = store.read(bad)
        assert m is not None and not m.body_crc_ok
        assert all(x.body_crc_ok for x in store.scan() if x.commitlog_offset != bad)


@pytest.mark.parametrize("count", [20, 19, 1])  # 19 and 1: the last segment holds a single record
def test_force_verify_prop_crc_never_destroys_records_written_without_it(store_dir: Path, count: int) -> None:
    """Records written with enabled_append_prop_crc off have no __CRC32# property (spec 2.3). Opening such a store
    with force_verify_prop_crc=True may refuse, but must not zero the records as if they were a torn tail."""
    offsets, _ = write_messages(store_dir, count)
    before = snapshot(store_dir / "commitlog")
    cfg = small_config(force_verify_prop_crc=True)
    try:
        with rmq.MessageStore(store_dir, cfg):
            pass
    except rmq.RmqError:
        pass
    assert snapshot(store_dir / "commitlog") == before
    with rmq.MessageStore(store_dir, SMALL) as store:
        assert [m.commitlog_offset for m in store.scan()] == offsets


# --- trailing segments left by a crash --------------------------------------------------------------------


def test_zero_filled_next_segments_are_deleted_as_rocketmq_does(store_dir: Path) -> None:
    """RocketMQ pre-allocates the next segment; after a crash it survives all-zero, and RocketMQ's recovery
    (`truncateDirtyFiles`) deletes every file starting after the end. rmq does the same."""
    offsets, end = write_messages(store_dir, 10)
    assert end < SEGMENT
    spare = [store_dir / "commitlog" / f"{n * SEGMENT:020d}" for n in (1, 2)]
    for f in spare:
        f.write_bytes(bytes(SEGMENT))  # pre-allocated, never written
    with rmq.MessageStore(store_dir, SMALL) as store:
        assert store.max_offset == end and store.open_report["discarded_bytes"] == 0
        assert store.open_report["removed_files"] == 2
        assert not any(f.exists() for f in spare)
        assert [m.commitlog_offset for m in store.scan()] == offsets
        more = [store.put("T", b"n%02d" % i + b"y" * 200).wrote_offset for i in range(30)]
        assert any(o >= SEGMENT for o in more)
    with rmq.MessageStore(store_dir, SMALL) as store:
        assert [m.commitlog_offset for m in store.scan()] == offsets + more
        assert store.next_queue_offset("T", 0) == 40
        assert store.open_report["removed_files"] == 0


def test_empty_last_segment_is_removed(store_dir: Path) -> None:
    offsets, end = write_messages(store_dir, 10)
    empty = store_dir / "commitlog" / f"{SEGMENT:020d}"
    empty.write_bytes(b"")
    with rmq.MessageStore(store_dir, SMALL) as store:
        assert not empty.exists() and store.max_offset == end
        assert [m.commitlog_offset for m in store.scan()] == offsets


def _next_file(store_dir: Path, kind: str) -> tuple[Path, int]:
    """Where the next file of `kind` would be made, and the size files of that directory have under SMALL."""
    if kind == "index":
        return store_dir / "index" / "29991231235959999", 40 + 512 * 4 + 2048 * 20
    if kind == "commitlog":
        d, size = store_dir / "commitlog", SEGMENT
    else:
        d, size = store_dir / "consumequeue" / "T" / "0", 6000
    return d / f"{int(sorted(d.iterdir())[-1].name) + size:020d}", size


def _keyed_messages(store_dir: Path, count: int) -> list[int]:
    with rmq.MessageStore(store_dir, SMALL) as store:
        return [store.put("T", b"m%02d" % i + b"x" * 47, keys=f"k{i}").wrote_offset for i in range(count)]


@pytest.mark.parametrize("kind", ["commitlog", "consumequeue", "index"])
@pytest.mark.parametrize("part", ["one byte", "half", "all but one byte"])
def test_a_short_newest_file_of_zeros_is_removed(store_dir: Path, kind: str, part: str) -> None:
    # A power loss while a new file's space was being claimed leaves it shorter than its siblings and all zeros
    # (ext4 grows the length of a file being allocated in steps, each in a journal transaction of its own); the
    # file is used only once its full length is synced, so it holds nothing. RocketMQ refuses to start on it.
    offsets = _keyed_messages(store_dir, 10)
    short, size = _next_file(store_dir, kind)
    short.write_bytes(bytes({"one byte": 1, "half": size // 2, "all but one byte": size - 1}[part]))
    with rmq.MessageStore(store_dir, SMALL) as store:
        assert not short.exists()
        assert [m.commitlog_offset for m in store.scan()] == offsets
        assert len(store.get_message("g", "T", 0, 0, 32).messages) == 10
        assert [m.commitlog_offset for m in store.query_message("T", "k7", 32).messages] == [offsets[7]]
        more = store.put("T", b"after", keys="k10").wrote_offset
    with rmq.MessageStore(store_dir, SMALL) as store:
        assert [m.commitlog_offset for m in store.scan()] == [*offsets, more]
        assert [m.commitlog_offset for m in store.query_message("T", "k10", 32).messages] == [more]


@pytest.mark.parametrize("kind", ["commitlog", "consumequeue", "index"])
def test_a_short_newest_file_with_data_is_refused_and_a_reader_removes_nothing(store_dir: Path, kind: str) -> None:
    """A short newest commitlog or consume-queue file holding data is refused; an index file is rebuilt."""
    _keyed_messages(store_dir, 10)
    short, size = _next_file(store_dir, kind)
    data = bytearray(size // 2)
    data[random.randrange(len(data))] = 1
    short.write_bytes(bytes(data))
    before = snapshot(store_dir)
    if kind == "index":
        # The index is derived: the file is left out and its range rebuilt from the commitlog, in memory by a
        # read-only open (which changes nothing), on disk by a writable one (which removes the file).
        for read_only in (True, False):
            with rmq.MessageStore(store_dir, SMALL, read_only=read_only) as store:
                assert any(str(short) in r and "truncated" in r for r in store.recovery_report["rebuilt_index_files"])
                assert [len(store.query_message("T", f"k{i}", 32).messages) for i in range(10)] == [1] * 10
            if read_only:
                assert snapshot(store_dir) == before
        assert not short.exists()
        return
    with pytest.raises(rmq.CorruptionError, match="truncated") as info:
        rmq.MessageStore(store_dir, SMALL)
    assert info.value.path == str(short)
    assert snapshot(store_dir) == before
    short.write_bytes(bytes(size // 2))  # zeros: an interrupted creation, which a read-only open leaves in place
    before = snapshot(store_dir)
    with rmq.MessageStore(store_dir, SMALL, read_only=True) as store:
        assert len(store.get_message("g", "T", 0, 0, 32).messages) == 10
    assert snapshot(store_dir) == before


# --- damaged directories: refused, and left as they were -------------------------------------------------


def test_missing_middle_segment_refuses_to_open(store_dir: Path) -> None:
    write_messages(store_dir, 60)
    (store_dir / "commitlog" / f"{SEGMENT:020d}").unlink()
    before = snapshot(store_dir)
    with pytest.raises(rmq.CorruptionError) as info:
        rmq.MessageStore(store_dir, SMALL)
    assert info.value.offset == 2 * SEGMENT and info.value.path == str(store_dir / "commitlog" / f"{2 * SEGMENT:020d}")
    assert snapshot(store_dir) == before


def test_stray_file_in_the_commitlog_directory_refuses_to_open(store_dir: Path) -> None:
    write_messages(store_dir, 30)
    stray = store_dir / "commitlog" / "notes.txt"
    stray.write_text("not a segment")
    before = snapshot(store_dir)
    with pytest.raises(rmq.CorruptionError) as info:
        rmq.MessageStore(store_dir, SMALL)
    assert info.value.path == str(stray)
    assert snapshot(store_dir) == before


def test_short_middle_segment_refuses_to_open(store_dir: Path) -> None:
    write_messages(store_dir, 60)
    short = store_dir / "commitlog" / f"{SEGMENT:020d}"
    os.truncate(short, SEGMENT // 2)
    before = snapshot(store_dir)
    with pytest.raises(rmq.RmqError) as info:
        rmq.MessageStore(store_dir, SMALL)
    assert str(short) in str(info.value)
    assert snapshot(store_dir) == before


def test_expired_first_segment_moves_min_offset(store_dir: Path) -> None:
    offsets, _ = write_messages(store_dir, 60)
    (store_dir / "commitlog" / f"{0:020d}").unlink()  # as cleanup of an expired file leaves the log
    with rmq.MessageStore(store_dir, SMALL) as store:
        kept = [o for o in offsets if o >= SEGMENT]
        assert store.min_offset == SEGMENT and [m.commitlog_offset for m in store.scan()] == kept
        assert store.read(0) is None
        assert store.next_queue_offset("T", 0) == 60  # rebuilt from the queue offsets still stored
        assert store.put("T", b"next").queue_offset == 60
