//! The store's background services (`src/store/services/`): reput dispatches with nobody calling `dispatch`,
//! long polling wakes on arrival and on close, the page warmer runs as a service, and every service thread
//! ends with `close` or with the last reference to the store.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmq::store::{MessageStore, PutMessage};

mod common;
use common::small_config as config;

/// The tests count this process's threads by name: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const LONG: Duration = Duration::from_secs(60);

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Names of this process's threads that are store services.
fn service_threads() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_owned())
        .filter(|n| n.starts_with("rmq-"))
        .collect();
    names.sort();
    names
}

fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + LONG;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn started(root: &Path) -> Arc<MessageStore> {
    let store = Arc::new(MessageStore::open(root, config()).unwrap());
    store.start_services().unwrap();
    store
}

#[test]
fn reput_dispatches_every_put_without_a_caller() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let store = started(dir.path());
    for i in 0..300 {
        store.put(&PutMessage::new("Svc", i % 3, b"body")).unwrap();
    }
    // Nobody calls dispatch: the service does, woken by the puts.
    eventually("the reput service dispatched every put", || store.reput_offset() == store.confirm_offset());
    for q in 0..3 {
        assert_eq!(store.max_offset_in_queue("Svc", q, true), 100);
    }
    let stats = store.service_stats();
    let reput = stats.iter().find(|s| s.name == "reput").unwrap();
    assert!(reput.running);
    assert_eq!(reput.errors, 0);
    eventually("the counter caught up", || store.service_stats()[0].work == 300);
    store.close().unwrap();
    assert!(store.service_stats().is_empty(), "close stopped every service");
}

#[test]
fn long_polling_wakes_on_arrival_and_on_close() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let store = started(dir.path());
    let waiter = {
        let s = store.clone();
        std::thread::spawn(move || s.wait_queue_beyond("Poll", 1, 0, Duration::from_secs(3600)))
    };
    std::thread::sleep(Duration::from_millis(50));
    store.put(&PutMessage::new("Poll", 1, b"x")).unwrap();
    assert!(waiter.join().unwrap(), "an hour-long wait returned true: the arrival woke it");

    let seen = store.arrival_seq();
    let blocked = {
        let s = store.clone();
        std::thread::spawn(move || {
            (
                s.wait_queue_beyond("Poll", 1, 1, Duration::from_secs(3600)),
                s.wait_arrival(seen, Duration::from_secs(3600)),
            )
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    store.close().unwrap();
    let (beyond, _) = blocked.join().unwrap();
    assert!(!beyond, "close ended the wait with nothing new");
}

#[test]
fn a_wake_up_advances_the_sequence_for_every_waiter() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(MessageStore::open(dir.path(), config()).unwrap());
    let seen = store.arrival_seq();
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let s = store.clone();
            std::thread::spawn(move || s.wait_arrival(seen, Duration::from_secs(3600)))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(50));
    store.wake_arrival_waiters();
    for w in waiters {
        assert_ne!(w.join().unwrap(), seen);
    }
    // Without services nothing dispatches a put, so nothing arrives.
    let now = store.arrival_seq();
    store.put(&PutMessage::new("Quiet", 0, b"x")).unwrap();
    assert_eq!(store.wait_arrival(now, Duration::from_millis(100)), now);
    store.dispatch(10, false).unwrap();
    assert_ne!(store.arrival_seq(), now, "a round that adds entries is an arrival");
}

#[test]
fn close_and_drop_stop_every_service_thread() {
    let _g = serial();
    // The stores of the tests before are closed or dropped, but a dropped store's services end on their own
    // threads' time: wait for them, or a thread still ending would count as one this test's close left.
    eventually("earlier tests' services end", || service_threads().is_empty());
    let before = service_threads();
    let dir = tempfile::tempdir().unwrap();
    let store = started(&dir.path().join("a"));
    // A new thread names itself once it runs: wait for the names, not only for the threads.
    eventually("the services run", || {
        let names = service_threads();
        names.contains(&"rmq-reput".to_owned()) && names.contains(&"rmq-warm".to_owned())
    });
    store.close().unwrap();
    assert_eq!(service_threads(), before, "close joined the services");
    drop(store);

    let store = started(&dir.path().join("b"));
    store.put(&PutMessage::new("Drop", 0, b"x")).unwrap();
    eventually("the services run", || service_threads().len() >= before.len() + 2);
    let weak = Arc::downgrade(&store);
    drop(store);
    // A round in progress holds the store until it ends; between rounds the services hold only a weak reference.
    eventually("the store is dropped", || weak.upgrade().is_none());
    eventually("a dropped store's services end", || service_threads() == before);
    let again = MessageStore::open(&dir.path().join("b"), config()).unwrap();
    assert!(!again.unclean_shutdown(), "the drop closed the store");
    assert_eq!(again.max_offset_in_queue("Drop", 0, true), 1);
}

