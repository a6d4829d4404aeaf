//! RocketMQ's two recoveries (spec §10.3-10.5), chosen by the abort file: after a clean close the last three
//! segments are validated (`recoverNormally`), after a crash everything from the newest segment stored at or
//! before the checkpoint's min timestamp less 3 s (`recoverAbnormally`); and the index files the checkpoint
//! says were rolled whole are kept after a crash without being read.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use rmq::commitlog::recover::RecoveryPath;
use rmq::store::{MessageStore, PutMessage};
use rmq::Error;

use common::{small_config, SEG};

/// (offset, store timestamp) of each message.
type Put = (u64, i64);

/// A closed store of `n` keyed messages on T/0, each put a few ms after the previous one (so every segment's
/// first record has a store time of its own).
fn closed_store(root: &Path, n: usize) -> Vec<Put> {
    let store = MessageStore::open(root, small_config()).unwrap();
    let puts = (0..n)
        .map(|i| {
            let body = vec![(i % 251) as u8 + 1; 60 + i % 40];
            let key = format!("key{i}");
            let r = store.put(&PutMessage { keys: Some(&key), ..PutMessage::new("T", 0, &body) }).unwrap();
            std::thread::sleep(Duration::from_millis(2));
            (r.offsets[0], r.store_timestamp)
        })
        .collect();
    store.close().unwrap();
    puts
}

/// What a crash leaves: the abort file (written by every open, removed by a clean close).
fn leave_abort(root: &Path) {
    std::fs::write(root.join("abort"), b"4242").unwrap();
}

/// Sets the checkpoint's physicMsgTimestamp and logicsMsgTimestamp (spec §8.1: big-endian at 0 and 8).
fn set_checkpoint(root: &Path, physic: i64, logics: i64) {
    let path = root.join("checkpoint");
    let mut data = std::fs::read(&path).unwrap();
    data[0..8].copy_from_slice(&physic.to_be_bytes());
    data[8..16].copy_from_slice(&logics.to_be_bytes());
    std::fs::write(&path, data).unwrap();
}

/// The first message of each segment.
fn segment_heads(puts: &[Put]) -> Vec<Put> {
    let mut heads: Vec<Put> = Vec::new();
    for &(o, ts) in puts {
        if heads.last().is_none_or(|&(h, _)| h / SEG != o / SEG) {
            heads.push((o, ts));
        }
    }
    heads
}

fn flip(root: &Path, offset: u64, at: u64) -> PathBuf {
    let path = root.join("commitlog").join(rmq::file_queue::file_name(offset - offset % SEG));
    let mut data = std::fs::read(&path).unwrap();
    data[(offset % SEG + at) as usize] ^= 0x5A;
    std::fs::write(&path, data).unwrap();
    path
}

#[test]
fn a_clean_close_validates_the_last_three_segments_and_a_crash_everything_after_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let puts = closed_store(dir.path(), 200);
    let heads = segment_heads(&puts);
    let end = {
        let s = MessageStore::open(dir.path(), small_config()).unwrap();
        let end = s.commitlog().max_offset();
        let r = s.recovery_report().clone();
        // Normal: three segments from the end (RocketMQ's `recoverNormally`), bounded by three segments.
        let files = end.div_ceil(SEG);
        assert!(files >= 8, "{files} segments");
        assert_eq!(r.path, RecoveryPath::Normal);
        assert_eq!(r.start_offset, (files - 3) * SEG);
        assert_eq!(r.validated_bytes, end - (files - 3) * SEG);
        assert!(r.validated_bytes <= 3 * SEG);
        assert_eq!(
            r.start_segment.unwrap(),
            dir.path().join("commitlog").join(rmq::file_queue::file_name(r.start_offset))
        );
        assert_eq!(r.checkpoint_restart, None);
        s.close().unwrap();
        end
    };
    // A crash whose checkpoint is several segments old: everything from the newest segment stored at or before
    // its min timestamp less 3 s is validated, and dispatched again from there.
    for k in [2usize, 4] {
        let (start, ts) = heads[k];
        leave_abort(dir.path());
        // physic is later than logics: the earlier of the two counts.
        set_checkpoint(dir.path(), ts + 3000 + 60_000, ts + 3000);
        let s = MessageStore::open(dir.path(), small_config()).unwrap();
        let r = s.recovery_report().clone();
        assert_eq!(r.path, RecoveryPath::Abnormal);
        assert_eq!((r.start_offset, r.validated_bytes), (start, end - start), "checkpoint at segment {k}");
        assert_eq!(r.checkpoint_restart, Some(start));
        assert_eq!(r.dispatched_from, start);
        assert_eq!(s.commitlog().max_offset(), end);
        s.close().unwrap();
    }
    // One ms before the segment's first record (plus the margin) is before it: the previous segment.
    let (start, ts) = heads[4];
    leave_abort(dir.path());
    set_checkpoint(dir.path(), ts + 2999, ts + 2999);
    let s = MessageStore::open(dir.path(), small_config()).unwrap();
    assert!(s.recovery_report().start_offset < start);
    s.close().unwrap();
    // No checkpoint at all: the whole log.
    leave_abort(dir.path());
    set_checkpoint(dir.path(), 0, 0);
    let s = MessageStore::open(dir.path(), small_config()).unwrap();
    let r = s.recovery_report().clone();
    assert_eq!((r.path, r.start_offset, r.validated_bytes), (RecoveryPath::Abnormal, 0, end));
    s.close().unwrap();
    // A recent checkpoint: the newest segment's predecessor too (rmq validates where a roll wrote its blank).
    leave_abort(dir.path());
    let last = puts.last().unwrap().1;
    set_checkpoint(dir.path(), last + 3000, last + 3000);
    let s = MessageStore::open(dir.path(), small_config()).unwrap();
    let r = s.recovery_report().clone();
    assert_eq!(r.path, RecoveryPath::Abnormal);
    assert_eq!(r.start_offset, (end.div_ceil(SEG) - 2) * SEG);
    s.close().unwrap();
}

