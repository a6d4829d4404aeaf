"""Consumer offsets: RocketMQ's `ConsumerOffsetManager` and its `config/consumerOffset.json`.

The table maps `topic@group` to {queue id: committed offset}, where the committed offset is the next queue offset
the group will consume. The file is the one Apache RocketMQ's broker reads and writes (spec §9.2, §9.3): fastjson's
pretty print with tab indentation, alphabetical bean properties, and integer map keys written *unquoted*
(`{0:250,1:250\\n\\t\\t}`); the reader accepts quoted keys too, so strict-JSON tools may rewrite the file. The
codec is Rust's (`src/offsets.rs`); this module keeps the locking and the persistence policy.

Reading is tolerant: an entry or queue that cannot be read is left out, reported in `load_issues` and logged,
and every good entry is kept (a damaged queue takes its older offset from `.bak` when that has it).

Persistence is atomic: the new content goes to `<file>.tmp` and is fsynced, the current file is renamed to
`<file>.bak`, the temp file renamed over `<file>`, then the directory fsynced. A crash at any point leaves either
the new file, or no main file and the previous version as `.bak`, which `load()` falls back to (as RocketMQ's
`ConfigManager.load` does for a missing, empty or undecodable file).

Lookups follow `ConsumerOffsetManager`: an unknown queue reads −1; a server-side reset offset, when assigned,
wins over the committed one; committing a smaller offset is allowed (consumers may rewind).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rmq import _args, _native
from rmq._flock import FileLock, as_disk_full, replace_file
from rmq._native import ArgumentTypeError, CorruptionError, InvalidArgumentError

if TYPE_CHECKING:
    from rmq.store import MessageStore

__all__ = [
    "TOPIC_GROUP_SEPARATOR",
    "ConsumerOffsetManager",
    "DataVersion",
    "DecodedOffsets",
    "OffsetFileError",
    "OffsetIssue",
    "decode_offsets",
    "encode_offsets",
    "read_offsets",
]

log = logging.getLogger(__name__)

TOPIC_GROUP_SEPARATOR = "@"
"""`ConsumerOffsetManager.TOPIC_GROUP_SEPARATOR`: table keys are `topic@group`."""

JOURNAL_COMPACT_BYTES = 1 << 20
"""A journal larger than this is folded into a snapshot by the commit that crosses it."""


class OffsetFileError(CorruptionError, ValueError):
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


@dataclass(frozen=True)
class OffsetIssue:
    """Something `load()` left out: which file, which `topic@group` entry (None for the file as a whole or a
    journal line), why, and where (the byte offset of a journal line; None otherwise)."""

    file: str
    key: str | None
    reason: str
    offset: int | None = None


@dataclass(frozen=True)
class DecodedOffsets:
    """What `read_offsets` found: the good entries, the data version, and what was left out."""

    table: dict[str, dict[int, int]]
    version: DataVersion
    issues: list[tuple[str | None, str]]


# -- the file format (the codec is Rust's: src/offsets.rs) ---------------------------------------------------


def encode_offsets(table: Mapping[str, Mapping[int, int]], version: DataVersion) -> str:
    """`ConsumerOffsetManager.encode(true)`: the exact text fastjson 1.2.83 writes (spec §9.3).

    `offsetTable` is written in the iteration order of the broker's `ConcurrentHashMap(512)` and
    `groupTopicMap` in that of its `HashMap(128)` of `HashSet(8)`s, so the same commits made in the same order
    encode to the same bytes as RocketMQ 5.3.1's broker; queue ids ascend. Every key must be a `str`, every
    queue id a Java int and every offset a Java long (`ArgumentTypeError` / `InvalidArgumentError`).
    """
    return _native.encode_offsets(table, version.counter, version.state_version, version.timestamp)


def read_offsets(data: bytes | str, path: str | os.PathLike[str] = "consumerOffset.json") -> DecodedOffsets:
    """Reads `consumerOffset.json` keeping every good entry: a queue whose id or offset is unreadable, or an
    entry that is not an object, is left out and listed in `issues`. Raises `OffsetFileError` (naming `path`
    and the byte offset) only when the document is not JSON or its `offsetTable` is not an object.
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    try:
        table, (counter, state, ts), issues = _native.decode_offsets(raw, os.fspath(path))
    except CorruptionError as e:
        err = OffsetFileError(str(e))
        err.status, err.path, err.offset = None, e.path, e.offset
        raise err from None
    return DecodedOffsets(table, DataVersion(counter, state, ts), issues)


