"""An export (and the Spark source: both read through `rmq._native.plan_commitlog`) says what an open says about
where a store's data ends: the remains of a killed writer's append end the data, and bytes no kill leaves there
(a record damaged after a clean close, a record the consume queues already point at) are damage, an error
naming file and offset, never a quiet end of the data that drops the messages they held.

Found tried as a user would: `rmq export` of a cleanly closed store whose last record had one bit flipped
exported the other 99 messages and exited 0 (`rmq check` and the open called it damage), and an export of a
store killed during a `put_batch` failed with "corrupt data" where the open discards the torn append."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rmq
from conftest import live_writer, small_config
from rmq.export import batches

N, BATCH = 30, 4
#: One 64 KiB segment holds every message; small derived files.
CONFIG = small_config(mapped_file_size_commit_log=64 << 10)


def _put(store: rmq.MessageStore, start: int, n: int) -> None:
    for i in range(start, start + n):
        store.put("T", b"m" * (60 + i % 7), tags="A", keys=f"k{i}", queue_id=i % 2)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """`before`: N messages, closed; `after`: the same store after a `put_batch` of BATCH more, closed; and
    where that batch starts and ends in the commitlog."""
    root = tmp_path_factory.mktemp("tail")
    before, after = root / "before", root / "after"
    with rmq.MessageStore(before, CONFIG) as s:
        _put(s, 0, N)
    shutil.copytree(before, after)
    with rmq.MessageStore(after, CONFIG) as s:
        r = s.put_batch("T", [b"b" * 80] * BATCH, tags="B", keys=[f"b{i}" for i in range(BATCH)])
        start = r.wrote_offset
        end = r.wrote_offset + r.wrote_bytes
    return {"before": before, "after": after, "start": start, "end": end}


SEG = "commitlog/00000000000000000000"


def _make(stores: dict[str, object], dst: Path, *, killed: bool, abort: bool) -> int:
    """A store to try: `after` as closed (with an abort file if `abort`: a crash after everything was
    dispatched, or a live store), or, `killed`, as a writer killed during the batch leaves it: the batch's
    bytes without its commit word (its first 8 bytes), consume queues, index and checkpoint from before it,
    and the abort file. Returns where the batch starts."""
    after, before = Path(str(stores["after"])), Path(str(stores["before"]))
    start = int(str(stores["start"]))
    shutil.copytree(before if killed else after, dst)
    seg = bytearray((after / SEG).read_bytes())
    if killed:
        seg[start : start + 8] = bytes(8)
    (dst / SEG).write_bytes(seg)
    if killed or abort:
        (dst / "abort").write_bytes(b"")
    return start


def _exported(store: Path) -> list[int] | str:
    try:
        return [o for b in batches(store) for o in b.column("commitlog_offset").to_pylist()]
    except rmq.CorruptionError:
        return "damage"


def _opened(store: Path) -> list[int] | str:
    try:
        with rmq.MessageStore(store, CONFIG, read_only=True) as s:
            return [m.commitlog_offset for m in s.scan()]
    except rmq.CorruptionError:
        return "damage"


def test_a_killed_put_batch_exports_what_the_open_keeps(stores: dict[str, object], tmp_path: Path) -> None:
    start = _make(stores, tmp_path / "s", killed=True, abort=True)
    got = _exported(tmp_path / "s")
    assert got == _opened(tmp_path / "s")
    assert isinstance(got, list) and len(got) == N and max(got) < start  # the torn batch is not data


@pytest.mark.parametrize(
    ("where", "abort"),
    [("magic", False), ("magic", True), ("body", False), ("body", True), ("after-the-end", False)],
)  # with an abort file, bytes after every dispatched record are a torn append (the next test)
def test_damage_at_the_end_of_the_data_is_an_error(
    stores: dict[str, object], tmp_path: Path, where: str, abort: bool
) -> None:
    """Closed cleanly, nothing explains non-zero bytes after the end; with an abort file, the consume queues
    point at the batch, so it was committed: a flipped byte there is damage either way."""
    store = tmp_path / "s"
    _make(stores, store, killed=False, abort=abort)
    start, end = int(str(stores["start"])), int(str(stores["end"]))
    seg = bytearray((store / SEG).read_bytes())
    last = start + (end - start) // BATCH * (BATCH - 1)  # the batch's last record
    at = {"magic": last + 5, "body": seg.index(b"b" * 80, last) + 40, "after-the-end": end + 100}[where]
    seg[at] ^= 0x10
    (store / SEG).write_bytes(seg)
    assert _opened(store) == "damage"
    assert _exported(store) == "damage"
    r = subprocess.run(
        [sys.executable, "-c", "import sys; from rmq.cli import main; sys.exit(main())", "export", str(store),
         str(tmp_path / "out.jsonl")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "corrupt data" in r.stderr and SEG in r.stderr, r.stderr
    assert not (tmp_path / "out.jsonl").exists()


def test_bytes_after_the_end_of_a_crashed_store_are_a_torn_append(stores: dict[str, object], tmp_path: Path) -> None:
    store = tmp_path / "s"
    _make(stores, store, killed=False, abort=True)
    end = int(str(stores["end"]))
    seg = bytearray((store / SEG).read_bytes())
    seg[end + 100 : end + 110] = b"x" * 10
    (store / SEG).write_bytes(seg)
    assert _exported(store) == _opened(store) != "damage"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    killed=st.booleans(),
    abort=st.booleans(),
    edits=st.lists(
        st.tuples(st.integers(-400, 900), st.sampled_from(["flip", "zero8", "junk"]), st.integers(1, 255)),
        max_size=3,
    ),
)
def test_the_export_and_the_open_agree_on_the_end_of_the_data(
    stores: dict[str, object], tmp_path_factory: pytest.TempPathFactory, killed: bool, abort: bool,
    edits: list[tuple[int, str, int]],
) -> None:  # fmt: skip
    """Any edit of the bytes around the last append (a killed one or a finished one, with or without an abort
    file): the export returns exactly the records the open keeps, or both call it damage."""
    store = tmp_path_factory.mktemp("agree") / "s"
    start = _make(stores, store, killed=killed, abort=abort)
    seg = bytearray((store / SEG).read_bytes())
    for rel, kind, v in edits:
        at = start + rel
        if kind == "flip":
            seg[at] ^= v
        elif kind == "zero8":
            seg[at : at + 8] = bytes(8)
        else:
            seg[at : at + 6] = bytes([v]) * 6
    (store / SEG).write_bytes(seg)
    assert _exported(store) == _opened(store)


def test_exports_of_a_store_being_written_and_then_killed(tmp_path: Path) -> None:
    """Exports while another process appends (single puts and batches, segments rolling every 64 KiB) never
    call its unfinished append damage, and each holds the one before it; after the writer is killed with
    SIGKILL, the export holds exactly what the open keeps."""
    store = tmp_path / "live"
    with live_writer(store):
        previous: list[int] = []
        rounds, deadline = 0, time.monotonic() + 120
        while rounds < 25 or len(list((store / "commitlog").iterdir())) < 6:
            assert time.monotonic() < deadline, "the writer rolled fewer than 6 segments in 2 minutes"
            rounds += 1
            got = _exported(store)
            assert got != "damage"
            assert isinstance(got, list) and got[: len(previous)] == previous and len(got) >= len(previous)
            previous = got
    final = _exported(store)
    assert isinstance(final, list) and final[: len(previous)] == previous
    assert final == _opened(store)


@pytest.fixture(scope="module")
def segmented(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int]]:
    """120 messages over several 4 KiB segments (bodies holding whole records and magic codes, which a reader
    going on after damage must never take for a record), closed cleanly; and every record's offset."""
    root = tmp_path_factory.mktemp("seg") / "s"
    cfg = small_config()
    with rmq.MessageStore(root, cfg) as s:
        offsets, prev = [], b""
        for i in range(120):
            body = (prev if i % 5 == 0 else b"") + b"\xda\xa3\x20\xa7" * (i % 3) + b"x" * (40 + i % 13)
            offsets.append(s.put("T", body, tags="A", keys=f"k{i}", queue_id=i % 2).wrote_offset)
            raw = s.read_raw(offsets[-1])
            assert raw is not None
            prev = bytes(raw)  # a whole record, in the next body
    return root, offsets


