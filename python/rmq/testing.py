"""Test support: make the Rust core's I/O fail on purpose (the fault seam).

A fault is armed at one of four points, checked right before the operating-system call is made, so an injected
failure writes nothing:

* ``"flush"``: every msync of a mapped file (commitlog, consume queue, index);
* ``"fsync"``: every fsync of a file (the checkpoint and lock files);
* ``"allocate"``: every claim of disk space (a new commitlog segment, consume-queue or index file, the checkpoint);
* ``"write"``: every write into a file (a put's copy into the commitlog, the checkpoint, abort and lock files).

``errno.ENOSPC`` behaves as a full disk (`rmq.DiskFullError`). Faults are process-wide: use `injected_fault` so
the fault is disarmed when the block ends, or pass ``path`` to limit it to one store's files.
"""

from __future__ import annotations

import errno as errno_codes
import os
from collections.abc import Iterator
from contextlib import contextmanager

from rmq import _native

__all__ = ["FAULT_POINTS", "disarm_faults", "inject_fault", "injected_fault"]

#: The points where a fault can be injected.
FAULT_POINTS = ("flush", "fsync", "allocate", "write")


def inject_fault(
    point: str,
    *,
    after: int = 0,
    times: int | None = 1,
    errno: int = errno_codes.EIO,
    path: str | os.PathLike[str] | None = None,
) -> None:
    """Makes the I/O call at `point` fail: the first `after` checks pass, the next `times` (``None``: every one
    until disarmed) fail with `errno`. With `path`, only files under that path are affected. Replaces a fault
    armed earlier at the same point and path. Raises `rmq.InvalidInputError` for an unknown point or bad counts.
    """
    if not isinstance(point, str):
        raise _native.InvalidInputError(f"point must be one of {FAULT_POINTS}, not {point!r}")
    for name, value in (("after", after), ("times", times), ("errno", errno)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise _native.InvalidInputError(f"{name} must be an int, not {type(value).__name__}")
    if after < 0 or after >= 2**64:
        raise _native.InvalidInputError(f"after must be in [0, 2**64), not {after}")
    if times is not None and not 1 <= times < 2**64:
        raise _native.InvalidInputError(f"times must be in [1, 2**64) or None, not {times}")
    if not 0 < errno < 2**31:
        raise _native.InvalidInputError(f"errno must be a positive error number, not {errno}")
    _native._inject_fault(point, after, times, errno, None if path is None else os.fspath(path))


def disarm_faults(point: str | None = None) -> int:
    """Disarms the faults at `point` (every fault when ``None``); returns how many were armed."""
    return _native._disarm_faults(point)


@contextmanager
def injected_fault(
    point: str,
    *,
    after: int = 0,
    times: int | None = 1,
    errno: int = errno_codes.EIO,
    path: str | os.PathLike[str] | None = None,
) -> Iterator[None]:
    """`inject_fault` for the duration of a ``with`` block; every fault at `point` is disarmed when it ends."""
    inject_fault(point, after=after, times=times, errno=errno, path=path)
    try:
        yield
    finally:
        disarm_faults(point)
