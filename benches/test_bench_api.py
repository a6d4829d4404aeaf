"""pytest-benchmark for the Python API. Runs only with --benchmark-enable (see `make bench`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import rmq

SEGMENT = 256 * 1024 * 1024
BODY = b"x" * 128
BATCH = [BODY] * 256
PUTS_PER_ROUND = 1000


class Rotating:
    """A store that is replaced by a fresh one before it grows past ~1 GiB, so the disk never fills."""

    def __init__(self, root: Path) -> None:
        self.root, self.n = root, 0
        self.store = self._open()

    def _open(self) -> rmq.MessageStore:
        self.n += 1
        return rmq.MessageStore(self.root / f"s{self.n}", rmq.StoreConfig(mapped_file_size_commit_log=SEGMENT))

    def get(self) -> rmq.MessageStore:
        if self.store.max_offset > 1 << 30:
            self.store.close()
            for f in (self.root / f"s{self.n}" / "commitlog").iterdir():
                f.unlink()
            self.store = self._open()
        return self.store


@pytest.fixture
def rotating(tmp_path: Path) -> Iterator[Rotating]:
    r = Rotating(tmp_path)
    yield r
    r.store.close()


def test_put_128b(benchmark: pytest.FixtureRequest, rotating: Rotating) -> None:
    def run() -> None:
        put = rotating.get().put
        for _ in range(PUTS_PER_ROUND):
            put("TopicTest", BODY)

    benchmark.extra_info["messages_per_round"] = PUTS_PER_ROUND  # type: ignore[attr-defined]
    benchmark.pedantic(run, rounds=60, warmup_rounds=3)  # type: ignore[operator]


def test_put_batch_256x128b(benchmark: pytest.FixtureRequest, rotating: Rotating) -> None:
    def run() -> None:
        rotating.get().put_batch("TopicTest", BATCH)

    benchmark.extra_info["messages_per_round"] = len(BATCH)  # type: ignore[attr-defined]
    benchmark.pedantic(run, rounds=2000, warmup_rounds=20)  # type: ignore[operator]


def test_scan_10k(benchmark: pytest.FixtureRequest, rotating: Rotating) -> None:
    store = rotating.get()
    start = store.max_offset
    for _ in range(40):
        store.put_batch("TopicTest", BATCH)

    def run() -> int:
        return sum(1 for _ in store.scan(start))

    benchmark.extra_info["messages_per_round"] = 40 * len(BATCH)  # type: ignore[attr-defined]
    assert benchmark.pedantic(run, rounds=20) == 40 * len(BATCH)  # type: ignore[operator]


def test_memcpy_1mib(benchmark: pytest.FixtureRequest) -> None:
    src = bytearray(1 << 20)
    benchmark.extra_info["bytes_per_round"] = len(src)  # type: ignore[attr-defined]
    benchmark(bytes, src)  # type: ignore[operator]
