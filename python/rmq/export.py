"""`rmq export` and `rmq replay`: the messages of a store, selected by filters, written out (JSON lines,
Parquet, CSV) or appended into another store.

The rows are the Spark source's (`rmq.arrow.read_split` over the splits `rmq._native.plan_commitlog` plans,
one row per record with the same columns), so `export --format parquet` writes what
`spark.read.format("rocketmq")` reads. The source store is only read: the commitlog is read with positioned
reads, nothing is opened for writing. No broker, no caps.

Requires pyarrow (`pip install rmq[spark]`).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import errno
import functools
import io
import json
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

import rmq
from rmq import _args, _native
from rmq._paths import create_temporary, output_file, refuse_overlap
from rmq._progress import Progress
from rmq.arrow import arrow_schema, read_split
from rmq.store import SCHEDULE_TOPIC

FORMATS = ("jsonl", "parquet", "csv")

#: Properties the broker sets on every stored message; replay leaves them to the destination store.
BROKER_PROPERTIES = frozenset({"CLUSTER", "MIN_OFFSET", "MAX_OFFSET", "WAIT", "TAGS", "KEYS"})


@dataclasses.dataclass(frozen=True)
class Selection:
    """Which messages: every given filter must hold. Times are store times; offsets are commitlog offsets
    (`to_offset` exclusive)."""

    topics: Sequence[str] | None = None
    queue_id: int | None = None
    tag: str | None = None
    key: str | None = None
    msg_id: str | None = None
    since: dt.datetime | None = None
    until: dt.datetime | None = None
    grep: str | None = None
    from_offset: int | None = None
    to_offset: int | None = None

    def __post_init__(self) -> None:
        if self.topics is not None:
            if isinstance(self.topics, str | bytes) or not isinstance(self.topics, Sequence):
                raise rmq.ArgumentTypeError(
                    f"topics must be a sequence of str or None, got {type(self.topics).__name__}"
                )
            object.__setattr__(self, "topics", tuple(_args.text(t, "topics[]") for t in self.topics))
        if self.queue_id is not None:
            object.__setattr__(self, "queue_id", _args.queue_id(self.queue_id))
        for name in ("from_offset", "to_offset"):
            v = getattr(self, name)
            if v is not None:
                object.__setattr__(self, name, _args.integer(v, name, 0, 2**63 - 1))
        for name in ("tag", "key", "msg_id", "grep"):
            v = getattr(self, name)
            if v is not None:
                _args.text(v, name)
        for name in ("since", "until"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, dt.datetime):
                raise rmq.ArgumentTypeError(f"{name} must be a datetime or None, got {type(v).__name__}")
        if self.grep is not None:
            try:
                re.compile(self.grep.encode())
            except (re.error, OverflowError, RecursionError) as e:
                raise rmq.InvalidArgumentError(f"--grep {self.grep!r} is not a regular expression: {e}") from e


def _store_micros(t: dt.datetime) -> pa.Scalar:
    t = t if t.tzinfo is not None else t.astimezone()
    return pa.scalar(t.astimezone(dt.UTC), type=pa.timestamp("us", tz="UTC"))


def _mask(batch: pa.RecordBatch, sel: Selection) -> pa.Array | None:
    masks: list[pa.Array] = []
    if sel.topics is not None:
        masks.append(pc.is_in(batch["topic"], value_set=pa.array(list(sel.topics), pa.string())))
    if sel.queue_id is not None:
        masks.append(pc.equal(batch["queue_id"], sel.queue_id))
    if sel.tag is not None:
        masks.append(pc.fill_null(pc.equal(batch["tags"], sel.tag), False))
    if sel.key is not None:
        keys = batch["keys"].to_pylist()
        uniq = batch["uniq_key"].to_pylist()
        masks.append(pa.array([sel.key in (k or []) or u == sel.key for k, u in zip(keys, uniq, strict=True)]))
    if sel.msg_id is not None:
        masks.append(
            pc.or_(pc.equal(batch["msg_id"], sel.msg_id), pc.fill_null(pc.equal(batch["uniq_key"], sel.msg_id), False))
        )
    if sel.since is not None:
        masks.append(pc.greater_equal(batch["store_timestamp"], _store_micros(sel.since)))
    if sel.until is not None:
        masks.append(pc.less(batch["store_timestamp"], _store_micros(sel.until)))
    if sel.grep is not None:
        pattern = re.compile(sel.grep.encode())
        masks.append(pa.array([pattern.search(b) is not None for b in batch["body"].to_pylist()]))
    if sel.from_offset is not None:
        masks.append(pc.greater_equal(batch["commitlog_offset"], sel.from_offset))
    if sel.to_offset is not None:
        masks.append(pc.less(batch["commitlog_offset"], sel.to_offset))
    if not masks:
        return None
    out = masks[0]
    for m in masks[1:]:
        out = pc.and_(out, m)
    return out


def commitlog_dir(store: Path) -> Path:
    """The commitlog directory of a store root (or the directory itself if it holds segments)."""
    return store / "commitlog" if (store / "commitlog").is_dir() else store


def batches(
    store: str | os.PathLike[str],
    sel: Selection = Selection(),
    *,
    skipped: list[tuple[int, int, str]] | None = None,
    progress: Progress | None = None,
) -> Iterator[pa.RecordBatch]:
    """The selected messages as Arrow record batches (the Spark source's columns), in commitlog order.
    Damage raises `CorruptionError` naming file and offset, unless a `skipped` list is given: then the damaged
    bytes are left out and listed there."""
    root = Path(store)
    schema = arrow_schema()
    topics = list(sel.topics) if sel.topics is not None else None
    min_ms = None if sel.since is None else int(_store_micros(sel.since).value // 1000)
    max_ms = None if sel.until is None else int(_store_micros(sel.until).value // 1000)
    for seg, base, starts, ends, bad in _native.plan_commitlog(
        str(commitlog_dir(root)), 64 << 20, skip_damage=skipped is not None
    ):
        if skipped is not None:
            skipped.extend(bad)
        for start, end in zip(starts, ends, strict=True):
            if sel.to_offset is not None and base + start >= sel.to_offset:
                continue
            if sel.from_offset is not None and base + end <= sel.from_offset:
                continue
            for batch in read_split(
                seg,
                base,
                start,
                end,
                schema=schema,
                topics=topics,
                min_store_ms=min_ms,
                max_store_ms=max_ms,
                skipped=skipped,
            ):
                mask = _mask(batch, sel)
                batch = batch if mask is None else batch.filter(mask)
                if progress is not None:
                    progress.update(messages=batch.num_rows)
                if batch.num_rows:
                    yield batch
            if progress is not None:
                progress.update(nbytes=end - start)


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _ms(t: dt.datetime) -> int:
    return (t - _EPOCH) // dt.timedelta(milliseconds=1)


def _json_row(row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in row.items():
        if k == "body":
            out["body_base64"] = base64.b64encode(v).decode("ascii")
        elif isinstance(v, dt.datetime):
            out[k] = _ms(v)
        elif k == "properties":
            out[k] = dict(v)
        else:
            out[k] = v
    return out


def _flat(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch with columns CSV can hold: body as base64, properties as JSON, keys joined by spaces."""
    cols, names = [], []
    for name, col in zip(batch.schema.names, batch.columns, strict=True):
        if name == "body":
            name, col = "body_base64", pa.array([base64.b64encode(b).decode() for b in col.to_pylist()], pa.string())
        elif name == "properties":
            col = pa.array([json.dumps(dict(p), ensure_ascii=False) for p in col.to_pylist()], pa.string())
        elif name == "keys":
            col = pa.array([" ".join(k or []) for k in col.to_pylist()], pa.string())
        cols.append(col)
        names.append(name)
    return pa.RecordBatch.from_arrays(cols, names=names)


def _noting_damage(rows: Iterator[pa.RecordBatch], damaged: list[int] | None) -> Iterator[pa.RecordBatch]:
    """`rows`, with the commitlog offsets of the rows whose body fails its CRC appended to `damaged`."""
    for batch in rows:
        if damaged is not None:
            bad = pc.invert(batch.column("body_crc_ok"))
            damaged.extend(batch.column("commitlog_offset").filter(bad).to_pylist())
        yield batch


def export(
    store: str | os.PathLike[str],
    out: str | os.PathLike[str],
    fmt: str = "jsonl",
    sel: Selection = Selection(),
    *,
    skipped: list[tuple[int, int, str]] | None = None,
    damaged: list[int] | None = None,
    progress: Progress | None = None,
) -> int:
    """Writes the selected messages of `store` to the file `out` in `fmt` (`jsonl`: one JSON object per message,
    body as `body_base64`, times in ms; `parquet`: the Spark source's schema; `csv`: body base64, properties
    as JSON, keys space-separated). Written to a temporary name and renamed, so `out` is whole or absent.
    `out` may not lie inside the store, nor be anything but a regular file (a FIFO, a device: the rename would
    replace it): `InvalidArgumentError`, nothing written. A symlink stays: the file it names is written. Returns
    the number of messages. A message whose body fails its CRC is written with `body_crc_ok` false (what is left
    of it may still help), and its commitlog offset is appended to `damaged` when that list is given."""
    if fmt not in FORMATS:
        raise rmq.InvalidArgumentError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    out = Path(out)
    refuse_overlap(store, (out, out.with_name(f".{out.name}.tmp")), "the export file")
    if out.is_dir():
        raise rmq.InvalidArgumentError(f"the export file {str(out)!r} is a directory: give a file name")
    target = output_file(out, "the export file")  # `out`, or the file it names when it is a symlink
    tmp = target.with_name(f".{target.name}.tmp")
    refuse_overlap(store, (target, tmp), "the export file")
    if not target.parent.is_dir():
        raise rmq.InvalidArgumentError(
            f"the directory of the export file {str(out)!r} does not exist: create {str(target.parent)!r} first"
        )
    count = 0
    raw = open(create_temporary(tmp, "the export file"), "wb")  # closed by the `with` below, or in `finally`
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            with raw as sink, pq.ParquetWriter(sink, arrow_schema()) as writer:
                for batch in _noting_damage(batches(store, sel, skipped=skipped, progress=progress), damaged):
                    writer.write_batch(batch)
                    count += batch.num_rows
        elif fmt == "csv":
            import pyarrow.csv as pacsv

            writer_csv: pacsv.CSVWriter | None = None
            with raw as f:
                for batch in _noting_damage(batches(store, sel, skipped=skipped, progress=progress), damaged):
                    flat = _flat(batch)
                    if writer_csv is None:
                        writer_csv = pacsv.CSVWriter(f, flat.schema)
                    writer_csv.write_batch(flat)
                    count += batch.num_rows
                if writer_csv is not None:
                    writer_csv.close()
        else:
            with io.TextIOWrapper(raw, encoding="utf-8") as f:
                for batch in _noting_damage(batches(store, sel, skipped=skipped, progress=progress), damaged):
                    for row in batch.to_pylist():
                        f.write(json.dumps(_json_row(row), ensure_ascii=False) + "\n")
                    count += batch.num_rows
        tmp.replace(target)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT) and not isinstance(e, rmq.RmqError):
            raise rmq.DiskFullError(
                e.errno,
                f"no space left on the device for the export file {str(out)!r}; nothing was written: free space "
                "and retry",
                str(out),
            ) from e
        raise
    finally:
        raw.close()
        tmp.unlink(missing_ok=True)
    return count


