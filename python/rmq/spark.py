"""Commitlogs as Spark DataFrames: the `rocketmq` data source, Arrow UDFs, and the pipeline job.

    spark = rmq.spark.session()                      # local[*], the spark-submit master, or session("spark://...")
    df = spark.read.format("rocketmq").load(store)   # a store directory or its commitlog directory

One row per message (see `SCHEMA`). Partitions are byte ranges of segment files (`splitSize`, default 64 MiB),
so one 1 GiB segment feeds several tasks; the driver walks each segment's record chain once and starts every
split at a record start of that chain (`rmq._native.plan_commitlog`), and each task yields Arrow batches decoded
in Rust. Damage raises CorruptionError naming file and offset, or with `mode` PERMISSIVE / DROPMALFORMED,
`ignoreCorruptFiles` or `badRecordsPath` is left out and recorded. Options `topics` and `storeTimestampFrom` /
`storeTimestampTo` filter in the reader; Spark's own filter pushdown is opt-in (`pushdown=true`, see
`RocketMQDataSource`). Selecting fewer columns through a user schema (`.schema("topic string, body binary")`)
decodes only those. Executors need rmq installed in the same Python environment (see the README: ship a
packed venv). Reads bounded by queue offsets or store times, and `spark.readStream`, go by consume-queue offsets
instead (`rmq.spark_queues`, `rmq.spark_stream`).

Requires the `spark` extra (`pip install rmq[spark]`): pyspark, pyarrow, pandas.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import difflib
import json
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType
from pyspark.sql.window import Window

from rmq import _native
from rmq._paths import refuse_overlap
from rmq.spark_queues import QUEUE_OPTIONS, RocketMQQueueReader, _int_option

_log = logging.getLogger("rmq.spark")

#: The DataFrame schema, one row per message (timestamps are the record's milliseconds, as Spark timestamps):
#: Spark's reading of the one Arrow schema Rust defines (`rmq._native.arrow_schema`, `rmq.arrow.SCHEMA`).
SCHEMA: StructType = from_arrow_schema(pa.schema(_native.arrow_schema()), prefer_timestamp_ntz=False)
SCHEMA_DDL = ", ".join(f"{f.name} {f.dataType.simpleString()}{'' if f.nullable else ' NOT NULL'}" for f in SCHEMA)

#: Default split size: bytes of a segment per task.
DEFAULT_SPLIT_SIZE = 64 << 20

#: Spark settings `session()` sets. Python filter pushdown is left as Spark has it (off): see `RocketMQDataSource`.
SPARK_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
}


def commitlog_dir(path: str | os.PathLike[str]) -> Path:
    """The commitlog directory of `path`: a store directory (holding `commitlog/`) or a commitlog directory."""
    p = Path(path)
    if (p / "commitlog").is_dir():
        return p / "commitlog"
    if p.is_dir():
        return p
    raise FileNotFoundError(f"{p}: not a store or commitlog directory")


@dataclass(frozen=True)
class Split(InputPartition):
    """The records in `[start, end)` of the segment `path` (first byte = commitlog offset `base`); `start` is a
    record start the planner proved by walking the segment's record chain from its first byte."""

    path: str
    base: int
    start: int
    end: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", (self.path, self.start))


@dataclass(frozen=True)
class Damage:
    """Bytes of a segment left out of the rows: `length` bytes from commitlog offset `offset` of file `path`."""

    path: str
    offset: int
    length: int
    reason: str


