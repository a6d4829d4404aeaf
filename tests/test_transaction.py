"""Transactional messages (python/rmq/transaction.py, src/store/transaction.rs): half messages are invisible until
committed, rollbacks never visible, the check asks the producer's checker after `transaction_time_out` and applies
its answer, exhausted halves go to TRANS_CHECK_MAX_TIME_TOPIC, a kill -9 between half and end is resolved by the
check after restart, and bad ends are typed errors that write nothing.

The byte-for-byte comparison with RocketMQ 5.3.1 is in test_transaction_interop.py.
"""

from __future__ import annotations

import errno
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import rmq
from rmq.testing import injected_fault
from rmq.transaction import (
    CHECK_GROUP,
    CHECK_MAX_TIME_TOPIC,
    HALF_TOPIC,
    OP_TOPIC,
    CheckedMessage,
    LocalTransactionState,
    TransactionProducer,
)

COMMIT, ROLLBACK, UNKNOW = (
    LocalTransactionState.COMMIT_MESSAGE,
    LocalTransactionState.ROLLBACK_MESSAGE,
    LocalTransactionState.UNKNOW,
)
#: Short timeouts; the check interval is long so rounds run only when a test asks (check_now), except where the
#: thread itself is under test.
TIMEOUT_MS = 1000


def config(**kw: object) -> rmq.StoreConfig:
    base: dict[str, object] = {"transaction_time_out": TIMEOUT_MS, "transaction_check_interval": 3_600_000}
    return rmq.StoreConfig(**{**base, **kw})  # type: ignore[arg-type]


def bodies(store: rmq.MessageStore, topic: str, queues: int = 4) -> list[bytes]:
    store.wait_dispatched()
    out: list[bytes] = []
    for q in range(queues):
        out += [m.body for m in store.get_message("consumer", topic, q, 0, 64).messages]
    return sorted(out)


def wait_past_timeout() -> None:
    time.sleep(TIMEOUT_MS / 1000 + 0.2)


class Answers:
    """A checker that records what it is asked and answers from a table (UNKNOW by default)."""

    def __init__(self, table: dict[bytes, LocalTransactionState] | None = None) -> None:
        self.table = table or {}
        self.asked: list[CheckedMessage] = []

    def __call__(self, msg: CheckedMessage) -> LocalTransactionState:
        self.asked.append(msg)
        return self.table.get(msg.body, UNKNOW)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[rmq.MessageStore]:
    s = rmq.MessageStore(tmp_path / "store", config())
    yield s
    s.close()


def offsets_of(store: rmq.MessageStore) -> rmq.ConsumerOffsetManager:
    return rmq.ConsumerOffsetManager(store.consumer_offset_path)


def test_half_is_invisible_until_commit_and_rollback_never_visible(store: rmq.MessageStore) -> None:
    p = TransactionProducer(store, "pg")
    half = p.send_half("Orders", b"a", queue_id=1, tags="T", keys=["k1"], properties={"x": "1"})
    rb = p.send_half("Orders", b"b", queue_id=1)
    assert bodies(store, "Orders") == []
    m = store.read(half.wrote_offset)
    assert m is not None
    assert (m.topic, m.queue_id, m.queue_offset) == (HALF_TOPIC, 0, 0)
    assert m.transaction_type == rmq.TransactionType.NOT_TYPE
    assert m.properties["REAL_TOPIC"] == "Orders" and m.properties["REAL_QID"] == "1"
    assert m.properties["PGROUP"] == "pg" and m.properties["TRAN_MSG"] == "true"
    assert m.properties["__transactionId__"] == m.uniq_key == half.uniq_key
    committed, op = p.end_transaction(half, COMMIT)
    assert committed is not None and op is not None
    c = store.read(committed.wrote_offset)
    assert c is not None
    assert (c.topic, c.queue_id, c.queue_offset, c.body) == ("Orders", 1, 0, b"a")
    assert c.transaction_type == rmq.TransactionType.COMMIT
    assert c.prepared_transaction_offset == half.wrote_offset
    assert c.uniq_key == half.uniq_key and c.tags == "T" and c.properties["x"] == "1"
    o = store.read(op.wrote_offset)
    assert o is not None
    assert (o.topic, o.queue_id, o.tags, o.body) == (OP_TOPIC, 0, "d", b"0,")
    committed, op = p.end_transaction(rb, ROLLBACK)
    assert committed is None and op is not None
    assert store.read(op.wrote_offset).body == b"1,"  # type: ignore[union-attr]
    assert bodies(store, "Orders") == [b"a"]


