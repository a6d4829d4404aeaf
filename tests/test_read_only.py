"""Read-only open (`rmq.MessageStore(path, read_only=True)`): writes nothing at all (no byte, no mtime, no file
created, deleted or resized), serves what a writable open serves (working out a torn tail, lost or damaged
consume queues and index in memory), refuses every writing call with `ReadOnlyError`, works on a read-only
mount, and beside a live writer sees a consistent prefix that `refresh()` extends.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import rmq
from conftest import SEGMENT, small_config
from rmq.check import check_store

CONFIG = small_config(mapped_file_size_consume_queue=20 * 8, max_hash_slot_num=16, max_index_num=32)
TOPICS = ("RoA", "RoB")
FIXTURE = Path(__file__).parent / "fixtures" / "rocketmq-5.3.1" / "store"


def untimed(report: dict[str, Any]) -> dict[str, Any]:
    """A recovery report without its timings (which differ from one open to the next)."""
    return {k: v for k, v in report.items() if not k.endswith("_seconds")}


def snapshot(root: Path) -> dict[str, tuple[object, ...]]:
    """Every path under `root` (and root itself): kind, size, mtime and, for files, the bytes."""
    out: dict[str, tuple[object, ...]] = {}
    for p in [root, *sorted(root.rglob("*"))]:
        st = p.lstat()
        rel = str(p.relative_to(root))
        if p.is_dir():
            out[rel] = ("dir", st.st_mtime_ns, st.st_mode)
        else:
            out[rel] = ("file", st.st_size, st.st_mtime_ns, st.st_mode, p.read_bytes())
    return out


def fill(root: Path, n: int = 240) -> None:
    with rmq.MessageStore(root, CONFIG) as store:
        for i in range(n):
            store.put(TOPICS[i % 2], f"m{i:04}".encode() * (1 + i % 9), queue_id=i % 3, tags=f"t{i % 4}", keys=f"k{i}")
        store.wait_dispatched(10)


def served(store: rmq.MessageStore) -> dict[str, object]:
    """Everything a reader gets: every queue's messages by get_message, every key's offsets, the ranges."""
    out: dict[str, object] = {}
    for topic in TOPICS:
        for q in range(3):
            got, offset = [], 0
            while True:
                r = store.get_message("g", topic, q, offset, 32)
                if r.status.name != "FOUND":
                    break
                got += [(m.queue_offset, m.commitlog_offset, m.body) for m in r.messages]
                offset = r.next_begin_offset
            out[f"{topic}/{q}"] = got
            out[f"{topic}/{q} range"] = (
                store.get_min_offset_in_queue(topic, q),
                store.get_max_offset_in_queue(topic, q),
            )
    for i in range(240):
        res = store.query_message(TOPICS[i % 2], f"k{i}", 64)
        out[f"k{i}"] = sorted(m.commitlog_offset for m in res.messages)
    out["end"] = store.max_offset
    return out


def crashed_copy(src: Path, dst: Path) -> None:
    """`src` as a killed writer leaves it: the abort file, and a torn append after the last record (its commit
    word not written, the rest of its bytes there)."""
    shutil.copytree(src, dst)
    (dst / "abort").write_bytes(b"")
    with rmq.MessageStore(src, CONFIG, read_only=True) as store:
        end = store.max_offset
    seg = CONFIG.mapped_file_size_commit_log
    path = dst / "commitlog" / f"{end - end % seg:020}"
    data = bytearray(path.read_bytes())
    pos = end % seg
    tail = b"\x00" * 8 + bytes(range(1, 120))
    data[pos : pos + len(tail)] = tail[: len(data) - pos]
    path.write_bytes(bytes(data))


DAMAGE: dict[str, Callable[[Path], None]] = {
    "clean": lambda root: None,
    "no consumequeue": lambda root: shutil.rmtree(root / "consumequeue"),
    "no index": lambda root: shutil.rmtree(root / "index"),
    "no checkpoint": lambda root: (root / "checkpoint").unlink(),
    "consume queue cut short": lambda root: [
        f.write_bytes(f.read_bytes()[:40] + bytes(len(f.read_bytes()) - 40))
        for f in sorted((root / "consumequeue" / "RoA" / "0").iterdir())[-1:]
    ],
    "index slot zeroed": lambda root: [
        f.write_bytes(f.read_bytes()[:40] + bytes(64) + f.read_bytes()[104:])
        for f in sorted((root / "index").iterdir())[:1]
    ],
    "first index file lost": lambda root: sorted((root / "index").iterdir())[0].unlink(),
}


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ro") / "base"
    fill(root)
    return root


@pytest.mark.parametrize("crash", [False, True], ids=["closed", "crashed"])
@pytest.mark.parametrize("case", list(DAMAGE))
def test_read_only_open_writes_nothing_and_serves_what_a_writable_open_serves(
    base: Path, tmp_path: Path, case: str, crash: bool
) -> None:
    ro, rw = tmp_path / "ro", tmp_path / "rw"
    if crash:
        crashed_copy(base, ro)
    else:
        shutil.copytree(base, ro)
    DAMAGE[case](ro)
    shutil.copytree(ro, rw)
    before = snapshot(ro)
    with rmq.MessageStore(ro, CONFIG, read_only=True) as store:
        assert store.read_only
        got = served(store)
        reports = json.dumps([store.open_report, untimed(store.recovery_report)]).replace(str(ro), "ROOT")
    assert snapshot(ro) == before, "a read-only open changed the store"
    with rmq.MessageStore(rw, CONFIG) as store:
        assert not store.read_only
        want = served(store)
        assert json.dumps([store.open_report, untimed(store.recovery_report)]).replace(str(rw), "ROOT") == reports
    assert got == want
    if crash:
        assert json.loads(reports)[0]["torn_bytes"] > 0


def test_every_writing_call_raises_read_only_error(base: Path, tmp_path: Path) -> None:
    root = tmp_path / "s"
    shutil.copytree(base, root)
    before = snapshot(root)
    with rmq.MessageStore(root, CONFIG, read_only=True) as store:
        calls: dict[str, Callable[[], object]] = {
            "put": lambda: store.put("RoA", b"x"),
            "put_batch": lambda: store.put_batch("RoA", [b"x", b"y"]),
            "flush": store.flush,
        }
        for name, call in calls.items():
            with pytest.raises(rmq.ReadOnlyError, match="read-only") as info:
                call()
            assert isinstance(info.value, rmq.StoreStateError), name
            assert info.value.path == str(root), name
        assert store.next_queue_offset("RoA", 0) == store.get_max_offset_in_queue("RoA", 0)
    assert snapshot(root) == before


def test_reading_the_config_files_of_a_brokers_directory_creates_no_lock_file(tmp_path: Path) -> None:
    """A reader of topics.json or consumerOffset.json takes the lock file that rmq's writers of those files take,
    but never creates it: a broker's directory has none, and loading the topics (a read-only store's
    topic_configs()) or the offsets created `topics.json.lock` / `consumerOffset.json.lock` in it."""
    from rmq.offsets import ConsumerOffsetManager

    root = tmp_path / "s"
    with rmq.MessageStore(root, CONFIG) as store:
        store.put("T", b"x")
        store.create_topic("T", 4, 4)
        offsets = ConsumerOffsetManager(store.consumer_offset_path)
        offsets.commit_offset("G", "T", 0, 1)
        offsets.persist()
    for lock in (root / "config").glob("*.lock"):
        lock.unlink()  # as a broker leaves its config/
    before = snapshot(root)
    # In a process of its own: this one keeps the lock files it opened (unlinked now) for reuse.
    reader = f"""
