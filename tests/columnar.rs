//! Split planning and reading (`src/columnar/split.rs`): splits start at the first record of the chain at or
//! after every cut, lose and duplicate nothing at any split size, end where the data ends; damage is an error
//! or skipped with the rest of its segment, the same at every split size; decoding of records one by one.

mod common;

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use rmq::columnar::{self, Column, ColumnBatch, RecordFilter, ALL_COLUMNS};
use rmq::store::{MessageStore, PutMessage};

use common::{small_config, SEG};

/// A store of small segments whose bodies are traps: magic codes, and a whole copy of an earlier record.
fn trap_store(dir: &Path) -> (Vec<u64>, Vec<Vec<u8>>) {
    let store = MessageStore::open(dir, small_config()).expect("open");
    let mut offsets = Vec::new();
    let mut raws: Vec<Vec<u8>> = Vec::new();
    for i in 0..120u32 {
        let mut body = Vec::new();
        if i % 3 == 0 {
            body.extend_from_slice(&[0xDA, 0xA3, 0x20, 0xA7, 0xDA, 0xA3, 0x20, 0xAB, 0xCB, 0xD4, 0x31, 0x94]);
        }
        if let Some(prev) = raws.last() {
            if i % 5 == 0 {
                body.extend_from_slice(prev); // a whole record inside a body
            }
        }
        body.extend(std::iter::repeat_n(b'a' + (i % 26) as u8, (i as usize * 13) % 300));
        let topic = if i % 7 == 0 { format!("%RETRY%{}", "g".repeat(150)) } else { format!("T{}", i % 3) };
        let keys = format!("k{i} x{i}");
        let msg =
            PutMessage { tags: Some("TagA"), keys: Some(&keys), ..PutMessage::new(&topic, (i % 4) as i32, &body) };
        let r = store.put(&msg).expect("put");
        offsets.push(r.offsets[0]);
        let rec = store.read(r.offsets[0]).expect("read").expect("record");
        raws.push(rec.file.slice(rec.pos, rec.header.total_size as usize).expect("bytes").to_vec());
    }
    store.close().expect("close");
    (offsets, raws)
}

/// (segment path, base, data end) of each segment, as the planner proves them.
fn segments(dir: &Path) -> Vec<(PathBuf, i64, u64)> {
    let plans = columnar::plan_commitlog(&dir.join("commitlog"), SEG, false).expect("plan");
    plans.into_iter().map(|p| (p.path, p.base, p.data_end)).collect()
}

fn offsets_of(batch: &ColumnBatch) -> Vec<i64> {
    match &batch.columns[3] {
        Column::Long(v) => v.clone(),
        other => panic!("commitlog_offset column is {other:?}"),
    }
}

/// The commitlog offsets read by every split of `split_size`, split by split; every record lies in its split.
fn read_planned(commitlog: &Path, split_size: u64, skip_damage: bool) -> Result<Vec<i64>, rmq::error::Error> {
    let mask = columnar::mask_of(&["commitlog_offset"]).expect("mask");
    let mut got = Vec::new();
    for plan in columnar::plan_commitlog(commitlog, split_size, skip_damage)? {
        let ends: Vec<u64> = plan.starts.iter().skip(1).copied().chain([plan.data_end]).collect();
        for (start, end) in plan.starts.iter().zip(ends) {
            let mut r = columnar::SplitReader::open(
                &plan.path,
                plan.base,
                *start,
                end,
                mask,
                RecordFilter::default(),
                skip_damage,
            )?;
            while let Some(b) = r.next_batch(7, 1 << 20)? {
                for off in offsets_of(&b) {
                    let at = (off - plan.base) as u64;
                    assert!(at >= *start && at < end, "record {off} outside its split {start}..{end}");
                    got.push(off);
                }
            }
        }
    }
    Ok(got)
}

