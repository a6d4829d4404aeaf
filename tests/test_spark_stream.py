"""The `rocketmq` source by queue offsets (`rmq.spark_queues`, `rmq.spark_stream`): Structured Streaming over a
store being written, and batch reads bounded by offsets or store times, with Kafka's options.

The reference is what was written: every message carries its queue and its sequence number in that queue, so
the output must hold each (topic, queue, offset) exactly once with the body written at that offset.
`RMQ_STREAM_SOAK_SECONDS` (`make spark-stream-soak`) stretches the exactly-once test from seconds to minutes.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import rmq

pyspark = pytest.importorskip("pyspark")

from pyspark.errors import StreamingQueryException  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql.streaming.query import StreamingQuery  # noqa: E402

import rmq.spark as rs  # noqa: E402
from rmq import spark_queues as sq  # noqa: E402
from rmq import spark_stream as ss  # noqa: E402

if shutil.which("java") is None:  # as tests/test_spark.py: Spark needs a JVM
    if os.environ.get("RMQ_REQUIRE_JAVA") == "1" or os.environ.get("CI", "").lower() in ("1", "true"):
        pytest.fail("java not found: the Spark tests need Java 17 (required on CI)", pytrace=False)
    pytest.skip("Spark needs Java", allow_module_level=True)

#: 4 KiB commitlog segments and 50-entry consume-queue files, so a few thousand messages roll many of each.
SMALL: dict[str, Any] = {
    "mapped_file_size_commit_log": 4096,
    "mapped_file_size_consume_queue": 50 * 20,
    "max_hash_slot_num": 64,
    "max_index_num": 256,
    "delete_commit_log_files_interval": 0,
    "delete_consume_queue_files_interval": 0,
}


def config(**overrides: Any) -> rmq.StoreConfig:
    return rmq.StoreConfig(**{**SMALL, **overrides})


def body(topic: str, queue: int, seq: int) -> bytes:
    return f"{topic}/{queue}/{seq}".encode()


def write(store: rmq.MessageStore, topic: str, queue: int, n: int) -> None:
    """`n` more messages into (topic, queue), each body naming its queue offset."""
    first = store.get_max_offset_in_queue(topic, queue, committed=False)
    for seq in range(first, first + n):
        store.put(topic, body(topic, queue, seq), queue_id=queue, keys=f"k{seq}", properties={"seq": str(seq)})


# The `spark` fixture (one local[2] session for the whole run) is in conftest.py.


def keyed(rows: list[Any]) -> list[tuple[str, int, int]]:
    return sorted((r["topic"], r["queue_id"], r["queue_offset"]) for r in rows)


def check_bodies(rows: list[Any]) -> None:
    for r in rows:
        assert bytes(r["body"]) == body(r["topic"], r["queue_id"], r["queue_offset"])


# -- options and planning (no Spark job) ----------------------------------------------------------------------------


def test_options_are_checked_before_anything_is_read(tmp_path: Path) -> None:
    base = {"path": str(tmp_path)}
    with pytest.raises(rmq.InvalidConfigError, match="either topics or topicPattern"):
        sq.QueueOptions.parse({**base, "topics": "A", "topicpattern": "A.*"})
    with pytest.raises(rmq.InvalidConfigError, match="regular expression"):
        sq.QueueOptions.parse({**base, "topicpattern": "("})
    with pytest.raises(rmq.InvalidConfigError, match="minPartitions must be at least 1"):
        sq.QueueOptions.parse({**base, "minpartitions": "0"})
    with pytest.raises(rmq.InvalidConfigError, match="failOnDataLoss must be true or false"):
        sq.QueueOptions.parse({**base, "failondataloss": "maybe"})
    for bad in ('{"A":{"x":1}}', '{"A":{"0":"1"}}', "[1]", "soon", '{"A":{"0":-3}}', '{"A":{"-1":0}}'):
        with pytest.raises(rmq.InvalidConfigError, match="startingOffsets"):
            sq.parse_bound({"startingoffsets": bad}, "starting", "latest", streaming=True)
    # Kafka's batch rules: no start at latest, no end at earliest.
    with pytest.raises(rmq.InvalidConfigError, match="not allowed for a batch"):
        sq.parse_bound({"startingoffsets": "latest"}, "starting", "earliest", streaming=False)
    with pytest.raises(rmq.InvalidConfigError, match="not allowed"):
        sq.parse_bound({"endingoffsets": '{"A":{"0":-2}}'}, "ending", "latest", streaming=False)
    # Precedence: startingTimestamp over startingOffsetsByTimestamp over startingOffsets.
    both = {"startingtimestamp": "5", "startingoffsetsbytimestamp": '{"A":{"0":7}}', "startingoffsets": "earliest"}
    assert sq.parse_bound(both, "starting", "latest", streaming=True) == sq.Bound("timestamp", at=5)
    both.pop("startingtimestamp")
    assert sq.parse_bound(both, "starting", "latest", streaming=True).offsets == {"A": {"0": 7}}
    with pytest.raises(rmq.InvalidConfigError, match="batch reads only"):
        ss.RocketMQStreamReader({**base, "endingOffsets": "latest"}, rs.SCHEMA)
    # An option the source does not read, and a topics naming none, are refused: `topic` (for `topics`) read
    # every topic, and `topics=""` read nothing, both without a word.
    for extra, match in [
        ({"topic": "A"}, "no option 'topic'; did you mean topics"),
        ({"StartingOffset": "earliest"}, "did you mean startingOffsets"),
        ({"topics": " , "}, "names no topic"),
    ]:
        source = rs.RocketMQDataSource({**base, **extra})
        with pytest.raises(rmq.InvalidConfigError, match=match):
            source.reader(rs.SCHEMA)
        with pytest.raises(rmq.InvalidConfigError, match=match):  # at Spark's first call (see the next test)
            source.streamReader(rs.SCHEMA).initialOffset()
    rs.check_read_options({o.lower(): "1" for o in rs.READ_OPTIONS})  # every documented option is taken


def test_ranges_split_for_min_partitions_and_admission_shares_the_limits(tmp_path: Path) -> None:
    ranges = [sq.QueueRange("A", 0, 0, 90), sq.QueueRange("A", 1, 5, 15, new_queue=True)]
    pieces = sq.split_ranges(ranges, 7)
    assert len(pieces) >= 7
    for q, (lo, hi) in ((0, (0, 90)), (1, (5, 15))):
        mine = [p for p in pieces if p.queue_id == q]
        assert [(p.start, p.end) for p in mine][0][0] == lo and mine[-1].end == hi
        assert all(a.end == b.start for a, b in zip(mine, mine[1:], strict=False)), "contiguous, no overlap"
    assert all(p.new_queue for p in pieces if p.queue_id == 1), "every piece of a new queue says it is one"
    assert sq.split_ranges(ranges, 2) == ranges

    with rmq.MessageStore(tmp_path / "s", config()) as store:
        write(store, "A", 0, 30)  # bodies of 7-8 bytes: records of about 150 bytes
        write(store, "A", 1, 10)
        store.wait_dispatched()
        size = store.read(0).store_size  # type: ignore[union-attr]
        ranges4 = [("A", "0", 0, 30), ("A", "1", 0, 10)]
        assert ss.admit(store, ranges4, None, None) == [30, 10]
        assert ss.admit(store, ranges4, 8, None) == [6, 2], "in proportion to what waits"
        assert sum(ss.admit(store, ranges4, 7, None)) == 7
        took = ss.admit(store, ranges4, None, 20 * size)
        assert sum(took) <= 20 and took[0] > took[1] > 0
        assert ss.admit(store, ranges4, None, 1) == [1, 1], "one message of each queue, so every queue moves"
        assert ss.admit(store, [("A", "0", 30, 30)], 5, 5) == [0]
        # No queue starves (helper S): a limit below the number of queues waiting still moves each of them, and
        # a message bigger than its queue's share of the bytes is admitted.
        store.put("B", b"x" * 3_000, queue_id=0)
        for q in range(2, 8):
            write(store, "A", q, 5)
        store.wait_dispatched()
        many = [("A", str(q), 0, store.get_max_offset_in_queue("A", q)) for q in range(8)]
        assert ss.admit(store, many, 4, None) == [max(1, n * 4 // 70) for n in (30, 10, 5, 5, 5, 5, 5, 5)]
        assert all(ss.admit(store, many, 4, None))
        big = [("A", "0", 0, 30), ("B", "0", 0, 1)]
        assert ss.admit(store, big, None, 20 * size)[1] == 1, "the 3 KB message is admitted beside A's backlog"


# -- batch reads by offsets and times ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def timed_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """Topics Alpha (3 queues), Beta (2) and RMQ_SYS_TRACE_TOPIC, written over several milliseconds; with every
    message as rmq reads it (topic, queue_id, queue_offset, store_timestamp in ms)."""
    root = tmp_path_factory.mktemp("timed") / "store"
    with rmq.MessageStore(root, config()) as store:
        for _ in range(12):
            for q in range(3):
                write(store, "Alpha", q, 3)
            for q in range(2):
                write(store, "Beta", q, 2)
            write(store, "RMQ_SYS_TRACE_TOPIC", 0, 1)
            time.sleep(0.003)
        store.wait_dispatched()
        msgs = [
            {"topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset, "ts": m.store_timestamp}
            for m in store.scan(0)
        ]
    return root, msgs


def test_batch_offsets_json_earliest_latest_and_topics(spark: SparkSession, timed_store: Any) -> None:
    root, msgs = timed_store
    load = spark.read.format("rocketmq")
    everything = load.option("startingOffsets", "earliest").load(str(root)).collect()
    user = [m for m in msgs if m["topic"] != "RMQ_SYS_TRACE_TOPIC"]
    assert keyed(everything) == keyed(user), "system topics only when named"
    check_bodies(everything)
    named = load.option("topics", "RMQ_SYS_TRACE_TOPIC").option("endingOffsets", "latest").load(str(root))
    assert named.count() == 12
    # JSON: Alpha queue 1 from 4 to 10, queue 0 from -2 (earliest) to 5, the rest earliest to latest.
    df = (
        spark.read.format("rocketmq")
        .option("topicPattern", "Al.*")
        .option("startingOffsets", '{"Alpha":{"1":4,"0":-2}}')
        .option("endingOffsets", '{"Alpha":{"1":10,"0":5,"2":-1}}')
        .load(str(root))
    )
    want = [
        m
        for m in user
        if m["topic"] == "Alpha"
        and (m["queue_id"] != 1 or 4 <= m["queue_offset"] < 10)
        and (m["queue_id"] != 0 or m["queue_offset"] < 5)
    ]
    assert keyed(df.collect()) == keyed(want)
    assert df.rdd.getNumPartitions() == 3, "one partition per queue"
    assert (
        spark.read.format("rocketmq")
        .option("topicPattern", "Al.*")
        .option("minPartitions", 10)
        .option("startingOffsets", "earliest")
        .load(str(root))
        .rdd.getNumPartitions()
        >= 10
    )
    bad = spark.read.format("rocketmq").option("startingOffsets", "latest").load(str(root))
    with pytest.raises(Exception, match="not allowed for a batch query"):
        bad.collect()
    beyond = spark.read.format("rocketmq").option("topics", "Beta").option("endingOffsets", '{"Beta":{"0":999}}')
    with pytest.raises(Exception, match=r"holds \[0, 24\)"):
        beyond.load(str(root)).collect()
    # Per-queue JSON naming what the read does not cover is refused, not left out (a typo read everything).
    for option, value, says in (
        ("startingOffsets", '{"Alpah":{"0":3}}', "names topic 'Alpah', which the store does not hold"),
        ("startingOffsets", '{"Beta":{"0":1}}', "names topic 'Beta', which this query does not read"),
        ("endingOffsets", '{"Alpha":{"7":3}}', "names queue 7 of topic 'Alpha', which the store does not hold"),
        ("startingOffsetsByTimestamp", '{"Beta":{"0":1}}', "names topic 'Beta', which this query does not read"),
    ):
        named_wrong = spark.read.format("rocketmq").option("topicPattern", "Al.*").option(option, value)
        with pytest.raises(Exception, match=re.escape(says)):
            named_wrong.load(str(root)).collect()
    absent = spark.read.format("rocketmq").option("startingOffsets", '{"Gamma":{"0":0}}')
    with pytest.raises(Exception, match="names topic 'Gamma', which the store does not hold"):
        absent.load(str(root)).collect()


def test_batch_timestamps_follow_kafkas_rule(spark: SparkSession, timed_store: Any) -> None:
    root, msgs = timed_store
    times = sorted({m["ts"] for m in msgs})
    lo, hi = times[len(times) // 4], times[3 * len(times) // 4]
    df = (
        spark.read.format("rocketmq")
        .option("topics", "Alpha,Beta")
        .option("startingTimestamp", str(lo))
        .option("endingTimestamp", str(hi))
        .load(str(root))
    )
    # Per queue: from the earliest offset stored at or after lo, up to (not including) the earliest at or after hi.
    want = [m for m in msgs if m["topic"] in ("Alpha", "Beta") and lo <= m["ts"] < hi]
    assert keyed(df.collect()) == keyed(want) and want
    # A start past every message: Kafka's default strategy fails, "latest" reads nothing.
    late = spark.read.format("rocketmq").option("topics", "Beta").option("startingTimestamp", str(times[-1] + 1))
    with pytest.raises(Exception, match="no message stored at or after"):
        late.load(str(root)).collect()
    assert late.option("startingOffsetsByTimestampStrategy", "latest").load(str(root)).count() == 0
    # Per queue, as JSON; the queue it leaves out is read from its start.
    per_queue = json.dumps({"Beta": {"0": hi}})
    got = spark.read.format("rocketmq").option("topics", "Beta").option("startingOffsetsByTimestamp", per_queue)
    want = [m for m in msgs if m["topic"] == "Beta" and (m["queue_id"] == 1 or m["ts"] >= hi)]
    assert keyed(got.load(str(root)).collect()) == keyed(want)


def test_include_properties_and_the_commitlog_path_keep_working(spark: SparkSession, timed_store: Any) -> None:
    root, msgs = timed_store
    no_props = spark.read.format("rocketmq").option("includeProperties", "false")
    assert "properties" not in no_props.load(str(root)).columns
    assert "properties" not in no_props.option("startingOffsets", "earliest").load(str(root)).columns
    props = spark.read.format("rocketmq").option("startingOffsets", "earliest").load(str(root / "commitlog"))
    rows = props.select("queue_offset", "properties").collect()
    assert rows and all(r["properties"]["seq"] == str(r["queue_offset"]) for r in rows)
    # Without a queue option the commitlog split reader still runs: every record, system topics included.
    split = spark.read.format("rocketmq").option("minPartitions", 5).load(str(root))
    assert split.count() == len(msgs) and split.rdd.getNumPartitions() >= 5


# -- streaming ---------------------------------------------------------------------------------------------------


def run_available_now(spark: SparkSession, root: Path, out: Path, ckpt: Path, **options: str) -> StreamingQuery:
    reader = spark.readStream.format("rocketmq")
    for k, v in options.items():
        reader = reader.option(k, v)
    q = (
        reader.load(str(root))
        .writeStream.format("parquet")
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start(str(out))
    )
    q.awaitTermination(120)
    if not options.get("failOnDataLoss") and q.exception() is not None:
        raise q.exception()  # type: ignore[misc]
    return q


def output(spark: SparkSession, out: Path) -> list[Any]:
    return spark.read.parquet(str(out)).collect() if (out / "_spark_metadata").exists() else []


def test_stream_exactly_once_across_restarts_while_the_store_rolls(spark: SparkSession, tmp_path: Path) -> None:
    """A writer appends to three queues in 4 KiB segments while a query writes Parquet; the query is stopped
    midway and restarted from its checkpoint (twice), then drained: each message is in the output once, and every
    Parquet file holds each queue's rows in queue-offset order."""
    soak = float(os.environ.get("RMQ_STREAM_SOAK_SECONDS", "0"))
    root, out, ckpt = tmp_path / "store", tmp_path / "out", tmp_path / "ckpt"
    store = rmq.MessageStore(root, config())
    write(store, "Live", 0, 1)  # the query starts at "earliest": the queue exists before it
    store.wait_dispatched()
    done = threading.Event()
    written = [1, 0, 0]

    def writer() -> None:
        deadline = time.monotonic() + max(soak, 4.0)
        while time.monotonic() < deadline or sum(written) < 1500:  # 1,500 messages: more than 50 segments
            for qid in range(3):
                write(store, "Live", qid, 5)
                written[qid] += 5
            time.sleep(0.05 if soak else 0.01)  # a soak writes about 300 messages/s, some thousands of segments
        done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        restarts = 0
        while True:
            q = (
                spark.readStream.format("rocketmq")
                .option("topics", "Live")
                .option("startingOffsets", "earliest")
                .option("maxRecordsPerTrigger", "400")
                .load(str(root))
                .writeStream.format("parquet")
                .option("checkpointLocation", str(ckpt))
                .trigger(processingTime="300 milliseconds")
                .start(str(out))
            )
            # Each run first completes a batch: Spark itself refuses to restart from a checkpoint whose offset log
            # holds only the temporary file of an interrupted first write (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY,
            # met on a loaded CI machine where 1.5 s did not reach the first batch's end).
            deadline = time.monotonic() + 120
            while not q.recentProgress and q.isActive and time.monotonic() < deadline:
                time.sleep(0.05)
            assert q.recentProgress, f"no batch completed in 120 s: {q.exception()}"
            time.sleep(random.uniform(0.0, 1.0))
            q.stop()  # midway: the batch running, if any, is replayed from the offset log on restart
            restarts += 1
            if done.is_set() and restarts >= 3:
                break
        thread.join()
        store.wait_dispatched()
        assert len(list((root / "commitlog").iterdir())) > 20, "many segments rolled meanwhile"
        run_available_now(spark, root, out, ckpt, topics="Live", startingOffsets="earliest")
    finally:
        done.wait(60)
        thread.join()
        store.close()
    rows = output(spark, out)
    assert keyed(rows) == sorted(("Live", qid, o) for qid in range(3) for o in range(written[qid]))
    check_bodies(rows)
    for f in spark.read.parquet(str(out)).inputFiles():
        t = pq.read_table(f.removeprefix("file://"), columns=["queue_id", "queue_offset"]).to_pylist()
        for qid in range(3):
            offsets = [r["queue_offset"] for r in t if r["queue_id"] == qid]
            assert offsets == sorted(offsets), f"{f}: queue {qid} out of order"


