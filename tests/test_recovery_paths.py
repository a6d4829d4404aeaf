"""RocketMQ's two recoveries seen from Python, after a real SIGKILL: a child writes, waits longer than
RocketMQ's 3 s margin, writes on, flushes (the checkpoint), writes more and is killed. The next open takes the
abnormal path from the newest segment stored before the checkpoint's point less the margin and validates every
byte after it; after a clean close the normal path validates the last three segments only. `recovery_report`
says which."""

from __future__ import annotations

import json
import signal
import struct
import subprocess
import sys
from pathlib import Path

import rmq

SEGMENT = 16 * 1024
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
