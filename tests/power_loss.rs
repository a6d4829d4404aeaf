//! Power loss: the images a power failure can leave, opened and checked.
//!
//! A workload (single puts and batches of 1–4 messages of 1 B–1.5 KiB into two topics of two queues each,
//! 16 KiB commitlog segments, 5-entry consume-queue files, two-page index files of 63 keys, the reput service,
//! a clean close and reopen half-way) runs once per seed while [`rmq::sync_record`] records every sync and every
//! write under the store and captures the state just before some of them: what earlier syncs made durable,
//! and every file as the page cache held it. Each capture is a cut point, "the power fails just before this
//! sync or write" (between a put's bytes and its commit word, between an index entry and its header, ...);
//! from it several images are built, each choosing per 4 KiB page of every file the durable or the newest
//! version, and keeping or dropping every directory entry that was not made durable (the model:
//! `src/sync_record.rs`, DESIGN's crash model). Each image is opened with strict recovery and must:
//! - open, with no error at all (a page lost in a power loss is not damage);
//! - hold a prefix of the records written, each byte-identical where it was written, and at least every
//!   message acknowledged before the cut: under SYNC_FLUSH every put that returned, under ASYNC_FLUSH every
//!   put before the last `flush()` that returned;
//! - have dense queue offsets: each queue's records carry 0, 1, 2, ... in log order, its consume queue holds
//!   exactly those entries pointing at them, and the next put into it takes the next queue offset;
//! - find every record by its key through the index.
//!
//! `make test` runs 3 seeds per flush mode with 16 cuts of 2 images each (192 images); `make power` runs more
//! (`RMQ_POWER_SEEDS`, `RMQ_POWER_CUTS`, `RMQ_POWER_IMAGES`, `RMQ_POWER_OPS`). `RMQ_POWER_KEEP=dir` writes
//! each failing image, pristine, under `dir` for a closer look.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use rmq::config::{FlushDiskType, StoreConfig};
use rmq::message::PutMessageStatus;
use rmq::store::{BatchItem, MessageStore, PutMessage};
use rmq::sync_record::{self, Capture, Rng};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn config(mode: FlushDiskType) -> StoreConfig {
    let mut c = StoreConfig::default();
    c.commit_log.mapped_file_size_commit_log = 16 * 1024;
    c.commit_log.flush_disk_type = mode;
    c.consume_queue.mapped_file_size_consume_queue = 100; // 5 entries per file
    c.index.max_hash_slot_num = 1024; // 4 KiB of slots: an index file spans two pages, lost independently
    c.index.max_index_num = 64;
    c
}

/// One record the workload wrote (acknowledged or not).
#[derive(Debug, Clone)]
struct Written {
    offset: u64,
    topic: String,
    queue_id: i32,
    queue_offset: i64,
    body: Vec<u8>,
    key: String,
    /// The operation that wrote it.
    op: usize,
}

/// What one operation did, with the event count (syncs and writes) seen right after it returned.
#[derive(Debug, Clone, Copy)]
struct Op {
    /// Everything written up to and including this operation is durable once it returned (a flush, a close,
    /// or any put under SYNC_FLUSH).
    durable_point: bool,
    events_after: u64,
}

/// A store with its background services (the reput service dispatches in the background).
struct Running {
    store: Arc<MessageStore>,
}

impl Running {
    fn open(root: &Path, cfg: StoreConfig) -> rmq::Result<Self> {
        let store = Arc::new(MessageStore::open(root, cfg)?);
        store.start_services()?;
        Ok(Running { store })
    }

    fn close(self) -> rmq::Result<()> {
        self.store.close()
    }
}

const TOPICS: [&str; 2] = ["PowerA", "PowerB"];

