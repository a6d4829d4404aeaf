"""Opening without a config reads the file sizes off the store (`StoreConfig.from_files`, one Rust function
used by `rmq.MessageStore(path)` and the CLI alike); a size that is really one damaged file is reported as
damage, naming the file, its size and its siblings' size."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import rmq
import rmq.check
from conftest import SMALL

FIXTURE = Path(__file__).parent / "fixtures" / "rocketmq-5.3.1"
SIZES = ("mapped_file_size_commit_log", "mapped_file_size_consume_queue", "max_hash_slot_num", "max_index_num")


def sizes(config: rmq.StoreConfig) -> tuple[int, ...]:
    return tuple(getattr(config, name) for name in SIZES)


def write(store: Path, config: rmq.StoreConfig, n: int) -> list[int]:
    with rmq.MessageStore(store, config) as s:
        offsets = [s.put("T", b"m%d" % i, queue_id=i % 3, keys=[f"k{i}", f"c{i % 7}"]).wrote_offset for i in range(n)]
        s.wait_dispatched()
    return offsets


@pytest.mark.parametrize(
    "config",
    [
        SMALL,  # several commitlog and consume-queue files, RocketMQ's index ratio
        rmq.StoreConfig(
            mapped_file_size_commit_log=65536,
            mapped_file_size_consume_queue=160,
            max_hash_slot_num=64,
            max_index_num=128,
        ),  # fmt: skip
        rmq.StoreConfig(
            mapped_file_size_commit_log=1 << 20,
            mapped_file_size_consume_queue=6000,
            max_hash_slot_num=97,
            max_index_num=40,
        ),  # fmt: skip  # several index files of an odd ratio
    ],
    ids=["small", "harness-sizes", "full-index-files"],
)
def test_a_store_opens_without_a_config_with_the_sizes_it_was_written_with(tmp_path: Path, config: rmq.StoreConfig):
    store = tmp_path / "store"
    offsets = write(store, config, 300)
    assert sizes(rmq.StoreConfig.from_files(store)) == sizes(config)
    with rmq.MessageStore(store) as s:
        assert sizes(s.config) == sizes(config)
        assert [m.commitlog_offset for m in s.scan()] == offsets
        assert [m.commitlog_offset for m in s.query_message("T", "k17").messages] == [offsets[17]]
        s.put("T", b"more", keys="k-more")
        s.wait_dispatched()
        assert len(s.query_message("T", "k-more").messages) == 1


def test_the_rocketmq_fixture_opens_without_a_config(tmp_path: Path) -> None:
    shutil.copytree(FIXTURE / "store", tmp_path / "store")
    assert sizes(rmq.StoreConfig.from_files(tmp_path / "store")) == (65536, 160, 64, 128)
    with rmq.MessageStore(tmp_path / "store") as s:
        assert s.read(0) is not None


def test_reading_sizes_writes_nothing_and_a_new_store_gets_the_defaults(tmp_path: Path) -> None:
    assert sizes(rmq.StoreConfig.from_files(tmp_path / "missing")) == sizes(rmq.StoreConfig())
    assert not (tmp_path / "missing").exists()
    write(tmp_path / "s", SMALL, 50)
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in (tmp_path / "s").rglob("*") if p.is_file()}
    rmq.StoreConfig.from_files(tmp_path / "s", max_msgs_num_batch=8)
    assert before == {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in (tmp_path / "s").rglob("*") if p.is_file()}
    over = rmq.StoreConfig.from_files(tmp_path / "s", max_hash_slot_num=7, max_index_num=9)
    assert (over.max_hash_slot_num, over.max_index_num, over.mapped_file_size_commit_log) == (7, 9, 4096)


def test_a_contradicting_config_keeps_its_clear_error(tmp_path: Path) -> None:
    write(tmp_path / "s", SMALL, 50)
    with pytest.raises(rmq.InvalidConfigError, match="segment size it was written with"):
        rmq.MessageStore(tmp_path / "s", rmq.StoreConfig())


@pytest.mark.parametrize("cut", [1, 100, 4000])
def test_a_truncated_last_segment_is_reported_as_damage(tmp_path: Path, cut: int) -> None:
    store = tmp_path / "s"
    write(store, SMALL, 200)
    segments = sorted((store / "commitlog").iterdir())
    assert len(segments) > 2
    last = segments[-1]
    before = last.stat().st_size
    os.truncate(last, before - cut)
    for config in (None, SMALL):
        with pytest.raises(rmq.CorruptionError) as info:
            rmq.MessageStore(store, config)
        message = str(info.value)
        assert info.value.path == str(last)
        assert f"{before - cut} bytes where the other files of this directory are {before}" in message
        assert "truncated" in message and "segment size it was written with" not in message
    assert last.stat().st_size == before - cut  # nothing was changed


def test_a_truncated_consume_queue_file_is_reported_as_damage(tmp_path: Path) -> None:
    store = tmp_path / "s"
    write(store, SMALL, 1000)  # 334 entries per queue: a queue file holds 300 (6000 bytes), a second one starts
    cq = sorted((store / "consumequeue" / "T" / "0").iterdir())
    assert len(cq) >= 2
    os.truncate(cq[0], 5000)
    with pytest.raises(rmq.CorruptionError) as info:
        rmq.MessageStore(store)
    assert info.value.path == str(cq[0]) and "5000 bytes where the other files" in str(info.value)


@pytest.mark.parametrize(("which", "size"), [("first of two", 5000), ("only", 3000), ("only", 7000)])
def test_a_consume_queue_file_of_another_size_is_read_past_by_read_only_opens(
    tmp_path: Path, which: str, size: int
) -> None:
    """A consume-queue file truncated or extended, alone in its queue's directory or not: the store's other
    consume-queue files tell the size, so it is damage, not a wrong configuration. A writable open refuses it
    (naming the remedy for a derived file); a read-only open, and so every read-only command, reads it as far
    as it goes and dispatches what it lost again in memory. Before, a queue's only file of another size made
    every read-only command fail with "open it with the segment size it was written with"."""
    store = tmp_path / "s"
    n = 1000 if which == "first of two" else 600  # T/0 holds 334 or 200 entries: two files (300 a file) or one
    write(store, SMALL, n)
    cq = sorted((store / "consumequeue" / "T" / "0").iterdir())
    assert len(cq) == (2 if which == "first of two" else 1)
    with rmq.MessageStore(store, SMALL, read_only=True) as view:
        expected = [m.body for m in view.get_message("g", "T", 0, 0, 1000).messages]
    os.truncate(cq[0], size)
    before = {p: p.read_bytes() for p in store.rglob("*") if p.is_file()}
    for config in (None, SMALL):
        with pytest.raises(rmq.CorruptionError) as info:
            rmq.MessageStore(store, config)
        assert info.value.path == str(cq[0]) and f"{size} bytes where" in str(info.value)
        assert "consumequeue directory aside" in str(info.value)
    for config in (None, SMALL):
        with rmq.MessageStore(store, config, read_only=True) as view:
            got: list[bytes] = []
            while len(got) < len(expected):
                r = view.get_message("g", "T", 0, len(got), 1000)
                assert r.messages, r.status
                got += [m.body for m in r.messages]
            assert got == expected
            assert "T/0" in view.recovery_report["rebuilt_queues"]
    report = rmq.check.check_store(store)
    assert not report["clean"]
    assert [f["path"] for f in report["findings"] if f["kind"] == "damage"] == [str(cq[0])]
    assert {p: p.read_bytes() for p in store.rglob("*") if p.is_file()} == before
    # The remedy the refusal names: every queue rebuilt from the log.
    shutil.move(store / "consumequeue", tmp_path / "consumequeue.aside")
    with rmq.MessageStore(store, SMALL) as s:
        assert [m.body for m in s.get_message("g", "T", 0, 0, 1000).messages] == expected


def test_given_index_sizes_need_no_index_file_that_tells_them(tmp_path: Path) -> None:
    """An index file of another ratio and no full one (what a Spark writer task finds when the task before it just
    created the store's first index file) tells no index sizes: opening without them is a clear error, and with
    both given the other sizes are still read off the files (CI saw a writer task fail on this)."""
    root = tmp_path / "store"
    with rmq.MessageStore(root, SMALL, start_services=False) as store:
        store.put("T", b"x")
    (root / "index").mkdir(exist_ok=True)
    for f in (root / "index").iterdir():
        f.unlink()
    slots, entries = 1000, 5_000_000  # 40 + 4 x 1000 + 20 x 5,000,000 bytes: not 4 entries per slot, > 64 MiB
    with open(root / "index" / "20260101000000000", "wb") as f:
        f.truncate(40 + 4 * slots + 20 * entries)
    with pytest.raises(rmq.InvalidConfigError, match="max_hash_slot_num"):
        rmq.StoreConfig.from_files(root)
    cfg = rmq.StoreConfig.from_files(root, max_hash_slot_num=slots, max_index_num=entries)
    assert (cfg.max_hash_slot_num, cfg.max_index_num) == (slots, entries)
    assert cfg.mapped_file_size_commit_log == SMALL.mapped_file_size_commit_log
    with pytest.raises(rmq.InvalidConfigError, match="max_hash_slot_num"):
        rmq.StoreConfig.from_files(root, max_index_num=entries)  # one of the two is not enough
