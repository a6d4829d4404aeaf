"""consumerOffset.json to the byte: rmq's persist against Apache RocketMQ's own `ConsumerOffsetManager`.

Randomized tables (thousands of `topic@group` keys, queue ids up to 2147483647, commits in random order, groups
removed) are built twice: by RocketMQ's broker code (`tests/interop/offsets`, built per version with Maven) and
by `rmq.ConsumerOffsetManager`; the files must be equal byte for byte. Three histories, since a Java hash map's
iteration order depends on how the table came to be, not only on what it holds:

- fresh: a broker that loaded nothing receives the commits;
- reloaded: a broker loads a file RocketMQ wrote, receives more commits (new keys, new queues) and persists;
- removals: commits interleaved with `removeOffset(group)`.

RocketMQ 5.3.1's file is compared whole (the `dataVersion` values aside: each side stamps its own clock);
RocketMQ 4.9.7 writes only `offsetTable` (no `dataVersion`, no `groupTopicMap`), which is compared. Some tables
get keys whose hashes collide in the low 11 bits, groups and topics whose hashes are equal, and queue ids that
share a bin, so that bins become trees (a ConcurrentHashMap puts new keys first there; a HashMap orders them by
its red-black tree) and small maps grow early (`tryPresize`).

`RMQ_OFFSET_TABLES` sets the number of tables per history and version (default 1, `make interop-offsets` 15;
`RMQ_OFFSET_SEED` the seed).
Like tests/test_interop.py, this needs Java and Maven: it skips without them on a developer machine and fails
on CI.
"""

from __future__ import annotations

import itertools
import os
import random
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from test_interop import maven_classpath

from rmq.offsets import ConsumerOffsetManager

HERE = Path(__file__).parent
PROJECT = HERE / "interop" / "offsets"
VERSIONS = ("5.3.1", "4.9.7")
TABLES = int(os.environ.get("RMQ_OFFSET_TABLES", "1"))

Op = tuple[str, str, str, int, int]  # ("c", group, topic, queue id, offset) or ("r", group, "", 0, 0)
Run = Callable[[list[tuple[Path, Path, Path | None]]], None]


