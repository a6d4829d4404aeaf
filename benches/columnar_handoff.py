"""Rows per second of Rust's columnar decoding as Python receives it (`rmq.arrow.read_split`, `decode_records`):
the decode and the hand-over to pyarrow together, which is what the Spark source and UDFs pay per batch.

    python benches/columnar_handoff.py [MESSAGES]     # default 300,000 messages of 100 bytes, tags, 2 keys

Prints the best of 5 runs for: every column, one column (`commitlog_offset`), and `decode_records` over a binary
column of whole records. The store is built once under .benchmarks/.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

import rmq
import rmq.spark as rs
from rmq import arrow


def build(root: Path, messages: int) -> Path:
    store = root / "store"
    if (root / "done").exists():
        return store
    shutil.rmtree(root, ignore_errors=True)
    config = rmq.StoreConfig(mapped_file_size_commit_log=256 << 20, message_index_enable=False)
    with rmq.MessageStore(store, config, start_services=False) as s:
        for b in range(messages // 500):
            batch = [
                rmq.Message(b"x" * 100, tags="TagA", keys=[f"order-{b}-{i}", f"customer-{i % 97}"]) for i in range(500)
            ]
            s.put_batch("Bench", batch, queue_id=b % 4)
    (root / "done").touch()
    return store


def best(fn: Callable[[], int], runs: int = 5) -> tuple[float, int]:
    times = []
    rows = 0
    for _ in range(runs):
        t = time.perf_counter()
        rows = fn()
        times.append(time.perf_counter() - t)
    return min(times), rows


def main() -> None:
    messages = int(sys.argv[1]) if len(sys.argv) > 1 else 300_000
    store = build(Path(__file__).resolve().parent.parent / ".benchmarks" / f"handoff-{messages}", messages)
    splits = rs.plan_splits(store, 1 << 30)

    def read(columns: list[str]) -> Callable[[], int]:
        schema = arrow.arrow_schema(columns)
        return lambda: sum(
            b.num_rows for s in splits for b in arrow.read_split(s.path, s.base, s.start, s.end, schema=schema)
        )

    with rmq.MessageStore(store, read_only=True) as s:
        raw = []
        for m in s.scan():
            raw.append(bytes(s.read_raw(m.commitlog_offset)))  # type: ignore[arg-type]
            if len(raw) == 50_000:
                break
    records = pa.array(raw, pa.binary())

    def decode() -> int:
        return sum(len(arrow.decode_records(records.slice(i, 8192))) for i in range(0, len(records), 8192))

    for name, fn in (
        ("read_split all columns", read(list(arrow.COLUMNS))),
        ("read_split commitlog_offset", read(["commitlog_offset"])),
        ("decode_records all columns", decode),
    ):
        seconds, rows = best(fn)
        print(f"{name}: {rows} rows in {seconds:.3f}s = {rows / seconds:,.0f} rows/s")


if __name__ == "__main__":
    main()
