"""The Python API over real store directories: round trips, segments, reopen, lock, crash, bad input."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rmq
from conftest import SMALL, tree_digest


def test_round_trip_every_field(store_dir: Path) -> None:
    with rmq.MessageStore(store_dir) as store:
        r = store.put(
            "TopicTest",
            b"Hello RocketMQ",
            queue_id=3,
            tags="TagA",
            keys=["order1", "order2"],
            properties={"region": "eu"},
            flag=7,
            sys_flag=0x1,
            born_host="[2001:db8::1]:54321",
            born_timestamp=1_700_000_000_000,
            reconsume_times=2,
        )
        assert r.status == rmq.PutMessageStatus.PUT_OK
        assert (r.wrote_offset, r.queue_offset, r.msg_num) == (0, 0, 1)
        m = store.read(r.wrote_offset)
        assert m is not None
        assert (m.topic, m.queue_id, m.queue_offset, m.commitlog_offset) == ("TopicTest", 3, 0, 0)
        assert m.body == b"Hello RocketMQ" and bytes(m.body_view) == b"Hello RocketMQ"
        assert (m.tags, m.keys, m.flag, m.reconsume_times) == ("TagA", ["order1", "order2"], 7, 2)
        assert m.properties["region"] == "eu" and m.properties["WAIT"] == "true"
        assert m.properties["CLUSTER"] == "DefaultCluster"
        assert m.uniq_key == r.uniq_key and len(r.uniq_key) == 32
        assert m.born_host == "[2001:db8::1]:54321" and m.store_host == "127.0.0.1:10911"
        assert m.sys_flag == 0x1 | 0x10
        assert m.born_timestamp == 1_700_000_000_000 and m.store_timestamp == r.store_timestamp
        assert m.msg_id == r.msg_id == "7F00000100002A9F0000000000000000"
        assert m.store_size == len(bytes(m.raw)) == r.wrote_bytes
        assert m.tags_code == 2598919 and m.body_crc_ok and m.version == 1
        assert store.read(store.max_offset) is None


def test_record_size_matches_rocketmq_formula(small_store: rmq.MessageStore) -> None:
    r = small_store.put("T", b"abc", born_host="10.0.0.1:1")
    m = small_store.read(r.wrote_offset)
    assert m is not None
    props_len = len("".join(f"{k}\x01{v}\x02" for k, v in m.properties.items()).encode())
    assert m.store_size == 91 + 3 + 1 + props_len


def test_transactions_take_queue_offsets_as_rocketmq(small_store: rmq.MessageStore) -> None:
    prepared = small_store.put("Tx", b"half", transaction_type=rmq.TransactionType.PREPARED)
    commit = small_store.put(
        "Tx", b"c", transaction_type=rmq.TransactionType.COMMIT, prepared_transaction_offset=prepared.wrote_offset
    )
    rollback = small_store.put("Tx", b"r", transaction_type=rmq.TransactionType.ROLLBACK)
    plain = small_store.put("Tx", b"p")
    assert (prepared.queue_offset, commit.queue_offset, rollback.queue_offset, plain.queue_offset) == (0, 0, 0, 1)
    m = small_store.read(commit.wrote_offset)
    assert m is not None and m.transaction_type == rmq.TransactionType.COMMIT
    assert m.prepared_transaction_offset == prepared.wrote_offset


def test_v2_record_for_long_retry_topic_and_ipv6_store_host(store_dir: Path) -> None:
    cfg = rmq.StoreConfig(store_host="[::1]:10911", broker_cluster_name=None)
    with rmq.MessageStore(store_dir, cfg) as store:
        long_topic = "%RETRY%" + "g" * 193
        m = store.read(store.put(long_topic, b"x").wrote_offset)
        assert m is not None and m.topic == long_topic and m.version == 2
        assert len(m.msg_id) == 56 and "CLUSTER" not in m.properties
        short = store.read(store.put("a" * 127, b"x").wrote_offset)
        assert short is not None and short.version == 1


def test_property_crc_config(store_dir: Path) -> None:
    with rmq.MessageStore(store_dir, rmq.StoreConfig(enabled_append_prop_crc=True)) as store:
        m = store.read(store.put("T", b"body", properties={"__CRC32#": "stale"}).wrote_offset)
        assert m is not None
        assert len(m.properties["__CRC32#"]) == 10 and m.properties["__CRC32#"].isdigit()
        assert bytes(m.raw)[-20:-12] == b"__CRC32#"


def test_segments_blanks_scan_and_reopen(store_dir: Path) -> None:
    expected = []
    with rmq.MessageStore(store_dir, SMALL) as store:
        for i in range(200):
            r = store.put(f"T{i % 3}", f"body-{i}".encode() * 5, queue_id=i % 2, tags=f"t{i}")
            expected.append((r.wrote_offset, f"T{i % 3}", i % 2, r.queue_offset))
        files = store.commitlog_files()
    assert len(files) > 5
    for f in files:
        name = Path(f).name
        assert len(name) == 20 and int(name) % 4096 == 0 and os.path.getsize(f) == 4096
    seg0 = Path(files[0]).read_bytes()
    first_next = next(off for off, *_ in expected if off >= 4096)
    last_in_0 = max(off for off, *_ in expected if off < 4096)
    end0 = last_in_0 + int.from_bytes(seg0[last_in_0 : last_in_0 + 4], "big")
    assert first_next == 4096
    assert seg0[end0 : end0 + 8] == (4096 - end0).to_bytes(4, "big") + bytes.fromhex("CBD43194")
    with rmq.MessageStore(store_dir, SMALL) as store:
        assert not store.unclean_shutdown
        got = [(m.commitlog_offset, m.topic, m.queue_id, m.queue_offset) for m in store.scan()]
        assert got == expected
        mid = expected[77][0]
        assert [m.commitlog_offset for m in store.scan(mid)][0] == mid
        counts = {(t, q): 0 for _, t, q, _ in expected}
        for _, t, q, _ in expected:
            counts[(t, q)] += 1
        for (t, q), n in counts.items():
            assert store.next_queue_offset(t, q) == n
            assert store.put(t, b"more", queue_id=q).queue_offset == n
        r = store.put("T0", b"x")
        assert r.wrote_offset >= expected[-1][0]


def test_batch_is_consecutive_and_moves_whole(small_store: rmq.MessageStore) -> None:
    small_store.put("B", b"x" * 3400)
    batch = small_store.put_batch("B", [b"a" * 100, rmq.Message(b"b", tags="tb", keys="k1 k2"), b"c"], queue_id=0)
    assert batch.msg_num == 3 and batch.queue_offset == 1
    assert batch.offsets[0] == 4096  # did not fit after the 3400-byte record: moved whole
    assert batch.msg_id == ",".join(batch.msg_ids) and len(set(batch.msg_ids)) == 3
    msgs = [small_store.read(o) for o in batch.offsets]
    assert [m.queue_offset for m in msgs if m] == [1, 2, 3]
    assert len({m.store_timestamp for m in msgs if m}) == 1
    assert msgs[1] is not None and msgs[1].tags == "tb" and msgs[1].keys == ["k1", "k2"]
    assert all(m is not None and "CLUSTER" not in m.properties for m in msgs)


def test_record_view_is_read_only_and_outlives_close(store_dir: Path) -> None:
    store = rmq.MessageStore(store_dir, SMALL)
    view = store.read_raw(store.put("T", b"payload").wrote_offset)
    store.close()
    assert view is not None
    mv = memoryview(view)
    assert mv.readonly and bytes(mv[:4]) == len(view).to_bytes(4, "big")
    with pytest.raises(TypeError):
        mv[0] = 1
    with pytest.raises(rmq.StoreClosedError):
        store.put("T", b"x")
    with pytest.raises(rmq.StoreClosedError):
        store.read(0)


def test_lock_is_exclusive(store_dir: Path) -> None:
    with rmq.MessageStore(store_dir, SMALL):
        with pytest.raises(rmq.StoreLockedError):
            rmq.MessageStore(store_dir, SMALL)
    with rmq.MessageStore(store_dir, SMALL) as again:
        assert again.max_offset == 0


def test_dynamic_max_message_size(small_store: rmq.MessageStore) -> None:
    small_store.set_max_message_size(10)
    with pytest.raises(rmq.MessageTooLargeError):
        small_store.put("T", b"x" * 11)
    small_store.set_max_message_size(2000)
    assert small_store.put("T", b"x" * 11).queue_offset == 0


BAD_TOPICS = [
    "",
    " ",
    "../x",
    "a/b",
    "a\x00b",
    "..",
    "a b",
    "标签",
    "a" * 128,
    "%RETRY%" + "a" * 249,
    "SCHEDULE_TOPIC_XXXX",
]


@pytest.mark.parametrize("topic", BAD_TOPICS)
def test_bad_topics_write_nothing(store_dir: Path, topic: str) -> None:
    with rmq.MessageStore(store_dir, SMALL) as store:
        store.put("Good", b"x")
        before, max_before = tree_digest(store_dir), store.max_offset
        with pytest.raises(rmq.InvalidTopicError) as info:
            store.put(topic, b"x")
        assert info.value.status == rmq.PutMessageStatus.MESSAGE_ILLEGAL
        with pytest.raises(rmq.InvalidTopicError):
            store.put_batch(topic, [b"x"])
        assert store.max_offset == max_before and tree_digest(store_dir) == before
    assert not (store_dir.parent / "x").exists()


@pytest.mark.parametrize(
    ("kwargs", "error", "status"),
    [
        ({"body": b"x" * (64 * 1024 + 1)}, rmq.MessageTooLargeError, "MESSAGE_ILLEGAL"),
        ({"properties": {"big": "v" * 33000}}, rmq.PropertiesTooLargeError, "PROPERTIES_SIZE_EXCEEDED"),
        ({"properties": {"a\x01b": "v"}}, rmq.InvalidPropertyError, "MESSAGE_ILLEGAL"),
        ({"properties": {"a": "v\x02"}}, rmq.InvalidPropertyError, "MESSAGE_ILLEGAL"),
        ({"properties": {"a": ""}}, rmq.InvalidPropertyError, "MESSAGE_ILLEGAL"),
        ({"properties": {"": "v"}}, rmq.InvalidPropertyError, "MESSAGE_ILLEGAL"),
        ({"properties": {"TAGS": "x"}, "tags": "y"}, rmq.InvalidPropertyError, "MESSAGE_ILLEGAL"),
        ({"properties": {"INNER_NUM": "2"}}, rmq.InvalidPropertyError, "MESSAGE_ILLEGAL"),
        ({"tags": ""}, rmq.InvalidPropertyError, "MESSAGE_ILLEGAL"),
        ({"queue_id": -1}, rmq.InvalidMessageError, "MESSAGE_ILLEGAL"),
        ({"sys_flag": 0x80}, rmq.InvalidMessageError, "MESSAGE_ILLEGAL"),
        ({"born_host": "nowhere"}, rmq.InvalidHostError, "MESSAGE_ILLEGAL"),
    ],
)
def test_bad_messages_write_nothing(store_dir: Path, kwargs: dict, error: type, status: str | None) -> None:
    cfg = rmq.StoreConfig(mapped_file_size_commit_log=1024 * 1024, max_message_size=64 * 1024)
    with rmq.MessageStore(store_dir, cfg) as store:
        store.put("Other", b"x")
        before, max_before = tree_digest(store_dir), store.max_offset
        args = {"body": b"ok", **kwargs}
        body = args.pop("body")
        with pytest.raises(error) as info:
            store.put("TopicTest", body, **args)
        got = info.value.status
        assert (got.name if got is not None else None) == status
        assert store.max_offset == max_before and tree_digest(store_dir) == before
        # No queue offset was consumed (RocketMQ's testPutMessage_whenMessagePropertyIsTooLong).
        assert store.put("TopicTest", b"ok").queue_offset == 0


def test_bad_config() -> None:
    with pytest.raises(rmq.InvalidConfigError):
        rmq.MessageStore("/nonexistent/never", rmq.StoreConfig(mapped_file_size_commit_log=10))
    assert not os.path.exists("/nonexistent/never")


def test_oversized_batch_rejected(small_store: rmq.MessageStore) -> None:
    small_store.set_max_message_size(1000)
    with pytest.raises(rmq.MessageTooLargeError):
        small_store.put_batch("T", [b"x" * 400] * 3)
    assert small_store.max_offset == 0


@settings(max_examples=60, deadline=None)
@given(
    body=st.binary(max_size=2048),
    tags=st.none()
    | st.text(
        alphabet=st.characters(exclude_characters="\x01\x02", exclude_categories=("Cs",)), min_size=1, max_size=20
    ),
    keys=st.lists(st.text(alphabet="abcXYZ019-_", min_size=1, max_size=8), max_size=4),
    props=st.dictionaries(
        st.text(
            alphabet=st.characters(exclude_characters="\x01\x02", exclude_categories=("Cs",)), min_size=1, max_size=10
        ).filter(lambda k: k not in ("TAGS", "KEYS", "UNIQ_KEY", "WAIT", "CLUSTER", "INNER_NUM", "INNER_BASE")),
        st.text(
            alphabet=st.characters(exclude_characters="\x01\x02", exclude_categories=("Cs",)), min_size=1, max_size=20
        ),
        max_size=5,
    ),
    topic=st.text(alphabet="abcXYZ09_-|%", min_size=1, max_size=127).filter(lambda t: t.strip() != "")
    | st.text(alphabet="abc", min_size=1, max_size=248).map(lambda t: "%RETRY%" + t),
    ipv6=st.booleans(),
)
def test_hypothesis_round_trip(
    tmp_path_factory: pytest.TempPathFactory,
    body: bytes,
    tags: str | None,
    keys: list[str],
    props: dict[str, str],
    topic: str,
    ipv6: bool,
) -> None:
    if topic == "SCHEDULE_TOPIC_XXXX":
        return
    host = "[2001:db8::5]:7" if ipv6 else "10.1.2.3:7"
    with rmq.MessageStore(tmp_path_factory.mktemp("h"), SMALL) as store:
        r = store.put(topic, body, tags=tags, keys=keys or None, properties=props, born_host=host)
        m = store.read(r.wrote_offset)
        assert m is not None
        assert (m.topic, m.body, m.tags, m.keys, m.born_host) == (topic, body, tags, keys, host)
        assert {k: v for k, v in m.properties.items() if k in props} == props
        assert m.version == (2 if len(topic) > 127 else 1)


CHILD = textwrap.dedent(
    """
    import sys, rmq
    store = rmq.MessageStore(sys.argv[1], rmq.StoreConfig(mapped_file_size_commit_log=8192))
    i = 0
    while True:
        r = store.put("Crash", b"m%d" % i * (i % 13 + 1), queue_id=i % 3)
        print(r.wrote_offset, r.queue_offset, i, flush=True)
        i += 1
    """
)


@pytest.mark.parametrize("kill_after", [1, 57, 300, 911])
def test_kill_9_loses_nothing_acknowledged(store_dir: Path, kill_after: int) -> None:
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(store_dir)], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    acked = []
    for line in child.stdout:
        off, qoff, i = map(int, line.split())
        acked.append((off, qoff, i))
        if len(acked) >= kill_after:
            break
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    child.stdout.close()
    with rmq.MessageStore(store_dir, rmq.StoreConfig(mapped_file_size_commit_log=8192)) as store:
        assert store.unclean_shutdown
        for off, qoff, i in acked:
            m = store.read(off)
            assert m is not None and m.queue_offset == qoff and m.body == b"m%d" % i * (i % 13 + 1)
        stored = [(m.queue_id, m.queue_offset) for m in store.scan()]
        assert len(stored) == len(set(stored)) >= len(acked)
        for q in range(3):
            n = sum(1 for qq, _ in stored if qq == q)
            assert store.put("Crash", b"after", queue_id=q).queue_offset == n


def test_torn_tail_is_discarded_and_corrupt_middle_refuses(store_dir: Path) -> None:
    with rmq.MessageStore(store_dir, SMALL) as store:
        offsets = [store.put("T", b"x" * 50).wrote_offset for _ in range(10)]
        seg = Path(store.commitlog_files()[0])
        end = store.max_offset
    data = bytearray(seg.read_bytes())
    last = offsets[-1]
    data[last + 40 : end] = b"\xab" * (end - last - 40)  # tear the last record
    seg.write_bytes(bytes(data))
    with rmq.MessageStore(store_dir, SMALL) as store:
        assert store.open_report["discarded_bytes"] > 0 and store.max_offset == last
        assert [m.commitlog_offset for m in store.scan()] == offsets[:-1]
        again = store.put("T", b"y" * 50).wrote_offset
    with rmq.MessageStore(store_dir, SMALL) as store:
        assert store.open_report["discarded_bytes"] == 0
        assert [m.commitlog_offset for m in store.scan()][-1] == again
    # A flipped body byte in the middle, with valid records after it: opening refuses and changes nothing.
    data = bytearray(seg.read_bytes())
    data[offsets[3] + 100] ^= 0xFF
    seg.write_bytes(bytes(data))
    before = tree_digest(store_dir)
    with pytest.raises(rmq.CorruptionError) as info:
        rmq.MessageStore(store_dir, SMALL)
    assert info.value.offset == offsets[3]
    assert tree_digest(store_dir) == before


def test_copy_of_open_store_reopens_as_crash(store_dir: Path, tmp_path: Path) -> None:
    with rmq.MessageStore(store_dir, SMALL) as store:
        for i in range(30):
            store.put("T", b"%d" % i)
        shutil.copytree(store_dir, tmp_path / "copy")
    (tmp_path / "copy" / "lock").unlink()
    with rmq.MessageStore(tmp_path / "copy", SMALL) as copy:
        assert copy.unclean_shutdown and [m.body for m in copy.scan()] == [b"%d" % i for i in range(30)]


def test_unencodable_text_is_rejected_before_writing(small_store: rmq.MessageStore) -> None:
    # A lone surrogate cannot be UTF-8: Python's codec refuses it while arguments are converted.
    for kwargs in ({"tags": "\ud800"}, {"properties": {"k": "\ud800"}}, {"keys": ["\udfff"]}):
        with pytest.raises(UnicodeEncodeError):
            small_store.put("T", b"x", **kwargs)  # type: ignore[arg-type]
    assert small_store.max_offset == 0 and small_store.next_queue_offset("T", 0) == 0
