"""rmq: Apache RocketMQ's message store as a Python package with a Rust core.

Open a directory with `MessageStore`, `put` messages, `read` them back by commitlog offset or `scan` the log,
`get_message` them by queue. `PullConsumer` and `PushConsumer` consume on top, with offsets kept by
`ConsumerOffsetManager` in RocketMQ's `consumerOffset.json`. The files are byte-compatible with RocketMQ's own.
"""

from rmq._native import (
    BoundaryType,
    CorruptionError,
    DiskFullError,
    GetMessageResult,
    GetMessageStatus,
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
from rmq.consumer import PullConsumer, PullResult, PullStatus
from rmq.offsets import ConsumerOffsetManager
from rmq.push import ConsumeContext, ConsumeFromWhere, ConsumeStatus, PushConsumer
from rmq.rebalance import MessageQueue
from rmq.reput import ReputMessageService
from rmq.store import ConsumeQueueEntry, MessageStore, QueryMessageResult, StoreConfig

__all__ = [
    "BoundaryType",
    "ConsumeContext",
    "ConsumeFromWhere",
    "ConsumeQueueEntry",
    "ConsumeStatus",
    "ConsumerOffsetManager",
    "CorruptionError",
    "DiskFullError",
    "GetMessageResult",
    "GetMessageStatus",
    "InvalidConfigError",
    "InvalidHostError",
    "InvalidInputError",
    "InvalidMessageError",
    "InvalidOffsetError",
    "InvalidPropertyError",
    "InvalidTopicError",
    "Message",
    "MessageExt",
    "MessageQueue",
    "MessageStore",
    "MessageTooLargeError",
    "PropertiesTooLargeError",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
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
