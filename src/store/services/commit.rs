//! RocketMQ's `CommitRealTimeService` (spec §11.5), run when the transient store pool is on: every
//! `commit_interval_commit_log` (200 ms), or at once when a put wakes it (`wake_commit_when_put_message`), it
//! copies the bytes puts wrote into the pooled buffer into the segment's file mapping, once at least
//! `commit_commit_log_least_pages` (4) pages wait, or whatever waits when `commit_commit_log_thorough_interval`
//! (200 ms) has passed since the last thorough commit. When data moved it wakes the flush service and the
//! dispatcher: readers, dispatch and flushes see only committed bytes.
//!
//! Without the service (services not started, or stopped by `close`) each put commits inline, so readers
//! still see every put once it returned.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::ServiceThread;
use crate::error::Result;
use crate::store::MessageStore;

/// The service's name in [`MessageStore::service_stats`].
pub const NAME: &str = "commit";

/// What puts need to know of the service.
#[derive(Debug, Default)]
pub(crate) struct CommitState {
    /// The service runs; when false puts commit inline.
    running: AtomicBool,
}

/// When the last thorough commit (least pages 0) ran; a round is thorough once the interval has passed.
#[derive(Debug, Clone, Copy)]
pub struct CommitClock {
    pub last_thorough: Instant,
}

/// Starts the commit service if the transient store pool is on.
pub(crate) fn spawn(store: &Arc<MessageStore>) -> Result<()> {
    if store.commitlog.transient_pool().is_none() {
        return Ok(());
    }
    let svc = ServiceThread::new(NAME);
    store.commit_state.running.store(true, Ordering::Release);
    let weak = Arc::downgrade(store);
    let spawned = store.services().spawn(svc, move |svc| {
        let mut clock = CommitClock { last_thorough: Instant::now() };
        let mut wait = match weak.upgrade() {
            Some(s) => s.commit_interval(),
            None => return,
        };
        while svc.wait_for_running(wait) {
            let Some(s) = weak.upgrade() else { return };
            match s.commit_round(Instant::now(), &mut clock) {
                Ok(_) => svc.count_round(),
                Err(e) => svc.record_error(&e),
            }
            wait = s.commit_interval();
        }
        // Stopped: later puts commit inline; what is left is committed by `close`.
        if let Some(s) = weak.upgrade() {
            s.commit_state.running.store(false, Ordering::Release);
            let _ = s.commitlog.commit(0);
        }
    });
    if spawned.is_err() {
        store.commit_state.running.store(false, Ordering::Release);
    }
    spawned
}

impl MessageStore {
    fn commit_interval(&self) -> Duration {
        Duration::from_millis(self.config.transient_pool.commit_interval_commit_log.max(1))
    }

    /// One round of the commit service at time `now`: commits when at least the least pages wait, or anything
    /// waiting when the thorough interval has passed since `clock.last_thorough` (then moved to `now`). When
    /// data moved, wakes the flush service and the dispatcher. Returns whether data moved.
    pub fn commit_round(&self, now: Instant, clock: &mut CommitClock) -> Result<bool> {
        let tp = &self.config.transient_pool;
        let thorough = now.saturating_duration_since(clock.last_thorough)
            >= Duration::from_millis(tp.commit_commit_log_thorough_interval);
        let least_pages = if thorough {
            clock.last_thorough = now;
            0
        } else {
            tp.commit_commit_log_least_pages
        };
        let moved = self.commitlog.commit(least_pages)?;
        if moved {
            self.services().wakeup(super::flush::NAME);
            self.services().wakeup(super::reput::NAME);
        }
        Ok(moved)
    }

    /// After a put with the transient store pool on: wakes the commit service, or commits inline when it does
    /// not run. The put is done either way: a commit that fails leaves the bytes in the buffer for the next one
    /// (and `flush()` or `close()` reports the failure).
    pub(crate) fn after_pooled_put(&self) -> Result<()> {
        if self.commit_state.running.load(Ordering::Acquire) {
            if self.config.transient_pool.wake_commit_when_put_message {
                self.services().wakeup(NAME);
            }
            Ok(())
        } else {
            self.commitlog.commit(0).map(|_| ())
        }
    }
}
