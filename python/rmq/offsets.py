"""Consumer offsets: RocketMQ's `ConsumerOffsetManager` and its `config/consumerOffset.json`.

The table maps `topic@group` to {queue id: committed offset}, where the committed offset is the next queue offset
the group will consume. The file is the one Apache RocketMQ's broker reads and writes (spec §9.2, §9.3): fastjson's
pretty print with tab indentation, alphabetical bean properties, and integer map keys written *unquoted*
(`{0:250,1:250\\n\\t\\t}`); the reader accepts quoted keys too, so strict-JSON tools may rewrite the file.

Persistence is atomic: the new content goes to `<file>.tmp` and is fsynced, the current file is renamed to
`<file>.bak`, the temp file renamed over `<file>`, then the directory fsynced. A crash at any point leaves either
the new file, or no main file and the previous version as `.bak`, which `load()` falls back to (as RocketMQ's
`ConfigManager.load` does for a missing, empty or undecodable file).

Lookups follow `ConsumerOffsetManager`: an unknown queue reads −1; a server-side reset offset, when assigned,
wins over the committed one; committing a smaller offset is allowed (consumers may rewind).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rmq.store import MessageStore

__all__ = [
    "TOPIC_GROUP_SEPARATOR",
    "ConsumerOffsetManager",
    "DataVersion",
    "OffsetFileError",
    "decode_offsets",
    "encode_offsets",
]

log = logging.getLogger(__name__)

TOPIC_GROUP_SEPARATOR = "@"
"""`ConsumerOffsetManager.TOPIC_GROUP_SEPARATOR`: table keys are `topic@group`."""

JOURNAL_COMPACT_BYTES = 1 << 20
"""A journal larger than this is folded into a snapshot by the commit that crosses it."""

_MAX_LONG = (1 << 63) - 1
_MIN_LONG = -(1 << 63)


class OffsetFileError(ValueError):
    """A `consumerOffset.json` that cannot be decoded (the loader then falls back to `.bak`)."""


@dataclass
class DataVersion:
    """RocketMQ's `DataVersion`: bumped on every persist of a changed table."""

    counter: int = 0
    state_version: int = 0
    timestamp: int = 0

    def next_version(self) -> None:
        self.counter += 1
        self.timestamp = int(time.time() * 1000)


# -- the file format ---------------------------------------------------------------------------------------


