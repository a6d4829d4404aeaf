"""Every public call of `rmq` under hostile arguments (issue 15): Hypothesis draws each argument from a good
value or a hostile one (None, bools for ints, ints beyond Java's int and long, NaN and infinite floats, lone
surrogates, bytes for str, str for bytes, lists, mappings of the wrong shape).

For every call: the only exceptions are `rmq.RmqError`s (a `PanicException` derives from BaseException and is
caught here as a failure); nothing hangs (pytest-timeout; legal timeouts are drawn small); and a rejected call
changes no byte under the store directory (the offsets file included), no queue offset and no committed offset.

`HOSTILE_EXAMPLES` sets the examples per entry point (default 20; `make hostile` runs 400).
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rmq
import rmq.arrow as rarrow
import rmq.rebalance as rb
from conftest import SMALL, snapshot
from rmq import _native
from rmq.consumer import ArrivalWaiter, topic_queues

EXAMPLES = int(os.environ.get("HOSTILE_EXAMPLES", "20"))
TOPICS = ("T", "U")

MISSING = object()
"""An optional argument left out."""

HOSTILE: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from([-1, -(2**31) - 1, 2**31, 2**32, -(2**63) - 1, 2**63, 2**64, 10**30, -(10**30)]),
    st.integers(),
    st.sampled_from([math.nan, math.inf, -math.inf, -0.5, 1.5, 1e300, -1e300]),
    st.floats(),
    st.sampled_from(["", "\ud800", "a\udfffb", "a@b", "\x00", "x" * 300, "T"]),
    st.text(max_size=5),
    st.binary(max_size=5),
    st.sampled_from([[], [1], ["a", 2], {}, {"a": 1}, {1: "a"}, ("T",), ("T", 0, 1), object()]),
)
"""Values that break at least one argument's contract somewhere."""


