"""consumerOffset.json shared by several processes: each persist merges only what its process changed into the
file on disk, so no commit is lost or moved back by another process's older copy (rmq.offsets, rmq.group).

Two managers on one file stand for two processes (they share the process's fcntl lock, as two processes would
take turns on it); tests/test_group_kill.py does the same with real processes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import load_beside_a_persist_between_its_renames
from rmq.offsets import ConsumerOffsetManager


def fresh(path: Path) -> ConsumerOffsetManager:
    m = ConsumerOffsetManager(path)
    m.load()
    return m


def on_disk(path: Path) -> dict[int, int]:
    return fresh(path).query_offsets("G", "T")


def test_persists_merge_instead_of_overwriting(tmp_path: Path) -> None:
    path = tmp_path / "config" / "consumerOffset.json"
    a, b = fresh(path), fresh(path)
    a.commit_offset("G", "T", 0, 10)
    b.commit_offset("G", "T", 1, 20)
    a.persist()
    b.persist()
    assert on_disk(path) == {0: 10, 1: 20}
    a.commit_offset("G", "T", 0, 15)
    a.persist()
    b.commit_offset("G", "T", 1, 25)
    b.persist()  # b's copy of queue 0 (10) is older than the file's: the file keeps 15
    assert on_disk(path) == {0: 15, 1: 25}
    assert b.query_offset("G", "T", 0) == 15  # and b took it
    a.refresh()
    assert a.query_offset("G", "T", 1) == 25


def test_removals_are_this_process_s_own(tmp_path: Path) -> None:
    path = tmp_path / "config" / "consumerOffset.json"
    a, b = fresh(path), fresh(path)
    a.commit_offset("G", "T", 0, 1)
    a.commit_offset("H", "T", 0, 2)
    a.persist()
    b.refresh()
    b.remove_group("H")
    b.persist()
    a.commit_offset("G", "T", 0, 3)
    a.persist()
    assert fresh(path).query_offsets("G", "T") == {0: 3}
    b.commit_offset("G", "T", 1, 4)
    b.persist()
    assert fresh(path).query_offsets("G", "T") == {0: 3, 1: 4}
    # A removal is not merged into other processes: a still held H and wrote it back (the safe direction: an
    # older offset redelivers). Remove a group's offsets while no other process holds them.
    assert fresh(path).query_offsets("H", "T") == {0: 2}


def test_journal_lines_of_another_process_survive_its_persists(tmp_path: Path) -> None:
    path = tmp_path / "config" / "consumerOffset.json"
    a, b = fresh(path), fresh(path)
    a.commit_offset("G", "T", 0, 30, journal=True)
    b.commit_offset("G", "T", 1, 40)
    b.persist()  # folds a's journal line into the snapshot and removes the journal
    assert on_disk(path) == {0: 30, 1: 40}
    a.commit_offset("G", "T", 0, 31, journal=True)  # a's journal was replaced: a new one, tagged with b's snapshot
    assert on_disk(path) == {0: 31, 1: 40}
    b.commit_offset("G", "T", 1, 41, journal=True)
    assert on_disk(path) == {0: 31, 1: 41}


def test_a_killed_process_loses_no_journaled_commit(tmp_path: Path) -> None:
    path = tmp_path / "config" / "consumerOffset.json"
    a = fresh(path)
    a.commit_offset("G", "T", 0, 5)
    a.persist()
    child = (
        "import sys, os; from rmq.offsets import ConsumerOffsetManager as M\n"
        f"m = M({str(path)!r}); m.load()\n"
        "m.commit_offset('G', 'T', 1, 7, journal=True)\n"
        "os.kill(os.getpid(), 9)\n"
    )
    assert subprocess.run([sys.executable, "-c", child], check=False).returncode == -9
    a.commit_offset("G", "T", 0, 6)
    a.persist()
    assert on_disk(path) == {0: 6, 1: 7}
    assert fresh(path).data_version.counter >= 2


def test_a_load_never_sees_another_process_s_persist_between_its_renames(tmp_path: Path) -> None:
    # Another process's persist renames the file to .bak, then the new one in: a load in between would find no
    # main file and take the backup (an older table, reported as if the main file were damaged). The child stops
    # its persist right there, holding the file lock, until told to go on.
    path = tmp_path / "config" / "consumerOffset.json"
    a = fresh(path)
    a.commit_offset("G", "T", 0, 5)
    a.persist()
    b = ConsumerOffsetManager(path)
    load_beside_a_persist_between_its_renames(
        tmp_path,
        path,
        "import rmq.offsets as o; o._fault_point = stop",
        f"m = o.ConsumerOffsetManager({str(path)!r}); m.load(); m.commit_offset('G', 'T', 0, 6); m.persist()",
        b.load,
    )
    assert b.load_issues == []
    assert b.query_offsets("G", "T") == {0: 6}
