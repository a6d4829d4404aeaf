//! The crash model of `commitlog::recover` and the derived-file checks of `store::open`, proven on images:
//! an unfinished batch append written in random byte orders and cut after every prefix; damage that a kill
//! cannot leave under each recovery mode; consume queues with holes and wrong entries; damaged records read
//! through `get_message`.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use rmq::commitlog::RecoveryMode;
use rmq::consume_queue::UNIT;
use rmq::store::get::{GetMessageStatus, Subscription};
use rmq::store::open::OpenOptions;
use rmq::store::{BatchItem, MessageStore, PutMessage};
use rmq::Error;

use common::{small_config, SEG};

/// Every file of a store directory with its bytes.
type Image = BTreeMap<PathBuf, Vec<u8>>;

/// Every file under `root` with its bytes.
fn files(root: &Path) -> Image {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.strip_prefix(root).unwrap().to_owned(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

fn write_files(root: &Path, image: &BTreeMap<PathBuf, Vec<u8>>) {
    let _ = std::fs::remove_dir_all(root);
    for (p, bytes) in image {
        let path = root.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
}

fn open_mode(root: &Path, mode: RecoveryMode) -> rmq::Result<MessageStore> {
    MessageStore::open_with(root, small_config(), &OpenOptions { recovery: mode, ..OpenOptions::default() })
}

/// (offset, body) of every record, in log order.
fn records(store: &MessageStore) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = store.commitlog().min_offset();
    while let Some((r, next)) = store.next_record(at).unwrap() {
        out.push((r.offset(), r.header.body(r.bytes()).to_vec()));
        at = next;
    }
    out
}

fn body(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|k| ((i * 31 + k * 7) % 251 + 1) as u8).collect()
}

/// A closed store holding `n` acknowledged messages, the image of a store that then appended one batch of
/// `sizes` to it (also closed), and the first offset of that batch.
fn base_and_batch(dir: &Path, n: usize, sizes: &[usize]) -> (Image, Image, u64) {
    let root = dir.join("base");
    {
        let store = MessageStore::open(&root, small_config()).unwrap();
        for i in 0..n {
            let b = body(i, 40 + i % 50);
            store.put(&PutMessage { keys: Some("k"), ..PutMessage::new("T", (i % 2) as i32, &b) }).unwrap();
        }
        store.close().unwrap();
    }
    let base = files(&root);
    let first = {
        let store = MessageStore::open(&root, small_config()).unwrap();
        let bodies: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &s)| body(1000 + i, s)).collect();
        let items: Vec<BatchItem<'_>> = bodies.iter().map(|b| BatchItem { body: b, ..BatchItem::default() }).collect();
        let r = store.put_batch("T", 0, &items, 0, "127.0.0.1:1".parse().unwrap(), None, 0, true).unwrap();
        store.close().unwrap();
        r.offsets[0]
    };
    (base, files(&root), first)
}

/// The commitlog bytes the batch wrote: (file, position, byte), blank filler first.
fn appended_bytes(base: &BTreeMap<PathBuf, Vec<u8>>, after: &BTreeMap<PathBuf, Vec<u8>>) -> Vec<(PathBuf, usize, u8)> {
    let mut out = Vec::new();
    for (p, bytes) in after.iter().filter(|(p, _)| p.starts_with("commitlog")) {
        let old = base.get(p);
        for (i, &b) in bytes.iter().enumerate() {
            let was = old.and_then(|o| o.get(i)).copied().unwrap_or(0);
            if b != was {
                out.push((p.clone(), i, b));
            }
        }
    }
    out
}

/// The base image, with the new segment files the batch created (all zero), the abort file of a killed run,
/// and `bytes` written.
fn image(
    base: &BTreeMap<PathBuf, Vec<u8>>,
    after: &BTreeMap<PathBuf, Vec<u8>>,
    bytes: &[&(PathBuf, usize, u8)],
) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut img = base.clone();
    for (p, b) in after.iter().filter(|(p, _)| p.starts_with("commitlog")) {
        img.entry(p.clone()).or_insert_with(|| vec![0; b.len()]);
    }
    for (p, i, b) in bytes {
        img.get_mut(p).unwrap()[*i] = *b;
    }
    img.insert(PathBuf::from("abort"), Vec::new());
    img
}

