"""pytest-benchmark of SYNC_FLUSH puts from Python threads: the group commit service (`start_services()`)
against the per-put msync of a store without running services, with 1, 4 and 16 producer threads. One round:
every thread puts `PUTS_PER_ROUND // threads` 128-byte messages; the put releases the GIL while it waits for
its flush. `extra_info` holds messages per round and the latency percentiles (p50 / p99 / p99.9, µs) of the
puts of every round. Off in the normal test run; `make bench` runs it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rmq

CONFIG = rmq.StoreConfig(
    mapped_file_size_commit_log=256 * 1024 * 1024, flush_disk_type="SYNC_FLUSH", message_index_enable=False
)
BODY = b"x" * 128
PUTS_PER_ROUND = 1600


@pytest.fixture(params=["group", "inline"])
def sync_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[rmq.MessageStore]:
    store = rmq.MessageStore(tmp_path / "store", CONFIG, start_reput=False)
    if request.param == "group":
        store.start_services()
    yield store
    store.close()


def _percentile(sorted_us: list[float], p: float) -> float:
    return sorted_us[min(len(sorted_us) - 1, round((len(sorted_us) - 1) * p))]


@pytest.mark.parametrize("threads", [1, 4, 16])
def test_sync_flush_put_128b(benchmark: Any, sync_store: rmq.MessageStore, threads: int) -> None:
    """SYNC_FLUSH `put` of a 128-byte body from `threads` threads, PUTS_PER_ROUND puts per round."""
    latencies: list[float] = []
    lock = threading.Lock()
    each = PUTS_PER_ROUND // threads

    def produce() -> None:
        put, clock = sync_store.put, time.perf_counter
        mine = []
        for _ in range(each):
            t0 = clock()
            put("Bench", BODY)
            mine.append((clock() - t0) * 1e6)
        with lock:
            latencies.extend(mine)

    def run() -> None:
        workers = [threading.Thread(target=produce) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()

    benchmark.pedantic(run, rounds=8, warmup_rounds=1)
    latencies.sort()
    benchmark.extra_info["messages_per_round"] = each * threads
    for name, p in (("p50_us", 0.5), ("p99_us", 0.99), ("p999_us", 0.999)):
        benchmark.extra_info[name] = round(_percentile(latencies, p), 1)
    assert len(latencies) == each * threads * 9
