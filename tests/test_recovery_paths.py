"""RocketMQ's two recoveries seen from Python, after a real SIGKILL: a child writes, waits longer than
RocketMQ's 3 s margin, writes on, flushes (the checkpoint), writes more and is killed. The next open takes the
abnormal path from the newest segment stored before the checkpoint's point less the margin and validates every
byte after it; after a clean close the normal path validates the last three segments only. `recovery_report`
says which."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import rmq

SEGMENT = 16 * 1024
MIB = 1024 * 1024
CONFIG = {"mapped_file_size_commit_log": SEGMENT, "flush_disk_type": "ASYNC_FLUSH"}

CHILD = """
import json, sys, time
import rmq
store = rmq.MessageStore(sys.argv[1], rmq.StoreConfig(**json.loads(sys.argv[2])))
acks = []
def put(i):
    r = store.put("T", b"%06d" % i * 30, queue_id=i % 2, tags="A", keys=f"k{i}")
    acks.append((r.wrote_offset, r.store_timestamp))
for i in range(300):
    put(i)
time.sleep(3.2)
for i in range(300, 600):
    put(i)
store.wait_dispatched(60)
store.flush()
for i in range(600, 900):
    put(i)
print(json.dumps(acks), flush=True)
time.sleep(600)
"""


def killed_store(root: Path) -> list[tuple[int, int]]:
    """Runs the child on `root`, kills it with SIGKILL once it has written, returns its (offset, store time)s."""
    args = [sys.executable, "-c", CHILD, str(root), json.dumps(CONFIG)]
    with subprocess.Popen(args, stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        line = child.stdout.readline()
        child.send_signal(signal.SIGKILL)
    return [(o, t) for o, t in json.loads(line)]


def test_a_kill_takes_the_abnormal_path_over_everything_after_the_checkpoint(tmp_path: Path) -> None:
    root = tmp_path / "store"
    acks = killed_store(root)
    assert (root / "abort").exists()
    physic, logics = struct.unpack(">qq", (root / "checkpoint").read_bytes()[:16])
    min_ts = min(physic, logics) - 3000
    assert min_ts > 0
    with rmq.MessageStore(root, rmq.StoreConfig(**CONFIG)) as store:
        r = store.recovery_report
        assert store.unclean_shutdown and r["path"] == "abnormal"
        end = store.max_offset
        last = store.read(max(o for o, _ in acks))
        assert last is not None and end == max(o for o, _ in acks) + last.store_size
        start = r["start_offset"]
        assert start % SEGMENT == 0 and r["validated_bytes"] == end - start
        assert r["start_segment"] == str(root / "commitlog" / f"{start:020d}")
        # Every message stored after the checkpoint's point (less the margin) was validated ...
        after = [o for o, t in acks if t > min_ts]
        assert after and min(after) >= start
        # ... from the newest segment whose first record is not: the first segments were not read.
        assert start > 0 and start == (min(after) - 1) // SEGMENT * SEGMENT
        assert r["checkpoint_restart"] is not None and r["checkpoint_restart"] <= min(after)
        assert r["validate_seconds"] >= 0 and r["open_seconds"] >= r["validate_seconds"]
        assert [m.keys if (m := store.read(o)) else None for o, _ in acks] == [[f"k{i}"] for i in range(900)]
    # A clean close: the normal path, three segments from the end.
    with rmq.MessageStore(root, rmq.StoreConfig(**CONFIG)) as store:
        r = store.recovery_report
        assert not store.unclean_shutdown and r["path"] == "normal"
        segments = -(-store.max_offset // SEGMENT)
        assert r["start_offset"] == (segments - 3) * SEGMENT
        assert r["validated_bytes"] == store.max_offset - r["start_offset"] <= 3 * SEGMENT
        assert r["checkpoint_restart"] is None


def resident_pages(path: Path, start: int, end: int) -> int:
    """Pages of `path` in `[start, end)` that are in the page cache (`mincore` over a mapping that touches none)."""
    import ctypes
    import mmap

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    with open(path, "r+b") as fh:
        m = mmap.mmap(fh.fileno(), 0)
        try:
            buf = (ctypes.c_char * len(m)).from_buffer(m)
            pages = (len(m) + 4095) // 4096
            vec = (ctypes.c_ubyte * pages)()
            assert libc.mincore(ctypes.c_void_p(ctypes.addressof(buf)), ctypes.c_size_t(len(m)), vec) == 0
            del buf
            return sum(vec[i] & 1 for i in range(start // 4096, min(end // 4096, pages)))
        finally:
            m.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="page-cache residency through Linux's mincore")
@pytest.mark.parametrize("read_only", [True, False])
def test_a_torn_tail_is_classified_without_reading_the_rest_of_the_segment(tmp_path: Path, read_only: bool) -> None:
    """After a crash, the bytes after the end of the log are looked at to tell a torn write from damage. On main
    they were read through the mapping to the end of the segment: every never-written page of it (up to a
    gigabyte with RocketMQ's default) was faulted in as zeros, at every open of a live store by a view, and the
    valid records after a torn position were searched for there too. Only the data extents the filesystem
    reports are read now."""
    root = tmp_path / "s"
    segment = 128 * MIB
    config = rmq.StoreConfig(mapped_file_size_commit_log=segment)
    with rmq.MessageStore(root, config, start_services=False) as store:
        for i in range(100):
            store.put("T", b"x" * 100, keys=f"k{i}")
        end = store.max_offset
    log = root / "commitlog" / "00000000000000000000"
    with open(log, "r+b") as fh:
        fh.seek(end + 4096)
        fh.write(b"\xff" * 64)  # what a torn write leaves a page after the last record
        fh.flush()
        os.fsync(fh.fileno())
        os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    (root / "abort").touch()  # the writer was killed
    with rmq.MessageStore(root, config, read_only=read_only, start_services=False) as store:
        assert store.max_offset == end
        assert store.open_report["torn_bytes"] == 4160
        # The read-around of the pages the open did read (8 MiB a fault on this project's VM) stays far below.
        assert resident_pages(log, segment // 2, segment) == 0
