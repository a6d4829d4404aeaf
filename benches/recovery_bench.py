"""Recovery benchmark (`make bench-recovery`): rmq's open against RocketMQ 5.3.1's `DefaultMessageStore.load()`
on the same multi-GiB store, after a crash (abnormal path) and after a clean shutdown (normal path).

1. A writer process fills a store with RocketMQ's defaults (1 GiB segments, ASYNC_FLUSH, default consume-queue
   and index sizes) with ~1 KiB messages over 4 topics x 8 queues, each with a tag and two keys, waits until
   everything is dispatched and is killed with SIGKILL: the abort file stays, as after any crash. Two images:
   `old` flushes once early on and runs no background services (the checkpoint is older than every record
   less the 3 s margin, so both recoveries validate and dispatch the whole store), `recent` runs them and
   flushes every 500 ms (as FlushRealTimeService and the checkpoint service do: the abnormal path starts near
   the end).
2. A clean image: rmq opens a copy of it and closes it (abort file removed, checkpoint current).
3. Each measured open runs in a fresh process on a fresh copy of an image (both rmq and RocketMQ rewrite
   files while recovering): `rmq.MessageStore(path)` (the whole Python open: validation with CRCs, the derived
   files' checks, dispatch) and `RecoveryLoad` (benches/recovery_java: the whole `load()`). Warm: the copy's
   pages are in the page cache (just written and synced). Cold: `echo 3 > /proc/sys/vm/drop_caches` after the
   copy (root only; skipped otherwise).

Bytes validated: rmq's from `recovery_report["validated_bytes"]`; RocketMQ's from its start segment by spec
§10.3's rule (abnormal: the newest segment whose first record was stored at or before the checkpoint's min
timestamp less 3 s; normal: the newest segment whose first record the consume queues hold) to the end.

Environment: `RMQ_BENCH_RECOVERY_DIR` (default /tmp/rmq-bench-recovery), `RMQ_BENCH_RECOVERY_GIB` (store size,
default 3.25), `RMQ_BENCH_RECOVERY_REBUILD=1` rebuilds the images, `RMQ_BENCH_RECOVERY_COLD=0` skips the
cold runs, `RMQ_BENCH_RECOVERY_SCENARIOS` picks from `old,recent,clean` (the default: all three). Prints one
JSON line per run and a table.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import maven  # benches/maven.py

HERE = Path(__file__).resolve().parent
JAVA_PROJECT = HERE / "recovery_java"
GIB = 1 << 30
TOPICS = 4
QUEUES = 8
BATCH = 64


def write(root: Path, size: int, every: float) -> None:
    """The writer (run in a child process): fills `root` to `size` bytes, flushing once at 64 MiB (`every` 0)
    or every `every` seconds, waits for dispatch and says "ready", then waits to be killed."""
    import rmq

    tags = ["TagA", "TagB", "TagC", "TagD", "TagE"]
    # The old image runs no background services: their checkpoint writes (every second) would make it recent.
    # Dispatch then runs in `wait_dispatched`, before the kill, as the reput service would have.
    config = rmq.StoreConfig(flush_disk_type="ASYNC_FLUSH")
    with rmq.MessageStore(root, config, start_services=every > 0) as store:
        i = 0
        flushed = False
        last_flush = time.monotonic()
        while store.max_offset < size:
            items = [
                rmq.Message(
                    (b"%012d" % (i + k)) * (80 + (i + k) % 12),
                    tags=tags[(i + k) % len(tags)],
                    keys=f"order-{i + k} user-{(i + k) % 100_000}",
                )
                for k in range(BATCH)
            ]
            n = i // BATCH
            store.put_batch(f"BenchTopic{n % TOPICS}", items, queue_id=(n // TOPICS) % QUEUES)
            i += BATCH
            if every > 0 and time.monotonic() - last_flush >= every:
                store.flush()
                last_flush = time.monotonic()
            elif every == 0 and not flushed and store.max_offset > 64 << 20:
                store.flush()
                flushed = True
        store.wait_dispatched(3600)
        print("ready", store.max_offset, i, flush=True)
        time.sleep(3600)


def build_crashed(image: Path, size: int, every: float) -> tuple[int, int]:
    """Writes the image (see `write`) and kills its writer; returns (commitlog bytes, messages)."""
    shutil.rmtree(image, ignore_errors=True)
    child = subprocess.Popen(
        [sys.executable, __file__, "write", str(image), str(size), str(every)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    line = child.stdout.readline()
    child.send_signal(signal.SIGKILL)
    child.wait()
    if not line.startswith("ready"):
        raise SystemExit(f"the writer failed: {line!r}")
    (image / "lock").unlink(missing_ok=True)
    assert (image / "abort").exists()
    _, max_offset, messages = line.split()
    return int(max_offset), int(messages)


def open_rmq(root: Path) -> None:
    """The measured rmq open (child process): prints the recovery report and the wall time."""
    import rmq

    c0 = time.process_time()
    t0 = time.perf_counter()
    store = rmq.MessageStore(root, rmq.StoreConfig(flush_disk_type="ASYNC_FLUSH"))
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    r = store.recovery_report
    out = {k: r[k] for k in ("path", "start_offset", "validated_bytes", "validate_seconds", "open_seconds")}
    out.update(wall_seconds=wall, cpu_seconds=cpu, max_offset=store.max_offset, redispatched=r["redispatched_records"])
    print(json.dumps(out), flush=True)
    os._exit(0)  # not closed: the copy is thrown away


def copy(image: Path, work: Path, cold: bool) -> None:
    shutil.rmtree(work, ignore_errors=True)
    subprocess.run(["cp", "-a", str(image), str(work)], check=True)
    os.sync()
    if cold:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")


def segments(root: Path) -> list[Path]:
    return sorted((root / "commitlog").iterdir())


def first_record(seg: Path) -> tuple[int, int]:
    """(PHYSICALOFFSET, STORETIMESTAMP) of a segment's first record (0, 0 when it has none)."""
    with seg.open("rb") as f:
        head = f.read(64)
    size, magic = struct.unpack(">iI", head[:8])
    if size <= 0 or magic not in (0xDAA320A7, 0xDAA320AB):
        return (0, 0)
    physical = struct.unpack(">q", head[28:36])[0]
    born_host_len = 8 if struct.unpack(">i", head[36:40])[0] & 0x10 == 0 else 20
    store_ts = struct.unpack(">q", head[48 + born_host_len : 56 + born_host_len])[0]
    return (physical, store_ts)


