"""Builds a Maven project of the repo (the interop harness, the bench drivers) and returns its runtime classpath.

Maven fetches RocketMQ 5.3.1's jars from Maven Central on the first build. One function for the bench scripts
and the tests (tests/test_interop.py adds a lock and a once-per-run stamp around it for pytest's workers)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def classpath(project: Path, target: Path | None = None, *properties: str, timeout: float = 1800) -> str:
    """`mvn package dependency:build-classpath` on `project` (with `-D` `properties`), then the classes directory
    and the dependencies' jars, `os.pathsep`-separated. `target` is the project's build directory."""
    target = target if target is not None else project / "target"
    cp_file = target / "classpath.txt"
    subprocess.run(
        ["mvn", "-q", "-B", "-f", str(project / "pom.xml"), *properties, "package", "dependency:build-classpath",
         f"-Dmdep.outputFile={cp_file}"],
        check=True,
        timeout=timeout,
    )  # fmt: skip
    return f"{target / 'classes'}{os.pathsep}{cp_file.read_text().strip()}"
