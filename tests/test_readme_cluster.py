"""README's "Spark on a cluster" commands, checked cheaply on every `make test`: the block parses, names only
documented placeholders, and every program and flag it uses exists (`make cluster-readme` runs the block as
written, tests/readme_cluster.py). Also `rmq spark-env`'s plan and its errors, without building anything."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from rmq.spark_env import LEFT_OUT, SparkEnvError, build, commands, requirements

REPO = Path(__file__).resolve().parent.parent
MARKER = "<!-- cluster-commands:"
#: The placeholders the block's comment documents; a test sets them and nothing else.
PLACEHOLDERS = ("MASTER", "STORE", "OUT", "WHEEL")
BIN = Path(sys.executable).parent


def cluster_block(readme: Path = REPO / "README.md") -> str:
    """The fenced sh block after the marker comment, as text."""
    text = readme.read_text()
    assert text.count(MARKER) == 1, f"README.md must hold exactly one {MARKER} marker"
    m = re.search(re.escape(MARKER) + r"[^\n]*\n```sh\n(.*?)\n```", text, re.S)
    assert m, "the marker must be followed by a ```sh block"
    return m.group(1)


def cluster_commands(block: str) -> list[list[str]]:
    """The block's commands as argument lists (comments dropped, continuation lines joined), with their leading
    VAR=value assignments kept."""
    lines = [line for line in block.replace("\\\n", " ").splitlines() if line.strip() and not line.startswith("#")]
    return [shlex.split(line) for line in lines]


def program(cmd: list[str]) -> tuple[dict[str, str], list[str]]:
    """A command's environment assignments and the rest."""
    env = {}
    while cmd and re.fullmatch(r"[A-Z_]+=.*", cmd[0]):
        k, v = cmd[0].split("=", 1)
        env[k] = v
        cmd = cmd[1:]
    return env, cmd


def test_block_uses_documented_placeholders_only() -> None:
    block = cluster_block()
    comment = " ".join(line for line in block.splitlines() if line.startswith("#"))
    used = set(re.findall(r"\$\{?([A-Z_]+)", block))
    assert used == set(PLACEHOLDERS), used
    for name in PLACEHOLDERS:
        assert f"{name}:" in comment or f"{name}," in comment, f"{name} is not explained in the block's comment"
    cmds = cluster_commands(block)
    assert [program(c)[1][0] for c in cmds] == ["rmq", "mkdir", "spark-submit"]


def test_spark_env_command_parses_as_written() -> None:
    """`rmq spark-env ...` from the block parses with rmq's own parser."""
    from rmq.cli import parser

    [cmd] = [program(c)[1] for c in cluster_commands(cluster_block()) if program(c)[1][0] == "rmq"]
    args = parser().parse_args(cmd[1:])
    assert args.command == "spark-env" and args.out == Path("rmq-env.tar.gz") and args.wheel == Path("$WHEEL")