import rmq
from rmq.offsets import ConsumerOffsetManager
with rmq.MessageStore({str(root)!r}, read_only=True) as view:
    assert set(view.topic_configs()) == {{"T"}}
    assert view.topic_config("T") is not None
    loaded = ConsumerOffsetManager(view.consumer_offset_path)
    assert loaded.load() and loaded.query_offsets("G", "T") == {{0: 1}}
"""
    subprocess.run([sys.executable, "-c", reader], check=True, timeout=120)
    after = snapshot(root)
    changed = {k: (before.get(k, "absent")[:3], after.get(k, "absent")[:3]) for k in before.keys() | after.keys()}
    assert after == before, {k: v for k, v in changed.items() if before.get(k) != after.get(k)}


def test_a_missing_directory_is_an_error_and_is_not_created(tmp_path: Path) -> None:
    with pytest.raises(rmq.StoreIOError):
        rmq.MessageStore(tmp_path / "nothing", CONFIG, read_only=True)
    assert not (tmp_path / "nothing").exists()


def test_rocketmq_written_store_read_only(tmp_path: Path) -> None:
    root = tmp_path / "rmq531"
    shutil.copytree(FIXTURE, root)
    cfg = rmq.StoreConfig(
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=160,
        max_hash_slot_num=64,
        max_index_num=128,
    )
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    before = snapshot(root)
    with rmq.MessageStore(root, cfg, read_only=True) as ro, rmq.MessageStore(copy, cfg) as rw:
        assert ro.topics() == rw.topics()
        for topic in ro.topics():
            for q in ro.queue_ids(topic):
                a = ro.get_message("g", topic, q, 0, 1000)
                b = rw.get_message("g", topic, q, 0, 1000)
                assert [m.body for m in a.messages] == [m.body for m in b.messages]
                assert a.status == b.status
    assert snapshot(root) == before


@pytest.fixture
def read_only_mount(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A store and a read-only bind mount of it (CI runs as root; elsewhere the mount must work too)."""
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    mnt.mkdir()
    fill(src, 60)
    steps = [["mount", "--bind", str(src), str(mnt)], ["mount", "-o", "remount,ro,bind", str(mnt)]]
    for step in steps:
        proc = subprocess.run(step, capture_output=True, text=True)
        if proc.returncode != 0:
            subprocess.run(["umount", str(mnt)], capture_output=True)
            pytest.fail(f"cannot make a read-only bind mount ({' '.join(step)}: {proc.stderr.strip()})")
    try:
        yield src, mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], check=True)


