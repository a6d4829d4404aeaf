"""Orderly push consumers (`PushConsumer(..., orderly=True)`, `rmq.orderly`).

The invariant checked from the listener's own log (entries appended under one lock when the listener is
entered, and a queue is never in two listener calls at once, so log order is delivery order per queue):

    per queue, over the whole group, each delivered batch starts at the queue's first unconsumed offset: right
    after the previous batch when that one returned SUCCESS (or was dead-lettered), at the same offset when it was
    suspended (then with every message's reconsume_times one higher; a queue's new owner starts again from the
    stored count, as the count lives in the consumer in Java too). So queue offsets strictly increase except
    for deliberate retries of a suspended batch, and nothing later is delivered before an earlier message
    finished; a message that returned SUCCESS is never delivered again (within a process; after kill -9 the
    batch that was in the listener is).
"""

from __future__ import annotations

import collections
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rmq
from conftest import small_config
from rmq.offsets import ConsumerOffsetManager
from rmq.orderly import ConsumeOrderlyContext, ConsumeOrderlyStatus, QueueLocks
from rmq.push import ConsumeFromWhere, PushConsumer, dlq_topic
from rmq.rebalance import MessageQueue

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
CFG = small_config(mapped_file_size_commit_log=1 << 20)
SUCCESS = ConsumeOrderlyStatus.SUCCESS
SUSPEND = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT


