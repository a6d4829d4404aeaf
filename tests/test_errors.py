"""Bad input (spec 11.1, 11.2, 1.7, 3.1): each case raises a typed exception with RocketMQ's PutMessageStatus,
and changes nothing: no byte written (every file under the test's temporary directory hashed before and after,
directories included), `max_offset` unchanged, no queue offset consumed, no directory created for a bad topic.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import rmq
from conftest import NOT_ALLOWED_SEND_TOPICS, SEGMENT, small_config, snapshot

GOOD = "TopicTest"
MAX_BODY = 8192  # above the segment size, so "too large for a segment" and "body over the limit" both occur
CONFIG = small_config(max_message_size=MAX_BODY)

ILLEGAL = "MESSAGE_ILLEGAL"
PROPS_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"


def _ids(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class Env:
    """An open store with some messages in it, and the state every rejected call must leave untouched."""

    def __init__(self, root: Path) -> None:
        self.root = root
        # No background services: their checkpoint writes would change the store while a call is checked.
        self.store = rmq.MessageStore(root / "store", CONFIG, start_services=False)
        self.store.put(GOOD, b"first", queue_id=0)
        self.store.put("Other", b"x" * 3900)  # the next record no longer fits: a blank and a roll would follow
        self.store.put(GOOD, b"second", queue_id=1)
        assert self.store.wait_dispatched()

    def check_rejected(
        self, call: Callable[[], object], error: type[BaseException], status: str | None, topic: str = GOOD
    ) -> BaseException:
        assert self.store.wait_dispatched()
        before, max_before = snapshot(self.root), self.store.max_offset
        queues = {q: self.store.next_queue_offset(topic, q) for q in (0, 1, 2)}
        with pytest.raises(error) as info:
            call()
        if isinstance(info.value, rmq.RmqError):
            got = info.value.status
            assert (got.name if got is not None else None) == status
        else:
            assert status is None
        assert self.store.max_offset == max_before
        assert snapshot(self.root) == before
        assert {q: self.store.next_queue_offset(topic, q) for q in (0, 1, 2)} == queues
        # The store is still usable and the queue continues where it was.
        r = self.store.put(GOOD, b"ok", queue_id=0)
        assert r.queue_offset == 1 and r.wrote_offset >= max_before
        return info.value


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path)
    yield e
    e.store.close()


# --- topics (spec 11.1, TopicValidator) -------------------------------------------------------------------

BAD_TOPICS = [
    "",
    " ",
    "\t",
    "   ",
    "..",
    ".",
    "../x",
    "../../etc",
    "a/b",
    "/abs",
    "a\\b",
    "a\x00b",
    "\x00",
    "a b",
    "a.b",
    "a:b",
    "a\n",
    "*",
    "标签",
    "é",
    "topic\u200b",
    "a" * 128,
    "a" * 1280,
    "%RETRY%" + "a" * 249,  # 256
    "%DLQ%" + "a" * 251,  # 256
    *NOT_ALLOWED_SEND_TOPICS,
]


@pytest.mark.parametrize("topic", BAD_TOPICS, ids=_ids)
def test_bad_topic_put(env: Env, topic: str) -> None:
    env.check_rejected(lambda: env.store.put(topic, b"ok"), rmq.InvalidTopicError, ILLEGAL, topic)


@pytest.mark.parametrize("topic", BAD_TOPICS, ids=_ids)
def test_bad_topic_put_batch(env: Env, topic: str) -> None:
    env.check_rejected(lambda: env.store.put_batch(topic, [b"ok"]), rmq.InvalidTopicError, ILLEGAL, topic)


@pytest.mark.parametrize(
    "how",
    [
        lambda s: s.put(GOOD, b"", queue_id=1, delay_level=2),
        lambda s: s.put(GOOD, b"", queue_id=1, properties={"DELAY": "3"}),
        lambda s: s.put(GOOD, b"", queue_id=1, delay_level=99),  # clamped to the top level, still delayed
        lambda s: rmq.TransactionProducer(s, "pg").send_half(GOOD, b"", queue_id=1),
        lambda s: rmq.TransactionProducer(s, "pg").send_half(GOOD, b"", queue_id=1, properties={"DELAY": "2"}),
    ],
    ids=["delay_level", "DELAY", "clamped", "half", "delayed-half"],
)
def test_an_empty_body_is_refused_where_rocketmq_would_put_it_again(env: Env, how: Callable[[Any], object]) -> None:
    """RocketMQ's producer refuses every empty body, and its broker, taking over the store, cannot put one again
    where delayed and half messages go next (its schedule service drops a delayed one when due; its transaction
    check stalls on a half): those are refused, writing nothing. A plain empty body is stored, as
    `DefaultMessageStore.putMessage` stores it (RocketMQ reads it back as a null body)."""
    err = env.check_rejected(lambda: how(env.store), rmq.InvalidMessageError, ILLEGAL)
    assert "needs a body" in str(err)
    assert env.store.put(GOOD, b"", queue_id=2, delay_level=0).queue_offset == 0


@pytest.mark.parametrize("delay_level", [0, 3])
def test_an_empty_body_is_not_sent_back_for_a_delayed_retry(env: Env, delay_level: int) -> None:
    """A plain message may have an empty body, but sending it back for a retry (due later, through the schedule
    topic) is refused as `put` refuses a delayed one (review of 30e0319): RocketMQ's broker refuses the same
    send-back, and its schedule service would drop it. The push consumer then consumes it again locally later,
    as Java's client does when `sendMessageBack` fails."""
    r = env.store.put(GOOD, b"", queue_id=2)
    err = env.check_rejected(
        lambda: env.store.send_message_back(r.wrote_offset, "grp", delay_level=delay_level),
        rmq.InvalidMessageError,
        ILLEGAL,
    )
    assert "needs a body" in str(err)


