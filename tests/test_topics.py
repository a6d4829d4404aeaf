"""Topic configuration: `store.create_topic` and `config/topics.json`, against RocketMQ 5.3.1's TopicConfigManager.

The interop tests run `rmq.harness.TopicsDriver` (tests/interop/harness, built with Maven as tests/test_interop.py
builds it): Java writes files rmq reads and re-encodes to the same bytes, and Java reads and re-encodes rmq's files
to the same bytes. Tables are randomized (a few hundred topics, attributes) so that hash-bin collisions decide
part of the order.
"""

from __future__ import annotations

import random
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from test_interop import HARNESS, maven_classpath

import rmq
from conftest import load_beside_a_persist_between_its_renames, snapshot
from rmq import _native
from rmq.consumer import topic_queues
from rmq.push import ConsumeStatus, PushConsumer
from rmq.topics import TopicConfig, TopicConfigManager

ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-%|"


@pytest.fixture
def store(tmp_path: Path) -> Any:
    with rmq.MessageStore(tmp_path / "store") as s:
        yield s


def test_create_topic_persists_and_a_new_open_sees_it(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with rmq.MessageStore(root) as s:
        cfg = s.create_topic("Orders", 4, write_queues=2, perm=6, order=True, attributes={"+message.type": "FIFO"})
        assert cfg == TopicConfig("Orders", 4, 2, 6, True, 0, "SINGLE_TAG", {"+message.type": "FIFO"})
        first = Path(s.topics_path).read_bytes()
        s.create_topic("TopicTest")
        assert Path(s.topics_path + ".bak").read_bytes() == first  # ConfigManager.persist keeps the previous file
    with rmq.MessageStore(root) as s:
        assert set(s.topic_configs()) == {"TopicTest", "Orders"}
        assert s.topic_config("TopicTest") == TopicConfig("TopicTest", 8, 8)
        assert s.topic_config("Nope") is None
        assert s.delete_topic("Orders") is True
        assert s.delete_topic("Orders") is False
        assert set(s.topic_configs()) == {"TopicTest"}


def test_a_second_process_view_sees_changes(tmp_path: Path) -> None:
    path = tmp_path / "config" / "topics.json"
    a, b = TopicConfigManager(path, refresh_interval=0), TopicConfigManager(path, refresh_interval=0)
    a.load()
    b.load()
    a.put(TopicConfig("A", 2, 2))
    b.put(TopicConfig("B", 3, 3))  # re-reads under the lock: A is kept
    assert set(a.topics()) == set(b.topics()) == {"A", "B"}
    assert b.data_version[0] == 2


@pytest.mark.parametrize(
    ("args", "kwargs", "error"),
    [
        (("SCHEDULE_TOPIC_XXXX",), {}, rmq.InvalidTopicError),
        (("rmq_sys_x",), {}, rmq.InvalidTopicError),
        (("bad topic",), {}, rmq.InvalidTopicError),
        (("x" * 128,), {}, rmq.InvalidTopicError),
        (("",), {}, rmq.InvalidTopicError),
        ((5,), {}, rmq.ArgumentTypeError),
        (("T", 0), {}, rmq.InvalidArgumentError),
        (("T", 70000), {}, rmq.InvalidArgumentError),
        (("T", True), {}, rmq.ArgumentTypeError),
        (("T",), {"read_queues": -1}, rmq.InvalidArgumentError),
        (("T",), {"perm": 8}, rmq.InvalidArgumentError),
        (("T",), {"order": 1}, rmq.ArgumentTypeError),
        (("T",), {"attributes": {"a": 1}}, rmq.ArgumentTypeError),
        (("T",), {"attributes": [("a", "b")]}, rmq.ArgumentTypeError),
    ],
)
def test_bad_input_is_refused_and_nothing_is_written(store: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                                                     error: type[Exception]) -> None:  # fmt: skip
    with pytest.raises(error):
        store.create_topic(*args, **kwargs)
    assert not Path(store.topics_path).parent.exists() or not Path(store.topics_path).exists()


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("../x", rmq.InvalidTopicError),
        ("a/b", rmq.InvalidTopicError),
        ("", rmq.InvalidTopicError),
        ("x" * 128, rmq.InvalidTopicError),
        ("SCHEDULE_TOPIC_XXXX", rmq.InvalidTopicError),
        (5, rmq.ArgumentTypeError),
    ],
)
def test_delete_topic_refuses_bad_names_and_writes_nothing(tmp_path: Path, name: Any, error: type[Exception]) -> None:
    root = tmp_path / "store"
    with rmq.MessageStore(root) as s:
        before, mtime = snapshot(root), root.stat().st_mtime_ns
        with pytest.raises(error):
            s.delete_topic(name)
        assert snapshot(root) == before and root.stat().st_mtime_ns == mtime


