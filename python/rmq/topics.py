"""Topic configuration: RocketMQ's `TopicConfigManager` and its `config/topics.json`.

The file is the one Apache RocketMQ 5.3.1's broker reads and writes (spec §9.4): fastjson's pretty print of a
`TopicConfigSerializeWrapper`, in the iteration order of the broker's maps (the codec is Rust's,
`src/offsets/topics.rs`). A file the broker wrote, loaded and persisted again by rmq, keeps its bytes (apart from
`dataVersion`, which a change bumps as the broker's does), and the broker loads what rmq writes.

Persistence is atomic, as for `consumerOffset.json`: the new text goes to `<file>.tmp` and is fsynced, the
current file is renamed to `<file>.bak`, the temp file renamed over `<file>`, the directory fsynced; `load()`
falls back to `.bak` when the file is missing, empty or undecodable (`ConfigManager.load`). Every change is
made under an fcntl lock on `<file>.lock` after re-reading the file, so processes sharing a store never lose
each other's topics.

What a configuration means to rmq (the broker's rules):

- A put to a configured topic with `queue_id >= max(write_queue_nums, read_queue_nums)` is refused with
  `InvalidArgumentError` before anything is written (`AbstractSendMessageProcessor.msgCheck`: "request
  queueId[%d] is illegal"). The topic's `perm` is not checked on put: the broker checks only its own permission
  there (producers learn writable queues from the route).
- A push consumer group divides the configured topic's `read_queue_nums` queues (`0..read_queue_nums-1`, none
  when `perm` is not readable), as the client's route does.
- A topic that is not configured works as before: any queue id is accepted and consumers see the queues that
  hold messages plus `topic_queue_nums` (default 4, `DefaultMQProducer.defaultTopicQueueNums`). rmq does not
  record such topics in `topics.json` (the broker's `autoCreateTopicEnable` does, from `TBW102`), so the file
  only holds what a user created or what a broker wrote.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from rmq import _args, _native
from rmq._flock import FileLock, replace_file
from rmq._native import ArgumentTypeError, CorruptionError

__all__ = [
    "PERM_INHERIT",
    "PERM_READ",
    "PERM_WRITE",
    "TopicConfig",
    "TopicConfigManager",
    "TopicFileError",
]

PERM_INHERIT = 1
PERM_WRITE = 2
PERM_READ = 4
#: `PermName.PERM_PRIORITY`: perm must be below it (`PermName.isValid`).
_PERM_LIMIT = 8
#: The most queues a topic may be configured with (as `topic_queue_nums`).
MAX_QUEUE_NUMS = 1 << 16
FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")


class TopicFileError(CorruptionError, ValueError):
    """A `topics.json` that cannot be decoded (the loader then falls back to `.bak`)."""


@dataclass(frozen=True)
class TopicConfig:
    """RocketMQ's `TopicConfig` (defaults are Java's: 16 queues, perm 6 = read | write)."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    order: bool = False
    topic_sys_flag: int = 0
    topic_filter_type: str = "SINGLE_TAG"
    attributes: Mapping[str, str] = field(default_factory=dict)

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)

    def _tuple(self) -> _native._TopicTuple:
        return (
            self.topic_name,
            self.read_queue_nums,
            self.write_queue_nums,
            self.perm,
            self.order,
            self.topic_sys_flag,
            self.topic_filter_type,
            list(self.attributes.items()),
        )

    @classmethod
    def _of(cls, t: _native._TopicTuple) -> TopicConfig:
        name, read, write, perm, order, sys_flag, filter_type, attrs = t
        return cls(name, read, write, perm, order, sys_flag, filter_type, dict(attrs))


def check_topic_config(
    name: object,
    queues: object = 8,
    read_queues: object = None,
    write_queues: object = None,
    perm: object = PERM_READ | PERM_WRITE,
    order: object = False,
    attributes: object = None,
) -> TopicConfig:
    """A `TopicConfig` from `create_topic`'s arguments, checked as the broker's `updateAndCreateTopic` does:
    `TopicValidator`'s name rules and no system topic (`InvalidTopicError`), queue counts in 1..65536, perm a
    `PermName` combination in 0..7 (`InvalidArgumentError`), wrong types `ArgumentTypeError`."""
    topic = _args.text(name, "name")
    _native.check_topic_config_name(topic)
    n = _args.integer(queues, "queues", 1, MAX_QUEUE_NUMS)
    read = n if read_queues is None else _args.integer(read_queues, "read_queues", 1, MAX_QUEUE_NUMS)
    write = n if write_queues is None else _args.integer(write_queues, "write_queues", 1, MAX_QUEUE_NUMS)
    p = _args.integer(perm, "perm", 0, _PERM_LIMIT - 1)
    o = _args.boolean(order, "order")
    attrs: dict[str, str] = {}
    if attributes is not None:
        if not isinstance(attributes, Mapping):
            raise ArgumentTypeError(f"attributes must be a Mapping[str, str], got {type(attributes).__name__}")
        for k, v in attributes.items():
            attrs[_args.name(k, "attribute name")] = _args.text(v, f"attribute {k!r}")
    return TopicConfig(topic, read, write, p, o, 0, "SINGLE_TAG", attrs)


