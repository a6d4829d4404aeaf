"""Commitlogs as DataFrames: the `rocketmq` Spark data source, the Arrow split reader under it, the Arrow UDFs and
the pipeline job, local and on a standalone cluster.

The reference is rmq's own scan (`MessageStore.scan`): every row must equal the message it reads, on a
multi-segment store with blank fillers, IPv6 hosts, v2 records and transactions, and on the store Apache
RocketMQ wrote (tests/fixtures). Splits cut anywhere (Hypothesis) lose and duplicate nothing.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import pickle
import shutil
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rmq
from rmq import arrow

pyspark = pytest.importorskip("pyspark")

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

import rmq.spark as rs  # noqa: E402

HERE = Path(__file__).parent
FIXTURE = HERE / "fixtures" / "rocketmq-5.3.1" / "store"
UTC = dt.UTC
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)

if shutil.which("java") is None:  # Spark needs a JVM: skip on a developer machine without one, fail on CI
    if os.environ.get("RMQ_REQUIRE_JAVA") == "1" or os.environ.get("CI", "").lower() in ("1", "true"):
        pytest.fail("java not found: the Spark tests need Java 17 (required on CI)", pytrace=False)
    pytest.skip("Spark needs Java", allow_module_level=True)


def ts(ms: int) -> dt.datetime:
    return EPOCH + dt.timedelta(milliseconds=ms)


def expected_row(m: Any) -> dict[str, Any]:
    """A message as rmq's scan reads it, in the DataFrame's terms."""
    return {
        "topic": m.topic,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "commitlog_offset": m.commitlog_offset,
        "store_size": m.store_size,
        "flag": m.flag,
        "sys_flag": m.sys_flag,
        "transaction_type": str(m.transaction_type),
        "born_timestamp": ts(m.born_timestamp),
        "store_timestamp": ts(m.store_timestamp),
        "born_host": m.born_host,
        "store_host": m.store_host,
        "reconsume_times": m.reconsume_times,
        "prepared_transaction_offset": m.prepared_transaction_offset,
        "body": m.body,
        "properties": dict(m.properties),
        "tags": m.tags,
        "keys": list(m.keys),
        "uniq_key": m.uniq_key,
        "msg_id": m.msg_id,
        "body_crc_ok": m.body_crc_ok,
    }


def normalise(row: dict[str, Any]) -> dict[str, Any]:
    """An Arrow or Spark row in the same terms (maps as dicts, timestamps aware UTC)."""
    out = dict(row)
    if isinstance(out.get("properties"), list):
        out["properties"] = dict(out["properties"])
    for k in ("born_timestamp", "store_timestamp"):
        if k in out and out[k].tzinfo is None:
            out[k] = out[k].replace(tzinfo=UTC)
    if "body" in out:
        out["body"] = bytes(out["body"])
    return out


def scan_rows(store_dir: Path, config: rmq.StoreConfig | None = None) -> list[dict[str, Any]]:
    copy = store_dir.parent / (store_dir.name + "-scan-copy")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(store_dir, copy)
    # Read-only: a writable open would start the schedule service, which delivers due delayed messages.
    with rmq.MessageStore(copy, config, read_only=True) if config else rmq.MessageStore(copy, read_only=True) as store:
        rows = [expected_row(m) for m in store.scan(0)]
    shutil.rmtree(copy)
    return rows


def read_all(store_dir: Path, split_size: int, **kw: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for s in rs.plan_splits(store_dir, split_size):
        for b in arrow.read_split(s.path, s.base, s.start, s.end, **kw):
            rows.extend(b.to_pylist())
    return [normalise(r) for r in rows]


# -- stores ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def matrix_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The interop write matrix (blank fillers, IPv6, v2, transactions, a batch), plus a body holding a whole
    record and the magic codes, written by rmq into 64 KiB segments."""
    from test_interop import CONFIG, write_matrix

    root = tmp_path_factory.mktemp("spark") / "store"
    write_matrix(root)
    # No services: the matrix's delayed message (level 3) stays scheduled, whenever this runs.
    with rmq.MessageStore(root, CONFIG, start_services=False) as store:
        first = bytes(next(iter(store.scan(0))).raw)
        trap = b"\xda\xa3\x20\xa7" * 8 + first + b"\xda\xa3\x20\xab\xcb\xd4\x31\x94" + first
        for i in range(30):
            store.put("Trap", trap, queue_id=i % 2, keys=f"trap-{i}")
    return root


@pytest.fixture(scope="module")
def matrix_rows(matrix_store: Path) -> list[dict[str, Any]]:
    from test_interop import CONFIG

    return scan_rows(matrix_store, CONFIG)


@pytest.fixture(scope="module")
def fixture_rows() -> list[dict[str, Any]]:
    from test_interop import CONFIG

    return scan_rows(FIXTURE, CONFIG)


# -- the split reader (no Spark) ---------------------------------------------------------------------------------


def test_store_has_what_the_issue_asks_for(matrix_store: Path, matrix_rows: list[dict[str, Any]]) -> None:
    segments = sorted((matrix_store / "commitlog").iterdir())
    blanks = 0
    for p in segments[:-1]:
        data = p.read_bytes()
        last = rs.plan_splits(matrix_store, 1 << 30)  # one split per segment
        assert last
        # A full segment ends in the blank filler: find it by walking the records.
        pos = 0
        while True:
            size, magic = struct.unpack_from(">iI", data, pos)
            if magic == 0xCBD43194:
                blanks += 1
                break
            pos += size
    assert len(segments) >= 6 and blanks == len(segments) - 1
    assert any(r["born_host"].startswith("[") for r in matrix_rows)
    assert any(r["store_host"].startswith("[") for r in matrix_rows)
    assert any(len(r["topic"]) > 127 for r in matrix_rows)
    assert {"PREPARED", "COMMIT", "ROLLBACK", "NOT_TYPE"} <= {r["transaction_type"] for r in matrix_rows}


