//! IndexFile and IndexService on their own (spec §7 and the vectors of §16.7): entry and header bytes,
//! chains, hash collisions, rollover at maxIndexNum − 1 entries, the first-entry timeDiff quirk, file
//! names (also within one millisecond), time windows, caps, reload, re-dispatch and deletion.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use proptest::prelude::*;
use rmq::error::Error;
use rmq::index::{index_file_name, key_hash, IndexConfig, IndexHeader, IndexRequest, IndexService};
use rmq::message::TransactionType;

const UNIQ_A: &str = "C0A80001A1B218B4AAC2000000000000";
const TS_A: i64 = 1_700_000_000_123;

fn small(max_index_num: u32) -> IndexConfig {
    IndexConfig { max_hash_slot_num: 8, max_index_num, max_msgs_num_batch: 64 }
}

fn req<'a>(offset: i64, ts: i64, uniq: Option<&'a str>, keys: Option<&'a str>) -> IndexRequest<'a> {
    IndexRequest {
        topic: "TopicTest",
        commitlog_offset: offset,
        store_timestamp: ts,
        transaction: TransactionType::NotType,
        uniq_key: uniq,
        keys,
    }
}

fn read_at(path: &Path, pos: u64, len: usize) -> Vec<u8> {
    let mut f = std::fs::File::open(path).unwrap();
    f.seek(SeekFrom::Start(pos)).unwrap();
    let mut b = vec![0u8; len];
    f.read_exact(&mut b).unwrap();
    b
}

fn entry_bytes(key_hash: i32, offset: i64, time_diff: i32, prev: i32) -> Vec<u8> {
    [&key_hash.to_be_bytes()[..], &offset.to_be_bytes(), &time_diff.to_be_bytes(), &prev.to_be_bytes()].concat()
}

fn query_all(svc: &IndexService, key: &str) -> Vec<i64> {
    svc.query("TopicTest", key, usize::MAX, 0, i64::MAX, &mut |_| true).phy_offsets
}

fn header_of(path: &Path) -> IndexHeader {
    IndexHeader::decode(&read_at(path, 0, 40)).unwrap()
}

fn fixed_clock() -> i64 {
    TS_A
}

#[test]
fn vector_16_7_record_a_in_a_fresh_default_file() {
    let tmp = tempfile::tempdir().unwrap();
    let svc = IndexService::load(tmp.path(), IndexConfig::default()).unwrap();
    svc.build_index(&req(0, TS_A, Some(UNIQ_A), Some("order1 order2"))).unwrap();
    svc.flush().unwrap();
    let paths = svc.file_paths();
    assert_eq!(paths.len(), 1);
    let path = &paths[0];
    assert_eq!(std::fs::metadata(path).unwrap().len(), 420_000_040);
    let uniq_hash = key_hash("TopicTest", UNIQ_A);
    assert_eq!(uniq_hash % 5_000_000, 4_268_817);
    assert_eq!(read_at(path, 40 + 4 * 4_268_817, 4), 1i32.to_be_bytes());
    assert_eq!(read_at(path, 20_000_060, 20), entry_bytes(uniq_hash, 0, 0, 0));
    assert_eq!(read_at(path, 20_000_080, 20), entry_bytes(key_hash("TopicTest", "order1"), 0, 0, 0));
    assert_eq!(read_at(path, 20_000_100, 20), entry_bytes(key_hash("TopicTest", "order2"), 0, 0, 0));
    assert_eq!(read_at(path, 20_000_120, 20), [0u8; 20], "nothing after entry #3");
    assert_eq!(read_at(path, 20_000_040, 20), [0u8; 20], "entry #0 is never written");
    assert_eq!(
        header_of(path),
        IndexHeader {
            begin_timestamp: TS_A,
            end_timestamp: TS_A,
            begin_phy_offset: 0,
            end_phy_offset: 0,
            hash_slot_count: 3,
            index_count: 4
        }
    );
    for k in [UNIQ_A, "order1", "order2"] {
        assert_eq!(query_all(&svc, k), [0], "{k}");
    }
    assert!(query_all(&svc, "order3").is_empty());
}

