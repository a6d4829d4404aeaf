//! The store's background services, owned by the store (RocketMQ's `ServiceThread` subclasses): reput,
//! flush, group commit, commit, clean, warm, schedule. One start ([`MessageStore::start_services`]), one shutdown
//! ([`MessageStore::close`], or [`MessageStore::stop_services`]), each observable ([`MessageStore::service_stats`]).
//!
//! A service is a [`ServiceThread`] (its wake-up signal, stop flag and counters) plus a loop body run on
//! its own OS thread with no Python lock held. The loop holds only a `Weak` reference to the store between
//! rounds, so a store nobody else holds is dropped (and closed) even while its services run.
//!
//! To add a service: write `services/<name>.rs` with a `spawn(store: &Arc<MessageStore>) -> Result<()>`
//! that calls [`Services::spawn`] with a loop (usually [`run_every`]), and call it from
//! [`MessageStore::start_services`].

pub mod clean;
pub mod commit;
pub mod flush;
pub mod group_commit;
pub mod reput;
pub mod schedule;
pub mod warm;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::store::MessageStore;

/// One service's signal and counters (RocketMQ's `ServiceThread`: `wakeup`, `waitForRunning`, `shutdown`).
#[derive(Debug)]
pub struct ServiceThread {
    name: &'static str,
    /// Mirrors `Signal::notified` (written under the lock): a wake-up while one is already pending costs one
    /// atomic load (RocketMQ's `hasNotified.compareAndSet`), so a put that wakes a busy service pays no lock.
    pending: AtomicBool,
    signal: Mutex<Signal>,
    cv: Condvar,
    running: AtomicBool,
    rounds: AtomicU64,
    work: AtomicU64,
    errors: AtomicU64,
    last_error: Mutex<Option<String>>,
}

#[derive(Debug, Default)]
struct Signal {
    /// A wake-up arrived since the last wait (RocketMQ's `hasNotified`): the next wait returns at once.
    notified: bool,
    stopped: bool,
    /// The thread is blocked in `wait_for_running`: only then does a wake-up need the condvar (a futex
    /// syscall); a thread busy with a round finds `notified` set when it next waits. Puts wake the reput
    /// service on every call, so this keeps a syscall off most puts.
    waiting: bool,
}

impl ServiceThread {
    pub(crate) fn new(name: &'static str) -> Arc<Self> {
        Arc::new(Self {
            name,
            pending: AtomicBool::new(false),
            signal: Mutex::new(Signal::default()),
            cv: Condvar::new(),
            running: AtomicBool::new(false),
            rounds: AtomicU64::new(0),
            work: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            last_error: Mutex::new(None),
        })
    }

