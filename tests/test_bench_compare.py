"""The machinery of `make bench-compare` (benches/compare), small: every baseline kind puts and consumes a few
messages and reads back all it put, the tables compute the ratios and goals from runs, and the charts are
drawn from a results JSON (in-process and through `run.py --charts-only`). No figure is asserted."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

COMPARE = Path(__file__).resolve().parent.parent / "benches" / "compare"
sys.path.insert(0, str(COMPARE))

import baselines  # noqa: E402
import charts  # noqa: E402


def _load_run() -> ModuleType:
    spec = importlib.util.spec_from_file_location("compare_run", COMPARE / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["compare_run"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


run = _load_run()


@pytest.mark.parametrize("kind", list(baselines.KINDS))
def test_baseline_puts_and_consumes_everything(kind: str, tmp_path: Path) -> None:
    count = run.baseline_count(kind, 1_000)
    r = baselines.run(kind, str(tmp_path / "store"), count, 1024)
    assert r["count"] == count
    assert r["put_s"] > 0 and r["consume_s"] > 0 and r["cpu_s"] >= 0
    assert any((tmp_path / "store").iterdir())  # it wrote to disk, where it was told


def test_baseline_rejects_an_unknown_kind(tmp_path: Path) -> None:
    with pytest.raises(KeyError):
        baselines.run("redis", str(tmp_path / "store"), 10, 16)


def _runs() -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Fake runs of every job: rmq 4x Java everywhere (2x for the SYNC_FLUSH put), dispatch below 2 M msg/s."""
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}

    def add(job: str, side: str, r: dict[str, Any]) -> None:
        run.derive(job, r)
        results.setdefault(job, {}).setdefault(side, []).append(r)

    for w in run.PUTS:
        slow = 2.0 if w.flush == "SYNC_FLUSH" else 4.0
        sides = [("java", 1.0), ("rmq", slow), ("rust", slow)] + ([(run.MESSAGES, 2.0)] if w.batch > 1 else [])
        for side, speed in sides:
            add(w.name, side, {"count": 1000, "put_s": 1 / speed, "dispatched_s": 1.1 / speed, "cpu_s": speed})
    for side, speed in (("java", 1.0), ("rmq", 4.0), ("rust", 4.0)):
        add(run.DISPATCH, side, {"count": 1_000_000, "dispatch_s": 2 / speed, "cpu_s": 1.0})
        add(
            run.READ, side,
            {"count": 1000, "drain_s": 0.01 / speed, "drain_cpu_s": 0.01, "query_median_us": 4 / speed,
             "query_p99_us": 9 / speed, "query_cpu_s": 0.01},
        )  # fmt: skip
        add(run.RECOVERY, side, {"count": 1000, "bytes": 1 << 20, "open_s": 2 / speed, "cpu_s": 1.0})
    add(
        run.LIMITS, "machine",
        {"count": 1, "memcpy_gbps": 10.0, "crc32_zlib_gbps": 1.0, "write_fdatasync_gbps": 1.0,
         "append_fdatasync_us": 1000.0, "sync16_bound_rate": 16_000.0},
    )  # fmt: skip
    for kind in baselines.KINDS:
        rate = {"rmq put": 100_000, "rmq put_batch(32)": 200_000, "sqlite WAL NORMAL": 150_000, "litequeue": 2_000}
        n = rate.get(kind, 500)
        add(run.BASELINES, kind, {"count": n, "put_s": 0.5, "consume_s": 0.5, "cpu_s": 0.1})
    return results