/// Runs the workload for `seed` on `root` (recorded, every event a cut) and returns what it wrote and did.
fn workload(root: &Path, mode: FlushDiskType, seed: u64, ops: usize) -> (Vec<Written>, Vec<Op>) {
    let mut rng = Rng::new(seed);
    let mut written = Vec::new();
    let mut done = Vec::new();
    let mut run = Some(Running::open(root, config(mode)).unwrap());
    for op in 0..ops {
        let store = run.as_ref().unwrap().store.clone();
        let topic = TOPICS[rng.below(2) as usize];
        let queue_id = rng.below(2) as i32;
        let roll = rng.below(20);
        let mut durable_point = mode == FlushDiskType::SyncFlush;
        if op == ops / 2 {
            run.take().unwrap().close().unwrap();
            run = Some(Running::open(root, config(mode)).unwrap());
            durable_point = true;
        } else if roll < 3 {
            store.flush().unwrap();
            durable_point = true;
        } else {
            let n = if roll < 8 { 1 + rng.below(4) as usize } else { 1 };
            let bodies: Vec<Vec<u8>> = (0..n)
                .map(|i| {
                    let len = 1 + rng.below(1536) as usize;
                    let mut b = format!("{seed}/{op}/{i}:").into_bytes();
                    b.resize(len.max(b.len()), b'a' + (op % 26) as u8);
                    b
                })
                .collect();
            let keys: Vec<String> = (0..n).map(|i| format!("key-{op}-{i}")).collect();
            let res = if roll < 8 {
                let items: Vec<BatchItem<'_>> = bodies
                    .iter()
                    .zip(&keys)
                    .map(|(b, k)| BatchItem { body: b, keys: Some(k), ..BatchItem::default() })
                    .collect();
                let host = std::net::SocketAddr::from(([127, 0, 0, 1], 9));
                store.put_batch(topic, queue_id, &items, 0, host, None, 0, true).unwrap()
            } else {
                let mut m = PutMessage::new(topic, queue_id, &bodies[0]);
                m.keys = Some(&keys[0]);
                store.put(&m).unwrap()
            };
            assert_eq!(res.status, PutMessageStatus::PutOk);
            for (i, (body, key)) in bodies.into_iter().zip(keys).enumerate() {
                written.push(Written {
                    offset: res.offsets[i],
                    topic: topic.to_owned(),
                    queue_id,
                    queue_offset: res.queue_offset + i as i64,
                    body,
                    key,
                    op,
                });
            }
        }
        done.push(Op { durable_point, events_after: sync_record::events(root) });
    }
    run.take().unwrap().close().unwrap();
    (written, done)
}

/// How many of `written` (in log order) must survive a power loss just before event `at`: every record of an
/// operation up to the last durable point whose operation had returned before that event began.
fn must_survive(written: &[Written], ops: &[Op], at: u64) -> usize {
    let last =
        ops.iter().enumerate().filter(|(_, o)| o.durable_point && o.events_after < at).map(|(i, _)| i).next_back();
    last.map_or(0, |l| written.iter().filter(|w| w.op <= l).count())
}