def test_path_like_topics_create_nothing_outside_the_store(tmp_path: Path) -> None:
    with rmq.MessageStore(tmp_path / "deep" / "store", CONFIG) as store:
        before = snapshot(tmp_path)
        for topic in ("../x", "../../x", "x/../../y", "/tmp/rmq-escape", "..", "a/b/c"):
            with pytest.raises(rmq.InvalidTopicError):
                store.put(topic, b"x")
            with pytest.raises(rmq.InvalidTopicError):
                store.put_batch(topic, [b"x"])
        assert snapshot(tmp_path) == before
    assert not Path("/tmp/rmq-escape").exists()


@pytest.mark.parametrize(
    "topic",
    ["a" * 127, "%RETRY%" + "a" * 248, "%DLQ%" + "a" * 120, "a|b%c-d_e", "TBW102", "rmq_sys_wheel_timer", "0", "%"],
    ids=_ids,
)
def test_topics_at_the_limits_are_accepted(env: Env, topic: str) -> None:
    m = env.store.read(env.store.put(topic, b"ok").wrote_offset)
    assert m is not None and m.topic == topic


# --- single puts --------------------------------------------------------------------------------------------

BAD_PUTS: list[tuple[str, dict[str, Any], type[BaseException], str | None]] = [
    # sizes (spec 1.7)
    ("body over max_message_size", {"body": b"x" * (MAX_BODY + 1)}, rmq.MessageTooLargeError, ILLEGAL),
    ("record larger than a segment", {"body": b"x" * 4000}, rmq.MessageTooLargeError, ILLEGAL),
    ("one huge property", {"properties": {"big": "v" * 32768}}, rmq.PropertiesTooLargeError, PROPS_EXCEEDED),
    ("properties just over 32767", {"properties": {"big": "v" * 32700}}, rmq.PropertiesTooLargeError, PROPS_EXCEEDED),
    (
        "many properties",
        {"properties": {f"k{i}": "v" * 100 for i in range(320)}},
        rmq.PropertiesTooLargeError,
        PROPS_EXCEEDED,
    ),
    ("huge tags", {"tags": "t" * 32768}, rmq.PropertiesTooLargeError, PROPS_EXCEEDED),
    ("huge keys", {"keys": ["k" * 20000, "k" * 20000]}, rmq.PropertiesTooLargeError, PROPS_EXCEEDED),
    # property names and values (spec 3.1)
    ("name with 0x01", {"properties": {"a\x01b": "v"}}, rmq.InvalidPropertyError, ILLEGAL),
    ("name with 0x02", {"properties": {"a\x02b": "v"}}, rmq.InvalidPropertyError, ILLEGAL),
    ("value with 0x01", {"properties": {"a": "v\x01"}}, rmq.InvalidPropertyError, ILLEGAL),
    ("value with 0x02", {"properties": {"a": "\x02v"}}, rmq.InvalidPropertyError, ILLEGAL),
    ("empty name", {"properties": {"": "v"}}, rmq.InvalidPropertyError, ILLEGAL),
    ("empty value", {"properties": {"a": ""}}, rmq.InvalidPropertyError, ILLEGAL),
    ("bad one among good", {"properties": {"a": "1", "b": "", "c": "3"}}, rmq.InvalidPropertyError, ILLEGAL),
    ("empty tags", {"tags": ""}, rmq.InvalidPropertyError, ILLEGAL),
    ("tags with 0x01", {"tags": "a\x01"}, rmq.InvalidPropertyError, ILLEGAL),
    ("tags with 0x02", {"tags": "a\x02b"}, rmq.InvalidPropertyError, ILLEGAL),
    ("empty keys", {"keys": ""}, rmq.InvalidPropertyError, ILLEGAL),
    ("key with 0x02", {"keys": ["ok", "b\x02"]}, rmq.InvalidPropertyError, ILLEGAL),
    ("tags twice", {"tags": "y", "properties": {"TAGS": "x"}}, rmq.InvalidPropertyError, ILLEGAL),
    ("keys twice", {"keys": "k", "properties": {"KEYS": "x"}}, rmq.InvalidPropertyError, ILLEGAL),
    ("INNER_NUM", {"properties": {"INNER_NUM": "2"}}, rmq.InvalidPropertyError, ILLEGAL),
    ("INNER_BASE", {"properties": {"INNER_BASE": "0"}}, rmq.InvalidPropertyError, ILLEGAL),
    # message fields
    ("negative queue id", {"queue_id": -1}, rmq.InvalidMessageError, ILLEGAL),
    ("min queue id", {"queue_id": -(2**31)}, rmq.InvalidMessageError, ILLEGAL),
    ("negative reconsume_times", {"reconsume_times": -1}, rmq.InvalidMessageError, ILLEGAL),
    ("negative prepared offset", {"prepared_transaction_offset": -1}, rmq.InvalidMessageError, ILLEGAL),
    # sys_flag: only compression (0x1, 0x700 with type 0..3) and multi-tags (0x2) come from the producer
    ("sys_flag PREPARED bits", {"sys_flag": 0x4}, rmq.InvalidMessageError, ILLEGAL),
    ("sys_flag COMMIT bits", {"sys_flag": 0x8}, rmq.InvalidMessageError, ILLEGAL),
    ("sys_flag ROLLBACK bits", {"sys_flag": 0xC}, rmq.InvalidMessageError, ILLEGAL),
    ("sys_flag born v6 bit", {"sys_flag": 0x10}, rmq.InvalidMessageError, ILLEGAL),
    ("sys_flag store v6 bit", {"sys_flag": 0x20}, rmq.InvalidMessageError, ILLEGAL),
    ("sys_flag NEED_UNWRAP", {"sys_flag": 0x40}, rmq.InvalidMessageError, ILLEGAL),
    ("sys_flag INNER_BATCH", {"sys_flag": 0x80}, rmq.InvalidMessageError, ILLEGAL),
    ("sys_flag bit 11", {"sys_flag": 0x800}, rmq.InvalidMessageError, ILLEGAL),
    ("sys_flag high bit", {"sys_flag": 2**31 - 1}, rmq.InvalidMessageError, ILLEGAL),
    ("sys_flag -1", {"sys_flag": -1}, rmq.InvalidMessageError, ILLEGAL),
    ("compression type 4", {"sys_flag": 0x401}, rmq.InvalidMessageError, ILLEGAL),
    ("compression type 7", {"sys_flag": 0x701}, rmq.InvalidMessageError, ILLEGAL),
    # born host
    ("host name", {"born_host": "nowhere"}, rmq.InvalidHostError, ILLEGAL),
    ("host without port", {"born_host": "1.2.3.4"}, rmq.InvalidHostError, ILLEGAL),
    ("port over 65535", {"born_host": "1.2.3.4:70000"}, rmq.InvalidHostError, ILLEGAL),
    ("negative port", {"born_host": "1.2.3.4:-1"}, rmq.InvalidHostError, ILLEGAL),
    ("octet over 255", {"born_host": "256.1.1.1:1"}, rmq.InvalidHostError, ILLEGAL),
    ("ipv6 without brackets", {"born_host": "::1:80"}, rmq.InvalidHostError, ILLEGAL),
    ("ipv6 without port", {"born_host": "[::1]"}, rmq.InvalidHostError, ILLEGAL),
    ("ipv4 in brackets", {"born_host": "[1.2.3.4]:80"}, rmq.InvalidHostError, ILLEGAL),
    ("dns name", {"born_host": "localhost:80"}, rmq.InvalidHostError, ILLEGAL),
    ("empty host", {"born_host": ""}, rmq.InvalidHostError, ILLEGAL),
    ("trailing space", {"born_host": "1.2.3.4:80 "}, rmq.InvalidHostError, ILLEGAL),
    # Python-level arguments: rejected while converting, before the store is touched, with typed errors that
    # are also TypeError / ValueError
    ("str body", {"body": "text"}, rmq.ArgumentTypeError, None),
    ("None body", {"body": None}, rmq.ArgumentTypeError, None),
    ("int property value", {"properties": {"a": 1}}, rmq.ArgumentTypeError, None),
    ("properties not a mapping", {"properties": ["a", "b"]}, rmq.ArgumentTypeError, None),
    ("properties a str", {"properties": "a=b"}, rmq.ArgumentTypeError, None),
    ("queue id over i32", {"queue_id": 2**31}, rmq.InvalidArgumentError, None),
    ("queue id a bool", {"queue_id": True}, rmq.ArgumentTypeError, None),
    ("queue id None", {"queue_id": None}, rmq.ArgumentTypeError, None),
    ("flag over i32", {"flag": 2**31}, rmq.InvalidArgumentError, None),
    ("born timestamp over i64", {"born_timestamp": 2**63}, rmq.InvalidArgumentError, None),
    ("float flag", {"flag": 1.0}, rmq.ArgumentTypeError, None),
    ("int wait flag", {"wait_store_msg_ok": 1}, rmq.ArgumentTypeError, None),
    ("lone surrogate in tags", {"tags": "\ud800"}, rmq.InvalidArgumentError, None),
    ("lone surrogate in a property", {"properties": {"k": "\udfff"}}, rmq.InvalidArgumentError, None),
    ("lone surrogate in keys", {"keys": ["\udfff"]}, rmq.InvalidArgumentError, None),
    ("keys as bytes", {"keys": b"k"}, rmq.ArgumentTypeError, None),
    # Not sequences: a dict's values were dropped and a set's keys stored in no order.
    ("keys as a dict", {"keys": {"k": "v"}}, rmq.ArgumentTypeError, None),
    ("keys as a set", {"keys": {"a", "b"}}, rmq.ArgumentTypeError, None),
    ("keys as an iterator", {"keys": iter(["a"])}, rmq.ArgumentTypeError, None),
]


