//! SYNC_FLUSH group commit (`src/store/services/group_commit.rs`): concurrent puts waiting for durability
//! share one flush; every acknowledged put survives a power loss (the model of `tests/power_loss.rs`); a slow
//! flush times out as `FLUSH_DISK_TIMEOUT` without poisoning, a failed one poisons; `WAIT=false` puts do not
//! wait; without the service a SYNC put flushes inline. Flushes are counted through the sync-recording seam.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rmq::config::{FlushDiskType, StoreConfig};
use rmq::fault::{self, Fault, FaultPoint};
use rmq::message::PutMessageStatus;
use rmq::store::{MessageStore, PutMessage, PutResult};
use rmq::sync_record::{self, Capture, Rng};
use rmq::Error;

fn config(segment: u64) -> StoreConfig {
    let mut c = common::small_config();
    c.commit_log.mapped_file_size_commit_log = segment;
    c.commit_log.flush_disk_type = FlushDiskType::SyncFlush;
    c
}

fn fresh_root(tmp: &tempfile::TempDir) -> PathBuf {
    let root = tmp.path().join("store");
    std::fs::create_dir(&root).unwrap();
    root
}

fn started(root: &Path, cfg: StoreConfig) -> Arc<MessageStore> {
    let store = Arc::new(MessageStore::open(root, cfg).unwrap());
    store.start_services().unwrap();
    store
}

fn put(store: &MessageStore, body: &[u8], wait: bool) -> PutResult {
    let mut m = PutMessage::new("GroupCommit", 0, body);
    m.wait_store_msg_ok = wait;
    store.put(&m).unwrap()
}

fn end_of(r: &PutResult) -> u64 {
    r.offsets[0] + r.wrote_bytes
}