/// Checks every prefix of one write order of the batch; `commit_last` keeps rmq's protocol (the blank filler
/// first, the first record's first 8 bytes last). Returns how many images were opened.
fn torn_batch_images(sizes: &[usize], seed: u64, commit_last: bool) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let (base, after, first) = base_and_batch(dir.path(), 30, sizes);
    let acked = {
        let root = dir.path().join("acked");
        write_files(&root, &base);
        records(&MessageStore::open(&root, small_config()).unwrap())
    };
    let all = appended_bytes(&base, &after);
    let seg_of_first = PathBuf::from("commitlog").join(rmq::file_queue::file_name(first - first % SEG));
    let is_word = |(p, i, _): &&(PathBuf, usize, u8)| {
        *p == seg_of_first && (*i as u64) < first % SEG + 8 && *i as u64 >= first % SEG
    };
    let (word, mut rest): (Vec<_>, Vec<_>) = all.iter().partition(|x| is_word(x));
    // A blank filler in the full segment is its own commit word, written before the records.
    let (blank, body_bytes): (Vec<_>, Vec<_>) = rest.drain(..).partition(|(p, _, _)| *p != seg_of_first);
    let mut rng = seed;
    let mut shuffle = |v: &mut Vec<&(PathBuf, usize, u8)>| {
        for i in (1..v.len()).rev() {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            v.swap(i, (rng % (i as u64 + 1)) as usize);
        }
    };
    let order: Vec<&(PathBuf, usize, u8)> = if commit_last {
        let mut b = body_bytes;
        shuffle(&mut b);
        blank.into_iter().chain(b).chain(word).collect()
    } else {
        let mut v: Vec<_> = blank.into_iter().chain(body_bytes).chain(word).collect();
        shuffle(&mut v);
        v
    };
    let n = order.len();
    let step = (n / 150).max(1);
    let mut cuts: Vec<usize> = (0..n).step_by(step).collect();
    cuts.extend([n.saturating_sub(1), n.saturating_sub(8)]);
    let root = dir.path().join("img");
    for &k in &cuts {
        write_files(&root, &image(&base, &after, &order[..k]));
        let store = open_mode(&root, RecoveryMode::Strict).unwrap_or_else(|e| {
            panic!("a kill after {k} of {n} bytes (seed {seed}) left a store that does not open: {e}")
        });
        let got = records(&store);
        if commit_last {
            assert_eq!(got, acked, "cut {k} of {n} (seed {seed}): exactly the acknowledged records");
        } else {
            // Out of rmq's order the bytes cannot always tell (a record whose commit word is written and
            // whose missing bytes are outside its body validates): every acknowledged record, and nothing but
            // records of the batch after them.
            assert_eq!(got.get(..acked.len()), Some(&acked[..]), "cut {k} of {n} (seed {seed})");
            assert!(got.iter().skip(acked.len()).all(|(o, _)| *o >= first), "cut {k} of {n} (seed {seed})");
            continue;
        }
        let report = store.open_report();
        assert!(report.damage.is_empty());
        // (A blank filler alone is a whole, valid unit: the log then ends at the next segment's start.)
        let written_after_base = order[..k].iter().any(|(p, _, _)| *p == seg_of_first);
        if written_after_base && k > 0 {
            assert!(report.torn_bytes > 0 || report.end_offset < first, "cut {k}: the torn bytes are reported");
        }
        // The store goes on: the next put takes the place and the queue offset of the unfinished batch.
        let r = store.put(&PutMessage::new("T", 0, b"after")).unwrap();
        assert_eq!(r.queue_offset, 15);
        drop(store);
        let store = MessageStore::open(&root, small_config()).unwrap();
        assert_eq!(records(&store).len(), acked.len() + 1);
    }
    // The whole append, commit word included: the batch is there.
    write_files(&root, &image(&base, &after, &order));
    let store = open_mode(&root, RecoveryMode::Strict).unwrap();
    assert_eq!(records(&store).len(), acked.len() + sizes.len());
    cuts.len()
}

#[test]
fn an_unfinished_batch_in_any_byte_order_leaves_exactly_the_acknowledged_messages() {
    // A batch in the current segment, and one that rolls into a new segment (blank filler first).
    for (sizes, seed) in [(vec![300, 200, 900, 50], 1u64), (vec![1500, 1400, 700], 7), (vec![64; 12], 99)] {
        assert!(torn_batch_images(&sizes, seed, true) > 50);
    }
}

#[test]
fn an_unfinished_batch_opens_even_when_its_commit_word_was_written_early() {
    // Not rmq's order (RocketMQ writes TOTALSIZE first): still a torn write, never a refused open.
    for (sizes, seed) in [(vec![300, 200, 900, 50], 3u64), (vec![1500, 1400, 700], 5)] {
        torn_batch_images(&sizes, seed, false);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]
    #[test]
    fn unfinished_batches_of_random_shapes(sizes in proptest::collection::vec(1usize..300, 1..8), seed in 1u64..u64::MAX) {
        torn_batch_images(&sizes, seed, true);
    }
}

