"""Delay levels against RocketMQ 5.3.1's own jars (`rmq.harness.ScheduleDriver`, tests/interop/harness).

- The put path: the same producer messages (with DELAY 1..3, 0, -1, 99, "02", and not an int) put through the
  broker's hooks (`HookUtils.handleScheduleMessage`) and through rmq give the same records, byte for byte
  except the store time; a DELAY that is not an int fails on both sides and writes nothing.
- Delivery both ways: a store whose delayed messages rmq wrote is delivered by the real `ScheduleMessageService`
  (it reads rmq's `delayOffset.json` and goes on from there), and a copy by rmq; a store whose delayed messages
  Java wrote, likewise. The delivered records are the same (properties bytes, flags, hosts, times, queue
  offsets; not the store time or the commitlog position, which depend on the threads' interleaving).
- `delayOffset.json`: rmq decodes Java's files and re-encodes them to the same bytes; Java reads rmq's and
  re-encodes them to the same bytes.

Java and Maven are needed, as for test_interop.py (skip on a developer machine, fail on CI).
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from test_interop import CONFIG, HARNESS, maven_classpath

import rmq
from conftest import Parsed, parse_record
from rmq import _native

SCHEDULE = "SCHEDULE_TOPIC_XXXX"
LEVELS = "1s 2s 3s"
CFG = dataclasses.replace(CONFIG, message_delay_level=LEVELS)
BORN = 1_700_000_000_000
#: logback's status lines, which RocketMQ's jars print on stdout.
LOGBACK = re.compile(r"^\d\d:\d\d:\d\d,\d{3} \|-")

Driver = Callable[..., list[str]]


@pytest.fixture(scope="module")
def driver() -> Driver:
    classpath = maven_classpath(HARNESS)

    def run(*args: str | Path) -> list[str]:
        proc = subprocess.run(
            ["java", "-cp", classpath, "rmq.harness.ScheduleDriver", *map(str, args)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-4000:]
        return [line for line in proc.stdout.splitlines() if line and not LOGBACK.match(line)]

    return run


def wait_until(cond: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


# (topic, queue, tags, keys, properties in the producer's order); UNIQ_KEY is added last, as setUniqID does.
MESSAGES: list[tuple[str, int, str | None, str | None, list[tuple[str, str]]]] = [
    ("T", 0, "TagA", "k1 k2", [("biz", "1"), ("DELAY", "1")]),
    ("T", 1, None, None, [("DELAY", "2")]),
    ("T", 2, "TagB", None, [("a", "x"), ("b", "y"), ("DELAY", "3")]),
    ("T", 3, None, "k3", [("DELAY", "0")]),
    ("T", 0, None, None, [("DELAY", "-1")]),
    ("T", 2, "TagC", None, [("DELAY", "99")]),
    ("Other", 5, None, None, [("DELAY", "02"), ("zz", "1")]),
    ("T", 1, "TagA", None, [("DELAY", "abc")]),
    ("T", 0, None, None, [("TIMER_DELAY_SEC", "5"), ("DELAY", "1")]),
]


def uniq(i: int) -> str:
    return f"0A000001{i:024X}"


def spec_file(path: Path, messages: list[tuple[str, int, str | None, str | None, list[tuple[str, str]]]]) -> Path:
    lines = []
    for i, (topic, qid, tags, keys, props) in enumerate(messages):
        kv = ";".join(f"{k}={v}" for k, v in [*props, ("UNIQ_KEY", uniq(i))])
        lines.append(f"{topic}\t{qid}\t{tags or '-'}\t{keys or '-'}\t{kv}\t{BORN + i}\tbody-{i}")
    path.write_text("\n".join(lines) + "\n")
    return path


def rmq_put(
    store: rmq.MessageStore, messages: list[tuple[str, int, str | None, str | None, list[tuple[str, str]]]]
) -> list[str]:
    out = []
    for i, (topic, qid, tags, keys, props) in enumerate(messages):
        try:
            r = store.put(
                topic, f"body-{i}".encode(), queue_id=qid, tags=tags, keys=keys.split(" ") if keys else None,
                properties=dict([*props, ("UNIQ_KEY", uniq(i))]), born_host="10.0.0.1:5555", born_timestamp=BORN + i,
            )  # fmt: skip
        except (rmq.RmqError, ValueError) as e:
            out.append(f"error {type(e).__name__}")
            continue
        m = store.read(r.wrote_offset)
        assert m is not None
        out.append(f"ok {m.topic} {m.queue_id}")
    return out


def records(root: Path) -> list[Parsed]:
    with rmq.MessageStore(root, CFG, read_only=True) as store:
        return [parse_record(bytes(m.raw)) for m in store.scan()]


def same_but_time(a: Parsed, b: Parsed, *also: str) -> None:
    skip = {"store_timestamp", *also}
    da = {k: v for k, v in dataclasses.asdict(a).items() if k not in skip}
    db = {k: v for k, v in dataclasses.asdict(b).items() if k not in skip}
    assert da == db


def test_delayed_puts_store_the_bytes_rocketmq_stores(driver: Driver, tmp_path: Path) -> None:
    java_dir, rmq_dir = tmp_path / "java", tmp_path / "rmq"
    java_out = driver("put", java_dir, LEVELS, spec_file(tmp_path / "spec.tsv", MESSAGES))
    with rmq.MessageStore(rmq_dir, CFG, start_services=False) as store:
        rmq_out = rmq_put(store, MESSAGES)
    assert java_out[-2] == "error NumberFormatException"
    assert [line.split()[0] for line in rmq_out] == [line.split()[0] for line in java_out]
    assert [line for line in rmq_out if line.startswith("ok")] == [line for line in java_out if line.startswith("ok")]
    java_recs, rmq_recs = records(java_dir), records(rmq_dir)
    assert len(java_recs) == len(rmq_recs) == len(MESSAGES) - 1
    for j, r in zip(java_recs, rmq_recs, strict=True):
        same_but_time(j, r)
    # What the broker made of them.
    by_body = {r.body: r for r in rmq_recs}
    assert (by_body[b"body-5"].topic, by_body[b"body-5"].queue_id) == (SCHEDULE, 2)  # 99 clamped to 3
    assert (by_body[b"body-3"].topic, by_body[b"body-4"].topic) == ("T", "T")  # 0 and -1 stored as is
    assert b"TIMER_DELAY_SEC" not in by_body[b"body-8"].properties, "checkIfTimerMessage clears it"


def deliver_with_rmq(root: Path) -> dict[int, int]:
    with rmq.MessageStore(root, CFG) as store:

        def done() -> bool:
            offsets = store.delay_offsets()
            return all(offsets.get(q + 1, 0) >= store.get_max_offset_in_queue(SCHEDULE, q) for q in range(3))

        wait_until(done)
        return store.delay_offsets()


def delivered(root: Path) -> dict[bytes, Parsed]:
    return {r.body: r for r in records(root) if r.topic != SCHEDULE}


def compare_deliveries(java_root: Path, rmq_root: Path, expected: int) -> None:
    j, r = delivered(java_root), delivered(rmq_root)
    assert len(j) == len(r) == expected
    assert j.keys() == r.keys()
    for body in j:
        same_but_time(j[body], r[body], "physical_offset")
    jt = (java_root / "config" / "delayOffset.json").read_bytes()
    rt = (rmq_root / "config" / "delayOffset.json").read_bytes()
    jtable, jversion, issues = _native.decode_delay_offsets(jt, java_root / "config" / "delayOffset.json")
    assert issues == []
    assert _native.encode_delay_offsets(jtable, *jversion).encode() == jt, "rmq re-encodes Java's file to its bytes"
    rtable, _, _ = _native.decode_delay_offsets(rt, rmq_root / "config" / "delayOffset.json")
    used = {level for level, _ in rtable}
    assert [e for e in jtable if e[0] in used] == rtable


def test_rocketmq_delivers_what_rmq_scheduled_and_rmq_delivers_the_same(driver: Driver, tmp_path: Path) -> None:
    src = tmp_path / "src"
    # A first message delivered by rmq, so that Java starts from rmq's delayOffset.json ({1: 1}).
    with rmq.MessageStore(src, CFG) as store:
        store.put("Real0", b"early", delay_level=1, born_host="10.0.0.1:5555", born_timestamp=BORN)
        wait_until(lambda: store.delay_offsets().get(1) == 1)
    assert _native.decode_delay_offsets((src / "config/delayOffset.json").read_bytes(), src)[0] == [(1, 1)]
    # One real queue per level, so queue offsets do not depend on how the levels' deliveries interleave.
    n = 24
    with rmq.MessageStore(src, CFG, start_services=False) as store:
        for i in range(n):
            level = 1 + i % 3
            store.put(
                f"Real{level - 1}", f"m{i}".encode(), queue_id=level - 1, tags="TagA" if i % 2 else None,
                properties={"k": str(i)}, flag=i, born_host="10.0.0.1:5555", born_timestamp=BORN + i,
                delay_level=level, reconsume_times=i % 4,
            )  # fmt: skip
    java_root, rmq_root = tmp_path / "java", tmp_path / "rmq"
    shutil.copytree(src, java_root)
    shutil.copytree(src, rmq_root)
    # Java reads rmq's file and re-encodes it to the same bytes.
    out = driver("delay-reencode", src / "config" / "delayOffset.json", tmp_path / "java.json")
    assert out == ["1 1", out[-1]] and out[-1].startswith("version ")
    assert (tmp_path / "java.json").read_bytes() == (src / "config" / "delayOffset.json").read_bytes()
    assert driver("deliver", java_root, LEVELS, 60_000)[-1] == "delivered"
    offsets = deliver_with_rmq(rmq_root)
    assert offsets == {1: 9, 2: 8, 3: 8}
    compare_deliveries(java_root, rmq_root, n + 1)
    # rmq opens the store Java delivered, takes Java's offsets and delivers nothing twice.
    assert deliver_with_rmq(java_root) == offsets
    assert len(delivered(java_root)) == n + 1 and len(records(java_root)) == 2 * (n + 1)


def test_rmq_delivers_what_rocketmq_scheduled_as_rocketmq_does(driver: Driver, tmp_path: Path) -> None:
    src = tmp_path / "src"
    msgs: list[tuple[str, int, str | None, str | None, list[tuple[str, str]]]] = [
        (f"Real{i % 3}", i % 3, "TagA" if i % 2 else None, f"key{i}" if i % 4 == 0 else None,
         [("k", str(i)), ("DELAY", str(1 + i % 3))])
        for i in range(18)
    ]  # fmt: skip
    assert all(line.startswith("ok SCHEDULE") for line in driver("put", src, LEVELS, spec_file(tmp_path / "s", msgs)))
    java_root, rmq_root = tmp_path / "java", tmp_path / "rmq"
    shutil.copytree(src, java_root)
    shutil.copytree(src, rmq_root)
    assert driver("deliver", java_root, LEVELS, 60_000)[-1] == "delivered"
    assert deliver_with_rmq(rmq_root) == {1: 6, 2: 6, 3: 6}
    compare_deliveries(java_root, rmq_root, 18)


def test_delay_offset_json_both_ways(driver: Driver, tmp_path: Path) -> None:
    cases = [
        (0, 5, []),
        (3, 1_700_000_000_000, [(3, 7), (1, 12), (18, 0)]),
        (201, 1_700_000_000_123, [(level, level * 1000 + 1) for level in range(18, 0, -1)]),
        (1, 2, [(70, 5), (2, 1), (6, 9_000_000_000)]),
    ]
    for n, (counter, ts, table) in enumerate(cases):
        java = tmp_path / f"java{n}.json"
        driver("delay-encode", java, counter, ts, ",".join(f"{lv}:{o}" for lv, o in table))
        text = java.read_bytes()
        decoded, version, issues = _native.decode_delay_offsets(text, java)
        assert (sorted(decoded), version[0], version[2], issues) == (sorted(table), counter, ts, [])
        assert _native.encode_delay_offsets(decoded, *version).encode() == text
        ours = tmp_path / f"rmq{n}.json"
        ours.write_text(_native.encode_delay_offsets(table, counter, 0, ts))
        assert ours.read_bytes() == text, "rmq writes Java's bytes for the same table"
        again = tmp_path / f"again{n}.json"
        lines = driver("delay-reencode", ours, again)
        assert again.read_bytes() == text
        assert sorted(tuple(map(int, line.split())) for line in lines if not line.startswith("version")) == sorted(
            table
        )