#[test]
fn a_flipped_bit_after_the_checkpoint_is_found_after_a_crash_and_not_looked_for_after_a_clean_close() {
    let dir = tempfile::tempdir().unwrap();
    let puts = closed_store(dir.path(), 200);
    let heads = segment_heads(&puts);
    let (_, ts) = heads[2];
    // A record in the fifth segment: after the checkpoint's point (segment 2), before the last three segments.
    let victim = puts.iter().find(|(o, _)| o / SEG == heads[4].0 / SEG && o % SEG > 0).unwrap().0;
    assert!(victim < (heads.len() as u64 - 3) * SEG);
    let path = flip(dir.path(), victim, 120); // a body byte: its CRC fails
    set_checkpoint(dir.path(), ts + 3000, ts + 3000);
    // Clean close: RocketMQ's normal recovery reads the last three segments only, and so does rmq.
    let s = MessageStore::open(dir.path(), small_config()).unwrap();
    assert_eq!(s.recovery_report().path, RecoveryPath::Normal);
    assert!(s.recovery_report().start_offset > victim);
    s.close().unwrap();
    set_checkpoint(dir.path(), ts + 3000, ts + 3000);
    // After a crash the damaged record lies after the checkpoint's durable point: found and refused (strict).
    leave_abort(dir.path());
    match MessageStore::open(dir.path(), small_config()) {
        Err(Error::Corruption { path: p, offset, .. }) => assert_eq!((p, offset), (path, victim as i64)),
        other => panic!("expected Corruption at {victim}, got {:?}", other.map(|s| s.recovery_report().clone())),
    }
    // A checkpoint past the damaged segment leaves it before the abnormal start: not read either.
    set_checkpoint(dir.path(), heads[6].1 + 3000, heads[6].1 + 3000);
    let s = MessageStore::open(dir.path(), small_config()).unwrap();
    assert_eq!(s.recovery_report().start_offset, heads[6].0);
}

/// The index files of `root`, oldest first.
fn index_files(root: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root.join("index")).unwrap().map(|e| e.unwrap().path()).collect();
    v.sort();
    v
}

/// Points every used hash slot of an index file (after the 40-byte header) at an entry no file can hold:
/// damage only the whole-file check ([`rmq::index::IndexFile::verify`]) sees, not the header check.
fn break_slots(path: &Path) {
    let mut data = std::fs::read(path).unwrap();
    let slots = &mut data[40..40 + 64 * 4]; // small_config: 64 slots
    for slot in slots.chunks_mut(4) {
        if slot != [0, 0, 0, 0] {
            slot.copy_from_slice(&100_000i32.to_be_bytes());
        }
    }
    std::fs::write(path, data).unwrap();
}

/// Sets an index file's indexCount (header byte 36) to a value no file can hold.
fn break_index_count(path: &Path) {
    let mut data = std::fs::read(path).unwrap();
    data[36..40].copy_from_slice(&1000i32.to_be_bytes());
    std::fs::write(path, data).unwrap();
}

#[test]
fn after_a_crash_index_files_rolled_before_the_checkpoint_are_kept_unread_and_newer_ones_checked() {
    let dir = tempfile::tempdir().unwrap();
    closed_store(dir.path(), 60);
    let files = index_files(dir.path());
    assert!(files.len() >= 4, "{files:?}");
    let old = files[1].clone();
    let newest = files.last().unwrap().clone();
    break_slots(&old);
    break_index_count(&newest);
    let old_bytes = std::fs::read(&old).unwrap();
    leave_abort(dir.path());
    let s = MessageStore::open(dir.path(), small_config()).unwrap();
    let r = s.recovery_report().clone();
    // The newest file (after indexMsgTimestamp) was checked and rebuilt; the old one, rolled and flushed before
    // the checkpoint's indexMsgTimestamp, was not verified (only its header, which is whole, was read): the
    // damage in its slots is still on disk.
    assert_eq!(r.rebuilt_index_files.len(), 1, "{:?}", r.rebuilt_index_files);
    assert!(r.rebuilt_index_files[0].contains(&newest.display().to_string()), "{:?}", r.rebuilt_index_files);
    assert_eq!(r.index_files_trusted, files.len() as u64 - 1);
    assert_eq!(std::fs::read(&old).unwrap(), old_bytes);
    // The first query that reads the old file finds the damage, rebuilds it and answers right.
    let found = s.query_message("T", "key10", 32, 0, i64::MAX).unwrap();
    assert_eq!(found.records.len(), 1);
    let (issues, recent) = s.dispatch_issues();
    assert!(issues >= 1 && recent.iter().any(|i| i.reason.contains(&old.display().to_string())), "{recent:?}");
    s.close().unwrap();

    // Every open checks every file's header (three entry reads a file), after a crash the trusted files' too:
    // a damaged header is rebuilt at open, whichever open it is.
    break_index_count(&old);
    leave_abort(dir.path());
    let s = MessageStore::open(dir.path(), small_config()).unwrap();
    let r = s.recovery_report().clone();
    assert!(r.rebuilt_index_files.iter().any(|l| l.contains(&old.display().to_string())), "{r:?}");
    s.close().unwrap();
    break_index_count(&old);
    let s = MessageStore::open(dir.path(), small_config()).unwrap();
    let r = s.recovery_report().clone();
    assert_eq!(r.index_files_trusted, 0);
    assert!(r.rebuilt_index_files.iter().any(|l| l.contains(&old.display().to_string())), "{r:?}");
}
