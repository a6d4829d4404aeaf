//! Segments, reopen and recovery through `MessageStore` and `CommitLog` (spec §1.1, §1.8, §8, §10, §16.3,
//! §16.9): records across small segments read back by offset and by scan, the end-of-file blank, reopen,
//! torn tails, corruption in the middle, pre-created zero segments, the directory lock, rejected puts that
//! must change nothing, and a crash image (files copied while the store is open).
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use rmq::commitlog::CommitLog;
use rmq::config::{CommitLogConfig, StoreConfig};
use rmq::file_queue::file_name;
use rmq::message::decode::{check_record, property_crc_ok, CheckOptions, RecordCheck};
use rmq::message::ids::decode_offset_msg_id;
use rmq::message::properties::{self, keys};
use rmq::message::{PutMessageStatus, TransactionType, BLANK_MAGIC};
use rmq::store::{BatchItem, MessageStore, PutMessage};
use rmq::Error;

const SEG: u64 = 4096;

fn config(segment: u64) -> StoreConfig {
    let mut c = StoreConfig::default();
    c.commit_log.mapped_file_size_commit_log = segment;
    c
}

fn open(root: &Path) -> MessageStore {
    MessageStore::open(root, config(SEG)).unwrap()
}

fn commitlog_dir(root: &Path) -> PathBuf {
    root.join("commitlog")
}

fn segment_path(root: &Path, start: u64) -> PathBuf {
    commitlog_dir(root).join(file_name(start))
}

/// Names of the commitlog segment files, sorted.
fn segment_names(root: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(commitlog_dir(root))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Every commitlog file with its bytes.
fn snapshot(root: &Path) -> BTreeMap<String, Vec<u8>> {
    segment_names(root).into_iter().map(|n| (n.clone(), std::fs::read(commitlog_dir(root).join(&n)).unwrap())).collect()
}

/// Makes the store look as a process killed during its last put leaves it: the abort file of the run that did
/// not close, and no derived entry for the unfinished put (they are rebuilt on open).
fn crashed(root: &Path) {
    std::fs::write(root.join("abort"), b"").unwrap();
    for d in ["consumequeue", "index"] {
        let _ = std::fs::remove_dir_all(root.join(d));
    }
}

fn patch_file(path: &Path, at: usize, bytes: &[u8]) {
    let mut data = std::fs::read(path).unwrap();
    data[at..at + bytes.len()].copy_from_slice(bytes);
    std::fs::write(path, data).unwrap();
}

/// Deterministic body of `len` bytes derived from `seed` (no zero bytes, so torn-tail sizes are exact).
fn body(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 255) as u8 + 1
        })
        .collect()
}

/// What a test expects to find at one offset.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Expected {
    offset: u64,
    topic: String,
    queue_id: i32,
    queue_offset: i64,
    body: Vec<u8>,
}

/// Reads the whole log with `next_record`, from the first offset.
fn scan(store: &MessageStore) -> Vec<Expected> {
    let mut out = Vec::new();
    let mut at = store.commitlog().min_offset();
    while let Some((rec, next)) = store.next_record(at).unwrap() {
        let bytes = rec.bytes();
        let h = &rec.header;
        assert_eq!(h.physical_offset as u64, rec.offset());
        assert_eq!(next, rec.offset() + h.total_size as u64);
        out.push(Expected {
            offset: rec.offset(),
            topic: String::from_utf8(h.topic(bytes).to_vec()).unwrap(),
            queue_id: h.queue_id,
            queue_offset: h.queue_offset,
            body: h.body(bytes).to_vec(),
        });
        at = next;
    }
    out
}

fn check_read_back(store: &MessageStore, expected: &[Expected]) {
    for e in expected {
        let rec = store.read(e.offset).unwrap().unwrap();
        let bytes = rec.bytes();
        assert_eq!(rec.offset(), e.offset);
        assert_eq!(rec.header.physical_offset as u64, e.offset);
        assert_eq!(rec.header.queue_id, e.queue_id);
        assert_eq!(rec.header.queue_offset, e.queue_offset);
        assert_eq!(rec.header.topic(bytes), e.topic.as_bytes());
        assert_eq!(rec.header.body(bytes), &e.body[..]);
    }
    assert_eq!(scan(store), expected);
}

/// Puts `n` messages with varied sizes over two topics and three queues; returns what was stored.
fn fill(store: &MessageStore, seed: u64, n: usize) -> Vec<Expected> {
    let mut out = Vec::new();
    for i in 0..n {
        let topic = if i % 3 == 0 { "TopicA" } else { "TopicB" };
        let queue_id = (i % 3) as i32;
        let data = body(seed + i as u64, 40 + (i * 97) % 700);
        let r = store.put(&PutMessage::new(topic, queue_id, &data)).unwrap();
        assert_eq!(r.status, PutMessageStatus::PutOk);
        out.push(Expected {
            offset: r.offsets[0],
            topic: topic.to_owned(),
            queue_id,
            queue_offset: r.queue_offset,
            body: data,
        });
    }
    out
}