@pytest.mark.parametrize("split_size", [1 << 30, 65536, 10_000, 997, 100])
def test_splits_read_exactly_rmqs_scan(matrix_store: Path, matrix_rows: list[dict[str, Any]], split_size: int) -> None:
    assert read_all(matrix_store, split_size) == matrix_rows


def test_rocketmq_written_store_reads_exactly_rmqs_scan(fixture_rows: list[dict[str, Any]]) -> None:
    assert len(fixture_rows) == 294
    for split_size in (1 << 30, 4096, 333):
        assert read_all(FIXTURE, split_size) == fixture_rows


def offsets_read(store_dir: Path, split_size: int) -> list[int]:
    """commitlog offsets read by all the splits of `split_size`."""
    got = []
    for s in rs.plan_splits(store_dir, split_size):
        for batch in arrow.read_split(s.path, s.base, s.start, s.end, schema=arrow.arrow_schema(["commitlog_offset"])):
            got.extend(batch.column(0).to_pylist())
    return got


def test_split_starts_are_record_starts_of_the_chain(matrix_store: Path, matrix_rows: list[dict[str, Any]]) -> None:
    """Every split starts at a record of the real log, the first one at or after its byte range; awkward sizes
    (one byte, a prime, around a record's size) lose and duplicate nothing."""
    want = [r["commitlog_offset"] for r in matrix_rows]
    segment = 65536
    for split_size in (1, 7, 97, 250, 251, 4096, 65535, 65536, 65537):
        # The first record at or after each multiple of the split size, per segment: record p starts a split when
        # a multiple lies in (previous record, p].
        expected = []
        for i, o in enumerate(want):
            prev = want[i - 1] if i else -1
            if prev < o - o % segment or (o % segment) // split_size > (prev % segment) // split_size:
                expected.append(o)
        assert [s.base + s.start for s in rs.plan_splits(matrix_store, split_size)] == expected, split_size
        assert offsets_read(matrix_store, split_size) == want, split_size


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(split_size=st.integers(1, 70_000))
def test_any_split_size_loses_and_duplicates_nothing(
    matrix_store: Path, matrix_rows: list[dict[str, Any]], split_size: int
) -> None:
    assert offsets_read(matrix_store, split_size) == [r["commitlog_offset"] for r in matrix_rows]


def test_trap_bodies_with_records_inside_are_read_as_bodies(matrix_store: Path) -> None:
    rows = read_all(matrix_store, 50)
    traps = [r for r in rows if r["topic"] == "Trap"]
    assert len(traps) == 30 and len({r["commitlog_offset"] for r in rows}) == len(rows)


def data_end(store_dir: Path, base: int) -> int:
    """Where the planner says the data of segment `base` ends."""
    plans = rmq._native.plan_commitlog(str(store_dir / "commitlog"), 1 << 30)
    return next((p[3] or [0])[-1] for p in plans if p[1] == base)  # the last split's end


def test_torn_tail_and_zero_segments_end_the_data(matrix_store: Path, tmp_path: Path) -> None:
    """A torn last record (as a crash leaves it) and a pre-allocated all-zero segment after the data are not
    messages; the reader stops where recovery would."""
    from test_interop import CONFIG

    copy = tmp_path / "torn"
    shutil.copytree(matrix_store, copy)
    expected = read_all(copy, 1 << 30)
    segs = sorted((copy / "commitlog").iterdir())
    last = segs[-1]
    base = int(last.name)
    end = arrow_end = data_end(copy, base)
    data = bytearray(last.read_bytes())
    # A torn record: header of a big record, nothing after it.
    data[end : end + 8] = struct.pack(">iI", 5000, 0xDAA320A7)
    last.write_bytes(bytes(data))
    (copy / "commitlog" / f"{base + 65536:020d}").write_bytes(bytes(65536))
    (copy / "abort").write_bytes(b"")  # as a crash leaves it: only then is a torn record possible
    assert data_end(copy, base) == arrow_end
    for split in (1 << 30, 1000):
        assert read_all(copy, split) == expected
    with rmq.MessageStore(copy, CONFIG, start_services=False) as store:  # recovery agrees
        assert store.max_offset == base + end


SPLIT_SIZES = (1 << 10, 4 << 10, 64 << 10, 1 << 20, 64 << 20, 1 << 30)


def outcome(store_dir: Path, split_size: int, *, skip: bool = False) -> tuple[Any, ...]:
    """What reading the whole store gives: its rows (commitlog offset, body CRC ok) and, when damage is skipped,
    what was left out; or the error, by type, file and offset."""
    try:
        splits, damage = rs.plan(store_dir, split_size, skip_damage=skip)
        rows: list[tuple[int, bool]] = []
        left_out = [(d.path, d.offset, d.length) for d in damage]
        for s in splits:
            skipped: list[tuple[int, int, str]] | None = [] if skip else None
            schema = arrow.arrow_schema(["commitlog_offset", "body_crc_ok"])
            for b in arrow.read_split(s.path, s.base, s.start, s.end, schema=schema, skipped=skipped):
                rows.extend(zip(b.column(0).to_pylist(), b.column(1).to_pylist(), strict=True))
            left_out.extend((s.path, o, n) for o, n, _ in skipped or [])
        return ("rows", tuple(rows), tuple(sorted(left_out)))
    except rmq.CorruptionError as e:
        return ("error", e.path, e.offset)


