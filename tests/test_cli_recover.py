"""An operator's way through a damaged store from the command line: `rmq scan --recovery salvage` reads every
valid record, after the damage too, without changing a byte; `rmq recover --mode truncate` cuts the log in place
as RocketMQ does, after which the store opens; `rmq recover` after a kill discards the unfinished append and
leaves a cleanly closed store; `rmq export --skip-damage` copies what it can read and lists what it left out.
Before these, the strict open's advice (`recovery="truncate"` / `"salvage"`) could only be followed from Python."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_read_only import snapshot

import rmq
from conftest import SEGMENT, small_config
from rmq.check import check_store

N = 60


def rmq_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rmq.cli", *map(str, args)], capture_output=True, text=True, timeout=300, check=False
    )


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int], int]:
    """A store of N messages over several segments, closed cleanly, then one record in its newest segment with a
    flipped magic code and valid records after it. Returns the store, every record's offset, and the victim's."""
    root = tmp_path_factory.mktemp("dmg") / "s"
    with rmq.MessageStore(root, small_config()) as s:
        offsets = [s.put("T", b"body-%03d" % i + b"." * 100, keys=f"k{i}").wrote_offset for i in range(N)]
    newest = [o for o in offsets if o // SEGMENT == offsets[-1] // SEGMENT]
    victim = newest[len(newest) // 2]
    assert victim != newest[-1]
    seg = root / "commitlog" / f"{victim // SEGMENT * SEGMENT:020d}"
    data = bytearray(seg.read_bytes())
    data[victim % SEGMENT + 5] ^= 0x40
    seg.write_bytes(data)
    return root, offsets, victim


def test_scan_with_salvage_reads_past_the_damage_and_changes_nothing(
    damaged: tuple[Path, list[int], int], tmp_path: Path
) -> None:
    root, offsets, victim = damaged
    before = snapshot(root)
    strict = rmq_cli("scan", root)
    assert strict.returncode == 2 and "rmq scan STORE --recovery salvage" in strict.stderr, strict.stderr
    p = rmq_cli("scan", root, "--recovery", "salvage", "--json")
    assert p.returncode == 1, p.stderr
    got = [json.loads(line)["commitlog_offset"] for line in p.stdout.splitlines()]
    assert got == [o for o in offsets if o != victim]
    assert "read past" in p.stderr and f"commitlog offset {victim}" in p.stderr
    p = rmq_cli("scan", root, "--recovery", "truncate", "--json")
    assert p.returncode == 1 and "stopped at" in p.stderr
    assert [json.loads(line)["commitlog_offset"] for line in p.stdout.splitlines()] == [
        o for o in offsets if o < victim
    ]
    assert snapshot(root) == before


def test_dump_and_describe_read_past_the_damage_with_salvage_and_change_nothing(
    damaged: tuple[Path, list[int], int],
) -> None:
    """The diagnostic commands take `--recovery` too: without it they refuse a store whose commitlog is damaged,
    exactly when an operator needs to look at it."""
    root, offsets, victim = damaged
    before = snapshot(root)
    for command in (["dump"], ["describe"]):
        strict = rmq_cli(*command, root)
        assert strict.returncode == 2 and "--recovery salvage" in strict.stderr, strict.stderr
    p = rmq_cli("dump", root, "--recovery", "salvage")
    assert p.returncode == 0, p.stderr
    assert [json.loads(line)["commitlog_offset"] for line in p.stdout.splitlines()] == [
        o for o in offsets if o != victim
    ]
    p = rmq_cli("dump", root, "--cq", "--recovery", "truncate")
    assert p.returncode == 0 and p.stdout, p.stderr
    p = rmq_cli("describe", root, "--recovery", "salvage")
    assert p.returncode == 0, p.stderr
    kinds = [json.loads(line)["type"] for line in p.stdout.splitlines()]
    assert kinds.count("message") == N - 1 and "store" in kinds
    assert snapshot(root) == before


def test_recover_truncate_cuts_in_place_and_the_store_then_opens(
    damaged: tuple[Path, list[int], int], tmp_path: Path
) -> None:
    root, offsets, victim = damaged
    copy = tmp_path / "s"
    shutil.copytree(root, copy)
    p = rmq_cli("recover", copy)
    assert p.returncode == 2 and "corrupt data" in p.stderr  # strict: nothing done
    assert snapshot(copy) == snapshot(root)  # not even an mtime
    p = rmq_cli("recover", copy, "--mode", "truncate")
    assert p.returncode == 0, p.stderr
    dropped = len([o for o in offsets if o > victim])
    assert f"cut the log at commitlog offset {victim}" in p.stdout and f"{dropped} valid records" in p.stdout
    assert not (copy / "abort").exists()
    with rmq.MessageStore(copy, small_config(), read_only=True) as s:  # strict
        assert [m.commitlog_offset for m in s.scan()] == [o for o in offsets if o < victim]
    # The index and the checkpoint went with the cut (test_truncate_derived has the details).
    assert "index: " in p.stdout and "past the end of the commitlog" in p.stdout, p.stdout
    report = check_store(copy, small_config())
    assert report["clean"], report["findings"]
    p = rmq_cli("recover", copy)
    assert p.returncode == 0 and "nothing to repair" in p.stdout, p.stdout


def test_recover_after_a_kill_discards_the_torn_append(tmp_path: Path) -> None:
    root = tmp_path / "s"
    writer = (
        "import os, sys, rmq\n"
        "from conftest import small_config\n"
        "s = rmq.MessageStore(sys.argv[1], small_config())\n"
        "for i in range(20): s.put('T', b'x' * 100)\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", writer, str(root)], check=True, cwd=Path(__file__).parent)
    assert (root / "abort").exists()
    p = rmq_cli("recover", root, "--json")
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)["open_report"]
    assert report["damage"] == [] and report["recovery"] == "strict"
    assert not (root / "abort").exists()
    with rmq.MessageStore(root, read_only=True) as s:  # the sizes read off the files
        assert s.get_max_offset_in_queue("T", 0) == 20 and not s.unclean_shutdown


def test_recover_says_what_it_dispatched_again(tmp_path: Path) -> None:
    """QA: after a kill that left a dispatch backlog, `rmq recover` took 20 messages into their queues and said
    "nothing to repair"."""
    root = tmp_path / "s"
    writer = (
        "import os, sys, rmq\n"
        "from conftest import small_config\n"
        "s = rmq.MessageStore(sys.argv[1], small_config(), start_services=False)\n"
        "for i in range(20): s.put('T', b'x' * 100, keys=f'k{i}')\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", writer, str(root)], check=True, cwd=Path(__file__).parent)
    p = rmq_cli("recover", root)
    assert p.returncode == 0, p.stderr
    assert "nothing to repair" not in p.stdout, p.stdout
    assert "dispatched 20 records from commitlog offset 0 again: 20 consume-queue entries" in p.stdout, p.stdout
    p = rmq_cli("recover", root)
    assert p.returncode == 0 and "nothing to repair" in p.stdout, p.stdout


def test_recover_repairs_and_runs_nothing(tmp_path: Path) -> None:
    """`rmq recover` opens the store to repair it, not to run it. On main it started the store's services, so a
    delayed message that had come due was delivered into the store under repair: a new record at the end of
    the log (the interop test of a cut store saw it as one message after the cut, when the machine was slow
    enough for the schedule service to get a round in before the close). Here the recover is slowed down."""
    root = tmp_path / "s"
    with rmq.MessageStore(root, small_config(), start_services=False) as s:
        s.put("T", b"later", properties={"DELAY": "1"})  # level 1: due one second after its store time
        s.wait_dispatched(10)
        end = s.max_offset
    time.sleep(1.2)
    slow = (
        "import sys, time, rmq\n"
        "from rmq.cli import main\n"
        "wait = rmq.MessageStore.wait_dispatched\n"
        "def slow(self, *a):\n"
        "    time.sleep(1.5)\n"
        "    return wait(self, *a)\n"
        "rmq.MessageStore.wait_dispatched = slow\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", slow, "recover", str(root)], capture_output=True, text=True, timeout=120, check=False
    )
    assert p.returncode == 0 and "nothing to repair" in p.stdout, p.stderr
    with rmq.MessageStore(root, read_only=True) as s:
        assert s.max_offset == end and "T" not in s.topics()
    with rmq.MessageStore(root, small_config()) as s:  # a store opened to run delivers it
        assert s.wait_dispatched(10)
        deadline = time.monotonic() + 30
        while s.get_max_offset_in_queue("T", 0) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.get_max_offset_in_queue("T", 0) == 1 and s.max_offset > end


def test_export_skip_damage_copies_what_it_reads_and_lists_what_it_left_out(
    damaged: tuple[Path, list[int], int], tmp_path: Path
) -> None:
    root, offsets, victim = damaged
    p = rmq_cli("export", root, tmp_path / "x.jsonl")
    assert p.returncode == 2 and "corrupt data" in p.stderr and not (tmp_path / "x.jsonl").exists()
    p = rmq_cli("export", root, tmp_path / "x.jsonl", "--skip-damage", "--json")
    assert p.returncode == 1, p.stderr
    rows = [json.loads(line)["commitlog_offset"] for line in (tmp_path / "x.jsonl").read_text().splitlines()]
    # Only the damaged record is left out: the export goes on at the next record that validates completely, as
    # `rmq scan --recovery salvage` does.
    assert rows == [o for o in offsets if o != victim]
    skipped = json.loads(p.stdout)["skipped"]
    after = offsets[offsets.index(victim) + 1]
    assert [(s["offset"], s["length"]) for s in skipped] == [(victim, after - victim)]
    assert f"left out {skipped[0]['length']} damaged bytes at commitlog offset {victim}" in p.stderr


def test_damage_in_an_older_segment_is_read_past_by_scan_and_export(tmp_path: Path) -> None:
    """Damage in a segment a clean open does not read (older than the newest three): `rmq scan --recovery
    salvage` reads past it (on main it failed with "corrupt data", as a strict scan does) and `rmq export
    --skip-damage` leaves out only the damaged record (on main the rest of its segment): both give every other
    record, name the damaged range and exit 1."""
    root = tmp_path / "s"
    with rmq.MessageStore(root, small_config()) as s:
        offsets = [s.put("T", b"body-%03d" % i + b"." * 100, keys=f"k{i}").wrote_offset for i in range(N)]
    assert offsets[-1] // SEGMENT >= 4
    victim = offsets[3]  # in the first segment, with records after it there
    seg = root / "commitlog" / f"{0:020d}"
    data = bytearray(seg.read_bytes())
    data[victim + 5] ^= 0x40
    seg.write_bytes(data)
    before = snapshot(root)
    after = offsets[4]
    p = rmq_cli("scan", root, "--json")
    assert p.returncode == 2 and f"at offset {victim}" in p.stderr, p.stderr
    p = rmq_cli("scan", root, "--recovery", "salvage", "--json")
    assert p.returncode == 1, p.stderr
    assert [json.loads(line)["commitlog_offset"] for line in p.stdout.splitlines()] == [
        o for o in offsets if o != victim
    ]
    assert f"read past {after - victim} damaged bytes at commitlog offset {victim}" in p.stderr, p.stderr
    p = rmq_cli("export", root, tmp_path / "x.jsonl", "--skip-damage", "--json")
    assert p.returncode == 1, p.stderr
    rows = [json.loads(line)["commitlog_offset"] for line in (tmp_path / "x.jsonl").read_text().splitlines()]
    assert rows == [o for o in offsets if o != victim]
    assert [(s["offset"], s["length"]) for s in json.loads(p.stdout)["skipped"]] == [(victim, after - victim)]
    assert snapshot(root) == before
