"""The latency of each single put from Python through several commitlog segment rolls (`make bench-latency`):
percentiles over every put, the slowest, and each put that rolled into a new segment on its own.

Defaults: 260,000 puts of 1 KiB bodies (a tag and a key each, 4 queues) into a fresh store with 64 MiB
segments (4 rolls), ASYNC_FLUSH, services running, in a temporary directory under `--dir` (default: the system's),
deleted after. `--runs N` repeats it in fresh stores. Wall-clock `perf_counter_ns` around each `put` call.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import rmq


def run(root: Path, count: int, size: int, segment: int) -> None:
    store = rmq.MessageStore(root, rmq.StoreConfig(mapped_file_size_commit_log=segment))
    body = b"x" * size
    clock = time.perf_counter_ns
    took: list[int] = []
    rolls: list[int] = []
    current = 0
    for i in range(count):
        t0 = clock()
        r = store.put("T", body, queue_id=i % 4, tags="TagA", keys=f"k{i}")
        t1 = clock()
        took.append(t1 - t0)
        if r.wrote_offset // segment != current:
            current = r.wrote_offset // segment
            rolls.append(t1 - t0)
    store.close()
    took.sort()

    def at(p: float) -> float:
        return took[min(len(took) - 1, int(p * len(took)))] / 1000

    print(
        f"{count} puts of {size} B: p50 {at(0.5):.2f} µs, p99 {at(0.99):.2f} µs, p99.9 {at(0.999):.1f} µs, "
        f"p99.99 {at(0.9999):.0f} µs, max {took[-1] / 1000:.0f} µs; "
        f"the {len(rolls)} puts that rolled: {', '.join(f'{x / 1000:.0f}' for x in rolls)} µs"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--count", type=int, default=260_000)
    ap.add_argument("--size", type=int, default=1024, help="body bytes")
    ap.add_argument("--segment-mib", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=None)
    a = ap.parse_args()
    for _ in range(a.runs):
        tmp = Path(tempfile.mkdtemp(prefix="rmq-latency-", dir=a.dir))
        try:
            run(tmp / "store", a.count, a.size, a.segment_mib << 20)
        finally:
            shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