#[test]
fn splits_start_at_the_first_record_of_the_chain_at_or_after_every_cut() {
    let dir = tempfile::tempdir().expect("tmp");
    let (offsets, _) = trap_store(dir.path());
    let commitlog = dir.path().join("commitlog");
    let want: Vec<i64> = offsets.iter().map(|o| *o as i64).collect();
    for split in [1u64, 13, 100, 512, 4096, SEG - 1, SEG, 1 << 30] {
        let mut expected = Vec::new();
        for (i, o) in offsets.iter().enumerate() {
            let (seg, at) = (o / SEG, o % SEG);
            let first_in_seg = i == 0 || offsets[i - 1] / SEG != seg;
            if first_in_seg || at / split > (offsets[i - 1] % SEG) / split {
                expected.push(*o as i64);
            }
        }
        let plans = columnar::plan_commitlog(&commitlog, split, false).expect("plan");
        let got: Vec<i64> = plans.iter().flat_map(|p| p.starts.iter().map(|s| p.base + *s as i64)).collect();
        assert_eq!(got, expected, "split size {split}");
        assert_eq!(read_planned(&commitlog, split, false).expect("read"), want, "split size {split}");
    }
}

#[test]
fn segments_end_at_the_blank_or_the_data() {
    let dir = tempfile::tempdir().expect("tmp");
    let (offsets, raws) = trap_store(dir.path());
    let segs = segments(dir.path());
    assert!(segs.len() >= 4);
    for (_, base, end) in &segs {
        // The end of each segment's last record: the blank filler's position, or the end of the data.
        let (i, last) = offsets
            .iter()
            .enumerate()
            .rfind(|(_, o)| **o / SEG == *base as u64 / SEG)
            .expect("a record in every segment");
        assert_eq!(*base as u64 + end, last + raws[i].len() as u64);
    }
}

#[test]
fn whole_segments_read_every_record_with_its_fields() {
    let dir = tempfile::tempdir().expect("tmp");
    let (offsets, raws) = trap_store(dir.path());
    let mut got = Vec::new();
    for (path, base, end) in segments(dir.path()) {
        let mut r = columnar::SplitReader::open(&path, base, 0, end, ALL_COLUMNS, RecordFilter::default(), false)
            .expect("split");
        while let Some(b) = r.next_batch(1000, 1 << 30).expect("batch") {
            got.push(b);
        }
    }
    let all: Vec<i64> = got.iter().flat_map(offsets_of).collect();
    assert_eq!(all, offsets.iter().map(|o| *o as i64).collect::<Vec<_>>());
    // The same records handed over one by one decode to the same columns.
    let one_by_one =
        columnar::decode_records(raws.iter().map(|r| Some(r.as_slice())), ALL_COLUMNS, true).expect("decode");
    assert_eq!(offsets_of(&one_by_one), all);
    let Column::Str(topics) = &one_by_one.columns[0] else { panic!("topic column") };
    assert_eq!(&topics.data[..7], b"%RETRY%"); // the first message has the 157-char v2 topic
}

#[test]
fn records_that_are_not_whole_become_null_rows_or_a_strict_error() {
    let dir = tempfile::tempdir().expect("tmp");
    let (_, raws) = trap_store(dir.path());
    let mut longer = raws[1].clone();
    longer.push(0);
    let rows =
        vec![Some(raws[0].as_slice()), None, Some(&raws[1][..10]), Some(longer.as_slice()), Some(raws[2].as_slice())];
    let b = columnar::decode_records(rows.clone(), ALL_COLUMNS, false).expect("lenient");
    assert_eq!(b.rows, 5);
    assert_eq!(b.valid, vec![true, false, false, false, true]);
    let err = columnar::decode_records(rows, ALL_COLUMNS, true).expect_err("strict");
    assert_eq!(err.0, 2);
}