#[test]
fn records_span_segments_and_read_back_by_offset_and_scan() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let expected = fill(&store, 1, 60);
    let end = store.commitlog().max_offset();
    assert!(end > 4 * SEG, "the test needs several segments, wrote {end} bytes");

    // Queue offsets are dense per (topic, queue).
    let mut next: HashMap<(String, i32), i64> = HashMap::new();
    for e in &expected {
        let slot = next.entry((e.topic.clone(), e.queue_id)).or_insert(0);
        assert_eq!(e.queue_offset, *slot);
        *slot += 1;
    }
    for ((topic, q), n) in &next {
        assert_eq!(store.next_queue_offset(topic, *q), *n);
    }

    // Every record sits inside one segment and ends at least 8 bytes before its end; whenever a record opens a
    // new segment, the previous one is closed by a blank holding the exact remaining length.
    let files = snapshot(dir.path());
    let mut blanks = Vec::new();
    let mut prev_end = 0u64;
    for e in &expected {
        let len = store.read(e.offset).unwrap().unwrap().header.total_size as u64;
        assert_eq!(e.offset / SEG, (e.offset + len - 1) / SEG);
        assert!(e.offset % SEG + len + 8 <= SEG);
        if e.offset != prev_end {
            assert_eq!(e.offset % SEG, 0, "a gap that is not a segment roll at {prev_end}");
            let seg = &files[&file_name(prev_end - prev_end % SEG)];
            let pos = (prev_end % SEG) as usize;
            assert_eq!(&seg[pos..pos + 4], &((SEG - prev_end % SEG) as i32).to_be_bytes());
            assert_eq!(&seg[pos + 4..pos + 8], &BLANK_MAGIC.to_be_bytes());
            // The blank is not a record: reads give nothing, scans step over it.
            assert!(store.read(prev_end).unwrap().is_none());
            blanks.push(prev_end);
        }
        prev_end = e.offset + len;
    }
    assert_eq!(prev_end, end);

    // Files: 20-digit start offsets, consecutive, all exactly one segment long.
    let names = segment_names(dir.path());
    let count = end.div_ceil(SEG);
    assert_eq!(names, (0..count).map(|k| file_name(k * SEG)).collect::<Vec<_>>());
    assert!(files.values().all(|f| f.len() == SEG as usize));
    assert_eq!(names[1], "00000000000000004096");

    check_read_back(&store, &expected);
    // Past the end: nothing. Inside a record: an error, not a misparse.
    assert!(store.read(end).unwrap().is_none());
    assert!(store.next_record(end).unwrap().is_none());
    assert!(matches!(store.read(expected[1].offset + 1), Err(Error::InvalidOffset { .. })));
    // Scanning from a segment start or from a blank works.
    assert_eq!(blanks.len() as u64, count - 1);
    assert_eq!(scan_from(&store, SEG).first().map(|e| e.offset), Some(SEG));
    let from_blank = scan_from(&store, blanks[1]);
    assert_eq!(from_blank.first().map(|e| e.offset), Some(blanks[1] - blanks[1] % SEG + SEG));
    assert_eq!(from_blank.len(), expected.iter().filter(|e| e.offset > blanks[1]).count());
}

fn scan_from(store: &MessageStore, mut at: u64) -> Vec<Expected> {
    let mut out = Vec::new();
    while let Some((rec, next)) = store.next_record(at).unwrap() {
        out.push(Expected {
            offset: rec.offset(),
            topic: String::new(),
            queue_id: rec.header.queue_id,
            queue_offset: rec.header.queue_offset,
            body: Vec::new(),
        });
        at = next;
    }
    out
}

#[test]
fn reopen_continues_commitlog_and_queue_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    assert!(!store.unclean_shutdown());
    let mut expected = fill(&store, 7, 25);
    let end = store.commitlog().max_offset();
    let queues: Vec<i64> = (0..3).map(|q| store.next_queue_offset("TopicB", q)).collect();
    store.close().unwrap();
    assert!(!dir.path().join("abort").exists(), "a clean close removes the abort file");
    assert!(matches!(store.put(&PutMessage::new("TopicA", 0, b"x")), Err(Error::Closed)));
    drop(store);

    let store = open(dir.path());
    assert!(!store.unclean_shutdown());
    assert!(dir.path().join("abort").exists(), "an open store is marked by the abort file");
    let report = store.open_report().clone();
    assert_eq!((report.end_offset, report.discarded_bytes, report.stop_reason), (end, 0, None));
    assert_eq!(store.commitlog().max_offset(), end);
    for (q, n) in queues.iter().enumerate() {
        assert_eq!(store.next_queue_offset("TopicB", q as i32), *n);
    }
    check_read_back(&store, &expected);

    // Appends continue exactly where the log ended, with the next queue offsets.
    let r = store.put(&PutMessage::new("TopicB", 1, b"after reopen")).unwrap();
    assert_eq!(r.offsets.as_slice(), [end]);
    assert_eq!(r.queue_offset, queues[1]);
    expected.push(Expected {
        offset: end,
        topic: "TopicB".into(),
        queue_id: 1,
        queue_offset: queues[1],
        body: b"after reopen".to_vec(),
    });
    expected.extend(fill(&store, 99, 20));
    drop(store); // Drop closes cleanly too.

    let store = open(dir.path());
    assert!(!store.unclean_shutdown());
    check_read_back(&store, &expected);
}

/// Writes records, closes, and returns the expectations plus the offset and length of the last record.
fn closed_store_with_records(root: &Path, n: usize) -> (Vec<Expected>, u64, u64) {
    let store = open(root);
    let expected = fill(&store, 3, n);
    let last = expected.last().unwrap().offset;
    let len = store.commitlog().max_offset() - last;
    store.close().unwrap();
    (expected, last, len)
}

