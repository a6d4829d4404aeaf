//! SYNC_FLUSH as RocketMQ's `GroupCommitService` (spec §11.5): puts waiting for durability share one flush.
//!
//! A put whose `WAIT` is true (`wait_store_msg_ok`) registers as waiting for its end offset, wakes the service
//! and blocks (with no Python lock held: a put runs detached) until the service has flushed past it, or until
//! `sync_flush_timeout` passes: then it returns `FLUSH_DISK_TIMEOUT` (the message is stored, its durability is
//! not confirmed). A put whose `WAIT` is false only wakes the service and returns at once.
//!
//! The service takes the waiting requests (RocketMQ swaps its request lists), flushes once everything written
//! so far (one msync per segment touched, for the whole group: N concurrent puts share it), advances
//! `flushed_offset` (only a real flush advances it; dispatch never passes it under SYNC_FLUSH), records the last
//! flushed store time as the checkpoint's physicMsgTimestamp (in memory; written with the checkpoint), and
//! completes every request it covered. A failed flush poisons the store as an inline one does, and every
//! waiting put returns `FLUSH_DISK_TIMEOUT`. A flush that is only slow leaves the store working: the puts that
//! gave up on it return `FLUSH_DISK_TIMEOUT`, later ones `PUT_OK` once the disk catches up (as in RocketMQ).
//!
//! The gather (rmq's, not RocketMQ's): a service that flushes as soon as it is woken splits steady producers
//! into two halves, the puts that arrived during one flush making up the next while those it served come back.
//! So before a flush the service waits for as many waiting puts as the last flush saw (those it served plus
//! those that arrived during it), at most half the last flush's time and `timing.group_commit_gather_max_us`
//! (1 ms): a lone producer never waits, a producer that stops costs one window. Puts below the count do not
//! wake the service; the one that reaches it does.
//!
//! Under SYNC_FLUSH the warm service also writes back the zero pages it faults in ahead of the write position
//! ([`crate::mmap::MappedFile::write_back`]): the claimed space becomes written blocks before the puts reach
//! it (4 MiB ahead under SYNC_FLUSH, in steps of 256 KiB), so a group flush writes data only, where it would
//! otherwise also write the conversion of the extents it touches (a journal commit, or on ext4 without a
//! journal the extent block): about twice the time on this project's ext4.
//!
//! Waiting puts sleep on one futex (`FlushSeq`) that every flush advances: one system call wakes them all,
//! and none queues on a mutex to learn whether it is done, as behind a condition variable.
//!
//! Without the service (services not started, or stopped by `close`), a SYNC_FLUSH put flushes its own range
//! inline before returning, whatever its `WAIT` (the per-put msync the service replaces).

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::ServiceThread;
use crate::config::FlushDiskType;
use crate::error::Result;
use crate::message::PutMessageStatus;
use crate::store::{MessageStore, State};

/// The service's name in [`MessageStore::service_stats`].
pub const NAME: &str = "group_commit";

/// How long the service sleeps when nobody wakes it (RocketMQ's `waitForRunning(10)`).
const IDLE_WAIT: Duration = Duration::from_millis(10);

/// What the service's gather knows of the rounds before (kept by the service loop).
#[derive(Debug, Default)]
pub(crate) struct Gather {
    /// `registered` when the round before the last began, and when the last began.
    began_prev: u64,
    began: u64,
    /// Producers the last flush saw: those it served and those that registered during it (0 after a round
    /// that flushed nothing).
    expect: u64,
    /// How long the last flush took.
    last_flush: Duration,
}

