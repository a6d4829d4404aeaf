"""Orderly consumption for push consumers (RocketMQ's `MessageListenerOrderly` and `ConsumeMessageOrderlyService`).

`PushConsumer(..., orderly=True)` calls its listener as `listener(msgs, ConsumeOrderlyContext) ->
ConsumeOrderlyStatus` with these guarantees:

- A queue is consumed by one thread at a time, in queue order: a queue's messages are taken in batches of up to
  `consume_message_batch_max_size` from the head of its process queue, and the next batch is taken only after the
  listener returned for the previous one. Different queues are consumed in parallel by the consume threads.
- `SUSPEND_CURRENT_QUEUE_A_MOMENT` (also a listener that raises or returns None) puts the batch back at the head of
  the queue with each message's `reconsume_times` one higher, and consumes it again after the context's
  `suspend_current_queue_time_millis` (−1: the consumer's, 1000 ms by default; clamped to 10..30000 ms as Java
  clamps it). Nothing behind it is consumed meanwhile.
- A message suspended when it already was reconsumed `max_reconsume_times` times (orderly default: Java's
  Integer.MAX_VALUE, so never) is sent to `%DLQ%<group>` (as the broker routes an orderly group's send-back) and
  consumption goes on; as Java's `checkReconsumeTimes`, if any message of the batch is still under the limit the
  whole batch is retried.
- With `auto_commit` (the default) each batch's offset is committed when it returns SUCCESS or is dead-lettered:
  the committed offset is always the next unconsumed message. With `auto_commit = False`, SUCCESS only marks the
  batch consumed; `COMMIT` commits everything consumed so far and `ROLLBACK` puts it all back to be consumed again.
- Rebalancing hands a queue over only when it is idle and its offset is committed: a member losing a queue marks it
  dropped (no new batch starts), and releases it when the batch in the listener (if any) has returned and its
  result has been committed (Java's consume lock, `tryLock` in `removeUnnecessaryMessageQueue`). The queue's
  new owner cannot lock it before that and starts at the committed offset. So within one process, per queue, the
  whole group's listener sees queue offsets strictly increasing, except that a batch suspended (or rolled back)
  is seen again, and nothing after it comes before its redelivery; a SUCCESS'd and committed message is never
  delivered again. After a crash (kill -9) the new owner starts at the committed offset: the batch that was in
  the listener is delivered again.

The ownership of queues is a `QueueLocks` table per (store, group), the broker's `RebalanceLockManager` for one
process: `try_lock(mq, client_id)`, `unlock(mq, client_id)`. Members of an orderly group take a queue the
rebalance gives them only once they hold its lock; until then it is pending and retried by the pull loop.
"""

from __future__ import annotations

import collections
import enum
import heapq
import itertools
import logging
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rmq import _args
from rmq._native import MessageExt
from rmq.group import LEASE_RECHECK
from rmq.rebalance import MessageQueue

if TYPE_CHECKING:
    from rmq.push import ProcessQueue, PushConsumer
    from rmq.store import MessageStore

log = logging.getLogger(__name__)

#: The consumer whose listener the current thread is running (`.consumer`; None outside a listener call): its
#: `shutdown()` from inside the listener must not wait for the listener's own batch.
IN_LISTENER = threading.local()

#: `DefaultMQPushConsumer.suspendCurrentQueueTimeMillis`.
DEFAULT_SUSPEND_MILLIS = 1000
#: `MAX_TIME_CONSUME_CONTINUOUSLY`: a queue's consume loop yields its thread after this many seconds.
MAX_TIME_CONSUME_CONTINUOUSLY = 60.0
#: The orderly service's `maxReconsumeTimes` when the consumer's is −1 (Integer.MAX_VALUE: retry forever).
ORDERLY_MAX_RECONSUME_TIMES = _args.JAVA_INT_MAX


class ConsumeOrderlyStatus(enum.Enum):
    """What an orderly listener returns (`ConsumeOrderlyStatus`)."""

    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"
    #: Only meaningful with `auto_commit = False` (with it, treated as SUCCESS, as Java does).
    COMMIT = "COMMIT"
    #: Only meaningful with `auto_commit = False` (with it, treated as SUCCESS, as Java does).
    ROLLBACK = "ROLLBACK"


