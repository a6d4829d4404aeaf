"""pytest-benchmark for the read path through Python: `get_message` in 32-message batches with lazily decoded
messages and with raw views, the pull consumer on top, and end-to-end push-consumer throughput for 1 KiB
messages. Off in the normal test run; `make bench` runs them. `extra_info` holds the messages per round.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rmq
from rmq.consumer import PullConsumer, PullStatus
from rmq.offsets import ConsumerOffsetManager
from rmq.push import ConsumeFromWhere, ConsumeStatus, PushConsumer

MESSAGES = 64_000
BATCH = 32
CONFIG = rmq.StoreConfig(
    mapped_file_size_commit_log=256 * 1024 * 1024,
    mapped_file_size_consume_queue=20 * 100_000,
    max_hash_slot_num=4096,
    max_index_num=200_000,
)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[rmq.MessageStore]:
    """MESSAGES 100-byte messages in one queue, dispatched."""
    root = tmp_path_factory.mktemp("pull") / "store"
    with rmq.MessageStore(root, CONFIG) as s:
        for _ in range(MESSAGES // 500):
            s.put_batch("Pull", [b"x" * 100] * 500, queue_id=0)
        assert s.wait_dispatched(60)
        yield s


def _drain(s: rmq.MessageStore, attr: str) -> int:
    offset, n = 0, 0
    while offset < MESSAGES:
        r = s.get_message("bench", "Pull", 0, offset, BATCH)
        n += len(getattr(r, attr))
        offset = r.next_begin_offset
    return n


def test_get_message_lazy_messages(benchmark: Any, store: rmq.MessageStore) -> None:
    """Every message of the queue in 32-message `get_message` calls, as `MessageExt` (nothing decoded)."""
    benchmark.extra_info["messages_per_round"] = MESSAGES
    assert benchmark(_drain, store, "messages") == MESSAGES


def test_get_message_raw_views(benchmark: Any, store: rmq.MessageStore) -> None:
    """The same as zero-copy `RecordView`s."""
    benchmark.extra_info["messages_per_round"] = MESSAGES
    assert benchmark(_drain, store, "raw") == MESSAGES


def test_pull_consumer_with_bodies(benchmark: Any, store: rmq.MessageStore) -> None:
    """`PullConsumer.pull` in 32-message batches, reading each body."""
    c = PullConsumer(store, "bench")

    def run() -> int:
        offset, n = 0, 0
        while offset < MESSAGES:
            r = c.pull(("Pull", 0), offset, BATCH)
            assert r.status is PullStatus.FOUND
            n += sum(len(m.body) for m in r.messages)
            offset = r.next_begin_offset
        return n

    benchmark.extra_info["messages_per_round"] = MESSAGES
    assert benchmark(run) == 100 * MESSAGES


@pytest.mark.parametrize("batch", [1, 32])
def test_push_consumer_end_to_end_1kib(benchmark: Any, tmp_path: Path, batch: int) -> None:
    """A push consumer (4 consume threads, offsets persisted after every batch) consuming 20 000 1 KiB messages
    spread over 4 queues, from start to the last commit."""
    n = 20_000
    root = tmp_path / "push"
    with rmq.MessageStore(root, CONFIG) as s:
        for q in range(4):
            for _ in range(n // 4 // 500):
                s.put_batch("Push", [b"y" * 1024] * 500, queue_id=q)
        assert s.wait_dispatched(60)
        generation = [0]

        def run() -> None:
            generation[0] += 1
            done = threading.Event()
            count = [0]
            lock = threading.Lock()

            def listener(msgs: list[rmq.MessageExt], ctx: object) -> ConsumeStatus:
                with lock:
                    count[0] += len(msgs)
                    if count[0] >= n:
                        done.set()
                return ConsumeStatus.CONSUME_SUCCESS

            offsets = ConsumerOffsetManager(tmp_path / f"offsets-{generation[0]}.json")
            c = PushConsumer(
                s,
                f"g{generation[0]}",
                "Push",
                listener,
                offsets=offsets,
                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                consume_message_batch_max_size=batch,
            )
            with c:
                assert done.wait(120)
            assert count[0] == n

        benchmark.extra_info["messages_per_round"] = n
        benchmark.pedantic(run, rounds=3, iterations=1)
