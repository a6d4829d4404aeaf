//! `getMessage` on a real store (spec §13): every status with its next begin offset, the count, byte and
//! hot/cold caps, the consume-queue scan limit, tag filtering with colliding hashes, slave offset
//! correction, and reads racing expired-file cleanup.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use rmq::config::{BrokerRole, StoreConfig};
use rmq::store::get::{GetMessageResult, GetMessageStatus as S, Subscription, MAX_PULL_SIZE};
use rmq::store::{MessageStore, PutMessage};

mod common;
use common::{small_config as config, SEG};

fn open_with(root: &Path, c: StoreConfig) -> MessageStore {
    MessageStore::open(root, c).unwrap()
}

fn dispatch_all(store: &MessageStore) {
    while store.dispatch(u64::MAX, false).unwrap().records > 0 {}
}

/// Puts `n` messages with body size `size` and the given tags to TopicA/0, dispatched; returns their offsets.
fn fill(store: &MessageStore, n: usize, size: usize, tags: &[&str]) -> Vec<u64> {
    let body = vec![b'x'; size];
    let mut out = Vec::new();
    for i in 0..n {
        let mut m = PutMessage::new("TopicA", 0, &body);
        m.tags = tags.get(i % tags.len().max(1)).copied();
        out.push(store.put(&m).unwrap().offsets[0]);
    }
    dispatch_all(store);
    out
}

fn get(store: &MessageStore, offset: i64, max: u32) -> GetMessageResult {
    store.get_message("G", "TopicA", 0, offset, max, MAX_PULL_SIZE, &Subscription::all()).unwrap()
}

fn summary(r: &GetMessageResult) -> (S, i64, usize) {
    (r.status, r.next_begin_offset, r.messages.len())
}

#[test]
fn found_returns_consecutive_messages_of_the_queue() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open_with(tmp.path(), config());
    let offsets = fill(&store, 12, 50, &[]);
    let r = get(&store, 5, 4);
    assert_eq!(summary(&r), (S::Found, 9, 4));
    assert_eq!(r.queue_offsets, [5, 6, 7, 8]);
    assert_eq!(r.messages.iter().map(|m| m.offset()).collect::<Vec<_>>(), offsets[5..9]);
    for (m, q) in r.messages.iter().zip(&r.queue_offsets) {
        assert_eq!(m.header.queue_offset, *q);
    }
    assert_eq!(r.buffer_total_size, r.messages.iter().map(|m| m.header.total_size as u64).sum::<u64>());
    assert_eq!((r.min_offset, r.max_offset), (0, 12));
    // A pull stays within one consume-queue file (travelCqFileNumWhenGetMessage = 1): 5 entries per file.
    assert_eq!(summary(&get(&store, 3, 32)), (S::Found, 5, 2));
    assert_eq!(summary(&get(&store, 5, 32)), (S::Found, 10, 5));
    assert!(!r.suggest_pulling_from_slave);
}

#[test]
fn offset_statuses_and_next_begin_offsets() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open_with(tmp.path(), config());
    let r = get(&store, 5, 32);
    assert_eq!((r.status, r.next_begin_offset, r.min_offset, r.max_offset), (S::NoMessageInQueue, 0, 0, 0));
    fill(&store, 8, 50, &[]);
    assert_eq!(summary(&get(&store, 8, 32)), (S::OffsetOverflowOne, 8, 0));
    assert_eq!(summary(&get(&store, 30, 32)), (S::OffsetOverflowBadly, 8, 0));
    assert_eq!(summary(&get(&store, -1, 32)), (S::OffsetTooSmall, 0, 0));
    // An existing queue with no entries: a queue whose every entry was cleaned up (min = max = 0 is
    // impossible after cleanup, so create the directory without entries).
    let empty = store.consume_queues().find_or_create("TopicA", 7, 0).unwrap();
    assert_eq!(empty.max_offset(), 0);
    let r = store.get_message("G", "TopicA", 7, 3, 32, MAX_PULL_SIZE, &Subscription::all()).unwrap();
    assert_eq!((r.status, r.next_begin_offset), (S::NoMessageInQueue, 0));
}

#[test]
fn offset_too_small_after_cleanup_and_found_null_before_the_min_offset_is_corrected() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open_with(tmp.path(), config());
    let offsets = fill(&store, 12, 50, &[]);
    let cq = store.consume_queue("TopicA", 0).unwrap();
    // Cleanup deleted the first consume-queue file but has not corrected the min offset yet.
    assert_eq!(cq.delete_expired_files(offsets[5] as i64).unwrap().len(), 1);
    let r = get(&store, 2, 32);
    assert_eq!((r.status, r.next_begin_offset, r.messages.len()), (S::OffsetFoundNull, 5, 0), "next file start");
    // Once corrected, the same pull is OFFSET_TOO_SMALL and points at the new min offset.
    cq.correct_min_offset(offsets[5] as i64);
    let r = get(&store, 2, 32);
    assert_eq!((r.status, r.next_begin_offset, r.min_offset), (S::OffsetTooSmall, 5, 5));
    assert_eq!(summary(&get(&store, 5, 32)), (S::Found, 10, 5));
}