@pytest.fixture(scope="module", params=VERSIONS)
def rocketmq(request: pytest.FixtureRequest) -> tuple[str, Run]:
    """(version, runner): the runner executes jobs (commits file, output file, file to load or None)."""
    version: str = request.param
    classpath = maven_classpath(PROJECT, PROJECT / "target" / version, f"-Drocketmq.version={version}")

    def run(jobs: list[tuple[Path, Path, Path | None]]) -> None:
        jobs_file = jobs[0][1].with_suffix(".jobs")
        jobs_file.write_text("".join(f"{c} {o}{'' if load is None else f' {load}'}\n" for c, o, load in jobs))
        proc = subprocess.run(
            ["java", "-cp", classpath, "rmq.harness.OffsetTables", str(jobs_file)],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert proc.returncode == 0, f"OffsetTables failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"

    return version, run


def java_hash(s: str) -> int:
    """`String.hashCode` (to craft colliding keys; rmq's own is in src/java.rs)."""
    data = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h


def spread(h: int) -> int:
    return (h ^ (h >> 16)) & 0x7FFFFFFF


def random_name(rng: random.Random, prefix: str) -> str:
    tail = rng.choice(["", "_x", "-é", "中文", "😀", '"q"', "%", "|"])
    return f"{prefix}{rng.randrange(10**6)}{tail}"


def history(rng: random.Random, n_keys: int, n_commits: int, *, colliders: bool, removals: bool) -> list[Op]:
    """Commits in random order over `n_keys` keys (and removals), each queue's offsets increasing."""
    groups = [random_name(rng, "G") for _ in range(max(2, n_keys // 8))]
    keys = {(rng.choice(groups), random_name(rng, rng.choice(["T", "%RETRY%T", "Topic_"]))) for _ in range(n_keys)}
    if colliders:
        # Keys whose spread hashes share the low 11 bits: one bin of the 1 024 (and 2 048) bins of offsetTable.
        by_bin: dict[int, list[tuple[str, str]]] = {}
        while not any(len(v) >= 12 for v in by_bin.values()):
            g, t = random_name(rng, "GC"), random_name(rng, "TC")
            by_bin.setdefault(spread(java_hash(f"{t}@{g}")) & 2047, []).append((g, t))
        keys |= set(next(v for v in by_bin.values() if len(v) >= 12)[:12])
        # Names with equal hashCodes ("Aa" and "BB" hash alike): 16 groups in one bin of groupTopicMap's HashMap,
        # 16 topics in one bin of a group's HashSet, and keys that collide whole in offsetTable.
        same = ["".join(p) for p in itertools.product(("Aa", "BB"), repeat=4)]
        rng.shuffle(same)
        keys |= {(f"GH{x}", "TopicH") for x in same} | {("GH", f"TH{x}") for x in same}
    key_list = sorted(keys)
    queues: dict[tuple[str, str], list[int]] = {}
    for k in key_list:
        kind = rng.random()
        if colliders and kind < 0.1:
            ids = [i * rng.choice([64, 1024, 65536 * 64]) for i in range(rng.randint(8, 14))]  # one bin of 16 or 64
        elif kind < 0.5:
            ids = list(range(rng.choice([1, 2, 4, 8, 16])))
        elif kind < 0.8:
            ids = rng.sample(range(256), rng.randint(1, 12)) + ([2147483647] if rng.random() < 0.5 else [])
        else:
            ids = [rng.randrange(2**31) for _ in range(rng.randint(1, 6))] + [2147483647, 0]
        queues[k] = [q % 2**31 for q in ids]
    ops: list[Op] = []
    offset = 0
    for _ in range(n_commits):
        g, t = rng.choice(key_list)
        offset += 1
        ops.append(("c", g, t, rng.choice(queues[(g, t)]), offset))
        if removals and rng.random() < 0.002:
            ops.append(("r", rng.choice(groups), "", 0, 0))
    return ops


def write_ops(path: Path, ops: list[Op]) -> None:
    lines = []
    for op, group, topic, queue_id, offset in ops:
        if op == "c":
            lines.append(f"c {group.encode().hex()} {topic.encode().hex()} {queue_id} {offset}\n")
        else:
            lines.append(f"r {group.encode().hex()}\n")
    path.write_text("".join(lines))


def apply(m: ConsumerOffsetManager, ops: list[Op]) -> None:
    for op, group, topic, queue_id, offset in ops:
        if op == "c":
            m.commit_offset(group, topic, queue_id, offset)
        else:
            m.remove_group(group)


DATA_VERSION = re.compile(r'\t"dataVersion":\{[^}]*\},\n')


def comparable(text: str, version: str) -> str:
    """5.3.1: the whole file but the dataVersion values; 4.9.7: the offsetTable, the only part it writes."""
    if version.startswith("4."):
        return text[text.index('\t"offsetTable":') :]
    return DATA_VERSION.sub("\t<dataVersion>\n", text, count=1)


def test_persist_writes_rocketmq_bytes(rocketmq: tuple[str, Run], tmp_path: Path) -> None:
    version, run = rocketmq
    rng = random.Random(f"offsets-{version}-{os.environ.get('RMQ_OFFSET_SEED', '16')}")
    cases = []
    jobs: list[tuple[Path, Path, Path | None]] = []
    for n in range(TABLES):
        size = rng.choice([300, 1200, 3000])
        for kind in ("fresh", "reloaded", "removals"):
            work = tmp_path / f"{kind}-{n}"
            work.mkdir()
            colliders = n % 2 == 0
            ops = history(rng, size, size * 3, colliders=colliders, removals=kind == "removals")
            write_ops(work / "ops.txt", ops)
            later: list[Op] = []
            if kind == "reloaded":
                # RocketMQ writes a table first; then both sides load that file and receive more commits.
                write_ops(work / "base-ops.txt", ops)
                jobs.append((work / "base-ops.txt", work / "base.json", None))
                later = history(rng, size // 3, size, colliders=colliders, removals=False)
                later = [(o, g, t, q, off + 10**9) for o, g, t, q, off in later]
                later += [("c", g, t, q + 1, 10**10) for _, g, t, q, _ in ops[:50] if q + 1 < 2**31]
                write_ops(work / "ops.txt", later)
            cases.append((kind, work, ops, later))
    run(jobs)  # the base files the reloaded cases start from
    jobs = []
    for kind, work, _, _ in cases:
        jobs.append((work / "ops.txt", work / "java.json", work / "base.json" if kind == "reloaded" else None))
    run(jobs)
    keys = 0
    for kind, work, ops, later in cases:
        path = work / "rmq" / "consumerOffset.json"
        path.parent.mkdir()
        m = ConsumerOffsetManager(path)
        if kind == "reloaded":
            shutil.copy(work / "base.json", path)
            assert m.load() and m.load_issues == []
            apply(m, later)
        else:
            apply(m, ops)
        m.persist()
        java = (work / "java.json").read_text(encoding="utf-8")
        ours = path.read_text(encoding="utf-8")
        assert comparable(ours, version) == comparable(java, version), f"{kind} table {work.name} differs"
        keys += len(m.table())
    print(f"\nRocketMQ {version}: {len(cases)} tables, {keys} topic@group keys, equal byte for byte")