#[test]
fn torn_last_record_is_discarded_on_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (expected, last, len) = closed_store_with_records(dir.path(), 12);
    let seg_start = last - last % SEG;
    let path = segment_path(dir.path(), seg_start);
    let pos = (last - seg_start) as usize;
    // A crash half-way through copying the last record: its second half never reached the file.
    let half = (len / 2) as usize;
    patch_file(&path, pos + half, &vec![0u8; len as usize - half]);
    let written = std::fs::read(&path).unwrap()[pos..pos + half].iter().rposition(|&b| b != 0).unwrap() + 1;

    crashed(dir.path());
    let store = open(dir.path());
    let report = store.open_report().clone();
    assert_eq!(report.end_offset, last);
    assert_eq!(report.discarded_bytes, written as u64);
    assert_eq!(store.commitlog().max_offset(), last);
    check_read_back(&store, &expected[..expected.len() - 1]);
    // The torn bytes are zeroed, and the next record takes the torn one's place and queue offset.
    assert!(std::fs::read(&path).unwrap()[pos..].iter().all(|&b| b == 0));
    let torn = expected.last().unwrap();
    let r = store.put(&PutMessage::new(&torn.topic, torn.queue_id, b"again")).unwrap();
    assert_eq!((r.offsets[0], r.queue_offset), (last, torn.queue_offset));
}

#[test]
fn half_written_header_is_discarded() {
    // Spec §16.9 scenario 2: only the first 40 bytes of a record reached the file, with a TOTALSIZE that is
    // either plausible or larger than what remains of the segment.
    for claim_past_segment_end in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let (expected, last, len) = closed_store_with_records(dir.path(), 5);
        let end = last + len;
        assert!(end + len < SEG);
        let path = segment_path(dir.path(), 0);
        let mut head = std::fs::read(&path).unwrap()[last as usize..last as usize + 40].to_vec();
        if claim_past_segment_end {
            head[0..4].copy_from_slice(&((SEG - end) as i32 + 100).to_be_bytes());
        }
        head[28..36].copy_from_slice(&(end as i64).to_be_bytes());
        patch_file(&path, end as usize, &head);
        let written = head.iter().rposition(|&b| b != 0).unwrap() as u64 + 1;

        crashed(dir.path());
        let store = open(dir.path());
        assert_eq!(store.open_report().end_offset, end);
        assert_eq!(store.open_report().discarded_bytes, written);
        check_read_back(&store, &expected);
    }
}

#[test]
fn garbage_after_the_end_is_discarded_on_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (expected, last, len) = closed_store_with_records(dir.path(), 8);
    let end = last + len;
    let seg_start = end - end % SEG;
    let path = segment_path(dir.path(), seg_start);
    let garbage = body(42, 100);
    patch_file(&path, (end - seg_start) as usize, &garbage);

    crashed(dir.path());
    let store = open(dir.path());
    let report = store.open_report();
    assert_eq!((report.end_offset, report.discarded_bytes), (end, 100));
    assert!(report.stop_reason.is_some());
    check_read_back(&store, &expected);
    assert!(std::fs::read(&path).unwrap()[(end - seg_start) as usize..].iter().all(|&b| b == 0));
}

#[test]
fn flipped_body_byte_in_last_record_truncates_only_when_crc_is_checked() {
    // Spec §16.5: a body flip stops recovery when checkCRCOnRecover is on, and not when it is off.
    for check_crc in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let (expected, last, _) = closed_store_with_records(dir.path(), 6);
        let seg_start = last - last % SEG;
        let path = segment_path(dir.path(), seg_start);
        let body_at = (last - seg_start) as usize + 88; // v1, IPv4 hosts: BODY at 88
        let byte = std::fs::read(&path).unwrap()[body_at];
        patch_file(&path, body_at, &[byte ^ 0x01]);

        let mut cfg = config(SEG);
        cfg.commit_log.check_crc_on_recover = check_crc;
        crashed(dir.path());
        let store = MessageStore::open(dir.path(), cfg).unwrap();
        if check_crc {
            assert_eq!(store.open_report().end_offset, last);
            assert!(store.open_report().discarded_bytes > 0);
            check_read_back(&store, &expected[..expected.len() - 1]);
        } else {
            assert_eq!(store.open_report().discarded_bytes, 0);
            assert_eq!(scan(&store).len(), expected.len());
        }
    }
}

/// Damage applied to the `nth` record of the last segment, which has valid records after it.
fn corrupt_in_last_segment(nth: usize, damage: impl Fn(&mut [u8])) {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    // Several segments; the damaged record and its successors sit in the last one, which open validates.
    let expected = fill(&store, 5, 40);
    let seg_start = store.commitlog().max_offset() - store.commitlog().max_offset() % SEG;
    let in_last: Vec<&Expected> = expected.iter().filter(|e| e.offset >= seg_start).collect();
    assert!(in_last.len() >= 3, "need three records in the last segment");
    let victim = in_last[nth].offset;
    store.close().unwrap();
    drop(store);

    let path = segment_path(dir.path(), seg_start);
    let mut data = std::fs::read(&path).unwrap();
    damage(&mut data[(victim - seg_start) as usize..]);
    std::fs::write(&path, data).unwrap();
    let before = snapshot(dir.path());

    match MessageStore::open(dir.path(), config(SEG)) {
        Err(Error::Corruption { path: p, offset, .. }) => {
            assert_eq!(p, path);
            assert_eq!(offset, victim as i64);
        }
        other => panic!("expected Error::Corruption, got {other:?}"),
    }
    assert_eq!(snapshot(dir.path()), before, "a refused open must not change any commitlog byte");
    assert!(!dir.path().join("abort").exists());
    // The failed open released the lock: a second attempt fails the same way, not with Locked.
    assert!(matches!(MessageStore::open(dir.path(), config(SEG)), Err(Error::Corruption { .. })));
}

#[test]
fn crc_failure_in_the_middle_refuses_to_open_and_changes_nothing() {
    corrupt_in_last_segment(1, |rec| rec[88] ^= 0x80);
}

