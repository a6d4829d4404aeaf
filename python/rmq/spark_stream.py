"""`spark.readStream.format("rocketmq")`: Structured Streaming over a store being written (see `rmq.spark_queues`
for offsets, options and partitions). Needs PySpark 4.2 or later, whose Python data sources take read limits
(`latestOffset(start, limit)`, `getDefaultReadLimit`) and Trigger.AvailableNow."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from rmq import _native
from rmq.spark_queues import (
    Offsets,
    QueueOptions,
    _int_option,
    canonical,
    lost,
    open_store,
    parse_bound,
    plan_ranges,
    read_partition,
    resolve,
    split_ranges,
)

if TYPE_CHECKING:
    from rmq.store import MessageStore


def admit(
    store: MessageStore, ranges: Sequence[tuple[str, str, int, int]], max_rows: int | None, max_bytes: int | None
) -> list[int]:
    """How many entries of each range `(topic, queue, start, end)` a trigger admits: about `max_rows` entries
    and `max_bytes` record bytes in all, shared among the queues in proportion to what each has waiting, and at
    least one entry of every queue that has one waiting (as Kafka's `maxOffsetsPerTrigger` never starves a small
    partition), so no queue waits forever behind others' backlogs and a message bigger than its share (or than
    `max_bytes`) does not stall the stream. The total can pass a limit by one entry per queue."""
    sizes = [e - s for _, _, s, e in ranges]
    total = sum(sizes)
    take = list(sizes)
    if max_rows is not None and total > max_rows:
        take = [max(1, n * max_rows // total) if n else 0 for n in sizes]
        left = max_rows - sum(take)
        for i, n in enumerate(sizes):
            if left <= 0:
                break
            if take[i] < n:
                take[i] += 1
                left -= 1
    if max_bytes is not None:
        wanted = sum(take)
        for i, (t, q, s, _) in enumerate(ranges):
            if take[i] == 0:
                continue
            budget = max_bytes * take[i] // wanted
            got = used = 0
            while got < take[i]:
                entries = store._cq_entries(t, int(q), s + got, min(1024, take[i] - got))
                if not entries:
                    break
                for _, _, n, _ in entries:
                    if used + n > budget and got > 0:
                        break
                    used += n
                    got += 1
                else:
                    continue
                break
            take[i] = got
        if total and not any(take):
            take[next(i for i, n in enumerate(sizes) if n)] = 1
    return take


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """`spark.readStream.format("rocketmq")`: micro-batches of queue ranges (see the module docs and the README's
    options table). Trigger.AvailableNow reads what the store held when the query started, in triggers bounded by
    the read limits."""

    def __init__(self, options: dict[str, str], schema: Any) -> None:
        from rmq.spark import output_schema

        options = {k.lower(): v for k, v in options.items()}
        self.opts = QueueOptions.parse(options)
        for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
            if name.lower() in options:
                raise _native.InvalidConfigError(f"option {name} is for batch reads only (as in Kafka)")
        self.start = parse_bound(options, "starting", "latest", streaming=True)
        rows = _int_option(options, "maxRecordsPerTrigger", 1)
        self.max_rows = rows if rows is not None else _int_option(options, "maxOffsetsPerTrigger", 1)
        self.max_bytes = _int_option(options, "maxBytesPerTrigger", 1)
        self.arrow_schema = output_schema(schema)
        self._target: Offsets | None = None

    def _latest(self, store: MessageStore | None = None) -> Offsets:
        store = store if store is not None else open_store(self.opts.path)
        return canonical(
            {
                t: {str(q): store.get_max_offset_in_queue(t, q) for q in store.queue_ids(t)}
                for t in store.topics()
                if self.opts.selects(t)
            }
        )

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 (Spark's names)
        store = open_store(self.opts.path)
        offsets = resolve(store, self.opts, self.opts.queues(store), self.start, "starting")
        for t, qs in (self.start.offsets or {}).items() if self.start.kind == "offsets" else ():
            if not self.opts.selects(t):
                raise _native.InvalidConfigError(f"startingOffsets names topic {t!r}, which this query does not read")
            for q, o in qs.items():  # a queue that does not exist yet starts where the JSON says
                offsets.setdefault(t, {}).setdefault(q, max(o, 0))
        return canonical(offsets)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        if self.max_rows is not None:
            return ReadMaxRows(self.max_rows)
        if self.max_bytes is not None:
            return ReadMaxBytes(self.max_bytes)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self._target = self._latest()

    def reportLatestOffset(self) -> dict[str, Any]:  # noqa: N802
        return self._latest()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802
        if isinstance(limit, ReadAllAvailable):
            max_rows, max_bytes = None, None
        elif isinstance(limit, ReadMaxRows):
            max_rows, max_bytes = limit.max_rows, self.max_bytes
        elif isinstance(limit, ReadMaxBytes):
            max_rows, max_bytes = self.max_rows, limit.max_bytes
        else:
            max_rows, max_bytes = self.max_rows, self.max_bytes
        store = open_store(self.opts.path)
        latest = self._latest(store)
        end: Offsets = {t: dict(qs) for t, qs in start.items()}
        ranges: list[tuple[str, str, int, int]] = []
        for t, qs in latest.items():
            for q, hi in qs.items():
                if self._target is not None:
                    cap = self._target.get(t, {}).get(q)
                    if cap is None:  # appeared after Trigger.AvailableNow took its target
                        continue
                    hi = min(hi, cap)
                s = start.get(t, {}).get(q)
                lo = max(store.get_min_offset_in_queue(t, int(q)), 0)
                if s is not None and hi < s:
                    lost(
                        self.opts.fail_on_data_loss,
                        f"topic {t!r} queue {q} now ends at offset {hi}, but the query had read up to {s} "
                        "(the store was replaced or its queue rebuilt); going on from its end",
                    )
                    end[t][q] = hi
                    continue
                if s is not None and s < lo:
                    gone = f"topic {t!r} queue {q}: offsets [{s}, {lo}) were deleted (retention)"
                    lost(self.opts.fail_on_data_loss, f"{gone} before the query read them")
                ranges.append((t, q, lo if s is None else max(s, lo), hi))
        for (t, q, s, _), n in zip(ranges, admit(store, ranges, max_rows, max_bytes), strict=True):
            end.setdefault(t, {})[q] = s + n
        return canonical(end)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        return split_ranges(plan_ranges(start, end), self.opts.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.opts, self.arrow_schema, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: the store is only read, and what a query has read is Spark's checkpoint."""