def test_stream_limits_pattern_new_queues_and_latest(spark: SparkSession, tmp_path: Path) -> None:
    root, out, ckpt = tmp_path / "store", tmp_path / "out", tmp_path / "ckpt"
    with rmq.MessageStore(root, config()) as store:
        write(store, "OrdersEU", 0, 50)
        write(store, "OrdersUS", 1, 30)
        write(store, "Audit", 0, 10)
        store.wait_dispatched()
    q = run_available_now(
        spark, root, out, ckpt, topicPattern="Orders.*", maxRecordsPerTrigger="40", startingOffsets="earliest"
    )
    batches = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert batches == [40, 40], "maxRecordsPerTrigger, shared across the queues"
    end = q.recentProgress[-1]["sources"][0]["endOffset"]
    assert (json.loads(end) if isinstance(end, str) else end) == {"OrdersEU": {"0": 50}, "OrdersUS": {"1": 30}}
    # A new queue, a new matching topic and a topic that does not match: the first two are picked up.
    with rmq.MessageStore(root, config()) as store:
        write(store, "OrdersEU", 3, 7)
        write(store, "OrdersAPAC", 0, 4)
        write(store, "Audit", 0, 10)
        write(store, "OrdersUS", 1, 2)
        store.wait_dispatched()
        size = store.read(0).store_size  # type: ignore[union-attr]
    q = run_available_now(spark, root, out, ckpt, topicPattern="Orders.*", maxBytesPerTrigger=str(7 * size))
    batches = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sum(batches) == 13 and max(batches) <= 7 and len(batches) >= 2, batches
    rows = output(spark, out)
    want = [("OrdersEU", 0, o) for o in range(50)] + [("OrdersEU", 3, o) for o in range(7)]
    want += [("OrdersUS", 1, o) for o in range(32)] + [("OrdersAPAC", 0, o) for o in range(4)]
    assert keyed(rows) == sorted(want)
    check_bodies(rows)
    # startingOffsets=latest (the default) reads only what comes after the query's first offsets.
    out2, ckpt2 = tmp_path / "out2", tmp_path / "ckpt2"
    run_available_now(spark, root, out2, ckpt2, topics="OrdersEU")
    assert output(spark, out2) == []
    with rmq.MessageStore(root, config()) as store:
        write(store, "OrdersEU", 0, 3)
        store.wait_dispatched()
    run_available_now(spark, root, out2, ckpt2, topics="OrdersEU")
    assert keyed(output(spark, out2)) == [("OrdersEU", 0, o) for o in (50, 51, 52)]