#[test]
fn length_mismatch_in_the_middle_refuses_to_open_and_changes_nothing() {
    // Spec §16.9 scenario 4: calMsgLength ≠ TOTALSIZE (here BODYLENGTH is off by one).
    corrupt_in_last_segment(1, |rec| {
        let b = i32::from_be_bytes(rec[84..88].try_into().unwrap());
        rec[84..88].copy_from_slice(&(b - 1).to_be_bytes());
    });
}

#[test]
fn zeroed_record_in_the_middle_refuses_to_open() {
    corrupt_in_last_segment(1, |rec| rec[..8].fill(0));
}

#[test]
fn damaged_first_record_of_the_last_segment_refuses_to_open() {
    // Open validates from the last segment that starts with a record: a body flip keeps that segment, a
    // destroyed header makes validation start one segment earlier and cross the blank. Both must refuse.
    corrupt_in_last_segment(0, |rec| rec[88] ^= 0x01);
    corrupt_in_last_segment(0, |rec| rec[..8].fill(0));
}

#[test]
fn pre_created_zero_segments_are_deleted_not_mistaken_for_data() {
    // After a roll: segment 0 ends with a blank, the log ends inside segment 1, and the allocator's next file
    // (segment 2) survived the crash as zeros. RocketMQ's truncateDirtyFiles deletes it; so does rmq.
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut expected = fill(&store, 11, 12);
    let end = store.commitlog().max_offset();
    assert!(end > SEG && end < 2 * SEG, "log must end in segment 1, ends at {end}");
    store.close().unwrap();
    drop(store);
    std::fs::write(segment_path(dir.path(), 2 * SEG), vec![0u8; SEG as usize]).unwrap();
    // An interrupted creation leaves an empty last file: deleted on open (MappedFileQueue.load).
    std::fs::write(segment_path(dir.path(), 3 * SEG), b"").unwrap();

    let store = open(dir.path());
    assert_eq!(store.open_report().end_offset, end);
    assert_eq!(store.open_report().discarded_bytes, 0);
    assert_eq!(store.open_report().removed_files, 1);
    assert_eq!(segment_names(dir.path()), vec![file_name(0), file_name(SEG)]);
    check_read_back(&store, &expected);
    // Appends fill segment 1 and then roll into a new segment 2.
    expected.extend(fill(&store, 12, 12));
    let end = store.commitlog().max_offset();
    assert!(end > 2 * SEG);
    let count = end.div_ceil(SEG);
    assert_eq!(segment_names(dir.path()), (0..count).map(|k| file_name(k * SEG)).collect::<Vec<_>>());
    check_read_back(&store, &expected);
    drop(store);
    let store = open(dir.path());
    check_read_back(&store, &expected);
}

#[test]
fn pre_created_zero_segment_after_a_partly_filled_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut expected = fill(&store, 13, 3);
    let end = store.commitlog().max_offset();
    assert!(end < SEG);
    store.close().unwrap();
    drop(store);
    std::fs::write(segment_path(dir.path(), SEG), vec![0u8; SEG as usize]).unwrap();

    let store = open(dir.path());
    assert_eq!(store.open_report().end_offset, end);
    assert_eq!(store.open_report().removed_files, 1);
    assert_eq!(segment_names(dir.path()), vec![file_name(0)]);
    let r = store.put(&PutMessage::new("TopicA", 0, b"next")).unwrap();
    assert_eq!(r.offsets.as_slice(), [end]);
    expected.push(Expected {
        offset: end,
        topic: "TopicA".into(),
        queue_id: 0,
        queue_offset: r.queue_offset,
        body: b"next".to_vec(),
    });
    check_read_back(&store, &expected);
}

#[test]
fn second_open_of_an_open_store_is_locked() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.put(&PutMessage::new("TopicA", 0, b"x")).unwrap();
    match MessageStore::open(dir.path(), config(SEG)) {
        Err(Error::Locked(p)) => assert_eq!(p, dir.path()),
        other => panic!("expected Error::Locked, got {other:?}"),
    }
    // The failed open changed nothing for the holder.
    assert_eq!(scan(&store).len(), 1);
    store.close().unwrap();
    let again = open(dir.path());
    assert_eq!(scan(&again).len(), 1);
    drop(again);
    drop(store);
    let third = open(dir.path());
    assert_eq!(scan(&third).len(), 1);
}