@dataclass
class ConsumeOrderlyContext:
    """Passed to an orderly listener with each batch (`ConsumeOrderlyContext`); the listener may change
    `auto_commit` and `suspend_current_queue_time_millis` for this batch's result."""

    queue: MessageQueue
    consumer_id: str
    auto_commit: bool = True
    #: Milliseconds before a suspended batch is consumed again; −1: the consumer's setting.
    suspend_current_queue_time_millis: int = -1


MessageListenerOrderly = Callable[[list[MessageExt], ConsumeOrderlyContext], ConsumeOrderlyStatus]


class QueueLocks:
    """Which member of a group consumes each queue orderly (the broker's `RebalanceLockManager`, in one process).

    A lock has no expiry: a member holds its queues until it releases them (its process ending ends them all).
    """

    _tables: weakref.WeakKeyDictionary[MessageStore, dict[str, QueueLocks]] = weakref.WeakKeyDictionary()
    _tables_lock = threading.Lock()

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owners: dict[MessageQueue, str] = {}
        self.on_unlock: list[Callable[[], None]] = []

    @classmethod
    def of(cls, store: MessageStore, group: str) -> QueueLocks:
        with cls._tables_lock:
            tables = cls._tables.setdefault(store, {})
            t = tables.get(group)
            if t is None:
                t = tables[group] = QueueLocks()
            return t

    def try_lock(self, mq: MessageQueue, client_id: str) -> bool:
        """Locks `mq` for `client_id` if it is free. A member still releasing the queue (a dropped batch in its
        listener) holds it too, so it cannot take the queue back before its offset is committed."""
        with self._lock:
            if mq in self._owners:
                return False
            self._owners[mq] = client_id
            return True

    def unlock(self, mq: MessageQueue, client_id: str) -> None:
        """Frees `mq` if `client_id` holds it, and wakes the members waiting for a queue."""
        with self._lock:
            if self._owners.get(mq) != client_id:
                return
            del self._owners[mq]
            wake = list(self.on_unlock)
        for f in wake:
            f()

    def owner(self, mq: MessageQueue) -> str | None:
        with self._lock:
            return self._owners.get(mq)


class OrderlyProcessQueue:
    """The orderly half of a `ProcessQueue`: pulled messages waiting in queue order (`msgTreeMap`), the batch
    taken and not yet committed (`consumingMsgOrderlyTreeMap`), and the consume lock held while the listener runs
    and its result is applied. Every field is guarded by the owning `ProcessQueue.lock`."""

    def __init__(self) -> None:
        self.waiting: collections.deque[MessageExt] = collections.deque()
        self.consuming: list[MessageExt] = []
        self.consume_lock = threading.Lock()
        self.scheduled = False  # a consume request for this queue is queued or running (Java's `consuming`)
        self.released = False  # the queue was handed back: nothing may commit for it any more

    def count(self) -> int:
        return len(self.waiting) + len(self.consuming)

    def first_unconsumed(self) -> int | None:
        if self.consuming:
            return self.consuming[0].queue_offset
        if self.waiting:
            return self.waiting[0].queue_offset
        return None

    def take(self, n: int) -> list[MessageExt]:
        """`takeMessages`: up to `n` messages from the head, moved to `consuming`."""
        out = [self.waiting.popleft() for _ in range(min(n, len(self.waiting)))]
        self.consuming.extend(out)
        if not out:
            self.scheduled = False
        return out

    def commit(self) -> int:
        """`commit`: forgets the consumed batch(es); the offset after the last one, or −1 if none."""
        if not self.consuming:
            return -1
        offset = self.consuming[-1].queue_offset + 1
        self.consuming.clear()
        return offset

    def consume_again(self, msgs: Sequence[MessageExt]) -> None:
        """`makeMessageToConsumeAgain`: `msgs` (taken last, so ahead of everything waiting) go back to the head."""
        offsets = {m.queue_offset for m in msgs}
        self.consuming = [m for m in self.consuming if m.queue_offset not in offsets]
        self.waiting.extendleft(reversed(sorted(msgs, key=lambda m: m.queue_offset)))

    def rollback(self) -> None:
        """`rollback`: everything taken and not committed goes back to the head."""
        self.waiting.extendleft(reversed(self.consuming))
        self.consuming = []


