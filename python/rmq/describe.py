"""A store's canonical description: what rmq reads from a store directory, in the shape the Java harness
(`tests/interop/`) prints for what Apache RocketMQ reads from it, so the two can be compared object by object.

`describe(store)` returns the objects (see `tests/interop/README.md` for the format); `rmq describe STORE`
prints them as JSON lines.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import rmq
from rmq.store import Recovery

__all__ = ["describe", "host_hex", "properties_string", "run_describe"]

_BORN_V6 = 1 << 4
_STORE_V6 = 1 << 5
_READ_GROUP = "interop"


def host_hex(host: str) -> str:
    """`a.b.c.d:port` or `[v6]:port` as the address bytes in uppercase hex, a colon and the port."""
    addr, _, port = host.rpartition(":")
    ip = ipaddress.ip_address(addr.strip("[]"))
    return f"{ip.packed.hex().upper()}:{int(port)}"


def properties_string(raw: bytes, version: int) -> str:
    """The stored properties string of a record, as its bytes decode in UTF-8 (spec §1.2)."""
    sys_flag = struct.unpack_from(">i", raw, 36)[0]
    pos = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8
    pos += 20 if sys_flag & _BORN_V6 else 8
    pos += 8
    pos += 20 if sys_flag & _STORE_V6 else 8
    pos += 4 + 8
    body_len = struct.unpack_from(">i", raw, pos)[0]
    pos += 4 + max(body_len, 0)
    if version == 2:
        topic_len = struct.unpack_from(">h", raw, pos)[0]
        pos += 2 + topic_len
    else:
        topic_len = raw[pos]
        pos += 1 + topic_len
    props_len = struct.unpack_from(">h", raw, pos)[0]
    pos += 2
    return raw[pos : pos + props_len].decode("utf-8", "replace")


def _message(m: rmq.MessageExt) -> dict[str, Any]:
    raw = bytes(m.raw)
    return {
        "type": "message",
        "physicalOffset": m.commitlog_offset,
        "size": m.store_size,
        "version": m.version,
        "topic": m.topic,
        "queueId": m.queue_id,
        "queueOffset": m.queue_offset,
        "sysFlag": m.sys_flag,
        "flag": m.flag,
        "bodyCrc": m.body_crc,
        "bodySha256": hashlib.sha256(m.body_view).hexdigest(),
        "bornTimestamp": m.born_timestamp,
        "storeTimestamp": m.store_timestamp,
        "bornHost": host_hex(m.born_host),
        "storeHost": host_hex(m.store_host),
        "reconsumeTimes": m.reconsume_times,
        "preparedTransactionOffset": m.prepared_transaction_offset,
        "properties": properties_string(raw, m.version),
        "msgId": m.msg_id,
    }


def _index_headers(store: rmq.MessageStore) -> list[dict[str, Any]]:
    """The index files' headers as the store holds them: a file a read-only open rebuilt in memory (a live
    broker's newest file, read mid-write) is not on disk under that name."""
    fields = ("beginTimestamp", "endTimestamp", "beginPhyOffset", "endPhyOffset", "hashSlotCount", "indexCount")
    return [{"name": name, **dict(zip(fields, rest, strict=True))} for name, *rest in store.index_file_headers()]


def _reads(store: rmq.MessageStore, topic: str, queue_id: int, start: int, max_offset: int) -> list[dict[str, Any]]:
    def read(offset: int) -> tuple[dict[str, Any], rmq.GetMessageResult]:
        r = store.get_message(_READ_GROUP, topic, queue_id, offset, 32, None)
        return {
            "offset": offset,
            "status": r.status.name,
            "nextBeginOffset": r.next_begin_offset,
            "minOffset": r.min_offset,
            "maxOffset": r.max_offset,
            "physicalOffsets": [v.offset for v in r.raw],
        }, r

    out = []
    offset = start
    while True:
        desc, r = read(offset)
        out.append(desc)
        if r.status is not rmq.GetMessageStatus.FOUND or len(out) > 100_000:
            break
        offset = r.next_begin_offset
    out.append(read(max_offset + 5)[0])
    return out


def describe(store: rmq.MessageStore) -> Iterator[dict[str, Any]]:
    """The canonical description of an open store, object by object (store, messages, queues, keys, times)."""
    queues = [(t, q) for t in sorted(store.topics()) for q in sorted(store.queue_ids(t))]
    yield {
        "type": "store",
        "minPhyOffset": store.min_offset,
        "maxPhyOffset": store.max_offset,
        "commitlogFiles": sorted(Path(p).name for p in store.commitlog_files()),
        "consumeQueueFiles": {
            f"{t}/{q}": sorted(Path(p).name for p in store.consume_queue_files(t, q)) for t, q in queues
        },
        "indexFiles": _index_headers(store),
    }
    keys: set[tuple[str, str]] = set()
    for m in store.scan(store.min_offset):
        yield _message(m)
        for k in [m.uniq_key, *m.keys]:
            if k:
                keys.add((m.topic, k))
    for topic, qid in queues:
        lo = store.get_min_offset_in_queue(topic, qid)
        hi = store.get_max_offset_in_queue(topic, qid)
        entries = [[e.queue_offset, e.commitlog_offset, e.size, e.tags_code] for e in store.iter_queue(topic, qid, lo)]
        yield {
            "type": "queue",
            "topic": topic,
            "queueId": qid,
            "minOffset": lo,
            "maxOffset": hi,
            "entries": entries,
            "reads": _reads(store, topic, qid, lo, hi),
        }
    for topic, key in sorted(keys):
        hits = store.query_message(topic, key, 64).messages
        yield {
            "type": "key",
            "topic": topic,
            "key": key,
            "physicalOffsets": sorted({m.commitlog_offset for m in hits}),
        }
    for topic, qid in queues:
        lo = store.get_min_offset_in_queue(topic, qid)
        stamps = sorted(
            {
                store.get_message_store_timestamp(topic, qid, o)
                for o in range(lo, store.get_max_offset_in_queue(topic, qid))
            }
        )
        if not stamps:
            continue
        for ts in [stamps[0] - 1, *stamps, stamps[-1] + 1]:
            yield {
                "type": "time",
                "topic": topic,
                "queueId": qid,
                "timestamp": ts,
                "lower": store.get_offset_in_queue_by_time(topic, qid, ts, rmq.BoundaryType.LOWER),
                "upper": store.get_offset_in_queue_by_time(topic, qid, ts, rmq.BoundaryType.UPPER),
            }


def run_describe(
    store_dir: str | os.PathLike[str],
    config: rmq.StoreConfig | None = None,
    out: TextIO | None = None,
    *,
    recovery: Recovery = "strict",
) -> int:
    """Prints the description of the store at `store_dir` as JSON lines; returns the line count. The sizes are
    read off the files unless `config` is given; `recovery` is the read-only open's treatment of commitlog
    damage ("salvage" reads past it)."""
    out = out if out is not None else sys.stdout
    count = 0
    config = config if config is not None else rmq.StoreConfig.from_files(store_dir)
    with rmq.MessageStore(store_dir, config, read_only=True, recovery=recovery) as store:
        for obj in describe(store):
            print(json.dumps(obj, ensure_ascii=False, sort_keys=True), file=out)
            count += 1
    return count
