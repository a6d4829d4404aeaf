"""The damage matrix: flip a bit, zero a range, fill it with garbage, truncate or extend (or delete) every file
kind of a store: commitlog first / middle / last segment (at record headers, bodies and blank fillers), a
consume-queue file, an index file, `checkpoint`, `abort`, `lock`, `config/consumerOffset.json`, its `.bak` and
its `.journal`; then open the store and load the consumer offsets.

Each case must end "opened, nothing lost", "repaired and reported" or with a "typed error naming file and
offset"; never a crash, a hang, a panic, an untyped exception, a queue offset handed out twice or the silent
loss of an intact record (see tests/damage_worker.py, which runs the cases in a child process so that a crash
or a hang is classified too). The counts per outcome are printed (`pytest -s`) and kept, per file kind, in
`.pytest_cache/rmq-damage-matrix.json`.
"""

from __future__ import annotations

import json
import os
import random
import selectors
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from damage_worker import GOOD, inventory

import rmq

SEG = 16 * 1024
CONFIG: dict[str, Any] = {
    "mapped_file_size_commit_log": SEG,
    "mapped_file_size_consume_queue": 20 * 30,
    "max_hash_slot_num": 32,
    "max_index_num": 64,
}
QUEUES = [["DmA", 0], ["DmA", 1], ["DmB", 0]]
GROUPS = ("GA", "GB")
WORKER = Path(__file__).with_name("damage_worker.py")
CASE_TIMEOUT = 60.0
BODY_AT = 88  # a v1 record with IPv4 hosts: the body starts 88 bytes in (spec section 1.2)


def build_bases(root: Path) -> dict[str, Any]:
    """A closed store ("clean") and a copy of one taken while it was open ("crashed": abort marker, lock),
    with 4+ segments, 2 consume-queue files per queue, several index files and committed consumer offsets
    (snapshot, `.bak` and journal)."""
    rng = random.Random(15)
    clean, crashed = root / "clean", root / "crashed"
    offsets: dict[str, int] = {}
    with rmq.MessageStore(clean, rmq.StoreConfig(**CONFIG)) as store:
        for i in range(170):
            topic, q = QUEUES[i % 3]
            if i % 10 == 9:
                batch = [
                    rmq.Message(rng.randbytes(rng.randint(30, 300)), tags="b", keys=[f"bk{i}.{k}"]) for k in range(3)
                ]
                store.put_batch(topic, batch, queue_id=q)
            else:
                body = rng.randbytes(rng.randint(30, 400))
                store.put(topic, body, queue_id=q, tags=rng.choice(["x", "y", None]), keys=[f"key{i}"])
        assert store.wait_dispatched()
        manager = rmq.ConsumerOffsetManager(store.consumer_offset_path)
        for step, journal in ((1, False), (2, False), (3, True)):
            for g in GROUPS:
                for topic, q in QUEUES:
                    if journal and g == "GB":
                        continue
                    value = step * 10 + q
                    manager.commit_offset(g, topic, q, value, journal=journal)
                    offsets[f"{g}\0{topic}\0{q}"] = value
            if not journal:
                manager.persist()
        store.flush()
        shutil.copytree(clean, crashed)
    assert (crashed / "abort").exists() and not (clean / "abort").exists()
    config_dir = clean / "config"
    assert {p.name for p in config_dir.iterdir()} >= {
        "consumerOffset.json",
        "consumerOffset.json.bak",
        "consumerOffset.json.journal",
    }
    with rmq.MessageStore(clean, rmq.StoreConfig(**CONFIG), start_reput=False) as store:
        inv = inventory(store, QUEUES)
        records = [(m.commitlog_offset, m.store_size) for m in store.scan()]
        assert len(store.commitlog_files()) >= 4
    return {
        "bases": {"clean": str(clean), "crashed": str(crashed)},
        "inventory": inv,
        "offsets": offsets,
        "records": records,
    }


