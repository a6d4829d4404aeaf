"""`rmq check`'s RocketMQ verdict against RocketMQ itself: damaged copies of a store are opened by the real
`DefaultMessageStore` 5.3.1 (the interop harness's `read`), and what it kept must be what the verdict said.
Also: a store written by `rmq replay` opens in RocketMQ with every message, key and property."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from test_interop import CONFIG, Run, by_type, java, java_describe

import rmq
from rmq.check import check_store
from rmq.export import Selection, replay

__all__ = ["java"]  # the session fixture, used by name

SEG = 65536


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int]]:
    root = tmp_path_factory.mktemp("vs") / "base"
    offsets = []
    with rmq.MessageStore(root, CONFIG) as store:
        for i in range(1400):
            r = store.put(("VsA", "VsB")[i % 2], b"m%05d." % i * (20 + i % 30), queue_id=i % 2, keys=f"k{i}")
            offsets.append(r.wrote_offset)
        store.wait_dispatched(10)
    assert len(list((root / "commitlog").iterdir())) >= 5
    return root, offsets


def damaged(base: Path, dst: Path, at: int, crashed: bool, *, body: bool = False) -> None:
    """Garbage over the record header at `at` (or, with `body`, one body byte flipped: its CRC breaks)."""
    shutil.copytree(base, dst)
    seg = dst / "commitlog" / f"{at - at % SEG:020}"
    data = bytearray(seg.read_bytes())
    if body:
        data[at % SEG + 120] ^= 0x20
    else:
        data[at % SEG : at % SEG + 12] = b"\xee" * 12
    seg.write_bytes(bytes(data))
    if crashed:
        (dst / "abort").write_bytes(b"")


def kept_by_rocketmq(java: Run, root: Path, tmp: Path) -> tuple[int, int]:
    described: list[dict[str, Any]] = java_describe(java, root, tmp)
    store = by_type(described, "store")[0]
    return store["maxPhyOffset"], len(by_type(described, "message"))


@pytest.mark.parametrize("crashed", [False, True], ids=["closed", "crashed"])
def test_truncation_verdict_is_what_rocketmq_does(
    java: Run, base: tuple[Path, list[int]], tmp_path: Path, crashed: bool
) -> None:
    root, offsets = base
    at = offsets[-40]
    case = tmp_path / "case"
    damaged(root, case, at, crashed)
    rep = check_store(case, CONFIG)
    m = re.search(r"truncate the commitlog at offset (\d+), dropping (\d+) messages", rep["rocketmq_verdict"])
    assert m, rep["rocketmq_verdict"]
    cut, dropped = int(m[1]), int(m[2])
    assert (cut, dropped) == (at, 39)
    end, kept = kept_by_rocketmq(java, case, tmp_path)
    assert end == cut
    assert kept == len(offsets) - 1 - dropped


def test_damage_outside_rocketmqs_window_is_kept_by_it(java: Run, base: tuple[Path, list[int]], tmp_path: Path) -> None:
    root, offsets = base
    at = offsets[5]  # the first segment: a clean-shutdown recovery validates the last three only
    case = tmp_path / "case"
    damaged(root, case, at, crashed=False, body=True)
    rep = check_store(case, CONFIG)
    assert f"would not look at offset {at}" in rep["rocketmq_verdict"], rep["rocketmq_verdict"]
    assert [f["offset"] for f in rep["findings"] if f["area"] == "commitlog"] == [at]
    with rmq.MessageStore(root, CONFIG, read_only=True) as store:
        full_end = store.max_offset
    end, _ = kept_by_rocketmq(java, case, tmp_path)
    assert end == full_end


def test_replayed_store_opens_in_rocketmq_with_keys_and_properties(
    java: Run, base: tuple[Path, list[int]], tmp_path: Path
) -> None:
    root, _ = base
    dst = tmp_path / "dst"
    with rmq.MessageStore(dst, CONFIG) as store:
        n = replay(root, store, Selection(topics=["VsB"], key=None))
        store.wait_dispatched(10)
    described = java_describe(java, dst, tmp_path)
    messages = by_type(described, "message")
    assert len(messages) == n == 700
    with rmq.MessageStore(root, CONFIG, read_only=True) as src:
        originals = [m for m in src.scan() if m.topic == "VsB"]
    for theirs, ours in zip(messages, originals, strict=True):
        props = dict(p.split("\x01", 1) for p in theirs["properties"].split("\x02") if p)
        assert props["KEYS"] == ours.properties["KEYS"]
        assert props["UNIQ_KEY"] == ours.properties["UNIQ_KEY"]
        assert theirs["bodyCrc"] == ours.body_crc
    keys = {k["key"]: k["physicalOffsets"] for k in by_type(described, "key")}
    assert all(keys[m.properties["KEYS"]] for m in originals)
