"""`rmq spark-env OUT.tar.gz`: the Python environment Spark executors need for rmq, packed for `--archives`.

Executors import `rmq` (the data source's reader and the UDFs run there), `pyarrow` (the batches they yield) and
`pandas` (PySpark's Arrow paths import it); `pyspark` itself comes from the cluster's Spark installation (each
Python worker gets Spark's `python/lib/pyspark.zip` on its path), so the packed environment leaves it out: it is
491 MB of the 575 MB a `pip install 'rmq[spark]'` environment holds.

The command runs three commands, printed as it runs them, which can be run by hand instead:

    python -m venv ENV
    ENV/bin/python -m pip install RMQ pyarrow==X pandas==Y venv-pack==Z
    ENV/bin/venv-pack -p ENV -o OUT.tar.gz

RMQ is `--wheel PATH` when given, else `rmq==` this version from the package index; pyarrow and pandas are pinned
to the versions installed here (the driver's), or the `spark` extra's ranges when they are not installed. Pip reads
its usual configuration (`PIP_INDEX_URL`, `PIP_FIND_LINKS`, `PIP_NO_INDEX`, pip.conf) for offline installs.
venv-pack does not pack the interpreter: `ENV/bin/python` links to the one the environment was made from, which
must be at the same path on every executor (`--python-prefix` names another: `/usr` for `/usr/bin/python3`).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import rmq
from rmq._paths import create_temporary, output_file

#: What executors import besides rmq and pyspark, with the `spark` extra's ranges (used when not installed here).
EXECUTOR_PACKAGES = {"pyarrow": "pyarrow>=18", "pandas": "pandas>=2.2,<3"}
#: The packer; installed into the environment it packs (a few kB), so the driver needs nothing new.
VENV_PACK = "venv-pack==0.2.0"
#: What must not be in the packed environment (executors have it from Spark).
LEFT_OUT = "pyspark"


class SparkEnvError(Exception):
    """The environment could not be built or packed; the message says which step and why."""


@dataclass(frozen=True)
class Result:
    out: Path
    packed_bytes: int
    unpacked_bytes: int
    requirements: tuple[str, ...]


def requirements(wheel: Path | None) -> list[str]:
    """The pip requirements of the executors' environment: rmq, then pyarrow and pandas, then venv-pack."""
    if wheel is not None:
        if not wheel.is_file() or wheel.suffix != ".whl":
            raise SparkEnvError(f"{wheel}: not a wheel file (build one with `make wheel`)")
        rmq_req = str(wheel.resolve())
    else:
        rmq_req = f"rmq=={importlib.metadata.version('rmq')}"
    pins = []
    for name, fallback in EXECUTOR_PACKAGES.items():
        try:
            pins.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            pins.append(fallback)
    return [rmq_req, *pins, VENV_PACK]


def commands(out: Path, env: Path, reqs: Sequence[str], python: str, python_prefix: str | None) -> list[list[str]]:
    """The three commands `build` runs."""
    pack = [str(env / "bin" / "venv-pack"), "-p", str(env), "-o", str(out), "--force", "--quiet"]
    if python_prefix is not None:
        pack += ["--python-prefix", python_prefix]
    return [
        [python, "-m", "venv", str(env)],
        [str(env / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *reqs],
        pack,
    ]


def tree_bytes(root: Path) -> int:
    return sum(p.lstat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def build(
    out: Path,
    *,
    wheel: Path | None = None,
    python: str | None = None,
    python_prefix: str | None = None,
    say: bool = True,
) -> Result:
    """Builds the executors' environment in a temporary directory and packs it into `out` (tar.gz or zip, by its
    name). Raises SparkEnvError when a step fails or pyspark ended up in the environment."""
    out = Path(out).absolute()
    try:  # the archive is renamed into place: never over a FIFO or a device; through a symlink, to its file
        out = output_file(out, "the archive")
    except rmq.InvalidArgumentError as e:
        raise SparkEnvError(str(e)) from None
    if not out.parent.is_dir():
        raise SparkEnvError(f"{out.parent}: no such directory")
    reqs = requirements(wheel)
    with tempfile.TemporaryDirectory(prefix="rmq-spark-env-") as tmp:
        env = Path(tmp) / "rmq-env"
        packed = Path(tmp) / out.name  # moved to `out` only when complete: a failed step leaves no archive
        for cmd in commands(packed, env, reqs, python or sys.executable, python_prefix):
            if say:
                print("+ " + shlex.join(cmd), flush=True)
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise SparkEnvError(f"`{shlex.join(cmd)}` failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
            if cmd[1:3] == ["-m", "pip"]:
                check_env(env)
        unpacked = tree_bytes(env)
        partial = out.with_name(f".{out.name}.partial")
        try:
            fd = create_temporary(partial, "the archive")
        except rmq.InvalidArgumentError as e:
            raise SparkEnvError(str(e)) from None
        with open(fd, "wb") as dst, open(packed, "rb") as src:
            shutil.copyfileobj(src, dst)  # the temporary directory may be on another filesystem
        umask = os.umask(0)
        os.umask(umask)
        partial.chmod(0o666 & ~umask)
        os.replace(partial, out)
    result = Result(out, out.stat().st_size, unpacked, tuple(reqs))
    if say:
        print(
            f"wrote {out}: {result.packed_bytes / 1e6:.0f} MB packed, {result.unpacked_bytes / 1e6:.0f} MB unpacked "
            f"(rmq, {', '.join(EXECUTOR_PACKAGES)}; no {LEFT_OUT}: executors use their Spark's)"
        )
    return result


def check_env(env: Path) -> None:
    """The new environment imports rmq and its Arrow side, and holds no pyspark."""
    probe = (
        "import importlib.util, sys, rmq, rmq.arrow, pandas\n"
        f"sys.exit(importlib.util.find_spec({LEFT_OUT!r}) is not None)\n"
    )
    proc = subprocess.run(
        [str(env / "bin" / "python"), "-c", probe],
        capture_output=True,
        text=True,
        check=False,
        env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")},
    )
    if proc.returncode == 1 and not proc.stderr:
        raise SparkEnvError(f"{LEFT_OUT} was installed into the executors' environment (a requirement pulled it in)")
    if proc.returncode != 0:
        raise SparkEnvError(f"the new environment cannot import rmq: {proc.stderr.strip()[-2000:]}")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("out", type=Path, help="the archive to write (.tar.gz or .zip), for spark-submit --archives")
    p.add_argument("--wheel", type=Path, default=None, help="install rmq from this wheel (default: rmq from the index)")
    p.add_argument("--python", default=None, help="the interpreter to make the environment with (default: this one)")
    p.add_argument(
        "--python-prefix",
        default=None,
        help="the executors' Python prefix, if not the same path as here (e.g. /usr for /usr/bin/python3)",
    )
