//! The cleanup service (RocketMQ's `cleanFilesPeriodically`: `CleanCommitLogService` then
//! `CleanConsumeQueueService`): after `clean_service_initial_delay`, a round every `clean_resource_interval`
//! (at once when woken by a manual request), with the store's clock and disk-usage probe. The rules are in
//! `store/clean.rs`.

use std::sync::Arc;
use std::time::Duration;

use super::{run_every, ServiceThread};
use crate::error::Result;
use crate::store::MessageStore;

/// The service's name in `service_stats`.
pub const NAME: &str = "clean";

/// Starts the cleanup service on `store`.
pub fn spawn(store: &Arc<MessageStore>) -> Result<()> {
    let weak = Arc::downgrade(store);
    let svc = ServiceThread::new(NAME);
    let delay = Duration::from_millis(store.config.timing.clean_initial_delay_ms);
    store.services().spawn(svc, move |svc: &ServiceThread| {
        // RocketMQ schedules the first run 60 s after start; a manual request wakes it earlier.
        let first = std::cell::Cell::new(true);
        run_every(
            weak,
            svc,
            move |s| {
                if first.replace(false) {
                    delay
                } else {
                    Duration::from_millis(s.config.clean.clean_resource_interval)
                }
            },
            |s, svc| {
                let time = s.clean_time();
                let pause = |d: Duration| {
                    // A stop request ends the pause (and the round soon after) instead of waiting it out.
                    let _ = svc.wait_for_running(d);
                };
                s.clean_round(time, &|p| s.clean_usage(p), &pause, false).map(|_| ())
            },
        );
    })
}
