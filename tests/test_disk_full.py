"""A full filesystem: puts fail with a typed `DiskFullError` (never a SIGBUS), nothing acknowledged is lost, the
store reopens and reads while still full, and after space is freed puts go on with dense queue offsets.

`test_full_tmpfs` fills a real 16 MiB tmpfs (CI runs as root; there a failing mount fails the test). Where
mounting is not possible outside CI it says so and runs the scenario on the fault seam instead, as
`test_full_disk_simulated_by_the_fault_seam` always does. Each phase runs in a child process
(`disk_full_child.py`), so a SIGBUS shows up as a failed exit status rather than killing the test run.
"""

from __future__ import annotations

import errno
import json
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

CHILD = Path(__file__).with_name("disk_full_child.py")


def run_child(mode: str, root: Path, state: Path, simulate: bool) -> dict:
    args = [sys.executable, str(CHILD), mode, str(root), str(state)] + (["--simulate"] if simulate else [])
    proc = subprocess.run(args, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, (
        f"{mode} child ended with status {proc.returncode} (a negative status is the signal that killed it, "
        f"-7 = SIGBUS)\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-6000:]}"
    )
    return json.loads(state.read_text())


def check_scenario(mount: Path, state_dir: Path, simulate: bool) -> None:
    root = mount / "store"
    state = state_dir / "state.json"
    filler = mount / "filler"
    if not simulate:
        filler.write_bytes(b"\x01" * (2 * 1024 * 1024))

    # 1. Fill: puts fail typed, every successful put got the next queue offset (checked in the child).
    s = run_child("fill", root, state, simulate)
    acked = s["acked"]
    assert s["fill_failures"] == 40
    assert len(acked) > 500, "the store held a good number of messages before the disk filled"
    if not simulate:
        usage = shutil.disk_usage(mount)
        assert usage.free < 64 * 1024, f"the filesystem is full ({usage.free} bytes free)"

    # 2. Reopen while still full, with the consume queues and the index to rebuild and not a byte free for
    # them: opening needs no space and reports that dispatch is blocked; every acknowledged message reads back
    # intact; a put that needs a new segment fails typed; the puts that fit continue the queue offsets.
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index")
    if not simulate:
        fill_to_the_brim(mount / "filler-top")
    s = run_child("full", root, state, simulate)
    assert s["full_recovery"]["dispatch_blocked"] is not None, s["full_recovery"]
    assert "no space left" in s["full_recovery"]["dispatch_blocked"]
    assert s["full_unreadable"] == [], "every acknowledged message reads back after reopening on a full disk"
    assert s["full_put_failed"], "the disk is still full: a put needing a new segment raised DiskFullError"

    # 3. Free space: puts go on, dispatch catches up, queue offsets are dense, nothing is lost or duplicated.
    if not simulate:
        filler.unlink()
        (mount / "filler-top").unlink()
    s = run_child("free", root, state, simulate=False)
    acked = s["acked"]
    assert len({a["key"] for a in acked}) == len(acked)
    by_queue: dict[int, dict[int, int]] = defaultdict(dict)
    for a in acked:
        assert a["qo"] not in by_queue[a["q"]], "a queue offset was acknowledged twice"
        by_queue[a["q"]][a["qo"]] = a["offset"]
    for q, entries in s["queues"].items():
        expected = by_queue[int(q)]
        assert [qo for qo, _ in entries] == list(range(len(entries))), f"queue {q} is dense from 0"
        assert dict((qo, off) for qo, off in entries) == expected, f"queue {q} holds exactly the acknowledged"
        assert s["next_qo"][q] == len(entries)
    missing = [a["key"] for a in acked if a["offset"] not in s["key_hits"][a["key"]]]
    assert missing == [], f"{len(missing)} keys are not found by query_message"
    assert s["dispatch_issues"] == 0
    assert s["free_recovery"]["dispatch_blocked"] is None


def fill_to_the_brim(path: Path) -> None:
    """Writes `path` until the filesystem has no byte left (ENOSPC)."""
    chunk = b"\x02" * 4096
    with path.open("wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc


def test_full_tmpfs(tmpfs: Path | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if tmpfs is None:
        with capsys.disabled():
            print(
                "\n[test_full_tmpfs] cannot mount a tmpfs here (not root or no permission, and CI is unset): "
                "simulating the full disk with the fault seam instead"
            )
        (tmp_path / "sim").mkdir()
        check_scenario(tmp_path / "sim", tmp_path, simulate=True)
        return
    check_scenario(tmpfs, tmp_path, simulate=False)


def test_full_disk_simulated_by_the_fault_seam(tmp_path: Path) -> None:
    (tmp_path / "fs").mkdir()
    check_scenario(tmp_path / "fs", tmp_path, simulate=True)


def test_a_lock_file_that_cannot_be_made_on_a_full_disk_is_disk_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """QA, on a full ext4: `PushConsumer.start()` raised a bare `OSError` (ENOSPC making `rmq-groups/`) where every
    other full-disk failure is `rmq.DiskFullError`."""
    import os
    from typing import Any

    import rmq
    from rmq._flock import FileLock

    real = os.open

    def full(path: Any, flags: int, *args: Any) -> int:
        if str(path).endswith("G.lock") and flags & os.O_CREAT:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, flags, *args)

    monkeypatch.setattr(os, "open", full)
    with pytest.raises(rmq.DiskFullError) as info, FileLock.of(tmp_path / "rmq-groups" / "G.lock").held():
        pass
    assert info.value.errno == errno.ENOSPC and "G.lock" in str(info.value)


SPARSE_CHILD = r"""
import json, sys
import rmq
root, mode = sys.argv[1], sys.argv[2]
out = {}
s = rmq.MessageStore(root, read_only=(mode == "ro"))
out["scanned"] = sum(1 for _ in s.scan(0))
out["max"] = [s.get_max_offset_in_queue("T", q) for q in (0, 1)]
got = []
for q in (0, 1):
    at = 0
    while at < 50:
        r = s.get_message("g", "T", q, at, 32)
        got += [m.keys for m in r.messages]
        at = r.next_begin_offset
out["keys"] = sorted(k for ks in got for k in ks)
out["queried"] = [len(s.query_message("T", k).messages) for k in ("k7", "k99", "missing")]
try:
    s.close()
    out["close"] = "ok"
except rmq.DiskFullError:
    out["close"] = "DiskFullError"
print(json.dumps(out))
"""


def test_a_sparse_copy_of_a_store_on_a_full_tmpfs_opens_reads_and_checks(tmpfs: Path | None, tmp_path: Path) -> None:
    """RocketMQ makes its consume-queue files sparse, and `cp --sparse`, `rsync -S` and `tar -S` copy any store
    so. On tmpfs, reading a hole through a mapping allocates its page; on a full tmpfs that kills the reader
    with SIGBUS. Opening (writable and read-only) and checking such a copy on a full tmpfs must read only the
    files' data and answer with every message."""
    if tmpfs is None:
        pytest.skip("cannot mount a tmpfs here (not root, and CI is unset)")
    import rmq

    orig = tmp_path / "orig"
    cfg = rmq.StoreConfig(
        mapped_file_size_commit_log=1024 * 1024,
        mapped_file_size_consume_queue=60_000,
        max_hash_slot_num=200_000,  # a slot table mostly holes, as any real index file's
        max_index_num=4000,
    )
    s = rmq.MessageStore(orig, cfg)
    for i in range(100):
        s.put("T", b"x" * 200, queue_id=i % 2, keys=[f"k{i}"])
    s.close()
    store = tmpfs / "store"
    subprocess.run(["cp", "-a", "--sparse=always", str(orig), str(store)], check=True)
    cq = store / "consumequeue" / "T" / "0" / "00000000000000000000"
    assert cq.stat().st_blocks * 512 < cq.stat().st_size, "the copy's consume-queue file should be sparse"
    crashed = tmpfs / "crashed"  # as a kill leaves it: the open checks the index files too
    subprocess.run(["cp", "-a", "--sparse=always", str(orig), str(crashed)], check=True)
    (crashed / "abort").touch()
    fill_to_the_brim(tmpfs / "filler")
    expected_keys = sorted(f"k{i}" for i in range(100))
    for mode, where in (("ro", store), ("rw", store), ("ro", crashed)):
        proc = subprocess.run(
            [sys.executable, "-c", SPARSE_CHILD, str(where), mode], capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, f"{mode}: status {proc.returncode} (-7 = SIGBUS)\n{proc.stderr[-3000:]}"
        out = json.loads(proc.stdout)
        assert out["scanned"] == 100 and out["max"] == [50, 50] and out["keys"] == expected_keys, (mode, out)
        assert out["queried"] == [1, 1, 0], out
        # A writable close may need to claim the sparse index file's space: refused as a full disk, typed.
        assert out["close"] in ("ok", "DiskFullError") if mode == "rw" else out["close"] == "ok", out
    for where in (store, crashed):
        check = subprocess.run(
            [sys.executable, "-m", "rmq.cli", "check", str(where)], capture_output=True, text=True, timeout=120
        )
        assert check.returncode in (0, 1), f"status {check.returncode} (-7 = SIGBUS)\n{check.stdout}\n{check.stderr}"
        assert "100 records" in check.stdout and "100 consume-queue entries" in check.stdout, check.stdout
    # With space freed, the store takes puts again at the next queue offsets.
    (tmpfs / "filler").unlink()
    s = rmq.MessageStore(store)
    assert s.put("T", b"y", queue_id=0).queue_offset == 50
    s.close()


INODES_CHILD = """
import json, sys, rmq
sys.path.insert(0, sys.argv[2])
from conftest import small_config
cfg = small_config(mapped_file_size_commit_log=64 << 10, mapped_file_size_consume_queue=20 * 4096)
out = {"first": None, "put": 0}
s = rmq.MessageStore(sys.argv[1], cfg)
try:
    while out["put"] < 100000:
        r = s.put("T", b"x" * 1000, queue_id=0, keys="k")
        out["first"] = r.queue_offset if out["first"] is None else out["first"]
        out["put"] += 1
except rmq.DiskFullError as e:
    out.update(errno=e.errno, message=str(e), oserror=isinstance(e, OSError))
# Dispatch may be short of inodes too (a new consume-queue or index file): it goes on once there are some.
s.wait_dispatched(5)
out["max"] = s.get_max_offset_in_queue("T", 0)
out["read"] = len(s.get_message("G", "T", 0, 0, 32).messages)
print(json.dumps(out), flush=True)
try:
    s.close()
except rmq.DiskFullError:
    pass  # what could not be written at the close is written by the next open

"""


def test_no_free_inodes_is_disk_full_and_says_so(tmp_path: Path) -> None:
    """A filesystem out of inodes refuses a new file with ENOSPC while `df -h` shows free space: the put that
    needs a new segment is `DiskFullError` (nothing written, no queue offset used), and its message says that
    inodes ran out, not space; once files are deleted, puts go on from the next queue offset."""
    import os

    mount = tmp_path / "mnt"
    mount.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m,nr_inodes=32", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail(f"CI must mount a tmpfs for this test ({proc.stderr.strip()})")
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip()})")
    try:
        spares = [mount / f"spare{i}" for i in range(6)]
        for f in spares:
            f.touch()
        run = [sys.executable, "-c", INODES_CHILD, str(mount / "store"), str(Path(__file__).parent)]
        first = json.loads(subprocess.run(run, capture_output=True, text=True, check=True, timeout=120).stdout)
        assert first["errno"] == errno.ENOSPC and first["oserror"], first
        assert "no free inodes" in first["message"] and "df -i" in first["message"], first["message"]
        assert shutil.disk_usage(mount).free > 32 << 20, "space was never short"
        n = first["put"]
        # The queue may lag (its file, or all of it, waits for an inode: dispatch goes on when there is one).
        assert n > 0 and 0 <= first["max"] <= n and first["read"] == min(first["max"], 32), first
        for f in spares:
            f.unlink()
        second = json.loads(subprocess.run(run, capture_output=True, text=True, check=True, timeout=120).stdout)
        assert second["first"] == n and second["put"] > 0, second
        assert "no free inodes" in second["message"], second
    finally:
        if subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], check=True)
