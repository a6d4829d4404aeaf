//! The open after a crash matches the consume-queue and index entries written after the checkpoint against their
//! records in its one validating walk (src/store/matching.rs), and passes over in dispatch the records it found
//! in place. Neither may skip a check: a lying entry is still found and rebuilt, a lost one still dispatched
//! again, and a store with everything in place is left as it was.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rmq::store::{MessageStore, PutMessage};

use common::small_config;

const UNIT: usize = 20;
const PER_FILE: u64 = 5;

/// (topic, queue id) → the commitlog offset of each message, by queue offset.
type Queues = BTreeMap<(String, i32), Vec<u64>>;

/// A closed store of 90 messages over T/0, T/1 and U/0, each with a tag and two keys.
fn closed_store(root: &Path) -> Queues {
    let store = MessageStore::open(root, small_config()).unwrap();
    let mut queues = Queues::new();
    for i in 0..90usize {
        let (topic, q) = [("T", 0), ("T", 1), ("U", 0)][i % 3];
        let body = vec![(i % 251) as u8 + 1; 40 + i % 30];
        let tag = format!("tag{}", i % 4);
        let keys = format!("own{i} shared{}", i % 5);
        let msg = PutMessage { tags: Some(&tag), keys: Some(&keys), ..PutMessage::new(topic, q, &body) };
        let r = store.put(&msg).unwrap();
        queues.entry((topic.to_owned(), q)).or_default().push(r.offsets[0]);
    }
    store.close().unwrap();
    queues
}

/// What a crash leaves, with a checkpoint older than every record: the abnormal path validates, matches and
/// dispatches from the log's start.
fn crash(root: &Path) {
    std::fs::write(root.join("abort"), b"4242").unwrap();
    let path = root.join("checkpoint");
    let mut data = std::fs::read(&path).unwrap();
    data[0..16].fill(0);
    std::fs::write(&path, data).unwrap();
}

fn cq_file(root: &Path, topic: &str, queue: i32, q: u64) -> PathBuf {
    let start = q / PER_FILE * PER_FILE * UNIT as u64;
    root.join("consumequeue").join(topic).join(queue.to_string()).join(rmq::file_queue::file_name(start))
}

fn patch(path: &Path, at: usize, bytes: &[u8]) {
    let mut data = std::fs::read(path).unwrap();
    data[at..at + bytes.len()].copy_from_slice(bytes);
    std::fs::write(path, data).unwrap();
}

