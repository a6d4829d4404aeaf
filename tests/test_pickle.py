"""Values a Python service hands to other processes (`multiprocessing`, `concurrent.futures`) or copies:
the statuses and types (pickled by name) and `rmq.Message` (pickled as its constructor's call). Tried as a user
would on main: `pickle.dumps(rmq.Message(b"x"))` and `pickle.dumps(result.status)` raised "cannot pickle", so
a batch built in one process could not be put from another, and `Message`'s repr showed Rust's `Some("t")`."""

from __future__ import annotations

import copy
import multiprocessing
import pickle
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rmq

ENUMS = [rmq.GetMessageStatus, rmq.PutMessageStatus, rmq.TransactionType, rmq.BoundaryType]
PROTOCOLS = range(pickle.HIGHEST_PROTOCOL + 1)


def _members(cls: Any) -> list[Any]:
    return [getattr(cls, n) for n in dir(cls) if n.isupper()]


@pytest.mark.parametrize("cls", ENUMS, ids=lambda c: c.__name__)
def test_every_status_and_type_pickles_to_the_same_member(cls: Any) -> None:
    members = _members(cls)
    assert len(members) >= 2
    for m in members:
        for proto in PROTOCOLS:
            back = pickle.loads(pickle.dumps(m, proto))
            assert type(back) is cls and back == m and back.name == m.name
            assert [back == other for other in members].count(True) == 1
        assert copy.copy(m) == m and copy.deepcopy(m) == m


TEXT = st.text(alphabet=st.sampled_from("abcXYZ09_-é"), min_size=1, max_size=8)


def _fields(m: rmq.Message) -> tuple[Any, ...]:
    return (m.body, m.tags, m.keys, m.properties, m.flag)


@settings(max_examples=60, deadline=None)
@given(
    body=st.binary(max_size=64),
    tags=st.one_of(st.none(), TEXT),
    keys=st.one_of(st.none(), TEXT, st.lists(TEXT, min_size=1, max_size=3)),
    properties=st.dictionaries(TEXT.map(lambda k: "p" + k), TEXT, max_size=3),
    flag=st.integers(-(2**31), 2**31 - 1),
)
def test_a_message_pickles_to_an_equal_message(
    body: bytes, tags: str | None, keys: str | list[str] | None, properties: dict[str, str], flag: int
) -> None:
    m = rmq.Message(body, tags=tags, keys=keys, properties=properties, flag=flag)
    for proto in PROTOCOLS:
        back = pickle.loads(pickle.dumps(m, proto))
        assert type(back) is rmq.Message and _fields(back) == _fields(m)
    assert _fields(copy.copy(m)) == _fields(m) == _fields(copy.deepcopy(m))


def test_repr_is_python_not_rust() -> None:
    assert repr(rmq.Message(b"ab", tags="t", keys=["a", "b"], flag=3)) == (
        "Message(body=<2 bytes>, tags='t', keys='a b', flag=3)"
    )
    assert repr(rmq.Message(b"")) == "Message(body=<0 bytes>, tags=None, keys=None, flag=0)"


def _build(n: int) -> list[rmq.Message]:
    return [
        rmq.Message(f"body-{i}".encode(), tags="TagA", keys=[f"k{i}", "shared"], properties={"p": str(i)})
        for i in range(n)
    ]


