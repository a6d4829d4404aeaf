"""Commitlog records as Arrow data, decoded in Rust (`src/columnar.rs`).

`read_split` yields `pyarrow.RecordBatch`es for the records starting in a byte range of one segment file;
`decode_records` turns a binary array of record bytes into a struct array. Rust hands over its buffers without
copying (`pyarrow.py_buffer` over `rmq._native.ArrowBuffer`); no Python object is made per row.

Requires pyarrow (installed with `pip install rmq[spark]`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from rmq import _native

#: Column names in schema order.
COLUMNS: tuple[str, ...] = tuple(_native.COLUMNS)

#: The Arrow type of every column (timestamps in microseconds, UTC, as Spark uses them).
ARROW_TYPES: dict[str, pa.DataType] = {
    "topic": pa.string(),
    "queue_id": pa.int32(),
    "queue_offset": pa.int64(),
    "commitlog_offset": pa.int64(),
    "store_size": pa.int32(),
    "flag": pa.int32(),
    "sys_flag": pa.int32(),
    "transaction_type": pa.string(),
    "born_timestamp": pa.timestamp("us", tz="UTC"),
    "store_timestamp": pa.timestamp("us", tz="UTC"),
    "born_host": pa.string(),
    "store_host": pa.string(),
    "reconsume_times": pa.int32(),
    "prepared_transaction_offset": pa.int64(),
    "body": pa.binary(),
    "properties": pa.map_(pa.string(), pa.string()),
    "tags": pa.string(),
    "keys": pa.list_(pa.string()),
    "uniq_key": pa.string(),
    "msg_id": pa.string(),
    "body_crc_ok": pa.bool_(),
}

#: Columns that can be null (a message without TAGS or UNIQ_KEY).
NULLABLE = frozenset({"tags", "uniq_key"})


def arrow_schema(columns: Sequence[str] = COLUMNS) -> pa.Schema:
    """The Arrow schema of the given columns."""
    return pa.schema([pa.field(c, ARROW_TYPES[c], nullable=c in NULLABLE) for c in columns])


def _buf(b: Any) -> pa.Buffer | None:
    return None if b is None else pa.py_buffer(b)


def _var(kind: pa.DataType, n: int, parts: tuple[Any, Any, Any, int]) -> pa.Array:
    offsets, data, validity, nulls = parts
    return pa.Array.from_buffers(kind, n, [_buf(validity), _buf(offsets), _buf(data)], null_count=nulls)


def _column(name: str, n: int, col: tuple[Any, ...], target: pa.DataType) -> pa.Array:
    kind = col[0]
    if kind in ("int", "long", "micros", "bool"):
        return pa.Array.from_buffers(target, n, [None, _buf(col[1])], null_count=0)
    if kind == "str":
        return _var(pa.string(), n, col[1])
    if kind == "bin":
        return _var(pa.binary(), n, col[1])
    offsets = pa.Array.from_buffers(pa.int32(), n + 1, [None, _buf(col[1])])
    if kind == "list":
        values = _var(pa.string(), offsets[-1].as_py(), col[2])
        arr = pa.ListArray.from_arrays(offsets, values)
    else:
        total = offsets[-1].as_py()
        arr = pa.MapArray.from_arrays(offsets, _var(pa.string(), total, col[2]), _var(pa.string(), total, col[3]))
    return arr if arr.type == target else arr.cast(target)


def _arrays(raw: tuple[int, Any, list[Any]], schema: pa.Schema) -> tuple[int, Any, list[pa.Array]]:
    n, row_valid, cols = raw
    by_name = dict(zip(COLUMNS, cols, strict=True))
    return n, row_valid, [_column(f.name, n, by_name[f.name], f.type) for f in schema]


def to_record_batch(raw: tuple[int, Any, list[Any]], schema: pa.Schema) -> pa.RecordBatch:
    """A batch from `_native.SplitReader`, as a RecordBatch of `schema` (whose names are a subset of COLUMNS)."""
    _, _, arrays = _arrays(raw, schema)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def read_split(
    path: str,
    base: int,
    start: int,
    end: int,
    *,
    schema: pa.Schema | None = None,
    topics: Sequence[str] | None = None,
    min_store_ms: int | None = None,
    max_store_ms: int | None = None,
    max_rows: int = 8192,
    skipped: list[tuple[int, int, str]] | None = None,
) -> Iterator[pa.RecordBatch]:
    """RecordBatches of the records in `[start, end)` of the segment `path` (first byte = commitlog offset
    `base`), where `start` is a split start of `_native.plan_commitlog` (a proven record start) and `end` the
    next one or the segment's data end; optionally only some topics and a store-time range (ms, inclusive).

    A record whose fields do not add up raises CorruptionError naming file and offset; when a `skipped` list is
    given it is left out instead and `(commitlog offset, length, reason)` is appended to the list."""
    if schema is not None and not isinstance(schema, pa.Schema):
        raise _native.ArgumentTypeError(f"schema must be a pyarrow.Schema or None, got {type(schema).__name__}")
    if topics is not None and (isinstance(topics, str | bytes) or not isinstance(topics, Iterable)):
        raise _native.ArgumentTypeError(f"topics must be a sequence of str or None, got {type(topics).__name__}")
    schema = schema if schema is not None else arrow_schema()
    reader = _native.SplitReader(
        path,
        base,
        start,
        end,
        columns=list(schema.names),
        topics=list(topics) if topics is not None else None,
        min_store_ms=min_store_ms,
        max_store_ms=max_store_ms,
        skip_damage=skipped is not None,
        max_rows=max_rows,
    )
    for raw in reader:
        if skipped is not None:
            skipped.extend(reader.take_skipped())
        yield to_record_batch(raw, schema)
    if skipped is not None:
        skipped.extend(reader.take_skipped())


def _binary_buffers(arr: pa.Array) -> tuple[Any, Any, Any, int, int]:
    if not isinstance(arr, pa.Array | pa.ChunkedArray) or not (
        pa.types.is_binary(arr.type)
        or pa.types.is_string(arr.type)
        or pa.types.is_large_binary(arr.type)
        or pa.types.is_large_string(arr.type)
    ):
        what = f"an Arrow {arr.type} array" if isinstance(arr, pa.Array | pa.ChunkedArray) else type(arr).__name__
        raise _native.ArgumentTypeError(f"expected an Arrow binary or string array, got {what}")
    if isinstance(arr, pa.ChunkedArray):
        arr = pa.concat_arrays(arr.chunks) if arr.num_chunks != 1 else arr.chunk(0)
    if pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type):
        arr = arr.cast(pa.binary() if pa.types.is_large_binary(arr.type) else pa.string())
    validity, offsets, data = arr.buffers()[:3]

    def raw(b: pa.Buffer | None, empty: bytes) -> memoryview:
        return memoryview(b if b is not None else empty).cast("B")  # Arrow exports signed bytes ("b")

    return raw(offsets, b"\0\0\0\0"), raw(data, b""), validity and raw(validity, b""), arr.offset, len(arr)


def decode_records(records: pa.Array, columns: Sequence[str] = COLUMNS, *, strict: bool = False) -> pa.StructArray:
    """Decodes a binary array of whole commitlog records into a struct array of `columns`. A null input row gives a
    null row; bytes that are not exactly one record give a null row too, or with `strict` a ValueError naming
    the row."""
    if isinstance(columns, str | bytes) or not isinstance(columns, Iterable):
        raise _native.ArgumentTypeError(f"columns must be a sequence of column names, got {type(columns).__name__}")
    offsets, data, validity, offset, length = _binary_buffers(records)
    raw = _native.decode_records(offsets, data, validity, offset, length, columns=list(columns), strict=strict)
    schema = arrow_schema(columns)
    n, row_valid, arrays = _arrays(raw, schema)
    mask = None
    if row_valid is not None:
        valid = pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(row_valid)])
        mask = pc.invert(valid)
    return pa.StructArray.from_arrays(arrays, fields=list(schema), mask=mask)


def decode_column(records: pa.Array, column: str) -> pa.Array:
    """One column of `decode_records` (null where the input row is null or not a record)."""
    arr: pa.Array = decode_records(records, [column]).flatten()[0]  # flatten applies the rows' validity
    return arr


def java_hash(strings: pa.Array) -> pa.Array:
    """Java `String.hashCode` of each string as int64 (a consume queue's tagsCode for an ordinary topic)."""
    offsets, data, validity, offset, length = _binary_buffers(strings)
    values, out_validity = _native.java_hash_strings(offsets, data, validity, offset, length)
    return pa.Array.from_buffers(pa.int64(), length, [_buf(out_validity), pa.py_buffer(values)])
