"""Property-based tests: random messages round-trip through `put`/`put_batch` and back, and a state machine of
puts, batches, reopens, simulated crashes and scans agrees at every step with an in-memory model of the log.
"""

from __future__ import annotations

import ipaddress
import shutil
import string
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import rmq
from conftest import (
    NOT_ALLOWED_SEND_TOPICS,
    SMALL,
    encoded_properties_len,
    parse_properties,
    parse_record,
    small_config,
)

RESERVED = {"TAGS", "KEYS", "UNIQ_KEY", "WAIT", "CLUSTER", "INNER_NUM", "INNER_BASE", "DELAY", "__CRC32#"}
NOT_ALLOWED_SEND = set(NOT_ALLOWED_SEND_TOPICS)
TOPIC_CHARS = string.ascii_letters + string.digits + "%|_-"

text = st.text(alphabet=st.characters(exclude_characters="\x01\x02", exclude_categories=("Cs",)), min_size=1)
tags_st = st.none() | text
key_st = st.text(alphabet=st.characters(exclude_characters="\x01\x02 ", exclude_categories=("Cs",)), min_size=1)
keys_st = st.none() | st.lists(key_st, min_size=1, max_size=5)
props_st = st.dictionaries(text.filter(lambda k: k not in RESERVED), text, max_size=6)
topic_st = st.text(alphabet=TOPIC_CHARS, min_size=1, max_size=127).filter(
    lambda t: t not in NOT_ALLOWED_SEND
) | st.text(alphabet=TOPIC_CHARS, max_size=248).map(lambda t: "%RETRY%" + t)
host_st = st.tuples(st.ip_addresses(), st.integers(0, 65535))
sys_flag_st = st.sampled_from([0, 0x1, 0x2, 0x3, 0x101, 0x201, 0x301, 0x103])

BIG = small_config(mapped_file_size_commit_log=1 << 20)


def host_arg(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int) -> str:
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


