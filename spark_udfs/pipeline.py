"""The pipeline job as a script for `spark-submit` (the same job as `rmq spark STORE OUT`).

    spark-submit --master spark://HOST:7077 --archives rmq-env.tar.gz#environment \
        spark_udfs/pipeline.py /shared/store /shared/out

The store directory must be readable at the same path on every executor (a shared filesystem). The UDFs and the
data source themselves live in the rmq wheel (`rmq.spark`, `rmq.arrow`), so that executors can load them: only
the driver script goes by path.
"""

from __future__ import annotations

import sys

from rmq.spark import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
