"""A group member whose lease ran out by its own clock (its process was paused, or its heartbeat stalled) holds
nothing: it hands out no message and commits no offset until it has renewed its lease and rebalanced, and then it
drops, without committing, every queue another member took meanwhile (rmq.group, rmq.push, rmq.orderly).

Two members of group G in one process stand for two processes: each on its own read-only view of the store, so
each has its own `ConsumerGroup` (heartbeat thread, registry entry) and its own `ConsumerOffsetManager`. Member a's
heartbeat is stalled by holding its group's lock for longer than the lease, while its pull and consume threads run
on: a pause of the whole process is harder on the rest of the code only in that nothing runs at all.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import rmq
import rmq.group
from conftest import small_config
from rmq.orderly import ConsumeOrderlyStatus
from rmq.push import ConsumeFromWhere, ConsumeStatus, PushConsumer

QUEUES = 4
LEASE = 3.0
HEARTBEAT = 0.3


def wait_until(pred: Callable[[], bool], timeout: float = 120.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what or pred}"
        time.sleep(0.02)


def on_disk(path: Path) -> dict[int, int]:
    m = rmq.ConsumerOffsetManager(path)
    m.load()
    return m.query_offsets("G", "T")


def owned(c: PushConsumer) -> set[int]:
    return {mq.queue_id for mq in c.assigned_queues() if mq.topic == "T"}


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrent", "orderly"])
def test_a_member_past_its_lease_consumes_and_commits_nothing_of_the_queues_taken_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, orderly: bool
) -> None:
    monkeypatch.setattr(rmq.group, "LEASE", LEASE)
    monkeypatch.setattr(rmq.group, "HEARTBEAT_INTERVAL", HEARTBEAT)
    cfg = small_config()
    root = tmp_path / "store"
    writer = rmq.MessageStore(root, cfg)
    writer.create_topic("T", QUEUES)
    path = Path(writer.consumer_offset_path)
    # One log of both members in the order things happened: acquires, releases, and each batch handed to a listener.
    log: list[tuple[str, str, int, int]] = []
    log_lock = threading.Lock()

    def listener_for(name: str) -> Callable[[list[Any], Any], Any]:
        def listener(msgs: list[Any], ctx: Any) -> Any:
            with log_lock:
                log.extend(("C", name, m.queue_id, m.queue_offset) for m in msgs if m.topic == "T")
            time.sleep(0.002 * len(msgs))
            return ConsumeOrderlyStatus.SUCCESS if orderly else ConsumeStatus.CONSUME_SUCCESS

        return listener

    def on_event_for(name: str) -> Callable[[rmq.group.OwnershipEvent], None]:
        def on_event(e: rmq.group.OwnershipEvent) -> None:
            if e.queue.topic == "T":
                with log_lock:
                    log.append(("A" if e.kind == "acquired" else "R", name, e.queue.queue_id, e.seq))

        return on_event

    stop = threading.Event()
    produced = [0]

    def produce() -> None:
        while not stop.is_set():
            writer.put("T", b"m%d" % produced[0], queue_id=produced[0] % QUEUES)
            produced[0] += 1
            time.sleep(0.004)

    backwards: list[str] = []

    def sample() -> None:
        last: dict[int, int] = {}
        while not stop.is_set():
            for q, o in on_disk(path).items():
                if o < last.get(q, -1):
                    backwards.append(f"queue {q}: committed offset moved back from {last[q]} to {o}")
                last[q] = max(o, last.get(q, -1))
            time.sleep(0.05)

    views = {n: rmq.MessageStore(root, cfg, read_only=True) for n in "ab"}
    consumers: dict[str, PushConsumer] = {}
    for n, view in views.items():
        offsets = rmq.ConsumerOffsetManager(path)
        offsets.load()
        c = PushConsumer(
            view,
            "G",
            "T",
            listener_for(n),
            offsets=offsets,
            consumer_id=n,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            consume_message_batch_max_size=4,
            pull_batch_size=8,
            orderly=orderly,
        )
        c._group.on_event = on_event_for(n)
        consumers[n] = c
    a, b = consumers["a"], consumers["b"]
    threads = [threading.Thread(target=produce), threading.Thread(target=sample)]
    for t in threads:
        t.start()
    try:
        a.start()
        b.start()
        wait_until(lambda: owned(a) == {0, 1} and owned(b) == {2, 3}, what="a and b sharing the queues")
        wait_until(lambda: {e[1] for e in log if e[0] == "C"} == {"a", "b"}, what="both consuming")
        with a._group.lock:  # a's heartbeat stalls: its lease runs out, b takes a's queues
            wait_until(lambda: owned(b) == {0, 1, 2, 3}, what="b taking over a's queues")
            time.sleep(1.0)  # a's threads would consume and commit now if they still took the queues for theirs
        wait_until(lambda: owned(a) == {0, 1} and owned(b) == {2, 3}, what="a back with its share")
        time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join()
        maxes = {q: writer.get_max_offset_in_queue("T", q) for q in range(QUEUES)}
        wait_until(lambda: on_disk(path) == maxes, what="every message consumed and committed")
    finally:
        stop.set()
        for t in threads:
            t.join()
        for c in consumers.values():
            c.shutdown()
        for s in [*views.values(), writer]:
            s.close()

    # Replayed in order, a member consumes a queue only while it holds it: from its acquire until its release, or
    # until another member acquires it (the registry freed it from a member it took for dead).
    holds: set[tuple[str, int]] = set()
    for kind, name, q, n in log:
        if kind == "A":
            holds = {(n, x) for n, x in holds if x != q} | {(name, q)}
        elif kind == "R":
            holds.discard((name, q))
        else:
            assert (name, q) in holds, f"{name} consumed queue {q} offset {n} while it did not hold it"
    assert backwards == []
    for q in range(QUEUES):
        assert {o for kind, _, x, o in log if kind == "C" and x == q} == set(range(maxes[q])), f"queue {q}"
