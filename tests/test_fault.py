"""The fault seam from Python (`rmq.testing`): typed errors at each point, the poison path of SYNC_FLUSH, and
the context manager that disarms."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path

import pytest

import rmq
from conftest import small_config
from rmq.testing import FAULT_POINTS, disarm_faults, inject_fault, injected_fault


@pytest.fixture(autouse=True)
def no_fault_left() -> Iterator[None]:
    yield
    assert disarm_faults() == 0, "a test left a fault armed"


def bodies(store: rmq.MessageStore, topic: str = "T", queue_id: int = 0) -> list[bytes]:
    out = []
    for e in store.iter_queue(topic, queue_id):
        m = store.read(e.commitlog_offset)
        assert m is not None and m.queue_offset == e.queue_offset
        out.append(m.body)
    return out


def test_sync_flush_failure_returns_flush_disk_timeout_and_poisons_the_store(store_dir: Path) -> None:
    config = small_config(flush_disk_type="SYNC_FLUSH")
    store = rmq.MessageStore(store_dir, config)
    for i in range(3):
        assert store.put("T", b"m%d" % i).status == rmq.PutMessageStatus.PUT_OK
    with injected_fault("flush", errno=errno.EIO, path=store_dir):
        r = store.put("T", b"m3")
    assert r.status == rmq.PutMessageStatus.FLUSH_DISK_TIMEOUT
    assert r.queue_offset == 3
    # Poisoned: puts and flushes refused, although the fault is gone; reads still work.
    with pytest.raises(rmq.StorePoisonedError) as info:
        store.put("T", b"m4")
    assert info.value.status == rmq.PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert isinstance(info.value, rmq.StoreStateError)
    with pytest.raises(rmq.StorePoisonedError):
        store.put_batch("T", [b"b0", b"b1"])
    with pytest.raises(rmq.StorePoisonedError):
        store.flush()
    assert store.read(0) is not None
    assert store.wait_dispatched(10.0)
    assert bodies(store) == [b"m0", b"m1", b"m2"], "only what was flushed is consumable"
    got = store.get_message("G", "T", 0, 0, 32)
    assert [m.body for m in got.messages] == [b"m0", b"m1", b"m2"]
    # close() cannot make durable what came after the failed flush, and says so (it returned as if it had).
    with pytest.raises(rmq.StorePoisonedError, match="failed flush"):
        store.close()
    assert store.closed
    store.close()
    # Reopening recovers with every acknowledged message (and the one whose flush failed: it was written).
    with rmq.MessageStore(store_dir, config) as again:
        assert again.unclean_shutdown
        assert again.wait_dispatched(10.0)
        assert bodies(again) == [b"m0", b"m1", b"m2", b"m3"]
        assert again.put("T", b"m4").queue_offset == 4


def test_async_flush_failure_raises_and_poisons(store_dir: Path) -> None:
    small_store = rmq.MessageStore(store_dir, small_config())
    small_store.put("T", b"a")
    with injected_fault("flush", errno=errno.EIO, path=small_store.path), pytest.raises(rmq.StoreIOError) as info:
        small_store.flush()
    assert not isinstance(info.value, rmq.DiskFullError)
    assert info.value.path is not None and info.value.path.startswith(small_store.path)
    assert info.value.errno == errno.EIO  # as an OSError has it (it was missing)
    with pytest.raises(rmq.StorePoisonedError):
        small_store.put("T", b"b")
    # QA: a background flush that failed (a file system gone read-only) left close() returning as if it had
    # made the puts before it durable.
    with pytest.raises(rmq.StorePoisonedError):
        small_store.close()
    small_store.close()
    assert (store_dir / "abort").exists()


def test_allocate_enospc_is_disk_full_and_uses_no_queue_offset(store_dir: Path) -> None:
    with rmq.MessageStore(store_dir, small_config(), start_reput=False) as store:
        store.put("T", b"x" * 100)
        with injected_fault("allocate", times=None, errno=errno.ENOSPC, path=store_dir / "commitlog"):
            puts = 1
            with pytest.raises(rmq.DiskFullError) as info:
                while True:
                    store.put("T", b"x" * 100)
                    puts += 1
            err = info.value
            assert isinstance(err, rmq.StoreIOError) and isinstance(err, OSError)
            assert err.errno == errno.ENOSPC
            assert err.status == rmq.PutMessageStatus.CREATE_MAPPED_FILE_FAILED
            assert err.filename == err.path and Path(err.path).parent == store_dir / "commitlog"
            assert not Path(err.path).exists(), "the file that could not be allocated was removed"
            with pytest.raises(rmq.DiskFullError):
                store.put_batch("T", [b"y" * 100] * 3)
            assert store.next_queue_offset("T", 0) == puts
        assert store.put("T", b"after").queue_offset == puts
        store.dispatch_all()
        assert bodies(store)[-1] == b"after"
        assert len(bodies(store)) == puts + 1


def test_write_and_fsync_faults_are_io_errors_and_change_nothing(store_dir: Path) -> None:
    with rmq.MessageStore(store_dir, small_config(), start_reput=False) as store:
        store.put("T", b"a")
        end = store.max_offset
        with injected_fault("write", errno=errno.EIO, path=store_dir / "commitlog"):
            with pytest.raises(rmq.StoreIOError) as info:
                store.put("T", b"b")
            assert not isinstance(info.value, rmq.DiskFullError)
            assert store.max_offset == end
        store.put("T", b"c")
        store.dispatch_all()
        with injected_fault("fsync", errno=errno.EIO, path=store_dir / "checkpoint"), pytest.raises(rmq.StoreIOError):
            store.flush()
        store.put("T", b"d")
        store.dispatch_all()
        store.flush()
        assert bodies(store) == [b"a", b"c", b"d"]


def test_after_and_times_count_checks(store_dir: Path) -> None:
    with rmq.MessageStore(store_dir, small_config(), start_reput=False) as store:
        inject_fault("write", after=2, times=2, path=store_dir / "commitlog")
        outcomes = []
        for i in range(6):
            try:
                store.put("T", b"%d" % i)
                outcomes.append("ok")
            except rmq.StoreIOError:
                outcomes.append("err")
        assert outcomes == ["ok", "ok", "err", "err", "ok", "ok"]
        assert disarm_faults("write") == 0, "the fault disarmed itself after `times` failures"


def test_bad_fault_arguments_are_typed_errors() -> None:
    assert FAULT_POINTS == ("flush", "fsync", "allocate", "write")
    with pytest.raises(rmq.InvalidInputError, match="unknown fault point"):
        inject_fault("msync")
    for kwargs in ({"times": 0}, {"after": -1}, {"errno": 0}, {"after": 1.5}, {"times": True}, {"after": 2**64}):
        with pytest.raises(rmq.InvalidInputError):
            inject_fault("write", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(rmq.InvalidInputError):
        inject_fault(3)  # type: ignore[arg-type]
    with pytest.raises(rmq.InvalidInputError):
        disarm_faults("nope")
    assert disarm_faults() == 0, "nothing was armed by the rejected calls"


def test_a_close_that_failed_says_so_again_when_called_again(store_dir: Path) -> None:
    """QA: after close() raised (a full disk), a second close() returned as if it had closed cleanly, having done
    nothing: the abort marker stays and dispatch and the delay offsets were never finished. It says so now, once;
    the next open recovers, as after a crash."""
    store = rmq.MessageStore(store_dir, small_config(), start_services=False)
    store.put("T", b"a")
    with injected_fault("flush", errno=errno.ENOSPC, path=store_dir), pytest.raises(rmq.DiskFullError):
        store.close()
    assert store.closed
    with pytest.raises(rmq.StorePoisonedError, match="an earlier close.. failed: .*no space left.*abort marker stays"):
        store.close()
    store.close()
    assert (store_dir / "abort").exists()
    with rmq.MessageStore(store_dir, small_config()) as again:
        assert again.unclean_shutdown and [m.body for m in again.scan()] == [b"a"]


def test_a_read_only_file_system_says_to_open_the_store_read_only(store_dir: Path) -> None:
    with rmq.MessageStore(store_dir, small_config()) as store:
        store.put("T", b"a")
        with injected_fault("flush", errno=errno.EROFS, path=store_dir), pytest.raises(rmq.StoreIOError) as info:
            store.flush()
        assert info.value.errno == errno.EROFS and "read_only=True" in str(info.value), info.value
        with pytest.raises(rmq.StorePoisonedError):
            store.close()