/// The state puts and the service share.
#[derive(Debug, Default)]
pub(crate) struct GroupCommit {
    /// The service runs and completes requests; when false, puts flush inline.
    running: AtomicBool,
    /// The service's wake-up signal, while it runs.
    service: Mutex<Option<Arc<ServiceThread>>>,
    /// What waiting puts sleep on: advanced, waking every one of them at once, after each flush (and when the
    /// store is poisoned or the service stops). The woken do not queue on a lock to find out whether the flush
    /// covered them, as they would behind a condition variable's mutex.
    flushes: FlushSeq,
    /// Puts waiting for a flush now.
    waiting: AtomicUsize,
    /// Store time of the newest SYNC_FLUSH put appended (for the checkpoint's physicMsgTimestamp).
    written_timestamp: AtomicI64,
    /// Flushes the service made (each covers every request waiting when it began).
    groups: AtomicU64,
    /// Waiting puts registered since the store opened (the gather's count of arrivals).
    registered: AtomicU64,
    /// Rounds whose gather waited for producers (observation and tests).
    gathers: AtomicU64,
    /// While the service gathers: the `registered` count it waits for (0 otherwise). A put below it does not
    /// wake the service (each wake-up would cost both a context switch); the put that reaches it does.
    gather_until: AtomicU64,
}

impl GroupCommit {
    fn wakeup(&self) {
        if let Some(s) = &*self.service.lock().unwrap_or_else(|p| p.into_inner()) {
            s.wakeup();
        }
    }

    /// Wakes every waiting put: each finds its flush done, the store poisoned, or the service gone, or
    /// sleeps again.
    fn notify(&self) {
        self.flushes.advance();
    }
}

