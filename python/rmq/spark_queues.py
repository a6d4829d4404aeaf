"""Reading the `rocketmq` source by consume-queue offsets, with the options of Spark's Kafka source: batch reads
bounded by offsets or store times (`RocketMQQueueReader`), and what Structured Streaming (`rmq.spark_stream`)
builds on.

    spark.readStream.format("rocketmq").option("topics", "Orders").load(store)        # a live store
    spark.read.format("rocketmq").option("startingOffsets", '{"Orders":{"0":120}}').load(store)

An offset is a queue offset (an entry number of a consume queue), per topic and queue, as JSON like Kafka's:
`{"Orders":{"0":120,"1":98}}` means "next read queue 0 of Orders from entry 120 and queue 1 from entry 98". A
partition is one queue's range `[start, end)` of entries (split further for `minPartitions`); its task reads the
entries from the consume queue and each record from the commitlog, then decodes them in Rust into Arrow. The store
is opened read-only (`rmq.MessageStore(path, read_only=True)`): nothing is ever written, and a broker or an rmq
writer may append to it meanwhile. Each Python process keeps one read-only open per store and takes in what was
written since with `refresh()` before each use.

Why queue offsets and not commitlog offsets: they are what RocketMQ consumers commit (consumerOffset.json holds
one per group, topic and queue), so a query can start where a consumer group stands; each queue is ordered and
its offsets are dense (entry n is the n-th message of the queue), so "how many messages" is a subtraction, which
admission control and `minPartitions` need; and retention is visible per queue (`get_min_offset_in_queue`), so a
checkpointed offset below it is data loss that can be named precisely. A commitlog offset would tie the stream to
one store's byte layout and could not say which queue lost what.
"""

from __future__ import annotations

import array
import itertools
import json
import logging
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from rmq import _native

if TYPE_CHECKING:
    from rmq.store import MessageStore

_log = logging.getLogger("rmq.spark")

#: {topic: {queue id as text: queue offset}}, as in the checkpoint and the offset options.
Offsets = dict[str, dict[str, int]]

#: Kafka's special values in offset JSON: -2 the earliest offset still stored, -1 the latest (the queue's end).
EARLIEST = -2
LATEST = -1

#: Options that make a batch read go by queue offsets (instead of commitlog byte ranges).
QUEUE_OPTIONS = (
    "startingoffsets",
    "endingoffsets",
    "startingtimestamp",
    "endingtimestamp",
    "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp",
    "topicpattern",
)


class DataLossError(_native.RmqError):
    """Messages a query still needed are gone: retention deleted them, or the queue now ends before the offset
    the query reached (the store was replaced or truncated). Raised only with `failOnDataLoss=true`."""

    status = None
    path = None
    offset = None


def is_system_topic(topic: str) -> bool:
    """`TopicValidator.isSystemTopic` (RocketMQ 5.3.1): topics read only when named (`topics` or `topicPattern`)."""
    return _native.is_system_topic(topic)


def store_root(path: str) -> str:
    """The store directory of `path`: a store directory (holding `commitlog/`) or its commitlog directory."""
    p = Path(path)
    if (p / "commitlog").is_dir():
        return str(p)
    if p.name == "commitlog" and p.is_dir():
        return str(p.parent)
    raise FileNotFoundError(f"{p}: not a store or commitlog directory")


_STORES: dict[str, MessageStore] = {}


def open_store(path: str) -> MessageStore:
    """This process's read-only open of the store at `path`, refreshed (what was written since is taken in). A
    store replaced underneath (`refresh()` raises: its commitlog directory is another one now) is opened afresh,
    so its queues are compared with the query's offsets (`failOnDataLoss`: the store was replaced) instead of
    the old store's entries being read against the new log."""
    from rmq.store import MessageStore

    root = store_root(path)
    store = _STORES.get(root)
    if store is not None:
        try:
            store.refresh()
            return store
        except _native.RmqError as e:  # replaced or damaged underneath: open it afresh
            _log.warning("reopening %s after refresh failed: %s", root, e)
            del _STORES[root]
            store.close()
    store = MessageStore(root, read_only=True)
    _STORES[root] = store
    return store