#[test]
fn rejected_puts_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(SEG);
    cfg.commit_log.max_message_size = 1024;
    let store = MessageStore::open(dir.path(), cfg).unwrap();
    store.put(&PutMessage::new("T", 0, b"first")).unwrap();
    let end = store.commitlog().max_offset();
    let before = snapshot(dir.path());
    let host: SocketAddr = "127.0.0.1:1".parse().unwrap();

    let long_topic = "a".repeat(128);
    for topic in ["../x", "a/b", "a\0b", "", "   ", &long_topic, "SCHEDULE_TOPIC_XXXX", "标签"] {
        let err = store.put(&PutMessage::new(topic, 0, b"x")).unwrap_err();
        assert!(matches!(err, Error::InvalidTopic { .. }), "{topic:?}: {err:?}");
        assert_eq!(err.put_status(), Some(PutMessageStatus::MessageIllegal));
        let batch = [BatchItem { body: b"x", ..BatchItem::default() }];
        let err = store.put_batch(topic, 0, &batch, 0, host, None, 0, true).unwrap_err();
        assert!(matches!(err, Error::InvalidTopic { .. }), "batch {topic:?}: {err:?}");
    }

    let big = vec![1u8; 1025];
    let err = store.put(&PutMessage::new("T", 0, &big)).unwrap_err();
    assert!(matches!(err, Error::MessageTooLarge(_)), "{err:?}");
    assert_eq!(err.put_status(), Some(PutMessageStatus::MessageIllegal));

    // A record that fits the body limit but not a segment.
    store.set_max_message_size(8192);
    let huge = vec![1u8; 5000];
    assert!(matches!(store.put(&PutMessage::new("T", 0, &huge)), Err(Error::MessageTooLarge(_))));
    let items = [BatchItem { body: &huge[..1500], ..BatchItem::default() }; 3];
    assert!(matches!(store.put_batch("T", 0, &items, 0, host, None, 0, true), Err(Error::MessageTooLarge(_))));
    store.set_max_message_size(1024);

    let long_value = "v".repeat(33_000);
    let props = [("K", long_value.as_str())];
    let err = store.put(&PutMessage { properties: &props, ..PutMessage::new("T", 0, b"x") }).unwrap_err();
    assert!(matches!(err, Error::PropertiesTooLarge { .. }), "{err:?}");
    assert_eq!(err.put_status(), Some(PutMessageStatus::PropertiesSizeExceeded));

    let bad_props: [&[(&str, &str)]; 7] = [
        &[("a\u{1}b", "v")],
        &[("a\u{2}b", "v")],
        &[("k", "v\u{1}")],
        &[("k", "\u{2}v")],
        &[("", "v")],
        &[("k", "")],
        &[("INNER_NUM", "2")],
    ];
    for props in bad_props {
        let err = store.put(&PutMessage { properties: props, ..PutMessage::new("T", 0, b"x") }).unwrap_err();
        assert!(matches!(err, Error::InvalidProperty { .. }), "{props:?}: {err:?}");
        assert_eq!(err.put_status(), Some(PutMessageStatus::MessageIllegal));
        let items = [
            BatchItem { body: b"ok", ..BatchItem::default() },
            BatchItem { body: b"x", properties: props, ..BatchItem::default() },
        ];
        let err = store.put_batch("T", 0, &items, 0, host, None, 0, true).unwrap_err();
        assert!(matches!(err, Error::InvalidProperty { .. }), "batch {props:?}: {err:?}");
    }
    for (tags, keys_text) in [(Some(""), None), (Some("a\u{2}"), None), (None, Some("")), (None, Some("k\u{1}1"))] {
        let msg = PutMessage { tags, keys: keys_text, ..PutMessage::new("T", 0, b"x") };
        assert!(matches!(store.put(&msg), Err(Error::InvalidProperty { .. })), "{tags:?} {keys_text:?}");
    }
    let dup = [("TAGS", "B")];
    let msg = PutMessage { tags: Some("A"), properties: &dup, ..PutMessage::new("T", 0, b"x") };
    assert!(matches!(store.put(&msg), Err(Error::InvalidProperty { .. })));

    for msg in [
        PutMessage { queue_id: -1, ..PutMessage::new("T", 0, b"x") },
        PutMessage { sys_flag: 0x4, ..PutMessage::new("T", 0, b"x") },
        PutMessage { sys_flag: 0x10, ..PutMessage::new("T", 0, b"x") },
        PutMessage { sys_flag: 0x401, ..PutMessage::new("T", 0, b"x") },
        PutMessage { reconsume_times: -1, ..PutMessage::new("T", 0, b"x") },
        PutMessage { prepared_transaction_offset: -1, ..PutMessage::new("T", 0, b"x") },
    ] {
        let err = store.put(&msg).unwrap_err();
        assert!(matches!(err, Error::IllegalMessage(_)), "{msg:?}: {err:?}");
    }
    assert!(matches!(store.put_batch("T", 0, &[], 0, host, None, 0, true), Err(Error::IllegalMessage(_))));
    let delay = [("DELAY", "3")];
    let items = [BatchItem { body: b"x", properties: &delay, ..BatchItem::default() }];
    assert!(matches!(store.put_batch("T", 0, &items, 0, host, None, 0, true), Err(Error::IllegalMessage(_))));
    let items = [BatchItem { body: &big[..600], ..BatchItem::default() }; 2];
    assert!(matches!(store.put_batch("T", 0, &items, 0, host, None, 0, true), Err(Error::MessageTooLarge(_))));

    // Nothing moved: no byte, no commitlog offset, no queue offset.
    assert_eq!(store.commitlog().max_offset(), end);
    assert_eq!(snapshot(dir.path()), before);
    assert_eq!(store.next_queue_offset("T", 0), 1);
    for topic in ["T", "../x", "a/b", "SCHEDULE_TOPIC_XXXX"] {
        assert_eq!(store.next_queue_offset(topic, 1), 0);
    }
    let r = store.put(&PutMessage::new("T", 0, b"second")).unwrap();
    assert_eq!((r.offsets[0], r.queue_offset), (end, 1));
    assert_eq!(store.put(&PutMessage::new("T", 1, b"x")).unwrap().queue_offset, 0);
    assert_eq!(store.put(&PutMessage::new("U", 0, b"x")).unwrap().queue_offset, 0);
}

/// Copies the commitlog segments and the marker files of a store (open or not) to a fresh directory, as a
/// crash would leave them: the page cache holds every acknowledged write, nothing was flushed or closed.
fn crash_image(from: &Path) -> tempfile::TempDir {
    let to = tempfile::tempdir().unwrap();
    std::fs::create_dir(commitlog_dir(to.path())).unwrap();
    for name in segment_names(from) {
        std::fs::copy(commitlog_dir(from).join(&name), commitlog_dir(to.path()).join(&name)).unwrap();
    }
    for marker in ["abort", "lock"] {
        std::fs::copy(from.join(marker), to.path().join(marker)).unwrap();
    }
    to
}