class _Timer:
    """One thread running callbacks at their due time (the service's `scheduledExecutorService`)."""

    def __init__(self, name: str) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def schedule(self, delay: float, f: Callable[[], None]) -> None:
        with self._cond:
            if self._stopped:
                return
            heapq.heappush(self._heap, (time.monotonic() + delay, next(self._seq), f))
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._cond.notify()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.monotonic()):
                    self._cond.wait(None if not self._heap else self._heap[0][0] - time.monotonic())
                if self._stopped:
                    return
                _, _, f = heapq.heappop(self._heap)
            try:
                f()
            except Exception:
                log.exception("scheduled orderly consume failed")


class OrderlyService:
    """`ConsumeMessageOrderlyService` for one `PushConsumer` (its hooks: `admit`, `submit`, `drop`, `adopt`)."""

    def __init__(
        self,
        consumer: PushConsumer,
        listener: MessageListenerOrderly,
        suspend_millis: int,
        *,
        dlq_topic: str,
        store_properties: frozenset[str],
    ) -> None:
        self.consumer = consumer
        self.listener = listener
        self.suspend_millis = suspend_millis
        self.dlq_topic = dlq_topic
        self.store_properties = store_properties
        self.locks = QueueLocks.of(consumer.store, consumer.group) if not consumer.broadcasting else None
        self._pending: set[MessageQueue] = set()  # allocated to this member, still locked by another
        self._pending_lock = threading.Lock()
        self._mq_locks: dict[MessageQueue, threading.Lock] = {}  # Java's MessageQueueLock
        self._mq_locks_lock = threading.Lock()
        self._timer: _Timer | None = None
        self._stopping = threading.Event()

    # -- lifecycle -----------------------------------------------------------------------------------------

    def start(self) -> None:
        self._timer = _Timer(f"rmq-orderly-{self.consumer.consumer_id}")
        if self.locks is not None:  # a queue another member releases wakes the pull loop, which then adopts it
            self.locks.on_unlock.append(self.consumer._waiter.notify_all)

    def stop(self) -> None:
        """Stops scheduling: a queue's consume loop ends after its current batch (the rest stays uncommitted)."""
        self._stopping.set()
        if self._timer is not None:
            self._timer.stop()

    def close(self) -> None:
        if self.locks is not None:
            try:
                self.locks.on_unlock.remove(self.consumer._waiter.notify_all)
            except ValueError:
                pass

    # -- ownership (called by the consumer's rebalance) ----------------------------------------------------

    def admit(self, new: list[MessageQueue]) -> list[MessageQueue]:
        """Of the queues newly allocated, those this member could lock; the others wait in `pending`."""
        if self.locks is None:
            return new
        cid = self.consumer.consumer_id
        got = [mq for mq in new if self.locks.try_lock(mq, cid)]
        with self._pending_lock:
            self._pending = set(new) - set(got)
        return got

    def pending(self) -> set[MessageQueue]:
        with self._pending_lock:
            return set(self._pending)

    def adopt(self) -> list[MessageQueue]:
        """Locks pending queues freed since the rebalance; returns those now held (the caller holds the group's
        lock, so that the pending set is the current allocation's)."""
        if self.locks is None:
            return []
        with self._pending_lock:
            waiting = list(self._pending)
        got = [mq for mq in waiting if self.locks.try_lock(mq, self.consumer.consumer_id)]
        if got:
            with self._pending_lock:
                self._pending -= set(got)
        return got

    def drop(self, pq: ProcessQueue) -> None:
        """The rebalance took `pq`'s queue away: no batch starts any more, and the queue is released (offset
        committed, lock freed) as soon as no batch is in the listener: now, or when that batch's result is applied."""
        o = pq.orderly
        assert o is not None
        with pq.lock:
            pq.dropped = True
            if o.consume_lock.acquire(blocking=False):
                try:
                    self._release_locked(pq)
                finally:
                    o.consume_lock.release()

    def keep_pending(self, held: set[MessageQueue]) -> None:
        """Forgets the pending queues the group's registry no longer gives this member (taken over while its lease
        had run out)."""
        with self._pending_lock:
            self._pending &= held

    def discard(self, pq: ProcessQueue) -> None:
        """Another member took `pq`'s queue while this member's lease had run out: no batch starts any more,
        nothing is committed for it (a batch in the listener finishes without), and its lock is freed."""
        o = pq.orderly
        assert o is not None
        with pq.lock:
            pq.dropped = True
            o.released = True
        if self.locks is not None:
            self.locks.unlock(pq.mq, self.consumer.consumer_id)

    def _release_locked(self, pq: ProcessQueue) -> None:
        """Commits the first unconsumed offset and frees the lock (caller holds `pq.lock` and the consume lock)."""
        o = pq.orderly
        assert o is not None
        if o.released:
            return
        o.released = True
        c = self.consumer
        mq = pq.mq
        try:
            c.offsets.commit_offset(c.group, mq.topic, mq.queue_id, pq.commit_offset(), journal=True)
        except Exception:
            # The queue is still handed over: its next owner starts at the last offset committed (redelivery).
            log.exception("committing %s on release failed", mq)
        finally:
            if self.locks is not None:
                self.locks.unlock(mq, c.consumer_id)

    # -- consuming -----------------------------------------------------------------------------------------

    def submit(self, pq: ProcessQueue, msgs: list[MessageExt], next_offset: int) -> None:
        """`putMessage` + `submitConsumeRequest`: queues the pulled messages and starts the queue's consume loop
        unless it runs already."""
        o = pq.orderly
        assert o is not None
        with pq.lock:
            o.waiting.extend(msgs)
            pq.next_offset = next_offset
            start = bool(o.waiting) and not o.scheduled
            if start:
                o.scheduled = True
        if start:
            self._submit_now(pq)

    def _submit_now(self, pq: ProcessQueue) -> None:
        pool = self.consumer._pool
        if pool is None or self._stopping.is_set():
            return
        try:
            pool.submit(self._consume_loop, pq)
        except RuntimeError:  # the pool is shutting down
            pass

    def _submit_later(self, pq: ProcessQueue, millis: int) -> None:
        """`submitConsumeRequestLater`: −1 means the consumer's suspend time; clamped to 10..30000 ms."""
        if not isinstance(millis, int) or isinstance(millis, bool) or millis == -1:
            millis = self.suspend_millis
        millis = min(max(millis, 10), 30000)
        if self._timer is not None:
            self._timer.schedule(millis / 1000, lambda: self._submit_now(pq))

    def _mq_lock(self, mq: MessageQueue) -> threading.Lock:
        with self._mq_locks_lock:
            return self._mq_locks.setdefault(mq, threading.Lock())

    def _consume_loop(self, pq: ProcessQueue) -> None:
        """`ConsumeRequest.run`: batches of one queue, one after the other, until it is empty, suspended, dropped
        or has had the thread for `MAX_TIME_CONSUME_CONTINUOUSLY`."""
        o = pq.orderly
        assert o is not None
        c = self.consumer
        if pq.dropped:
            return
        with self._mq_lock(pq.mq):
            begin = time.monotonic()
            while not self._stopping.is_set():
                if time.monotonic() - begin > MAX_TIME_CONSUME_CONTINUOUSLY:
                    self._submit_later(pq, 10)
                    return
                o.consume_lock.acquire()
                with pq.lock:
                    if not pq.dropped and not c._group.holds_lease():
                        # The queue may be another member's by now: retried once a heartbeat has renewed the lease
                        # (and kept the queue; else it is dropped and this loop ends).
                        o.consume_lock.release()
                        self._submit_later(pq, int(LEASE_RECHECK * 1000))
                        return
                    msgs = o.take(c.consume_message_batch_max_size) if not pq.dropped else []
                    if not msgs:
                        if pq.dropped:
                            self._release_locked(pq)
                        o.consume_lock.release()
                        return
                ctx = ConsumeOrderlyContext(pq.mq, c.consumer_id)
                status: object = None
                try:
                    IN_LISTENER.consumer = c
                    status = self.listener(list(msgs), ctx)
                except Exception:
                    log.exception("orderly listener failed; the queue is suspended a moment")
                    c.stats.listener_errors += 1
                except BaseException:
                    # Not the listener's answer: the batch goes back as it was, the queue stays consumable.
                    with pq.lock:
                        o.rollback()
                        o.scheduled = False
                        if pq.dropped:
                            self._release_locked(pq)
                        o.consume_lock.release()
                    raise
                finally:
                    IN_LISTENER.consumer = None
                if not isinstance(status, ConsumeOrderlyStatus):
                    if status is not None:
                        log.warning("orderly listener returned %r; the queue is suspended a moment", status)
                    status = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                with pq.lock:
                    try:
                        go_on = self._process_result_locked(pq, msgs, status, ctx)
                    except Exception:
                        # E.g. the offset could not be journaled: the queue goes on after a pause; the offset is
                        # committed with a later batch (or the batch is redelivered: at least once).
                        log.exception("applying an orderly result on %s failed; retrying the queue later", pq.mq)
                        self._submit_later(pq, -1)
                        go_on = False
                    try:
                        if pq.dropped:
                            self._release_locked(pq)
                            go_on = False
                    finally:
                        o.consume_lock.release()
                if not go_on:
                    return

    def _process_result_locked(
        self, pq: ProcessQueue, msgs: list[MessageExt], status: ConsumeOrderlyStatus, ctx: ConsumeOrderlyContext
    ) -> bool:
        """`processConsumeResult` (caller holds `pq.lock` and the consume lock): whether to go on consuming."""
        o = pq.orderly
        assert o is not None
        c = self.consumer
        S = ConsumeOrderlyStatus
        commit = -1
        go_on = True
        if ctx.auto_commit:
            if status in (S.COMMIT, S.ROLLBACK):
                log.warning("%s with auto_commit on %s is taken as SUCCESS", status.value, pq.mq)
            if status is not S.SUSPEND_CURRENT_QUEUE_A_MOMENT:
                commit = o.commit()
                c.stats.consumed += len(msgs)
            elif self._check_reconsume_times(msgs):
                self._retry(pq, msgs, ctx)
                go_on = False
            else:
                commit = o.commit()
        elif status is S.SUCCESS:
            c.stats.consumed += len(msgs)
        elif status is S.COMMIT:
            c.stats.consumed += len(msgs)
            commit = o.commit()
        elif status is S.ROLLBACK:
            o.rollback()
            self._submit_later(pq, ctx.suspend_current_queue_time_millis)
            go_on = False
        elif self._check_reconsume_times(msgs):
            self._retry(pq, msgs, ctx)
            go_on = False
        if commit >= 0 and not o.released:
            mq = pq.mq
            c.offsets.commit_offset(c.group, mq.topic, mq.queue_id, commit, journal=c.persist_offsets_each_batch)
        return go_on

    def _retry(self, pq: ProcessQueue, msgs: list[MessageExt], ctx: ConsumeOrderlyContext) -> None:
        o = pq.orderly
        assert o is not None
        o.consume_again([m.with_reconsume_times(m.reconsume_times + 1) for m in msgs])
        self.consumer.stats.suspended += 1
        self._submit_later(pq, ctx.suspend_current_queue_time_millis)

    def _check_reconsume_times(self, msgs: list[MessageExt]) -> bool:
        """`checkReconsumeTimes`: sends the messages over the limit to the DLQ; whether the batch is retried (some
        message is under the limit, or could not be sent)."""
        suspend = False
        for m in msgs:
            if m.reconsume_times >= self.consumer.max_reconsume_times:
                try:
                    self._send_to_dlq(m)
                except Exception:
                    log.exception("sending an orderly message to the DLQ failed; it is retried")
                    suspend = True
            else:
                suspend = True
        return suspend

    def _send_to_dlq(self, m: MessageExt) -> None:
        """What reaches the store when an orderly consumer sends a message back past its limit: the client's
        `sendMessageBack` (the message's properties, RETRY_TOPIC, ORIGIN_MESSAGE_ID, its reconsume times) and the
        broker's `handleRetryAndDLQ`, which routes an orderly group's send-back to `%DLQ%<group>` queue 0 with
        DELAY −1."""
        c = self.consumer
        props = {k: v for k, v in m.properties.items() if k not in self.store_properties}
        props["RETRY_TOPIC"] = m.topic
        props.setdefault("ORIGIN_MESSAGE_ID", m.uniq_key or m.msg_id)
        props["DELAY"] = "-1"
        c.store.put(
            self.dlq_topic,
            m.body,
            queue_id=0,
            tags=m.tags,
            keys=m.keys or None,
            properties=props,
            flag=m.flag,
            born_timestamp=m.born_timestamp,
            born_host=m.born_host,
            reconsume_times=m.reconsume_times,
        )
        c.stats.sent_to_dlq += 1
        log.warning(
            "orderly message %s of %s reconsumed %d times: sent to the DLQ", m.msg_id, m.topic, m.reconsume_times
        )