@pytest.mark.parametrize(("kwargs", "error", "status"), [c[1:] for c in BAD_PUTS], ids=[c[0] for c in BAD_PUTS])
def test_bad_put(env: Env, kwargs: dict[str, Any], error: type[BaseException], status: str | None) -> None:
    args = {"body": b"ok", **kwargs}
    body = args.pop("body")
    env.check_rejected(lambda: env.store.put(GOOD, body, **args), error, status)


def test_too_long_property_then_a_normal_put_takes_queue_offset_0(tmp_path: Path) -> None:
    """RocketMQ's testPutMessage_whenMessagePropertyIsTooLong, on an empty store."""
    with rmq.MessageStore(tmp_path / "s", CONFIG) as store:
        with pytest.raises(rmq.PropertiesTooLargeError) as info:
            store.put("FooBar", b"Once, there was a chance for me!", properties={"k": "1" * 32768})
        assert info.value.status == rmq.PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
        assert store.max_offset == 0 and store.commitlog_files() == []
        assert store.next_queue_offset("FooBar", 0) == 0
        r = store.put("FooBar", b"Once, there was a chance for me!", properties={"k": "1" * 100})
        assert (r.wrote_offset, r.queue_offset) == (0, 0)


def test_v1_only_store_rejects_a_long_retry_topic(tmp_path: Path) -> None:
    cfg = small_config(auto_message_version_on_topic_len=False)
    with rmq.MessageStore(tmp_path / "s", cfg) as store:
        before = snapshot(tmp_path)
        with pytest.raises(rmq.InvalidMessageError):
            store.put("%RETRY%" + "g" * 193, b"x")
        assert snapshot(tmp_path) == before and store.max_offset == 0