def _java_hash(s: str) -> int:
    """`String.hashCode()` over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _bucket(key: str, table_size: int) -> int:
    """The bin of `key` in a Java `HashMap`/`ConcurrentHashMap` of `table_size` bins (`spread(h) & (n - 1)`)."""
    h = _java_hash(key) & 0xFFFFFFFF
    return (h ^ (h >> 16)) & (table_size - 1)


def _table_size(n: int, initial: int, *, concurrent: bool) -> int:
    """Bins of a Java hash map created with `initial` bins after `n` insertions (load factor 0.75).

    A `HashMap` grows when its size exceeds the threshold, a `ConcurrentHashMap` when it reaches it.
    """
    size = initial
    while n >= size * 3 // 4 if concurrent else n > size * 3 // 4:
        size *= 2
    return size


def _java_order(keys: Iterable[str], initial: int, *, concurrent: bool = False) -> list[str]:
    """Keys in Java hash-map iteration order: by bin, then insertion order within a bin.

    Exact while the map has not grown (a grown `ConcurrentHashMap` may reorder a bin; readers do not care).
    """
    ks = list(keys)
    size = _table_size(len(ks), initial, concurrent=concurrent)
    return sorted(ks, key=lambda k: _bucket(k, size))


def _quote(s: str) -> str:
    """A JSON string as fastjson writes it (control characters escaped, non-ASCII kept)."""
    out = ['"']
    for ch in s:
        c = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\b":
            out.append("\\b")
        elif ch == "\f":
            out.append("\\f")
        elif c < 0x20 or c == 0x7F:
            out.append(f"\\u{c:04X}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def encode_offsets(table: Mapping[str, Mapping[int, int]], version: DataVersion) -> str:
    """`ConsumerOffsetManager.encode(true)`: the exact text fastjson 1.2.83 writes (spec §9.3).

    `offsetTable` is written in the iteration order of the broker's `ConcurrentHashMap(512)` (1 024 bins) and
    `groupTopicMap` in that of its `HashMap(128)` of `HashSet(8)`s, so the same commits made in the same order
    encode to the same bytes as RocketMQ 5.3.1's broker (checked against it); queue ids ascend.
    """
    lines = [
        "{",
        '\t"dataVersion":{',
        f'\t\t"counter":{version.counter},',
        f'\t\t"stateVersion":{version.state_version},',
        f'\t\t"timestamp":{version.timestamp}',
        "\t},",
    ]
    group_topics: dict[str, list[str]] = {}
    for key in _java_order(table, 1024, concurrent=True):
        parts = key.split(TOPIC_GROUP_SEPARATOR)
        if len(parts) == 2:
            group_topics.setdefault(parts[1], []).append(parts[0])
    if group_topics:
        lines.append('\t"groupTopicMap":{')
        groups = _java_order(group_topics, 128)
        for i, g in enumerate(groups):
            topics = _java_order(dict.fromkeys(group_topics[g]), 8)
            sep = "," if i + 1 < len(groups) else ""
            lines.append(f"\t\t{_quote(g)}:[{','.join(_quote(t) for t in topics)}]{sep}")
        lines.append("\t},")
    else:
        lines.append('\t"groupTopicMap":{},')
    if table:
        lines.append('\t"offsetTable":{')
        keys = _java_order(table, 1024, concurrent=True)
        for i, key in enumerate(keys):
            queues = table[key]
            body = ",".join(f"{q}:{queues[q]}" for q in sorted(queues))
            sep = "," if i + 1 < len(keys) else ""
            lines.append(f"\t\t{_quote(key)}:{{{body}" + ("\n\t\t}" if queues else "}") + sep)
        lines.append("\t}")
    else:
        lines.append('\t"offsetTable":{}')
    lines.append("}")
    return "\n".join(lines)


_TOKEN = re.compile(
    r"""\s*(?:
        (?P<punct>[{}\[\]:,])
      | (?P<string>"(?:[^"\\]|\\.)*")
      | (?P<number>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
      | (?P<word>true|false|null)
    )""",
    re.VERBOSE | re.DOTALL,
)
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _unescape(raw: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        esc = raw[i + 1]
        if esc == "u":
            out.append(chr(int(raw[i + 2 : i + 6], 16)))
            i += 6
        elif esc in _ESCAPES:
            out.append(_ESCAPES[esc])
            i += 2
        else:
            raise OffsetFileError(f"bad escape \\{esc}")
    # Pairs of \uD8xx\uDCxx escapes become one character, as Java strings hold UTF-16.
    return "".join(out).encode("utf-16", "surrogatepass").decode("utf-16")


class _Parser:
    """A small JSON reader that also takes fastjson's unquoted numeric object keys (`{0:250}`)."""

    def __init__(self, text: str) -> None:
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        text = text.rstrip()
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                raise OffsetFileError(f"unexpected character at {pos}: {text[pos : pos + 20]!r}")
            kind = m.lastgroup
            assert kind is not None
            self.tokens.append((kind, m.group(kind)))
            pos = m.end()
        self.i = 0

    def _next(self) -> tuple[str, str]:
        if self.i >= len(self.tokens):
            raise OffsetFileError("unexpected end of file")
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def _expect(self, value: str) -> None:
        kind, v = self._next()
        if kind != "punct" or v != value:
            raise OffsetFileError(f"expected {value!r}, got {v!r}")

    def document(self) -> object:
        value = self.value()
        if self.i != len(self.tokens):
            raise OffsetFileError("trailing content after the JSON document")
        return value

    def value(self) -> object:
        kind, v = self._next()
        if kind == "string":
            return _unescape(v[1:-1])
        if kind == "number":
            return float(v) if any(c in v for c in ".eE") else int(v)
        if kind == "word":
            return {"true": True, "false": False, "null": None}[v]
        if v == "{":
            obj: dict[object, object] = {}
            if self._peek() == "}":
                self.i += 1
                return obj
            while True:
                k_kind, k = self._next()
                if k_kind == "string":
                    key: object = _unescape(k[1:-1])
                elif k_kind == "number":
                    key = int(k)  # fastjson's unquoted integer key
                else:
                    raise OffsetFileError(f"bad object key {k!r}")
                self._expect(":")
                obj[key] = self.value()
                kind, v = self._next()
                if v == "}":
                    return obj
                if v != ",":
                    raise OffsetFileError(f"expected ',' or '}}', got {v!r}")
        if v == "[":
            arr: list[object] = []
            if self._peek() == "]":
                self.i += 1
                return arr
            while True:
                arr.append(self.value())
                kind, v = self._next()
                if v == "]":
                    return arr
                if v != ",":
                    raise OffsetFileError(f"expected ',' or ']', got {v!r}")
        raise OffsetFileError(f"unexpected {v!r}")

    def _peek(self) -> str | None:
        return self.tokens[self.i][1] if self.i < len(self.tokens) else None


