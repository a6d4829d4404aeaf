//! ConsumeQueue on its own (spec §6 and the vectors of §16.6): entry bytes, pre-blank, duplicate rules,
//! recovery, truncation, min-offset correction, time search and batch reads across files.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::path::Path;

use proptest::prelude::*;
use rmq::consume_queue::{Appended, BoundaryType, ConsumeQueue, CqEntry, PRE_BLANK, UNIT};

fn open(dir: &Path, file_size: u64) -> ConsumeQueue {
    ConsumeQueue::open(dir, "TopicTest", 0, file_size).unwrap()
}

fn file_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

fn reopen(dir: &Path, file_size: u64) -> ConsumeQueue {
    let cq = open(dir, file_size);
    cq.recover().unwrap();
    cq
}

#[test]
fn vector_16_6_pre_blank_queue_starting_at_300005() {
    let tmp = tempfile::tempdir().unwrap();
    let cq = open(tmp.path(), 6_000_000);
    assert_eq!(
        cq.append(1000, 218, 2598919, 300_005).unwrap(),
        Appended::Written { queue_offset: 300_005, new_gap: false }
    );
    assert_eq!(file_names(tmp.path()), ["00000000000006000000"]);
    let bytes = std::fs::read(tmp.path().join("00000000000006000000")).unwrap();
    assert_eq!(bytes.len(), 6_000_000);
    let blank = [0, 0, 0, 0, 0, 0, 0, 0, 0x7F, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0, 0, 0];
    for pos in (0..100).step_by(20) {
        assert_eq!(&bytes[pos..pos + 20], &blank, "pre-blank at {pos}");
    }
    assert_eq!(&bytes[100..120], &CqEntry { offset: 1000, size: 218, tags_code: 2598919 }.encode());
    assert_eq!(&bytes[100..108], &[0, 0, 0, 0, 0, 0, 0x03, 0xE8]);
    assert_eq!(&bytes[108..112], &[0, 0, 0, 0xDA]);
    assert!(bytes[120..].iter().all(|&b| b == 0));
    assert_eq!((cq.min_offset(), cq.max_offset()), (300_005, 300_006));
    assert_eq!(cq.entry(300_004), None, "below min");
    assert_eq!(cq.entry(300_005).unwrap().offset, 1000);
    drop(cq);
    // After reopening, the min offset comes back through correctMinOffset, skipping the pre-blanks even when
    // the commitlog starts at 0 (RocketMQ would stop on the first pre-blank and report 300000).
    let cq = reopen(tmp.path(), 6_000_000);
    assert_eq!(cq.max_offset(), 300_006);
    cq.correct_min_offset(0);
    assert_eq!(cq.min_offset(), 300_005);
    assert_eq!(cq.max_physic_offset(), 1218, "pre-blanks do not count as message ends");
}

#[test]
fn duplicate_rules() {
    let tmp = tempfile::tempdir().unwrap();
    let cq = open(tmp.path(), 200);
    assert_eq!(cq.append(0, 100, 1, 0).unwrap(), Appended::Written { queue_offset: 0, new_gap: false });
    assert_eq!(cq.append(100, 100, 1, 1).unwrap(), Appended::Written { queue_offset: 1, new_gap: false });
    // offset + size <= maxPhysicOffset: already built.
    assert_eq!(cq.append(100, 100, 1, 1).unwrap(), Appended::Duplicate);
    assert_eq!(cq.append(0, 100, 1, 0).unwrap(), Appended::Duplicate);
    // A later record claiming an earlier queue offset (expect < current): no write.
    assert_eq!(cq.append(200, 100, 1, 1).unwrap(), Appended::Duplicate);
    assert_eq!(cq.max_offset(), 2);
    // A gap (expect > current) is appended at the current position, as RocketMQ does, and counted.
    assert_eq!(cq.append(300, 100, 1, 5).unwrap(), Appended::Written { queue_offset: 2, new_gap: true });
    assert_eq!(cq.gaps(), 1);
    // The records after it, as many places early: the same gap, not a new one (the dispatcher reports each once).
    assert_eq!(cq.append(500, 100, 1, 6).unwrap(), Appended::Written { queue_offset: 3, new_gap: false });
    assert_eq!(cq.gaps(), 2);
    // Bad input writes nothing.
    assert!(cq.append(-1, 100, 0, 3).is_err());
    assert!(cq.append(400, 0, 0, 3).is_err());
    assert!(cq.append(400, 10, 0, -3).is_err());
    assert!(cq.append(400, 10, 0, i64::MAX).is_err());
    assert_eq!(cq.max_offset(), 4);
}

