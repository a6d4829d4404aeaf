"""Consumer groups across processes: an on-disk registry of members and queue owners, since there is no broker.

The members of a group (`PushConsumer`s with the same `group` on the same store, in any number of processes on
one machine) divide the subscribed queues with a rebalance strategy over the sorted ids of the live members, as
the client's `RebalanceImpl` does. Their shared view is `<root>/rmq-groups/<group>.registry` (rmq's own file:
a header line `RMQGROUP 1 <crc32 of the rest, hex>`, then JSON), changed only under an fcntl lock on
`<root>/rmq-groups/<group>.lock` and replaced atomically (temp file, rename):

- members: id -> process (pid, its start time, boot id, pid namespace) and last heartbeat (`CLOCK_MONOTONIC`
  seconds, shared by the processes of one machine);
- owners: queue -> member id; every change takes the next sequence number `seq` (under the lock), so the
  acquire/release events members report are totally ordered.

Rules, each applied under the lock:

- A member heartbeats every `HEARTBEAT_INTERVAL` seconds (a thread per process and group). A member whose last
  heartbeat is older than `LEASE` seconds is dead, as is one whose process is gone (same boot and pid
  namespace, and no live process with that pid and start time, zombies included): it is dropped and its
  queues become free. A registry written before the last boot holds no live member.
- A member takes a queue only when it is free (never owned, released, or freed by its owner's death).
- A member releases a queue only after it stopped consuming it (no listener call of that queue still running)
  and committed and persisted its offset (`PushConsumer._drop_except`). Until then the queue stays its own and
  whoever is allocated it waits; it retries at every heartbeat.

And in each process, by its own `CLOCK_MONOTONIC` (which runs on while the process is stopped):

- Its members hold their queues only while its last heartbeat written to the registry is recent: `own_lease()`,
  half the lease (RocketMQ's client takes its queue locks to expire after 30 s, the broker after 60 s), at least
  two heartbeats. Past that (the process was paused, its heartbeat stalled or could not be written) the others
  may soon take it for dead and its queues over, so it hands out no message and commits no offset
  (`holds_lease()`; the offsets manager refuses the group's commits and persists none of its changes, see
  `ConsumerOffsetManager.fence`) until a heartbeat is written again.
- When a heartbeat is written, before the lease counts as renewed, each member drops without committing every
  queue it still holds in memory that the registry no longer gives it (`_discard_except`): another member took
  it meanwhile, and its offset is that member's now.

In one process, members release before others acquire within the same rebalance, so an in-process group
rebalances at once on join and leave, as before; across processes a move completes within a heartbeat or two.

Interface used by `rmq.push` (`ConsumerGroup.of(store, group)`): `join(member)`, `leave(member)`,
`rebalance()`, `lock`, `members`, `owners()`, `events`, `holds_lease()`. A member provides `consumer_id`,
`_allocation(cids) -> {queue: subscription}` (what it should own), `assigned_queues()` (what it owns),
`_drop_except(plan)` (stops, commits and persists the queues not in `plan`), `_discard_except(held)` (drops the
queues not in `held` without committing), `_apply_allocation(plan)` (owns exactly `plan`), and `refresh_offsets()`
(re-reads the group's offsets from disk before it consumes queues it acquired).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import weakref
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rmq import _args
from rmq._flock import FileLock, replace_file
from rmq.rebalance import MessageQueue

if TYPE_CHECKING:
    from rmq.store import MessageStore

log = logging.getLogger(__name__)

REGISTRY_DIR = "rmq-groups"
MAGIC = "RMQGROUP"
VERSION = 1
#: Seconds between heartbeats (each also rebalances).
HEARTBEAT_INTERVAL = 1.0
#: Seconds without a heartbeat after which a member is dead.
LEASE = 10.0
#: Seconds between checks of the lease by a member's threads while it has run out (they wait for a heartbeat).
LEASE_RECHECK = 0.05


class Member(Protocol):
    consumer_id: str

    def _allocation(self, cids: list[str]) -> dict[MessageQueue, str]: ...
    def refresh_offsets(self) -> None: ...
    def assigned_queues(self) -> list[MessageQueue]: ...
    def _drop_except(self, plan: dict[MessageQueue, str]) -> None: ...
    def _discard_except(self, held: set[MessageQueue]) -> None: ...
    def releasing_queues(self) -> list[MessageQueue]: ...
    def _apply_allocation(self, plan: dict[MessageQueue, str]) -> None: ...


@dataclass(frozen=True)
class OwnershipEvent:
    """An acquire or release, numbered by the registry under its lock (`seq` increases across processes)."""

    seq: int
    member: str
    queue: MessageQueue
    kind: str  # "acquired" or "released"
    previous: str | None = None  # for an acquire: the dead member the queue was freed from, if any


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _pid_ns() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _start_time(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks) of a process, None when there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[0], int(fields[19])


_BOOT = _boot_id()
_NS = _pid_ns()


def _process_identity() -> dict[str, Any]:
    pid = os.getpid()
    st = _start_time(pid)
    return {"pid": pid, "start": st[1] if st else 0, "boot": _BOOT, "ns": _NS}


def _queue_key(mq: MessageQueue) -> str:
    return f"{mq.topic}\n{mq.broker_name}\n{mq.queue_id}"


def _queue_of(key: str) -> MessageQueue:
    topic, broker, qid = key.split("\n")
    return MessageQueue(topic, broker, int(qid))


class _State:
    def __init__(self, data: dict[str, Any]) -> None:
        self.seq: int = int(data.get("seq", 0))
        self.boot: str = str(data.get("boot", ""))
        self.members: dict[str, dict[str, Any]] = dict(data.get("members", {}))
        self.owners: dict[str, str] = dict(data.get("owners", {}))
        self.changed = False

    def to_json(self) -> str:
        return json.dumps(
            {"seq": self.seq, "boot": self.boot, "members": self.members, "owners": self.owners}, sort_keys=True
        )


class Registry:
    """The registry file of one group (see the module docs)."""

    def __init__(self, root: str | os.PathLike[str], group: str) -> None:
        _args.group(group)  # a file name under the store's root, never a path
        self.dir = Path(root) / REGISTRY_DIR
        self.path = self.dir / f"{group}.registry"
        self._lock = FileLock.of(self.dir / f"{group}.lock")

    def _read(self) -> _State:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return _State({})
        head, _, body = raw.partition(b"\n")
        parts = head.split(b" ")
        try:
            ok = len(parts) == 3 and parts[0] == MAGIC.encode() and int(parts[1]) == VERSION
            ok = ok and int(parts[2], 16) == zlib.crc32(body)
            if ok:
                return _State(json.loads(body))
        except ValueError:
            pass
        log.warning("group registry %s is damaged; starting an empty one", self.path)
        return _State({})

    def _write(self, state: _State) -> None:
        body = state.to_json().encode()
        replace_file(self.path, f"{MAGIC} {VERSION} {zlib.crc32(body):08x}\n".encode() + body, sync=False)

    @contextmanager
    def locked(self) -> Iterator[_State]:
        """The state under the lock; written back when changed."""
        with self._lock.held():
            state = self._read()
            boot = _BOOT
            if state.boot != boot:  # written before this boot: nobody in it is alive
                state.members.clear()
                state.owners.clear()
                state.boot = boot
                state.changed = True
            yield state
            if state.changed:
                self.dir.mkdir(parents=True, exist_ok=True)
                self._write(state)

    def snapshot(self) -> _State:
        with self._lock.held():
            return self._read()


def _alive(info: dict[str, Any], now: float, lease: float) -> bool:
    if now - float(info.get("heartbeat", 0.0)) > lease:
        return False
    if info.get("ns") == _NS and info.get("boot") == _BOOT:
        st = _start_time(int(info.get("pid", 0)))
        if st is None or st[0] in ("Z", "X") or st[1] != info.get("start"):
            return False
    return True


class ConsumerGroup:
    """The members of one group in this process, and their part in the store's registry."""

    _groups: weakref.WeakKeyDictionary[MessageStore, dict[str, ConsumerGroup]] = weakref.WeakKeyDictionary()
    _class_lock = threading.Lock()

    def __init__(self, root: str | os.PathLike[str], group: str) -> None:
        self.group = group
        self.registry = Registry(root, group)
        self.members: list[Member] = []
        self.lock = threading.RLock()
        #: Every acquire and release this process made, in order.
        self.events: list[OwnershipEvent] = []
        #: Called with each event (after the registry recorded it).
        self.on_event: Callable[[OwnershipEvent], None] | None = None
        self.heartbeat_interval = HEARTBEAT_INTERVAL
        self.lease = LEASE
        self._identity = _process_identity()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._first: dict[str, bool] = {}  # members that have not been given an allocation yet
        # `time.monotonic()` of the last heartbeat written for this process's members, once their queues were
        # checked against the registry (`rebalance`).
        self._renewed = float("-inf")

    @classmethod
    def of(cls, store: MessageStore, group: str) -> ConsumerGroup:
        with cls._class_lock:
            groups = cls._groups.setdefault(store, {})
            g = groups.get(group)
            if g is None:
                g = groups[group] = ConsumerGroup(store.path, group)
            return g

    # -- membership ------------------------------------------------------------------------------------

    def join(self, member: Member) -> None:
        with self.lock:
            if any(m.consumer_id == member.consumer_id for m in self.members):
                raise ValueError(f"consumer id {member.consumer_id!r} already in group {self.group!r}")
            with self.registry.locked() as st:
                info = st.members.get(member.consumer_id)
                if info is not None and _alive(info, time.monotonic(), self.lease):
                    raise ValueError(f"consumer id {member.consumer_id!r} is live in group {self.group!r}")
            self.members.append(member)
            self._first[member.consumer_id] = True
            try:
                self.rebalance()
            except BaseException:
                # Not joined (the registry could not be written): the member is not one, and holds nothing.
                self.members = [m for m in self.members if m is not member]
                self._first.pop(member.consumer_id, None)
                raise
            if self._thread is None:
                self._stop.clear()
                self._thread = threading.Thread(target=self._heartbeat_loop, name=f"rmq-group-{self.group}",
                                                daemon=True)  # fmt: skip
                self._thread.start()

    def leave(self, member: Member) -> None:
        """Stops the member's queues, commits and persists their offsets, releases them and unregisters."""
        thread: threading.Thread | None = None
        try:
            with self.lock:
                self.members = [m for m in self.members if m is not member]
                self._first.pop(member.consumer_id, None)
                try:
                    member._drop_except({})
                    member._apply_allocation({})
                    events: list[OwnershipEvent] = []
                    with self.registry.locked() as st:
                        self._release_locked(st, member.consumer_id, None, events)
                        st.members.pop(member.consumer_id, None)
                        st.changed = True
                    for e in events:
                        self._emit(e)
                    self.rebalance()
                finally:
                    # Even when the registry could not be written (its lease then runs out): no heartbeat goes on
                    # for a group with no member here.
                    thread = self._thread if not self.members else None
                    if thread is not None:
                        self._stop.set()
                        self._thread = None
        finally:
            # Outside the lock, which the heartbeat thread takes; also when leaving failed.
            if thread is not None and thread is not threading.current_thread():
                thread.join()

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self.heartbeat_interval):
            try:
                self.rebalance()
            except Exception:
                log.exception("group %s: heartbeat failed", self.group)

    # -- the lease -------------------------------------------------------------------------------------

    def own_lease(self) -> float:
        """Seconds after its last heartbeat for which this process takes its members' queues for theirs: half the
        lease the others give it, at least two heartbeat intervals, at most the lease."""
        return min(self.lease, max(self.lease / 2, 2 * self.heartbeat_interval))

    def holds_lease(self) -> bool:
        """Whether this process's members still hold their queues by its own clock (see the module docs): when
        not, they must hand out no message and commit no offset until the next heartbeat renews the lease."""
        return time.monotonic() - self._renewed < self.own_lease()

    def _renew(self, now: float, held: dict[str, set[MessageQueue]]) -> None:
        """After a heartbeat at `now` was written: each member drops, without committing, what the registry no
        longer gives it (taken over while this process's lease had run out); then the lease counts from `now`."""
        for m in self.members:
            m._discard_except(held.get(m.consumer_id, set()))
        self._renewed = now

    def _held_locked(self, st: _State) -> dict[str, set[MessageQueue]]:
        local = {m.consumer_id for m in self.members}
        held: dict[str, set[MessageQueue]] = {cid: set() for cid in local}
        for key, owner in st.owners.items():
            if owner in local:
                held[owner].add(_queue_of(key))
        return held

    # -- rebalance -------------------------------------------------------------------------------------

    def rebalance(self) -> None:
        """Heartbeats, drops dead members, and moves queues toward each local member's allocation: first every
        local member stops and releases what it should not own, then each takes what is free of its share.
        Events are reported once the registry holding them is written, and before a member starts consuming
        what it acquired."""
        with self.lock:
            if not self.members:
                return
            with self.registry.locked() as st:
                now = self._heartbeat_locked(st)
                cids = sorted(st.members)
                held = self._held_locked(st)
            self._renew(now, held)
            plans = [(m, m._allocation(cids)) for m in self.members]
            for m, plan in plans:
                m._drop_except(plan)  # stopped, committed, persisted
            events: list[OwnershipEvent] = []
            grants: list[tuple[Member, dict[MessageQueue, str], bool, bool]] = []
            with self.registry.locked() as st:
                now = self._heartbeat_locked(st)
                for m, plan in plans:
                    owned = set(m.assigned_queues())
                    # An orderly member's queue with a batch still in its listener stays its own until released.
                    releasing = set(m.releasing_queues())
                    self._release_locked(st, m.consumer_id, {_queue_key(q) for q in [*plan, *releasing]}, events)
                    granted: dict[MessageQueue, str] = {}
                    fresh = False
                    for mq, sub in plan.items():
                        if mq in releasing:
                            continue  # taken again at a rebalance after its release
                        key = _queue_key(mq)
                        owner = st.owners.get(key)
                        if owner == m.consumer_id and mq in owned:
                            granted[mq] = sub
                        elif owner is None or owner == m.consumer_id:
                            st.owners[key] = m.consumer_id
                            st.seq += 1
                            st.changed = True
                            events.append(OwnershipEvent(st.seq, m.consumer_id, mq, "acquired"))
                            granted[mq] = sub
                            fresh = True
                    changed = set(granted) != owned or self._first.pop(m.consumer_id, False)
                    grants.append((m, granted, fresh, changed))
                held = self._held_locked(st)
            self._renew(now, held)
            for e in events:
                self._emit(e)
            for m, granted, fresh, changed in grants:
                if fresh:
                    m.refresh_offsets()  # the previous owner (maybe elsewhere) persisted its offsets
                if changed:
                    m._apply_allocation(granted)

    def _heartbeat_locked(self, st: _State) -> float:
        """Records this process's members' heartbeat, and drops dead members; returns the heartbeat's time."""
        now = time.monotonic()
        local = {m.consumer_id for m in self.members}
        for cid, info in list(st.members.items()):
            if cid not in local and not _alive(info, now, self.lease):
                del st.members[cid]
                st.changed = True
                for key in [k for k, owner in st.owners.items() if owner == cid]:
                    del st.owners[key]
                    log.info("group %s: %s is dead; %s freed", self.group, cid, _queue_of(key))
        for cid in local:
            st.members[cid] = {**self._identity, "heartbeat": now}
        st.changed = True
        return now

    def _release_locked(self, st: _State, cid: str, keep: set[str] | None, events: list[OwnershipEvent]) -> None:
        """Releases the queues `cid` owns in the registry but not in `keep` (None: all); the caller has stopped
        them."""
        for key, owner in sorted(st.owners.items()):
            if owner == cid and (keep is None or key not in keep):
                del st.owners[key]
                st.seq += 1
                st.changed = True
                events.append(OwnershipEvent(st.seq, cid, _queue_of(key), "released"))

    def _emit(self, event: OwnershipEvent) -> None:
        self.events.append(event)
        if self.on_event is not None:
            self.on_event(event)

    def owners(self) -> dict[MessageQueue, str]:
        """Every owned queue of the group and its owner, as the registry has them now."""
        return {_queue_of(k): v for k, v in self.registry.snapshot().owners.items()}

    def live_members(self) -> list[str]:
        now = time.monotonic()
        return sorted(c for c, i in self.registry.snapshot().members.items() if _alive(i, now, self.lease))
