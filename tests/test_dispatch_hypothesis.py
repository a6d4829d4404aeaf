"""A Hypothesis state machine over put / put_batch / dispatch / query / time search / reopen / crash, checked
against an in-memory model of what RocketMQ's consume queues and index must answer.

The store runs without its reput thread so dispatch happens exactly when the machine says; tiny consume-queue
and index files (5 entries, 7 hash slots, 3 keys per index file) make every rule cross file boundaries and
make hash collisions constant.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import rmq

CFG = rmq.StoreConfig(
    mapped_file_size_commit_log=2048,
    mapped_file_size_consume_queue=100,
    max_hash_slot_num=7,
    max_index_num=4,
)
TOPICS = ["A", "Bb"]
KEYS = ["k1", "k2", "Aa", "BB", "x"]  # "Aa" and "BB" collide under Java's hash


@dataclass
class Msg:
    offset: int
    topic: str
    queue_id: int
    queue_offset: int
    size: int
    keys: list[str]
    uniq: str
    store_timestamp: int


class DispatchMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="rmq-dispatch-"))
        self.generation = 0
        self.store = rmq.MessageStore(self.root / "s0", CFG, start_reput=False)
        self.msgs: list[Msg] = []

    def dispatched(self) -> list[Msg]:
        return [m for m in self.msgs if m.offset < self.store.reput_offset]

    def _record(self, r: rmq.PutResult, topic: str, queue_id: int, keys_of: list[list[str]]) -> None:
        for k, off in enumerate(r.offsets):
            m = self.store.read(off)
            assert m is not None
            self.msgs.append(
                Msg(
                    off,
                    topic,
                    queue_id,
                    r.queue_offset + k,
                    m.store_size,
                    keys_of[k],
                    r.uniq_keys[k],
                    m.store_timestamp,
                )
            )

    @rule(
        topic=st.sampled_from(TOPICS),
        queue_id=st.integers(0, 2),
        keys=st.lists(st.sampled_from(KEYS), max_size=3, unique=True),
        size=st.integers(0, 300),
    )
    def put(self, topic: str, queue_id: int, keys: list[str], size: int) -> None:
        r = self.store.put(topic, b"b" * size, queue_id=queue_id, keys=keys or None, tags=f"T{size % 3}")
        self._record(r, topic, queue_id, [keys])

    @rule(topic=st.sampled_from(TOPICS), n=st.integers(1, 6), key=st.sampled_from(KEYS))
    def put_batch(self, topic: str, n: int, key: str) -> None:
        items = [rmq.Message(b"m%d" % i, keys=[key]) for i in range(n)]
        r = self.store.put_batch(topic, items, queue_id=1)
        self._record(r, topic, 1, [[key]] * n)

    @rule(n=st.integers(1, 10))
    def dispatch(self, n: int) -> None:
        before = self.store.reput_offset
        records, after, _ = self.store._dispatch(n, False)
        assert records <= n and after >= before

    @rule()
    def dispatch_all(self) -> None:
        self.store.dispatch_all()
        assert self.store.reput_offset == self.store.max_offset

    @rule(topic=st.sampled_from(TOPICS), key=st.sampled_from(KEYS), max_num=st.integers(1, 8))
    def query(self, topic: str, key: str, max_num: int) -> None:
        want = [m.offset for m in self.dispatched() if m.topic == topic and key in m.keys][-max_num:]
        got = [m.commitlog_offset for m in self.store.query_message(topic, key, max_num).messages]
        assert got == want

    @precondition(lambda self: bool(self.msgs))
    @rule(data=st.data())
    def query_uniq_and_time(self, data: st.DataObject) -> None:
        self.store.dispatch_all()
        m = data.draw(st.sampled_from(self.msgs))
        got = self.store.query_message(m.topic, m.uniq).messages
        assert [x.commitlog_offset for x in got] == [m.offset]
        same_q = [x for x in self.msgs if (x.topic, x.queue_id) == (m.topic, m.queue_id)]
        t = m.store_timestamp
        lower = self.store.get_offset_in_queue_by_time(m.topic, m.queue_id, t, rmq.BoundaryType.LOWER)
        upper = self.store.get_offset_in_queue_by_time(m.topic, m.queue_id, t, rmq.BoundaryType.UPPER)
        assert lower == min(x.queue_offset for x in same_q if x.store_timestamp == t)
        assert upper == max(x.queue_offset for x in same_q if x.store_timestamp == t)

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = rmq.MessageStore(self.root / f"s{self.generation}", CFG, start_reput=False)
        assert self.store.reput_offset == self.store.max_offset
        assert self.store.recovery_report["rebuilt_cq_entries"] == 0

    @rule()
    def crash(self) -> None:
        """Continue on a copy taken while the store is open: what a kill -9 leaves behind."""
        self.generation += 1
        copy = self.root / f"s{self.generation}"
        shutil.copytree(self.store.path, copy)
        self.store.close()
        self.store = rmq.MessageStore(copy, CFG, start_reput=False)
        assert self.store.unclean_shutdown
        assert self.store.reput_offset == self.store.max_offset

    @invariant()
    def queues_match_model(self) -> None:
        done = self.dispatched()
        queues: dict[tuple[str, int], list[Msg]] = {}
        for m in done:
            queues.setdefault((m.topic, m.queue_id), []).append(m)
        for (topic, q), ms in queues.items():
            assert self.store.get_max_offset_in_queue(topic, q) == len(ms)
            entries = [(e.queue_offset, e.commitlog_offset, e.size) for e in self.store.iter_queue(topic, q)]
            assert entries == [(m.queue_offset, m.offset, m.size) for m in ms]
        for topic in TOPICS:
            for q in range(3):
                assigned = sum(1 for m in self.msgs if (m.topic, m.queue_id) == (topic, q))
                assert self.store.get_max_offset_in_queue(topic, q, committed=False) == assigned

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.root, ignore_errors=True)


DispatchMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestDispatchMachine = DispatchMachine.TestCase