def test_a_batch_built_in_another_process_is_put_as_built(tmp_path: Any) -> None:
    """The user's case: messages built in a worker process (spawned: nothing inherited), sent back, put here;
    the stored records hold what the worker built, and a status crosses back the same way."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        msgs = pool.submit(_build, 5).result(timeout=120)
        assert (
            pool.submit(pickle.loads, pickle.dumps(rmq.PutMessageStatus.FLUSH_DISK_TIMEOUT)).result(timeout=120)
            == rmq.PutMessageStatus.FLUSH_DISK_TIMEOUT
        )
    assert [_fields(m) for m in msgs] == [_fields(m) for m in _build(5)]
    with rmq.MessageStore(tmp_path / "s") as store:
        r = store.put_batch("T", msgs)
        assert r.status == rmq.PutMessageStatus.PUT_OK
        stored = [store.read(o) for o in r.offsets]
        assert [(s.body, s.tags, s.keys, s.properties["p"]) for s in stored if s is not None] == [
            (f"body-{i}".encode(), "TagA", [f"k{i}", "shared"], str(i)) for i in range(5)
        ]


def _ext_fields(m: rmq.MessageExt) -> tuple[Any, ...]:
    return (
        m.topic, m.queue_id, m.queue_offset, m.commitlog_offset, m.store_size, m.body, m.tags, m.keys, m.properties,
        m.flag, m.sys_flag, m.born_host, m.store_host, m.born_timestamp, m.store_timestamp, m.reconsume_times,
        m.msg_id, m.uniq_key, m.body_crc_ok, bytes(m.raw), m.raw.offset,
    )  # fmt: skip


def _stored(tmp_path: Any) -> list[rmq.MessageExt]:
    with rmq.MessageStore(tmp_path / "s") as store:
        for i in range(6):
            store.put(
                "T", f"body-{i}".encode(), queue_id=i % 2, tags="TagA", keys=[f"k{i}", "x"], properties={"p": str(i)}
            )
        assert store.wait_dispatched(10)
        got = store.get_message("G", "T", 1, 0, 32).messages + [store.read(0)]
    return [m for m in got if m is not None]


def _describe(m: rmq.MessageExt) -> tuple[Any, ...]:
    return (m.topic, m.queue_offset, m.body, m.keys, m.properties["p"], m.reconsume_times)


def test_a_stored_message_pickles_to_its_own_copy_of_the_record(tmp_path: Any) -> None:
    """`MessageExt`s (from `get_message` and `read`, and one `with_reconsume_times`) outlive their store: pickled
    after it closed, each comes back equal in every field, the raw record included; and a worker process (the
    user's process pool) reads them as the consumer did."""
    msgs = _stored(tmp_path)
    msgs.append(msgs[0].with_reconsume_times(3))
    for m in msgs:
        for proto in PROTOCOLS:
            back = pickle.loads(pickle.dumps(m, proto))
            assert type(back) is rmq.MessageExt and _ext_fields(back) == _ext_fields(m)
        assert _ext_fields(copy.deepcopy(m)) == _ext_fields(m)
    assert pickle.loads(pickle.dumps(msgs[-1])).reconsume_times == 3
    assert repr(msgs[0]).startswith("MessageExt(topic='T', queue_id=1, queue_offset=0,")
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        assert list(pool.map(_describe, msgs, timeout=120)) == [_describe(m) for m in msgs]


def test_bytes_that_are_not_one_whole_record_do_not_unpickle_and_a_damaged_body_stays_damaged(tmp_path: Any) -> None:
    m = _stored(tmp_path)[0]
    raw = bytes(m.raw)
    body_at = raw.index(b"body-")
    flipped = raw[:body_at] + bytes([raw[body_at] ^ 1]) + raw[body_at + 1 :]
    rebuild, args = m.__reduce__()
    assert rebuild is rmq._native._message_ext and args == (raw, 0)  # what unpickling calls
    # A damaged body comes back as `read` returns it: the message, saying its CRC does not match.
    damaged = rebuild(flipped, 0)
    assert not damaged.body_crc_ok and bytes(damaged.raw) == flipped and m.body_crc_ok
    assert not pickle.loads(pickle.dumps(damaged)).body_crc_ok
    for bad in (b"", raw[:-1], raw + b"\x00", raw[:4] + b"\x00" * 4 + raw[8:], b"\x00" * len(raw)):
        with pytest.raises(rmq.InvalidArgumentError, match="not a pickled MessageExt"):
            rebuild(bad, 0)


def test_every_native_class_keeps_its_docstring() -> None:
    """Editing the bindings once dropped `RecordView`'s doc comment, and with it the class's `__doc__`."""
    import inspect

    native = vars(rmq._native)
    missing = [k for k, v in native.items() if inspect.isclass(v) and not k.startswith("_") and not v.__doc__]
    assert missing == []
