"""Run by test_fork.py: opens a store at argv[1], forks, and lets the child try the parent's store and leave
through a normal interpreter exit (which drops the child's copy of the store object); then the parent goes on
putting and is killed (`SIGKILL`) or closes (argv[2]). Prints one JSON line of what each side saw."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import rmq

SEGMENT = 64 * 1024


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


root, ending = Path(sys.argv[1]), sys.argv[2]
store = rmq.MessageStore(root, rmq.StoreConfig(mapped_file_size_commit_log=SEGMENT))
while store.max_offset < SEGMENT // 2:
    store.put("T", b"z" * 1000)
deadline = time.monotonic() + 30
while len(os.listdir(root / "commitlog")) < 2:  # the segment the warm service makes ahead of the writer
    if time.monotonic() > deadline:
        sys.exit("no segment made ahead")
    time.sleep(0.02)
store.wait_dispatched()
store.flush()
time.sleep(0.2)
before, end = files(root), store.max_offset

pid = os.fork()
if pid == 0:
    seen = []
    for name, call in (
        ("put", lambda: store.put("T", b"from the child")),
        ("get_message", lambda: store.get_message("g", "T", 0, 0, 32)),
        ("read", lambda: store.read(0)),
        ("close", store.close),
    ):
        try:
            call()
            seen.append([name, "ok"])
        except Exception as e:  # noqa: BLE001 - reported to the test
            seen.append([name, type(e).__name__, str(e)])
    print(json.dumps({"child": seen}), flush=True)
    sys.exit(0)  # a normal exit: the interpreter drops the child's copy of `store`

_, status = os.waitpid(pid, 0)
report = {
    "child_status": os.waitstatus_to_exitcode(status),
    "files_changed": sorted(set(files(root)) ^ set(before)),
    "abort": (root / "abort").exists(),
    "end_unchanged": store.max_offset == end,
    "acknowledged": [store.put("T", b"after the fork %d" % i).queue_offset for i in range(100)],
}
print(json.dumps(report), flush=True)
if ending == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
store.close()
