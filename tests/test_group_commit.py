"""SYNC_FLUSH group commit from Python: with the store's services started, producer threads share flushes
(the put releases the GIL while it waits); a failed flush still poisons the store; `sync_flush_timeout` is a
checked setting. The schedule, the timeout path and the power-loss images are tested in Rust
(`tests/group_commit.rs`)."""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import pytest

import rmq
from conftest import small_config
from rmq.testing import injected_fault

SYNC = small_config(flush_disk_type="SYNC_FLUSH")


def test_producer_threads_under_sync_flush_are_all_acknowledged_and_consumable(store_dir: Path) -> None:
    threads, puts = 8, 25
    with rmq.MessageStore(store_dir, SYNC) as store:
        store.start_services()
        statuses: list[rmq.PutMessageStatus] = []
        lock = threading.Lock()

        def produce(t: int) -> None:
            for i in range(puts):
                r = store.put("GC", b"%d/%d" % (t, i), queue_id=t % 2)
                with lock:
                    statuses.append(r.status)

        workers = [threading.Thread(target=produce, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert statuses == [rmq.PutMessageStatus.PUT_OK] * (threads * puts)
        assert store.wait_dispatched(10.0)
        bodies = set()
        for q in (0, 1):
            for e in store.iter_queue("GC", q):
                m = store.read(e.commitlog_offset)
                assert m is not None
                bodies.add(m.body)
        assert bodies == {b"%d/%d" % (t, i) for t in range(threads) for i in range(puts)}
        # WAIT=false: acknowledged without waiting for the flush; made durable by the next group.
        assert store.put("GC", b"no wait", wait_store_msg_ok=False).status == rmq.PutMessageStatus.PUT_OK


def test_waiting_sync_flush_puts_release_the_gil_so_threads_share_flushes(store_dir: Path) -> None:
    # A put that kept the GIL while it waited for its flush would let no other thread put meanwhile: every
    # flush would cover one put.
    threads, puts = 8, 40
    with rmq.MessageStore(store_dir, SYNC) as store:
        store.start_services()

        def group_commit() -> rmq.ServiceStats:
            return next(s for s in store.service_stats() if s.name == "group_commit")

        before, written_before = group_commit(), store.max_offset
        barrier = threading.Barrier(threads)

        def produce(t: int) -> None:
            barrier.wait()
            for i in range(puts):
                assert store.put("GC", b"%d/%d" % (t, i)).status == rmq.PutMessageStatus.PUT_OK

        workers = [threading.Thread(target=produce, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        after = group_commit()
        assert store.flushed_offset == store.max_offset
        # The service flushed every byte the puts wrote (`work` counts bytes flushed).
        assert after.work - before.work == store.max_offset - written_before
    # Its rounds count flushes and idle wake-ups alike: far fewer than the puts when they shared flushes.
    assert after.rounds - before.rounds < threads * puts // 2, (after.rounds - before.rounds, threads * puts)


def test_a_failed_group_flush_poisons_the_store(store_dir: Path) -> None:
    store = rmq.MessageStore(store_dir, SYNC)
    store.start_services()
    assert store.put("GC", b"durable").status == rmq.PutMessageStatus.PUT_OK
    with injected_fault("flush", errno=errno.EIO, path=store_dir):
        r = store.put("GC", b"failed")
    assert r.status == rmq.PutMessageStatus.FLUSH_DISK_TIMEOUT
    with pytest.raises(rmq.StorePoisonedError):
        store.put("GC", b"refused")
    with pytest.raises(rmq.StorePoisonedError):
        store.close()


@pytest.mark.parametrize(
    ("value", "error"),
    [(-1, rmq.InvalidConfigError), (2**64, rmq.InvalidConfigError), ("5000", rmq.ArgumentTypeError)],
)
def test_sync_flush_timeout_is_checked(store_dir: Path, value: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        rmq.MessageStore(store_dir, small_config(sync_flush_timeout=value))
    assert not (store_dir / "commitlog").exists() or not any((store_dir / "commitlog").iterdir())