fn derived_files(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.join("consumequeue"), root.join("index")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// Every queue holds exactly its messages, and every key finds its messages.
fn assert_whole(store: &MessageStore, queues: &Queues, what: &str) {
    for ((topic, id), offsets) in queues {
        let cq = store.consume_queue(topic, *id).unwrap();
        assert_eq!(cq.max_offset(), offsets.len() as u64, "{what}: {topic}/{id}");
        for (q, &o) in offsets.iter().enumerate() {
            let e = cq.entry(q as u64).unwrap();
            let rec = store.commitlog().read(o).unwrap().unwrap();
            assert_eq!((e.offset, e.size), (o as i64, rec.header.total_size), "{what}: {topic}/{id} entry {q}");
        }
    }
    for i in 0..90usize {
        let topic = ["T", "T", "U"][i % 3];
        let got = store.query_message(topic, &format!("own{i}"), 8, 0, i64::MAX).unwrap();
        assert_eq!(got.records.len(), 1, "{what}: key own{i}");
    }
}

#[test]
fn a_consume_queue_entry_that_does_not_name_its_record_is_found_and_rebuilt_after_a_crash() {
    // Entry 7 of T/1 (in the middle of the queue, in commitlog order, so neither a hole nor disorder): each field
    // made to lie in turn. Only the check of the entry against its record can see these.
    for lie in ["tagsCode", "size", "another record of the queue", "a record of another queue", "inside its record"] {
        let dir = tempfile::tempdir().unwrap();
        let queues = closed_store(dir.path());
        let (path, pos) = (cq_file(dir.path(), "T", 1, 7), (7 % PER_FILE) as usize * UNIT);
        let entry = std::fs::read(&path).unwrap()[pos..pos + UNIT].to_vec();
        let offset = i64::from_be_bytes(entry[..8].try_into().unwrap());
        let (at, bytes) = match lie {
            "tagsCode" => (12, (i64::from_be_bytes(entry[12..].try_into().unwrap()) + 1).to_be_bytes().to_vec()),
            "size" => (8, (i32::from_be_bytes(entry[8..12].try_into().unwrap()) + 1).to_be_bytes().to_vec()),
            "another record of the queue" => (0, (queues[&("T".to_owned(), 1)][6] as i64).to_be_bytes().to_vec()),
            "a record of another queue" => (0, (queues[&("U".to_owned(), 0)][7] as i64).to_be_bytes().to_vec()),
            _ => (0, (offset + 4).to_be_bytes().to_vec()),
        };
        patch(&path, pos + at, &bytes);
        crash(dir.path());
        let store = MessageStore::open(dir.path(), small_config()).unwrap();
        let r = store.recovery_report().clone();
        assert_eq!(r.rebuilt_queues, vec!["T/1".to_owned()], "{lie}");
        assert!(r.rebuilt_reasons[0].contains("entry 7"), "{lie}: {:?}", r.rebuilt_reasons);
        assert_whole(&store, &queues, lie);
        store.close().unwrap();
    }
}

#[test]
fn an_index_entry_that_does_not_name_its_record_is_found_and_rebuilt_after_a_crash() {
    let cfg = small_config();
    let slots = cfg.index.max_hash_slot_num as usize;
    for lie in ["keyHash", "commitlog offset"] {
        let dir = tempfile::tempdir().unwrap();
        let queues = closed_store(dir.path());
        let mut files: Vec<PathBuf> =
            std::fs::read_dir(dir.path().join("index")).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        let newest = files.pop().unwrap();
        // Entry 2 of the newest file: another hash of the same slot (its chain stays whole), or the offset of
        // the message before (chains keep their order).
        let pos = 40 + 4 * slots + UNIT * 2;
        let data = std::fs::read(&newest).unwrap();
        let hash = i32::from_be_bytes(data[pos..pos + 4].try_into().unwrap());
        let offset = i64::from_be_bytes(data[pos + 4..pos + 12].try_into().unwrap());
        match lie {
            "keyHash" => patch(&newest, pos, &(hash + slots as i32).to_be_bytes()),
            _ => {
                let before = queues.values().flatten().filter(|&&o| (o as i64) < offset).max().unwrap();
                patch(&newest, pos + 4, &(*before as i64).to_be_bytes());
            }
        }
        crash(dir.path());
        let store = MessageStore::open(dir.path(), small_config()).unwrap();
        let r = store.recovery_report().clone();
        assert_eq!(r.rebuilt_index_files.len(), 1, "{lie}: {:?}", r.rebuilt_index_files);
        assert!(r.rebuilt_index_files[0].contains(&newest.display().to_string()), "{lie}: {:?}", r.rebuilt_index_files);
        assert!(r.rebuilt_queues.is_empty(), "{lie}: {:?}", r.rebuilt_queues);
        assert_whole(&store, &queues, lie);
        store.close().unwrap();
    }
}

#[test]
fn after_a_crash_with_everything_in_place_nothing_is_dispatched_again_and_nothing_changes() {
    let dir = tempfile::tempdir().unwrap();
    let queues = closed_store(dir.path());
    crash(dir.path());
    let before = derived_files(dir.path());
    let store = MessageStore::open(dir.path(), small_config()).unwrap();
    let r = store.recovery_report().clone();
    assert!(r.rebuilt_queues.is_empty() && r.rebuilt_index_files.is_empty(), "{r:?}");
    // Only the last indexed message is dispatched again (after a crash it may have only some of its keys; the
    // index puts none it has).
    assert_eq!((r.dispatched_from, r.redispatched_records, r.rebuilt_cq_entries), (0, 1, 0));
    assert_eq!(derived_files(dir.path()), before);
    assert_whole(&store, &queues, "in place");
    let next = store.put(&PutMessage::new("T", 1, b"next")).unwrap();
    assert_eq!(next.queue_offset, queues[&("T".to_owned(), 1)].len() as i64);
    store.close().unwrap();
}

#[test]
fn after_a_crash_lost_tails_of_the_derived_files_are_dispatched_again() {
    for lost in ["the newest file of T/0", "the last entries of U/0", "the newest index entries", "all of them"] {
        let dir = tempfile::tempdir().unwrap();
        let queues = closed_store(dir.path());
        let t0 = queues[&("T".to_owned(), 0)].len() as u64;
        if matches!(lost, "the newest file of T/0" | "all of them") {
            std::fs::remove_file(cq_file(dir.path(), "T", 0, t0 - 1)).unwrap();
        }
        if matches!(lost, "the last entries of U/0" | "all of them") {
            let u0 = queues[&("U".to_owned(), 0)].len() as u64;
            // The last two entries, in one file (queue offsets 28 and 29 of 30).
            assert_eq!((u0 - 2) / PER_FILE, (u0 - 1) / PER_FILE);
            let path = cq_file(dir.path(), "U", 0, u0 - 1);
            patch(&path, ((u0 - 2) % PER_FILE) as usize * UNIT, &[0u8; 2 * UNIT]);
        }
        if matches!(lost, "the newest index entries" | "all of them") {
            let mut files: Vec<PathBuf> =
                std::fs::read_dir(dir.path().join("index")).unwrap().map(|e| e.unwrap().path()).collect();
            files.sort();
            let newest = files.pop().unwrap();
            let pos = 40 + 4 * small_config().index.max_hash_slot_num as usize + UNIT;
            let len = std::fs::metadata(&newest).unwrap().len() as usize;
            patch(&newest, pos, &vec![0u8; len - pos]);
        }
        crash(dir.path());
        let store = MessageStore::open(dir.path(), small_config()).unwrap();
        assert_whole(&store, &queues, lost);
        let next = store.put(&PutMessage::new("T", 0, b"next")).unwrap();
        assert_eq!(next.queue_offset, t0 as i64, "{lost}");
        store.close().unwrap();
    }
}
