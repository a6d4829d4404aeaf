"""The Arrow C data interface between Rust and Python (`src/py/columnar.rs`, `rmq.arrow`): PyCapsules that pyarrow
imports without copying, released exactly once whatever is dropped first, and the one schema everything derives.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pyarrow as pa
import pytest

import rmq
from rmq import _native, arrow

pytest.importorskip("pyspark")

import rmq.spark as rs  # noqa: E402

CONFIG = rmq.StoreConfig(mapped_file_size_commit_log=4 << 20, message_index_enable=False)

#: The schema as it was written out by hand before it was derived (Spark's DDL), pinned.
DDL = (
    "topic string NOT NULL, queue_id int NOT NULL, queue_offset bigint NOT NULL, commitlog_offset bigint NOT NULL, "
    "store_size int NOT NULL, flag int NOT NULL, sys_flag int NOT NULL, transaction_type string NOT NULL, "
    "born_timestamp timestamp NOT NULL, store_timestamp timestamp NOT NULL, born_host string NOT NULL, "
    "store_host string NOT NULL, reconsume_times int NOT NULL, prepared_transaction_offset bigint NOT NULL, "
    "body binary NOT NULL, properties map<string,string> NOT NULL, tags string, keys array<string> NOT NULL, "
    "uniq_key string, msg_id string NOT NULL, body_crc_ok boolean NOT NULL"
)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2,000 messages of 1 KiB in one segment, with tags, keys and properties."""
    path = tmp_path_factory.mktemp("arrow") / "store"
    with rmq.MessageStore(path, CONFIG, start_services=False) as s:
        for i in range(2000):
            s.put("T", bytes([i % 251]) * 1024, queue_id=i % 4, tags="TagA" if i % 2 else None, keys=[f"k{i}", "x"],
                  properties={"n": str(i)})  # fmt: skip
    return path


def reader(store: Path, **kw: object) -> _native.SplitReader:
    (split,) = rs.plan_splits(store, 1 << 30)
    return _native.SplitReader(split.path, split.base, split.start, split.end, **kw)  # type: ignore[arg-type]


def test_one_schema_everywhere() -> None:
    rust = pa.schema(_native.arrow_schema())
    assert rust.names == list(arrow.COLUMNS) == rs.SCHEMA.names
    assert rust.equals(arrow.SCHEMA)
    assert rs.SCHEMA_DDL == DDL
    assert [f.name for f in rust if f.nullable] == ["tags", "uniq_key"]
    part = pa.schema(_native.arrow_schema(["keys", "topic"]))  # in COLUMNS order, whatever the order asked
    assert part.names == ["topic", "keys"] and part.field("keys").type == arrow.ARROW_TYPES["keys"]
    assert arrow.arrow_schema(["keys", "topic"]).names == ["keys", "topic"]
    with pytest.raises(rmq.InvalidArgumentError, match="unknown column"):
        _native.arrow_schema(["nope"])


def test_batches_import_without_copying(store: Path) -> None:
    batch = next(reader(store, columns=["body", "topic"]))
    assert len(batch) == 2000
    schema_capsule, array_capsule = batch.__arrow_c_array__()
    assert "arrow_schema" in repr(schema_capsule) and "arrow_array" in repr(array_capsule)
    a, b = pa.record_batch(batch), pa.record_batch(batch)  # each export shares the one set of Rust buffers
    assert a.equals(b) and a.schema.names == ["topic", "body"]
    assert a.column("body").buffers()[2].address == b.column("body").buffers()[2].address
    assert pa.schema(batch).names == ["topic", "body"]
    assert a.column("body")[7].as_py() == bytes([7]) * 1024


def test_stream_reads_the_split(store: Path) -> None:
    expected = pa.Table.from_batches([pa.record_batch(b) for b in reader(store, max_rows=300)])
    r = reader(store, max_rows=300)
    stream = pa.RecordBatchReader.from_stream(r)
    assert stream.schema.equals(pa.schema(r))
    got = stream.read_all()
    assert got.equals(expected) and got.num_rows == 2000 and len(got.to_batches()) == 7
    assert list(r) == []  # the stream took the reader over
    with pytest.raises(rmq.InvalidArgumentError, match="already read"):
        r.__arrow_c_stream__()


def test_stream_error_names_file_and_offset(tmp_path: Path, store: Path) -> None:
    (seg,) = (store / "commitlog").iterdir()
    offsets = pa.record_batch(next(reader(store, columns=["commitlog_offset"]))).column(0).to_pylist()
    data = bytearray(seg.read_bytes())
    data[offsets[1000] + 4] ^= 0xFF  # record 1000's magic code
    bad = tmp_path / seg.name
    bad.write_bytes(data)
    end = offsets[-1] + 2000  # inside the zero tail after the last record
    r = _native.SplitReader(str(bad), 0, 0, end, max_rows=100)
    with pytest.raises(pa.ArrowException, match=f"{seg.name} at offset {offsets[1000]}"):
        pa.RecordBatchReader.from_stream(r).read_all()
    r = _native.SplitReader(str(bad), 0, 0, end, max_rows=100)
    with pytest.raises(rmq.CorruptionError, match="offset"):  # iterated, the same error keeps rmq's type
        list(r)


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_release_in_any_order_frees_everything(store: Path) -> None:
    """~2 MB per round, 80 rounds, dropped in every order: exports never consumed, the producer dropped before its
    imports, imports dropped before the producer, streams abandoned half read. Leaked buffers would add ~160 MB."""

    def round_trip(i: int) -> None:
        r = reader(store, max_rows=1000)
        batch = next(r)
        if i % 4 == 0:
            batch.__arrow_c_array__()  # capsules never imported: their destructors release
            batch.__arrow_c_schema__()
        elif i % 4 == 1:
            imported = pa.record_batch(batch)
            del batch  # the producer first: the import keeps the buffers
            gc.collect()
            assert imported.column("body")[999].as_py() == bytes([999 % 251]) * 1024
        elif i % 4 == 2:
            imported = pa.record_batch(batch)
            del imported  # the import first
            assert pa.record_batch(batch).num_rows == 1000
        else:
            stream = pa.RecordBatchReader.from_stream(r)  # half read, then dropped
            assert stream.read_next_batch().num_rows == 1000
            del stream
        del r

    for i in range(8):  # warm up the allocators
        round_trip(i)
    gc.collect()
    before = rss()
    for i in range(80):
        round_trip(i)
    gc.collect()
    assert rss() - before < 60 << 20


def test_decode_records_and_java_hash_through_capsules(store: Path) -> None:
    with rmq.MessageStore(store, read_only=True) as s:
        raw = [bytes(s.read_raw(m.commitlog_offset)) for m in list(s.scan())[:5]]  # type: ignore[union-attr]
    arr = pa.array([raw[0], None, b"junk", *raw[1:]], pa.binary())
    decoded = arrow.decode_records(arr, ["keys", "topic"])
    assert decoded.type.names == ["keys", "topic"]
    assert decoded.is_null().to_pylist() == [False, True, True, False, False, False, False]
    assert decoded.field("keys")[0].as_py() == ["k0", "x"]
    native = _native.decode_records(*arrow._binary_buffers(arr), columns=["topic"])
    assert pa.array(native).null_count == 2
    hashed = pa.array(_native.java_hash_strings(*arrow._binary_buffers(pa.array(["TagA", None]))))
    assert hashed.type == pa.int64() and hashed.to_pylist() == [2598919, None]