def replay(
    src: str | os.PathLike[str],
    dst: rmq.MessageStore,
    sel: Selection = Selection(),
    *,
    to_topic: str | None = None,
    skipped: list[tuple[int, int, str]] | None = None,
    damaged: list[int] | None = None,
    progress: Progress | None = None,
    resume: bool = False,
    left_out: dict[str, int] | None = None,
) -> int:
    """Appends the selected messages of the store `src` to `dst` (an open, writable store), in commitlog order:
    same body, queue id, tags, keys, flag, born host and time, reconsume times and user properties (UNIQ_KEY
    included, so message ids stay); the destination gives them new offsets and store times. `to_topic` sends
    them to another topic (a DLQ back to its topic). Returns the number appended. `dst` may not be `src`, nor
    lie inside it or hold it (`InvalidArgumentError`, nothing appended).

    What a broker's store holds besides messages is not appended as if it were one. PREPARED and ROLLBACK
    records are skipped. A delayed message waiting in `SCHEDULE_TOPIC_XXXX` (at or after its level's offset in
    the source's `config/delayOffset.json`) is appended as a delayed message again, for its real topic and
    queue (or `to_topic`), at its level: the destination delivers it once the level's delay has passed after
    the replay; one already delivered is not (its delivered copy, in its topic, is the message). A delivered
    copy keeps its properties but `DELAY`, so the destination does not delay it a second time, and a committed
    transaction's message its properties but `TRAN_MSG`, so it is not stored as a half message again. Records
    of the other topics producers may not send to (the transaction half and op topics, ...) are left out, with
    `to_topic` too (export reads them). What was left out goes to `left_out` (topic: count) when given.

    A message whose body fails its CRC is never appended: the destination would store the damaged body under a
    new, matching CRC, and the damage would be gone from sight. Every other message is appended; then the
    damaged ones' commitlog offsets go to `damaged` when that list is given, and otherwise `CorruptionError`
    names how many there were and where the first one is.

    `resume` continues a replay that stopped part way (killed, interrupted, a full disk): the selected messages
    up to and including the first one that is the destination's newest message (same topic, queue, body, born
    host and time, and UNIQ_KEY when the source message has one) are not appended again; with an empty
    destination everything is. When no selected message is the destination's newest, nothing is appended and
    `InvalidArgumentError` says so (the destination was not filled by this replay, or with other filters). A
    message the source holds twice (a producer's retry) may be appended once more. The destination should run
    no services while it is filled (`start_services=False`, as `rmq replay` opens it): a delayed message its
    schedule service delivered would be its newest message, and no source message is that."""
    refuse_overlap(src, (dst.path,), "the destination store")
    count = 0
    bad: list[int] = []
    delivered = dict(_native.load_delay_offsets(src))
    waiting = _newest_message(dst) if resume else None
    for batch in batches(src, sel, skipped=skipped, progress=progress):
        for row in batch.to_pylist():
            if row["transaction_type"] in ("PREPARED", "ROLLBACK"):
                continue  # not messages a consumer sees
            put = _replayed(row, to_topic, delivered)
            if put is None:
                if left_out is not None:
                    left_out[row["topic"]] = left_out.get(row["topic"], 0) + 1
                continue
            if waiting is not None:
                if _replayed_as(row, put, waiting):
                    waiting = None
                continue
            if not row["body_crc_ok"]:
                bad.append(row["commitlog_offset"])
                continue
            topic, queue_id, props = put
            dst.put(
                topic,
                row["body"],
                queue_id=queue_id,
                tags=row["tags"],
                keys=" ".join(row["keys"]) if row["keys"] else None,
                properties=props,
                flag=row["flag"],
                born_host=row["born_host"],
                born_timestamp=_ms(row["born_timestamp"]),
                reconsume_times=row["reconsume_times"],
            )
            count += 1
    if waiting is not None:
        raise _native.InvalidArgumentError(
            f"cannot resume: the destination's newest message (commitlog offset {waiting.commitlog_offset}, "
            f"msgId {waiting.uniq_key or waiting.msg_id}) is not among the selected messages of {src}; "
            "nothing was appended"
        )
    if damaged is not None:
        damaged.extend(bad)
    elif bad:
        raise rmq.CorruptionError(damaged_bodies(len(bad), bad[0], "were not replayed"))
    return count