/// Opens `image` and checks it against the workload (module docs). `Err` says what is wrong.
fn check_image(image: &Path, mode: FlushDiskType, written: &[Written], acked: usize) -> Result<usize, String> {
    let store = MessageStore::open(image, config(mode)).map_err(|e| format!("open failed: {e}"))?;
    // The log: a prefix of what was written, every byte of each record where it was written.
    let mut found = 0usize;
    let mut at = 0u64;
    while let Some((rec, next)) = store.next_record(at).map_err(|e| format!("reading at {at}: {e}"))? {
        let w = written.get(found).ok_or_else(|| format!("record at {} was never written", rec.offset()))?;
        let bytes = rec.bytes();
        let h = &rec.header;
        if rec.offset() != w.offset
            || h.body(bytes) != w.body.as_slice()
            || h.topic(bytes) != w.topic.as_bytes()
            || h.queue_id != w.queue_id
            || h.queue_offset != w.queue_offset
        {
            return Err(format!("record {found} at {} is not the one written at {}", rec.offset(), w.offset));
        }
        found += 1;
        at = next;
    }
    if found < acked {
        return Err(format!("{found} records survived but {acked} were acknowledged as durable"));
    }
    // Queues: dense, consume queue and log agreeing, the next put takes the next queue offset.
    let mut per_queue: BTreeMap<(&str, i32), Vec<&Written>> = BTreeMap::new();
    for w in written.get(..found).unwrap_or_default() {
        per_queue.entry((w.topic.as_str(), w.queue_id)).or_default().push(w);
    }
    store.dispatch(u64::MAX, false).map_err(|e| format!("dispatch: {e}"))?;
    for topic in TOPICS {
        for queue_id in 0..2 {
            let records = per_queue.get(&(topic, queue_id)).cloned().unwrap_or_default();
            let max = store.max_offset_in_queue(topic, queue_id, true);
            if max != records.len() as i64 {
                return Err(format!("{topic}/{queue_id} holds {max} entries for {} records", records.len()));
            }
            for (q, w) in records.iter().enumerate() {
                if w.queue_offset != q as i64 {
                    return Err(format!("{topic}/{queue_id}: record at {} has queue offset {}", w.offset, q));
                }
                let e =
                    store.cq_entry(topic, queue_id, q as i64).ok_or_else(|| format!("{topic}/{queue_id}: no {q}"))?;
                if e.offset as u64 != w.offset {
                    return Err(format!("{topic}/{queue_id}/{q} points at {} not {}", e.offset, w.offset));
                }
                let hits = store.query_message(topic, &w.key, 64, 0, i64::MAX).map_err(|e| e.to_string())?;
                if !hits.records.iter().any(|r| r.offset() == w.offset) {
                    return Err(format!("the index does not find key {} at {}", w.key, w.offset));
                }
            }
            let r = store
                .put(&PutMessage::new(topic, queue_id, b"after the power loss"))
                .map_err(|e| format!("put after reopen: {e}"))?;
            if r.queue_offset != records.len() as i64 {
                return Err(format!("{topic}/{queue_id}: next put got queue offset {}", r.queue_offset));
            }
        }
    }
    store.close().map_err(|e| format!("close: {e}"))?;
    Ok(found)
}

/// Totals over a run, printed for the record.
#[derive(Debug, Default)]
struct Totals {
    images: u64,
    cuts: u64,
    events: u64,
    page_choices: u64,
    entry_choices: u64,
    short_files: u64,
    survived_beyond_ack: u64,
}

