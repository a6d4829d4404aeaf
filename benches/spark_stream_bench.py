"""The `rocketmq` streaming source against the batch sources on the same store, in rows per second (local[2]).

    python benches/spark_stream_bench.py [--messages 200000] [--runs 3]     (make bench-spark-stream)

The store: MESSAGES messages of 100-byte bodies with tags and a key, over 2 topics x 4 queues, in 64 MiB segments,
built once under .benchmarks/. Each figure is the best of RUNS runs of one whole query into Spark's `noop` sink
(all columns decoded, nothing written): (1) the batch source by commitlog splits, (2) the batch source by queue
offsets (`startingOffsets=earliest`), (3) the streaming source, Trigger.AvailableNow from earliest in one trigger,
(4) the same with `maxRecordsPerTrigger` = MESSAGES / 8 (eight triggers). A stream's whole-query figure includes
starting and stopping the query (its planner process, the checkpoint's offset and commit logs, the last trigger
that finds nothing new); the time inside its triggers (Spark's `addBatch`) is printed too.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import rmq
import rmq.spark as rs

ROOT = Path(__file__).resolve().parent.parent / ".benchmarks"


def build_store(messages: int) -> Path:
    root = ROOT / f"spark-stream-{messages}"
    if (root / "done").exists():
        return root / "store"
    shutil.rmtree(root, ignore_errors=True)
    config = rmq.StoreConfig(mapped_file_size_commit_log=64 << 20)
    with rmq.MessageStore(root / "store", config) as store:
        per_queue = messages // 8
        for start in range(0, per_queue, 1000):
            for topic in ("BenchA", "BenchB"):
                for q in range(4):
                    n = min(1000, per_queue - start)
                    batch = [rmq.Message(b"x" * 100, tags="t", keys=f"k{start + i}") for i in range(n)]
                    store.put_batch(topic, batch, queue_id=q)
        store.wait_dispatched(60)
    (root / "done").touch()
    return root / "store"


def best(runs: int, once: object) -> float:
    assert callable(once)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        once()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    store = str(build_store(args.messages))
    spark = rs.session("local[2]", conf={"spark.ui.showConsoleProgress": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    n = args.messages

    def batch(**options: str) -> None:
        df = spark.read.format("rocketmq").options(**options).load(store)
        df.write.format("noop").mode("overwrite").save()

    in_triggers: list[float] = []  # seconds the triggers spent reading and writing (Spark's addBatch)

    def stream(**options: str) -> None:
        with tempfile.TemporaryDirectory() as ckpt:
            q = (
                spark.readStream.format("rocketmq")
                .options(startingOffsets="earliest", **options)
                .load(store)
                .writeStream.format("noop")
                .option("checkpointLocation", ckpt)
                .trigger(availableNow=True)
                .start()
            )
            q.awaitTermination()
            assert sum(p["numInputRows"] for p in q.recentProgress) == n
            in_triggers.append(sum(p["durationMs"].get("addBatch", 0) for p in q.recentProgress) / 1000)

    assert spark.read.format("rocketmq").load(store).count() == n
    batch()  # warm up the JVM and the Python workers
    stream()  # warm up the streaming runner
    in_triggers.clear()
    figures = {
        "batch, commitlog splits": best(args.runs, batch),
        "batch, queue offsets": best(args.runs, lambda: batch(startingOffsets="earliest")),
        "streaming, one trigger": best(args.runs, stream),
    }
    one = min(in_triggers)
    in_triggers.clear()
    figures["streaming, 8 triggers"] = best(args.runs, lambda: stream(maxRecordsPerTrigger=str(n // 8)))
    eight = min(in_triggers)
    spark.stop()
    print(f"{n} messages, local[2], best of {args.runs} (whole query: start to end, a stream's start and stop too):")
    for name, secs in figures.items():
        print(f"  {name:26s} {secs:6.2f} s  {n / secs:10,.0f} rows/s")
    print("inside the triggers only (Spark's addBatch: reading and the sink):")
    for name, secs in (("streaming, one trigger", one), ("streaming, 8 triggers", eight)):
        print(f"  {name:26s} {secs:6.2f} s  {n / secs:10,.0f} rows/s")


if __name__ == "__main__":
    main()