def _as_long(v: object, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not _MIN_LONG <= v <= _MAX_LONG:
        raise OffsetFileError(f"{what} is not a long: {v!r}")
    return v


def _as_queue_id(k: object) -> int:
    if isinstance(k, str):
        try:
            k = int(k)
        except ValueError:
            raise OffsetFileError(f"queue id is not an integer: {k!r}") from None
    if isinstance(k, bool) or not isinstance(k, int) or not -(1 << 31) <= k < 1 << 31:
        raise OffsetFileError(f"queue id is not an int: {k!r}")
    return k


def decode_offsets(text: str) -> tuple[dict[str, dict[int, int]], DataVersion]:
    """Parses `consumerOffset.json` (fastjson's unquoted integer keys or strict JSON); raises `OffsetFileError`.

    Only `offsetTable` and `dataVersion` are read, as RocketMQ does; `groupTopicMap` and unknown properties are
    ignored.
    """
    doc = _Parser(text).document()
    if not isinstance(doc, dict):
        raise OffsetFileError("the document is not an object")
    version = DataVersion()
    dv = doc.get("dataVersion")
    if dv is not None:
        if not isinstance(dv, dict):
            raise OffsetFileError("dataVersion is not an object")
        version = DataVersion(
            counter=_as_long(dv.get("counter", 0), "dataVersion.counter"),
            state_version=_as_long(dv.get("stateVersion", 0), "dataVersion.stateVersion"),
            timestamp=_as_long(dv.get("timestamp", 0), "dataVersion.timestamp"),
        )
    table: dict[str, dict[int, int]] = {}
    raw = doc.get("offsetTable")
    if raw is None:
        return table, version
    if not isinstance(raw, dict):
        raise OffsetFileError("offsetTable is not an object")
    for key, queues in raw.items():
        if not isinstance(key, str):
            raise OffsetFileError(f"offsetTable key is not a string: {key!r}")
        if queues is None:
            continue
        if not isinstance(queues, dict):
            raise OffsetFileError(f"offsets of {key!r} are not an object")
        table[key] = {_as_queue_id(q): _as_long(o, f"offset of {key}/{q}") for q, o in queues.items()}
    return table, version


# -- the manager -------------------------------------------------------------------------------------------


def _fault_point(stage: str) -> None:
    """A no-op that crash tests replace to kill the process at a stage of `persist()`."""


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _key(topic: str, group: str) -> str:
    return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"


class ConsumerOffsetManager:
    """Committed consumer offsets per (group, topic, queue), persisted to `consumerOffset.json`.

    Thread-safe. `start()` (or `start_thread=True`) persists every `flush_interval_ms` on a background thread,
    as the broker does every `flushConsumerOffsetInterval` (5 s); `close()` stops it after a last persist.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, flush_interval_ms: int = 5000, start_thread: bool = False
    ) -> None:
        if flush_interval_ms <= 0:
            raise ValueError(f"flush_interval_ms must be positive, got {flush_interval_ms}")
        self.path = Path(path)
        self.flush_interval_ms = flush_interval_ms
        self._lock = threading.Lock()  # guards the tables
        self._persist_lock = threading.Lock()  # one writer of the file at a time
        self._offsets: dict[str, dict[int, int]] = {}
        self._reset: dict[str, dict[int, int]] = {}
        self._pull: dict[str, dict[int, int]] = {}
        self._version = DataVersion()
        self._changes = 0  # changes since the last persist (a persist then bumps the data version)
        self._seq = 0  # changes ever made; persists skip when an earlier one already covered them
        self._persisted_seq = -1
        self._journal_fd: int | None = None
        self._journal_bytes = 0
        self._journal_since: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if start_thread:
            self.start()

    # -- files -----------------------------------------------------------------------------------------

    @property
    def bak_path(self) -> Path:
        return self.path.with_name(self.path.name + ".bak")

    def load(self) -> bool:
        """Reads the file; a missing, empty or undecodable one is discarded and `<file>.bak` read instead.

        Returns True when state was loaded or neither file exists (empty state), False when both files are
        unreadable (the table is then empty and the bad files are left for inspection).
        """
        for candidate in (self.path, self.bak_path):
            try:
                text = candidate.read_text(encoding="utf-8")
            except FileNotFoundError:
                continue
            except (OSError, UnicodeDecodeError) as e:
                log.warning("cannot read %s: %s", candidate, e)
                continue
            if not text.strip():
                log.warning("%s is empty; trying the backup", candidate)
                continue
            try:
                table, version = decode_offsets(text)
            except OffsetFileError as e:
                log.warning("%s is not a valid consumerOffset.json (%s); trying the backup", candidate, e)
                continue
            with self._lock:
                self._offsets = table
                self._version = version
                self._changes = self._replay_journal_locked(version.counter)
                self._seq += 1
            if candidate != self.path:
                log.warning("loaded consumer offsets from the backup %s", candidate)
            return True
        ok = not (self.path.exists() or self.bak_path.exists())
        with self._lock:
            self._offsets = {}
            self._changes = self._replay_journal_locked(0) if ok else 0
            self._seq += 1
        return ok

    def _replay_journal_locked(self, counter: int) -> int:
        """Applies the journal's commits made on top of snapshot `counter` or later, in order; returns how many.

        A torn last line (a crash mid-append) or a damaged line is skipped.
        """
        try:
            data = self.journal_path.read_bytes()
        except FileNotFoundError:
            return 0
        applied = 0
        for line in data.split(b"\n"):
            try:
                tag, group, topic, queue_id, offset = json.loads(line)
            except (ValueError, TypeError):
                continue
            if not (isinstance(tag, int) and isinstance(group, str) and isinstance(topic, str)):
                continue
            if not (isinstance(queue_id, int) and isinstance(offset, int)) or tag < counter:
                continue
            self._offsets.setdefault(_key(topic, group), {})[queue_id] = offset
            applied += 1
        return applied

    def encode(self) -> str:
        """The file content for the current table (fastjson's pretty print)."""
        with self._lock:
            table = {k: dict(v) for k, v in self._offsets.items()}
            version = DataVersion(self._version.counter, self._version.state_version, self._version.timestamp)
        return encode_offsets(table, version)

    def persist(self, *, sync: bool = True) -> None:
        """Writes the table atomically, keeping the previous file as `.bak`.

        Returns at once when a persist that began after the last change already wrote it, so concurrent callers
        (consume threads persisting after each batch) share one write.

        With `sync=False` nothing is fsynced: the file still survives a process crash (the page cache does), and
        after a power loss `load()` falls back to the backup at worst; consumers then redeliver a little more.
        """
        with self._lock:
            wanted = self._seq
        with self._persist_lock:
            if self._persisted_seq >= wanted:
                return  # a persist that started after our caller's changes already wrote them (group commit)
            with self._lock:
                if self._changes:
                    self._version.next_version()
                    self._changes = 0
                written = self._seq
                self._journal_since = []  # journal lines from here on are not in this snapshot
                table = {k: dict(v) for k, v in self._offsets.items()}
                version = DataVersion(self._version.counter, self._version.state_version, self._version.timestamp)
            text = encode_offsets(table, version)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(self.path.name + ".tmp")
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                if sync:
                    os.fsync(f.fileno())
            _fault_point("written")
            if self.path.exists():
                os.replace(self.path, self.bak_path)
            _fault_point("rotated")
            os.replace(tmp, self.path)
            _fault_point("renamed")
            if sync:
                _fsync_dir(self.path.parent)
            self._persisted_seq = written
            self._compact_journal()

    # -- the commit journal ----------------------------------------------------------------------------

    @property
    def journal_path(self) -> Path:
        """`<file>.journal`: commits made since the last snapshot by `commit_offset(..., journal=True)`."""
        return self.path.with_name(self.path.name + ".journal")

    def _journal_append_locked(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        line = json.dumps([self._version.counter, group, topic, queue_id, offset], separators=(",", ":")) + "\n"
        if self._journal_fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._journal_fd = os.open(self.journal_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(self._journal_fd, line.encode())
        self._journal_bytes += len(line)
        self._journal_since.append(line)

    def _compact_journal(self) -> None:
        """After a snapshot: the journal keeps only the lines appended since (usually none)."""
        with self._lock:
            if self._journal_fd is None and not self.journal_path.exists():
                return
            if self._journal_fd is not None:
                os.close(self._journal_fd)
                self._journal_fd = None
            self._journal_bytes = 0
            if not self._journal_since:
                self.journal_path.unlink(missing_ok=True)
                return
            tmp = self.journal_path.with_name(self.journal_path.name + ".tmp")
            tmp.write_text("".join(self._journal_since), encoding="utf-8")
            os.replace(tmp, self.journal_path)
            self._journal_bytes = sum(len(x) for x in self._journal_since)

    # -- background persistence ------------------------------------------------------------------------

    def start(self) -> None:
        """Starts persisting every `flush_interval_ms` on a daemon thread. Idempotent."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="ConsumerOffsetFlush", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.flush_interval_ms / 1000):
            try:
                self.persist()
            except OSError:
                log.exception("persisting consumer offsets failed; retrying in %d ms", self.flush_interval_ms)

    def stop(self) -> None:
        """Stops the background thread (without a final persist)."""
        t = self._thread
        if t is None:
            return
        self._stop.set()
        t.join()
        self._thread = None

    def close(self) -> None:
        """Stops the background thread and persists once more (folding in the journal)."""
        self.stop()
        self.persist()
        with self._lock:
            if self._journal_fd is not None:
                os.close(self._journal_fd)
                self._journal_fd = None

    def __enter__(self) -> ConsumerOffsetManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- offsets ---------------------------------------------------------------------------------------

    @property
    def data_version(self) -> DataVersion:
        with self._lock:
            return DataVersion(self._version.counter, self._version.state_version, self._version.timestamp)

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int, *, journal: bool = False) -> None:
        """Records `offset` (the next queue offset to consume). A smaller offset than before is accepted.

        With `journal`, the commit is also appended to `<file>.journal` (one small write, no fsync), which
        `load()` replays over the snapshot: a commit that survives a process crash at a fraction of the cost of
        `persist()`. The next `persist()` folds the journal into the snapshot; Apache RocketMQ reading the
        directory sees the snapshot (offsets at most that old: redelivery, never loss).
        """
        _check_names(group, topic)
        with self._lock:
            self._offsets.setdefault(_key(topic, group), {})[queue_id] = offset
            self._changes += 1
            self._seq += 1
            if journal:
                self._journal_append_locked(group, topic, queue_id, offset)
                compact = self._journal_bytes > JOURNAL_COMPACT_BYTES
        if journal and compact:
            self.persist(sync=False)

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, −1 when unknown; an assigned reset offset wins over it."""
        key = _key(topic, group)
        with self._lock:
            reset = self._reset.get(key)
            if reset is not None and queue_id in reset:
                return reset[queue_id]
            return self._offsets.get(key, {}).get(queue_id, -1)

    def query_offsets(self, group: str, topic: str) -> dict[int, int]:
        """{queue id: committed offset} of the group on the topic (empty when unknown)."""
        with self._lock:
            return dict(self._offsets.get(_key(topic, group), {}))

    def table(self) -> dict[str, dict[int, int]]:
        """A copy of the whole `offsetTable`."""
        with self._lock:
            return {k: dict(v) for k, v in self._offsets.items()}

    def groups(self) -> set[str]:
        """Groups with committed offsets (`whichGroupByTopic` over all topics)."""
        with self._lock:
            return {p[1] for p in (k.split(TOPIC_GROUP_SEPARATOR) for k in self._offsets) if len(p) == 2}

    def topics_of(self, group: str) -> set[str]:
        """Topics the group has committed offsets for (`whichTopicByConsumer`)."""
        with self._lock:
            return {
                p[0] for p in (k.split(TOPIC_GROUP_SEPARATOR) for k in self._offsets) if len(p) == 2 and p[1] == group
            }

    def groups_of(self, topic: str) -> set[str]:
        """Groups that have committed offsets on the topic (`whichGroupByTopic`)."""
        with self._lock:
            return {
                p[1] for p in (k.split(TOPIC_GROUP_SEPARATOR) for k in self._offsets) if len(p) == 2 and p[0] == topic
            }

    def remove_group(self, group: str) -> None:
        """`removeOffset(group)`: drops the group's committed, reset and pull offsets on every topic."""
        with self._lock:
            for table in (self._offsets, self._reset, self._pull):
                for key in [k for k in table if _group_of(k) == group]:
                    del table[key]
            self._changes += 1
            self._seq += 1

    def clean_topic(self, topic: str) -> None:
        """`cleanOffsetByTopic`: drops every group's offsets on exactly this topic."""
        with self._lock:
            for table in (self._offsets, self._reset, self._pull):
                for key in [k for k in table if _topic_of(k) == topic]:
                    del table[key]
            self._changes += 1
            self._seq += 1

    def assign_reset_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """`assignResetOffset`: a server-side reset; it also overwrites the committed offset.

        Empty names, a negative queue id or a negative offset are ignored, as RocketMQ does.
        """
        if not group or not topic or queue_id < 0 or offset < 0:
            log.warning("ignoring reset offset %s/%s/%d -> %d", group, topic, queue_id, offset)
            return
        key = _key(topic, group)
        with self._lock:
            self._reset.setdefault(key, {})[queue_id] = offset
            self._offsets.setdefault(key, {})[queue_id] = offset
            self._changes += 1
            self._seq += 1

    def has_reset_offset(self, group: str, topic: str, queue_id: int) -> bool:
        with self._lock:
            return queue_id in self._reset.get(_key(topic, group), {})

    def query_then_erase_reset_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The assigned reset offset, removed as it is read (one-shot); None when there is none."""
        key = _key(topic, group)
        with self._lock:
            queues = self._reset.get(key)
            if queues is None or queue_id not in queues:
                return None
            offset = queues.pop(queue_id)
            if not queues:
                del self._reset[key]
            return offset

    def commit_pull_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """The next offset a (pop/lite-pull) client will pull, kept apart from the committed one."""
        _check_names(group, topic)
        with self._lock:
            self._pull.setdefault(_key(topic, group), {})[queue_id] = offset

    def query_pull_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The pull offset, else the committed offset, else −1."""
        key = _key(topic, group)
        with self._lock:
            pull = self._pull.get(key)
            if pull is not None and queue_id in pull:
                return pull[queue_id]
        return self.query_offset(group, topic, queue_id)

    def clear_pull_offset(self, group: str, topic: str) -> None:
        with self._lock:
            self._pull.pop(_key(topic, group), None)

    def reset_offset_by_time(
        self,
        store: MessageStore,
        group: str,
        topic: str,
        timestamp: int,
        *,
        queue_ids: Iterable[int] | None = None,
        force: bool = True,
    ) -> dict[int, int]:
        """Moves the group's offsets on `topic` to `timestamp` (ms; −1 = the end), per queue; returns them.

        RocketMQ's `resetOffset`: each queue's target is the first message stored at or after the timestamp
        (`getOffsetInQueueByTime`); with `force` it is taken as is, without it only when it is smaller than the
        committed offset (never skipping unconsumed messages). The result is committed and assigned as a reset
        offset, so a consumer that starts or queries afterwards begins there.
        """
        from rmq._native import BoundaryType

        ids = sorted(set(queue_ids)) if queue_ids is not None else store.queue_ids(topic)
        result: dict[int, int] = {}
        for qid in ids:
            if timestamp == -1:
                target = store.get_max_offset_in_queue(topic, qid)
            else:
                target = store.get_offset_in_queue_by_time(topic, qid, timestamp, BoundaryType.LOWER)
            committed = self.query_offset(group, topic, qid)
            offset = target if force or committed < 0 or target < committed else committed
            self.assign_reset_offset(group, topic, qid, offset)
            result[qid] = offset
        return result


def _group_of(key: str) -> str | None:
    parts = key.split(TOPIC_GROUP_SEPARATOR)
    return parts[1] if len(parts) == 2 else None


def _topic_of(key: str) -> str | None:
    parts = key.split(TOPIC_GROUP_SEPARATOR)
    return parts[0] if len(parts) == 2 else None


def _check_names(group: str, topic: str) -> None:
    if not group or not topic:
        raise ValueError("group and topic must be non-empty")
