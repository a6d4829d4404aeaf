"""The `rmq` command as a user meets it: driven as a subprocess, judged by exit status, stdout and stderr.

`rmq demo` writes and reads back a workload; `rmq scan` prints a store's messages (text or JSON lines, with tags,
keys, the body CRC verdict and, if asked, bodies); errors are one line that says what to do, never a traceback.
"""

from __future__ import annotations

import base64
import fcntl
import io
import json
import os
import pty
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

import rmq
from conftest import SMALL, snapshot
from rmq.demo import run_demo
from rmq.offsets import ConsumerOffsetManager


def rmq_cli(*args: str | Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Runs `rmq ARGS` in a child process, as a shell would (stdout and stderr piped)."""
    return subprocess.run(
        [sys.executable, "-m", "rmq.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        **kwargs,  # type: ignore[call-overload]
    )


def one_line_error(proc: subprocess.CompletedProcess[str], code: int = 2) -> str:
    """The single stderr line of a failed command (no traceback), after checking the exit status."""
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("rmq"), proc.stderr
    return lines[0]


def test_demo_writes_reads_back_and_appends_on_a_second_run(tmp_path: Path) -> None:
    store = tmp_path / "demo"
    first = run_demo(store, messages=300, segment_size=64 * 1024, fresh=True, out=io.StringIO())
    assert first["messages_before"] == 0 and first["messages_written"] == 300 + 32 + 1
    assert first["messages_scanned"] == first["messages_written"] == first["body_crc_ok"]
    segments = first["segments"]
    assert first["long_topic_record_version"] == 2 and isinstance(segments, int) and segments > 1
    # Dispatch caught up: each consume queue holds every message of its queue; key and time lookups agree.
    assert first["dispatched"] and first["key_lookups_ok"] and first["time_lookups_ok"]
    cq_max = first["consume_queue_max_offsets"]
    assert isinstance(cq_max, dict) and sum(cq_max.values()) == first["messages_written"]
    assert first["index_files"] == 1
    out = io.StringIO()
    # Without a segment size the second run keeps the store's own (it was refused as 1 MiB segments).
    second = run_demo(store, messages=10, segment_size=None, fresh=False, out=out)
    g1 = first["consumer_group"]
    assert isinstance(g1, dict)
    retried = g1["sent_to_retry"]
    assert isinstance(retried, int)
    # The first run's consumers added its retried messages to the store after the scan: each twice, scheduled in
    # SCHEDULE_TOPIC_XXXX (delay level 1) and delivered to the retry topic.
    assert second["messages_before"] == first["messages_scanned"] + 2 * retried
    assert second["messages_scanned"] == second["messages_before"] + 10 + 32 + 1
    cq_max = second["consume_queue_max_offsets"]
    assert isinstance(cq_max, dict) and sum(cq_max.values()) == second["messages_scanned"]
    assert "v2 record" in out.getvalue()
    # The consumer group: a first run consumes all 100 OrderCreated messages; the second only the 4 new ones.
    g2 = second["consumer_group"]
    assert isinstance(g2, dict)
    assert g1["caught_up"] and g2["caught_up"]
    # At least once: a batch in a member's listener when a rebalance gives its queue to a member starting after it
    # is not committed, and is consumed again there (CI under load: 109 for 100). The committed offsets below say
    # that each message was consumed.
    assert g1["consumed"] >= 100 and g2["consumed"] >= 4, (g1, g2)
    # seq 0 fails its first delivery (seq 250 is not an OrderCreated message of a 300-message run).
    sent = g1["sent_to_retry"]
    assert isinstance(sent, int) and 1 <= sent <= 8 and g1["retries_consumed"] == sent
    owned = g1["queues_owned"]
    assert isinstance(owned, dict) and len(owned) == 3
    all_owned = [q for qs in owned.values() for q in qs]
    assert sorted(all_owned) == sorted({*all_owned}) and len(all_owned) == 5  # 4 queues + the retry queue
    reloaded = ConsumerOffsetManager(store / "config" / "consumerOffset.json")
    assert reloaded.load()
    assert sum(reloaded.query_offsets("demo-order-consumers", "OrderCreated").values()) == 104
    assert reloaded.query_offsets("demo-order-consumers", "%RETRY%demo-order-consumers") == {
        0: sent + g2["sent_to_retry"]
    }
    # A segment size for the existing store is said and not used (it was an InvalidConfigError, against the docs).
    out = io.StringIO()
    third = run_demo(store, messages=5, segment_size=2 * 1024 * 1024, fresh=False, out=out)
    assert third["messages_before"] > second["messages_scanned"]
    assert "which it keeps: --segment-size 2097152 sets a new store's" in out.getvalue()


BODIES = [b"plain", "标签 ünïcode".encode(), b"two\nlines\ttab", b"\xff\xfe not utf-8 \x00", b""]


def write_store(path: Path, config: rmq.StoreConfig = SMALL, n: int = 40) -> list[int]:
    with rmq.MessageStore(path, config) as store:
        return [
            store.put(
                "T", BODIES[i % len(BODIES)], queue_id=i % 2, tags="标签" if i % 3 else None, keys=[f"k{i}", "shared"]
            ).wrote_offset  # fmt: skip
            for i in range(n)
        ]


def test_version() -> None:
    proc = rmq_cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"rmq {rmq.__version__}"


def test_scan_prints_tags_keys_and_the_crc_verdict_as_text_and_json(tmp_path: Path) -> None:
    offsets = write_store(tmp_path / "s")
    text = rmq_cli("scan", tmp_path / "s")
    assert text.returncode == 0 and text.stderr == ""
    lines = text.stdout.splitlines()
    assert len(lines) == len(offsets)
    assert lines[1].split()[0] == str(offsets[1]) and " T q1/0 " in lines[1]
    assert 'tags="标签"' in lines[1] and 'keys=["k1", "shared"]' in lines[1] and "crc=ok" in lines[1]
    assert "tags=null" in lines[0] and "body=" not in lines[0]
    js = rmq_cli("scan", tmp_path / "s", "--json")
    assert js.returncode == 0 and js.stderr == ""
    rows = [json.loads(line) for line in js.stdout.splitlines()]
    assert [r["commitlog_offset"] for r in rows] == offsets
    assert [r["queue_offset"] for r in rows[:4]] == [0, 0, 1, 1]
    assert rows[1]["tags"] == "标签" and rows[0]["tags"] is None and rows[5]["keys"] == ["k5", "shared"]
    assert all(r["body_crc_ok"] is True for r in rows) and "body" not in rows[0]
    assert rows[0]["msg_id"] == "7F00000100002A9F0000000000000000" and rows[0]["properties"]["KEYS"] == "k0 shared"
    limited = rmq_cli("scan", tmp_path / "s", "--json", "--from", offsets[2], "--limit", "2")
    assert [json.loads(x)["commitlog_offset"] for x in limited.stdout.splitlines()] == offsets[2:4]


@pytest.mark.parametrize("fmt", ["text", "hex", "base64"])
def test_scan_prints_bodies_in_each_format(tmp_path: Path, fmt: str) -> None:
    write_store(tmp_path / "s", n=len(BODIES))
    proc = rmq_cli("scan", tmp_path / "s", "--json", "--body-format", fmt)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["body_format"] for r in rows] == [fmt] * len(BODIES)
    decode = {
        "text": lambda s: s.encode("utf-8", "surrogateescape"),
        "hex": bytes.fromhex,
        "base64": base64.b64decode,
    }[fmt]
    if fmt == "text":  # UTF-8 as is; other bytes as \xNN
        assert [r["body"] for r in rows] == [b.decode("utf-8", "backslashreplace") for b in BODIES]
    else:
        assert [decode(r["body"]) for r in rows] == BODIES
    text = rmq_cli("scan", tmp_path / "s", "--body")  # --body alone: text
    assert [line.rsplit(" body=", 1)[1] for line in text.stdout.splitlines()] == [
        json.dumps(b.decode("utf-8", "backslashreplace"), ensure_ascii=False) for b in BODIES
    ]


def test_scan_flags_a_body_that_fails_its_crc_and_exits_1(tmp_path: Path) -> None:
    offsets = write_store(tmp_path / "s", n=200)
    with rmq.MessageStore(tmp_path / "s", SMALL) as store:
        msg = store.read(offsets[1])
        assert msg is not None and msg.body == BODIES[1]
        at = offsets[1] + bytes(msg.raw).index(BODIES[1])
        files = store.commitlog_files()
    segment = Path(files[0])
    data = bytearray(segment.read_bytes())
    data[at] ^= 0x01
    segment.write_bytes(bytes(data))
    proc = rmq_cli("scan", tmp_path / "s", "--json")
    line = one_line_error(proc, code=1)
    assert "1 of 200 messages" in line and f"commitlog offset {offsets[1]}" in line
    rows = [json.loads(x) for x in proc.stdout.splitlines()]
    assert [r["commitlog_offset"] for r in rows if not r["body_crc_ok"]] == [offsets[1]]
    text = rmq_cli("scan", tmp_path / "s")
    assert text.returncode == 1 and [x.split()[0] for x in text.stdout.splitlines() if "crc=BAD" in x] == [
        str(offsets[1])
    ]


def test_demo_fresh_deletes_only_a_store_no_process_holds(tmp_path: Path) -> None:
    """`rmq demo --fresh` deletes a store directory, or an empty one; never a directory holding other files,
    never a store a process has open (a broker or rmq: its lock), in another process or this one."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("mine")
    line = one_line_error(rmq_cli("demo", "--store", home, "--messages", "5", "--fresh", "--no-spark"))
    assert "holds other files" in line and "nothing was deleted" in line
    assert (home / "notes.txt").read_text() == "mine" and sorted(p.name for p in home.iterdir()) == ["notes.txt"]
    store = tmp_path / "store"
    with rmq.MessageStore(store, SMALL) as s:
        s.put("T", b"kept")
        with pytest.raises(rmq.StoreLockedError):
            run_demo(store, messages=5, segment_size=64 * 1024, fresh=True, out=io.StringIO())
        assert s.read(0) is not None
    holder = subprocess.Popen(
        [sys.executable, "-c", "import rmq, sys; s = rmq.MessageStore(sys.argv[1]); print('ready', flush=True); "
         "sys.stdin.read()", str(store)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        line = one_line_error(rmq_cli("demo", "--store", store, "--messages", "5", "--fresh", "--no-spark"))
        assert "locked" in line
    finally:
        holder.communicate("", timeout=60)
    with rmq.MessageStore(store) as s:
        assert [m.body for m in s.scan()] == [b"kept"]
    # Unheld, the store is deleted and the demo starts from nothing; an empty directory is fine too.
    done = run_demo(store, messages=5, segment_size=64 * 1024, fresh=True, out=io.StringIO())
    assert done["messages_before"] == 0
    (tmp_path / "empty").mkdir()
    assert (
        run_demo(tmp_path / "empty", messages=5, segment_size=64 * 1024, fresh=True, out=io.StringIO())[
            "messages_before"
        ]
        == 0
    )


def test_removing_a_store_refuses_a_directory_holding_anything_a_store_does_not(tmp_path: Path) -> None:
    """QA: `rmq demo --store DIR --fresh` deleted DIR's contents whenever it held a `commitlog/` (the only check),
    and `rmq._native.remove_store` deleted any directory at all. Only a store's own names may be deleted
    (spec 9.1, and rmq's `rmq-groups/`); anything else leaves the directory as it was, no lock file created."""
    home = tmp_path / "home"
    (home / "commitlog").mkdir(parents=True)
    (home / "thesis.tex").write_text("mine")
    (home / "photos").mkdir()
    before = snapshot(home)
    line = one_line_error(rmq_cli("demo", "--store", home, "--messages", "5", "--fresh", "--no-spark"))
    assert "holds other files than a store's" in line and '"photos", "thesis.tex"' in line
    assert "nothing was deleted" in line
    with pytest.raises(rmq.InvalidArgumentError, match="nothing was deleted") as e:
        rmq._native.remove_store(home)
    assert e.value.path == str(home)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(rmq.InvalidArgumentError, match="not a directory"):
        rmq._native.remove_store(tmp_path / "afile")
    assert snapshot(home) == before and (tmp_path / "afile").read_text() == "x"
    # A store with everything rmq and a broker put at its root is deleted, and so is an empty directory.
    store = tmp_path / "store"
    write_store(store, n=3)
    for name in ("rmq-groups", "compaction", "timerwheel"):
        (store / name).mkdir()
    (store / "abort.bak").write_text("")
    rmq._native.remove_store(store)
    assert not store.exists()


def test_replay_and_demo_create_a_store_only_where_there_is_none_or_a_store(tmp_path: Path) -> None:
    """`rmq replay SRC DIR` into a directory holding other files created commitlog/, consumequeue/, index/,
    config/, lock and checkpoint among them: refused (a store, a missing or an empty directory are fine). A
    regular file as the destination said "I/O error on afile: File exists (os error 17)"."""
    src = tmp_path / "src"
    write_store(src, n=3)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "notes.txt").write_text("mine")
    for cmd in (["replay", src, docs], ["demo", "--store", docs, "--messages", "1", "--no-spark"]):
        line = one_line_error(rmq_cli(*cmd))
        assert f"{docs} is not a store and holds other files ('notes.txt')" in line and "nothing was written" in line
    assert sorted(p.name for p in docs.iterdir()) == ["notes.txt"]
    afile = tmp_path / "afile"
    afile.write_text("x")
    for cmd in (["replay", src, afile], ["demo", "--store", afile, "--messages", "1", "--no-spark"]):
        line = one_line_error(rmq_cli(*cmd))
        assert f"{afile} is a file, not a directory" in line and "os error" not in line
    assert afile.read_text() == "x"
    assert rmq_cli("replay", src, tmp_path / "new").returncode == 0
    assert rmq_cli("replay", src, tmp_path / "new").returncode == 0  # into a store: appended
    with rmq.MessageStore(tmp_path / "new", read_only=True) as s:
        assert sum(1 for _ in s.scan()) == 6


def test_a_symlink_loop_is_named_as_one(tmp_path: Path) -> None:
    """`rmq scan LOOP` said "LOOP does not exist"."""
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    for cmd in ("scan", "check", "describe"):
        line = one_line_error(rmq_cli(cmd, tmp_path / "a"))
        assert "symlink loop" in line and "does not exist" not in line, line
    line = one_line_error(rmq_cli("replay", tmp_path / "a", tmp_path / "dst"))
    assert "symlink loop" in line and not (tmp_path / "dst").exists()


def test_the_store_the_demo_writes_opens_in_the_api_and_scans(tmp_path: Path) -> None:
    """README: `rmq demo` writes 1 MiB segments; `rmq.MessageStore(path)` (no config) and `rmq scan` read it."""
    store = tmp_path / "demo"
    proc = rmq_cli("demo", "--store", store, "--messages", "20", "--fresh", "--no-spark", "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)["demo"]
    with rmq.MessageStore(store) as s:
        assert s.config.mapped_file_size_commit_log == 1024 * 1024
        sent = summary["consumer_group"]["sent_to_retry"]
        assert sum(1 for _ in s.scan()) == summary["messages_scanned"] + 2 * sent  # scheduled, then delivered
    scan = rmq_cli("scan", store, "--json")
    lines = [json.loads(x) for x in scan.stdout.splitlines()]
    retried = [x for x in lines if x["topic"] == "%RETRY%demo-order-consumers"]
    assert 1 <= len(retried) <= 8  # the consumer group's retries: the batch around seq 0
    scheduled = [x for x in lines if x["topic"] == "SCHEDULE_TOPIC_XXXX"]
    assert len(scheduled) == len(retried) == sent
    assert len(lines) == 20 + 32 + 1 + 2 * len(retried)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["scan", "{store}", "--from", "-5"], "a commitlog offset must be between 0 and"),
        (["scan", "{store}", "--from", str(2**63)], "a commitlog offset must be between 0 and"),
        (["scan", "{store}", "--limit", "ten"], "'ten' is not an integer"),
        (["scan", "{store}", "--body-format", "utf16"], "invalid choice"),
        (["scan", "{store}", "--recovery", "maybe"], "invalid choice"),
        (["recover", "{store}", "--mode", "salvage"], "invalid choice"),
        (["demo", "--segment-size", "0"], "a size must be between 1 and"),
        (["scan"], "the following arguments are required: store"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_arguments_get_one_line_and_exit_2(tmp_path: Path, args: list[str], says: str) -> None:
    write_store(tmp_path / "s", n=3)
    line = one_line_error(rmq_cli(*(a.format(store=tmp_path / "s") for a in args)))
    assert says in line and "--help" in line


def test_a_missing_store_says_so_and_creates_nothing(tmp_path: Path) -> None:
    for cmd in ("scan", "describe", "recover"):
        line = one_line_error(rmq_cli(cmd, tmp_path / "no-such-store"))
        assert "does not exist" in line and "commitlog/" in line
    (tmp_path / "empty").mkdir()
    assert "holds no store" in one_line_error(rmq_cli("scan", tmp_path / "empty"))
    assert sorted(os.listdir(tmp_path)) == ["empty"] and os.listdir(tmp_path / "empty") == []


def test_a_locked_store_is_read_but_not_written(tmp_path: Path) -> None:
    write_store(tmp_path / "s", n=3)
    write_store(tmp_path / "d", n=1)
    with rmq.MessageStore(tmp_path / "s", SMALL), rmq.MessageStore(tmp_path / "d", SMALL):
        # Reading commands open read-only and take no lock: they work beside the writer.
        proc = rmq_cli("scan", tmp_path / "s", "--json")
        assert proc.returncode == 0, proc.stderr
        assert len(proc.stdout.splitlines()) == 3
        # A command that writes is refused with one line.
        line = one_line_error(rmq_cli("replay", tmp_path / "s", tmp_path / "d"))
        recover = one_line_error(rmq_cli("recover", tmp_path / "s"))
    assert "is locked" in line and "close that first" in line
    assert "is locked" in recover and "nothing was changed" in recover


def test_a_store_the_user_cannot_read_says_permission_denied(tmp_path: Path) -> None:
    write_store(tmp_path / "s", n=3)
    # root reads everything: without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH it is held to the modes too.
    as_user = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--"] if os.geteuid() == 0 else []
    os.chmod(tmp_path / "s", 0)
    try:
        proc = subprocess.run(
            [*as_user, sys.executable, "-m", "rmq.cli", "scan", str(tmp_path / "s")],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    finally:
        os.chmod(tmp_path / "s", 0o755)
    line = one_line_error(proc)
    assert "permission denied" in line and str(tmp_path / "s") in line


def test_demo_without_the_spark_extra_says_which_extra_to_install(tmp_path: Path) -> None:
    hide = "import sys; sys.modules['pyarrow'] = None; from rmq.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run(
        [sys.executable, "-c", hide, "demo", "--store", str(tmp_path / "d"), "--messages", "5"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    line = one_line_error(proc)
    assert "pip install 'rmq[spark]'" in line and "pyarrow" in line and "--no-spark" in line
    assert not (tmp_path / "d").exists()  # it said so before writing anything


def test_ctrl_c_exits_130_quietly(tmp_path: Path) -> None:
    store = tmp_path / "d"
    child = subprocess.Popen(
        [sys.executable, "-m", "rmq.cli", "demo", "--store", str(store), "--messages", str(10**8), "--no-spark"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not any((store / "commitlog").glob("0*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 130 and err == "", err
    with rmq.MessageStore(store) as s:  # closed cleanly on the way out
        assert not s.unclean_shutdown


def run_on_a_terminal(*args: str | Path, stdout: Path) -> str:
    """Runs `rmq ARGS` with stderr on a pseudo-terminal and stdout into a file; returns what the terminal got."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a terminal 120 columns wide
    with stdout.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "rmq.cli", *map(str, args)], stdout=out, stderr=slave)
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    assert proc.wait(timeout=300) == 0, seen
    return seen.decode("utf-8", "replace")


def test_progress_bar_on_a_terminal_and_quiet_when_piped(tmp_path: Path) -> None:
    write_store(tmp_path / "s", n=3000)
    shown = run_on_a_terminal("scan", tmp_path / "s", "--json", stdout=tmp_path / "out.jsonl")
    assert "scanning" in shown and "msg/s" in shown and "B/s" in shown
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 3000
    piped = rmq_cli("scan", tmp_path / "s", "--json")
    assert piped.returncode == 0 and piped.stderr == "" and len(piped.stdout.splitlines()) == 3000


def test_scan_into_a_closed_pipe_stops_quietly(tmp_path: Path) -> None:
    write_store(tmp_path / "s", n=3000)
    shell = subprocess.run(
        f"{sys.executable} -m rmq.cli scan {tmp_path / 's'} | head -n 1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert len(shell.stdout.splitlines()) == 1 and shell.stderr == ""


FIXTURE = Path(__file__).parent / "fixtures" / "rocketmq-5.3.1"


def test_describe_of_a_rocketmq_store_infers_its_sizes_and_matches_rocketmq(tmp_path: Path) -> None:
    """`rmq describe STORE` reads the file sizes off the store (64 KiB commitlog, 160-byte consume queues,
    64 slots / 128 entries index) and prints what RocketMQ itself printed for the same store."""
    shutil.copytree(FIXTURE / "store", tmp_path / "store")
    proc = rmq_cli("describe", tmp_path / "store", "--json")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    ours = [json.loads(line) for line in proc.stdout.splitlines()]
    theirs = [json.loads(line) for line in (FIXTURE / "describe.jsonl").read_text(encoding="utf-8").splitlines()]
    assert ours == theirs


def test_describe_writes_hosts_as_address_bytes() -> None:
    from rmq.describe import host_hex

    assert host_hex("10.0.0.2:10911") == "0A000002:10911"
    assert host_hex("[2001:db8::2]:10911") == "20010DB8000000000000000000000002:10911"
    assert host_hex("[::ffff:127.0.0.1]:1") == "00000000000000000000FFFF7F000001:1"


def test_describe_lists_the_index_as_a_read_only_open_holds_it(tmp_path: Path) -> None:
    """After a crash a read-only open rebuilds a damaged newest index file in memory, possibly into more files
    than the disk has (the range to the end of the log overflows one file): `rmq describe` reports the
    headers the store holds rather than reading names off the disk that are not there (as a live broker's
    store is read mid-write), and writes nothing."""
    store_dir = tmp_path / "store"
    config = rmq.StoreConfig(
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=160,
        max_hash_slot_num=64,
        max_index_num=128,
    )
    with rmq.MessageStore(store_dir, config) as store:
        for i in range(300):
            store.put("T", b"x" * 50, keys=[f"k{i}"])
        assert store.wait_dispatched(30)
    files = sorted((store_dir / "index").iterdir())
    assert len(files) >= 4
    files[-1].unlink()
    data = bytearray(files[-2].read_bytes())
    entries_at = 40 + 4 * 64 + 20
    data[entries_at:] = bytes(len(data) - entries_at)
    files[-2].write_bytes(bytes(data))
    (store_dir / "abort").write_bytes(b"")
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in store_dir.rglob("*") if p.is_file()}
    proc = rmq_cli("describe", store_dir, "--json")
    assert proc.returncode == 0, proc.stderr
    head = json.loads(proc.stdout.splitlines()[0])
    with rmq.MessageStore(store_dir, config, read_only=True) as ro:
        held = [name for name, *_ in ro.index_file_headers()]
        assert ro.recovery_report["rebuilt_index_files"], "the damaged file was rebuilt in memory"
    assert [f["name"] for f in head["indexFiles"]] == held
    dump = rmq_cli("dump", store_dir, "--index")
    assert dump.returncode == 0, dump.stderr
    dumped = {Path(json.loads(line)["index_file"]).name for line in dump.stdout.splitlines()}
    assert dumped == {p.name for p in files[:-1]}, "the files on disk, as they are"
    assert len(held) > len(files) - 1, "the rebuild rolled into a file that is only in memory"
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in store_dir.rglob("*") if p.is_file()} == before


def test_a_store_missing_its_middle_segment_is_checked_as_missing_not_misconfigured(tmp_path: Path) -> None:
    """The sizes read off the files took the two segments around a missing one for segments of twice the size:
    `rmq check` and every open without a config then said "configured as 131072 bytes" (InvalidConfigError)
    instead of naming the missing segment."""
    root = tmp_path / "s"
    with rmq.MessageStore(root, rmq.StoreConfig(mapped_file_size_commit_log=65536)) as store:
        while store.max_offset < 2 * 65536 + 1000:
            store.put("T", b"x" * 500)
    segments = sorted((root / "commitlog").iterdir())
    segments[1].unlink()
    assert rmq.StoreConfig.from_files(root).mapped_file_size_commit_log == 65536
    run = rmq_cli("check", root)
    out = run.stdout + run.stderr
    assert run.returncode == 2 and "a segment is missing" in out and "configured as" not in out, out


def test_removing_a_store_refuses_a_users_file_inside_its_directories(tmp_path: Path) -> None:
    """QA: only a store's top-level names were checked, so `rmq demo --fresh` deleted `commitlog/NOTES.txt` and a
    user's `config/backup/` with the store. Every file at every depth must be one a store holds; a store as the
    demo, its consumers, topics and offsets leave it is still deleted."""
    store = tmp_path / "store"
    run_demo(store, messages=50, segment_size=64 * 1024, fresh=True, out=io.StringIO())
    with rmq.MessageStore(store) as s:
        s.create_topic("Mine", 2)
    for user_file in (store / "commitlog" / "NOTES.txt", store / "config" / "backup" / "commitlog-copy" / "x"):
        user_file.parent.mkdir(parents=True, exist_ok=True)
        user_file.write_text("mine")
        before = snapshot(store)
        line = one_line_error(rmq_cli("demo", "--store", store, "--messages", "5", "--fresh", "--no-spark"))
        assert "holds other files than a store's" in line and "nothing was deleted" in line, line
        assert str(user_file.relative_to(store)).startswith(line.split('"')[1]), line
        with pytest.raises(rmq.InvalidArgumentError, match="nothing was deleted"):
            rmq._native.remove_store(store)
        assert snapshot(store) == before
        user_file.unlink()
        if user_file.parent.name == "commitlog-copy":
            shutil.rmtree(store / "config" / "backup")
    assert run_demo(store, messages=5, segment_size=None, fresh=True, out=io.StringIO())["messages_before"] == 0