def decode_offsets(text: bytes | str) -> tuple[dict[str, dict[int, int]], DataVersion]:
    """Parses `consumerOffset.json` (fastjson's unquoted integer keys or strict JSON) strictly: any entry that
    `read_offsets` would leave out raises `OffsetFileError` too.

    Only `offsetTable` and `dataVersion` are read, as RocketMQ does; `groupTopicMap` and unknown properties are
    ignored.
    """
    decoded = read_offsets(text)
    if decoded.issues:
        key, reason = decoded.issues[0]
        raise OffsetFileError(f"{key}: {reason}" if key is not None else reason)
    return decoded.table, decoded.version


# -- the manager -------------------------------------------------------------------------------------------


def _fault_point(stage: str) -> None:
    """A no-op that crash tests replace to kill the process at a stage of `persist()`."""


def _key(topic: str, group: str) -> str:
    return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"


def _check_names(group: object, topic: object) -> tuple[str, str]:
    """A group and a topic that form an unambiguous `topic@group` key: non-empty, storable, without `@`."""
    g = _args.name(group, "group")
    t = _args.name(topic, "topic")
    for what, value in (("group", g), ("topic", t)):
        if TOPIC_GROUP_SEPARATOR in value:
            raise InvalidArgumentError(f"{what} {value!r} contains {TOPIC_GROUP_SEPARATOR!r}, the key separator")
    return g, t


def _check_lookup(group: object, topic: object) -> tuple[str, str]:
    """A group and a topic for a lookup: any storable `str` (an unknown one simply finds nothing)."""
    return _args.text(group, "group"), _args.text(topic, "topic")


