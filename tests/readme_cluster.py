"""README's "Spark on a cluster" commands run as written (`make cluster-readme`, about two minutes, so not part of
`make test`, which runs tests/test_readme_cluster.py on the same block): the block is copied out of README.md
and run by bash against a standalone master and two workers on 127.0.0.1, with only its documented placeholders
set (MASTER, STORE, OUT, WHEEL: the wheel `make wheel` built, in $RMQ_WHEEL_DIR). The job's Parquet holds every
message of the store; the executors ran the packed environment; that environment, unpacked in a fresh directory,
imports rmq without pyspark and puts and gets a message."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from test_readme_cluster import BIN, PLACEHOLDERS, REPO, cluster_block
from test_spark_cluster import cluster  # noqa: F401  (the fixture: a master and two workers on loopback, torn down)
from wheel_check import facts

import rmq
from conftest import small_config

TOPICS = {"OrderCreated": 4, "OrderPaid": 2, "Audit": 1}
PER_QUEUE = 60


def the_wheel() -> Path:
    wheels = sorted(Path(os.environ.get("RMQ_WHEEL_DIR", REPO / "target" / "wheels")).resolve().glob("rmq-*.whl"))
    assert len(wheels) == 1, f"run `make wheel` first (found {wheels})"
    return wheels[0]


def write_store(root: Path) -> Counter[str]:
    """Messages in three topics over several 64 KiB segments; returns the count per topic."""
    counts: Counter[str] = Counter()
    with rmq.MessageStore(root, small_config(mapped_file_size_commit_log=64 * 1024)) as store:
        for i in range(PER_QUEUE):
            for topic, queues in TOPICS.items():
                for q in range(queues):
                    store.put(topic, f"{topic}-{q}-{i}".encode() * 20, queue_id=q, keys=[f"k{i % 7}"], tags="t")
                    counts[topic] += 1
    assert len(list((root / "commitlog").iterdir())) > 3
    return counts


def run_in_own_group(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """`subprocess.run` in a process group of its own, which is ended however this returns (a timeout, an
    interrupt): no spark-submit JVM outlives the test."""
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, **kwargs
    ) as p:
        try:
            out, err = p.communicate(timeout=1200)
        finally:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, sig)
                    time.sleep(0 if sig == signal.SIGKILL else 2)
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


# Minutes on a loaded machine: a venv, pip, venv-pack, two JVM executors unpacking 100 MB each.
@pytest.mark.timeout(1500)
def test_readme_cluster_commands_as_written(
    cluster: str,  # noqa: F811
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    wheel = the_wheel()
    assert facts(wheel).problems() == []
    shared = tmp_path / "shared"
    counts = write_store(shared / "store")
    # The submitting machine's working directory: a checkout's spark_udfs/ beside where the archive is written.
    work = tmp_path / "submit"
    work.mkdir()
    (work / "spark_udfs").symlink_to(REPO / "spark_udfs")
    values = {"MASTER": cluster, "STORE": str(shared / "store"), "OUT": str(shared / "out"), "WHEEL": str(wheel)}
    assert set(values) == set(PLACEHOLDERS)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_MASTER")}
    env |= values | {"PATH": f"{BIN}:{os.environ['PATH']}", "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = run_in_own_group(["bash", "-e", "-o", "pipefail", "-c", cluster_block()], cwd=work, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + "\n".join(
        line for line in proc.stderr.splitlines() if " INFO " not in line and not line.startswith("\tat ")
    )
    assert "no pyspark" in proc.stdout, proc.stdout
    assert f"(master {cluster})" in proc.stdout, proc.stdout  # spark-submit's --master, given once

    messages = shared / "out" / "messages"
    rows = {t: 0 for t in TOPICS}
    for part in messages.glob("topic=*/day=*/*.parquet"):
        rows[part.parent.parent.name.removeprefix("topic=")] += pq.read_metadata(part).num_rows
    assert rows == dict(counts)
    summary = [
        json.loads(line)
        for p in (shared / "out" / "summary_topics").glob("*.json")
        for line in p.read_text().splitlines()
    ]
    assert {s["topic"]: s["messages"] for s in summary} == dict(counts)
    # Both workers' executors ran the shipped environment: Spark unpacked it into their working directories.
    # The workers' directory is the cluster fixture's (tests/test_spark_cluster.py): <basetemp>/cluster<N>/work
    # (pytest also links cluster<N> as "clustercurrent").
    work_dirs = list(tmp_path_factory.getbasetemp().glob("cluster[0-9]*/work"))
    assert len(work_dirs) == 1, work_dirs
    unpacked = list(work_dirs[0].glob("app-*/*/environment/bin/python"))
    assert len(unpacked) == 2, list(work_dirs[0].rglob("*"))[:50]

    # The archive on its own: a fresh directory, its python, rmq from the manylinux wheel, no pyspark.
    fresh = tmp_path / "fresh"
    with tarfile.open(work / "rmq-env.tar.gz") as tar:
        tar.extractall(fresh, filter="tar")
    probe = (
        "import importlib.util, sys, rmq\n"
        "assert importlib.util.find_spec('pyspark') is None\n"
        "assert rmq.__file__.startswith(sys.prefix), (rmq.__file__, sys.prefix)\n"
        "small = rmq.StoreConfig(mapped_file_size_commit_log=65536, mapped_file_size_consume_queue=6000,\n"
        "                        max_hash_slot_num=512, max_index_num=2048)\n"
        "with rmq.MessageStore(sys.argv[1], small) as s:\n"
        "    r = s.put('Fresh', b'hello', keys=['k1'], properties={'a': 'b'})\n"
        "    m = s.read(r.wrote_offset)\n"
        "    print(m.topic, bytes(m.body).decode(), m.keys, m.properties['a'])\n"
    )
    clean = {k: v for k, v in env.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    got = subprocess.run(
        [str(fresh / "bin" / "python"), "-c", probe, str(tmp_path / "fresh-store")],
        capture_output=True, text=True, check=False, env=clean, cwd=tmp_path,
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    assert got.stdout.split() == ["Fresh", "hello", "['k1']", "b"]
    assert sys.executable not in got.stdout
