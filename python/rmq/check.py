"""`rmq check STORE`: a read-only consistency report of a store (rmq's or a RocketMQ broker's).

Every record (length, magic, body CRC, property CRC, own offset), every consume-queue entry against its record,
every index file (header, slots, chains) and entry against its record, the checkpoint against the data and
`consumerOffset.json` against each queue's range. It ends with what RocketMQ's recovery and rmq's open would
do with the store. Nothing is written: the store is opened read-only.

Exit status: 0 clean, 1 problems found, 2 unreadable.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, TextIO

from rmq import _native
from rmq._native import ArgumentTypeError
from rmq.store import StoreConfig

CLEAN, PROBLEMS, UNREADABLE = 0, 1, 2


def check_store(path: str | os.PathLike[str], config: StoreConfig | None = None) -> dict[str, Any]:
    """The report as a dict: `clean`, `findings` (each `area`, `kind`, `path`, `offset`, `what`), counts
    (`records`, `record_bytes`, `segments`, `cq_entries`, `index_entries`) and the verdicts
    (`rocketmq_verdict`, `rmq_verdict`). Raises `rmq.RmqError` when the store cannot be read at all."""
    if config is not None and not isinstance(config, StoreConfig):
        raise ArgumentTypeError(f"config must be an rmq.StoreConfig or None, got {type(config).__name__}")
    if not isinstance(path, str | os.PathLike):
        raise ArgumentTypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    cfg = config if config is not None else StoreConfig.from_files(path)
    return _native.check_store(os.fspath(path), cfg.to_native())


def format_report(report: dict[str, Any]) -> str:
    """The report for a person: one line per finding, then the counts and both verdicts."""
    lines = []
    for f in report["findings"]:
        lines.append(f"{f['kind']:<6} {f['area']:<12} {f['path']} @ {f['offset']}: {f['what']}")
    lines.append(
        f"{report['records']} records ({report['record_bytes']} bytes) in {report['segments']} segments, "
        f"{report['cq_entries']} consume-queue entries, {report['index_entries']} index entries checked"
    )
    lines.append(f"RocketMQ: {report['rocketmq_verdict']}")
    lines.append(f"rmq:      {report['rmq_verdict']}")
    lines.append("clean" if report["clean"] else "problems found")
    return "\n".join(lines)


def run_check(store_dir: Path, config: StoreConfig | None, as_json: bool, out: TextIO | None = None) -> int:
    """Prints the report (text or one JSON object) and returns the exit status."""
    out = out if out is not None else sys.stdout
    report = check_store(store_dir, config)
    print(json.dumps(report, ensure_ascii=False) if as_json else format_report(report), file=out)
    return CLEAN if report["clean"] else PROBLEMS