# -- options ------------------------------------------------------------------------------------------------------


def _int_option(options: dict[str, str], name: str, minimum: int) -> int | None:
    value = options.get(name.lower())
    if value is None:
        return None
    try:
        n = int(value)
    except ValueError:
        raise _native.InvalidConfigError(f"option {name} must be an integer, got {value!r}") from None
    if n < minimum:
        raise _native.InvalidConfigError(f"option {name} must be at least {minimum}, got {n}")
    return n


def _json_option(name: str, value: str, example: str) -> dict[str, dict[str, int]]:
    try:
        spec = json.loads(value)
    except ValueError:
        spec = None
    ok = isinstance(spec, dict) and all(
        isinstance(t, str) and isinstance(qs, dict) and all(isinstance(o, int) for o in qs.values())
        for t, qs in spec.items()
    )
    if not ok:
        raise _native.InvalidConfigError(f"option {name} must be JSON like {example}, got {value!r}")
    assert isinstance(spec, dict)
    for t, qs in spec.items():
        for q in qs:
            try:
                qid = int(q)
            except ValueError:
                qid = -1
            if not 0 <= qid < 2**31 or str(qid) != q:
                raise _native.InvalidConfigError(f"option {name}: queue id {q!r} of topic {t!r} is not a queue id")
    return spec


@dataclass(frozen=True)
class Bound:
    """Where a read starts or ends in each queue: `kind` "earliest", "latest", "offsets" (JSON), or "timestamp"
    (one time for every queue, `at`, or one per queue, `offsets`), in store-time milliseconds."""

    kind: str
    offsets: dict[str, dict[str, int]] | None = None
    at: int | None = None


def parse_bound(options: dict[str, str], which: str, default: str, *, streaming: bool) -> Bound:
    """The start (`which` = "starting") or end ("ending") of a read from its options, with Kafka's precedence:
    `<which>Timestamp`, then `<which>OffsetsByTimestamp`, then `<which>Offsets`."""
    from rmq.spark import _store_ms

    at = _store_ms(options, f"{which}Timestamp")
    if at is not None:
        return Bound("timestamp", at=at)
    by_time = options.get(f"{which}offsetsbytimestamp")
    if by_time is not None:
        return Bound("timestamp", _json_option(f"{which}OffsetsByTimestamp", by_time, '{"Topic":{"0":1700000000000}}'))
    value = options.get(f"{which}offsets", default)
    name = f"{which}Offsets"
    if value.strip().lower() in ("earliest", "latest"):
        kind = value.strip().lower()
        if not streaming and (which, kind) in (("starting", "latest"), ("ending", "earliest")):
            raise _native.InvalidConfigError(f"option {name}={kind} is not allowed for a batch query (as in Kafka)")
        return Bound(kind)
    spec = _json_option(name, value, '{"Topic":{"0":12,"1":-2}} (-2 earliest, -1 latest) or earliest / latest')
    for t, qs in spec.items():
        for q, o in qs.items():
            bad = o < EARLIEST or (not streaming and which == "starting" and o == LATEST)
            bad = bad or (not streaming and which == "ending" and o == EARLIEST)
            if bad:
                raise _native.InvalidConfigError(f"option {name}: offset {o} of topic {t!r} queue {q} is not allowed")
    return Bound("offsets", spec)


