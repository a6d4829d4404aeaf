"""pytest-benchmark for the Python API: put, put_batch, scan and read, reopening (recovery), and a memcpy
baseline. Off in the normal test run; `make bench` runs them (`pytest benches --benchmark-enable
--benchmark-only`). Each benchmark records how many messages (or bytes) one round handles in `extra_info`,
so messages/s = messages_per_round / mean round time.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rmq

SEGMENT = 256 * 1024 * 1024
ROTATE_AT = 1 << 30  # replace the store before it grows past ~1 GiB, so the disk never fills
CONFIG = rmq.StoreConfig(mapped_file_size_commit_log=SEGMENT)
TOPIC = "TopicTest"
BODY = b"x" * 128
BATCH = [BODY] * 256
PUTS_PER_ROUND = 1000


class Rotating:
    """A store in a temporary directory, replaced by a fresh one once it holds more than `ROTATE_AT` bytes."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.generation = 0
        self.store = self._open()

    def _open(self) -> rmq.MessageStore:
        self.generation += 1
        return rmq.MessageStore(self.root / f"s{self.generation}", CONFIG)

    def rotate_if_big(self) -> None:
        if self.store.max_offset > ROTATE_AT:
            self.store.close()
            shutil.rmtree(self.root / f"s{self.generation}")
            self.store = self._open()

    def close(self) -> None:
        self.store.close()


@pytest.fixture
def rotating(tmp_path: Path) -> Iterator[Rotating]:
    r = Rotating(tmp_path)
    yield r
    r.close()


def test_put_128b(benchmark: Any, rotating: Rotating) -> None:
    """`put` of a 128-byte body, PUTS_PER_ROUND calls per round."""

    def run() -> None:
        put = rotating.store.put
        for _ in range(PUTS_PER_ROUND):
            put(TOPIC, BODY)

    benchmark.extra_info["messages_per_round"] = PUTS_PER_ROUND
    benchmark.pedantic(run, setup=rotating.rotate_if_big, rounds=60, warmup_rounds=3)
    assert rotating.store.next_queue_offset(TOPIC, 0) > 0


def test_put_batch_256x128b(benchmark: Any, rotating: Rotating) -> None:
    """`put_batch` of 256 bytes items of 128 bytes each, one batch per round."""

    def run() -> None:
        rotating.store.put_batch(TOPIC, BATCH)

    benchmark.extra_info["messages_per_round"] = len(BATCH)
    benchmark.pedantic(run, setup=rotating.rotate_if_big, rounds=2000, warmup_rounds=20)
    assert rotating.store.next_queue_offset(TOPIC, 0) % len(BATCH) == 0


@pytest.mark.parametrize("form", ["lists", "messages"])
def test_put_batch_32x1kib_tag_and_key(benchmark: Any, rotating: Rotating, form: str) -> None:
    """`put_batch` of 32 bodies of 1 KiB, each with a tag and its own key, 100 batches per round: as bodies with
    `tags=`/`keys=` lists, or as 32 `rmq.Message`s (building the arguments is timed either way)."""
    body, bodies = b"x" * 1024, [b"x" * 1024] * 32
    message = rmq.Message

    def run() -> None:
        put_batch = rotating.store.put_batch
        for n in range(0, 3200, 32):
            if form == "lists":
                put_batch(
                    TOPIC, bodies, queue_id=(n // 32) % 4, tags="TagA", keys=[f"key-{k}" for k in range(n, n + 32)]
                )
            else:
                put_batch(
                    TOPIC,
                    [message(body, tags="TagA", keys=f"key-{k}") for k in range(n, n + 32)],
                    queue_id=(n // 32) % 4,
                )

    benchmark.extra_info["messages_per_round"] = 3200
    benchmark.pedantic(run, setup=rotating.rotate_if_big, rounds=60, warmup_rounds=3)
    assert sum(rotating.store.next_queue_offset(TOPIC, q) for q in range(4)) % 3200 == 0


@pytest.fixture
def store_10k(rotating: Rotating) -> tuple[rmq.MessageStore, list[int]]:
    store = rotating.store
    offsets: list[int] = []
    for _ in range(40):
        offsets += store.put_batch(TOPIC, BATCH).offsets
    return store, offsets


def test_scan_10k(benchmark: Any, store_10k: tuple[rmq.MessageStore, list[int]]) -> None:
    """`scan` of 10 240 messages, touching each message's queue offset (decoded lazily)."""
    store, offsets = store_10k

    def run() -> int:
        return sum(1 for m in store.scan(offsets[0]) if m.queue_offset >= 0)

    benchmark.extra_info["messages_per_round"] = len(offsets)
    assert benchmark.pedantic(run, rounds=30, warmup_rounds=2) == len(offsets)


def test_scan_10k_bodies(benchmark: Any, store_10k: tuple[rmq.MessageStore, list[int]]) -> None:
    """`scan` of 10 240 messages, copying each body into a `bytes`."""
    store, offsets = store_10k

    def run() -> int:
        return sum(len(m.body) for m in store.scan(offsets[0]))

    benchmark.extra_info["messages_per_round"] = len(offsets)
    assert benchmark.pedantic(run, rounds=30, warmup_rounds=2) == len(offsets) * len(BODY)


def test_read_10k_by_offset(benchmark: Any, store_10k: tuple[rmq.MessageStore, list[int]]) -> None:
    """`read(offset)` of 10 240 messages, one call each."""
    store, offsets = store_10k

    def run() -> int:
        read = store.read
        return sum(1 for o in offsets if read(o) is not None)

    benchmark.extra_info["messages_per_round"] = len(offsets)
    assert benchmark.pedantic(run, rounds=30, warmup_rounds=2) == len(offsets)


def test_reopen_64k_messages(benchmark: Any, tmp_path: Path) -> None:
    """Opening a store of 65 536 messages: tail validation plus rebuilding the queue-offset table."""
    path = tmp_path / "store"
    with rmq.MessageStore(path, CONFIG) as store:
        for _ in range(256):
            store.put_batch(TOPIC, BATCH, queue_id=1)

    def run() -> int:
        with rmq.MessageStore(path, CONFIG) as again:
            return again.next_queue_offset(TOPIC, 1)

    benchmark.extra_info["messages_per_round"] = 256 * len(BATCH)
    assert benchmark.pedantic(run, rounds=20, warmup_rounds=1) == 256 * len(BATCH)


def test_memcpy_1mib_baseline(benchmark: Any) -> None:
    """`bytes(bytearray)` of 1 MiB: what a plain memory copy costs from Python on this machine."""
    src = bytearray(b"\x5a" * (1 << 20))
    benchmark.extra_info["bytes_per_round"] = len(src)
    assert len(benchmark(bytes, src)) == len(src)
