"""Spark side by side, over RMQ_BENCH_SPARK_MESSAGES (default 5 million) 100-byte messages in 1 GiB segments:

(a) the `rocketmq` data source to `count()` and to Parquet; (b) the Arrow UDF `rmq_decode` over a binary column of
whole records; (c) a pure-Python UDF doing the same decoding; (d) the engine's floor: a Python data source of the
same schema that yields ready-made Arrow batches without decoding, with the same partitions.

Goals (issue 6): (a) and (b) at least 30 times (c); (a) at least half of (d). Every figure is rows per second in
`extra_info` (`rows_per_s`); `make bench` prints them. Runs with local[2] unless RMQ_BENCH_SPARK_MASTER is set.
The store and the Parquet file of records are built once under .benchmarks/ and reused.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import shutil
import struct
import sys
import time
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from pyspark import cloudpickle  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition  # noqa: E402
from pyspark.sql.types import StructField, StructType  # noqa: E402

import rmq  # noqa: E402
import rmq.spark as rs  # noqa: E402
from rmq import arrow  # noqa: E402

MESSAGES = int(os.environ.get("RMQ_BENCH_SPARK_MESSAGES", 5_000_000))
ROOT = Path(__file__).resolve().parent.parent / ".benchmarks" / f"spark-{MESSAGES}"
STORE = ROOT / "store"
RECORDS = ROOT / "records.parquet"

# Workers cannot import this module: ship its functions and classes by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def build_store() -> None:
    """MESSAGES messages, 100-byte bodies, tags, two keys, over 4 topics x 4 queues; 1 GiB segments."""
    if (ROOT / "done").exists():
        return
    shutil.rmtree(ROOT, ignore_errors=True)
    with rmq.MessageStore(STORE, start_reput=False) as store:
        batch = 1000
        for b in range(MESSAGES // batch):
            msgs = [
                rmq.Message(
                    (b"%012d" % (b * batch + i)) * 8 + b"0123",
                    tags=("TagA", "TagB", "标签")[i % 3],
                    keys=[f"order-{b}-{i}", f"customer-{i % 97}"],
                )
                for i in range(batch)
            ]
            store.put_batch(f"Topic{b % 4}", msgs, queue_id=b % 4)
    # The records as a binary column: each segment's records are contiguous, so one zero-copy array each.
    writer = None
    for s in rs.plan_splits(STORE, 1 << 40):
        pos = [0]
        sizes = []
        for batch_ in arrow.read_split(s.path, s.base, s.start, s.end, schema=arrow.arrow_schema(["store_size"])):
            sizes.extend(batch_.column(0).to_pylist())
        for n in sizes:
            pos.append(pos[-1] + n)
        data = pa.py_buffer(Path(s.path).read_bytes()[: pos[-1]])
        offsets = pa.array(pos, pa.int32())
        col = pa.Array.from_buffers(pa.binary(), len(sizes), [None, offsets.buffers()[1], data])
        table = pa.table({"record": col})
        if writer is None:
            writer = pq.ParquetWriter(RECORDS, table.schema, compression="none")
        writer.write_table(table, row_group_size=65536)
    assert writer is not None
    writer.close()
    (ROOT / "done").touch()


# -- (c) the pure-Python decoder ------------------------------------------------------------------------------


def _host(b: bytes, at: int, v6: bool) -> tuple[str, int]:
    n = 16 if v6 else 4
    ip = ipaddress.ip_address(b[at : at + n])
    port = struct.unpack_from(">i", b, at + n)[0]
    return (f"[{ip}]:{port}" if v6 else f"{ip}:{port}"), at + n + 4


def py_decode(b: bytes) -> tuple[Any, ...]:
    """The record's fields in the source's column order, in pure Python (struct, zlib)."""
    total, magic, body_crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts = struct.unpack_from(
        ">iiiiiqqiq", b, 0
    )
    born_host, at = _host(b, 48, bool(sys_flag & 0x10))
    (store_ts,) = struct.unpack_from(">q", b, at)
    store_host, at = _host(b, at + 8, bool(sys_flag & 0x20))
    reconsume, prepared, body_len = struct.unpack_from(">iqi", b, at)
    at += 16
    body = b[at : at + body_len]
    at += body_len
    if magic == -0x255CDF55:  # v2: 0xDAA320AB
        (tlen,) = struct.unpack_from(">h", b, at)
        at += 2
    else:
        tlen = b[at]
        at += 1
    topic = b[at : at + tlen].decode("utf-8", "replace")
    at += tlen
    (plen,) = struct.unpack_from(">h", b, at)
    props: dict[str, str] = {}
    for part in b[at + 2 : at + 2 + plen].split(b"\x02"):
        k, sep, v = part.partition(b"\x01")
        if sep and k and v:
            props[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")
    tx = ("NOT_TYPE", "PREPARED", "COMMIT", "ROLLBACK")[(sys_flag & 0xC) >> 2]
    keys = props.get("KEYS", "")
    host_bytes = ipaddress.ip_address(store_host.rsplit(":", 1)[0].strip("[]")).packed
    msg_id = (host_bytes + struct.pack(">iq", int(store_host.rsplit(":", 1)[1]), phys)).hex().upper()
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (
        topic,
        queue_id,
        queue_offset,
        phys,
        total,
        flag,
        sys_flag,
        tx,
        epoch + dt.timedelta(milliseconds=born_ts),
        epoch + dt.timedelta(milliseconds=store_ts),
        born_host,
        store_host,
        reconsume,
        prepared,
        body,
        props,
        props.get("TAGS"),
        keys.split(" ") if keys else [],
        props.get("UNIQ_KEY"),
        msg_id,
        zlib.crc32(body) & 0x7FFFFFFF == body_crc,  # UtilAll.crc32 keeps 31 bits
    )


# -- (d) the floor: ready-made batches, no decoding --------------------------------------------------------------


class FloorSplit(InputPartition):
    def __init__(self, rows: int) -> None:
        super().__init__(rows)
        self.rows = rows


class FloorReader(DataSourceReader):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.splits = [int(x) for x in options["rows"].split(",")]
        self.ipc = bytes.fromhex(options["batch"])

    def partitions(self) -> Sequence[InputPartition]:
        return [FloorSplit(n) for n in self.splits]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        batch = pa.ipc.open_stream(self.ipc).read_next_batch()
        assert isinstance(partition, FloorSplit)
        left = partition.rows
        while left > 0:
            take = min(left, batch.num_rows)
            yield batch if take == batch.num_rows else batch.slice(0, take)
            left -= take


class FloorDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "rmq_floor"

    def schema(self) -> StructType:
        return rs.SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return FloorReader(dict(self.options), schema)


# -- the runs -----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    build_store()
    session = rs.session(
        os.environ.get("RMQ_BENCH_SPARK_MASTER", "local[2]"),
        conf={"spark.ui.showConsoleProgress": "false", "spark.driver.memory": "4g"},
    )
    session.dataSource.register(FloorDataSource)
    yield session
    session.stop()


def run(benchmark: Any, fn: Any, rounds: int = 2) -> None:
    times: list[float] = []

    def timed() -> Any:
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
        return out

    result = benchmark.pedantic(timed, rounds=rounds, iterations=1, warmup_rounds=0)
    benchmark.extra_info["rows"] = MESSAGES
    benchmark.extra_info["rows_per_s"] = round(MESSAGES / min(times))
    print(f"\n{benchmark.name}: {MESSAGES / min(times):,.0f} rows/s (best of {rounds}: {min(times):.2f}s)")
    return result


def test_a_source_count(benchmark: Any, spark: SparkSession) -> None:
    run(benchmark, lambda: assert_rows(spark.read.format("rocketmq").load(str(STORE)).count()))


def test_a_source_to_parquet(benchmark: Any, spark: SparkSession, tmp_path: Path) -> None:
    df = spark.read.format("rocketmq").load(str(STORE))
    run(benchmark, lambda: df.write.mode("overwrite").parquet(str(tmp_path / "out")), rounds=1)


def _decoded(f: Any) -> Any:
    records = rs.SparkSession.getActiveSession().read.parquet(str(RECORDS))  # type: ignore[union-attr]
    return records.select(f(F.col("record")).alias("m")).agg(F.count("m.topic"), F.sum("m.store_size")).collect()


def test_b_arrow_udf(benchmark: Any, spark: SparkSession) -> None:
    run(benchmark, lambda: assert_rows(_decoded(rs.udfs()["rmq_decode"])[0][0]))


def test_c_python_udf(benchmark: Any, spark: SparkSession) -> None:
    decoded = StructType([StructField(f.name, f.dataType, True) for f in rs.SCHEMA])
    run(benchmark, lambda: assert_rows(_decoded(F.udf(lambda b: py_decode(b), decoded))[0][0]), rounds=1)


def py_msg_id(b: bytes) -> str:
    """offsetMsgId in pure Python: store host bytes, port, commitlog offset, as hex."""
    (sys_flag,) = struct.unpack_from(">i", b, 36)
    at = 48 + (20 if sys_flag & 0x10 else 8) + 8
    n = 16 if sys_flag & 0x20 else 4
    (phys,) = struct.unpack_from(">q", b, 28)
    return (b[at : at + n + 4] + struct.pack(">q", phys)).hex().upper()


def _msg_ids(f: Any) -> Any:
    records = rs.SparkSession.getActiveSession().read.parquet(str(RECORDS))  # type: ignore[union-attr]
    return records.select(f(F.col("record")).alias("id")).agg(F.count("id"), F.max("id")).collect()


def test_b2_arrow_udf_msg_id(benchmark: Any, spark: SparkSession) -> None:
    """One string out instead of the 21-field struct: the UDF machinery with little to convert back."""
    run(benchmark, lambda: assert_rows(_msg_ids(rs.udfs()["rmq_msg_id"])[0][0]))


def test_c2_python_udf_msg_id(benchmark: Any, spark: SparkSession) -> None:
    run(benchmark, lambda: assert_rows(_msg_ids(F.udf(lambda b: py_msg_id(b), "string"))[0][0]), rounds=1)


def test_d_floor_count(benchmark: Any, spark: SparkSession) -> None:
    splits = rs.plan_splits(STORE)
    total_bytes = sum(s.end - s.start for s in splits)
    rows = [MESSAGES * (s.end - s.start) // total_bytes for s in splits]
    rows[-1] += MESSAGES - sum(rows)
    first = splits[0]
    batch = next(arrow.read_split(first.path, first.base, first.start, first.end, schema=arrow.arrow_schema()))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    df = (
        spark.read.format("rmq_floor")
        .option("rows", ",".join(map(str, rows)))
        .option("batch", sink.getvalue().to_pybytes().hex())
        .load()
    )
    run(benchmark, lambda: assert_rows(df.count()))


def test_python_decoder_agrees_with_rmq() -> None:
    """(c) does the same work as (b): the pure-Python decoder gives rmq's values."""
    build_store()
    table = pq.ParquetFile(RECORDS).read_row_group(0)
    raws = table.column("record").chunk(0).slice(0, 200)
    ours = arrow.decode_records(raws).to_pylist()
    for raw, mine in zip(raws.to_pylist(), ours, strict=True):
        mine["properties"] = dict(mine["properties"])
        assert py_decode(raw) == tuple(mine.values())
        assert py_msg_id(raw) == mine["msg_id"]


def assert_rows(n: int) -> int:
    assert n == MESSAGES, n
    return n