def test_a_delay_level_on_a_transactional_message_is_dropped_as_the_producer_drops_it(
    store: rmq.MessageStore,
) -> None:
    p = TransactionProducer(store, "pg")
    half = p.send_half("Orders", b"a", properties={"DELAY": "2"})
    m = store.read(half.wrote_offset)
    assert m is not None and m.topic == HALF_TOPIC and "DELAY" not in m.properties
    committed, _ = p.end_transaction(half, COMMIT)
    assert committed is not None
    c = store.read(committed.wrote_offset)
    assert c is not None and c.topic == "Orders" and "DELAY" not in c.properties
    assert bodies(store, "Orders") == [b"a"], "delivered at once, not scheduled"


def test_send_in_transaction_runs_the_local_transaction_and_ends_with_its_answer(store: rmq.MessageStore) -> None:
    p = TransactionProducer(store, "pg")
    seen: list[tuple[bytes, object]] = []

    def local(body: bytes, arg: object) -> LocalTransactionState:
        seen.append((body, arg))
        return {b"c": COMMIT, b"r": ROLLBACK}.get(body, UNKNOW)

    def boom(body: bytes, arg: object) -> LocalTransactionState:
        raise RuntimeError("local transaction failed")

    results = {b: p.send_in_transaction("T", b, local_transaction=local, arg=7) for b in (b"c", b"r", b"u")}
    failed = p.send_in_transaction("T", b"x", local_transaction=boom)
    assert seen == [(b"c", 7), (b"r", 7), (b"u", 7)]
    assert results[b"c"].local_transaction_state is COMMIT and results[b"c"].committed is not None
    assert results[b"r"].local_transaction_state is ROLLBACK and results[b"r"].committed is None
    assert results[b"u"].local_transaction_state is UNKNOW and results[b"u"].op is None
    assert failed.local_transaction_state is UNKNOW and failed.op is None
    assert results[b"c"].msg_id == results[b"c"].half.uniq_key
    assert bodies(store, "T") == [b"c"]


def test_the_check_asks_after_the_timeout_and_applies_the_answer(store: rmq.MessageStore) -> None:
    answers = Answers({b"commit-me": COMMIT, b"drop-me": ROLLBACK})
    offsets = offsets_of(store)
    with TransactionProducer(store, "pg", checker=answers, offsets=offsets) as p:
        started = time.monotonic()
        for body in (b"commit-me", b"drop-me", b"ask-again", b"ended"):
            r = p.send_in_transaction("T", body, local_transaction=lambda b, a: None)
            assert r.local_transaction_state is UNKNOW
        p.end_transaction(r.half, COMMIT)  # b"ended" is done before any check
        early = p.check_now()["checks"]
        if time.monotonic() - started < TIMEOUT_MS / 1000:  # not so on a host that stalled this thread
            assert early == 0, "nothing is checked before transaction_time_out"
        wait_past_timeout()
        first = p.check_now()
        assert first["checks"] == 3 and first["done"] == 1
        assert sorted(m.body for m in answers.asked) == [b"ask-again", b"commit-me", b"drop-me"]
        assert all(m.check_times == 1 and m.producer_group == "pg" and m.topic == "T" for m in answers.asked)
        assert bodies(store, "T") == [b"commit-me", b"ended"]
        # The UNKNOW one is asked again (its renewed copy, which keeps the born time) at the next round, counting
        # the checks. (A copy stored in the millisecond the round starts waits for the round after: sleep past it.)
        answers.asked.clear()
        time.sleep(0.01)
        p.check_now()
        assert [(m.body, m.check_times) for m in answers.asked] == [(b"ask-again", 2)]
        assert bodies(store, "T") == [b"commit-me", b"ended"]
    # The check's progress is the CID_RMQ_SYS_TRANS offsets in consumerOffset.json.
    assert offsets.query_offset(CHECK_GROUP, HALF_TOPIC, 0) > 4
    assert offsets.query_offset(CHECK_GROUP, OP_TOPIC, 0) >= 1


def test_a_half_checked_transaction_check_max_times_is_discarded(tmp_path: Path) -> None:
    with rmq.MessageStore(tmp_path / "s", config(transaction_check_max=2)) as store:
        answers = Answers()
        with TransactionProducer(store, "pg", checker=answers, offsets=offsets_of(store)) as p:
            half = p.send_half("T", b"stuck")
            discarded = 0
            for _ in range(4):
                wait_past_timeout()
                discarded += p.check_now()["discarded"]
            assert [m.check_times for m in answers.asked] == [1, 2]
            assert discarded == 1
        store.wait_dispatched()
        moved = store.get_message("x", CHECK_MAX_TIME_TOPIC, 0, 0, 8).messages
        assert [(m.body, m.properties["TRANSACTION_CHECK_TIMES"]) for m in moved] == [(b"stuck", "2")]
        assert moved[0].uniq_key == half.uniq_key
        assert bodies(store, "T") == []


