"""Interoperability with Apache RocketMQ 5.3.1, proven with its own jars (`tests/interop/README.md`).

Both directions: a store written by RocketMQ's `DefaultMessageStore` opens in rmq and rmq's canonical
description equals RocketMQ's; a store written by rmq opens in RocketMQ (its recovery keeping every
consume-queue entry and index key) and RocketMQ's description equals rmq's. The same after a crash (the
abort file left behind). consumerOffset.json: each side reads the other's file. Every read call answers as
RocketMQ does on queues and topics that do not exist and on offsets outside a queue's range.

The live tests need Java and Maven. They skip without them on a developer machine, and fail on CI
(`CI=true` or `RMQ_REQUIRE_JAVA=1`): an absent JVM must not pass silently. `test_fixture_*` check a store
RocketMQ wrote (committed under `tests/fixtures/`) without Java, everywhere.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import rmq
from rmq.describe import describe
from rmq.offsets import ConsumerOffsetManager

HERE = Path(__file__).parent
HARNESS = HERE / "interop" / "harness"
sys.path.insert(0, str(HERE.parent / "benches"))
import maven  # noqa: E402  (benches/maven.py: the Maven build the bench scripts use too)

FIXTURE = HERE / "fixtures" / "rocketmq-5.3.1"
CONFIG = rmq.StoreConfig(
    mapped_file_size_commit_log=65536,
    mapped_file_size_consume_queue=160,
    max_hash_slot_num=64,
    max_index_num=128,
    store_host="10.0.0.2:10911",
)
JAVA_REQUIRED = os.environ.get("RMQ_REQUIRE_JAVA") == "1" or os.environ.get("CI", "").lower() in ("1", "true")

Run = Callable[..., None]


# -- the harness ---------------------------------------------------------------------------------------------


_CLASSPATHS: dict[tuple[str, ...], str] = {}


def maven_classpath(project: Path, target: Path | None = None, *properties: str) -> str:
    """Builds a Maven project of the interop harness (Maven fetches RocketMQ's jars on the first run) and returns
    its runtime classpath. Without Java 17 and Maven the test fails on CI and is skipped elsewhere.

    Built once per process, and once per test run across pytest-xdist's workers: the build holds a lock on the
    target directory and leaves a stamp named after the run, so no worker recompiles classes another worker's
    JVM is loading."""
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if missing:
        message = f"{' and '.join(missing)} not found: the live interop tests need Java 17 and Maven"
        if JAVA_REQUIRED:
            pytest.fail(message + " (required on CI)")
        pytest.skip(message)
    target = target if target is not None else project / "target"
    key = (str(project), str(target), *properties)
    if key in _CLASSPATHS:
        return _CLASSPATHS[key]
    target.mkdir(parents=True, exist_ok=True)
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    stamp = target / f".built-{run}" if run else None
    with open(target / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp is None or not stamp.exists():
            for old in target.glob(".built-*"):
                old.unlink()
            maven.classpath(project, target, *properties)
            if stamp is not None:
                stamp.touch()
    _CLASSPATHS[key] = f"{target / 'classes'}{os.pathsep}{(target / 'classpath.txt').read_text().strip()}"
    return _CLASSPATHS[key]


@pytest.fixture(scope="session")
def java() -> Run:
    """Builds the harness once per session and returns a runner of `rmq.harness.Harness COMMAND ...`."""
    classpath = maven_classpath(HARNESS)

    def run(*args: str | Path) -> None:
        proc = subprocess.run(
            ["java", "-cp", classpath, "rmq.harness.Harness", *map(str, args)],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert proc.returncode == 0, f"harness {args[0]} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"

    return run


def java_describe(java: Run, store_dir: Path, tmp: Path) -> list[dict[str, Any]]:
    """RocketMQ's description of a copy of `store_dir` (RocketMQ's recovery may rewrite files)."""
    copy = tmp / f"java-read-{store_dir.name}"
    shutil.copytree(store_dir, copy)
    out = tmp / f"java-{store_dir.name}.jsonl"
    java("read", copy, out)
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines() if line.strip()]


def rmq_describe(store_dir: Path, tmp: Path) -> list[dict[str, Any]]:
    """rmq's description of a copy of `store_dir`."""
    copy = tmp / f"rmq-read-{store_dir.name}"
    shutil.copytree(store_dir, copy)
    with rmq.MessageStore(copy, CONFIG, start_services=False) as store:  # no schedule service delivering
        return list(describe(store))


