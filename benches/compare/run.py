"""rmq from Python and from Rust against Apache RocketMQ 5.3.1's `DefaultMessageStore`, side by side
(`make bench-compare`), with the machine's limits and the durable logs a Python user would otherwise pick.

The three sides do the same work with the same settings, each run in a fresh process and a fresh store directory
under `--dir` (default: a temporary directory; the same disk for both), deleted after the run, followed by
`sync` so neither side pays for the other's writeback:

- ASYNC_FLUSH (but for the SYNC_FLUSH put), 256 MiB commitlog segments, everything else at its default on both
  sides (consume-queue files of 300,000 entries; index files of 5,000,000 slots and 20,000,000 entries, the
  index on; services running: rmq's reput, flush, group-commit and warm-up threads, RocketMQ's reput, flush,
  GroupCommitService and AllocateMappedFileService).
- One topic (`BenchTopic`), 4 queues; message n goes to queue n % 4 (a batch starting at n to (n / 32) % 4),
  with the tag `TagA` and the key `key-n` (the dispatch workload: 3 keys, `key-n k1-n k2-n`, space separated
  as RocketMQ splits KEYS); a generated UNIQ_KEY, WAIT=true and, for single puts, the CLUSTER property (rmq
  adds it; the Java side sets it as a broker's SendMessageProcessor does). Bodies are one reused buffer of the
  message size.
- RocketMQ: `rmq.bench.CompareDriver` (benches/compare/java, built with Maven from the Maven Central jars,
  default JVM options). Each message is a `MessageExtBrokerInner` built as the broker builds it from a request
  (properties string, tags code) and stored with `putMessage`; a batch is a `MessageExtBatch` of 32 messages
  encoded with `MessageDecoder.encodeMessages`, stored with `putMessages`. Building them is timed, as building
  the arguments of `put` / `put_batch` is timed on the Python side (a batch: the 32 bodies with `tags=` and
  a list of 32 `keys=`; and, as a side of its own, 32 `rmq.Message` objects).
- rmq from Python: the public API (`rmq.MessageStore.put`, `put_batch`, `get_message`, `query_message`) in a
  child process of this script; from Rust: `compare_driver` (benches/compare/driver.rs, a Cargo example
  built here with `cargo build --release`), the same calls on `rmq::store::MessageStore`.
- Each process runs its workload twice: a warm-up pass (a quarter of the count, its own store, deleted) so the
  JIT has compiled the path, then the timed pass in a fresh store. The rmq drivers do the same.
- CPU time: every driver reads its process's CPU time (user + system, every thread: background services, JIT
  and GC included; `time.process_time` and `CLOCK_PROCESS_CPUTIME_ID` in ns, RocketMQ's
  `OperatingSystemMXBean.getProcessCpuTime` in 10 ms ticks) around each timed span; the table gives it as µs
  of CPU per message. Each run's whole-process CPU (startup and warm-up included, from
  `getrusage(RUSAGE_CHILDREN)`) is in the JSON as `process_cpu_s`.

Workloads (`PUTS` and the jobs below, the one definition every side receives as arguments):

- put: `count` messages of `size` bytes, single (`put` / `putMessage`) or in batches of 32 (`put_batch` /
  `putMessages`), from 1 or 4 threads. `count` fills about `--volume-mib` MiB of commitlog (default 1024; body
  plus ~230 bytes of header and properties per record). Measured: put_s, first put to last return (msg/s),
  and dispatched_s, first put until dispatch has caught up (consume queues and index hold everything). A
  batched put from Python runs twice, as two sides in the rotation, each a process of its own: bodies with
  `tags=` and a `keys=` list (`rmq`), and the same batches as `rmq.Message` objects (`rmq-messages`, the
  "Python `rmq.Message`s" row, against the same Java figure).
- put SYNC_FLUSH: `--sync-messages` (default 16,000) single 1 KiB puts from 16 threads into a SYNC_FLUSH store:
  each put waits until its record is flushed (rmq's group-commit service; RocketMQ's GroupCommitService, every
  request waiting for its flush), so concurrent puts share flushes.
- dispatch: `--dispatch-messages` (default 1,000,000) single puts of 128 bytes with 3 keys each into a store
  whose dispatch is stopped (rmq: opened with `start_services=False`; RocketMQ: started, then its
  ReputMessageService shut down), then dispatch is started (rmq: `start_services()`; RocketMQ: the reput
  service started again) and timed until the consume queues and the index (4 entries a message: UNIQ_KEY and
  the 3 keys) hold everything (msg/s).
- read: a store of `--read-messages` (default 800,000) single puts of 128 bytes, dispatched (not measured),
  drained queue by queue with `get_message` / `getMessage` of 32 per call (once to warm up, once timed; from
  Python both as `MessageExt`s and as raw views, against the same Java figure), then `--queries` (10,000)
  keys queried with `query_message` / `queryMessage` (each once to warm up, then each timed alone: median
  and p99 latency).
- recovery after kill -9: once per round, benches/recovery_bench.py's writer (its `old` image: RocketMQ's
  default 1 GiB segments, ~1 KiB messages over 4 topics x 8 queues with a tag and two keys each, flushed once
  early, no services, dispatched, then killed with SIGKILL: the abort file stays and the checkpoint is older
  than every record, so both sides validate and dispatch the whole store) fills `--recovery-mib` MiB (default
  1024); each side opens its own fresh copy (page cache warm): `rmq.MessageStore(path)` (recovery_bench.py's
  `open`), `MessageStore::open` (compare_driver `recover`), the `DefaultMessageStore` constructor and
  `load()` (benches/recovery_java's `RecoveryLoad`). Measured: seconds (lower is better).
- machine limits (once per round, in the same run): memcpy bandwidth (a 256 MiB bytearray copy), CRC32 over
  256 MiB (`zlib.crc32` from Python; crc32fast, which rmq uses, from the Rust driver) and a sequential write of
  256 MiB in 1 MiB writes ended by `fdatasync`, best of 3 each; the 4 KiB puts' body bandwidth is reported
  against memcpy (issue 19: at least half). And the median latency of a 1 KiB append made durable with
  `fdatasync` (200 in a row): a SYNC_FLUSH put waits for such a flush and 16 producers share one at most, so
  16 / that latency bounds the SYNC_FLUSH put of any store on this disk (the "SYNC_FLUSH bound" row). And from
  the Rust driver, the latency of a load whose address comes from the load before, at random in 512 MiB of
  memory with 2 MiB pages and with 4 KiB pages (best of 3 chases of 2,000,000 loads): a query by key is three
  such loads in a row (slot, entry, record), so three of them bound any store's query here from below; the
  run prints them beside 5x RocketMQ's median query (issue 19's goal) and writes them as `query_floor`.
- baselines (benches/compare/baselines.py states each choice): `--baseline-messages` (default 200,000) 1 KiB
  messages put and then consumed, from Python, by rmq (`put`, and `put_batch(32)`, drained with `get_message`),
  SQLite in WAL mode (synchronous=NORMAL: rmq's ASYNC_FLUSH durability; and FULL), LMDB, persist-queue and
  litequeue (the slow ones with fewer messages), each in a process of its own: msg/s over put and consume.

Rounds: `--warmup-rounds` (1) discarded, then `--rounds` (3); in each round every workload runs on every side
back to back, the side going first rotating between rounds, so drift hits all alike. The table gives each
side's median over the rounds with min-max and the ratios rmq / Java of the medians (for latencies and
seconds, Java's / rmq's: above 1 is rmq faster), against the goals of issue 19; a second table gives the
baselines against rmq. `--quick`: 64 MiB per put run, 2,000 SYNC_FLUSH puts, 100,000 messages to dispatch,
50,000 to read, 2,000 queries, a 128 MiB recovery store, 20,000 baseline messages, 1 round, no warm-up round
(a smoke run; its figures mean little). Writes every run and the tables as JSON (`--out`, default
benches/compare/results/<UTC time>.json) and draws two PNG charts beside it (benches/compare/charts.py:
`<name>-ratios.png`, `<name>-throughput.png`); `--charts-only RESULTS.json` redraws them from a JSON.
`--jobs` picks jobs by id (`put128,put1k,put4k,batch1k,put1k-4t,sync16,dispatch,read,recovery,baselines,limits`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import mmap
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
JAVA_PROJECT = HERE / "java"
ROOT = HERE.parent.parent
RECOVERY_BENCH = HERE.parent / "recovery_bench.py"
RECOVERY_JAVA = HERE.parent / "recovery_java"
RUST_DRIVER = ROOT / "target" / "release" / "examples" / "compare_driver"
MIB = 1 << 20
SEGMENT = 256 * MIB
TOPIC = "BenchTopic"
QUEUES = 4
TAG = "TagA"
READ_SIZE = 128
DISPATCH_SIZE = 128
DISPATCH_KEYS = 3
BASELINE_SIZE = 1024
SYNC_THREADS = 16  # producers of the SYNC_FLUSH put
MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)  # Linux 5.14+; Python 3.11 lacks the name
SYNC_PROBES = 200  # 1 KiB appends made durable one by one, for the machine's SYNC_FLUSH bound
RECORD_OVERHEAD = 230  # about what a record adds to its body here: sizes `count` from the volume


@dataclass(frozen=True)
class Put:
    """A put workload: message size in bytes, messages per call (1: `put`), producer threads and flush type."""

    name: str
    id: str  # for `--jobs`
    size: int
    batch: int = 1
    threads: int = 1
    goal: float | None = None  # issue 19's goal for rmq / Java from Python
    rust_goal: float | None = None  # and from Rust
    flush: str = "ASYNC_FLUSH"  # SYNC_FLUSH: `--sync-messages` messages instead of the volume


PUTS = (
    Put("put 128 B", "put128", 128, goal=3.0, rust_goal=5.0),
    Put("put 1 KiB", "put1k", 1024, goal=3.0, rust_goal=5.0),
    Put("put 4 KiB", "put4k", 4096),
    Put("put_batch(32) 1 KiB", "batch1k", 1024, batch=32, goal=3.0, rust_goal=5.0),
    Put("put 1 KiB, 4 threads", "put1k-4t", 1024, threads=4),
    Put(
        "put 1 KiB, SYNC_FLUSH, 16 threads",
        "sync16",
        1024,
        threads=SYNC_THREADS,
        goal=3.0,
        rust_goal=3.0,
        flush="SYNC_FLUSH",
    ),
)
READ = "read"
DISPATCH = "dispatch, 3 keys"
RECOVERY = "recovery after kill -9"
BASELINES = "baselines"
LIMITS = "machine limits"
LIMITS_BYTES = 256 * MIB
MESSAGES = "rmq-messages"  # the Python side putting batches of `rmq.Message`s
#: `--jobs` names the jobs by these ids.
JOB_IDS = {w.name: w.id for w in PUTS} | {
    DISPATCH: "dispatch", READ: "read", RECOVERY: "recovery", BASELINES: "baselines", LIMITS: "limits",
}  # fmt: skip
DISPATCH_FLOOR = 2e6  # issue 19: dispatch above 2 M msg/s (and at least 3x RocketMQ)


def common_args(size: int) -> dict[str, str]:
    return {"topic": TOPIC, "queues": str(QUEUES), "tag": TAG, "size": str(size), "segment": str(SEGMENT)}


def put_args(w: Put, volume: int, sync_messages: int) -> dict[str, str]:
    unit = w.batch * w.threads * QUEUES
    if w.flush == "SYNC_FLUSH":
        count = max(unit, sync_messages // unit * unit)
    else:
        count = max(unit, volume // (w.size + RECORD_OVERHEAD) // unit * unit)
    warmup = max(unit, count // 4 // unit * unit)
    return common_args(w.size) | {
        "count": str(count), "warmup": str(warmup), "batch": str(w.batch), "threads": str(w.threads),
        "flush": w.flush,
    }  # fmt: skip


def dispatch_args(count: int) -> dict[str, str]:
    count = max(QUEUES, count // QUEUES * QUEUES)
    warmup = max(QUEUES, count // 4 // QUEUES * QUEUES)
    return common_args(DISPATCH_SIZE) | {"count": str(count), "warmup": str(warmup), "keys": str(DISPATCH_KEYS)}


def baseline_count(kind: str, count: int) -> int:
    from baselines import DIVISOR

    return max(10, count // DIVISOR.get(kind, 1))


# -- the rmq side (run in a child process: `run.py driver put|read|dispatch|limits|baseline key=value ...`) -----


def _open(a: dict[str, str], root: str, services: bool = True) -> Any:
    import rmq

    flush = a.get("flush", "ASYNC_FLUSH")
    config = rmq.StoreConfig(mapped_file_size_commit_log=int(a["segment"]), flush_disk_type=flush)
    return rmq.MessageStore(root, config, start_services=services)


def _keys(n: int, keys: int) -> str:
    """Message n's KEYS: `key-n`, then ` k1-n k2-n ...` up to `keys` keys, space separated."""
    return " ".join([f"key-{n}", *(f"k{i}-{n}" for i in range(1, keys))])