#[test]
fn files_roll_and_batch_reads_cross_them() {
    let tmp = tempfile::tempdir().unwrap();
    // 128 rounds up to 140 bytes = 7 entries per file, as RocketMQ's getter rounds.
    let cq = open(tmp.path(), 128);
    assert_eq!(cq.entries_per_file(), 7);
    for q in 0..23u64 {
        cq.append(q as i64 * 50, 50, q as i64, q as i64).unwrap();
    }
    assert_eq!(
        file_names(tmp.path()),
        ["00000000000000000000", "00000000000000000140", "00000000000000000280", "00000000000000000420"]
    );
    let (first, all) = cq.entries(0, 100);
    assert_eq!(first, 0);
    assert_eq!(all.len(), 23);
    for (q, e) in all.iter().enumerate() {
        assert_eq!(*e, CqEntry { offset: q as i64 * 50, size: 50, tags_code: q as i64 });
    }
    let (first, part) = cq.entries(5, 4);
    assert_eq!((first, part.len(), part[0].offset, part[3].offset), (5, 4, 250, 400));
    assert_eq!(cq.entries(23, 10).1, vec![]);
    assert_eq!(rmq::consume_queue::roll_next_file(9, cq.entries_per_file()), 14);
}

#[test]
fn recovery_stops_at_a_torn_entry_and_scans_only_the_last_three_files() {
    let tmp = tempfile::tempdir().unwrap();
    let cq = open(tmp.path(), 100); // 5 entries per file
    for q in 0..23i64 {
        cq.append(q * 10, 10, 0, q).unwrap();
    }
    drop(cq);
    // Zero entry 21 (third entry of the last file): entries 21 and 22 are lost to recovery.
    let last = tmp.path().join("00000000000000000400");
    let mut bytes = std::fs::read(&last).unwrap();
    bytes[20..40].fill(0);
    std::fs::write(&last, &bytes).unwrap();
    // Damage in the first file is outside the last three files: not looked at, as in RocketMQ.
    let first = tmp.path().join("00000000000000000000");
    let mut bytes = std::fs::read(&first).unwrap();
    bytes[40..60].fill(0);
    std::fs::write(&first, &bytes).unwrap();
    let cq = reopen(tmp.path(), 100);
    assert_eq!(cq.max_offset(), 21);
    assert_eq!(cq.max_physic_offset(), 210);
    // The stale entry after the torn one was zeroed, so a second recovery cannot resurrect it.
    let bytes = std::fs::read(&last).unwrap();
    assert!(bytes[20..].iter().all(|&b| b == 0));
    assert_eq!(cq.append(210, 10, 0, 21).unwrap(), Appended::Written { queue_offset: 21, new_gap: false });
    drop(cq);
    let cq = reopen(tmp.path(), 100);
    assert_eq!(cq.max_offset(), 22);
}

#[test]
fn recovery_drops_files_after_a_torn_one() {
    let tmp = tempfile::tempdir().unwrap();
    let cq = open(tmp.path(), 100);
    for q in 0..12i64 {
        cq.append(q * 10, 10, 0, q).unwrap();
    }
    drop(cq);
    let second = tmp.path().join("00000000000000000100");
    let mut bytes = std::fs::read(&second).unwrap();
    bytes[60..80].fill(0); // entry 8
    std::fs::write(&second, &bytes).unwrap();
    let cq = reopen(tmp.path(), 100);
    assert_eq!(cq.max_offset(), 8);
    assert_eq!(file_names(tmp.path()), ["00000000000000000000", "00000000000000000100"]);
}

