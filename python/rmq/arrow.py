"""Commitlog records as Arrow data, decoded in Rust (`src/columnar.rs`).

`read_split` yields `pyarrow.RecordBatch`es for the records starting in a byte range of one segment file;
`decode_records` turns a binary array of record bytes into a struct array. Rust hands its arrays over through the
Arrow C data interface (PyCapsules: `rmq._native.ArrowArray.__arrow_c_array__`, `SplitReader.__arrow_c_stream__`,
`ArrowSchema.__arrow_c_schema__`), so pyarrow imports them without copying; no Python object is made per row.

Requires pyarrow (installed with `pip install rmq[spark]`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from rmq import _native

#: Column names in schema order.
COLUMNS: tuple[str, ...] = tuple(_native.COLUMNS)

#: The Arrow schema of every column, as Rust defines it (`_native.arrow_schema`): timestamps in microseconds, UTC,
#: as Spark uses them.
SCHEMA: pa.Schema = pa.schema(_native.arrow_schema())

#: The Arrow type of every column.
ARROW_TYPES: dict[str, pa.DataType] = {f.name: f.type for f in SCHEMA}

#: Columns that can be null (a message without TAGS or UNIQ_KEY).
NULLABLE = frozenset(f.name for f in SCHEMA if f.nullable)


def arrow_schema(columns: Sequence[str] = COLUMNS) -> pa.Schema:
    """The Arrow schema of the given columns, in the order given."""
    return pa.schema([SCHEMA.field(c) for c in columns])


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
    for batch in reader:
        if skipped is not None:
            skipped.extend(reader.take_skipped())
        yield _as_schema(pa.record_batch(batch), schema)
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
    decoded: pa.StructArray = pa.array(
        _native.decode_records(offsets, data, validity, offset, length, columns=list(columns), strict=strict)
    )
    order = list(columns)
    if decoded.type.names != order:  # Rust decodes in COLUMNS order; give the caller's order
        fields = [decoded.type.field(c) for c in order]
        arrays = [decoded.field(c) for c in order]
        decoded = pa.StructArray.from_arrays(arrays, fields=fields, mask=decoded.is_null())
    return decoded


def decode_column(records: pa.Array, column: str) -> pa.Array:
    """One column of `decode_records` (null where the input row is null or not a record)."""
    arr: pa.Array = decode_records(records, [column]).flatten()[0]  # flatten applies the rows' validity
    return arr


def java_hash(strings: pa.Array) -> pa.Array:
    """Java `String.hashCode` of each string as int64 (a consume queue's tagsCode for an ordinary topic)."""
    offsets, data, validity, offset, length = _binary_buffers(strings)
    hashed: pa.Array = pa.array(_native.java_hash_strings(offsets, data, validity, offset, length))
    return hashed


def _as_schema(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """`batch` (Rust's columns, in COLUMNS order, Rust's nullability) as a batch of `schema`: the same columns,
    in `schema`'s order and with its nullability (Spark's must match its own exactly)."""
    if batch.schema.equals(schema):
        return batch
    return pa.RecordBatch.from_arrays([batch.column(f.name) for f in schema], schema=schema)
