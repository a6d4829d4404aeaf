//! Expired-file cleanup (spec §14) on real stores, driven through the round function's clock and disk-usage
//! seams: the time, space and manual rules, oldest first and never the active segment, the batch cap and the
//! pauses, consume queues and the index following the new minimum, readers behind it, views outliving the
//! deletion, reopening a cleaned store (clean and crashed), and the service loop writing for a while.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rmq::config::StoreConfig;
use rmq::message::PutMessageStatus;
use rmq::store::clean::{CleanReport, CleanTime};
use rmq::store::get::{GetMessageStatus as S, Subscription, MAX_PULL_SIZE};
use rmq::store::{MessageStore, PutMessage};
use rmq::Error;

mod common;
use common::{copy_dir, small_config, SEG};

const HOUR: i64 = 3_600_000;
const QUEUES: i32 = 3;

fn config() -> StoreConfig {
    let mut c = small_config();
    c.clean.delete_commit_log_files_interval = 0;
    c.clean.delete_consume_queue_files_interval = 0;
    c
}

fn dispatch_all(store: &MessageStore) {
    while store.dispatch(u64::MAX, false).unwrap().records > 0 {}
}

/// Puts `n` messages of 150 bytes round-robin over `QUEUES` queues of TopicA, dispatched; returns their offsets.
fn fill(store: &MessageStore, n: usize) -> Vec<u64> {
    let body = vec![b'r'; 150];
    let out = (0..n)
        .map(|i| {
            let mut m = PutMessage::new("TopicA", i as i32 % QUEUES, &body);
            let key = format!("k{i}");
            m.keys = Some(&key);
            store.put(&m).unwrap().offsets[0]
        })
        .collect();
    dispatch_all(store);
    out
}

fn segments(store: &MessageStore) -> Vec<PathBuf> {
    store.commitlog().queue().files().iter().map(|f| f.path().to_owned()).collect()
}

fn set_mtime(path: &Path, ms: i64) {
    let t = SystemTime::UNIX_EPOCH + Duration::from_millis(ms as u64);
    std::fs::File::options().write(true).open(path).unwrap().set_modified(t).unwrap();
}