/// A power loss can leave the newest consume-queue files as zeros (created, their entries never flushed).
/// Recovery scans only the last three files, so it finds no entry there; the queue still ends after the last
/// entry of the file before them, and re-dispatching an earlier record (queue offset 0 included, which the
/// queue-offset rule does not check) is a duplicate, not an entry written at the end (found by `make power`).
#[test]
fn recovery_over_lost_newest_files_keeps_the_earlier_entries_as_the_end() {
    let tmp = tempfile::tempdir().unwrap();
    let cq = open(tmp.path(), 100);
    for q in 0..20i64 {
        cq.append(q * 10, 10, 0, q).unwrap();
    }
    drop(cq);
    for name in ["00000000000000000100", "00000000000000000200", "00000000000000000300"] {
        std::fs::write(tmp.path().join(name), [0u8; 100]).unwrap();
    }
    let cq = reopen(tmp.path(), 100);
    assert_eq!(cq.max_offset(), 5);
    assert_eq!(cq.max_physic_offset(), 50, "the end of the last entry kept, in the file before the scanned ones");
    for q in 0..5i64 {
        assert_eq!(cq.append(q * 10, 10, 0, q).unwrap(), Appended::Duplicate, "queue offset {q} is there");
    }
    assert_eq!(cq.append(50, 10, 0, 5).unwrap(), Appended::Written { queue_offset: 5, new_gap: false });
    assert_eq!(cq.entry(5).unwrap().offset, 50);
}

#[test]
fn truncate_dirty_removes_entries_at_or_after_the_commitlog_end() {
    let tmp = tempfile::tempdir().unwrap();
    let cq = open(tmp.path(), 100);
    for q in 0..12i64 {
        cq.append(q * 10, 10, 0, q).unwrap();
    }
    // processOffset inside the second file: entries with offset >= 75 go (q >= 8).
    cq.truncate_dirty(75).unwrap();
    assert_eq!(cq.max_offset(), 8);
    assert_eq!(cq.max_physic_offset(), 75, "capped at the commitlog end");
    assert_eq!(file_names(tmp.path()), ["00000000000000000000", "00000000000000000100"]);
    // A processOffset before the first entry of the last file deletes that file.
    cq.truncate_dirty(50).unwrap();
    assert_eq!(cq.max_offset(), 5);
    assert_eq!(file_names(tmp.path()), ["00000000000000000000"]);
    cq.truncate_dirty(0).unwrap();
    assert_eq!((cq.min_offset(), cq.max_offset()), (0, 0));
    // Rebuilding works from scratch.
    assert_eq!(cq.append(0, 10, 0, 0).unwrap(), Appended::Written { queue_offset: 0, new_gap: false });
}

#[test]
fn correct_min_offset_cases() {
    let tmp = tempfile::tempdir().unwrap();
    let cq = open(tmp.path(), 100);
    for q in 0..12i64 {
        cq.append(q * 100, 100, 0, q).unwrap();
    }
    // m between entries: the first entry at or after it.
    cq.correct_min_offset(250);
    assert_eq!(cq.min_offset(), 3);
    // m equal to an entry.
    cq.correct_min_offset(400);
    assert_eq!(cq.min_offset(), 4);
    // An intact min whose entry is still in the log stays.
    cq.correct_min_offset(300);
    assert_eq!(cq.min_offset(), 4);
    // m beyond every entry of the first file (5 entries a file here): the search goes on in the next file
    // (RocketMQ searches the first file only and leaves the min where it was until its cleanup deletes the
    // file; a kill between the commitlog's deletion and that cleanup left such queues).
    cq.correct_min_offset(700);
    assert_eq!(cq.min_offset(), 7);
    // ... and past whole files, from the file holding the min.
    cq.correct_min_offset(1050);
    assert_eq!(cq.min_offset(), 11);
    // Last entry below m: the whole queue is stale, min = max.
    cq.correct_min_offset(5000);
    assert_eq!(cq.min_offset(), 12);
    assert_eq!(cq.entry(11), None);
}

/// Store times t1,t1,t1,t3,t3 at queue offsets 1..5 (spec §6.7 example and §16.6).
fn time_queue(dir: &Path) -> (ConsumeQueue, HashMap<i64, i64>) {
    let cq = open(dir, 6_000_000);
    let times = [100, 100, 100, 300, 300];
    let mut by_offset = HashMap::new();
    for (i, t) in times.iter().enumerate() {
        let phys = 1000 + i as i64 * 100;
        cq.append(phys, 100, 0, i as i64 + 1).unwrap();
        by_offset.insert(phys, *t);
    }
    (cq, by_offset)
}