def test_closed_store_rejects_puts_without_writing(tmp_path: Path) -> None:
    store = rmq.MessageStore(tmp_path / "s", CONFIG)
    store.put(GOOD, b"x")
    store.close()
    before = snapshot(tmp_path)
    for call in (lambda: store.put(GOOD, b"y"), lambda: store.put_batch(GOOD, [b"y"])):
        with pytest.raises(rmq.StoreClosedError) as info:
            call()
        assert info.value.status == rmq.PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert snapshot(tmp_path) == before


# --- batches --------------------------------------------------------------------------------------------------


def _failing_items() -> Iterator[bytes]:
    yield b"ok"
    raise ValueError("the producer's iterator failed")


BAD_BATCHES: list[tuple[str, Callable[[], list[Any]] | Any, dict[str, Any], type[BaseException], str | None]] = [
    ("empty", [], {}, rmq.InvalidMessageError, ILLEGAL),
    ("str item", ["text"], {}, TypeError, None),
    ("int item after a good one", [b"ok", 5], {}, TypeError, None),
    ("iterator raising", _failing_items, {}, ValueError, None),
    (
        "bad property in the second item",
        [b"ok", rmq.Message(b"x", properties={"a\x01": "v"})],
        {},
        rmq.InvalidPropertyError,
        ILLEGAL,
    ),
    ("DELAY", [rmq.Message(b"x", properties={"DELAY": "1"})], {}, rmq.InvalidMessageError, ILLEGAL),
    ("tags twice", [rmq.Message(b"x", tags="t", properties={"TAGS": "u"})], {}, rmq.InvalidPropertyError, ILLEGAL),
    ("empty tags", [b"ok", rmq.Message(b"x", tags="")], {}, rmq.InvalidPropertyError, ILLEGAL),
    ("INNER_NUM", [rmq.Message(b"x", properties={"INNER_NUM": "2"})], {}, rmq.InvalidPropertyError, ILLEGAL),
    ("batch body over max_message_size", [b"x" * 3000] * 3, {}, rmq.MessageTooLargeError, ILLEGAL),
    ("batch larger than a segment", [b"x" * 1500] * 3, {}, rmq.MessageTooLargeError, ILLEGAL),
    (
        "member properties over max_message_size",  # the client-encoded batch body includes properties
        [b"ok", rmq.Message(b"x", properties={"big": "v" * 32768})],
        {},
        rmq.MessageTooLargeError,
        ILLEGAL,
    ),
    ("negative queue id", [b"ok"], {"queue_id": -1}, rmq.InvalidMessageError, ILLEGAL),
    ("transaction bits", [b"ok"], {"sys_flag": 0x8}, rmq.InvalidMessageError, ILLEGAL),
    ("negative reconsume_times", [b"ok"], {"reconsume_times": -1}, rmq.InvalidMessageError, ILLEGAL),
    ("bad born host", [b"ok"], {"born_host": "1.2.3.4"}, rmq.InvalidHostError, ILLEGAL),
]


