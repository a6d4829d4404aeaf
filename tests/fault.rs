//! The I/O fault seam at each point (flush, fsync, allocate, write) and what the store does with each failure:
//! a typed error, nothing written, no queue offset used, a readable store, and puts that go on afterwards.
//!
//! Faults are process-wide; every test limits its faults to its own temporary directory (`Fault::under`), so
//! the tests of this file can run in parallel.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rmq::checkpoint::{AbortFile, StoreCheckpoint};
use rmq::config::FlushDiskType;
use rmq::fault::{self, Fault, FaultPoint};
use rmq::message::PutMessageStatus;
use rmq::mmap::MappedFile;
use rmq::store::{MessageStore, PutMessage};
use rmq::Error;

mod common;
use common::{small_config, SEG};

/// Every file under `dir` with its length, by path.
fn listing(dir: &Path) -> BTreeMap<PathBuf, u64> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                out.insert(e.path(), e.metadata().unwrap().len());
            }
        }
    }
    out
}

/// A message of `T`/0 carrying key `k<i>`.
fn put(store: &MessageStore, i: usize) -> rmq::Result<rmq::PutResult> {
    let key = format!("k{i}");
    let body = format!("message {i:04} {}", "x".repeat(200));
    let mut m = PutMessage::new("T", 0, body.as_bytes());
    m.keys = Some(&key);
    store.put(&m)
}

fn dispatch_all(store: &MessageStore) -> rmq::Result<()> {
    while store.dispatch(u64::MAX, false)?.records > 0 {}
    Ok(())
}

/// Every message 0..n is readable through T/0 at queue offset i, with its body.
fn check_queue(store: &MessageStore, n: usize) {
    assert_eq!(store.max_offset_in_queue("T", 0, true), n as i64, "queue T/0 holds every message, densely");
    for i in 0..n {
        let e = store.cq_entry("T", 0, i as i64).unwrap();
        let rec = store.read(e.offset as u64).unwrap().unwrap();
        assert_eq!(rec.header.queue_offset, i as i64);
        let body = rec.header.body(rec.bytes());
        assert!(body.starts_with(format!("message {i:04} ").as_bytes()), "queue offset {i} holds message {i}");
    }
}

/// Arms `fault` limited to `dir` and disarms it when dropped (also when the test fails).
struct Armed(PathBuf);

impl Armed {
    fn new(dir: &Path, fault: Fault) -> Self {
        fault::inject(fault.under(dir));
        Armed(dir.to_owned())
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        fault::disarm_under(&self.0);
    }
}

#[test]
fn allocate_enospc_on_a_new_segment_is_disk_full_writes_nothing_and_uses_no_queue_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let store = MessageStore::open(root, small_config()).unwrap();
    put(&store, 0).unwrap();
    let mut n = 1;
    {
        let _f = Armed::new(&root.join("commitlog"), Fault::new(FaultPoint::Allocate, libc::ENOSPC).times(None));
        // The first segment's space was claimed when it was created: puts go on until a new one is needed.
        let err = loop {
            match put(&store, n) {
                Ok(_) => n += 1,
                Err(e) => break e,
            }
        };
        assert!(n > 5, "the segment was filled first");
        assert!(
            matches!(&err, Error::DiskFull { path, needed: Some(SEG), .. } if path.starts_with(root.join("commitlog"))),
            "{err:?}"
        );
        assert_eq!(err.put_status(), Some(PutMessageStatus::CreateMappedFileFailed));
        dispatch_all(&store).unwrap();
        let before = listing(root);
        let end = store.commitlog().max_offset();
        for _ in 0..3 {
            assert!(matches!(put(&store, n), Err(Error::DiskFull { .. })));
            let batch = [rmq::store::BatchItem { body: b"batch member", ..Default::default() }; 3];
            let localhost = std::net::SocketAddr::from(([127, 0, 0, 1], 1));
            assert!(matches!(
                store.put_batch("T", 0, &batch, 0, localhost, None, 0, true),
                Err(Error::DiskFull { .. })
            ));
        }
        assert_eq!(listing(root), before, "the segment that could not be allocated is removed");
        assert_eq!(store.commitlog().max_offset(), end, "no byte was written");
        assert_eq!(store.next_queue_offset("T", 0), n as i64, "no queue offset was used");
        check_queue(&store, n); // the store stays readable
    }
    // Space is back: the next put gets the queue offset the failed ones would have had.
    let r = put(&store, n).unwrap();
    assert_eq!((r.status, r.queue_offset), (PutMessageStatus::PutOk, n as i64));
    assert_eq!(r.offsets.as_slice(), [SEG], "the put went to the new segment");
    dispatch_all(&store).unwrap();
    check_queue(&store, n + 1);
}

