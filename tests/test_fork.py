"""A store belongs to the process that opened it (src/fork.rs): a child made by `os.fork()` gets a copy of the
parent's store object, sharing the parent's mappings but none of its threads or its lock. Its calls must raise
`StoreStateError` and its close and exit must touch nothing: before the fix, a child's exit closed "its" store
(and panicked joining threads it does not have), removing the parent's `abort` marker and the segment made ahead
of the parent's writer, so the parent's next acknowledged puts went into an unlinked file and the store would not
open after a crash. The scenario runs in tests/fork_child.py: a fork inside pytest would run pytest twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import rmq

HERE = Path(__file__).parent
SEGMENT = 64 * 1024


@pytest.mark.parametrize("ending", ["kill", "close"])
def test_a_forked_child_cannot_use_the_parents_store_and_its_exit_touches_nothing(tmp_path: Path, ending: str) -> None:
    root = tmp_path / "s"
    run = subprocess.run(
        [sys.executable, str(HERE / "fork_child.py"), str(root), ending], capture_output=True, text=True, timeout=120
    )
    lines = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 2, (run.stdout, run.stderr)
    child, parent = lines[0]["child"], lines[1]
    for name, *outcome in child:
        if name == "close":
            assert outcome == ["ok"], child
        else:
            assert outcome[0] == "StoreStateError" and "forked" in outcome[1], child
    assert "Panic" not in run.stderr, run.stderr
    assert parent["child_status"] == 0
    assert parent["files_changed"] == [], "the child's exit changed the parent's store"
    assert parent["abort"], "the child's exit removed the parent's abort marker"
    assert parent["end_unchanged"], "the child wrote into the parent's log"
    first = parent["acknowledged"][0]
    with rmq.MessageStore(root, rmq.StoreConfig(mapped_file_size_commit_log=SEGMENT)) as again:
        assert again.unclean_shutdown == (ending == "kill")
        after = [m for m in again.scan() if m.body.startswith(b"after the fork")]
        assert [m.body for m in after] == [b"after the fork %d" % i for i in range(100)]
        assert [m.queue_offset for m in after] == list(range(first, first + 100))
        assert all(m.body != b"from the child" for m in again.scan())


def test_a_forked_child_opens_and_closes_a_store_of_its_own(tmp_path: Path) -> None:
    code = f"""
import os, sys, rmq
parent = rmq.MessageStore({str(tmp_path / "parent")!r})
parent.put("T", b"p")
pid = os.fork()
if pid == 0:
    with rmq.MessageStore({str(tmp_path / "child")!r}) as own:
        own.put("T", b"c")
    sys.exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert not (tmp_path / "child" / "abort").exists()
    assert not (tmp_path / "parent" / "abort").exists()
    with rmq.MessageStore(tmp_path / "child") as own:
        assert not own.unclean_shutdown
        assert [m.body for m in own.scan()] == [b"c"]
    assert os.path.exists(tmp_path / "parent" / "commitlog")


def test_a_forked_child_opens_the_parents_store_once_the_parent_closed_it(tmp_path: Path) -> None:
    """The child inherits the parent's in-process registry of open stores but none of its locks: the inherited
    entry must not make the child's own open of that store a "second open in this process" for ever."""
    root = tmp_path / "s"
    code = f"""
import os, sys, rmq
store = rmq.MessageStore({str(root)!r})
store.put("T", b"parent")
read_end, write_end = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(write_end)
    os.read(read_end, 1)  # the parent has closed the store
    with rmq.MessageStore({str(root)!r}) as own:
        own.put("T", b"child")
    sys.exit(0)
store.close()
os.write(write_end, b"x")
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    with rmq.MessageStore(root) as store:
        assert not store.unclean_shutdown
        assert [m.body for m in store.scan()] == [b"parent", b"child"]