#[test]
fn time_search_table_of_16_6() {
    let tmp = tempfile::tempdir().unwrap();
    let (cq, times) = time_queue(tmp.path());
    let store_time = |o: i64, _s: i32| times.get(&o).copied().unwrap_or(-1);
    let q = |ts: i64, b: BoundaryType| cq.offset_by_time(ts, b, 0, &store_time);
    use BoundaryType::{Lower, Upper};
    assert_eq!((q(100, Lower), q(100, Upper)), (1, 3), "t1");
    assert_eq!((q(200, Lower), q(200, Upper)), (4, 3), "t2");
    assert_eq!((q(300, Lower), q(300, Upper)), (4, 5), "t3");
    assert_eq!((q(50, Lower), q(50, Upper)), (0, 0), "t0 < t1: file start index / 0 (the store clamps)");
    assert_eq!((q(400, Lower), q(400, Upper)), (6, 5), "t4 > t3: max offset / last entry");
}

#[test]
fn time_search_over_several_files() {
    let tmp = tempfile::tempdir().unwrap();
    let cq = open(tmp.path(), 100); // 5 per file
    let mut times = HashMap::new();
    for q in 0..23i64 {
        cq.append(q * 10, 10, 0, q).unwrap();
        times.insert(q * 10, 1000 + q * 2); // strictly increasing, even
    }
    let store_time = |o: i64, _s: i32| times.get(&o).copied().unwrap_or(-1);
    for q in 0..23i64 {
        let t = 1000 + q * 2;
        assert_eq!(cq.offset_by_time(t, BoundaryType::Lower, 0, &store_time), q as u64);
        assert_eq!(cq.offset_by_time(t, BoundaryType::Upper, 0, &store_time), q as u64);
        assert_eq!(cq.offset_by_time(t + 1, BoundaryType::Lower, 0, &store_time), q as u64 + 1);
        assert_eq!(cq.offset_by_time(t + 1, BoundaryType::Upper, 0, &store_time), q as u64);
    }
}

#[test]
fn pre_blank_entry_bytes() {
    assert_eq!(PRE_BLANK.encode()[8..12], [0x7F, 0xFF, 0xFF, 0xFF]);
    assert!(PRE_BLANK.is_valid(), "RocketMQ's recovery counts a pre-blank as valid");
    assert_eq!(UNIT, 20);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Appends (with re-dispatched duplicates mixed in), reopening at random points, always equal an
    /// in-memory list; the time search agrees with a linear scan.
    #[test]
    fn appends_and_reopens_match_an_oracle(
        steps in proptest::collection::vec((1u8..4, any::<bool>(), any::<bool>()), 1..60),
        start in 0u64..12,
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let mut cq = open(tmp.path(), 100);
        let mut oracle: Vec<(i64, i64)> = Vec::new(); // (phys, time)
        let mut phys = 0i64;
        let mut time = 0i64;
        for (gap, dup, reopen_now) in steps {
            phys += 10;
            time += i64::from(gap) - 1;
            let q = start as i64 + oracle.len() as i64;
            cq.append(phys, 10, time, q).unwrap();
            oracle.push((phys, time));
            if dup {
                prop_assert_eq!(cq.append(phys, 10, time, q).unwrap(), Appended::Duplicate);
            }
            if reopen_now {
                drop(cq);
                cq = reopen(tmp.path(), 100);
                cq.correct_min_offset(0);
            }
        }
        prop_assert_eq!(cq.min_offset(), start);
        prop_assert_eq!(cq.max_offset(), start + oracle.len() as u64);
        let (_, entries) = cq.entries(0, 10_000);
        let got: Vec<(i64, i64)> = entries.iter().map(|e| (e.offset, e.tags_code)).collect();
        prop_assert_eq!(&got, &oracle);
        let times: HashMap<i64, i64> = oracle.iter().copied().collect();
        let store_time = |o: i64, _s: i32| times.get(&o).copied().unwrap_or(-1);
        let last_time = oracle.last().map(|x| x.1).unwrap_or(0);
        for t in 0..=last_time + 1 {
            let lower = oracle.iter().position(|x| x.1 >= t).map_or(start + oracle.len() as u64, |i| start + i as u64);
            let got = cq.offset_by_time(t, BoundaryType::Lower, 0, &store_time)
                .clamp(cq.min_offset(), cq.max_offset());
            prop_assert_eq!(got, lower, "LOWER {}", t);
            if let Some(i) = oracle.iter().rposition(|x| x.1 <= t) {
                let got = cq.offset_by_time(t, BoundaryType::Upper, 0, &store_time);
                prop_assert_eq!(got, start + i as u64, "UPPER {}", t);
            }
        }
    }
}