#[test]
fn write_fault_fails_the_put_with_an_io_error_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let store = MessageStore::open(root, small_config()).unwrap();
    for i in 0..3 {
        put(&store, i).unwrap();
    }
    let end = store.commitlog().max_offset();
    let seg = std::fs::read(root.join("commitlog/00000000000000000000")).unwrap();
    {
        let _f = Armed::new(&root.join("commitlog"), Fault::new(FaultPoint::Write, libc::EIO));
        let err = put(&store, 3).unwrap_err();
        assert!(
            matches!(&err, Error::Io { source, .. } if source.raw_os_error() == Some(libc::EIO)),
            "an EIO write is an I/O error: {err:?}"
        );
        assert_eq!(store.commitlog().max_offset(), end);
        assert_eq!(std::fs::read(root.join("commitlog/00000000000000000000")).unwrap(), seg, "no byte written");
        assert_eq!(store.next_queue_offset("T", 0), 3);
    }
    // `times` was 1: the fault disarmed itself.
    assert_eq!(put(&store, 3).unwrap().queue_offset, 3);
    // A write fault with ENOSPC is a full disk.
    {
        let _f = Armed::new(&root.join("commitlog"), Fault::new(FaultPoint::Write, libc::ENOSPC));
        assert!(matches!(put(&store, 4), Err(Error::DiskFull { .. })));
    }
    assert_eq!(put(&store, 4).unwrap().queue_offset, 4);
    dispatch_all(&store).unwrap();
    check_queue(&store, 5);
}

#[test]
fn a_failed_sync_flush_poisons_the_store_and_reopening_keeps_every_acknowledged_message() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let mut config = small_config();
    config.commit_log.flush_disk_type = FlushDiskType::SyncFlush;
    let store = MessageStore::open(root, config.clone()).unwrap();
    for i in 0..5 {
        assert_eq!(put(&store, i).unwrap().status, PutMessageStatus::PutOk);
    }
    {
        // The third flush from now fails.
        let _f = Armed::new(root, Fault::new(FaultPoint::Flush, libc::EIO).after(2));
        assert_eq!(put(&store, 5).unwrap().status, PutMessageStatus::PutOk);
        assert_eq!(put(&store, 6).unwrap().status, PutMessageStatus::PutOk);
        let r = put(&store, 7).unwrap();
        assert_eq!(r.status, PutMessageStatus::FlushDiskTimeout, "the failed flush is reported as RocketMQ does");
    }
    // Poisoned: writes refused even with the fault gone; reads work.
    let err = put(&store, 8).unwrap_err();
    assert!(matches!(err, Error::Poisoned(_)), "{err:?}");
    assert_eq!(err.put_status(), Some(PutMessageStatus::ServiceNotAvailable));
    assert!(matches!(store.flush(), Err(Error::Poisoned(_))), "nothing is declared durable any more");
    dispatch_all(&store).unwrap();
    check_queue(&store, 7); // dispatch stops at the last durable message under SYNC_FLUSH
    assert!(matches!(store.close(), Err(Error::Poisoned(_))), "close says what it could not make durable");
    store.close().unwrap();
    assert!(AbortFile::exists(root), "a poisoned store does not claim a clean shutdown");
    drop(store);
    let store = MessageStore::open(root, config).unwrap();
    assert!(store.unclean_shutdown());
    check_queue(&store, 8); // every acknowledged message, and the one whose flush failed (it was written)
    assert_eq!(put(&store, 8).unwrap().queue_offset, 8);
}

#[test]
fn fsync_fault_fails_flush_with_the_checkpoint_path_and_the_next_flush_succeeds() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let store = MessageStore::open(root, small_config()).unwrap();
    put(&store, 0).unwrap();
    dispatch_all(&store).unwrap();
    {
        let _f = Armed::new(root, Fault::new(FaultPoint::Fsync, libc::EIO));
        let err = store.flush().unwrap_err();
        assert!(matches!(&err, Error::Io { path, .. } if path == &root.join("checkpoint")), "{err:?}");
    }
    put(&store, 1).unwrap();
    dispatch_all(&store).unwrap();
    store.flush().unwrap();
    assert!(store.checkpoint().physic_msg_timestamp > 0);
    check_queue(&store, 2);
}

