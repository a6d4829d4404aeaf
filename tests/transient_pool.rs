//! The transient store pool (`src/commitlog/pool.rs`) and its commit service (`src/store/services/commit.rs`):
//! readers never see uncommitted bytes; the service commits within an interval (least pages, thorough
//! interval); segments roll over with the pool and buffers return to it; close commits and flushes; a process
//! killed mid-commit leaves a store that opens strictly with a prefix of the puts; the pool is ignored where
//! RocketMQ ignores it.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmq::config::{BrokerRole, FlushDiskType, StoreConfig};
use rmq::store::services::commit::CommitClock;
use rmq::store::{MessageStore, PutMessage, PutResult};
use rmq::sync_record;

fn config(segment: u64) -> StoreConfig {
    let mut c = common::small_config();
    c.commit_log.mapped_file_size_commit_log = segment;
    c.transient_pool.transient_store_pool_enable = true;
    c
}

/// A pool whose service commits only when told to (an hour's interval, not woken by puts).
fn idle_service(segment: u64) -> StoreConfig {
    let mut c = config(segment);
    c.transient_pool.commit_interval_commit_log = 3_600_000;
    c.transient_pool.commit_commit_log_thorough_interval = 3_600_000;
    c.transient_pool.wake_commit_when_put_message = false;
    c
}

fn started(root: &Path, cfg: StoreConfig) -> Arc<MessageStore> {
    let store = Arc::new(MessageStore::open(root, cfg).unwrap());
    store.start_services().unwrap();
    store
}

fn put(store: &MessageStore, body: &[u8]) -> PutResult {
    store.put(&PutMessage::new("Pool", 0, body)).unwrap()
}

fn body(i: usize, len: usize) -> Vec<u8> {
    let mut b = format!("pooled {i}:").into_bytes();
    b.resize(len.max(b.len()), b'a' + (i % 26) as u8);
    b
}

/// Every record from the start of the log, in order, as (offset, body).
fn records(store: &MessageStore) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some((rec, next)) = store.next_record(at).unwrap() {
        out.push((rec.offset(), rec.header.body(rec.bytes()).to_vec()));
        at = next;
    }
    out
}

#[test]
fn readers_see_only_committed_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let store = started(&tmp.path().join("s"), idle_service(64 * 1024));
    assert!(store.recovery_report().transient_store_pool.as_deref().unwrap().starts_with("on: 5 buffers"));
    let r = put(&store, b"in the buffer");
    let log = store.commitlog();
    assert_eq!(log.wrote_offset(), r.offsets[0] + r.wrote_bytes);
    assert_eq!(log.committed_where(), r.offsets[0], "nothing committed yet");
    assert!(store.read(r.offsets[0]).unwrap().is_none());
    assert!(store.next_record(0).unwrap().is_none());
    store.dispatch(u64::MAX, false).unwrap();
    assert_eq!(store.max_offset_in_queue("Pool", 0, true), 0, "not dispatched");
    let segment = std::fs::read(tmp.path().join("s/commitlog/00000000000000000000")).unwrap();
    assert!(segment[..r.wrote_bytes as usize].iter().all(|&b| b == 0), "the file holds nothing yet");
    assert!(store.commitlog().commit(0).unwrap());
    assert_eq!(log.committed_where(), log.wrote_offset());
    let rec = store.read(r.offsets[0]).unwrap().unwrap();
    assert_eq!(rec.header.body(rec.bytes()), b"in the buffer");
    store.dispatch(u64::MAX, false).unwrap();
    assert_eq!(store.max_offset_in_queue("Pool", 0, true), 1);
    store.close().unwrap();
}