def test_read_only_mount(read_only_mount: tuple[Path, Path]) -> None:
    src, mnt = read_only_mount
    (src / "abort").write_bytes(b"")  # it looks crashed, so a writable open would repair
    before = snapshot(src)
    with pytest.raises(rmq.StoreIOError):
        rmq.MessageStore(mnt, CONFIG)
    with rmq.MessageStore(mnt, CONFIG, read_only=True) as store:
        bodies = [m.body for m in store.get_message("g", "RoA", 0, 0, 100).messages]
        bodies += [m.body for m in store.get_message("g", "RoA", 0, len(bodies), 100).messages]
        assert bodies == [f"m{i:04}".encode() * (1 + i % 9) for i in range(0, 60, 6)]
        assert store.recovery_report["checkpoint_restart"] is not None
    assert snapshot(src) == before


WRITER = textwrap.dedent(
    """
    import sys, time, rmq
    root, n = sys.argv[1], int(sys.argv[2])
    cfg = rmq.StoreConfig(mapped_file_size_commit_log=4096, mapped_file_size_consume_queue=160,
                          max_hash_slot_num=16, max_index_num=32)
    with rmq.MessageStore(root, cfg) as store:
        for i in range(n):
            store.put("Live", b"%06d" % i * (1 + i % 7), keys="L%d" % i)
            if i % 50 == 0:
                print(i, flush=True)
                time.sleep(0.01)
        print("done", flush=True)
        sys.stdin.readline()
    """
)