fn run_mode(mode: FlushDiskType, base_seed: u64) -> Totals {
    let seeds = env("RMQ_POWER_SEEDS", 3);
    let max_cuts = env("RMQ_POWER_CUTS", 16) as usize;
    let per_cut = env("RMQ_POWER_IMAGES", 2);
    let ops = env("RMQ_POWER_OPS", 40) as usize;
    let mut totals = Totals::default();
    let mut failures = Vec::new();
    let first = env("RMQ_POWER_FIRST_SEED", 0);
    for s in first..first + seeds {
        let seed = base_seed + s;
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("store");
        std::fs::create_dir(&root).unwrap();
        // Capture about twice the cuts wanted (a run makes some 15 events per operation), then spread evenly.
        let stride = (15 * ops as u64 / (2 * max_cuts as u64).max(1)).max(1);
        let offset = seed % stride;
        sync_record::record(&root, move |n| n % stride == offset);
        let (written, ops_done) = workload(&root, mode, seed, ops);
        let (captures, events) = sync_record::stop(&root);
        totals.events += events;
        // An even spread of cut points over the run, always including the first and the last.
        let picked: Vec<&Capture> = if captures.len() <= max_cuts {
            captures.iter().collect()
        } else {
            (0..max_cuts).map(|i| &captures[i * (captures.len() - 1) / (max_cuts - 1).max(1)]).collect()
        };
        for cap in picked {
            totals.cuts += 1;
            let acked = must_survive(&written, &ops_done, cap.at);
            for k in 0..per_cut {
                let image_seed = seed.wrapping_mul(1_000_003).wrapping_add(cap.at * 131 + k);
                let dir = tmp.path().join(format!("image-{}-{k}", cap.at));
                std::fs::create_dir(&dir).unwrap();
                let stats = sync_record::build_image(cap, &root, &dir, image_seed).unwrap();
                totals.images += 1;
                totals.page_choices += stats.page_choices;
                totals.entry_choices += stats.entry_choices;
                totals.short_files += stats.short_files;
                let checked =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check_image(&dir, mode, &written, acked)))
                        .unwrap_or_else(|p| {
                            let what =
                                p.downcast_ref::<String>().cloned().or(p.downcast_ref::<&str>().map(|s| s.to_string()));
                            Err(format!("panicked: {}", what.unwrap_or_default()))
                        });
                match checked {
                    Ok(found) => totals.survived_beyond_ack += (found - acked) as u64,
                    Err(e) => failures.push(format!(
                        "{mode:?} seed {seed}, cut before event {} of {events}, image seed {image_seed}: {e}",
                        cap.at
                    )),
                }
                if let (Some(keep), Some(last)) = (std::env::var_os("RMQ_POWER_KEEP"), failures.last()) {
                    // Debugging aid: each failing image, built again (same seed) under $RMQ_POWER_KEEP.
                    if last.contains(&format!("image seed {image_seed}:")) {
                        let to = Path::new(&keep).join(format!("{mode:?}-{image_seed}"));
                        std::fs::create_dir_all(&to).unwrap();
                        sync_record::build_image(cap, &root, &to, image_seed).unwrap();
                        let mut summary = String::new();
                        for (p, d) in &cap.durable {
                            let pages: Vec<(u64, u64)> = d.pages.iter().map(|(n, (s, _))| (*n, *s)).collect();
                            summary += &format!("durable {p:?} entry {:?} len {:?} pages {pages:?}\n", d.entry, d.len);
                        }
                        for (p, c) in &cap.current {
                            summary += &format!("current {p:?} {:?}\n", c.as_ref().map(Vec::len));
                        }
                        std::fs::write(to.join("capture.txt"), summary).unwrap();
                    }
                }
                let _ = std::fs::remove_dir_all(&dir);
            }
        }
    }
    eprintln!("power loss {mode:?}: {totals:?}, {} failed", failures.len());
    assert!(failures.is_empty(), "{} of {} images failed:\n{}", failures.len(), totals.images, failures.join("\n"));
    totals
}

#[test]
fn sync_flush_every_acknowledged_put_survives() {
    let t = run_mode(FlushDiskType::SyncFlush, 1_000);
    if t.cuts >= 30 {
        assert!(t.page_choices > 0 && t.entry_choices > 0, "the images differ from the page cache: {t:?}");
    }
}

#[test]
fn async_flush_everything_before_the_last_flush_survives() {
    let t = run_mode(FlushDiskType::AsyncFlush, 2_000);
    if t.cuts >= 30 {
        assert!(t.page_choices > 0 && t.survived_beyond_ack > 0, "unflushed pages are kept and lost: {t:?}");
    }
}

/// Copies the files of `from` into `to` as they are now (the page cache), as a power loss that kept every
/// page would leave them.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::write(to.join(e.file_name()), std::fs::read(e.path()).unwrap()).unwrap();
        }
    }
}