@pytest.mark.parametrize(
    ("items", "kwargs", "error", "status"), [c[1:] for c in BAD_BATCHES], ids=[c[0] for c in BAD_BATCHES]
)
def test_bad_put_batch(
    env: Env, items: Any, kwargs: dict[str, Any], error: type[BaseException], status: str | None
) -> None:
    env.check_rejected(
        lambda: env.store.put_batch(GOOD, items() if callable(items) else items, **kwargs), error, status
    )


def test_batch_member_properties_too_large(tmp_path: Path) -> None:
    cfg = small_config(max_message_size=1 << 20)
    # No background services (as `Env`): the warm service making the next segment ahead, or a checkpoint write,
    # would change the store while the call is checked.
    with rmq.MessageStore(tmp_path / "s", cfg, start_services=False) as store:
        store.put_batch(GOOD, [b"a", b"b"])
        assert store.wait_dispatched()
        before = snapshot(tmp_path)
        with pytest.raises(rmq.PropertiesTooLargeError) as info:
            store.put_batch(GOOD, [b"ok", rmq.Message(b"x", properties={"big": "v" * 32768})])
        assert info.value.status == rmq.PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
        assert snapshot(tmp_path) == before and store.next_queue_offset(GOOD, 0) == 2


def test_message_constructor_rejects_wrong_types() -> None:
    with pytest.raises(TypeError):
        rmq.Message("text")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        rmq.Message(b"x", properties={"a": 1})  # type: ignore[dict-item]