#[test]
fn a_round_commits_least_pages_or_everything_once_thorough() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = idle_service(256 * 1024);
    cfg.transient_pool.commit_commit_log_thorough_interval = 200;
    let store = started(&tmp.path().join("s"), cfg);
    let t0 = Instant::now();
    let mut clock = CommitClock { last_thorough: t0 };
    let small = put(&store, &body(0, 100));
    assert!(!store.commit_round(t0, &mut clock).unwrap(), "fewer than 4 pages wait");
    assert_eq!(store.commitlog().committed_where(), small.offsets[0]);
    let mut last = small.clone();
    while store.commitlog().wrote_offset() / 4096 < 4 {
        last = put(&store, &body(1, 1000));
    }
    assert!(store.commit_round(t0, &mut clock).unwrap(), "4 pages wait");
    assert_eq!(store.commitlog().committed_where(), last.offsets[0] + last.wrote_bytes);
    let tail = put(&store, &body(2, 100));
    assert!(!store.commit_round(t0 + Duration::from_millis(199), &mut clock).unwrap());
    assert!(store.commit_round(t0 + Duration::from_millis(200), &mut clock).unwrap(), "thorough after 200 ms");
    assert_eq!(store.commitlog().committed_where(), tail.offsets[0] + tail.wrote_bytes);
    store.close().unwrap();
}

#[test]
fn the_service_commits_without_any_flush_call() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = config(64 * 1024);
    cfg.transient_pool.commit_interval_commit_log = 20;
    cfg.transient_pool.wake_commit_when_put_message = false;
    let store = started(&tmp.path().join("s"), cfg);
    let r = put(&store, b"committed by the service");
    while store.commitlog().committed_where() < r.offsets[0] + r.wrote_bytes {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(store.service_stats().iter().any(|s| s.name == "commit" && s.rounds > 0));
    let rec = store.read(r.offsets[0]).unwrap().unwrap();
    assert_eq!(rec.header.body(rec.bytes()), b"committed by the service");
    store.close().unwrap();
}

#[test]
fn segments_roll_over_with_the_pool_and_buffers_return_to_it() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("s");
    let mut cfg = config(4096);
    cfg.transient_pool.transient_store_pool_size = 2;
    cfg.transient_pool.commit_interval_commit_log = 5;
    let store = started(&root, cfg.clone());
    let mut written = Vec::new();
    for i in 0..120 {
        let b = body(i, 1 + (i * 37) % 700);
        let r = put(&store, &b);
        written.push((r.offsets[0], b));
    }
    assert!(store.commitlog().queue().files().len() > 10, "many segments");
    assert_eq!(store.commitlog().transient_pool().unwrap().available(), 1, "only the active segment's buffer is out");
    store.flush().unwrap();
    assert_eq!(records(&store), written);
    store.close().unwrap();
    let reopened = MessageStore::open(&root, cfg).unwrap();
    assert!(!reopened.unclean_shutdown());
    assert_eq!(records(&reopened), written);
}

#[test]
fn close_commits_and_flushes_everything() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("s");
    let store = started(&root, idle_service(64 * 1024));
    let written: Vec<(u64, Vec<u8>)> = (0..20)
        .map(|i| {
            let b = body(i, 300);
            (put(&store, &b).offsets[0], b)
        })
        .collect();
    assert_eq!(store.commitlog().committed_where(), 0);
    store.close().unwrap();
    let reopened = MessageStore::open(&root, idle_service(64 * 1024)).unwrap();
    assert!(!reopened.unclean_shutdown());
    assert_eq!(records(&reopened), written);
    assert_eq!(reopened.max_offset_in_queue("Pool", 0, true), 20);
}