/// The body CRC does not cover a record's properties: when a page boundary falls inside them and the page after
/// it is lost, the record still validates (its lengths are in the page that was kept). Opening must take it for what a power loss left (an
/// unfinished, unflushed put: discarded and reported), not keep a message with zeroed properties, and not
/// refuse to open either.
#[test]
fn a_record_whose_properties_were_in_a_lost_page_is_discarded() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    let store = MessageStore::open(&root, config(FlushDiskType::AsyncFlush)).unwrap();
    let mut first = PutMessage::new("PowerA", 0, &[b'x'; 100]);
    first.keys = Some("first");
    let r1 = store.put(&first).unwrap();
    let rec = store.read(r1.offsets[0]).unwrap().unwrap();
    let body_start = rec.header.body.start as u64;
    store.flush().unwrap();
    // The page boundary 4096 falls 10 bytes into the second record's properties: after its body, the topic
    // (length byte and 6 bytes) and the properties' 2-byte length.
    let second_at = r1.offsets[0] + r1.wrote_bytes;
    let body = vec![b'y'; (4096 - second_at - body_start - 1 - 6 - 2 - 10) as usize];
    let mut second = PutMessage::new("PowerA", 0, &body);
    second.keys = Some("second");
    let r2 = store.put(&second).unwrap();
    assert_eq!(r2.offsets[0], second_at);
    let image = tmp.path().join("image");
    copy_tree(&root, &image);
    drop(store);
    // The power loss: the page [4096, 8192) of the first segment never reached the disk.
    let seg = image.join("commitlog").join(format!("{:020}", 0));
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[4096..8192].fill(0);
    std::fs::write(&seg, bytes).unwrap();

    let store = MessageStore::open(&image, config(FlushDiskType::AsyncFlush)).unwrap();
    assert!(store.unclean_shutdown());
    assert_eq!(store.commitlog().max_offset(), second_at, "the record with zeroed properties is gone");
    assert!(store.open_report().torn_bytes > 0, "and reported: {:?}", store.open_report());
    assert_eq!(store.max_offset_in_queue("PowerA", 0, true), 1);
    let found = store.query_message("PowerA", "first", 8, 0, i64::MAX).unwrap();
    assert_eq!(found.records.iter().map(|r| r.offset()).collect::<Vec<_>>(), vec![r1.offsets[0]]);
    let next = store.put(&PutMessage::new("PowerA", 0, b"next")).unwrap();
    assert_eq!((next.offsets[0], next.queue_offset), (second_at, 1));
}

/// A key put writes its entry, then its slot, then the header. Cut after the slot (a kill, or a power loss that
/// kept the page as the page cache held it then) and the slot points at an entry the header does not count;
/// putting the key again (opening re-dispatches the last record) must keep the older entries of that slot's
/// chain reachable, not make the new entry its own predecessor.
#[test]
fn a_key_put_torn_before_its_header_keeps_its_chain_when_put_again() {
    use rmq::index::{IndexConfig, IndexFile};
    let cfg = IndexConfig { max_hash_slot_num: 4, max_index_num: 8, max_msgs_num_batch: 64 };
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("index");
    let f = IndexFile::create(&path, cfg, 0, 1000).unwrap();
    // Hashes 6, 10 and 14 share slot 2.
    assert!(f.put_key(6, 100, 1000).unwrap() && f.put_key(10, 200, 1000).unwrap());
    let header_before = std::fs::read(&path).unwrap()[..40].to_vec();
    assert!(f.put_key(14, 300, 1000).unwrap());
    drop(f);
    let mut torn = std::fs::read(&path).unwrap();
    torn[..40].copy_from_slice(&header_before);
    std::fs::write(&path, torn).unwrap();
    let f = IndexFile::open(&path, cfg).unwrap();
    assert!(f.put_key(14, 300, 1000).unwrap(), "the torn put is made again");
    for (hash, offset) in [(6, 100), (10, 200), (14, 300)] {
        let mut out = Vec::new();
        f.select_phy_offsets(hash, 8, 0, i64::MAX, &mut out, &mut |_, _, _| rmq::index::Candidate::Accept).unwrap();
        assert_eq!(out, vec![offset], "key hash {hash} is found");
    }
}