def arg(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A good value or a hostile one, about half and half."""
    return st.one_of(good, HOSTILE)


def opt(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """An optional argument: left out, good, or hostile."""
    return st.one_of(st.just(MISSING), good, HOSTILE)


TOPIC = st.sampled_from(TOPICS)
GROUP = st.sampled_from(["G", "G2"])
QID = st.integers(0, 3)
OFFSET = st.integers(-2, 40)
BODY = st.binary(max_size=64)
TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x01\x02"), min_size=1, max_size=6)
PROPS = st.dictionaries(st.sampled_from(["a", "b", "c"]), TEXT, max_size=2)
SMALL_TIMEOUT = st.sampled_from([0, 0.0, 0.001, 0.01])


def _long_wait(v: object) -> bool:
    """A legal timeout that would really wait (the hostile set has them; the calls that wait must not get them)."""
    return isinstance(v, int | float) and not isinstance(v, bool) and 0.05 < v < math.inf


TIMEOUT = st.one_of(SMALL_TIMEOUT, HOSTILE.filter(lambda v: not _long_wait(v)))
"""A short legal timeout or a hostile value that is not a long legal one."""
MQ = st.builds(lambda t, q: rmq.MessageQueue(t, "broker-a", q), TOPIC, QID)
CIDS = st.lists(st.sampled_from(["c1", "c2", "c3"]), min_size=1, max_size=3)
COLUMNS = st.lists(st.sampled_from(list(rarrow.COLUMNS)), min_size=1, max_size=3, unique=True)


def kwargs_of(draw: Callable[[st.SearchStrategy[Any]], Any], **spec: st.SearchStrategy[Any]) -> dict[str, Any]:
    """Optional keyword arguments: each left out, good or hostile."""
    out = {}
    for name, good in spec.items():
        v = draw(opt(good))
        if v is not MISSING:
            out[name] = v
    return out


@dataclass
class Env:
    root: Path
    store: rmq.MessageStore
    offsets: rmq.ConsumerOffsetManager
    consumer: rmq.PullConsumer
    tmp: pytest.TempPathFactory

    def state(self) -> tuple[object, ...]:
        """Everything a rejected call must leave as it was."""
        assert self.store.wait_dispatched()
        queues = tuple(self.store.next_queue_offset(t, q) for t in TOPICS for q in range(4))
        return snapshot(self.root), self.store.max_offset, queues, self.offsets.table()


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    root = tmp_path_factory.mktemp("hostile")
    # No background services: their flushes write the checkpoint on their own schedule, which would change the
    # store between a rejected call's before and after. Dispatch happens in `wait_dispatched` instead.
    store = rmq.MessageStore(root / "store", SMALL, start_services=False)
    for i in range(12):
        store.put(TOPICS[i % 2], b"m%d" % i, queue_id=i % 3, keys=f"k{i}", tags="TagA")
    assert store.wait_dispatched()
    offsets = rmq.ConsumerOffsetManager(store.consumer_offset_path)
    offsets.commit_offset("G", "T", 0, 2)
    offsets.persist()
    consumer = rmq.PullConsumer(store, "G", offsets=offsets)
    yield Env(root, store, offsets, consumer, tmp_path_factory)
    store.close()


def consume(result: object) -> None:
    """Runs lazy results (iterators, generators) so their errors happen inside the check."""
    if isinstance(result, Iterator):
        for _ in itertools.islice(result, 50):
            pass


Draw = Callable[[st.SearchStrategy[Any]], Any]
Call = Callable[[Env, Draw], object]

# -- the entry points ----------------------------------------------------------------------------------------------


def _put(e: Env, d: Draw) -> object:
    kw = kwargs_of(
        d,
        queue_id=QID,
        tags=TEXT,
        keys=st.one_of(TEXT, st.lists(TEXT, max_size=2)),
        properties=PROPS,
        flag=st.integers(0, 5),
        sys_flag=st.just(0),
        transaction_type=st.sampled_from([rmq.TransactionType.NOT_TYPE]),
        born_host=st.sampled_from(["127.0.0.1:1", "[::1]:2"]),
        born_timestamp=st.integers(0, 2**40),
        reconsume_times=st.integers(0, 3),
        prepared_transaction_offset=st.integers(0, 10),
        wait_store_msg_ok=st.booleans(),
    )
    return e.store.put(d(arg(TOPIC)), d(arg(BODY)), **kw)


def _put_batch(e: Env, d: Draw) -> object:
    item = st.one_of(BODY, st.builds(lambda b: rmq.Message(b), BODY), HOSTILE)
    messages = d(st.one_of(st.lists(item, min_size=1, max_size=3), HOSTILE))
    one_key = st.one_of(st.none(), TEXT, st.lists(TEXT, max_size=2))
    kw = kwargs_of(
        d,
        queue_id=QID,
        tags=st.one_of(TEXT, st.lists(st.one_of(st.none(), TEXT), min_size=1, max_size=3)),
        keys=st.lists(one_key, min_size=1, max_size=3),
        sys_flag=st.just(0),
        born_host=st.just("1.2.3.4:5"),
        reconsume_times=QID,
    )
    return e.store.put_batch(d(arg(TOPIC)), messages, **kw)


def _message(e: Env, d: Draw) -> object:
    kw = kwargs_of(d, tags=TEXT, keys=TEXT, properties=PROPS, flag=st.integers(0, 3))
    return rmq.Message(d(arg(BODY)), **kw)


#: Setting values no field accepts.
BAD_SETTING = st.sampled_from([None, True, 1.5, math.nan, "x", "\ud800", b"x", [], 2**64, -(2**64)])
SMALL_FILES = {
    "mapped_file_size_commit_log": 4096,
    "mapped_file_size_consume_queue": 6000,
    "max_hash_slot_num": 64,
    "max_index_num": 256,
}


def _open_store(e: Env, d: Draw) -> object:
    """A new store with hostile settings: refused before anything is created."""
    path = e.tmp.mktemp("open") / "store"
    fields = {
        "mapped_file_size_commit_log": st.sampled_from([4096, 8192]),
        "max_message_size": st.sampled_from([1024, 4096]),
        "check_crc_on_recover": st.booleans(),
        "flush_disk_type": st.sampled_from(["ASYNC_FLUSH", "SYNC_FLUSH"]),
        "store_host": st.sampled_from(["1.2.3.4:5"]),
        "broker_cluster_name": st.sampled_from(["C", None]),
        "message_delay_level": st.just("1s 5s"),
    }
    kw = {}
    for name, good in fields.items():  # hostile settings are surely illegal ones (a legal 2**30 would allocate)
        v = d(st.one_of(st.just(MISSING), good, BAD_SETTING))
        if v is not MISSING:
            kw[name] = v
    for name, default in SMALL_FILES.items():
        kw.setdefault(name, default)
    config = d(st.one_of(st.just(rmq.StoreConfig(**kw)), HOSTILE.filter(lambda v: v is not None)))
    start = d(arg(st.booleans()))
    where = d(st.one_of(st.just(path), HOSTILE.filter(lambda v: not isinstance(v, str))))
    try:
        with rmq.MessageStore(where, config, start_services=start):
            pass
    except rmq.RmqError:
        assert not path.exists(), "a refused open created the store directory"
        raise
    return None


def _from_properties(e: Env, d: Draw) -> object:
    props = d(arg(st.dictionaries(st.sampled_from(["maxMessageSize", "brokerIP1", "flushDiskType"]), TEXT)))
    return rmq.StoreConfig.from_properties(props)


def _store_call(name: str, *strategies: st.SearchStrategy[Any], **optional: st.SearchStrategy[Any]) -> Call:
    def call(e: Env, d: Draw) -> object:
        args = [d(arg(s)) for s in strategies]
        return getattr(e.store, name)(*args, **kwargs_of(d, **optional))

    call.__name__ = name
    return call


def _manager_call(name: str, *strategies: st.SearchStrategy[Any], **optional: st.SearchStrategy[Any]) -> Call:
    def call(e: Env, d: Draw) -> object:
        args = [d(arg(s)) for s in strategies]
        return getattr(e.offsets, name)(*args, **kwargs_of(d, **optional))

    return call


def _consumer_call(name: str, *strategies: st.SearchStrategy[Any], **optional: st.SearchStrategy[Any]) -> Call:
    def call(e: Env, d: Draw) -> object:
        args = [d(arg(s)) for s in strategies]
        return getattr(e.consumer, name)(*args, **kwargs_of(d, **optional))

    return call


def _new_manager(e: Env, d: Draw) -> object:
    path = e.tmp.mktemp("mgr") / "o.json"
    m = rmq.ConsumerOffsetManager(
        d(st.one_of(st.just(path), HOSTILE.filter(lambda v: not isinstance(v, str)))),
        **kwargs_of(d, flush_interval_ms=st.integers(1, 10_000), start_thread=st.just(False)),
    )
    return m.table()


def _reset_by_time(e: Env, d: Draw) -> object:
    store = d(st.one_of(st.just(e.store), HOSTILE))
    kw = kwargs_of(d, queue_ids=st.lists(QID, max_size=2), force=st.booleans())
    return e.offsets.reset_offset_by_time(store, d(arg(GROUP)), d(arg(TOPIC)), d(arg(st.integers(-1, 2**41))), **kw)


def _new_pull_consumer(e: Env, d: Draw) -> object:
    store = d(st.one_of(st.just(e.store), HOSTILE))
    return rmq.PullConsumer(store, d(arg(GROUP)), **kwargs_of(d, offsets=st.just(e.offsets)))


def _new_push_consumer(e: Env, d: Draw) -> object:
    """Constructed, not started: a rejected construction starts nothing and joins no group."""
    kw = kwargs_of(
        d,
        subscription=st.just("*"),
        consumer_id=st.just("cid"),
        strategy=st.just(rb.AllocateMessageQueueAveragely()),
        consume_thread_nums=st.integers(1, 4),
        consume_message_batch_max_size=st.integers(1, 4),
        pull_batch_size=st.integers(1, 64),
        pull_threshold_for_queue=st.integers(1, 100),
        max_reconsume_times=st.integers(0, 16),
        consume_from_where=st.sampled_from(list(rmq.ConsumeFromWhere)),
        consume_timestamp=st.integers(0, 2**41),
        persist_offsets_each_batch=st.booleans(),
        topic_queue_nums=st.integers(1, 8),
        poll_timeout=st.sampled_from([0.1, 5.0]),
    )
    listener = d(st.one_of(st.just(lambda msgs, ctx: rmq.ConsumeStatus.CONSUME_SUCCESS), HOSTILE))
    offsets = d(st.one_of(st.just(e.offsets), HOSTILE))
    return rmq.PushConsumer(e.store, d(arg(GROUP)), d(arg(TOPIC)), listener, offsets=offsets, **kw)


def _pull_block(e: Env, d: Draw) -> object:
    """A long-polling pull past the end of a queue: it waits its whole timeout, so only short legal ones."""
    kw = kwargs_of(d, max_nums=st.integers(1, 4), subscription=st.sampled_from(["*", None]))
    offset = d(arg(st.integers(5, 40)))
    return e.consumer.pull_block_if_not_found(d(arg(MQ)), offset, timeout=d(TIMEOUT), **kw)


def _wait_arrival(e: Env, d: Draw) -> object:
    return e.store.wait_arrival(d(arg(st.integers(0, 10))), d(TIMEOUT))


def _wait_queue_beyond(e: Env, d: Draw) -> object:
    return e.store.wait_queue_beyond(d(arg(TOPIC)), d(arg(QID)), d(arg(st.integers(0, 100))), d(TIMEOUT))


def _waiter(e: Env, d: Draw) -> object:
    w = ArrivalWaiter.of(e.store)
    return w.wait_beyond(d(arg(TOPIC)), d(arg(QID)), d(arg(st.integers(0, 100))), d(TIMEOUT))


def _topic_queues(e: Env, d: Draw) -> object:
    return topic_queues(e.store, d(arg(TOPIC)), d(arg(st.integers(0, 8))))


def _allocate(e: Env, d: Draw) -> object:
    strategy = d(
        st.one_of(
            st.sampled_from(
                [
                    rb.AllocateMessageQueueAveragely(),
                    rb.AllocateMessageQueueAveragelyByCircle(),
                    rb.AllocateMessageQueueConsistentHash(3),
                    rb.AllocateMessageQueueByMachineRoom(["r"]),
                ]
            ),
            HOSTILE,
        )
    )
    mqs = d(arg(st.lists(MQ, min_size=1, max_size=4)))
    cids = d(arg(CIDS))
    return rb.allocate_sorted(strategy, d(arg(GROUP)), d(arg(st.sampled_from(["c1", "c2"]))), mqs, cids)


def _strategy_allocate(e: Env, d: Draw) -> object:
    s = d(st.sampled_from([rb.AllocateMessageQueueAveragely(), rb.AllocateMessageQueueConsistentHash(2)]))
    return s.allocate(d(arg(GROUP)), d(arg(st.just("c1"))), d(arg(st.lists(MQ, max_size=3))), d(arg(CIDS)))


def _strategy_by_name(e: Env, d: Draw) -> object:
    kw = kwargs_of(d, virtual_node_cnt=st.integers(0, 5), queues=st.lists(MQ, max_size=2))
    return rb.strategy_by_name(d(arg(st.sampled_from(["AVG", "CONSISTENT_HASH", "CONFIG", "NOPE"]))), **kw)


def _message_queue(e: Env, d: Draw) -> object:
    return rmq.MessageQueue(d(arg(TOPIC)), d(arg(st.just("broker-a"))), d(arg(QID)))


def _md5(e: Env, d: Draw) -> object:
    return rb.md5_hash(d(arg(TEXT)))


def _consistent_hash(e: Env, d: Draw) -> object:
    return rb.AllocateMessageQueueConsistentHash(d(arg(st.integers(0, 5))), d(st.one_of(st.none(), HOSTILE)))


def _segment(e: Env) -> tuple[str, int, int]:
    path = e.store.commitlog_files()[0]
    base = int(os.path.basename(path))
    return path, base, min(e.store.max_offset - base, 4096)


def _read_split(e: Env, d: Draw) -> object:
    path, base, limit = _segment(e)
    kw = kwargs_of(
        d,
        schema=st.just(rarrow.arrow_schema(["topic", "queue_id"])),
        topics=st.lists(TOPIC, max_size=2),
        min_store_ms=st.integers(0, 2**41),
        max_store_ms=st.integers(0, 2**42),
        max_rows=st.integers(1, 100),
    )
    good_path = st.just(path)
    reader = rarrow.read_split(
        d(arg(good_path)),
        d(arg(st.just(base))),
        d(arg(st.just(0))),
        d(arg(st.just(limit))),
        **kw,
    )
    return list(reader)


def _split_reader(e: Env, d: Draw) -> object:
    path, base, limit = _segment(e)
    kw = kwargs_of(
        d,
        columns=COLUMNS,
        topics=st.lists(TOPIC, max_size=2),
        max_rows=st.integers(1, 50),
        max_bytes=st.integers(1, 1 << 20),
    )
    return list(_native.SplitReader(d(arg(st.just(path))), d(arg(st.just(base))), 0, limit, **kw))


def _plan_commitlog(e: Env, d: Draw) -> object:
    path, _, _ = _segment(e)
    split = d(arg(st.integers(1, 1 << 20)))
    return _native.plan_commitlog(d(arg(st.just(os.path.dirname(path)))), split, skip_damage=d(arg(st.booleans())))


RECORDS = st.builds(
    lambda rows: pa.array(rows, pa.binary()), st.lists(st.one_of(st.none(), st.binary(max_size=80)), max_size=3)
)


def _decode_records(e: Env, d: Draw) -> object:
    records = d(arg(st.one_of(RECORDS, st.just(pa.array([1, 2])))))
    return rarrow.decode_records(records, **kwargs_of(d, columns=COLUMNS, strict=st.booleans()))


def _decode_column(e: Env, d: Draw) -> object:
    return rarrow.decode_column(d(arg(RECORDS)), d(arg(st.sampled_from(list(rarrow.COLUMNS)))))


def _java_hash(e: Env, d: Draw) -> object:
    return rarrow.java_hash(d(arg(st.builds(lambda s: pa.array(s, pa.string()), st.lists(TEXT, max_size=3)))))


def _native_buffers(e: Env, d: Draw) -> object:
    fn = d(st.sampled_from([_native.decode_records, _native.java_hash_strings]))
    return fn(
        d(arg(st.just(b"\0\0\0\0"))), d(arg(st.just(b""))), d(arg(st.none())), d(arg(st.just(0))), d(arg(st.just(0)))
    )


def _offsets_codec(e: Env, d: Draw) -> object:
    table = d(arg(st.dictionaries(st.sampled_from(["T@G", "U@G"]), st.dictionaries(QID, OFFSET), max_size=2)))
    from rmq.offsets import DataVersion, decode_offsets, encode_offsets

    text = encode_offsets(table, DataVersion(*(d(arg(st.integers(0, 10))) for _ in range(3))))
    return decode_offsets(d(st.one_of(st.just(text), HOSTILE)))


def _load_delay_offsets(e: Env, d: Draw) -> object:
    return _native.load_delay_offsets(
        d(arg(st.sampled_from([str(e.root / "store"), e.root / "store", "/nonexistent"])))
    )


def _open_read_only(e: Env, d: Draw) -> object:
    """A read-only open of the open store (it takes no lock), with hostile arguments."""
    kw = kwargs_of(d, read_only=st.booleans(), start_services=st.booleans(), start_reput=st.booleans())
    store = rmq.MessageStore(e.root / "store", SMALL, **kw)
    try:
        return store.refresh()
    finally:
        store.close()


def _check_store(e: Env, d: Draw) -> object:
    from rmq.check import check_store

    config = d(st.one_of(st.just(SMALL), st.none(), HOSTILE))
    return check_store(d(arg(st.just(str(e.root / "store")))), config)


def _index_file_entries(e: Env, d: Draw) -> object:
    path = str(sorted((e.root / "store" / "index").iterdir())[0])
    return _native.index_file_entries(d(arg(st.just(path))), d(arg(st.just(64))), d(arg(st.just(256))))


def _export_batches(e: Env, d: Draw) -> object:
    from rmq.export import Selection, batches

    kw = kwargs_of(
        d,
        topics=st.lists(TOPIC, max_size=2),
        queue_id=QID,
        tag=TEXT,
        key=TEXT,
        msg_id=TEXT,
        grep=st.sampled_from(["m1", "^m", "("]),
        from_offset=st.integers(0, 5000),
        to_offset=st.integers(0, 5000),
    )
    return list(batches(e.root / "store", Selection(**kw)))


CALLS: dict[str, Call] = {
    "MessageStore(read_only=)": _open_read_only,
    "check_store": _check_store,
    "index_file_entries": _index_file_entries,
    "export.batches": _export_batches,
    "put": _put,
    "put_batch": _put_batch,
    "Message": _message,
    "MessageStore": _open_store,
    "StoreConfig.from_properties": _from_properties,
    "read": _store_call("read", st.sampled_from([0, 1])),
    "read_raw": _store_call("read_raw", st.sampled_from([0, 1])),
    "scan": _store_call("scan", from_offset=st.just(0)),
    "next_queue_offset": _store_call("next_queue_offset", TOPIC, QID),
    "query_message": _store_call(
        "query_message", TOPIC, TEXT, max_num=st.integers(0, 8), begin=st.integers(0, 9), end=st.integers(0, 2**42)
    ),
    "get_offset_in_queue_by_time": _store_call(
        "get_offset_in_queue_by_time",
        TOPIC,
        QID,
        st.integers(0, 2**42),
        boundary=st.sampled_from([rmq.BoundaryType.LOWER, rmq.BoundaryType.UPPER]),
    ),
    "set_max_message_size": _store_call("set_max_message_size", st.just(4 * 1024 * 1024)),
    "get_min_offset_in_queue": _store_call("get_min_offset_in_queue", TOPIC, QID),
    "get_max_offset_in_queue": _store_call("get_max_offset_in_queue", TOPIC, QID, committed=st.booleans()),
    "get_commitlog_offset_in_queue": _store_call("get_commitlog_offset_in_queue", TOPIC, QID, OFFSET),
    "get_message_store_timestamp": _store_call("get_message_store_timestamp", TOPIC, QID, OFFSET),
    "look_message_by_offset": _store_call("look_message_by_offset", st.sampled_from([0, 3]), size=st.integers(0, 99)),
    "get_message": _store_call(
        "get_message",
        GROUP,
        TOPIC,
        QID,
        OFFSET,
        max_msgs=st.integers(0, 8),
        subscription=st.sampled_from(["*", "TagA", "TagA || TagB", None]),
        max_total_msg_size=st.integers(0, 10_000),
    ),
    "iter_queue": _store_call("iter_queue", TOPIC, QID, from_offset=OFFSET, batch=st.integers(1, 5)),
    "queue_ids": _store_call("queue_ids", TOPIC),
    "consume_queue_files": _store_call("consume_queue_files", TOPIC, QID),
    "wait_dispatched": _store_call("wait_dispatched", timeout=SMALL_TIMEOUT),
    "_wait_dispatched": _store_call("_wait_dispatched", timeout=SMALL_TIMEOUT),
    "wait_arrival": _wait_arrival,
    "wait_queue_beyond": _wait_queue_beyond,
    "_dispatch": _store_call("_dispatch", max_records=st.integers(0, 10), want_arrivals=st.booleans()),
    "_cq_entries": _store_call("_cq_entries", TOPIC, QID, from_offset=OFFSET, max_entries=st.integers(0, 9)),
    "commit_offset": _manager_call("commit_offset", GROUP, TOPIC, QID, OFFSET, journal=st.booleans()),
    "commit_pull_offset": _manager_call("commit_pull_offset", GROUP, TOPIC, QID, OFFSET),
    "query_offset": _manager_call("query_offset", GROUP, TOPIC, QID),
    "query_offsets": _manager_call("query_offsets", GROUP, TOPIC),
    "query_pull_offset": _manager_call("query_pull_offset", GROUP, TOPIC, QID),
    "assign_reset_offset": _manager_call("assign_reset_offset", GROUP, TOPIC, QID, OFFSET),
    "has_reset_offset": _manager_call("has_reset_offset", GROUP, TOPIC, QID),
    "query_then_erase_reset_offset": _manager_call("query_then_erase_reset_offset", GROUP, TOPIC, QID),
    "clear_pull_offset": _manager_call("clear_pull_offset", GROUP, TOPIC),
    "topics_of": _manager_call("topics_of", GROUP),
    "groups_of": _manager_call("groups_of", TOPIC),
    "remove_group": _manager_call("remove_group", st.just("Nobody")),
    "clean_topic": _manager_call("clean_topic", st.just("NoTopic")),
    "persist": _manager_call("persist", sync=st.booleans()),
    "ConsumerOffsetManager": _new_manager,
    "reset_offset_by_time": _reset_by_time,
    "offsets codec": _offsets_codec,
    "load_delay_offsets": _load_delay_offsets,
    "PullConsumer": _new_pull_consumer,
    "pull": _consumer_call("pull", MQ, OFFSET, st.integers(1, 8), st.sampled_from(["*", None])),
    "pull_block_if_not_found": _pull_block,
    "update_consume_offset": _consumer_call("update_consume_offset", MQ, OFFSET),
    "fetch_consume_offset": _consumer_call("fetch_consume_offset", MQ),
    "fetch_subscribe_message_queues": _consumer_call("fetch_subscribe_message_queues", TOPIC),
    "PushConsumer": _new_push_consumer,
    "ArrivalWaiter.wait_beyond": _waiter,
    "topic_queues": _topic_queues,
    "allocate_sorted": _allocate,
    "AllocateStrategy.allocate": _strategy_allocate,
    "strategy_by_name": _strategy_by_name,
    "MessageQueue": _message_queue,
    "md5_hash": _md5,
    "AllocateMessageQueueConsistentHash": _consistent_hash,
    "arrow.read_split": _read_split,
    "arrow.decode_records": _decode_records,
    "arrow.decode_column": _decode_column,
    "arrow.java_hash": _java_hash,
    "SplitReader": _split_reader,
    "plan_commitlog": _plan_commitlog,
    "native decode_records/java_hash_strings": _native_buffers,
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", list(CALLS))
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_hostile_arguments_raise_typed_errors_and_change_nothing(env: Env, name: str, data: st.DataObject) -> None:
    before = env.state()
    try:
        consume(CALLS[name](env, data.draw))
    except rmq.RmqError as e:
        assert env.state() == before, f"{name} was rejected ({e!r}) but changed the store or the offsets"
    except BaseException as e:  # a PanicException, an AttributeError, an OverflowError...
        pytest.fail(f"{name} raised {type(e).__module__}.{type(e).__qualname__}: {e!r}")


def test_integers_with_index_count_as_ints_but_bools_do_not(env: Env) -> None:
    """NumPy integers (`__index__`) and floats (a float subclass) are accepted as before; bools never are."""
    import numpy as np

    assert env.store.next_queue_offset("T", np.int64(0)) == env.store.next_queue_offset("T", 0)
    assert env.store.wait_dispatched(np.float64(1.0))
    assert env.offsets.query_offset("G", "T", np.int32(0)) == env.offsets.query_offset("G", "T", 0)
    for bad in (True, np.bool_(False)):
        with pytest.raises(rmq.ArgumentTypeError):
            env.store.next_queue_offset("T", bad)
        with pytest.raises(rmq.ArgumentTypeError):
            env.offsets.query_offset("G", "T", bad)
    with pytest.raises(rmq.InvalidArgumentError):
        env.store.wait_dispatched(np.float64("nan"))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("bad", [0, -1])
def test_a_split_reader_refuses_max_bytes_below_one(env: Env, bad: int) -> None:
    """QA: `SplitReader(..., max_bytes=0)` yielded empty batches forever (a for loop over it never ended); 0 is
    refused as `plan_commitlog` refuses a split size of 0, before anything is read."""
    path, base, limit = _segment(env)
    with pytest.raises(rmq.InvalidArgumentError, match=r"\[1, 2147483647\]") as e:
        _native.SplitReader(path, base, 0, limit, max_bytes=bad)
    assert "max_bytes" in " ".join(getattr(e.value, "__notes__", []))
    one_each = [pa.record_batch(b).num_rows for b in _native.SplitReader(path, base, 0, limit, max_bytes=1)]
    assert one_each and set(one_each) == {1}  # the smallest limit: a record a batch