def test_beside_a_live_writer_a_consistent_prefix_that_refresh_extends(tmp_path: Path) -> None:
    root = tmp_path / "live"
    n = 2000
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(root), str(n)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert writer.stdout is not None
        writer.stdout.readline()  # the store exists and holds a message
        with rmq.MessageStore(root, CONFIG, read_only=True) as store:
            seen, ends, offset = 0, [], 0
            while True:
                ends.append(store.refresh())
                r = store.get_message("g", "Live", 0, offset, 1000)
                for m in r.messages:
                    assert m.queue_offset == seen
                    assert m.body == b"%06d" % seen * (1 + seen % 7)
                    seen += 1
                offset = r.next_begin_offset
                if seen == n:
                    break
                if writer.poll() is not None:
                    pytest.fail(f"the writer died: {writer.returncode}")
                time.sleep(0.005)
            assert ends == sorted(ends) and len(set(ends)) > 2, "refresh never saw the log grow"
            hits = store.query_message("Live", f"L{n - 1}", 4)
            assert [m.queue_offset for m in hits.messages] == [n - 1]
    finally:
        if writer.stdin:
            writer.stdin.close()
        writer.wait(timeout=60)
        if writer.stdout:
            writer.stdout.close()
    assert writer.returncode == 0
    assert not sorted(root.rglob("*.rebuild"))


def test_a_segment_deleted_underneath_reads_as_removed(base: Path, tmp_path: Path) -> None:
    root = tmp_path / "s"
    shutil.copytree(base, root)
    with rmq.MessageStore(root, CONFIG, read_only=True) as store:
        first = sorted((root / "commitlog").iterdir())[0]
        first_offsets = [
            m.queue_offset for m in store.get_message("g", "RoA", 0, 0, 1000).messages if m.commitlog_offset < 4096
        ]
        assert first_offsets
        first.unlink()  # retention by the broker
        store.refresh()
        r = store.get_message("g", "RoA", 0, 0, 10)
        assert r.status.name in ("OFFSET_TOO_SMALL", "MESSAGE_WAS_REMOVING")
        assert store.look_message_by_offset(0) is None
        assert store.min_offset == 4096


@pytest.mark.parametrize("first", [0, 5], ids=["from-the-queue's-first-message", "after-the-view-opened"])
def test_a_queue_the_writer_creates_after_the_view_opened_is_read_whole(tmp_path: Path, first: int) -> None:
    """A queue whose directory did not exist when the view opened (the writer's first message to it came later,
    or its dispatch lagged the open) is opened by the view's dispatch: with the writer's entries, cut where the
    view's own dispatch takes over, never with the file's full length as the queue's end (a CI run saw a
    consumer on such a view take zeros and the writer's unrelated entries for messages, skip to queue offset
    300,000, consume message 0 again there and commit past everything between)."""
    root = tmp_path / "live"
    with rmq.MessageStore(root, CONFIG) as writer:
        for i in range(first):
            writer.put("T", b"a%d" % i, queue_id=0)
        writer.put("T", b"other", queue_id=1)
        assert writer.wait_dispatched()
        with rmq.MessageStore(root, CONFIG, read_only=True) as view:
            assert view.get_max_offset_in_queue("T", 0) == first
            bodies = [b"a%d" % i for i in range(first)]
            for i in range(first, first + 12):
                writer.put("T", b"a%d" % i, queue_id=0)
                bodies.append(b"a%d" % i)
                if i % 4 == 0:
                    assert writer.wait_dispatched()  # the writer's entries are on disk before the view's dispatch
            assert writer.wait_dispatched()
            view.refresh()
            assert view.get_min_offset_in_queue("T", 0) == 0
            assert view.get_max_offset_in_queue("T", 0) == len(bodies)
            got, slots, offset = [], [], 0
            while offset < len(bodies):  # a pull stops at the end of a consume-queue file (8 entries here)
                r = view.get_message("g", "T", 0, offset, 64)
                assert str(r.status).endswith("FOUND") and not r.damaged, (offset, r.status, r.damaged)
                got += r.messages
                slots += r.queue_offsets
                offset = r.next_begin_offset
            assert [m.body for m in got] == bodies
            assert slots == [m.queue_offset for m in got] == list(range(len(bodies)))
            # And the view goes on following the writer.
            writer.put("T", b"last", queue_id=0)
            assert writer.wait_dispatched()
            view.refresh()
            r = view.get_message("g", "T", 0, len(bodies), 64)
            assert [(m.queue_offset, m.body) for m in r.messages] == [(len(bodies), b"last")]


