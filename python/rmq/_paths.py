"""The rules every command that reads a store and writes elsewhere follows: what it writes (or replaces, or
deletes to overwrite) never lies inside the store it reads, and never holds it; and a file it writes whole (a
temporary file renamed into place) replaces only a regular file, never a FIFO, a device or a socket; and a store
it creates or fills goes where there is none of someone else's files.

`rmq export STORE STORE/commitlog/00000000000000000000` would otherwise replace a segment with the export,
`rmq replay STORE STORE` append a store to itself, and `rmq spark STORE OUT` with STORE at `OUT/messages`
delete the store (Spark's overwrite removes the output directory first). Paths are compared resolved (symlinks
followed, `..` folded), so another spelling of the same place is the same place.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path

import rmq


def _resolved(path: str | os.PathLike[str]) -> Path:
    return Path(os.path.realpath(os.fspath(path)))


#: A store root's directories, any of which may be a symlink to another disk (RocketMQ's `storePathCommitLog`).
STORE_DIRS = ("commitlog", "consumequeue", "index", "config")


def store_trees(store: str | os.PathLike[str]) -> list[Path]:
    """The directories a store occupies, resolved: its root (or the root of a commitlog directory given in its
    place: the readers accept either) and wherever its directories lead when they are symlinks."""
    p = _resolved(store)
    if p.name == "commitlog" and not (p / "commitlog").is_dir():
        p = p.parent
    trees = [p]
    for name in STORE_DIRS:
        d = _resolved(p / name)
        if not any(overlap(t, d) for t in trees):
            trees.append(d)
    return trees


def overlap(a: Path, b: Path) -> bool:
    """Whether two resolved paths are the same place or one lies inside the other."""
    return a == b or a in b.parents or b in a.parents


def refuse_overlap(store: str | os.PathLike[str], written: Iterable[str | os.PathLike[str]], what: str) -> None:
    """Raises `InvalidArgumentError` (nothing written yet) if any of `written` is the store read, lies inside it,
    or holds it."""
    trees = store_trees(store)
    for w in written:
        target = _resolved(w)
        for tree in trees:
            if overlap(tree, target):
                raise rmq.InvalidArgumentError(
                    f"{what} {os.fspath(w)!r} overlaps the store {os.fspath(store)!r} being read ({tree}): writing "
                    "there would change or delete the store; give a path outside it. Nothing was written"
                )


def _kind(mode: int) -> str:
    """What a file that is not a regular file is, for messages."""
    for test, kind in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symlink"),
    ):
        if test(mode):
            return kind
    return "not a regular file"


def output_file(path: str | os.PathLike[str], what: str) -> Path:
    """Where a command that writes the file `path` whole (under a temporary name, then renamed) writes: `path`
    itself when it is missing or a regular file; when it is a symlink, the file the symlink names (missing or
    regular), so the link stays and its target is replaced, as the shell's `>` writes through a link. Anything
    else (a FIFO, a device, a socket, a directory, a symlink leading to one of those or in a loop) is refused
    with `InvalidArgumentError` before anything is written: the rename would replace it with a regular file
    (`/dev/null` for everyone, as root)."""
    given = Path(path)
    target = Path(os.path.realpath(given)) if given.is_symlink() else given
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return target
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        mode = stat.S_IFLNK
    if stat.S_ISREG(mode):
        return target
    kind = "a symlink that cannot be resolved (a loop)" if stat.S_ISLNK(mode) else _kind(mode)
    where = "" if target == given or stat.S_ISLNK(mode) else f" leads to {str(target)!r}, which"
    raise rmq.InvalidArgumentError(
        f"{what} {os.fspath(path)!r}{where} is {kind}, not a regular file: rmq writes a new file and renames "
        "it into place, which would replace it; give the path of a regular file (or of none). Nothing was written"
    )


def create_temporary(tmp: Path, what: str) -> int:
    """Creates the temporary file `tmp` (beside the file it will be renamed to) for writing and returns its
    descriptor: a regular file left there by an earlier run that was killed is removed first; anything else at
    `tmp` (a symlink, a FIFO, ...) is refused with `InvalidArgumentError` and left alone, never written through.
    Created exclusively (`O_EXCL`, mode 0666 less the umask), so nothing can slip in between."""
    try:
        mode = os.lstat(tmp).st_mode
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISREG(mode):
            raise rmq.InvalidArgumentError(
                f"the temporary file {str(tmp)!r} for {what} is {_kind(mode)}, not a leftover of rmq: remove it "
                "or give another path. Nothing was written"
            )
        tmp.unlink()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.open(tmp, flags, 0o666)


def store_destination(path: str | os.PathLike[str], what: str) -> None:
    """Raises `InvalidArgumentError` (nothing written yet) unless a store may be created or filled at `path`: a
    path that does not exist, an empty directory, a store (a directory holding `commitlog/`), or a directory
    holding only what a store holds (`rmq._native.foreign_store_entries`). Opening a store at a directory of
    someone's files would create `commitlog/`, `consumequeue/`, `index/`, `config/`, `lock` and `checkpoint`
    among them; at a file, a FIFO or a symlink loop it fails with an I/O error that does not say why."""
    p = Path(path)
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        if p.is_symlink():
            raise rmq.InvalidArgumentError(
                f"{what} {p} is a symlink to {os.readlink(p)!r}, which does not exist; nothing was written: create "
                "the directory it names, or give another path"
            ) from None
        return
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        raise rmq.InvalidArgumentError(
            f"{what} {p} is a symlink loop (it cannot be resolved); nothing was written: give a directory"
        ) from None
    if not stat.S_ISDIR(mode):
        kind = "a file" if stat.S_ISREG(mode) else _kind(mode)
        raise rmq.InvalidArgumentError(
            f"{what} {p} is {kind}, not a directory; nothing was written: give a directory for the store (one that "
            "does not exist yet, an empty one, or a store's)"
        )
    if (p / "commitlog").is_dir():
        return
    foreign = rmq._native.foreign_store_entries(p)
    if foreign:
        shown = ", ".join(repr(n) for n in foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise rmq.InvalidArgumentError(
            f"{what} {p} is not a store and holds other files ({shown}); nothing was written: a store created there "
            "would put its files (commitlog/, consumequeue/, index/, config/, lock, checkpoint) among them; give a "
            "directory that does not exist yet, an empty one, or a store's"
        )