/// The flush services under the power-loss model, with nobody calling `flush()`: while puts go on, the
/// commitlog flush service (every 5 ms, least pages 4, thorough every 100 ms) and the consume-queue service
/// (every 5 ms, writing the checkpoint) run. In every image a power loss can leave, every message whose store time
/// the image's checkpoint claims (physicMsgTimestamp) is in the commitlog, and logicsMsgTimestamp never passes
/// it; and the checkpoint did advance (the puts pause halfway for a thorough round, which alone can claim the tail).
#[test]
fn the_flush_services_checkpoint_never_claims_unflushed_data() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    std::fs::create_dir(&root).unwrap();
    let mut cfg = config(FlushDiskType::AsyncFlush);
    cfg.flush.flush_interval_commit_log = 5;
    cfg.flush.flush_commit_log_thorough_interval = 100;
    cfg.flush.flush_interval_consume_queue = 5;
    sync_record::record(&root, |n| n % 97 == 0);
    let store = Arc::new(MessageStore::open(&root, cfg.clone()).unwrap());
    store.start_services().unwrap();
    let mut rng = Rng::new(17);
    let mut written: Vec<(u64, i64, Vec<u8>)> = Vec::new();
    let rounds = |s: &MessageStore| s.service_stats().iter().find(|x| x.name == "flush_cq").map_or(0, |x| x.rounds);
    for i in 0..300 {
        let body = vec![b'a' + (i % 26) as u8; 1 + rng.below(1500) as usize];
        let r = store.put(&PutMessage::new(TOPICS[i % 2], 0, &body)).unwrap();
        written.push((r.offsets[0], r.store_timestamp, body));
        if i % 30 == 29 {
            // Let the services run between bursts of puts.
            let seen = rounds(&store);
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while rounds(&store) < seen + 2 {
                assert!(std::time::Instant::now() < deadline, "the consume-queue flush service does not run");
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        if i == 149 {
            // Halfway, a pause long enough for a thorough commitlog round (which flushes everything, so the
            // checkpoint may claim the puts so far): the images cut during the second half can then hold a claim,
            // however fast the puts ran.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while store.checkpoint().physic_msg_timestamp == 0 {
                assert!(std::time::Instant::now() < deadline, "no thorough flush round advanced the checkpoint");
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
    }
    let (captures, events) = sync_record::stop(&root);
    store.close().unwrap();
    assert!(captures.len() >= 10, "{} captures of {events} events", captures.len());
    let step = (captures.len() / 40).max(1);
    let mut claimed = 0;
    for (k, cap) in captures.iter().step_by(step).enumerate() {
        let image = tmp.path().join(format!("image-{k}"));
        std::fs::create_dir(&image).unwrap();
        sync_record::build_image(cap, &root, &image, 1000 + k as u64).unwrap();
        let cp = rmq::checkpoint::StoreCheckpoint::open_read_only(&image).map(|c| c.values());
        let Ok(cp) = cp else { continue }; // the checkpoint file itself not created durably yet
        assert!(cp.logics_msg_timestamp <= cp.physic_msg_timestamp, "image {k}: {cp:?}");
        let opened = MessageStore::open(&image, cfg.clone()).unwrap();
        for (offset, ts, body) in written.iter().filter(|w| w.1 <= cp.physic_msg_timestamp) {
            let rec = opened.read(*offset).unwrap().unwrap_or_else(|| {
                panic!(
                    "image {k} (cut at event {}): checkpoint claims {} but the message of {ts} at {offset} is lost",
                    cap.at, cp.physic_msg_timestamp
                )
            });
            assert_eq!(rec.header.body(rec.bytes()), body.as_slice());
            claimed += 1;
        }
        opened.close().unwrap();
        std::fs::remove_dir_all(&image).unwrap();
    }
    assert!(claimed > 0, "no image's checkpoint claimed any message: the services never advanced it");
}