class ConsumerOffsetManager:
    """Committed consumer offsets per (group, topic, queue), persisted to `consumerOffset.json`.

    Thread-safe. `start()` (or `start_thread=True`) persists every `flush_interval_ms` on a background thread,
    as the broker does every `flushConsumerOffsetInterval` (5 s); `close()` stops it after a last persist. A
    persist that fails there is counted in `flush_failures`, kept in `last_flush_error` and logged; the thread
    keeps running and tries again at the next interval.

    Every method checks its arguments: names are `str`s (a committed group or topic must be non-empty and must
    not contain `@`), queue ids Java ints (not negative when committed), offsets Java longs. A wrong type raises
    `rmq.ArgumentTypeError`, a bad value `rmq.InvalidArgumentError`, and nothing changes; so `persist()` never
    writes what `load()` would reject.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, flush_interval_ms: int = 5000, start_thread: bool = False
    ) -> None:
        if not isinstance(path, str | os.PathLike):
            raise ArgumentTypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
        self.path = Path(path)
        self.flush_interval_ms = _args.positive(flush_interval_ms, "flush_interval_ms")
        start = _args.boolean(start_thread, "start_thread")
        self._lock = threading.Lock()  # guards the tables
        self._persist_lock = threading.Lock()  # one writer of the file at a time
        self._offsets = _native.BrokerOffsetTable()  # the broker's maps, so persist writes the broker's bytes
        self._reset: dict[str, dict[int, int]] = {}
        self._pull: dict[str, dict[int, int]] = {}
        self._version = DataVersion()
        self._changes = 0  # changes since the last persist (a persist then bumps the data version)
        self._seq = 0  # changes ever made; persists skip when an earlier one already covered them
        self._persisted_seq = -1
        self._journal_fd: int | None = None
        self._journal_tag = 0  # the snapshot counter journal lines are tagged with
        # What this process changed since its last persist: a persist merges only these into the file as it is
        # on disk (other processes' commits are kept), and a refresh takes everything else from the file.
        self._dirty: dict[tuple[str, int], int] = {}
        self._removed: set[str] = set()
        self._file_lock = FileLock.of(self.path.with_name(self.path.name + ".lock"))
        self._fences: dict[str, list[Callable[[], bool]]] = {}  # group -> its leases (`fence`)
        self._journal_bytes = 0
        self._journal_since: list[bytes] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: What the last `load()` left out or fell back from (damaged entries, files, journal lines).
        self.load_issues: list[OffsetIssue] = []
        #: Background persists that failed (the thread keeps running).
        self.flush_failures = 0
        #: The exception of the last failed background persist, None if none failed.
        self.last_flush_error: BaseException | None = None
        if start:
            self.start()

    # -- files -----------------------------------------------------------------------------------------

    @property
    def bak_path(self) -> Path:
        return self.path.with_name(self.path.name + ".bak")

    def _read(self, path: Path, issues: list[OffsetIssue], damaged: dict[Path, bytes]) -> DecodedOffsets | None:
        """The file's good entries, or None (with the reason in `issues`) when it is missing or unreadable; the
        bytes of a file that is not JSON go to `damaged`, for salvage."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            issues.append(OffsetIssue(str(path), None, f"cannot be read: {e}"))
            return None
        if not data.strip():
            issues.append(OffsetIssue(str(path), None, "is empty"))
            return None
        try:
            return read_offsets(data, path)
        except OffsetFileError as e:
            issues.append(OffsetIssue(str(path), None, f"is not a valid consumerOffset.json: {e}"))
            damaged[path] = data
            return None

    def load(self) -> bool:
        """Reads the file; a missing, empty or undecodable one is discarded and `<file>.bak` read instead.

        A damaged entry or queue does not discard the file: every good entry is loaded, the damaged ones are
        taken from `<file>.bak` where it has them, and each is reported in `load_issues` (and logged as a
        warning), as are damaged journal lines. When neither file is valid JSON (a torn or garbled file and no
        intact backup), the entries that still parse are salvaged from both. Returns True when state was loaded
        or neither file exists (empty state), False when nothing could be read (the table is then empty and the
        bad files are left for inspection).

        It reads under the file lock `persist()` takes (where the lock file exists; a reader never creates it), so
        it never sees another process's persist between its renames, when only `<file>.bak` is there.
        """
        with self._file_lock.held_for_reading():
            return self._load()

    def _load(self) -> bool:
        issues: list[OffsetIssue] = []
        damaged: dict[Path, bytes] = {}
        main = self._read(self.path, issues, damaged)
        chosen = main
        if main is None or main.issues:
            bak = self._read(self.bak_path, issues, damaged)
            if main is None:
                chosen = bak
                if bak is not None:
                    issues.append(OffsetIssue(str(self.bak_path), None, "loaded instead of the main file"))
            elif bak is not None:
                _fill_from_backup(main, bak)
        if chosen is None and damaged:
            chosen = self._salvage(damaged, issues)
        if chosen is not None:
            for key, reason in chosen.issues:
                src = self.path if chosen is main else self.bak_path
                issues.append(OffsetIssue(str(src), key, reason))
            with self._lock:
                self._offsets = _native.BrokerOffsetTable.loaded(chosen.table)
                self._dirty.clear()
                self._removed.clear()
                self._version = chosen.version
                self._changes = self._replay_journal_locked(chosen.version.counter, issues)
                self._seq += 1
            self._report(issues)
            return True
        ok = not (self.path.exists() or self.bak_path.exists())
        with self._lock:
            self._offsets = _native.BrokerOffsetTable()
            self._dirty.clear()
            self._removed.clear()
            self._changes = self._replay_journal_locked(0, issues) if ok else 0
            self._seq += 1
        self._report(issues)
        return ok

    def _salvage(self, damaged: dict[Path, bytes], issues: list[OffsetIssue]) -> DecodedOffsets | None:
        """The entries that still parse in the damaged files, the main file's first, then keys and queues only
        the backup still has (older offsets redeliver; lost ones would skip messages). None if there are none."""
        result: DecodedOffsets | None = None
        for path in (self.path, self.bak_path):
            data = damaged.get(path)
            if data is None:
                continue
            table, (counter, state, ts), found = _native.salvage_offsets(data)
            issues.extend(OffsetIssue(str(path), key, reason) for key, reason in found)
            if not table:
                continue
            issues.append(OffsetIssue(str(path), None, f"salvaged {len(table)} entries from the damaged file"))
            if result is None:
                result = DecodedOffsets(table, DataVersion(counter, state, ts), [])
            else:
                for key, queues in table.items():
                    mine = result.table.setdefault(key, {})
                    for q, o in queues.items():
                        mine.setdefault(q, o)
        return result

    def _report(self, issues: list[OffsetIssue]) -> None:
        self.load_issues = issues
        for i in issues:
            where = f"{i.file} [{i.key}]" if i.key is not None else i.file
            log.warning("consumer offsets: %s: %s", where, i.reason)

    def _replay_journal_locked(self, counter: int, issues: list[OffsetIssue]) -> int:
        """Applies the journal's commits made on top of snapshot `counter` or later, in order; returns how many.

        A torn last line (a kill during an append) and each damaged line (checksum or fields that do not verify)
        is left out and reported in `issues` with its byte offset; every other line is applied.
        """
        path = str(self.journal_path)
        try:
            data = self.journal_path.read_bytes()
        except FileNotFoundError:
            return 0
        except OSError as e:
            issues.append(OffsetIssue(path, None, f"cannot be read: {e}"))
            return 0
        entries, left_out, _ = _native.decode_journal(data)
        for at, line, torn, why in left_out:
            what = "torn last line" if torn else "damaged line"
            issues.append(OffsetIssue(path, None, f"{what} {line} at byte {at} left out: {why}", at))
        applied = 0
        for tag, group, topic, queue_id, offset in entries:
            if tag < counter:
                continue
            self._offsets.commit(_key(topic, group), queue_id, offset)
            applied += 1
        return applied

    def encode(self) -> str:
        """The file content for the current table (fastjson's pretty print)."""
        with self._lock:
            table = self._offsets.copy()
            version = DataVersion(self._version.counter, self._version.state_version, self._version.timestamp)
        return table.encode(version.counter, version.state_version, version.timestamp)

    def persist(self, *, sync: bool = True) -> None:
        """Writes the table atomically, keeping the previous file as `.bak`.

        Several processes may share the file (the members of a group in several processes, each committing the
        queues it owns): under an fcntl lock on `<file>.lock`, the file as it is on disk (with its journal) is
        read, only what this process changed since its last persist is applied over it, and the result is
        written; so no process's commit is lost or moved back by another's older copy. Entries this process did
        not change take the values on disk (as `refresh()` does).

        Returns at once when a persist that began after the last change already wrote it, so concurrent callers
        (consume threads persisting after each batch) share one write.

        With `sync=False` nothing is fsynced: the file still survives a process crash (the page cache does), and
        after a power loss `load()` falls back to the backup at worst; consumers then redeliver a little more.
        """
        sync = _args.boolean(sync, "sync")
        with self._lock:
            wanted = self._seq
        with self._persist_lock:
            if self._persisted_seq >= wanted:
                return  # a persist that started after our caller's changes already wrote them (group commit)
            with self._file_lock.held():
                disk = self._disk_state()
                with self._lock:
                    self._drop_lapsed_locked()
                    if disk is not None:
                        self._merge_locked(*disk)
                        self._version.counter = max(self._version.counter, disk[1].counter)
                    if self._changes:
                        self._version.next_version()
                    # What this snapshot covers, given back if it is not written.
                    covered = (self._changes, dict(self._dirty), set(self._removed), self._journal_since)
                    self._changes = 0
                    written = self._seq
                    self._journal_since = []  # journal lines from here on are not in this snapshot
                    self._dirty.clear()
                    self._removed.clear()
                    table = self._offsets.copy()
                    version = DataVersion(self._version.counter, self._version.state_version, self._version.timestamp)
                text = table.encode(version.counter, version.state_version, version.timestamp)
                try:
                    replace_file(self.path, text.encode("utf-8"), bak=self.bak_path, sync=sync, stage=_fault_point)
                except BaseException:
                    self._uncover(*covered)
                    raise
                self._persisted_seq = written
                try:
                    self._compact_journal()
                except OSError:
                    # The snapshot is written; the journal keeps its lines (those before it are tagged older and
                    # not replayed over it), and the next persist compacts it.
                    log.warning("compacting %s failed; the next persist tries again", self.journal_path, exc_info=True)

    def _uncover(
        self, changes: int, dirty: dict[tuple[str, int], int], removed: set[str], journal: list[bytes]
    ) -> None:
        """After a persist that did not write its snapshot: what it covered is this process's own change again,
        so the next persist applies it over the disk's values (a commit made since wins) and keeps its journal
        lines."""
        with self._lock:
            self._changes += changes
            for entry, offset in dirty.items():
                self._dirty.setdefault(entry, offset)
            self._removed |= removed
            self._journal_since = journal + self._journal_since

    def refresh(self) -> None:
        """Takes from the file on disk (and its journal) every offset this process has not changed since its
        last persist: what other processes sharing the file committed and persisted."""
        with self._file_lock.held():
            disk = self._disk_state()
            if disk is not None:
                with self._lock:
                    self._merge_locked(*disk)

    def _disk_state(self) -> tuple[dict[str, dict[int, int]], DataVersion] | None:
        """The table on disk: the file (or its backup) plus the journal's later commits; None when a file exists
        but cannot be read (nothing is then merged). The caller holds the file lock."""
        issues: list[OffsetIssue] = []
        damaged: dict[Path, bytes] = {}
        chosen = self._read(self.path, issues, damaged)
        if chosen is None:
            chosen = self._read(self.bak_path, issues, damaged)
        if chosen is None:
            if self.path.exists() or self.bak_path.exists():
                return None
            table: dict[str, dict[int, int]] = {}
            version = DataVersion()
        else:
            table = {k: dict(v) for k, v in chosen.table.items()}
            version = chosen.version
        try:
            data = self.journal_path.read_bytes()
        except OSError:
            data = b""
        if data:
            for tag, group, topic, queue_id, offset in _native.decode_journal(data)[0]:
                if tag >= version.counter:
                    table.setdefault(_key(topic, group), {})[queue_id] = offset
        return table, version

    def _merge_locked(self, table: dict[str, dict[int, int]], version: DataVersion) -> None:
        """Takes the disk's value of every queue this process has not changed or removed since its last
        persist."""
        for key, queues in table.items():
            if key in self._removed:
                continue
            for queue_id, offset in queues.items():
                if (key, queue_id) not in self._dirty and self._offsets.get(key, queue_id) != offset:
                    self._offsets.commit(key, queue_id, offset)

    # -- the commit journal ----------------------------------------------------------------------------

    @property
    def journal_path(self) -> Path:
        """`<file>.journal`: commits made since the last snapshot by `commit_offset(..., journal=True)`."""
        return self.path.with_name(self.path.name + ".journal")

    def _journal_append_locked(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Appends one commit (the caller holds the file lock, then `_lock`). Another process's persist may have
        folded and replaced the journal since: the line then goes to the new one, tagged with the snapshot on
        disk, so that `load()` replays it over that snapshot."""
        if self._journal_fd is not None:
            try:
                current = os.stat(self.journal_path).st_ino
            except FileNotFoundError:
                current = -1
            if current != os.fstat(self._journal_fd).st_ino:
                os.close(self._journal_fd)
                self._journal_fd = None
        data = b""
        if self._journal_fd is None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.journal_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            except OSError as e:
                if (full := as_disk_full(e, f"the commit was not journaled in {self.journal_path}")) is not e:
                    raise full from e
                raise
            try:
                size = os.fstat(fd).st_size
                keep = _native.decode_journal(os.pread(fd, size, 0))[2] if size else 0
                if keep < size:
                    os.ftruncate(fd, keep)  # the torn tail of an append a kill interrupted
            except BaseException:
                os.close(fd)
                raise
            self._journal_fd = fd
            self._journal_bytes = keep
            self._journal_tag = max(self._version.counter, self._disk_counter())
            if keep == 0:
                data = _native.OFFSETS_JOURNAL_HEADER
        tag = max(self._journal_tag, self._version.counter)
        record = _native.encode_journal_entry(tag, group, topic, queue_id, offset)
        data += record
        fd, done = self._journal_fd, 0
        try:
            while done < len(data):
                done += os.write(fd, data[done:])
        except OSError as e:
            # A short write then a failure (a full disk) leaves part of a line, which the next line would follow:
            # cut it off (appends are made under the file lock), and reopen for the next append, which trims
            # what this could not.
            with contextlib.suppress(OSError):
                if done:
                    os.ftruncate(fd, os.fstat(fd).st_size - done)
                os.close(fd)
            self._journal_fd = None
            if (full := as_disk_full(e, f"the commit was not journaled in {self.journal_path}")) is not e:
                raise full from e
            raise
        self._journal_bytes += len(data)
        self._journal_since.append(record)

    def _disk_counter(self) -> int:
        """The data version counter of the snapshot on disk (0 when there is none or it cannot be read)."""
        for path in (self.path, self.bak_path):
            try:
                return read_offsets(path.read_bytes(), path).version.counter
            except (OSError, OffsetFileError):
                continue
        return 0

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
            data = _native.OFFSETS_JOURNAL_HEADER + b"".join(self._journal_since)
            replace_file(self.journal_path, data, sync=False)
            self._journal_bytes = len(data)

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
            except Exception as e:  # the thread must outlive any failure: count it, keep it, retry
                self.flush_failures += 1
                self.last_flush_error = e
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

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int, *, journal: bool = False) -> bool:
        """Records `offset` (the next queue offset to consume). A smaller offset than before is accepted. Returns
        True, or False having recorded nothing when the group is fenced and its lease has run out (`fence`).

        With `journal`, the commit is also appended to `<file>.journal` (one small write, no fsync), which
        `load()` replays over the snapshot: a commit that survives a process crash at a fraction of the cost of
        `persist()`. The next `persist()` folds the journal into the snapshot; Apache RocketMQ reading the
        directory sees the snapshot (offsets at most that old: redelivery, never loss).
        """
        group, topic = _check_names(group, topic)
        queue_id = _args.queue_id(queue_id)
        offset = _args.java_long(offset, "offset")
        journal = _args.boolean(journal, "journal")
        with self._file_lock.held() if journal else contextlib.nullcontext(), self._lock:
            if not self._holds_locked(group):
                log.debug("%s: %s/%d -> %d not committed: the lease ran out", group, topic, queue_id, offset)
                return False
            key = _key(topic, group)
            if journal:
                # First: a commit that cannot be journaled raises having changed nothing.
                self._journal_append_locked(group, topic, queue_id, offset)
                compact = self._journal_bytes > JOURNAL_COMPACT_BYTES
            self._offsets.commit(key, queue_id, offset)
            self._dirty[(key, queue_id)] = offset
            self._changes += 1
            self._seq += 1
        if journal and compact:
            self.persist(sync=False)
        return True

    # -- fencing (push consumers' leases, `rmq.group`) ----------------------------------------------------------

    def fence(self, group: str, holds: Callable[[], bool]) -> None:
        """Makes this process's writes of `group`'s offsets depend on `holds()`, a lease on the group's queues (a
        push consumer's, `rmq.group.ConsumerGroup.holds_lease`). While it is False (the process was paused or
        its heartbeat stalled, and other members may have taken its queues over): `commit_offset` for the group
        records nothing and returns False, and `persist()` writes none of this process's changes to the group's
        offsets since its last persist and takes the file's values instead. Checked under the file lock when a
        commit is journaled and when persisting, so another process that takes the queues over after the lease
        ran out (and reads the offsets under that lock) sees every commit made under it and none after.
        `unfence(group, holds)` undoes one `fence`."""
        group = _args.text(group, "group")
        with self._lock:
            self._fences.setdefault(group, []).append(holds)

    def unfence(self, group: str, holds: Callable[[], bool]) -> None:
        """Undoes one `fence(group, holds)`; nothing when there is none."""
        group = _args.text(group, "group")
        with self._lock:
            fences = self._fences.get(group, [])
            if holds in fences:
                fences.remove(holds)
            if not fences:
                self._fences.pop(group, None)

    def disown(self, group: str, queues: Iterable[tuple[str, int]]) -> None:
        """Forgets this process's changes to the offsets of `group` on these (topic, queue id)s since its last
        persist: they are another process's now (a push consumer's queues taken over while its lease had run
        out), so the next persist and `refresh()` take the file's values for them."""
        group = _args.text(group, "group")
        with self._lock:
            for topic, queue_id in queues:
                self._dirty.pop((_key(topic, group), queue_id), None)

    def _holds_locked(self, group: str) -> bool:
        return all(holds() for holds in self._fences.get(group, ()))

    def _drop_lapsed_locked(self) -> None:
        """Before a persist (under the file lock): forgets this process's changes of every fenced group whose
        lease has run out, so that the persist takes the file's values for them."""
        lapsed = {g for g in self._fences if not self._holds_locked(g)}
        if not lapsed:
            return
        for entry in [d for d in self._dirty if _group_of(d[0]) in lapsed]:
            del self._dirty[entry]
        log.info("persisting consumer offsets without the changes of %s: their lease has run out", sorted(lapsed))

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, −1 when unknown; an assigned reset offset wins over it."""
        key = _key(*reversed(_check_lookup(group, topic)))
        queue_id = _args.java_int(queue_id, "queue_id")
        with self._lock:
            reset = self._reset.get(key)
            if reset is not None and queue_id in reset:
                return reset[queue_id]
            committed = self._offsets.get(key, queue_id)
            return -1 if committed is None else committed

    def query_offsets(self, group: str, topic: str) -> dict[int, int]:
        """{queue id: committed offset} of the group on the topic (empty when unknown)."""
        key = _key(*reversed(_check_lookup(group, topic)))
        with self._lock:
            return self._offsets.queues(key)

    def table(self) -> dict[str, dict[int, int]]:
        """A copy of the whole `offsetTable`."""
        with self._lock:
            return self._offsets.to_dict()

    def groups(self) -> set[str]:
        """Groups with committed offsets (`whichGroupByTopic` over all topics)."""
        with self._lock:
            return {p[1] for p in (k.split(TOPIC_GROUP_SEPARATOR) for k in self._offsets.keys()) if len(p) == 2}

    def topics_of(self, group: str) -> set[str]:
        """Topics the group has committed offsets for (`whichTopicByConsumer`)."""
        group = _args.text(group, "group")
        with self._lock:
            return {
                p[0]
                for p in (k.split(TOPIC_GROUP_SEPARATOR) for k in self._offsets.keys())
                if len(p) == 2 and p[1] == group
            }

    def groups_of(self, topic: str) -> set[str]:
        """Groups that have committed offsets on the topic (`whichGroupByTopic`)."""
        topic = _args.text(topic, "topic")
        with self._lock:
            return {
                p[1]
                for p in (k.split(TOPIC_GROUP_SEPARATOR) for k in self._offsets.keys())
                if len(p) == 2 and p[0] == topic
            }

    def remove_group(self, group: str) -> None:
        """`removeOffset(group)`: drops the group's committed, reset and pull offsets on every topic."""
        group = _args.text(group, "group")
        with self._lock:
            for key in [k for k in self._offsets.keys() if _group_of(k) == group]:
                self._offsets.remove(key)
                self._forget_locked(key)
            for table in (self._reset, self._pull):
                for key in [k for k in table if _group_of(k) == group]:
                    del table[key]
            self._changes += 1
            self._seq += 1

    def clean_topic(self, topic: str) -> None:
        """`cleanOffsetByTopic`: drops every group's offsets on exactly this topic."""
        topic = _args.text(topic, "topic")
        with self._lock:
            for key in [k for k in self._offsets.keys() if _topic_of(k) == topic]:
                self._offsets.remove(key)
                self._forget_locked(key)
            for table in (self._reset, self._pull):
                for key in [k for k in table if _topic_of(k) == topic]:
                    del table[key]
            self._changes += 1
            self._seq += 1

    def _forget_locked(self, key: str) -> None:
        """A removed entry: the next persist drops it from the file too."""
        self._removed.add(key)
        for dirty in [d for d in self._dirty if d[0] == key]:
            del self._dirty[dirty]

    def assign_reset_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """`assignResetOffset`: a server-side reset; it also overwrites the committed offset.

        Empty names, a negative queue id or a negative offset are ignored, as RocketMQ does; wrong types and
        values beyond Java's int and long raise as everywhere else.
        """
        group, topic = _check_lookup(group, topic)
        queue_id = _args.java_int(queue_id, "queue_id")
        offset = _args.java_long(offset, "offset")
        if not group or not topic or queue_id < 0 or offset < 0:
            log.warning("ignoring reset offset %r/%r/%d -> %d", group, topic, queue_id, offset)
            return
        group, topic = _check_names(group, topic)
        key = _key(topic, group)
        with self._lock:
            self._reset.setdefault(key, {})[queue_id] = offset
            self._offsets.commit(key, queue_id, offset)
            self._dirty[(key, queue_id)] = offset
            self._changes += 1
            self._seq += 1

    def has_reset_offset(self, group: str, topic: str, queue_id: int) -> bool:
        key = _key(*reversed(_check_lookup(group, topic)))
        queue_id = _args.java_int(queue_id, "queue_id")
        with self._lock:
            return queue_id in self._reset.get(key, {})

    def query_then_erase_reset_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The assigned reset offset, removed as it is read (one-shot); None when there is none."""
        key = _key(*reversed(_check_lookup(group, topic)))
        queue_id = _args.java_int(queue_id, "queue_id")
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
        group, topic = _check_names(group, topic)
        queue_id = _args.queue_id(queue_id)
        offset = _args.java_long(offset, "offset")
        with self._lock:
            self._pull.setdefault(_key(topic, group), {})[queue_id] = offset

    def query_pull_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The pull offset, else the committed offset, else −1."""
        key = _key(*reversed(_check_lookup(group, topic)))
        queue_id = _args.java_int(queue_id, "queue_id")
        with self._lock:
            pull = self._pull.get(key)
            if pull is not None and queue_id in pull:
                return pull[queue_id]
        return self.query_offset(group, topic, queue_id)

    def clear_pull_offset(self, group: str, topic: str) -> None:
        key = _key(*reversed(_check_lookup(group, topic)))
        with self._lock:
            self._pull.pop(key, None)

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

        if not isinstance(store, _native.MessageStore):
            raise ArgumentTypeError(f"store must be an rmq.MessageStore, got {type(store).__name__}")
        group, topic = _check_names(group, topic)
        timestamp = _args.java_long(timestamp, "timestamp")
        force = _args.boolean(force, "force")
        if queue_ids is None:
            ids = store.queue_ids(topic)
        elif isinstance(queue_ids, Iterable) and not isinstance(queue_ids, str | bytes):
            ids = sorted({_args.queue_id(q, "queue_ids item") for q in queue_ids})
        else:
            raise ArgumentTypeError(f"queue_ids must be an iterable of int, got {type(queue_ids).__name__}")
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


def _fill_from_backup(main: DecodedOffsets, bak: DecodedOffsets) -> None:
    """Queues of entries damaged in `main` that `bak` still has: an older offset redelivers, a lost one skips."""
    damaged = {key for key, _ in main.issues if key is not None}
    for key in damaged:
        older = bak.table.get(key)
        if older:
            queues = main.table.setdefault(key, {})
            for q, o in older.items():
                queues.setdefault(q, o)


def _group_of(key: str) -> str | None:
    parts = key.split(TOPIC_GROUP_SEPARATOR)
    return parts[1] if len(parts) == 2 else None


def _topic_of(key: str) -> str | None:
    parts = key.split(TOPIC_GROUP_SEPARATOR)
    return parts[0] if len(parts) == 2 else None
