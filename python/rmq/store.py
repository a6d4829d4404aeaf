"""The message store: configuration and the `MessageStore` class."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any, Literal

from rmq import _native

FlushDiskType = Literal["ASYNC_FLUSH", "SYNC_FLUSH"]


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

    def to_native(self) -> dict[str, Any]:
        """The settings as the extension module takes them."""
        return dataclasses.asdict(self)

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> StoreConfig:
        """Builds a config from RocketMQ-style `camelCase` properties (as in `broker.conf`).

        Keys that rmq does not use are ignored; `brokerIP1` and `listenPort` form `store_host`.
        """
        fields = {f.name: f for f in dataclasses.fields(cls)}
        camel = {_camel(name): name for name in fields}
        kwargs: dict[str, Any] = {}
        for key, text in props.items():
            name = camel.get(key)
            if name is None or name == "store_host":
                continue
            kwargs[name] = _parse_like(getattr(cls, name), text)
        if "brokerIP1" in props or "listenPort" in props:
            host, _, port = cls.store_host.rpartition(":")
            kwargs["store_host"] = f"{props.get('brokerIP1', host)}:{props.get('listenPort', port)}"
        return cls(**kwargs)


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    special = {"crc": "CRC", "len": "Len"}
    return first + "".join(special.get(p, p.capitalize()) for p in rest)


def _parse_like(default: object, text: str) -> object:
    if isinstance(default, bool):
        return text.strip().lower() == "true"
    if isinstance(default, int):
        return int(text)
    return text


class MessageStore(_native.MessageStore):
    """An open store directory: RocketMQ's commitlog, written and read byte-compatibly.

    Opening takes an exclusive lock on the directory (a second open raises `StoreLockedError`), validates the
    tail of the commitlog, and rebuilds each queue's next offset. Use it as a context manager, or call
    `close()`. Every call that touches files releases the GIL.
    """

    config: StoreConfig

    def __new__(cls, path: str | os.PathLike[str], config: StoreConfig | None = None) -> MessageStore:
        cfg = config if config is not None else StoreConfig()
        return super().__new__(cls, os.fspath(path), cfg.to_native())

    def __init__(self, path: str | os.PathLike[str], config: StoreConfig | None = None) -> None:
        self.config = config if config is not None else StoreConfig()

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"max_offset={self.max_offset}"
        return f"MessageStore({os.fspath(self.path)!r}, {state})"