def commitlog_cases(records: list[tuple[int, int]], which: str, base: str) -> list[dict[str, Any]]:
    segments = sorted({o - o % SEG for o, _ in records})
    seg = {"first": segments[0], "middle": segments[len(segments) // 2], "last": segments[-1]}[which]
    mine = [(o, s) for o, s in records if seg <= o < seg + SEG]
    name = f"{seg:020d}"
    where = {
        "first record header": mine[0][0] + 4,
        "middle record header": mine[len(mine) // 2][0],
        "middle record body": mine[len(mine) // 2][0] + BODY_AT + 4,
        "last record body": mine[-1][0] + BODY_AT + 2,
    }
    end = mine[-1][0] + mine[-1][1]
    if which != "last":
        where["blank filler"] = end
    cases = [{"where": w, "op": op, "pos": pos - seg} for w, pos in where.items() for op in ("flip", "zero", "garbage")]
    cases += [
        {"where": "middle record", "op": "truncate", "pos": mine[len(mine) // 2][0] - seg + 10},
        {"where": "data end", "op": "truncate", "pos": end - seg},
        {"where": "file end", "op": "extend-zero", "pos": 0},
        {"where": "file end", "op": "extend-garbage", "pos": 0},
    ]
    if which == "last":
        cases.append({"where": "after the last record", "op": "garbage", "pos": end - seg + 40})
    return [{**c, "file": f"commitlog/{name}", "base": base} for c in cases]


def file_cases(
    root: Path, rel: str, base: str, positions: dict[str, int], *, emptied: bool = True
) -> list[dict[str, Any]]:
    """Flip, zero and garbage at `positions`, truncate to half, extend; with `emptied`, also truncate to nothing
    and delete."""
    size = (root / rel).stat().st_size
    cases = []
    if size:
        for w, pos in positions.items():
            cases += [{"where": w, "op": op, "pos": min(pos, size - 1)} for op in ("flip", "zero", "garbage")]
        cases.append({"where": "half", "op": "truncate", "pos": size // 2})
    cases += [
        {"where": "file end", "op": "extend-zero", "pos": 0},
        {"where": "file end", "op": "extend-garbage", "pos": 0},
    ]
    if emptied:
        cases += [{"where": "all", "op": "truncate", "pos": 0}, {"where": "file", "op": "delete", "pos": 0}]
    return [{**c, "file": rel, "base": base} for c in cases]


def all_cases(bases: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    clean = Path(bases["bases"]["clean"])
    records = bases["records"]
    kinds: dict[str, list[dict[str, Any]]] = {}
    for which in ("first", "middle", "last"):
        kinds[f"commitlog {which} segment"] = commitlog_cases(records, which, "clean")
    kinds["commitlog last segment, after a crash"] = commitlog_cases(records, "last", "crashed")
    cq = sorted((clean / "consumequeue" / "DmA" / "0").iterdir())
    assert len(cq) >= 2
    cq_cases = []
    for label, path in (("first", cq[0]), ("last", cq[-1])):
        n = path.stat().st_size // 20
        rel = str(path.relative_to(clean))
        cases = file_cases(clean, rel, "clean", {"first entry": 0, "middle entry": 20 * (n // 2) + 4})
        cq_cases += [{**c, "where": f"{label} file, {c['where']}"} for c in cases]
    kinds["consume queue"] = cq_cases
    index = sorted((clean / "index").iterdir())
    assert len(index) >= 2
    slots = CONFIG["max_hash_slot_num"]
    ix_cases = []
    for label, path in (("first", index[0]), ("last", index[-1])):
        rel = str(path.relative_to(clean))
        positions = {"header": 9, "slots": 40 + 4 * 3, "entries": 40 + 4 * slots + 20 * 2 + 6}
        ix_cases += [{**c, "where": f"{label} file, {c['where']}"} for c in file_cases(clean, rel, "clean", positions)]
    kinds["index file"] = ix_cases
    kinds["checkpoint"] = file_cases(clean, "checkpoint", "clean", {"physic": 3, "logics": 12, "index": 20})
    crashed = Path(bases["bases"]["crashed"])
    kinds["checkpoint, after a crash"] = file_cases(crashed, "checkpoint", "crashed", {"physic": 6, "index": 22})
    kinds["abort"] = file_cases(crashed, "abort", "crashed", {"start": 0})
    kinds["lock"] = file_cases(crashed, "lock", "crashed", {"start": 0})
    for name in ("consumerOffset.json", "consumerOffset.json.bak", "consumerOffset.json.journal"):
        rel = f"config/{name}"
        size = (clean / rel).stat().st_size
        # An empty or missing journal is what a snapshot with no later commits leaves: nothing can tell it
        # from a lost one, so the journal is damaged but not emptied.
        positions = {"start": 1, "middle": size // 2, "end": size - 3}
        kinds[name] = file_cases(clean, rel, "clean", positions, emptied=not name.endswith("journal"))
    for kind, cases in kinds.items():
        for c in cases:
            c["name"] = f"{kind}: {c['where']}, {c['op']}"
    return kinds


@pytest.fixture(scope="module")
def bases() -> Iterator[dict[str, Any]]:
    parent = "/dev/shm" if os.path.isdir("/dev/shm") else None
    root = Path(tempfile.mkdtemp(prefix="rmq-damage-", dir=parent))
    try:
        yield {**build_bases(root), "root": str(root)}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_cases(job: dict[str, Any], job_path: Path) -> list[dict[str, str]]:
    """Runs the job's cases in worker processes; a worker that dies or hangs is classified BAD for the case
    it was running and replaced by one that goes on with the next case."""
    cases = job["cases"]
    results: list[dict[str, str]] = []
    while len(results) < len(cases):
        proc = subprocess.Popen(
            [sys.executable, str(WORKER), str(job_path), str(len(results))],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdout is not None and proc.stderr is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        buf = b""
        current = None
        try:
            while True:
                if not sel.select(timeout=CASE_TIMEOUT):
                    proc.kill()
                    results.append({"name": current or "?", "outcome": "BAD: hang", "detail": f"> {CASE_TIMEOUT} s"})
                    break
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    proc.wait(timeout=60)
                    if len(results) < len(cases):
                        err = proc.stderr.read().decode()[-500:]
                        outcome = f"BAD: crash (exit {proc.returncode})"
                        results.append({"name": current or "?", "outcome": outcome, "detail": err})
                    break
                buf += chunk
                *lines, buf_tail = buf.split(b"\n")
                buf = buf_tail
                for line in lines:
                    text = line.decode()
                    if text.startswith("start "):
                        current = text[6:]
                    else:
                        results.append(json.loads(text))
                        current = None
        finally:
            sel.close()
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=60)
            proc.stdout.close()
            proc.stderr.close()
    return results


KINDS = [
    "commitlog first segment",
    "commitlog middle segment",
    "commitlog last segment",
    "commitlog last segment, after a crash",
    "consume queue",
    "index file",
    "checkpoint",
    "checkpoint, after a crash",
    "abort",
    "lock",
    "consumerOffset.json",
    "consumerOffset.json.bak",
    "consumerOffset.json.journal",
]


# Damage that issue 15 still leaves unhandled, each listed with the outcome it has today, so that the matrix
# guards everything else: a case outside this list that ends badly fails the test. Each entry is open work:
# (none left: every case of the matrix ends well).
KNOWN_BAD: dict[str, set[str]] = {}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", KINDS)
def test_damage_ends_well(bases: dict[str, Any], kind: str, request: pytest.FixtureRequest) -> None:
    cases = all_cases(bases)[kind]
    work = Path(bases["root"]) / kind.replace(" ", "_").replace(",", "")
    work.mkdir()
    job = {
        "bases": bases["bases"],
        "config": CONFIG,
        "queues": QUEUES,
        "inventory": bases["inventory"],
        "offsets": bases["offsets"],
        "cases": cases,
        "work": str(work),
    }
    job_path = work / "job.json"
    job_path.write_text(json.dumps(job))
    results = run_cases(job, job_path)
    counts = Counter(r["outcome"] for r in results)
    summary_path = request.config.rootpath / ".pytest_cache" / "rmq-damage-matrix.json"
    summary_path.parent.mkdir(exist_ok=True)
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    summary[kind] = {"cases": len(results), "outcomes": dict(counts)}
    summary_path.write_text(json.dumps(summary, indent=1, sort_keys=True))
    print(f"\n{kind}: {len(results)} cases: {dict(sorted(counts.items()))}")
    known = KNOWN_BAD.get(kind, set())
    bad = [r for r in results if r["outcome"] not in GOOD and r["name"] not in known]
    for r in results:
        print(f"  {r['outcome']:<40} {r['name']}  {r['detail'][:160]}")
    fixed = sorted(known - {r["name"] for r in results if r["outcome"] not in GOOD})
    if fixed:
        print(f"  known-bad cases that ended well this time (remove them from KNOWN_BAD once fixed): {fixed}")
    assert len(results) == len(cases)
    assert not bad, f"{len(bad)} of {len(results)} cases ended badly:\n" + "\n".join(
        f"{r['name']}: {r['outcome']}: {r['detail']}" for r in bad
    )
