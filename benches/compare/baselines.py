"""What a Python user would otherwise pick for a durable local log, against rmq from Python doing the same work
(benches/compare/run.py runs each kind in a process of its own; tests/test_bench_compare.py runs them small).

Every kind puts `count` messages of one reused `size`-byte body, then consumes them all, in order, checking the
count; measured: put_s, consume_s (msg/s over both: `count / (put_s + consume_s)`) and the process's CPU time
(user + system, every thread) over both. The choices:

- `rmq put`, `rmq put_batch(32)`: `rmq.MessageStore` (ASYNC_FLUSH, 256 MiB segments, services running), one
  topic and queue, no tag or key; `put` per message or `put_batch` of 32 `rmq.Message`s; consumed with
  `get_message` of 32 (after `wait_dispatched`: a message is consumable once dispatched), reading each body.
  A put has returned once the record is in the page cache: it survives a crash of the process, not a power
  loss before the next flush (500 ms).
- `sqlite WAL NORMAL`, `sqlite WAL FULL`: the standard library's `sqlite3`, `journal_mode=WAL`, a table
  `log(id INTEGER PRIMARY KEY, body BLOB)`; inserts in transactions of 32 (`executemany`, as `put_batch(32)`),
  read back by rowid ranges of 32 (as `get_message` of 32; a log's consumer keeps its offset, nothing is
  deleted). `synchronous=NORMAL` syncs the WAL only at checkpoints: a commit survives a process crash, not a
  power loss, which is rmq's ASYNC_FLUSH durability (the fair comparison, against `rmq put_batch(32)`);
  `synchronous=FULL` syncs the WAL at every commit, as SYNC_FLUSH does.
- `lmdb`: the `lmdb` package, `sync=False` (a commit survives a process crash, not a power loss: ASYNC_FLUSH's
  durability), keys the big-endian message number, transactions of 32 `put(append=True)`, read with a cursor
  from each range's first key, 32 per read transaction.
- `persist-queue file`: `persistqueue.Queue` (files; every `put` is written and its head saved at once),
  consumed with `get` + `task_done` (which persists the tail). `persist-queue SQLiteAckQueue`:
  `persistqueue.SQLiteAckQueue` (auto-commit), consumed with `get` + `ack`. `litequeue`: `litequeue.LiteQueue`
  (SQLite WAL, synchronous=NORMAL; its 0.9 stores `str`, so the body is put as text), consumed with `pop` +
  `done`. Bodies pickled by persist-queue as its default serializer does. Queues take one message per call.
"""

from __future__ import annotations

import os
import sqlite3
import struct
import time
from collections.abc import Callable
from typing import Any

BATCH = 32
SEGMENT = 256 << 20
TOPIC = "BaselineTopic"


def _rmq(root: str, count: int, body: bytes, batch: bool) -> tuple[float, float]:
    import rmq

    config = rmq.StoreConfig(mapped_file_size_commit_log=SEGMENT, flush_disk_type="ASYNC_FLUSH")
    store = rmq.MessageStore(root, config)
    t0 = time.perf_counter()
    if batch:
        message, put_batch = rmq.Message, store.put_batch
        for n in range(0, count, BATCH):
            put_batch(TOPIC, [message(body) for _ in range(min(BATCH, count - n))], queue_id=0)
    else:
        put = store.put
        for _ in range(count):
            put(TOPIC, body, queue_id=0)
    t1 = time.perf_counter()
    store.wait_dispatched(3600)
    get, offset, read = store.get_message, 0, 0
    while offset < count:
        r = get("bench", TOPIC, 0, offset, BATCH)
        for m in r.messages:
            read += len(m.body)
        offset = r.next_begin_offset
    t2 = time.perf_counter()
    store.close()
    if read != count * len(body):
        raise SystemExit(f"rmq read {read} bytes, expected {count * len(body)}")
    return t1 - t0, t2 - t1


