"""kill -9 at random moments: while writing, during segment rolls, during open (also rebuilding a deleted
`consumequeue/` or `index/`), during close, and while recovering from the previous kill.

A child process (tests/crash_child.py) writes single puts and `put_batch`es of 1-64 messages of 1 B-64 KiB with
keys and tags, SYNC_FLUSH or ASYNC_FLUSH, small commitlog segments, consume-queue and index files, reput
running, and acknowledges each put in an ack file. The parent kills it with SIGKILL and checks a copy of the
store as it was left: it opens; every acknowledged message is intact where the store said it put it; every
message found is one a child wrote (nothing duplicated, no batch in part, at most the one put in flight when
the kill came beyond the acknowledged ones); queue offsets are dense; consume queues agree with the commitlog;
`get_message` chains from offset 0 deliver every message of every queue; `query_message` finds every key;
`open_report` reports discarded bytes exactly when a torn write was discarded. The next child then recovers
the original (so kills also land in a recovery from a kill).

`RMQ_CRASH_KILLS` sets the number of kills (default 300, split over the two flush modes; `make crash` runs
5,000), `RMQ_CRASH_SEED` the base seed, `RMQ_CRASH_STORE` replays one chain (its seed is printed on failure).
Seeds fix the workload and the kill schedule; the instant a kill lands still depends on the machine.
"""

from __future__ import annotations

import functools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from crash_child import QUEUES, TOPICS, PutSpec, body_digest, parse_uniq, put_spec

import rmq

KILLS = int(os.environ.get("RMQ_CRASH_KILLS", "300"))
BASE_SEED = int(os.environ.get("RMQ_CRASH_SEED", "1515"))
ONLY_STORE = os.environ.get("RMQ_CRASH_STORE")
CHAIN = 6  # kills on one store before a fresh one
CHILD = Path(__file__).with_name("crash_child.py")
FLUSH_MODES = ("ASYNC_FLUSH", "SYNC_FLUSH")
#: Where the parent aims each kill, with weights.
PHASES = {"write": 30, "roll": 25, "open": 15, "open-no-cq": 10, "open-no-index": 10, "close": 10}


@functools.lru_cache(maxsize=4096)
def spec_of(seed: int, child: int, put: int, segment: int) -> PutSpec:
    return put_spec(seed, child, put, segment)


def store_config(store_seed: int, flush: str) -> dict[str, Any]:
    """Small files so that kills land in rolls of every kind: 256 KiB-1 MiB segments, consume-queue files of
    30-100 entries, index files of 255-511 keys."""
    rng = random.Random(store_seed)
    return {
        "mapped_file_size_commit_log": rng.choice([256, 512, 1024]) * 1024,
        "mapped_file_size_consume_queue": 20 * rng.randint(30, 100),
        "max_hash_slot_num": rng.choice([64, 128]),
        "max_index_num": rng.choice([256, 512]),
        "flush_disk_type": flush,
    }


@dataclass
class Chain:
    """One store, its config, and where its kills landed."""

    seed: int
    config: dict[str, Any]
    path: Path
    children: int = 0
    open_estimate: float = 0.03  # seconds the last open took
    close_estimate: float = 0.003  # seconds the last close took
    landed: Counter[str] = field(default_factory=Counter)


class ChildFailed(Exception):
    """The child died on its own (it could not open the store, or a put raised)."""