def test_deleting_a_topic_that_is_not_configured_writes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with rmq.MessageStore(root) as s:
        before = snapshot(root)
        assert s.delete_topic("Absent") is False
        assert snapshot(root) == before, "no config directory, no lock file"
        s.create_topic("T", 2)
        before = snapshot(root)
        assert s.delete_topic("Absent") is False
        assert snapshot(root) == before
        assert s.delete_topic("T") is True
        assert s.topic_config("T") is None


def test_read_only_store_refuses_changes(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with rmq.MessageStore(root) as s:
        s.create_topic("T", 2)
    before = (root / "config" / "topics.json").read_bytes()
    with rmq.MessageStore(root, read_only=True) as s:
        assert s.topic_config("T") == TopicConfig("T", 2, 2)
        with pytest.raises(rmq.ReadOnlyError):
            s.create_topic("U")
        with pytest.raises(rmq.ReadOnlyError):
            s.delete_topic("T")
    assert (root / "config" / "topics.json").read_bytes() == before


def test_puts_past_the_configured_queues_are_refused(store: Any) -> None:
    store.create_topic("T", 4, write_queues=2)
    store.put("T", b"a", queue_id=3)  # below max(write, read) = 4, as the broker allows
    store.wait_dispatched()
    before = (store.max_offset, store.get_max_offset_in_queue("T", 3))
    with pytest.raises(rmq.InvalidArgumentError, match="illegal"):
        store.put("T", b"b", queue_id=4)
    with pytest.raises(rmq.InvalidArgumentError):
        store.put_batch("T", [b"c"], queue_id=9)
    store.wait_dispatched()
    assert (store.max_offset, store.get_max_offset_in_queue("T", 3)) == before
    store.put("Unconfigured", b"x", queue_id=100)  # auto-created topics take any queue id, as before


def test_the_queue_check_follows_reopen_delete_and_a_file_written_before_the_open(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with rmq.MessageStore(root) as s:
        s.create_topic("T", 2)
    with rmq.MessageStore(root) as s:  # the limits come from topics.json at open, before any other call
        with pytest.raises(rmq.InvalidArgumentError, match="illegal"):
            s.put("T", b"x", queue_id=2)
        assert s.delete_topic("T")
        assert s.put("T", b"x", queue_id=2).queue_offset == 0, "unconfigured again: any queue id"
        s.create_topic("T", 8)
        s.put("T", b"y", queue_id=7)
    # A file another tool wrote while the store was closed.
    m = TopicConfigManager(root / "config" / "topics.json")
    m.load()
    m.put(TopicConfig("T", 1, 1))
    with rmq.MessageStore(root) as s:
        with pytest.raises(rmq.InvalidArgumentError):
            s.put_batch("T", [b"z"], queue_id=1)
        assert s.put("T", b"z", queue_id=0).queue_offset == 0


def test_load_falls_back_to_bak(tmp_path: Path) -> None:
    path = tmp_path / "config" / "topics.json"
    m = TopicConfigManager(path)
    m.put(TopicConfig("A", 1, 1))
    m.put(TopicConfig("B", 2, 2))
    path.write_bytes(b'{"topicConfigTable":{"A":{"perm":"x"}}}')  # undecodable: .bak (A only) is loaded
    m2 = TopicConfigManager(path)
    assert m2.load()
    assert set(m2.topics()) == {"A"}
    assert m2.load_issues and "not a valid topics.json" in m2.load_issues[0][1]
    path.write_bytes(b"")
    (tmp_path / "config" / "topics.json.bak").write_bytes(b"\x00garbage")
    m3 = TopicConfigManager(path)
    assert not m3.load()
    assert m3.topics() == {}


def test_rebalance_uses_the_configured_read_queues(store: Any) -> None:
    store.create_topic("T", read_queues=6, write_queues=3)
    store.create_topic("Hidden", 4, perm=2)  # write-only: no queue to consume
    assert [q.queue_id for q in topic_queues(store, "T", 4)] == list(range(6))
    assert topic_queues(store, "Hidden") == []
    assert [q.queue_id for q in topic_queues(store, "Free", 2)] == [0, 1]
    offsets = rmq.ConsumerOffsetManager(Path(store.path) / "config" / "consumerOffset.json")

    def listener(msgs: list[Any], ctx: Any) -> ConsumeStatus:
        return ConsumeStatus.CONSUME_SUCCESS

    a = PushConsumer(store, "G", "T", listener, offsets=offsets, consumer_id="a").start()
    b = PushConsumer(store, "G", "T", listener, offsets=offsets, consumer_id="b").start()
    try:
        mine = [[q.queue_id for q in c.assigned_queues() if q.topic == "T"] for c in (a, b)]
        assert mine == [[0, 1, 2], [3, 4, 5]]
    finally:
        a.shutdown()
        b.shutdown()


# -- interop with RocketMQ 5.3.1 --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def driver() -> Any:
    classpath = maven_classpath(HARNESS)

    def run(*args: str | Path) -> None:
        proc = subprocess.run(
            ["java", "-cp", classpath, "rmq.harness.TopicsDriver", *map(str, args)],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert proc.returncode == 0, f"TopicsDriver {args[0]} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"

    return run


def random_topics(rng: random.Random, n: int) -> list[TopicConfig]:
    names: dict[str, None] = {}
    while len(names) < n:
        names["".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 12)))] = None
    out = []
    for name in names:
        attrs = {f"+k{rng.randint(0, 40)}": rng.choice(["FIFO", "NORMAL", "x"]) for _ in range(rng.randint(0, 3))}
        out.append(
            TopicConfig(
                name,
                rng.randint(1, 64),
                rng.randint(1, 64),
                rng.choice([2, 4, 6, 7]),
                rng.random() < 0.3,
                rng.choice([0, 0, 1]),
                rng.choice(["SINGLE_TAG", "MULTI_TAG"]),
                attrs,
            )
        )
    return out


