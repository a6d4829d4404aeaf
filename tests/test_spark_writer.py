"""Writing DataFrames into a store (`rmq.spark_writer`, `df.write.format("rocketmq")`).

The round trip: a store made here (tags, keys, properties, flags, born times over two topics and several queues)
is read into a DataFrame, written into a new store by the writer, and Apache RocketMQ 5.3.1 opens the new store:
every message is there with its body, properties (as RocketMQ parses them), flag and born time at the same
queue offsets, and RocketMQ's `queryMessage` finds every key. Then bad input: each fails with a typed error
naming the row, and nothing of the bad batch is written.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import rmq
from rmq import arrow

pytest.importorskip("pyspark")

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import types as T  # noqa: E402
from test_interop import CONFIG, java, java_describe  # noqa: E402, F401 (the harness fixture)

import rmq.spark as rs  # noqa: E402

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def new_store(path: Path) -> Path:
    """An empty store with the interop tests' small files (64 KiB segments), which the writer's open reads off."""
    rmq.MessageStore(path, CONFIG, start_services=False).close()
    return path


def source_store(path: Path) -> Path:
    """300 messages: two topics, 4 and 3 queues, tags (some none, some not ASCII), 0 to 3 keys, user properties,
    flags and born times of their own."""
    with rmq.MessageStore(path, CONFIG, start_services=False) as store:
        for i in range(300):
            topic, qid = ("Orders", i % 4) if i % 3 else ("Audit", i % 3)
            keys = [f"order-{i}", f"customer-{i % 7}", "标签键"][: i % 4]
            store.put(
                topic,
                hashlib.sha256(b"%d" % i).digest() * (1 + i % 5),
                queue_id=qid,
                tags=[None, "TagA", "标签", "TagB"][i % 4],
                keys=keys or None,
                properties={"color": ["red", "绿"][i % 2], "n": str(i)} if i % 5 else {},
                flag=i % 3,
                born_timestamp=1_700_000_000_000 + i * 1000,
            )
        store.wait_dispatched()
    return path


def scan(path: Path) -> list[Any]:
    with rmq.MessageStore(path, read_only=True) as store:
        return list(store.scan())


def write(df: Any, store: Path, **options: str) -> None:
    df.write.format("rocketmq").mode("append").options(**options).save(str(store))


def test_round_trip_opens_in_rocketmq(spark: SparkSession, java: Any, tmp_path: Path) -> None:  # noqa: F811
    src, dst = source_store(tmp_path / "src"), tmp_path / "dst"
    df = rs.read(spark, src)  # every column of the source: the writer takes its own and ignores the rest
    assert df.rdd.getNumPartitions() > 1
    # One task: the source's order, so the same queue offsets. A new store, with the harness's file sizes.
    sizes = {"mappedFileSizeCommitLog": "65536", "mappedFileSizeConsumeQueue": "160", "maxHashSlotNum": "64"}
    write(df.coalesce(1), dst, **sizes, MAXINDEXNUM="128")
    theirs = java_describe(java, dst, tmp_path)
    messages = {(m["topic"], m["queueId"], m["queueOffset"]): m for m in theirs if m["type"] == "message"}
    source = scan(src)
    assert len(messages) == len(source) == 300
    found = {(k["topic"], k["key"]): k["physicalOffsets"] for k in theirs if k["type"] == "key"}
    for m in source:
        got = messages[(m.topic, m.queue_id, m.queue_offset)]
        assert got["bodySha256"] == hashlib.sha256(m.body).hexdigest()
        assert got["bornTimestamp"] == m.born_timestamp
        assert got["flag"] == m.flag
        # Every property as RocketMQ parses the stored text: TAGS, KEYS, UNIQ_KEY, WAIT, CLUSTER and the user's.
        # (The text's order is that of RocketMQ's batch put, which the writer uses, not always the source's.)
        assert dict(p.split("\x01", 1) for p in got["properties"].split("\x02") if p) == dict(m.properties)
        for key in m.keys:  # RocketMQ's queryMessage finds the copy by every key
            assert got["physicalOffset"] in found[(m.topic, key)]
    # rmq reads the new store as it reads the source, store-side fields aside (the commitlog's order across
    # queues may differ: each batch is put queue by queue).
    same = ("topic", "queue_id", "queue_offset", "body", "tags", "keys", "properties", "flag", "born_timestamp")
    assert sorted([getattr(m, f) for f in same] for m in scan(dst)) == sorted(
        [getattr(m, f) for f in same] for m in source
    )


def test_parallel_tasks_take_turns_and_keep_each_queues_order(spark: SparkSession, tmp_path: Path) -> None:  # noqa: F811
    dst = new_store(tmp_path / "dst")
    rows = [("T", None, [f"k{i % 10}"], i) for i in range(400)]
    schema = "topic string, body binary, keys array<string>, n int"
    df = spark.createDataFrame([(t, str(n).encode(), k, n) for t, _, k, n in rows], schema).repartition(4, "n")
    write(df.drop("n"), dst)
    got = scan(dst)
    assert sorted(int(m.body) for m in got) == list(range(400))
    queues = {0, 1, 2, 3}
    for m in got:  # queue by key hash: Java's abs(hashCode % 4) of the KEYS text
        h = arrow.java_hash(pa.array(m.keys)).to_pylist()[0]
        assert m.queue_id == abs(h) % 4 and m.queue_id in queues
    for q in queues:
        offsets = [m.queue_offset for m in got if m.queue_id == q]
        assert offsets == list(range(len(offsets)))


def test_queue_choice_columns_and_types(spark: SparkSession, tmp_path: Path) -> None:  # noqa: F811
    dst = new_store(tmp_path / "dst")
    with rmq.MessageStore(dst, start_services=False) as store:
        store.create_topic("Three", queues=3)
    df = spark.createDataFrame(
        [
            ("Three", "a b", 1700000000123, None, "x"),
            ("Three", None, 1700000000456, None, "y"),
            ("Three", None, None, 2, "z"),
            ("Free", "a b", None, None, "w"),
            ("Free", None, None, 7, "v"),  # an unconfigured topic takes any queue id
        ],
        "topic string, keys string, born_timestamp long, queue_id int, body string",
    ).coalesce(1)
    write(df, dst)
    got = {m.body: m for m in scan(dst)}
    h = arrow.java_hash(pa.array(["a b"])).to_pylist()[0]
    assert got[b"x"].queue_id == abs(h) % 3 and got[b"x"].keys == ["a", "b"]
    assert got[b"x"].born_timestamp == 1700000000123
    assert got[b"y"].queue_id == 0  # no key: round robin from queue 0
    assert got[b"z"].queue_id == 2
    assert got[b"w"].queue_id == abs(h) % 4  # unconfigured: the default 4 queues
    assert got[b"v"].queue_id == 7
    assert got[b"v"].tags is None and got[b"v"].keys == []


def failing(fn: Any) -> str:
    with pytest.raises(Exception) as e:  # noqa: B017 (Spark wraps the task's error)
        fn()
    return str(e.value)


@pytest.mark.parametrize(
    ("rows", "schema", "error"),
    [
        ([("T", b"ok", None), ("T", None, None)], "topic string, body binary, queue_id int", "InvalidMessageError"),
        ([("T", b"ok", None), (None, b"x", None)], "topic string, body binary, queue_id int", "InvalidMessageError"),
        ([("T", b"ok", 1), ("Q2", b"x", 2)], "topic string, body binary, queue_id int", "InvalidArgumentError"),
        ([("T", b"ok", 0), ("T", b"x", -1)], "topic string, body binary, queue_id int", "InvalidArgumentError"),
        ([("T", b"ok", "TagA", {}), ("T", b"x", "TagB", {"TAGS": "Other"})],
         "topic string, body binary, tags string, properties map<string,string>", "InvalidPropertyError"),
        ([("T", b"ok", None), ("T", b"x" * (4 << 20 | 1), None)], "topic string, body binary, queue_id int",
         "MessageTooLargeError"),
    ],
)  # fmt: skip
def test_bad_rows_fail_typed_and_write_nothing(
    spark: SparkSession,  # noqa: F811
    tmp_path: Path,
    rows: list[tuple[Any, ...]],
    schema: str,
    error: str,
) -> None:
    dst = new_store(tmp_path / "dst")
    with rmq.MessageStore(dst, start_services=False) as store:
        store.create_topic("Q2", queues=2)
    df = spark.createDataFrame(rows, schema).coalesce(1)
    message = failing(lambda: write(df, dst))
    assert error in message and "row 1" in message
    assert scan(dst) == []  # the bad row's batch is checked whole before any of it is written


@pytest.mark.parametrize(
    ("schema", "rows", "error"),
    [
        ("body binary", [(b"x",)], "needs a 'topic' column"),
        ("topic string", [("T",)], "needs a 'body' column"),
        ("topic string, body binary, tag string", [("T", b"x", "a")], "column 'tag' is not one"),
        ("topic string, body binary, queue_id string", [("T", b"x", "1")], "column queue_id is string"),
        ("topic string, body binary, properties map<string,int>", [("T", b"x", {"a": 1})], "column properties"),
    ],
)
def test_bad_columns_are_refused(
    spark: SparkSession,  # noqa: F811
    tmp_path: Path,
    schema: str,
    rows: list[tuple[Any, ...]],
    error: str,
) -> None:
    dst = new_store(tmp_path / "dst")
    assert error in failing(lambda: write(spark.createDataFrame(rows, schema), dst))
    assert scan(dst) == []


def test_modes_and_options(spark: SparkSession, tmp_path: Path) -> None:  # noqa: F811
    dst = new_store(tmp_path / "dst")
    df = spark.createDataFrame([("T", b"x")], "topic string, body binary")
    assert "only appends" in failing(lambda: df.write.format("rocketmq").mode("overwrite").save(str(dst)))
    assert "queues must be" in failing(lambda: write(df, dst, queues="0"))
    with rmq.MessageStore(dst, start_services=False):  # the lock is held: the task waits lockTimeout, then fails
        assert "StoreLockedError" in failing(lambda: write(df, dst, lockTimeout="0.5"))
    assert scan(dst) == []
    write(df, dst)
    assert [m.body for m in scan(dst)] == [b"x"]


def test_stream_writer_appends_each_micro_batch(spark: SparkSession, tmp_path: Path) -> None:  # noqa: F811
    dst = new_store(tmp_path / "dst")
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.json").write_text("\n".join(json.dumps({"topic": "S", "body": f"m{i}"}) for i in range(5)))
    schema = T.StructType([T.StructField("topic", T.StringType()), T.StructField("body", T.StringType())])
    query = (
        spark.readStream.schema(schema)
        .json(str(src))
        .writeStream.format("rocketmq")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start(str(dst))
    )
    query.awaitTermination(120)
    assert sorted(m.body for m in scan(dst)) == [b"m%d" % i for i in range(5)]


def test_a_task_waits_out_an_index_file_being_allocated(tmp_path: Path) -> None:
    """A task reads the store's sizes before it has the lock: an index file another task is allocating tells
    nothing until whole, so the task retries (and fails clearly if the sizes never become readable)."""
    import threading
    import time

    from rmq import spark_writer

    dst = new_store(tmp_path / "dst")
    (dst / "index").mkdir(exist_ok=True)
    growing = dst / "index" / "20260101000000000"
    with open(growing, "wb") as f:
        f.truncate(96 << 20)  # part of a default 420,000,040-byte index file
    with pytest.raises(rmq.InvalidConfigError):
        spark_writer._open(spark_writer.WriteOptions(str(dst), 4, 0.5, {}))

    def finish() -> None:
        time.sleep(0.5)
        with open(growing, "r+b") as f:
            f.truncate(40 + 4 * 5_000_000 + 20 * 20_000_000)

    t = threading.Thread(target=finish)
    t.start()
    store = spark_writer._open(spark_writer.WriteOptions(str(dst), 4, 60, {}))
    t.join()
    try:
        assert (store.config.max_hash_slot_num, store.config.max_index_num) == (5_000_000, 20_000_000)
    finally:
        store.close()


# -- the writer's task without Spark: what one Arrow batch stores (`write_partition`) ------------------------


def write_batch(dst: Path, batch: pa.RecordBatch, **options: str) -> None:
    from rmq import spark_writer

    spark_writer.write_partition(spark_writer.WriteOptions.parse({"path": str(dst), **options}), iter([batch]))


def good_then_bad(column: str, bad: Any, typ: pa.DataType | None = None) -> pa.RecordBatch:
    """Two good rows and a bad one (row 2) of one topic and queue, `column` holding `bad` in the last."""
    cols: dict[str, Any] = {"topic": ["T", "T", "T"], "body": [b"good-0", b"good-1", b"bad"], "queue_id": [0, 0, 0]}
    good = {"topic": "T", "tags": "TagA", "properties": [("k", "v")]}[column]
    cols[column] = [good, good, bad]
    types = {"topic": pa.string(), "body": pa.binary(), "queue_id": pa.int32(), "tags": pa.string()}
    types["properties"] = pa.map_(pa.string(), pa.string())
    return pa.record_batch([pa.array(v, typ or types[k]) for k, v in cols.items()], names=list(cols))


@pytest.mark.parametrize(
    ("column", "bad", "error"),
    [
        ("topic", "bad topic", "InvalidTopicError"),
        ("topic", "", "InvalidTopicError"),
        ("topic", "t" * 200, "InvalidTopicError"),
        ("topic", "SCHEDULE_TOPIC_XXXX", "InvalidTopicError"),
        ("properties", [("big", "v" * 40000)], "PropertiesTooLargeError"),
        ("properties", [("", "v")], "InvalidPropertyError"),
        ("properties", [("k", "a\x01b")], "InvalidPropertyError"),
        ("properties", [("k\x02", "v")], "InvalidPropertyError"),
        ("tags", "a\x01b", "InvalidPropertyError"),
        ("tags", "", "InvalidPropertyError"),
    ],
)
def test_a_bad_row_writes_nothing_of_its_batch_and_is_named(tmp_path: Path, column: str, bad: Any, error: str) -> None:
    """Every row is checked as `put_batch` checks it (topic, tags, keys, properties, sizes) before any is put."""
    dst = new_store(tmp_path / "dst")
    with pytest.raises(rmq.RmqError) as e:
        write_batch(dst, good_then_bad(column, bad))
    assert type(e.value).__name__ == error and str(e.value).startswith("row 2: "), repr(e.value)
    assert scan(dst) == []


def test_each_queue_keeps_row_order_whatever_the_born_times(tmp_path: Path) -> None:
    dst = new_store(tmp_path / "dst")
    born = [2000, 1000, 1500, 1000, 3000]
    batch = pa.record_batch(
        [pa.array(["A"] * 5), pa.array([b"row%d" % i for i in range(5)]), pa.array([0] * 5, pa.int32()),
         pa.array(born, pa.int64())],
        names=["topic", "body", "queue_id", "born_timestamp"],
    )  # fmt: skip
    write_batch(dst, batch)
    got = sorted(scan(dst), key=lambda m: m.queue_offset)
    assert [(m.body, m.born_timestamp) for m in got] == [(b"row%d" % i, b) for i, b in enumerate(born)]


def test_batches_are_cut_to_what_put_batch_takes(tmp_path: Path) -> None:
    """Rows of one queue whose bodies add up to more than max_message_size go in several puts, not one that fails."""
    dst = tmp_path / "dst"
    config = rmq.StoreConfig(
        mapped_file_size_commit_log=16 << 20, mapped_file_size_consume_queue=3200, max_hash_slot_num=64,
        max_index_num=128,
    )  # fmt: skip
    rmq.MessageStore(dst, config, start_services=False).close()
    body = b"x" * (1 << 20)
    queue = pa.array([0] * 9, pa.int32())
    write_batch(dst, pa.record_batch([pa.array(["A"] * 9), pa.array([body] * 9), queue], ["topic", "body", "queue_id"]))
    assert [len(m.body) for m in scan(dst)] == [1 << 20] * 9


def test_a_null_key_in_a_keys_list_is_refused_naming_the_row(tmp_path: Path) -> None:
    dst = new_store(tmp_path / "dst")
    keys = pa.array([["order-0"], ["order-1", None]], pa.list_(pa.string()))
    batch = pa.record_batch([pa.array(["A", "A"]), pa.array([b"0", b"1"]), keys], names=["topic", "body", "keys"])
    with pytest.raises(rmq.InvalidMessageError, match="^row 1: keys holds a null"):
        write_batch(dst, batch)
    assert scan(dst) == []
    # A null or empty list is a row without keys.
    keys = pa.array([None, [], ["k"]], pa.list_(pa.string()))
    write_batch(
        dst, pa.record_batch([pa.array(["A"] * 3), pa.array([b"a", b"b", b"c"]), keys], ["topic", "body", "keys"])
    )
    assert [m.keys for m in sorted(scan(dst), key=lambda m: m.commitlog_offset)] == [[], [], ["k"]]


@pytest.mark.parametrize(("option", "nearest"), [("queuez", "queues"), ("lockTimout", "lockTimeout")])
def test_an_unknown_writer_option_is_refused_with_the_nearest(tmp_path: Path, option: str, nearest: str) -> None:
    from rmq import spark_writer

    with pytest.raises(rmq.InvalidConfigError, match=f"no option '{option.lower()}'; did you mean {nearest}"):
        spark_writer.WriteOptions.parse({"path": str(tmp_path), option: "1"})
    assert spark_writer.WriteOptions.parse({"path": str(tmp_path), "MAPPEDFILESIZECOMMITLOG": "65536"}).settings