#[test]
fn crash_image_copied_while_open_reopens_with_every_record() {
    // `kill -9` without a child process: copy the files of a store that is still open (no flush, no close).
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let expected = fill(&store, 17, 40);
    let crash = crash_image(dir.path());
    let queues: Vec<i64> = (0..3).map(|q| store.next_queue_offset("TopicB", q)).collect();
    let end = store.commitlog().max_offset();
    drop(store);

    let copy = open(crash.path());
    assert!(copy.unclean_shutdown(), "the copied abort file marks the image as a crash");
    assert_eq!(copy.open_report().end_offset, end);
    assert_eq!(copy.open_report().discarded_bytes, 0);
    check_read_back(&copy, &expected);
    for (q, n) in queues.iter().enumerate() {
        assert_eq!(copy.next_queue_offset("TopicB", q as i32), *n);
    }
    assert_eq!(copy.put(&PutMessage::new("TopicB", 2, b"x")).unwrap().queue_offset, queues[2]);
    copy.close().unwrap();
    // A clean close of the recovered copy clears the mark.
    assert!(!open(crash.path()).unclean_shutdown());
}

#[test]
fn batch_that_does_not_fit_moves_whole_to_the_next_segment() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let host: SocketAddr = "127.0.0.1:1".parse().unwrap();
    // Each member: 91 + body 400 + topic 1 + properties 62 (TAGS, WAIT, UNIQ_KEY) = 554 bytes. Leave room for
    // two members and the blank, not for three.
    let len = 554u64;
    let target_remaining = 2 * len + 8 + 100;
    let first = store.put(&PutMessage::new("Fill", 0, b"0123456789")).unwrap().wrote_bytes;
    let overhead = first - 10;
    let filler = vec![9u8; (SEG - target_remaining - first - overhead) as usize];
    store.put(&PutMessage::new("Fill", 0, &filler)).unwrap();
    let end = store.commitlog().max_offset();
    let remaining = SEG - end;
    assert_eq!(remaining, target_remaining);
    // Two members fit in what is left, three do not: the whole batch moves.
    let member = vec![3u8; 400];
    let items = [BatchItem { body: &member, tags: Some("TagA"), ..BatchItem::default() }; 3];
    let r = store.put_batch("T", 2, &items, 0, host, None, 0, true).unwrap();
    assert_eq!(r.wrote_bytes, 3 * len);
    assert!(2 * len + 8 <= remaining && 3 * len + 8 > remaining, "len {len}, remaining {remaining}");
    assert_eq!(r.offsets.as_slice(), [SEG, SEG + len, SEG + 2 * len]);
    assert_eq!(r.queue_offset, 0);
    let seg0 = std::fs::read(segment_path(dir.path(), 0)).unwrap();
    assert_eq!(&seg0[end as usize..end as usize + 4], &(remaining as i32).to_be_bytes());
    assert_eq!(&seg0[end as usize + 4..end as usize + 8], &BLANK_MAGIC.to_be_bytes());
    assert!(seg0[end as usize + 8..].iter().all(|&b| b == 0), "nothing of the batch before the roll");
    let mut store_ts = Vec::new();
    for (i, &off) in r.offsets.iter().enumerate() {
        let rec = store.read(off).unwrap().unwrap();
        assert_eq!(rec.header.queue_offset, i as i64);
        assert_eq!(rec.header.body(rec.bytes()), &member[..]);
        store_ts.push(rec.header.store_timestamp);
    }
    assert!(store_ts.iter().all(|&t| t == r.store_timestamp), "one store timestamp per batch");
    let ids = r.msg_ids();
    assert_eq!(ids.len(), 3);
    for (id, &off) in ids.iter().zip(&r.offsets) {
        assert_eq!(decode_offset_msg_id(id), Some((r.store_host, off as i64)));
    }
    assert_eq!(store.next_queue_offset("T", 2), 3);
}

#[test]
fn transactions_prepared_and_rollback_take_no_queue_offset() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.put(&PutMessage::new("T", 0, b"plain")).unwrap();
    let half = PutMessage { transaction: TransactionType::Prepared, ..PutMessage::new("T", 0, b"half") };
    let prepared = store.put(&half).unwrap();
    assert_eq!(prepared.queue_offset, 0);
    let rb = PutMessage { transaction: TransactionType::Rollback, ..PutMessage::new("T", 0, b"rollback") };
    assert_eq!(store.put(&rb).unwrap().queue_offset, 0);
    assert_eq!(store.next_queue_offset("T", 0), 1);
    let commit = PutMessage {
        transaction: TransactionType::Commit,
        prepared_transaction_offset: prepared.offsets[0] as i64,
        ..PutMessage::new("T", 0, b"commit")
    };
    let committed = store.put(&commit).unwrap();
    assert_eq!(committed.queue_offset, 1);
    let rec = store.read(prepared.offsets[0]).unwrap().unwrap();
    assert_eq!((rec.header.queue_offset, rec.header.sys_flag & 0xC), (0, 0x4));
    let rec = store.read(committed.offsets[0]).unwrap().unwrap();
    assert_eq!(rec.header.sys_flag & 0xC, 0x8);
    assert_eq!(rec.header.prepared_transaction_offset, prepared.offsets[0] as i64);
    drop(store);
    // The rebuilt queue table ignores PREPARED / ROLLBACK records too.
    let store = open(dir.path());
    assert_eq!(store.next_queue_offset("T", 0), 2);
}