@dataclass(frozen=True)
class QueueOptions:
    """The options of a read by queue offsets (see `RocketMQDataSource` and the README for each)."""

    path: str
    topics: tuple[str, ...] | None
    pattern: str | None
    fail_on_data_loss: bool
    min_partitions: int | None
    by_timestamp_strategy: str
    max_rows: int

    @classmethod
    def parse(cls, options: dict[str, str]) -> QueueOptions:
        from rmq.spark import _flag

        if "path" not in options:
            raise _native.InvalidConfigError(
                'the rocketmq source needs a path: spark.read.format("rocketmq").load(STORE_DIR)'
            )
        topics_opt = options.get("topics")
        pattern = options.get("topicpattern")
        if topics_opt is not None and pattern is not None:
            raise _native.InvalidConfigError("give either topics or topicPattern, not both")
        topics = tuple(sorted({t.strip() for t in topics_opt.split(",") if t.strip()})) if topics_opt else None
        if topics_opt is not None and not topics:
            raise _native.InvalidConfigError("option topics names no topic")
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as e:
                raise _native.InvalidConfigError(f"option topicPattern is not a regular expression: {e}") from None
        strategy = options.get("startingoffsetsbytimestampstrategy", "error").lower()
        if strategy not in ("error", "latest"):
            raise _native.InvalidConfigError(
                f"option startingOffsetsByTimestampStrategy must be error or latest, got {strategy!r}"
            )
        return cls(
            path=options["path"],
            topics=topics,
            pattern=pattern,
            fail_on_data_loss=_flag(options, "failOnDataLoss", True),
            min_partitions=_int_option(options, "minPartitions", 1),
            by_timestamp_strategy=strategy,
            max_rows=_int_option(options, "maxRowsPerBatch", 1) or 8192,
        )

    def selects(self, topic: str) -> bool:
        if self.topics is not None:
            return topic in self.topics
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        return not is_system_topic(topic)

    def queues(self, store: MessageStore) -> list[tuple[str, int]]:
        """The (topic, queue id) pairs read, in order: every queue of every selected topic in the store."""
        return [(t, q) for t in store.topics() if self.selects(t) for q in store.queue_ids(t)]


def canonical(offsets: Offsets) -> Offsets:
    """Offsets in one order (topics by name, queues by number), so equal offsets serialise alike."""
    return {t: {q: offsets[t][q] for q in sorted(offsets[t], key=int)} for t in sorted(offsets)}


def resolve(
    store: MessageStore, opts: QueueOptions, queues: Sequence[tuple[str, int]], bound: Bound, which: str
) -> Offsets:
    """The queue offset `bound` names in each queue (`which`: "starting" or "ending"). A timestamp resolves by
    Kafka's rule, the earliest offset whose store time is at or after it (`getOffsetInQueueByTime` with LOWER, a
    binary search of the consume queue by store time). Where no message is that new, an end resolves to the
    queue's end, and a start to the queue's end with `startingOffsetsByTimestampStrategy=latest` or else to an
    error, as in Kafka. A queue that per-queue JSON leaves out starts at its earliest and ends at its latest."""
    out: Offsets = {}
    for t, q in queues:
        lo = max(store.get_min_offset_in_queue(t, q), 0)
        hi = store.get_max_offset_in_queue(t, q)
        spec = bound.offsets.get(t, {}).get(str(q)) if bound.offsets is not None else None
        if bound.kind == "timestamp" and (bound.at is not None or spec is not None):
            at = bound.at if bound.at is not None else spec
            assert at is not None
            off = store.get_offset_in_queue_by_time(t, q, at) if hi > lo else hi
            if off >= hi and which == "starting" and opts.by_timestamp_strategy == "error":
                raise _native.InvalidConfigError(
                    f"topic {t!r} queue {q} holds no message stored at or after {at} ms (its end is offset {hi}); "
                    "set startingOffsetsByTimestampStrategy=latest to start there"
                )
        elif spec is not None:
            off = lo if spec == EARLIEST else hi if spec == LATEST else spec
        elif bound.kind in ("earliest", "latest"):
            off = lo if bound.kind == "earliest" else hi
        else:
            off = lo if which == "starting" else hi
        out.setdefault(t, {})[str(q)] = off
    return out


