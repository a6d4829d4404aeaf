"""ASYNC_FLUSH: a slow writer dirties the pages it writes, not the large folios around them.

From Linux 6.16 ext4 caches file pages in large folios (up to 2 MiB), and a write through a mapping marks its
whole folio dirty again after each flush cleaned it: a trickle of 100 puts of 1 KiB a second wrote 3.7 MB/s to
disk, 30 times its records. The warm service faults the pages ahead of a writer too slow for large folios in one
by one (under 16 MiB per flush interval: `Pace` in src/commitlog/mod.rs), and an open drops the cached pages past
the end of the log (large folios a fast writer before the close had faulted in) and starts the writer on single
pages; a writer that slows down gets the pages ahead of it faulted in again one by one. Where the kernel caches
single pages anyway (older kernels, other filesystems) all but the last test hold either way.

The measure is the putting thread's own `write_bytes` (`/proc/thread-self/io`): the kernel counts a page cache
folio's whole size against the thread that dirties it, so each put that lands in a folio the last flush cleaned
counts the folio."""

from __future__ import annotations

import gc
import time
from pathlib import Path

import pytest

import rmq

pytestmark = pytest.mark.skipif(not Path("/proc/thread-self/io").exists(), reason="needs Linux's /proc")

MIB = 1024 * 1024
SEGMENT = 64 * MIB