def test_a_refused_stream_option_fails_the_query_with_rmqs_error(spark: SparkSession, tmp_path: Path) -> None:
    """QA: an option a stream does not read (`splitSize`) failed the query with PySpark's UnboundLocalError
    ("cannot access local variable 'reader'": its runner's `finally: reader.stop()` after the reader's creation
    raised); rmq's InvalidConfigError was only in the chained traceback. The reader now raises it at its first call."""
    root = tmp_path / "store"
    with rmq.MessageStore(root, config()) as store:
        write(store, "Orders", 0, 3)
    with pytest.raises(StreamingQueryException) as info:
        run_available_now(spark, root, tmp_path / "out", tmp_path / "ckpt", splitSize="1000")
    text = str(info.value)
    assert "UnboundLocalError" not in text, text
    assert "InvalidConfigError: option splitSize is not read by a streaming read" in text, text


def test_stream_starting_timestamp_and_json(spark: SparkSession, tmp_path: Path) -> None:
    root = tmp_path / "store"
    with rmq.MessageStore(root, config()) as store:
        write(store, "T", 0, 10)
        write(store, "T", 1, 10)
        time.sleep(0.01)
        cut = int(time.time() * 1000)
        time.sleep(0.01)
        write(store, "T", 0, 5)
        write(store, "T", 1, 5)
        store.wait_dispatched()
    run_available_now(spark, root, tmp_path / "o1", tmp_path / "c1", topics="T", startingTimestamp=str(cut))
    assert keyed(output(spark, tmp_path / "o1")) == [("T", q, o) for q in (0, 1) for o in range(10, 15)]
    # JSON naming a queue that does not exist yet: it is read from that offset once it appears.
    start = json.dumps({"T": {"0": 12, "1": -2, "7": 1}})
    run_available_now(spark, root, tmp_path / "o2", tmp_path / "c2", topics="T", startingOffsets=start)
    with rmq.MessageStore(root, config()) as store:
        write(store, "T", 7, 3)
        store.wait_dispatched()
    run_available_now(spark, root, tmp_path / "o2", tmp_path / "c2", topics="T", startingOffsets=start)
    want = [("T", 0, o) for o in range(12, 15)] + [("T", 1, o) for o in range(15)] + [("T", 7, 1), ("T", 7, 2)]
    assert keyed(output(spark, tmp_path / "o2")) == sorted(want)


