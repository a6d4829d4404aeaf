"""The pipeline job as a script for `spark-submit` (the same job as `rmq spark STORE OUT`).

    rmq spark-env rmq-env.tar.gz --wheel WHEEL
    mkdir -p environment && tar -xzf rmq-env.tar.gz -C environment
    PYSPARK_DRIVER_PYTHON=python PYSPARK_PYTHON=./environment/bin/python spark-submit --master spark://HOST:7077 \
        --archives rmq-env.tar.gz#environment spark_udfs/pipeline.py /shared/store /shared/out

(README.md, "Spark on a cluster", says why each step; `make cluster-readme` runs them.) The master is
spark-submit's. The store directory must be readable at the same path on every executor (a shared filesystem).
The UDFs and the data source themselves live in the rmq wheel (`rmq.spark`, `rmq.arrow`), so that executors can
load them: only the driver script goes by path.
"""

from __future__ import annotations

import sys

from rmq.spark import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
