"""rmq: Apache RocketMQ's message store as a Python package with a Rust core.

Open a directory with `MessageStore`, `put` messages, `read` them back by commitlog offset or `scan` the log.
The files are byte-compatible with RocketMQ's own store.
"""

from rmq._native import (
    BoundaryType,
    CorruptionError,
    InvalidConfigError,
    InvalidHostError,
    InvalidInputError,
    InvalidMessageError,
    InvalidOffsetError,
    InvalidPropertyError,
    InvalidTopicError,
    Message,
    MessageExt,
    MessageTooLargeError,
    PropertiesTooLargeError,
    PutMessageStatus,
    PutResult,
    RecordView,
    RmqError,
    Scanner,
    StoreClosedError,
    StoreIOError,
    StoreLockedError,
    StorePoisonedError,
    StoreStateError,
    TransactionType,
    __version__,
)
from rmq.reput import ReputMessageService
from rmq.store import ConsumeQueueEntry, MessageStore, QueryMessageResult, StoreConfig

__all__ = [
    "BoundaryType",
    "ConsumeQueueEntry",
    "CorruptionError",
    "InvalidConfigError",
    "InvalidHostError",
    "InvalidInputError",
    "InvalidMessageError",
    "InvalidOffsetError",
    "InvalidPropertyError",
    "InvalidTopicError",
    "Message",
    "MessageExt",
    "MessageStore",
    "MessageTooLargeError",
    "PropertiesTooLargeError",
    "PutMessageStatus",
    "PutResult",
    "QueryMessageResult",
    "RecordView",
    "ReputMessageService",
    "RmqError",
    "Scanner",
    "StoreClosedError",
    "StoreConfig",
    "StoreIOError",
    "StoreLockedError",
    "StorePoisonedError",
    "StoreStateError",
    "TransactionType",
    "__version__",
]