def test_fail_on_data_loss(spark: SparkSession, tmp_path: Path) -> None:
    """Retention deletes what a checkpointed query still needs: by default the restart fails naming the queue
    and offsets; with failOnDataLoss=false it skips them and reads on."""
    root = tmp_path / "store"
    cfg = config(file_reserved_time=0, delete_file_batch_max=100)
    with rmq.MessageStore(root, cfg) as store:
        write(store, "R", 0, 10)
        store.wait_dispatched()
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    run_available_now(spark, root, out, ckpt, topics="R", startingOffsets="earliest")
    with rmq.MessageStore(root, cfg) as store:
        write(store, "R", 0, 200)  # about 8 segments
        store.wait_dispatched()
        store.delete_expired_files_now()
        lo = store.get_min_offset_in_queue("R", 0)
    assert lo > 10, "retention deleted offsets the query has not read"
    with pytest.raises(StreamingQueryException, match=rf"topic 'R' queue 0: offsets \[10, {lo}\) were deleted"):
        run_available_now(spark, root, out, ckpt, topics="R")
    q = run_available_now(spark, root, out, ckpt, topics="R", failOnDataLoss="false")
    assert q.exception() is None
    got = keyed(output(spark, out))
    assert got == [("R", 0, o) for o in [*range(10), *range(lo, 210)]]