#[test]
fn message_was_removing_when_the_commitlog_segment_is_gone() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = config();
    c.consume_queue.mapped_file_size_consume_queue = 20 * 100;
    c.read.max_filter_message_size = 60; // scan at most 3 entries past the offset
    let store = open_with(tmp.path(), c);
    let offsets = fill(&store, 60, 200, &[]);
    let in_first = offsets.iter().filter(|&&o| o < SEG).count();
    assert!(in_first > 3);
    // Cleanup removed the first commitlog segment; the consume queue still points into it.
    store.commitlog().queue().remove_first().unwrap();
    let r = get(&store, 0, 1);
    assert_eq!(summary(&r), (S::MessageWasRemoving, 3, 0), "examined entries are consumed");
    // A pull whose scan reaches the next segment skips the rest of the removed one and finds messages.
    let r = get(&store, in_first as i64 - 1, 1);
    assert_eq!(r.status, S::Found);
    assert_eq!(r.queue_offsets, [in_first as i64]);
}

#[test]
fn count_and_byte_caps() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = config();
    c.consume_queue.mapped_file_size_consume_queue = 20 * 1000;
    c.commit_log.mapped_file_size_commit_log = 1 << 20;
    c.read.max_transfer_count_on_message_in_memory = 1024;
    c.read.max_transfer_bytes_on_message_in_memory = 1 << 20;
    let store = open_with(tmp.path(), c);
    fill(&store, 40, 1100, &[]);
    for max in [32, 20, 10] {
        assert_eq!(get(&store, 0, max).messages.len(), max as usize);
    }
    let size = |max_total: u64| {
        let r = store.get_message("G", "TopicA", 0, 0, 32, max_total, &Subscription::all()).unwrap();
        (r.messages.len(), r.next_begin_offset)
    };
    // Records are ~1.2 KiB: a limit below one record still returns the first message.
    assert_eq!(size(100), (1, 1));
    assert_eq!(size(2048), (1, 1));
    assert_eq!(size(4096), (3, 3));
}

#[test]
fn hot_and_cold_limits() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = config();
    c.consume_queue.mapped_file_size_consume_queue = 20 * 1000;
    c.commit_log.mapped_file_size_commit_log = 1 << 20;
    let store = open_with(tmp.path(), c.clone());
    fill(&store, 100, 100, &[]);
    assert_eq!(get(&store, 0, 64).messages.len(), 32, "hot: 32 messages");
    store.close().unwrap();
    // A ratio of 0 makes every stored byte cold: 8 messages.
    c.read.access_message_in_memory_max_ratio = 0;
    let store = open_with(tmp.path(), c.clone());
    let r = get(&store, 0, 64);
    assert_eq!(r.messages.len(), 8);
    assert!(r.suggest_pulling_from_slave);
    store.close().unwrap();
    // Cold byte cap: 64 KiB with 3 KiB messages → 21 messages; hot: 256 KiB → 32 (the count cap).
    let tmp = tempfile::tempdir().unwrap();
    c.read.max_transfer_count_on_message_in_disk = 1000;
    let store = open_with(tmp.path(), c);
    fill(&store, 40, 3000, &[]);
    let r = get(&store, 0, 64);
    let rec = r.messages[0].header.total_size as u64;
    assert_eq!(r.messages.len() as u64, 64 * 1024 / rec);
}

#[test]
fn tag_filter_with_colliding_hashes() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open_with(tmp.path(), config());
    // "Aa" and "BB" share a Java hash, as do "polygenelubricants" and "qPlygenelubricants" (Integer.MIN_VALUE).
    assert_eq!(rmq::java::string_hash("Aa"), rmq::java::string_hash("BB"));
    assert_eq!(rmq::java::string_hash("polygenelubricants"), rmq::java::string_hash("qPlygenelubricants"));
    fill(&store, 5, 10, &["Aa", "BB", "TagC", "polygenelubricants", "qPlygenelubricants"]);
    let pull = |sub: &str| {
        let r = store.get_message("G", "TopicA", 0, 0, 32, MAX_PULL_SIZE, &Subscription::parse(sub)).unwrap();
        (r.status, r.queue_offsets.clone(), r.filter_message_count, r.next_begin_offset)
    };
    assert_eq!(pull("Aa"), (S::Found, vec![0], 1, 5), "BB matched the hash, then failed the exact check");
    assert_eq!(pull("BB"), (S::Found, vec![1], 1, 5));
    assert_eq!(pull("BB || TagC"), (S::Found, vec![1, 2], 1, 5));
    assert_eq!(pull("polygenelubricants"), (S::Found, vec![3], 1, 5));
    assert_eq!(pull("*"), (S::Found, vec![0, 1, 2, 3, 4], 0, 5));
    assert_eq!(pull("Nope"), (S::NoMatchedMessage, vec![], 0, 5), "filtered entries are consumed");
    // Only collisions, nothing else: NO_MATCHED_MESSAGE with the exact-check count.
    let r = store.get_message("G", "TopicA", 0, 1, 1, MAX_PULL_SIZE, &Subscription::parse("Aa")).unwrap();
    assert_eq!((r.status, r.filter_message_count), (S::NoMatchedMessage, 1));
}

