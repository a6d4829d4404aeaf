"""Child process of tests/test_disk_full.py: fills, reopens and resumes a store on a (nearly) full filesystem.

Run as `python disk_full_child.py MODE STORE_DIR STATE_JSON [--simulate]`. Each mode reads the state the
previous one left in STATE_JSON (outside the filesystem under test) and writes it back extended. A SIGBUS or
any uncaught exception ends the process with a non-zero status, which the parent test reports.

Modes:
  fill    puts single messages and batches into 4 queues until 40 puts have failed with DiskFullError;
          asserts each failure is typed and that every successful put got the next dense queue offset.
  full    reopens the still full store, reads every acknowledged message, then puts 8 KiB messages until one
          fails with DiskFullError (the disk is still full).
  free    (after the parent freed space) reopens, puts more, waits for dispatch, and dumps every queue and
          every key lookup for the parent to check.

With --simulate the filesystem is not really full: a fault armed in the fault seam fails every claim of disk
space after the first 40 (fill) or all of them (full), as a full disk would.
"""

from __future__ import annotations

import errno
import hashlib
import json
import random
import sys
from pathlib import Path

import rmq
from rmq.testing import inject_fault

CONFIG = rmq.StoreConfig(
    mapped_file_size_commit_log=64 * 1024,
    mapped_file_size_consume_queue=2000,
    max_hash_slot_num=128,
    max_index_num=512,
)
QUEUES = 4


def digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


class Writer:
    """Puts messages and records every acknowledged one; checks queue offsets are handed out densely."""

    def __init__(self, store: rmq.MessageStore, state: dict, seed: int) -> None:
        self.store = store
        self.state = state
        self.rng = random.Random(seed)
        self.next_qo: dict[str, int] = state.setdefault("next_qo", {str(q): 0 for q in range(QUEUES)})
        self.failures = 0

    def _body(self, size: int) -> bytes:
        return self.rng.randbytes(size)

    def _ack(self, q: int, result: rmq.PutResult, items: list[tuple[bytes, str]]) -> None:
        assert result.status == rmq.PutMessageStatus.PUT_OK, result.status
        assert result.queue_offset == self.next_qo[str(q)], (q, result.queue_offset, self.next_qo)
        for j, (body, key) in enumerate(items):
            self.state["acked"].append(
                {"offset": result.offsets[j], "q": q, "qo": result.queue_offset + j, "key": key, "sha": digest(body)}
            )
        self.next_qo[str(q)] += len(items)

    def _failed(self, exc: rmq.DiskFullError) -> None:
        assert isinstance(exc, OSError) and exc.errno == errno.ENOSPC, exc
        assert isinstance(exc, rmq.StoreIOError)
        self.failures += 1

    def put_one(self, size: int) -> bool:
        q = self.rng.randrange(QUEUES)
        n = len(self.state["acked"]) + self.failures
        key = f"k{self.state['round']}-{n}"
        body = self._body(size)
        try:
            r = self.store.put("T", body, queue_id=q, keys=key)
        except rmq.DiskFullError as exc:
            self._failed(exc)
            return False
        self._ack(q, r, [(body, key)])
        return True

    def put_batch(self) -> bool:
        q = self.rng.randrange(QUEUES)
        n = len(self.state["acked"]) + self.failures
        items = [(self._body(self.rng.randint(100, 2000)), f"b{self.state['round']}-{n}-{j}") for j in range(8)]
        items = items[: self.rng.randint(2, 8)]
        try:
            r = self.store.put_batch("T", [rmq.Message(b, keys=k) for b, k in items], queue_id=q)
        except rmq.DiskFullError as exc:
            self._failed(exc)
            return False
        self._ack(q, r, items)
        return True


def close(store: rmq.MessageStore, state: dict, mode: str) -> None:
    try:
        store.close()
    except rmq.DiskFullError as exc:  # dispatch could not finish: a consume-queue or index file needed space
        state.setdefault("close_errors", []).append(f"{mode}: {exc}")


def fill(root: Path, state: dict, simulate: bool) -> None:
    if simulate:
        inject_fault("allocate", after=40, times=None, errno=errno.ENOSPC, path=root)
    state.update(acked=[], round=0)
    store = rmq.MessageStore(root, CONFIG)
    w = Writer(store, state, seed=1)
    while w.failures < 40:
        if w.rng.random() < 0.3:
            w.put_batch()
        else:
            w.put_one(w.rng.randint(100, 2000))
        assert len(state["acked"]) < 200_000, "the filesystem never filled up"
    state["fill_failures"] = w.failures
    close(store, state, "fill")


def full(root: Path, state: dict, simulate: bool) -> None:
    if simulate:
        inject_fault("allocate", times=None, errno=errno.ENOSPC, path=root)
    store = rmq.MessageStore(root, CONFIG)
    state["full_recovery"] = store.recovery_report
    unreadable = []
    for a in state["acked"]:
        m = store.read(a["offset"])
        if m is None or digest(m.body) != a["sha"] or (m.queue_id, m.queue_offset) != (a["q"], a["qo"]):
            unreadable.append(a["offset"])
    state["full_unreadable"] = unreadable
    state["round"] = 1
    w = Writer(store, state, seed=2)
    for _ in range(20):
        if not w.put_one(8 * 1024):
            break
    state["full_put_failed"] = w.failures == 1
    close(store, state, "full")


def free(root: Path, state: dict) -> None:
    store = rmq.MessageStore(root, CONFIG)
    state["free_recovery"] = store.recovery_report
    state["round"] = 2
    w = Writer(store, state, seed=3)
    for _ in range(300):
        assert w.put_batch() if w.rng.random() < 0.3 else w.put_one(w.rng.randint(100, 2000))
    assert store.wait_dispatched(60.0)
    state["queues"] = {
        str(q): [[e.queue_offset, e.commitlog_offset] for e in store.iter_queue("T", q)] for q in range(QUEUES)
    }
    state["key_hits"] = {
        a["key"]: [m.commitlog_offset for m in store.query_message("T", a["key"]).messages] for a in state["acked"]
    }
    state["dispatch_issues"] = store.dispatch_issues()[0]
    close(store, state, "free")


def main() -> None:
    mode, root, state_path = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    simulate = "--simulate" in sys.argv[4:]
    state = json.loads(state_path.read_text()) if state_path.exists() else {}
    if mode == "fill":
        fill(root, state, simulate)
    elif mode == "full":
        full(root, state, simulate)
    elif mode == "free":
        free(root, state)
    else:
        raise SystemExit(f"unknown mode {mode}")
    state_path.write_text(json.dumps(state))


if __name__ == "__main__":
    main()
