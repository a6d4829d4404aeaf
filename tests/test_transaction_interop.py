"""Transactional messages against RocketMQ 5.3.1's own broker code (`rmq.harness.TransactionDriver`).

The driver runs the real `TransactionalMessageServiceImpl.prepareMessage` (the bridge's `parseHalfMessageInner`),
`EndTransactionProcessor.processRequest` and `TransactionalMessageServiceImpl.check` over a real
`DefaultMessageStore`, with a minimal `BrokerController`. Both sides run one scenario: six halves of group TxGroup,
then commit 0, rollback 1, commit 2, rollback 4 (3 and 5 stay open). Java and Maven are needed, as for
test_interop.py.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from test_interop import CONFIG, HARNESS, maven_classpath

import rmq
from rmq import _native
from rmq.transaction import CHECK_GROUP, HALF_TOPIC, OP_TOPIC, CheckedMessage, LocalTransactionState

Driver = Callable[..., str]
TOPIC, GROUP = "TxTopic", "TxGroup"
ENDS = [(0, True), (1, False), (2, True), (4, False)]
#: Byte ranges that legitimately differ between two stores: the store timestamp (IPv4 born host), and the born
#: timestamp of op records (the broker's clock when it wrote them).
STORE_TS = range(56, 64)
BORN_TS = range(40, 48)


def uniq_of(i: int) -> str:
    return f"7F000001000000000000000000000{i:03X}"


@pytest.fixture(scope="module")
def driver() -> Driver:
    classpath = maven_classpath(HARNESS)

    def run(*args: str | Path) -> str:
        proc = subprocess.run(
            ["java", "-cp", classpath, "rmq.harness.TransactionDriver", *map(str, args)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert proc.returncode == 0, (
            f"TransactionDriver {args[0]} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
        return proc.stdout.strip().splitlines()[-1]

    return run


def rmq_scenario(path: Path, born: int) -> list[rmq.PutResult]:
    """The driver's `write` scenario through rmq's producer path and `end_transaction`."""
    with rmq.MessageStore(path, CONFIG) as store:
        halves = []
        for i in range(6):
            props = {"app": f"v{i}"} if i == 5 else {}
            props |= {"TRAN_MSG": "true", "PGROUP": GROUP, "UNIQ_KEY": uniq_of(i)}
            halves.append(
                store.put(
                    TOPIC,
                    f"tx-body-{i}".encode(),
                    queue_id=i % 4,
                    tags="TagA" if i % 2 == 0 else None,
                    keys=f"key{i}" if i % 3 == 0 else None,
                    properties=props,
                    transaction_type=rmq.TransactionType.PREPARED,
                    born_host="10.0.0.1:40000",
                    born_timestamp=born,
                )
            )
        for i, commit in ENDS:
            _native.end_transaction(store, GROUP, halves[i].wrote_offset, halves[i].queue_offset, commit)
        return halves


def records(path: Path, start: int = 0) -> list[tuple[int, str, bytes]]:
    with rmq.MessageStore(path, CONFIG, read_only=True) as store:
        out = []
        for m in store.scan(start):
            raw = store.read_raw(m.commitlog_offset)
            assert raw is not None
            out.append((m.commitlog_offset, m.topic, bytes(raw)))
        return out


def masked(topic: str, raw: bytes) -> bytes:
    b = bytearray(raw)
    for k in STORE_TS:
        b[k] = 0
    if topic == OP_TOPIC:
        for k in BORN_TS:
            b[k] = 0
    return bytes(b)


def assert_same_records(ours: list[tuple[int, str, bytes]], theirs: list[tuple[int, str, bytes]]) -> None:
    assert [(o, t) for o, t, _ in ours] == [(o, t) for o, t, _ in theirs]
    for (offset, topic, a), (_, _, b) in zip(ours, theirs, strict=True):
        assert masked(topic, a) == masked(topic, b), f"record at {offset} ({topic}) differs"


def visible(path: Path) -> list[bytes]:
    """Bodies a consumer of TOPIC gets, over all its queues."""
    with rmq.MessageStore(path, CONFIG, read_only=True) as store:
        bodies = []
        for q in range(4):
            r = store.get_message("c", TOPIC, q, 0, 32)
            bodies += [m.body for m in r.messages]
        return sorted(bodies)


@pytest.fixture(scope="module")
def stores(driver: Driver, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The scenario written by RocketMQ and by rmq, with the same born time (a minute ago)."""
    root = tmp_path_factory.mktemp("tx")
    born = int(time.time() * 1000) - 60_000
    java, ours = root / "java", root / "rmq"
    assert driver("write", java, born) == "written"
    rmq_scenario(ours, born)
    return {"java": java, "rmq": ours}