def damage_targets(store_dir: Path, rows: list[dict[str, Any]]) -> dict[str, int]:
    """Commitlog offsets to damage: the first, second and middle records of a 4 KiB split of the first segment,
    the first and a middle record of the last segment, and the first segment's blank filler."""
    seg = 65536
    first_seg = [r for r in rows if r["commitlog_offset"] < seg]
    starts = [s.base + s.start for s in rs.plan_splits(store_dir, 4096) if s.base == 0]
    split_start = starts[2]
    in_split = [r["commitlog_offset"] for r in first_seg if split_start <= r["commitlog_offset"] < starts[3]]
    assert len(in_split) >= 3
    last_base = rows[-1]["commitlog_offset"] // seg * seg
    last_seg = [r["commitlog_offset"] for r in rows if r["commitlog_offset"] >= last_base]
    assert len(last_seg) >= 3
    blank = first_seg[-1]["commitlog_offset"] + first_seg[-1]["store_size"]
    return {
        "first of a split": in_split[0],
        "second of a split": in_split[1],
        "middle of a split": in_split[len(in_split) // 2],
        "first of the last segment": last_seg[0],
        "middle of the last segment": last_seg[len(last_seg) // 2],
        "blank filler": blank,
    }


# Field -> (position in the record, bytes written there given the old bytes).
FIELDS: dict[str, tuple[int, Any]] = {
    "length": (0, lambda old: struct.pack(">i", struct.unpack(">i", old)[0] + 24)),
    "magic": (4, lambda old: b"\0\0\0\0"),
    "crc": (8, lambda old: bytes([old[0] ^ 0x01, *old[1:]])),
    "offset": (32, lambda old: bytes([*old[:3], old[3] ^ 0x10])),  # the low half of PHYSICALOFFSET
}


def test_damage_matrix_gives_the_same_rows_or_error_at_every_split_size(
    matrix_store: Path, matrix_rows: list[dict[str, Any]], tmp_path: Path
) -> None:
    """Length, magic, CRC and offset fields of records at awkward places, damaged one at a time: at every split
    size from 1 KiB to 1 GiB the reader gives the same rows, or the same CorruptionError naming the damaged
    file and an offset in it; skipping damage gives the same rows and the same record of what was left out."""
    targets = damage_targets(matrix_store, matrix_rows)
    all_offsets = [(r["commitlog_offset"], r["body_crc_ok"]) for r in matrix_rows]
    seen = set()
    for where, offset in targets.items():
        for field, (at, change) in FIELDS.items():
            if where == "blank filler" and field in ("crc", "offset"):
                continue  # a blank has only TOTALSIZE and MAGICCODE
            copy = tmp_path / f"{where}-{field}".replace(" ", "_")
            shutil.copytree(matrix_store, copy)
            seg = copy / "commitlog" / f"{offset // 65536 * 65536:020d}"
            data = bytearray(seg.read_bytes())
            pos = offset % 65536 + at
            data[pos : pos + 4] = change(bytes(data[pos : pos + 4]))
            seg.write_bytes(bytes(data))
            strict = {outcome(copy, size) for size in SPLIT_SIZES}
            assert len(strict) == 1, (where, field, strict)
            got = strict.pop()
            seen.add(got[0])
            if got[0] == "error":
                assert got[1] == str(seg) and int(seg.name) <= got[2] < int(seg.name) + 65536, (where, field, got)
            elif field == "crc":  # an older segment's record with a damaged body is read, flagged
                assert got[1] == tuple((o, ok and o != offset) for o, ok in all_offsets), (where, field)
            else:
                assert got[1] == tuple(all_offsets), (where, field)  # a blank's length is not used
            lenient = {outcome(copy, size, skip=True) for size in SPLIT_SIZES}
            assert len(lenient) == 1, (where, field, lenient)
            rows, left_out = lenient.pop()[1:]
            if got[0] == "error":  # what is left out is exactly the damaged region, and it is recorded
                assert left_out and all(p == str(seg) for p, _, _ in left_out), (where, field)
                kept = {o for o, _ in rows}
                lost = [o for o, _ in all_offsets if o not in kept]
                assert all(any(d <= o < d + n for _, d, n in left_out) for o in lost), (where, field)
                assert lost or where == "blank filler", (where, field)
            else:
                assert (rows, left_out) == (got[1], ()), (where, field)
            shutil.rmtree(copy)
    assert seen == {"rows", "error"}


def test_a_missing_or_truncated_middle_segment_is_never_skipped_silently(
    matrix_store: Path, matrix_rows: list[dict[str, Any]], tmp_path: Path
) -> None:
    """Offsets no file holds between two segments (a segment file deleted, or one cut short): FAILFAST names the
    gap (file and offset), at every split size; skipping damage reports the whole gap, and every message lost
    lies in what is reported."""
    seg = 65536
    assert len(list((matrix_store / "commitlog").iterdir())) >= 3
    for case in ("missing", "short"):
        copy = tmp_path / case
        shutil.copytree(matrix_store, copy)
        middle = copy / "commitlog" / f"{seg:020d}"
        if case == "missing":
            middle.unlink()
            want = ("error", str(middle), seg)
        else:
            os.truncate(middle, seg // 2)
            want = ("error", str(middle), None)
        for size in SPLIT_SIZES:
            got = outcome(copy, size)
            assert got[:2] == want[:2] and (want[2] is None or got[2] == want[2]), (case, size, got)
        lenient = {outcome(copy, size, skip=True) for size in SPLIT_SIZES}
        assert len(lenient) == 1, case
        rows, left_out = lenient.pop()[1:]
        kept = {o for o, _ in rows}
        lost = [r["commitlog_offset"] for r in matrix_rows if r["commitlog_offset"] not in kept]
        assert lost and all(seg <= o < 2 * seg for o in lost), case
        assert all(any(d <= o < d + n for _, d, n in left_out) for o in lost), (case, left_out)
        assert max(d + n for _, d, n in left_out) == 2 * seg, (case, left_out)  # up to the next segment
        with pytest.raises(rmq.CorruptionError, match="missing" if case == "missing" else "truncated"):
            rs.plan(copy, 1 << 20)


def test_a_record_whose_fields_do_not_add_up_is_reported_by_its_reader(matrix_store: Path, tmp_path: Path) -> None:
    """Header in the chain, body length wrong: the task reading it fails naming it, or skips exactly it."""
    copy = tmp_path / "bodylen"
    shutil.copytree(matrix_store, copy)
    seg = sorted((copy / "commitlog").iterdir())[0]
    data = bytearray(seg.read_bytes())
    size = struct.unpack_from(">i", data, 0)[0]
    second = size
    body_len_at = second + 84  # v1, IPv4 hosts: BODYLENGTH follows RECONSUMETIMES and PREPAREDTRANSACTIONOFFSET
    data[body_len_at : body_len_at + 4] = struct.pack(">i", struct.unpack_from(">i", data, body_len_at)[0] + 1)
    seg.write_bytes(bytes(data))
    for size_ in SPLIT_SIZES:
        assert outcome(copy, size_)[:3] == ("error", str(seg), second)
        rows, left_out = outcome(copy, size_, skip=True)[1:]
        assert left_out == ((str(seg), second, struct.unpack_from(">i", data, second)[0]),)
        assert second not in {o for o, _ in rows}


def forge(victim_store: Path, config: rmq.StoreConfig, split: int, count: int) -> list[int]:
    """Puts `count` messages whose bodies end with a complete record (topic "Forged", body CRC right) that names
    the offset it lands at, a multiple of `split`, and ends exactly where the next real record starts.
    Returns the forged offsets."""
    probe_dir = victim_store.parent / (victim_store.name + "-probe")
    with rmq.MessageStore(probe_dir, config) as probe:
        template = bytes(probe.read_raw(probe.put("Forged", b"phantom row", queue_id=0, keys="evil").wrote_offset))
        body = b"\xab" * 300
        raw = bytes(probe.read_raw(probe.put("Victim", body, queue_id=1).wrote_offset))
    shutil.rmtree(probe_dir)
    body_pos = raw.index(body)
    tail = len(raw) - body_pos - len(body)  # topic and properties after the body: same length every time
    # The template's properties length field: the k with 2 bytes = k before the last k bytes.
    props = next(k for k in range(len(template)) if struct.unpack(">H", template[-k - 2 : len(template) - k])[0] == k)
    forged_at = []
    with rmq.MessageStore(victim_store, config) as store:
        for _ in range(count):
            end = store.max_offset
            body_start = end + body_pos
            target = -(-(body_start + 16) // split) * split  # the next split boundary inside the body
            extra = tail + 40  # the forged record's properties swallow the real record's tail
            forged = bytearray(template[: len(template) - props - 2])
            forged += struct.pack(">H", props + extra) + template[len(template) - props :] + b"x" * extra
            struct.pack_into(">i", forged, 0, len(forged))
            struct.pack_into(">q", forged, 28, target)
            victim_body = b"\0" * (target - body_start) + bytes(forged[: len(forged) - tail])
            r = store.put("Victim", victim_body, queue_id=1)
            assert r.wrote_offset == end and end + r.wrote_bytes == target + len(forged)  # the forgery is exact
            forged_at.append(target)
    return forged_at


def test_forged_records_at_split_boundaries_never_become_rows(tmp_path: Path) -> None:
    """Bodies holding complete records with the right PHYSICALOFFSET, aimed at split boundaries and ending where
    the next real record starts, are read as the bodies they are, at every split size."""
    config = rmq.StoreConfig(mapped_file_size_commit_log=1 << 20)
    store_dir = tmp_path / "forged"
    with rmq.MessageStore(store_dir, config) as store:
        for i in range(50):
            store.put("Honest", b"h" * (i * 7), queue_id=0)
    forged = forge(store_dir, config, 1024, 20) + forge(store_dir, config, 64 << 10, 3)
    seg = store_dir / "commitlog" / f"{0:020d}"
    data = seg.read_bytes()
    for f in forged:  # each forgery is a record naming its own offset, as the old resynchronisation accepted
        size, magic = struct.unpack_from(">iI", data, f)
        assert magic == 0xDAA320A7 and struct.unpack_from(">q", data, f + 28)[0] == f
        assert struct.unpack_from(">q", data, f + size + 28)[0] == f + size or f + size == len(data.rstrip(b"\0"))
    want = [r["commitlog_offset"] for r in scan_rows(store_dir, config)]
    assert len(want) == 50 + 23
    for split_size in (*SPLIT_SIZES, 512, 333):
        assert offsets_read(store_dir, split_size) == want, split_size
    topics = {r["topic"] for r in read_all(store_dir, 1024)}
    assert topics == {"Honest", "Victim"}


def test_filters_and_column_subsets(matrix_store: Path, matrix_rows: list[dict[str, Any]]) -> None:
    times = sorted(r["store_timestamp"] for r in matrix_rows)
    lo, hi = times[len(times) // 4], times[3 * len(times) // 4]
    ms = lambda t: (t - EPOCH) // dt.timedelta(milliseconds=1)  # noqa: E731
    got = read_all(matrix_store, 5000, topics=["TopicB", "Trap"], min_store_ms=ms(lo), max_store_ms=ms(hi))
    assert got == [r for r in matrix_rows if r["topic"] in ("TopicB", "Trap") and lo <= r["store_timestamp"] <= hi]
    cols = ["msg_id", "body", "keys"]
    got = read_all(matrix_store, 5000, schema=arrow.arrow_schema(cols))
    assert got == [{c: r[c] for c in cols} for r in matrix_rows]
    with pytest.raises(ValueError, match="unknown column"):
        rmq._native.SplitReader("x", 0, 0, 1, columns=["nope"])


def test_decode_records_from_a_binary_column(matrix_rows: list[dict[str, Any]], matrix_store: Path) -> None:
    from test_interop import CONFIG

    copy = matrix_store.parent / "decode-copy"
    shutil.copytree(matrix_store, copy, dirs_exist_ok=True)
    with rmq.MessageStore(copy, CONFIG, read_only=True) as store:
        raws = [bytes(m.raw) for m in store.scan(0)]
    arr = pa.array([*raws[:50], None, b"not a record", raws[0] + b"x"], pa.binary())
    out = arrow.decode_records(arr.slice(0, 53))  # a slice: the array offset is honoured
    rows = out.to_pylist()
    assert [normalise(r) for r in rows[:50]] == matrix_rows[:50]
    assert rows[50] is None and rows[51] is None and rows[52] is None
    with pytest.raises(ValueError, match="row 51 is not a commitlog record"):
        arrow.decode_records(arr, strict=True)
    sliced = arrow.decode_column(arr.slice(10, 5), "msg_id").to_pylist()
    assert sliced == [r["msg_id"] for r in matrix_rows[10:15]]
    assert arrow.decode_column(arr, "msg_id").to_pylist()[50:] == [None, None, None]
    hashes = arrow.java_hash(pa.array(["TagA", None, "标签", "😀", ""])).to_pylist()
    assert hashes == [2598919, None, 857175, 1772899, 0]  # spec 16.4


# -- Spark, local ---------------------------------------------------------------------------------------------


# The `spark` fixture (one local[2] session for the whole run) is in conftest.py.


def spark_rows(df: Any) -> list[dict[str, Any]]:
    return sorted((normalise(r.asDict(recursive=True)) for r in df.collect()), key=lambda r: r["commitlog_offset"])


def test_dataframe_equals_rmqs_scan(spark: SparkSession, matrix_store: Path, matrix_rows: list[dict[str, Any]]) -> None:
    df = rs.read(spark, matrix_store, splitSize=20_000)
    assert df.rdd.getNumPartitions() > len(list((matrix_store / "commitlog").iterdir()))  # segments are cut
    assert spark_rows(df) == matrix_rows
    assert df.schema == rs.SCHEMA


def test_dataframe_of_the_rocketmq_store(spark: SparkSession, fixture_rows: list[dict[str, Any]]) -> None:
    assert spark_rows(spark.read.format("rocketmq").load(str(FIXTURE))) == fixture_rows
    commitlog_only = spark.read.format("rocketmq").option("splitSize", 5000).load(str(FIXTURE / "commitlog"))
    assert spark_rows(commitlog_only) == fixture_rows


def test_pushed_filters_give_what_spark_would(spark: SparkSession, matrix_store: Path) -> None:
    """Opt-in pushdown (`pushdown=true` and Spark's setting) converts each filter exactly; every query below
    pushes a filter, so none inherits another's reader (see the sequences test for why that matters)."""
    spark.conf.set(PUSHDOWN_CONF, "true")
    try:
        check_pushed_filters(spark, matrix_store)
    finally:
        spark.conf.unset(PUSHDOWN_CONF)


PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def check_pushed_filters(spark: SparkSession, matrix_store: Path) -> None:
    df = rs.read(spark, matrix_store, splitSize=30_000, pushdown="true")
    plain = rs.read(spark, matrix_store, splitSize=30_000)
    t = sorted(r[0] for r in df.select("store_timestamp").collect())[100]
    queries = [
        (F.col("topic") == "TopicB"),
        F.col("topic").isin("TopicA", "Trap"),
        (F.col("store_timestamp") > F.lit(t)),
        (F.col("store_timestamp") >= F.lit(t)) & (F.col("topic") == "TopicA"),
        (F.col("store_timestamp") < F.lit(t)),
        (F.col("store_timestamp") <= F.lit(t)),
        (F.col("store_timestamp") == F.lit(t)),
        (F.col("store_timestamp") == F.lit(t + dt.timedelta(microseconds=1))),
        (F.col("topic") == "TopicA") & (F.col("topic") == "TopicB"),
    ]
    for q in queries:
        pushed = rs.read(spark, matrix_store, splitSize=30_000, pushdown="true").where(q)
        assert spark_rows(pushed) == spark_rows(plain.where(q)), str(q)

    def plan(frame: Any) -> str:
        return str(frame.where(F.col("topic") == "TopicB")._jdf.queryExecution().executedPlan().toString())

    assert "Filter (" in plan(plain) and "Filter (" not in plan(df)  # pushed into the source
    reader = rs.RocketMQPushdownReader({"path": str(matrix_store)}, rs.SCHEMA)
    left = list(reader.pushFilters([rs.EqualTo(("topic",), "A"), rs.EqualTo(("queue_id",), 1)]))
    assert left == [rs.EqualTo(("queue_id",), 1)] and reader.topics == ["A"]


@pytest.fixture(scope="module")
def three_topics(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """300 messages, 100 in each of TopicA, TopicB and TopicC, interleaved."""
    root = tmp_path_factory.mktemp("three") / "store"
    with rmq.MessageStore(root) as store:
        for i in range(300):
            if i % 30 == 0:
                time.sleep(0.002)  # store times spread over several milliseconds, for the time filters
            store.put(f"Topic{'ABC'[i % 3]}", b"m%d" % i, queue_id=i % 4)
    return root


def sequences(spark: SparkSession, load: Any) -> dict[str, Any]:
    """The issue's query sequences; `load()` gives the DataFrame each step runs on (the same one or a fresh one)."""
    a, b, c = (F.col("topic") == t for t in ("TopicA", "TopicB", "TopicC"))
    future = F.col("store_timestamp") > F.lit(dt.datetime(2030, 1, 1))
    out: dict[str, Any] = {}
    df = load()
    out["filter, then unfiltered count"] = (df.count(), df.where(a).count(), load().count())
    df = load()
    df.where(a).count()
    out["groupBy after a filtered query"] = sorted(tuple(r) for r in load().groupBy("topic").count().collect())
    df = load()
    df.where(a).count()
    df.createOrReplaceTempView("msgs")
    out["temp view"] = (spark.sql("select count(*) from msgs").first()[0], load().where(b).count())
    df = load()
    out["two filters, then all"] = (df.where(a).count(), load().where(b).count(), load().count())
    df = load()
    out["time filter, then topic filter"] = (df.where(future).count(), load().where(c).count(), load().count())
    return out


EXPECTED_SEQUENCES = {
    "filter, then unfiltered count": (300, 100, 300),
    "groupBy after a filtered query": [("TopicA", 100), ("TopicB", 100), ("TopicC", 100)],
    "temp view": (300, 100),
    "two filters, then all": (100, 100, 300),
    "time filter, then topic filter": (0, 100, 300),
}


@pytest.mark.parametrize("pushdown_conf", ["false", "true"])
def test_query_sequences_return_what_is_on_disk(spark: SparkSession, three_topics: Path, pushdown_conf: str) -> None:
    """Every sequence of queries gives what Spark gives with pushdown off, on the same DataFrame and on fresh
    ones, whether or not the session has Python filter pushdown on."""
    spark.conf.set(PUSHDOWN_CONF, pushdown_conf)
    try:
        same = spark.read.format("rocketmq").load(str(three_topics))
        assert sequences(spark, lambda: same) == EXPECTED_SEQUENCES
        assert sequences(spark, lambda: spark.read.format("rocketmq").load(str(three_topics))) == EXPECTED_SEQUENCES
    finally:
        spark.conf.unset(PUSHDOWN_CONF)


def toy_source() -> type:
    """Ten rows, k = 'a' in six of them; `pushFilters` honours EqualTo on k. Defined in a function so that
    cloudpickle ships it by value to Spark's Python workers."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, EqualTo

    class ToyReader(DataSourceReader):
        def __init__(self) -> None:
            self.k: str | None = None

        def pushFilters(self, filters: list[Any]) -> Iterator[Any]:  # noqa: N802
            for f in filters:
                if isinstance(f, EqualTo) and f.attribute == ("k",):
                    self.k = f.value
                else:
                    yield f

        def read(self, partition: Any) -> Iterator[tuple[str, int]]:
            for i in range(10):
                k = "a" if i < 6 else "b"
                if self.k is None or k == self.k:
                    yield (k, i)

    class Toy(DataSource):
        @classmethod
        def name(cls) -> str:
            return "rmq_toy"

        def schema(self) -> str:
            return "k string, v int"

        def reader(self, schema: Any) -> DataSourceReader:
            return ToyReader()

    return Toy


def test_upstream_pushdown_leak_guard(spark: SparkSession) -> None:
    """PySpark 4.1-4.3 keep the read function planned with a query's pushed filters on the relation's
    PythonDataSourceV2 (`setReadInfo`) and reuse it for later scans that push nothing. This guard shows the
    upstream behaviour with a ten-line source; when it fails, upstream changed: revisit the `pushdown` default
    in rmq.spark (RocketMQDataSource) and the README."""
    spark.dataSource.register(toy_source())
    spark.conf.set(PUSHDOWN_CONF, "true")
    try:
        df = spark.read.format("rmq_toy").load()
        counts = [df.count(), df.where("k = 'a'").count(), df.count()]
        fresh = spark.read.format("rmq_toy").load().count()
    finally:
        spark.conf.unset(PUSHDOWN_CONF)
    counts.append(df.count())  # the leaked reader stays with the DataFrame, pushdown off or not
    assert counts == [10, 6, 6, 6], f"PySpark {pyspark.__version__} no longer leaks pushed filters: {counts}"
    assert fresh == 10


def test_filter_options_belong_to_the_dataframe(spark: SparkSession, three_topics: Path) -> None:
    """`topics` and the store-time options filter in the reader, and every query on that DataFrame sees them."""
    rows = [r for r in scan_rows(three_topics)]
    times = sorted(r["store_timestamp"] for r in rows)
    lo, hi = times[50], times[250]
    df = rs.read(
        spark, three_topics, topics="TopicA, TopicC", storeTimestampFrom=lo.isoformat(),
        storeTimestampTo=int((hi - EPOCH) / dt.timedelta(milliseconds=1)),
    )  # fmt: skip
    want = [r for r in rows if r["topic"] in ("TopicA", "TopicC") and lo <= r["store_timestamp"] < hi]
    assert 0 < len(want) < 200
    assert df.count() == len(want) and df.where(F.col("topic") == "TopicA").count() > 0
    assert spark_rows(df) == sorted(want, key=lambda r: r["commitlog_offset"]) and df.count() == len(want)
    swapped = {"storeTimestampFrom": "2026-01-02", "storeTimestampTo": "2026-01-01"}  # a user's swap, not "none"
    for bad in (
        {"mode": "LENIENT"},
        {"storeTimestampFrom": "yesterday"},
        {"splitSize": "0"},
        {"pushdown": "yes"},
        swapped,
    ):
        with pytest.raises(Exception, match="InvalidConfigError"):
            rs.read(spark, three_topics, **bad).count()


def test_damage_through_spark_fails_or_is_left_out_and_recorded(
    spark: SparkSession, matrix_store: Path, matrix_rows: list[dict[str, Any]], tmp_path: Path
) -> None:
    """Spark's options for bad input: FAILFAST (the default) fails naming file and offset; PERMISSIVE,
    DROPMALFORMED, ignoreCorruptFiles and badRecordsPath leave the damage out, at every split size, and
    badRecordsPath records where."""
    copy = tmp_path / "damaged"
    shutil.copytree(matrix_store, copy)
    middle = [r for r in matrix_rows if 65536 <= r["commitlog_offset"] < 2 * 65536]
    victim = middle[len(middle) // 2]["commitlog_offset"]
    seg = copy / "commitlog" / f"{65536:020d}"
    data = bytearray(seg.read_bytes())
    data[victim - 65536 + 4 : victim - 65536 + 8] = b"\0\0\0\0"
    seg.write_bytes(bytes(data))
    with pytest.raises(Exception, match=f"CorruptionError.*{seg}.*offset {victim}"):
        rs.read(spark, copy).count()
    # Only the damaged record is left out: reading goes on at the next record that validates completely.
    kept = [r["commitlog_offset"] for r in matrix_rows if r["commitlog_offset"] != victim]
    after = min(r["commitlog_offset"] for r in matrix_rows if r["commitlog_offset"] > victim)
    for options in (
        {"mode": "PERMISSIVE"}, {"mode": "dropmalformed"}, {"ignoreCorruptFiles": "true"},
        {"badRecordsPath": str(tmp_path / "bad")},
    ):  # fmt: skip
        for split in (8192, 1 << 30):  # eight splits per 64 KiB segment, and one for all
            df = rs.read(spark, copy, splitSize=split, **options)
            assert sorted(r[0] for r in df.select("commitlog_offset").collect()) == kept, (options, split)
    record = json.loads((tmp_path / "bad" / "bad_records" / f"{victim:020d}.json").read_text())
    assert record["path"] == str(seg) and record["offset"] == victim and record["length"] == after - victim
    assert "bad magic" in record["reason"]
    # A read never writes into the store it reads: a badRecordsPath whose bad_records/ lies inside it is refused.
    before = sorted(str(p.relative_to(copy)) for p in copy.rglob("*"))
    for inside in (copy, copy / "commitlog"):
        with pytest.raises(Exception, match="InvalidArgumentError.*badRecordsPath"):
            rs.read(spark, copy, badRecordsPath=str(inside)).count()
    assert sorted(str(p.relative_to(copy)) for p in copy.rglob("*")) == before


def test_a_store_without_records_reads_as_no_rows(spark: SparkSession, tmp_path: Path) -> None:
    """No segment, only an all-zero segment, only blank fillers: no split is planned, and Spark then hands the
    reader its stand-in partition; the read gives no rows, as `rmq scan` does, and writes nothing."""
    from test_interop import CONFIG

    stores = {"fresh": tmp_path / "fresh", "bare": tmp_path / "bare", "zeros": tmp_path / "zeros"}
    rmq.MessageStore(stores["fresh"], CONFIG, start_services=False).close()
    for name in ("bare", "zeros", "blanks"):
        stores[name] = tmp_path / name
        (stores[name] / "commitlog").mkdir(parents=True)
    (stores["zeros"] / "commitlog" / f"{0:020d}").write_bytes(bytes(65536))
    blank = struct.pack(">iI", 65536, 0xCBD43194) + bytes(65536 - 8)
    for base in (0, 65536):
        (stores["blanks"] / "commitlog" / f"{base:020d}").write_bytes(blank)
    for name, store in stores.items():
        before = sorted((str(p), p.stat().st_size) for p in store.rglob("*"))
        assert scan_rows(store) == [], name
        for options in ({}, {"mode": "PERMISSIVE", "splitSize": "4096"}):
            df = rs.read(spark, store, **options)
            assert df.count() == 0 and df.collect() == [], (name, options)
        assert sorted((str(p), p.stat().st_size) for p in store.rglob("*")) == before, name


@pytest.mark.parametrize(
    ("kind", "options", "refused"),
    [
        ("batch", {"topicPattern": ".*", "storeTimestampFrom": "1"}, "storeTimestampFrom"),
        ("batch", {"startingOffsets": "earliest", "storeTimestampTo": "1"}, "storeTimestampTo"),
        ("batch", {"topicPattern": ".*", "mode": "bogus"}, "mode"),
        ("batch", {"topicPattern": ".*", "splitSize": "0"}, "splitSize"),
        ("batch", {"topicPattern": ".*", "badRecordsPath": "/tmp"}, "badRecordsPath"),
        ("batch", {"topicPattern": ".*", "maxRecordsPerTrigger": "5"}, "maxRecordsPerTrigger"),
        ("batch", {"maxRecordsPerTrigger": "0"}, "maxRecordsPerTrigger"),
        ("batch", {"maxBytesPerTrigger": "10"}, "maxBytesPerTrigger"),
        ("batch", {"failOnDataLoss": "false"}, "failOnDataLoss"),
        ("batch", {"startingOffsetsByTimestampStrategy": "latest"}, "startingOffsetsByTimestampStrategy"),
        ("stream", {"splitSize": "4096"}, "splitSize"),
        ("stream", {"storeTimestampFrom": "1"}, "storeTimestampFrom"),
        ("stream", {"mode": "PERMISSIVE"}, "mode"),
    ],
)
def test_an_option_the_kind_of_read_does_not_read_is_refused(
    tmp_path: Path, kind: str, options: dict[str, str], refused: str
) -> None:
    """Each kind of read (by commitlog splits, by queue offsets, streaming) refuses the options only another reads,
    rather than ignoring them (a time filter ignored returned every row)."""
    source = rs.RocketMQDataSource({"path": str(tmp_path), **options})
    with pytest.raises(rmq.InvalidConfigError, match=f"option {refused} is not read by"):
        source.reader(rs.SCHEMA) if kind == "batch" else source.streamReader(rs.SCHEMA).initialOffset()


def test_session_never_overrides_the_launchers_master(monkeypatch: pytest.MonkeyPatch) -> None:
    """The master `session()` sets: the argument; else none when spark-submit (a gateway JVM, or --master in
    PYSPARK_SUBMIT_ARGS) or a running context decided it; else $SPARK_MASTER; else local[*]."""
    for var in ("PYSPARK_GATEWAY_PORT", "PYSPARK_SUBMIT_ARGS", "SPARK_MASTER"):
        monkeypatch.delenv(var, raising=False)
    from pyspark import SparkContext

    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    assert not rs._launcher_master()
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--master spark://h:7077 pyspark-shell")
    assert rs._launcher_master()
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "pyspark-shell")
    assert not rs._launcher_master()
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "40000")
    assert rs._launcher_master()


def test_timestamp_literals_convert_exactly_across_a_dst_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark passes timestamp filter values as naive local datetimes (`fromtimestamp`); in the repeated hour of a
    DST change only a fold-aware conversion gets the instant back."""
    from pyspark.sql.types import TimestampType

    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    try:
        start = int((dt.datetime(2026, 10, 24, 23, 0, tzinfo=UTC) - EPOCH).total_seconds()) * 1_000_000
        for step in range(0, 4 * 3600, 450):
            us = start + step * 1_000_000 + 123_456
            assert rs._micros(TimestampType().fromInternal(us)) == us
            assert rs._micros(ts(us // 1000)) == us // 1000 * 1000
    finally:
        monkeypatch.undo()
        time.tzset()


def test_user_schema_selects_columns(
    spark: SparkSession, matrix_store: Path, matrix_rows: list[dict[str, Any]]
) -> None:
    df = spark.read.format("rocketmq").schema("commitlog_offset bigint, keys array<string>").load(str(matrix_store))
    assert spark_rows(df) == [{"commitlog_offset": r["commitlog_offset"], "keys": r["keys"]} for r in matrix_rows]
    bad = spark.read.format("rocketmq").schema("topic int").load(str(matrix_store))
    with pytest.raises(Exception, match="is not one of the rocketmq source"):
        bad.collect()


def test_udfs_over_binary_columns(spark: SparkSession, matrix_store: Path, matrix_rows: list[dict[str, Any]]) -> None:
    from test_interop import CONFIG

    copy = matrix_store.parent / "udf-copy"
    shutil.copytree(matrix_store, copy, dirs_exist_ok=True)
    with rmq.MessageStore(copy, CONFIG, read_only=True) as store:  # (writable, it would deliver its delayed one)
        raws = [(bytes(m.raw),) for m in store.scan(0)]
    df = spark.createDataFrame(raws + [(b"junk",), (None,)], "record binary")
    out = df.select(
        F.expr("rmq_decode(record)").alias("m"),
        F.expr("rmq_msg_id(record)").alias("id"),
        F.expr("rmq_properties(record)").alias("p"),
        F.expr("rmq_tags_hash(rmq_decode(record).tags)").alias("h"),
    ).collect()
    decoded = [normalise(r["m"].asDict(recursive=True)) for r in out[: len(raws)]]
    assert decoded == matrix_rows
    assert [r["id"] for r in out[: len(raws)]] == [m["msg_id"] for m in matrix_rows]
    assert [r["p"] for r in out[: len(raws)]] == [m["properties"] for m in matrix_rows]
    tag_a = [r["h"] for r, m in zip(out, matrix_rows, strict=False) if m["tags"] == "TagA"]
    assert tag_a and set(tag_a) == {2598919}
    assert out[-2]["m"] is None and out[-1]["m"] is None and out[-1]["id"] is None
    # SQL, over Spark's binaryFile reader: a segment file is one record-bearing blob; decode its first record.
    seg = sorted((copy / "commitlog").iterdir())[0]
    files = spark.read.format("binaryFile").load(str(seg))
    size = struct.unpack_from(">i", seg.read_bytes(), 0)[0]
    files.createOrReplaceTempView("segments")
    first = spark.sql(f"select rmq_decode(substring(content, 1, {size})).topic as t from segments").collect()
    assert first[0]["t"] == matrix_rows[0]["topic"]


def test_everything_shipped_to_executors_pickles(matrix_store: Path) -> None:
    from pyspark import cloudpickle  # what Spark ships closures and partitions with

    source = rs.RocketMQDataSource({"path": str(matrix_store), "pushdown": "true"})
    reader = source.reader(rs.SCHEMA)
    list(reader.pushFilters([rs.EqualTo(("topic",), "TopicA")]))
    for obj in [source, reader, *reader.partitions()]:
        back = pickle.loads(cloudpickle.dumps(obj))
        assert vars(back) == vars(obj)
    r2 = pickle.loads(cloudpickle.dumps(reader))
    rows = [row for p in r2.partitions() for b in r2.read(p) for row in b.to_pylist()]
    assert rows and {r["topic"] for r in rows} == {"TopicA"}
    for f in rs.udfs().values():
        assert pickle.loads(cloudpickle.dumps(f.func))  # the Python function Spark ships


def test_pipeline_local(
    spark: SparkSession, matrix_store: Path, matrix_rows: list[dict[str, Any]], tmp_path: Path
) -> None:
    result = rs.run_pipeline(spark, matrix_store, tmp_path / "out")
    check_pipeline(result, tmp_path / "out", matrix_rows)


def check_pipeline(result: dict[str, Any], out: Path, rows: list[dict[str, Any]]) -> None:
    topics = {r["topic"]: r for r in result["summary_topics"]}
    assert set(topics) == {r["topic"] for r in rows}
    for t, s in topics.items():
        mine = [r for r in rows if r["topic"] == t]
        assert s["messages"] == len(mine) and s["bytes"] == sum(r["store_size"] for r in mine)
    queues = {(r["topic"], r["queue_id"]): r["messages"] for r in result["summary_queues"]}
    assert sum(queues.values()) == len(rows)
    days = {p.name for p in (out / "messages").glob("topic=*/day=*")}
    assert days and all(d.startswith("day=20") for d in days)
    parts = list((out / "messages").glob("topic=TopicA/day=*/*.parquet"))
    assert parts
    import pyarrow.parquet as pq

    total = sum(pq.read_metadata(p).num_rows for p in (out / "messages").glob("topic=*/day=*/*.parquet"))
    assert total == len(rows)
    assert all(r["rank"] <= 5 for r in result["summary_top_keys"])
