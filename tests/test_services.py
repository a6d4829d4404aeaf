"""The store's background services from Python: they are native threads (no Python thread runs), the flush
service makes an ASYNC_FLUSH store durable without any `flush()` call and the checkpoint follows, the flush
settings are honoured, and long polling wakes on arrivals and on close.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

import rmq
from conftest import small_config
from rmq.consumer import ArrivalWaiter

FAST = {
    "mapped_file_size_commit_log": 1 << 20,
    "flush_interval_commit_log": 10,
    "flush_commit_log_timed": False,
    "flush_interval_consume_queue": 10,
}


def eventually(cond: Callable[[], bool], timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def checkpoint_on_disk(root: Path) -> tuple[int, int, int]:
    """physicMsgTimestamp, logicsMsgTimestamp, indexMsgTimestamp as the file holds them (spec §8.1)."""
    data = (root / "checkpoint").read_bytes()
    physic, logics, index = struct.unpack(">qqq", data[:24])
    return physic, logics, index


def test_async_flush_makes_puts_durable_without_a_flush_call(store_dir: Path) -> None:
    with rmq.MessageStore(store_dir, small_config(**FAST)) as store:
        assert [s.name for s in store.service_stats()] == ["reput", "warm", "flush", "flush_cq", "clean", "schedule"]
        assert not [t.name for t in threading.enumerate() if t.name.startswith("rmq")]
        start = store.flushed_offset
        last = None
        for _ in range(5):  # 5 pages: more than flush_commit_log_least_pages
            last = store.put("Durable", b"d" * 4096)
        assert last is not None
        assert store.committed_offset == store.max_offset
        assert eventually(lambda: store.flushed_offset == store.max_offset), "the flush service did not run"
        assert store.flushed_offset > start
        # The checkpoint (written by the consume-queue flush service) claims the last message's store time.
        assert eventually(lambda: checkpoint_on_disk(store_dir)[0] >= last.store_timestamp - 1)
        physic, logics, _ = checkpoint_on_disk(store_dir)
        assert logics <= physic

        def flush() -> rmq.ServiceStats:
            return next(s for s in store.service_stats() if s.name == "flush")

        # A round counts what it flushed after it moved the flushed offset.
        assert eventually(lambda: flush().work >= 5 * 4096)
        assert flush().errors == 0


def test_a_small_write_waits_for_the_thorough_round(store_dir: Path) -> None:
    cfg = small_config(**FAST, flush_commit_log_thorough_interval=3_600_000)
    with rmq.MessageStore(store_dir, cfg) as store:
        start = store.flushed_offset
        store.put("Small", b"s" * 100)  # one page, fewer than 4
        flush = lambda: next(s for s in store.service_stats() if s.name == "flush")  # noqa: E731
        seen = flush().rounds
        assert eventually(lambda: flush().rounds >= seen + 5)
        assert store.flushed_offset == start, "a one-page write was flushed before the thorough round"
        store.flush()
        assert store.flushed_offset == store.max_offset


def test_sync_flush_runs_no_commitlog_flush_service(store_dir: Path) -> None:
    with rmq.MessageStore(store_dir, small_config(flush_disk_type="SYNC_FLUSH")) as store:
        assert "flush" not in [s.name for s in store.service_stats()]
        store.put("Sync", b"x")
        assert store.flushed_offset == store.max_offset, "a SYNC_FLUSH put returns once flushed"


def test_long_polling_wakes_on_arrival_and_on_close(store_dir: Path) -> None:
    store = rmq.MessageStore(store_dir, small_config())
    waiter = ArrivalWaiter.of(store)
    got: list[bool] = []
    t = threading.Thread(target=lambda: got.append(waiter.wait_beyond("Poll", 0, 0, 3600)))
    t.start()
    store.put("Poll", b"x")
    t.join(60)
    assert got == [True], "an hour-long wait returned: the arrival woke it"
    t = threading.Thread(target=lambda: got.append(waiter.wait_beyond("Poll", 0, 1, 3600)))
    seq: list[int] = []
    seen = waiter.arrivals
    u = threading.Thread(target=lambda: seq.append(store.wait_arrival(seen, 3600)))
    t.start()
    u.start()
    time.sleep(0.05)
    store.close()
    t.join(60)
    u.join(60)
    assert not t.is_alive() and not u.is_alive(), "close woke every waiter"
    assert got == [True, False]
