"""Writing DataFrames into a store: the write side of the `rocketmq` data source (`rmq.spark`).

    df.write.format("rocketmq").mode("append").save(store)

Columns (any other column of the `rocketmq` source's schema is ignored, so a DataFrame read from a store can be
written back as it is; a column neither writable nor the source's is refused, to catch typos):

- `topic` string and `body` binary (or string, stored as UTF-8): required, never null.
- `queue_id` int: the queue; null or absent chooses one (below).
- `tags` string; `keys` string (space-separated, as RocketMQ's KEYS property) or array<string> (a null or empty
  array is no keys; a null element is refused).
- `properties` map<string,string>: user properties, and RocketMQ's own (UNIQ_KEY, WAIT, DELAY, ...), stored as
  given; TAGS / KEYS there must agree with the `tags` / `keys` columns when both are given.
- `born_timestamp` timestamp or long (ms since the epoch): null or absent is the time of the write.
- `flag` int: the message's flag (RocketMQ's `Message.flag`), 0 when absent.

Queue choice without `queue_id`: RocketMQ's `SelectMessageQueueByHash` with the message's KEYS text (its keys
joined by spaces) as the argument: `abs(hashCode % n)` of Java's `String.hashCode`, `n` the topic's write queue
count in `config/topics.json`, or option `queues` (default 4, the count a broker's auto-create gives a topic
sent by a default producer) for a topic not configured there. A message without keys goes round robin over the
`n` queues, in row order, from queue 0 in each task.

Store settings: the store is opened with the sizes read off its files (`rmq.StoreConfig.from_files`), so a new
store gets RocketMQ's defaults (1 GiB segments) unless options set them under RocketMQ's names, e.g.
`.option("mappedFileSizeCommitLog", 64 << 20)`; any setting of `rmq.StoreConfig` can be given so. Options
`queues` and `lockTimeout` are below.

Tasks and the lock: each write task opens the store (read-write, so it takes RocketMQ's lock on the directory),
writes its partition, dispatches it (consume queues and index), flushes and closes. Tasks running at the same
time therefore take turns: a task waits up to `lockTimeout` seconds (default 600) for the lock, then fails with
StoreLockedError (as it does while a broker holds the store).

Order: within a task, the messages of one queue get queue offsets in the order of their rows; rows of different
queues may be interleaved differently in the commitlog (each Arrow batch is put queue by queue, `put_batch`
per run of consecutive rows of one topic, queue and born timestamp, up to 256 messages and `max_message_size`
bytes). Between tasks there is no order.

Failures: every row of an Arrow batch (up to `spark.sql.execution.arrow.maxRecordsPerBatch` rows, 10,000 by
default) is checked before any of it is written, every put by the checks `put_batch` makes
(`MessageStore.check_batch`); a bad row (null topic or body, a null key in a keys list, queue id outside the
topic's queues, body over the store's `max_message_size`, TAGS or KEYS in `properties` disagreeing with the
columns, a bad topic, tag or property) fails the task with a typed rmq error (InvalidMessageError,
InvalidArgumentError, MessageTooLargeError, InvalidPropertyError, InvalidTopicError, PropertiesTooLargeError)
naming the row, and nothing of that batch is written. A missing column, a column of the
wrong type or an unknown one fails the job before any task runs (InvalidConfigError, ArgumentTypeError).
Messages put before are durable and stay: a store is an append-only log with no rollback, so a failed job
leaves what its tasks had written, and a retried task writes its partition again. The guarantee is at least
once: duplicates are possible after a retry or a failed job. A consumer can drop them by UNIQ_KEY (RocketMQ's
message id, which a retried task writes again unchanged when the rows carry it
in `properties`; without it each put makes a new one).
"""

from __future__ import annotations

import difflib
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampType,
)

from rmq import _native

_log = logging.getLogger("rmq.spark")

#: Queues of a topic that `config/topics.json` does not configure: the count a broker's auto-create gives a topic
#: sent by a default producer (min of the producer's defaultTopicQueueNums 4 and the broker's 8).
DEFAULT_QUEUES = 4

#: Messages per `put_batch` call at most.
BATCH = 256


