"""`rmq dump STORE`: every field of every record as JSON lines (like `kafka-dump-log --print-data-log`), or,
with `--cq`, `--index`, `--checkpoint`, the entries of those files. Read-only."""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import rmq
from rmq import _native
from rmq.store import Recovery


def record_lines(store: rmq.MessageStore, from_offset: int = 0) -> Iterator[dict[str, Any]]:
    """Every record from `from_offset`, every header field, the properties, and the body (base64; also as
    text when it is UTF-8)."""
    for m in store.scan(from_offset):
        body = bytes(m.body_view)
        line: dict[str, Any] = {
            "commitlog_offset": m.commitlog_offset,
            "store_size": m.store_size,
            "topic": m.topic,
            "queue_id": m.queue_id,
            "queue_offset": m.queue_offset,
            "flag": m.flag,
            "sys_flag": m.sys_flag,
            "transaction_type": m.transaction_type.name,
            "born_timestamp": m.born_timestamp,
            "born_host": m.born_host,
            "store_timestamp": m.store_timestamp,
            "store_host": m.store_host,
            "reconsume_times": m.reconsume_times,
            "prepared_transaction_offset": m.prepared_transaction_offset,
            "body_crc": m.body_crc,
            "msg_id": m.msg_id,
            "properties": m.properties,
            "body_len": len(body),
            "body_base64": base64.b64encode(body).decode("ascii"),
        }
        try:
            line["body_text"] = body.decode("utf-8")
        except UnicodeDecodeError:
            pass
        yield line


def cq_lines(store: rmq.MessageStore) -> Iterator[dict[str, Any]]:
    """Every consume-queue entry of every queue: (topic, queue id, queue offset, commitlog offset, size,
    tagsCode)."""
    for topic in store.topics():
        for q in store.queue_ids(topic):
            offset = store.get_min_offset_in_queue(topic, q)
            while True:
                entries = store._cq_entries(topic, q, offset, 1024)
                if not entries:
                    break
                for qo, phy, size, code in entries:
                    yield {
                        "topic": topic,
                        "queue_id": q,
                        "queue_offset": qo,
                        "commitlog_offset": phy,
                        "size": size,
                        "tags_code": code,
                    }
                offset = entries[-1][0] + 1


def index_lines(store: rmq.MessageStore, config: rmq.StoreConfig) -> Iterator[dict[str, Any]]:
    """Each index file's header, then its entries oldest first (number, keyHash, commitlog offset), as on disk:
    a file that a read-only open rebuilt only in memory has no bytes there to dump."""
    for path in sorted(str(p) for p in store.index_files() if Path(p).exists()):
        header, entries = _native.index_file_entries(path, config.max_hash_slot_num, config.max_index_num)
        yield {"index_file": path, **header}
        for n, key_hash, offset in reversed(entries):
            yield {"index_file": Path(path).name, "entry": n, "key_hash": key_hash, "commitlog_offset": offset}


def run_dump(
    store_dir: Path,
    config: rmq.StoreConfig,
    what: str = "records",
    out: TextIO | None = None,
    *,
    recovery: Recovery = "strict",
) -> int:
    """Prints the chosen part of a store as JSON lines; returns the number of lines. `recovery`: the read-only
    open's treatment of commitlog damage ("salvage" reads past it)."""
    out = out if out is not None else sys.stdout
    count = 0
    with rmq.MessageStore(store_dir, config, read_only=True, recovery=recovery) as store:
        if what == "checkpoint":
            lines: Iterator[dict[str, Any]] = iter([store.checkpoint])
        elif what == "cq":
            lines = cq_lines(store)
        elif what == "index":
            lines = index_lines(store, config)
        else:
            lines = record_lines(store)
        for line in lines:
            print(json.dumps(line, ensure_ascii=False), file=out)
            count += 1
    return count
