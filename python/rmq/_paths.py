"""The rule every command that reads a store and writes elsewhere follows: what it writes (or replaces, or
deletes to overwrite) never lies inside the store it reads, and never holds it.

`rmq export STORE STORE/commitlog/00000000000000000000` would otherwise replace a segment with the export,
`rmq replay STORE STORE` append a store to itself, and `rmq spark STORE OUT` with STORE at `OUT/messages`
delete the store (Spark's overwrite removes the output directory first). Paths are compared resolved (symlinks
followed, `..` folded), so another spelling of the same place is the same place.
"""

from __future__ import annotations

import os
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
