"""The `rocketmq` writer against Parquet: rows per second writing the same DataFrame into a new store and into a
Parquet directory, with local[2] (or RMQ_BENCH_SPARK_MASTER).

    python benches/spark_writer.py [ROWS]     # default 200,000 rows: topic, 100-byte body, two keys, tags

The DataFrame is cached and counted first, so both writes time the writing only; each is the best of 3 runs into
a fresh directory under .benchmarks/ (removed afterwards). The store gets 256 MiB segments and the default index.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import functions as F

import rmq.spark as rs


def best(fn: Callable[[Path], None], root: Path, runs: int = 3) -> float:
    times = []
    for i in range(runs):
        out = root / f"run{i}"
        shutil.rmtree(out, ignore_errors=True)
        t = time.perf_counter()
        fn(out)
        times.append(time.perf_counter() - t)
        shutil.rmtree(out, ignore_errors=True)
    return min(times)


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    root = Path(__file__).resolve().parent.parent / ".benchmarks" / "spark-writer"
    spark = rs.session(
        os.environ.get("RMQ_BENCH_SPARK_MASTER", "local[2]"), conf={"spark.ui.showConsoleProgress": "false"}
    )
    try:
        df = (
            spark.range(rows, numPartitions=2)
            .select(
                F.lit("Bench").alias("topic"),
                F.expr("cast(repeat('x', 100) as binary)").alias("body"),
                F.concat(
                    F.lit("order-"), F.col("id").cast("string"), F.lit(" customer-"), (F.col("id") % 97).cast("string")
                ).alias("keys"),
                F.lit("TagA").alias("tags"),
            )
            .cache()
        )
        assert df.count() == rows

        def to_store(out: Path) -> None:
            df.write.format("rocketmq").mode("append").option("mappedFileSizeCommitLog", str(256 << 20)).save(str(out))

        def to_parquet(out: Path) -> None:
            df.write.mode("overwrite").parquet(str(out))

        for name, fn in (("rocketmq store", to_store), ("parquet", to_parquet)):
            seconds = best(fn, root)
            print(f"{name}: {rows} rows in {seconds:.2f}s = {rows / seconds:,.0f} rows/s")
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