def test_spark_submit_flags_and_environment() -> None:
    """spark-submit knows every flag the block gives it; the driver process runs the `python` with rmq[spark];
    the archive is the one the first command writes, unpacked for the driver's planning workers under the name
    executors get; the script takes the store and the output directory."""
    cmds = [program(c) for c in cluster_commands(cluster_block())]
    [(env, submit)] = [(e, c) for e, c in cmds if c[0] == "spark-submit"]
    assert env["PYSPARK_PYTHON"] == "./environment/bin/python" and env["PYSPARK_DRIVER_PYTHON"] == "python"
    flags = [a for a in submit if a.startswith("--")]
    path = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}  # the driver's environment, as if activated
    helptext = subprocess.run(
        ["spark-submit", "--help"], capture_output=True, text=True, timeout=120, check=False, env=path
    )
    for flag in flags:
        assert re.search(rf"^\s+{re.escape(flag)}\b", helptext.stdout + helptext.stderr, re.M), flag
    archive = submit[submit.index("--archives") + 1]
    assert archive == "rmq-env.tar.gz#environment"
    # The archive spark-env writes is the one shipped, and the driver unpacks it under the same name executors
    # get, which PYSPARK_PYTHON points into.
    [unpack] = [c for _, c in cmds if c[0] == "mkdir"]
    assert unpack == ["mkdir", "-p", "environment", "&&", "tar", "-xzf", "rmq-env.tar.gz", "-C", "environment"]
    [(_, make)] = [(e, c) for e, c in cmds if c[0] == "rmq"]
    assert make[2] == "rmq-env.tar.gz"
    script_at = submit.index("--archives") + 2
    assert submit[script_at:] == ["spark_udfs/pipeline.py", "$STORE", "$OUT"]
    assert (REPO / submit[script_at]).is_file()
    proc = subprocess.run(
        [sys.executable, str(REPO / submit[script_at]), "--help"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0 and "store" in proc.stdout and "out" in proc.stdout, proc.stderr


def test_spark_env_requirements_pin_the_drivers_versions(tmp_path: Path) -> None:
    wheel = tmp_path / "rmq-0.1.0-cp311-abi3-manylinux_2_17_x86_64.whl"
    wheel.write_bytes(b"PK")
    reqs = requirements(wheel)
    assert reqs[0] == str(wheel.resolve())
    for name in ("pyarrow", "pandas"):
        assert f"{name}=={importlib.metadata.version(name)}" in reqs
    assert not any(r.startswith(LEFT_OUT) for r in reqs)
    assert requirements(None)[0] == f"rmq=={importlib.metadata.version('rmq')}"
    cmds = commands(tmp_path / "o.tar.gz", tmp_path / "env", reqs, "python3", "/usr")
    assert cmds[0] == ["python3", "-m", "venv", str(tmp_path / "env")]
    assert cmds[2][:5] == [
        str(tmp_path / "env/bin/venv-pack"),
        "-p",
        str(tmp_path / "env"),
        "-o",
        str(tmp_path / "o.tar.gz"),
    ]
    assert cmds[2][-2:] == ["--python-prefix", "/usr"]


@pytest.mark.parametrize("bad", ["missing.whl", "notawheel.txt"])
def test_spark_env_refuses_a_bad_wheel_and_writes_nothing(tmp_path: Path, bad: str) -> None:
    if bad.endswith(".txt"):
        (tmp_path / bad).write_text("x")
    out = tmp_path / "env.tar.gz"
    with pytest.raises(SparkEnvError, match="not a wheel file"):
        build(out, wheel=tmp_path / bad, say=False)
    proc = subprocess.run(
        [str(BIN / "rmq"), "spark-env", str(out), "--wheel", str(tmp_path / bad)],
        capture_output=True, text=True, check=False, env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"},
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "not a wheel file" in proc.stderr, proc.stderr
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == sorted({bad} - {"missing.whl"})


def test_spark_env_refuses_a_missing_output_directory(tmp_path: Path) -> None:
    with pytest.raises(SparkEnvError, match="no such directory"):
        build(tmp_path / "nowhere" / "env.tar.gz", say=False)
    assert list(tmp_path.iterdir()) == []


def test_pipeline_script_shows_the_same_commands() -> None:
    """pipeline.py's docstring repeats the block with example values for the placeholders."""
    examples = {"$WHEEL": "WHEEL", "$MASTER": "spark://HOST:7077", "$STORE": "/shared/store", "$OUT": "/shared/out"}
    doc = " ".join((REPO / "spark_udfs" / "pipeline.py").read_text().replace("\\\n", " ").split())
    for cmd in cluster_commands(cluster_block()):
        line = " ".join(cmd)
        for placeholder, example in examples.items():
            line = line.replace(placeholder, example)
        assert line in doc, line


def test_the_cluster_run_collects() -> None:
    """`make cluster-readme` runs tests/readme_cluster.py, which `make test` does not: its imports (the cluster
    fixture lives in another test module) must keep working. Collecting it runs nothing and starts no JVM."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "readme_cluster.py"],
        cwd=Path(__file__).parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "readme_cluster.py::" in out.stdout


def test_spark_env_never_replaces_a_special_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As `rmq export`: the archive was renamed over whatever OUT was (a FIFO, a device). Refused before any
    step runs; a symlink to a FIFO too."""

    def no_step(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"ran {args}")

    monkeypatch.setattr("rmq.spark_env.subprocess.run", no_step)
    fifo = tmp_path / "env.tar.gz"
    os.mkfifo(fifo)
    (tmp_path / "link.tar.gz").symlink_to(fifo)
    for out in (fifo, tmp_path / "link.tar.gz"):
        with pytest.raises(SparkEnvError, match="a FIFO .*not a regular file"):
            build(out, say=False)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and sorted(p.name for p in tmp_path.iterdir()) == [
        "env.tar.gz",
        "link.tar.gz",
    ]