#[test]
fn ids_and_properties_the_store_adds() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let r =
        store.put(&PutMessage { tags: Some("TagA"), keys: Some("k1 k2"), ..PutMessage::new("T", 0, b"x") }).unwrap();
    let rec = store.read(r.offsets[0]).unwrap().unwrap();
    let props = rec.header.properties(rec.bytes());
    let uniq = &r.uniq_keys[0];
    assert_eq!(uniq.len(), 32);
    assert!(uniq.starts_with("7F000001"), "UNIQ_KEY carries the store host IP: {uniq}");
    assert_eq!(&uniq[8..12], format!("{:04X}", std::process::id() as u16));
    assert_eq!(properties::get_raw(props, keys::UNIQ_KEY), Some(uniq.as_bytes()));
    assert_eq!(properties::get_raw(props, keys::TAGS), Some(&b"TagA"[..]));
    assert_eq!(properties::get_raw(props, keys::KEYS), Some(&b"k1 k2"[..]));
    assert_eq!(properties::get_raw(props, keys::WAIT), Some(&b"true"[..]));
    assert_eq!(properties::get_raw(props, keys::CLUSTER), Some(&b"DefaultCluster"[..]));
    assert_eq!(r.msg_ids(), vec!["7F00000100002A9F0000000000000000".to_owned()]);
    assert_eq!(decode_offset_msg_id(&r.msg_ids()[0]), Some((r.store_host, 0)));
    let r2 = store.put(&PutMessage::new("T", 0, b"y")).unwrap();
    assert_eq!(&r2.uniq_keys[0][..20], &uniq[..20], "per-process prefix");
    assert_eq!(decode_offset_msg_id(&r2.msg_ids()[0]), Some((r.store_host, r2.offsets[0] as i64)));
    // A producer-supplied UNIQ_KEY is stored once and not replaced.
    let given = [("UNIQ_KEY", "C0A80001A1B218B4AAC2000000000000")];
    let r3 = store.put(&PutMessage { properties: &given, ..PutMessage::new("T", 0, b"z") }).unwrap();
    let rec = store.read(r3.offsets[0]).unwrap().unwrap();
    let props = rec.header.properties(rec.bytes());
    assert_eq!(properties::iter_raw(props).filter(|(n, _)| *n == b"UNIQ_KEY").count(), 1);
    assert_eq!(properties::get_raw(props, keys::UNIQ_KEY), Some(&b"C0A80001A1B218B4AAC2000000000000"[..]));
}

#[test]
fn property_crc_store_reopens_under_forced_verification() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(SEG);
    cfg.commit_log.enabled_append_prop_crc = true;
    cfg.commit_log.force_verify_prop_crc = true;
    let store = MessageStore::open(dir.path(), cfg.clone()).unwrap();
    // A producer's own __CRC32# entry is replaced by the store's.
    let own = [("__CRC32#", "1234567890"), ("a", "b")];
    store.put(&PutMessage { properties: &own, ..PutMessage::new("T", 0, b"x") }).unwrap();
    let mut expected = fill(&store, 21, 30);
    expected.insert(0, Expected { offset: 0, topic: "T".into(), queue_id: 0, queue_offset: 0, body: b"x".to_vec() });
    let force = CheckOptions { check_crc: true, force_prop_crc: true };
    for e in &expected {
        let rec = store.read(e.offset).unwrap().unwrap();
        let bytes = rec.bytes();
        assert!(property_crc_ok(bytes, &rec.header));
        assert!(matches!(check_record(bytes, force), RecordCheck::Message(_)));
        let props = rec.header.properties(bytes);
        assert_eq!(properties::iter_raw(props).filter(|(n, _)| *n == b"__CRC32#").count(), 1);
        assert!(props.ends_with(b"\x02") && props[props.len() - 20..].starts_with(b"__CRC32#\x01"));
    }
    drop(store);
    let store = MessageStore::open(dir.path(), cfg).unwrap();
    assert_eq!(store.open_report().discarded_bytes, 0);
    check_read_back(&store, &expected);
}

#[test]
fn concurrent_puts_keep_queues_dense_and_the_log_consistent() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    std::thread::scope(|s| {
        for t in 0..4 {
            let store = &store;
            s.spawn(move || {
                for i in 0..100u64 {
                    let data = body(t * 1000 + i, 30 + (i as usize * 13) % 300);
                    store.put(&PutMessage::new("T", (t % 2) as i32, &data)).unwrap();
                }
            });
        }
    });
    let all = scan(&store);
    assert_eq!(all.len(), 400);
    for q in 0..2 {
        let offsets: Vec<i64> = all.iter().filter(|e| e.queue_id == q).map(|e| e.queue_offset).collect();
        assert_eq!(offsets, (0..200).collect::<Vec<_>>(), "queue {q}: offsets follow log order");
    }
    let end = store.commitlog().max_offset();
    drop(store);
    let store = open(dir.path());
    assert_eq!(store.commitlog().max_offset(), end);
    assert_eq!(scan(&store).len(), 400);
}

/// One step of the model-based test.
#[derive(Debug, Clone)]
enum Op {
    Put { queue: i32, len: usize },
    Batch { queue: i32, n: usize, len: usize },
    Reopen,
    Crash,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..3i32, 0..900usize).prop_map(|(queue, len)| Op::Put { queue, len }),
        3 => (0..3i32, 1..6usize, 0..300usize).prop_map(|(queue, n, len)| Op::Batch { queue, n, len }),
        1 => Just(Op::Reopen),
        1 => Just(Op::Crash),
    ]
}

