"""Push consumer groups: queues shared by a rebalance strategy with exactly one owner each after every join and
leave, at-least-once delivery with committed offsets, retries through `%RETRY%<group>` and the dead-letter
queue, batch sizes, and a consumer process killed with SIGKILL mid-batch."""

from __future__ import annotations

import collections
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import rmq
from conftest import small_config
from rmq.offsets import ConsumerOffsetManager
from rmq.push import ConsumeContext, ConsumeFromWhere, ConsumeStatus, PushConsumer, dlq_topic, retry_topic
from rmq.rebalance import AllocateMessageQueueAveragelyByCircle, MessageQueue

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
CFG = small_config(mapped_file_size_commit_log=1 << 20)
#: Retries come back after 1 s whatever their level (the schedule service delivers them).
RETRY_CFG = small_config(mapped_file_size_commit_log=1 << 20, message_delay_level="1s 1s 1s 1s 1s 1s 1s")


def wait_until(cond: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


class Recorder:
    """A listener that records (topic, queue, queue offset, body) of every delivery."""

    def __init__(self, fail: Callable[[rmq.MessageExt], bool] = lambda m: False) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[str, int, int, bytes, int]] = []
        self.batches: list[int] = []
        self.fail = fail

    def __call__(self, msgs: list[rmq.MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        with self.lock:
            self.batches.append(len(msgs))
            for m in msgs:
                assert (m.topic, m.queue_id) == (ctx.queue.topic, ctx.queue.queue_id)
                self.seen.append((m.topic, m.queue_id, m.queue_offset, m.body, m.reconsume_times))
        if any(self.fail(m) for m in msgs):
            return ConsumeStatus.RECONSUME_LATER
        return ConsumeStatus.CONSUME_SUCCESS

    def bodies(self) -> collections.Counter[bytes]:
        with self.lock:
            return collections.Counter(b for _, _, _, b, _ in self.seen)


def put_all(store: rmq.MessageStore, n: int, queues: int = 8, topic: str = "Orders") -> list[bytes]:
    bodies = []
    for i in range(n):
        body = b"order-%05d" % i
        store.put(topic, body, queue_id=i % queues, tags="created")
        bodies.append(body)
    # The group learns a topic's queues from its consume queues (there is no topic config yet).
    assert store.wait_dispatched()
    return bodies


def owners(consumers: list[PushConsumer]) -> dict[MessageQueue, list[str]]:
    """The group's queue owners, read under the group lock (between rebalances); all from `consumers`."""
    out = consumers[0].group_owners()
    ids = {c.consumer_id for c in consumers}
    assert all(set(v) <= ids for v in out.values()), out
    return out


def test_group_of_three_shares_queues_and_consumes_everything(tmp_path: Path) -> None:
    with rmq.MessageStore(tmp_path / "s", CFG) as store:
        bodies = put_all(store, 400)
        offsets = ConsumerOffsetManager(tmp_path / "consumerOffset.json")
        rec = Recorder()
        group = [
            PushConsumer(store, "G", "Orders", rec, offsets=offsets, consumer_id=f"c{i}", consume_from_where=FIRST)
            for i in range(3)
        ]
        topic_queues = [MessageQueue("Orders", "broker-a", q) for q in range(8)]
        started: list[PushConsumer] = []
        for c in group:
            c.start()
            started.append(c)
            own = owners(started)
            assert sorted(q for q in own if q.topic == "Orders") == topic_queues
            assert all(len(v) == 1 for v in own.values()), own
        sizes = sorted(sum(1 for q in c.assigned_queues() if q.topic == "Orders") for c in group)
        assert sizes == [2, 3, 3], "AVG: 8 queues over 3 consumers"
        wait_until(lambda: set(rec.bodies()) == set(bodies))
        # One member leaves: the other two take its queues, each queue still has one owner.
        group[1].shutdown()
        own = owners([group[0], group[2]])
        assert sorted(q for q in own if q.topic == "Orders") == topic_queues
        assert all(len(v) == 1 for v in own.values())
        more = [b"late-%d" % i for i in range(40)]
        for i, b in enumerate(more):
            store.put("Orders", b, queue_id=i % 8)
        wait_until(lambda: set(more) <= set(rec.bodies()))
        for c in (group[0], group[2]):
            c.shutdown()
        # Committed offsets reached the end of every queue, and they were persisted.
        reloaded = ConsumerOffsetManager(tmp_path / "consumerOffset.json")
        reloaded.load()
        for q in range(8):
            assert reloaded.query_offset("G", "Orders", q) == store.get_max_offset_in_queue("Orders", q)


def test_other_strategy_and_batches(tmp_path: Path) -> None:
    with rmq.MessageStore(tmp_path / "s", CFG) as store:
        bodies = put_all(store, 200, queues=4)
        rec = Recorder()
        offsets = ConsumerOffsetManager(tmp_path / "o.json")
        c = PushConsumer(
            store,
            "G",
            "Orders",
            rec,
            offsets=offsets,
            consume_from_where=FIRST,
            strategy=AllocateMessageQueueAveragelyByCircle(),
            consume_message_batch_max_size=8,
            consume_thread_nums=1,
        )
        with c:
            wait_until(lambda: sum(rec.bodies().values()) >= len(bodies))
        assert max(rec.batches) == 8 and all(1 <= b <= 8 for b in rec.batches)
        assert rec.bodies() == collections.Counter(bodies), "each exactly once without failures"


def test_consume_from_last_offset_skips_history(tmp_path: Path) -> None:
    with rmq.MessageStore(tmp_path / "s", CFG) as store:
        put_all(store, 20, queues=4)
        store.wait_dispatched()
        rec = Recorder()
        with PushConsumer(store, "G", "Orders", rec, offsets=ConsumerOffsetManager(tmp_path / "o.json")):
            store.put("Orders", b"new", queue_id=2)
            wait_until(lambda: b"new" in rec.bodies())
            time.sleep(0.1)
        assert list(rec.bodies()) == [b"new"]


def test_tag_subscription(tmp_path: Path) -> None:
    with rmq.MessageStore(tmp_path / "s", CFG) as store:
        for i in range(30):
            store.put("T", b"%d" % i, queue_id=i % 2, tags=["Aa", "BB", "C"][i % 3])
        rec = Recorder()
        with PushConsumer(
            store,
            "G",
            "T",
            rec,
            offsets=ConsumerOffsetManager(tmp_path / "o.json"),
            subscription="BB",
            consume_from_where=FIRST,
            topic_queue_nums=2,
        ):
            wait_until(lambda: len(rec.bodies()) == 10)
            time.sleep(0.1)
        assert sorted(int(b) for b in rec.bodies()) == list(range(1, 30, 3))


def test_retries_then_dead_letter_queue(tmp_path: Path) -> None:
    with rmq.MessageStore(tmp_path / "s", RETRY_CFG) as store:
        store.put("T", b"ok", queue_id=0, keys=["k-ok"])
        store.put("T", b"flaky", queue_id=0, keys=["k-flaky"], properties={"biz": "1"})
        store.put("T", b"poison", queue_id=0)
        rec = Recorder(fail=lambda m: m.body == b"poison" or (m.body == b"flaky" and m.reconsume_times < 2))
        offsets = ConsumerOffsetManager(tmp_path / "o.json")
        c = PushConsumer(
            store, "G", "T", rec, offsets=offsets, consume_from_where=FIRST, max_reconsume_times=3, topic_queue_nums=1
        )
        with c:
            wait_until(lambda: store.get_max_offset_in_queue(dlq_topic("G"), 0) == 1)
            wait_until(lambda: rec.bodies()[b"flaky"] == 3)
        counts = rec.bodies()
        assert counts[b"ok"] == 1
        assert counts[b"flaky"] == 3, "original + 2 retries, the third try succeeds"
        assert counts[b"poison"] == 4, "original + max_reconsume_times retries"
        assert c.stats.sent_to_dlq == 1 and c.stats.sent_to_retry == 2 + 3
        # Retried messages live in %RETRY%G with the original topic, id, keys and properties.
        retry = [m for m in store.scan() if m.topic == retry_topic("G")]
        assert [m.reconsume_times for m in retry if m.body == b"flaky"] == [1, 2]
        first = next(m for m in retry if m.body == b"flaky")
        original = next(m for m in store.scan() if m.body == b"flaky" and m.topic == "T")
        assert first.properties["RETRY_TOPIC"] == "T"
        assert first.properties["ORIGIN_MESSAGE_ID"] == original.msg_id
        assert first.properties["biz"] == "1" and first.keys == ["k-flaky"]
        assert first.uniq_key == original.uniq_key
        dead = [m for m in store.scan() if m.topic == dlq_topic("G")]
        assert [(m.body, m.reconsume_times) for m in dead] == [(b"poison", 4)]
        # Offsets of the topic and of the retry topic are committed past everything.
        assert offsets.query_offset("G", "T", 0) == 3
        assert offsets.query_offset("G", retry_topic("G"), 0) == store.get_max_offset_in_queue(retry_topic("G"), 0)


def test_a_failed_send_back_keeps_the_message_and_consumes_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ConsumeMessageConcurrentlyService: a message whose sendMessageBack fails is not committed past; it is
    consumed again in this process later with reconsume times + 1 (nothing goes to the retry topic)."""
    monkeypatch.setattr(rmq.push, "SEND_BACK_RETRY", 0.2)
    with rmq.MessageStore(tmp_path / "s", RETRY_CFG) as store:
        for body in (b"a", b"b", b"c"):
            store.put("T", body, queue_id=0)
        rec = Recorder(fail=lambda m: m.body == b"b" and m.reconsume_times == 0)
        offsets = ConsumerOffsetManager(tmp_path / "o.json")
        c = PushConsumer(store, "G", "T", rec, offsets=offsets, consume_from_where=FIRST, topic_queue_nums=1)
        calls: list[int] = []

        def broken(*args: object, **kw: object) -> object:
            calls.append(1)
            raise rmq.DiskFullError("disk full")

        monkeypatch.setattr(store, "send_message_back", broken)
        c.start()
        try:
            wait_until(lambda: rec.bodies()[b"b"] == 2)
            wait_until(lambda: offsets.query_offset("G", "T", 0) == 3)
        finally:
            c.shutdown()
        assert calls == [1] and c.stats.send_back_failures == 1
        assert [(b, r) for _, _, _, b, r in rec.seen if b == b"b"] == [(b"b", 0), (b"b", 1)]
        assert store.get_max_offset_in_queue(retry_topic("G"), 0) == 0, "nothing sent back"


def test_a_message_whose_send_back_failed_is_not_committed_past_at_shutdown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rmq.push, "SEND_BACK_RETRY", 60.0)
    with rmq.MessageStore(tmp_path / "s", RETRY_CFG) as store:
        for body in (b"a", b"b", b"c"):
            store.put("T", body, queue_id=0)
        rec = Recorder(fail=lambda m: m.body == b"b")
        offsets = ConsumerOffsetManager(tmp_path / "o.json")
        c = PushConsumer(store, "G", "T", rec, offsets=offsets, consume_from_where=FIRST, topic_queue_nums=1)
        monkeypatch.setattr(store, "send_message_back", lambda *a, **k: (_ for _ in ()).throw(rmq.ReadOnlyError("x")))
        with c:
            wait_until(lambda: c.stats.send_back_failures == 1 and rec.bodies()[b"c"] == 1)
        assert offsets.query_offset("G", "T", 0) == 1, "b (offset 1) is consumed again after a restart"


def test_listener_exception_counts_as_reconsume_later(tmp_path: Path) -> None:
    with rmq.MessageStore(tmp_path / "s", RETRY_CFG) as store:
        store.put("T", b"boom", queue_id=0)
        calls: list[int] = []

        def listener(msgs: list[rmq.MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
            calls.append(msgs[0].reconsume_times)
            if len(calls) == 1:
                raise RuntimeError("transient")
            return ConsumeStatus.CONSUME_SUCCESS

        c = PushConsumer(
            store,
            "G",
            "T",
            listener,
            offsets=ConsumerOffsetManager(tmp_path / "o.json"),
            consume_from_where=FIRST,
            topic_queue_nums=1,
        )
        with c:
            wait_until(lambda: len(calls) == 2)
        assert calls == [0, 1] and c.stats.listener_errors == 1


CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    import rmq
    from rmq.offsets import ConsumerOffsetManager
    from rmq.push import ConsumeFromWhere, ConsumeStatus, PushConsumer

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
            log.write(m.body.decode() + "\\n")
            count += 1
            # Die in the middle of a batch: its first messages are consumed, its offset not committed.
            if kill_after and count >= kill_after and i == 2 and len(msgs) > 3:
                os.kill(os.getpid(), signal.SIGKILL)
        return ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(store, "G", "Orders", listener, offsets=offsets, consume_thread_nums=1,
        consume_message_batch_max_size=8, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    c.start()
    while True:
        time.sleep(1)
    """
)


def test_sigkill_mid_batch_loses_nothing_and_duplicates_at_most_the_batch(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with rmq.MessageStore(root, CFG) as store:
        bodies = [b.decode() for b in put_all(store, 600, queues=4)]
    log_path = tmp_path / "consumed.log"
    run = [sys.executable, "-c", CHILD, str(root), str(log_path)]
    # The first process kills itself with SIGKILL in the middle of a batch, after about 150 messages.
    child = subprocess.run([*run, "150"], stdout=subprocess.DEVNULL, timeout=60, check=False)
    assert child.returncode == -signal.SIGKILL
    before = log_path.read_text().splitlines()
    assert 150 <= len(before) < len(bodies), "killed mid-way"
    # Restart: a new process finishes the job.
    proc = subprocess.Popen([*run, "0"], stdout=subprocess.DEVNULL)
    try:
        wait_until(lambda: set(log_path.read_text().splitlines()) >= set(bodies), timeout=60)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    seen = collections.Counter(log_path.read_text().splitlines())
    assert set(seen) == set(bodies), "every message consumed"
    duplicates = sum(n - 1 for n in seen.values())
    # The interrupted batch had 3 messages consumed and is delivered again; nothing else is.
    assert 3 <= duplicates <= 8, f"{duplicates} duplicates: expected only the interrupted batch"


def test_a_pull_that_moves_the_offset_without_delivering_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A committed offset past the queue's end is corrected back (OFFSET_OVERFLOW_BADLY): the consumer takes the
    correction, consumes what is there, and says what moved its offset (how messages would go unconsumed, or
    come again, shows in the log)."""
    with rmq.MessageStore(tmp_path / "s", CFG) as store:
        bodies = put_all(store, 4, queues=1)
        offsets = ConsumerOffsetManager(tmp_path / "o.json")
        offsets.commit_offset("G", "Orders", 0, 100)
        rec = Recorder()
        with caplog.at_level("WARNING", logger="rmq.push"):
            with PushConsumer(store, "G", "Orders", rec, offsets=offsets, consume_from_where=FIRST):

                def moved() -> list[str]:
                    return [r.getMessage() for r in caplog.records if "the pull at offset 100" in r.getMessage()]

                wait_until(lambda: bool(moved()))
                store.put("Orders", b"after", queue_id=0)  # after the correction: offset 4, where it now pulls
                wait_until(lambda: b"after" in rec.bodies())
        assert len(bodies) == 4 and rec.bodies() == collections.Counter([b"after"])  # corrected to the end
        line = moved()[0]
        assert "OFFSET_OVERFLOW_BADLY" in line and "max 4" in line and "the next offset is 4" in line, line


def test_an_error_outside_a_queue_pull_does_not_end_the_pull_loop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round of the pull loop that fails outside a queue's pull (here a read-only store's `refresh()`, which
    the loop calls between pulls) is logged and counted, and the loop goes on after a pause: the consumer keeps
    consuming what the writer adds. (It used to end the pull thread: the consumer held its queues and consumed
    nothing more, silently.)"""
    monkeypatch.setattr(rmq.push, "PULL_EXCEPTION_DELAY", 0.05)
    with rmq.MessageStore(tmp_path / "s", CFG) as writer:
        put_all(writer, 4, queues=1)
        writer.flush()
        with rmq.MessageStore(tmp_path / "s", CFG, read_only=True) as view:
            real, calls = view.refresh, []

            def flaky() -> int:
                calls.append(1)
                if len(calls) <= 2:
                    raise OSError("the refresh failed")
                return real()

            view.refresh = flaky  # type: ignore[method-assign]
            rec = Recorder()
            offsets = ConsumerOffsetManager(tmp_path / "o.json")
            with caplog.at_level("ERROR", logger="rmq.push"):
                with PushConsumer(view, "G", "Orders", rec, offsets=offsets, consume_from_where=FIRST) as c:
                    wait_until(lambda: len(rec.bodies()) == 4)
                    writer.put("Orders", b"later", queue_id=0)
                    writer.flush()
                    wait_until(lambda: b"later" in rec.bodies())
                    assert c.stats.pull_loop_errors == 2
    failed = [r for r in caplog.records if "a round of the pull loop failed" in r.getMessage()]
    assert len(failed) == 2 and failed[0].exc_info is not None


@pytest.mark.parametrize("group", ["../../escaped", "a/b", "a@b", "a.b", "G" * 256, ""])
def test_a_group_name_rocketmq_refuses_is_refused_and_writes_nothing(tmp_path: Path, group: str) -> None:
    """`Validators.checkGroup`: the group names the registry file under the store (`rmq-groups/<group>.registry`),
    so a name with `/` or `..` would have been a path, and one with `@` could never commit an offset."""
    store = rmq.MessageStore(tmp_path / "store", CFG)
    offsets = ConsumerOffsetManager(store.consumer_offset_path)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(rmq.InvalidArgumentError):
        PushConsumer(store, group, "Orders", Recorder(), offsets=offsets)
    with pytest.raises(rmq.InvalidArgumentError):
        rmq.PullConsumer(store, group, offsets=offsets)
    with pytest.raises(rmq.InvalidArgumentError):
        rmq.TransactionProducer(store, group)
    with pytest.raises(rmq.InvalidTopicError):
        PushConsumer(store, "G", "../x", Recorder(), offsets=offsets)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    store.close()
    assert not (tmp_path / "escaped.registry").exists()


def test_a_consumer_starts_once_and_not_on_a_closed_store(tmp_path: Path) -> None:
    store = rmq.MessageStore(tmp_path / "store", CFG)
    put_all(store, 8)
    offsets = ConsumerOffsetManager(store.consumer_offset_path)
    rec = Recorder()
    c = PushConsumer(store, "G", "Orders", rec, offsets=offsets, consume_from_where=FIRST).start()
    wait_until(lambda: len(rec.seen) == 8)
    c.shutdown()
    with pytest.raises(RuntimeError, match="starts once"):
        c.start()
    late = PushConsumer(store, "G", "Orders", Recorder(), offsets=offsets)
    store.close()
    with pytest.raises(rmq.StoreClosedError):
        late.start()
    assert not [t.name for t in threading.enumerate() if t.name.startswith(("rmq-pull", "rmq-consume", "rmq-group"))]


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrently", "orderly"])
def test_a_listener_that_shuts_its_consumer_down_leaves_the_group(tmp_path: Path, orderly: bool) -> None:
    """QA: `shutdown()` from inside the listener joined the listener's own thread ("cannot join current thread")
    half-way: the member never left the group, its offsets were not persisted, and a later member got only the
    queues it had not held (messages of the rest never consumed). The shutdown now runs on a thread of its own
    and finishes once the listener returned; a `shutdown()` from elsewhere waits for it."""
    from rmq.orderly import ConsumeOrderlyStatus

    with rmq.MessageStore(tmp_path / "s", small_config()) as store:
        for i in range(40):
            store.put("T", b"%d" % i, queue_id=i % 4)
        offsets = ConsumerOffsetManager(store.consumer_offset_path)
        asked = threading.Event()
        holder: dict[str, PushConsumer] = {}

        first: list[bytes] = []

        def listener(msgs: list[rmq.MessageExt], ctx: object) -> object:
            first.extend(m.body for m in msgs)
            if not asked.is_set():
                asked.set()
                holder["c"].shutdown()  # returns at once: the shutdown waits for this batch
            return ConsumeOrderlyStatus.SUCCESS if orderly else ConsumeStatus.CONSUME_SUCCESS

        c1 = PushConsumer(store, "G", "T", listener, offsets=offsets, consumer_id="c1", orderly=orderly,
                          consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)  # fmt: skip
        holder["c"] = c1
        c1.start()
        assert asked.wait(30)
        c1.shutdown()  # waits for the one the listener started
        assert c1.group_owners() == {} and c1.assigned_queues() == []
        got: list[bytes] = []
        lock = threading.Lock()

        def collect(msgs: list[rmq.MessageExt], ctx: object) -> object:
            with lock:
                got.extend(m.body for m in msgs)
            return ConsumeOrderlyStatus.SUCCESS if orderly else ConsumeStatus.CONSUME_SUCCESS

        with PushConsumer(store, "G", "T", collect, offsets=offsets, consumer_id="c2", orderly=orderly,
                          consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET) as c2:  # fmt: skip
            everything = {b"%d" % i for i in range(40)}
            deadline = time.monotonic() + 60
            while not everything <= set(got) | set(first) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(c2.assigned_queues()) == 5  # the 4 queues and the retry queue
        assert everything <= set(got) | set(first)
