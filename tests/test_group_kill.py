"""One consumer group in several processes (tests/group_child.py), members killed with SIGKILL and new ones
joining while the parent keeps writing: no queue has two owners at once, every message is consumed, committed
offsets never pass an unconsumed message and never move back, and no process's commit is lost.

Each member logs the registry's acquire/release events (numbered by the registry under its lock) and every message
it consumes, in its own order; the parent replays all logs in registry order:

- a queue is acquired only when free, or held by a member that was killed before the acquirer logged the grant;
- a member consumes a queue only between its own acquire and release of it;
- at every kill, the committed offsets (read under the offsets file lock) are at most the first unconsumed queue
  offset of each queue and never below a previous reading; at the end every queue's offset is its max offset.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

import rmq
from rmq._flock import FileLock

CHILD = Path(__file__).with_name("group_child.py")
QUEUES = 8
TOTAL = 2400


class Member:
    def __init__(self, root: Path, name: str, orderly: bool = False) -> None:
        self.name = name
        self.log = root / f"{name}.log"
        self.killed_at: int | None = None
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
        args = [str(root / "store"), str(self.log), str(root / "stop"), name, *(["orderly"] if orderly else [])]
        # Its stderr (rmq's warnings: pulls that failed, damage reported) goes to a file an assertion quotes.
        self.err = root / f"{name}.err"
        with open(self.err, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, str(CHILD), *args], env=env, stderr=err)

    def kill(self) -> None:
        # The time the signal is sent: the member does nothing after it. Taken after `wait()` it would include the
        # time this process needs to reap the child, and the group sees a killed member as dead as soon as it is a
        # zombie (rmq.group reads /proc), so another member may take its queues before `wait()` returns (seen on
        # CI: an acquire 1.8 ms before the reaped time).
        self.killed_at = time.time_ns()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def lines(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [line.split(" ") for line in self.log.read_text().splitlines() if line]


def committed(root: Path) -> dict[int, int]:
    path = root / "store" / "config" / "consumerOffset.json"
    with FileLock.of(path.with_name(path.name + ".lock")).held():
        m = rmq.ConsumerOffsetManager(path)
        m.load()
    return m.query_offsets("G", "T")


def consumed(members: list[Member]) -> dict[int, set[int]]:
    out: dict[int, set[int]] = defaultdict(set)
    for m in members:
        for f in m.lines():
            if f[0] == "C" and f[2] == "T":
                out[int(f[3])].add(int(f[4]))
    return out


def history(members: list[Member], q: int) -> str:
    """What every member logged about queue `q` (its grants and releases, and the offsets it consumed as runs), for
    an assertion's message: which member skipped what, and when."""
    out = []
    for m in members:
        runs: list[list[int]] = []
        events = []
        for f in m.lines():
            if f[0] in ("A", "R") and f[3] == "T" and int(f[4]) == q:
                events.append(f"{f[0]} seq {f[1]} at {f[2]}")
            elif f[0] == "C" and f[2] == "T" and int(f[3]) == q:
                o = int(f[4])
                if runs and runs[-1][1] + 1 == o:
                    runs[-1][1] = o
                else:
                    runs.append([o, o])
                    events.append(f"C from {o} at {f[1]}")
        consumed_runs = ", ".join(f"{a}..{b}" for a, b in runs)
        out.append(f"  {m.name} (killed at {m.killed_at}): {'; '.join(events)} | consumed {consumed_runs}")
        err = m.err.read_text(errors="replace").strip() if m.err.exists() else ""
        if err:
            out.append("    stderr: " + err[-2000:].replace("\n", "\n    "))
    return "\n".join(out)


def check_offsets(root: Path, members: list[Member], before: dict[int, int]) -> dict[int, int]:
    now = committed(root)
    seen = consumed(members)  # read after the offsets: everything committed was logged before
    for q, c in now.items():
        first_gap = next((o for o in range(c) if o not in seen[q]), c)
        assert c <= first_gap, (
            f"queue {q}: committed {c} passes unconsumed offset {first_gap}; before: {before}\n{history(members, q)}"
        )
        assert c >= before.get(q, 0), (
            f"queue {q}: committed offset moved back from {before[q]} to {c}\n{history(members, q)}"
        )
    return now