def test_the_check_thread_runs_on_its_own_every_check_interval(tmp_path: Path) -> None:
    with rmq.MessageStore(tmp_path / "s", config(transaction_check_interval=100)) as store:
        answers = Answers({b"late": COMMIT})
        with TransactionProducer(store, "pg", checker=answers, offsets=offsets_of(store)) as p:
            p.send_in_transaction("T", b"late", local_transaction=lambda b, a: UNKNOW)
            deadline = time.monotonic() + 30
            while bodies(store, "T") != [b"late"] and time.monotonic() < deadline:
                time.sleep(0.05)
        assert bodies(store, "T") == [b"late"]
        assert len(answers.asked) == 1


CHILD = """
import os, signal, sys
import rmq
from rmq.transaction import TransactionProducer
store = rmq.MessageStore(sys.argv[1], rmq.StoreConfig(transaction_time_out={timeout}))
p = TransactionProducer(store, "pg")
p.send_in_transaction("T", b"committed-before", local_transaction=lambda b, a: "COMMIT_MESSAGE")
def die(body, arg):
    os.kill(os.getpid(), signal.SIGKILL)
p.send_in_transaction("T", b"in-flight", local_transaction=die)
"""


def test_kill_9_between_half_and_end_is_resolved_by_the_check_after_restart(tmp_path: Path) -> None:
    path = tmp_path / "s"
    proc = subprocess.run([sys.executable, "-c", CHILD.format(timeout=TIMEOUT_MS), str(path)], check=False)
    assert proc.returncode == -signal.SIGKILL
    with rmq.MessageStore(path, config()) as store:
        assert bodies(store, "T") == [b"committed-before"]
        answers = Answers({b"in-flight": COMMIT, b"committed-before": COMMIT})
        with TransactionProducer(store, "pg", checker=answers, offsets=offsets_of(store)) as p:
            wait_past_timeout()
            p.check_now()
            wait_past_timeout()
            p.check_now()
        # Only the open half is asked about; the committed one is known done from its op record.
        assert [m.body for m in answers.asked] == [b"in-flight"]
        assert bodies(store, "T") == [b"committed-before", b"in-flight"]


def test_bad_ends_are_typed_errors_that_write_nothing(store: rmq.MessageStore) -> None:
    p = TransactionProducer(store, "pg")
    plain = store.put("T", b"plain")
    half = p.send_half("T", b"h")
    end, ops = store.max_offset, 0

    def refused(commit_log_offset: int, queue_offset: int, group: str = "pg") -> None:
        with pytest.raises(rmq.TransactionError):
            TransactionProducer(store, group).end(commit_log_offset, queue_offset, COMMIT)
        assert store.max_offset == end
        assert store.next_queue_offset(OP_TOPIC, 0) == ops
        assert store.next_queue_offset("T", 0) == 1

    refused(plain.wrote_offset, plain.queue_offset)  # not a half message
    refused(half.wrote_offset + 1, half.queue_offset)  # no record starts there
    refused(end + 1000, 0)  # past the end
    refused(half.wrote_offset, half.queue_offset, group="other")  # another producer group
    refused(half.wrote_offset, half.queue_offset + 1)  # wrong tranStateTableOffset
    with pytest.raises(rmq.TransactionError):
        p.end(-1, 0, COMMIT)
    assert bodies(store, "T") == [b"plain"]
    p.end_transaction(half, ROLLBACK)
    end, ops = store.max_offset, 1
    refused(half.wrote_offset, half.queue_offset)  # already ended
    with pytest.raises(rmq.ArgumentTypeError):
        p.end_transaction(half, "MAYBE")  # type: ignore[arg-type]
    with pytest.raises(rmq.ArgumentTypeError):
        TransactionProducer(store, "pg", checker=lambda m: COMMIT)  # a checker needs the offsets manager
    assert bodies(store, "T") == [b"plain"]


