"""Delay levels and the schedule service (RocketMQ's `ScheduleMessageService`), and delayed retries.

Timing tests use short levels (`message_delay_level="1s 2s 3s"`). Each states its tolerance: a delivery is
never early (the delivered record's store time is at or after the scheduled record's store time + the level's
delay: strict) and at most `LATE_MS` late (generous, for a loaded 2-core CI machine).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import rmq
from conftest import small_config
from rmq import _native
from rmq.check import check_store
from rmq.offsets import ConsumerOffsetManager
from rmq.push import ConsumeContext, ConsumeFromWhere, ConsumeStatus, PushConsumer, dlq_topic, retry_topic

SCHEDULE = "SCHEDULE_TOPIC_XXXX"
LEVELS = "1s 2s 3s"
DELAY_MS = {1: 1000, 2: 2000, 3: 3000}
#: Upper bound on a delivery's lateness (ms) these tests accept.
LATE_MS = 3000
CFG = small_config(mapped_file_size_commit_log=1 << 20, message_delay_level=LEVELS)
HERE = Path(__file__).parent


def wait_until(cond: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def in_topic(store: rmq.MessageStore, topic: str) -> list[rmq.MessageExt]:
    return [m for m in store.scan() if m.topic == topic]


def delivered_all(store: rmq.MessageStore) -> bool:
    offsets = store.delay_offsets()
    return all(offsets.get(q + 1, 0) >= store.get_max_offset_in_queue(SCHEDULE, q) for q in range(3))


# -- the put path -----------------------------------------------------------------------------------------------


def test_a_delayed_put_is_stored_in_the_schedule_topic_as_the_broker_stores_it(tmp_path: Path) -> None:
    with rmq.MessageStore(tmp_path / "s", CFG, start_services=False) as store:
        r = store.put("T", b"x", queue_id=3, tags="TagA", keys=["k1"], properties={"biz": "1"}, delay_level=2)
        m = store.read(r.wrote_offset)
        assert m is not None
        assert (m.topic, m.queue_id, m.queue_offset) == (SCHEDULE, 1, 0)
        props = m.properties
        assert (props["DELAY"], props["REAL_TOPIC"], props["REAL_QID"]) == ("2", "T", "3")
        assert props["biz"] == "1" and props["TAGS"] == "TagA" and props["CLUSTER"] == "DefaultCluster"
        store.wait_dispatched(10)
        [(_, _, _, tags_code)] = store._cq_entries(SCHEDULE, 1)
        assert tags_code == m.store_timestamp + 2000, "tagsCode is the delivery time"
        # The same as a DELAY property.
        r2 = store.put("T", b"x", queue_id=3, properties={"DELAY": "2"})
        m2 = store.read(r2.wrote_offset)
        assert m2 is not None and (m2.topic, m2.queue_id, m2.properties["REAL_QID"]) == (SCHEDULE, 1, "3")
        assert store.get_max_offset_in_queue("T", 3, committed=False) == 0, "no queue offset taken in T"


def test_levels_zero_and_negative_are_stored_as_is_and_too_high_is_clamped(tmp_path: Path) -> None:
    with rmq.MessageStore(tmp_path / "s", CFG, start_services=False) as store:
        for level in ("0", "-1"):
            m = store.read(store.put("T", b"x", properties={"DELAY": level}).wrote_offset)
            assert m is not None and (m.topic, m.properties["DELAY"]) == ("T", level)
            assert "REAL_TOPIC" not in m.properties
        m = store.read(store.put("T", b"x", queue_id=1, delay_level=99).wrote_offset)
        assert m is not None and (m.topic, m.queue_id, m.properties["DELAY"]) == (SCHEDULE, 2, "3")
        # A level written with a leading zero keeps its text, as Java's map does.
        m = store.read(store.put("T", b"x", properties={"DELAY": "02"}).wrote_offset)
        assert m is not None and (m.queue_id, m.properties["DELAY"]) == (1, "02")
        # A transaction's half message is not scheduled (handleScheduleMessage: NOT and COMMIT only).
        prepared = rmq.TransactionType.PREPARED
        m = store.read(store.put("T", b"x", delay_level=1, transaction_type=prepared).wrote_offset)
        assert m is not None and m.topic == "T"


@pytest.mark.parametrize("bad", ["abc", "1.5", "", "9999999999", " 1"])
def test_a_delay_that_is_not_an_int_is_refused_and_nothing_is_written(tmp_path: Path, bad: str) -> None:
    with rmq.MessageStore(tmp_path / "s", CFG, start_services=False) as store:
        store.put("T", b"before")
        with pytest.raises((rmq.RmqError, ValueError)):
            store.put("T", b"x", properties={"DELAY": bad})
        assert [m.body for m in store.scan()] == [b"before"]
        assert store.get_max_offset_in_queue("T", 0, committed=False) == 1
        assert store.get_max_offset_in_queue(SCHEDULE, 0, committed=False) == 0


def test_delay_level_and_a_delay_property_together_are_refused(tmp_path: Path) -> None:
    with rmq.MessageStore(tmp_path / "s", CFG, start_services=False) as store:
        with pytest.raises(rmq.InvalidPropertyError):
            store.put("T", b"x", properties={"DELAY": "1"}, delay_level=2)
        with pytest.raises((TypeError, ValueError)):
            store.put("T", b"x", delay_level="1")  # type: ignore[arg-type]
        assert list(store.scan()) == []


# -- delivery -----------------------------------------------------------------------------------------------------


def test_each_message_is_delivered_at_its_time_never_early(tmp_path: Path) -> None:
    with rmq.MessageStore(tmp_path / "s", CFG) as store:
        sched: dict[str, tuple[int, int]] = {}  # uniq key -> (scheduled store time, level)
        started = time.monotonic()
        for i in range(30):
            level = 1 + i % 3
            r = store.put("T", str(i).encode(), queue_id=i % 2, tags="TagA", delay_level=level)
            m = store.read(r.wrote_offset)
            assert m is not None and m.uniq_key is not None
            sched[m.uniq_key] = (m.store_timestamp, level)
        delivered = in_topic(store, "T")
        if time.monotonic() - started < DELAY_MS[1] / 1000:  # not so on a host that stalled this thread
            assert delivered == [], "nothing is delivered before its time"
        wait_until(lambda: len(in_topic(store, "T")) == 30)
        late = []
        for m in in_topic(store, "T"):
            assert m.uniq_key is not None
            stored, level = sched.pop(m.uniq_key)
            lateness = m.store_timestamp - (stored + DELAY_MS[level])
            assert lateness >= 0, f"delivered {-lateness} ms early"
            assert lateness <= LATE_MS
            late.append(lateness)
            # messageTimeUp: the real topic and queue, the scheduled record's properties (DELAY kept).
            assert m.queue_id == int(m.properties["REAL_QID"]) and m.properties["DELAY"] == str(level)
            assert m.properties["WAIT"] == "true" and m.tags == "TagA"
        assert sched == {}
        # Queue offsets of the real topic are consecutive per queue.
        for q in (0, 1):
            assert [m.queue_offset for m in in_topic(store, "T") if m.queue_id == q] == list(range(15))
        # A level's offset moves past a message after its delivery (which made it visible) and its count.
        wait_until(lambda: store.delay_offsets() == {1: 10, 2: 10, 3: 10})
        [stats] = [s for s in store.service_stats() if s.name == "schedule"]
        assert stats.running and stats.work == 30 and stats.errors == 0


def test_delivered_records_keep_born_host_time_flag_and_store_host(tmp_path: Path) -> None:
    cfg = small_config(mapped_file_size_commit_log=1 << 20, message_delay_level=LEVELS, store_host="10.0.0.2:10911")
    with rmq.MessageStore(tmp_path / "s", cfg) as store:
        r = store.put(
            "T", b"b", flag=7, born_host="10.1.2.3:4567", born_timestamp=1_700_000_000_000, reconsume_times=2,
            delay_level=1, queue_id=2,
        )  # fmt: skip
        scheduled = store.read(r.wrote_offset)
        wait_until(lambda: len(in_topic(store, "T")) == 1)
        [m] = in_topic(store, "T")
        assert scheduled is not None
        assert (m.flag, m.born_host, m.born_timestamp, m.reconsume_times, m.store_host) == (
            7, "10.1.2.3:4567", 1_700_000_000_000, 2, "10.0.0.2:10911"
        )  # fmt: skip
        assert m.properties == scheduled.properties, "the scheduled record's properties, unchanged"
        assert m.sys_flag == scheduled.sys_flag and m.body == b"b"


def test_delay_offsets_are_persisted_on_close_and_resumed(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with rmq.MessageStore(root, CFG) as store:
        for i in range(3):
            store.put("T", b"x", delay_level=1 + i)
        wait_until(lambda: len(in_topic(store, "T")) == 3)
    path = root / "config" / "delayOffset.json"
    table, version, issues = _native.decode_delay_offsets(path.read_bytes(), path)
    assert (table, issues) == ([(1, 1), (2, 1), (3, 1)], [])
    assert path.read_text() == _native.encode_delay_offsets(table, *version)
    with rmq.MessageStore(root, CFG, read_only=True) as ro:
        assert ro.delay_offsets() == {1: 1, 2: 1, 3: 1}
        assert not any(s.name == "schedule" for s in ro.service_stats()), "read-only: no schedule service"
    # Reopened: nothing is delivered twice; a new message is.
    with rmq.MessageStore(root, CFG) as store:
        store.put("T", b"y", delay_level=1)
        wait_until(lambda: len(in_topic(store, "T")) == 4)
        time.sleep(0.3)
        assert sorted(m.body for m in in_topic(store, "T")) == [b"x", b"x", b"x", b"y"]
    assert (root / "config" / "delayOffset.json.bak").exists()


@pytest.mark.parametrize("crashed", [False, True], ids=["clean", "crashed"])
def test_entries_dispatched_with_other_delay_levels_are_kept_and_checked_clean(tmp_path: Path, crashed: bool) -> None:
    """A schedule entry's tagsCode is its delivery time under the delay levels of the run that dispatched it,
    which the store does not record: an open or a check with other levels (the defaults of `rmq check`, or a
    broker reconfigured) must keep it, as RocketMQ does, not call it damage and rewrite it with their own."""
    root = tmp_path / "s"
    written = small_config(mapped_file_size_commit_log=1 << 20, message_delay_level="1s 2s 1d")
    with rmq.MessageStore(root, written, start_services=False) as store:
        r = store.put("T", b"x", delay_level=3)
        m = store.read(r.wrote_offset)
        assert m is not None
        store.wait_dispatched()
    cq = root / "consumequeue" / SCHEDULE / "2" / ("0" * 20)
    before = cq.read_bytes()
    assert int.from_bytes(before[12:20], "big") == m.store_timestamp + 86_400_000
    if crashed:
        (root / "abort").write_bytes(b"")
    report = check_store(root)  # the defaults: level 3 is 10 s there
    assert report["findings"] == [] and report["clean"], report["findings"]
    with rmq.MessageStore(root, small_config(mapped_file_size_commit_log=1 << 20), start_services=False) as store:
        assert store.recovery_report["rebuilt_queues"] == []
        assert store.recovery_report["rebuilt_cq_entries"] == 0
    assert cq.read_bytes() == before


def test_offsets_of_levels_not_configured_are_kept_as_correct_delay_offset_keeps_them(tmp_path: Path) -> None:
    """RocketMQ's `correctDelayOffset` walks `delayLevelTable` only: a level the file has and the configured levels
    do not keeps its offset (for when it is configured again). rmq corrected every level in the file to 0."""
    root = tmp_path / "s"
    with rmq.MessageStore(root, CFG) as store:
        store.put("T", b"x", delay_level=1)
        wait_until(lambda: len(in_topic(store, "T")) == 1)
    path = root / "config" / "delayOffset.json"
    table, version, _ = _native.decode_delay_offsets(path.read_bytes(), path)
    path.write_text(_native.encode_delay_offsets([*table, (0, 3), (99, 7)], *version))
    with rmq.MessageStore(root, CFG) as store:
        assert store.delay_offsets()[1] == 1
        store.put("T", b"y", delay_level=1)
        wait_until(lambda: len(in_topic(store, "T")) == 2)
    table, _, issues = _native.decode_delay_offsets(path.read_bytes(), path)
    assert dict(table)[0] == 3 and dict(table)[99] == 7 and dict(table)[1] == 2, table
    assert issues == []


def test_periodic_persist_follows_flush_delay_offset_interval(tmp_path: Path) -> None:
    cfg = small_config(mapped_file_size_commit_log=1 << 20, message_delay_level=LEVELS, flush_delay_offset_interval=200)
    root = tmp_path / "s"
    with rmq.MessageStore(root, cfg) as store:
        store.put("T", b"x", delay_level=1)
        path = root / "config" / "delayOffset.json"
        wait_until(lambda: path.exists() and "1:1" in path.read_text())


def test_a_producers_real_topic_and_queue_properties_are_replaced_by_the_put(tmp_path: Path) -> None:
    with rmq.MessageStore(tmp_path / "s", CFG) as store:
        r = store.put("T", b"ok", delay_level=1, properties={"REAL_QID": "x", "REAL_TOPIC": "Other"})
        m = store.read(r.wrote_offset)
        assert m is not None and (m.properties["REAL_QID"], m.properties["REAL_TOPIC"]) == ("0", "T")
        wait_until(lambda: store.delay_offsets().get(1) == 1)
        assert [m.body for m in in_topic(store, "T")] == [b"ok"]


# -- retries ------------------------------------------------------------------------------------------------------


def test_retries_back_off_by_level_then_go_to_the_dead_letter_queue(tmp_path: Path) -> None:
    # Level 3 + reconsumeTimes: 1 s, then 2 s, then (max_reconsume_times reached) the DLQ at once.
    cfg = small_config(mapped_file_size_commit_log=1 << 20, message_delay_level="1s 1s 1s 2s 3s")
    with rmq.MessageStore(tmp_path / "s", cfg) as store:
        store.put("T", b"poison", keys=["k"], properties={"biz": "1"})
        seen: list[tuple[float, int]] = []

        def listener(msgs: list[rmq.MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
            seen.extend((time.time(), m.reconsume_times) for m in msgs)
            return ConsumeStatus.RECONSUME_LATER

        offsets = ConsumerOffsetManager(tmp_path / "o.json")
        first = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
        c = PushConsumer(store, "G", "T", listener, offsets=offsets, consume_from_where=first, max_reconsume_times=2)
        with c:
            wait_until(lambda: store.get_max_offset_in_queue(dlq_topic("G"), 0) == 1)
        assert [rt for _, rt in seen] == [0, 1, 2]
        retries = in_topic(store, retry_topic("G"))
        scheduled = in_topic(store, SCHEDULE)
        assert [m.properties["DELAY"] for m in scheduled] == ["3", "4"]
        for prev, nxt in zip(scheduled, retries, strict=True):
            delay = {"3": 1000, "4": 2000}[prev.properties["DELAY"]]
            assert nxt.store_timestamp >= prev.store_timestamp + delay, "a retry never comes back early"
        original = in_topic(store, "T")[0]
        r0 = retries[0]
        assert r0.properties["RETRY_TOPIC"] == "T" and r0.properties["ORIGIN_MESSAGE_ID"] == original.msg_id
        assert r0.properties["WAIT"] == "false" and r0.properties["REAL_TOPIC"] == retry_topic("G")
        assert r0.properties["biz"] == "1" and r0.keys == ["k"] and r0.uniq_key == original.uniq_key
        assert [m.reconsume_times for m in retries] == [1, 2]
        [dead] = in_topic(store, dlq_topic("G"))
        assert (dead.reconsume_times, dead.properties["DELAY"], dead.properties["ORIGIN_MESSAGE_ID"]) == (
            3, "0", original.msg_id
        )  # fmt: skip
        assert c.stats.sent_to_retry == 2 and c.stats.sent_to_dlq == 1


@pytest.mark.parametrize(("level", "expect"), [(-1, "dlq"), (2, "2"), (9, "5")])
def test_delay_level_when_next_consume_is_honoured(tmp_path: Path, level: int, expect: str) -> None:
    cfg = small_config(mapped_file_size_commit_log=1 << 20, message_delay_level="1s 1s 1s 1s 1s")
    with rmq.MessageStore(tmp_path / "s", cfg) as store:
        store.put("T", b"m")
        calls: list[int] = []

        def listener(msgs: list[rmq.MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
            calls.append(msgs[0].reconsume_times)
            if len(calls) > 1:
                return ConsumeStatus.CONSUME_SUCCESS
            ctx.delay_level_when_next_consume = level
            return ConsumeStatus.RECONSUME_LATER

        first = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
        offsets = ConsumerOffsetManager(tmp_path / "o.json")
        with PushConsumer(store, "G", "T", listener, offsets=offsets, consume_from_where=first):
            if expect == "dlq":
                wait_until(lambda: store.get_max_offset_in_queue(dlq_topic("G"), 0) == 1)
            else:
                wait_until(lambda: len(calls) == 2)
        if expect == "dlq":
            assert calls == [0] and in_topic(store, SCHEDULE) == []
        else:
            [s] = in_topic(store, SCHEDULE)
            assert s.properties["DELAY"] == expect and s.queue_id == int(expect) - 1


def test_send_message_back_refuses_a_bad_offset_and_writes_nothing(tmp_path: Path) -> None:
    with rmq.MessageStore(tmp_path / "s", CFG, start_services=False) as store:
        r = store.put("T", b"x")
        with pytest.raises(rmq.RmqError):
            store.send_message_back(r.wrote_offset + 1, "G")
        with pytest.raises((rmq.RmqError, ValueError)):
            store.send_message_back(r.wrote_offset, "bad group/")
        assert [m.body for m in store.scan()] == [b"x"]


# -- crash --------------------------------------------------------------------------------------------------------


def test_kill_9_with_pending_delayed_messages_loses_nothing_and_delivers_none_early(tmp_path: Path) -> None:
    root = tmp_path / "s"
    child = HERE / "schedule_child.py"
    total = 120
    job = {"root": str(root), "levels": LEVELS, "count": total, "interval": 300}
    proc = subprocess.Popen(
        [sys.executable, str(child), json.dumps(job)], stdout=subprocess.PIPE, text=True, env={**os.environ}
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "put", "the child stored every message"
        time.sleep(1.6)  # some levels delivered, some not
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    with rmq.MessageStore(root, CFG) as store:
        scheduled = {m.uniq_key: m for m in in_topic(store, SCHEDULE)}
        assert len(scheduled) == total, "every acknowledged put survived"
        wait_until(lambda: delivered_all(store))
        wait_until(lambda: len({m.uniq_key for m in in_topic(store, "T")}) == total)
        delivered = in_topic(store, "T")
        for m in delivered:
            s = scheduled[m.uniq_key]
            level = int(s.properties["DELAY"])
            assert m.store_timestamp >= s.store_timestamp + DELAY_MS[level], "never delivered early"
        duplicates = len(delivered) - total
        assert 0 <= duplicates < total
