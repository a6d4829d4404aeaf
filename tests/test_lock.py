"""The store lock is RocketMQ's: a POSIX record lock (fcntl F_SETLK, F_WRLCK) on byte range [0, 1) of
`<root>/lock`, the lock a broker takes with `FileChannel.tryLock(0, 1, false)`, plus an in-process registry.

Another process's view of the lock is taken with Python's `fcntl.lockf(fd, LOCK_EX | LOCK_NB, 1, 0)`, which is
that same call, from a child process (POSIX locks never conflict within one process). The same checks against
a real JVM are in test_lock_interop.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, precondition, rule

import rmq
from conftest import SMALL

#: Answers, for each store root read from stdin, "held" when another process holds RocketMQ's lock on it and
#: "free" when this process could take it (it then releases it at once). It never holds a lock between lines.
PROBE = r"""
import errno, fcntl, os, sys
for line in sys.stdin:
    fd = os.open(os.path.join(line.rstrip("\n"), "lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        answer = "free"
    except OSError as e:
        assert e.errno in (errno.EAGAIN, errno.EACCES), e
        answer = "held"
    os.close(fd)
    print(answer, flush=True)
"""

#: Holds RocketMQ's lock on argv[1] the way a broker does (fcntl on [0, 1), content "lock") until stdin closes.
POSIX_HOLDER = r"""
import fcntl, os, sys
fd = os.open(os.path.join(sys.argv[1], "lock"), os.O_RDWR | os.O_CREAT, 0o644)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
os.pwrite(fd, b"lock", 0)
os.fsync(fd)
print("locked", flush=True)
sys.stdin.read()
"""

#: Opens the store at argv[1] with rmq and holds it until killed.
RMQ_HOLDER = r"""
import sys, time
import rmq
store = rmq.MessageStore(sys.argv[1], start_reput=False)
store.put("T", b"held")
print("open", flush=True)
while True:
    time.sleep(60)
"""


class Probe:
    """Another process that reports whether RocketMQ's lock on a directory is held."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", PROBE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def held(self, root: Path) -> bool:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{root}\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        assert answer in ("held", "free"), f"probe died: {answer!r}"
        return answer == "held"

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        assert self.proc.wait(timeout=30) == 0
        self.proc.stdout.close()


@pytest.fixture
def probe() -> Iterator[Probe]:
    p = Probe()
    yield p
    p.close()


def tree(root: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every entry under `root`: (mode, mtime in ns, content of files). Run only where this process holds no
    lock on `root`, since reading `<root>/lock` closes a descriptor of it."""
    out: dict[str, tuple[int, int, bytes]] = {}
    for p in sorted(root.rglob("*")):
        st_ = p.lstat()
        out[str(p.relative_to(root))] = (st_.st_mode, st_.st_mtime_ns, p.read_bytes() if p.is_file() else b"")
    return out


def test_lock_is_fcntl_on_byte_zero_held_while_open_and_released_on_close(store_dir: Path, probe: Probe) -> None:
    with rmq.MessageStore(store_dir, SMALL, start_reput=False) as store:
        store.put("T", b"x")
        assert probe.held(store_dir)
    assert not probe.held(store_dir)
    assert (store_dir / "lock").read_bytes() == b"lock"  # RocketMQ's content; read only once nothing holds it
    with rmq.MessageStore(store_dir, SMALL, start_reput=False):
        assert probe.held(store_dir)


def test_second_open_in_this_process_is_refused_by_every_path_and_keeps_the_first_lock(
    tmp_path: Path, store_dir: Path, probe: Probe
) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(store_dir.name)
    store_dir.mkdir()
    with rmq.MessageStore(store_dir, SMALL, start_reput=False) as store:
        for path in (store_dir, alias, tmp_path / "." / "store", Path(os.path.relpath(store_dir))):
            with pytest.raises(rmq.StoreLockedError) as info:
                rmq.MessageStore(path, SMALL)
            assert isinstance(info.value, rmq.StoreStateError) and info.value.path == str(path)
            assert "locked" in str(info.value)
            # The refused open must not have opened and closed <root>/lock: that would drop this process's lock.
            assert probe.held(store_dir)
        assert store.put("T", b"still open").status == rmq.PutMessageStatus.PUT_OK
    with rmq.MessageStore(alias, SMALL, start_reput=False) as again:
        assert again.max_offset > 0 and probe.held(store_dir)


def attempt_open(store_dir: Path, barrier: threading.Barrier, won: list[rmq.MessageStore], refused: list[str]) -> None:
    barrier.wait()
    try:
        won.append(rmq.MessageStore(store_dir, SMALL, start_reput=False))
    except rmq.StoreLockedError as e:
        refused.append(str(e))


def test_racing_threads_one_open_wins(store_dir: Path, probe: Probe) -> None:
    store_dir.mkdir()
    for _ in range(10):
        barrier = threading.Barrier(4)
        won: list[rmq.MessageStore] = []
        refused: list[str] = []
        threads = [threading.Thread(target=attempt_open, args=(store_dir, barrier, won, refused)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(won) == 1 and len(refused) == 3
        assert probe.held(store_dir)
        won[0].close()
        assert not probe.held(store_dir)


def test_a_posix_lock_holder_refuses_open_and_nothing_changes(store_dir: Path) -> None:
    with rmq.MessageStore(store_dir, SMALL) as store:
        store.put("T", b"x", keys="k")
    with subprocess.Popen(
        [sys.executable, "-c", POSIX_HOLDER, str(store_dir)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as holder:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        before = tree(store_dir)
        for config in (SMALL, None):
            with pytest.raises(rmq.StoreLockedError):
                rmq.MessageStore(store_dir, config)
        assert tree(store_dir) == before  # no abort, no checkpoint, no file created, changed or touched
    with rmq.MessageStore(store_dir, SMALL) as store:
        assert not store.unclean_shutdown and store.read(0) is not None


def test_kill_9_of_the_holder_frees_the_lock(store_dir: Path, probe: Probe) -> None:
    with subprocess.Popen([sys.executable, "-c", RMQ_HOLDER, str(store_dir)], stdout=subprocess.PIPE, text=True) as h:
        try:
            assert h.stdout is not None and h.stdout.readline().strip() == "open"
            assert probe.held(store_dir)
            with pytest.raises(rmq.StoreLockedError):
                rmq.MessageStore(store_dir)
        finally:
            h.send_signal(signal.SIGKILL)
            h.wait(timeout=30)
    assert not probe.held(store_dir)
    with rmq.MessageStore(store_dir) as store:
        assert store.unclean_shutdown and store.read(0) is not None


class LockMachine(RuleBasedStateMachine):
    """Opens and closes stores on two directories through several paths each, from this process; another
    process checks after every step that RocketMQ's lock is held exactly while this process has a store open."""

    handles = Bundle("handles")

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp())
        self.dirs = [self.tmp / "a", self.tmp / "b"]
        for d in self.dirs:
            d.mkdir()
            (self.tmp / f"link-{d.name}").symlink_to(d)
        self.open: dict[int, rmq.MessageStore] = {}
        self.probe = Probe()

    def paths(self, i: int) -> list[Path]:
        d = self.dirs[i]
        return [d, self.tmp / f"link-{d.name}", self.tmp / "." / d.name, self.tmp / f"link-{d.name}" / "."]

    @rule(i=st.integers(0, 1), alias=st.integers(0, 3))
    def open_store(self, i: int, alias: int) -> None:
        path = self.paths(i)[alias]
        if i in self.open:
            with pytest.raises(rmq.StoreLockedError):
                rmq.MessageStore(path, SMALL, start_reput=False)
        else:
            self.open[i] = rmq.MessageStore(path, SMALL, start_reput=False)

    @precondition(lambda self: bool(self.open))
    @rule(data=st.data())
    def close_store(self, data: st.DataObject) -> None:
        i = data.draw(st.sampled_from(sorted(self.open)))
        self.open.pop(i).close()

    @invariant()
    def lock_held_exactly_while_open(self) -> None:
        for i, d in enumerate(self.dirs):
            assert self.probe.held(d) == (i in self.open)

    def teardown(self) -> None:
        for s in self.open.values():
            s.close()
        self.probe.close()
        shutil.rmtree(self.tmp)


TestLockMachine = LockMachine.TestCase
TestLockMachine.settings = settings(max_examples=15, stateful_step_count=12, deadline=None)