FAST_WRITER = textwrap.dedent(
    """
    import sys, rmq
    root, n = sys.argv[1], int(sys.argv[2])
    cfg = rmq.StoreConfig(mapped_file_size_commit_log=4096, mapped_file_size_consume_queue=640,
                          max_hash_slot_num=64, max_index_num=400)
    with rmq.MessageStore(root, cfg) as store:
        for i in range(n):
            store.put("Fast", b"%06d" % i * (1 + i % 7), queue_id=i % 2, keys="F%d" % i)
            if i == 0:
                print("first", flush=True)
    """
)


def test_opening_again_and_again_beside_a_writer_that_rolls_every_few_messages(tmp_path: Path) -> None:
    """Every read-only open beside a live writer succeeds and serves a whole prefix, while the writer rolls a
    commitlog segment every few messages and makes consume-queue and index files as often. Three races a CI run
    and this loop met on main: the open read a segment's end as zeros just before the writer wrote its
    end-of-file blank and went on in the next segment, then read those records and the consume queues pointing
    at them, and refused the store as damaged ("nothing was written here; 14 valid record(s) follow"); a
    directory listing made while the writer created files missed one and listed the next ("a segment is
    missing"); and a segment the writer removed at its close was listed but gone when opened. (Each race is
    also provoked deterministically in the Rust unit tests of `commitlog::recover`, `file_queue` and
    `index::service`.)"""
    root = tmp_path / "live"
    cfg = rmq.StoreConfig(
        mapped_file_size_commit_log=4096, mapped_file_size_consume_queue=640, max_hash_slot_num=64, max_index_num=400
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    n = 20000  # about 600 segments, 600 consume-queue files and 50 index files, each open in both processes
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < 4096:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))
    writer = subprocess.Popen(
        [sys.executable, "-c", FAST_WRITER, str(root), str(n)], stdout=subprocess.PIPE, text=True, env=env
    )
    opens, longest = 0, 0
    try:
        assert writer.stdout is not None
        writer.stdout.readline()
        while writer.poll() is None or opens < 3:
            with rmq.MessageStore(root, cfg, read_only=True) as view:
                opens += 1
                # The writer's newest index file is its progress, not damage to rebuild from the log (as on
                # main: "slot N holds X but its chain's newest entry is Y", at nearly every open).
                assert view.recovery_report["rebuilt_index_files"] == [], view.recovery_report
                for q in (0, 1):
                    top = view.get_max_offset_in_queue("Fast", q)
                    offset = 0
                    while offset < top:
                        r = view.get_message("g", "Fast", q, offset, 32)
                        assert r.messages and not r.damaged, (q, offset, top, r.status)
                        for m in r.messages:
                            i = 2 * m.queue_offset + q
                            assert m.queue_offset == offset and m.body == b"%06d" % i * (1 + i % 7), (q, offset)
                            offset += 1
                    if top:
                        last = 2 * (top - 1) + q
                        hits = view.query_message("Fast", f"F{last}", 4).messages
                        assert [m.queue_offset for m in hits] == [top - 1], (q, last)
                    longest = max(longest, top)
    finally:
        writer.kill()
        writer.wait(timeout=60)
        if writer.stdout:
            writer.stdout.close()
    assert opens >= 3 and longest > 0