#[test]
fn min_value_hash_goes_to_slot_zero_and_is_found() {
    assert_eq!(key_hash("TopicTest", "ogaQmc"), 0);
    let tmp = tempfile::tempdir().unwrap();
    let svc = IndexService::load(tmp.path(), small(8)).unwrap();
    svc.build_index(&req(100, TS_A, None, Some("ogaQmc"))).unwrap();
    let path = &svc.file_paths()[0];
    assert_eq!(read_at(path, 40, 4), 1i32.to_be_bytes(), "slot 0 → entry 1");
    assert_eq!(read_at(path, 40 + 8 * 4 + 20, 20), entry_bytes(0, 100, 0, 0));
    assert_eq!(query_all(&svc, "ogaQmc"), [100]);
}

#[test]
fn same_key_chains_newest_first() {
    let tmp = tempfile::tempdir().unwrap();
    let svc = IndexService::load(tmp.path(), small(16)).unwrap();
    svc.build_index(&req(0, TS_A, None, Some("k"))).unwrap();
    svc.build_index(&req(300, TS_A + 2500, None, Some("other"))).unwrap();
    svc.build_index(&req(600, TS_A + 5000, None, Some("k"))).unwrap();
    let path = &svc.file_paths()[0];
    let h = key_hash("TopicTest", "k");
    let entries = 40 + 8 * 4;
    assert_eq!(read_at(path, entries + 20, 20), entry_bytes(h, 0, 0, 0));
    assert_eq!(read_at(path, entries + 3 * 20, 20), entry_bytes(h, 600, 5, 1), "prev = entry 1, timeDiff 5 s");
    assert_eq!(query_all(&svc, "k"), [600, 0]);
    assert_eq!(query_all(&svc, "other"), [300]);
}

#[test]
fn colliding_keys_share_a_hash_and_the_filter_separates_them() {
    // "Aa" and "BB" have the same Java hash, so do "TopicTest#Aa" and "TopicTest#BB".
    assert_eq!(key_hash("TopicTest", "Aa"), key_hash("TopicTest", "BB"));
    let tmp = tempfile::tempdir().unwrap();
    let svc = IndexService::load(tmp.path(), small(16)).unwrap();
    svc.build_index(&req(0, TS_A, None, Some("Aa"))).unwrap();
    svc.build_index(&req(200, TS_A, None, Some("BB"))).unwrap();
    assert_eq!(query_all(&svc, "Aa"), [200, 0], "the index itself returns collisions, as RocketMQ does");
    let keys_at = |o: i64| if o == 0 { "Aa" } else { "BB" };
    for key in ["Aa", "BB"] {
        let got = svc.query("TopicTest", key, 64, 0, i64::MAX, &mut |o| keys_at(o) == key).phy_offsets;
        assert_eq!(got, [if key == "Aa" { 0 } else { 200 }], "{key}");
    }
}

