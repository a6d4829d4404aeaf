"""pytest-benchmark for the derived files through the Python API: rebuilding consume queues and the index of a
store (dispatch of every record, three index keys each), a key query on a warm index, and reading consume-
queue entries. Off in the normal test run; `make bench` runs them. `extra_info` holds the work per round.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rmq

MESSAGES = 200_000
BATCH = 500
CONFIG = rmq.StoreConfig(mapped_file_size_commit_log=256 * 1024 * 1024)


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[str]]]:
    """A closed store of MESSAGES 100-byte messages over 4 topics x 8 queues, each with two keys."""
    root = tmp_path_factory.mktemp("dispatch") / "store"
    keys: list[str] = []
    with rmq.MessageStore(root, CONFIG) as store:
        for n in range(MESSAGES // BATCH):
            items = []
            for i in range(n * BATCH, (n + 1) * BATCH):
                keys.append(f"order-{i}")
                items.append(rmq.Message(b"x" * 100, tags="TagA", keys=[f"order-{i}", f"user-{i % 9973}"]))
            store.put_batch(f"Topic{n % 4}", items, queue_id=n % 8)
    yield root, keys


def test_rebuild_consume_queues_and_index(benchmark: Any, filled: tuple[Path, list[str]]) -> None:
    """Opening a store whose consume queues and index were deleted: every record dispatched (CQ + 3 keys)."""
    root, _ = filled

    def setup() -> tuple[tuple[()], dict[str, Any]]:
        for sub in ("consumequeue", "index"):
            shutil.rmtree(root / sub, ignore_errors=True)
        return (), {}

    def run() -> None:
        with rmq.MessageStore(root, CONFIG, start_reput=False) as store:
            assert store.recovery_report["rebuilt_cq_entries"] == MESSAGES

    benchmark.extra_info["messages_per_round"] = MESSAGES
    benchmark.pedantic(run, setup=setup, rounds=3, iterations=1)


def test_query_by_key(benchmark: Any, filled: tuple[Path, list[str]]) -> None:
    """`query_message` for one key on a warm index (600k keys), record loaded and checked."""
    root, keys = filled
    rng = random.Random(7)
    topic_of = {k: f"Topic{(i // BATCH) % 4}" for i, k in enumerate(keys)}
    with rmq.MessageStore(root, CONFIG) as store:
        for k in keys[:1000]:  # warm
            store.query_message(topic_of[k], k)

        def run() -> None:
            k = keys[rng.randrange(len(keys))]
            assert len(store.query_message(topic_of[k], k).messages) == 1

        benchmark.extra_info["keys_in_index"] = 3 * MESSAGES
        benchmark(run)


def test_iter_queue(benchmark: Any, filled: tuple[Path, list[str]]) -> None:
    """Reading every entry of one consume queue as named tuples."""
    root, _ = filled
    with rmq.MessageStore(root, CONFIG) as store:
        n = store.get_max_offset_in_queue("Topic0", 0)

        def run() -> None:
            assert sum(1 for _ in store.iter_queue("Topic0", 0, batch=4096)) == n

        benchmark.extra_info["entries_per_round"] = n
        benchmark(run)
