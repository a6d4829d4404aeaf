"""Process-wide fcntl locks on rmq's sidecar lock files (`<file>.lock`), safe to take from several threads;
and `replace_file`, how the config files (`consumerOffset.json`, `topics.json`, the group registry, local
offsets) are replaced: atomically, and on a full disk with `rmq.DiskFullError` and the old file in place.

POSIX record locks belong to a process, and closing *any* descriptor of the file drops them, so each lock file
is opened once per process and held through one descriptor; a thread lock orders the threads of the process.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rmq import _native

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
            self._acquire(reading=False)
            try:
                yield
            finally:
                self._release()

    @contextmanager
    def held_for_reading(self) -> Iterator[None]:
        """`held()` for a reader of the files the lock guards, so that it never sees a writer's moment between two
        renames. A reader never creates the lock file (a read-only store or tool writes nothing): where it does
        not exist yet (no rmq process ever changed these files: a broker's, or one only read so far), or cannot
        be opened (a read-only directory or mount: nobody there can be replacing the files through rmq either),
        the reader goes ahead without it."""
        with self._thread_lock:
            locked = self._acquire(reading=True)
            try:
                yield
            finally:
                if locked:
                    self._release()

    def _acquire(self, *, reading: bool) -> bool:
        """Takes the lock (the caller holds the thread lock); False, having taken nothing, when `reading` and the
        lock file is out of reach."""
        if self._depth == 0:
            if self._fd is None:
                try:
                    if reading:
                        self._fd = os.open(self.path, os.O_RDWR)
                    else:
                        self.path.parent.mkdir(parents=True, exist_ok=True)
                        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
                except OSError as e:
                    if reading and e.errno in (errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.EROFS):
                        return False
                    full = as_disk_full(e, f"making the lock file {self.path}")
                    if full is not e:  # ext4 needs a block for a new directory (`rmq-groups/`)
                        raise full from e
                    raise
            fcntl.lockf(self._fd, fcntl.LOCK_EX)
        self._depth += 1
        return True

    def _release(self) -> None:
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


def as_disk_full(e: OSError, what: str) -> OSError:
    """`e` as `rmq.DiskFullError` (an `OSError` too, with the same errno) when the device is full, saying `what`
    failed; any other error as it is."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT) and not isinstance(e, _native.DiskFullError):
        full: OSError = _native.DiskFullError(e.errno, f"no space left on the device: {what}", e.filename)
        return full
    return e


def _no_stage(stage: str) -> None:
    pass


def replace_file(
    path: Path,
    data: bytes,
    *,
    bak: Path | None = None,
    sync: bool = True,
    stage: Callable[[str], None] = _no_stage,
) -> None:
    """Replaces `path` with `data` atomically: written to `<path>.tmp` (fsynced with `sync`), the old file
    renamed to `bak` if given, the new one renamed into place, the directory fsynced (with `sync`). `stage` is
    called after each step ("written", "rotated", "renamed": crash tests stop there). A failure removes the
    temporary file and leaves the old content readable (at `path`, or at `bak` if it came between the renames);
    a full disk raises `rmq.DiskFullError`."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        stage("written")
        if bak is not None and path.exists():
            os.replace(path, bak)
        stage("rotated")
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and (full := as_disk_full(e, f"{path} was not replaced")) is not e:
            raise full from e
        raise
    stage("renamed")
    if sync:
        try:
            fsync_dir(path.parent)
        except OSError as e:
            if (full := as_disk_full(e, f"{path} was replaced, but its directory was not synced")) is not e:
                raise full from e
            raise