#[test]
fn filters_keep_only_matching_records() {
    let dir = tempfile::tempdir().expect("tmp");
    let (offsets, raws) = trap_store(dir.path());
    let filter = RecordFilter { topics: Some(vec!["T1".into()]), ..RecordFilter::default() };
    let mut got = Vec::new();
    for (path, base, end) in segments(dir.path()) {
        let mut r =
            columnar::SplitReader::open(&path, base, 0, end, ALL_COLUMNS, filter.clone(), false).expect("split");
        while let Some(b) = r.next_batch(1000, 1 << 30).expect("batch") {
            got.extend(offsets_of(&b));
        }
    }
    let want: Vec<i64> = (0..raws.len()).filter(|i| i % 7 != 0 && i % 3 == 1).map(|i| offsets[i] as i64).collect();
    assert_eq!(got, want);
}

#[test]
fn damage_inside_the_data_is_an_error_or_skipped_with_the_rest_of_its_segment() {
    let dir = tempfile::tempdir().expect("tmp");
    let (offsets, _) = trap_store(dir.path());
    let commitlog = dir.path().join("commitlog");
    let (path, base, _) = segments(dir.path()).remove(0);
    let mut bytes = std::fs::read(&path).expect("read");
    let second = (offsets[1] as i64 - base) as usize;
    bytes[second + 4..second + 8].copy_from_slice(&[0, 0, 0, 0]);
    std::fs::write(&path, &bytes).expect("write");
    for split in [1u64, 100, SEG] {
        let err = columnar::plan_commitlog(&commitlog, split, false).expect_err("damage");
        assert!(
            matches!(&err, rmq::error::Error::Corruption { offset, path: p, .. } if *offset == offsets[1] as i64 && *p == path),
            "{err}"
        );
        let plans = columnar::plan_commitlog(&commitlog, split, true).expect("skip");
        let damage = plans[0].damage.as_ref().expect("reported");
        assert_eq!((damage.offset, damage.length), (offsets[1] as i64, SEG - second as u64));
        let want: Vec<i64> = offsets.iter().filter(|o| **o == offsets[0] || **o >= SEG).map(|o| *o as i64).collect();
        assert_eq!(read_planned(&commitlog, split, true).expect("read"), want);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn any_split_size_loses_and_duplicates_nothing(split in 1u64..2 * SEG) {
        let dir = tempfile::tempdir().expect("tmp");
        let (offsets, _) = trap_store(dir.path());
        let want: Vec<i64> = offsets.iter().map(|o| *o as i64).collect();
        prop_assert_eq!(read_planned(&dir.path().join("commitlog"), split, false).expect("read"), want);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    /// Segments of arbitrary bytes, and valid segments with bytes flipped: planning and reading return records or
    /// an error, never panic, and never return a record outside its split (`read_planned` checks).
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..3000), split in 1u64..4000) {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::write(dir.path().join("00000000000000000000"), &bytes).expect("write");
        for skip in [false, true] {
            let _ = read_planned(dir.path(), split, skip);
        }
        let _ = columnar::decode_records([Some(bytes.as_slice())], ALL_COLUMNS, false);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn flipped_bytes_never_panic(flips in proptest::collection::vec((0usize..SEG as usize, any::<u8>()), 1..8),
                                 split in 1u64..SEG, seg in 0usize..4) {
        let dir = tempfile::tempdir().expect("tmp");
        trap_store(dir.path());
        let (path, _, _) = segments(dir.path()).remove(seg);
        let mut bytes = std::fs::read(&path).expect("read");
        for (at, v) in flips {
            bytes[at] ^= v | 1;
        }
        std::fs::write(&path, &bytes).expect("write");
        let commitlog = dir.path().join("commitlog");
        let strict = read_planned(&commitlog, split, false).map_err(|e| e.to_string());
        let lenient = read_planned(&commitlog, split, true).expect("skipping damage never fails");
        // The same rows, or the same error, at any split size: compare with one split per segment.
        prop_assert_eq!(strict, read_planned(&commitlog, SEG, false).map_err(|e| e.to_string()));
        prop_assert_eq!(lenient, read_planned(&commitlog, SEG, true).expect("whole segments"));
    }
}