/// Takes a crash image of a live store, drops the original, and opens the copy.
fn crash_copy(store: MessageStore, from: &Path) -> (tempfile::TempDir, MessageStore) {
    let to = crash_image(from);
    drop(store);
    let copy = open(to.path());
    assert!(copy.unclean_shutdown());
    (to, copy)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random puts, batches, clean reopens and crash images against an in-memory oracle of every record.
    #[test]
    fn store_matches_an_in_memory_model(ops in proptest::collection::vec(op(), 1..40)) {
        let mut dir = tempfile::tempdir().unwrap();
        let mut store = open(dir.path());
        let host: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let mut model: Vec<Expected> = Vec::new();
        let mut next: HashMap<i32, i64> = HashMap::new();
        for (step, op) in ops.into_iter().enumerate() {
            match op {
                Op::Put { queue, len } => {
                    let data = body(step as u64, len);
                    let r = store.put(&PutMessage::new("M", queue, &data)).unwrap();
                    let q = next.entry(queue).or_insert(0);
                    prop_assert_eq!(r.queue_offset, *q);
                    model.push(Expected { offset: r.offsets[0], topic: "M".into(), queue_id: queue, queue_offset: *q, body: data });
                    *q += 1;
                }
                Op::Batch { queue, n, len } => {
                    let bodies: Vec<Vec<u8>> = (0..n).map(|i| body((step * 10 + i) as u64, len)).collect();
                    let items: Vec<BatchItem<'_>> = bodies.iter().map(|b| BatchItem { body: b, ..BatchItem::default() }).collect();
                    let r = store.put_batch("M", queue, &items, 0, host, None, 0, true).unwrap();
                    let q = next.entry(queue).or_insert(0);
                    prop_assert_eq!(r.queue_offset, *q);
                    prop_assert!(r.offsets.iter().all(|o| o / SEG == r.offsets[0] / SEG), "a batch stays in one segment");
                    for (off, b) in r.offsets.iter().zip(bodies) {
                        model.push(Expected { offset: *off, topic: "M".into(), queue_id: queue, queue_offset: *q, body: b });
                        *q += 1;
                    }
                }
                Op::Reopen => {
                    let end = store.commitlog().max_offset();
                    drop(store);
                    store = open(dir.path());
                    prop_assert!(!store.unclean_shutdown());
                    prop_assert_eq!(store.open_report().end_offset, end);
                }
                Op::Crash => {
                    let end = store.commitlog().max_offset();
                    let (new_dir, copy) = crash_copy(store, dir.path());
                    prop_assert_eq!(copy.open_report().end_offset, end);
                    dir = new_dir;
                    store = copy;
                }
            }
        }
        prop_assert_eq!(scan(&store), model.clone());
        for (q, n) in &next {
            prop_assert_eq!(store.next_queue_offset("M", *q), *n);
        }
        check_read_back(&store, &model);
    }
}

#[test]
fn forced_property_crc_on_a_log_without_it_refuses_instead_of_wiping() {
    // Records written with enabledAppendPropCRC off all fail forceVerifyPropCRC (spec §2.3). They are intact
    // (structure and body CRC), so opening must refuse, not zero them as a torn tail.
    let dir = tempfile::tempdir().unwrap();
    let (expected, _, _) = closed_store_with_records(dir.path(), 5);
    let before = snapshot(dir.path());
    let mut cfg = config(SEG);
    cfg.commit_log.force_verify_prop_crc = true;
    match MessageStore::open(dir.path(), cfg) {
        Err(Error::Corruption { offset, .. }) => assert_eq!(offset, 0),
        other => panic!("expected Error::Corruption, got {other:?}"),
    }
    assert_eq!(snapshot(dir.path()), before);
    check_read_back(&open(dir.path()), &expected);
}

#[test]
fn commitlog_open_validates_from_the_last_segment_that_starts_with_a_record() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let expected = fill(&store, 23, 40);
    let end = store.commitlog().max_offset();
    drop(store);

    let cfg = CommitLogConfig { mapped_file_size_commit_log: SEG, ..CommitLogConfig::default() };
    // After a crash (what a commitlog opened on its own must assume), one segment earlier too: the end of the
    // previous segment is where a roll writes its blank filler.
    let (log, report) = CommitLog::open(&commitlog_dir(dir.path()), cfg.clone()).unwrap();
    assert_eq!((report.end_offset, report.validated_from), (end, end - end % SEG - SEG));
    drop(log);
    // After a clean close, RocketMQ's normal recovery: three segments from the end (at a segment whose first
    // record the consume queues already hold), or the first segment when nothing was dispatched.
    let nothing = rmq::commitlog::RecoverOptions { unclean: false, ..rmq::commitlog::RecoverOptions::default() };
    let (log, report) = CommitLog::open_with(&commitlog_dir(dir.path()), cfg.clone(), &nothing).unwrap();
    assert_eq!((report.end_offset, report.validated_from, report.validated_bytes), (end, 0, end));
    drop(log);
    let clean = rmq::commitlog::RecoverOptions { dispatched_end: end, ..nothing };
    let (log, report) = CommitLog::open_with(&commitlog_dir(dir.path()), cfg, &clean).unwrap();
    assert_eq!(report.end_offset, end);
    assert_eq!(report.validated_from, end - end % SEG - 2 * SEG);
    assert_eq!((report.discarded_bytes, report.stop_reason), (0, None));
    assert_eq!((log.min_offset(), log.max_offset(), log.file_size()), (0, end, SEG));
    let starts: Vec<u64> = log.queue().files().iter().map(|f| f.start()).collect();
    assert_eq!(starts, (0..end.div_ceil(SEG)).map(|k| k * SEG).collect::<Vec<_>>());
    assert_eq!(log.queue().last().unwrap().path(), segment_path(dir.path(), end - end % SEG));
    // Reads by offset and scans at the CommitLog level see the same records as the store.
    let mut at = 0;
    for e in &expected {
        let (rec, next) = log.next_record(at).unwrap().unwrap();
        assert_eq!(rec.offset(), e.offset);
        assert_eq!(log.read(e.offset).unwrap().unwrap().header, rec.header);
        at = next;
    }
    assert!(log.next_record(at).unwrap().is_none());
}
