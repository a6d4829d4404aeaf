"""`get_message` through Python and the pull consumer: statuses and next offsets, lazy and raw results,
tag filtering with colliding hashes, the broker/client status translation, and long polling."""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import pytest

import rmq
from conftest import SMALL, small_config
from rmq.consumer import ArrivalWaiter, PullConsumer, PullStatus
from rmq.rebalance import MessageQueue

S = rmq.GetMessageStatus


def fill(
    store: rmq.MessageStore, n: int, *, topic: str = "T", queue_id: int = 0, tags: list[str] | None = None
) -> None:
    for i in range(n):
        store.put(topic, b"m%d" % i, queue_id=queue_id, tags=tags[i % len(tags)] if tags else None)
    assert store.wait_dispatched()


def test_get_message_found_lazy_and_raw(small_store: rmq.MessageStore) -> None:
    fill(small_store, 10, tags=["A", "B"])
    r = small_store.get_message("g", "T", 0, 2, 4)
    assert (r.status, r.next_begin_offset, r.min_offset, r.max_offset) == (S.FOUND, 6, 0, 10)
    assert r.queue_offsets == [2, 3, 4, 5] and len(r) == r.message_count == 4
    msgs = r.messages
    assert [m.queue_offset for m in msgs] == [2, 3, 4, 5]
    assert [m.body for m in msgs] == [b"m2", b"m3", b"m4", b"m5"]
    raw = r.raw
    assert [v.offset for v in raw] == [m.commitlog_offset for m in msgs]
    assert [bytes(v) for v in raw] == [bytes(small_store.read_raw(m.commitlog_offset)) for m in msgs]
    assert sum(len(v) for v in raw) == r.buffer_total_size
    assert memoryview(raw[0]).readonly


@pytest.mark.parametrize(
    ("queue_id", "offset", "status", "next_offset"),
    [
        (0, 10, S.OFFSET_OVERFLOW_ONE, 10),
        (0, 99, S.OFFSET_OVERFLOW_BADLY, 10),
        (0, -5, S.OFFSET_TOO_SMALL, 0),
        (3, 7, S.NO_MESSAGE_IN_QUEUE, 0),
    ],
)
def test_get_message_offset_statuses(
    small_store: rmq.MessageStore, queue_id: int, offset: int, status: rmq.GetMessageStatus, next_offset: int
) -> None:
    fill(small_store, 10)
    r = small_store.get_message("g", "T", queue_id, offset)
    assert (r.status, r.next_begin_offset, len(r.messages)) == (status, next_offset, 0)


def test_tag_filter_returns_only_the_subscribed_tag(small_store: rmq.MessageStore) -> None:
    # "Aa" and "BB" have the same Java hash, so their consume-queue tagsCodes are equal.
    fill(small_store, 6, tags=["Aa", "BB", "TagC"])
    r = small_store.get_message("g", "T", 0, 0, 32, "Aa")
    assert [m.tags for m in r.messages] == ["Aa", "Aa"]
    assert r.filter_message_count == 2 and r.next_begin_offset == 6
    r = small_store.get_message("g", "T", 0, 0, 32, "BB || TagC")
    assert [m.tags for m in r.messages] == ["BB", "TagC", "BB", "TagC"]
    r = small_store.get_message("g", "T", 0, 0, 32, "None")
    assert (r.status, r.next_begin_offset) == (S.NO_MATCHED_MESSAGE, 6)


def test_hot_and_cold_caps_from_config(tmp_path: Path) -> None:
    with rmq.MessageStore(tmp_path / "hot", small_config(mapped_file_size_commit_log=1 << 20)) as store:
        fill(store, 100)
        assert len(store.get_message("g", "T", 0, 0, 64).messages) == 32
    cold = small_config(mapped_file_size_commit_log=1 << 20, access_message_in_memory_max_ratio=0)
    with rmq.MessageStore(tmp_path / "hot", cold) as store:
        r = store.get_message("g", "T", 0, 0, 64)
        assert len(r.messages) == 8 and r.suggest_pulling_from_slave


def test_slave_role_keeps_offsets(tmp_path: Path) -> None:
    with rmq.MessageStore(tmp_path / "s", small_config(broker_role="SLAVE")) as store:
        fill(store, 3)
        r = store.get_message("g", "T", 0, 50)
        assert (r.status, r.next_begin_offset) == (S.OFFSET_OVERFLOW_BADLY, 50)
    with pytest.raises(rmq.InvalidConfigError):
        rmq.MessageStore(tmp_path / "x", small_config(broker_role="LEADER"))