#[test]
fn consume_queue_and_index_files_that_cannot_be_allocated_block_dispatch_until_space_returns() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let store = MessageStore::open(root, small_config()).unwrap();
    for i in 0..3 {
        put(&store, i).unwrap();
    }
    let before = listing(root);
    {
        let _f = Armed::new(&root.join("consumequeue"), Fault::new(FaultPoint::Allocate, libc::ENOSPC).times(None));
        let err = dispatch_all(&store).unwrap_err();
        assert!(matches!(err, Error::DiskFull { needed: Some(100), .. }), "{err:?}");
        assert!(listing(root).keys().all(|p| before.contains_key(p)), "no file is left behind");
        assert_eq!(store.reput_offset(), 0, "dispatch did not move on");
        // Puts go on: the commitlog has room.
        assert_eq!(put(&store, 3).unwrap().queue_offset, 3);
    }
    {
        let _f = Armed::new(&root.join("index"), Fault::new(FaultPoint::Allocate, libc::ENOSPC).times(None));
        assert!(matches!(dispatch_all(&store), Err(Error::DiskFull { .. })));
        assert!(store.index().unwrap().files().is_empty());
    }
    dispatch_all(&store).unwrap();
    check_queue(&store, 4);
    for i in 0..4 {
        let found = store.query_message("T", &format!("k{i}"), 10, 0, i64::MAX).unwrap();
        assert_eq!(found.records.len(), 1, "key k{i} is indexed");
    }
}

/// A write into an index file that fails is an error of its own, never taken for a full file: dispatch stops
/// with the I/O error instead of rolling into a new file (which left a file short of maxIndexNum before it,
/// damage for the next open, and a Corruption error from the new file's first put), and goes on once writes
/// work, every key indexed and every file intact.
#[test]
fn a_failed_write_into_the_index_is_an_io_error_not_a_full_file() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let store = MessageStore::open(root, small_config()).unwrap();
    for i in 0..3 {
        put(&store, i).unwrap();
    }
    dispatch_all(&store).unwrap();
    let index_files = || listing(&root.join("index"));
    let before = index_files();
    assert_eq!(before.len(), 1);
    for i in 3..6 {
        put(&store, i).unwrap();
    }
    {
        let _f = Armed::new(&root.join("index"), Fault::new(FaultPoint::Write, libc::EIO).times(None));
        for _ in 0..3 {
            let err = dispatch_all(&store).unwrap_err();
            assert!(matches!(&err, Error::Io { .. }), "{err:?}");
            assert_eq!(index_files(), before, "no index file was added");
        }
    }
    dispatch_all(&store).unwrap();
    check_queue(&store, 6);
    for i in 0..6 {
        let found = store.query_message("T", &format!("k{i}"), 10, 0, i64::MAX).unwrap();
        assert_eq!(found.records.len(), 1, "key k{i} is indexed once");
    }
    // The newest file full: the next message rolls, and the new file's header is the write that fails.
    let mut n = 6;
    let newest_count = |store: &MessageStore| store.index().unwrap().files().last().unwrap().header().index_count;
    while newest_count(&store) < small_config().index.max_index_num as i32 {
        put(&store, n).unwrap();
        dispatch_all(&store).unwrap();
        n += 1;
    }
    put(&store, n).unwrap();
    let full = index_files();
    {
        let _f = Armed::new(&root.join("index"), Fault::new(FaultPoint::Write, libc::EIO).times(None));
        let err = dispatch_all(&store).unwrap_err();
        assert!(matches!(&err, Error::Io { .. }), "{err:?}");
        assert_eq!(index_files(), full, "the file that could not be written is not left behind");
    }
    dispatch_all(&store).unwrap();
    assert_eq!(index_files().len(), full.len() + 1);
    for i in 0..=n {
        let found = store.query_message("T", &format!("k{i}"), 10, 0, i64::MAX).unwrap();
        assert_eq!(found.records.len(), 1, "key k{i} is indexed once");
    }
    let cfg = small_config().index;
    store.close().unwrap();
    for path in index_files().keys() {
        let f = rmq::index::IndexFile::open(path, cfg).unwrap();
        assert_eq!(f.verify(), Ok(()));
        assert_eq!(f.check_header(), Ok(()));
    }
}

#[test]
fn a_store_opens_while_catching_up_needs_space_and_hands_out_no_queue_offset_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let store = MessageStore::open(root, small_config()).unwrap();
    for i in 0..12 {
        put(&store, i).unwrap();
    }
    store.close().unwrap();
    drop(store);
    // The consume queues and the index are gone, and there is no space to rebuild them.
    std::fs::remove_dir_all(root.join("consumequeue")).unwrap();
    std::fs::remove_dir_all(root.join("index")).unwrap();
    let store = {
        let _f = Armed::new(root, Fault::new(FaultPoint::Allocate, libc::ENOSPC).times(None));
        let store = MessageStore::open(root, small_config()).unwrap();
        let blocked = store.recovery_report().dispatch_blocked.clone();
        assert!(blocked.as_deref().is_some_and(|b| b.contains("no space left")), "{blocked:?}");
        // Readable by offset; the queue offsets of the undispatched records are not handed out again.
        assert_eq!(store.next_queue_offset("T", 0), 12);
        assert!(store.read(0).unwrap().is_some());
        store
    };
    assert_eq!(put(&store, 12).unwrap().queue_offset, 12);
    dispatch_all(&store).unwrap();
    check_queue(&store, 13);
    store.close().unwrap();
    drop(store);
    let store = MessageStore::open(root, small_config()).unwrap();
    assert_eq!(store.recovery_report().dispatch_blocked, None);
    check_queue(&store, 13);
}