def rocketmq_start(image: Path, clean: bool) -> int:
    """Where RocketMQ's recovery starts on `image` (spec §10.3, default settings)."""
    segs = segments(image)
    cp = (image / "checkpoint").read_bytes()
    physic, logics = struct.unpack(">qq", cp[:16])
    min_ts = max(0, min(physic, logics) - 3000)
    heads = [first_record(s) for s in segs]
    if clean:
        # Every record is dispatched after a clean close: the newest segment qualifies.
        index = len(segs) - 1
        return int(segs[index].name)
    for index in range(len(segs) - 1, -1, -1):
        ts = heads[index][1]
        if ts != 0 and ts <= min_ts:
            return int(segs[index].name)
    return int(segs[0].name)


def run(cmd: list[str]) -> dict[str, Any]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{cmd} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    out["process_seconds"] = wall
    return out


def main() -> None:
    base = Path(os.environ.get("RMQ_BENCH_RECOVERY_DIR", "/tmp/rmq-bench-recovery"))
    size = int(float(os.environ.get("RMQ_BENCH_RECOVERY_GIB", "3.25")) * GIB)
    crashed, clean, work = base / "crashed", base / "clean", base / "work"
    recent = base / "crashed-recent"
    base.mkdir(parents=True, exist_ok=True)
    rebuild = bool(os.environ.get("RMQ_BENCH_RECOVERY_REBUILD"))
    for image, every in ((crashed, 0.0), (recent, 0.5)):
        if rebuild or not (image / "abort").exists():
            t0 = time.perf_counter()
            build_crashed(image, size, every)
            print(f"# built {image} in {time.perf_counter() - t0:.0f} s", flush=True)
            if image == crashed:
                shutil.rmtree(clean, ignore_errors=True)
    if not clean.exists():
        copy(crashed, clean, cold=False)
        subprocess.run([sys.executable, "-c", f"import rmq; rmq.MessageStore({str(clean)!r}).close()"], check=True)
        (clean / "lock").unlink(missing_ok=True)
        assert not (clean / "abort").exists()
    classpath = maven.classpath(JAVA_PROJECT)
    can_drop = os.geteuid() == 0 and os.environ.get("RMQ_BENCH_RECOVERY_COLD", "1") != "0"
    store_bytes = sum(s.stat().st_size for s in segments(crashed))
    print(f"# store: {len(segments(crashed))} segments, {store_bytes / GIB:.2f} GiB of segment files", flush=True)
    rows = []
    scenarios = {"old": ("abnormal", crashed), "recent": ("abnormal", recent), "clean": ("normal", clean)}
    chosen = os.environ.get("RMQ_BENCH_RECOVERY_SCENARIOS", "old,recent,clean").split(",")
    for name in chosen:
        path, image = scenarios[name]
        for cold in (True, False) if can_drop else (False,):
            for impl in ("rmq", "rocketmq"):
                copy(image, work, cold)
                if impl == "rmq":
                    r = run([sys.executable, __file__, "open", str(work)])
                    assert r["path"] == path, r
                    seconds, validated = r["wall_seconds"], r["validated_bytes"]
                else:
                    r = run(["java", "-cp", classpath, "rmq.bench.RecoveryLoad", str(work)])
                    assert r["ok"] and r["clean"] == (path == "normal"), r
                    seconds = r["load_seconds"]
                    validated = r["max_offset"] - rocketmq_start(image, path == "normal")
                r.update(impl=impl, recovery=path, scenario=name, cache="cold" if cold else "warm", seconds=seconds)
                r["validated_bytes"] = validated
                r["gb_per_s"] = validated / seconds / 1e9 if seconds > 0 else 0.0
                print(json.dumps(r), flush=True)
                rows.append(r)
    shutil.rmtree(work, ignore_errors=True)
    print("\n| recovery | checkpoint | cache | impl | validated | seconds | GB/s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['recovery']} | {r['scenario']} | {r['cache']} | {r['impl']} | {r['validated_bytes'] / GIB:.2f} GiB "
            f"| {r['seconds']:.2f} | {r['gb_per_s']:.2f} |"
        )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "write":
        write(Path(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
    elif len(sys.argv) > 1 and sys.argv[1] == "open":
        open_rmq(Path(sys.argv[2]))
    else:
        main()
