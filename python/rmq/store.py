"""The message store: configuration and the `MessageStore` class."""

from __future__ import annotations

import dataclasses
import os
import weakref
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from rmq import _args, _native
from rmq._native import ArgumentTypeError

if TYPE_CHECKING:
    from rmq.topics import TopicConfig, TopicConfigManager

#: Where delayed messages wait (RocketMQ's `TopicValidator.RMQ_SYS_SCHEDULE_TOPIC`), queue level - 1.
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"

FlushDiskType = Literal["ASYNC_FLUSH", "SYNC_FLUSH"]
BrokerRole = Literal["ASYNC_MASTER", "SYNC_MASTER", "SLAVE"]


class Setting(NamedTuple):
    """One store setting as the Rust core defines it (the one definition: `config::SETTINGS`)."""

    name: str
    #: RocketMQ's name (`MessageStoreConfig` / `BrokerConfig`, as in `broker.conf`).
    java_name: str
    #: "int", "bool", "str", "str?" (a str or None), or "choice:A|B|..." (one of those names).
    kind: str
    default: Any
    doc: str


#: Every setting, in the order of `StoreConfig`'s fields.
SETTINGS: dict[str, Setting] = {s[0]: Setting(*s) for s in _native.config_settings()}


def _default(name: str) -> Any:
    return SETTINGS[name].default


@dataclasses.dataclass(frozen=True)
class StoreConfig:
    """Store settings: RocketMQ's `MessageStoreConfig` / `BrokerConfig` names in snake case, same defaults.

    A view of the Rust core's one table of settings (`rmq.store.SETTINGS` lists each with its RocketMQ name and
    meaning; the fields, their order and defaults come from there, and a test pins this class to it). Sizes are
    in bytes.
    """

    mapped_file_size_commit_log: int = _default("mapped_file_size_commit_log")
    max_message_size: int = _default("max_message_size")
    enabled_append_prop_crc: bool = _default("enabled_append_prop_crc")
    force_verify_prop_crc: bool = _default("force_verify_prop_crc")
    auto_message_version_on_topic_len: bool = _default("auto_message_version_on_topic_len")
    check_crc_on_recover: bool = _default("check_crc_on_recover")
    flush_disk_type: FlushDiskType = _default("flush_disk_type")
    store_host: str = _default("store_host")
    broker_cluster_name: str | None = _default("broker_cluster_name")
    transaction_time_out: int = _default("transaction_time_out")
    transaction_check_max: int = _default("transaction_check_max")
    transaction_check_interval: int = _default("transaction_check_interval")
    reject_transaction_message: bool = _default("reject_transaction_message")
    mapped_file_size_consume_queue: int = _default("mapped_file_size_consume_queue")
    max_hash_slot_num: int = _default("max_hash_slot_num")
    max_index_num: int = _default("max_index_num")
    max_msgs_num_batch: int = _default("max_msgs_num_batch")
    message_index_enable: bool = _default("message_index_enable")
    message_index_safe: bool = _default("message_index_safe")
    message_delay_level: str = _default("message_delay_level")
    max_transfer_bytes_on_message_in_memory: int = _default("max_transfer_bytes_on_message_in_memory")
    max_transfer_count_on_message_in_memory: int = _default("max_transfer_count_on_message_in_memory")
    max_transfer_bytes_on_message_in_disk: int = _default("max_transfer_bytes_on_message_in_disk")
    max_transfer_count_on_message_in_disk: int = _default("max_transfer_count_on_message_in_disk")
    access_message_in_memory_max_ratio: int = _default("access_message_in_memory_max_ratio")
    max_filter_message_size: int = _default("max_filter_message_size")
    travel_cq_file_num_when_get_message: int = _default("travel_cq_file_num_when_get_message")
    broker_role: BrokerRole = _default("broker_role")
    offset_check_in_slave: bool = _default("offset_check_in_slave")
    flush_interval_commit_log: int = _default("flush_interval_commit_log")
    flush_commit_log_least_pages: int = _default("flush_commit_log_least_pages")
    flush_commit_log_thorough_interval: int = _default("flush_commit_log_thorough_interval")
    flush_commit_log_timed: bool = _default("flush_commit_log_timed")
    wake_flush_when_put_message: bool = _default("wake_flush_when_put_message")
    flush_interval_consume_queue: int = _default("flush_interval_consume_queue")
    flush_consume_queue_least_pages: int = _default("flush_consume_queue_least_pages")
    flush_consume_queue_thorough_interval: int = _default("flush_consume_queue_thorough_interval")
    sync_flush_timeout: int = _default("sync_flush_timeout")
    transient_store_pool_enable: bool = _default("transient_store_pool_enable")
    transient_store_pool_size: int = _default("transient_store_pool_size")
    commit_interval_commit_log: int = _default("commit_interval_commit_log")
    commit_commit_log_least_pages: int = _default("commit_commit_log_least_pages")
    commit_commit_log_thorough_interval: int = _default("commit_commit_log_thorough_interval")
    wake_commit_when_put_message: bool = _default("wake_commit_when_put_message")
    flush_delay_offset_interval: int = _default("flush_delay_offset_interval")
    delay_offset_update_version_step: int = _default("delay_offset_update_version_step")
    file_reserved_time: int = _default("file_reserved_time")
    delete_when: str = _default("delete_when")
    disk_max_used_space_ratio: int = _default("disk_max_used_space_ratio")
    disk_space_warning_level_ratio: int = _default("disk_space_warning_level_ratio")
    disk_space_clean_forcibly_ratio: int = _default("disk_space_clean_forcibly_ratio")
    clean_file_forcibly_enable: bool = _default("clean_file_forcibly_enable")
    delete_commit_log_files_interval: int = _default("delete_commit_log_files_interval")
    delete_consume_queue_files_interval: int = _default("delete_consume_queue_files_interval")
    destroy_mapped_file_interval_forcibly: int = _default("destroy_mapped_file_interval_forcibly")
    delete_file_batch_max: int = _default("delete_file_batch_max")
    clean_resource_interval: int = _default("clean_resource_interval")
    redelete_hanged_file_interval: int = _default("redelete_hanged_file_interval")

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
        # Index sizes given by the caller need not be told by the files (a store another writer just gave an
        # index file of its own sizes, not yet full, tells nothing: the Spark writer's tasks open so).
        given = "max_hash_slot_num" in overrides and "max_index_num" in overrides
        sizes: dict[str, Any] = dict(_native.sizes_from_files(os.fspath(path), index=not given))
        if "max_hash_slot_num" in overrides or "max_index_num" in overrides:
            sizes.pop("max_hash_slot_num", None)
            sizes.pop("max_index_num", None)
        return cls(**{**sizes, **overrides})

    def __post_init__(self) -> None:
        # Checked when made, as opening checks it: a wrong type is `ArgumentTypeError`, a bad value
        # `InvalidConfigError`, both naming the setting (they surfaced only at the open).
        _native.check_config(self.to_native())

    def to_native(self) -> dict[str, Any]:
        """The settings as the extension module takes them."""
        return dataclasses.asdict(self)

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> StoreConfig:
        """Builds a config from RocketMQ-style `camelCase` properties (as in `broker.conf`), read as the broker
        reads them (numbers trimmed, `true` in any case, text as is).

        Keys that rmq does not use are ignored; `brokerIP1` and `listenPort` form `store_host`. A value that does
        not parse as its setting's type raises `InvalidConfigError`.
        """
        if not isinstance(props, Mapping):
            raise ArgumentTypeError(f"props must be a Mapping[str, str], got {type(props).__name__}")
        for k, v in props.items():
            _args.text(k, "property name")
            _args.text(v, f"property {k}")
        return cls(**_native.config_from_properties(dict(props)))


