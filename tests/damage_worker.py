"""The worker process of the damage matrix (tests/test_damage_matrix.py): damages copies of a store, opens them
and classifies each outcome. A separate process, so that a crash (SIGBUS, abort) or a hang of one case is seen
and classified by the parent instead of ending the test run.

Run as `python damage_worker.py JOB_FILE`. The job holds the base stores, the config, the base inventory
(what every queue delivers, what every key finds, the next queue offsets, the committed consumer offsets) and
the cases. For each case the worker prints `start NAME`, then one JSON line `{"name", "outcome", "detail"}`.

Outcomes (the first three are good):
- "opened, nothing lost": the store opened, every message of the undamaged store is delivered intact by
  `get_message` and found by every key, and the consumer offsets load as committed;
- "repaired and reported": something changed, and every change is reported (`open_report` torn bytes or
  damage, `recovery_report` rebuilt queues or index files, `dispatch_issues()`, or for the offsets file a
  warning naming the file, or `load()` returning False);
- "typed error naming file and offset": an `rmq.RmqError` whose message holds its `path` and `offset`, and
  (when opening refused) no file changed;
- "BAD: ...": an untyped exception or a panic, a typed error without file and offset, an intact message lost
  without a report, a queue offset handed out twice, an offset that moved forward (crash and hang are seen
  by the parent).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
import sys
from pathlib import Path
from typing import Any

GOOD = ("opened, nothing lost", "repaired and reported", "typed error naming file and offset")


def damage(root: Path, case: dict[str, Any]) -> None:
    """Applies `case` to the file `case["file"]` under `root`."""
    path = root / case["file"]
    op, pos = case["op"], case["pos"]
    rng = random.Random(case["name"])
    if op == "delete":
        path.unlink()
        return
    data = bytearray(path.read_bytes())
    pos = min(pos, max(0, len(data) - 1))
    if op == "flip":
        data[pos] ^= 1 << rng.randrange(8)
    elif op == "zero":
        data[pos : pos + 16] = bytes(len(data[pos : pos + 16]))
    elif op == "garbage":
        n = len(data[pos : pos + 16])
        data[pos : pos + 16] = rng.randbytes(n)
    elif op == "truncate":
        del data[pos:]
    elif op == "extend-zero":
        data += bytes(4096)
    elif op == "extend-garbage":
        data += rng.randbytes(4096)
    else:
        raise ValueError(op)
    path.write_bytes(bytes(data))


def snapshot(root: Path) -> dict[str, str]:
    """Every path under `root`: a file maps to its SHA-256, a directory to "dir"."""
    return {
        str(p.relative_to(root)): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
    }


def digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()[:16]


def describe(m: Any) -> list[Any]:
    """What must survive of a message: where it is, its queue, body, tags and keys."""
    return [m.commitlog_offset, m.topic, m.queue_id, m.queue_offset, digest(m.body), m.tags, sorted(m.keys)]


def deliver(store: Any, topic: str, queue_id: int, limit: int) -> dict[str, list[Any]]:
    """UNIQ_KEY -> description of every message `get_message` delivers from queue offset 0, following
    next_begin_offset (at most `limit` calls)."""
    out: dict[str, list[Any]] = {}
    offset = 0
    for _ in range(limit):
        res = store.get_message("GDamage", topic, queue_id, offset, 32)
        for m in res.messages:
            out[m.uniq_key or ""] = describe(m)
        if res.next_begin_offset <= offset:
            break
        offset = res.next_begin_offset
    return out


def inventory(store: Any, queues: list[list[Any]]) -> dict[str, Any]:
    """What an undamaged store serves: messages per queue, keys, next queue offsets."""
    messages: dict[str, list[Any]] = {}
    for topic, q in queues:
        messages.update(deliver(store, topic, q, 10_000))
    keys: dict[str, list[Any]] = {}
    for m in store.scan():
        for key in (m.uniq_key or "", *m.keys):
            keys[f"{m.topic}\0{key}"] = [m.commitlog_offset]
    nexts = {f"{t}\0{q}": store.next_queue_offset(t, q) for t, q in queues}
    return {"messages": messages, "keys": keys, "next": nexts}


def reported_ranges(store: Any) -> list[tuple[int, int]]:
    """Commitlog byte ranges the store reported as torn, damaged or skipped."""
    report = store.open_report
    out = [(i[0], i[0] + max(1, i[2])) for i in store.dispatch_issues()[1]]
    for d in report.get("damage", []):
        start = int(d["offset"])
        out.append((start, start + max(1, int(d["bytes"]))))
    return out


def store_outcome(root: Path, job: dict[str, Any], case: dict[str, Any]) -> tuple[str, str]:
    import rmq

    config = rmq.StoreConfig(**job["config"])
    damaged = str(root / case["file"])
    before = snapshot(root)
    try:
        store = rmq.MessageStore(root, config, start_reput=False)
    except rmq.RmqError as e:
        text = str(e)
        after = snapshot(root)
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        if changed:
            return "BAD: refused to open but changed files", f"{type(e).__name__}; changed {changed[:4]}"
        if e.path is not None and e.offset is not None and e.path in text and str(e.offset) in text:
            where = "" if e.path == damaged else f" (names {e.path}, damaged {damaged})"
            return GOOD[2], f"{type(e).__name__}{where}: {text[:300]}"
        return "BAD: typed error without file and offset", f"{type(e).__name__}: {text[:300]}"
    except BaseException as e:  # a PanicException is a BaseException
        return f"BAD: untyped {type(e).__name__}", str(e)[:300]
    try:
        with store:
            return opened_outcome(store, job)
    except rmq.RmqError as e:
        text = str(e)
        if e.path is not None and e.offset is not None and e.path in text and str(e.offset) in text:
            return GOOD[2], f"raised by a read after opening: {type(e).__name__}: {text[:300]}"
        return "BAD: typed error without file and offset", f"after opening: {type(e).__name__}: {text[:300]}"
    except BaseException as e:
        return f"BAD: untyped {type(e).__name__} after opening", str(e)[:300]


def opened_outcome(store: Any, job: dict[str, Any]) -> tuple[str, str]:
    """Compares what the opened store serves with the undamaged store's inventory."""
    base = job["inventory"]
    messages: dict[str, list[Any]] = {}
    for topic, q in job["queues"]:
        messages.update(deliver(store, topic, q, 10_000))
    keys = {
        key: [m.commitlog_offset for m in store.query_message(*key.split("\0"), 64).messages] for key in base["keys"]
    }
    nexts = {q: store.next_queue_offset(*q.split("\0")[:1], int(q.split("\0")[1])) for q in base["next"]}
    ranges = reported_ranges(store)
    report, recovery = store.open_report, store.recovery_report
    rebuilt = bool(recovery.get("rebuilt_queues")) or bool(recovery.get("rebuilt_index_files"))
    said = bool(report.get("torn_bytes")) or bool(report.get("damage")) or rebuilt or bool(ranges)
    for q, n in base["next"].items():
        if nexts[q] < n:
            return "BAD: queue offset handed out twice", f"{q.replace(chr(0), '/')} next {nexts[q]} < {n}"
    lost, altered = [], []
    for uniq, want in base["messages"].items():
        got = messages.get(uniq)
        if got != want and not any(a <= want[0] < b for a, b in ranges):
            (lost if got is None else altered).append(f"message {uniq} at {want[0]}")
    for key, want in base["keys"].items():
        if keys[key] != want and not any(a <= want[0] < b for a, b in ranges):
            lost.append(f"key {key.split(chr(0))[1]} finds {keys[key]}, not {want}")
    if altered:
        return "BAD: damaged record delivered unreported", f"{len(altered)}: " + "; ".join(altered[:4])
    if lost:
        return "BAD: silent loss", f"{len(lost)}: " + "; ".join(lost[:4])
    if said:
        return GOOD[1], json.dumps({"report": report, "recovery": recovery}, default=str)[:300]
    if (messages, keys, nexts) != (base["messages"], base["keys"], base["next"]):
        return "BAD: silent change", "the store serves something else than the undamaged one and reports nothing"
    return GOOD[0], ""


class Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def offsets_outcome(root: Path, job: dict[str, Any], case: dict[str, Any]) -> tuple[str, str]:
    import rmq

    warnings = Warnings()
    logging.getLogger("rmq").addHandler(warnings)
    try:
        manager = rmq.ConsumerOffsetManager(root / "config" / "consumerOffset.json")
        try:
            loaded = manager.load()
        except rmq.RmqError as e:
            text = str(e)
            if e.path is not None and e.offset is not None and e.path in text and str(e.offset) in text:
                return GOOD[2], f"{type(e).__name__}: {text[:300]}"
            return "BAD: typed error without file and offset", f"{type(e).__name__}: {text[:300]}"
        except BaseException as e:
            return f"BAD: untyped {type(e).__name__} from load()", str(e)[:300]
    finally:
        logging.getLogger("rmq").removeHandler(warnings)
    name = Path(case["file"]).name
    said = not loaded or any(name in w for w in warnings.messages)
    lost, older = [], []
    for key, want in job["offsets"].items():
        group, topic, q = key.split("\0")
        got = manager.query_offset(group, topic, int(q))
        if got == want:
            continue
        if got > want:
            return "BAD: committed offset moved forward", f"{group} {topic}/{q}: {got} > {want}"
        (older if got >= 0 else lost).append(f"{group} {topic}/{q}: {got} (committed {want})")
    if (lost or older) and not said:
        return "BAD: committed offsets went back silently", "; ".join((lost + older)[:4])
    if lost or older or said:
        return GOOD[1], f"older {len(older)}, lost {len(lost)}; " + "; ".join(warnings.messages)[:300]
    return GOOD[0], ""


def run_case(job: dict[str, Any], case: dict[str, Any]) -> tuple[str, str]:
    root = Path(job["work"]) / "case"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(job["bases"][case["base"]], root)
    try:
        damage(root, case)
        outcome, detail = store_outcome(root, job, case)
        if outcome not in GOOD[:2]:
            return outcome, detail
        offsets, offsets_detail = offsets_outcome(root, job, case)
        if offsets.startswith("BAD") or (offsets == GOOD[1] and outcome == GOOD[0]):
            return offsets, offsets_detail
        return outcome, detail
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    skip = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    for case in job["cases"][skip:]:
        print("start " + case["name"], flush=True)
        outcome, detail = run_case(job, case)
        print(json.dumps({"name": case["name"], "outcome": outcome, "detail": detail}), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