# --- configuration ------------------------------------------------------------------------------------------

BAD_CONFIGS: list[tuple[str, dict[str, Any], type[BaseException]]] = [
    ("segment 63 bytes", {"mapped_file_size_commit_log": 63}, rmq.InvalidConfigError),
    ("segment 0 bytes", {"mapped_file_size_commit_log": 0}, rmq.InvalidConfigError),
    ("segment over i32", {"mapped_file_size_commit_log": 2**31}, rmq.InvalidConfigError),
    ("negative segment", {"mapped_file_size_commit_log": -1}, rmq.InvalidConfigError),
    ("segment as a str", {"mapped_file_size_commit_log": "4096"}, rmq.ArgumentTypeError),
    ("bool as a size", {"max_message_size": True}, rmq.ArgumentTypeError),
    ("int as a bool", {"check_crc_on_recover": 1}, rmq.ArgumentTypeError),
    ("max_message_size 9", {"max_message_size": 9}, rmq.InvalidConfigError),
    ("max_message_size 0", {"max_message_size": 0}, rmq.InvalidConfigError),
    ("negative max_message_size", {"max_message_size": -1}, rmq.InvalidConfigError),
    ("unknown flush type", {"flush_disk_type": "NOPE"}, rmq.InvalidConfigError),
    ("lower-case flush type", {"flush_disk_type": "sync_flush"}, rmq.InvalidConfigError),
    ("bad store host", {"store_host": "nope"}, rmq.InvalidInputError),
    ("empty cluster name", {"broker_cluster_name": ""}, rmq.InvalidInputError),
    ("cluster name with 0x01", {"broker_cluster_name": "a\x01b"}, rmq.InvalidInputError),
    # RocketMQ's parseDelayLevel fails (and the broker does not load) on each of these.
    ("delay level without a unit", {"message_delay_level": "1x 2y"}, rmq.InvalidConfigError),
    ("delay level in upper case", {"message_delay_level": "1s 1S"}, rmq.InvalidConfigError),
    ("fractional delay level", {"message_delay_level": "1.5s"}, rmq.InvalidConfigError),
    ("two spaces between levels", {"message_delay_level": "1s  2s"}, rmq.InvalidConfigError),
    ("empty delay levels", {"message_delay_level": ""}, rmq.InvalidConfigError),
    ("delay level past a long", {"message_delay_level": "99999999999999999999s"}, rmq.InvalidConfigError),
]


@pytest.mark.parametrize(("kwargs", "error"), [c[1:] for c in BAD_CONFIGS], ids=[c[0] for c in BAD_CONFIGS])
def test_bad_config_creates_nothing(tmp_path: Path, kwargs: dict[str, Any], error: type[BaseException]) -> None:
    with pytest.raises(error):
        rmq.MessageStore(tmp_path / "store", rmq.StoreConfig(**kwargs))
    assert list(tmp_path.iterdir()) == []


def test_unknown_config_key_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(rmq.InvalidConfigError):
        rmq._native.MessageStore(str(tmp_path / "store"), {"mapped_file_size_commit_log": 4096, "bogus": 1})
    with pytest.raises(TypeError):
        rmq.StoreConfig(bogus=1)  # type: ignore[call-arg]
    assert list(tmp_path.iterdir()) == []