StoreConfig.__doc__ = (
    (StoreConfig.__doc__ or "")
    + "\n    Settings:\n\n"
    + "\n".join(
        f"    {s.name} (`{s.java_name}`, default {s.default!r}): {' '.join(s.doc.split())}" for s in SETTINGS.values()
    )
)


class ConsumeQueueEntry(NamedTuple):
    """One consume-queue entry: where the message at `queue_offset` lies in the commitlog."""

    queue_offset: int
    commitlog_offset: int
    size: int
    tags_code: int


class ServiceStats(NamedTuple):
    """What one of the store's background services has done (`MessageStore.service_stats()`)."""

    #: "reput", "warm", "flush", "flush_cq", "group_commit", "commit", "clean", "schedule" (those that run).
    name: str
    #: Whether its thread is alive.
    running: bool
    #: Rounds of work done.
    rounds: int
    #: Units of work: records dispatched (reput), bytes flushed (flush, flush_cq, group_commit), bytes warmed
    #: (warm), delayed messages delivered (schedule).
    work: int
    #: Rounds that failed (the service retries on its schedule).
    errors: int
    #: The last failure's message.
    last_error: str | None


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
    starts the store's background services (native threads, no GIL: reput dispatches later puts, see
    `service_stats()`). `start_services=False` (or its older name `start_reput=False`) starts none: dispatch
    then happens on `dispatch_all()` / `wait_dispatched()` and flushing on `flush()` / `close()`. Use it as a
    context manager, or call `close()`. Every call that touches files releases the GIL.

    With `read_only=True` opening writes nothing at all (no lock, no abort file, no checkpoint, no repair, no
    file created, deleted or resized): the files are mapped copy-on-write, and the end of the log and any
    consume queue or index that is missing, stale or damaged are worked out in memory. Writing calls raise
    `ReadOnlyError`. It works on a read-only mount and beside a live broker; `refresh()` takes in what the
    broker wrote since.
    """

    config: StoreConfig

    def __new__(
        cls,
        path: str | os.PathLike[str],
        config: StoreConfig | None = None,
        *,
        start_services: bool = True,
        recovery: Recovery = "strict",
        read_only: bool = False,
        start_reput: bool = True,
    ) -> MessageStore:
        if config is not None and not isinstance(config, StoreConfig):
            raise ArgumentTypeError(f"config must be an rmq.StoreConfig or None, got {type(config).__name__}")
        _args.boolean(start_services, "start_services")
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
        start_services: bool = True,
        recovery: Recovery = "strict",
        read_only: bool = False,
        start_reput: bool = True,
    ) -> None:
        # A read-only store takes no puts: everything is dispatched by the open, and `refresh()` dispatches
        # what another process added.
        if not read_only:
            self._topics  # noqa: B018 - loads config/topics.json, whose queue counts puts are checked against
        if start_services and start_reput and not read_only:
            self.start_services()

    def service_stats(self) -> list[ServiceStats]:
        """The background services started (in start order) and what each has done."""
        return [ServiceStats(*s) for s in self._service_stats()]

    @property
    def reput(self) -> ServiceStats:
        """The reput (dispatch) service's counters; `running` is False when services were not started or have
        stopped (`work` counts the records it dispatched)."""
        for s in self.service_stats():
            if s.name == "reput":
                return s
        return ServiceStats("reput", False, 0, 0, 0, None)

    @property
    def topics_path(self) -> str:
        """`<root>/config/topics.json`, where RocketMQ's broker keeps topic configurations (spec §9.4)."""
        return os.path.join(self.path, "config", "topics.json")

    @property
    def _topics(self) -> TopicConfigManager:
        mgr: TopicConfigManager | None = self.__dict__.get("_topic_manager")
        if mgr is None:
            from rmq.topics import TopicConfigManager

            mgr = self.__dict__.setdefault("_topic_manager", TopicConfigManager(self.topics_path))
            if not self.read_only:
                # `put` and `put_batch` (native) refuse a queue id past a configured topic's queues. Through a
                # weak reference: a bound method here would make the store and its manager a cycle, and a store
                # dropped without `close()` would then stay open (its lock held) until the cyclic GC ran.
                store = weakref.ref(self)

                def on_change(limits: dict[str, int]) -> None:
                    s = store()
                    if s is not None:
                        s._set_queue_limits(limits)

                mgr.on_change = on_change
            mgr.load()
        return mgr

    def create_topic(
        self,
        name: str,
        queues: int = 8,
        read_queues: int | None = None,
        write_queues: int | None = None,
        perm: int = 6,
        order: bool = False,
        *,
        attributes: Mapping[str, str] | None = None,
    ) -> TopicConfig:
        """Creates or updates a topic's configuration in `config/topics.json` (the broker's
        `updateAndCreateTopic`): `read_queues` and `write_queues` default to `queues`; `perm` is RocketMQ's
        `PermName` bits (4 read, 2 write, 1 inherit). Bad arguments raise `InvalidTopicError` (names breaking
        `TopicValidator`, system topics), `InvalidArgumentError` or `ArgumentTypeError`, and nothing is written.
        See `rmq.topics` for what a configuration changes (puts past the queue count are refused; push
        consumers divide `read_queues` queues)."""
        from rmq.topics import check_topic_config

        config = check_topic_config(name, queues, read_queues, write_queues, perm, order, attributes)
        self._check_writable()
        return self._topics.put(config)

    def delete_topic(self, name: str) -> bool:
        """Removes a topic's configuration; returns False when it had none (and writes nothing). Its messages,
        consume queues and consumer offsets stay: the topic is then unconfigured again (any queue id accepted,
        as before). A name `create_topic` would refuse (`TopicValidator`'s rules, a system topic, as the
        broker's `deleteTopic`) raises `InvalidTopicError` and nothing is written."""
        _native.check_topic_config_name(_args.text(name, "name"))
        self._check_writable()
        return self._topics.delete(name)

    def topic_config(self, name: str) -> TopicConfig | None:
        """The topic's configuration from `config/topics.json`, None when it has none."""
        return self._topics.get(name)

    def topic_configs(self) -> dict[str, TopicConfig]:
        """Every configured topic (`config/topics.json`), in the file's order. (`topics()` lists the topics that
        have consume queues, configured or not.)"""
        return self._topics.topics()

    def _check_writable(self) -> None:
        if self.closed:
            raise _native.StoreClosedError("the store is closed")
        if self.read_only:
            raise _native.ReadOnlyError("the store is open read-only")

    @property
    def consumer_offset_path(self) -> str:
        """`<root>/config/consumerOffset.json`, where RocketMQ's broker keeps consumer offsets (spec §9.1)."""
        return os.path.join(self.path, "config", "consumerOffset.json")

    def close(self) -> None:
        """Stops the background services, dispatches what is left, flushes everything and closes. Idempotent."""
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
