from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import rmq

SMALL = rmq.StoreConfig(mapped_file_size_commit_log=4096)


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def small_store(store_dir: Path):  # type: ignore[no-untyped-def]
    with rmq.MessageStore(store_dir, SMALL) as store:
        yield store


def tree_digest(root: Path) -> dict[str, str]:
    """Hash of every file under `root` except the lock and abort markers."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name not in ("lock", "abort", "abort.bak")
    }