#[test]
fn rollover_with_max_index_num_4() {
    let tmp = tempfile::tempdir().unwrap();
    let svc = IndexService::load(tmp.path(), small(4)).unwrap();
    // Three keys fill the first file (indexCount 4 = maxIndexNum).
    svc.build_index(&req(1000, TS_A, Some("u1"), Some("a b"))).unwrap();
    assert_eq!(svc.file_paths().len(), 1);
    // The next message opens a second file; its first entry's timeDiff is taken against the previous
    // file's endTimestamp (7.9 s → 7), while the header's beginTimestamp becomes the message's time.
    svc.build_index(&req(2000, TS_A + 7_900, Some("u2"), Some("a"))).unwrap();
    let paths = svc.file_paths();
    assert_eq!(paths.len(), 2);
    let first = header_of(&paths[0]);
    assert_eq!((first.index_count, first.hash_slot_count <= 3), (4, true));
    assert_eq!((first.begin_phy_offset, first.end_phy_offset), (1000, 1000));
    let second = header_of(&paths[1]);
    assert_eq!(
        second,
        IndexHeader {
            begin_timestamp: TS_A + 7_900,
            end_timestamp: TS_A + 7_900,
            begin_phy_offset: 2000,
            end_phy_offset: 2000,
            hash_slot_count: second.hash_slot_count,
            index_count: 3
        }
    );
    let entries = 40 + 8 * 4;
    assert_eq!(read_at(&paths[1], entries + 20, 20), entry_bytes(key_hash("TopicTest", "u2"), 2000, 7, 0));
    assert_eq!(
        &read_at(&paths[1], entries + 40, 20)[12..16],
        &0i32.to_be_bytes(),
        "later entries: against the new begin"
    );
    // Names are ordered by creation time and both files are searched, newest first.
    assert!(paths[0].file_name() < paths[1].file_name());
    assert_eq!(query_all(&svc, "a"), [2000, 1000]);
    // The first entry of a later file is found at its true time despite its skewed timeDiff.
    let got = svc.query("TopicTest", "u2", 64, TS_A + 7_900, TS_A + 7_900, &mut |_| true).phy_offsets;
    assert_eq!(got, [2000]);
    // A message whose keys straddle files: one key fits in file 2, the rest go to file 3.
    svc.build_index(&req(3000, TS_A + 9_000, None, Some("x y z"))).unwrap();
    let paths = svc.file_paths();
    assert_eq!(paths.len(), 3);
    assert_eq!(header_of(&paths[1]).index_count, 4);
    assert_eq!(header_of(&paths[2]).index_count, 3);
    for k in ["x", "y", "z"] {
        assert_eq!(query_all(&svc, k), [3000], "{k}");
    }
    assert_eq!(svc.last_indexed_offset(), Some(3000));
}

#[test]
fn one_entry_per_file_with_max_index_num_2() {
    let tmp = tempfile::tempdir().unwrap();
    let svc = IndexService::load(tmp.path(), small(2)).unwrap();
    svc.build_index(&req(500, TS_A, None, Some("a"))).unwrap();
    // maxIndexNum 2 → one entry per file; the second key opens a file, then gets flushed on the next roll.
    svc.build_index(&req(900, TS_A + 1000, None, Some("b"))).unwrap();
    let paths = svc.file_paths();
    assert_eq!(paths.len(), 2);
    let h = header_of(&paths[1]);
    assert_eq!((h.begin_phy_offset, h.end_phy_offset, h.index_count), (900, 900, 2));
    // Each new file starts from its first message.
    svc.build_index(&req(1300, TS_A + 2000, None, Some("c"))).unwrap();
    let bytes = read_at(&svc.file_paths()[2], 0, 40);
    let h = IndexHeader::decode(&bytes).unwrap();
    assert_eq!((h.begin_timestamp, h.begin_phy_offset, h.index_count), (TS_A + 2000, 1300, 2));
}

#[test]
fn files_created_in_one_millisecond_get_distinct_ordered_names() {
    let tmp = tempfile::tempdir().unwrap();
    let svc = IndexService::load_with_clock(tmp.path(), small(2), fixed_clock).unwrap();
    for i in 0..5 {
        svc.build_index(&req(i * 100, TS_A + i, None, Some("k"))).unwrap();
    }
    let names: Vec<String> =
        svc.file_paths().iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(names.len(), 5);
    assert_eq!(names[0], index_file_name(TS_A));
    for (i, n) in names.iter().enumerate() {
        assert_eq!(*n, index_file_name(TS_A + i as i64), "bumped by 1 ms per collision");
    }
    assert_eq!(query_all(&svc, "k"), [400, 300, 200, 100, 0]);
    drop(svc);
    // A reload sees the same order, and a clock behind the last name still sorts after it.
    let svc = IndexService::load_with_clock(tmp.path(), small(2), || TS_A - 86_400_000).unwrap();
    svc.build_index(&req(500, TS_A + 5, None, Some("k"))).unwrap();
    let last = svc.file_paths().last().unwrap().file_name().unwrap().to_string_lossy().into_owned();
    assert_eq!(last, index_file_name(TS_A + 5));
    assert_eq!(query_all(&svc, "k"), [500, 400, 300, 200, 100, 0]);
}