#[test]
fn the_warm_service_faults_in_pages_ahead_of_the_writes() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config();
    cfg.commit_log.mapped_file_size_commit_log = 64 * 1024 * 1024;
    let store = Arc::new(MessageStore::open(dir.path(), cfg).unwrap());
    store.start_services().unwrap();
    store.put(&PutMessage::new("Warm", 0, b"x")).unwrap();
    eventually("the warmer ran", || {
        store.service_stats().iter().any(|s| s.name == "warm" && s.work >= 32 * 1024 * 1024 - 4096)
    });
    assert!(!store.commitlog().warm_wanted());
    store.close().unwrap();
}

/// Page faults the calling thread has taken (minor and major).
#[allow(unsafe_code)]
fn thread_faults() -> i64 {
    // SAFETY: getrusage writes one rusage into the zeroed struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_THREAD with a pointer to a live, writable rusage.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) }, 0);
    ru.ru_minflt + ru.ru_majflt
}

#[test]
fn the_warm_service_warms_a_new_segment_before_the_puts_reach_its_pages() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config();
    // Smaller than the warm distance: the warm round that reaches the end of the first segment finds no next one.
    cfg.commit_log.mapped_file_size_commit_log = 8 * 1024 * 1024;
    let store = Arc::new(MessageStore::open(dir.path(), cfg).unwrap());
    store.start_services().unwrap();
    let body = vec![b'w'; 60 * 1024];
    let put = || store.put(&PutMessage::new("Warm", 0, &body)).unwrap();
    while store.commitlog().max_offset() < 8 * 1024 * 1024 {
        put();
        eventually("the warmer is idle", || !store.commitlog().warm_wanted());
    }
    eventually("the warmer is idle", || !store.commitlog().warm_wanted());
    // 2 MiB into the new segment, from this thread: its pages were faulted in by the warm service.
    let before = thread_faults();
    for _ in 0..32 {
        put();
    }
    let faults = thread_faults() - before;
    assert!(faults < 8, "the puts into the new segment took {faults} page faults themselves");
    store.close().unwrap();
}