/// A closed store with `n` messages on T/0 and its record offsets.
fn closed_store(root: &Path, n: usize) -> Vec<u64> {
    let store = MessageStore::open(root, small_config()).unwrap();
    let offsets = (0..n)
        .map(|i| {
            let b = body(i, 60);
            let key = format!("key{i}");
            store.put(&PutMessage { keys: Some(&key), ..PutMessage::new("T", 0, &b) }).unwrap().offsets[0]
        })
        .collect();
    store.close().unwrap();
    offsets
}

fn flip(root: &Path, offset: u64, at: usize) -> PathBuf {
    let path = root.join("commitlog").join(rmq::file_queue::file_name(offset - offset % SEG));
    let mut data = std::fs::read(&path).unwrap();
    data[(offset % SEG) as usize + at] ^= 0x5A;
    std::fs::write(&path, data).unwrap();
    path
}

#[test]
fn damage_in_the_last_record_of_a_cleanly_closed_store_is_refused_not_taken_for_a_torn_write() {
    let dir = tempfile::tempdir().unwrap();
    let offsets = closed_store(dir.path(), 50);
    let last = *offsets.last().unwrap();
    let path = flip(dir.path(), last, 100); // a body byte: the CRC fails
    let before = files(dir.path());
    match open_mode(dir.path(), RecoveryMode::Strict) {
        Err(Error::Corruption { path: p, offset, reason }) => {
            assert_eq!((p, offset), (path.clone(), last as i64));
            assert!(reason.contains("recovery=\"truncate\""), "{reason}");
        }
        other => panic!("expected Corruption, got {other:?}"),
    }
    assert_eq!(files(dir.path()), before, "a refused open changes nothing");
    let store = open_mode(dir.path(), RecoveryMode::Truncate).unwrap();
    let r = store.open_report().clone();
    assert_eq!((r.end_offset, r.torn_bytes, r.damage.len()), (last, 0, 1));
    assert_eq!((r.damage[0].offset, r.damage[0].dropped_records, r.damage[0].path.clone()), (last, 0, path));
    assert_eq!(records(&store).len(), 49);
    // The cut record's consume-queue entry went with it: its queue offset is free again, used once.
    assert_eq!(store.put(&PutMessage::new("T", 0, b"x")).unwrap().queue_offset, 49);
}

#[test]
fn truncate_cuts_as_rocketmq_and_salvage_keeps_every_valid_record_after_the_damage() {
    for mode in [RecoveryMode::Truncate, RecoveryMode::Salvage] {
        let dir = tempfile::tempdir().unwrap();
        let offsets = closed_store(dir.path(), 60);
        let last_seg = offsets.last().unwrap() - offsets.last().unwrap() % SEG;
        let in_last: Vec<u64> = offsets.iter().copied().filter(|&o| o >= last_seg).collect();
        let victim = in_last[1];
        flip(dir.path(), victim, 0); // TOTALSIZE
        assert!(matches!(open_mode(dir.path(), RecoveryMode::Strict), Err(Error::Corruption { .. })));
        let store = open_mode(dir.path(), mode).unwrap();
        let got: Vec<u64> = records(&store).into_iter().map(|(o, _)| o).collect();
        let report = store.open_report().clone();
        assert_eq!(report.damage.len(), 1);
        assert_eq!(report.damage[0].offset, victim);
        let following = in_last.len() - 2;
        match mode {
            RecoveryMode::Truncate => {
                assert_eq!(got, offsets.iter().copied().filter(|&o| o < victim).collect::<Vec<_>>());
                assert_eq!(report.damage[0].dropped_records, following as u64);
            }
            _ => {
                assert_eq!(got, offsets.iter().copied().filter(|&o| o != victim).collect::<Vec<_>>());
                assert_eq!(report.damage[0].bytes, in_last[2] - victim);
                // Every kept message is readable by queue, and the next put gets a fresh queue offset.
                let sub = Subscription::parse("*");
                let mut q = 0;
                let mut seen = 0;
                loop {
                    let res = store.get_message("g", "T", 0, q, 32, 1 << 20, &sub).unwrap();
                    seen += res.messages.len();
                    if res.next_begin_offset == q {
                        break;
                    }
                    q = res.next_begin_offset;
                }
                assert_eq!(seen, 59);
                assert_eq!(store.put(&PutMessage::new("T", 0, b"x")).unwrap().queue_offset, 60);
            }
        }
    }
}