fn mtime(path: &Path) -> i64 {
    let m = std::fs::metadata(path).unwrap().modified().unwrap();
    m.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// A round at local hour `hour` and time `now`, the disk `ratio` full, no pauses.
fn round(store: &MessageStore, now: i64, hour: i32, ratio: f64) -> CleanReport {
    store.clean_round(CleanTime { now_ms: now, local_hour: hour }, &|_| ratio, &|_| {}, false).unwrap()
}

/// Every message from each queue's min offset to its max reads back FOUND with its queue offset, and the
/// min offset's record is at or after the commitlog's min offset.
fn assert_queues_readable(store: &MessageStore) {
    let log_min = store.commitlog().min_offset() as i64;
    for q in 0..QUEUES {
        let (min, max) = (store.min_offset_in_queue("TopicA", q), store.max_offset_in_queue("TopicA", q, true));
        assert!(min < max, "queue {q} kept its newest message");
        assert!(store.commitlog_offset_in_queue("TopicA", q, min) >= log_min, "queue {q} min follows the log");
        let mut next = min;
        while next < max {
            let r = store.get_message("G", "TopicA", q, next, 32, MAX_PULL_SIZE, &Subscription::all()).unwrap();
            assert_eq!(r.status, S::Found, "queue {q} offset {next}");
            assert_eq!(r.queue_offsets[0], next);
            for (m, qo) in r.messages.iter().zip(&r.queue_offsets) {
                assert_eq!((m.header.queue_id, m.header.queue_offset), (q, *qo));
            }
            next = r.next_begin_offset;
        }
    }
}

#[test]
fn time_rule_deletes_expired_segments_oldest_first_and_stops_at_the_first_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let store = MessageStore::open(tmp.path(), config()).unwrap();
    fill(&store, 150);
    let segs = segments(&store);
    assert!(segs.len() >= 6, "{} segments", segs.len());
    let now = mtime(&segs[0]) + 1000;
    // Segments 0, 1 and 3 are past the 72 h; segment 2 is not.
    for (i, p) in segs.iter().enumerate() {
        set_mtime(p, if i == 2 { now - HOUR } else { now - 73 * HOUR });
    }
    // Not the hour, disk nearly empty, no manual request: nothing.
    let r = round(&store, now, 3, 0.10);
    assert_eq!((r.commitlog.len(), r.reasons.time || r.reasons.space || r.reasons.manual), (0, false));
    // At 04 (deleteWhen), oldest first, and never past segment 2 although segment 3 is expired too.
    let r = round(&store, now, 4, 0.10);
    assert_eq!(r.commitlog, segs[..2]);
    assert!(r.reasons.time && !r.reasons.space);
    assert!(!segs[0].exists() && !segs[1].exists() && segs[2].exists());
    assert_eq!(store.commitlog().min_offset(), 2 * SEG);
    assert_eq!(r.min_offset, 2 * SEG);
    // Consume queues and the index followed the new minimum.
    assert!(!r.consume_queue.is_empty() && r.consume_queue.iter().all(|p| !p.exists()));
    assert!(!r.index.is_empty());
    assert_queues_readable(&store);
    for q in 0..QUEUES {
        assert!(store.min_offset_in_queue("TopicA", q) > 0, "queue {q} min moved");
    }
    // Once segment 2 expires, everything up to the active segment goes, never the active one.
    for p in &segs {
        if p.exists() {
            set_mtime(p, now - 100 * HOUR);
        }
    }
    let r = round(&store, now, 4, 0.10);
    assert_eq!(r.commitlog, segs[2..segs.len() - 1]);
    assert_eq!(segments(&store), segs[segs.len() - 1..]);
    assert_eq!(round(&store, now, 4, 0.10).commitlog, Vec::<PathBuf>::new(), "the active segment stays");
    assert_queues_readable(&store);
}

#[test]
fn delete_when_lists_hours_and_bad_values_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = config();
    c.clean.delete_when = "02;17".into();
    let store = MessageStore::open(tmp.path(), c.clone()).unwrap();
    fill(&store, 60);
    let segs = segments(&store);
    let now = mtime(&segs[0]) + 80 * HOUR;
    assert!(round(&store, now, 4, 0.1).commitlog.is_empty());
    assert_eq!(round(&store, now, 17, 0.1).commitlog, segs[..segs.len() - 1]);
    store.close().unwrap();
    for bad in ["4;x", "", "04;"] {
        c.clean.delete_when = bad.into();
        let err = MessageStore::open(tmp.path(), c.clone()).unwrap_err();
        assert!(matches!(err, Error::InvalidConfig(_)), "{bad:?}: {err}");
    }
}

#[test]
fn batch_cap_and_pauses_between_deletions() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = config();
    c.clean.delete_file_batch_max = 3;
    c.clean.delete_commit_log_files_interval = 100;
    let store = MessageStore::open(tmp.path(), c).unwrap();
    fill(&store, 200);
    let segs = segments(&store);
    assert!(segs.len() > 6);
    let now = mtime(&segs[segs.len() - 1]) + 73 * HOUR;
    let pauses = AtomicUsize::new(0);
    let pause = |d: Duration| {
        assert_eq!(d, Duration::from_millis(100));
        pauses.fetch_add(1, Ordering::Relaxed);
    };
    let t = CleanTime { now_ms: now, local_hour: 4 };
    let r = store.clean_round(t, &|_| 0.1, &pause, false).unwrap();
    assert_eq!(r.commitlog, segs[..3], "deleteFileBatchMax");
    assert_eq!(pauses.load(Ordering::Relaxed), 2, "a pause between two deletions, none after the last of the batch");
}