def check_named_queues(bound: Bound, which: str, opts: QueueOptions, queues: Sequence[tuple[str, int]]) -> None:
    """A batch read's per-queue JSON may name only queues it reads: a topic the query does not read or the store
    does not hold, or a queue the store does not hold, is `InvalidConfigError` (a typo read everything from the
    earliest offset without a word)."""
    if bound.offsets is None:
        return
    name = f"{which}Offsets" if bound.kind == "offsets" else f"{which}OffsetsByTimestamp"
    held: dict[str, set[str]] = {}
    for topic, queue_id in queues:
        held.setdefault(topic, set()).add(str(queue_id))
    for t, qs in bound.offsets.items():
        if not opts.selects(t):
            raise _native.InvalidConfigError(f"option {name} names topic {t!r}, which this query does not read")
        if t not in held:
            raise _native.InvalidConfigError(f"option {name} names topic {t!r}, which the store does not hold")
        for q in qs:
            if q not in held[t]:
                raise _native.InvalidConfigError(
                    f"option {name} names queue {q} of topic {t!r}, which the store does not hold "
                    f"(its queues: {', '.join(sorted(held[t], key=int))})"
                )


def lost(fail: bool, what: str) -> None:
    """Data loss: DataLossError with `fail` (failOnDataLoss=true), else a warning saying what is skipped."""
    if fail:
        raise DataLossError(f"{what}; set failOnDataLoss=false to skip them and go on")
    _log.warning("data loss, skipped: %s", what)


# -- partitions and reading ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueueRange(InputPartition):
    """Entries `[start, end)` of the consume queue (topic, queue_id). `new_queue`: the queue appeared after the
    query's previous offsets were taken; it is read from offset 0, and entries below its earliest stored one were
    written after those offsets and deleted before the query read them: data loss, as Kafka reports a new
    partition that does not start at 0."""

    topic: str
    queue_id: int
    start: int
    end: int
    new_queue: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", (self.topic, self.queue_id, self.start))


def plan_ranges(start: Offsets, end: Offsets) -> list[QueueRange]:
    """One range per queue that `end` moves past `start` (a queue `start` lacks reads from its beginning)."""
    ranges = []
    for t, qs in canonical(end).items():
        for q, e in qs.items():
            s = start.get(t, {}).get(q)
            new = s is None
            first = 0 if s is None else s
            if e > first:
                ranges.append(QueueRange(t, int(q), first, e, new))
    return ranges


