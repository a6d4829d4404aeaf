"""The message store: configuration and the `MessageStore` class."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping
from typing import Any, Literal, NamedTuple

from rmq import _args, _native
from rmq._native import ArgumentTypeError, InvalidConfigError
from rmq.reput import ReputMessageService

FlushDiskType = Literal["ASYNC_FLUSH", "SYNC_FLUSH"]
BrokerRole = Literal["ASYNC_MASTER", "SYNC_MASTER", "SLAVE"]


@dataclasses.dataclass(frozen=True)
class StoreConfig:
    """Store settings: RocketMQ's `MessageStoreConfig` / `BrokerConfig` names in snake case, same defaults.

    Sizes are in bytes.
    """

    #: `mappedFileSizeCommitLog`: bytes per commitlog segment file.
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    #: `maxMessageSize`: largest body; the whole record may be 64 KiB larger.
    max_message_size: int = 4 * 1024 * 1024
    #: `enabledAppendPropCRC`: append a `__CRC32#` property with a CRC of the whole record.
    enabled_append_prop_crc: bool = False
    #: `forceVerifyPropCRC`: when validating on open, check the property CRC instead of the body CRC.
    force_verify_prop_crc: bool = False
    #: `autoMessageVersionOnTopicLen`: v2 records (2-byte topic length) for topics over 127 characters.
    auto_message_version_on_topic_len: bool = True
    #: `checkCRCOnRecover`: verify body CRCs while finding the end of the log on open.
    check_crc_on_recover: bool = True
    #: `flushDiskType`: ASYNC_FLUSH returns once data is in the page cache (flushed by `flush()` and on
    #: close; survives a process crash); SYNC_FLUSH flushes each put's bytes to disk before returning.
    flush_disk_type: FlushDiskType = "ASYNC_FLUSH"
    #: `brokerIP1:listenPort`: the store host written into every record and message id.
    store_host: str = "127.0.0.1:10911"
    #: `brokerClusterName`: stored as the CLUSTER property of single puts, as a broker does (None: omit).
    broker_cluster_name: str | None = "DefaultCluster"
    #: `mappedFileSizeConsumeQueue`: bytes per consume-queue file (rounded up to whole 20-byte entries).
    mapped_file_size_consume_queue: int = 300_000 * 20
    #: `maxHashSlotNum`: hash slots per index file. Index files must be read with the sizes they were written with.
    max_hash_slot_num: int = 5_000_000
    #: `maxIndexNum`: entries per index file (a file holds one fewer keys).
    max_index_num: int = 20_000_000
    #: `maxMsgsNumBatch`: the most messages one key query returns.
    max_msgs_num_batch: int = 64
    #: `messageIndexEnable`: build the key index.
    message_index_enable: bool = True
    #: `messageDelayLevel`: delay levels; the tagsCode of SCHEDULE_TOPIC_XXXX entries is the delivery time.
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    #: `maxTransferBytesOnMessageInMemory`: byte cap of one `get_message` when its data is hot.
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    #: `maxTransferCountOnMessageInMemory`: message cap of one `get_message` when its data is hot.
    max_transfer_count_on_message_in_memory: int = 32
    #: `maxTransferBytesOnMessageInDisk`: byte cap of one `get_message` when its data is cold.
    max_transfer_bytes_on_message_in_disk: int = 64 * 1024
    #: `maxTransferCountOnMessageInDisk`: message cap of one `get_message` when its data is cold.
    max_transfer_count_on_message_in_disk: int = 8
    #: `accessMessageInMemoryMaxRatio`: data within this percentage of physical memory from the end of the
    #: commitlog counts as hot.
    access_message_in_memory_max_ratio: int = 40
    #: `maxFilterMessageSize`: consume-queue bytes one `get_message` may scan (at least 20 x max messages).
    max_filter_message_size: int = 16_000
    #: `travelCqFileNumWhenGetMessage`: consume-queue files one `get_message` may scan while nothing matched.
    travel_cq_file_num_when_get_message: int = 1
    #: `brokerRole`: a SLAVE never moves a reader's offset on error statuses (unless `offset_check_in_slave`).
    broker_role: BrokerRole = "ASYNC_MASTER"
    #: `offsetCheckInSlave`: let a slave correct offsets too.
    offset_check_in_slave: bool = False
    # Expired-file cleanup (README "Retention").
    #: `fileReservedTime`: hours a commitlog segment is kept after its last modification.
    file_reserved_time: int = 72
    #: `deleteWhen`: `;`-separated local hours at which expired segments are deleted.
    delete_when: str = "04"
    #: `diskMaxUsedSpaceRatio`: percent of the disk in use above which expired segments go at any hour.
    disk_max_used_space_ratio: int = 75
    #: `diskSpaceWarningLevelRatio`: percent in use above which puts are refused and segments go at once.
    disk_space_warning_level_ratio: int = 90
    #: `diskSpaceCleanForciblyRatio`: percent in use above which segments go at once, expired or not.
    disk_space_clean_forcibly_ratio: int = 85
    #: `cleanFileForciblyEnable`: let the two ratios above delete segments that have not expired.
    clean_file_forcibly_enable: bool = True
    #: `deleteCommitLogFilesInterval`: ms between two deleted segments.
    delete_commit_log_files_interval: int = 100
    #: `deleteConsumeQueueFilesInterval`: ms after a consume queue that deleted files.
    delete_consume_queue_files_interval: int = 100
    #: `destroyMapedFileIntervalForcibly`: accepted; rmq never waits for readers of a deleted file.
    destroy_mapped_file_interval_forcibly: int = 120_000
    #: `deleteFileBatchMax`: most segments deleted per run.
    delete_file_batch_max: int = 10
    #: `cleanResourceInterval`: ms between two cleanup runs.
    clean_resource_interval: int = 10_000
    #: `redeleteHangedFileInterval`: accepted; rmq never leaves a half-deleted file behind.
    redelete_hanged_file_interval: int = 120_000
    #: ms before the first cleanup run after opening (RocketMQ's fixed 60 s).
    clean_service_initial_delay: int = 60_000

    @classmethod
    def from_files(cls, path: str | os.PathLike[str], **overrides: Any) -> StoreConfig:
        """The defaults, with the file sizes of the store at `path` read off its files (what opening without a
        config uses): segment and consume-queue file sizes from the spacing of the file names (or the files'
        length), index sizes from a full index file's header (or RocketMQ's ratio of 4 entries per slot).
        `overrides` are set on top. Reads only; a directory without a store gives the defaults. Raises
        `InvalidConfigError` when the index sizes cannot be told (give `max_hash_slot_num` and `max_index_num`).
        """
        if not isinstance(path, str | os.PathLike):
            raise ArgumentTypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
        sizes: dict[str, Any] = dict(_native.sizes_from_files(os.fspath(path)))
        if "max_hash_slot_num" in overrides or "max_index_num" in overrides:
            sizes.pop("max_hash_slot_num", None)
            sizes.pop("max_index_num", None)
        return cls(**{**sizes, **overrides})

    def to_native(self) -> dict[str, Any]:
        """The settings as the extension module takes them."""
        return dataclasses.asdict(self)

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> StoreConfig:
        """Builds a config from RocketMQ-style `camelCase` properties (as in `broker.conf`).

        Keys that rmq does not use are ignored; `brokerIP1` and `listenPort` form `store_host`. A value that does
        not parse as its setting's type raises `InvalidConfigError`.
        """
        if not isinstance(props, Mapping):
            raise ArgumentTypeError(f"props must be a Mapping[str, str], got {type(props).__name__}")
        for k, v in props.items():
            _args.text(k, "property name")
            _args.text(v, f"property {k}")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        camel = {_camel(name): name for name in fields}
        kwargs: dict[str, Any] = {}
        for key, text in props.items():
            name = camel.get(key)
            if name is None or name == "store_host":
                continue
            try:
                kwargs[name] = _parse_like(getattr(cls, name), text)
            except ValueError:
                raise InvalidConfigError(f"{key}={text!r} is not a valid {name}") from None
        if "brokerIP1" in props or "listenPort" in props:
            host, _, port = cls.store_host.rpartition(":")
            kwargs["store_host"] = f"{props.get('brokerIP1', host)}:{props.get('listenPort', port)}"
        return cls(**kwargs)


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    special = {"crc": "CRC", "len": "Len", "msgs": "Msgs"}
    return first + "".join(special.get(p, p.capitalize()) for p in rest)


def _parse_like(default: object, text: str) -> object:
    if isinstance(default, bool):
        return text.strip().lower() == "true"
    if isinstance(default, int):
        return int(text)
    return text


class ConsumeQueueEntry(NamedTuple):
    """One consume-queue entry: where the message at `queue_offset` lies in the commitlog."""

    queue_offset: int
    commitlog_offset: int
    size: int
    tags_code: int


class QueryMessageResult(NamedTuple):
    """Messages found by key, oldest first, and when/where the index was last updated."""

    messages: list[_native.MessageExt]
    index_last_update_timestamp: int
    index_last_update_phy_offset: int


Recovery = Literal["strict", "truncate", "salvage"]
"""What opening does with damage inside the commitlog's data (bytes a killed process cannot leave):
"strict" refuses with `CorruptionError` naming file and offset and changes nothing; "truncate" cuts the log at
the first damaged record as RocketMQ does; "salvage" skips only the damaged bytes. Each cut or skip is listed
in `open_report["damage"]`. A torn, unacknowledged append left by a killed process is discarded in every mode
(`open_report["torn_bytes"]`)."""


class MessageStore(_native.MessageStore):
    """An open store directory: RocketMQ's commitlog, consume queues and index, written and read byte-compatibly.

    Without a `config`, the file sizes are read off the store's files (`StoreConfig.from_files`) and the rest
    is RocketMQ's defaults; a config whose sizes contradict the files raises `InvalidConfigError`.

    Opening takes RocketMQ's lock on the directory (an fcntl lock on `<root>/lock`, so a running broker and rmq
    exclude each other, and a second open in this process raises `StoreLockedError`), validates the
    tail of the commitlog, recovers the consume queues and the index, dispatches whatever they lack, and
    starts the reput service (`self.reput`) that dispatches later puts in the background. Use it as a
    context manager, or call `close()`. Every call that touches files releases the GIL.

    With `read_only=True` opening writes nothing at all (no lock, no abort file, no checkpoint, no repair, no
    file created, deleted or resized): the files are mapped copy-on-write, and the end of the log and any
    consume queue or index that is missing, stale or damaged are worked out in memory. Writing calls raise
    `ReadOnlyError`. It works on a read-only mount and beside a live broker; `refresh()` takes in what the
    broker wrote since.
    """

    config: StoreConfig
    reput: ReputMessageService

    def __new__(
        cls,
        path: str | os.PathLike[str],
        config: StoreConfig | None = None,
        *,
        start_reput: bool = True,
        recovery: Recovery = "strict",
        read_only: bool = False,
    ) -> MessageStore:
        if config is not None and not isinstance(config, StoreConfig):
            raise ArgumentTypeError(f"config must be an rmq.StoreConfig or None, got {type(config).__name__}")
        _args.boolean(start_reput, "start_reput")
        _args.boolean(read_only, "read_only")
        if not isinstance(path, str | os.PathLike):
            raise ArgumentTypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
        cfg = config if config is not None else StoreConfig.from_files(path)
        store = super().__new__(cls, os.fspath(path), cfg.to_native(), recovery, read_only)
        store.config = cfg
        return store

    def __init__(
        self,
        path: str | os.PathLike[str],
        config: StoreConfig | None = None,
        *,
        start_reput: bool = True,
        recovery: Recovery = "strict",
        read_only: bool = False,
    ) -> None:
        self.reput = ReputMessageService(self)
        # A read-only store takes no puts: everything is dispatched by the open, and `refresh()` dispatches
        # what another process added.
        if start_reput and not read_only:
            self.reput.start()

    @property
    def consumer_offset_path(self) -> str:
        """`<root>/config/consumerOffset.json`, where RocketMQ's broker keeps consumer offsets (spec §9.1)."""
        return os.path.join(self.path, "config", "consumerOffset.json")

    def close(self) -> None:
        """Stops the reput service, dispatches what is left, flushes everything and closes. Idempotent."""
        reput = getattr(self, "reput", None)
        if reput is not None:
            reput.stop()
        super().close()

    def wait_dispatched(self, timeout: float = 10.0) -> bool:
        """Waits until every message put before the call is in its consume queue and the index.

        Without a running reput service, dispatches on the calling thread instead. Returns False on timeout;
        `timeout` (seconds) must be finite and not negative.
        """
        timeout = _args.seconds(timeout)
        if not self.reput.running:
            self.dispatch_all()
            return True
        return self._wait_dispatched(timeout)

    def query_message(
        self, topic: str, key: str, max_num: int = 32, begin: int = 0, end: int = 2**63 - 1
    ) -> QueryMessageResult:
        """`queryMessage`: messages of `topic` whose UNIQ_KEY or one of whose KEYS is `key`.

        Only messages stored in [begin, end] (ms since the epoch) count; at most `max_num`, capped at
        `max_msgs_num_batch` (64) as RocketMQ caps it. Unlike RocketMQ, another key with the same hash never
        comes back: each candidate's topic and keys are checked.
        """
        msgs, ts, phy = self._query_message(topic, key, max_num, begin, end)
        return QueryMessageResult(msgs, ts, phy)

    def iter_queue(
        self, topic: str, queue_id: int, from_offset: int = 0, *, batch: int = 1024
    ) -> Iterator[ConsumeQueueEntry]:
        """The consume-queue entries of (topic, queue_id) from `from_offset` (clamped to the min offset), read
        `batch` entries at a time. The arguments are checked at the call, before the first entry is read."""
        _args.text(topic, "topic")
        _args.java_int(queue_id, "queue_id")
        _args.java_long(from_offset, "from_offset")
        _args.positive(batch, "batch")
        return self._iter_queue(topic, queue_id, from_offset, batch)

    def _iter_queue(self, topic: str, queue_id: int, from_offset: int, batch: int) -> Iterator[ConsumeQueueEntry]:
        offset = from_offset
        while True:
            entries = self._cq_entries(topic, queue_id, offset, batch)
            if not entries:
                return
            for e in entries:
                yield ConsumeQueueEntry(*e)
            offset = entries[-1][0] + 1

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"max_offset={self.max_offset}"
        return f"MessageStore({os.fspath(self.path)!r}, {state})"