def read_acks(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = path.read_bytes().split(b"\n")
    return [json.loads(line) for line in lines[:-1]]  # the last element is empty or a torn line


def drop_torn_ack(path: Path) -> None:
    """Cuts a torn last ack line (a kill inside the child's `write(2)` of a long batch ack): that put was not
    acknowledged, and the next child must not append its lines to the fragment."""
    if path.exists():
        data = path.read_bytes()
        keep = data.rfind(b"\n") + 1
        if keep < len(data):
            os.truncate(path, keep)


def run_child(chain: Chain, phase: str, rng: random.Random, ack_path: Path) -> str:
    """Starts a child on the chain's store, kills it in `phase`, and returns the last event it printed."""
    drop_torn_ack(ack_path)
    child_no = chain.children
    chain.children += 1
    job: dict[str, Any] = {"seed": chain.seed, "child": child_no, "config": chain.config}
    if phase == "roll":
        job["announce_rolls"] = True
    if phase == "close":
        job["puts"] = rng.randint(0, 20)
    if phase == "open-no-cq":
        shutil.rmtree(chain.path / "consumequeue", ignore_errors=True)
    if phase == "open-no-index":
        shutil.rmtree(chain.path / "index", ignore_errors=True)
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), str(chain.path), str(ack_path), json.dumps(job)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    last = ""

    def wait_for(event: str) -> None:
        nonlocal last
        while True:
            line = proc.stdout.readline().decode() if proc.stdout else ""
            if not line:
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise ChildFailed(f"child exited before '{event}' (last event {last!r}):\n{err[-3000:]}")
            last = line.split()[0]
            if last == "opened":
                chain.open_estimate = float(line.split()[1])
            if last == "closed":
                chain.close_estimate = float(line.split()[1])
            if last == event:
                return

    try:
        if phase.startswith("open"):
            wait_for("opening")
            time.sleep(rng.random() ** 2 * chain.open_estimate)
        elif phase == "roll":
            wait_for("opened")
            for _ in range(rng.randint(1, 3)):
                wait_for("roll")
            if rng.random() < 0.5:
                time.sleep(rng.uniform(0, 0.002))
        elif phase == "close":
            wait_for("closing")
            time.sleep(rng.random() ** 2 * chain.close_estimate)
        else:
            wait_for("opened")
            time.sleep(rng.expovariate(1 / 0.03))
        if proc.poll() is not None:
            raise ChildFailed(f"child exited with {proc.returncode}: {proc.stderr.read().decode()[-3000:]}")
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=60) == -signal.SIGKILL
        for line in proc.stdout.read().decode().splitlines():
            last = line.split()[0]
        return last
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
        proc.stdout.close()
        proc.stderr.close()


def commitlog_bytes(root: Path) -> dict[int, bytes]:
    d = root / "commitlog"
    return {int(p.name): p.read_bytes() for p in sorted(d.iterdir())} if d.exists() else {}


def nonzero_at_or_after(files: dict[int, bytes], end: int) -> list[int]:
    """Commitlog offsets >= end holding a nonzero byte."""
    out = []
    for base, data in files.items():
        start = max(0, end - base)
        if start >= len(data):
            continue
        tail = data[start:]
        stripped = tail.rstrip(b"\0")
        if stripped.strip(b"\0"):
            out.extend(base + start + i for i, b in enumerate(stripped) if b)
    return out


def get_chain(store: rmq.MessageStore, topic: str, queue_id: int, count: int) -> list[str]:
    """UNIQ_KEYs that `get_message` delivers from queue offset 0 on, following next_begin_offset."""
    got: list[str] = []
    offset = 0
    for _ in range(count + 2):
        res = store.get_message("GKill", topic, queue_id, offset, 32)
        if res.status != rmq.GetMessageStatus.FOUND:
            assert offset == count, f"{topic}/{queue_id}: get_message at {offset} of {count} gave {res.status.name}"
            return got
        assert res.next_begin_offset > offset, f"{topic}/{queue_id}: get_message at {offset} did not advance"
        got.extend(m.uniq_key or "" for m in res.messages)
        offset = res.next_begin_offset
    raise AssertionError(f"{topic}/{queue_id}: get_message chain did not end")