#[test]
fn space_rules_with_a_probe() {
    let tmp = tempfile::tempdir().unwrap();
    let store = MessageStore::open(tmp.path(), config()).unwrap();
    fill(&store, 200);
    let segs = segments(&store);
    let now = mtime(&segs[0]) + 1000; // nothing is expired
                                      // Under max-used (75 %) at 03: no reason to run.
    assert!(!round(&store, now, 3, 0.70).reasons.space);
    // Over max-used: runs, but only expired segments go (none).
    let r = round(&store, now, 3, 0.80);
    assert!(r.reasons.space && !r.reasons.immediately && r.commitlog.is_empty());
    // Over the forced-cleaning ratio (85 %): segments go at once, expired or not; puts still work.
    let mut c = config();
    c.clean.delete_file_batch_max = 1;
    drop(store);
    let store = MessageStore::open(tmp.path(), c).unwrap();
    let r = round(&store, now, 3, 0.86);
    assert!(r.reasons.immediately && !store.is_disk_full());
    assert_eq!(r.commitlog, segs[..1]);
    store.put(&PutMessage::new("TopicA", 0, b"ok")).unwrap();
    // Over the warning ratio (90 %): the DISK_FULL flag refuses puts, and cleaning is immediate.
    let r = round(&store, now, 3, 0.91);
    assert_eq!(r.commitlog, segs[1..2]);
    assert!(store.is_disk_full());
    let err = store.put(&PutMessage::new("TopicA", 0, b"refused")).unwrap_err();
    assert!(matches!(err, Error::DiskSpaceWarning { used_percent: 91, warning_percent: 90, .. }), "{err}");
    assert_eq!(err.put_status(), Some(PutMessageStatus::ServiceNotAvailable));
    let before = store.commitlog().max_offset();
    let batch = store.put_batch("TopicA", 0, &[], 0, "127.0.0.1:1".parse().unwrap(), None, 0, true);
    assert!(matches!(batch, Err(Error::DiskSpaceWarning { .. })));
    assert_eq!(store.commitlog().max_offset(), before, "nothing written");
    // Back under the forced ratio: the flag clears and puts work again.
    round(&store, now, 3, 0.50);
    assert!(!store.is_disk_full());
    store.put(&PutMessage::new("TopicA", 0, b"again")).unwrap();
    // The consume-queue directory's disk counts too.
    let cq_dir = tmp.path().join("consumequeue");
    let r = store
        .clean_round(
            CleanTime { now_ms: now, local_hour: 3 },
            &|p| if p == cq_dir { 0.95 } else { 0.1 },
            &|_| {},
            false,
        )
        .unwrap();
    assert!(store.is_disk_full() && r.reasons.immediately);
    // Unknown usage (-1) is a reason to delete expired segments, not to delete at once.
    let r = round(&store, now, 3, -1.0);
    assert!(r.reasons.space && !r.reasons.immediately && r.commitlog.is_empty() && !store.is_disk_full());
}

#[test]
fn ratios_are_clamped_and_forced_cleaning_can_be_disabled() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = config();
    c.clean.disk_space_warning_level_ratio = 99; // clamped to 90
    c.clean.disk_space_clean_forcibly_ratio = 10; // clamped to 30
    c.clean.disk_max_used_space_ratio = 100; // clamped to 95
    c.clean.clean_file_forcibly_enable = false;
    let store = MessageStore::open(tmp.path(), c).unwrap();
    fill(&store, 60);
    let now = mtime(&segments(&store)[0]) + 1000;
    let r = round(&store, now, 3, 0.31);
    assert!(r.reasons.immediately, "over the clamped forced ratio");
    assert!(r.commitlog.is_empty(), "clean_file_forcibly_enable = false: only expired segments go");
    round(&store, now, 3, 0.91);
    assert!(store.is_disk_full(), "over the clamped warning ratio");
}