def by_type(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["type"] == kind]


def assert_same(ours: list[dict[str, Any]], theirs: list[dict[str, Any]], *, crashed: bool = False) -> None:
    """Equal descriptions, compared kind by kind so a failure names what differs.

    After a crash the two recoveries rebuild the newest index files differently, both correctly: RocketMQ
    destroys every index file newer than its checkpoint (one or more, depending on when the crash came) and
    re-indexes their messages into new files under new names, and its `offset < endPhyOffset` rule indexes the
    last indexed message a second time, where rmq keeps the files and skips the duplicate. So for `crashed` the
    index files up to the first one RocketMQ re-created must be equal, and the re-created ones must end where
    rmq's end (same last offset and store time; RocketMQ holding at least rmq's entries); the `key` and `time`
    lines still prove that every key and time finds the same messages.
    """
    assert len(by_type(ours, "store")) == len(by_type(theirs, "store")) == 1
    ours_store, theirs_store = dict(by_type(ours, "store")[0]), dict(by_type(theirs, "store")[0])
    if crashed:
        mine, other = ours_store.pop("indexFiles"), theirs_store.pop("indexFiles")
        names = {f["name"] for f in mine}
        # The newest file is always compared as possibly re-indexed (same name, one duplicate entry more).
        kept = next((i for i, f in enumerate(other) if f["name"] not in names), max(len(other) - 1, 0))
        assert mine[:kept] == other[:kept]
        assert all(f["name"] not in names for f in other[kept:-1]), "RocketMQ re-created files only at the end"
        assert bool(mine[kept:]) == bool(other[kept:])
        if other[kept:]:
            a, b = mine[-1], other[-1]
            assert (a["endPhyOffset"], a["endTimestamp"]) == (b["endPhyOffset"], b["endTimestamp"])
            assert mine[kept]["beginPhyOffset"] >= other[kept]["beginPhyOffset"]
            assert sum(f["indexCount"] for f in mine[kept:]) <= sum(f["indexCount"] for f in other[kept:])
    assert ours_store == theirs_store
    for kind in ("message", "queue", "key", "time"):
        mine, other = by_type(ours, kind), by_type(theirs, kind)
        assert len(mine) == len(other), f"{kind}: {len(mine)} lines in rmq, {len(other)} in RocketMQ"
        for a, b in zip(mine, other, strict=True):
            assert a == b, f"{kind} differs"


def summary(objs: list[dict[str, Any]]) -> dict[str, int]:
    store = by_type(objs, "store")[0]
    msgs = by_type(objs, "message")
    return {
        "messages": len(msgs),
        "v2_records": sum(m["version"] == 2 for m in msgs),
        "queues": len(by_type(objs, "queue")),
        "segments": len(store["commitlogFiles"]),
        "consume_queue_files": sum(len(v) for v in store.get("consumeQueueFiles", {}).values()),
        "index_files": len(store.get("indexFiles", [])),
        "keys": len(by_type(objs, "key")),
    }


# -- rmq's write matrix (the same shapes as the harness's) ----------------------------------------------------

LONG_TOPIC = "%RETRY%" + "g" * 193  # 200 characters: a version-2 record