def test_pull_consumer_statuses(small_store: rmq.MessageStore) -> None:
    fill(small_store, 5, tags=["A", "B"])
    c = PullConsumer(small_store, "g")
    mq = MessageQueue("T", "broker-a", 0)
    assert mq in c.fetch_subscribe_message_queues("T")
    r = c.pull(mq, 0, 32, "A")
    assert r.status is PullStatus.FOUND and [m.queue_offset for m in r.messages] == [0, 2, 4]
    assert r.next_begin_offset == 5
    assert c.pull(mq, 5).status is PullStatus.NO_NEW_MSG
    assert c.pull(mq, 1, 1, "Zzz").status is PullStatus.NO_MATCHED_MSG
    bad = c.pull(("T", 0), 77)
    assert (bad.status, bad.next_begin_offset) == (PullStatus.OFFSET_ILLEGAL, 5)
    assert c.pull(("T", 3), 0).status is PullStatus.NO_NEW_MSG, "a queue without messages, at offset 0"
    assert c.pull(("T", 3), 4).status is PullStatus.OFFSET_ILLEGAL
    with pytest.raises(ValueError):
        c.pull(mq, 0, 0)


class CountingPull(PullConsumer):
    calls = 0

    def pull(self, *args: object, **kwargs: object) -> rmq.consumer.PullResult:  # type: ignore[override]
        self.calls += 1
        return super().pull(*args, **kwargs)  # type: ignore[arg-type]


def test_long_polling_wakes_on_a_put_not_at_its_timeout(small_store: rmq.MessageStore) -> None:
    fill(small_store, 1)
    c = CountingPull(small_store, "g")
    put_done: list[float] = []

    def producer() -> None:
        time.sleep(0.3)
        small_store.put("T", b"late")
        put_done.append(time.monotonic())

    t = threading.Thread(target=producer)
    t.start()
    r = c.pull_block_if_not_found(("T", 0), 1, timeout=5.0)
    woke = time.monotonic()
    t.join()
    assert r.status is PullStatus.FOUND and [m.body for m in r.messages] == [b"late"]
    # The wait ends on the put's dispatch (within about a millisecond here), not at the 5 s timeout nor at a
    # polling interval (the calls below); the bound leaves a loaded host its scheduling delays.
    assert woke - put_done[0] < 1.0, f"woke {1000 * (woke - put_done[0]):.1f} ms after the put"
    assert c.calls <= 3, f"{c.calls} pulls: the wait must not poll"


def test_long_polling_times_out_without_spinning(small_store: rmq.MessageStore) -> None:
    fill(small_store, 1)
    c = CountingPull(small_store, "g")
    rounds_before = small_store.reput.rounds
    start = time.monotonic()
    r = c.pull_block_if_not_found(("T", 0), 1, timeout=0.5)
    elapsed = time.monotonic() - start
    assert r.status is PullStatus.NO_NEW_MSG
    assert 0.45 <= elapsed < 2.0
    assert c.calls <= 2
    # The fill's last dispatch round and the nap after it, then at most one idle round a second.
    idle = math.ceil(time.monotonic() - start)
    assert small_store.reput.rounds - rounds_before <= 2 + idle, "the reput thread sleeps too"
    assert ArrivalWaiter.of(small_store) is ArrivalWaiter.of(small_store)


def test_pulls_on_a_read_only_store_see_what_another_process_writes(tmp_path: Path) -> None:
    """A read-only store has no reput service of its own: a pull that finds nothing new takes in what the writer
    (another process; here another store object) added since, as `refresh()` does, without the caller's help."""
    with rmq.MessageStore(tmp_path / "s", SMALL) as writer:
        fill(writer, 1)
        writer.flush()
        with rmq.MessageStore(tmp_path / "s", SMALL, read_only=True) as view:
            c = PullConsumer(view, "g")
            assert c.pull(("T", 0), 1).status is PullStatus.NO_NEW_MSG
            writer.put("T", b"later")
            writer.flush()
            r = c.pull(("T", 0), 1)
            assert r.status is PullStatus.FOUND and [m.body for m in r.messages] == [b"later"]
            assert r.next_begin_offset == 2


def test_long_polling_on_a_read_only_store_finds_what_another_process_writes(tmp_path: Path) -> None:
    """Nothing signals arrivals in a read-only store: the long poll refreshes and polls while it waits, so a
    message the writer puts during the wait is returned, long before the timeout."""
    with rmq.MessageStore(tmp_path / "s", SMALL) as writer:
        fill(writer, 1)
        writer.flush()
        with rmq.MessageStore(tmp_path / "s", SMALL, read_only=True) as view:
            c = PullConsumer(view, "g")

            def producer() -> None:
                time.sleep(0.5)
                writer.put("T", b"late")
                writer.flush()

            t = threading.Thread(target=producer)
            t.start()
            r = c.pull_block_if_not_found(("T", 0), 1, timeout=60.0)
            t.join()
            assert r.status is PullStatus.FOUND and [m.body for m in r.messages] == [b"late"]