def _types(*ts: type[DataType]) -> tuple[type[DataType], ...]:
    return ts


_STR = StringType()
#: The writable columns and the Spark types each accepts.
WRITABLE: dict[str, tuple[type[DataType], ...]] = {
    "topic": _types(StringType),
    "body": _types(BinaryType, StringType),
    "queue_id": _types(IntegerType, ShortType, LongType),
    "tags": _types(StringType),
    "keys": _types(StringType, ArrayType),
    "properties": _types(MapType),
    "born_timestamp": _types(TimestampType, LongType),
    "flag": _types(IntegerType, ShortType, LongType),
}


def check_schema(schema: StructType, source_columns: Sequence[str]) -> list[str]:
    """The writable columns of `schema`; raises InvalidConfigError for a missing required column, a column of
    the wrong type, or a column that is neither writable nor one of the source's (`source_columns`)."""
    names = [f.name for f in schema]
    for need in ("topic", "body"):
        if need not in names:
            raise _native.InvalidConfigError(
                f"the rocketmq writer needs a {need!r} column; columns: topic, body, optional "
                + ", ".join(list(WRITABLE)[2:])
            )
    for f in schema:
        if f.name not in WRITABLE:
            if f.name in source_columns:
                continue
            raise _native.InvalidConfigError(
                f"column {f.name!r} is not one the rocketmq writer takes ({', '.join(WRITABLE)}) nor one of the "
                "source's columns"
            )
        t = f.dataType
        ok = isinstance(t, WRITABLE[f.name])
        if isinstance(t, ArrayType):
            ok = ok and t.elementType == _STR
        if isinstance(t, MapType):
            ok = t.keyType == _STR and t.valueType == _STR
        if not ok:
            raise _native.ArgumentTypeError(
                f"column {f.name} is {t.simpleString()}; the rocketmq writer takes "
                + " or ".join(
                    x().simpleString() if x not in (ArrayType, MapType) else _complex(x) for x in WRITABLE[f.name]
                )
            )
    return [n for n in names if n in WRITABLE]


def _complex(t: type[DataType]) -> str:
    return "array<string>" if t is ArrayType else "map<string,string>"


@dataclass(frozen=True)
class WriteSummary(WriterCommitMessage):
    """What one write task stored: its partition and attempt, the messages it put, and the commitlog offsets of
    the first and last (-1 when it put none)."""

    partition: int
    attempt: int
    messages: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True)
class WriteOptions:
    path: str
    queues: int
    lock_timeout: float
    #: Store settings given as options under their RocketMQ names (`mappedFileSizeCommitLog`, ...), by field name.
    settings: dict[str, Any]

    @staticmethod
    def parse(options: dict[str, str]) -> WriteOptions:
        o = {k.lower(): v for k, v in options.items()}
        if "path" not in o:
            raise _native.InvalidConfigError(
                'the rocketmq writer needs a path: df.write.format("rocketmq").mode("append").save(STORE_DIR)'
            )
        check_write_options(o)
        try:
            queues = int(o.get("queues", DEFAULT_QUEUES))
            lock_timeout = float(o.get("locktimeout", 600))
        except ValueError as e:
            raise _native.InvalidConfigError(f"queues must be an integer and lockTimeout a number: {e}") from None
        if not 1 <= queues <= 1 << 16 or not 0 <= lock_timeout < float("inf"):
            raise _native.InvalidConfigError(
                f"queues must be 1 to 65536 and lockTimeout finite and not negative, got {queues}, {lock_timeout}"
            )
        return WriteOptions(o["path"], queues, lock_timeout, _settings(o))


#: The writer's own options, as spelt in the docs, and Spark's `checkpointLocation` of a streaming write (store
#: settings come under RocketMQ's names besides).
WRITE_OPTIONS = ("path", "queues", "lockTimeout", "checkpointLocation")


def check_write_options(options: dict[str, str]) -> None:
    """Refuses an option the writer does not read (a typo such as `lockTimout` would otherwise be ignored):
    `InvalidConfigError` naming the nearest one. `options` are lower-cased, as Spark passes them."""
    known = {o.lower(): o for o in WRITE_OPTIONS}
    known.update({java.lower(): java for _name, java, *_ in _native.config_settings()})
    for name in options:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {known[close[0]]}?" if close else ""
            raise _native.InvalidConfigError(
                f"the rocketmq writer has no option {name!r}{hint} (its options: {', '.join(WRITE_OPTIONS)}, and "
                "store settings under RocketMQ's names, such as mappedFileSizeCommitLog)"
            )