/// A process killed in the middle of a commit (after the range's bytes, before its first word) leaves a store
/// that opens with strict recovery, holding exactly the records committed before that commit: the range of the
/// unfinished commit is discarded as an unfinished append. The kill is a capture of every file as the page cache
/// held it just before the commit's second write (the word), through the sync-recording seam.
#[test]
fn a_kill_mid_commit_leaves_a_prefix_that_opens_strictly() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("s");
    let store = started(&root, idle_service(64 * 1024));
    let first: Vec<PutResult> = (0..5).map(|i| put(&store, &body(i, 200))).collect();
    store.commitlog().commit(0).unwrap();
    let committed = store.commitlog().committed_where();
    let second: Vec<PutResult> = (5..12).map(|i| put(&store, &body(i, 200))).collect();
    // The first commit's records dispatched, so the reput service writes nothing more until the word below.
    assert!(store.wait_dispatched(std::time::Duration::from_secs(10)));
    // Event 1: the copy of everything but the first word; event 2: the word. (Then the reput service may
    // dispatch the newly committed records into the consume queue before the recording stops: more events.)
    sync_record::record(&root, |n| n == 2);
    assert!(store.commitlog().commit(0).unwrap());
    let (captures, events) = sync_record::stop(&root);
    assert_eq!(captures.len(), 1);
    assert!(events >= 2, "{events} events");
    let image = tmp.path().join("killed");
    for (path, content) in &captures[0].current {
        let to = image.join(path.strip_prefix(&root).unwrap());
        match content {
            None => std::fs::create_dir_all(&to).unwrap(),
            Some(bytes) => {
                std::fs::create_dir_all(to.parent().unwrap()).unwrap();
                std::fs::write(&to, bytes).unwrap();
            }
        }
    }
    let bytes = std::fs::read(image.join("commitlog/00000000000000000000")).unwrap();
    let at = committed as usize;
    assert!(bytes[at..at + 8].iter().all(|&b| b == 0), "the first word was not written");
    let last = second.last().unwrap();
    assert!(bytes[at + 8..(last.offsets[0] + last.wrote_bytes) as usize].iter().any(|&b| b != 0), "the rest was");
    let reopened = MessageStore::open(&image, idle_service(64 * 1024)).unwrap();
    assert!(reopened.unclean_shutdown());
    assert!(reopened.open_report().damage.is_empty(), "{:?}", reopened.open_report());
    assert_eq!(reopened.commitlog().max_offset(), committed);
    let got: Vec<u64> = records(&reopened).into_iter().map(|(o, _)| o).collect();
    assert_eq!(got, first.iter().map(|r| r.offsets[0]).collect::<Vec<_>>());
    let next = put(&reopened, b"after the kill");
    assert_eq!((next.offsets[0], next.queue_offset), (committed, 5));
    reopened.close().unwrap();
    store.close().unwrap();
}

#[test]
fn the_pool_is_ignored_where_rocketmq_ignores_it() {
    let tmp = tempfile::tempdir().unwrap();
    let mut sync = config(64 * 1024);
    sync.commit_log.flush_disk_type = FlushDiskType::SyncFlush;
    let store = MessageStore::open(&tmp.path().join("sync"), sync).unwrap();
    assert!(store.commitlog().transient_pool().is_none());
    assert!(store.recovery_report().transient_store_pool.as_deref().unwrap().starts_with("ignored"));
    let r = put(&store, b"direct");
    assert!(store.read(r.offsets[0]).unwrap().is_some());
    let mut slave = config(64 * 1024);
    slave.read.broker_role = BrokerRole::Slave;
    let store = MessageStore::open(&tmp.path().join("slave"), slave).unwrap();
    assert!(store.commitlog().transient_pool().is_none());
    assert!(store.recovery_report().transient_store_pool.as_deref().unwrap().contains("SLAVE"));
    let off = MessageStore::open(&tmp.path().join("off"), common::small_config()).unwrap();
    assert_eq!(off.recovery_report().transient_store_pool, None);
}

#[test]
fn without_services_each_put_commits_inline() {
    let tmp = tempfile::tempdir().unwrap();
    let store = MessageStore::open(&tmp.path().join("s"), idle_service(64 * 1024)).unwrap();
    let r = put(&store, b"inline");
    assert_eq!(store.commitlog().committed_where(), r.offsets[0] + r.wrote_bytes);
    assert!(store.read(r.offsets[0]).unwrap().is_some());
}