#[test]
fn time_windows_select_files_and_entries() {
    let tmp = tempfile::tempdir().unwrap();
    let svc = IndexService::load(tmp.path(), small(4)).unwrap();
    // Ten messages one second apart, three per file (timestamps aligned to whole seconds).
    let t0 = 1_700_000_000_000;
    for i in 0..10 {
        svc.build_index(&req(i * 100, t0 + i * 1000, None, Some("k"))).unwrap();
    }
    assert_eq!(svc.file_paths().len(), 4);
    let q = |b: i64, e: i64| svc.query("TopicTest", "k", 64, b, e, &mut |_| true).phy_offsets;
    assert_eq!(q(t0, t0 + 9000), [900, 800, 700, 600, 500, 400, 300, 200, 100, 0]);
    assert_eq!(q(t0 + 2000, t0 + 4000), [400, 300, 200], "window spanning two files");
    assert_eq!(q(t0 + 4000, t0 + 4000), [400]);
    assert!(q(t0 - 5000, t0 - 1).is_empty(), "before the first message");
    assert!(q(t0 + 9001, t0 + 20_000).is_empty(), "after the last message");
    assert!(q(t0 + 5000, t0 + 2000).is_empty(), "inverted window");
    assert_eq!(q(t0 - 1000, t0 + 20_000).len(), 10, "a window around everything");
    // The result's last-update values come from the newest file.
    let r = svc.query("TopicTest", "none", 64, 0, i64::MAX, &mut |_| true);
    assert_eq!((r.index_last_update_timestamp, r.index_last_update_phy_offset), (t0 + 9000, 900));
}

#[test]
fn results_are_capped_by_max_num_and_max_msgs_num_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = IndexConfig { max_hash_slot_num: 16, max_index_num: 64, max_msgs_num_batch: 5 };
    let svc = IndexService::load(tmp.path(), cfg).unwrap();
    for i in 0..20 {
        svc.build_index(&req(i * 10, TS_A, None, Some("hot"))).unwrap();
    }
    let q = |max: usize, accept: &mut dyn FnMut(i64) -> bool| svc.query("TopicTest", "hot", max, 0, i64::MAX, accept);
    assert_eq!(q(64, &mut |_| true).phy_offsets, [190, 180, 170, 160, 150], "maxMsgsNumBatch caps");
    assert_eq!(q(2, &mut |_| true).phy_offsets, [190, 180]);
    assert!(q(0, &mut |_| true).phy_offsets.is_empty());
    // Only accepted offsets count towards the cap.
    assert_eq!(q(3, &mut |o| o % 20 == 0).phy_offsets, [180, 160, 140]);
}

#[test]
fn same_key_twice_in_one_message_is_returned_once() {
    let tmp = tempfile::tempdir().unwrap();
    let svc = IndexService::load(tmp.path(), small(16)).unwrap();
    svc.build_index(&req(0, TS_A, Some("dup"), Some("dup  dup "))).unwrap();
    assert_eq!(header_of(&svc.file_paths()[0]).index_count, 4, "UNIQ_KEY and two KEYS tokens (empties skipped)");
    assert_eq!(query_all(&svc, "dup"), [0]);
}

