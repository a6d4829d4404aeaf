"""The config files on a full disk (a real tmpfs; CI runs as root and must mount it): `consumerOffset.json`, its
journal and `topics.json`. A write that fails raises `rmq.DiskFullError` (an `OSError` too), leaves no temporary
file, and takes back nothing the process had done: a failed persist keeps its changes for the next one, a
journaled commit that could not be journaled changes nothing, and a topic created or deleted without its file
written is not created or deleted.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path

import pytest

import rmq
from conftest import SMALL_DERIVED


@pytest.fixture
def disk(tmpfs: Path | None) -> Iterator[Path]:
    if tmpfs is None:
        pytest.skip("cannot mount a tmpfs here (not root, and CI is unset: CI mounts it)")
    yield tmpfs


class Filler:
    """Fills the filesystem of `path`'s directory to the last byte, and frees it again."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fill(self) -> None:
        chunk = b"\x02" * 4096
        with self.path.open("ab", buffering=0) as f:
            try:
                while True:
                    f.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc

    def free(self) -> None:
        self.path.unlink()


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_a_persist_that_fails_keeps_its_changes_for_the_next_one(disk: Path) -> None:
    path = disk / "config" / "consumerOffset.json"
    filler = Filler(disk / "filler")
    offsets = rmq.ConsumerOffsetManager(path)
    offsets.commit_offset("G", "T", 0, 50)
    offsets.commit_offset("G2", "T", 0, 5)
    offsets.persist()
    offsets.commit_offset("G", "T", 0, 100)
    offsets.remove_group("G2")
    filler.fill()
    with pytest.raises(rmq.DiskFullError) as raised:
        offsets.persist()
    assert isinstance(raised.value, OSError) and raised.value.errno == errno.ENOSPC
    assert leftovers(path.parent) == []
    assert offsets.query_offset("G", "T", 0) == 100
    filler.free()
    offsets.persist()
    # Before, the failed persist had forgotten that this process made them: the next one took the disk's 50
    # and brought G2 back.
    assert offsets.query_offset("G", "T", 0) == 100
    assert offsets.query_offset("G2", "T", 0) == -1
    again = rmq.ConsumerOffsetManager(path)
    again.load()
    assert again.table() == {"T@G": {0: 100}}


def test_a_journaled_commit_that_cannot_be_journaled_changes_nothing(disk: Path) -> None:
    path = disk / "config" / "consumerOffset.json"
    filler = Filler(disk / "filler")
    offsets = rmq.ConsumerOffsetManager(path)
    offsets.commit_offset("G", "T", 0, 1, journal=True)
    journal = offsets.journal_path
    line = journal.stat().st_size - len(rmq._native.OFFSETS_JOURNAL_HEADER)
    # Journal lines up to just before a 4 KiB page boundary, so that the next line is written in part (the rest
    # of the page) before the full disk refuses the rest.
    n = 1
    while 4096 - journal.stat().st_size % 4096 >= line:
        n += 1
        offsets.commit_offset("G", "T", 0, n, journal=True)
    size = journal.stat().st_size
    filler.fill()
    with pytest.raises(rmq.DiskFullError):
        offsets.commit_offset("G", "T", 0, n + 1, journal=True)
    assert offsets.query_offset("G", "T", 0) == n, "a commit that raised must not have changed the offset"
    assert journal.stat().st_size == size, "the part of the line that was written is cut off"
    filler.free()
    offsets.commit_offset("G", "T", 0, n + 2, journal=True)
    # What a restarted process reads: every acknowledged commit, no damaged line.
    again = rmq.ConsumerOffsetManager(path)
    again.load()
    assert again.load_issues == []
    assert again.query_offset("G", "T", 0) == n + 2


def test_topics_created_or_deleted_without_their_file_written_are_not(disk: Path) -> None:
    root = disk / "store"
    config = rmq.StoreConfig(mapped_file_size_commit_log=64 * 1024, **SMALL_DERIVED)  # type: ignore[arg-type]
    filler = Filler(disk / "filler")
    with rmq.MessageStore(root, config, start_services=False) as store:
        store.create_topic("Lim", queues=2)
        store.put("Lim", b"x", queue_id=1)
        filler.fill()
        with pytest.raises(rmq.DiskFullError):
            store.create_topic("New", queues=4)
        with pytest.raises(rmq.DiskFullError):
            store.delete_topic("Lim")
        assert store.topic_config("New") is None
        lim = store.topic_config("Lim")
        assert lim is not None and lim.write_queue_nums == 2
        with pytest.raises(rmq.InvalidArgumentError):
            store.put("Lim", b"x", queue_id=5)  # its limit still applies
        assert leftovers(root / "config") == []
        filler.free()
        store.create_topic("New", queues=4)
        assert store.delete_topic("Lim")
        assert store.topic_config("Lim") is None
    with rmq.MessageStore(root, config, start_services=False) as store:
        new = store.topic_config("New")
        assert new is not None and new.write_queue_nums == 4
        assert store.topic_config("Lim") is None


