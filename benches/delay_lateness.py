"""How late delayed messages are delivered: rmq's schedule service against RocketMQ 5.3.1's (`make bench-delay`).

Each side puts `--count` messages to topic `Delayed` (queue i % 4, delay level 1 + i % 3 of "1s 2s 3s", property
`seq` = i, 100-byte body) at `--rate` puts per second from one thread while its schedule service runs, then the
store is read back (with rmq, read-only): lateness = the delivered record's store time - (the scheduled record's
store time + the level's delay). Prints p50/p99/max lateness and the numbers delivered early (must be 0) and
missing (must be 0). RocketMQ's side is `rmq.harness.ScheduleDriver live` (a BrokerController around a
DefaultMessageStore with its put hooks and ScheduleMessageService, no network); `--no-java` skips it.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import maven  # benches/maven.py

import rmq

HERE = Path(__file__).resolve().parent
HARNESS = HERE.parent / "tests" / "interop" / "harness"
LEVELS = "1s 2s 3s"
DELAY_MS = {1: 1000, 2: 2000, 3: 3000}
TOPIC = "Delayed"


def run_rmq(root: Path, count: int, rate: float) -> None:
    cfg = rmq.StoreConfig(mapped_file_size_commit_log=64 << 20, message_delay_level=LEVELS)
    with rmq.MessageStore(root, cfg) as store:
        start = time.monotonic()
        for i in range(count):
            store.put(TOPIC, bytes(100), queue_id=i % 4, delay_level=1 + i % 3, properties={"seq": str(i)})
            pause = start + (i + 1) / rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        deadline = time.monotonic() + 60
        while sum(store.get_max_offset_in_queue(TOPIC, q) for q in range(4)) < count and time.monotonic() < deadline:
            time.sleep(0.05)


def run_java(root: Path, count: int, rate: float, classpath: str) -> None:
    out = subprocess.run(
        ["java", "-cp", classpath, "rmq.harness.ScheduleDriver", "live", str(root), LEVELS, str(count), str(rate)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert out.strip().endswith("delivered"), out


def lateness(root: Path) -> tuple[list[int], int, int]:
    """(sorted lateness in ms, delivered early, missing) of the store at `root`."""
    scheduled: dict[str, tuple[int, int]] = {}
    delivered: dict[str, int] = {}
    with rmq.MessageStore(root, read_only=True) as store:
        for m in store.scan():
            if m.topic == "SCHEDULE_TOPIC_XXXX":
                scheduled[m.properties["seq"]] = (m.store_timestamp, m.queue_id + 1)
            elif m.topic == TOPIC:
                delivered[m.properties["seq"]] = m.store_timestamp
    late = sorted(delivered[k] - (ts + DELAY_MS[level]) for k, (ts, level) in scheduled.items() if k in delivered)
    return late, sum(1 for x in late if x < 0), len(scheduled) - len(late)


def report(name: str, late: list[int], early: int, missing: int) -> float:
    """Prints one side's figures; returns its p99 lateness."""
    q = statistics.quantiles(late, n=100)
    print(
        f"  {name:9} p50 {q[49]:6.0f} ms  p99 {q[98]:6.0f} ms  max {late[-1]:6d} ms  mean {statistics.fmean(late):7.1f}"
        f" ms  (delivered {len(late)}, early {early}, missing {missing})"
    )
    return q[98]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=3000)
    ap.add_argument("--rate", type=float, default=1000.0, help="puts per second")
    ap.add_argument("--no-java", action="store_true", help="rmq only")
    args = ap.parse_args()
    java = not args.no_java and shutil.which("java") is not None and shutil.which("mvn") is not None
    classpath = maven.classpath(HARNESS) if java else ""
    print(f"delay lateness, {args.count} messages at {args.rate:.0f} puts/s, levels {LEVELS!r}:")
    with tempfile.TemporaryDirectory() as d:
        run_rmq(Path(d) / "rmq", args.count, args.rate)
        ours = report("rmq", *lateness(Path(d) / "rmq"))
        if java:
            run_java(Path(d) / "java", args.count, args.rate, classpath)
            theirs = report("RocketMQ", *lateness(Path(d) / "java"))
            # Store times are whole milliseconds: a p99 under 1 ms counts as 1 ms.
            print(f"  p99 lateness, RocketMQ / rmq: {theirs / max(ours, 1.0):.0f}x")


if __name__ == "__main__":
    main()