def spec(topics: list[TopicConfig]) -> str:
    def line(t: TopicConfig) -> str:
        attrs = ",".join(f"{k}={v}" for k, v in t.attributes.items())
        return (f"{t.topic_name} {t.read_queue_nums} {t.write_queue_nums} {t.perm} {str(t.order).lower()} "
                f"{t.topic_sys_flag} {t.topic_filter_type} {attrs}")  # fmt: skip

    return "".join(line(t) + "\n" for t in topics)


def without_version(text: str) -> str:
    return re.sub(r'"dataVersion":\{[^}]*\}', "", text)


def rmq_encode(topics: list[TopicConfig], version: tuple[int, int, int]) -> str:
    table = _native.TopicConfigTable()
    for t in topics:
        table.put(t._tuple())
    return table.encode(*version)


def test_java_file_is_read_and_reencoded_to_the_same_bytes(driver: Any, tmp_path: Path) -> None:
    rng = random.Random(18)
    topics = random_topics(rng, 300)
    (tmp_path / "spec").write_text(spec(topics))
    driver("write", tmp_path / "spec", tmp_path / "java.json")
    m = TopicConfigManager(tmp_path / "java.json")
    assert m.load() and not m.load_issues
    assert m.topics() == {t.topic_name: t for t in topics}
    # Decoded and re-encoded: the bytes Java's own TopicConfigManager writes after loading the file. Those are the
    # file's own bytes unless keys share a hash bin (fastjson's intermediate map reorders them, in Java too).
    driver("reencode", tmp_path / "java.json", tmp_path / "java-again.json")
    java_again = (tmp_path / "java-again.json").read_text()
    assert m.encode() == java_again
    # Colliding keys swap places on every load, in Java as in rmq: one more round, compared with Java's.
    driver("reencode", tmp_path / "java-again.json", tmp_path / "java-third.json")
    m_again = TopicConfigManager(tmp_path / "java-again.json")
    m_again.load()
    assert m_again.encode() == (tmp_path / "java-third.json").read_text()
    small = random_topics(random.Random(5), 12)
    (tmp_path / "small").write_text(spec(small))
    driver("write", tmp_path / "small", tmp_path / "small.json")
    m_small = TopicConfigManager(tmp_path / "small.json")
    m_small.load()
    assert m_small.encode() == (tmp_path / "small.json").read_text()
    # Both sides load the file and add topics: the same table again (the data version aside: Java bumps once).
    more = random_topics(random.Random(19), 40)
    (tmp_path / "more").write_text(spec(more))
    driver("reencode", tmp_path / "java.json", tmp_path / "java2.json", tmp_path / "more")
    for t in more:
        m.put(t)
    assert without_version(m.encode()) == without_version((tmp_path / "java2.json").read_text())