#[test]
fn a_manual_request_is_twenty_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = config();
    c.clean.delete_file_batch_max = 1;
    let store = MessageStore::open(tmp.path(), c).unwrap();
    fill(&store, 600);
    let segs = segments(&store);
    assert!(segs.len() > 22, "{}", segs.len());
    let now = mtime(&segs[segs.len() - 1]) + 73 * HOUR;
    assert!(round(&store, now, 3, 0.1).commitlog.is_empty());
    store.delete_expired_files().unwrap();
    for i in 0..20 {
        let r = round(&store, now, 3, 0.1);
        assert!(r.reasons.manual);
        assert_eq!(r.commitlog, segs[i..=i]);
    }
    assert!(round(&store, now, 3, 0.1).commitlog.is_empty(), "the 21st run is not manual");
    // The direct call is one manual run of its own, with the store's clock (a seam).
    store.set_clean_clock(Some(Arc::new(move || CleanTime { now_ms: now, local_hour: 3 })));
    store.set_clean_usage_probe(Some(Arc::new(|_: &Path| 0.1)));
    let r = store.delete_expired_files_now().unwrap();
    assert_eq!(r.commitlog, segs[20..21]);
    assert_queues_readable(&store);
}

#[test]
fn a_view_taken_before_deletion_keeps_its_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let store = MessageStore::open(tmp.path(), config()).unwrap();
    let offsets = fill(&store, 60);
    let rec = store.read(offsets[1]).unwrap().unwrap();
    let copy = rec.bytes().to_vec();
    let seg0 = segments(&store)[0].clone();
    let now = mtime(&seg0) + 73 * HOUR;
    let r = round(&store, now, 4, 0.1);
    assert_eq!(r.commitlog[0], seg0);
    assert!(!seg0.exists(), "unlinked at once");
    assert_eq!(rec.bytes(), &copy[..], "the view still reads its record");
    // Reads below the new minimum are an answer, not a crash.
    assert!(store.read(offsets[1]).unwrap().is_none());
    let r = store.get_message("G", "TopicA", 1, 0, 32, MAX_PULL_SIZE, &Subscription::all()).unwrap();
    let min = store.min_offset_in_queue("TopicA", 1);
    assert_eq!((r.status, r.next_begin_offset, r.min_offset), (S::OffsetTooSmall, min, min));
}

/// A cleaned store reopens after a clean close and after a crash (a copy taken while open, abort file
/// included), with the same minimum offsets, every remaining message readable, and `check` clean.
#[test]
fn a_cleaned_store_reopens_clean_or_crashed() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("s");
    let store = MessageStore::open(&root, config()).unwrap();
    fill(&store, 300);
    let segs = segments(&store);
    let now = mtime(&segs[segs.len() - 1]) + 73 * HOUR;
    let r = round(&store, now, 4, 0.1);
    assert_eq!(r.commitlog.len(), 10);
    fill(&store, 30);
    let mins: Vec<i64> = (0..QUEUES).map(|q| store.min_offset_in_queue("TopicA", q)).collect();
    let maxs: Vec<i64> = (0..QUEUES).map(|q| store.max_offset_in_queue("TopicA", q, true)).collect();
    store.flush().unwrap();
    let crashed = tmp.path().join("crashed");
    copy_dir(&root, &crashed);
    assert!(crashed.join("abort").exists());
    store.close().unwrap();
    for dir in [&root, &crashed] {
        let report = rmq::store::verify::check(dir, config()).unwrap();
        assert!(report.is_clean(), "{dir:?}: {:?}", report.findings);
        let store = MessageStore::open(dir, config()).unwrap();
        assert_eq!(store.commitlog().min_offset(), 10 * SEG);
        for q in 0..QUEUES {
            assert_eq!(store.min_offset_in_queue("TopicA", q), mins[q as usize], "{dir:?} queue {q}");
            assert_eq!(store.max_offset_in_queue("TopicA", q, true), maxs[q as usize]);
        }
        assert_queues_readable(&store);
        // And it goes on: writes, and cleans again.
        fill(&store, 30);
        assert!(!round(&store, now + HOUR, 4, 0.1).commitlog.is_empty());
        assert_queues_readable(&store);
        store.close().unwrap();
    }
}