class TopicConfigManager:
    """The topic table of one store, persisted to `<root>/config/topics.json`. Thread- and process-safe: changes
    re-read the file under an fcntl lock; reads re-read it when it changed on disk (checked at most every
    `refresh_interval` seconds)."""

    def __init__(self, path: str | os.PathLike[str], *, refresh_interval: float = 0.5) -> None:
        if not isinstance(path, str | os.PathLike):
            raise ArgumentTypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
        self.path = Path(path)
        self.refresh_interval = _args.seconds(refresh_interval, "refresh_interval")
        self._lock = threading.RLock()
        self._table = _native.TopicConfigTable()
        self._version = (0, 0, 0)
        self._configs: dict[str, TopicConfig] = {}
        self._stamp: tuple[int, int, int] | None = None
        self._checked = -1.0
        #: What the last load fell back from: (file, reason).
        self.load_issues: list[tuple[str, str]] = []
        #: Called with every topic's queue count (`max(write_queue_nums, read_queue_nums)`) after each load and
        #: change; a store that uses this manager checks its puts against them (`MessageStore._set_queue_limits`).
        self.on_change: Callable[[dict[str, int]], None] | None = None

    def _changed_locked(self) -> None:
        if self.on_change is not None:
            self.on_change({n: max(c.write_queue_nums, c.read_queue_nums) for n, c in self._configs.items()})

    @property
    def bak_path(self) -> Path:
        return self.path.with_name(self.path.name + ".bak")

    @property
    def lock_path(self) -> Path:
        return self.path.with_name(self.path.name + ".lock")

    def _file_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _read(self, path: Path) -> tuple[list[_native._TopicTuple], tuple[int, int, int]] | None:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        if not data.strip():
            self.load_issues.append((str(path), "is empty"))
            return None
        try:
            return _native.decode_topics(data, path)
        except CorruptionError as e:
            self.load_issues.append((str(path), f"is not a valid topics.json: {e}"))
            return None

    def load(self) -> bool:
        """Reads the file, or `<file>.bak` when it is missing, empty or undecodable. Returns False when a file
        exists but neither can be read (the table is then empty).

        It reads under the file lock that changes take (where the lock file exists; a reader never creates it),
        so it never sees another process's persist between its renames, when only `<file>.bak`, the table before
        the change, is there."""
        with self._lock, FileLock.of(self.lock_path).held_for_reading():
            self.load_issues = []
            stamp = self._file_stamp()
            got = self._read(self.path)
            if got is None:
                got = self._read(self.bak_path)
            if got is None:
                ok = not (self.path.exists() or self.bak_path.exists())
                topics: list[_native._TopicTuple] = []
                version = (0, 0, 0)
            else:
                ok = True
                topics, version = got
            self._table = _native.TopicConfigTable.loaded(topics)
            self._version = version
            self._configs = {t[0]: TopicConfig._of(t) for t in topics}
            self._stamp = stamp
            self._checked = time.monotonic()
            self._changed_locked()
            return ok

    def _refresh(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and 0 <= self._checked and now - self._checked < self.refresh_interval:
            return
        self._checked = now
        if self._file_stamp() != self._stamp or self._stamp is None and self.bak_path.exists():
            self.load()

    def get(self, name: str) -> TopicConfig | None:
        """The topic's configuration, None when it is not configured."""
        name = _args.text(name, "name")
        with self._lock:
            self._refresh()
            return self._configs.get(name)

    def topics(self) -> dict[str, TopicConfig]:
        """Every configured topic, in the file's order."""
        with self._lock:
            self._refresh()
            return {t[0]: self._configs[t[0]] for t in self._table.topics()}

    @property
    def data_version(self) -> tuple[int, int, int]:
        """(counter, state_version, timestamp)."""
        with self._lock:
            self._refresh()
            return self._version

    def encode(self) -> str:
        """The file's text for the current table."""
        with self._lock:
            return self._table.encode(*self._version)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Holds the thread lock and the fcntl lock, with the table re-read from disk."""
        with self._lock, FileLock.of(self.lock_path).held():
            self._refresh(force=True)
            yield

    def put(self, config: TopicConfig) -> TopicConfig:
        """Creates or replaces a topic (`updateTopicConfig`) and persists."""
        if not isinstance(config, TopicConfig):
            raise ArgumentTypeError(f"config must be a TopicConfig, got {type(config).__name__}")
        with self._locked(), self._undone_on_failure():
            self._table.put(config._tuple())
            self._configs[config.topic_name] = config
            self._persist_locked()
            self._changed_locked()
        return config

    def delete(self, name: str) -> bool:
        """Removes a topic's configuration (`deleteTopicConfig`) and persists; False when it had none."""
        name = _args.text(name, "name")
        with self._lock:
            self._refresh(force=True)
            if name not in self._configs:
                return False  # nothing to remove: no lock file, no write (a process adding it now comes after)
        with self._locked(), self._undone_on_failure():
            if not self._table.remove(name):
                return False
            self._configs.pop(name, None)
            self._persist_locked()
            self._changed_locked()
        return True

    @contextmanager
    def _undone_on_failure(self) -> Iterator[None]:
        """A change whose file was not written (a full disk) is taken back: the table is read from the file again,
        which still holds the configuration before it."""
        try:
            yield
        except BaseException:
            self.load()
            raise

    def _persist_locked(self) -> None:
        # `updateDataVersion`: nextVersion(stateMachineVersion), which is 0 outside controller mode.
        self._version = (self._version[0] + 1, 0, int(time.time() * 1000))
        text = self._table.encode(*self._version)
        replace_file(self.path, text.encode("utf-8"), bak=self.bak_path)
        self._stamp = self._file_stamp()