def _settings(options: dict[str, str]) -> dict[str, Any]:
    """The options that name a store setting (RocketMQ's name, any case), parsed as the broker parses them."""
    names = {java.lower(): (java, name) for name, java, *_ in _native.config_settings()}
    given = {names[k][0]: v for k, v in options.items() if k in names}
    if not given:
        return {}
    parsed = _native.config_from_properties(given)
    return {names[java.lower()][1]: parsed[names[java.lower()][1]] for java in given}


#: How long a task retries when the store's file sizes cannot be told (see `_open`).
SIZES_RETRY_SECONDS = 30.0


def _open(opts: WriteOptions) -> Any:
    """The store, opened read-write once its lock is free (waiting up to `lock_timeout` seconds)."""
    import rmq

    deadline = time.monotonic() + opts.lock_timeout
    sizes_deadline: float | None = None
    pause = 0.05
    while True:
        try:
            config = rmq.StoreConfig.from_files(opts.path, **opts.settings)
            return rmq.MessageStore(opts.path, config, start_services=False)
        except rmq.StoreLockedError:
            if time.monotonic() >= deadline:
                raise
        except rmq.InvalidConfigError:
            # The sizes are read off the files before the lock is ours: a task holding it may be allocating a new
            # index file right then, whose length tells nothing until it is whole (CI saw a task fail on a file
            # caught at 96 MiB of its 420). Retried for SIZES_RETRY_SECONDS; a store whose sizes really cannot be
            # told fails after that.
            now = time.monotonic()
            sizes_deadline = sizes_deadline or min(deadline, now + SIZES_RETRY_SECONDS)
            if now >= sizes_deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 1.0)