/// Blocks until `n` puts wait for the group commit service.
fn until_waiting(store: &MessageStore, n: usize) {
    while store.sync_flush_waiting() < n {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// One put a producer thread made: where, what, and the recorded event count right after it returned.
struct Acked {
    offset: u64,
    body: Vec<u8>,
    events_after: u64,
}

/// 8 producer threads under SYNC_FLUSH: every put is acknowledged `PUT_OK`, the commitlog sees fewer msyncs
/// than puts, and a power loss at any recorded cut keeps every put acknowledged before it.
#[test]
fn eight_producers_share_flushes_and_every_acknowledged_put_survives_a_power_loss() {
    const THREADS: usize = 8;
    const PUTS: usize = 40;
    let tmp = tempfile::tempdir().unwrap();
    let root = fresh_root(&tmp);
    let cut_every = 97;
    sync_record::record(&root, move |n| n % cut_every == 0);
    let store = started(&root, config(16 * 1024));
    let producers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (store, root) = (store.clone(), root.clone());
            std::thread::spawn(move || {
                let mut rng = Rng::new(t as u64 + 1);
                let mut acked = Vec::new();
                for i in 0..PUTS {
                    let mut body = format!("{t}/{i}:").into_bytes();
                    body.resize(body.len() + rng.below(600) as usize, b'a' + t as u8);
                    let r = put(&store, &body, true);
                    assert_eq!(r.status, PutMessageStatus::PutOk);
                    assert!(store.flushed_offset() >= end_of(&r), "acknowledged only once flushed");
                    acked.push(Acked { offset: r.offsets[0], body, events_after: sync_record::events(&root) });
                }
                acked
            })
        })
        .collect();
    let acked: Vec<Acked> = producers.into_iter().flat_map(|p| p.join().unwrap()).collect();
    let msyncs = sync_record::syncs(&root, &root.join("commitlog"));
    let groups = store.group_commit_flushes();
    assert!(store.checkpoint().physic_msg_timestamp > 0, "the checkpoint's physicMsgTimestamp follows the flushes");
    store.close().unwrap();
    let (captures, events) = sync_record::stop(&root);
    eprintln!("{} puts, {groups} group flushes, {msyncs} commitlog msyncs, {events} events", acked.len());
    assert!(msyncs < acked.len() as u64, "{msyncs} msyncs for {} puts: the puts did not share flushes", acked.len());
    assert!(groups > 0 && groups < acked.len() as u64);

    let picked: Vec<&Capture> = captures.iter().step_by((captures.len() / 8).max(1)).collect();
    assert!(picked.len() >= 4, "cuts spread over the run: {}", captures.len());
    let mut checked = 0;
    for cap in picked {
        let must: Vec<&Acked> = acked.iter().filter(|a| a.events_after < cap.at).collect();
        for k in 0..2 {
            let dir = tmp.path().join(format!("image-{}-{k}", cap.at));
            std::fs::create_dir(&dir).unwrap();
            sync_record::build_image(cap, &root, &dir, cap.at * 7 + k).unwrap();
            let image = MessageStore::open(&dir, config(16 * 1024))
                .unwrap_or_else(|e| panic!("cut before event {}: the image does not open: {e}", cap.at));
            for a in &must {
                let rec = image.read(a.offset).unwrap().unwrap_or_else(|| {
                    panic!("cut before event {}: the put acknowledged at {} is lost", cap.at, a.offset)
                });
                assert_eq!(rec.header.body(rec.bytes()), a.body.as_slice(), "cut {}: record at {}", cap.at, a.offset);
            }
            checked += must.len();
            image.close().unwrap();
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
    assert!(checked > 0, "some cut came after acknowledged puts");
}

/// While the flush of a first put is held up, seven more waiting puts pile up; the disk then serves them with
/// two flushes (the one held up, and one for everything that arrived meanwhile), not eight.
#[test]
fn puts_arriving_during_a_flush_are_served_by_one_flush() {
    let tmp = tempfile::tempdir().unwrap();
    let root = fresh_root(&tmp);
    sync_record::record(&root, |_| false);
    let store = started(&root, config(64 * 1024));
    // A first put, and the next segment made by the warm service (its syncs are not the puts' flushes).
    put(&store, b"first", true);
    while store.commitlog().warm_wanted() {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let flushes = store.group_commit_flushes();
    fault::inject(Fault::stalled(FaultPoint::Flush).under(&root));
    let spawn = |t: usize| {
        let store = store.clone();
        std::thread::spawn(move || put(&store, format!("producer {t}").as_bytes(), true))
    };
    // The first put's flush reaches the stall before the others are written (else one flush covers all eight).
    let mut producers = vec![spawn(0)];
    until_waiting(&store, 1);
    while fault::fired_under(&root) == 0 {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let before = sync_record::syncs(&root, &root.join("commitlog"));
    producers.extend((1..8).map(spawn));
    until_waiting(&store, 8);
    assert_eq!(fault::disarm_under(&root), 1);
    let results: Vec<PutResult> = producers.into_iter().map(|p| p.join().unwrap()).collect();
    assert!(results.iter().all(|r| r.status == PutMessageStatus::PutOk));
    let msyncs = sync_record::syncs(&root, &root.join("commitlog")) - before;
    let group_flushes = store.group_commit_flushes() - flushes;
    assert_eq!((msyncs, group_flushes), (2, 2), "the held-up flush, then one for the other puts");
    let end = results.iter().map(end_of).max().unwrap();
    assert!(store.flushed_offset() >= end);
    store.close().unwrap();
    sync_record::stop(&root);
}

/// A flush that is only slow: the waiting put gives up after `sync_flush_timeout` with `FLUSH_DISK_TIMEOUT`
/// (stored, durability unconfirmed), nothing past the flushed position is dispatched, a `WAIT=false` put returns
/// at once, the store keeps working, and once the disk catches up puts are `PUT_OK` again.
#[test]
fn a_slow_flush_times_out_without_poisoning_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    let root = fresh_root(&tmp);
    let mut cfg = config(64 * 1024);
    cfg.sync_flush.sync_flush_timeout = 50;
    let store = started(&root, cfg);
    let flushed = store.flushed_offset();
    fault::inject(Fault::stalled(FaultPoint::Flush).under(&root));
    let slow = put(&store, b"the disk is slow", true);
    assert_eq!(slow.status, PutMessageStatus::FlushDiskTimeout);
    let rec = store.read(slow.offsets[0]).unwrap().unwrap();
    assert_eq!(rec.header.body(rec.bytes()), b"the disk is slow", "stored, readable by offset");
    // WAIT=false: not held up by the stalled flush (had it waited, it would have timed out as well).
    let quick = put(&store, b"no wait", false);
    assert_eq!(quick.status, PutMessageStatus::PutOk);
    // Nothing past the flushed position reaches the consume queue.
    store.dispatch(u64::MAX, false).unwrap();
    assert_eq!(store.flushed_offset(), flushed);
    assert_eq!(store.confirm_offset(), flushed);
    assert_eq!(store.max_offset_in_queue("GroupCommit", 0, true), 0);
    assert_eq!(fault::disarm_under(&root), 1);
    let after = put(&store, b"the disk caught up", true);
    assert_eq!(after.status, PutMessageStatus::PutOk);
    assert!(store.flushed_offset() >= end_of(&after));
    store.dispatch(u64::MAX, false).unwrap();
    assert_eq!(store.max_offset_in_queue("GroupCommit", 0, true), 3, "all three dispatched once flushed");
    store.flush().unwrap();
    store.close().unwrap();
}

/// A flush that fails poisons the store, as an inline flush does: the waiting put gets `FLUSH_DISK_TIMEOUT`,
/// later writes are refused, and nothing unflushed is dispatched.
#[test]
fn a_failed_flush_poisons_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    let root = fresh_root(&tmp);
    let store = started(&root, config(64 * 1024));
    let ok = put(&store, b"durable", true);
    assert_eq!(ok.status, PutMessageStatus::PutOk);
    fault::inject(Fault::new(FaultPoint::Flush, libc::EIO).under(&root));
    let failed = put(&store, b"the disk failed", true);
    assert_eq!(failed.status, PutMessageStatus::FlushDiskTimeout);
    assert!(matches!(store.put(&PutMessage::new("GroupCommit", 0, b"refused")), Err(Error::Poisoned(_))));
    assert!(matches!(store.flush(), Err(Error::Poisoned(_))));
    assert_eq!(store.flushed_offset(), end_of(&ok));
    store.dispatch(u64::MAX, false).unwrap();
    assert_eq!(store.max_offset_in_queue("GroupCommit", 0, true), 1, "the unflushed put is not dispatched");
    // The service counts the error before it wakes the waiting put (the put's answer comes after the count).
    let errors = store.service_stats().iter().find(|s| s.name == "group_commit").map(|s| s.errors);
    assert_eq!(errors, Some(1));
    fault::disarm_under(&root);
    assert!(matches!(store.close(), Err(Error::Poisoned(_))), "close says what it could not make durable");
}

/// Without the service (services never started) a SYNC_FLUSH put still returns durable: it flushes its own
/// range, one msync per put, whatever its `WAIT`.
#[test]
fn without_services_each_sync_put_flushes_inline() {
    let tmp = tempfile::tempdir().unwrap();
    let root = fresh_root(&tmp);
    sync_record::record(&root, |_| false);
    let store = MessageStore::open(&root, config(64 * 1024)).unwrap();
    // The first put creates the segment (its creation syncs the file and the directory).
    assert_eq!(put(&store, b"first", true).status, PutMessageStatus::PutOk);
    let before = sync_record::syncs(&root, &root.join("commitlog"));
    for (i, wait) in [true, false, true, true].into_iter().enumerate() {
        let r = put(&store, format!("inline {i}").as_bytes(), wait);
        assert_eq!(r.status, PutMessageStatus::PutOk);
        assert!(store.flushed_offset() >= end_of(&r), "put {i} returned flushed");
    }
    assert_eq!(sync_record::syncs(&root, &root.join("commitlog")) - before, 4, "one msync per put");
    assert_eq!(store.group_commit_flushes(), 0);
    store.close().unwrap();
    sync_record::stop(&root);
}

/// Closing while a put waits on a held-up flush: the put completes (flushed by the service's last round or by
/// its own inline flush), the store closes cleanly.
#[test]
fn close_completes_the_waiting_puts() {
    let tmp = tempfile::tempdir().unwrap();
    let root = fresh_root(&tmp);
    let store = started(&root, config(64 * 1024));
    fault::inject(Fault::stalled(FaultPoint::Flush).under(&root));
    let s = store.clone();
    let waiting = std::thread::spawn(move || put(&s, b"waits through close", true));
    until_waiting(&store, 1);
    let s = store.clone();
    let closing = std::thread::spawn(move || s.close());
    assert_eq!(fault::disarm_under(&root), 1);
    let r = waiting.join().unwrap();
    closing.join().unwrap().unwrap();
    assert_eq!(r.status, PutMessageStatus::PutOk);
    assert!(store.flushed_offset() >= end_of(&r));
    let reopened = MessageStore::open(&root, config(64 * 1024)).unwrap();
    assert!(!reopened.unclean_shutdown());
    assert_eq!(reopened.read(r.offsets[0]).unwrap().unwrap().offset(), r.offsets[0]);
}

/// The gather: a held-up flush served one put while seven more arrived; before the next flush the service
/// waits for the served producer to put again (50 ms later, in a window of half the 400 ms flush), so one flush
/// serves all eight waiting puts (without it, the seven are flushed at once and the eighth needs a third flush:
/// producers that alternate in two halves).
#[test]
fn the_service_waits_for_the_producers_it_served_before_flushing_again() {
    let tmp = tempfile::tempdir().unwrap();
    let root = fresh_root(&tmp);
    let mut cfg = config(64 * 1024);
    cfg.timing.group_commit_gather_max_us = 10_000_000; // the window is then half the held-up flush
    let store = started(&root, cfg);
    fault::inject(Fault::stalled(FaultPoint::Flush).under(&root));
    let s = store.clone();
    let first = std::thread::spawn(move || {
        let r = put(&s, b"first", true);
        std::thread::sleep(std::time::Duration::from_millis(50)); // back well after the seven are flushable
        [r, put(&s, b"first, again", true)]
    });
    until_waiting(&store, 1);
    while fault::fired_under(&root) == 0 {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let others: Vec<_> = (1..8)
        .map(|t| {
            let s = store.clone();
            std::thread::spawn(move || put(&s, format!("producer {t}").as_bytes(), true))
        })
        .collect();
    until_waiting(&store, 8);
    std::thread::sleep(std::time::Duration::from_millis(400)); // a slow flush: a window of 200 ms
    assert_eq!(fault::disarm_under(&root), 1);
    let mut results: Vec<PutResult> = first.join().unwrap().into();
    results.extend(others.into_iter().map(|p| p.join().unwrap()));
    assert!(results.iter().all(|r| r.status == PutMessageStatus::PutOk));
    assert_eq!(store.group_commit_flushes(), 2, "the held-up flush, then one for the seven and the first's next put");
    assert_eq!(store.group_commit_gathers(), 1);
    assert!(store.flushed_offset() >= results.iter().map(end_of).max().unwrap());
    store.close().unwrap();
}

/// A lone producer never waits for a gather, however long the window may be: every flush serves its one put.
#[test]
fn a_lone_producer_is_never_held_for_a_gather() {
    let tmp = tempfile::tempdir().unwrap();
    let root = fresh_root(&tmp);
    let mut cfg = config(64 * 1024);
    cfg.timing.group_commit_gather_max_us = 10_000_000;
    let store = started(&root, cfg);
    for i in 0..200 {
        let r = put(&store, format!("alone {i}").as_bytes(), true);
        assert_eq!(r.status, PutMessageStatus::PutOk);
    }
    assert_eq!(store.group_commit_gathers(), 0);
    assert_eq!(store.group_commit_flushes(), 200);
    store.close().unwrap();
}

/// Bytes of `[0, len)` of `path` in extents the filesystem reports unwritten (claimed, never written), by the
/// FIEMAP ioctl without its sync flag (so asking changes nothing); `None` where the filesystem cannot tell.
#[allow(unsafe_code)]
fn unwritten_bytes(path: &Path, len: u64) -> Option<u64> {
    use std::os::fd::AsRawFd;
    const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
    const FIEMAP_EXTENT_UNWRITTEN: u32 = 0x800;
    const EXTENTS: usize = 256;
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Extent {
        logical: u64,
        physical: u64,
        length: u64,
        reserved64: [u64; 2],
        flags: u32,
        reserved: [u32; 3],
    }
    #[repr(C)]
    struct Fiemap {
        start: u64,
        length: u64,
        flags: u32,
        mapped_extents: u32,
        extent_count: u32,
        reserved: u32,
        extents: [Extent; EXTENTS],
    }
    let file = std::fs::File::open(path).ok()?;
    let empty = Extent { logical: 0, physical: 0, length: 0, reserved64: [0; 2], flags: 0, reserved: [0; 3] };
    let mut map = Box::new(Fiemap {
        start: 0,
        length: len,
        flags: 0,
        mapped_extents: 0,
        extent_count: EXTENTS as u32,
        reserved: 0,
        extents: [empty; EXTENTS],
    });
    // SAFETY: FS_IOC_FIEMAP reads the header and writes at most `extent_count` extents into the array that
    // follows it, all inside the boxed struct, which outlives the call; the descriptor is open.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), FS_IOC_FIEMAP as _, &mut *map as *mut Fiemap) };
    if rc != 0 {
        return None;
    }
    let n = (map.mapped_extents as usize).min(EXTENTS);
    Some(
        map.extents[..n]
            .iter()
            .filter(|e| e.flags & FIEMAP_EXTENT_UNWRITTEN != 0)
            .map(|e| e.length.min(len.saturating_sub(e.logical)))
            .sum(),
    )
}

/// After one put, the bytes of the first segment still in unwritten extents once the warm service has faulted
/// in what lies ahead (the whole 4 MiB segment), under `flush`.
fn unwritten_after_warm(flush: FlushDiskType) -> Option<u64> {
    const SEGMENT: u64 = 4 * 1024 * 1024;
    let tmp = tempfile::tempdir().unwrap();
    let root = fresh_root(&tmp);
    let mut cfg = config(SEGMENT);
    cfg.commit_log.flush_disk_type = flush;
    let store = started(&root, cfg);
    assert_eq!(put(&store, b"warms what lies ahead", true).status, PutMessageStatus::PutOk);
    let warmed = || store.service_stats().iter().find(|s| s.name == "warm").map_or(0, |s| s.work);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while warmed() < SEGMENT - 4096 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(warmed() >= SEGMENT - 4096, "the warm service faulted in the segment: {}", warmed());
    let segment = root.join("commitlog").join(format!("{:020}", 0));
    let unwritten = unwritten_bytes(&segment, SEGMENT);
    store.close().unwrap();
    unwritten
}

/// Under SYNC_FLUSH the warm service writes back the pages it faults in, so the space ahead of the write
/// position is written blocks before the group commit's flushes reach it (each flush then writes data only;
/// see `services/group_commit.rs`). Under ASYNC_FLUSH it only faults them in: the space stays unwritten.
#[test]
fn under_sync_flush_the_warmed_space_ahead_is_written_before_puts_reach_it() {
    let Some(async_unwritten) = unwritten_after_warm(FlushDiskType::AsyncFlush) else {
        eprintln!("this filesystem has no FIEMAP: nothing to observe");
        return;
    };
    if async_unwritten == 0 {
        eprintln!("this filesystem reports no unwritten extents for claimed space: nothing to observe");
        return;
    }
    assert!(async_unwritten >= 2 * 1024 * 1024, "ASYNC_FLUSH leaves the space ahead unwritten: {async_unwritten}");
    assert_eq!(unwritten_after_warm(FlushDiskType::SyncFlush), Some(0), "SYNC_FLUSH writes the warmed space");
}