def parse_host(text: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    host, _, port = text.rpartition(":")
    return ipaddress.ip_address(host.strip("[]")), int(port)


def canonical(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """Java stores an IPv4-mapped IPv6 address as IPv4."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def expected_properties(
    props: dict[str, str], tags: str | None, keys: list[str] | None, uniq: str, cluster: bool
) -> dict[str, str]:
    out = {**props, "WAIT": "true", "UNIQ_KEY": uniq}
    if tags is not None:
        out["TAGS"] = tags
    if keys:
        out["KEYS"] = " ".join(keys)
    if cluster:
        out["CLUSTER"] = "DefaultCluster"
    return out


@pytest.fixture(scope="module")
def big_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[rmq.MessageStore]:
    with rmq.MessageStore(tmp_path_factory.mktemp("hyp") / "store", BIG) as store:
        yield store


@settings(max_examples=100, deadline=None)
@given(
    body=st.binary(max_size=4096),
    tags=tags_st,
    keys=keys_st,
    props=props_st,
    topic=topic_st,
    born=host_st,
    queue_id=st.integers(0, 2**31 - 1),
    flag=st.integers(-(2**31), 2**31 - 1),
    sys_flag=sys_flag_st,
    born_timestamp=st.integers(-(2**63), 2**63 - 1),
    reconsume_times=st.integers(0, 2**31 - 1),
)
def test_put_round_trip(
    big_store: rmq.MessageStore,
    body: bytes,
    tags: str | None,
    keys: list[str] | None,
    props: dict[str, str],
    topic: str,
    born: tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int],
    queue_id: int,
    flag: int,
    sys_flag: int,
    born_timestamp: int,
    reconsume_times: int,
) -> None:
    queue_offset = big_store.next_queue_offset(topic, queue_id)
    r = big_store.put(
        topic,
        body,
        queue_id=queue_id,
        tags=tags,
        keys=keys,
        properties=props,
        flag=flag,
        sys_flag=sys_flag,
        born_host=host_arg(*born),
        born_timestamp=born_timestamp,
        reconsume_times=reconsume_times,
    )
    assert r.queue_offset == queue_offset and big_store.next_queue_offset(topic, queue_id) == queue_offset + 1
    m = big_store.read(r.wrote_offset)
    assert m is not None
    assert (m.topic, m.queue_id, m.queue_offset, m.body, m.tags, m.keys) == (
        topic,
        queue_id,
        queue_offset,
        body,
        tags,
        keys or [],
    )
    assert (m.flag, m.born_timestamp, m.reconsume_times) == (flag, born_timestamp, reconsume_times)
    born_ip = canonical(born[0])
    assert parse_host(m.born_host) == (born_ip, born[1])
    assert m.sys_flag == sys_flag | (0x10 if born_ip.version == 6 else 0)
    assert m.properties == expected_properties(props, tags, keys, r.uniq_key, cluster=True)
    assert m.version == (2 if len(topic) > 127 else 1) and m.body_crc_ok
    raw = bytes(m.raw)
    p = parse_record(raw)
    assert (p.topic, p.body, p.queue_id, p.flag, p.sys_flag, p.physical_offset) == (
        topic,
        body,
        queue_id,
        flag,
        m.sys_flag,
        r.wrote_offset,
    )
    assert parse_properties(p.properties) == m.properties
    host_bytes = 12 if born_ip.version == 6 else 0
    assert len(raw) == r.wrote_bytes == 91 + (m.version - 1) + len(body) + len(topic) + len(p.properties) + host_bytes
    assert len(p.properties) == encoded_properties_len(m.properties)


@settings(max_examples=50, deadline=None)
@given(
    items=st.lists(
        st.tuples(st.binary(max_size=512), tags_st, keys_st, props_st, st.integers(-(2**31), 2**31 - 1)),
        min_size=1,
        max_size=8,
    ),
    topic=topic_st,
    born=host_st,
    as_bytes=st.booleans(),
)
def test_put_batch_round_trip(
    big_store: rmq.MessageStore,
    items: list[tuple[bytes, str | None, list[str] | None, dict[str, str], int]],
    topic: str,
    born: tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int],
    as_bytes: bool,
) -> None:
    if as_bytes:
        items = [(body, None, None, {}, 0) for body, *_ in items]
    messages: list[bytes | rmq.Message] = [
        body if as_bytes else rmq.Message(body, tags=tags, keys=keys, properties=props, flag=flag)
        for body, tags, keys, props, flag in items
    ]
    first = big_store.next_queue_offset(topic, 1)
    r = big_store.put_batch(topic, messages, queue_id=1, born_host=host_arg(*born))
    assert r.msg_num == len(items) and r.queue_offset == first
    assert big_store.next_queue_offset(topic, 1) == first + len(items)
    assert len({o // (1 << 20) for o in r.offsets}) == 1  # one segment
    end = r.offsets[0]
    for i, (off, (body, tags, keys, props, flag)) in enumerate(zip(r.offsets, items, strict=True)):
        m = big_store.read(off)
        assert m is not None and m.commitlog_offset == off == end
        end += m.store_size
        assert (m.topic, m.queue_id, m.queue_offset, m.body, m.tags, m.keys, m.flag) == (
            topic,
            1,
            first + i,
            body,
            tags,
            keys or [],
            flag,
        )
        assert m.store_timestamp == r.store_timestamp and m.msg_id == r.msg_ids[i]
        assert parse_host(m.born_host) == (canonical(born[0]), born[1])
        assert m.properties == expected_properties(props, tags, keys, r.uniq_keys[i], cluster=False)
    assert end - r.offsets[0] == r.wrote_bytes


class StoreMachine(RuleBasedStateMachine):
    """Model: the list of stored messages in log order and each queue's next offset. Every step, `scan`
    must return exactly the model and `next_queue_offset` must agree with it."""

    TOPICS = ("A", "B", "%RETRY%" + "g" * 150)

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="rmq-machine-"))
        self.generation = 0
        self.store = rmq.MessageStore(self.root / "s0", SMALL)
        self.expected: list[tuple[int, str, int, int, bytes, str | None]] = []
        self.next_q: dict[tuple[str, int], int] = {}

    def _end(self) -> int:
        if not self.expected:
            return 0
        return self.expected[-1][0]

    def _append(self, offset: int, topic: str, queue: int, body: bytes, tags: str | None) -> None:
        assert offset > self._end() or not self.expected
        qoff = self.next_q.get((topic, queue), 0)
        self.expected.append((offset, topic, queue, qoff, body, tags))
        self.next_q[(topic, queue)] = qoff + 1

    @rule(
        topic=st.sampled_from(TOPICS),
        queue=st.integers(0, 2),
        body=st.binary(max_size=700),
        tags=st.none() | st.sampled_from(["x", "TagA"]),
    )
    def put(self, topic: str, queue: int, body: bytes, tags: str | None) -> None:
        r = self.store.put(topic, body, queue_id=queue, tags=tags)
        assert r.queue_offset == self.next_q.get((topic, queue), 0)
        self._append(r.wrote_offset, topic, queue, body, tags)

    @rule(
        topic=st.sampled_from(TOPICS),
        queue=st.integers(0, 2),
        items=st.lists(st.tuples(st.binary(max_size=300), st.none() | st.just("bt")), min_size=1, max_size=6),
    )
    def put_batch(self, topic: str, queue: int, items: list[tuple[bytes, str | None]]) -> None:
        messages: list[bytes | rmq.Message] = [
            body if tags is None else rmq.Message(body, tags=tags) for body, tags in items
        ]
        r = self.store.put_batch(topic, messages, queue_id=queue)
        assert r.queue_offset == self.next_q.get((topic, queue), 0)
        assert r.offsets[0] // SMALL.mapped_file_size_commit_log == r.offsets[-1] // SMALL.mapped_file_size_commit_log
        for off, (body, tags) in zip(r.offsets, items, strict=True):
            self._append(off, topic, queue, body, tags)

    @rule(bad=st.sampled_from(["topic", "size", "property", "batch"]))
    def rejected(self, bad: str) -> None:
        max_before = self.store.max_offset
        with pytest.raises(rmq.InvalidInputError):
            if bad == "topic":
                self.store.put("../A", b"x")
            elif bad == "size":
                self.store.put("A", b"x" * 5000)
            elif bad == "property":
                self.store.put("A", b"x", properties={"k": "v\x01"})
            else:
                self.store.put_batch("A", [b"ok", rmq.Message(b"x", tags="")])
        assert self.store.max_offset == max_before

    @rule()
    def reopen(self) -> None:
        max_before = self.store.max_offset
        path = self.store.path
        self.store.close()
        self.store = rmq.MessageStore(path, SMALL)
        assert not self.store.unclean_shutdown and self.store.max_offset == max_before
        assert self.store.open_report["discarded_bytes"] == 0

    @rule()
    def crash(self) -> None:
        """Continue on a copy taken while the store is open: what a crash leaves behind. The reput thread is
        let finish first: a file-by-file copy of derived files being written is not a crash image (a crash
        freezes every file at one instant), and test_dispatch_hypothesis covers crashes mid-dispatch."""
        self.generation += 1
        copy = self.root / f"s{self.generation}"
        assert self.store.wait_dispatched(10.0)
        shutil.copytree(self.store.path, copy)
        self.store.close()
        self.store = rmq.MessageStore(copy, SMALL)
        assert self.store.unclean_shutdown

    @rule(data=st.data())
    def scan_from(self, data: st.DataObject) -> None:
        if not self.expected:
            assert list(self.store.scan(0)) == []
            return
        k = data.draw(st.integers(0, len(self.expected) - 1))
        got = [m.commitlog_offset for m in self.store.scan(self.expected[k][0])]
        assert got == [e[0] for e in self.expected[k:]]

    @invariant()
    def log_matches_model(self) -> None:
        got = [(m.commitlog_offset, m.topic, m.queue_id, m.queue_offset, m.body, m.tags) for m in self.store.scan()]
        assert got == self.expected
        for (topic, queue), n in self.next_q.items():
            assert self.store.next_queue_offset(topic, queue) == n
        if self.expected:
            last = self.store.read(self.expected[-1][0])
            assert last is not None and self.store.max_offset == last.commitlog_offset + last.store_size
            assert self.store.read(self.store.max_offset) is None

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.root, ignore_errors=True)


TestStoreMachine = StoreMachine.TestCase
TestStoreMachine.settings = settings(max_examples=50, stateful_step_count=30, deadline=None)