def plan(
    path: str | os.PathLike[str], split_size: int = DEFAULT_SPLIT_SIZE, *, skip_damage: bool = False
) -> tuple[list[Split], list[Damage]]:
    """The splits of a commitlog, and the damage left out with `skip_damage` (otherwise damage raises
    CorruptionError naming file and offset).

    Every segment's record chain is walked once from its first byte (header to header, as recovery does; the
    newest segment validated in full up to the end of the data), and each `split_size` range of a segment
    starts at the first record of the chain at or after it. Rows therefore never depend on the split size."""
    if split_size < 1:
        raise _native.InvalidConfigError(f"split size must be at least 1 byte, got {split_size}")
    splits: list[Split] = []
    damage: list[Damage] = []
    for seg, base, starts, ends, bad in _native.plan_commitlog(
        str(commitlog_dir(path)), split_size, skip_damage=skip_damage
    ):
        splits.extend(Split(seg, base, s, e) for s, e in zip(starts, ends, strict=True))
        damage.extend(Damage(seg, *d) for d in bad)
    return splits, damage


def plan_splits(path: str | os.PathLike[str], split_size: int = DEFAULT_SPLIT_SIZE) -> list[Split]:
    """The splits of a commitlog (`plan`); damage raises CorruptionError naming file and offset."""
    return plan(path, split_size)[0]


def record_damage(bad_records_path: str | None, damage: Sequence[Damage]) -> None:
    """Reports bytes left out of the rows: a warning on the `rmq.spark` logger and, with `bad_records_path`, one
    JSON file per damaged place, `<bad_records_path>/bad_records/<commitlog offset>.json` holding `path`,
    `offset`, `length` and `reason` (the same place for every split size, so a rerun overwrites it)."""
    for d in damage:
        _log.warning("skipped %d damaged bytes of %s at commitlog offset %d: %s", d.length, d.path, d.offset, d.reason)
    if bad_records_path is None or not damage:
        return
    out = Path(bad_records_path) / "bad_records"
    out.mkdir(parents=True, exist_ok=True)
    for d in damage:
        tmp = out / f".{d.offset:020d}.json.tmp"
        tmp.write_text(json.dumps(dataclasses.asdict(d)) + "\n")
        tmp.replace(out / f"{d.offset:020d}.json")


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _micros(value: dt.datetime) -> int:
    """Microseconds since the epoch of a filter's timestamp literal."""
    if value.tzinfo is not None:
        return (value - _EPOCH) // dt.timedelta(microseconds=1)
    # Spark hands over naive local times made by `datetime.fromtimestamp`, which sets `fold` in a repeated hour;
    # `timestamp()` honours it, so this is the exact inverse (mktime, which Spark's toInternal uses, is not).
    return int(value.replace(microsecond=0).timestamp()) * 1_000_000 + value.microsecond


#: Values of the `mode` option (Spark's names); anything but FAILFAST leaves damage out and records it.
MODES = ("FAILFAST", "PERMISSIVE", "DROPMALFORMED")


def _flag(options: dict[str, str], name: str, default: bool = False) -> bool:
    value = options.get(name.lower())
    if value is None:
        return default
    if value.lower() not in ("true", "false"):
        raise _native.InvalidConfigError(f"option {name} must be true or false, got {value!r}")
    return value.lower() == "true"


def _store_ms(options: dict[str, str], name: str) -> int | None:
    """A time option as milliseconds since the epoch: an integer (ms) or an ISO-8601 time (UTC unless it says)."""
    value = options.get(name.lower())
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        pass
    try:
        t = dt.datetime.fromisoformat(value)
    except ValueError:
        raise _native.InvalidConfigError(
            f"option {name} must be milliseconds since the epoch or an ISO-8601 time, got {value!r}"
        ) from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return (t - _EPOCH) // dt.timedelta(milliseconds=1)


def output_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema of the batches a reader yields for Spark's `schema` (a subset of `SCHEMA`'s columns):
    equal to Spark's, nullability included (a user schema may differ from ours)."""
    from rmq import arrow

    known = {f.name: f for f in SCHEMA}
    for f in schema:
        if f.name not in known or f.dataType != known[f.name].dataType:
            raise _native.InvalidConfigError(
                f"column {f.name} {f.dataType.simpleString()} is not one of the rocketmq source's: {SCHEMA_DDL}"
            )
    columns = [f.name for f in schema]
    return pa.schema([f.with_nullable(s.nullable) for f, s in zip(arrow.arrow_schema(columns), schema, strict=True)])