    /// The service's name (`reput`, `flush`, ...).
    pub fn name(&self) -> &'static str {
        self.name
    }

    fn signal(&self) -> std::sync::MutexGuard<'_, Signal> {
        self.signal.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes the current or next [`wait_for_running`](Self::wait_for_running) return at once.
    pub fn wakeup(&self) {
        // With the fence in `wait_for_running`: either this sees the pending flag still set and the woken round,
        // which clears it, sees what the caller wrote before this call, or this sees it clear and signals.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.pending.load(Ordering::SeqCst) {
            return;
        }
        let mut s = self.signal();
        if !s.notified {
            s.notified = true;
            self.pending.store(true, Ordering::SeqCst);
            if s.waiting {
                self.cv.notify_all();
            }
        }
    }

    /// Waits until woken or `interval` passes, whichever comes first; a wake-up that arrived since the last
    /// wait returns at once. Returns false once the service is stopped (the loop should end).
    pub fn wait_for_running(&self, interval: Duration) -> bool {
        let mut s = self.signal();
        if !s.notified && !s.stopped {
            s.waiting = true;
            s = self
                .cv
                .wait_timeout_while(s, interval, |s| !s.notified && !s.stopped)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            s.waiting = false;
        }
        s.notified = false;
        self.pending.store(false, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
        !s.stopped
    }

    /// Sleeps `interval` out, ignoring wake-ups (RocketMQ's `Thread.sleep` under `flushCommitLogTimed`); only
    /// a stop ends it early. Returns false once the service is stopped.
    pub fn sleep(&self, interval: Duration) -> bool {
        let s = self.signal();
        let s = self.cv.wait_timeout_while(s, interval, |s| !s.stopped).unwrap_or_else(|p| p.into_inner()).0;
        !s.stopped
    }

    /// Whether a stop was requested.
    pub fn is_stopped(&self) -> bool {
        self.signal().stopped
    }

    fn stop(&self) {
        let mut s = self.signal();
        s.stopped = true;
        self.cv.notify_all();
    }

    /// Counts one round of work.
    pub(crate) fn count_round(&self) {
        self.rounds.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts units of work done (records dispatched, bytes flushed, ...: each service says which).
    pub(crate) fn count_work(&self, n: u64) {
        self.work.fetch_add(n, Ordering::Relaxed);
    }

    /// Records a failed round (the service keeps running and retries on its schedule, as RocketMQ's do).
    pub(crate) fn record_error(&self, e: &Error) {
        // The message first: whoever sees the count go up finds the error it counts.
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
        self.errors.fetch_add(1, Ordering::Release);
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> ServiceStats {
        ServiceStats {
            name: self.name,
            running: self.running.load(Ordering::Acquire),
            rounds: self.rounds.load(Ordering::Relaxed),
            work: self.work.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Acquire),
            last_error: self.last_error.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        }
    }
}

/// What one service has done, for observation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceStats {
    pub name: &'static str,
    /// Whether its thread is alive.
    pub running: bool,
    /// Rounds of work done.
    pub rounds: u64,
    /// Units of work done: records dispatched (`reput`), bytes flushed (`flush`, `flush_cq`), bytes warmed
    /// (`warm`).
    pub work: u64,
    /// Rounds that failed.
    pub errors: u64,
    /// The last failure's message.
    pub last_error: Option<String>,
}

/// The store's running services.
#[derive(Debug, Default)]
pub struct Services {
    started: AtomicBool,
    /// `shutdown` ran: no service starts after it (set under the `threads` lock, which `spawn` holds).
    shut: AtomicBool,
    threads: Mutex<Vec<Running>>,
    /// The reput service, woken by every put without a look-up.
    reput: std::sync::OnceLock<Arc<ServiceThread>>,
}

/// A started service and its thread (taken when joined).
type Running = (Arc<ServiceThread>, Option<JoinHandle<()>>);

impl Services {
    fn threads(&self) -> std::sync::MutexGuard<'_, Vec<Running>> {
        self.threads.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts `body(&service)` on a thread named `rmq-<name>`. The body runs until
    /// `service.wait_for_running` returns false.
    pub(crate) fn spawn(
        &self,
        service: Arc<ServiceThread>,
        body: impl FnOnce(&ServiceThread) + Send + 'static,
    ) -> Result<()> {
        // Held until the service is listed: a `close` racing `start_services` either stops it or refuses it.
        let mut threads = self.threads();
        if self.shut.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        let svc = service.clone();
        svc.running.store(true, Ordering::Release);
        let handle = std::thread::Builder::new()
            .name(format!("rmq-{}", service.name))
            .spawn(move || {
                struct Done<'a>(&'a ServiceThread);
                impl Drop for Done<'_> {
                    fn drop(&mut self) {
                        self.0.running.store(false, Ordering::Release);
                    }
                }
                let _done = Done(&svc);
                body(&svc);
            })
            .map_err(|e| {
                service.running.store(false, Ordering::Release);
                Error::Io { path: format!("thread rmq-{}", service.name).into(), source: e }
            })?;
        if service.name == reput::NAME {
            let _ = self.reput.set(service.clone());
        }
        threads.push((service, Some(handle)));
        Ok(())
    }

    /// The service named `name`, if it was started.
    pub(crate) fn get(&self, name: &str) -> Option<Arc<ServiceThread>> {
        self.threads().iter().find(|(s, _)| s.name == name).map(|(s, _)| s.clone())
    }

    /// Wakes the service named `name`, if it runs.
    pub(crate) fn wakeup(&self, name: &str) {
        if name == reput::NAME {
            if let Some(s) = self.reput.get() {
                s.wakeup(); // a stopped service ignores it
            }
        } else if let Some(s) = self.get(name) {
            s.wakeup();
        }
    }

    /// Stops every service, newest first, and waits for each thread (except the calling one, when a service
    /// itself drops the last reference to the store). Idempotent.
    pub(crate) fn shutdown(&self) {
        let threads: Vec<_> = {
            let mut threads = self.threads();
            self.shut.store(true, Ordering::Release);
            std::mem::take(&mut *threads)
        };
        let me = std::thread::current().id();
        for (svc, handle) in threads.into_iter().rev() {
            svc.stop();
            if let Some(h) = handle {
                if h.thread().id() != me {
                    let _ = h.join();
                }
            }
        }
    }

    /// Counters of every service started, in start order.
    pub(crate) fn stats(&self) -> Vec<ServiceStats> {
        self.threads().iter().map(|(s, _)| s.stats()).collect()
    }
}