#[test]
fn transaction_rules_and_messages_without_keys() {
    let tmp = tempfile::tempdir().unwrap();
    let svc = IndexService::load(tmp.path(), small(16)).unwrap();
    for (i, t) in
        [TransactionType::NotType, TransactionType::Prepared, TransactionType::Commit, TransactionType::Rollback]
            .into_iter()
            .enumerate()
    {
        let r = IndexRequest { transaction: t, ..req(i as i64 * 100, TS_A, None, Some("tx")) };
        svc.build_index(&r).unwrap();
    }
    assert_eq!(query_all(&svc, "tx"), [200, 100, 0], "ROLLBACK is not indexed");
    svc.build_index(&req(400, TS_A, None, None)).unwrap();
    svc.build_index(&req(500, TS_A, None, Some("   "))).unwrap();
    assert_eq!(svc.last_indexed_offset(), Some(200));
    // An empty UNIQ_KEY is still a key (`topic#`), as in RocketMQ.
    svc.build_index(&req(600, TS_A, Some(""), None)).unwrap();
    assert_eq!(query_all(&svc, ""), [600]);
}

#[test]
fn re_dispatch_adds_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let svc = IndexService::load(tmp.path(), small(6)).unwrap();
    let msgs = [(0, Some("u0"), Some("a b")), (100, Some("u1"), Some("a")), (200, Some("u2"), Some("c d"))];
    for (o, u, k) in msgs {
        svc.build_index(&req(o, TS_A, u, k)).unwrap();
    }
    svc.flush().unwrap();
    let snapshot = |svc: &IndexService| -> Vec<Vec<u8>> {
        svc.flush().unwrap();
        svc.file_paths().iter().map(|p| std::fs::read(p).unwrap()).collect()
    };
    let before = snapshot(&svc);
    assert_eq!(before.len(), 2, "maxIndexNum 6: five entries fill the first file");
    // Everything again: below endPhyOffset is skipped, the message at endPhyOffset finds its keys.
    for (o, u, k) in msgs {
        svc.build_index(&req(o, TS_A, u, k)).unwrap();
    }
    assert_eq!(snapshot(&svc), before);
    drop(svc);
    let svc = IndexService::load(tmp.path(), small(6)).unwrap();
    svc.build_index(&req(200, TS_A, Some("u2"), Some("c d"))).unwrap();
    assert_eq!(snapshot(&svc), before, "also after a reload");
    // A message at endPhyOffset that was only partly indexed gets its missing keys.
    svc.build_index(&req(200, TS_A, Some("u2"), Some("c d e"))).unwrap();
    assert_eq!(query_all(&svc, "e"), [200]);
    assert_eq!(query_all(&svc, "c"), [200]);
}

#[test]
fn re_dispatch_into_a_full_or_fresh_file_adds_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let svc = IndexService::load(tmp.path(), small(3)).unwrap();
    svc.build_index(&req(700, TS_A, None, Some("a b"))).unwrap();
    // The file is full: re-dispatching its last message finds the keys and opens no file.
    svc.build_index(&req(700, TS_A, None, Some("a b"))).unwrap();
    assert_eq!(svc.files().len(), 1);
    drop(svc);
    // A file created just before a crash (RocketMQ writes only the previous end values into it).
    let fresh = tmp.path().join("30000101000000000");
    let mut bytes = vec![0u8; small(3).file_size() as usize];
    let h = IndexHeader {
        begin_timestamp: TS_A,
        end_timestamp: TS_A,
        begin_phy_offset: 700,
        end_phy_offset: 700,
        hash_slot_count: 0,
        index_count: 0,
    };
    bytes[..40].copy_from_slice(&h.encode());
    std::fs::write(&fresh, &bytes).unwrap();
    let svc = IndexService::load(tmp.path(), small(3)).unwrap();
    svc.build_index(&req(700, TS_A, None, Some("a b"))).unwrap();
    let files = svc.files();
    assert_eq!(files.len(), 2);
    assert!(!files[1].has_entries(), "the keys were found in the previous file");
    assert_eq!(query_all(&svc, "a"), [700]);
    svc.build_index(&req(900, TS_A, None, Some("a"))).unwrap();
    assert_eq!(query_all(&svc, "a"), [900, 700]);
}