def test_a_commit_whose_op_record_cannot_be_written_writes_nothing_and_can_be_retried(tmp_path: Path) -> None:
    """The commit and its op record are one append: when the op record would need a new segment and the disk
    is full, the end fails having written neither (RocketMQ writes the commit first, so its failure leaves the
    message committed and the half open)."""
    segment = 64 * 1024
    root = tmp_path / "store"
    store = rmq.MessageStore(root, config(mapped_file_size_commit_log=segment), start_services=False)
    p = TransactionProducer(store, "pg")
    committed, op = p.end_transaction(p.send_half("Real", b"first"), COMMIT)
    assert committed is not None and op is not None
    assert op.wrote_offset == committed.wrote_offset + committed.wrote_bytes  # back to back, commit first
    half = p.send_half("Real", b"B" * 200)
    commit_size = committed.wrote_bytes + 195  # the same record with a 200-byte body
    # Pad the segment so that the commit fits in it, with room for the end-of-file blank, and the op does not.
    pad = store.put("Pad", b"p")
    left = segment - store.max_offset % segment
    store.put("Pad", b"p" * (left - (commit_size + 8 + 16) - (pad.wrote_bytes - 1)))
    assert segment - store.max_offset % segment == commit_size + 8 + 16 < commit_size + op.wrote_bytes + 8
    end, real, ops = store.max_offset, store.next_queue_offset("Real", 0), store.next_queue_offset(OP_TOPIC, 0)
    with injected_fault("allocate", times=None, errno=errno.ENOSPC, path=root / "commitlog"):
        with pytest.raises(rmq.DiskFullError):
            p.end_transaction(half, COMMIT)
    assert (store.max_offset, store.next_queue_offset("Real", 0), store.next_queue_offset(OP_TOPIC, 0)) == (
        end,
        real,
        ops,
    )
    assert bodies(store, "Real", queues=1) == [b"first"]
    # Nothing was ended: the retry commits it, once, with its op record in the next segment.
    committed, op = p.end_transaction(half, COMMIT)
    assert committed is not None and op is not None
    assert committed.wrote_offset == end - end % segment + segment
    assert op.wrote_offset == committed.wrote_offset + committed.wrote_bytes
    assert bodies(store, "Real", queues=1) == sorted([b"first", b"B" * 200])
    with pytest.raises(rmq.TransactionError):
        p.end_transaction(half, ROLLBACK)
    store.close()
    with rmq.MessageStore(root, config(mapped_file_size_commit_log=segment), start_services=False) as again:
        assert bodies(again, "Real", queues=1) == sorted([b"first", b"B" * 200])
        assert again.next_queue_offset(OP_TOPIC, 0) == ops + 1


def test_an_end_after_the_check_immunity_time_is_refused_unless_answering_a_check(store: rmq.MessageStore) -> None:
    p = TransactionProducer(store, "pg")
    half = p.send_half("T", b"slow", check_immunity_seconds=1)
    time.sleep(1.3)
    with pytest.raises(rmq.TransactionError, match="ILLEGAL_OPERATION"):
        p.end_transaction(half, COMMIT)
    p.end_transaction(half, COMMIT, from_transaction_check=True)
    assert bodies(store, "T") == [b"slow"]


def test_reject_transaction_message_refuses_halves(tmp_path: Path) -> None:
    with rmq.MessageStore(tmp_path / "s", config(reject_transaction_message=True)) as store:
        with pytest.raises(rmq.TransactionError):
            TransactionProducer(store, "pg").send_half("T", b"x")
        assert store.max_offset == 0