@functools.cache
def _producers_send_to(topic: str) -> bool:
    try:
        _native.check_producer_topic(topic)
    except rmq.InvalidTopicError:
        return False
    return True


def _replayed(
    row: dict[str, Any], to_topic: str | None, delivered: dict[int, int]
) -> tuple[str, int, dict[str, str]] | None:
    """The (topic, queue id, properties) `put` takes to replay the source row `row`, or None for a record that
    is not replayed (see `replay`)."""
    props = {k: v for k, v in row["properties"] if k not in BROKER_PROPERTIES}
    if row["topic"] == SCHEDULE_TOPIC:
        level = row["queue_id"] + 1
        if row["queue_offset"] < delivered.get(level, 0):
            return None  # delivered: the copy in its topic is the message
        real_topic, real_qid = props.pop("REAL_TOPIC", None), props.pop("REAL_QID", None)
        if real_topic is None or real_qid is None or not (real_qid.isascii() and real_qid.lstrip("-").isdigit()):
            return None  # the schedule service could never deliver it either
        props["DELAY"] = str(level)
        return (to_topic if to_topic is not None else real_topic), int(real_qid), props
    if not _producers_send_to(row["topic"]):
        return None
    # What made the source's broker route it, which it then carried on: a record in a topic with DELAY is a
    # delivered copy, not to be delayed again; one with TRAN_MSG a committed transaction's message, not a half.
    props.pop("DELAY", None)
    props.pop("TRAN_MSG", None)
    return (to_topic if to_topic is not None else row["topic"]), row["queue_id"], props