#[test]
fn a_sparse_file_found_on_disk_is_claimed_before_its_first_write() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("00000000000000000000");
    std::fs::File::create(&path).unwrap().set_len(1 << 20).unwrap(); // sparse, as RocketMQ maps its files
    let file = MappedFile::open(&path, 0, 1 << 20).unwrap();
    assert!(!file.is_allocated(), "opening claims nothing");
    {
        let _f = Armed::new(tmp.path(), Fault::new(FaultPoint::Allocate, libc::ENOSPC));
        let err = file.write_at(4096, b"data").unwrap_err();
        assert!(matches!(err, Error::DiskFull { needed: Some(n), .. } if n == 1 << 20), "{err:?}");
        assert_eq!(file.slice(4096, 4).unwrap(), [0; 4], "nothing written");
        assert!(!file.is_allocated());
    }
    file.write_at(4096, b"data").unwrap();
    assert!(file.is_allocated());
    assert_eq!(file.slice(4096, 4).unwrap(), b"data");
    // Out of range is a typed error, not a panic.
    assert!(matches!(file.write_at((1 << 20) - 2, b"data"), Err(Error::InvalidOffset { .. })));
}

#[test]
fn marker_files_on_a_full_disk() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    // The checkpoint cannot be created: typed error, no file left.
    {
        let _f = Armed::new(root, Fault::new(FaultPoint::Allocate, libc::ENOSPC));
        let err = StoreCheckpoint::open(root).unwrap_err();
        assert!(matches!(err, Error::DiskFull { needed: Some(4096), .. }), "{err:?}");
        assert!(!root.join("checkpoint").exists());
    }
    // Once created, rewriting it needs no space; a failed write keeps the old values.
    let cp = StoreCheckpoint::open(root).unwrap();
    cp.update_and_flush(|v| v.physic_msg_timestamp = 7).unwrap();
    {
        let _f = Armed::new(root, Fault::new(FaultPoint::Write, libc::ENOSPC));
        assert!(matches!(cp.update_and_flush(|v| v.physic_msg_timestamp = 9), Err(Error::DiskFull { .. })));
    }
    assert_eq!(cp.values().physic_msg_timestamp, 7);
    assert_eq!(StoreCheckpoint::open(root).unwrap().values().physic_msg_timestamp, 7, "nothing half-written");
    // The abort marker exists even when its content cannot be written; it is empty, not half-written.
    {
        let _f = Armed::new(root, Fault::new(FaultPoint::Write, libc::ENOSPC).times(None));
        let abort = AbortFile::create(root).unwrap();
        assert!(AbortFile::exists(root));
        assert_eq!(std::fs::read(root.join("abort")).unwrap(), b"");
        abort.remove().unwrap();
    }
    let _abort = AbortFile::create(root).unwrap();
    assert_eq!(std::fs::read(root.join("abort")).unwrap(), std::process::id().to_string().as_bytes());
}

#[test]
fn reopening_needs_no_space_and_a_new_store_on_a_full_disk_fails_typed() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    {
        let _f = Armed::new(tmp.path(), Fault::new(FaultPoint::Write, libc::ENOSPC).times(None));
        let err = MessageStore::open(&root, small_config()).unwrap_err();
        assert!(matches!(err, Error::DiskFull { .. }), "{err:?}");
    }
    let store = MessageStore::open(&root, small_config()).unwrap();
    for i in 0..4 {
        put(&store, i).unwrap();
    }
    store.close().unwrap();
    drop(store);
    // Every claim of space, every write and every fsync fails: opening and reading still work.
    let _f = [FaultPoint::Allocate, FaultPoint::Write, FaultPoint::Fsync]
        .map(|p| Armed::new(tmp.path(), Fault::new(p, libc::ENOSPC).times(None)));
    let store = MessageStore::open(&root, small_config()).unwrap();
    check_queue(&store, 4);
    assert_eq!(store.recovery_report().dispatch_blocked, None);
}
