"""Read-only beside a live RocketMQ broker's store: while RocketMQ 5.3.1's own `DefaultMessageStore` (the
harness's `LiveWriter`) puts messages, rolls segments and creates consume-queue and index files, rmq opens the
directory read-only, follows it with `refresh()`, and every read command runs on it. rmq sees a consistent
prefix in order, takes nothing from the broker (it keeps writing; RocketMQ reads the result whole afterwards),
writes no file, and once the broker stops, reads exactly what RocketMQ reads."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_interop import CONFIG, HARNESS, Run, by_type, java, java_describe, maven_classpath
from test_read_only import snapshot

import rmq
from rmq.check import check_store

__all__ = ["java"]  # the session fixture, used by name

N = 3000


def body(i: int) -> bytes:
    return (b"live-%06d" % i) * (2 + i % 19)


@pytest.fixture
def live_writer(java: Run, tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    classpath = maven_classpath(HARNESS)
    store = tmp_path / "broker"
    proc = subprocess.Popen(
        ["java", "-cp", classpath, "rmq.harness.LiveWriter", str(store), str(N)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=60)
    for f in (proc.stdin, proc.stdout):
        if f:
            f.close()


def next_line(proc: subprocess.Popen[str]) -> str:
    """The driver's next protocol line (`started`, `put I`, `done`), past RocketMQ's logging."""
    assert proc.stdout is not None
    while line := proc.stdout.readline():
        if line.startswith(("started", "put ", "done")):
            return line.strip()
    raise AssertionError(f"the driver ended (exit {proc.wait(timeout=60)})")


def test_following_a_live_rocketmq_broker(java: Run, live_writer: subprocess.Popen[str], tmp_path: Path) -> None:
    store = tmp_path / "broker"
    assert live_writer.stdout is not None
    assert next_line(live_writer) == "started"
    assert next_line(live_writer).startswith("put ")
    ends, seen, offset, keys_found = [], 0, 0, 0
    with rmq.MessageStore(store, CONFIG, read_only=True) as ro:
        while seen < N:
            ends.append(ro.refresh())
            r = ro.get_message("g", "Live", 0, offset, 512)
            for m in r.messages:
                assert (m.queue_offset, m.body) == (seen, body(seen))
                seen += 1
            offset = r.next_begin_offset
            if seen and keys_found < 5:
                hits = ro.query_message("Live", f"L{seen - 1}", 4)
                assert [m.queue_offset for m in hits.messages] == [seen - 1]
                keys_found += 1
            # Every reading command works on the live directory too.
            if len(ends) % 20 == 1:
                for cmd in (["scan", "--limit", "5", "--json"], ["describe"], ["dump", "--checkpoint"]):
                    p = subprocess.run(
                        [sys.executable, "-m", "rmq.cli", cmd[0], str(store), *cmd[1:]],
                        capture_output=True,
                        text=True,
                        timeout=300,
                    )
                    assert p.returncode in (0, 1), (cmd, p.stderr)
                assert check_store(store, CONFIG)["records"] >= seen
            assert live_writer.poll() is None, "the broker died"
            time.sleep(0.01)
    assert ends == sorted(ends) and len(set(ends)) > 3, ends
    while (line := next_line(live_writer)) != "done":
        assert line.startswith("put"), line
    # The broker stops cleanly; rmq wrote nothing, and reads exactly what RocketMQ reads.
    assert live_writer.stdin is not None
    live_writer.stdin.close()
    assert live_writer.wait(timeout=120) == 0
    before = snapshot(store)
    with rmq.MessageStore(store, CONFIG, read_only=True) as ro:
        ours = [(m.commitlog_offset, m.body) for m in ro.scan()]
    assert snapshot(store) == before
    theirs = by_type(java_describe(java, store, tmp_path), "message")
    assert [m["physicalOffset"] for m in theirs] == [o for o, _ in ours]
    assert len(ours) == N
    assert not sorted(store.rglob("*.rebuild"))