def dirtied_by_this_thread() -> int:
    """Bytes of page cache this thread has dirtied (counted by folio), from `/proc/thread-self/io`."""
    for line in Path("/proc/thread-self/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    raise AssertionError("no write_bytes in /proc/thread-self/io")


def config() -> rmq.StoreConfig:
    # The default flush interval (500 ms): a second of trickling meets two flushes.
    return rmq.StoreConfig(mapped_file_size_commit_log=SEGMENT, flush_disk_type="ASYNC_FLUSH")


def fill_fast(store: rmq.MessageStore, until: int) -> None:
    """Batches of 4 KiB bodies as fast as this thread can, until the log is `until` bytes long."""
    batch = [b"f" * 4096] * 64
    while store.max_offset < until:
        assert store.put_batch("Fast", batch).status == rmq.PutMessageStatus.PUT_OK


def trickle(store: rmq.MessageStore, puts: int = 50, pause: float = 0.025) -> int:
    """`puts` single 1 KiB puts, `pause` seconds apart (40 a second: 40 KiB/s); returns the bytes this
    thread dirtied meanwhile."""
    body = b"t" * 1024
    before = dirtied_by_this_thread()
    for i in range(puts):
        assert store.put("Slow", body, keys=f"k{i}").status == rmq.PutMessageStatus.PUT_OK
        time.sleep(pause)
    return dirtied_by_this_thread() - before


def test_a_slow_writer_after_a_reopen_dirties_its_own_pages(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = rmq.MessageStore(root, config())
    # 48 MiB at full speed: past where the kernel's read-around, which starts small in a file, makes 2 MiB
    # folios; the warm service has faulted in the rest of the segment ahead, and the close leaves it cached.
    fill_fast(store, 48 * MIB)
    store.close()
    del store
    gc.collect()  # the mappings go with the last reference
    with rmq.MessageStore(root, config()) as store:
        dirtied = trickle(store)
    # 50 KiB of records, each page dirtied again after a flush at most a few times: 0.02 MiB here, against
    # MiBs when the reopened writer wrote into the cached 2 MiB folios.
    assert dirtied < 1 * MIB, f"50 puts of 1 KiB dirtied {dirtied / MIB:.1f} MiB"


def test_a_writer_that_slows_down_gets_single_pages_ahead_within_a_few_seconds(tmp_path: Path) -> None:
    """No reopen: a burst at full speed, then a trickle. The warm service's rounds (one a second at least) see
    the slow-down and fault the pages ahead of the writer in again one by one."""
    # A larger segment: the burst's pages reach 2 MiB folios only some 40 MiB after the first warm round's
    # single pages (the kernel's read-around starts small again where the warm service hands it back).
    config = rmq.StoreConfig(mapped_file_size_commit_log=256 * MIB, flush_disk_type="ASYNC_FLUSH")
    with rmq.MessageStore(tmp_path / "store", config) as store:
        fill_fast(store, 112 * MIB)
        time.sleep(2.5)
        dirtied = trickle(store)
    # 0.01 MiB here; 6.0 MiB when the trickle wrote into the 2 MiB folios faulted in for the burst.
    assert dirtied < 1 * MIB, f"50 puts of 1 KiB dirtied {dirtied / MIB:.1f} MiB"


def test_a_writer_slow_for_its_flush_interval_gets_single_pages(tmp_path: Path) -> None:
    """The judgement is relative to the flush interval: at 10 ms a writer needs 1.6 GB/s to count as fast, so
    this thread's batches at full speed get single pages all along, and the trickle after them, flushed every
    10 ms, dirties about a page a put."""
    config = rmq.StoreConfig(
        mapped_file_size_commit_log=SEGMENT,
        flush_disk_type="ASYNC_FLUSH",
        flush_interval_commit_log=10,
        flush_commit_log_least_pages=0,
    )
    with rmq.MessageStore(tmp_path / "store", config) as store:
        fill_fast(store, 48 * MIB)
        dirtied = trickle(store)
    # 0.2 MiB here (50 puts, each flushed apart); in 2 MiB folios each put's page came with its folio.
    assert dirtied < 2 * MIB, f"50 puts of 1 KiB dirtied {dirtied / MIB:.1f} MiB"


def test_a_fast_writer_keeps_large_folios(tmp_path: Path) -> None:
    """The other side: a writer at full speed is judged fast after its first 16 MiB, and the pages faulted in
    ahead of it from then on come in large folios again (single pages cost it about 40 % of its throughput).
    Folio sizes are read from `/proc/self/pagemap` and `/proc/kpageflags` (root only). A writer the host stops
    for half a second or more is judged slow, correctly (the judgement is bytes per time between the warm
    service's rounds), and gets single pages past that point: a run counts if any of three stores shows the
    large folios."""
    seen: list[float] = []
    for attempt in range(3):
        root = tmp_path / f"store{attempt}"
        with rmq.MessageStore(root, config()) as store:
            fill_fast(store, 60 * MIB)
            time.sleep(0.2)
            segment = sorted((root / "commitlog").iterdir())[0]
            folios = folio_sizes(segment, 0, SEGMENT)
        if folios is None:
            pytest.skip("page frames are not readable (not root)")
        large = sum(size for pos, size in folios if size > 4096 and pos >= 40 * MIB)
        # The first pages were faulted in on the guess "slow" (all of the first 16 MiB when the warm service
        # stays ahead; a writer that overtakes it faults its own under the kernel's read-around); from 40 MiB on
        # the read-around has made them large again (its ramp restarts where the warm service hands it back).
        if large == 0 and all(size == 4096 for _, size in folios):
            pytest.skip("this kernel caches this file in single pages only")
        seen.append(large / MIB)
        if large >= 8 * MIB:
            return
    raise AssertionError(f"MiB of the segment past 40 MiB in large folios, in each store: {seen}")


def folio_sizes(path: Path, lo: int, hi: int) -> list[tuple[int, int]] | None:
    """The folios of this process's mapping of `path` over file bytes `[lo, hi)` that are mapped, as (file
    offset, bytes), from the page frames behind the mapping; `None` where the frames cannot be read."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[5] == str(path):
            base, offset = int(fields[0].split("-")[0], 16), int(fields[2], 16)
            break
    else:
        raise AssertionError(f"{path} is not mapped")
    head, tail = 1 << 15, 1 << 16  # KPF_COMPOUND_HEAD, KPF_COMPOUND_TAIL
    folios: list[tuple[int, int]] = []
    with open("/proc/self/pagemap", "rb") as pagemap, open("/proc/kpageflags", "rb") as kflags:
        for pos in range(lo, hi, 4096):
            pagemap.seek((base + pos - offset) // 4096 * 8)
            entry = int.from_bytes(pagemap.read(8), "little")
            if not entry >> 63:
                continue  # not mapped
            frame = entry & ((1 << 55) - 1)
            if frame == 0:
                return None
            kflags.seek(frame * 8)
            flags = int.from_bytes(kflags.read(8), "little")
            if flags & tail and not flags & head and folios and sum(folios[-1]) == pos:
                folios[-1] = (folios[-1][0], folios[-1][1] + 4096)
            else:
                folios.append((pos, 4096))
    return folios