def test_the_store_apache_rocketmq_wrote(spark: SparkSession) -> None:
    """Every consume-queue entry of the store RocketMQ 5.3.1 wrote (tests/fixtures), system topics included, once,
    with the record the entry points at; read-only, so the committed fixture is never touched."""
    fixture = Path(__file__).parent / "fixtures" / "rocketmq-5.3.1" / "store"
    want: dict[tuple[str, int, int], bytes] = {}
    with rmq.MessageStore(fixture, read_only=True) as store:
        for t in store.topics():
            for q in store.queue_ids(t):
                for e in store.iter_queue(t, q):
                    m = store.read(e.commitlog_offset)
                    assert m is not None
                    want[(t, q, e.queue_offset)] = m.body
    df = spark.read.format("rocketmq").option("topicPattern", ".*").option("startingOffsets", "earliest")
    rows = df.load(str(fixture)).select("topic", "queue_id", "queue_offset", "body").collect()
    assert {(r["topic"], r["queue_id"], r["queue_offset"]): bytes(r["body"]) for r in rows} == want
    assert len(rows) == len(want) > 0


def test_a_task_finds_its_range_deleted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Retention between planning and reading: the task fails naming what is gone, or skips it with a warning.
    So does a new queue's range below its minimum: the queue appeared after the query's last offsets, so its
    messages from offset 0 on were due to the query (helper S: they were skipped silently, even with
    failOnDataLoss=true; Kafka reports a new partition that does not start at 0)."""
    root = tmp_path / "store"
    cfg = config(file_reserved_time=0, delete_file_batch_max=100)
    with rmq.MessageStore(root, cfg) as store:
        write(store, "R", 0, 120)
        store.wait_dispatched()
        store.delete_expired_files_now()
        lo = store.get_min_offset_in_queue("R", 0)
    assert 0 < lo < 120
    schema = rs.output_schema(rs.SCHEMA)

    def read(part: sq.QueueRange, fail: bool) -> list[int]:
        batches = sq.read_range(str(root), part, schema, fail_on_data_loss=fail, max_rows=16)
        return [o for b in batches for o in b.column("queue_offset").to_pylist()]

    with pytest.raises(sq.DataLossError, match=rf"topic 'R' queue 0: offsets \[3, {lo}\) were deleted"):
        read(sq.QueueRange("R", 0, 3, 120), True)
    with caplog.at_level("WARNING", logger="rmq.spark"):
        assert read(sq.QueueRange("R", 0, 3, 120), False) == list(range(lo, 120))
    assert f"offsets [3, {lo}) were deleted" in caplog.text
    caplog.clear()
    new = sq.QueueRange("R", 0, 0, 120, new_queue=True)
    with pytest.raises(
        sq.DataLossError, match=rf"offsets \[0, {lo}\) were deleted \(retention\) \(a queue that appeared"
    ):
        read(new, True)
    with caplog.at_level("WARNING", logger="rmq.spark"):
        assert read(new, False) == list(range(lo, 120))
    assert f"offsets [0, {lo}) were deleted" in caplog.text
    # Split for minPartitions, every piece says what of it is gone.
    caplog.clear()
    with caplog.at_level("WARNING", logger="rmq.spark"):
        got = [o for p in sq.split_ranges([new], 6) for o in read(p, False)]
    assert got == list(range(lo, 120)) and caplog.text.count("were deleted") >= 1
    with pytest.raises(sq.DataLossError, match=r"offsets \[120, 130\) are gone \(the queue ends at 120\)"):
        read(sq.QueueRange("R", 0, 115, 130), True)


def test_a_store_replaced_under_a_running_query_is_noticed(tmp_path: Path) -> None:
    """The store deleted and made again at the same path while a query runs (helper S): the process's cached
    read-only view went on answering from the old store, so the query never noticed, and a task resolved the old
    store's queue entries against the new log (the new store's bodies). The view is opened afresh now, and the
    query sees the queue end before its offsets: the store was replaced (`failOnDataLoss`)."""
    root = tmp_path / "store"
    with rmq.MessageStore(root, config()) as w:
        write(w, "T", 0, 100)
        w.wait_dispatched()
    r = ss.RocketMQStreamReader({"path": str(root), "startingOffsets": "earliest"}, rs.SCHEMA)
    start = r.initialOffset()
    end = r.latestOffset(start, r.getDefaultReadLimit())
    assert json.loads(json.dumps(end)) == {"T": {"0": 100}}
    shutil.rmtree(root)
    with rmq.MessageStore(root, config()) as w:
        write(w, "T", 0, 30)
        write(w, "U", 0, 5)
        w.wait_dispatched()
    with pytest.raises(sq.DataLossError, match=r"now ends at offset 30, but the query had read up to 100"):
        r.latestOffset(end, r.getDefaultReadLimit())
    # Told to go on: from the new store's ends, its new topic included.
    lenient = ss.RocketMQStreamReader({"path": str(root), "failOnDataLoss": "false"}, rs.SCHEMA)
    assert json.loads(json.dumps(lenient.latestOffset(end, lenient.getDefaultReadLimit()))) == {
        "T": {"0": 30},
        "U": {"0": 5},
    }