#[test]
fn filtered_scan_stops_at_max_filter_message_size() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = config();
    c.consume_queue.mapped_file_size_consume_queue = 20 * 2000;
    c.commit_log.mapped_file_size_commit_log = 1 << 20;
    let store = open_with(tmp.path(), c);
    fill(&store, 1000, 1, &["skip"]);
    let r = store.get_message("G", "TopicA", 0, 0, 32, MAX_PULL_SIZE, &Subscription::parse("want")).unwrap();
    // 16 000 bytes of consume queue = 800 entries examined.
    assert_eq!((r.status, r.next_begin_offset), (S::NoMatchedMessage, 800));
    let r = store.get_message("G", "TopicA", 0, 0, 1000, MAX_PULL_SIZE, &Subscription::parse("want")).unwrap();
    assert_eq!(r.next_begin_offset, 1000, "max(16000, 20 × maxMsgNums)");
}

#[test]
fn a_slave_keeps_the_client_offset_on_error_statuses() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = config();
    c.read.broker_role = BrokerRole::Slave;
    let store = open_with(tmp.path(), c.clone());
    fill(&store, 3, 10, &[]);
    assert_eq!(summary(&get(&store, 30, 32)), (S::OffsetOverflowBadly, 30, 0));
    assert_eq!(summary(&get(&store, -4, 32)), (S::OffsetTooSmall, -4, 0));
    assert_eq!(summary(&get(&store, 0, 32)), (S::Found, 3, 3), "scanning statuses are not corrected");
    store.close().unwrap();
    c.read.offset_check_in_slave = true;
    let store = open_with(tmp.path(), c);
    assert_eq!(summary(&get(&store, 30, 32)), (S::OffsetOverflowBadly, 3, 0));
}

#[test]
fn a_closed_store_refuses() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open_with(tmp.path(), config());
    fill(&store, 1, 10, &[]);
    store.close().unwrap();
    assert!(store.get_message("G", "TopicA", 0, 0, 1, MAX_PULL_SIZE, &Subscription::all()).is_err());
}

#[test]
fn a_drain_over_interleaved_queues_and_segments_returns_every_message_and_reports_a_damaged_body() {
    // Four queues written in turn over several segments (the compare benchmark's layout, small): a drain reads
    // every queue to its end across segment boundaries. One record's body byte is flipped in the live store's
    // file (the mapping sees it): its body CRC no longer matches, so it is reported and never delivered, and
    // every other message is, in queue order, with its own body.
    let tmp = tempfile::tempdir().unwrap();
    let mut c = config();
    c.consume_queue.mapped_file_size_consume_queue = 20 * 1000;
    let store = open_with(tmp.path(), c);
    let mut offsets = Vec::new();
    for i in 0..400u32 {
        let body = format!("body-{i:05}-{}", "y".repeat(100));
        let mut m = PutMessage::new("TopicA", (i % 4) as i32, body.as_bytes());
        m.tags = Some("TagA");
        offsets.push(store.put(&m).unwrap().offsets[0]);
    }
    dispatch_all(&store);
    assert!(offsets.last().unwrap() / SEG >= 8, "the records span many segments");
    let victim = 201usize; // queue 1, queue offset 50
    let rec = store.commitlog().read(offsets[victim]).unwrap().unwrap();
    let body_at = offsets[victim] + rec.header.body.start as u64 + 3;
    let path = tmp.path().join("commitlog").join(rmq::file_queue::file_name(body_at - body_at % SEG));
    let mut data = std::fs::read(&path).unwrap();
    data[(body_at % SEG) as usize] ^= 0x20;
    std::fs::write(&path, data).unwrap();
    for q in 0..4i32 {
        let (mut offset, mut got, mut damaged) = (0i64, Vec::new(), Vec::new());
        while offset < store.max_offset_in_queue("TopicA", q, true) {
            let r = store.get_message("G", "TopicA", q, offset, 32, MAX_PULL_SIZE, &Subscription::all()).unwrap();
            for (m, qo) in r.messages.iter().zip(&r.queue_offsets) {
                let i = *qo as usize * 4 + q as usize;
                assert_eq!(m.offset(), offsets[i]);
                assert_eq!(&m.header.body(m.bytes())[..10], format!("body-{i:05}").as_bytes());
                got.push(*qo);
            }
            damaged.extend(r.damaged.iter().map(|d| (d.0, d.1, d.2.contains("body CRC"))));
            offset = r.next_begin_offset;
        }
        let expected: Vec<i64> = (0..100).filter(|&o| !(q == 1 && o == 50)).collect();
        assert_eq!(got, expected, "queue {q}");
        if q == 1 {
            assert_eq!(damaged, [(50, offsets[victim] as i64, true)]);
        } else {
            assert!(damaged.is_empty(), "queue {q}: {damaged:?}");
        }
    }
}