def _col(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    i = batch.schema.get_field_index(name)
    return None if i < 0 else batch.column(i)


def _first(mask: pa.Array) -> int | None:
    """The index of the first true value of a boolean array, None if there is none."""
    at = pc.index(pc.fill_null(mask, False), True).as_py()
    return None if at is None or at < 0 else int(at)


def _keys_text(keys: pa.Array | None, n: int) -> pa.Array:
    """Each row's KEYS text (keys joined by spaces), null for a row without keys."""
    if keys is None:
        return pa.nulls(n, pa.string())
    if pa.types.is_list(keys.type) or pa.types.is_large_list(keys.type):
        keys = pc.binary_join(keys, " ")  # a row whose list holds a null is refused before (`_null_key_row`)
    blank = pc.equal(pc.utf8_trim_whitespace(keys), "")
    return pc.if_else(pc.fill_null(blank, True), pa.scalar(None, pa.string()), keys)


def _null_key_row(keys: pa.Array | None) -> int | None:
    """The first row whose `keys` list holds a null element (a null list is a row without keys)."""
    if keys is None or not (pa.types.is_list(keys.type) or pa.types.is_large_list(keys.type)):
        return None
    values = pc.list_flatten(keys)
    if not values.null_count:
        return None
    parents = pc.list_parent_indices(keys)
    return int(parents[_first(values.is_null()) or 0].as_py())


#: One `put_batch`: topic, queue, born time (ms or None), the messages and their rows (indices in the batch).
_Put = tuple[str, int, int | None, list[Any], list[int]]


class _Task:
    """One task's writing: queue choice state and what it stored."""

    def __init__(self, store: Any, opts: WriteOptions) -> None:
        self.store = store
        self.opts = opts
        self.queue_counts: dict[str, tuple[int, bool]] = {}
        self.round_robin: dict[str, int] = {}
        self.messages = 0
        self.first = -1
        self.last = -1

    def queues_of(self, topic: str) -> tuple[int, bool]:
        """The topic's queue count for the queue choice, and whether `config/topics.json` configures it (then
        it bounds given queue ids too; an unconfigured topic takes any, as the store does)."""
        got = self.queue_counts.get(topic)
        if got is None:
            cfg = self.store.topic_config(topic)
            got = (cfg.write_queue_nums, True) if cfg is not None else (self.opts.queues, False)
            self.queue_counts[topic] = got
        return got

    def prepare(self, batch: pa.RecordBatch, row0: int) -> list[_Put]:
        """The batch's rows as `put_batch` calls, every row checked first (vectorised where it can be); raises
        naming the first bad row. Each queue's rows keep their order."""
        import numpy as np

        import rmq
        from rmq import arrow

        n = batch.num_rows
        topic, body = _col(batch, "topic"), _col(batch, "body")
        assert topic is not None and body is not None  # check_schema made sure
        for name, col in (("topic", topic), ("body", body)):
            bad = _first(col.is_null()) if col.null_count else None
            if bad is not None:
                raise rmq.InvalidMessageError(f"row {row0 + bad}: {name} is null")
        if not pa.types.is_binary(body.type):
            body = body.cast(pa.binary())
        limit = self.store.config.max_message_size
        bad = _first(pc.greater(pc.binary_length(body), limit))
        if bad is not None:
            raise rmq.MessageTooLargeError(
                f"row {row0 + bad}: body of {len(body[bad].as_py())} bytes is over the store's max_message_size "
                f"({limit})"
            )
        bad = _null_key_row(_col(batch, "keys"))
        if bad is not None:
            raise rmq.InvalidMessageError(
                f"row {row0 + bad}: keys holds a null element (a row without keys has a null or empty keys list)"
            )
        # Queues: given, else by the hash of the KEYS text, else round robin per topic.
        topics_enc = topic.dictionary_encode()
        names: list[str] = topics_enc.dictionary.to_pylist()
        topic_idx = topics_enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        info = [self.queues_of(t) for t in names]
        counts = np.array([c for c, _ in info], dtype=np.int64)[topic_idx]
        keys = _keys_text(_col(batch, "keys"), n)
        hashes = arrow.java_hash(keys)
        h = pc.fill_null(hashes, 0).to_numpy(zero_copy_only=False).astype(np.int64)
        has_key = hashes.is_valid().to_numpy(zero_copy_only=False)
        qid = np.abs(h) % counts  # Java's abs(hashCode % n): the same for every int with Python's/numpy's int64
        given_col = _col(batch, "queue_id")
        given = np.zeros(n, dtype=bool)
        if given_col is not None:
            given = given_col.is_valid().to_numpy(zero_copy_only=False)
            values = pc.fill_null(given_col, 0).to_numpy(zero_copy_only=False).astype(np.int64)
            configured = np.array([c for _, c in info], dtype=bool)[topic_idx]
            upper = np.where(configured, counts, 1 << 31)
            wrong = given & ((values < 0) | (values >= upper))
            if wrong.any():
                i = int(np.argmax(wrong))
                t = names[topic_idx[i]]
                bound = f"topic {t}'s {counts[i]} queues" if configured[i] else "0 to 2^31-1"
                raise rmq.InvalidArgumentError(f"row {row0 + i}: queue_id {values[i]} is outside {bound}")
            qid = np.where(given, values, qid)
        spin = ~given & ~has_key
        if spin.any():
            for ti, t in enumerate(names):
                rows = np.flatnonzero(spin & (topic_idx == ti))
                if len(rows):
                    start = self.round_robin.get(t, 0)
                    qid[rows] = (start + np.arange(len(rows))) % counts[rows[0]]
                    self.round_robin[t] = int((start + len(rows)) % counts[rows[0]])
        born_col = _col(batch, "born_timestamp")
        born: list[int | None] = [None] * n
        if born_col is not None:
            if pa.types.is_timestamp(born_col.type):
                born_col = born_col.cast(pa.timestamp("ms", tz=born_col.type.tz), safe=False).cast(pa.int64())
            born = born_col.to_pylist()
        messages = self._messages(batch, body, keys, row0)
        # Grouped by topic and queue, each queue's rows in row order (the queue offsets follow it); a run of rows
        # with one born time and at most BATCH messages and about max_message_size bytes is one put_batch.
        order = np.lexsort((np.arange(n), qid, topic_idx))
        sizes = self._sizes(batch, body, keys)
        puts: list[_Put] = []
        budget = 0
        for i in order.tolist():
            t, q, b = names[topic_idx[i]], int(qid[i]), born[i]
            last = puts[-1] if puts else None
            fits = last is not None and len(last[3]) < BATCH and budget + sizes[i] <= limit
            if fits and last is not None and last[0] == t and last[1] == q and last[2] == b:
                last[3].append(messages[i])
                last[4].append(i)
                budget += sizes[i]
            else:
                puts.append((t, q, b, [messages[i]], [i]))
                budget = sizes[i]
        self._check(puts, row0)
        return puts

    @staticmethod
    def _sizes(batch: pa.RecordBatch, body: pa.Array, keys: pa.Array) -> list[int]:
        """Each row's bytes in a batch body (`put_batch` refuses a batch over `max_message_size`), from above:
        its body, tags, keys and properties, plus what the store adds (UNIQ_KEY, WAIT, separators)."""
        import numpy as np

        def lengths(col: pa.Array | None) -> Any:
            if col is None:
                return 0
            return pc.fill_null(pc.binary_length(col), 0).to_numpy(zero_copy_only=False).astype(np.int64)

        total = lengths(body) + lengths(_col(batch, "tags")) + lengths(keys) + 256
        props = _col(batch, "properties")
        if props is not None:
            if pa.types.is_map(props.type):
                props = props.cast(pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())])))
            flat = pc.list_flatten(props)
            each = (
                pc.fill_null(pc.binary_length(flat.field(0)), 0).to_numpy(zero_copy_only=False)
                + pc.fill_null(pc.binary_length(flat.field(1)), 0).to_numpy(zero_copy_only=False)
                + 2
            ).astype(np.int64)
            if len(each):
                total = total + np.bincount(
                    pc.list_parent_indices(props).to_numpy(zero_copy_only=False), weights=each, minlength=len(props)
                ).astype(np.int64)
        return [int(x) for x in np.broadcast_to(total, (batch.num_rows,))]

    def _check(self, puts: list[_Put], row0: int) -> None:
        """Every put of a batch checked as `put_batch` checks it, before any is written: raises the first bad
        row's error, naming the row, so that nothing of the batch is written."""
        import rmq

        first: tuple[int, Exception] | None = None
        for topic, qid, born, messages, rows in puts:
            if first is not None and min(rows) > first[0]:
                continue
            try:
                self.store.check_batch(topic, messages, queue_id=qid, born_timestamp=born)
                continue
            except rmq.RmqError as e:
                bad: tuple[int, Exception] = (min(rows), type(e)(f"rows {row0 + min(rows)} to {row0 + max(rows)}: {e}"))
            for m, i in zip(messages, rows, strict=True):  # the put's rows are in row order: find the first bad one
                try:
                    self.store.check_batch(topic, [m], queue_id=qid, born_timestamp=born)
                except rmq.RmqError as one:
                    bad = (i, type(one)(f"row {row0 + i}: {one}"))
                    break
            if first is None or bad[0] < first[0]:
                first = bad
        if first is not None:
            raise first[1]

    @staticmethod
    def _messages(batch: pa.RecordBatch, body: pa.Array, keys: pa.Array, row0: int) -> list[Any]:
        import rmq

        n = batch.num_rows
        bodies = body.to_pylist()
        key_texts = keys.to_pylist()
        tags_col = _col(batch, "tags")
        tags = tags_col.to_pylist() if tags_col is not None else [None] * n
        flag_col = _col(batch, "flag")
        flags = pc.fill_null(flag_col, 0).to_pylist() if flag_col is not None else [0] * n
        props_col = _col(batch, "properties")
        props: list[Any] = props_col.to_pylist() if props_col is not None else [None] * n
        if props_col is not None:
            for i in range(n):
                p = props[i]
                if p is None:
                    continue
                d = dict(p)
                for name, value in (("TAGS", tags[i]), ("KEYS", key_texts[i])):
                    given = d.get(name)
                    if value is not None and given is not None:
                        if given != value:
                            raise rmq.InvalidPropertyError(
                                f"row {row0 + i}: property {name}={given!r} disagrees with column "
                                f"{name.lower()}={value!r}"
                            )
                        del d[name]
                props[i] = d
        make = rmq.Message
        try:
            return [
                make(b, tags=t, keys=k, properties=p, flag=f)
                for b, t, k, p, f in zip(bodies, tags, key_texts, props, flags, strict=True)
            ]
        except rmq.RmqError:
            for i in range(n):  # find the row, for the message
                try:
                    make(bodies[i], tags=tags[i], keys=key_texts[i], properties=props[i], flag=flags[i])
                except rmq.RmqError as e:
                    raise type(e)(f"row {row0 + i}: {e}") from None
            raise

    def put(self, puts: list[_Put]) -> None:
        for topic, qid, born, messages, _rows in puts:
            result = self.store.put_batch(topic, messages, queue_id=qid, born_timestamp=born)
            offset = result.wrote_offset
            self.first = offset if self.first < 0 else min(self.first, offset)
            self.last = max(self.last, offset)
            self.messages += len(messages)