def check_store(store: rmq.MessageStore, chain: Chain, acks: list[dict[str, Any]], before: dict[int, bytes]) -> None:
    """Every property of the module docstring, on an open store; `before`: its commitlog bytes before opening."""
    seed, segment = chain.seed, chain.config["mapped_file_size_commit_log"]
    msgs = list(store.scan())
    by_uniq: dict[str, rmq.MessageExt] = {}
    order: list[tuple[int, int, int]] = []
    for m in msgs:
        uniq = m.uniq_key or ""
        assert uniq not in by_uniq, (
            f"UNIQ_KEY {uniq} stored twice, at {by_uniq[uniq].commitlog_offset} and {m.commitlog_offset}"
        )
        try:
            s, c, p, j = parse_uniq(uniq)
            spec = spec_of(seed, c, p, segment)
            want = spec.messages[j]
        except (ValueError, IndexError):
            raise AssertionError(
                f"the record at {m.commitlog_offset} is no message a child wrote: UNIQ_KEY {uniq!r}, "
                f"properties {str(m.properties)[:200]}"
            ) from None
        assert s == seed and (m.topic, m.queue_id, m.body, m.tags, tuple(m.keys)) == (
            spec.topic,
            spec.queue_id,
            want.body,
            want.tags,
            want.keys,
        ), f"message {uniq} at {m.commitlog_offset} is not what the child wrote"
        by_uniq[uniq] = m
        order.append((c, p, j))
    assert order == sorted(order), "the commitlog does not hold the puts in the order they were made"

    # Every acknowledged message is there, where and with the queue offset the store acknowledged.
    acked_max: dict[int, int] = defaultdict(lambda: -1)
    for a in acks:
        acked_max[a["c"]] = max(acked_max[a["c"]], a["p"])
        for k, uniq in enumerate(a["u"]):
            m = by_uniq.get(uniq)
            assert m is not None, f"acknowledged message {uniq} (offset {a['o'][k]}) is lost"
            assert (m.commitlog_offset, m.queue_offset, body_digest(m.body)) == (a["o"][k], a["qo"] + k, a["sha"][k])

    # Each child's puts: the acknowledged ones plus at most the one in flight; a batch whole or not at all.
    per_put: Counter[tuple[int, int]] = Counter((c, p) for c, p, _ in order)
    for (c, p), n in per_put.items():
        assert n == len(spec_of(seed, c, p, segment).messages), f"put {p} of child {c} is stored in part ({n})"
    puts_of: dict[int, list[int]] = defaultdict(list)
    for c, p in sorted(per_put):
        puts_of[c].append(p)
    for c in set(puts_of) | set(acked_max):
        a = acked_max[c]
        assert puts_of[c] in (list(range(a + 1)), list(range(a + 2))), (
            f"child {c}: acknowledged puts 0..{a}, stored {puts_of[c][:5]}...{puts_of[c][-5:]}"
        )

    # Queues: dense offsets, consume queue = commitlog, get_message delivers all, next offset follows.
    for topic in TOPICS:
        for q in range(QUEUES):
            mine = [m for m in msgs if m.topic == topic and m.queue_id == q]
            assert [m.queue_offset for m in mine] == list(range(len(mine))), f"{topic}/{q}: queue offsets not dense"
            assert store.next_queue_offset(topic, q) == len(mine), f"{topic}/{q}: next queue offset"
            if not mine:
                continue
            assert store.get_max_offset_in_queue(topic, q) == len(mine), f"{topic}/{q}: max offset in queue"
            entries = [(e.queue_offset, e.commitlog_offset, e.size) for e in store.iter_queue(topic, q)]
            want_entries = [(m.queue_offset, m.commitlog_offset, m.store_size) for m in mine]
            assert entries == want_entries, f"{topic}/{q}: consume queue disagrees with the commitlog"
            assert get_chain(store, topic, q, len(mine)) == [m.uniq_key for m in mine], f"{topic}/{q}: get_message"
    for m in msgs:
        for key in (m.uniq_key or "", *m.keys):
            found = [f.commitlog_offset for f in store.query_message(m.topic, key, 64).messages]
            assert found == [m.commitlog_offset], f"query_message({m.topic}, {key}) found {found}"

    # The open report: torn bytes exactly when bytes past the end were discarded; a kill is never damage.
    report = store.open_report
    end = report["end_offset"]
    assert end == store.max_offset
    assert report["recovery"] == "strict" and report["damage"] == [], report
    left = nonzero_at_or_after(commitlog_bytes(Path(store.path)), end)
    assert not left, f"bytes left after the end {end} of the log, from {left[0]}"
    discarded = nonzero_at_or_after(before, end)
    assert (report["torn_bytes"] > 0) == bool(discarded), (report, discarded[:3])
    assert report["torn_bytes"] >= len(discarded), report


def verify_copy(chain: Chain, work: Path, acks: list[dict[str, Any]]) -> None:
    """Checks a copy of the chain's store as the kill left it (the original stays unrecovered)."""
    copy = work / "verify"
    shutil.rmtree(copy, ignore_errors=True)
    if chain.path.exists():
        shutil.copytree(chain.path, copy)
    # else the first child was killed before it created the directory: opening creates an empty store
    before = commitlog_bytes(copy)
    with rmq.MessageStore(copy, rmq.StoreConfig(**chain.config), start_reput=False) as store:
        check_store(store, chain, acks, before)
    shutil.rmtree(copy)


