"""`put_batch` of bodies with `tags=` and `keys=` given per message (issue 19: one call for many messages, no
`rmq.Message` built per message): the records are those of the same batch of `rmq.Message`s, the consume
queues and the index see the tags and keys, and a wrong shape changes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rmq
from conftest import SMALL, snapshot

TAG = st.one_of(st.none(), st.sampled_from(["TagA", "TagB", "", "a b", "é", "a\x01b"]))
KEY = st.sampled_from(["k1", "k2", "key-7", "é", "x_y", "", "a\x02b"])
KEYS = st.one_of(st.none(), KEY, st.lists(KEY, max_size=3))


def _records(store: rmq.MessageStore, result: rmq.PutResult) -> list[rmq.MessageExt]:
    out = []
    for offset in result.offsets:
        m = store.read(offset)
        assert m is not None
        out.append(m)
    return out


def _comparable(m: rmq.MessageExt) -> tuple[Any, ...]:
    """What a record says apart from the fields each put stamps anew (UNIQ_KEY, offsets, store time)."""
    props = {k: v for k, v in m.properties.items() if k != "UNIQ_KEY"}
    return (m.body, m.tags, m.keys, props, m.flag, m.queue_id, m.store_size, m.sys_flag, m.born_host)


def _outcome(store: rmq.MessageStore, call: Any) -> Any:
    """The records a put_batch stored (as `_comparable`s), or the type of the error it raised."""
    try:
        result = call()
    except rmq.RmqError as e:
        return type(e)
    return [_comparable(m) for m in _records(store, result)]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.tuples(st.binary(min_size=0, max_size=40), TAG, KEYS), min_size=1, max_size=8),
    st.booleans(),
)
def test_bodies_with_tags_and_keys_do_what_messages_would(
    small_store: rmq.MessageStore, rows: list[tuple[bytes, str | None, Any]], one_tag: bool
) -> None:
    """The same records, or the same refusal (an empty tag or keys list is refused either way) and then no
    queue offset taken."""
    bodies = [b for b, _, _ in rows]
    tags: Any = "TagA" if one_tag else [t for _, t, _ in rows]
    keys = [k for _, _, k in rows]
    next_offset = small_store.next_queue_offset("L", 1)
    lists = _outcome(small_store, lambda: small_store.put_batch("L", bodies, queue_id=1, tags=tags, keys=keys))
    messages = [rmq.Message(b, tags="TagA" if one_tag else t, keys=k) for b, t, k in rows]
    objects = _outcome(small_store, lambda: small_store.put_batch("L", messages, queue_id=1))
    assert lists == objects
    taken = 0 if isinstance(lists, type) else 2 * len(rows)
    assert small_store.next_queue_offset("L", 1) == next_offset + taken


def test_consume_queues_and_index_see_the_tags_and_keys(small_store: rmq.MessageStore) -> None:
    r = small_store.put_batch(
        "L", [b"a", b"b", b"c"], queue_id=2, tags=["TagA", None, "TagC"], keys=["k-a", None, ["k-c1", "k-c2"]]
    )
    assert r.status == rmq.PutMessageStatus.PUT_OK and r.queue_offset == 0
    assert small_store.wait_dispatched(10)
    got = small_store.get_message("g", "L", 2, 0, 32, subscription="TagC")
    assert [m.body for m in got.messages] == [b"c"]
    got = small_store.get_message("g", "L", 2, 0, 32, subscription="TagA || TagC")
    assert [m.body for m in got.messages] == [b"a", b"c"]
    for key, body in (("k-a", b"a"), ("k-c1", b"c"), ("k-c2", b"c")):
        assert [m.body for m in small_store.query_message("L", key, 8).messages] == [body]
    every = small_store.put_batch("L", [b"d", b"e"], queue_id=2, tags="TagE")
    assert [m.tags for m in _records(small_store, every)] == ["TagE", "TagE"]
    assert all(m.keys == [] for m in _records(small_store, every))


@pytest.mark.parametrize(
    ("messages", "kwargs", "error", "says"),
    [
        ([b"a", b"b"], {"tags": ["t"]}, rmq.InvalidArgumentError, "tags has 1 entries for 2 messages"),
        ([b"a", b"b"], {"keys": ["k", "k", "k"]}, rmq.InvalidArgumentError, "keys has 3 entries for 2 messages"),
        ([b"a", rmq.Message(b"b")], {"tags": "t"}, rmq.InvalidArgumentError, "messages[1] is an rmq.Message"),
        ([rmq.Message(b"a")], {"keys": [None]}, rmq.InvalidArgumentError, "messages[0] is an rmq.Message"),
        ([b"a"], {"keys": "k"}, rmq.ArgumentTypeError, "keys must be a sequence"),
        ([b"a"], {"keys": b"k"}, rmq.ArgumentTypeError, "keys must be a sequence"),
        ([b"a"], {"tags": b"t"}, rmq.ArgumentTypeError, "tags must be a str"),
        ([b"a"], {"tags": 5}, rmq.ArgumentTypeError, "tags must be a str"),
        ([b"a"], {"tags": [5]}, rmq.ArgumentTypeError, "tags[0]"),
        ([b"a"], {"keys": [[5]]}, rmq.ArgumentTypeError, "keys[0]"),
        ([b"a"], {"tags": ["\ud800"]}, rmq.InvalidArgumentError, "lone surrogate"),
        ([b"a"], {"keys": [["ok", "\udfff"]]}, rmq.InvalidArgumentError, "lone surrogate"),
        ([b"a"], {"tags": "bad\x01tag"}, rmq.RmqError, ""),
    ],
)
def test_a_wrong_shape_is_refused_and_changes_nothing(
    store_dir: Path, messages: list[Any], kwargs: dict[str, Any], error: type[Exception], says: str
) -> None:
    # No background services: their flushes rewrite the checkpoint on their own schedule.
    with rmq.MessageStore(store_dir, SMALL, start_services=False) as store:
        store.put("L", b"before", queue_id=0)
        assert store.wait_dispatched()
        before = snapshot(store_dir), store.max_offset
        with pytest.raises(error) as e:
            store.put_batch("L", messages, queue_id=0, **kwargs)
        assert says in str(e.value)
        assert store.wait_dispatched()
        assert store.next_queue_offset("L", 0) == 1
        assert (snapshot(store_dir), store.max_offset) == before
