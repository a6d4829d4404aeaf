//! The page warmer: faults in the commitlog pages just ahead of the write position so puts do not pay for
//! page allocation and zeroing (RocketMQ pre-touches its mapped files too), creating the next segment before
//! the writer reaches it (as RocketMQ's `AllocateMappedFileService` does) so that a roll finds its first pages
//! in memory and creates no file under the put lock. A segment it could not create is the round's error
//! (`service_stats`); the writer's roll tries again. An append that crosses half the warmed distance wakes it
//! ([`MessageStore`]'s put path); the commitlog keeps the requested position and the round
//! ([`crate::commitlog::CommitLog::warm_round`]). Under SYNC_FLUSH a round also writes the faulted-in pages back
//! (zeros, nothing made durable), so the group commit's flushes find written blocks ahead of them
//! (`services/group_commit.rs`).

use std::sync::Arc;
use std::time::Duration;

use super::{run_every, ServiceThread};
use crate::error::Result;
use crate::store::MessageStore;

/// The service's name in [`MessageStore::service_stats`].
pub const NAME: &str = "warm";
/// Longest sleep between rounds: appends wake the service when they need it, and a round without work still
/// judges the writer's pace (under ASYNC_FLUSH a writer that slowed down gets single pages ahead of it).
pub const IDLE: Duration = Duration::from_secs(1);

/// Starts the service.
pub(crate) fn spawn(store: &Arc<MessageStore>) -> Result<()> {
    let weak = Arc::downgrade(store);
    store.services().spawn(ServiceThread::new(NAME), move |svc| {
        run_every(
            weak,
            svc,
            |_| IDLE,
            |s, svc| {
                let flush_interval = Duration::from_millis(s.config.flush.flush_interval_commit_log);
                svc.count_work(s.commitlog().warm_round(flush_interval)?);
                Ok(())
            },
        )
    })
}