#[test]
fn reload_continues_the_last_file() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let svc = IndexService::load(tmp.path(), small(16)).unwrap();
        svc.build_index(&req(0, TS_A, Some("u"), Some("a"))).unwrap();
        svc.flush().unwrap();
    }
    std::fs::write(tmp.path().join("README"), b"not an index file").unwrap();
    std::fs::create_dir(tmp.path().join("20990101000000000")).unwrap();
    let svc = IndexService::load(tmp.path(), small(16)).unwrap();
    assert_eq!(svc.file_paths().len(), 1, "non-numeric names and directories are skipped");
    assert_eq!(svc.last_indexed_offset(), Some(0));
    svc.build_index(&req(100, TS_A + 1000, None, Some("a"))).unwrap();
    assert_eq!(svc.file_paths().len(), 1);
    assert_eq!(query_all(&svc, "a"), [100, 0]);
    assert_eq!(header_of(&svc.file_paths()[0]).index_count, 4);
}

#[test]
fn load_rejects_a_file_of_another_size_and_repairs_a_zero_count() {
    let tmp = tempfile::tempdir().unwrap();
    let path = {
        let svc = IndexService::load(tmp.path(), small(16)).unwrap();
        svc.build_index(&req(0, TS_A, None, Some("a"))).unwrap();
        svc.flush().unwrap();
        svc.file_paths()[0].clone()
    };
    let err = IndexService::load(tmp.path(), small(17)).unwrap_err();
    assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
    // A file created but never written (indexCount 0 on disk) loads as empty.
    let empty = tmp.path().join("30000101000000000");
    std::fs::write(&empty, vec![0u8; small(16).file_size() as usize]).unwrap();
    let svc = IndexService::load(tmp.path(), small(16)).unwrap();
    assert_eq!(svc.files().len(), 2);
    assert!(!svc.files()[1].has_entries());
    assert_eq!(svc.last_indexed_offset(), Some(0), "the newest file with entries");
    svc.build_index(&req(100, TS_A, None, Some("a"))).unwrap();
    assert_eq!(query_all(&svc, "a"), [100, 0]);
    assert_eq!(header_of(&empty).index_count, 2);
    assert_eq!(header_of(&path).index_count, 2);
    assert!(IndexService::load(tmp.path(), IndexConfig { max_index_num: 1, ..small(16) }).is_err());
}

#[test]
fn delete_expired_keeps_the_last_file() {
    let tmp = tempfile::tempdir().unwrap();
    let svc = IndexService::load(tmp.path(), small(2)).unwrap();
    for i in 0..4 {
        svc.build_index(&req(i * 100, TS_A, None, Some("k"))).unwrap();
    }
    assert_eq!(svc.files().len(), 4);
    assert_eq!(svc.delete_expired(0), 0);
    assert_eq!(svc.delete_expired(150), 2, "files ending at 0 and 100");
    assert_eq!(query_all(&svc, "k"), [300, 200]);
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 2, "deleted from disk");
    assert_eq!(svc.delete_expired(i64::MAX), 1, "never the last file");
    assert_eq!(query_all(&svc, "k"), [300]);
}