def test_rmq_file_is_read_by_java_and_reencoded_to_the_same_bytes(driver: Any, tmp_path: Path) -> None:
    root = tmp_path / "store"
    topics = random_topics(random.Random(7), 200)
    with rmq.MessageStore(root) as s:
        for t in topics:
            s._topics.put(t)
        s.create_topic("Orders", 4, write_queues=2, order=True, attributes={"+message.type": "FIFO"})
        assert s.delete_topic(topics[3].topic_name)
        path = Path(s.topics_path)
        ours = path.read_text()
        expected = {name: cfg for name, cfg in s.topic_configs().items()}
        version = s._topics.data_version
    driver("read", path, tmp_path / "read.json")
    import json

    theirs = json.loads((tmp_path / "read.json").read_text())
    assert theirs["dataVersion"] == list(version)
    assert theirs["topics"] == {
        n: {
            "attributes": dict(sorted(c.attributes.items())),
            "order": c.order,
            "perm": c.perm,
            "readQueueNums": c.read_queue_nums,
            "topicFilterType": c.topic_filter_type,
            "topicName": n,
            "topicSysFlag": c.topic_sys_flag,
            "writeQueueNums": c.write_queue_nums,
        }
        for n, c in expected.items()
    }
    # Java loads rmq's file and persists it: the bytes rmq writes after loading it (colliding keys move, on both).
    driver("reencode", path, tmp_path / "java.json")
    reloaded = TopicConfigManager(path)
    reloaded.load()
    assert reloaded.encode() == (tmp_path / "java.json").read_text()
    assert without_version(ours).count('"topicName"') == len(expected)


def test_a_load_never_sees_another_process_s_persist_between_its_renames(tmp_path: Path) -> None:
    # Another process's persist renames topics.json to .bak, then the new one in: a load in between found no main
    # file and took the backup (the table without the newest topic, reported as if the main file were unreadable).
    # The child stops its persist right there, holding the file lock, until told to go on.
    path = tmp_path / "config" / "topics.json"
    a = TopicConfigManager(path)
    a.put(TopicConfig("T1"))
    b = TopicConfigManager(path)
    load_beside_a_persist_between_its_renames(
        tmp_path,
        path,
        "import rmq.topics as t; from rmq._flock import replace_file\n"
        "t.replace_file = lambda *a, **k: replace_file(*a, **k, stage=stop)",
        f"m = t.TopicConfigManager({str(path)!r}); m.load(); m.put(t.TopicConfig('T2'))",
        b.load,
    )
    assert b.load_issues == []
    assert set(b.topics()) == {"T1", "T2"}