#[test]
fn the_warm_service_makes_the_next_segment_before_the_writer_rolls_into_it() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config();
    let size = 8 * 1024 * 1024;
    cfg.commit_log.mapped_file_size_commit_log = size;
    let store = Arc::new(MessageStore::open(dir.path(), cfg.clone()).unwrap());
    store.start_services().unwrap();
    let body = vec![b'n'; 60 * 1024];
    let put = || store.put(&PutMessage::new("Ahead", 0, &body)).unwrap();
    put();
    let segments = || {
        let mut names: Vec<_> = std::fs::read_dir(dir.path().join("commitlog"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    };
    // The warm distance (32 MiB) reaches past the first segment: the next one is made, only that one.
    eventually("the warmer is idle", || !store.commitlog().warm_wanted());
    assert_eq!(segments(), [rmq::file_queue::file_name(0), rmq::file_queue::file_name(size)]);
    let next = std::fs::read(dir.path().join("commitlog").join(rmq::file_queue::file_name(size))).unwrap();
    assert_eq!(next.len() as u64, size);
    assert!(next.iter().all(|&b| b == 0), "the segment made ahead holds nothing");
    while store.commitlog().max_offset() + 2 * body.len() as u64 + 1024 < size {
        put();
    }
    eventually("the warmer is idle", || !store.commitlog().warm_wanted());
    // The roll and 2 MiB into the new segment, from this thread: no file made under the put lock, its pages
    // faulted in by the warm service.
    let before = thread_faults();
    for _ in 0..40 {
        put();
    }
    let faults = thread_faults() - before;
    assert!(store.commitlog().max_offset() > size + 2 * 1024 * 1024, "the puts rolled into the next segment");
    assert!(faults < 8, "the puts across the roll took {faults} page faults themselves");
    eventually("the warmer is idle", || !store.commitlog().warm_wanted());
    assert_eq!(segments().len(), 3, "the segment after the new one was made ahead");
    // A close removes the segment that holds nothing; the store reopens with every message and nothing cut.
    assert!(store.wait_dispatched(Duration::from_secs(30)));
    let count = store.max_offset_in_queue("Ahead", 0, true);
    store.close().unwrap();
    drop(store);
    assert_eq!(segments(), [rmq::file_queue::file_name(0), rmq::file_queue::file_name(size)]);
    let again = MessageStore::open(dir.path(), cfg).unwrap();
    assert!(!again.unclean_shutdown());
    assert_eq!(again.open_report().removed_files, 0);
    assert_eq!(again.max_offset_in_queue("Ahead", 0, true), count);
    again.close().unwrap();
}

/// A config whose flush services run every few ms (thorough rounds only when a test says).
fn fast_flush(root_cfg: rmq::config::StoreConfig) -> rmq::config::StoreConfig {
    let mut c = root_cfg;
    c.flush.flush_interval_commit_log = 10;
    c.flush.flush_commit_log_timed = false;
    c.flush.flush_interval_consume_queue = 10;
    c
}

fn flush_stats(store: &MessageStore, name: &str) -> rmq::store::services::ServiceStats {
    store.service_stats().into_iter().find(|s| s.name == name).unwrap()
}

#[test]
fn async_flush_reaches_the_written_offset_without_a_flush_call() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = fast_flush(config());
    cfg.commit_log.mapped_file_size_commit_log = 1 << 20;
    let store = Arc::new(MessageStore::open(dir.path(), cfg).unwrap());
    store.start_services().unwrap();
    let body = vec![7u8; 4096];
    for _ in 0..5 {
        store.put(&PutMessage::new("Flush", 0, &body)).unwrap(); // > 4 pages: the least-pages round takes them
    }
    let end = store.max_offset_in_queue("Flush", 0, false);
    assert_eq!(end, 5);
    eventually("the flush service flushed every byte", || store.flushed_offset() == store.commitlog().max_offset());
    assert_eq!(store.committed_offset(), store.commitlog().max_offset());
    assert!(flush_stats(&store, "flush").work >= 5 * 4096);
    // The checkpoint follows, written by the consume-queue service: physicMsgTimestamp is the last flushed
    // message's store time, and the file on disk says so.
    eventually("the checkpoint file holds the flush", || {
        let on_disk = rmq::checkpoint::StoreCheckpoint::open_read_only(dir.path()).unwrap().values();
        on_disk.physic_msg_timestamp > 0 && on_disk.physic_msg_timestamp == store.flushed_timestamp()
    });
    store.close().unwrap();
}