def _put_range(store: Any, a: dict[str, str], start: int, stop: int, batch: int) -> None:
    """Messages [start, stop) from the calling thread, as `CompareDriver.putRange`."""
    import rmq

    topic, tag, queues, nkeys = a["topic"], a["tag"], int(a["queues"]), int(a.get("keys", "1"))
    body = bytes(ord("a") + i % 26 for i in range(int(a["size"])))
    if batch == 1:
        put = store.put
        if nkeys == 1:
            for n in range(start, stop):
                put(topic, body, queue_id=n % queues, tags=tag, keys=f"key-{n}")
        else:
            for n in range(start, stop):
                put(topic, body, queue_id=n % queues, tags=tag, keys=_keys(n, nkeys))
    elif a.get("form", "lists") == "lists":
        # Bodies with the tag and one keys entry per message: no object built per message.
        put_batch, bodies = store.put_batch, [body] * batch
        for n in range(start, stop, batch):
            if nkeys == 1:
                keys = [f"key-{k}" for k in range(n, n + batch)]
            else:
                keys = [_keys(k, nkeys) for k in range(n, n + batch)]
            put_batch(topic, bodies, queue_id=(n // batch) % queues, tags=tag, keys=keys)
    else:
        put_batch, message = store.put_batch, rmq.Message
        for n in range(start, stop, batch):
            if nkeys == 1:
                msgs = [message(body, tags=tag, keys=f"key-{k}") for k in range(n, n + batch)]
            else:
                msgs = [message(body, tags=tag, keys=_keys(k, nkeys)) for k in range(n, n + batch)]
            put_batch(topic, msgs, queue_id=(n // batch) % queues)


def _stored(store: Any, a: dict[str, str]) -> int:
    return sum(store.get_max_offset_in_queue(a["topic"], q) for q in range(int(a["queues"])))


def _check_and_close(store: Any, a: dict[str, str], root: str, count: int, last: bool) -> None:
    """Checks every message reached the queues; closes and deletes the store unless it is the `last` pass (the
    process then ends without closing it, as the Java side halts: run.py deletes it)."""
    if _stored(store, a) != count:
        raise SystemExit(f"{_stored(store, a)} messages in the queues, expected {count}")
    if not last:
        store.close()
        shutil.rmtree(root)


def _put_pass(a: dict[str, str], root: str, count: int, last: bool) -> tuple[float, float, float]:
    """(put_s, dispatched_s, cpu_s) of `count` messages into a fresh store at `root`, closed and deleted after
    unless `last` (the process then ends without closing it, as the Java side halts: run.py deletes it)."""
    threads, batch = int(a["threads"]), int(a["batch"])
    store = _open(a, root)
    per = count // threads
    c0 = time.process_time()
    t0 = time.perf_counter()
    if threads == 1:
        _put_range(store, a, 0, count, batch)
    else:
        workers = [
            threading.Thread(target=_put_range, args=(store, a, t * per, (t + 1) * per, batch)) for t in range(threads)
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    t1 = time.perf_counter()
    if not store.wait_dispatched(3600):
        raise SystemExit("dispatch did not catch up")
    t2 = time.perf_counter()
    cpu = time.process_time() - c0
    _check_and_close(store, a, root, count, last)
    return t1 - t0, t2 - t0, cpu


def rmq_put(a: dict[str, str]) -> dict[str, Any]:
    _put_pass(a, os.path.join(a["dir"], "warm"), int(a["warmup"]), False)
    count = int(a["count"])
    put_s, dispatched_s, cpu_s = _put_pass(a, os.path.join(a["dir"], "timed"), count, True)
    return {"count": count, "put_s": put_s, "dispatched_s": dispatched_s, "cpu_s": cpu_s}


def _dispatch_pass(a: dict[str, str], root: str, count: int, last: bool) -> tuple[float, float]:
    """(dispatch_s, cpu_s): `count` single puts into a store opened without services (nothing dispatched),
    then `start_services()` and the reput timed until the consume queues and the index hold everything."""
    store = _open(a, root, services=False)
    _put_range(store, a, 0, count, 1)
    if _stored(store, a) != 0:
        raise SystemExit("dispatched while the services were off")
    c0 = time.process_time()
    t0 = time.perf_counter()
    store.start_services()
    if not store.wait_dispatched(3600):
        raise SystemExit("dispatch did not catch up")
    t1 = time.perf_counter()
    cpu = time.process_time() - c0
    _check_and_close(store, a, root, count, last)
    return t1 - t0, cpu


def rmq_dispatch(a: dict[str, str]) -> dict[str, Any]:
    _dispatch_pass(a, os.path.join(a["dir"], "warm"), int(a["warmup"]), False)
    count = int(a["count"])
    dispatch_s, cpu_s = _dispatch_pass(a, os.path.join(a["dir"], "timed"), count, True)
    return {"count": count, "dispatch_s": dispatch_s, "cpu_s": cpu_s}


def _drain(store: Any, a: dict[str, str], attr: str) -> int:
    get, topic, n = store.get_message, a["topic"], 0
    for q in range(int(a["queues"])):
        offset, end = 0, store.get_max_offset_in_queue(topic, q)
        while offset < end:
            r = get("bench", topic, q, offset, 32)
            n += len(getattr(r, attr))
            offset = r.next_begin_offset
    return n


def rmq_read(a: dict[str, str]) -> dict[str, Any]:
    root = os.path.join(a["dir"], "read")
    count, queries = int(a["count"]), int(a["queries"])
    store = _open(a, root)
    t0 = time.perf_counter()
    _put_range(store, a, 0, count, 1)
    store.wait_dispatched(3600)
    build_s = time.perf_counter() - t0
    if _drain(store, a, "messages") != count:
        raise SystemExit("the drain did not read every message")
    cpu = time.process_time
    c1, t1 = cpu(), time.perf_counter()
    _drain(store, a, "messages")
    t2, c2 = time.perf_counter(), cpu()
    _drain(store, a, "raw")
    t3, c3 = time.perf_counter(), cpu()
    keys = [f"key-{j * 7919 % count}" for j in range(queries)]
    query, topic = store.query_message, a["topic"]
    for k in keys:
        if not query(topic, k, 32).messages:
            raise SystemExit(f"no message for {k}")
    nanos = []
    clock = time.perf_counter_ns
    c4 = cpu()
    for k in keys:
        q0 = clock()
        query(topic, k, 32)
        nanos.append(clock() - q0)
    c5 = cpu()
    nanos.sort()
    return {
        "count": count, "build_s": build_s, "drain_s": t2 - t1, "drain_raw_s": t3 - t2,
        "query_median_us": nanos[queries // 2] / 1e3, "query_p99_us": nanos[int(queries * 0.99)] / 1e3,
        "drain_cpu_s": c2 - c1, "drain_raw_cpu_s": c3 - c2, "query_cpu_s": c5 - c4,
    }  # fmt: skip


def limits(a: dict[str, str]) -> dict[str, Any]:
    """The machine's limits: memcpy (a bytearray slice copy, which CPython does with memcpy), CRC32
    (`zlib.crc32`) and a sequential write of 1 MiB `os.write`s ended by `fdatasync`, each over `bytes`; the
    best of 3 passes each. Also what new data costs in a mapped file, as every put into a fresh commitlog
    segment pays it: the pages of a new file faulted in writable (`MADV_POPULATE_WRITE`: the kernel allocates
    and zeroes each page, nothing copied), and the same copy as above into a new file's mapping (fault, zero,
    then copy, page by page), and `os.write`s of 1 MiB into a new file without a sync (new page-cache pages
    filled by the kernel's copy, the way in that skips the zeroing); best of 3 each, each on a file of its own."""
    size = int(a["bytes"])
    src = bytearray(os.urandom(MIB)) * (size // MIB)
    dst = bytearray(size)
    copy_s, crc_s = [], []
    for _ in range(3):
        t0 = time.perf_counter()
        dst[:] = src
        copy_s.append(time.perf_counter() - t0)
    for _ in range(3):
        t0 = time.perf_counter()
        zlib.crc32(src)
        crc_s.append(time.perf_counter() - t0)
    view, write_s = memoryview(src), []
    for i in range(3):
        fd = os.open(os.path.join(a["dir"], f"seq{i}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        t0 = time.perf_counter()
        for off in range(0, size, MIB):
            os.write(fd, view[off : off + MIB])
        os.fdatasync(fd)
        write_s.append(time.perf_counter() - t0)
        os.close(fd)
    populate_s, mapped_copy_s, cached_write_s = [], [], []
    for i in range(3):
        for kind, times in (("populate", populate_s), ("copy", mapped_copy_s), ("write", cached_write_s)):
            path = os.path.join(a["dir"], f"{kind}{i}")
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
            if kind == "write":  # write(2) into new page-cache pages, no sync: the other way in for new data
                t0 = time.perf_counter()
                for off in range(0, size, MIB):
                    os.write(fd, view[off : off + MIB])
                times.append(time.perf_counter() - t0)
            else:
                os.posix_fallocate(fd, 0, size)
                with mmap.mmap(fd, size) as m:
                    t0 = time.perf_counter()
                    if kind == "populate":
                        m.madvise(MADV_POPULATE_WRITE, 0, size)
                    else:
                        m[:] = src
                    times.append(time.perf_counter() - t0)
            os.close(fd)
            os.unlink(path)
    # A SYNC_FLUSH put waits for its flush; with 16 producers at most 16 puts share one, so 16 / (the latency
    # of a small append made durable) bounds what any store can do here (issue 19's SYNC_FLUSH goal).
    fd = os.open(os.path.join(a["dir"], "sync"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    one_kib, sync_s = bytes(1024), []
    for _ in range(SYNC_PROBES):
        t0 = time.perf_counter()
        os.write(fd, one_kib)
        os.fdatasync(fd)
        sync_s.append(time.perf_counter() - t0)
    os.close(fd)
    sync_us = statistics.median(sync_s) * 1e6
    return {
        "count": size, "memcpy_gbps": size / min(copy_s) / 1e9, "crc32_zlib_gbps": size / min(crc_s) / 1e9,
        "write_fdatasync_gbps": size / min(write_s) / 1e9, "append_fdatasync_us": sync_us,
        "fresh_pages_gbps": size / min(populate_s) / 1e9, "memcpy_fresh_gbps": size / min(mapped_copy_s) / 1e9,
        "write_cached_gbps": size / min(cached_write_s) / 1e9,
        "sync16_bound_rate": SYNC_THREADS / sync_us * 1e6,
    }  # fmt: skip


def baseline(a: dict[str, str]) -> dict[str, Any]:
    import baselines

    return baselines.run(a["kind"], os.path.join(a["dir"], "store"), int(a["count"]), int(a["size"]))


def driver(argv: list[str]) -> None:
    a = dict(arg.split("=", 1) for arg in argv[1:])
    commands = {"put": rmq_put, "read": rmq_read, "dispatch": rmq_dispatch, "limits": limits, "baseline": baseline}
    out = commands[argv[0]](a)
    print(json.dumps(out), flush=True)
    os._exit(0)  # the store is not closed, as the Java side halts: run.py deletes it


# -- the orchestrator -----------------------------------------------------------------------------------------


def build_rust() -> None:
    subprocess.run(["cargo", "build", "--release", "--quiet", "--example", "compare_driver"], cwd=ROOT, check=True)


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def command_line(side: str, command: str, args: dict[str, str], classpaths: dict[str, str]) -> list[str]:
    argv = [f"{k}={v}" for k, v in args.items()]
    if command == "recover":
        if side == "java":
            return ["java", "-cp", classpaths["recovery"], "rmq.bench.RecoveryLoad", args["path"]]
        if side == "rust":
            return [str(RUST_DRIVER), "recover", f"path={args['path']}"]
        return [sys.executable, str(RECOVERY_BENCH), "open", args["path"]]
    if side == "java":
        return ["java", "-cp", classpaths["compare"], "rmq.bench.CompareDriver", command, *argv]
    if side == "rust":
        return [str(RUST_DRIVER), command, *argv]
    if command == "baseline":
        argv.append(f"kind={side}")
    if side == MESSAGES:
        argv.append("form=messages")
    return [sys.executable, __file__, "driver", command, *argv]


def run_side(side: str, command: str, args: dict[str, str], classpaths: dict[str, str]) -> dict[str, Any]:
    """One measured process; returns its JSON line, with `process_cpu_s` (the whole process's CPU time)."""
    cmd = command_line(side, command, args, classpaths)
    c0 = _children_cpu()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    process_cpu = _children_cpu() - c0
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{' '.join(cmd[:6])} ... failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(lines[-1])
    if command == "recover":
        out = normalise_recovery(side, out, args)
    out["process_cpu_s"] = process_cpu
    return out


def normalise_recovery(side: str, r: dict[str, Any], args: dict[str, str]) -> dict[str, Any]:
    """The three recoveries' outputs as {open_s, cpu_s, count (messages), bytes}; checks each recovered the
    whole store."""
    if side == "java":
        if not r["ok"] or r["clean"]:
            raise SystemExit(f"RocketMQ's load() failed or saw a clean store: {r}")
        open_s, cpu_s = r["construct_seconds"] + r["load_seconds"], r["cpu_seconds"]
    elif side == "rust":
        open_s, cpu_s = r["open_s"], r["cpu_s"]
    else:
        if r["path"] != "abnormal":
            raise SystemExit(f"rmq did not recover abnormally: {r}")
        open_s, cpu_s = r["wall_seconds"], r["cpu_seconds"]
    if r["max_offset"] != int(args["bytes"]):
        raise SystemExit(f"{side} recovered to {r['max_offset']}, the writer wrote {args['bytes']}: {r}")
    return {"count": int(args["messages"]), "bytes": r["max_offset"], "open_s": open_s, "cpu_s": cpu_s}


def derive(job: str, r: dict[str, Any]) -> None:
    """Adds the rates (msg/s) and CPU µs per message to one run's result."""
    n = r["count"]
    if job == LIMITS:
        return
    if job == READ:
        r["drain_rate"] = n / r["drain_s"]
        r["drain_raw_rate"] = n / r.get("drain_raw_s", r["drain_s"])
        r["drain_cpu_us"] = r["drain_cpu_s"] / n * 1e6
        r["drain_raw_cpu_us"] = r.get("drain_raw_cpu_s", r["drain_cpu_s"]) / n * 1e6
    elif job == DISPATCH:
        r["rate"] = n / r["dispatch_s"]
        r["cpu_us"] = r["cpu_s"] / n * 1e6
    elif job == RECOVERY:
        r["open_gbps"] = r["bytes"] / r["open_s"] / 1e9
        r["cpu_us"] = r["cpu_s"] / n * 1e6
    elif job == BASELINES:
        r["rate"] = n / (r["put_s"] + r["consume_s"])
        r["put_rate"] = n / r["put_s"]
        r["consume_rate"] = n / r["consume_s"]
        r["cpu_us"] = r["cpu_s"] / n * 1e6
    else:
        r["rate"] = n / r["put_s"]
        r["dispatched_rate"] = n / r["dispatched_s"]
        r["cpu_us"] = r["cpu_s"] / n * 1e6


@dataclass(frozen=True)
class Row:
    label: str
    job: str
    key: str  # the rmq figure; the Java one is `java_key` or the same
    goal: float | None = None  # issue 19's goal from Python (rmq / Java)
    rust_goal: float | None = None  # and from Rust
    lower_is_better: bool = False
    java_key: str | None = None
    python_only: bool = False
    machine: bool = False  # a figure of the machine, not of either side
    cpu_key: str | None = None  # CPU µs per message, for the CPU column
    java_cpu_key: str | None = None  # Java's, when not `cpu_key`
    side: str = "rmq"  # the runs giving the Python figure
    floor: float | None = None  # a minimum for rmq's own figure too (dispatch: above 2 M msg/s)


def rows() -> list[Row]:
    out = []
    for w in PUTS:
        out.append(Row(f"{w.name}, msg/s", w.name, "rate", w.goal, w.rust_goal))
        out.append(Row(f"{w.name}, until dispatched, msg/s", w.name, "dispatched_rate", cpu_key="cpu_us"))
        if w.batch > 1:
            out.append(
                Row(
                    f"{w.name}, Python `rmq.Message`s, msg/s", w.name, "rate", python_only=True, cpu_key="cpu_us",
                    side=MESSAGES,
                )
            )  # fmt: skip
    out += [
        Row("dispatch, 3 keys a message, msg/s", DISPATCH, "rate", 3.0, 3.0, cpu_key="cpu_us", floor=DISPATCH_FLOOR),
        Row(
            "getMessage drain, 32 per call, msg/s (Python: `MessageExt`s)", READ, "drain_rate", 3.0, 5.0,
            cpu_key="drain_cpu_us",
        ),
        Row(
            "getMessage drain, Python raw views, msg/s", READ, "drain_raw_rate", java_key="drain_rate",
            python_only=True, cpu_key="drain_raw_cpu_us", java_cpu_key="drain_cpu_us",
        ),
        Row("query by key, median µs", READ, "query_median_us", 5.0, lower_is_better=True),
        Row("query by key, p99 µs", READ, "query_p99_us", lower_is_better=True),
        Row("open after kill -9 (abnormal recovery), s", RECOVERY, "open_s", lower_is_better=True, cpu_key="cpu_us"),
        Row("machine: memcpy, GB/s", LIMITS, "memcpy_gbps", machine=True),
        Row("machine: CRC32 (zlib.crc32), GB/s", LIMITS, "crc32_zlib_gbps", machine=True),
        Row("machine: CRC32 (crc32fast, Rust), GB/s", LIMITS, "crc32fast_gbps", machine=True),
        Row("machine: sequential write + fdatasync, GB/s", LIMITS, "write_fdatasync_gbps", machine=True),
        Row("machine: fresh pages of a mapped file, faulted in, GB/s", LIMITS, "fresh_pages_gbps", machine=True),
        Row("machine: memcpy into a new file's mapping, GB/s", LIMITS, "memcpy_fresh_gbps", machine=True),
        Row("machine: write(2) of new data into the page cache, GB/s", LIMITS, "write_cached_gbps", machine=True),
        Row("machine: 1 KiB append + fdatasync, median µs", LIMITS, "append_fdatasync_us", machine=True),
        Row(
            "machine: SYNC_FLUSH bound, 16 producers (16 / that), msg/s", LIMITS, "sync16_bound_rate", machine=True,
        ),
        Row("machine: dependent random load in 512 MiB, 2 MiB pages, ns", LIMITS, "dependent_load_ns", machine=True),
        Row("machine: dependent random load in 512 MiB, 4 KiB pages, ns", LIMITS, "dependent_load_4k_ns", machine=True),
    ]  # fmt: skip
    return out


def fmt(x: float, plain: bool) -> str:
    if plain:
        return f"{x:.1f}" if x >= 10 else f"{x:.2f}"
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e4:
        return f"{x / 1e3:.0f}k"
    return f"{x / 1e3:.1f}k" if x >= 1e3 else f"{x:.0f}"


Cell = dict[str, float]


def cell(values: list[float]) -> Cell:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def table(results: dict[str, dict[str, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """One entry per row: each side's median, min and max over the rounds (and CPU µs per message), and rmq's
    ratios to Java against the goals."""
    out = []
    for row in rows():
        sides = results.get(row.job, {})
        entry: dict[str, Any] = {"measure": row.label, "job": row.job, "plain": row.lower_is_better or row.machine}
        if row.machine:
            runs = [r for r in sides.get("machine", []) if row.key in r]
            if runs:
                entry["machine"] = cell([r[row.key] for r in runs])
                out.append(entry)
            continue
        if not sides.get("java"):
            continue
        java = cell([r[row.java_key or row.key] for r in sides["java"]])
        if row.cpu_key:
            java_cpu = row.java_cpu_key or row.cpu_key
            java["cpu_us"] = statistics.median(r[java_cpu] for r in sides["java"])
        entry["java"] = java
        for side, goal in (("rmq", row.goal), ("rust", None if row.python_only else row.rust_goal)):
            runs = [r for r in sides.get(row.side if side == "rmq" else side, []) if row.key in r]
            if not runs or (side == "rust" and row.python_only):
                continue
            c: dict[str, Any] = cell([r[row.key] for r in runs])
            if row.cpu_key:
                c["cpu_us"] = statistics.median(r[row.cpu_key] for r in runs)
            ratio = java["median"] / c["median"] if row.lower_is_better else c["median"] / java["median"]
            met = None if goal is None else ratio >= goal and (row.floor is None or c["median"] > row.floor)
            c |= {"ratio": ratio, "goal": goal, "met": met}
            if row.floor is not None:
                c["floor"] = row.floor
            entry[side] = c
        if row.python_only and "rmq" not in entry:
            continue
        out.append(entry)
    return out


#: The baselines against which issue 19 sets goals, and the rmq kind each is compared with (same durability
#: unit): at least 100x the queues with single puts, at least SQLite WAL (synchronous=NORMAL) with batches.
BASELINE_GOALS = {
    "persist-queue file": ("rmq put", 100.0),
    "persist-queue SQLiteAckQueue": ("rmq put", 100.0),
    "litequeue": ("rmq put", 100.0),
    "sqlite WAL NORMAL": ("rmq put_batch(32)", 1.0),
}


def baseline_table(results: dict[str, dict[str, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """One entry per baseline kind: medians of msg/s (put + consume), put and consume msg/s, CPU µs per message,
    and rmq's ratios to it (`rmq put` and `rmq put_batch(32)`), with issue 19's goals."""
    sides = results.get(BASELINES, {})
    med = {k: {f: statistics.median(r[f] for r in v) for f in ("rate", "put_rate", "consume_rate", "cpu_us")}
           for k, v in sides.items()}  # fmt: skip
    out = []
    for kind, m in med.items():
        entry: dict[str, Any] = {"kind": kind, "count": sides[kind][0]["count"], **m}
        entry["rate_min"] = min(r["rate"] for r in sides[kind])
        entry["rate_max"] = max(r["rate"] for r in sides[kind])
        for rk in ("rmq put", "rmq put_batch(32)"):
            if rk in med and not kind.startswith("rmq"):
                entry[f"{rk} / it"] = med[rk]["rate"] / m["rate"]
        if kind in BASELINE_GOALS and BASELINE_GOALS[kind][0] in med:
            rk, goal = BASELINE_GOALS[kind]
            entry["goal"] = {"rmq": rk, "ratio": goal, "met": med[rk]["rate"] / m["rate"] >= goal}
        out.append(entry)
    return out


def memcpy_share(results: dict[str, dict[str, list[dict[str, Any]]]], side: str) -> dict[str, Any] | None:
    """4 KiB puts' body bandwidth against memcpy (issue 19: at least half), medians of the same run."""
    puts = results.get("put 4 KiB", {}).get(side)
    machine = results.get(LIMITS, {}).get("machine")
    if not puts or not machine:
        return None
    body_gbps = statistics.median(r["rate"] for r in puts) * 4096 / 1e9
    memcpy = statistics.median(r["memcpy_gbps"] for r in machine)
    fresh = [r["memcpy_fresh_gbps"] for r in machine if "memcpy_fresh_gbps" in r]
    return {
        "put_4k_body_gbps": body_gbps, "memcpy_gbps": memcpy, "share": body_gbps / memcpy, "goal": 0.5,
        "memcpy_fresh_gbps": statistics.median(fresh) if fresh else None,
    }  # fmt: skip


def query_floor(results: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any] | None:
    """Issue 19's query goal against what this machine allows, medians of the same run: 5x RocketMQ's median
    query, and three dependent random loads (a query reads a hash slot, the entry it names, then the record the
    entry names, each address known only once the load before is done) with 2 MiB and with 4 KiB pages."""
    java = results.get(READ, {}).get("java")
    machine = [r for r in results.get(LIMITS, {}).get("machine", []) if "dependent_load_ns" in r]
    if not java or not machine:
        return None
    goal_us = statistics.median(r["query_median_us"] for r in java) / 5
    huge_us = 3 * statistics.median(r["dependent_load_ns"] for r in machine) / 1e3
    small_us = 3 * statistics.median(r["dependent_load_4k_ns"] for r in machine) / 1e3
    out = {"goal_us": goal_us, "three_loads_2m_us": huge_us, "three_loads_4k_us": small_us}
    for side in ("rmq", "rust"):
        if results.get(READ, {}).get(side):
            out[f"{side}_us"] = statistics.median(r["query_median_us"] for r in results[READ][side])
    return out


def show(c: dict[str, Any] | None, plain: bool) -> str:
    if not c:
        return "-"
    return f"{fmt(c['median'], plain)} ({fmt(c['min'], plain)}-{fmt(c['max'], plain)})"


def show_ratio(c: dict[str, Any] | None) -> str:
    if not c or "ratio" not in c:
        return ""
    if c["goal"] is None:
        return f"{c['ratio']:.2f}"
    floor = f" and > {fmt(c['floor'], False)}" if c.get("floor") else ""
    return f"{c['ratio']:.2f} (≥ {c['goal']:g}{floor}: {'met' if c['met'] else 'not met'})"


def show_cpu(e: dict[str, Any]) -> str:
    cpus = [e.get(side, {}).get("cpu_us") for side in ("java", "rmq", "rust")]
    if all(c is None for c in cpus):
        return ""
    return " / ".join("-" if c is None else f"{c:.2f}" for c in cpus)


def print_table(t: list[dict[str, Any]]) -> None:
    print(
        "\n| measure | Java | rmq Python (or machine) | Python / Java | rmq Rust | Rust / Java | CPU µs/msg J / P / R |"
    )
    print("|---|---|---|---|---|---|---|")
    for e in t:
        p = e["plain"]
        ours = e.get("rmq") or e.get("machine")
        print(
            f"| {e['measure']} | {show(e.get('java'), p)} | {show(ours, p)} | {show_ratio(e.get('rmq'))} "
            f"| {show(e.get('rust'), p)} | {show_ratio(e.get('rust'))} | {show_cpu(e)} |"
        )


def print_baselines(t: list[dict[str, Any]]) -> None:
    if not t:
        return
    print("\n| from Python, 1 KiB | messages | msg/s (put + consume) | put msg/s | consume msg/s | CPU µs/msg "
          "| rmq put / it | rmq put_batch(32) / it | goal |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for e in t:
        goal = e.get("goal")
        g = f"{goal['rmq']} ≥ {goal['ratio']:g}x: {'met' if goal['met'] else 'not met'}" if goal else ""
        ratios = [f"{e[k]:.1f}" if k in e else "" for k in ("rmq put / it", "rmq put_batch(32) / it")]
        print(
            f"| {e['kind']} | {e['count']} | {fmt(e['rate'], False)} ({fmt(e['rate_min'], False)}-"
            f"{fmt(e['rate_max'], False)}) | {fmt(e['put_rate'], False)} | {fmt(e['consume_rate'], False)} "
            f"| {e['cpu_us']:.2f} | {ratios[0]} | {ratios[1]} | {g} |"
        )


def machine() -> dict[str, Any]:
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False).stderr.splitlines()
    cpu_model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(), "cpu_model": cpu_model, "platform": platform.platform(),
        "python": platform.python_version(), "java": java[0] if java else None, "load_average": os.getloadavg(),
    }  # fmt: skip


def prepare_recovery(base: Path, params: dict[str, str]) -> dict[str, str]:
    """Writes this round's crashed image (recovery_bench.py's writer, killed with SIGKILL) at base/image."""
    sys.path.insert(0, str(RECOVERY_BENCH.parent))
    import recovery_bench

    image = base / "image"
    shutil.rmtree(image, ignore_errors=True)
    size, messages = recovery_bench.build_crashed(image, int(params["size"]), 0.0)
    os.sync()
    return params | {"image": str(image), "bytes": str(size), "messages": str(messages)}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rounds", type=int, default=None, help="measured rounds (default 3; --quick: 1)")
    ap.add_argument("--warmup-rounds", type=int, default=None, help="discarded rounds first (default 1; --quick: 0)")
    ap.add_argument("--volume-mib", type=int, default=None, help="commitlog MiB per put run (default 1024)")
    ap.add_argument("--sync-messages", type=int, default=None, help="SYNC_FLUSH puts (default 16000)")
    ap.add_argument("--dispatch-messages", type=int, default=None, help="messages dispatched (default 1000000)")
    ap.add_argument("--read-messages", type=int, default=None, help="messages in the read store (default 800000)")
    ap.add_argument("--queries", type=int, default=None, help="keys queried (default 10000)")
    ap.add_argument("--recovery-mib", type=int, default=None, help="commitlog MiB to recover (default 1024)")
    ap.add_argument("--baseline-messages", type=int, default=None, help="baseline messages (default 200000)")
    ap.add_argument("--quick", action="store_true", help="a small smoke run")
    ids = ",".join(JOB_IDS.values())
    ap.add_argument("--jobs", default=None, help=f"comma-separated jobs to run, of {ids} (default: all)")
    ap.add_argument("--dir", type=Path, default=None, help="where the stores are made (default: a temp dir)")
    ap.add_argument("--out", type=Path, default=None, help="the JSON file to write")
    ap.add_argument("--charts-only", type=Path, default=None, metavar="RESULTS.json", help="redraw a JSON's charts")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    if args.charts_only:
        import charts

        for path in charts.draw(json.loads(args.charts_only.read_text()), args.charts_only):
            print(f"wrote {path}")
        return
    q = args.quick
    rounds = args.rounds if args.rounds is not None else (1 if q else 3)
    warmups = args.warmup_rounds if args.warmup_rounds is not None else (0 if q else 1)
    volume = (args.volume_mib or (64 if q else 1024)) * MIB
    sync_n = args.sync_messages or (2_000 if q else 16_000)
    dispatch_n = args.dispatch_messages or (100_000 if q else 1_000_000)
    read_n = args.read_messages or (50_000 if q else 800_000)
    queries = args.queries or (2_000 if q else 10_000)
    recovery_bytes = (args.recovery_mib or (128 if q else 1024)) * MIB
    baseline_n = args.baseline_messages or (20_000 if q else 200_000)
    both = ("java", "rmq", "rust")
    from baselines import KINDS

    # A batched put from Python twice: bodies with tags=/keys= lists (`rmq`), and `rmq.Message`s (`rmq-messages`),
    # each in a process of its own in the rotation (a second 1 GiB pass in one process runs slower on a VM).
    jobs = [("put", w.name, put_args(w, volume, sync_n), both + ((MESSAGES,) if w.batch > 1 else ())) for w in PUTS]
    jobs.append(("dispatch", DISPATCH, dispatch_args(dispatch_n), both))
    jobs.append(("read", READ, common_args(READ_SIZE) | {"count": str(read_n), "queries": str(queries)}, both))
    jobs.append(("recover", RECOVERY, {"size": str(recovery_bytes)}, both))
    jobs.append(("baseline", BASELINES, {"size": str(BASELINE_SIZE), "count": str(baseline_n)}, tuple(KINDS)))
    jobs.append(("limits", LIMITS, {"bytes": str(LIMITS_BYTES)}, ("machine",)))
    if args.jobs:
        wanted = {w.strip() for w in args.jobs.split(",")}
        unknown = wanted - set(JOB_IDS.values())
        if unknown:
            raise SystemExit(f"unknown jobs {sorted(unknown)}; the jobs: {ids}")
        jobs = [j for j in jobs if JOB_IDS[j[1]] in wanted]
    sys.path.insert(0, str(HERE.parent))
    import maven  # benches/maven.py

    classpaths = {"compare": maven.classpath(JAVA_PROJECT)}
    if any(j[1] == RECOVERY for j in jobs):
        classpaths["recovery"] = maven.classpath(RECOVERY_JAVA)
    build_rust()
    now = datetime.datetime.now(datetime.UTC)
    out_path = args.out or HERE / "results" / f"{now:%Y-%m-%dT%H%M}Z.json"
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)  # a --dir that does not exist yet is made, not a traceback
    base = Path(tempfile.mkdtemp(prefix="rmq-compare-", dir=args.dir))
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    runs: list[dict[str, Any]] = []
    print(f"# {rounds} rounds after {warmups} warm-up, {volume // MIB} MiB per put run, stores under {base}")
    try:
        for rnd in range(-warmups, rounds):
            for command, name, job_params, sides in jobs:
                params = prepare_recovery(base, job_params) if name == RECOVERY else job_params
                for side in sides[rnd % len(sides) :] + sides[: rnd % len(sides)]:
                    d = base / "run"
                    d.mkdir()
                    side_params = params | {"dir": str(d)}
                    if name == RECOVERY:
                        side_params["path"] = str(d / "store")
                        subprocess.run(["cp", "-a", params["image"], side_params["path"]], check=True)
                        os.sync()
                    elif name == BASELINES:
                        side_params["count"] = str(baseline_count(side, int(params["count"])))
                    t0 = time.perf_counter()
                    r = run_side(side, command, side_params, classpaths)
                    if name == LIMITS and RUST_DRIVER.exists():
                        r |= {k: v for k, v in run_side("rust", "limits", side_params, classpaths).items()
                              if k.startswith(("crc32", "dependent_load"))}  # fmt: skip
                    shutil.rmtree(d)
                    os.sync()
                    derive(name, r)
                    runs.append({"round": rnd, "warmup": rnd < 0, "job": name, "side": side, **r})
                    if rnd >= 0:
                        results.setdefault(name, {}).setdefault(side, []).append(r)
                    shown = {k: round(v, 3) for k, v in r.items() if isinstance(v, float)}
                    print(f"round {rnd} {name} {side}: {shown} ({time.perf_counter() - t0:.0f} s)", flush=True)
                if name == RECOVERY:
                    shutil.rmtree(params["image"], ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    t = table(results)
    print_table(t)
    bt = baseline_table(results)
    print_baselines(bt)
    shares = {side: memcpy_share(results, side) for side in ("rmq", "rust")}
    for side, share in shares.items():
        if share:
            print(
                f"put 4 KiB from {'Python' if side == 'rmq' else 'Rust'}: {share['put_4k_body_gbps']:.2f} GB/s of "
                f"bodies = {share['share']:.2f} of memcpy ({share['memcpy_gbps']:.2f} GB/s); goal ≥ 0.5: "
                f"{'met' if share['share'] >= 0.5 else 'not met'}"
                + (
                    f"; {share['put_4k_body_gbps'] / share['memcpy_fresh_gbps']:.2f} of a memcpy into a new file's "
                    f"mapping ({share['memcpy_fresh_gbps']:.2f} GB/s), which every put of new data pays"
                    if share.get("memcpy_fresh_gbps")
                    else ""
                )
            )
    floor = query_floor(results)
    if floor:
        print(
            f"query by key: 5x RocketMQ is {floor['goal_us']:.2f} µs; three dependent random loads take "
            f"{floor['three_loads_2m_us']:.2f} µs with 2 MiB pages and {floor['three_loads_4k_us']:.2f} µs with 4 KiB "
            f"pages on this machine; rmq {floor.get('rmq_us', float('nan')):.2f} µs from Python, "
            f"{floor.get('rust_us', float('nan')):.2f} µs from Rust"
        )
    settings = {
        "rounds": rounds, "warmup_rounds": warmups, "volume_bytes": volume, "sync_messages": sync_n,
        "dispatch_messages": dispatch_n, "dispatch_keys": DISPATCH_KEYS, "read_messages": read_n,
        "queries": queries, "recovery_bytes": recovery_bytes, "baseline_messages": baseline_n,
        "baseline_size": BASELINE_SIZE, "segment": SEGMENT, "topic": TOPIC, "queues": QUEUES, "tag": TAG,
        "puts": [w.__dict__ for w in PUTS], "jobs": [j[1] for j in jobs],
    }  # fmt: skip
    out_path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"date": now.isoformat(), "machine": machine(), "settings": settings, "table": t, "baselines": bt}
    doc["put_4k_memcpy_share"] = shares
    doc["query_floor"] = floor
    doc["runs"] = runs
    out_path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"\nwrote {out_path}")
    import charts

    for path in charts.draw(doc, out_path):
        print(f"wrote {path}")


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    if len(sys.argv) > 1 and sys.argv[1] == "driver":
        driver(sys.argv[2:])
    else:
        main()