def test_a_transaction_ended_through_a_check_cannot_be_ended_again_through_its_first_half(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with rmq.MessageStore(path, config()) as store:
        answers = Answers({b"once": COMMIT})
        offsets = offsets_of(store)
        with TransactionProducer(store, "pg", checker=answers, offsets=offsets) as p:
            first = p.send_half("T", b"once")
            wait_past_timeout()
            p.check_now()  # the check re-puts the half and the checker commits that copy
            assert len(answers.asked) == 1 and answers.asked[0].commit_log_offset != first.wrote_offset
            end = store.max_offset
            with pytest.raises(rmq.TransactionError, match="already"):
                p.end_transaction(first, COMMIT)
            assert store.max_offset == end
        offsets.close()
    # Also after a restart, when the ends are learnt from the op queue.
    with rmq.MessageStore(path, config()) as store:
        p = TransactionProducer(store, "pg")
        with pytest.raises(rmq.TransactionError, match="already"):
            p.end_transaction(first, ROLLBACK)
        assert bodies(store, "T") == [b"once"]


def test_a_closed_producer_sends_ends_and_checks_nothing(store: rmq.MessageStore) -> None:
    """Java's TransactionMQProducer refuses every send after shutdown() (makeSureStateOK); rmq's did not."""
    producer = TransactionProducer(store, "PG", checker=Answers(), offsets=offsets_of(store))
    half = producer.send_half("T", b"before close")
    producer.close()
    assert producer.closed
    end_before = store.max_offset
    with pytest.raises(rmq.StoreStateError, match="closed"):
        producer.send_half("T", b"after close")
    with pytest.raises(rmq.StoreStateError, match="closed"):
        producer.send_in_transaction("T", b"after close", local_transaction=lambda body, arg: COMMIT)
    with pytest.raises(rmq.StoreStateError, match="closed"):
        producer.end_transaction(half, COMMIT)
    with pytest.raises(rmq.StoreStateError, match="closed"):
        producer.check_now()
    producer.close()
    assert store.max_offset == end_before
    # The half is still pending and a new producer of the group ends it.
    with TransactionProducer(store, "PG") as again:
        committed, op = again.end_transaction(half, COMMIT)
    assert committed is not None and op is not None
    assert bodies(store, "T") == [b"before close"]


def test_two_transactions_that_share_a_uniq_key_are_each_committed(tmp_path: Path) -> None:
    """A producer may give two transactions the same UNIQ_KEY (RocketMQ commits both). rmq took the second for
    an end of the first and refused it, and the check then discarded it after transaction_check_max."""
    path = tmp_path / "s"
    with rmq.MessageStore(path, config()) as store:
        p = TransactionProducer(store, "pg")
        one = p.send_half("T", b"one", properties={"UNIQ_KEY": "BIZ-1"})
        two = p.send_half("T", b"two", properties={"UNIQ_KEY": "BIZ-1"})
        assert one.uniq_key == two.uniq_key == "BIZ-1"
        p.end_transaction(one, COMMIT)
        p.end_transaction(two, COMMIT)
        assert bodies(store, "T") == [b"one", b"two"]
        with pytest.raises(rmq.TransactionError, match="already"):
            p.end_transaction(two, ROLLBACK)
        three = p.send_half("T", b"three", properties={"UNIQ_KEY": "BIZ-1"})
    # After a restart the ends are learnt from the op queue, each by its own transaction.
    with rmq.MessageStore(path, config()) as store:
        p = TransactionProducer(store, "pg")
        with pytest.raises(rmq.TransactionError, match="already"):
            p.end_transaction(one, COMMIT)
        p.end_transaction(three, COMMIT)
        assert bodies(store, "T") == [b"one", b"three", b"two"]


def test_a_copy_of_a_half_whose_transaction_was_ended_is_done_not_checked_again(tmp_path: Path) -> None:
    """The check re-put a copy and the checker said UNKNOW; then the producer committed the original half. The
    copy was asked about at every round (each COMMIT answer refused as already ended) until it was discarded to
    TRANS_CHECK_MAX_TIME_TOPIC, a committed message looking abandoned. Now the round marks it done with an op
    record."""
    with rmq.MessageStore(tmp_path / "s", config(transaction_check_max=3)) as store:
        answers = Answers()
        offsets = offsets_of(store)
        with TransactionProducer(store, "pg", checker=answers, offsets=offsets) as p:
            half = p.send_half("T", b"x")
            wait_past_timeout()
            assert p.check_now()["checks"] == 1  # a copy re-put; UNKNOW
            p.end_transaction(half, COMMIT)
            answers.table[b"x"] = COMMIT
            answers.asked.clear()
            done = 0
            for _ in range(5):
                wait_past_timeout()
                r = p.check_now()
                assert r["checks"] == 0 and r["discarded"] == 0, r
                done += r["done"]
            assert answers.asked == []
            assert done >= 1
        store.wait_dispatched()
        assert bodies(store, "T") == [b"x"]
        assert store.get_max_offset_in_queue(CHECK_MAX_TIME_TOPIC, 0) == 0
        offsets.close()


@pytest.mark.parametrize("bad", [-1, -(2**63)])
def test_a_negative_check_timeout_is_an_invalid_argument_and_checks_nothing(tmp_path: Path, bad: int) -> None:
    """QA: `transaction_check(timeout_ms=-1)` raised a bare ValueError; now `InvalidArgumentError` (also a
    `ValueError`), as the store's waits refuse a negative timeout, and no round runs."""
    with rmq.MessageStore(tmp_path / "s", config()) as store:
        with TransactionProducer(store, "pg") as p:
            p.send_half("T", b"half")
        end = store.max_offset
        with pytest.raises(rmq.InvalidArgumentError, match="timeout_ms must be a number of milliseconds, 0 or more"):
            rmq._native.transaction_check(store, timeout_ms=bad)
        assert store.max_offset == end
