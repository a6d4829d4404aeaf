//! The flush services (spec §11.5).
//!
//! - `flush` (RocketMQ's `FlushRealTimeService`, ASYNC_FLUSH only): every `flush_interval_commit_log` (500 ms;
//!   `flush_commit_log_timed`: a plain sleep, else a wait that a put wakes when `wake_flush_when_put_message`),
//!   flushes the commitlog segments that are full or hold `flush_commit_log_least_pages` (4) new pages, and
//!   every `flush_commit_log_thorough_interval` (10 s) everything written. The store time of the last message
//!   flushed becomes the checkpoint's physicMsgTimestamp. On stop, a last thorough round.
//! - `flush_cq` (`FlushConsumeQueueService`): every `flush_interval_consume_queue` (1 s), flushes the consume
//!   queues' files that are full or hold `flush_consume_queue_least_pages` (2) new pages, every
//!   `flush_consume_queue_thorough_interval` (60 s) every entry and the index files; then writes the checkpoint.
//!
//! The crash rule: the checkpoint never claims a time whose data is not flushed. physicMsgTimestamp is the store
//! time of a message read before the commitlog flush that then covered it; logicsMsgTimestamp is the dispatch
//! time read before a consume-queue round that flushed every entry (capped by physicMsgTimestamp: commitlog
//! first, then queues, then checkpoint); indexMsgTimestamp is the last rolled index file's end, read before a
//! thorough round flushed the index files. A failed flush poisons the store (nothing later may be declared
//! durable), and the services then do nothing.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::ServiceThread;
use crate::config::FlushDiskType;
use crate::error::Result;
use crate::store::MessageStore;

/// The commitlog flush service's name in [`MessageStore::service_stats`].
pub const NAME: &str = "flush";
/// The consume-queue flush service's name.
pub const CQ_NAME: &str = "flush_cq";

/// Starts `flush` (under ASYNC_FLUSH) and `flush_cq`.
pub(crate) fn spawn(store: &Arc<MessageStore>) -> Result<()> {
    if store.config.commit_log.flush_disk_type == FlushDiskType::AsyncFlush {
        let weak = Arc::downgrade(store);
        store.services().spawn(ServiceThread::new(NAME), move |svc| run_commitlog(&weak, svc))?;
    }
    let weak = Arc::downgrade(store);
    store.services().spawn(ServiceThread::new(CQ_NAME), move |svc| run_consume_queues(&weak, svc))
}

/// When the last thorough round ran.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    last_thorough: Instant,
}

impl Schedule {
    /// A schedule whose first thorough round comes one interval after `now`.
    pub fn new(now: Instant) -> Self {
        Schedule { last_thorough: now }
    }

    /// The least pages for a round at `now`: 0 once `thorough_ms` passed since the last thorough round.
    fn least_pages(&mut self, now: Instant, thorough_ms: u64, least: u64) -> u64 {
        if now.saturating_duration_since(self.last_thorough) >= Duration::from_millis(thorough_ms) {
            self.last_thorough = now;
            0
        } else {
            least
        }
    }
}

fn run_commitlog(store: &Weak<MessageStore>, svc: &ServiceThread) {
    let mut schedule = Schedule::new(Instant::now());
    loop {
        let Some(s) = store.upgrade() else { return };
        let cfg = s.config.flush.clone();
        drop(s);
        let interval = Duration::from_millis(cfg.flush_interval_commit_log);
        let go_on = if cfg.flush_commit_log_timed { svc.sleep(interval) } else { svc.wait_for_running(interval) };
        let Some(s) = store.upgrade() else { return };
        if s.is_closed() {
            return;
        }
        // On stop (`stop_services`; `close` flushes everything itself): one last thorough round.
        let result =
            if go_on { commitlog_round(&s, &mut schedule, Instant::now()) } else { commitlog_round_with(&s, 0) };
        match result {
            Ok(bytes) => {
                svc.count_round();
                svc.count_work(bytes);
            }
            Err(e) => svc.record_error(&e),
        }
        if !go_on {
            return;
        }
    }
}

/// One round of the commitlog flush service at `now`. Returns the bytes flushed.
pub fn commitlog_round(store: &MessageStore, schedule: &mut Schedule, now: Instant) -> Result<u64> {
    let cfg = &store.config.flush;
    let least = schedule.least_pages(now, cfg.flush_commit_log_thorough_interval, cfg.flush_commit_log_least_pages);
    commitlog_round_with(store, least)
}

/// A commitlog flush round with `least_pages`. Returns the bytes flushed.
pub fn commitlog_round_with(store: &MessageStore, least_pages: u64) -> Result<u64> {
    if store.check_writable().is_err() {
        return Ok(0); // closed, or poisoned: nothing more may be declared durable
    }
    let before = store.commitlog.flushed_where();
    store.flush_commitlog(least_pages)?;
    Ok(store.commitlog.flushed_where().saturating_sub(before))
}

fn run_consume_queues(store: &Weak<MessageStore>, svc: &ServiceThread) {
    let mut schedule = Schedule::new(Instant::now());
    loop {
        let Some(s) = store.upgrade() else { return };
        let interval = Duration::from_millis(s.config.flush.flush_interval_consume_queue);
        drop(s);
        if !svc.wait_for_running(interval) {
            return;
        }
        let Some(s) = store.upgrade() else { return };
        if s.is_closed() {
            return;
        }
        match consume_queue_round(&s, &mut schedule, Instant::now()) {
            Ok(bytes) => {
                svc.count_round();
                svc.count_work(bytes);
            }
            Err(e) => svc.record_error(&e),
        }
    }
}

/// One round of the consume-queue flush service at `now`: flushes the queues (and on a thorough round the
/// index), then writes the checkpoint. Returns the consume-queue bytes flushed.
pub fn consume_queue_round(store: &MessageStore, schedule: &mut Schedule, now: Instant) -> Result<u64> {
    if store.check_writable().is_err() {
        return Ok(0);
    }
    let cfg = &store.config.flush;
    let least =
        schedule.least_pages(now, cfg.flush_consume_queue_thorough_interval, cfg.flush_consume_queue_least_pages);
    // Each read before the flush that makes it true.
    let physic = store.flushed_timestamp();
    let dispatched = store.dispatched_timestamp.load(std::sync::atomic::Ordering::Acquire);
    let rolled = store.index.as_ref().map_or(0, crate::index::IndexService::rolled_end_timestamp);
    let mut all = true;
    let mut bytes = 0;
    for cq in store.queues.all() {
        let before = cq.flushed_offset();
        let flushed = match cq.flush_pages(least) {
            Ok(f) => f,
            Err(e) => {
                store.poison(&e);
                return Err(e);
            }
        };
        bytes += cq.flushed_offset().saturating_sub(before);
        all &= flushed;
    }
    let index_flushed = least == 0;
    if index_flushed {
        if let Err(e) = store.index.as_ref().map_or(Ok(()), crate::index::IndexService::flush) {
            store.poison(&e);
            return Err(e);
        }
    }
    store.checkpoint.update_and_flush(|v| {
        v.physic_msg_timestamp = v.physic_msg_timestamp.max(physic);
        if all {
            v.logics_msg_timestamp = v.logics_msg_timestamp.max(dispatched.min(physic));
        }
        if index_flushed {
            v.index_msg_timestamp = v.index_msg_timestamp.max(rolled);
        }
    })?;
    Ok(bytes)
}