def _newest_message(store: rmq.MessageStore) -> rmq.MessageExt | None:
    """The message at the end of `store`'s log (read from the start of the newest segment holding one)."""
    starts = sorted(int(Path(p).name) for p in store.commitlog_files())
    for start in reversed(starts):
        last = None
        for m in store.scan(max(start, store.min_offset)):
            last = m
        if last is not None:
            return last
    return None


def _replayed_as(row: dict[str, Any], put: tuple[str, int, dict[str, str]], m: rmq.MessageExt) -> bool:
    """Whether `m` is what replaying the source row `row` as `put` appends (compared on what a replay copies). A
    delayed message is stored in the destination's `SCHEDULE_TOPIC_XXXX`, its topic and queue as REAL_TOPIC and
    REAL_QID."""
    topic, queue_id, props = put
    where: tuple[str | int | None, ...] = (topic, queue_id)
    placed: tuple[str | int | None, ...] = (m.topic, m.queue_id)
    if "DELAY" in props:
        where = (SCHEDULE_TOPIC, int(props["DELAY"]) - 1, topic, str(queue_id))
        placed = (m.topic, m.queue_id, m.properties.get("REAL_TOPIC"), m.properties.get("REAL_QID"))
    return (
        where == placed
        and row["born_host"] == m.born_host
        and _ms(row["born_timestamp"]) == m.born_timestamp
        and (row["uniq_key"] is None or row["uniq_key"] == m.uniq_key)
        and row["body"] == m.body
    )


def damaged_bodies(n: int, first: int, what: str) -> str:
    """One sentence on `n` messages whose body fails its CRC, the first at commitlog offset `first`."""
    return f"{n} message(s) have a body that fails its CRC (the first at commitlog offset {first}) and {what}"