def test_a_lost_index_header_update_is_rebuilt_by_a_view_when_nobody_holds_the_lock(tmp_path: Path) -> None:
    """Entries after the newest index file's indexCount are a live writer's progress only while a writer holds
    the store's lock; in a crashed store nobody writes they are a lost header update, which a view rebuilds in
    memory and reports as a writable open repairs it (and nothing on disk changes)."""
    root = tmp_path / "crashed"
    with rmq.MessageStore(root, small_config()) as store:
        for i in range(49):
            store.put("T", b"m%d" % i, keys=f"k{i}")
        assert store.wait_dispatched(10.0)
        index = sorted((root / "index").iterdir())[-1]
        header = index.read_bytes()[:40]  # the header before the last key
        store.put("T", b"m49", keys="k49")
        assert store.wait_dispatched(10.0)
    assert index.read_bytes()[:40] != header
    with open(index, "r+b") as fh:
        fh.write(header)  # the last key's entry and slot reached the disk, its header update did not
    (root / "abort").touch()
    before = snapshot(root)
    with rmq.MessageStore(root, small_config(), read_only=True) as view:
        rebuilt = view.recovery_report["rebuilt_index_files"]
        assert len(rebuilt) == 1 and str(index) in rebuilt[0], rebuilt
        assert [m.body for m in view.query_message("T", "k49", 4).messages] == [b"m49"]
    assert snapshot(root) == before
    with rmq.MessageStore(root, small_config(), start_services=False) as store:
        assert store.recovery_report["rebuilt_index_files"] == rebuilt


def test_a_view_ends_at_a_trailing_blank_until_the_segment_after_it_appears(tmp_path: Path) -> None:
    """A writer between a roll's blank and its next segment (RocketMQ writes the blank first): the view's end is
    the blank's start, as a writable open's and RocketMQ's recovery; once the next segment holds records, a
    refresh moves over the blank and takes them in."""
    root = tmp_path / "s"
    with rmq.MessageStore(root, small_config()) as s:
        offsets = [s.put("T", b"m%03d" % i + b"." * 200).wrote_offset for i in range(40)]
        end = s.max_offset
    segments = sorted((root / "commitlog").iterdir())
    assert len(segments) >= 3
    later = {p: p.read_bytes() for p in segments[1:]}
    for p in later:
        p.unlink()
    with rmq.MessageStore(root, small_config(), read_only=True) as view:
        blank_at = max(m.commitlog_offset + m.store_size for m in view.scan())
        assert blank_at < SEGMENT and view.max_offset == blank_at
        view.refresh()  # nothing after the blank yet
        assert view.max_offset == blank_at
        for p, data in later.items():
            p.write_bytes(data)
        view.refresh()
        assert view.max_offset == end
        assert [m.commitlog_offset for m in view.scan()] == offsets


@pytest.mark.parametrize(
    "segments_unseen",
    [0, 1, 2, 3],
    ids=["mapped-before-deleted", "made-ahead-before-deleted", "one-made-and-deleted-unseen", "two-unseen"],
)
def test_a_view_behind_the_writers_retention_takes_in_every_message_still_stored(
    tmp_path: Path, segments_unseen: int
) -> None:
    """A view that was behind when the writer's retention deleted segments dropped them before dispatching what
        they still held: those messages never reached its queues, and every later message of those queues sat at a
        queue offset too low (a streaming reader beside retention stalled at its end for ever). QA: a view ended at
        [994, 994, 995, 996] where the store held [1000] * 4. With segments the writer made and deleted between two
    refreshes (never mapped by the view), the view stopped at its last mapped segment and took in nothing more."""
    root = tmp_path / "s"
    cfg = small_config(file_reserved_time=0, delete_file_batch_max=100, clean_file_forcibly_enable=False)
    body = b"m" * 300
    with rmq.MessageStore(root, cfg) as writer:
        n = 0

        def put_until(segment: int) -> None:
            nonlocal n
            while writer.max_offset < segment * SEGMENT + SEGMENT // 2:
                writer.put("T", body + b"%06d" % n, queue_id=n % 4)
                n += 1

        put_until(1)
        assert writer.wait_dispatched()
        with rmq.MessageStore(root, cfg, read_only=True) as view:
            view.refresh()  # the view has mapped segment 1, half written
            put_until(2 + segments_unseen)  # segment 2 (and 3) made; the view has not looked
            assert writer.wait_dispatched()
            writer.flush()
            deleted = writer.delete_expired_files_now()["commitlog"]
            assert len(deleted) == 2 + segments_unseen, deleted
            view.refresh()
            for q in range(4):
                low, high = writer.get_min_offset_in_queue("T", q), writer.get_max_offset_in_queue("T", q)
                assert view.get_max_offset_in_queue("T", q) == high
                got = []
                at = max(low, view.get_min_offset_in_queue("T", q))
                while at < high:
                    r = view.get_message("g", "T", q, at, 32)
                    assert r.status.name == "FOUND", (q, at, r.status)
                    got += r.messages
                    at = r.next_begin_offset
                assert [m.queue_offset for m in got] == list(range(high - len(got), high))
                assert all(m.body == body + b"%06d" % (m.queue_offset * 4 + q) for m in got)
                assert len(got) >= high - low - 1


