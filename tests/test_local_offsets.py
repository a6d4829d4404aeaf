"""Broadcasting consumers and their own offsets (`rmq.local_offsets.LocalFileOffsetStore`, RocketMQ's client-side
`LocalFileOffsetStore`): every consumer gets every message, keeps `<dir>/<client id>/<group>/offsets.json`, resumes
from it, and drops failed messages; the file is byte-for-byte what RocketMQ 5.3.1's client writes after the same
history (checked against the real client with `rmq.harness.OrderlyDriver`), and each side reads the other's."""

from __future__ import annotations

import collections
import os
import random
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from test_interop import HARNESS, maven_classpath

import rmq
from conftest import small_config
from rmq.local_offsets import LocalFileOffsetStore, decode_local_offsets, encode_local_offsets
from rmq.push import ConsumeContext, ConsumeFromWhere, ConsumeStatus, MessageModel, PushConsumer, retry_topic

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
BROADCASTING = MessageModel.BROADCASTING
CFG = small_config(mapped_file_size_commit_log=1 << 20)
Entry = tuple[str, str, int, int]


def wait_until(cond: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def put_all(store: rmq.MessageStore, n: int, queues: int = 4, start: int = 0) -> list[bytes]:
    bodies = [b"order-%05d" % i for i in range(start, start + n)]
    for i, body in enumerate(bodies, start):
        store.put("Orders", body, queue_id=i % queues)
    assert store.wait_dispatched()
    return bodies


class Recorder:
    def __init__(self, fail: Callable[[rmq.MessageExt], bool] = lambda m: False) -> None:
        self.lock = threading.Lock()
        self.bodies: collections.Counter[bytes] = collections.Counter()
        self.fail = fail

    def __call__(self, msgs: list[rmq.MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        with self.lock:
            self.bodies.update(m.body for m in msgs)
        return ConsumeStatus.RECONSUME_LATER if any(map(self.fail, msgs)) else ConsumeStatus.CONSUME_SUCCESS

    def count(self) -> int:
        with self.lock:
            return sum(self.bodies.values())


def broadcaster(store: rmq.MessageStore, listener: object, cid: str, root: Path, **kw: object) -> PushConsumer:
    return PushConsumer(
        store,
        "G",
        "Orders",
        listener,  # type: ignore[arg-type]
        consumer_id=cid,
        message_model=BROADCASTING,
        local_offset_store_dir=root,
        consume_from_where=FIRST,
        **kw,  # type: ignore[arg-type]
    )


# -- broadcasting consumers ------------------------------------------------------------------------------------


def test_every_consumer_gets_every_message_and_keeps_its_own_offsets(tmp_path: Path) -> None:
    root = tmp_path / "offsets"
    with rmq.MessageStore(tmp_path / "s", CFG) as store:
        bodies = put_all(store, 200)
        a, b = Recorder(), Recorder()
        ca = broadcaster(store, a, "10.0.0.1@a", root).start()
        cb = broadcaster(store, b, "10.0.0.2@b", root).start()
        wait_until(lambda: a.count() >= 200 and b.count() >= 200)
        # No rebalance among members: each holds every queue of the topic, and no retry topic.
        assert (
            ca.assigned_queues()
            == cb.assigned_queues()
            == [rmq.MessageQueue("Orders", "broker-a", q) for q in range(4)]
        )
        ca.shutdown()
        cb.shutdown()
        assert a.bodies == b.bodies == collections.Counter(bodies)
    for cid in ("10.0.0.1@a", "10.0.0.2@b"):
        path = root / cid / "G" / "offsets.json"
        entries, issues = decode_local_offsets(path.read_bytes())
        assert not issues
        assert sorted(entries) == [("Orders", "broker-a", q, 50) for q in range(4)]
    assert (
        isinstance(ca.offsets, LocalFileOffsetStore) and ca.offsets.path == root / "10.0.0.1@a" / "G" / "offsets.json"
    )


def test_restart_resumes_from_its_own_offsets(tmp_path: Path) -> None:
    root = tmp_path / "offsets"
    with rmq.MessageStore(tmp_path / "s", CFG) as store:
        put_all(store, 100)
        first, other = Recorder(), Recorder()
        with broadcaster(store, first, "me", root), broadcaster(store, other, "other", root):
            wait_until(lambda: first.count() >= 100 and other.count() >= 50)
        later = put_all(store, 60, start=100)
        again = Recorder()
        with broadcaster(store, again, "me", root):  # the same client id: its own file
            wait_until(lambda: again.count() >= 60)
            time.sleep(0.1)
        assert again.bodies == collections.Counter(later), "only what arrived since its shutdown"
        fresh = Recorder()
        with broadcaster(store, fresh, "new", root):  # another id starts over (CONSUME_FROM_FIRST_OFFSET)
            wait_until(lambda: fresh.count() >= 160)


def test_a_failed_message_is_dropped_not_sent_back(tmp_path: Path) -> None:
    root = tmp_path / "offsets"
    with rmq.MessageStore(tmp_path / "s", CFG) as store:
        put_all(store, 20)
        rec = Recorder(fail=lambda m: m.body.endswith(b"7"))
        with broadcaster(store, rec, "me", root) as c:
            wait_until(lambda: c.offsets.query_offset("G", "Orders", 3) == 5 and rec.count() >= 20)
            time.sleep(0.1)
        assert rec.bodies == collections.Counter(b"order-%05d" % i for i in range(20)), "each once, none retried"
        assert c.stats.dropped_failures == 2 and c.stats.sent_to_retry == c.stats.sent_to_dlq == 0
        assert store.get_max_offset_in_queue(retry_topic("G"), 0) == 0
        assert c.offsets.query_offset("G", "Orders", 3) == 5


def test_broadcasting_orderly(tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []

    def listener(msgs: list[rmq.MessageExt], ctx: rmq.ConsumeOrderlyContext) -> rmq.ConsumeOrderlyStatus:
        seen.extend((m.queue_id, m.queue_offset) for m in msgs)
        return rmq.ConsumeOrderlyStatus.SUCCESS

    with rmq.MessageStore(tmp_path / "s", CFG) as store:
        put_all(store, 40)
        with broadcaster(store, listener, "me", tmp_path / "offsets", orderly=True) as c:
            wait_until(lambda: len(seen) >= 40)
        for q in range(4):
            assert [o for qq, o in seen if qq == q] == list(range(10))
        assert c.offsets.query_offset("G", "Orders", 0) == 10


def test_arguments(tmp_path: Path) -> None:
    with rmq.MessageStore(tmp_path / "s", CFG) as store:
        ok = Recorder()
        with pytest.raises(rmq.ArgumentTypeError):
            PushConsumer(store, "G", "Orders", ok, message_model="BROADCASTING")  # type: ignore[arg-type]
        with pytest.raises(rmq.ArgumentTypeError):
            PushConsumer(store, "G", "Orders", ok)  # clustering needs a ConsumerOffsetManager
        with pytest.raises(rmq.ArgumentTypeError):
            broadcaster(store, ok, "me", 5)  # type: ignore[arg-type]
        offsets = rmq.ConsumerOffsetManager(tmp_path / "o.json")
        with pytest.raises(rmq.InvalidArgumentError):
            PushConsumer(store, "G", "Orders", ok, offsets=offsets, local_offset_store_dir=tmp_path)
        with pytest.raises(rmq.ArgumentTypeError):
            PushConsumer(store, "G", "Orders", ok, offsets=offsets, message_model=BROADCASTING)
        mine = LocalFileOffsetStore("me", "G", local_offset_store_dir=tmp_path)
        c = PushConsumer(store, "G", "Orders", ok, offsets=mine, message_model=BROADCASTING)
        assert c.offsets is mine
        with pytest.raises(rmq.InvalidArgumentError):
            mine.commit_offset("other-group", "Orders", 0, 1)
        for bad in ("..", "a/b", ""):
            with pytest.raises(rmq.InvalidArgumentError):
                LocalFileOffsetStore(bad, "G", local_offset_store_dir=tmp_path)
        assert not (tmp_path / "me").exists(), "nothing written before a persist"


# -- the file ----------------------------------------------------------------------------------------------------


def test_persist_keeps_the_previous_file_as_bak_and_load_falls_back_to_it(tmp_path: Path) -> None:
    s = LocalFileOffsetStore("c", "G", local_offset_store_dir=tmp_path)
    assert s.query_offset("G", "T", 0) == -1
    s.commit_offset("G", "T", 0, 5)
    s.persist()
    first = s.path.read_bytes()
    s.commit_offset("G", "T", 0, 9)
    s.commit_offset("G", "T", 1, 3, journal=True)  # persisted at once
    assert s.bak_path.read_bytes() == first
    assert LocalFileOffsetStore("c", "G", local_offset_store_dir=tmp_path).table() == {
        ("T", "broker-a", 0): 9,
        ("T", "broker-a", 1): 3,
    }
    for damage in (b"", b'{"offsetTable":{{', b"\x00" * 40):
        s.path.write_bytes(damage)
        back = LocalFileOffsetStore("c", "G", local_offset_store_dir=tmp_path)
        assert back.table() == {("T", "broker-a", 0): 5}, "the previous version, from .bak"
    s.path.unlink()
    assert LocalFileOffsetStore("c", "G", local_offset_store_dir=tmp_path).table() == {("T", "broker-a", 0): 5}
    assert not list(s.path.parent.glob("*.tmp"))


def test_file_round_trip_and_bad_input() -> None:
    rng = random.Random(7)
    entries = [
        (rng.choice(["Orders", "%RETRY%G", 't\u00e9"\\\n']), rng.choice(["broker-a", "b"]), q, rng.randrange(1 << 40))
        for q in range(30)
    ]
    text = encode_local_offsets([], entries)
    back, issues = decode_local_offsets(text.encode())
    assert not issues and sorted(back) == sorted(entries)
    assert encode_local_offsets(back, []) == text == encode_local_offsets(back, back)
    with pytest.raises(rmq.CorruptionError):
        decode_local_offsets(b'{"offsetTable":{{', "x.json")
    with pytest.raises(rmq.ArgumentTypeError):
        encode_local_offsets([], [("T", "b", "0", 1)])  # type: ignore[list-item]
    with pytest.raises(rmq.InvalidArgumentError):
        encode_local_offsets([], [("T", "b", 1 << 31, 1)])


# -- against RocketMQ 5.3.1's client --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client() -> Callable[..., None]:
    """Runs `rmq.harness.OrderlyDriver COMMAND CLIENT_ID GROUP FILE` with the offsets under a directory."""
    classpath = maven_classpath(HARNESS)

    def run(root: Path, *args: str | Path) -> None:
        proc = subprocess.run(
            ["java", f"-Drocketmq.client.localOffsetStoreDir={root}", "-cp", classpath, "rmq.harness.OrderlyDriver",
             *map(str, args)],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    return run


def tsv(path: Path, entries: list[Entry]) -> Path:
    path.write_text("".join(f"{t}\t{b}\t{q}\t{o}\n" for t, b, q, o in entries), encoding="utf-8")
    return path


def test_rmq_writes_the_bytes_rocketmqs_client_writes(client: Callable[..., None], tmp_path: Path) -> None:
    """Three rounds of commits (new queues and updated ones, enough to grow Java's maps) by a starting consumer
    that loads the file, commits and persists: Java's files and rmq's are the same bytes, .bak included."""
    rng = random.Random(18)
    topics = ["Orders", "%RETRY%G", "Pay\u00e9", "t-" + "x" * 40]
    java_root, rmq_root = tmp_path / "java", tmp_path / "rmq"
    for round_ in range(3):
        updates = [
            (rng.choice(topics), rng.choice(["broker-a", "broker-b"]), rng.randrange(16), rng.randrange(1 << 34))
            for _ in range(rng.randrange(5, 25))
        ]
        client(java_root, "write", "10.0.0.1@7#1", "G", tsv(tmp_path / f"in{round_}.tsv", updates))
        ours = LocalFileOffsetStore("10.0.0.1@7#1", "G", local_offset_store_dir=rmq_root, broker_name="unused")
        for t, b, q, o in updates:
            ours._table[(t, b, q)] = o  # the broker name comes with each entry here
        ours.persist()
        java_file = java_root / "10.0.0.1@7#1" / "G" / "offsets.json"
        assert ours.path.read_bytes() == java_file.read_bytes(), f"round {round_}"
        if round_:
            assert ours.bak_path.read_bytes() == java_file.with_name("offsets.json.bak").read_bytes()


def test_each_side_reads_the_others_file(client: Callable[..., None], tmp_path: Path) -> None:
    entries = [("Orders", "broker-a", q, 100 + q) for q in range(6)] + [("%RETRY%G", "broker-a", 0, 3)]
    client(tmp_path, "write", "j", "G", tsv(tmp_path / "in.tsv", entries))
    theirs = LocalFileOffsetStore("j", "G", local_offset_store_dir=tmp_path)
    assert sorted((t, b, q, o) for (t, b, q), o in theirs.table().items()) == sorted(entries)
    ours = LocalFileOffsetStore("r", "G", local_offset_store_dir=tmp_path)
    for t, _, q, o in entries:
        ours.commit_offset("G", t, q, o)
    ours.persist()
    client(tmp_path, "read", "r", "G", tmp_path / "out.tsv")
    read = [tuple(line.split("\t")) for line in (tmp_path / "out.tsv").read_text().splitlines()]
    assert sorted((t, b, int(q), int(o)) for t, b, q, o in read) == sorted(entries)
    assert os.path.exists(tmp_path / "r" / "G" / "offsets.json")
