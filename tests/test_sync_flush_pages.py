"""SYNC_FLUSH writes back what the puts changed, not the large folios around it.

From Linux 6.16 ext4 caches file pages in large folios (up to 2 MiB), and a write through a mapping marks its
whole folio dirty: each group commit's msync of a few new KiB wrote the whole folio back (16 producers of 1 KiB
SYNC_FLUSH puts, 64,000 puts: 2.5 GB written to disk for 78 MB of records, against 188 MB now, and 30-50 % fewer
puts a second). The segments being written under SYNC_FLUSH fault their pages in one by one (`MADV_RANDOM`,
`rr` in the mapping's VmFlags); a segment the writer has left reads ahead again. Where the kernel caches single
pages anyway (older kernels, other filesystems) the first test holds either way; the second checks the advice."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import rmq

pytestmark = pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux's /proc")

MIB = 1024 * 1024


def bytes_written() -> int:
    """Bytes this process has caused to be written to storage (every thread)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    raise AssertionError("no write_bytes in /proc/self/io")


def mapping_lines(path: Path) -> list[str]:
    """The lines /proc/self/smaps gives for this process's mapping of `path` (after its header line)."""
    lines: list[str] | None = None
    current = None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and len(fields) >= 5 and ":" in fields[3]:
            current = fields[5] if len(fields) > 5 else None
            if current == str(path):
                lines = []
        elif current == str(path) and lines is not None:
            lines.append(line)
    assert lines is not None, f"{path} is not mapped"
    return lines


def vm_flags(path: Path) -> set[str]:
    """The VmFlags of this process's mapping of `path`."""
    return {f for line in mapping_lines(path) if line.startswith("VmFlags:") for f in line.split()[1:]}


def test_a_sync_flush_put_writes_back_about_its_own_pages(tmp_path: Path) -> None:
    config = rmq.StoreConfig(mapped_file_size_commit_log=64 * MIB, flush_disk_type="SYNC_FLUSH")
    with rmq.MessageStore(tmp_path / "store", config) as store:
        # 24 MiB in: well past the start of the file, where the kernel's read-around still makes small folios.
        chunk = [b"f" * 4096] * 32
        for _ in range(24 * MIB // (4096 * 32)):
            assert store.put_batch("T", chunk).status == rmq.PutMessageStatus.PUT_OK
        puts, body = 100, b"x" * 1024
        before = bytes_written()
        for i in range(puts):
            assert store.put("T", body, keys=f"k{i}").status == rmq.PutMessageStatus.PUT_OK
        written = bytes_written() - before
    # Each put is flushed on its own here (one thread): its record's page or two, the warm service's write-back
    # of the space ahead (about what the puts used, in steps of 256 KiB) and the consume queue's and index's
    # periodic flushes: 2.6 MiB here, against 27.6 MiB when each msync wrote back the large folio around it.
    assert written < 8 * MIB, f"{puts} SYNC_FLUSH puts of 1 KiB wrote {written / MIB:.1f} MiB"


def test_the_segments_being_written_fault_single_pages_and_a_full_one_reads_ahead_again(tmp_path: Path) -> None:
    root = tmp_path / "store"
    segment = 4 * MIB
    config = rmq.StoreConfig(mapped_file_size_commit_log=segment, flush_disk_type="SYNC_FLUSH")
    with rmq.MessageStore(root, config) as store:
        batch = [b"s" * 4096] * 64
        while store.max_offset < 2 * segment + segment // 2:
            store.put_batch("T", batch)
        files = sorted((root / "commitlog").iterdir())
        first, second, third = files[:3]
        assert "rr" not in vm_flags(first) and "rr" not in vm_flags(second), "a full segment reads ahead"
        assert "rr" in vm_flags(third), "the segment being written faults single pages"
    # Reopened: the last segment is the one written next.
    with rmq.MessageStore(root, config) as store:
        assert "rr" in vm_flags(third)
        assert "rr" not in vm_flags(first)


def test_under_async_flush_single_pages_are_held_only_while_the_warm_service_faults_pages_in(tmp_path: Path) -> None:
    """ASYNC_FLUSH writes back in large steps for a fast writer; the warm service asks for single pages only
    around the pages it faults in ahead of a slow one (tests/test_slow_writer_pages.py), so once its rounds are
    done no segment's mapping keeps the advice, whether full or being written, and readers read ahead."""
    root = tmp_path / "store"
    config = rmq.StoreConfig(mapped_file_size_commit_log=4 * MIB)
    with rmq.MessageStore(root, config) as store:
        batch = [b"a" * 4096] * 64
        while store.max_offset < 2 * 4 * MIB + MIB:
            store.put_batch("T", batch)
        files = sorted((root / "commitlog").iterdir())
        assert len(files) >= 3
        deadline = time.monotonic() + 10
        while any("rr" in vm_flags(f) for f in files[:3]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [f.name for f in files[:3] if "rr" in vm_flags(f)] == []


def file_pmd_mapped_kib(path: Path) -> int:
    """Of this process's mapping of `path`, the KiB mapped by 2 MiB page-table entries (FilePmdMapped)."""
    return sum(int(line.split()[1]) for line in mapping_lines(path) if line.startswith("FilePmdMapped:"))


def thp_off() -> bool:
    p = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    return not p.exists() or "[never]" in p.read_text()


@pytest.mark.skipif(thp_off(), reason="transparent huge pages are off on this machine")
def test_under_async_flush_a_fast_writer_fills_a_new_segment_in_2_mib_folios(tmp_path: Path) -> None:
    """Without `MADV_HUGEPAGE` the kernel sizes a new file's folios by its read-ahead, which grows them step by
    step: the first tens of MiB of every segment were mapped by 4 KiB entries, and each such page's write-back
    sent a TLB-shootdown interrupt to the CPUs running the process (50,000-65,000 in 2,000,000 puts of 128
    bytes, against 15,000-21,000 now). The warm service now asks for 2 MiB folios for a fast writer.

    Of the second segment's first 64 MiB (40 written, the rest faulted in ahead), 2 MiB entries map 42-64 MiB
    with the advice and 2-24 MiB without it. The warm service judges the writer's pace over the time between
    its rounds, so a writer the host stops for half a second or more is judged slow, correctly, and gets single
    pages from there on (24-44 MiB mapped by 2 MiB entries when this loop sleeps 1.2 s once, as a loaded CI host
    did to it once): a run counts if any of three stores gets the large folios."""
    mapped = []
    for attempt in range(3):
        root = tmp_path / f"store{attempt}"
        segment = 64 * MIB
        with rmq.MessageStore(root, rmq.StoreConfig(mapped_file_size_commit_log=segment)) as store:
            batch = [b"h" * 4096] * 64
            while store.max_offset < segment + 40 * MIB:
                store.put_batch("T", batch)
            second = sorted((root / "commitlog").iterdir())[1]
            mapped.append(("hg" in vm_flags(second), file_pmd_mapped_kib(second) // 1024))
        if mapped[-1][0] and mapped[-1][1] >= 32:
            return
    raise AssertionError(f"the new segment is not mapped by 2 MiB entries (advice, MiB so mapped): {mapped}")
