"""`rmq export`, `rmq replay` and `rmq dump`: filters select exactly the matching messages, the Parquet file
holds the Spark source's rows, replay keeps bodies, tags, keys and properties (message ids too), and the source
store is never changed."""

from __future__ import annotations

import base64
import csv
import datetime as dt
import errno
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from test_cli_recover import rmq_cli
from test_read_only import snapshot

import rmq
from conftest import small_config
from rmq.export import FORMATS, Selection, batches, export, replay

CONFIG = small_config(mapped_file_size_consume_queue=20 * 8, max_hash_slot_num=16, max_index_num=32)
N = 200


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("exp") / "src"
    with rmq.MessageStore(root, CONFIG) as store:
        for i in range(N):
            store.put(
                ("ExA", "ExB", "%DLQ%g1")[i % 3],
                (b"order-%d \xff" if i % 4 == 0 else b"event-%d") % i,
                queue_id=i % 2,
                tags=f"t{i % 5}",
                keys=f"k{i} shared{i % 3}",
                properties={"trace": f"tr{i}", "n": str(i)},
                born_timestamp=1_700_000_000_000 + i * 1000,
            )
        store.wait_dispatched(10)
    return root


def everything(src: Path) -> list[dict[str, Any]]:
    return [r for b in batches(src) for r in b.to_pylist()]


@pytest.mark.parametrize(
    ("sel", "pick"),
    [
        (Selection(), lambda r: True),
        (Selection(topics=["ExA"]), lambda r: r["topic"] == "ExA"),
        (Selection(topics=["ExA", "%DLQ%g1"], queue_id=1), lambda r: r["topic"] != "ExB" and r["queue_id"] == 1),
        (Selection(tag="t3"), lambda r: r["tags"] == "t3"),
        (Selection(key="shared2"), lambda r: "shared2" in r["keys"]),
        (Selection(grep=r"order-1\d "), lambda r: r["body"].startswith(b"order-1") and len(r["body"]) == 10),
        (Selection(from_offset=5000, to_offset=9000), lambda r: 5000 <= r["commitlog_offset"] < 9000),
    ],
    ids=["all", "topic", "topics+queue", "tag", "key", "grep", "offsets"],
)
def test_filters_select_exactly_the_matching_messages(src: Path, sel: Selection, pick: Any) -> None:
    rows = everything(src)
    assert len(rows) == N
    got = [r["commitlog_offset"] for b in batches(src, sel) for r in b.to_pylist()]
    want = [r["commitlog_offset"] for r in rows if pick(r)]
    assert got == want and (want or sel == Selection())