def _salvaged(store: Path) -> list[tuple[int, bool]]:
    with rmq.MessageStore(store, small_config(), read_only=True, recovery="salvage") as s:
        return [(m.commitlog_offset, m.body_crc_ok) for m in s.scan()]


def _exported_skipping(store: Path, skipped: list[tuple[int, int, str]]) -> list[tuple[int, bool]]:
    return [
        (o, ok)
        for b in batches(store, skipped=skipped)
        for o, ok in zip(b.column("commitlog_offset").to_pylist(), b.column("body_crc_ok").to_pylist(), strict=True)
    ]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    edits=st.lists(
        st.tuples(st.floats(0, 1, exclude_max=True), st.sampled_from(["flip", "zero8", "junk"]), st.integers(1, 255)),
        min_size=1,
        max_size=3,
    ),
    abort=st.booleans(),
)
def test_skipping_damage_exports_every_record_a_salvage_reads(
    segmented: tuple[Path, list[int]], tmp_path_factory: pytest.TempPathFactory,
    edits: list[tuple[float, str, int]], abort: bool,
) -> None:  # fmt: skip
    """Damage anywhere in the log (up to three edits in any segment, with or without an abort file): the export
    that skips damage holds exactly the records the read-only salvage open reads, the valid records after each
    damaged place included; and each damaged place it reports lies outside every record it exports. (Before,
    it left out the rest of the segment from the damage.) One difference is by design: in a segment before the
    newest the export reads a record whose body fails its CRC and flags it (`body_crc_ok` false; `rmq export`
    then exits 1), where an open after a crash, which checks CRCs from the checkpoint on, calls it damage."""
    src, _ = segmented
    store = tmp_path_factory.mktemp("skip") / "s"
    shutil.copytree(src, store)
    segs = sorted((store / "commitlog").iterdir())
    data = [bytearray(p.read_bytes()) for p in segs]
    total = sum(len(d) for d in data)
    for where, kind, v in edits:
        at = int(where * total)
        seg, pos = divmod(at, len(data[0]))
        d = data[seg]
        if kind == "flip":
            d[pos] ^= v
        elif kind == "zero8":
            d[pos : pos + 8] = bytes(len(d[pos : pos + 8]))
        else:
            d[pos : pos + 6] = bytes([v]) * len(d[pos : pos + 6])
    for p, d in zip(segs, data, strict=True):
        p.write_bytes(d)
    if abort:
        (store / "abort").write_bytes(b"")
    skipped: list[tuple[int, int, str]] = []
    got, salvaged = _exported_skipping(store, skipped), _salvaged(store)
    assert [r for r in got if r[1]] == [r for r in salvaged if r[1]]
    assert set(salvaged) <= set(got)
    for offset, length, _ in skipped:
        assert not any(offset <= o < offset + length for o, _ in got), (offset, length)


def test_a_damaged_first_record_of_the_newest_segment_is_named_for_what_it_is(tmp_path: Path) -> None:
    """The export's planner took a newest segment whose first record fails its body CRC for "the segment after
    the end of the data", where `rmq check` and the open say what is wrong: now it says it too."""
    root = tmp_path / "s"
    bodies = [b"body-%03d" % i + b"." * 100 for i in range(60)]
    with rmq.MessageStore(root, small_config()) as s:
        offsets = [s.put("T", b).wrote_offset for b in bodies]
    seg = small_config().mapped_file_size_commit_log
    first = min(o for o in offsets if o // seg == offsets[-1] // seg)
    assert first % seg == 0 and first != offsets[-1]
    path = root / "commitlog" / f"{first:020d}"
    data = bytearray(path.read_bytes())
    at = data.find(bodies[offsets.index(first)])
    assert 0 < at < 400
    data[at + 2] ^= 0x01
    path.write_bytes(bytes(data))
    proc = subprocess.run(
        [sys.executable, "-m", "rmq.cli", "export", str(root), str(tmp_path / "out.jsonl")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert "the segment's first record is damaged: body CRC" in proc.stderr, proc.stderr