def _sqlite(root: str, count: int, body: bytes, synchronous: str) -> tuple[float, float]:
    os.makedirs(root, exist_ok=True)
    db = sqlite3.connect(os.path.join(root, "log.db"), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={synchronous}")
    db.execute("CREATE TABLE log(id INTEGER PRIMARY KEY, body BLOB NOT NULL)")
    t0 = time.perf_counter()
    for n in range(0, count, BATCH):
        db.execute("BEGIN")
        db.executemany("INSERT INTO log(body) VALUES (?)", [(body,)] * min(BATCH, count - n))
        db.execute("COMMIT")
    t1 = time.perf_counter()
    read = 0
    for n in range(1, count + 1, BATCH):
        for _, b in db.execute("SELECT id, body FROM log WHERE id BETWEEN ? AND ?", (n, n + BATCH - 1)):
            read += len(b)
    t2 = time.perf_counter()
    db.close()
    if read != count * len(body):
        raise SystemExit(f"sqlite read {read} bytes, expected {count * len(body)}")
    return t1 - t0, t2 - t1


def _lmdb(root: str, count: int, body: bytes) -> tuple[float, float]:
    import lmdb

    env = lmdb.open(root, map_size=max(64 << 20, count * (len(body) + 64) * 2), sync=False)
    key = struct.Struct(">Q").pack
    t0 = time.perf_counter()
    for n in range(0, count, BATCH):
        with env.begin(write=True) as txn:
            for k in range(n, min(n + BATCH, count)):
                txn.put(key(k), body, append=True)
    t1 = time.perf_counter()
    read = 0
    for n in range(0, count, BATCH):
        with env.begin() as txn:
            cur = txn.cursor()
            cur.set_range(key(n))
            for i, (_, v) in enumerate(cur):
                read += len(v)
                if i == BATCH - 1:
                    break
    t2 = time.perf_counter()
    env.close()
    if read != count * len(body):
        raise SystemExit(f"lmdb read {read} bytes, expected {count * len(body)}")
    return t1 - t0, t2 - t1


def _persist_queue_file(root: str, count: int, body: bytes) -> tuple[float, float]:
    import persistqueue

    q = persistqueue.Queue(root, tempdir=root)
    t0 = time.perf_counter()
    for _ in range(count):
        q.put(body)
    t1 = time.perf_counter()
    read = 0
    for _ in range(count):
        read += len(q.get(block=False))
        q.task_done()
    t2 = time.perf_counter()
    if read != count * len(body):
        raise SystemExit(f"persist-queue read {read} bytes, expected {count * len(body)}")
    return t1 - t0, t2 - t1


def _persist_queue_ack(root: str, count: int, body: bytes) -> tuple[float, float]:
    import persistqueue

    q = persistqueue.SQLiteAckQueue(root, multithreading=False)
    t0 = time.perf_counter()
    for _ in range(count):
        q.put(body)
    t1 = time.perf_counter()
    read = 0
    for _ in range(count):
        item = q.get(block=False)
        read += len(item)
        q.ack(item)
    t2 = time.perf_counter()
    if read != count * len(body):
        raise SystemExit(f"SQLiteAckQueue read {read} bytes, expected {count * len(body)}")
    return t1 - t0, t2 - t1


def _litequeue(root: str, count: int, body: bytes) -> tuple[float, float]:
    import litequeue

    os.makedirs(root, exist_ok=True)
    q = litequeue.LiteQueue(os.path.join(root, "queue.db"))
    text = body.decode("ascii")
    t0 = time.perf_counter()
    for _ in range(count):
        q.put(text)
    t1 = time.perf_counter()
    read = 0
    for _ in range(count):
        m = q.pop()
        if m is None:
            break
        read += len(m.data)
        q.done(m.message_id)
    t2 = time.perf_counter()
    q.close()
    if read != count * len(body):
        raise SystemExit(f"litequeue read {read} bytes, expected {count * len(body)}")
    return t1 - t0, t2 - t1


KINDS: dict[str, Callable[[str, int, bytes], tuple[float, float]]] = {
    "rmq put": lambda r, n, b: _rmq(r, n, b, False),
    "rmq put_batch(32)": lambda r, n, b: _rmq(r, n, b, True),
    "sqlite WAL NORMAL": lambda r, n, b: _sqlite(r, n, b, "NORMAL"),
    "sqlite WAL FULL": lambda r, n, b: _sqlite(r, n, b, "FULL"),
    "lmdb": _lmdb,
    "persist-queue file": _persist_queue_file,
    "persist-queue SQLiteAckQueue": _persist_queue_ack,
    "litequeue": _litequeue,
}
#: The kinds much slower than the rest get `count // DIVISOR[kind]` messages from run.py, so that each run
#: takes seconds (their rates do not depend on the count: every message costs them a commit or a sync).
DIVISOR = {"sqlite WAL FULL": 50, "litequeue": 50, "persist-queue file": 200, "persist-queue SQLiteAckQueue": 400}


def run(kind: str, root: str, count: int, size: int) -> dict[str, Any]:
    """One kind: put then consume `count` messages of `size` bytes in a new store at `root` (which must not
    exist, or be an empty directory); returns count, put_s, consume_s and cpu_s."""
    body = bytes(ord("a") + i % 26 for i in range(size))
    c0 = time.process_time()
    put_s, consume_s = KINDS[kind](root, count, body)
    return {"count": count, "put_s": put_s, "consume_s": consume_s, "cpu_s": time.process_time() - c0}
