"""A broadcasting consumer's own offsets: RocketMQ's client-side `LocalFileOffsetStore`.

Each broadcasting consumer keeps the offsets of every queue it consumes in
`<local_offset_store_dir>/<client id>/<group>/offsets.json`, the file and the text RocketMQ 5.3.1's client writes
(fastjson's `OffsetSerializeWrapper` with `MessageQueue` keys; the codec is Rust's, `src/offsets/local.rs`).
`local_offset_store_dir` defaults to Java's `~/.rocketmq_offsets` (its `rocketmq.client.localOffsetStoreDir`).

Persisting writes what Java's `persistAll` writes: the file's entries (read again, in file order) updated with the
store's table, in the order of Java's maps, so rmq and RocketMQ write the same bytes after the same history.
It is atomic, as `MixAll.string2File` intends: the new text goes to `offsets.json.tmp` (fsynced), the
current file becomes `offsets.json.bak`, the temp file is renamed over `offsets.json` and the directory fsynced.
Loading reads `offsets.json`, or `.bak` when the main file is missing, empty or undecodable (Java's
`readLocalOffsetBak`). A queue never committed reads −1.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from rmq import _args, _native
from rmq._flock import replace_file
from rmq._native import ArgumentTypeError, CorruptionError, InvalidArgumentError
from rmq.consumer import BROKER_NAME

__all__ = ["DEFAULT_LOCAL_OFFSET_STORE_DIR", "LocalFileOffsetStore", "decode_local_offsets", "encode_local_offsets"]

log = logging.getLogger(__name__)

DEFAULT_LOCAL_OFFSET_STORE_DIR = Path.home() / ".rocketmq_offsets"
"""Java's default `LOCAL_OFFSET_STORE_DIR` (`user.home/.rocketmq_offsets`)."""

Entry = tuple[str, str, int, int]
"""(topic, broker name, queue id, offset)."""


def encode_local_offsets(persisted: list[Entry], memory: list[Entry]) -> str:
    """The text `LocalFileOffsetStore.persistAll` writes over a file holding `persisted` (in file order) for a store
    whose table holds `memory` (in the order it put the queues: those it loaded first, then those committed)."""
    return _native.encode_local_offsets(persisted, memory)


def decode_local_offsets(data: bytes, path: str | os.PathLike[str] = "offsets.json") -> tuple[list[Entry], list[str]]:
    """The entries of an `offsets.json` in file order and the reasons entries were left out; raises
    `rmq.CorruptionError` (naming `path` and the byte offset) when the document cannot be read at all."""
    return _native.decode_local_offsets(data, path)


class LocalFileOffsetStore:
    """The offsets of one broadcasting consumer (`LocalFileOffsetStore`), for one group. Thread-safe.

    It offers the methods a `PushConsumer` uses of a `ConsumerOffsetManager` (`commit_offset`, `query_offset`,
    `persist`), so it can stand in for one. `commit_offset(..., journal=True)` persists at once (without fsync),
    so a killed process redelivers at most its in-flight messages; otherwise the table is written by `persist()`.
    """

    def __init__(
        self,
        client_id: str,
        group: str,
        *,
        local_offset_store_dir: str | os.PathLike[str] | None = None,
        broker_name: str = BROKER_NAME,
    ) -> None:
        self.client_id = _args.name(client_id, "client_id")
        self.group = _args.name(group, "group")
        self.broker_name = _args.text(broker_name, "broker_name")
        if local_offset_store_dir is None:
            local_offset_store_dir = DEFAULT_LOCAL_OFFSET_STORE_DIR
        elif not isinstance(local_offset_store_dir, str | os.PathLike):
            raise ArgumentTypeError(
                f"local_offset_store_dir must be a str or os.PathLike, got {type(local_offset_store_dir).__name__}"
            )
        for what, part in (("client_id", self.client_id), ("group", self.group)):
            if part in (".", "..") or "/" in part or "\0" in part:
                raise InvalidArgumentError(f"{what} {part!r} cannot name a directory")
        self.path = Path(local_offset_store_dir) / self.client_id / self.group / "offsets.json"
        self._lock = threading.Lock()
        self._persist_lock = threading.Lock()
        # (topic, broker, queue id) -> offset, in the order the client put them (the file's entries first).
        self._table: dict[tuple[str, str, int], int] = {}
        self.load_issues: list[str] = []
        self.load()

    @property
    def bak_path(self) -> Path:
        return self.path.with_name(self.path.name + ".bak")

    def _read(self, path: Path, *, report: bool = True) -> list[Entry] | None:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        if not data:
            return None
        try:
            entries, issues = decode_local_offsets(data, path)
        except CorruptionError as e:
            if report:
                log.warning("%s cannot be read (%s)", path, e)
                self.load_issues.append(f"{path}: {e}")
            return None
        for reason in issues if report else ():
            log.warning("%s: %s", path, reason)
            self.load_issues.append(f"{path}: {reason}")
        return entries

    def load(self) -> bool:
        """Reads `offsets.json` (or `.bak`); whether a file was found. Offsets committed since are replaced."""
        entries = self._read(self.path)
        if entries is None:
            entries = self._read(self.bak_path)
        with self._lock:
            for topic, broker, queue_id, offset in entries or ():
                self._table[(topic, broker, queue_id)] = offset
        return entries is not None

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int, *, journal: bool = False) -> None:
        """`updateOffset(mq, offset, false)`; with `journal`, persisted at once."""
        self._check_group(group)
        _args.text(topic, "topic")
        _args.java_int(queue_id, "queue_id")
        _args.java_long(offset, "offset")
        with self._lock:
            self._table[(topic, self.broker_name, queue_id)] = offset
        if journal:
            self.persist(sync=False)

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or −1."""
        self._check_group(group)
        with self._lock:
            return self._table.get((topic, self.broker_name, queue_id), -1)

    def table(self) -> dict[tuple[str, str, int], int]:
        """(topic, broker name, queue id) -> offset."""
        with self._lock:
            return dict(self._table)

    def encode(self) -> str:
        """The text `persist()` writes now."""
        persisted = self._read(self.path, report=False)
        if persisted is None:
            persisted = self._read(self.bak_path, report=False)
        with self._lock:
            memory = [(t, b, q, o) for (t, b, q), o in self._table.items()]
        return encode_local_offsets(persisted or [], memory)

    def persist(self, *, sync: bool = True) -> None:
        """Writes the table atomically (see the module docs); `sync=False` skips the fsyncs (a killed process
        keeps the file; a power loss may not)."""
        with self._persist_lock:
            text = self.encode().encode("utf-8", "surrogatepass")
            replace_file(self.path, text, bak=self.bak_path, sync=sync)

    def _check_group(self, group: str) -> None:
        if group != self.group:
            raise InvalidArgumentError(f"this offset store keeps group {self.group!r}'s offsets, not {group!r}'s")