#[test]
fn read_only_stores_do_not_clean() {
    let tmp = tempfile::tempdir().unwrap();
    MessageStore::open(tmp.path(), config()).unwrap().close().unwrap();
    let opts = rmq::store::open::OpenOptions { read_only: true, ..Default::default() };
    let store = MessageStore::open_with(tmp.path(), config(), &opts).unwrap();
    assert!(matches!(store.delete_expired_files(), Err(Error::ReadOnly(_))));
    assert!(matches!(store.delete_expired_files_now(), Err(Error::ReadOnly(_))));
}

/// The service writing for a while (`RMQ_RETENTION_SEGMENTS` segments of 64 KiB; `make retention` runs a
/// longer one): with a clock 72 h minus 2 s ahead, segments untouched for 2 s are expired, so the store keeps
/// a bounded number while it grows by hundreds, and every remaining message stays readable.
#[test]
fn the_service_keeps_a_bounded_store_while_writing() {
    let total: usize = std::env::var("RMQ_RETENTION_SEGMENTS").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
    let tmp = tempfile::tempdir().unwrap();
    let mut c = config();
    c.commit_log.mapped_file_size_commit_log = 64 * 1024;
    c.consume_queue.mapped_file_size_consume_queue = 20 * 200;
    c.index.max_hash_slot_num = 512;
    c.index.max_index_num = 2048;
    c.timing.clean_initial_delay_ms = 0;
    c.clean.clean_resource_interval = 100;
    c.clean.delete_when = "99".into(); // never the hour: only the disk probe or expiry through it
    let store = Arc::new(MessageStore::open(tmp.path(), c).unwrap());
    let skew = 72 * HOUR - 2000;
    store.set_clean_clock(Some(Arc::new(move || {
        let mut t = CleanTime::now();
        t.now_ms += skew;
        t
    })));
    // Over max-used: expired segments go at any hour (the time rule is proven elsewhere).
    store.set_clean_usage_probe(Some(Arc::new(|_: &Path| 0.80)));
    store.start_services().unwrap();
    let body = vec![b'b'; 1000];
    let mut most = 0;
    let mut written_segments = 0;
    let mut i = 0usize;
    let started = std::time::Instant::now();
    while written_segments < total {
        let mut m = PutMessage::new("TopicA", i as i32 % QUEUES, &body);
        let key = format!("k{i}");
        m.keys = Some(&key);
        let end_before = store.commitlog().queue().last().map(|f| f.start());
        store.put(&m).unwrap();
        i += 1;
        if store.commitlog().queue().last().map(|f| f.start()) != end_before {
            written_segments += 1;
            dispatch_all(&store);
            most = most.max(store.commitlog().queue().files().len());
            // About 20 segments a second: a segment is expired 2 s after it was filled.
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    dispatch_all(&store);
    let stats = store.service_stats();
    store.stop_services();
    assert!(stats.iter().any(|s| s.name == "clean" && s.rounds > 0 && s.errors == 0), "{stats:?}");
    let (deleted, deleted_cq) = store.deleted_file_counts();
    eprintln!(
        "retention: {total} segments of 64 KiB written in {:.1} s, at most {most} kept, {deleted} deleted, \
         {deleted_cq} consume-queue files deleted",
        started.elapsed().as_secs_f64()
    );
    assert!(most <= total / 3, "kept at most {most} of {total} segments");
    assert!(deleted as usize >= total - total / 3, "deleted {deleted} of {total}");
    assert!(deleted_cq > 0);
    assert!(store.commitlog().min_offset() > 0);
    assert_queues_readable(&store);
}