def check_ownership(members: list[Member]) -> int:
    """Replays every member's events in registry order; returns the number of events."""
    events = []
    for m in members:
        for f in m.lines():
            if f[0] in ("A", "R"):
                events.append((int(f[1]), f[0], m, f[3], int(f[4]), int(f[2])))
    events.sort(key=lambda e: e[0])
    seqs = [e[0] for e in events]
    assert len(seqs) == len(set(seqs)), "two events with one sequence number"
    holder: dict[tuple[str, int], Member] = {}
    for seq, kind, m, topic, qid, wall in events:
        q = (topic, qid)
        if kind == "A":
            h = holder.get(q)
            if h is not None and h is not m:
                assert h.killed_at is not None and h.killed_at < wall, (
                    f"seq {seq}: {m.name} acquired {q} held by live {h.name}"
                )
            holder[q] = m
        else:
            assert holder.get(q) is m, f"seq {seq}: {m.name} released {q} it did not hold"
            del holder[q]
    # Each member consumes a queue only while it holds it (its own log order).
    for m in members:
        held: set[tuple[str, int]] = set()
        for f in m.lines():
            if f[0] == "A":
                held.add((f[3], int(f[4])))
            elif f[0] == "R":
                held.discard((f[3], int(f[4])))
            elif f[0] == "C":
                assert (f[2], int(f[3])) in held, f"{m.name} consumed {f[2]}:{f[3]} without owning it"
    return len(events)


def check_order(members: list[Member]) -> None:
    """Orderly: per queue, in wall-clock order over all members, queue offsets strictly increase, except that
    after a kill the next owner may start again where the killed member's offset was committed."""
    lines: dict[int, list[tuple[int, int, Member]]] = defaultdict(list)
    for m in members:
        for f in m.lines():
            if f[0] == "C":
                lines[int(f[3])].append((int(f[1]), int(f[4]), m))
    for q, seq in lines.items():
        seq.sort(key=lambda x: x[0])
        for (_, prev, pm), (wall, off, m) in zip(seq, seq[1:], strict=False):
            if off <= prev:
                assert pm is not m and pm.killed_at is not None and pm.killed_at < wall, (
                    f"queue {q}: {m.name} consumed {off} after {pm.name} consumed {prev}"
                )


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrently", "orderly"])
def test_members_in_several_processes_killed_and_joining(tmp_path: Path, orderly: bool) -> None:
    root = tmp_path
    store = rmq.MessageStore(root / "store")
    try:
        store.create_topic("T", QUEUES)
        sent = 0

        def produce(n: int) -> None:
            nonlocal sent
            for _ in range(n):
                store.put("T", str(sent).encode(), queue_id=sent % QUEUES)
                sent += 1
            store.flush()

        produce(600)
        members = [Member(root, name, orderly) for name in ("a", "b", "c")]
        offsets: dict[int, int] = {}
        schedule = [(2.5, "kill", "b"), (3.5, "join", "d"), (6.0, "kill", "a"), (7.0, "join", "e")]
        start = time.monotonic()
        while schedule or sent < TOTAL:
            elapsed = time.monotonic() - start
            if sent < TOTAL:
                produce(100)
            while schedule and schedule[0][0] <= elapsed:
                _, action, name = schedule.pop(0)
                if action == "kill":
                    victim = next(m for m in members if m.name == name)
                    # The kill lands once the victim owns queues (it logged an acquire) or consumed: on a loaded
                    # machine a member process can take longer than the schedule's first seconds to start, and by
                    # the time it is granted queues the others may have consumed every message there is (seen on
                    # CI: member a acquired its first queue 8 s after it was started, when nothing was left).
                    deadline = time.monotonic() + 120
                    while not any(f[0] in ("A", "C") for f in victim.lines()):
                        assert time.monotonic() < deadline, f"{name} acquired no queue in 120 s"
                        time.sleep(0.05)
                    victim.kill()
                    offsets = check_offsets(root, members, offsets)
                else:
                    members.append(Member(root, name, orderly))
            time.sleep(0.3)
        # Wait until every message was consumed, then stop the live members.
        deadline = time.monotonic() + 120  # breaks as soon as all is consumed
        while time.monotonic() < deadline:
            seen = consumed(members)
            if sum(len(seen[q]) for q in range(QUEUES)) >= TOTAL and all(
                len(seen[q]) == store.get_max_offset_in_queue("T", q) for q in range(QUEUES)
            ):
                break
            time.sleep(0.3)
        (root / "stop").touch()
        for m in members:
            if m.killed_at is None:
                assert m.proc.wait(timeout=30) == 0, f"{m.name} failed"
                assert m.lines()[-1] == ["X"]
        seen = consumed(members)
        bodies = {int(f[5]) for m in members for f in m.lines() if f[0] == "C"}
        assert bodies == set(range(TOTAL)), f"never consumed: {sorted(set(range(TOTAL)) - bodies)[:10]}"
        for q in range(QUEUES):
            assert seen[q] == set(range(store.get_max_offset_in_queue("T", q)))
        n_events = check_ownership(members)
        if orderly:
            check_order(members)
        assert n_events >= QUEUES * 3  # queues moved on every join, kill and leave
        final = check_offsets(root, members, offsets)
        assert final == {q: store.get_max_offset_in_queue("T", q) for q in range(QUEUES)}, final
    finally:
        for m in locals().get("members", []):
            if m.proc.poll() is None:
                m.proc.kill()
                m.proc.wait()
        store.close()
