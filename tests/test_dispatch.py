"""Consume queues, the index and the reput service through the Python API (spec sections 6, 7 and 12).

Every queue's max offset equals the number of messages put to it, every entry points at its record with the
right size and tagsCode, keys find their messages (and only theirs), time searches follow RocketMQ's
boundary rules, and the store's native reput service wakes on puts instead of spinning, retries after an
error, and stops with the store.
"""

from __future__ import annotations

import errno
import gc
import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

import rmq
from conftest import SMALL, small_config

LOWER, UPPER = rmq.BoundaryType.LOWER, rmq.BoundaryType.UPPER


def java_hash(s: str) -> int:
    """Java String.hashCode over UTF-16 code units, as a signed 32-bit int (independent of the Rust code)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def fill(store: rmq.MessageStore, n: int) -> list[tuple[str, int, rmq.PutResult, str, list[str]]]:
    out = []
    for i in range(n):
        topic = ("Orders", "Events")[i % 2]
        q = i % 3
        tags = ("TagA", "TagB", "标签")[i % 3]
        keys = [f"id{i}", f"grp{i // 5}"]
        r = store.put(topic, b"m%d" % i, queue_id=q, tags=tags, keys=keys)
        out.append((topic, q, r, tags, keys))
    return out


def test_every_queue_and_entry_after_dispatch(store_dir: Path) -> None:
    with rmq.MessageStore(store_dir, SMALL) as store:
        puts = fill(store, 300)
        assert store.wait_dispatched(10)
        assert store.dispatch_behind_bytes == 0 and store.reput_offset == store.max_offset
        counts: dict[tuple[str, int], int] = defaultdict(int)
        for topic, q, r, _, _ in puts:
            counts[topic, q] += 1
            assert store.get_commitlog_offset_in_queue(topic, q, r.queue_offset) == r.wrote_offset
            assert store.get_message_store_timestamp(topic, q, r.queue_offset) == r.store_timestamp
        for (topic, q), n in counts.items():
            assert store.get_max_offset_in_queue(topic, q) == n
            assert store.get_min_offset_in_queue(topic, q) == 0
            entries = list(store.iter_queue(topic, q))
            mine = [(r, tags) for t, qq, r, tags, _ in puts if (t, qq) == (topic, q)]
            assert [e.queue_offset for e in entries] == list(range(n))
            for e, (r, tags) in zip(entries, mine, strict=True):
                m = store.look_message_by_offset(e.commitlog_offset, e.size)
                assert m is not None and m.store_size == e.size == r.wrote_bytes
                assert e.commitlog_offset == r.wrote_offset
                assert e.tags_code == java_hash(tags) == m.tags_code
        assert store.topics() == ["Events", "Orders"]
        assert store.queue_ids("Orders") == [0, 1, 2]
        assert len(store.consume_queue_files("Orders", 0)) == 1
        assert list(store.iter_queue("Orders", 0, from_offset=48)) == list(store.iter_queue("Orders", 0))[48:]


def test_consume_queue_files_roll(store_dir: Path) -> None:
    # 6000-byte files hold 300 entries.
    with rmq.MessageStore(store_dir, small_config(mapped_file_size_commit_log=1 << 20)) as store:
        store.put_batch("Many", [b"x"] * 700, queue_id=0)
        assert store.wait_dispatched()
        names = [Path(p).name for p in store.consume_queue_files("Many", 0)]
        assert names == ["00000000000000000000", "00000000000000006000", "00000000000000012000"]
        assert store.get_max_offset_in_queue("Many", 0) == 700
        assert [e.queue_offset for e in store.iter_queue("Many", 0, 295, batch=7)][:10] == list(range(295, 305))


def test_missing_queues_and_offsets(small_store: rmq.MessageStore) -> None:
    s = small_store
    s.put("T", b"x", queue_id=1)
    assert s.wait_dispatched()
    assert s.get_min_offset_in_queue("T", 5) == 0
    assert s.get_max_offset_in_queue("T", 5) == 0
    assert s.get_max_offset_in_queue("Nope", 0) == 0
    assert s.get_message_store_timestamp("T", 5, 0) == -1
    assert s.get_message_store_timestamp("T", 1, -1) == -1
    assert s.get_message_store_timestamp("T", 1, 1) == -1
    assert s.get_commitlog_offset_in_queue("T", 1, 1) == 0
    assert s.get_offset_in_queue_by_time("T", 5, 0) == 0
    assert list(s.iter_queue("T", 5)) == []
    assert s.look_message_by_offset(s.max_offset) is None
    assert s.look_message_by_offset(-1) is None
    assert s.look_message_by_offset(3) is None  # not a record start
    assert s.look_message_by_offset(0, 5) is None  # wrong size
    assert s.look_message_by_offset(0) is not None


def test_committed_versus_assigned_max_offset(store_dir: Path) -> None:
    with rmq.MessageStore(store_dir, SMALL, start_reput=False) as store:
        for _ in range(3):
            store.put("T", b"x")
        assert store.get_max_offset_in_queue("T", 0) == 0
        assert store.get_max_offset_in_queue("T", 0, committed=False) == 3
        records, reput, arrivals = store._dispatch(2, True)
        assert (records, arrivals) == (2, [("T", 0, 2)])
        assert store.get_max_offset_in_queue("T", 0) == 2
        assert store.wait_dispatched()  # no thread: dispatches on the caller
        assert store.get_max_offset_in_queue("T", 0) == 3


def test_query_by_key(store_dir: Path) -> None:
    with rmq.MessageStore(store_dir, SMALL) as store:
        puts = fill(store, 200)
        assert store.wait_dispatched()
        for topic, _, r, _, keys in puts[::7]:
            for key in [*keys, r.uniq_key]:
                want = [p[2].wrote_offset for p in puts if p[0] == topic and (key in p[4] or key == p[2].uniq_key)]
                got = store.query_message(topic, key, 64)
                assert [m.commitlog_offset for m in got.messages] == want
                assert all(m.topic == topic for m in got.messages)
        # Other topic, unknown key: nothing.
        assert store.query_message("Orders", "id1").messages == []
        assert store.query_message("Orders", "missing").messages == []
        # As RocketMQ: the index's last update comes with the first message found; none found, 0 and 0.
        assert tuple(store.query_message("Orders", "missing"))[1:] == (0, 0)
        last = puts[-1][2]
        res = store.query_message("Events", "id199")
        assert res.index_last_update_timestamp == last.store_timestamp
        assert res.index_last_update_phy_offset == last.wrote_offset
        # It reads as the 3-tuple (messages, timestamp, offset) too, as the named tuple it replaced did.
        msgs, ts, phy = res
        assert [m.commitlog_offset for m in msgs] == [m.commitlog_offset for m in res.messages] != []
        assert (ts, phy) == (res[1], res[-1]) == (last.store_timestamp, last.wrote_offset)
        assert len(res) == 3 and isinstance(res, rmq.QueryMessageResult)
        with pytest.raises(IndexError):
            res[3]


def test_query_caps_and_time_window(store_dir: Path) -> None:
    with rmq.MessageStore(store_dir, SMALL) as store:
        stamps = []
        for i in range(100):
            stamps.append(store.put("T", b"%d" % i, keys="same").store_timestamp)
            if i == 49:
                time.sleep(1.1)  # index times have 1 s resolution
        assert store.wait_dispatched()
        assert len(store.query_message("T", "same", 1000).messages) == 64  # maxMsgsNumBatch
        newest = store.query_message("T", "same", 5).messages
        assert [m.body for m in newest] == [b"%d" % i for i in range(95, 100)]  # the newest, oldest first
        split = stamps[50]
        late = store.query_message("T", "same", 64, begin=split).messages
        assert sorted(m.body for m in late) == sorted(b"%d" % i for i in range(50, 100))
        early = store.query_message("T", "same", 64, end=split - 1001).messages
        assert sorted(m.body for m in early) == sorted(b"%d" % i for i in range(50))


def test_colliding_keys_return_only_their_own(store_dir: Path) -> None:
    # "Aa" and "BB" have the same Java hash, so T#Aa and T#BB land on the same slot with the same keyHash.
    assert java_hash("T#Aa") == java_hash("T#BB")
    with rmq.MessageStore(store_dir, SMALL) as store:
        a = store.put("T", b"a", keys="Aa")
        b = store.put("T", b"b", keys="BB")
        assert store.wait_dispatched()
        assert [m.commitlog_offset for m in store.query_message("T", "Aa").messages] == [a.wrote_offset]
        assert [m.commitlog_offset for m in store.query_message("T", "BB").messages] == [b.wrote_offset]


def test_index_rolls_over_and_queries_span_files(store_dir: Path) -> None:
    cfg = small_config(max_hash_slot_num=7, max_index_num=4)  # 3 keys per file: one message per file
    with rmq.MessageStore(store_dir, cfg) as store:
        rs = [store.put("T", b"%d" % i, keys=["k", f"u{i}"]) for i in range(12)]
        assert store.wait_dispatched()
        files = store.index_files()
        assert len(files) == 12
        assert [Path(f).name for f in files] == sorted(Path(f).name for f in files)
        assert len({Path(f).name for f in files}) == 12, "same-millisecond files never collide"
        assert [m.commitlog_offset for m in store.query_message("T", "k", 64).messages] == [r.wrote_offset for r in rs]
        for i, r in enumerate(rs):
            assert [m.commitlog_offset for m in store.query_message("T", f"u{i}").messages] == [r.wrote_offset]
    # Reopened: the same answers from the files alone.
    with rmq.MessageStore(store_dir, cfg) as store:
        assert store.recovery_report["redispatched_records"] == 0
        assert len(store.query_message("T", "k", 64).messages) == 12
        assert len(store.index_files()) == 12


def test_time_search_boundaries(store_dir: Path) -> None:
    with rmq.MessageStore(store_dir, SMALL) as store:
        stamps = []
        for i in range(40):
            stamps.append(store.put("T", b"x", queue_id=2).store_timestamp)
            if i % 10 == 9:
                time.sleep(0.005)
        assert store.wait_dispatched()
        for t in sorted(set(stamps)):
            assert store.get_offset_in_queue_by_time("T", 2, t) == stamps.index(t)
            assert store.get_offset_in_queue_by_time("T", 2, t, LOWER) == stamps.index(t)
            assert store.get_offset_in_queue_by_time("T", 2, t, UPPER) == len(stamps) - 1 - stamps[::-1].index(t)
        gap = next(t for t in sorted(set(stamps)) if t + 1 not in stamps and t != stamps[-1])
        first_after = next(i for i, t in enumerate(stamps) if t > gap)
        assert store.get_offset_in_queue_by_time("T", 2, gap + 1, LOWER) == first_after
        assert store.get_offset_in_queue_by_time("T", 2, gap + 1, UPPER) == first_after - 1
        assert store.get_offset_in_queue_by_time("T", 2, stamps[0] - 1, LOWER) == 0
        assert store.get_offset_in_queue_by_time("T", 2, stamps[0] - 1, UPPER) == 0
        assert store.get_offset_in_queue_by_time("T", 2, stamps[-1] + 1, LOWER) == 40
        assert store.get_offset_in_queue_by_time("T", 2, stamps[-1] + 1, UPPER) == 39


def _eventually(cond: Callable[[], bool], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_reput_service_wakes_on_put_and_publishes_arrivals(store_dir: Path) -> None:
    with rmq.MessageStore(store_dir, SMALL) as store:
        assert [s.name for s in store.service_stats()][:1] == ["reput"]
        assert store.reput.running
        ours = [t.name for t in threading.enumerate() if t.name.startswith("rmq")]
        assert ours == [], f"the store runs Python threads: {ours}"
        time.sleep(0.3)  # idle: the service must be waiting, not polling
        rounds_idle, idle_from = store.reput.rounds, time.monotonic()
        time.sleep(0.5)
        # At most one idle round a second (and one in progress), however long a loaded host made the sleep.
        idle = math.ceil(time.monotonic() - idle_from)
        assert store.reput.rounds - rounds_idle <= 1 + idle, "the reput service spins while idle"
        for i in range(5):
            seen = store.arrival_seq
            store.put("Poll", b"x", queue_id=1)
            # An hour of timeout: returning at all means the put's dispatch advanced the arrival sequence.
            assert store.wait_arrival(seen, 3600) != seen
            assert store.get_max_offset_in_queue("Poll", 1) == i + 1
        assert _eventually(lambda: store.reput.work == 5), "records dispatched by the service"
        assert store.reput.errors == 0


def test_reput_records_an_error_and_retries(store_dir: Path) -> None:
    from rmq.testing import injected_fault

    with rmq.MessageStore(store_dir, SMALL) as store:
        # No space for the new queue's first file: the service's round fails and is retried a second later.
        with injected_fault("allocate", errno=errno.ENOSPC, path=store_dir / "consumequeue"):
            store.put("Full", b"x")
            assert _eventually(lambda: store.reput.errors >= 1)
            assert store.get_max_offset_in_queue("Full", 0) == 0
        last = store.reput.last_error
        assert last is not None and "space" in last.lower(), last
        assert store.reput.running
        assert store.wait_dispatched(30)
        assert store.get_max_offset_in_queue("Full", 0) == 1


def test_a_queue_whose_directory_cannot_be_made_blocks_dispatch_and_loses_nothing(store_dir: Path) -> None:
    """QA, on a full ext4 (where a new directory needs a block): a put to a new queue was acknowledged, dispatch
    could not make the queue's directory and passed over its records, and the queue began after them for good
    (OFFSET_TOO_SMALL from 0, `rmq check` clean). Dispatch now stops there and retries. A file where the queue's
    directory belongs fails the same `mkdir` on any file system."""
    with rmq.MessageStore(store_dir, SMALL) as store:
        store.put("Old", b"x")
        assert store.wait_dispatched(30)
        (store_dir / "consumequeue" / "New").write_bytes(b"in the way")
        acked = [store.put("New", b"m%d" % i).queue_offset for i in range(3)]
        store.put("Old", b"y")
        assert acked == [0, 1, 2]
        assert _eventually(lambda: store.reput.errors >= 1)
        assert store.get_max_offset_in_queue("New", 0) == 0 and store.get_max_offset_in_queue("Old", 0) == 1
        (store_dir / "consumequeue" / "New").unlink()
        assert store.wait_dispatched(30)
        r = store.get_message("g", "New", 0, 0, 32)
        assert [m.body for m in r.messages] == [b"m0", b"m1", b"m2"] and store.get_min_offset_in_queue("New", 0) == 0
        assert store.get_max_offset_in_queue("Old", 0) == 2 and store.dispatch_issues()[0] == 0


def test_without_services_close_dispatches_the_rest(store_dir: Path) -> None:
    store = rmq.MessageStore(store_dir, SMALL, start_services=False)
    assert store.service_stats() == []
    assert not store.reput.running
    store.put("T", b"x")
    assert store.get_max_offset_in_queue("T", 0) == 0
    store.close()
    with rmq.MessageStore(store_dir, SMALL, start_reput=False) as again:
        assert again.service_stats() == [], "start_reput=False is start_services=False"
        assert again.recovery_report["redispatched_records"] == 0, "a clean close left nothing to dispatch"
        assert again.get_max_offset_in_queue("T", 0) == 1


def test_close_stops_the_services_and_a_dropped_store_stops_them_too(store_dir: Path) -> None:
    def native_threads() -> list[str]:
        names = []
        for task in Path("/proc/self/task").iterdir():
            try:
                names.append((task / "comm").read_text().strip())
            except OSError:
                continue
        return sorted(n for n in names if n.startswith("rmq-"))

    gc.collect()
    before = native_threads()
    store = rmq.MessageStore(store_dir / "a", SMALL)
    assert _eventually(lambda: "rmq-reput" in native_threads())  # a thread names itself once it runs
    store.close()
    assert not store.reput.running
    assert native_threads() == before, "close joined every service thread"
    dropped = rmq.MessageStore(store_dir / "b", SMALL)
    dropped.put("T", b"x")
    assert _eventually(lambda: "rmq-reput" in native_threads())
    del dropped
    gc.collect()
    assert _eventually(lambda: native_threads() == before), "a store dropped without close stops its services"
    with rmq.MessageStore(store_dir / "b", SMALL) as again:
        assert again.get_max_offset_in_queue("T", 0) == 1, "the drop closed the store"


def test_sync_flush_dispatches_flushed_data(store_dir: Path) -> None:
    with rmq.MessageStore(store_dir, small_config(flush_disk_type="SYNC_FLUSH")) as store:
        r = store.put("T", b"x", keys="k")
        assert store.confirm_offset == store.max_offset
        assert store.wait_dispatched()
        assert [m.commitlog_offset for m in store.query_message("T", "k").messages] == [r.wrote_offset]


def test_deleted_consume_queues_and_index_are_rebuilt(store_dir: Path) -> None:
    import shutil

    with rmq.MessageStore(store_dir, SMALL) as store:
        puts = fill(store, 90)
    shutil.rmtree(store_dir / "consumequeue")
    shutil.rmtree(store_dir / "index")
    with rmq.MessageStore(store_dir, SMALL) as store:
        assert store.recovery_report["rebuilt_cq_entries"] == 90
        for topic, q, r, _, keys in puts:
            assert store.get_commitlog_offset_in_queue(topic, q, r.queue_offset) == r.wrote_offset
            assert [m.commitlog_offset for m in store.query_message(topic, keys[0]).messages] == [r.wrote_offset]


def test_a_non_queue_directory_is_left_alone(store_dir: Path) -> None:
    with rmq.MessageStore(store_dir, SMALL) as store:
        store.put("T", b"x")
    (store_dir / "consumequeue" / "T" / "notes").mkdir()
    (store_dir / "consumequeue" / "bad.name").mkdir()
    with rmq.MessageStore(store_dir, SMALL) as store:
        skipped = sorted(Path(p).name for p in store.recovery_report["skipped_dirs"])
        assert skipped == ["bad.name", "notes"]
        assert store.get_max_offset_in_queue("T", 0) == 1
    assert (store_dir / "consumequeue" / "T" / "notes").is_dir()