def body_of(i: int) -> bytes:
    n = 100 + (i * 37) % 1900
    seed = hashlib.sha256(b"rmq-%d" % i).digest()
    return (seed * (n // len(seed) + 1))[:n]


def write_matrix(store_dir: Path) -> None:
    """About 300 messages over three topics with every variant of the harness's matrix, in rmq."""
    tags_cycle: list[str | None] = ["TagA", "标签", None, "TagB"]

    def open_with(v6: bool) -> rmq.MessageStore:
        host = "[2001:db8::2]:10911" if v6 else "10.0.0.2:10911"
        return rmq.MessageStore(store_dir, dataclasses.replace(CONFIG, store_host=host))

    store = open_with(False)
    try:
        v6 = False
        for i in range(280):
            want_v6 = (i // 20) % 5 == 4
            if want_v6 != v6:
                store.close()
                store = open_with(want_v6)
                v6 = want_v6
            topic, qid = ("TopicA", i % 4) if i % 3 else ("TopicB", i % 2)
            if i % 47 == 0:
                topic, qid = LONG_TOPIC, 0
            born = f"192.168.0.{i % 250 + 1}:{20000 + i}" if i % 2 else f"[2001:db8::{i % 250 + 1:x}]:{20000 + i}"
            kwargs: dict[str, Any] = {}
            if i == 30:
                kwargs["properties"] = {"color": "red", "中文": "红", "DELAY": "3"}
            if i == 31:
                kwargs.update(reconsume_times=2, flag=7)
            store.put(
                topic,
                body_of(i),
                queue_id=qid,
                tags=tags_cycle[i % 4],
                keys=[f"k{i}-a", f"k{i}-b", f"k{i}-c"],
                properties=kwargs.pop("properties", {"color": "red", "中文": "红"}),
                born_host=born,
                **kwargs,
            )
        # A transaction: PREPARED, its COMMIT, and a second PREPARED rolled back.
        t = rmq.TransactionType
        p1 = store.put("TopicA", b"tx-1", queue_id=0, keys="tx-1", transaction_type=t.PREPARED)
        p2 = store.put("TopicA", b"tx-2", queue_id=0, keys="tx-2", transaction_type=t.PREPARED)
        store.put(
            "TopicA", b"tx-1", queue_id=0, keys="tx-1", transaction_type=t.COMMIT,
            prepared_transaction_offset=p1.wrote_offset,
        )  # fmt: skip
        store.put(
            "TopicA", b"tx-2", queue_id=0, keys="tx-2", transaction_type=t.ROLLBACK,
            prepared_transaction_offset=p2.wrote_offset,
        )  # fmt: skip
        batch = [rmq.Message(b"batch-%d" % n, tags="TagB", keys=f"b{n}") for n in range(10)]
        store.put_batch("TopicB", batch, queue_id=1)
        assert store.wait_dispatched()
    finally:
        store.close()


CRASH_WRITER = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, sys.argv[2])
    import test_interop as t
    from pathlib import Path
    import rmq
    t.write_matrix(Path(sys.argv[1]))
    store = rmq.MessageStore(sys.argv[1], t.CONFIG)
    store.put("TopicA", b"after-reopen", queue_id=3, keys="after")
    assert store.wait_dispatched()
    # The segment the warm service makes ahead of the writer, which a crash leaves behind all-zero.
    import time
    deadline = time.monotonic() + 60
    log = os.path.join(sys.argv[1], "commitlog")
    def made_ahead():
        last = sorted(os.listdir(log))[-1]
        # Named and at its full size: the service creates the file, then claims its space.
        size = os.path.getsize(os.path.join(log, last))
        return int(last) > store.max_offset and size == t.CONFIG.mapped_file_size_commit_log
    while not made_ahead():
        assert time.monotonic() < deadline, "no segment was made ahead"
        time.sleep(0.01)
    os._exit(0)  # no close: the abort file stays, as after a crash
    """
)


# -- RocketMQ writes, rmq reads ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def java_stores(java: Run, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("java-stores")
    java("write", root / "clean")
    java("write", root / "crashed", "--abort")
    assert not (root / "clean" / "abort").exists() and (root / "crashed" / "abort").exists()
    return {"clean": root / "clean", "crashed": root / "crashed"}


@pytest.mark.parametrize("variant", ["clean", "crashed"])
def test_rocketmq_store_opens_in_rmq(java: Run, java_stores: dict[str, Path], tmp_path: Path, variant: str) -> None:
    store_dir = java_stores[variant]
    theirs = java_describe(java, store_dir, tmp_path)
    ours = rmq_describe(store_dir, tmp_path)
    assert_same(ours, theirs, crashed=variant == "crashed")
    s = summary(theirs)
    assert s["messages"] >= 290 and s["v2_records"] >= 1 and s["segments"] >= 3, s
    assert s["consume_queue_files"] > s["queues"] and s["index_files"] >= 2, s
    print(f"RocketMQ -> rmq ({variant}): {s}")


@pytest.mark.parametrize("variant", ["clean", "crashed"])
def test_rocketmq_store_exports_what_rmq_opens(java_stores: dict[str, Path], variant: str) -> None:
    """The export (and Spark source) planner reads a RocketMQ-written store, clean or crashed, to the same end
    as rmq's open, record for record."""
    from rmq.export import batches

    store_dir = java_stores[variant]
    exported = [o for b in batches(store_dir) for o in b.column("commitlog_offset").to_pylist()]
    with rmq.MessageStore(store_dir, rmq.StoreConfig.from_files(store_dir), read_only=True) as s:
        opened = [m.commitlog_offset for m in s.scan()]
    assert exported == opened and len(opened) >= 290


# -- rmq writes, RocketMQ reads ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def rmq_stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("rmq-stores")
    write_matrix(root / "clean")
    proc = subprocess.run([sys.executable, "-c", CRASH_WRITER, str(root / "crashed"), str(HERE)], check=False)
    assert proc.returncode == 0
    assert not (root / "clean" / "abort").exists() and (root / "crashed" / "abort").exists()
    ahead = sorted((root / "crashed" / "commitlog").iterdir())[-1]
    assert ahead.read_bytes() == bytes(CONFIG.mapped_file_size_commit_log), "the segment made ahead, all zeros"
    return {"clean": root / "clean", "crashed": root / "crashed"}


@pytest.mark.parametrize("variant", ["clean", "crashed"])
def test_rmq_store_opens_in_rocketmq(java: Run, rmq_stores: dict[str, Path], tmp_path: Path, variant: str) -> None:
    store_dir = rmq_stores[variant]
    ours = rmq_describe(store_dir, tmp_path)
    theirs = java_describe(java, store_dir, tmp_path)
    # RocketMQ's recovery accepted rmq's consume queues and index: nothing truncated, every key found.
    assert_same(ours, theirs, crashed=variant == "crashed")
    s = summary(ours)
    assert s["messages"] >= 290 and s["v2_records"] >= 1 and s["segments"] >= 3, s
    assert s["consume_queue_files"] > s["queues"] and s["index_files"] >= 2, s
    print(f"rmq -> RocketMQ ({variant}): {s}")


def test_a_store_rmq_cut_at_damage_opens_in_rocketmq_as_in_rmq(
    java: Run, rmq_stores: dict[str, Path], tmp_path: Path
) -> None:
    """A record in the middle of the log damaged, then `rmq recover --mode truncate`: RocketMQ 5.3.1 opens the
    cut store and finds the same messages, queues, index files (the ones wholly past the cut removed, the one
    spanning it rebuilt) and keys as rmq: no key finds a dropped message on either side."""
    store = tmp_path / "cut"
    shutil.copytree(rmq_stores["clean"], store)
    with rmq.MessageStore(store, CONFIG, read_only=True) as s:
        offsets = [m.commitlog_offset for m in s.scan()]
        index_files = len(s.index_files())
    seg = CONFIG.mapped_file_size_commit_log
    # A record in the segment before the newest (a clean open validates the newest three), not its first.
    in_prev = [o for o in offsets if o // seg == offsets[-1] // seg - 1]
    victim = in_prev[len(in_prev) // 2]
    path = store / "commitlog" / f"{victim // seg * seg:020d}"
    data = bytearray(path.read_bytes())
    data[victim % seg + 5] ^= 0x40
    path.write_bytes(data)
    proc = subprocess.run(
        [sys.executable, "-m", "rmq.cli", "recover", str(store), "--mode", "truncate",
         "--max-hash-slot-num", "64", "--max-index-num", "128"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0 and f"cut the log at commitlog offset {victim}" in proc.stdout, proc.stdout
    ours = rmq_describe(store, tmp_path)
    assert [m["physicalOffset"] for m in by_type(ours, "message")] == [o for o in offsets if o < victim]
    assert all(all(o < victim for o in k["physicalOffsets"]) for k in by_type(ours, "key"))
    assert len(by_type(ours, "store")[0]["indexFiles"]) < index_files, "index files past the cut removed"
    assert_same(ours, java_describe(java, store, tmp_path))


@pytest.mark.parametrize("crashed", [False, True])
def test_a_log_ending_in_a_blank_with_no_segment_after_it_ends_where_rocketmq_ends_it(
    java: Run, rmq_stores: dict[str, Path], tmp_path: Path, crashed: bool
) -> None:
    """A writer stopped after a roll's end-of-file blank and before the next segment existed (Java's roll writes
    the blank first): RocketMQ's recovery ends the log at the blank's start (spec §10.4), and so does rmq's (it
    ended it at the segment's end, the blank counted). The next append writes the blank again and rolls."""
    store = tmp_path / "blank-end"
    shutil.copytree(rmq_stores["clean"], store)
    segments = sorted((store / "commitlog").iterdir())
    for later in segments[1:]:
        later.unlink()
    data = segments[0].read_bytes()
    seg = CONFIG.mapped_file_size_commit_log
    with rmq.MessageStore(rmq_stores["clean"], CONFIG, read_only=True) as s:
        blank_at = max(m.commitlog_offset + m.store_size for m in s.scan() if m.commitlog_offset < seg)
    assert blank_at < seg and struct.unpack(">ii", data[blank_at : blank_at + 8]) == (seg - blank_at, -875286124)
    if crashed:
        (store / "abort").touch()

    def same(expected_end: int, work: Path) -> None:
        work.mkdir()
        # The index is left out: the segments removed here held messages its files still name, which rmq's
        # open takes out of the index and RocketMQ's leaves in (not what this test is about).
        ours, theirs = rmq_describe(store, work), java_describe(java, store, work)
        assert by_type(ours, "store")[0]["maxPhyOffset"] == by_type(theirs, "store")[0]["maxPhyOffset"]
        assert by_type(ours, "store")[0]["maxPhyOffset"] == expected_end
        for kind in ("message", "queue"):
            assert by_type(ours, kind) == by_type(theirs, kind), kind

    same(blank_at, tmp_path / "before")
    with rmq.MessageStore(store, CONFIG, start_services=False) as s:
        assert s.max_offset == blank_at
        r = s.put("AfterBlank", b"x" * (seg - blank_at))  # does not fit: the blank again, then the next segment
        assert r.wrote_offset == seg
        end = s.max_offset
    assert (store / "commitlog" / segments[0].name).read_bytes() == data
    same(end, tmp_path / "after")


# -- consumerOffset.json ---------------------------------------------------------------------------------------


def test_offsets_each_side_reads_the_other(java: Run, tmp_path: Path) -> None:
    java("offsets-write", tmp_path / "java.json")
    m = ConsumerOffsetManager(tmp_path / "java.json")
    assert m.load()
    assert m.table() == {
        "TopicTest@GID_A": {0: 250, 1: 250, 2: 249, 3: 251},
        "%RETRY%GID_A@GID_A": {0: 0},
        "Orders@G2": {100: 7},
    }
    # Re-encoding what RocketMQ wrote gives its bytes back (this small table keeps its order through a reload;
    # tests/test_interop_offsets.py covers the tables whose order a reload changes).
    m.persist()
    assert (tmp_path / "java.json").read_bytes() == (tmp_path / "java.json.bak").read_bytes()
    ours = ConsumerOffsetManager(tmp_path / "rmq.json")
    ours.commit_offset("G\u00e9", "Topic", 3, 9)
    ours.commit_offset("G", "%RETRY%G", 0, 2**40)
    ours.commit_offset("G", "Topic", 17, 0)
    ours.persist()
    java("offsets-read", tmp_path / "rmq.json", tmp_path / "read.json")
    read = json.loads((tmp_path / "read.json").read_text(encoding="utf-8"))
    assert {k: {int(q): o for q, o in v.items()} for k, v in read.items()} == ours.table()


# -- spec section 16's reference records, as RocketMQ writes them -----------------------------------------------

# Record A of spec 16.1 (tests/golden.rs proves rmq encodes exactly these bytes).
RECORD_A = bytes.fromhex(
    "000000dadaa320a769c865ed0000000300000000000000000000000500000000"
    "00000000000000000000018bcfe56800c0a800010000d4310000018bcfe5687b"
    "0a00000200002a9f0000000000000000000000000000000e48656c6c6f20526f"
    "636b65744d5109546f706963546573740068554e49515f4b4559014330413830"
    "30303141314232313842344141433230303030303030303030303002434c5553"
    "5445520144656661756c74436c757374657202544147530154616741024b4559"
    "53016f7264657231206f72646572320257414954017472756502"
)
V6_BORN = bytes.fromhex("20010db8000000000000000000000001") + (54321).to_bytes(4, "big")
V6_STORE = bytes.fromhex("20010db8000000000000000000000002") + (10911).to_bytes(4, "big")
TAGA_CODE = 2598919  # "TagA".hashCode(), spec 16.4


def be(n: int, width: int) -> bytes:
    return n.to_bytes(width, "big")


def expected_vector(name: str, phys: int) -> tuple[bytes, str]:
    """Spec 16.1/16.2's record `name` at physical offset `phys`, and its offsetMsgId."""
    a = RECORD_A
    head = a[4:28]  # magic, body CRC, queue id, flag, queue offset
    tail = a[56:]  # store timestamp onwards (v4 store host)
    if name == "A":
        rec = a[:28] + be(phys, 8) + a[36:]
    elif name == "B":
        rec = be(230, 4) + head + be(phys, 8) + be(0x10, 4) + a[40:48] + V6_BORN + tail
    elif name == "S":
        rec = be(230, 4) + head + be(phys, 8) + be(0x20, 4) + a[40:64] + V6_STORE + a[72:]
    elif name == "BS":
        rec = be(242, 4) + head + be(phys, 8) + be(0x30, 4) + a[40:48] + V6_BORN + a[56:64] + V6_STORE + a[72:]
    elif name == "C":
        topic = ("abc" * 67)[:200].encode()
        rec = be(410, 4) + bytes.fromhex("daa320ab") + a[8:28] + be(phys, 8) + a[36:102] + be(200, 2) + topic + a[112:]
    elif name == "D":
        crc_tail = b"__CRC32#\x019725818021\x02"
        rec = be(238, 4) + a[4:28] + be(phys, 8) + a[36:112] + be(124, 2) + a[114:] + crc_tail
    elif name == "E":
        rec = (be(120, 4) + a[4:8] + be(0, 4) + a[12:28] + be(phys, 8) + a[36:84] + be(0, 4)
               + b"\x09TopicTest" + be(20, 2) + b"__CRC32#\x011307068091\x02")  # fmt: skip
    else:
        raise AssertionError(name)
    store_host = V6_STORE if name in ("S", "BS") else a[64:72]
    return rec, (store_host + be(phys, 8)).hex().upper()


def test_rocketmq_writes_the_spec_reference_records(java: Run, tmp_path: Path) -> None:
    """Spec 16.1/16.2's records A, B, S, BS, C, D, E and their consume-queue entries, written by RocketMQ's own
    `DefaultMessageStore.putMessage`, are the bytes the spec (and rmq's encoder, tests/golden.rs) gives."""
    java("vectors", tmp_path, tmp_path / "vectors.jsonl")
    lines = [json.loads(x) for x in (tmp_path / "vectors.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [v["name"] for v in lines] == ["A", "B", "S", "BS", "C", "D", "E"]
    for v in lines:
        rec, msg_id = expected_vector(v["name"], v["physicalOffset"])
        assert bytes.fromhex(v["record"]) == rec, v["name"]
        assert v["offsetMsgId"] == msg_id, v["name"]
        if v["name"] in ("A", "C", "D"):  # the first record at QUEUEOFFSET 5 of its topic's queue 3 in its store
            cq_entry = be(v["physicalOffset"], 8) + be(len(rec), 4) + be(TAGA_CODE, 8)
            assert v["cqEntry"] == cq_entry.hex().upper(), v["name"]
    for first in (lines[0], lines[5], lines[6]):  # A, D, E: at offset 0 in their stores, as in the spec
        assert first["physicalOffset"] == 0
    assert bytes.fromhex(lines[0]["record"]) == RECORD_A  # the spec's bytes verbatim
    assert lines[0]["cqEntry"] == "0000000000000000000000DA000000000027A807"  # spec 16.1


# -- the committed fixture (no Java needed) ---------------------------------------------------------------------


@pytest.fixture
def fixture_copy(tmp_path: Path) -> Iterator[Path]:
    copy = tmp_path / "store"
    shutil.copytree(FIXTURE / "store", copy)
    yield copy


def test_fixture_store_written_by_rocketmq_reads_identically(fixture_copy: Path, tmp_path: Path) -> None:
    expected = [json.loads(x) for x in (FIXTURE / "describe.jsonl").read_text(encoding="utf-8").splitlines()]
    ours = rmq_describe(fixture_copy, tmp_path)
    assert_same(ours, expected)
    s = summary(expected)
    assert s["messages"] >= 290 and s["v2_records"] >= 1 and s["segments"] >= 3 and s["index_files"] >= 2, s


def test_fixture_store_accepts_rmq_appends_and_keeps_rocketmq_bytes(fixture_copy: Path) -> None:
    """Opening and closing a RocketMQ store changes none of its data files' bytes; appends continue its offsets."""

    def data_files() -> dict[Path, bytes]:
        return {
            p.relative_to(fixture_copy): p.read_bytes()
            for p in fixture_copy.rglob("*")
            if p.is_file() and p.name not in ("lock", "abort")
        }

    before = data_files()
    with rmq.MessageStore(fixture_copy, CONFIG, start_services=False):  # opening itself, not the services
        pass
    after = data_files()
    changed = sorted(str(p) for p in before if before[p] != after.get(p))
    assert changed == [], changed
    with rmq.MessageStore(fixture_copy, CONFIG, start_services=False) as store:
        nxt = store.next_queue_offset("TopicA", 1)
        r = store.put("TopicA", b"appended by rmq", queue_id=1, keys="rmq-append")
        assert r.queue_offset == nxt
        assert store.wait_dispatched()
        assert [m.body for m in store.query_message("TopicA", "rmq-append").messages] == [b"appended by rmq"]


# -- RocketMQ's answers where a queue or topic does not exist ------------------------------------------------------

LONG_MAX = 2**63 - 1


def answer_probes(queues: dict[tuple[str, int], tuple[int, int]]) -> list[tuple[str, str, int, int]]:
    """Probes of every read call: on each of `queues` ((topic, id) -> (min, max) offsets: below, at and above
    its range), on a queue id its topic does not have, on topics that do not exist (each call first on a name
    nothing touched, then again after that call created it in RocketMQ), with queue ids 0 and -1."""
    probes: list[tuple[str, str, int, int]] = []

    def every_call(t: str, q: int, lo: int, hi: int) -> None:
        for off in sorted({-1, 0, lo - 1, lo, lo + 1, hi - 1, hi, hi + 1, 2**40}):
            probes.append(("get", t, q, off))
        probes.extend([("min", t, q, 0), ("max", t, q, 0)])
        for ts in (-1, 0, 1, LONG_MAX):
            probes.extend([("lower", t, q, ts), ("upper", t, q, ts)])
        for off in sorted({-1, 0, lo - 1, lo, hi - 1, hi, 2**40}):
            probes.extend([("phys", t, q, off), ("time", t, q, off)])

    for (topic, qid), (lo, hi) in sorted(queues.items()):
        every_call(topic, qid, lo, hi)
    topic = min(t for t, _ in queues)
    every_call(topic, max(q for t, q in queues if t == topic) + 1, 0, 0)
    for n, call in enumerate(("get", "min", "max", "lower", "upper", "phys", "time")):
        for q in (0, -1):
            name = f"NoSuchTopic{n}{'neg' if q < 0 else ''}"
            probes.append((call, name, q, 0))  # the first call that touches it
            every_call(name, q, 0, 0)  # and every call after it
    return probes


def rmq_answers(store_dir: Path, probes: list[tuple[str, str, int, int]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    with rmq.MessageStore(store_dir, CONFIG, start_services=False) as store:
        for call, topic, q, arg in probes:
            result: Any
            if call == "get":
                r = store.get_message("interop", topic, q, arg, 32)
                result = {
                    "status": r.status.name,
                    "nextBeginOffset": r.next_begin_offset,
                    "minOffset": r.min_offset,
                    "maxOffset": r.max_offset,
                    "count": len(r.messages),
                }
            elif call == "min":
                result = store.get_min_offset_in_queue(topic, q)
            elif call == "max":
                result = store.get_max_offset_in_queue(topic, q)
            elif call in ("lower", "upper"):
                boundary = rmq.BoundaryType.LOWER if call == "lower" else rmq.BoundaryType.UPPER
                result = store.get_offset_in_queue_by_time(topic, q, arg, boundary)
            elif call == "phys":
                result = store.get_commitlog_offset_in_queue(topic, q, arg)
            else:
                result = store.get_message_store_timestamp(topic, q, arg)
            out.append({"call": call, "topic": topic, "queueId": q, "arg": arg, "result": result})
    return out


def test_missing_queues_and_offsets_out_of_range_answer_as_rocketmq(
    java: Run, java_stores: dict[str, Path], tmp_path: Path
) -> None:
    """Every read call on queues and topics that do not exist, and on offsets below, at and above a queue's
    range, answers exactly what RocketMQ 5.3.1's DefaultMessageStore answers, and rmq creates no file for them."""
    theirs_dir, ours_dir = tmp_path / "java", tmp_path / "rmq"
    shutil.copytree(java_stores["clean"], theirs_dir)
    # Retention as RocketMQ's clean service does it: the first commitlog segment goes, then every consume-queue
    # file whose entries all point below the new start. TopicA/0's range then starts above 0. (Deleting only a
    # consume-queue file while the log still holds its messages is damage, which rmq repairs.)
    segments = sorted((theirs_dir / "commitlog").iterdir())
    log_min = int(segments[1].name)
    segments[0].unlink()
    for cq in (theirs_dir / "consumequeue").glob("*/*/*"):
        data = cq.read_bytes()
        entries = [int.from_bytes(data[i : i + 8], "big", signed=True) for i in range(0, len(data), 20)]
        used = [e for e in entries if e != 0]
        if used and max(used) < log_min and cq != max(cq.parent.iterdir()):
            cq.unlink()
    shutil.copytree(theirs_dir, ours_dir)
    with rmq.MessageStore(ours_dir, CONFIG, start_services=False) as store:
        queues = {
            (t, q): (store.get_min_offset_in_queue(t, q), store.get_max_offset_in_queue(t, q))
            for t in ("TopicA", "TopicB")
            for q in store.queue_ids(t)
        }
    assert queues[("TopicA", 0)][0] >= 8 and all(hi > 0 for _, hi in queues.values()), queues
    probes = answer_probes(queues)
    probe_file = tmp_path / "probes.txt"
    probe_file.write_text("".join(f"{c} {t.encode().hex()} {q} {a}\n" for c, t, q, a in probes))
    java("answers", theirs_dir, probe_file, tmp_path / "java.jsonl")
    theirs = [json.loads(line) for line in (tmp_path / "java.jsonl").read_text().splitlines() if line.strip()]
    before = sorted(p.relative_to(ours_dir) for p in ours_dir.rglob("*"))
    ours = rmq_answers(ours_dir, probes)
    after = sorted(p.relative_to(ours_dir) for p in ours_dir.rglob("*"))
    assert after == before, "rmq created files for queues that do not exist"
    differ = [(o, t) for o, t in zip(ours, theirs, strict=True) if o != t]
    assert not differ, f"{len(differ)} of {len(probes)} answers differ, first: {differ[:5]}"
    print(f"\n{len(probes)} answers equal to RocketMQ's")