def test_refresh_refuses_a_store_replaced_under_the_view(tmp_path: Path) -> None:
    """The store deleted and made again at the same path under a read-only view (review of this wave's Spark
    fix): `refresh()` went on with the old store's mapped files and queues, resolving old queue entries against
    the new log. It raises `StoreStateError` now, and a new view reads the new store."""
    root = tmp_path / "store"
    with rmq.MessageStore(root, CONFIG) as w:
        for i in range(20):
            w.put("T", f"old{i}".encode())
    view = rmq.MessageStore(root, CONFIG, read_only=True)
    view.refresh()  # unchanged: fine
    assert view.get_max_offset_in_queue("T", 0) == 20
    shutil.rmtree(root)
    with rmq.MessageStore(root, CONFIG) as w:
        for i in range(5):
            w.put("T", f"new{i}".encode())
    with pytest.raises(rmq.StoreStateError, match="was replaced under this read-only view"):
        view.refresh()
    view.close()
    with rmq.MessageStore(root, CONFIG, read_only=True) as again:
        assert again.refresh() >= 0 and again.get_max_offset_in_queue("T", 0) == 5
        assert [bytes(m.body) for m in again.scan()] == [f"new{i}".encode() for i in range(5)]


BOUNDARY_WRITER = """
import sys, time, rmq
from conftest import small_config
cfg = small_config(mapped_file_size_consume_queue=20 * 8)
with rmq.MessageStore(sys.argv[1], cfg) as s:
    for i in range(8):
        s.put("T", b"d%d" % i, queue_id=0)
    assert s.wait_dispatched(10)
s = rmq.MessageStore(sys.argv[1], cfg, start_services=False)  # puts from here on are not dispatched
for i in range(8, 11):
    s.put("T", b"d%d" % i, queue_id=0)
print("ready", flush=True)
sys.stdin.read()
"""


def test_a_view_beside_a_writer_whose_queue_ends_at_a_file_boundary_reports_no_loss(tmp_path: Path) -> None:
    """A live writer's queue that ends exactly at the end of a consume-queue file, with later messages of it in
    the log not yet dispatched (the writer's dispatch lags its log), is the writer's progress: a view reads them
    (dispatched in memory) and reports no rebuilt queue. A view said "the newest consume-queue file was lost", and
    `rmq check` beside a healthy live store said rmq would rebuild that queue (2 of 15 runs of the live-writer check
    test on a loaded machine)."""
    root = tmp_path / "s"
    writer = subprocess.Popen(
        [sys.executable, "-c", BOUNDARY_WRITER, str(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parent,
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
        before = snapshot(root)
        with rmq.MessageStore(root, read_only=True) as view:
            assert view.recovery_report["rebuilt_queues"] == [], view.recovery_report["rebuilt_reasons"]
            assert view.get_max_offset_in_queue("T", 0) == 11
            # One consume-queue file per call: the messages of the file not written yet come in the second.
            first = view.get_message("G", "T", 0, 0, 32)
            second = view.get_message("G", "T", 0, first.next_begin_offset, 32)
            assert [m.body for m in first.messages + second.messages] == [b"d%d" % i for i in range(11)]
        rep = check_store(root)
        assert rep["rmq_verdict"].startswith("clean"), rep["rmq_verdict"]
        assert snapshot(root) == before
    finally:
        writer.kill()
        writer.communicate()  # and closes its pipes