def test_time_and_msg_id_filters(src: Path) -> None:
    rows = everything(src)
    mid = rows[N // 2]
    got = [r["commitlog_offset"] for b in batches(src, Selection(msg_id=mid["msg_id"])) for r in b.to_pylist()]
    assert got == [mid["commitlog_offset"]]
    got = [r["commitlog_offset"] for b in batches(src, Selection(msg_id=mid["uniq_key"])) for r in b.to_pylist()]
    assert got == [mid["commitlog_offset"]]
    t = mid["store_timestamp"]
    since = [r for b in batches(src, Selection(since=t)) for r in b.to_pylist()]
    assert since and all(r["store_timestamp"] >= t for r in since)
    assert len(since) == sum(r["store_timestamp"] >= t for r in rows)
    until = [r for b in batches(src, Selection(until=t)) for r in b.to_pylist()]
    assert len(until) + len(since) == N


def test_export_formats_hold_the_rows(src: Path, tmp_path: Path) -> None:
    before = snapshot(src)
    rows = [r for r in everything(src) if r["topic"] == "ExB"]
    sel = Selection(topics=["ExB"])
    assert export(src, tmp_path / "o.parquet", "parquet", sel) == len(rows)
    assert pq.read_table(tmp_path / "o.parquet").to_pylist() == rows
    assert export(src, tmp_path / "o.jsonl", "jsonl", sel) == len(rows)
    lines = [json.loads(x) for x in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert [base64.b64decode(x["body_base64"]) for x in lines] == [r["body"] for r in rows]
    assert [x["properties"]["trace"] for x in lines] == [dict(r["properties"])["trace"] for r in rows]
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    assert [x["store_timestamp"] for x in lines] == [
        (r["store_timestamp"] - epoch) // dt.timedelta(milliseconds=1) for r in rows
    ]
    assert export(src, tmp_path / "o.csv", "csv", sel) == len(rows)
    with open(tmp_path / "o.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert [base64.b64decode(x["body_base64"]) for x in table] == [r["body"] for r in rows]
    assert [x["keys"] for x in table] == [" ".join(r["keys"]) for r in rows]
    assert snapshot(src) == before
    assert not list(tmp_path.glob(".*.tmp"))


def test_parquet_export_equals_the_spark_source(spark: Any, src: Path, tmp_path: Path) -> None:
    import rmq.spark as rs

    export(src, tmp_path / "all.parquet", "parquet")
    from_spark = rs.read(spark, src).orderBy("commitlog_offset").toArrow()
    from_parquet = pq.read_table(tmp_path / "all.parquet")
    assert from_spark.num_rows == from_parquet.num_rows == N
    for name in from_parquet.schema.names:
        assert from_spark[name].to_pylist() == from_parquet[name].to_pylist(), name


def test_replay_keeps_messages_and_sends_a_dlq_back(src: Path, tmp_path: Path) -> None:
    before = snapshot(src)
    dst_root = tmp_path / "dst"
    with rmq.MessageStore(dst_root, CONFIG) as dst:
        n = replay(src, dst, Selection(topics=["%DLQ%g1"]), to_topic="ExA")
        dst.wait_dispatched(10)
        want = [r for r in everything(src) if r["topic"] == "%DLQ%g1"]
        assert n == len(want)
        got = [r for b in batches(dst_root) for r in b.to_pylist()]
        assert [r["topic"] for r in got] == ["ExA"] * n
        for g, w in zip(got, want, strict=True):
            assert (g["body"], g["tags"], g["keys"], g["uniq_key"], g["queue_id"], g["born_timestamp"]) == (
                w["body"],
                w["tags"],
                w["keys"],
                w["uniq_key"],
                w["queue_id"],
                w["born_timestamp"],
            )
            gp, wp = dict(g["properties"]), dict(w["properties"])
            assert (gp["trace"], gp["n"]) == (wp["trace"], wp["n"])
        hits = dst.query_message("ExA", want[0]["keys"][0], 4)
        assert [m.body for m in hits.messages] == [want[0]["body"]]
    assert snapshot(src) == before


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rmq.cli", *args], capture_output=True, text=True, timeout=300)


def test_cli_export_replay_dump(src: Path, tmp_path: Path) -> None:
    copy = tmp_path / "src"
    shutil.copytree(src, copy)
    before = snapshot(copy)
    p = cli("export", str(copy), str(tmp_path / "t3.jsonl"), "--tag", "t3", "--topic", "ExA")
    assert p.returncode == 0, p.stderr
    lines = [json.loads(x) for x in (tmp_path / "t3.jsonl").read_text().splitlines()]
    assert lines and all(x["tags"] == "t3" and x["topic"] == "ExA" for x in lines)
    p = cli("replay", str(copy), str(tmp_path / "dst"), "--grep", "^order")
    assert p.returncode == 0, p.stderr
    assert f"replayed {N // 4} messages" in p.stderr
    p = cli("dump", str(copy))
    assert p.returncode == 0, p.stderr
    records = [json.loads(x) for x in p.stdout.splitlines()]
    assert len(records) == N and records[1]["body_text"] == "event-1" and "body_text" not in records[0]
    assert records[0]["properties"]["trace"] == "tr0"
    for part, count in (("--cq", N), ("--checkpoint", 1)):
        p = cli("dump", str(copy), part)
        assert p.returncode == 0, p.stderr
        assert len(p.stdout.splitlines()) == count, part
    p = cli("dump", str(copy), "--index")
    assert p.returncode == 0, p.stderr
    entries = [json.loads(x) for x in p.stdout.splitlines() if '"entry"' in x]
    assert len(entries) == 3 * N  # UNIQ_KEY and two keys each
    p = cli("export", str(copy), str(tmp_path / "x.jsonl"), "--grep", "(")
    assert p.returncode != 0 and "Traceback" not in p.stderr and "regular expression" in p.stderr
    assert snapshot(copy) == before


def written_into(store: Path) -> list[str]:
    """Output paths that lie inside `store` or hold it, each spelled another way than plainly."""
    link = store.parent / "link-to-src"
    if not link.exists():
        link.symlink_to(store)
    return [
        str(store / "commitlog" / "00000000000000000000"),  # a segment: the export would replace it
        str(store / "new.jsonl"),
        str(store / "commitlog" / ".." / "index" / "x"),
        str(link / "config" / "y.jsonl"),  # through a symlink
        str(store),
        str(store.parent),  # holds the store
    ]


def test_export_and_replay_refuse_to_write_into_the_store_they_read(src: Path, tmp_path: Path) -> None:
    copy = tmp_path / "src"
    shutil.copytree(src, copy)
    before = snapshot(copy)
    for out in written_into(copy):
        with pytest.raises(rmq.InvalidArgumentError, match="overlaps the store"):
            export(copy, out)
        p = cli("export", str(copy), out)
        assert p.returncode == 2 and "overlaps the store" in p.stderr and "Traceback" not in p.stderr, out
        assert not Path(out).with_name(f".{Path(out).name}.tmp").exists()
    # replay into itself, into a directory inside it, into one that holds it: refused before anything opens
    for dst in (copy, copy / "sub", tmp_path):
        p = cli("replay", str(copy), str(dst))
        assert p.returncode == 2 and "overlaps the store" in p.stderr and "Traceback" not in p.stderr, dst
    assert not (copy / "sub").exists() and not (tmp_path / "commitlog").exists()
    # A --to-topic no producer may send to is refused before the destination store is created.
    for bad in ("../x", "SCHEDULE_TOPIC_XXXX", ""):
        p = cli("replay", str(copy), str(tmp_path / "dst"), "--to-topic", bad)
        assert p.returncode == 2 and "invalid topic" in p.stderr and "Traceback" not in p.stderr, bad
        assert not (tmp_path / "dst").exists(), bad
    with rmq.MessageStore(tmp_path / "elsewhere", CONFIG) as dst_store:
        copy_link = tmp_path / "link-to-elsewhere"
        copy_link.symlink_to(tmp_path / "elsewhere")
        with pytest.raises(rmq.InvalidArgumentError, match="overlaps the store"):
            replay(copy_link, dst_store)  # the same store under another name
        assert dst_store.max_offset == 0
    assert snapshot(copy) == before
    # A commitlog on another disk (a symlink, as RocketMQ's storePathCommitLog puts it elsewhere) is the store's.
    moved = tmp_path / "disk2" / "commitlog"
    moved.parent.mkdir()
    shutil.copytree(copy / "commitlog", moved)
    linked = tmp_path / "linked"
    shutil.copytree(copy, linked, ignore=lambda d, names: ["commitlog"] if Path(d) == copy else [])
    (linked / "commitlog").symlink_to(moved)
    for out in (moved / "00000000000000000000", moved / "x.jsonl", moved.parent):
        with pytest.raises(rmq.InvalidArgumentError, match="overlaps the store"):
            export(linked, out)
    assert export(linked, tmp_path / "disk2.jsonl") == N
    # A path beside the store is fine, and so is a commitlog directory given as the store.
    assert export(copy, tmp_path / "beside.jsonl") == N
    assert export(copy / "commitlog", tmp_path / "beside2.jsonl") == N
    with pytest.raises(rmq.InvalidArgumentError, match="overlaps the store"):
        export(copy / "commitlog", copy / "x.jsonl")  # the commitlog's store root is the store
    assert snapshot(copy) == before


def test_the_spark_job_refuses_outputs_that_would_overwrite_or_enter_the_store(src: Path, tmp_path: Path) -> None:
    from rmq.spark import run_spark

    out = tmp_path / "out"
    store = out / "messages"  # the job's overwrite of OUT/messages would delete the store first
    shutil.copytree(src, store)
    before = snapshot(store)
    for target in (out, store, store / "parquet"):
        with pytest.raises(rmq.InvalidArgumentError, match="the Spark job's output"):
            run_spark(store, target, None, quiet=True)  # refused before a session starts
        p = cli("spark", str(store), str(target))
        assert p.returncode == 2 and "overlaps the store" in p.stderr and "Traceback" not in p.stderr, target
    p = cli("spark", str(store), str(tmp_path / "elsewhere"), "--json", str(store / "commitlog" / "s.json"))
    assert p.returncode == 2 and "the --json file" in p.stderr and not (tmp_path / "elsewhere").exists()
    assert snapshot(store) == before
    assert sorted(p.name for p in out.iterdir()) == ["messages"]


def test_a_damaged_body_is_flagged_by_export_and_never_replayed(src: Path, tmp_path: Path) -> None:
    """A body that fails its CRC (a flipped bit in an older segment, where the planner reads past it) is
    exported with `body_crc_ok` false and the command says so (exit 1), as `rmq scan` does; replay never
    appends it, since the destination would store it under a new, matching CRC. Tried as a user would on main:
    both commands exited 0 without a word, and the replayed copy held the damaged body as a sound message."""
    copy = tmp_path / "src"
    shutil.copytree(src, copy)
    victim = everything(copy)[7]
    seg_path = copy / "commitlog" / f"{victim['commitlog_offset'] // 4096 * 4096:020d}"
    seg = bytearray(seg_path.read_bytes())
    at = seg.index(victim["body"], victim["commitlog_offset"] % 4096) + 2
    seg[at] ^= 0x01
    seg_path.write_bytes(seg)
    off = victim["commitlog_offset"]
    damaged: list[int] = []
    assert export(copy, tmp_path / "all.jsonl", damaged=damaged) == N
    assert damaged == [off]
    rows = [json.loads(x) for x in (tmp_path / "all.jsonl").read_text().splitlines()]
    assert [r["commitlog_offset"] for r in rows if not r["body_crc_ok"]] == [off]
    with rmq.MessageStore(tmp_path / "dst", CONFIG) as dst:
        with pytest.raises(rmq.CorruptionError, match=f"1 message.*commitlog offset {off}"):
            replay(copy, dst, Selection(topics=[victim["topic"]]))
        dst.wait_dispatched(10)
        kept = list(dst.scan())
    sound = [r for r in everything(copy) if r["topic"] == victim["topic"] and r["commitlog_offset"] != off]
    assert [m.body for m in kept] == [r["body"] for r in sound]  # every other message, and not the damaged one
    for args, what in (
        (("export", str(copy), str(tmp_path / "cli.jsonl")), "were exported with body_crc_ok false"),
        (("replay", str(copy), str(tmp_path / "dst2"), "--json"), "were not replayed"),
    ):
        p = cli(*args)
        assert p.returncode == 1, p.stderr
        assert f"the first at commitlog offset {off}) and {what}" in p.stderr
    assert json.loads(p.stdout) == {
        "replayed": N - 1,
        "dst": str(tmp_path / "dst2"),
        "damaged_bodies": [off],
        "left_out": {},
    }
    with rmq.MessageStore(tmp_path / "dst2", CONFIG, read_only=True) as dst2:
        assert all(m.body != victim["body"] for m in dst2.scan())


def test_an_export_onto_a_full_disk_is_a_disk_full_error_and_leaves_no_file(
    src: Path, tmpfs: Path | None, tmp_path: Path
) -> None:
    """Tried as a user would: `rmq export STORE /full/x.parquet` said "[Errno 28] Error writing bytes to file.
    Detail: ..." (which file?), and `rmq replay` onto a full disk "[Errno 28] no space left ...: '<path>'"."""
    if tmpfs is None:
        pytest.skip("needs a tmpfs (root); CI always mounts one")
    (tmpfs / "filler").write_bytes(b"\0" * (shutil.disk_usage(tmpfs).free - (48 << 10)))  # 48 KiB left
    for fmt in FORMATS:
        out = tmpfs / f"all.{fmt}"
        with pytest.raises(rmq.DiskFullError, match="no space left on the device for the export file") as e:
            export(src, out, fmt)
        assert e.value.errno == errno.ENOSPC and e.value.filename == str(out)
        assert sorted(p.name for p in tmpfs.iterdir()) == ["filler"], fmt  # neither the file nor its temporary
    p = cli("export", str(src), str(tmpfs / "x.jsonl"))
    assert p.returncode == 2
    assert p.stderr.strip().splitlines()[-1] == (
        f"rmq: no space left on the device for the export file {str(tmpfs / 'x.jsonl')!r}; nothing was written: "
        "free space and retry"
    )
    p = cli("replay", str(src), str(tmpfs / "dst"))
    assert p.returncode == 2 and "[Errno" not in p.stderr and "no space left on the device" in p.stderr, p.stderr


REPLAY_KILLED_AFTER = """
import os, signal, sys
import rmq
sys.path.insert(0, sys.argv[4])
from conftest import small_config
from rmq.export import Selection, replay

class KilledAfter:
    # The destination store, killed with SIGKILL (no close, no flush) after its k-th put.
    def __init__(self, store, k):
        self.store, self.k = store, k
    def __getattr__(self, name):
        return getattr(self.store, name)
    def put(self, *args, **kwargs):
        if self.k == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        self.k -= 1
        return self.store.put(*args, **kwargs)

cfg = small_config(mapped_file_size_consume_queue=160, max_hash_slot_num=16, max_index_num=32)
dst = rmq.MessageStore(sys.argv[2], cfg)
replay(sys.argv[1], KilledAfter(dst, int(sys.argv[3])), Selection(topics=["ExA", "ExB"]), to_topic=None)
"""


def _replayed(dst: Path) -> list[tuple[str, int, bytes, int, str | None]]:
    with rmq.MessageStore(dst, CONFIG, read_only=True) as s:
        return [(m.topic, m.queue_id, m.body, m.born_timestamp, m.uniq_key) for m in s.scan()]


@pytest.mark.parametrize("k", [0, 1, 67, 133])
def test_a_replay_killed_part_way_resumes_without_appending_twice(src: Path, tmp_path: Path, k: int) -> None:
    """A replay SIGKILLed after its k-th put (of 134), then `rmq replay --resume` with the same filters: the
    destination holds every selected message once, in order; a second resume appends nothing. (Without
    `--resume` the rerun appends the first k again, as on main.)"""
    want = [
        (r["topic"], r["queue_id"], r["body"], int(r["born_timestamp"].timestamp() * 1000), r["uniq_key"])
        for r in everything(src)
        if r["topic"] in ("ExA", "ExB")
    ]
    dst = tmp_path / "dst"
    child = subprocess.run(
        [sys.executable, "-c", REPLAY_KILLED_AFTER, str(src), str(dst), str(k), str(Path(__file__).parent)],
        check=False,
    )
    assert child.returncode == -9
    assert len(_replayed(dst)) == k  # each put before the kill is in the log (a kill loses no page)
    args = ["replay", src, dst, "--topic", "ExA", "--topic", "ExB", "--resume", "--json"]
    args += ["--max-hash-slot-num", "16", "--max-index-num", "32"]
    p = rmq_cli(*args)
    assert p.returncode == 0, p.stderr
    assert _replayed(dst) == want
    p = rmq_cli(*args)
    assert p.returncode == 0 and json.loads(p.stdout)["replayed"] == 0, p.stdout
    assert _replayed(dst) == want


def test_a_replay_cut_short_by_a_full_disk_says_to_resume(
    src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """QA: a replay that met a full disk said "free space and retry", and rerunning the same command appended every
    message again after those already appended (5585 where the source had 3000). The error now says to rerun with
    --resume, which goes on after them."""
    import rmq.cli as cli
    import rmq.export as export_module

    real = export_module.replay

    class FullAfter:
        def __init__(self, store: rmq.MessageStore, k: int) -> None:
            self.store, self.k = store, k

        def __getattr__(self, name: str) -> Any:
            return getattr(self.store, name)

        def put(self, *args: Any, **kwargs: Any) -> Any:
            if self.k == 0:
                raise rmq.DiskFullError(errno.ENOSPC, "no space left on the device for x; free space and retry")
            self.k -= 1
            return self.store.put(*args, **kwargs)

    monkeypatch.setattr(export_module, "replay", lambda source, dst, *a, **k: real(source, FullAfter(dst, 20), *a, **k))
    dst = tmp_path / "dst"
    args = ["replay", str(src), str(dst), "--topic", "ExA", "--max-hash-slot-num", "16", "--max-index-num", "32"]
    assert cli.main(args) == cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert "rerun with --resume to go on after them" in err, err
    assert len(_replayed(dst)) == 20
    monkeypatch.setattr(export_module, "replay", real)
    assert cli.main([*args, "--resume"]) == 0
    assert [m[2] for m in _replayed(dst)] == [r["body"] for r in everything(src) if r["topic"] == "ExA"]


def test_resume_refuses_a_destination_this_replay_did_not_fill(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "dst"
    with rmq.MessageStore(dst, CONFIG) as s:
        s.put("Other", b"not from the source")
    with rmq.MessageStore(dst, CONFIG) as s, pytest.raises(rmq.InvalidArgumentError, match="cannot resume"):
        replay(src, s, Selection(topics=["ExA"]), resume=True)
    assert [m[:3] for m in _replayed(dst)] == [("Other", 0, b"not from the source")]  # nothing appended


@pytest.fixture(scope="module")
def broker_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store as a broker leaves it: a plain message, a delayed one delivered (level 1), one still waiting
    (level 18, two hours), a transaction committed (half, op, message) and one left open (a half only)."""
    from rmq.transaction import LocalTransactionState, TransactionProducer

    root = tmp_path_factory.mktemp("broker") / "src"
    with rmq.MessageStore(root, CONFIG) as s:  # services on: the schedule service delivers level 1
        s.put("T", b"plain", keys="k-plain")
        s.put("T", b"soon", properties={"DELAY": "1", "biz": "x"}, keys="k-soon")
        s.put("T", b"later", queue_id=1, properties={"DELAY": "18"}, keys="k-later")
        p = TransactionProducer(s, "G")
        p.end_transaction(p.send_half("T", b"tx-commit"), LocalTransactionState.COMMIT_MESSAGE)
        p.send_half("T", b"tx-open")
        deadline = time.monotonic() + 30
        while s.get_max_offset_in_queue("T", 0) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.wait_dispatched(10)
        assert [m.body for m in s.scan() if m.topic == "T"] == [b"plain", b"tx-commit", b"soon"]
    return root


def test_replay_of_a_broker_store_keeps_delays_and_leaves_bookkeeping_out(broker_src: Path, tmp_path: Path) -> None:
    """On main `rmq replay` of such a store stopped at the first delayed message with "SCHEDULE_TOPIC_XXXX: this
    system topic does not accept messages from producers" (exit 2, the messages before it appended); a
    delivered copy would have been delayed a second time (its DELAY property put again), and a committed
    transaction's message stored as a half message (its TRAN_MSG property put again). Now: every message a
    consumer sees is replayed once, not delayed again; the waiting one is delayed again in the destination for
    its real topic and queue; the schedule's delivered record and the transaction bookkeeping are left out and
    counted."""
    dst = tmp_path / "dst"
    p = rmq_cli("replay", broker_src, dst, "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["replayed"] == 4
    assert out["left_out"] == {
        "SCHEDULE_TOPIC_XXXX": 1,
        "RMQ_SYS_TRANS_HALF_TOPIC": 2,
        "RMQ_SYS_TRANS_OP_HALF_TOPIC": 1,
    }
    with rmq.MessageStore(dst, CONFIG, start_services=False) as d:
        got = [(m.topic, m.queue_id, m.body, m.properties.get("DELAY"), m.properties.get("TRAN_MSG")) for m in d.scan()]
        assert got == [
            ("T", 0, b"plain", None, None),
            ("SCHEDULE_TOPIC_XXXX", 17, b"later", "18", None),
            ("T", 0, b"tx-commit", None, None),
            ("T", 0, b"soon", None, None),
        ]
        assert [m.properties.get("REAL_QID") for m in d.scan()] == [None, "1", "0", "0"]
        assert d.get_max_offset_in_queue("T", 0) == 3
        assert [m.body for m in d.query_message("SCHEDULE_TOPIC_XXXX", "k-later").messages] == [b"later"]
    plain = rmq_cli("replay", broker_src, tmp_path / "dst2")
    assert plain.returncode == 0 and "left out 1 records of SCHEDULE_TOPIC_XXXX" in plain.stderr, plain.stderr
    # Resumed after each message, the destination ends the same, with --to-topic too.
    for to_topic in (None, "U"):
        extra = [] if to_topic is None else ["--to-topic", to_topic]
        whole = tmp_path / f"whole-{to_topic}"
        assert rmq_cli("replay", broker_src, whole, *extra).returncode == 0
        with rmq.MessageStore(whole, CONFIG, start_services=False) as w:
            expected = [(m.topic, m.queue_id, m.body, m.properties.get("REAL_TOPIC")) for m in w.scan()]
        for k in range(1, 5) if to_topic is None else (2,):
            part = tmp_path / f"part-{to_topic}-{k}"
            with rmq.MessageStore(part, CONFIG, start_services=False) as d:
                for m in list(rmq.MessageStore(whole, CONFIG, read_only=True).scan())[:k]:
                    props = dict(m.properties)
                    for broker_prop in ("UNIQ_KEY", "TAGS", "KEYS", "WAIT", "CLUSTER", "MIN_OFFSET", "MAX_OFFSET"):
                        props.pop(broker_prop, None)
                    if m.topic == "SCHEDULE_TOPIC_XXXX":
                        topic, queue_id = props.pop("REAL_TOPIC"), int(props.pop("REAL_QID"))
                    else:
                        topic, queue_id = m.topic, m.queue_id
                    d.put(
                        topic,
                        m.body,
                        queue_id=queue_id,
                        keys=" ".join(m.keys) or None,
                        properties=props | {"UNIQ_KEY": m.uniq_key},
                        born_host=m.born_host,
                        born_timestamp=m.born_timestamp,
                    )
            r = rmq_cli("replay", broker_src, part, "--resume", *extra)
            assert r.returncode == 0, r.stderr
            with rmq.MessageStore(part, CONFIG, start_services=False) as d:
                assert [(m.topic, m.queue_id, m.body, m.properties.get("REAL_TOPIC")) for m in d.scan()] == expected, k


def test_an_export_into_a_directory_that_does_not_exist_names_that_directory(src: Path, tmp_path: Path) -> None:
    """It named the temporary file (`.x.jsonl.tmp`), which the user never gave."""
    out = tmp_path / "nodir" / "x.jsonl"
    with pytest.raises(rmq.InvalidArgumentError, match="create .*nodir' first"):
        export(src, out)
    p = cli("export", str(src), str(out))
    assert p.returncode == 2 and ".tmp" not in p.stderr and "nodir" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "nodir").exists()


def test_an_export_never_replaces_a_special_file_and_writes_through_a_symlink(src: Path, tmp_path: Path) -> None:
    """QA: `rmq export S OUT` renamed its temporary file over whatever OUT was: a FIFO, a device (as root,
    `rmq export S /dev/null` replaced the machine's /dev/null) or a symlink became a regular file, exit 0. A FIFO
    or a device is refused, nothing written; a symlink stays and its target is written, as `>` would."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for fmt in FORMATS:
        with pytest.raises(rmq.InvalidArgumentError, match="is a FIFO .*not a regular file.*Nothing was written"):
            export(src, fifo, fmt)
    p = cli("export", str(src), str(fifo))
    assert p.returncode == 2 and "is a FIFO" in p.stderr and "Traceback" not in p.stderr, p.stderr
    to_fifo = tmp_path / "to-fifo"
    to_fifo.symlink_to(fifo)
    p = cli("export", str(src), str(to_fifo))
    assert p.returncode == 2 and f"leads to {str(fifo)!r}, which is a FIFO" in p.stderr, p.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and to_fifo.is_symlink()
    # A symlink to a file (or to where a file will be): the link stays, the file it names is the export.
    target = tmp_path / "target.jsonl"
    target.write_text("precious\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to("target.jsonl")
    p = cli("export", str(src), str(link))
    assert p.returncode == 0, p.stderr
    assert link.is_symlink() and os.readlink(link) == "target.jsonl"
    assert len(target.read_text().splitlines()) == N
    dangling = tmp_path / "dangling.jsonl"
    dangling.symlink_to("made.jsonl")
    assert export(src, dangling, "parquet") == N and dangling.is_symlink()
    assert pq.read_table(tmp_path / "made.jsonl").num_rows == N
    # A leftover temporary file that is not a regular file is not written through either.
    victim = tmp_path / "victim"
    victim.write_text("mine")
    (tmp_path / ".x.jsonl.tmp").symlink_to(victim)
    with pytest.raises(rmq.InvalidArgumentError, match=r"\.x\.jsonl\.tmp.*is a symlink"):
        export(src, tmp_path / "x.jsonl")
    assert victim.read_text() == "mine" and (tmp_path / ".x.jsonl.tmp").is_symlink()
    assert not (tmp_path / "x.jsonl").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["fifo", "to-fifo", "target.jsonl", "link.jsonl", "dangling.jsonl", "made.jsonl", "victim", ".x.jsonl.tmp"]
    )
