"""RocketMQ's lock against the real JVM: a broker and rmq exclude each other both ways.

`rmq.harness.LockDriver` (tests/interop/harness) takes the lock exactly as RocketMQ 5.3.1's
`DefaultMessageStore` does (`new RandomAccessFile(<root>/lock, "rw").getChannel().tryLock(0, 1, false)`, write
`lock`, force), or starts a real `DefaultMessageStore` (`load()` then `start()`). Java and Maven are needed, as for
test_interop.py: without them these tests skip on a developer machine and fail on CI.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from test_interop import CONFIG, FIXTURE, HARNESS, maven_classpath
from test_lock import RMQ_HOLDER, tree

import rmq

Driver = Callable[..., subprocess.Popen[str]]


@pytest.fixture(scope="module")
def driver() -> Driver:
    """Builds the harness (as test_interop.py does) and returns a starter of `LockDriver COMMAND DIR`."""
    classpath = maven_classpath(HARNESS)

    def start(command: str, store: Path) -> subprocess.Popen[str]:
        return subprocess.Popen(
            ["java", "-cp", classpath, "rmq.harness.LockDriver", command, str(store)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    return start


def ask(driver: Driver, command: str, store: Path) -> str:
    """Runs a one-shot LockDriver command and returns its line."""
    with driver(command, store) as proc:
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out
    return out.strip().splitlines()[-1]


def test_a_jvm_holding_rocketmqs_lock_refuses_rmq_which_changes_nothing(driver: Driver, tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(FIXTURE / "store", store)  # a store RocketMQ wrote
    with driver("hold", store) as jvm:
        assert jvm.stdout is not None and jvm.stdout.readline().strip() == "locked"
        before = tree(store)
        for config in (CONFIG, None):
            with pytest.raises(rmq.StoreLockedError) as info:
                rmq.MessageStore(store, config)
            assert info.value.path == str(store) and "RocketMQ broker" in str(info.value)
        # No abort, no checkpoint, no file created, deleted, resized, rewritten or touched.
        assert tree(store) == before
        assert not (store / "abort").exists()
        # A read-only open takes no lock: it reads the store the JVM holds, and writes nothing either.
        with rmq.MessageStore(store, read_only=True) as ro:
            assert ro.read(0) is not None and ro.read_only
        assert tree(store) == before
        assert jvm.stdin is not None
        jvm.stdin.close()
        assert jvm.wait(timeout=60) == 0
    with rmq.MessageStore(store, CONFIG) as s:  # the JVM let go: rmq opens it
        assert s.read(0) is not None


def test_while_rmq_holds_a_store_rocketmq_cannot_lock_or_start_it(driver: Driver, tmp_path: Path) -> None:
    store = tmp_path / "store"
    with rmq.MessageStore(store, CONFIG) as s:
        for i in range(20):
            s.put("TopicA", b"body-%d" % i, keys=f"k{i}")
        s.wait_dispatched()
        assert ask(driver, "try", store) == "refused"
        assert ask(driver, "start", store) == "start failed: Lock failed,MQ already started"
        assert ask(driver, "try", store) == "refused"  # the JVM's attempts left rmq's lock in force
        assert s.put("TopicA", b"after").status == rmq.PutMessageStatus.PUT_OK
    assert ask(driver, "try", store) == "acquired"
    assert ask(driver, "start", store) == "started"  # a real DefaultMessageStore once rmq closed it


def test_kill_9_of_an_rmq_holder_lets_rocketmq_start(driver: Driver, tmp_path: Path) -> None:
    store = tmp_path / "store"
    with rmq.MessageStore(store, CONFIG) as s:  # the harness's sizes, which the holder reads off the files
        s.put("TopicA", b"before", keys="k")
    with subprocess.Popen([sys.executable, "-c", RMQ_HOLDER, str(store)], stdout=subprocess.PIPE, text=True) as h:
        try:
            assert h.stdout is not None and h.stdout.readline().strip() == "open"
            assert ask(driver, "try", store) == "refused"
        finally:
            h.send_signal(signal.SIGKILL)
            h.wait(timeout=30)
    assert ask(driver, "try", store) == "acquired"
    assert ask(driver, "start", store) == "started"
