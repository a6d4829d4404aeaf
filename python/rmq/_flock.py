"""Process-wide fcntl locks on rmq's sidecar lock files (`<file>.lock`), safe to take from several threads;
and `fsync_dir`, the last step of replacing a config file.

POSIX record locks belong to a process, and closing *any* descriptor of the file drops them, so each lock file
is opened once per process and held through one descriptor; a thread lock orders the threads of the process.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_registry: dict[str, FileLock] = {}
_registry_lock = threading.Lock()


class FileLock:
    """An exclusive lock on `path` across threads and processes (reentrant within a thread)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._thread_lock = threading.RLock()
        self._depth = 0
        self._fd: int | None = None

    @classmethod
    def of(cls, path: str | os.PathLike[str]) -> FileLock:
        key = os.path.abspath(os.fspath(path))
        with _registry_lock:
            lock = _registry.get(key)
            if lock is None:
                lock = _registry[key] = cls(Path(key))
            return lock

    @contextmanager
    def held(self) -> Iterator[None]:
        with self._thread_lock:
            if self._depth == 0:
                if self._fd is None:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                    self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
                fcntl.lockf(self._fd, fcntl.LOCK_EX)
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0 and self._fd is not None:
                    fcntl.lockf(self._fd, fcntl.LOCK_UN)


def fsync_dir(path: Path) -> None:
    """fsyncs a directory, so that a rename or a new file in it is durable (the config files' last step)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
