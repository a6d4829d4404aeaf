"""The reput (dispatch) service: a thread that feeds new commitlog records into the consume queues and the index.

The work runs in Rust with the GIL released; this module owns only the thread, its wake-ups and the arrival
listeners used for long polling (RocketMQ's `ReputMessageService` and `MessageArrivingListener`).
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from rmq import _args, _native
from rmq._native import ArgumentTypeError, InvalidArgumentError

if TYPE_CHECKING:
    from rmq.store import MessageStore

log = logging.getLogger(__name__)

#: `arriving(topic, queue_id, next_offset)`: called on the dispatch thread after entries reach a queue;
#: `next_offset` is the queue's max offset (last queue offset + 1).
ArrivalListener = Callable[[str, int, int], None]


class ReputMessageService:
    """Dispatches records written to a store, in commitlog order, on one background thread.

    The thread sleeps until a put signals new data (no spinning), dispatches in batches of `batch_size`
    records, and after each batch tells every listener which queues received entries. `stop()` returns once
    the thread has finished its current batch. The thread holds only a weak reference to the store.
    """

    def __init__(self, store: MessageStore, *, batch_size: int = 4096, idle_wait: float = 1.0) -> None:
        if not isinstance(store, _native.MessageStore):
            raise ArgumentTypeError(f"store must be an rmq.MessageStore, got {type(store).__name__}")
        _args.positive(batch_size, "batch_size")
        if _args.seconds(idle_wait, "idle_wait") == 0:
            raise InvalidArgumentError("idle_wait must be positive")
        self._store = weakref.ref(store)
        self._batch_size = batch_size
        self._idle_wait = idle_wait
        self._listeners: list[ArrivalListener] = []
        self._lock = threading.Lock()
        # Held while a listener runs: `remove_listener` waits for a call in progress, and no call starts after
        # it returns (reentrant, so a listener may remove itself).
        self._calling = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Records dispatched by this thread.
        self.dispatched_records = 0
        #: Dispatch rounds run (a busy-looping thread would make this grow while idle).
        self.rounds = 0
        self.last_error: BaseException | None = None

    def add_listener(self, listener: ArrivalListener) -> None:
        """Calls `listener(topic, queue_id, next_offset)` after each batch that adds entries to a queue."""
        if not callable(listener):
            raise ArgumentTypeError(f"listener must be callable, got {type(listener).__name__}")
        with self._lock:
            self._listeners = [*self._listeners, listener]

    def remove_listener(self, listener: ArrivalListener) -> None:
        """Stops calling `listener`: once this returns, it is not called again (a call in progress on the reput
        thread is waited for, unless the listener removes itself from inside its call)."""
        with self._calling, self._lock:
            self._listeners = [x for x in self._listeners if x is not listener]

    @property
    def running(self) -> bool:
        """Whether the thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Starts the thread (once)."""
        if self._thread is not None:
            raise RuntimeError("the reput service was already started")
        store = self._store()
        name = f"rmq-reput-{store.path if store is not None else '?'}"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = 30.0) -> None:
        """Asks the thread to stop, wakes it, and waits for it: at most `timeout` seconds (None: no limit)."""
        if timeout is not None:
            timeout = _args.seconds(timeout)
        self._stop.set()
        store = self._store()
        if store is not None and not store.closed:
            store._wake_dispatcher()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            store = self._store()
            if store is None or store.closed:
                return
            try:
                listeners = self._listeners
                before = store.reput_offset
                records, after, arrivals = store._dispatch(self._batch_size, bool(listeners))
            except Exception as exc:  # an I/O error: keep it for inspection and retry, as RocketMQ does
                if store.closed:
                    return
                self.last_error = exc
                log.exception("dispatch failed; retrying in 1 s")
                del store
                self._stop.wait(1.0)
                continue
            self.rounds += 1
            self.dispatched_records += records
            for topic, queue_id, next_offset in arrivals:
                for listener in listeners:
                    with self._calling:
                        if not any(x is listener for x in self._listeners):
                            continue  # removed since this round began
                        try:
                            listener(topic, queue_id, next_offset)
                        except Exception:
                            log.exception("arrival listener %r failed", listener)
            if records == 0 and after == before:
                store._wait_new_data(self._idle_wait)
            del store
