"""Transactional messages: RocketMQ's `TransactionMQProducer` on an rmq store.

`TransactionProducer.send_in_transaction` stores a half message (`RMQ_SYS_TRANS_HALF_TOPIC`, invisible to
consumers of the real topic), runs the local transaction and ends it: COMMIT_MESSAGE writes the message to its
real topic, ROLLBACK_MESSAGE drops it, UNKNOW leaves it to the check. Each end writes an op record to
`RMQ_SYS_TRANS_OP_HALF_TOPIC`, as a RocketMQ 5.3.1 broker does, so RocketMQ reading the store agrees on what is done.

The check (RocketMQ's `TransactionalMessageCheckService`) runs on one Python thread per store, every
`transaction_check_interval` ms: the Rust core walks the half queue (with no Python lock held) and re-puts each
half older than `transaction_time_out` as Java does; the thread then calls the registered producer group's
`checker` for each (with no store lock held) and applies its answer. A half checked `transaction_check_max` times
is moved to `TRANS_CHECK_MAX_TIME_TOPIC`. The check's progress is the group `CID_RMQ_SYS_TRANS`'s offsets in
`consumerOffset.json`, committed to the application's one `ConsumerOffsetManager` (the one its consumers use),
so there is a single writer of that file.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rmq import _args, _native
from rmq._native import ArgumentTypeError, PutResult, StoreStateError, TransactionError
from rmq.offsets import ConsumerOffsetManager
from rmq.store import MessageStore

log = logging.getLogger(__name__)

#: Where half messages wait (`TopicValidator.RMQ_SYS_TRANS_HALF_TOPIC`).
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
#: Op records: one per ended half (`TopicValidator.RMQ_SYS_TRANS_OP_HALF_TOPIC`).
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
#: Halves discarded after `transaction_check_max` checks.
CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
#: The group whose offsets record the check's progress (`MixAll.CID_SYS_RMQ_TRANS`).
CHECK_GROUP = "CID_RMQ_SYS_TRANS"


class LocalTransactionState(enum.Enum):
    """The outcome of a local transaction or of a check (Java's `LocalTransactionState`, same names)."""

    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"


@dataclass(frozen=True)
class TransactionSendResult:
    """What `send_in_transaction` did: where the half went and how the transaction ended."""

    #: The local transaction's answer (UNKNOW when it raised or returned nothing).
    local_transaction_state: LocalTransactionState
    #: The half message's UNIQ_KEY: the message id consumers see once committed (`msgId` in Java).
    transaction_id: str
    #: The half's put: `wrote_offset` is its commitlog offset, `queue_offset` its offset in the half queue.
    half: PutResult
    #: The committed message's put (None unless committed).
    committed: PutResult | None
    #: The op record's put (None when UNKNOW: nothing was ended).
    op: PutResult | None

    @property
    def msg_id(self) -> str:
        return self.transaction_id

    @property
    def offset_msg_id(self) -> str:
        """offsetMsgId of the half message (store host and commitlog offset)."""
        return self.half.msg_id


@dataclass(frozen=True)
class CheckedMessage:
    """A half message the check asks about (what Java's `checkLocalTransaction(MessageExt)` receives). Its
    offsets are the re-put half's, which the answer ends."""

    transaction_id: str
    topic: str
    queue_id: int
    body: bytes
    properties: Mapping[str, str]
    producer_group: str
    commit_log_offset: int
    queue_offset: int
    offset_msg_id: str
    born_timestamp: int
    #: TRANSACTION_CHECK_TIMES: 1 on the first check.
    check_times: int


LocalTransaction = Callable[[bytes, Any], "LocalTransactionState | None"]
Checker = Callable[[CheckedMessage], "LocalTransactionState | None"]


def _state(value: object) -> LocalTransactionState:
    if value is None:
        return LocalTransactionState.UNKNOW
    if isinstance(value, LocalTransactionState):
        return value
    if isinstance(value, str):
        try:
            return LocalTransactionState[value]
        except KeyError:
            pass
    raise ArgumentTypeError(f"a transaction state must be an rmq.LocalTransactionState, got {value!r}")


class TransactionProducer:
    """A transactional producer of one producer group on `store` (Java's `TransactionMQProducer`).

    `checker(msg) -> LocalTransactionState` answers the broker's check about a half message whose transaction
    was not ended within `transaction_time_out` ms (Java's `checkLocalTransaction`); it runs on the store's check
    thread. A producer with a checker needs `offsets`, the application's `ConsumerOffsetManager` of this store's
    `consumerOffset.json` (`store.consumer_offset_path`), where the check's progress is kept; every producer on
    one store must pass the same manager. `close()` (or the `with` block) unregisters the checker.
    """

    def __init__(
        self,
        store: MessageStore,
        group: str,
        *,
        checker: Checker | None = None,
        offsets: ConsumerOffsetManager | None = None,
        born_host: str = "127.0.0.1:0",
    ) -> None:
        if not isinstance(store, MessageStore):
            raise ArgumentTypeError(f"store must be an rmq.MessageStore, got {type(store).__name__}")
        self.store = store
        self.group = _args.group(group, "producer group")
        if checker is not None and not callable(checker):
            raise ArgumentTypeError(f"checker must be callable, got {type(checker).__name__}")
        if offsets is not None and not isinstance(offsets, ConsumerOffsetManager):
            raise ArgumentTypeError(f"offsets must be a ConsumerOffsetManager, got {type(offsets).__name__}")
        if checker is not None and offsets is None:
            raise ArgumentTypeError(
                "a producer with a checker needs offsets=ConsumerOffsetManager(store.consumer_offset_path): "
                "the check keeps its progress there (group CID_RMQ_SYS_TRANS)"
            )
        self.checker = checker
        self.born_host = _args.text(born_host, "born_host")
        self._service: CheckService | None = None
        self._closed = False
        if checker is not None and offsets is not None:
            self._service = CheckService.register(store, offsets, self.group, checker)

    # -- sending -----------------------------------------------------------------------------------------

    def send_half(
        self,
        topic: str,
        body: bytes,
        *,
        queue_id: int = 0,
        tags: str | None = None,
        keys: str | list[str] | None = None,
        properties: Mapping[str, str] | None = None,
        check_immunity_seconds: int | None = None,
    ) -> PutResult:
        """Stores a half message for `topic`/`queue_id` (`TRAN_MSG=true`, `PGROUP=<group>`); end it with
        `end_transaction`. `check_immunity_seconds` sets CHECK_IMMUNITY_TIME_IN_SECONDS (the first check waits
        at least that long). A `DELAY` property is dropped, as RocketMQ's producer drops it."""
        self._check_open()
        props: dict[str, str] = {}
        if properties is not None:
            if not isinstance(properties, Mapping):
                raise ArgumentTypeError(f"properties must be a Mapping[str, str], got {type(properties).__name__}")
            props.update(properties)
        # DefaultMQProducerImpl.sendMessageInTransaction: a transactional message ignores its delay level.
        props.pop("DELAY", None)
        if check_immunity_seconds is not None:
            props["CHECK_IMMUNITY_TIME_IN_SECONDS"] = str(_args.positive(check_immunity_seconds, "check_immunity"))
        props["TRAN_MSG"] = "true"
        props["PGROUP"] = self.group
        return self.store.put(
            topic,
            body,
            queue_id=queue_id,
            tags=tags,
            keys=keys,
            properties=props,
            transaction_type=_native.TransactionType.PREPARED,
            born_host=self.born_host,
        )

    def end_transaction(
        self, half: PutResult, state: LocalTransactionState, *, from_transaction_check: bool = False
    ) -> tuple[PutResult | None, PutResult | None]:
        """Ends the transaction of `half` (a `send_half` result): returns `(committed, op)`. UNKNOW ends nothing
        and returns `(None, None)`. Raises `rmq.TransactionError` (nothing written) when the half is not this
        group's, or was already ended."""
        if not isinstance(half, PutResult):
            raise ArgumentTypeError(f"half must be the PutResult of send_half, got {type(half).__name__}")
        return self.end(half.wrote_offset, half.queue_offset, state, from_transaction_check=from_transaction_check)

    def end(
        self,
        commit_log_offset: int,
        queue_offset: int,
        state: LocalTransactionState,
        *,
        from_transaction_check: bool = False,
    ) -> tuple[PutResult | None, PutResult | None]:
        """`end_transaction` by the half's commitlog offset and half-queue offset (`tranStateTableOffset`)."""
        self._check_open()
        state = _state(state)
        if state is LocalTransactionState.UNKNOW:
            return None, None
        return _native.end_transaction(
            self.store,
            self.group,
            commit_log_offset,
            queue_offset,
            state is LocalTransactionState.COMMIT_MESSAGE,
            from_transaction_check=from_transaction_check,
        )

    def send_in_transaction(
        self,
        topic: str,
        body: bytes,
        *,
        local_transaction: LocalTransaction,
        arg: Any = None,
        queue_id: int = 0,
        tags: str | None = None,
        keys: str | list[str] | None = None,
        properties: Mapping[str, str] | None = None,
        check_immunity_seconds: int | None = None,
    ) -> TransactionSendResult:
        """Java's `sendMessageInTransaction`: stores the half, runs `local_transaction(body, arg)` and ends the
        transaction with its answer. An exception from it (or None) leaves the state UNKNOW (the check decides
        later) and is logged, as Java does."""
        self._check_open()
        if not callable(local_transaction):
            raise ArgumentTypeError(f"local_transaction must be callable, got {type(local_transaction).__name__}")
        half = self.send_half(
            topic,
            body,
            queue_id=queue_id,
            tags=tags,
            keys=keys,
            properties=properties,
            check_immunity_seconds=check_immunity_seconds,
        )
        try:
            state = _state(local_transaction(body, arg))
        except Exception:
            log.exception("local transaction of %s failed; its state stays UNKNOW", half.uniq_key)
            state = LocalTransactionState.UNKNOW
        committed, op = self.end_transaction(half, state)
        return TransactionSendResult(state, half.uniq_key, half, committed, op)

    # -- the check ---------------------------------------------------------------------------------------

    def check_now(self) -> dict[str, Any]:
        """Runs one check round at once (on the calling thread) and returns what it did (`checks`: the number
        of halves asked about, `discarded`, `done`)."""
        self._check_open()
        if self._service is None:
            raise TransactionError("this producer has no checker")
        return self._service.round()

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        # Java's makeSureStateOK: a producer that was shut down sends and ends nothing.
        if self._closed:
            raise StoreStateError(f"the transaction producer of group {self.group} is closed")

    def close(self) -> None:
        """Unregisters the checker (the store's check thread stops with the last one); the producer then sends,
        ends and checks nothing (`rmq.StoreStateError`), as Java's does after `shutdown()`. Idempotent."""
        self._closed = True
        service, self._service = self._service, None
        if service is not None:
            service.unregister(self.group)

    def __enter__(self) -> TransactionProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CheckService:
    """The check thread of one store (RocketMQ's `TransactionalMessageCheckService`), shared by its producers."""

    _lock = threading.Lock()
    _services: dict[int, CheckService] = {}

    def __init__(self, store: MessageStore, offsets: ConsumerOffsetManager) -> None:
        self.store = store
        self.offsets = offsets
        self.checkers: dict[str, Checker] = {}
        self._round_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="TransactionalMessageCheckService", daemon=True)
        #: Rounds run and rounds that failed (the thread keeps running).
        self.rounds = 0
        self.failures = 0
        self.last_error: BaseException | None = None

    @classmethod
    def register(
        cls, store: MessageStore, offsets: ConsumerOffsetManager, group: str, checker: Checker
    ) -> CheckService:
        with cls._lock:
            service = cls._services.get(id(store))
            if service is not None and service.store is store:
                if service.offsets is not offsets:
                    raise ArgumentTypeError(
                        "every TransactionProducer of one store must share one ConsumerOffsetManager"
                    )
            else:
                service = cls(store, offsets)
                cls._services[id(store)] = service
                service._thread.start()
            service.checkers[group] = checker
            return service

    def unregister(self, group: str) -> None:
        with self._lock:
            self.checkers.pop(group, None)
            if self.checkers:
                return
            if self._services.get(id(self.store)) is self:
                del self._services[id(self.store)]
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def _interval(self) -> float:
        return max(int(self.store.config.transaction_check_interval), 1) / 1000

    def _run(self) -> None:
        while not self._stop.wait(self._interval()):
            if self.store.closed:
                return
            try:
                self.round()
            except Exception as e:  # the thread must outlive any failure: count it, keep it, retry
                self.failures += 1
                self.last_error = e
                log.exception("transaction check round failed")

    def round(self) -> dict[str, Any]:
        """One check: the Rust round (re-puts due halves, moves exhausted ones), then each checker's answers,
        then the new offsets."""
        with self._round_lock:
            o = self.offsets
            half = o.query_offset(CHECK_GROUP, HALF_TOPIC, 0)
            op = o.query_offset(CHECK_GROUP, OP_TOPIC, 0)
            r = _native.transaction_check(self.store, None if half < 0 else half, None if op < 0 else op)
            if r["half_offset"] != half:
                o.commit_offset(CHECK_GROUP, HALF_TOPIC, 0, r["half_offset"], journal=True)
            if r["op_offset"] != op:
                o.commit_offset(CHECK_GROUP, OP_TOPIC, 0, r["op_offset"], journal=True)
            for c in r["checks"]:
                self._answer(c)
            self.rounds += 1
            return {"checks": len(r["checks"]), "discarded": len(r["discarded"]), "done": r["done"]}

    def _answer(self, c: dict[str, Any]) -> None:
        checker = self.checkers.get(c["producer_group"])
        if checker is None:
            return  # no producer of that group here: as a broker with no channel to it, ask again later
        msg = CheckedMessage(**c)
        try:
            state = _state(checker(msg))
        except Exception:
            log.exception("checker of %s failed on %s; state UNKNOW", msg.producer_group, msg.transaction_id)
            return
        if state is LocalTransactionState.UNKNOW:
            return
        try:
            _native.end_transaction(
                self.store,
                msg.producer_group,
                msg.commit_log_offset,
                msg.queue_offset,
                state is LocalTransactionState.COMMIT_MESSAGE,
                from_transaction_check=True,
            )
        except TransactionError:
            log.warning("the answer to the check of %s was refused", msg.transaction_id, exc_info=True)