#[test]
fn least_pages_hold_a_small_write_until_the_thorough_round() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config();
    cfg.commit_log.mapped_file_size_commit_log = 1 << 20;
    let store = MessageStore::open(dir.path(), cfg).unwrap();
    use rmq::store::services::flush::{commitlog_round, Schedule};
    let t0 = Instant::now();
    let mut schedule = Schedule::new(t0);
    let base = store.flushed_offset();
    store.put(&PutMessage::new("Least", 0, &[1u8; 1000])).unwrap(); // one page
    for ms in [0u64, 500, 1000, 9_000] {
        assert_eq!(commitlog_round(&store, &mut schedule, t0 + Duration::from_millis(ms)).unwrap(), 0);
        assert_eq!(store.flushed_offset(), base, "fewer than 4 new pages wait for the thorough round");
    }
    assert_eq!(store.flushed_timestamp(), 0);
    // Past 4 pages (counted by page numbers, as RocketMQ counts): the next ordinary round flushes.
    let before = store.commitlog().max_offset();
    for _ in 0..4 {
        store.put(&PutMessage::new("Least", 0, &[2u8; 4096])).unwrap();
    }
    let end = store.commitlog().max_offset();
    assert!(end / 4096 - base / 4096 >= 4 && before < end);
    assert_eq!(commitlog_round(&store, &mut schedule, t0 + Duration::from_millis(9_500)).unwrap(), end - base);
    assert_eq!(store.flushed_offset(), end);
    assert!(store.flushed_timestamp() > 0);
    // One more small write: only the thorough round (10 s after the start) takes it.
    store.put(&PutMessage::new("Least", 0, b"small")).unwrap();
    assert_eq!(commitlog_round(&store, &mut schedule, t0 + Duration::from_millis(9_999)).unwrap(), 0);
    assert!(commitlog_round(&store, &mut schedule, t0 + Duration::from_millis(10_000)).unwrap() > 0);
    assert_eq!(store.flushed_offset(), store.commitlog().max_offset());
    store.close().unwrap();
}

#[test]
fn a_full_segment_is_flushed_by_an_ordinary_round() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(dir.path(), config()).unwrap(); // one-page segments
    use rmq::store::services::flush::{commitlog_round, Schedule};
    let t0 = Instant::now();
    let mut schedule = Schedule::new(t0);
    let seg = store.commitlog().file_size();
    while store.commitlog().max_offset() < seg + 10 {
        store.put(&PutMessage::new("Roll", 0, &[3u8; 3000])).unwrap();
    }
    // The first segment is full (ended by its blank); the second holds one page: only the first is flushed.
    commitlog_round(&store, &mut schedule, t0).unwrap();
    assert_eq!(store.flushed_offset(), seg);
    store.close().unwrap();
}

#[test]
fn the_consume_queue_round_claims_logics_time_only_when_every_entry_is_flushed() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config();
    cfg.commit_log.mapped_file_size_commit_log = 1 << 20;
    cfg.consume_queue.mapped_file_size_consume_queue = 20 * 1000; // 1000 entries: files far from full
    let store = MessageStore::open(dir.path(), cfg).unwrap();
    use rmq::store::services::flush::{commitlog_round_with, consume_queue_round, Schedule};
    let t0 = Instant::now();
    let mut schedule = Schedule::new(t0);
    for _ in 0..3 {
        store.put(&PutMessage::new("Cq", 0, b"entry")).unwrap();
    }
    store.dispatch(100, false).unwrap();
    let cq = store.consume_queue("Cq", 0).unwrap();
    let base = store.checkpoint();
    // The commitlog first: nothing is claimed before it is flushed.
    consume_queue_round(&store, &mut schedule, t0).unwrap();
    assert_eq!(store.checkpoint().physic_msg_timestamp, base.physic_msg_timestamp);
    commitlog_round_with(&store, 0).unwrap();
    let physic = store.flushed_timestamp();
    assert!(physic > 0);
    // Three entries (60 bytes) are fewer than 2 pages: the queue waits, so logicsMsgTimestamp does not move.
    consume_queue_round(&store, &mut schedule, t0 + Duration::from_secs(1)).unwrap();
    let cp = store.checkpoint();
    assert_eq!(cp.physic_msg_timestamp, physic, "the checkpoint takes the commitlog's flushed time");
    assert_eq!(cp.logics_msg_timestamp, base.logics_msg_timestamp);
    assert_eq!(cq.flushed_offset(), 0);
    // The thorough round (60 s) flushes every entry and claims the dispatch time.
    assert_eq!(consume_queue_round(&store, &mut schedule, t0 + Duration::from_secs(60)).unwrap(), 60);
    assert_eq!(cq.flushed_offset(), 60);
    let cp = store.checkpoint();
    assert!(cp.logics_msg_timestamp > 0 && cp.logics_msg_timestamp <= cp.physic_msg_timestamp, "{cp:?}");
    let on_disk = rmq::checkpoint::StoreCheckpoint::open_read_only(dir.path()).unwrap().values();
    assert_eq!(on_disk, cp, "the round wrote the file");
    store.close().unwrap();
}
