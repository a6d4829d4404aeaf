"""The next commitlog segment, made ahead of the writer by the `warm` service (as RocketMQ's
AllocateMappedFileService makes its next file): what a kill and a full disk leave. (A close removing it, and the
roll finding its pages in memory: tests/services.rs.)"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import rmq
from conftest import small_config
from rmq.testing import disarm_faults, inject_fault

SEGMENT = 64 * 1024


def segments(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "commitlog").iterdir())


def wait_for(what: str, cond: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.01)


def warm(store: rmq.MessageStore) -> rmq.ServiceStats:
    (stats,) = [s for s in store.service_stats() if s.name == "warm"]
    return stats


def bodies(store: rmq.MessageStore) -> list[bytes]:
    assert store.wait_dispatched(10.0)
    out: list[bytes] = []
    while batch := store.get_message("G", "T", 0, len(out), 32).messages:
        out += [m.body for m in batch]
    return out


CHILD = textwrap.dedent(
    """
    import sys, time
    import rmq
    config = rmq.StoreConfig(mapped_file_size_commit_log=int(sys.argv[2]))
    store = rmq.MessageStore(sys.argv[1], config)
    for i in range(10):
        store.put("T", b"%d" % i * 500)
    print("acked", flush=True)
    time.sleep(600)
    """
)


def ahead_made(root: Path) -> bool:
    names = segments(root)
    return len(names) == 2 and (root / "commitlog" / names[1]).stat().st_size == SEGMENT


def test_a_killed_writer_leaves_the_segment_made_ahead_and_the_next_open_removes_it(tmp_path: Path) -> None:
    root = tmp_path / "store"
    argv = [sys.executable, "-c", CHILD, str(root), str(SEGMENT)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as child:
        try:
            assert child.stdout is not None and child.stdout.readline() == "acked\n"
            # Made: the file is there at its full size (a kill between its creation and its sizing leaves an
            # empty file, which the next open removes as an interrupted creation).
            wait_for("the next segment is made", lambda: ahead_made(root))
        finally:
            os.kill(child.pid, signal.SIGKILL)
    first, ahead = segments(root)
    assert (root / "commitlog" / ahead).read_bytes() == bytes(SEGMENT), "the segment made ahead holds nothing"
    with rmq.MessageStore(root, rmq.StoreConfig(mapped_file_size_commit_log=SEGMENT)) as store:
        assert store.unclean_shutdown
        report = store.open_report
        assert report["removed_files"] == 1 and report["discarded_bytes"] == 0 and not report["damage"]
        assert segments(root) == [first]
        assert bodies(store) == [b"%d" % i * 500 for i in range(10)], "every acknowledged message"
        assert store.put("T", b"after").queue_offset == 10


def test_a_segment_that_cannot_be_made_ahead_is_the_warm_services_error_and_puts_go_on(store_dir: Path) -> None:
    config = small_config(mapped_file_size_commit_log=SEGMENT)
    # The writer's first segment is made; every later allocation in the commitlog finds the disk full.
    inject_fault("allocate", after=1, times=None, errno=errno.ENOSPC, path=store_dir / "commitlog")
    try:
        with rmq.MessageStore(store_dir, config) as store:
            store.put("T", b"x" * 1000)
            wait_for("the warm service failed", lambda: warm(store).errors >= 1)
            assert "no space left on the device" in (warm(store).last_error or ""), warm(store).last_error
            (first,) = segments(store_dir)
            # Nothing left behind, nothing refused: the puts that fit go on in the segment being written.
            for _ in range(20):
                assert store.put("T", b"x" * 1000).status == rmq.PutMessageStatus.PUT_OK
            assert segments(store_dir) == [first]
            # The roll meets the full disk itself: a typed error, no queue offset used.
            with pytest.raises(rmq.DiskFullError):
                for _ in range(100):
                    store.put("T", b"x" * 1000)
            acked = store.next_queue_offset("T", 0)
            disarm_faults()
            assert store.put("T", b"z" * 1000).queue_offset == acked, "the roll goes on once there is space"
            assert len(segments(store_dir)) >= 2
            assert bodies(store) == [b"x" * 1000] * acked + [b"z" * 1000]
    finally:
        disarm_faults()


def test_a_reader_following_the_writer_sees_the_segment_made_again_after_the_writer_reopens(tmp_path: Path) -> None:
    """A read-only store follows a writer (`refresh`) while the writer has its next segment made ahead; the
    writer closes (deleting that segment, which held nothing) and reopens, and its roll makes the segment
    again: the reader must map the new file, not keep reading the deleted one's zeros."""
    root = tmp_path / "store"
    config = rmq.StoreConfig(mapped_file_size_commit_log=SEGMENT)
    writer = rmq.MessageStore(root, config)
    writer.put("T", b"0" * 1000)
    wait_for("the next segment is made", lambda: len(segments(root)) == 2)
    with rmq.MessageStore(root, config, read_only=True) as reader:
        assert reader.refresh() == writer.max_offset
        end = writer.max_offset
        writer.close()
        assert len(segments(root)) == 1
        assert reader.refresh() == end, "a segment gone from the end changes nothing the reader read"
        writer = rmq.MessageStore(root, config)
        for i in range(1, 150):  # past the roll into the second segment and beyond
            writer.put("T", b"%d" % i * (1000 // len(b"%d" % i)))
        assert writer.max_offset > SEGMENT
        assert reader.refresh() == writer.max_offset, "the reader stopped at the segment made again"
        got = []
        while batch := reader.get_message("G", "T", 0, len(got), 32).messages:
            got += [m.body for m in batch]
        assert got == [b"%d" % i * (1000 // len(b"%d" % i)) for i in range(150)]
    writer.close()