def test_tables_compute_ratios_and_goals() -> None:
    results = _runs()
    t = {e["measure"]: e for e in run.table(results)}
    put = t["put 1 KiB, msg/s"]
    assert put["rmq"]["ratio"] == pytest.approx(4.0) and put["rmq"]["met"] is True  # goal 3
    assert put["rust"]["met"] is False  # goal 5
    sync = t["put 1 KiB, SYNC_FLUSH, 16 threads, msg/s"]
    assert sync["rmq"]["goal"] == 3.0 and sync["rmq"]["met"] is False
    dispatch = t["dispatch, 3 keys a message, msg/s"]
    assert dispatch["rmq"]["ratio"] == pytest.approx(4.0)
    assert dispatch["rmq"]["met"] is False  # 2 M msg/s is not above the 2 M floor
    assert dispatch["java"]["cpu_us"] == pytest.approx(1.0)
    recovery = t["open after kill -9 (abnormal recovery), s"]
    assert recovery["rmq"]["ratio"] == pytest.approx(4.0)  # lower is better: Java's seconds / rmq's
    assert "machine: CRC32 (zlib.crc32), GB/s" in t
    assert t["machine: SYNC_FLUSH bound, 16 producers (16 / that), msg/s"]["machine"]["median"] == 16_000.0
    objects = t["put_batch(32) 1 KiB, Python `rmq.Message`s, msg/s"]
    assert objects["rmq"]["ratio"] == pytest.approx(2.0) and "rust" not in objects  # python only
    assert objects["rmq"]["cpu_us"] == pytest.approx(2000.0) and objects["java"]["cpu_us"] == pytest.approx(1000.0)
    assert t["put_batch(32) 1 KiB, msg/s"]["rmq"]["ratio"] == pytest.approx(4.0)  # the bodies + lists side
    assert "put 1 KiB, Python `rmq.Message`s, msg/s" not in t  # single puts have no such pass
    assert "machine: CRC32 (crc32fast, Rust), GB/s" not in t  # no Rust limits run in the fakes
    b = {e["kind"]: e for e in run.baseline_table(results)}
    assert b["litequeue"]["goal"] == {"rmq": "rmq put", "ratio": 100.0, "met": False}  # 50x
    assert b["persist-queue file"]["goal"]["met"] is True  # 200x
    assert b["sqlite WAL NORMAL"]["goal"]["rmq"] == "rmq put_batch(32)"
    assert b["sqlite WAL NORMAL"]["goal"]["met"] is True
    assert "goal" not in b["lmdb"]
    assert run.query_floor(results) is None  # no Rust limits run in the fakes: no load latency
    run.print_table(run.table(results))
    run.print_baselines(run.baseline_table(results))


def test_the_query_floor_is_three_dependent_loads_against_5x_rocketmq() -> None:
    results = _runs()
    for r in results[run.LIMITS]["machine"]:
        r |= {"dependent_load_ns": 200.0, "dependent_load_4k_ns": 300.0}
    t = {e["measure"]: e for e in run.table(results)}
    assert t["machine: dependent random load in 512 MiB, 2 MiB pages, ns"]["machine"]["median"] == 200.0
    assert t["machine: dependent random load in 512 MiB, 4 KiB pages, ns"]["machine"]["median"] == 300.0
    floor = run.query_floor(results)
    assert floor is not None
    assert floor["goal_us"] == pytest.approx(4 / 5)  # Java's median query 4 µs in the fakes
    assert floor["three_loads_2m_us"] == pytest.approx(0.6) and floor["three_loads_4k_us"] == pytest.approx(0.9)
    assert floor["rmq_us"] == pytest.approx(1.0) and floor["rust_us"] == pytest.approx(1.0)


@pytest.mark.parametrize("form", ["lists", "messages"])
def test_the_python_put_driver_puts_batches_both_ways(tmp_path: Path, form: str) -> None:
    a = {
        "topic": "T", "queues": "2", "tag": "TagA", "size": "64", "segment": str(1 << 20), "count": "640",
        "warmup": "64", "threads": "1", "batch": "32", "dir": str(tmp_path), "keys": "1", "form": form,
    }  # fmt: skip
    r = run.rmq_put(a)  # checks every message reached its queue
    assert r["count"] == 640 and r["put_s"] > 0
    assert run.command_line(run.MESSAGES, "put", {"batch": "32"}, {})[-1] == "form=messages"


def test_the_limits_measure_the_sync_bound(tmp_path: Path) -> None:
    r = run.limits({"bytes": str(1 << 20), "dir": str(tmp_path)})
    assert r["append_fdatasync_us"] > 0
    assert r["sync16_bound_rate"] == pytest.approx(16 / r["append_fdatasync_us"] * 1e6)


def test_charts_are_drawn_from_a_results_json(tmp_path: Path) -> None:
    results = _runs()
    doc = {
        "date": "2026-11-24T23:00:00+00:00",
        "machine": {"cpus": 2, "cpu_model": "test CPU", "platform": "Linux"},
        "settings": {"rounds": 1},
        "table": run.table(results),
        "baselines": run.baseline_table(results),
    }
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    drawn = charts.draw(doc, path)
    assert [p.name for p in drawn] == ["results-ratios.png", "results-throughput.png"]
    for p in drawn:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        p.unlink()
    proc = subprocess.run(
        [sys.executable, str(COMPARE / "run.py"), "--charts-only", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    for p in drawn:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_unknown_job_is_refused() -> None:
    proc = subprocess.run(
        [sys.executable, str(COMPARE / "run.py"), "--jobs", "put1k,nonsense"], capture_output=True, text=True
    )
    assert proc.returncode != 0
    assert "unknown jobs ['nonsense']" in proc.stderr