fn cq_files(root: &Path, topic: &str, queue: i32) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root.join("consumequeue").join(topic).join(queue.to_string()))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

#[test]
fn a_consume_queue_that_lost_entries_is_rebuilt_and_no_queue_offset_is_reused() {
    // Issue 15 item 3: the first entry of T/0's last consume-queue file zeroed (a page lost in a power loss),
    // and, separately, an entry in the middle of a file; then a wrong entry (pointing at another record).
    for damage in ["first entry of the last file", "middle entry", "wrong entry at the tail"] {
        let dir = tempfile::tempdir().unwrap();
        let offsets = closed_store(dir.path(), 23);
        // Another queue written later, so the max dispatch frontier is beyond T/0's.
        {
            let store = MessageStore::open(dir.path(), small_config()).unwrap();
            store.put(&PutMessage::new("U", 0, b"later")).unwrap();
        }
        let files_ = cq_files(dir.path(), "T", 0);
        let (path, at, bytes) = match damage {
            "first entry of the last file" => (files_.last().unwrap().clone(), 0, vec![0u8; UNIT as usize]),
            "middle entry" => (files_[2].clone(), 2 * UNIT as usize, vec![0u8; UNIT as usize]),
            _ => {
                let mut e = std::fs::read(files_.last().unwrap()).unwrap()[..8].to_vec();
                e.copy_from_slice(&(offsets[3] as i64).to_be_bytes());
                let last_entry = (22 % 5) * UNIT as usize;
                (files_.last().unwrap().clone(), last_entry, e)
            }
        };
        let mut data = std::fs::read(&path).unwrap();
        data[at..at + bytes.len()].copy_from_slice(&bytes);
        std::fs::write(&path, data).unwrap();
        let store = MessageStore::open(dir.path(), small_config()).unwrap();
        assert_eq!(store.recovery_report().rebuilt_queues, vec!["T/0".to_owned()], "{damage}");
        let cq = store.consume_queue("T", 0).unwrap();
        assert_eq!(cq.max_offset(), 23, "{damage}");
        for (q, &o) in offsets.iter().enumerate() {
            assert_eq!(cq.entry(q as u64).unwrap().offset, o as i64, "{damage}: entry {q}");
        }
        assert_eq!(store.put(&PutMessage::new("T", 0, b"next")).unwrap().queue_offset, 23, "{damage}");
    }
}

#[test]
fn get_message_reports_a_damaged_record_and_delivers_every_intact_one_after_it() {
    // Issue 15 item 4: 1,000 messages on T/0 in 64 KiB segments, the first 20 bytes of message 100 zeroed.
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = small_config();
    cfg.commit_log.mapped_file_size_commit_log = 64 * 1024;
    cfg.consume_queue.mapped_file_size_consume_queue = 300_000 * UNIT;
    let offsets: Vec<u64> = {
        let store = MessageStore::open(dir.path(), cfg.clone()).unwrap();
        let v = (0..1000).map(|i| store.put(&PutMessage::new("T", 0, &body(i, 200))).unwrap().offsets[0]).collect();
        store.close().unwrap();
        v
    };
    let victim = offsets[100];
    let path = dir.path().join("commitlog").join(rmq::file_queue::file_name(victim - victim % (64 * 1024)));
    let mut data = std::fs::read(&path).unwrap();
    data[(victim % (64 * 1024)) as usize..][..20].fill(0);
    std::fs::write(&path, data).unwrap();
    let store = MessageStore::open(dir.path(), cfg).unwrap();
    let sub = Subscription::parse("*");
    let res = store.get_message("g", "T", 0, 99, 32, 1 << 20, &sub).unwrap();
    assert_eq!(res.status, GetMessageStatus::Found);
    let got: Vec<i64> = res.queue_offsets.clone();
    assert_eq!(got[0], 99);
    assert_eq!(got[1], 101, "reading goes on with the entry after the damaged one");
    assert_eq!(got.len(), 32);
    assert_eq!(res.damaged.len(), 1);
    assert_eq!((res.damaged[0].0, res.damaged[0].1), (100, victim as i64));
    let (total, recent) = store.dispatch_issues();
    assert!(total >= 1 && recent.iter().any(|i| i.offset == victim), "{recent:?}");
    // Draining the queue delivers all 999 intact messages.
    let mut q = 0;
    let mut seen = 0;
    while q < 1000 {
        let res = store.get_message("g", "T", 0, q, 32, 1 << 20, &sub).unwrap();
        seen += res.messages.len();
        q = res.next_begin_offset;
    }
    assert_eq!(seen, 999);
}