def test_half_committed_and_op_records_are_the_bytes_rocketmq_writes(stores: dict[str, Path]) -> None:
    ours, theirs = records(stores["rmq"]), records(stores["java"])
    assert [t for _, t, _ in ours].count(HALF_TOPIC) == 6
    assert [t for _, t, _ in ours].count(OP_TOPIC) == 4
    assert [t for _, t, _ in ours].count(TOPIC) == 2
    assert_same_records(ours, theirs)
    assert visible(stores["rmq"]) == visible(stores["java"]) == [b"tx-body-0", b"tx-body-2"]


def test_rocketmqs_check_resolves_a_store_rmq_wrote(driver: Driver, stores: dict[str, Path], tmp_path: Path) -> None:
    copy = tmp_path / "rmq"
    shutil.copytree(stores["rmq"], copy)
    out = tmp_path / "checks.txt"
    driver("check", copy, 1000, 15, out)
    lines = out.read_text().splitlines()
    # The ended halves are found done through rmq's op records; only the open ones are asked about.
    assert sorted(line.split()[1] for line in lines) == [uniq_of(3), uniq_of(5)]
    assert all(line.split()[0] == "check" and line.split()[4] == "1" for line in lines)
    offsets = rmq.ConsumerOffsetManager(copy / "config" / "consumerOffset.json")
    offsets.load()
    assert offsets.query_offset(CHECK_GROUP, HALF_TOPIC, 0) == 6
    assert offsets.query_offset(CHECK_GROUP, OP_TOPIC, 0) == 4


def test_rmqs_check_resolves_a_store_rocketmq_wrote_and_renews_halves_as_java_does(
    driver: Driver, stores: dict[str, Path], tmp_path: Path
) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    shutil.copytree(stores["java"], ours)
    shutil.copytree(stores["java"], theirs)
    end = max(o + len(raw) for o, _, raw in records(ours))
    driver("check", theirs, 1000, 15, tmp_path / "checks.txt")

    asked: list[CheckedMessage] = []

    def checker(msg: CheckedMessage) -> LocalTransactionState:
        asked.append(msg)
        ok = msg.transaction_id == uniq_of(3)
        return LocalTransactionState.COMMIT_MESSAGE if ok else LocalTransactionState.ROLLBACK_MESSAGE

    cfg = dataclasses.replace(CONFIG, transaction_time_out=1000)
    with rmq.MessageStore(ours, cfg) as store:
        offsets = rmq.ConsumerOffsetManager(store.consumer_offset_path)
        offsets.load()
        with rmq.TransactionProducer(store, GROUP, checker=checker, offsets=offsets) as producer:
            assert producer.check_now()["checks"] == 2
        offsets.close()
    assert sorted(m.transaction_id for m in asked) == [uniq_of(3), uniq_of(5)]
    assert all(m.check_times == 1 and m.topic == TOPIC for m in asked)
    # The renewed halves are the bytes Java's check writes (TRANSACTION_CHECK_TIMES in the broker map's order).
    renewed_ours = [r for r in records(ours, end) if r[1] == HALF_TOPIC]
    renewed_theirs = [r for r in records(theirs, end) if r[1] == HALF_TOPIC]
    assert len(renewed_ours) == 2
    assert_same_records(renewed_ours, renewed_theirs)
    # The answers applied: 3 committed, 5 rolled back.
    assert visible(ours) == [b"tx-body-0", b"tx-body-2", b"tx-body-3"]


def test_rmq_reads_op_records_rocketmq_batched(driver: Driver, tmp_path: Path) -> None:
    """5.3.1's `TransactionalOpBatchService` writes one op record for the ends of a batch interval
    (`0,1,2,4,`): rmq's check and its refusal of a second end both read it."""
    path = tmp_path / "batched"
    assert driver("write", path, int(time.time() * 1000) - 60_000, 3000) == "written"
    ops = [raw for _, topic, raw in records(path) if topic == OP_TOPIC]
    assert len(ops) == 1
    asked: list[CheckedMessage] = []
    cfg = dataclasses.replace(CONFIG, transaction_time_out=1000)
    with rmq.MessageStore(path, cfg) as store:
        producer = rmq.TransactionProducer(store, GROUP)
        half1 = store.read(store.get_message("x", HALF_TOPIC, 0, 1, 1).messages[0].commitlog_offset)
        assert half1 is not None
        with pytest.raises(rmq.TransactionError, match="already"):
            producer.end(half1.commitlog_offset, half1.queue_offset, LocalTransactionState.COMMIT_MESSAGE)
        offsets = rmq.ConsumerOffsetManager(store.consumer_offset_path)
        with rmq.TransactionProducer(store, GROUP, checker=asked.append, offsets=offsets) as checking:
            r = checking.check_now()
        assert (r["checks"], r["done"]) == (2, 4)
        assert offsets.query_offset(CHECK_GROUP, OP_TOPIC, 0) == 1
    assert sorted(m.transaction_id for m in asked) == [uniq_of(3), uniq_of(5)]
