"""Spark beyond one process: the pipeline and spark-submit on a standalone cluster (a master and two workers on
loopback, started once for this module), and the demo's Spark job. Apart from tests/test_spark.py so that
pytest-xdist can run these slow tests beside it."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pyspark = pytest.importorskip("pyspark")

from test_spark import check_pipeline, matrix_rows, matrix_store  # noqa: E402

__all__ = ["matrix_rows", "matrix_store"]  # module fixtures, used by name


# -- Spark standalone cluster on loopback ---------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on {port}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark standalone master and two workers on 127.0.0.1 (pyspark's own launcher), shared by this module's
    cluster tests (each runs its own application; starting the three JVMs takes about 12 s)."""
    tmp_path = tmp_path_factory.mktemp("cluster")
    spark_class = str(Path(pyspark.__file__).parent / "bin" / "spark-class")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_WORKER_DIR": str(tmp_path / "work")}
    port = free_port()
    master = f"spark://127.0.0.1:{port}"
    commands = [
        ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port)],
        *[["org.apache.spark.deploy.worker.Worker", master, "--host", "127.0.0.1", "--cores", "1", "--memory", "1g"]]
        * 2,
    ]
    with contextlib.ExitStack() as stack:
        procs: list[subprocess.Popen[bytes]] = []

        def stop() -> None:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()

        stack.callback(stop)
        for i, cmd in enumerate(commands):
            log = stack.enter_context(open(tmp_path / f"daemon{i}.log", "wb"))
            ui = ["--webui-port", str(free_port())]
            procs.append(subprocess.Popen([spark_class, *cmd, *ui], env=env, stdout=log, stderr=subprocess.STDOUT))
            if i == 0:
                wait_port(port)
        # A readiness wait, not a speed check: on a loaded machine two JVM workers can take minutes to register.
        deadline = time.monotonic() + 300
        while (tmp_path / "daemon0.log").read_text(errors="replace").count("Registering worker") < 2:
            assert time.monotonic() < deadline, (tmp_path / "daemon0.log").read_text(errors="replace")[-3000:]
            time.sleep(0.3)
        yield master


def test_pipeline_on_a_standalone_cluster(
    cluster: str, matrix_store: Path, matrix_rows: list[dict[str, Any]], tmp_path: Path
) -> None:
    """`rmq spark STORE OUT --master spark://…`: the job runs on two workers (executor processes that are not
    the driver), with the driver's Python environment."""
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "rmq.cli", "spark", str(matrix_store), str(out), "--master", cluster,
         "--json", str(tmp_path / "result.json")],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-5000:]
    import json

    result = json.loads((tmp_path / "result.json").read_text())
    check_pipeline(result, out, matrix_rows)
    assert len(result["executors"]) == 2, result["executors"]


SUBMITTED = """
import json, sys
import rmq.spark
spark = rmq.spark.session()
n = spark.read.format("rocketmq").option("splitSize", 4096).load(sys.argv[1]).count()
print(json.dumps({"master": spark.sparkContext.master, "rows": n, "executors": rmq.spark.executor_ids(spark)}))
spark.stop()
"""


def test_spark_submit_master_is_kept(
    cluster: str, matrix_store: Path, matrix_rows: list[dict[str, Any]], tmp_path: Path
) -> None:
    """`spark-submit --master spark://...` a script that calls `rmq.spark.session()` with no master (and a
    different $SPARK_MASTER): the job runs on the cluster's two workers."""
    script = tmp_path / "job.py"
    script.write_text(SUBMITTED)
    submit = str(Path(pyspark.__file__).parent / "bin" / "spark-submit")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable, "SPARK_MASTER": "local[1]"}
    proc = subprocess.run(
        [submit, "--master", cluster, "--conf", "spark.ui.enabled=false", str(script), str(matrix_store)],
        capture_output=True, text=True, timeout=600, check=False, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-5000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["master"] == cluster and result["rows"] == len(matrix_rows)
    assert len(result["executors"]) == 2, result


def test_demo_ends_with_the_spark_job(tmp_path: Path) -> None:
    """The README's main job: `rmq demo` writes, reads, consumes, then runs the Spark job over its store."""
    proc = subprocess.run(
        [sys.executable, "-m", "rmq.cli", "demo", "--store", str(tmp_path / "store"), "--messages", "300",
         "--spark-out", str(tmp_path / "parquet")],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert "Spark job done" in proc.stdout and "OrderCreated" in proc.stdout
    assert list((tmp_path / "parquet" / "messages").glob("topic=*/day=*/*.parquet"))