def split_ranges(ranges: list[QueueRange], min_partitions: int | None) -> list[QueueRange]:
    """`ranges` cut into at least `min_partitions` pieces when there are fewer, each range in proportion to its
    size (Kafka's `minPartitions`); a range is never cut below one entry."""
    if min_partitions is None or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.end - r.start for r in ranges)
    out: list[QueueRange] = []
    for r in ranges:
        size = r.end - r.start
        parts = min(size, max(1, math.ceil(size * min_partitions / total)))
        cuts = [r.start + size * i // parts for i in range(parts + 1)]
        out.extend(QueueRange(r.topic, r.queue_id, a, b, r.new_queue) for a, b in zip(cuts, cuts[1:], strict=False))
    return out


#: Most record bytes one Arrow batch holds (binary offsets are 32-bit).
MAX_BATCH_BYTES = 64 << 20


def read_range(
    path: str, part: QueueRange, schema: pa.Schema, *, fail_on_data_loss: bool, max_rows: int
) -> Iterator[pa.RecordBatch]:
    """RecordBatches of `schema` (names a subset of `rmq.arrow.COLUMNS`) for the entries of `part`, in queue
    order: each consume-queue entry's record is read from the commitlog (checked against the entry's size) and the
    batch decoded in Rust. Entries the store no longer holds are data loss (`lost`)."""
    from rmq import arrow

    store = open_store(path)
    t, q, off, stop = part.topic, part.queue_id, part.start, part.end
    while off < stop:
        entries = store._cq_entries(t, q, off, min(max_rows, stop - off))
        if not entries:
            end = store.get_max_offset_in_queue(t, q)
            lost(
                fail_on_data_loss, f"topic {t!r} queue {q}: offsets [{off}, {stop}) are gone (the queue ends at {end})"
            )
            return
        first = entries[0][0]
        if first > off:
            what = f"topic {t!r} queue {q}: offsets [{off}, {min(first, stop)}) were deleted (retention)"
            if part.new_queue:
                what += " (a queue that appeared after the query's last offsets, read from offset 0)"
            lost(fail_on_data_loss, what)
        views: list[Any] = []
        size = 0
        for qo, phy, n, _tags in entries:
            if qo >= stop or (views and size + n > MAX_BATCH_BYTES):
                break
            v = store.read_raw(phy)
            if v is None:
                lost(fail_on_data_loss, f"topic {t!r} queue {q}: offset {qo} (commitlog offset {phy}) was deleted")
            elif len(v) != n:
                err = _native.CorruptionError(
                    f"{store.path}: topic {t!r} queue {q} entry {qo} says {n} bytes at commitlog offset {phy}, "
                    f"but the record there is {len(v)} bytes"
                )
                err.status, err.path, err.offset = None, store.path, phy
                raise err
            else:
                views.append(v)
                size += n
            off = qo + 1
        if first >= stop:
            return
        if views:
            offsets = array.array("i", [0, *itertools.accumulate(len(v) for v in views)])  # int32, native order
            records = pa.Array.from_buffers(
                pa.binary(), len(views), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(views))]
            )
            decoded = arrow.decode_records(records, schema.names, strict=True)
            yield pa.RecordBatch.from_arrays(decoded.flatten(), schema=schema)


# -- the batch reader -----------------------------------------------------------------------------------------------


def read_partition(opts: QueueOptions, schema: pa.Schema, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """A task's read, batch or stream: `read_range` of its queue range with the query's options."""
    if not isinstance(partition, QueueRange):  # Spark's stand-in when there is nothing to read
        return
    yield from read_range(
        opts.path, partition, schema, fail_on_data_loss=opts.fail_on_data_loss, max_rows=opts.max_rows
    )


class RocketMQQueueReader(DataSourceReader):
    """A batch read bounded by queue offsets or store times (`startingOffsets`, `endingOffsets`,
    `startingTimestamp`, ...): the messages of the selected queues in `[start, end)`, one partition per queue
    (more with `minPartitions`)."""

    def __init__(self, options: dict[str, str], schema: Any) -> None:
        from rmq.spark import output_schema

        options = {k.lower(): v for k, v in options.items()}
        self.opts = QueueOptions.parse(options)
        self.start = parse_bound(options, "starting", "earliest", streaming=False)
        self.end = parse_bound(options, "ending", "latest", streaming=False)
        self.arrow_schema = output_schema(schema)

    def partitions(self) -> Sequence[InputPartition]:
        store = open_store(self.opts.path)
        queues = self.opts.queues(store)
        check_named_queues(self.start, "starting", self.opts, queues)
        check_named_queues(self.end, "ending", self.opts, queues)
        start = resolve(store, self.opts, queues, self.start, "starting")
        end = resolve(store, self.opts, queues, self.end, "ending")
        for t, q in queues:
            s, e = start[t][str(q)], end[t][str(q)]
            lo, hi = max(store.get_min_offset_in_queue(t, q), 0), store.get_max_offset_in_queue(t, q)
            if s > e or e > hi:
                raise _native.InvalidConfigError(
                    f"topic {t!r} queue {q}: the read would go from offset {s} to {e}, but the queue holds [{lo}, {hi})"
                )
            if s < lo:
                lost(
                    self.opts.fail_on_data_loss, f"topic {t!r} queue {q}: offsets [{s}, {lo}) were deleted (retention)"
                )
        return split_ranges(plan_ranges(start, end), self.opts.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.opts, self.arrow_schema, partition)
