"""pytest-benchmark for `rmq check` (issue 16's goal: at least 1 GB/s per core from page cache with CRCs on):
a closed store of 1 KiB messages, checked whole (every record's CRC, every consume-queue entry and every index
entry against its record). Off in the normal test run; `make bench` runs it. `extra_info` holds the bytes and
records per round, so GB/s = record_bytes / mean."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rmq
from rmq.check import check_store

MESSAGES = 400_000
BATCH = 256
CONFIG = rmq.StoreConfig(mapped_file_size_commit_log=256 * 1024 * 1024)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """About 460 MB of records: 1 KiB bodies over 4 topics x 8 queues, a tag and a key each."""
    root = tmp_path_factory.mktemp("check") / "store"
    with rmq.MessageStore(root, CONFIG) as s:
        for n in range(MESSAGES // BATCH):
            items = [
                rmq.Message(b"%08d" % i * 128, tags="TagA", keys=f"order-{i}")
                for i in range(n * BATCH, (n + 1) * BATCH)
            ]
            s.put_batch(f"Topic{n % 4}", items, queue_id=n % 8)
        s.wait_dispatched(600)
    yield root


def test_check_whole_store(benchmark: Any, store: Path) -> None:
    report = benchmark.pedantic(check_store, args=(store, CONFIG), rounds=3, iterations=1, warmup_rounds=1)
    assert report["clean"] and report["records"] == MESSAGES // BATCH * BATCH
    benchmark.extra_info.update(record_bytes=report["record_bytes"], records=report["records"])