/// The usual service loop: every `interval(store)` (or at once when woken), runs `round` on the store,
/// counting rounds and recording errors, until stopped or the store is gone or closed.
pub(crate) fn run_every(
    store: Weak<MessageStore>,
    svc: &ServiceThread,
    interval: impl Fn(&MessageStore) -> Duration,
    mut round: impl FnMut(&MessageStore, &ServiceThread) -> Result<()>,
) {
    let mut wait = match store.upgrade() {
        Some(s) => interval(&s),
        None => return,
    };
    while svc.wait_for_running(wait) {
        let Some(s) = store.upgrade() else { return };
        if s.is_closed() {
            return;
        }
        match round(&s, svc) {
            Ok(()) => svc.count_round(),
            Err(e) => svc.record_error(&e),
        }
        wait = interval(&s);
    }
}

impl MessageStore {
    /// Starts the store's background services (once; later calls do nothing). A read-only store runs none.
    pub fn start_services(self: &Arc<Self>) -> Result<()> {
        self.check_writable()?;
        if self.services.started.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        reput::spawn(self)?;
        warm::spawn(self)?;
        flush::spawn(self)?;
        group_commit::spawn(self)?;
        commit::spawn(self)?;
        clean::spawn(self)?;
        schedule::spawn(self)?;
        Ok(())
    }

    /// Stops the background services and waits for them. `close` does this first.
    pub fn stop_services(&self) {
        self.services.shutdown();
    }

    /// Counters of the running services.
    pub fn service_stats(&self) -> Vec<ServiceStats> {
        self.services.stats()
    }

    /// The services, for services to wake each other.
    pub(crate) fn services(&self) -> &Services {
        &self.services
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn no_service_starts_after_the_shutdown() {
        // `start_services` racing `close`: a service spawned after `shutdown` took the list was never stopped.
        let services = Services::default();
        services.spawn(ServiceThread::new("first"), |s| while s.wait_for_running(Duration::from_secs(30)) {}).unwrap();
        services.shutdown();
        let late = ServiceThread::new("late");
        let refused = services.spawn(late.clone(), |s| while s.wait_for_running(Duration::from_secs(30)) {});
        assert!(matches!(refused, Err(Error::Closed)), "{refused:?}");
        assert!(services.stats().is_empty() && !late.running.load(Ordering::Acquire));
    }

    #[test]
    fn a_wakeup_before_the_wait_is_not_lost_and_stop_ends_the_loop() {
        let svc = ServiceThread::new("t");
        svc.wakeup();
        let t = Instant::now();
        assert!(svc.wait_for_running(Duration::from_secs(30)));
        assert!(t.elapsed() < Duration::from_secs(10), "the earlier wake-up returns at once");
        let services = Services::default();
        let (tx, rx) = std::sync::mpsc::channel();
        services
            .spawn(svc.clone(), move |s| {
                while s.wait_for_running(Duration::from_secs(30)) {
                    s.count_round();
                    tx.send(()).unwrap();
                }
            })
            .unwrap();
        svc.wakeup();
        rx.recv().unwrap();
        assert_eq!(svc.stats().rounds, 1);
        assert!(services.stats()[0].running);
        services.shutdown();
        assert!(!svc.stats().running, "shutdown joined the thread");
        assert!(svc.is_stopped());
        assert!(!svc.wait_for_running(Duration::from_secs(30)));
    }
}