def test_a_consumer_on_a_full_disk_fails_to_start_or_stop_typed_and_leaves_no_thread(disk: Path) -> None:
    """Joining writes the group's registry: on a full disk `start()` raises and stops the threads it started.
    `shutdown()` takes every step (leave the group, persist the offsets) and raises the first failure."""
    import threading
    import time

    from rmq.group import ConsumerGroup
    from rmq.push import ConsumeFromWhere, PushConsumer

    def consumer_threads() -> list[str]:
        prefixes = ("rmq-pull", "rmq-consume", "rmq-group")
        return [t.name for t in threading.enumerate() if t.name.startswith(prefixes)]

    config = rmq.StoreConfig(mapped_file_size_commit_log=64 * 1024, **SMALL_DERIVED)  # type: ignore[arg-type]
    filler = Filler(disk / "filler")
    with rmq.MessageStore(disk / "store", config) as store:
        for i in range(8):
            store.put("T", b"m%d" % i, queue_id=i % 2)
        store.wait_dispatched()
        offsets = rmq.ConsumerOffsetManager(store.consumer_offset_path)
        seen: list[int] = []

        def listener(msgs: list[rmq.MessageExt], ctx: object) -> rmq.ConsumeStatus:
            seen.extend(m.queue_offset for m in msgs)
            return rmq.ConsumeStatus.CONSUME_SUCCESS

        first = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
        filler.fill()
        c = PushConsumer(store, "G", "T", listener, offsets=offsets, consume_from_where=first)
        with pytest.raises(rmq.DiskFullError):
            c.start()
        assert consumer_threads() == []
        assert ConsumerGroup.of(store, "G").members == [], "a consumer that did not join is no member"
        filler.free()
        c = PushConsumer(store, "G", "T", listener, offsets=offsets, consume_from_where=first).start()
        deadline = time.monotonic() + 20
        while len(seen) < 8:
            assert time.monotonic() < deadline, seen
            time.sleep(0.01)
        filler.fill()
        with pytest.raises(rmq.DiskFullError):
            c.shutdown()
        assert consumer_threads() == []
        assert offsets.query_offsets("G", "T") == {0: 4, 1: 4, 2: 0, 3: 0}
        filler.free()
        offsets.persist()
    again = rmq.ConsumerOffsetManager(disk / "store" / "config" / "consumerOffset.json")
    again.load()
    assert again.query_offsets("G", "T") == {0: 4, 1: 4, 2: 0, 3: 0}


def test_a_delay_offsets_persist_that_fails_leaves_no_temporary_file(disk: Path) -> None:
    """`config/delayOffset.json` is written as the other config files are (a `.tmp`, then renames): on a full disk
    the persist raises `DiskFullError` and leaves no `delayOffset.json.tmp` behind (it was left, empty); after
    space is freed the next persist writes the offsets."""
    import time

    cfg = rmq.StoreConfig(
        mapped_file_size_commit_log=1 << 20,
        message_delay_level="1s 2s",
        flush_delay_offset_interval=3_600_000,
        **SMALL_DERIVED,
    )
    store = rmq.MessageStore(disk / "store", cfg)
    filler = Filler(disk / "filler")
    try:
        store.put("T", b"later", delay_level=1)
        deadline = time.monotonic() + 30
        while store.delay_offsets().get(1) != 1:
            assert time.monotonic() < deadline, store.delay_offsets()
            time.sleep(0.05)
        filler.fill()
        with pytest.raises(rmq.DiskFullError):
            store.persist_delay_offsets()
        assert leftovers(disk / "store" / "config") == []
        filler.free()
        store.persist_delay_offsets()
        assert leftovers(disk / "store" / "config") == []
        assert b"1:1" in (disk / "store" / "config" / "delayOffset.json").read_bytes()
    finally:
        if (disk / "filler").exists():
            filler.free()
        store.close()
