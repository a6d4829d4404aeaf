//! `ReputMessageService` (spec §12.1): dispatches what puts append into the consume queues and the index, in
//! commitlog order, on the store's own thread. Woken by puts (and by every flush under SYNC_FLUSH, which
//! moves the confirm offset) when it sleeps; after catching up with a stream of puts it pauses [`NAP`] first;
//! dispatches in batches of [`BATCH`] records until it has caught up; on an error
//! (a full disk while creating a consume-queue or index file) records it in the service's stats and retries
//! after [`RETRY`]. Each batch that adds consume-queue entries advances the store's arrival sequence, which
//! long polling waits on ([`MessageStore::wait_arrival`]).

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::ServiceThread;
use crate::error::Result;
use crate::store::MessageStore;

/// The service's name in [`MessageStore::service_stats`].
pub const NAME: &str = "reput";
/// Records dispatched per round (the dispatch lock is released between rounds). A round that builds the index
/// on a second thread starts that thread and waits for it at the end, so a catching-up dispatch goes faster
/// in larger rounds (32,768 records take 15-30 ms here; rounds of 4,096 were ~10 % slower to catch up).
pub const BATCH: u64 = 32_768;
/// Wait after a failed round.
pub const RETRY: Duration = Duration::from_secs(1);
/// Pause after a round that caught up with a stream of puts (so at most this much dispatch latency while
/// puts keep coming; none after a quiet spell, when a put wakes the sleeping service at once).
pub const NAP: Duration = Duration::from_millis(1);
/// Longest sleep while idle: puts wake the service, this only bounds the wait should a wake-up be missed.
pub const IDLE: Duration = Duration::from_secs(1);

/// Starts the service.
pub(crate) fn spawn(store: &Arc<MessageStore>) -> Result<()> {
    let weak = Arc::downgrade(store);
    store.services().spawn(ServiceThread::new(NAME), move |svc| run(&weak, svc))
}

fn run(store: &Weak<MessageStore>, svc: &ServiceThread) {
    let mut wait = Duration::ZERO;
    while svc.wait_for_running(wait) {
        let Some(s) = store.upgrade() else { return };
        if s.is_closed() {
            return;
        }
        let mut nap = false;
        wait = match round(&s) {
            Ok((records, scheduled, more)) => {
                svc.count_round();
                svc.count_work(records);
                if scheduled > 0 {
                    // New delayed messages: one may be due before the time the schedule service sleeps until.
                    s.services().wakeup(super::schedule::NAME);
                }
                // Caught up while puts arrive: take what the next moment brings in one round instead of being
                // woken (two context switches) by every put; RocketMQ's reput sleeps 1 ms per round. Wake-ups
                // meanwhile are kept, so the next wait returns at once if a put came.
                nap = !more && records > 0;
                if more || nap {
                    Duration::ZERO
                } else {
                    IDLE
                }
            }
            Err(e) => {
                svc.record_error(&e);
                RETRY
            }
        };
        // Not holding the store while napping: its owner's last reference then closes it at once.
        drop(s);
        if nap && !svc.sleep(NAP) {
            return;
        }
    }
}

/// One round: at most [`BATCH`] records. Returns the records dispatched and whether more are waiting (the
/// round advanced and the confirm offset is still ahead), with how many of them were delayed messages.
pub(crate) fn round(store: &MessageStore) -> Result<(u64, u64, bool)> {
    let before = store.reput_offset();
    let r = store.dispatch(BATCH, false)?;
    Ok((r.records, r.scheduled, r.reput_offset > before && r.reput_offset < store.confirm_offset()))
}
