"""`rmq check`: the right finding and verdict for each kind of damage, "clean" on clean stores, exit status
0 / 1 / 2, and not a byte, mtime or file changed."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_read_only import snapshot

import rmq
from conftest import live_writer, small_config
from rmq.check import check_store

SEG = 4096
CONFIG = small_config(mapped_file_size_consume_queue=20 * 8, max_hash_slot_num=16, max_index_num=32)
N = 300


def fill(root: Path) -> list[int]:
    """N messages over 2 topics x 3 queues, a key each; returns their commitlog offsets."""
    offsets = []
    with rmq.MessageStore(root, CONFIG) as store:
        for i in range(N):
            r = store.put(("ChkA", "ChkB")[i % 2], b"%05d" % i * (1 + i % 5), queue_id=i % 3, keys=f"k{i}")
            offsets.append(r.wrote_offset)
        store.wait_dispatched(10)
    return offsets


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int]]:
    root = tmp_path_factory.mktemp("chk") / "base"
    return root, fill(root)


def segment(root: Path, offset: int) -> tuple[Path, int]:
    return root / "commitlog" / f"{offset - offset % SEG:020}", offset % SEG


def patch(path: Path, pos: int, data: bytes) -> None:
    b = bytearray(path.read_bytes())
    b[pos : pos + len(data)] = data
    path.write_bytes(bytes(b))


def run(root: Path, *extra: str) -> tuple[int, str, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "rmq.cli", "check", str(root), *extra], capture_output=True, text=True, timeout=120
    )
    return proc.returncode, proc.stdout, proc.stderr


def test_clean_store_is_clean(base: tuple[Path, list[int]], tmp_path: Path) -> None:
    root = tmp_path / "s"
    shutil.copytree(base[0], root)
    before = snapshot(root)
    rep = check_store(root, CONFIG)
    assert rep["clean"], rep["findings"]
    assert rep["findings"] == []
    assert (rep["records"], rep["cq_entries"]) == (N, N)
    assert rep["index_entries"] == 2 * N  # UNIQ_KEY and the key
    assert rep["rocketmq_verdict"].startswith("clean") and rep["rmq_verdict"].startswith("clean")
    code, out, err = run(root, "--json")
    assert code == 0, err
    assert json.loads(out)["clean"]
    assert snapshot(root) == before


def last_record(offsets: list[int]) -> int:
    return offsets[-1]


Case = Callable[[Path, list[int]], None]


def flip_early_body(root: Path, offsets: list[int]) -> None:
    path, pos = segment(root, offsets[3])
    b = bytearray(path.read_bytes())
    b[pos + 200] ^= 0x40  # inside the body of record 3 (bodies start after ~100 header bytes)
    path.write_bytes(bytes(b))


def garbage_in_last_segment(root: Path, offsets: list[int]) -> None:
    path, pos = segment(root, offsets[-5])
    patch(path, pos, b"\xff" * 12)


def garbage_after_the_end(root: Path, offsets: list[int]) -> None:
    with rmq.MessageStore(root, CONFIG, read_only=True) as store:
        end = store.max_offset
    path, pos = segment(root, end)
    patch(path, pos, bytes(range(1, 101)))


def torn_tail(root: Path, offsets: list[int]) -> None:
    with rmq.MessageStore(root, CONFIG, read_only=True) as store:
        end = store.max_offset
    path, pos = segment(root, end)
    patch(path, pos, b"\x00" * 8 + bytes(range(1, 90)))
    (root / "abort").write_bytes(b"")


def preallocated_segment(root: Path, offsets: list[int]) -> None:
    last = sorted((root / "commitlog").iterdir())[-1]
    (root / "commitlog" / f"{int(last.name) + SEG:020}").write_bytes(bytes(SEG))


def cq_past_the_log(root: Path, offsets: list[int]) -> None:
    last = sorted((root / "consumequeue" / "ChkA" / "0").iterdir())[-1]
    data = last.read_bytes()
    n = len(data.rstrip(b"\x00")) // 20
    patch(last, 20 * (n - 1), struct.pack(">qiq", 10**9, 100, 0))


def cq_not_dense(root: Path, offsets: list[int]) -> None:
    first = sorted((root / "consumequeue" / "ChkB" / "1").iterdir())[0]
    data = first.read_bytes()
    patch(first, 0, data[20:40] + data[0:20])


def index_slot_zeroed(root: Path, offsets: list[int]) -> None:
    f = sorted((root / "index").iterdir())[1]
    data = f.read_bytes()
    slot = next(i for i in range(16) if data[40 + 4 * i : 44 + 4 * i] != b"\x00" * 4)
    patch(f, 40 + 4 * slot, b"\x00" * 4)


def checkpoint_ahead(root: Path, offsets: list[int]) -> None:
    patch(root / "checkpoint", 0, struct.pack(">q", 2**62))


def checkpoint_zeroed(root: Path, offsets: list[int]) -> None:
    patch(root / "checkpoint", 0, bytes(40))


def offsets_past_the_end(root: Path, offsets: list[int]) -> None:
    cfg = root / "config"
    cfg.mkdir(exist_ok=True)
    m = rmq.ConsumerOffsetManager(cfg / "consumerOffset.json")
    m.commit_offset("G", "ChkA", 0, 10**6)
    m.persist()


CASES: dict[str, tuple[Case, str, str, str]] = {
    # name: (damage, area, kind, a phrase the RocketMQ verdict holds)
    "flipped body, first segment": (flip_early_body, "commitlog", "damage", "would not look at offset"),
    "garbage, last segment": (garbage_in_last_segment, "commitlog", "damage", "would truncate the commitlog at"),
    "garbage after the end": (garbage_after_the_end, "commitlog", "damage", "nothing valid follows"),
    "torn tail after a crash": (torn_tail, "commitlog", "torn", "nothing valid follows"),
    "pre-allocated empty segment": (preallocated_segment, "commitlog", "note", "clean"),
    "consume queue past the log": (cq_past_the_log, "consumequeue", "stale", "clean"),
    "consume queue not dense": (cq_not_dense, "consumequeue", "stale", "clean"),
    "index slot zeroed": (index_slot_zeroed, "index", "stale", "clean"),
    "checkpoint ahead of the data": (checkpoint_ahead, "checkpoint", "damage", "clean"),
    "checkpoint all zero": (checkpoint_zeroed, "checkpoint", "note", "clean"),
    "offsets past the queue's end": (offsets_past_the_end, "offsets", "damage", "clean"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_each_damage_has_its_finding_and_verdict(base: tuple[Path, list[int]], tmp_path: Path, name: str) -> None:
    damage, area, kind, verdict = CASES[name]
    root = tmp_path / "s"
    shutil.copytree(base[0], root)
    damage(root, base[1])
    before = snapshot(root)
    rep: dict[str, Any] = check_store(root, CONFIG)
    assert snapshot(root) == before, "check changed the store"
    found = [f for f in rep["findings"] if f["area"] == area and f["kind"] == kind]
    assert found, f"{name}: {rep['findings']}"
    assert all(Path(f["path"]).is_relative_to(root) for f in rep["findings"])
    assert verdict in rep["rocketmq_verdict"], rep["rocketmq_verdict"]
    assert rep["clean"] == (kind == "note"), rep["findings"]
    code, out, err = run(root)
    assert code == (0 if kind == "note" else 1), err
    assert ("problems found" in out) == (kind != "note")
    assert snapshot(root) == before


def test_a_segment_after_the_end_that_holds_a_torn_write_is_not_called_empty(
    base: tuple[Path, list[int]], tmp_path: Path
) -> None:
    """Bytes a killed writer left in the segment after the one the log ends in (pre-allocated, then written into
    before the kill) go with the torn write; the note on that segment said it held nothing."""
    root = tmp_path / "s"
    shutil.copytree(base[0], root)
    preallocated_segment(root, base[1])
    ahead = sorted((root / "commitlog").iterdir())[-1]
    patch(ahead, 2000, b"\xab" * 200)
    (root / "abort").write_bytes(b"")
    before = snapshot(root)
    rep: dict[str, Any] = check_store(root, CONFIG)
    assert snapshot(root) == before
    assert not any("hold nothing" in f["what"] for f in rep["findings"]), rep["findings"]
    (note,) = [f for f in rep["findings"] if f["kind"] == "note"]
    assert "torn write" in note["what"], note
    assert rep["clean"] and "discards the torn write" in rep["rmq_verdict"], rep


def test_truncation_verdict_counts_what_rocketmq_drops(base: tuple[Path, list[int]], tmp_path: Path) -> None:
    root = tmp_path / "s"
    shutil.copytree(base[0], root)
    garbage_in_last_segment(root, base[1])
    rep = check_store(root, CONFIG)
    at = base[1][-5]
    assert f"at offset {at}, dropping 4 messages of topics ChkA (2), ChkB (2)" in rep["rocketmq_verdict"]
    assert "refuses to open it (strict)" in rep["rmq_verdict"] and "salvage" in rep["rmq_verdict"]
    first = rep["findings"][0]
    assert (first["offset"], first["kind"]) == (at, "damage") and "4 valid records follow" in first["what"]


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("missing segment", "a segment is missing"),
        ("stray file", "move this file out of the directory"),
        ("truncated segment", "it was truncated"),
    ],
)
def test_unreadable_store_exits_2(base: tuple[Path, list[int]], tmp_path: Path, name: str, says: str) -> None:
    root = tmp_path / "s"
    shutil.copytree(base[0], root)
    segs = sorted((root / "commitlog").iterdir())
    if name == "missing segment":
        segs[1].unlink()
    elif name == "stray file":
        (root / "commitlog" / "notes.txt").write_text("mine")
    else:
        segs[2].write_bytes(segs[2].read_bytes()[:1000])
    before = snapshot(root)
    code, out, err = run(root)
    assert code == 2, (out, err)
    assert says in err and "Traceback" not in err and len(err.splitlines()) == 1, err
    if name == "truncated segment":
        # QA: the advice was "or move the directory aside to rebuild it", which for the commitlog empties the store.
        assert "never move it aside" in err and "rebuild" not in err, err
    assert snapshot(root) == before


def test_a_store_being_written_checks_clean_and_then_a_kill_is_a_torn_write(tmp_path: Path) -> None:
    """`rmq check` beside a live writer. Tried as a user would on main: 14 of 15 checks of a healthy store that
    another process was writing ended in "problems found": index slots and chains read while they changed, index
    and consume-queue entries naming records written after the check's view of the log ended, and once the
    append in progress as commitlog "damage". The check now sees the writer's lock and checks the store as of its
    read-only open, saying so in a note; after the writer is killed, what it leaves is a torn write, not damage."""
    root = tmp_path / "live"
    with live_writer(root) as writer:
        for _ in range(12):
            rep = check_store(root)
            assert rep["clean"], rep["findings"]
            # Beside the note on the writer, the one on the segment it made ahead (when it has).
            (note,) = [f for f in rep["findings"] if "(pre-allocated)" not in f["what"]]
            assert note["kind"] == "note" and f"(process {writer.pid} holds its lock)" in note["what"]
            assert rep["records"] > 0 and rep["rmq_verdict"].startswith("clean")
        code, out, err = run(root)
        assert code == 0, out + err
    rep = check_store(root)
    assert not any(f["kind"] == "damage" for f in rep["findings"]), rep["findings"]
    assert not any("is open for writing" in f["what"] for f in rep["findings"])
    with rmq.MessageStore(root, read_only=True) as s:  # what the check calls torn, the open discards
        assert s.unclean_shutdown


def test_a_store_open_in_this_process_is_checked_as_live(base: tuple[Path, list[int]], tmp_path: Path) -> None:
    root = tmp_path / "s"
    shutil.copytree(base[0], root)
    with rmq.MessageStore(root, CONFIG) as s:
        s.put("T", b"more")
        rep = check_store(root, CONFIG)
        assert rep["clean"] and "(this process holds its lock)" in rep["findings"][0]["what"], rep["findings"]
    assert check_store(root, CONFIG)["findings"] == []


@pytest.mark.parametrize(
    ("lose", "area", "lacking"),
    [
        ("index", "index", f"lacks {2 * N} keys"),  # UNIQ_KEY and the key of every message
        ("consumequeue", "consumequeue", f"lack {N} entries"),
    ],
)
def test_derived_files_lost_after_a_clean_shutdown_are_stale_not_clean(
    base: tuple[Path, list[int]], tmp_path: Path, lose: str, area: str, lacking: str
) -> None:
    """A clean store whose index or consume queues were deleted is not clean: the next open dispatches their
    entries again. It was reported clean (exit 0), whatever the open then had to do."""
    root = tmp_path / "s"
    shutil.copytree(base[0], root)
    shutil.rmtree(root / lose)
    before = snapshot(root)
    rep = check_store(root, CONFIG)
    assert not rep["clean"]
    stale = [f for f in rep["findings"] if f["kind"] == "stale"]
    assert [f["area"] for f in stale] == [area], rep["findings"]
    assert lacking in stale[0]["what"] and "an open" in stale[0]["what"]
    assert ("indexes" if area == "index" else "dispatches") in rep["rmq_verdict"]
    code, out, _ = run(root)
    assert code == 1 and out.rstrip().endswith("problems found")
    assert snapshot(root) == before
    with rmq.MessageStore(root, CONFIG, read_only=True) as view:
        report = view.recovery_report
        assert (report["reindexed_keys"], report["rebuilt_cq_entries"]) == (
            (2 * N, 0) if area == "index" else (0, int(lacking.split()[1]))
        )


@pytest.mark.parametrize("configured", [True, False])
def test_a_queue_whose_consume_queue_is_gone_is_reported(
    base: tuple[Path, list[int]], tmp_path: Path, configured: bool
) -> None:
    """One queue's consume-queue directory gone while the log holds its messages: the open cannot tell lost files
    from a deleted topic (whose messages stay in the log, as in RocketMQ) and leaves them out, so new messages
    of the queue would take their queue offsets again. A topic still configured was not deleted: damage; an
    unconfigured one is a note. Before, the check said nothing and called the store clean."""
    root = tmp_path / "s"
    shutil.copytree(base[0], root)
    if configured:
        with rmq.MessageStore(root, CONFIG) as store:
            store.create_topic("ChkA", queues=3)
    shutil.rmtree(root / "consumequeue" / "ChkA" / "0")
    before = snapshot(root)
    rep = check_store(root, CONFIG)
    found = [f for f in rep["findings"] if f["area"] == "consumequeue"]
    assert [(f["kind"], f["path"]) for f in found] == [
        ("damage" if configured else "note", str(root / "consumequeue" / "ChkA" / "0"))
    ], rep["findings"]
    assert f"the log holds {N // 6} messages of this queue (queue offsets 0-{N // 6 - 1})" in found[0]["what"]
    assert rep["clean"] is not configured
    assert run(root)[0] == (1 if configured else 0)
    assert snapshot(root) == before


def test_a_crashed_writers_undispatched_queues_are_not_called_queueless(tmp_path: Path) -> None:
    """A writer without services (nothing dispatched) killed: its queues have no consume-queue files yet, and
    the open dispatches their records (they lie after where dispatch restarts), making the queues. The check
    said "an open leaves them out of the queue, and new messages of it take their queue offsets again", the
    opposite of its own next note and of what the open does (helper P, power-loss images)."""
    root = tmp_path / "s"
    code = (
        "import os, rmq\n"
        f"s = rmq.MessageStore({str(root)!r}, rmq.StoreConfig(mapped_file_size_commit_log=1 << 20), "
        "start_services=False)\n"
        "for i in range(50):\n"
        "    s.put('T', b'x' * 100, queue_id=i % 2, keys=[f'k{i}'])\n"
        "s.flush()\n"
        "os._exit(9)\n"
    )
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 9
    assert not (root / "consumequeue" / "T").exists()
    rep = check_store(root, rmq.StoreConfig(mapped_file_size_commit_log=1 << 20))
    whats = [f["what"] for f in rep["findings"]]
    assert not any("no consume queue" in w for w in whats), whats
    assert any("the consume queues lack 50 entries" in w and "an open dispatches them" in w for w in whats), whats
    with rmq.MessageStore(root, rmq.StoreConfig(mapped_file_size_commit_log=1 << 20)) as store:
        assert [store.next_queue_offset("T", q) for q in (0, 1)] == [25, 25]


@pytest.mark.parametrize("which", [0, -1], ids=["oldest", "newest"])
def test_a_truncated_index_file_is_rebuilt_not_refused(
    base: tuple[Path, list[int]], tmp_path: Path, which: int
) -> None:
    """QA: one truncated index file (derived from the commitlog) made every read-only command refuse the store
    (`rmq check` exit 2, no report) and a writable open refuse it. It is left out now and its range rebuilt from
    the commitlog: in memory by a read-only open (check reports it), on disk by a writable one."""
    root = tmp_path / "s"
    shutil.copytree(base[0], root)
    index = sorted((root / "index").iterdir())
    assert len(index) >= 2, index
    victim = index[which]
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    before = snapshot(root)
    code, out, err = run(root)
    assert code == 1 and "problems found" in out and "it was truncated" in out, (out, err)
    assert snapshot(root) == before
    keys = [f"k{i}" for i in range(0, 300, 7)]

    def found(s: rmq.MessageStore) -> list[int]:  # each key names one message, of one of the two topics
        return [sum(len(s.query_message(t, k, 32, 0, 2**62).messages) for t in ("ChkA", "ChkB")) for k in keys]

    with rmq.MessageStore(root, CONFIG, read_only=True) as view:
        assert found(view) == [1] * len(keys), view.recovery_report
        assert any("it was truncated" in r for r in view.recovery_report["rebuilt_index_files"])
    assert snapshot(root) == before
    with rmq.MessageStore(root, CONFIG) as store:
        assert found(store) == [1] * len(keys)
    code, out, err = run(root)
    assert code == 0, (out, err)


def test_a_records_changed_keys_are_named_as_a_cause_of_an_index_mismatch(
    base: tuple[Path, list[int]], tmp_path: Path
) -> None:
    """A record's properties carry no CRC: a changed byte in its KEYS is seen only as index entries that no longer
    match it. Check must not blame the index alone for it: it says the message's keys may be what changed."""
    root = tmp_path / "s"
    shutil.copytree(base[0], root)
    path, pos = segment(root, base[1][7])
    data = path.read_bytes()
    at = data.index(b"KEYS\x01k7\x02", pos)
    patch(path, at + 6, b"X")  # KEYS k7 -> kX
    rep: dict[str, Any] = check_store(root, CONFIG)
    found = [f for f in rep["findings"] if f["area"] == "index"]
    assert found and "the message there has no key of the entry's hash" in found[0]["what"], rep["findings"]
    assert "the message's keys are: its properties carry no CRC" in found[0]["what"], found
    assert not [f for f in rep["findings"] if f["area"] == "commitlog"], rep["findings"]  # the body CRC holds
