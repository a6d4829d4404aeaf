"""`rmq scan`: a store's messages in commitlog order, one line each (text or JSON): where each is, its topic,
queue, tags, keys and properties, whether its body CRC holds and, if asked, its body."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import json
import os
import sys
from typing import Any, Literal, TextIO

import rmq
from rmq._progress import Progress
from rmq.store import Recovery

BodyFormat = Literal["text", "hex", "base64"]


@dataclasses.dataclass
class ScanResult:
    """What a scan printed: the message count, the commitlog offsets of messages whose body CRC fails, and the
    damage the open passed over or cut at (`open_report["damage"]`: with `recovery` truncate or salvage)."""

    messages: int = 0
    bad_crc_offsets: list[int] = dataclasses.field(default_factory=list)
    damage: list[dict[str, Any]] = dataclasses.field(default_factory=list)


def format_body(body: bytes | memoryview, fmt: BodyFormat) -> str:
    """A body as text (UTF-8; bytes that are not UTF-8 as `\\xNN`), hex or base64."""
    if fmt == "hex":
        return bytes(body).hex()
    if fmt == "base64":
        return base64.b64encode(body).decode("ascii")
    return bytes(body).decode("utf-8", "backslashreplace")


def message_fields(msg: rmq.MessageExt, body: BodyFormat | None) -> dict[str, Any]:
    """The fields `rmq scan --json` prints for one message."""
    fields: dict[str, Any] = {
        "topic": msg.topic,
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "commitlog_offset": msg.commitlog_offset,
        "store_size": msg.store_size,
        "msg_id": msg.msg_id,
        "tags": msg.tags,
        "keys": msg.keys,
        "born_host": msg.born_host,
        "store_host": msg.store_host,
        "born_timestamp": msg.born_timestamp,
        "store_timestamp": msg.store_timestamp,
        "sys_flag": msg.sys_flag,
        "properties": msg.properties,
        "body_len": len(msg.body_view),
        "body_crc_ok": msg.body_crc_ok,
    }
    if body is not None:
        fields["body_format"] = body
        fields["body"] = format_body(msg.body_view, body)
    return fields


def text_line(msg: rmq.MessageExt, body: BodyFormat | None) -> str:
    """One message as a line of text: offset, topic, queue/offset, store time, tags, keys, size, CRC flag, body."""
    stamp = dt.datetime.fromtimestamp(msg.store_timestamp / 1000, dt.UTC).isoformat(timespec="milliseconds")
    parts = [
        f"{msg.commitlog_offset:>12}",
        msg.topic,
        f"q{msg.queue_id}/{msg.queue_offset}",
        stamp.replace("+00:00", "Z"),
        f"tags={json.dumps(msg.tags, ensure_ascii=False)}",
        f"keys={json.dumps(msg.keys, ensure_ascii=False)}",
        f"size={msg.store_size}",
        "crc=ok" if msg.body_crc_ok else "crc=BAD",
    ]
    if body is not None:
        parts.append(f"body={json.dumps(format_body(msg.body_view, body), ensure_ascii=False)}")
    return " ".join(parts)


def run_scan(
    store_dir: str | os.PathLike[str],
    from_offset: int = 0,
    limit: int | None = None,
    out: TextIO | None = None,
    *,
    config: rmq.StoreConfig | None = None,
    body: BodyFormat | None = None,
    json_lines: bool = True,
    recovery: Recovery = "strict",
) -> ScanResult:
    """Prints the messages of the store at `store_dir` from commitlog offset `from_offset`, at most `limit`, as
    JSON lines (or text lines). The sizes are read off the files unless `config` is given. A bar shows the
    progress on a terminal. `recovery` is the read-only open's (`salvage` reads every valid record after damage
    too); the damage it passed over or stopped at is in the result."""
    out = out if out is not None else sys.stdout
    result = ScanResult()
    config = config if config is not None else rmq.StoreConfig.from_files(store_dir)
    with rmq.MessageStore(store_dir, config, start_services=False, read_only=True, recovery=recovery) as store:
        result.damage = list(store.open_report["damage"])
        progress = Progress("scanning", total=max(store.max_offset - from_offset, 0), output=out)
        scanner = store.scan(from_offset)
        try:
            for msg in scanner:
                if limit is not None and result.messages >= limit:
                    break
                line = json.dumps(message_fields(msg, body), ensure_ascii=False) if json_lines else text_line(msg, body)
                print(line, file=out)
                result.messages += 1
                if not msg.body_crc_ok:
                    result.bad_crc_offsets.append(msg.commitlog_offset)
                progress.update(msg.store_size, 1)
        finally:
            progress.close()
            # With salvage, damage the open did not meet (in older segments) is stepped over by the scan itself.
            result.damage += scanner.skipped
    return result