def wait_until(cond: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def put_all(store: rmq.MessageStore, n: int, queues: int = 4, topic: str = "Orders") -> None:
    for i in range(n):
        store.put(topic, b"order-%05d" % i, queue_id=i % queues, tags="created")
    assert store.wait_dispatched()


@dataclass
class Delivery:
    queue: int
    offsets: list[int]
    reconsume: list[int]
    consumer: str
    thread: int
    status: ConsumeOrderlyStatus
    at: float


class OrderlyRecorder:
    """An orderly listener that logs every batch, checks that no queue is in two listener calls at once, and
    returns what `decide(queue, first offset, reconsume_times)` says."""

    def __init__(
        self,
        decide: Callable[[int, int, int], ConsumeOrderlyStatus] = lambda q, o, r: SUCCESS,
        *,
        work: float = 0.0,
        suspend_millis: int | None = None,
    ) -> None:
        self.lock = threading.Lock()
        self.log: list[Delivery] = []
        self.active: collections.Counter[int] = collections.Counter()
        self.overlaps = 0
        self.threads_per_queue_at_once = 0
        self.decide = decide
        self.work = work
        self.suspend_millis = suspend_millis

    def __call__(self, msgs: list[rmq.MessageExt], ctx: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        q = ctx.queue.queue_id
        assert all(m.queue_id == q and m.topic == ctx.queue.topic for m in msgs)
        status = self.decide(q, msgs[0].queue_offset, msgs[0].reconsume_times)
        with self.lock:
            self.active[q] += 1
            if self.active[q] > 1:
                self.overlaps += 1
            self.log.append(
                Delivery(
                    q,
                    [m.queue_offset for m in msgs],
                    [m.reconsume_times for m in msgs],
                    ctx.consumer_id,
                    threading.get_ident(),
                    status,
                    time.monotonic(),
                )
            )
        if self.work:
            time.sleep(self.work)
        if self.suspend_millis is not None:
            ctx.suspend_current_queue_time_millis = self.suspend_millis
        with self.lock:
            self.active[q] -= 1
        return status

    def consumed(self) -> dict[int, set[int]]:
        with self.lock:
            out: dict[int, set[int]] = collections.defaultdict(set)
            for d in self.log:
                if d.status is SUCCESS:
                    out[d.queue].update(d.offsets)
            return out


def check_orderly(
    log: list[Delivery], start: int = 0, dlq: frozenset[tuple[int, int, int]] = frozenset()
) -> dict[int, int]:
    """The module's invariant; returns each queue's next unconsumed offset. `dlq` lists the (queue, first offset,
    reconsume times) of the deliveries whose batch the consumer dead-lettered instead of retrying."""
    nxt: dict[int, int] = collections.defaultdict(lambda: start)
    last: dict[int, Delivery] = {}
    for d in log:
        assert d.offsets == list(range(d.offsets[0], d.offsets[0] + len(d.offsets))), d
        assert d.offsets[0] == nxt[d.queue], f"queue {d.queue}: batch {d.offsets} delivered, expected {nxt[d.queue]}"
        prev = last.get(d.queue)
        if prev is not None and prev.offsets[0] == d.offsets[0]:
            assert prev.status is SUSPEND, f"queue {d.queue}: {d.offsets} delivered again after {prev.status}"
            # The retry may hold more messages (more arrived); the retried ones were counted once more, unless the
            # queue changed hands: the count lives in the consumer (as in Java's client), a new owner reads 0.
            again = dict(zip(prev.offsets, prev.reconsume, strict=True))
            same = d.consumer == prev.consumer
            want = [again[o] + 1 if same and o in again else 0 for o in d.offsets]
            assert d.reconsume == want, (prev, d)
        if d.status is SUCCESS or (d.queue, d.offsets[0], d.reconsume[0]) in dlq:
            nxt[d.queue] = d.offsets[-1] + 1
        last[d.queue] = d
    return dict(nxt)


def consumer(
    store: rmq.MessageStore, offsets: ConsumerOffsetManager, listener: OrderlyRecorder, cid: str, **kw: object
) -> PushConsumer:
    args: dict[str, object] = {
        "consumer_id": cid,
        "consume_from_where": FIRST,
        "orderly": True,
        "consume_thread_nums": 4,
        "suspend_current_queue_time_millis": 20,
        **kw,
    }
    return PushConsumer(store, "G", "Orders", listener, offsets=offsets, **args)  # type: ignore[arg-type]


def test_one_thread_per_queue_in_queue_order(tmp_path: Path) -> None:
    with rmq.MessageStore(tmp_path / "s", CFG) as store:
        put_all(store, 400, queues=8)
        offsets = ConsumerOffsetManager(tmp_path / "consumerOffset.json")
        rec = OrderlyRecorder(work=0.0005)
        with consumer(store, offsets, rec, "c1", consume_message_batch_max_size=3) as c:
            wait_until(lambda: sum(map(len, rec.consumed().values())) == 400)
            assert c.orderly
        assert rec.overlaps == 0, "a queue was in two listener calls at once"
        assert check_orderly(rec.log) == {q: 50 for q in range(8)}
        assert {d.thread for d in rec.log} != set(), "consumed"
        assert max(len(d.offsets) for d in rec.log) == 3
        # Offsets are committed up to the consumed messages.
        assert offsets.query_offsets("G", "Orders") == {q: 50 for q in range(8)}


def test_suspend_retries_the_same_batch_in_place_after_the_suspend_time(tmp_path: Path) -> None:
    with rmq.MessageStore(tmp_path / "s", CFG) as store:
        put_all(store, 40, queues=2)
        offsets = ConsumerOffsetManager(tmp_path / "consumerOffset.json")
        # Queue 0's offset 7 is suspended twice, then succeeds.
        rec = OrderlyRecorder(lambda q, o, r: SUSPEND if (q, o) == (0, 7) and r < 2 else SUCCESS, suspend_millis=80)
        with consumer(store, offsets, rec, "c1"):
            wait_until(lambda: sum(map(len, rec.consumed().values())) == 40)
        check_orderly(rec.log)
        q0 = [(d.offsets[0], d.reconsume[0], d.at) for d in rec.log if d.queue == 0]
        assert [(o, r) for o, r, _ in q0[6:11]] == [(6, 0), (7, 0), (7, 1), (7, 2), (8, 0)]
        # Never early: each retry comes at least the context's suspend time after the suspended call (80 ms).
        assert q0[8][2] - q0[7][2] >= 0.08 and q0[9][2] - q0[8][2] >= 0.08
        assert offsets.query_offset("G", "Orders", 0) == 20


def test_listener_exception_or_none_suspends(tmp_path: Path) -> None:
    calls: collections.Counter[int] = collections.Counter()

    def listener(msgs: list[rmq.MessageExt], ctx: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        o = msgs[0].queue_offset
        calls[o] += 1
        if o == 2 and calls[o] == 1:
            raise RuntimeError("boom")
        if o == 3 and calls[o] == 1:
            return None  # type: ignore[return-value]
        return SUCCESS

    with rmq.MessageStore(tmp_path / "s", CFG) as store:
        put_all(store, 6, queues=1)
        offsets = ConsumerOffsetManager(tmp_path / "consumerOffset.json")
        c = PushConsumer(store, "G", "Orders", listener, offsets=offsets, orderly=True, consume_from_where=FIRST,
                         suspend_current_queue_time_millis=10)  # fmt: skip
        with c:
            wait_until(lambda: offsets.query_offset("G", "Orders", 0) == 6)
        assert calls == {0: 1, 1: 1, 2: 2, 3: 2, 4: 1, 5: 1}
        assert c.stats.listener_errors == 1 and c.stats.suspended == 2


def test_dead_letter_after_max_reconsume_times_then_consumption_goes_on(tmp_path: Path) -> None:
    with rmq.MessageStore(tmp_path / "s", CFG) as store:
        store.put("Orders", b"poison", queue_id=0, keys="k1", properties={"a": "b"})
        put_all(store, 3, queues=1)
        offsets = ConsumerOffsetManager(tmp_path / "consumerOffset.json")
        rec = OrderlyRecorder(lambda q, o, r: SUSPEND if o == 0 else SUCCESS)
        with consumer(store, offsets, rec, "c1", max_reconsume_times=2) as c:
            wait_until(lambda: offsets.query_offset("G", "Orders", 0) == 4)
        assert [(d.offsets[0], d.reconsume[0]) for d in rec.log] == [(0, 0), (0, 1), (0, 2), (1, 0), (2, 0), (3, 0)]
        check_orderly(rec.log, dlq=frozenset({(0, 0, 2)}))
        assert c.stats.sent_to_dlq == 1 and c.stats.suspended == 2
        assert store.wait_dispatched()
        dlq = store.get_message("X", dlq_topic("G"), 0, 0, 10).messages
        assert len(dlq) == 1
        m = dlq[0]
        original = store.get_message("X", "Orders", 0, 0, 1).messages[0]
        assert m.body == b"poison" and m.reconsume_times == 2 and m.keys == ["k1"]
        assert m.properties["RETRY_TOPIC"] == "Orders" and m.properties["a"] == "b"
        assert m.properties["ORIGIN_MESSAGE_ID"] == original.uniq_key
        assert m.properties["DELAY"] == "-1"


def test_orderly_default_max_reconsume_times_is_java_int_max(tmp_path: Path) -> None:
    with rmq.MessageStore(tmp_path / "s", CFG) as store:
        offsets = ConsumerOffsetManager(tmp_path / "consumerOffset.json")
        o = PushConsumer(store, "G", "Orders", lambda m, c: SUCCESS, offsets=offsets, orderly=True)
        assert o.max_reconsume_times == 2**31 - 1
        p = PushConsumer(store, "G", "Orders", lambda m, c: SUCCESS, offsets=offsets)
        assert p.max_reconsume_times == 16
        with pytest.raises(rmq.InvalidArgumentError):
            PushConsumer(store, "G", "Orders", lambda m, c: SUCCESS, offsets=offsets, max_reconsume_times=-2)
        with pytest.raises(rmq.ArgumentTypeError):
            PushConsumer(store, "G", "Orders", lambda m, c: SUCCESS, offsets=offsets, orderly=1)  # type: ignore[arg-type]


def test_manual_commit_rollback_and_commit(tmp_path: Path) -> None:
    """auto_commit = False: SUCCESS leaves the batch uncommitted, ROLLBACK redelivers everything since the last
    COMMIT, COMMIT commits it."""
    script = iter(["SUCCESS", "ROLLBACK", "SUCCESS", "SUCCESS", "COMMIT"])
    seen: list[tuple[int, str]] = []
    committed: list[int] = []

    with rmq.MessageStore(tmp_path / "s", CFG) as store:
        put_all(store, 6, queues=1)
        offsets = ConsumerOffsetManager(tmp_path / "consumerOffset.json")

        def listener(msgs: list[rmq.MessageExt], ctx: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
            ctx.auto_commit = False
            ctx.suspend_current_queue_time_millis = 10
            step = next(script, "COMMIT")
            seen.append((msgs[0].queue_offset, step))
            committed.append(offsets.query_offset("G", "Orders", 0))
            return ConsumeOrderlyStatus[step]

        c = PushConsumer(store, "G", "Orders", listener, offsets=offsets, orderly=True, consume_from_where=FIRST)
        with c:
            wait_until(lambda: offsets.query_offset("G", "Orders", 0) == 6)
        assert seen[:5] == [(0, "SUCCESS"), (1, "ROLLBACK"), (0, "SUCCESS"), (1, "SUCCESS"), (2, "COMMIT")]
        # Nothing was committed before the first COMMIT; it committed offsets 0..2.
        assert committed[:5] == [-1, -1, -1, -1, -1] and committed[5] == 3


def test_rebalance_hands_a_queue_over_only_after_its_batch_is_committed(tmp_path: Path) -> None:
    """Members join and leave while messages flow and listeners are slow and sometimes suspend: the invariant holds
    over the whole group, no queue is in two listener calls, and everything is consumed exactly once."""
    n, queues = 600, 4
    with rmq.MessageStore(tmp_path / "s", CFG) as store:
        offsets = ConsumerOffsetManager(tmp_path / "consumerOffset.json")
        rec = OrderlyRecorder(lambda q, o, r: SUSPEND if o % 37 == 5 and r == 0 else SUCCESS, work=0.002)
        members = [consumer(store, offsets, rec, "c0", consume_message_batch_max_size=2).start()]
        stop = threading.Event()

        def produce() -> None:
            for i in range(n):
                store.put("Orders", b"order-%05d" % i, queue_id=i % queues)
                if i % 10 == 0:
                    time.sleep(0.01)
            stop.set()

        producer = threading.Thread(target=produce)
        producer.start()
        for i in range(1, 4):  # joins mid-stream
            time.sleep(0.1)
            members.append(consumer(store, offsets, rec, f"c{i}", consume_message_batch_max_size=2).start())
        time.sleep(0.1)
        members.pop(0).shutdown()  # leaves mid-stream
        time.sleep(0.1)
        members.pop(1).shutdown()
        members.append(consumer(store, offsets, rec, "c9", consume_message_batch_max_size=2).start())
        producer.join()
        assert store.wait_dispatched()
        wait_until(lambda: sum(map(len, rec.consumed().values())) >= n)
        for m in members:
            m.shutdown()
        assert rec.overlaps == 0
        assert check_orderly(rec.log) == {q: n // queues for q in range(queues)}
        assert len({d.consumer for d in rec.log}) >= 3, "queues changed hands"
        # Exactly once: every SUCCESS'd offset was delivered successfully once.
        ok = collections.Counter((d.queue, o) for d in rec.log if d.status is SUCCESS for o in d.offsets)
        assert set(ok.values()) == {1} and len(ok) == n
        assert offsets.query_offsets("G", "Orders") == {q: n // queues for q in range(queues)}
        assert QueueLocks.of(store, "G").owner(MessageQueue("Orders", "broker-a", 0)) is None, "all released"


def test_a_queue_busy_in_the_listener_is_not_taken_before_its_batch_returns(tmp_path: Path) -> None:
    with rmq.MessageStore(tmp_path / "s", CFG) as store:
        put_all(store, 4, queues=1)
        offsets = ConsumerOffsetManager(tmp_path / "consumerOffset.json")
        entered, release = threading.Event(), threading.Event()
        log: list[tuple[str, int]] = []

        def listener(msgs: list[rmq.MessageExt], ctx: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
            log.append((ctx.consumer_id, msgs[0].queue_offset))
            if ctx.consumer_id == "a" and msgs[0].queue_offset == 1:
                entered.set()
                assert release.wait(10)
            return SUCCESS

        def make(cid: str) -> PushConsumer:
            # AVG gives queue 0 to the first member of the sorted ids: "0b" once it joins.
            return PushConsumer(store, "G", "Orders", listener, offsets=offsets, orderly=True, consumer_id=cid,
                                consume_from_where=FIRST)  # fmt: skip

        a = make("a").start()
        assert entered.wait(10)
        b = make("0b").start()  # sorts first: the rebalance gives it queue 0 while "a" is in the listener
        mq = MessageQueue("Orders", "broker-a", 0)
        time.sleep(0.2)
        assert mq not in b.assigned_queues() and mq not in a.assigned_queues()
        assert QueueLocks.of(store, "G").owner(mq) == "a", "still a's until its batch returns"
        assert offsets.query_offset("G", "Orders", 0) == 1
        release.set()
        wait_until(lambda: mq in b.assigned_queues())
        wait_until(lambda: offsets.query_offset("G", "Orders", 0) == 4)
        a.shutdown()
        b.shutdown()
        assert log == [("a", 0), ("a", 1), ("0b", 2), ("0b", 3)]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    decisions=st.lists(st.booleans(), min_size=1, max_size=14),
    batch=st.integers(1, 3),
)
def test_random_suspend_success_sequences_follow_the_model(
    tmp_path_factory: pytest.TempPathFactory, decisions: list[bool], batch: int
) -> None:
    """The listener answers SUCCESS/SUSPEND from a random script; deliveries are exactly the model's: each batch
    from the first unconsumed offset, repeated (reconsume_times + 1) while suspended."""
    tmp = tmp_path_factory.mktemp("orderly-prop")
    n = 12
    script = iter(decisions)
    calls: list[tuple[list[int], list[int]]] = []

    def listener(msgs: list[rmq.MessageExt], ctx: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        calls.append(([m.queue_offset for m in msgs], [m.reconsume_times for m in msgs]))
        ctx.suspend_current_queue_time_millis = 10
        return SUCCESS if next(script, True) else SUSPEND

    with rmq.MessageStore(tmp / "s", CFG) as store:
        put_all(store, n, queues=1)
        offsets = ConsumerOffsetManager(tmp / "consumerOffset.json")
        c = PushConsumer(store, "G", "Orders", listener, offsets=offsets, orderly=True, consume_from_where=FIRST,
                         consume_message_batch_max_size=batch)  # fmt: skip
        with c:
            wait_until(lambda: offsets.query_offset("G", "Orders", 0) == n)
    # The model.
    expected: list[tuple[list[int], list[int]]] = []
    pos, times = 0, [0] * n
    answers = iter(decisions)
    while pos < n:
        offs = list(range(pos, min(pos + batch, n)))
        expected.append((offs, [times[o] for o in offs]))
        if next(answers, True):
            pos = offs[-1] + 1
        else:
            for o in offs:
                times[o] += 1
    assert calls == expected


CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    import rmq
    from rmq.offsets import ConsumerOffsetManager
    from rmq.orderly import ConsumeOrderlyStatus
    from rmq.push import ConsumeFromWhere, PushConsumer

    root, log_path, kill_after = sys.argv[1], sys.argv[2], int(sys.argv[3])
    log = open(log_path, "a", buffering=1)
    store = rmq.MessageStore(root, rmq.StoreConfig(mapped_file_size_commit_log=1 << 20,
        mapped_file_size_consume_queue=6000, max_hash_slot_num=512, max_index_num=2048))
    offsets = ConsumerOffsetManager(os.path.join(root, "config", "consumerOffset.json"))
    offsets.load()
    count = 0

    def listener(msgs, ctx):
        global count
        for i, m in enumerate(msgs):
            log.write(f"{os.getpid()} {m.queue_id} {m.queue_offset}\\n")
            count += 1
            if kill_after and count >= kill_after and i == 1:
                os.kill(os.getpid(), signal.SIGKILL)  # mid-batch: its first messages seen, nothing committed
        return ConsumeOrderlyStatus.SUCCESS

    c = PushConsumer(store, "G", "Orders", listener, offsets=offsets, orderly=True, consume_thread_nums=1,
        consume_message_batch_max_size=4, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    c.start()
    while True:
        time.sleep(1)
    """
)


def test_sigkill_then_restart_resumes_at_the_committed_offset(tmp_path: Path) -> None:
    root = tmp_path / "s"
    n, queues = 400, 4
    with rmq.MessageStore(root, CFG) as store:
        put_all(store, n, queues=queues)
    log_path = tmp_path / "consumed.log"
    run = [sys.executable, "-c", CHILD, str(root), str(log_path)]
    child = subprocess.run([*run, "150"], stdout=subprocess.DEVNULL, timeout=60, check=False)
    assert child.returncode == -signal.SIGKILL
    committed = ConsumerOffsetManager(root / "config" / "consumerOffset.json")
    committed.load()
    at_kill = committed.query_offsets("G", "Orders")
    first = [tuple(map(int, line.split())) for line in log_path.read_text().splitlines()]
    assert 150 <= len(first) < n
    proc = subprocess.Popen([*run, "0"], stdout=subprocess.DEVNULL)
    try:
        wait_until(lambda: len({tuple(x.split()[1:]) for x in log_path.read_text().splitlines()}) == n, 60)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    entries = [tuple(map(int, line.split())) for line in log_path.read_text().splitlines()]
    second = entries[len(first) :]
    assert {(q, o) for _, q, o in entries} == {(q, o) for q in range(queues) for o in range(n // queues)}, "none lost"
    for q in range(queues):
        before = [o for _, qq, o in first if qq == q]
        after = [o for _, qq, o in second if qq == q]
        # Each process saw its queue in strictly increasing order; the restart began at the committed offset.
        assert before == sorted(set(before)) and after == sorted(set(after))
        if after:
            assert after[0] == at_kill.get(q, 0), (q, after[:3], at_kill)
        else:
            assert at_kill[q] == n // queues, "only a queue finished before the kill has nothing left"
        # Only the batch in the listener at the kill (up to 4 messages, 2 of them logged) is seen twice.
        assert len(set(before) & set(after)) <= 4


def test_a_failed_commit_on_release_still_hands_the_queue_over(tmp_path: Path) -> None:
    with rmq.MessageStore(tmp_path / "s", CFG) as store:
        put_all(store, 8, queues=1)
        offsets = ConsumerOffsetManager(tmp_path / "consumerOffset.json")
        real = offsets.commit_offset

        def flaky(group: str, topic: str, queue_id: int, offset: int, *, journal: bool = False) -> None:
            if journal:  # only the release journals here (persist_offsets_each_batch=False)
                raise OSError("disk full")
            real(group, topic, queue_id, offset)

        offsets.commit_offset = flaky  # type: ignore[method-assign]
        rec = OrderlyRecorder()
        a = consumer(store, offsets, rec, "a", persist_offsets_each_batch=False).start()
        wait_until(lambda: offsets.query_offset("G", "Orders", 0) == 8)
        b = consumer(store, offsets, rec, "0b", persist_offsets_each_batch=False).start()
        mq = MessageQueue("Orders", "broker-a", 0)
        wait_until(lambda: mq in b.assigned_queues())
        put_all(store, 4, queues=1)
        wait_until(lambda: offsets.query_offset("G", "Orders", 0) == 12)
        a.shutdown()
        b.shutdown()
        assert check_orderly(rec.log) == {0: 12}


def test_a_bad_suspend_time_in_the_context_falls_back_to_the_consumers(tmp_path: Path) -> None:
    calls: list[float] = []

    def listener(msgs: list[rmq.MessageExt], ctx: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        calls.append(time.monotonic())
        ctx.suspend_current_queue_time_millis = "soon"  # type: ignore[assignment]
        return SUSPEND if len(calls) == 1 else SUCCESS

    with rmq.MessageStore(tmp_path / "s", CFG) as store:
        put_all(store, 1, queues=1)
        offsets = ConsumerOffsetManager(tmp_path / "consumerOffset.json")
        c = PushConsumer(store, "G", "Orders", listener, offsets=offsets, orderly=True, consume_from_where=FIRST,
                         suspend_current_queue_time_millis=50)  # fmt: skip
        with c:
            wait_until(lambda: offsets.query_offset("G", "Orders", 0) == 1)
        assert len(calls) == 2 and calls[1] - calls[0] >= 0.05