def finish_chain(chain: Chain, acks: list[dict[str, Any]]) -> None:
    """Recovers the original, puts one more message per queue (no queue offset handed out twice), closes it
    cleanly and checks that the clean reopen finds nothing to discard."""
    cfg = rmq.StoreConfig(**chain.config)
    before = commitlog_bytes(chain.path)
    with rmq.MessageStore(chain.path, cfg) as store:
        check_store(store, chain, acks, before)
        nexts = {(t, q): store.next_queue_offset(t, q) for t in TOPICS for q in range(QUEUES)}
        for (t, q), n in nexts.items():
            assert store.put(t, b"after the kills", queue_id=q).queue_offset == n
    with rmq.MessageStore(chain.path, cfg, start_reput=False) as store:
        assert not store.unclean_shutdown and store.open_report["torn_bytes"] == 0
        for (t, q), n in nexts.items():
            assert store.next_queue_offset(t, q) == n + 1
            res = store.get_message("GKill", t, q, n, 1)
            assert res.status == rmq.GetMessageStatus.FOUND and res.messages[0].body == b"after the kills"


def run_chain(store_seed: int, flush: str, kills: int, work: Path) -> tuple[int, Counter[str], str | None]:
    """Kills `kills` children on one store; returns (kills done, where they landed, first failure)."""
    rng = random.Random(store_seed)
    root = work / f"store-{store_seed}"
    shutil.rmtree(root, ignore_errors=True)
    chain = Chain(store_seed, store_config(store_seed, flush), root)
    ack_path = work / f"acks-{store_seed}.jsonl"
    ack_path.unlink(missing_ok=True)
    done = 0
    phase = "-"
    try:
        for _ in range(kills):
            phase = rng.choices(list(PHASES), weights=list(PHASES.values()))[0]
            landed = run_child(chain, phase, rng, ack_path)
            chain.landed[f"{phase}->{landed}"] += 1
            done += 1
            verify_copy(chain, work, read_acks(ack_path))
        phase = "final reopen"
        finish_chain(chain, read_acks(ack_path))
    except (AssertionError, rmq.RmqError, ChildFailed) as e:
        failure = (
            f"store seed {store_seed} ({flush}, {chain.config}), kill {done} aimed at {phase}: "
            f"{type(e).__name__}: {str(e).splitlines()[0][:600]}\n  replay: RMQ_CRASH_STORE={store_seed} "
            f"{sys.executable} -m pytest -s -q {__file__} -k {flush}"
        )
        return done, chain.landed, failure
    finally:
        shutil.rmtree(root, ignore_errors=True)
        ack_path.unlink(missing_ok=True)
    return done, chain.landed, None


@pytest.fixture
def kill_dir(fast_tmp: Path) -> Iterator[Path]:
    """The work directory: tmpfs where there is one (conftest's `fast_tmp`), or `RMQ_CRASH_DIR`."""
    parent = os.environ.get("RMQ_CRASH_DIR")
    if parent is None:
        yield fast_tmp
        return
    work = Path(tempfile.mkdtemp(prefix="rmq-kill-", dir=parent))
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.mark.timeout(120 + 4 * KILLS)
@pytest.mark.parametrize("flush", FLUSH_MODES)
def test_kill_9_at_random_moments_loses_nothing_acknowledged(kill_dir: Path, flush: str) -> None:
    mode = FLUSH_MODES.index(flush)
    if ONLY_STORE is not None:
        seeds = [int(ONLY_STORE)]
        target = CHAIN
    else:
        target = (KILLS + len(FLUSH_MODES) - 1 - mode) // len(FLUSH_MODES)
        seeds = [BASE_SEED * 100_000 + mode * 10_000 + i for i in range((target + CHAIN - 1) // CHAIN)]
    kills = 0
    landed: Counter[str] = Counter()
    failures: list[str] = []
    for store_seed in seeds:
        n, where, failure = run_chain(store_seed, flush, min(CHAIN, target - kills), kill_dir)
        kills += n
        landed.update(where)
        if failure is not None:
            failures.append(failure)
    print(f"\n{flush}: {kills} kills, {len(failures)} failed chains; where they landed: {dict(sorted(landed.items()))}")
    for failure in failures:
        print("  " + failure.splitlines()[0])
    assert not failures, f"{len(failures)} of {len(seeds)} chains failed:\n" + "\n".join(failures[:10])