def write_partition(opts: WriteOptions, batches: Iterator[pa.RecordBatch]) -> WriteSummary:
    """Writes one partition's batches into the store (see the module docs) and says what it stored."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    partition, attempt = (ctx.partitionId(), ctx.attemptNumber()) if ctx is not None else (0, 0)
    first = next(batches, None)
    if first is None:
        return WriteSummary(partition, attempt, 0, -1, -1)
    store = _open(opts)
    task = _Task(store, opts)
    try:
        row0 = 0
        batch: pa.RecordBatch | None = first
        while batch is not None:
            task.put(task.prepare(batch, row0))
            row0 += batch.num_rows
            batch = next(batches, None)
        store.wait_dispatched()
    finally:
        store.close()
    if attempt > 0:
        _log.warning(
            "write task attempt %d of partition %d stored %d messages: earlier attempts may have stored some too",
            attempt,
            partition,
            task.messages,
        )
    return WriteSummary(partition, attempt, task.messages, task.first, task.last)


def _summary(messages: Sequence[WriterCommitMessage | None]) -> tuple[int, int]:
    done = [m for m in messages if isinstance(m, WriteSummary)]
    return len(done), sum(m.messages for m in done)


class RocketMQWriter(DataSourceArrowWriter):
    """`df.write.format("rocketmq").mode("append").save(store)`: see the module docs."""

    def __init__(self, options: dict[str, str], schema: StructType, source_columns: Sequence[str]) -> None:
        self.opts = WriteOptions.parse(options)
        self.columns = check_schema(schema, source_columns)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteSummary:
        return write_partition(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        tasks, stored = _summary(messages)
        _log.info("rocketmq writer: %d tasks stored %d messages in %s", tasks, stored, self.opts.path)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        tasks, stored = _summary(messages)
        _log.warning(
            "rocketmq write job failed: %d messages stored by %d finished tasks stay in %s (a store has no rollback)",
            stored,
            tasks,
            self.opts.path,
        )


class RocketMQStreamWriter(DataSourceStreamArrowWriter):
    """`df.writeStream.format("rocketmq").option("checkpointLocation", ...).start(store)`: each micro-batch is
    written as a batch write is (module docs); at least once: a micro-batch replayed after a restart is written
    again."""

    def __init__(self, options: dict[str, str], schema: StructType, source_columns: Sequence[str]) -> None:
        self.opts = WriteOptions.parse(options)
        self.columns = check_schema(schema, source_columns)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteSummary:
        return write_partition(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 (Spark's)
        tasks, stored = _summary(messages)
        _log.info("rocketmq stream writer: batch %d: %d tasks stored %d messages", batchId, tasks, stored)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 (Spark's)
        tasks, stored = _summary(messages)
        _log.warning(
            "rocketmq stream writer: batch %d failed; %d messages stored by %d tasks stay", batchId, stored, tasks
        )


def refuse_overwrite(overwrite: bool) -> None:
    """A store is an append-only log: `mode("overwrite")` cannot be honoured."""
    if overwrite:
        raise _native.InvalidConfigError(
            'the rocketmq writer only appends (a commitlog cannot be overwritten): use mode("append")'
        )