class RocketMQReader(DataSourceReader):
    """Reads splits of a commitlog into Arrow batches (see the module docs and `RocketMQDataSource`)."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        options = {k.lower(): v for k, v in options.items()}  # Spark's options are case-insensitive
        if "path" not in options:
            raise _native.InvalidConfigError(
                'the rocketmq source needs a path: spark.read.format("rocketmq").load(STORE_DIR)'
            )
        self.path = options["path"]
        try:
            self.split_size = int(options.get("splitsize", DEFAULT_SPLIT_SIZE))
            self.max_rows = int(options.get("maxrowsperbatch", 8192))
        except ValueError as e:
            raise _native.InvalidConfigError(f"splitSize and maxRowsPerBatch must be integers: {e}") from None
        if self.split_size < 1 or self.max_rows < 1:
            raise _native.InvalidConfigError("splitSize and maxRowsPerBatch must be at least 1")
        mode = options.get("mode", "FAILFAST").upper()
        if mode not in MODES:
            raise _native.InvalidConfigError(f"option mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.bad_records_path: str | None = options.get("badrecordspath")
        if self.bad_records_path is not None:  # a read never writes into the store it reads
            refuse_overlap(self.path, [Path(self.bad_records_path) / "bad_records"], "badRecordsPath")
        self.skip_damage = mode != "FAILFAST" or _flag(options, "ignoreCorruptFiles") or bool(self.bad_records_path)
        self.arrow_schema = output_schema(schema)
        self.columns = list(self.arrow_schema.names)
        # Filters given as options belong to this DataFrame, so every query on it sees them (unlike pushdown).
        topics = options.get("topics")
        self.topics: list[str] | None = sorted({t.strip() for t in topics.split(",")}) if topics is not None else None
        self.min_partitions = _int_option(options, "minPartitions", 1)
        self.min_ms = _store_ms(options, "storeTimestampFrom")
        until = _store_ms(options, "storeTimestampTo")
        if self.min_ms is not None and until is not None and self.min_ms > until:
            # An empty range [t, t) may be meant (a window with nothing in it); one that ends before it starts is
            # two options swapped, which would read nothing without a word.
            raise _native.InvalidConfigError(
                f"option storeTimestampFrom ({self.min_ms} ms) is after storeTimestampTo ({until} ms): swapped?"
            )
        self.max_ms = None if until is None else until - 1  # exclusive bound

    def partitions(self) -> Sequence[InputPartition]:
        splits, damage = plan(self.path, self.split_size, skip_damage=self.skip_damage)
        if self.min_partitions is not None and 0 < len(splits) < self.min_partitions:
            # Smaller splits; a split still holds whole records, so records bigger than that keep the count lower.
            size = max(1, sum(s.end - s.start for s in splits) // self.min_partitions)
            splits, damage = plan(self.path, min(size, self.split_size), skip_damage=self.skip_damage)
        record_damage(self.bad_records_path, damage)
        return splits

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from rmq import arrow

        if type(partition) is InputPartition and partition.value is None:
            return  # Spark's stand-in partition when `partitions()` planned none: a store without records
        assert isinstance(partition, Split)
        if self.min_ms is not None and self.max_ms is not None and self.min_ms > self.max_ms:
            return
        skipped: list[tuple[int, int, str]] | None = [] if self.skip_damage else None
        yield from arrow.read_split(
            partition.path,
            partition.base,
            partition.start,
            partition.end,
            schema=self.arrow_schema,
            topics=self.topics,
            min_store_ms=self.min_ms,
            max_store_ms=self.max_ms,
            max_rows=self.max_rows,
            skipped=skipped,
        )
        if skipped:
            record_damage(self.bad_records_path, [Damage(partition.path, *s) for s in skipped])


class RocketMQPushdownReader(RocketMQReader):
    """The reader with Spark's filter pushdown (option `pushdown=true` and `spark.sql.python.filterPushdown.enabled`).

    Unsafe on PySpark 4.1 to 4.3: Spark keeps the pushed reader of a query and reuses it for later queries on the
    same DataFrame that push nothing (`RocketMQDataSource` explains); use it only for DataFrames queried once."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:  # noqa: N802 (Spark's name)
        for f in filters:
            if not self._push(f):
                yield f

    def _push(self, f: Filter) -> bool:
        attr = getattr(f, "attribute", None)
        if attr == ("topic",):
            if isinstance(f, EqualTo) and isinstance(f.value, str):
                wanted = {f.value}
            elif isinstance(f, In) and all(isinstance(v, str) for v in f.value):
                wanted = set(f.value)
            else:
                return False
            self.topics = sorted(wanted if self.topics is None else wanted & set(self.topics))
            return True
        if attr == ("store_timestamp",) and isinstance(f.value, dt.datetime):  # type: ignore[attr-defined]
            us = _micros(f.value)  # type: ignore[attr-defined]
            # A record's value is ms * 1000; turn each bound into an inclusive bound on ms.
            lo: int | None = None
            hi: int | None = None
            if isinstance(f, GreaterThan):
                lo = us // 1000 + 1
            elif isinstance(f, GreaterThanOrEqual):
                lo = math.ceil(us / 1000) if us % 1000 else us // 1000
            elif isinstance(f, LessThan):
                hi = (us + 999) // 1000 - 1
            elif isinstance(f, LessThanOrEqual):
                hi = us // 1000
            elif isinstance(f, EqualTo):
                lo, hi = (us // 1000, us // 1000) if us % 1000 == 0 else (1, 0)
            else:
                return False
            if lo is not None:
                self.min_ms = lo if self.min_ms is None else max(self.min_ms, lo)
            if hi is not None:
                self.max_ms = hi if self.max_ms is None else min(self.max_ms, hi)
            return True
        return False


#: Every option the source reads (batch and streaming), as spelt in the docs; Spark passes them lower-cased.
READ_OPTIONS = (
    "path",
    "topics",
    "topicPattern",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "endingTimestamp",
    "startingOffsetsByTimestamp",
    "endingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "storeTimestampFrom",
    "storeTimestampTo",
    "maxRecordsPerTrigger",
    "maxOffsetsPerTrigger",
    "maxBytesPerTrigger",
    "failOnDataLoss",
    "minPartitions",
    "includeProperties",
    "maxRowsPerBatch",
    "splitSize",
    "mode",
    "badRecordsPath",
    "ignoreCorruptFiles",
    "pushdown",
)


def check_read_options(options: dict[str, str]) -> None:
    """Refuses an option the source does not read (a typo such as `topic` for `topics` would otherwise read
    everything) and a `topics` that names no topic (it read nothing): `InvalidConfigError`."""
    known = {o.lower(): o for o in READ_OPTIONS}
    for name in options:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {known[close[0]]}?" if close else ""
            raise _native.InvalidConfigError(
                f"the rocketmq source has no option {name!r}{hint} (its options: {', '.join(READ_OPTIONS)})"
            )
    topics = options.get("topics")
    if topics is not None and not any(t.strip() for t in topics.split(",")):
        raise _native.InvalidConfigError("option topics names no topic")


#: The options only some kinds of read take (every other option of `READ_OPTIONS` is read by all): a batch read
#: by commitlog splits, a batch read by queue offsets, and a streaming read.
READ_KINDS: dict[str, tuple[str, ...]] = {
    "splits": (
        "splitSize", "mode", "badRecordsPath", "ignoreCorruptFiles", "pushdown", "storeTimestampFrom",
        "storeTimestampTo",
    ),
    "queues": (
        "topicPattern", "startingOffsets", "endingOffsets", "startingTimestamp", "endingTimestamp",
        "startingOffsetsByTimestamp", "endingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy",
        "failOnDataLoss",
    ),
    "stream": (
        "topicPattern", "startingOffsets", "startingTimestamp", "startingOffsetsByTimestamp",
        "startingOffsetsByTimestampStrategy", "failOnDataLoss", "maxRecordsPerTrigger", "maxOffsetsPerTrigger",
        "maxBytesPerTrigger",
    ),
}  # fmt: skip
_KIND_NAMES = {
    "splits": "a batch read by commitlog splits (one with no start, end or timestamp option and no topicPattern)",
    "queues": "a batch read by queue offsets",
    "stream": "a streaming read",
}


def check_kind_options(options: dict[str, str], kind: str) -> None:
    """Refuses an option that `kind` of read ("splits", "queues" or "stream", see `READ_KINDS`) does not read,
    saying which reads take it: `InvalidConfigError`. (An option ignored would read other rows than asked for,
    e.g. `storeTimestampFrom` beside `startingOffsets`.)"""
    spelt = {o.lower(): o for names in READ_KINDS.values() for o in names}
    own = {o.lower() for o in READ_KINDS[kind]}
    for name in options:
        if name not in spelt or name in own:
            continue
        option = spelt[name]
        takers = [k for k, names in READ_KINDS.items() if option in names]
        if name in ("storetimestampfrom", "storetimestampto") and kind != "splits":
            hint = "; by queue offsets, startingTimestamp and endingTimestamp bound the read by store time"
        elif name.startswith("ending"):
            hint = "; it is for batch reads only"
        else:
            hint = ""
        raise _native.InvalidConfigError(
            f"option {option} is not read by {_KIND_NAMES[kind]}: only by "
            f"{' and '.join(_KIND_NAMES[k].split(' (')[0] for k in takers)}{hint}"
        )


class RefusedStreamReader(DataSourceStreamReader):
    """A streaming read whose options were refused: every call raises the refusal, `stop` does nothing."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 (Spark's names)
        raise self.error

    def latestOffset(self, *args: Any) -> dict[str, Any]:  # noqa: N802
        raise self.error

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        raise self.error

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        raise self.error

    def commit(self, end: dict[str, Any]) -> None:
        raise self.error

    def getDefaultReadLimit(self) -> Any:  # noqa: N802
        raise self.error

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        raise self.error

    def stop(self) -> None:
        pass


class RocketMQDataSource(DataSource):
    """`spark.read.format("rocketmq")`. Options (case-insensitive):

    - `path` (or `load(path)`): a store directory or its commitlog directory.
    - `splitSize` (bytes, default 64 MiB), `maxRowsPerBatch` (default 8192).
    - `topics` (comma-separated), `storeTimestampFrom` (inclusive), `storeTimestampTo` (exclusive), as ms since
      the epoch or ISO-8601 (UTC unless given): filters applied by the reader, part of the DataFrame itself.
    - `mode`: FAILFAST (default: damage raises CorruptionError naming file and offset), PERMISSIVE or
      DROPMALFORMED (damage is left out and recorded; a row cannot hold a partial record, so both drop it);
      `ignoreCorruptFiles=true` does the same; `badRecordsPath=DIR` too, writing each damaged place to
      `DIR/bad_records/<offset>.json`.
    - `pushdown` ("false" by default): "true" lets Spark push `topic` (=, IN) and `store_timestamp` (=, <, <=, >,
      >=) filters into the reader when `spark.sql.python.filterPushdown.enabled` is on. Off by default because
      PySpark 4.1 to 4.3 store the pushed reader (its pickled read function and partitions) on the relation's
      `PythonDataSourceV2` (`setReadInfo`) and hand it to every later scan of that DataFrame that pushes nothing:
      `df.where("topic = 'A'").count()` followed by `df.count()` counts topic A only. With pushdown off the
      reader keeps no per-query state, so every query returns what is on disk.
    - `minPartitions`: at least that many splits (a smaller split size; a split holds whole records).
    - `includeProperties` ("true"): "false" leaves the `properties` column out.
    - `startingOffsets`, `endingOffsets`, `startingTimestamp`, `endingTimestamp` (and their per-queue JSON forms),
      `topicPattern`, `failOnDataLoss`: the read goes by consume-queue offsets instead (`rmq.spark_queues`).
    - `spark.readStream.format("rocketmq")`: Structured Streaming by queue offsets (`rmq.spark_stream`).

    An option the kind of read does not take is refused (`check_kind_options`), e.g. `storeTimestampFrom` with
    `startingOffsets` (use `startingTimestamp`), or `maxRecordsPerTrigger` in a batch read.
    """

    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    def schema(self) -> StructType:
        if not _flag({k.lower(): v for k, v in self.options.items()}, "includeProperties", True):
            return StructType([f for f in SCHEMA if f.name != "properties"])
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        options = {k.lower(): v for k, v in self.options.items()}
        check_read_options(options)
        if any(k in options for k in QUEUE_OPTIONS):
            check_kind_options(options, "queues")
            return RocketMQQueueReader(options, schema)
        check_kind_options(options, "splits")
        if _flag(options, "pushdown"):
            return RocketMQPushdownReader(options, schema)
        return RocketMQReader(options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 (Spark's name)
        try:
            try:
                from rmq.spark_stream import RocketMQStreamReader
            except ImportError as e:  # PySpark 4.1: Python sources get no read limits
                raise _native.InvalidConfigError(
                    f"the rocketmq streaming source needs PySpark 4.2 or later (read limits for Python sources): {e}"
                ) from None
            options = {k.lower(): v for k, v in self.options.items()}
            check_read_options(options)
            check_kind_options(options, "stream")
            return RocketMQStreamReader(options, schema)
        except _native.RmqError as e:
            # Raised here, PySpark's streaming runner loses it: its `finally: reader.stop()` finds no reader, and the
            # query fails with an UnboundLocalError. The reader raises it at Spark's first call instead.
            return RefusedStreamReader(e)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """`df.write.format("rocketmq").mode("append").save(store)`: rows become messages (`rmq.spark_writer`)."""
        from rmq import spark_writer

        spark_writer.refuse_overwrite(overwrite)
        return spark_writer.RocketMQWriter(dict(self.options), schema, SCHEMA.names)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802 (Spark's)
        """`df.writeStream.format("rocketmq")...start(store)`: each micro-batch written as `writer` does."""
        from rmq import spark_writer

        spark_writer.refuse_overwrite(overwrite)
        return spark_writer.RocketMQStreamWriter(dict(self.options), schema, SCHEMA.names)


# -- UDFs ----------------------------------------------------------------------------------------------------


def udfs() -> dict[str, Any]:
    """The Arrow UDFs, by SQL name: `rmq_decode(binary) -> struct` (every column of the source; null for bytes
    that are not one record), `rmq_tags_hash(string) -> bigint` (Java hashCode: the consume queue's tagsCode),
    `rmq_msg_id(binary) -> string` (offsetMsgId), `rmq_properties(binary) -> map<string,string>`."""
    from pyspark.sql.pandas.functions import arrow_udf

    def scalar(return_type: Any) -> Callable[[Callable[[pa.Array], pa.Array]], Any]:
        # Spark infers a scalar Arrow UDF from the pa.Array -> pa.Array hints (resolved in this module).
        factory: Any = arrow_udf
        udf: Callable[[Callable[[pa.Array], pa.Array]], Any] = factory(return_type)
        return udf

    from pyspark.sql.types import LongType, MapType, StringType

    decoded = StructType([f.__class__(f.name, f.dataType, True) for f in SCHEMA])

    @scalar(decoded)
    def rmq_decode(records: pa.Array) -> pa.Array:
        from rmq import arrow

        return arrow.decode_records(records)

    @scalar(LongType())
    def rmq_tags_hash(tags: pa.Array) -> pa.Array:
        from rmq import arrow

        return arrow.java_hash(tags)

    @scalar(StringType())
    def rmq_msg_id(records: pa.Array) -> pa.Array:
        from rmq import arrow

        return arrow.decode_column(records, "msg_id")

    @scalar(MapType(StringType(), StringType()))
    def rmq_properties(records: pa.Array) -> pa.Array:
        from rmq import arrow

        return arrow.decode_column(records, "properties")

    return {
        "rmq_decode": rmq_decode,
        "rmq_tags_hash": rmq_tags_hash,
        "rmq_msg_id": rmq_msg_id,
        "rmq_properties": rmq_properties,
    }


# -- sessions and the pipeline ------------------------------------------------------------------------------


def register(spark: SparkSession) -> SparkSession:
    """Registers the `rocketmq` source and the UDFs (for SQL too) with `spark`. Changes no setting."""
    spark.dataSource.register(RocketMQDataSource)
    for name, f in udfs().items():
        spark.udf.register(name, f)
    return spark


def _launcher_master() -> bool:
    """Whether the master is already decided outside this process: spark-submit (or pyspark's shell) started the
    JVM this driver talks to, `--master` is in PYSPARK_SUBMIT_ARGS, or a SparkContext is running."""
    from pyspark import SparkContext

    if "PYSPARK_GATEWAY_PORT" in os.environ or SparkContext._active_spark_context is not None:
        return True
    return "--master" in os.environ.get("PYSPARK_SUBMIT_ARGS", "").split()


def session(master: str | None = None, app_name: str = "rmq", conf: dict[str, str] | None = None) -> SparkSession:
    """A SparkSession with rmq registered. The master is `master` when given; otherwise the one spark-submit
    (`--master`, `spark.master`) or `$SPARK_MASTER` names, never overridden; `local[*]` when nothing names one.

    Executors run the driver's Python (PYSPARK_PYTHON = this interpreter) unless PYSPARK_PYTHON is set: on a
    cluster whose machines lack this environment, ship it (README: "Spark on a cluster")."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    python = os.environ["PYSPARK_PYTHON"]
    builder = SparkSession.builder.appName(app_name)
    if master is None and not _launcher_master():
        master = os.environ.get("SPARK_MASTER", "local[*]")
    if master is not None:
        builder = builder.master(master)
    settings = {**SPARK_CONF, "spark.ui.enabled": "false", "spark.pyspark.python": python, **(conf or {})}
    for k, v in settings.items():
        builder = builder.config(k, v)
    return register(builder.getOrCreate())


def read(spark: SparkSession, store: str | os.PathLike[str], **options: Any) -> DataFrame:
    """`spark.read.format("rocketmq").options(**options).load(store)`."""
    return spark.read.format("rocketmq").options(**{k: str(v) for k, v in options.items()}).load(str(store))


#: What `run_pipeline` writes under its output directory, each replaced (Spark's overwrite deletes it first).
PIPELINE_OUTPUTS = ("messages", "summary_topics", "summary_queues", "summary_top_keys")


def refuse_pipeline_overlap(store: str | os.PathLike[str], out: str | os.PathLike[str]) -> None:
    """`InvalidArgumentError` if an output of `run_pipeline` into `out` would lie inside `store` or hold it."""
    refuse_overlap(store, [Path(out) / name for name in PIPELINE_OUTPUTS], "the Spark job's output")


def run_pipeline(
    spark: SparkSession, store: str | os.PathLike[str], out: str | os.PathLike[str], *, top_keys: int = 5
) -> dict[str, Any]:
    """Store → Parquet partitioned by topic and day (`out/messages`), plus summaries per topic and per queue
    (messages, bytes, first and last store time) and each topic's most frequent keys (`out/summary_*`).
    Returns the summaries as lists of dicts. Those outputs may not lie inside the store, nor hold it (Spark's
    overwrite deletes them first): `InvalidArgumentError`, nothing written."""
    out = Path(out)
    refuse_pipeline_overlap(store, out)
    df = read(spark, store)
    (
        df.withColumn("day", F.to_date("store_timestamp"))
        .write.mode("overwrite")
        .partitionBy("topic", "day")
        .parquet(str(out / PIPELINE_OUTPUTS[0]))
    )
    messages = spark.read.parquet(str(out / PIPELINE_OUTPUTS[0]))
    aggs = [
        F.count(F.lit(1)).alias("messages"),
        F.sum("store_size").alias("bytes"),
        F.min("store_timestamp").alias("first_store_time"),
        F.max("store_timestamp").alias("last_store_time"),
    ]
    by_topic = messages.groupBy("topic").agg(*aggs).orderBy("topic")
    by_queue = messages.groupBy("topic", "queue_id").agg(*aggs).orderBy("topic", "queue_id")
    keys = messages.select("topic", F.explode("keys").alias("key")).groupBy("topic", "key").count()
    rank = F.row_number().over(Window.partitionBy("topic").orderBy(F.desc("count"), "key"))
    top = keys.withColumn("rank", rank).where(F.col("rank") <= top_keys).orderBy("topic", "rank")
    result: dict[str, Any] = {}
    for name, frame in zip(PIPELINE_OUTPUTS[1:], (by_topic, by_queue, top), strict=True):
        frame.coalesce(1).write.mode("overwrite").json(str(out / name))
        result[name] = [r.asDict() for r in frame.collect()]
    return result


def run_spark(store: Path, out: Path, master: str | None, *, quiet: bool = False) -> dict[str, Any]:
    """The pipeline job (`run_pipeline`) in a session of its own, with the executors' ids added to its result.
    Prints the summaries unless `quiet`."""
    say = (lambda _text: None) if quiet else print
    refuse_pipeline_overlap(store, out)  # before a session starts
    started = time.perf_counter()
    spark = session(master)
    say(f"Spark job over {store} (master {spark.sparkContext.master}) ...")  # spark-submit's when it gave one
    try:
        result = run_pipeline(spark, store, out)
        result["executors"] = executor_ids(spark)
    finally:
        spark.stop()
    if not quiet:
        print_summary(result, out)
    say(f"Spark job done in {time.perf_counter() - started:.1f}s")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m rmq.spark STORE OUT [--master URL]` (also `rmq spark`)."""
    import argparse

    ap = argparse.ArgumentParser(prog="rmq spark", description=run_pipeline.__doc__)
    ap.add_argument("store")
    ap.add_argument("out")
    ap.add_argument("--master", default=None, help="Spark master URL (default local[*] or $SPARK_MASTER)")
    args = ap.parse_args(argv)
    run_spark(Path(args.store), Path(args.out), args.master)
    return 0


def executor_ids(spark: SparkSession) -> list[str]:
    """The ids of the session's executors (empty in local mode, where the driver runs the tasks)."""
    ids = spark.sparkContext._jsc.sc().getExecutorIds()
    return sorted(str(ids.apply(i)) for i in range(ids.size()))


def print_summary(result: dict[str, Any], out: str | os.PathLike[str]) -> None:
    """The summaries as text: per topic its messages, bytes and time range, its queues, and its top keys."""
    print(f"Parquet by topic and day: {Path(out) / 'messages'}; summaries: {Path(out) / 'summary_*'}")
    for t in result["summary_topics"]:
        name = t["topic"] if len(t["topic"]) <= 40 else t["topic"][:37] + "..."
        print(
            f"  {name}: {t['messages']} messages, {t['bytes']} bytes, {t['first_store_time']} .. {t['last_store_time']}"
        )
        queues = [q for q in result["summary_queues"] if q["topic"] == t["topic"]]
        print("    queues: " + ", ".join(f"q{q['queue_id']} {q['messages']} ({q['bytes']} B)" for q in queues))
        keys = [k for k in result["summary_top_keys"] if k["topic"] == t["topic"]]
        print("    top keys: " + (", ".join(f"{k['key']} ({k['count']})" for k in keys) or "-"))


if __name__ == "__main__":
    raise SystemExit(main())