/// Starts the group commit service if the store flushes synchronously.
pub(crate) fn spawn(store: &Arc<MessageStore>) -> Result<()> {
    if store.config.commit_log.flush_disk_type != FlushDiskType::SyncFlush {
        return Ok(());
    }
    let svc = ServiceThread::new(NAME);
    let gc = &store.group_commit;
    *gc.service.lock().unwrap_or_else(|p| p.into_inner()) = Some(svc.clone());
    gc.running.store(true, Ordering::Release);
    let weak = Arc::downgrade(store);
    let spawned = store.services().spawn(svc, move |svc| {
        let mut gather = Gather::default();
        while svc.wait_for_running(IDLE_WAIT) {
            let Some(s) = weak.upgrade() else { return };
            s.gather(svc, &gather);
            if let Err(e) = s.group_commit_round(svc, Some(&mut gather)) {
                // Counted before the store is poisoned and the waiting puts wake: whoever they answer, or finds
                // the store poisoned, sees the error in the stats.
                svc.record_error(&e);
                s.poison(&e);
                s.group_commit.notify();
            }
        }
        // Stopped: one last round for the puts still waiting, then they flush inline themselves.
        if let Some(s) = weak.upgrade() {
            s.group_commit.running.store(false, Ordering::Release);
            if let Err(e) = s.group_commit_round(svc, None) {
                s.poison(&e); // the notify below wakes the waiting puts, which then answer FLUSH_DISK_TIMEOUT
            }
            *s.group_commit.service.lock().unwrap_or_else(|p| p.into_inner()) = None;
            s.group_commit.notify();
        }
    });
    if spawned.is_err() {
        gc.running.store(false, Ordering::Release);
        *gc.service.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
    spawned
}

impl MessageStore {
    /// One round of the service: flushes everything written so far (if anything is unflushed), advances
    /// `flushed_offset`, counts the round and the bytes flushed in `svc`'s stats, and completes the waiting
    /// puts (counted before the offset moves: a put that returns finds its flush in the stats). A failed flush
    /// returns the error and changes nothing: the caller records it, poisons the store, then wakes the waiting
    /// puts (which answer FLUSH_DISK_TIMEOUT, the store being poisoned).
    pub(crate) fn group_commit_round(&self, svc: &ServiceThread, mut gather: Option<&mut Gather>) -> Result<()> {
        let gc = &self.group_commit;
        // The timestamp first: every put that set it was appended before, so lies below the end read next.
        let timestamp = gc.written_timestamp.load(Ordering::Acquire);
        if let Some(g) = gather.as_deref_mut() {
            // Before the end is read: every put registered by now is covered (if written), later ones may be.
            (g.began_prev, g.began) = (g.began, gc.registered.load(Ordering::SeqCst));
            g.expect = 0; // unless this round flushes
        }
        let target = self.commitlog.max_offset();
        let from = self.flushed_offset.load(Ordering::Acquire);
        if target <= from || !matches!(*self.state(), State::Open { .. }) {
            svc.count_round();
            gc.notify();
            return Ok(());
        }
        let started = Instant::now();
        self.commitlog.flush_range(from, target)?;
        if let Some(g) = gather {
            // Read before the notify below: the producers this flush served cannot have registered again yet.
            g.last_flush = started.elapsed();
            g.expect = gc.registered.load(Ordering::SeqCst) - g.began_prev;
        }
        gc.groups.fetch_add(1, Ordering::Relaxed);
        // Counted before the flushed offset moves: a put that finds its flush done without waiting (it came late
        // to the wake-up) finds it in the stats too.
        svc.count_round();
        svc.count_work(target - from);
        self.flushed_offset.fetch_max(target, Ordering::AcqRel);
        if timestamp > 0 {
            // Store times grow with offsets under the put lock, so every record stored before `timestamp` lies
            // below `target`; one with the same millisecond may still follow it.
            let covered = timestamp - 1;
            self.flushed_timestamp.fetch_max(covered, Ordering::AcqRel);
            self.checkpoint.update(|v| v.physic_msg_timestamp = v.physic_msg_timestamp.max(covered));
        }
        gc.notify();
        self.services().wakeup(super::reput::NAME);
        Ok(())
    }

    /// The SYNC_FLUSH part of a put that wrote `[dirty_from, end)` (its records from `end - wrote` on, after
    /// any end-of-file blank): the put's status.
    pub(crate) fn sync_flush(&self, dirty_from: u64, end: u64, store_timestamp: i64, wait: bool) -> PutMessageStatus {
        let gc = &self.group_commit;
        gc.written_timestamp.fetch_max(store_timestamp, Ordering::AcqRel);
        if !gc.running.load(Ordering::Acquire) {
            return self.flush_inline(dirty_from, end);
        }
        if !wait {
            gc.wakeup();
            return PutMessageStatus::PutOk;
        }
        // Registered before the wake-up, so a gathering service that wakes counts this put. SeqCst with the
        // service's `gather_until` store then `registered` load: either it sees this put, or this put sees its
        // target (and wakes it on reaching it).
        gc.waiting.fetch_add(1, Ordering::AcqRel);
        let registered = gc.registered.fetch_add(1, Ordering::SeqCst) + 1;
        if registered >= gc.gather_until.load(Ordering::SeqCst) {
            gc.wakeup();
        }
        let deadline = Instant::now() + Duration::from_millis(self.config.sync_flush.sync_flush_timeout);
        let status = loop {
            // The sequence before the checks: a flush (or poisoning, or stop) after them has advanced it, so
            // the wait below returns at once.
            let seen = gc.flushes.current();
            if self.flushed_offset.load(Ordering::Acquire) >= end {
                break PutMessageStatus::PutOk;
            }
            if matches!(*self.state(), State::Poisoned(_)) {
                break PutMessageStatus::FlushDiskTimeout;
            }
            if !gc.running.load(Ordering::Acquire) {
                gc.waiting.fetch_sub(1, Ordering::AcqRel);
                return self.flush_inline(dirty_from, end);
            }
            let now = Instant::now();
            if now >= deadline {
                break PutMessageStatus::FlushDiskTimeout;
            }
            gc.flushes.wait(seen, deadline - now);
        };
        gc.waiting.fetch_sub(1, Ordering::AcqRel);
        status
    }

    /// The per-put flush: `[dirty_from, end)` flushed now; a failure poisons the store.
    fn flush_inline(&self, dirty_from: u64, end: u64) -> PutMessageStatus {
        match self.commitlog.flush_range(dirty_from, end) {
            Ok(()) => {
                self.flushed_offset.fetch_max(end, Ordering::AcqRel);
                PutMessageStatus::PutOk
            }
            Err(e) => {
                self.poison(&e);
                PutMessageStatus::FlushDiskTimeout
            }
        }
    }

    /// Puts waiting for the group commit service right now (for observation and tests).
    pub fn sync_flush_waiting(&self) -> usize {
        self.group_commit.waiting.load(Ordering::Acquire)
    }

    /// Flushes the group commit service made since the store opened.
    pub fn group_commit_flushes(&self) -> u64 {
        self.group_commit.groups.load(Ordering::Relaxed)
    }

    /// Rounds in which the group commit service waited for producers to gather before flushing.
    pub fn group_commit_gathers(&self) -> u64 {
        self.group_commit.gathers.load(Ordering::Relaxed)
    }

    /// Before a round's flush: if fewer puts wait than the last round saw (those it served plus those that
    /// arrived during its flush), waits for the rest, who are on their way back (each woke and is putting
    /// again): at most half the last flush's time and `timing.group_commit_gather_max_us`, or until the service
    /// is stopped. Without it, producers split into two halves that alternate between flushes.
    fn gather(&self, svc: &ServiceThread, g: &Gather) {
        let gc = &self.group_commit;
        let arrived = || gc.registered.load(Ordering::SeqCst) - g.began;
        let first = arrived();
        if g.expect < 2 || first == 0 || first >= g.expect || self.config.timing.group_commit_gather_max_us == 0 {
            return;
        }
        gc.gathers.fetch_add(1, Ordering::Relaxed);
        let most = Duration::from_micros(self.config.timing.group_commit_gather_max_us);
        let deadline = Instant::now() + (g.last_flush / 2).min(most);
        gc.gather_until.store(g.began + g.expect, Ordering::SeqCst);
        while arrived() < g.expect {
            let now = Instant::now();
            if now >= deadline || !svc.wait_for_running(deadline - now) {
                break;
            }
        }
        gc.gather_until.store(0, Ordering::SeqCst);
    }
}

/// A sequence that waiting puts sleep on until it moves (a futex on Linux: one system call wakes them all).
#[derive(Debug, Default)]
struct FlushSeq {
    seq: AtomicU32,
    #[cfg(not(target_os = "linux"))]
    fallback: (Mutex<()>, std::sync::Condvar),
}

impl FlushSeq {
    fn current(&self) -> u32 {
        self.seq.load(Ordering::Acquire)
    }

    /// Moves the sequence on and wakes every sleeper.
    fn advance(&self) {
        #[cfg(target_os = "linux")]
        {
            self.seq.fetch_add(1, Ordering::Release);
            #[allow(unsafe_code)]
            // SAFETY: FUTEX_WAKE only reads the address of a live `AtomicU32` (it is not dereferenced as anything
            // else); no memory is written; extra arguments are ignored by this operation.
            let _ = unsafe {
                libc::syscall(libc::SYS_futex, self.seq.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, i32::MAX)
            };
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _g = self.fallback.0.lock().unwrap_or_else(|p| p.into_inner());
            self.seq.fetch_add(1, Ordering::Release);
            self.fallback.1.notify_all();
        }
    }

    /// Sleeps while the sequence is still `seen`, at most `timeout` (it may also return early).
    fn wait(&self, seen: u32, timeout: Duration) {
        #[cfg(target_os = "linux")]
        {
            let ts = libc::timespec {
                tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
                tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
            };
            #[allow(unsafe_code)]
            // SAFETY: FUTEX_WAIT reads the live `AtomicU32` at the address (atomically, in the kernel) and the
            // `timespec` on this stack frame, both valid for the call; nothing is written to user memory.
            let _ = unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    self.seq.as_ptr(),
                    libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                    seen,
                    &ts as *const libc::timespec,
                )
            };
        }
        #[cfg(not(target_os = "linux"))]
        {
            let g = self.fallback.0.lock().unwrap_or_else(|p| p.into_inner());
            if self.seq.load(Ordering::Acquire) == seen {
                let _ = self.fallback.1.wait_timeout(g, timeout);
            }
        }
    }
}