def test_segment_size_must_match_the_files(tmp_path: Path) -> None:
    with rmq.MessageStore(tmp_path / "store", CONFIG) as store:
        for i in range(30):
            store.put(GOOD, b"%d" % i * 20)
    before = snapshot(tmp_path)
    for size in (SEGMENT // 2, SEGMENT * 2):
        with pytest.raises(rmq.InvalidConfigError):
            rmq.MessageStore(tmp_path / "store", rmq.StoreConfig(mapped_file_size_commit_log=size))
        assert snapshot(tmp_path) == before
    with rmq.MessageStore(tmp_path / "store", CONFIG) as store:
        assert len(list(store.scan())) == 30


def test_store_path_that_is_a_file(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_bytes(b"not a directory")
    with pytest.raises(rmq.StoreIOError) as info:
        rmq.MessageStore(target, CONFIG)
    assert info.value.path is not None and info.value.status == rmq.PutMessageStatus.CREATE_MAPPED_FILE_FAILED
    assert target.read_bytes() == b"not a directory"


# --- reads ----------------------------------------------------------------------------------------------------


def test_read_of_a_non_record_offset(env: Env) -> None:
    first = env.store.read(0)
    assert first is not None
    before = snapshot(env.root)
    for off in (1, 4, first.store_size - 1):
        with pytest.raises(rmq.InvalidOffsetError) as info:
            env.store.read(off)
        assert info.value.offset == off and info.value.status is None
        with pytest.raises(rmq.InvalidOffsetError):
            env.store.read_raw(off)
    for bad in (-1, 2**63):
        with pytest.raises(rmq.InvalidArgumentError):
            env.store.read(bad)
    assert snapshot(env.root) == before


def _garbage_segment(root: Path) -> None:
    (root / "commitlog").mkdir()
    (root / "commitlog" / ("0" * 20)).write_bytes(bytes(range(256)) * (SEGMENT // 256))


def _misaligned_segment(root: Path) -> None:
    (root / "commitlog").mkdir()
    (root / "commitlog" / "00000000000000001000").write_bytes(b"\x07" * SEGMENT)


def _users_file_of_zeros(root: Path) -> None:
    (root / "commitlog").mkdir()
    (root / "commitlog" / "notes.txt").write_bytes(bytes(1024))


def _abort_is_a_directory(root: Path) -> None:
    (root / "abort").mkdir()


@pytest.mark.parametrize("make", [_garbage_segment, _misaligned_segment, _users_file_of_zeros, _abort_is_a_directory])
def test_a_refused_open_leaves_the_directory_as_it_found_it(tmp_path: Path, make: Callable[[Path], None]) -> None:
    """A writable open that fails used to leave `checkpoint`, `consumequeue/` and `index/` behind (and `abort.bak`),
    and deleted a file of zeros of any name from `commitlog/` as an interrupted segment creation."""
    root = tmp_path / "s"
    root.mkdir()
    make(root)
    before = snapshot(root)
    with pytest.raises(rmq.RmqError):
        rmq.MessageStore(root, small_config(), start_services=False)
    after = snapshot(root)
    # The lock file stays (RocketMQ's broker leaves one too): removing it could let two processes hold the lock.
    after.pop("lock", None)
    assert after == before


def test_a_transient_store_pool_larger_than_memory_is_refused_not_an_abort(tmp_path: Path) -> None:
    """`transient_store_pool_size` buffers of a segment each, beyond the machine's memory, aborted the process
    ("memory allocation of 34359738352 bytes failed") where it must be an `InvalidConfigError`."""
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGESIZE")
    buffers = min(memory // SEGMENT + 1, 2**31 - 1)
    cfg = small_config(transient_store_pool_enable=True, transient_store_pool_size=buffers)
    with pytest.raises(rmq.InvalidConfigError, match="transient_store_pool_size"):
        rmq.MessageStore(tmp_path / "s", cfg, start_services=False)
    assert not (tmp_path / "s").exists() or [p.name for p in (tmp_path / "s").iterdir()] == ["lock"]