#[test]
fn concurrent_queries_during_builds_see_consistent_results() {
    let tmp = tempfile::tempdir().unwrap();
    let svc = IndexService::load(tmp.path(), small(50)).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..2000 {
                svc.build_index(&req(i * 10, TS_A + i, None, Some("k"))).unwrap();
            }
        });
        s.spawn(|| {
            for _ in 0..200 {
                let got = svc.query("TopicTest", "k", 64, 0, i64::MAX, &mut |_| true).phy_offsets;
                assert!(got.windows(2).all(|w| w[0] > w[1]), "newest first, no duplicates: {got:?}");
            }
        });
    });
    assert_eq!(query_all(&svc, "k").len(), 64);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Against an oracle of (offset, time, keys): every query returns exactly the accepted offsets of the
    /// key inside the window, newest first and capped, across any number of files and any slot count.
    #[test]
    fn queries_match_an_oracle(
        slots in 1u32..6,
        index_num in 2u32..9,
        msgs in proptest::collection::vec((0u8..4, proptest::collection::vec(0usize..6, 0..4), 0i64..3), 1..40),
        windows in proptest::collection::vec((0i64..60, 0i64..60, 1usize..8), 1..8),
        reload_at in 0usize..40,
    ) {
        const KEYS: [&str; 6] = ["Aa", "BB", "ogaQmc", "k1", "k2", "k3"];
        let tmp = tempfile::tempdir().unwrap();
        let cfg = IndexConfig { max_hash_slot_num: slots, max_index_num: index_num, max_msgs_num_batch: 5 };
        let mut svc = IndexService::load(tmp.path(), cfg).unwrap();
        let t0 = 1_700_000_000_000i64;
        let mut oracle: Vec<(i64, i64, BTreeSet<&str>)> = Vec::new();
        let mut t = t0;
        for (i, (uniq, keys, dt)) in msgs.iter().enumerate() {
            if i == reload_at {
                drop(svc);
                svc = IndexService::load(tmp.path(), cfg).unwrap();
            }
            t += dt * 1000;
            let offset = i as i64 * 64;
            let uniq = (*uniq < 3).then(|| KEYS[*uniq as usize]);
            let joined: String = keys.iter().map(|&k| KEYS[k]).collect::<Vec<_>>().join(" ");
            let keys_prop = (!keys.is_empty()).then_some(joined.as_str());
            svc.build_index(&req(offset, t, uniq, keys_prop)).unwrap();
            let set: BTreeSet<&str> = uniq.into_iter().chain(keys.iter().map(|&k| KEYS[k])).collect();
            oracle.push((offset, t, set));
        }
        for (a, b, max) in windows {
            let (begin, end) = (t0 + a.min(b) * 1000, t0 + a.max(b) * 1000);
            for key in KEYS {
                let has = |o: i64| oracle.iter().any(|(off, _, s)| *off == o && s.contains(key));
                let got = svc.query("TopicTest", key, max, begin, end, &mut |o| has(o)).phy_offsets;
                let want: Vec<i64> = oracle
                    .iter()
                    .rev()
                    .filter(|(_, ts, s)| s.contains(key) && begin <= *ts && *ts <= end)
                    .map(|(o, _, _)| *o)
                    .take(max.min(5))
                    .collect();
                prop_assert_eq!(&got, &want, "key {} window [{}, {}] max {}", key, begin, end, max);
            }
        }
    }
}

#[test]
fn empty_newest_file_left_by_a_killed_creation_is_removed_on_load() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let svc = IndexService::load(tmp.path(), small(16)).unwrap();
        svc.build_index(&req(100, TS_A, None, Some("k1"))).unwrap();
    }
    // The process died after creating the next file and before setting its length.
    let empty = tmp.path().join("29991231235959999");
    std::fs::File::create(&empty).unwrap();
    let svc = IndexService::load(tmp.path(), small(16)).unwrap();
    assert!(!empty.exists());
    assert_eq!(svc.file_paths().len(), 1);
    assert_eq!(query_all(&svc, "k1"), vec![100]);
    // An empty file that is not the newest cannot come from a crash: damage to a derived file, left out (removed
    // on disk) and reported, its range rebuilt by the store's open as a lost file's.
    drop(svc);
    let old = tmp.path().join("19700101000000000");
    std::fs::File::create(&old).unwrap();
    let svc = IndexService::load(tmp.path(), small(16)).unwrap();
    assert!(!old.exists() && svc.file_paths().len() == 1);
    assert!(svc.left_out().len() == 1 && svc.left_out()[0].contains("it was truncated"), "{:?}", svc.left_out());
    assert_eq!(query_all(&svc, "k1"), vec![100]);
    // Two of another size: the store was written with other index settings, refused as before.
    drop(svc);
    for name in ["19700101000000000", "19700101000000001"] {
        std::fs::File::create(tmp.path().join(name)).unwrap();
    }
    assert!(matches!(IndexService::load(tmp.path(), small(16)), Err(Error::Corruption { offset: 0, .. })));
}
