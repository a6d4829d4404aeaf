//! Split planning and reading (`src/columnar/split.rs`): splits start at the first record of the chain at or
//! after every cut, lose and duplicate nothing at any split size, end where the data ends; damage is an error
//! or skipped with the rest of its segment, the same at every split size; decoding of records one by one. The
//! reader decides what bytes are by the commitlog cursor's rules: it agrees with the cursor walking the mapped
//! segment on every position, damaged or not, and the bytes it reads classify as the whole file would.

mod common;

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use rmq::columnar::{self, Column, ColumnBatch, RecordFilter, ALL_COLUMNS};
use rmq::commitlog::cursor::{self, Cursor, Step};
use rmq::file_queue::FileQueue;
use rmq::message::decode::CheckOptions;
use rmq::message::{END_FILE_MIN_BLANK_LENGTH, MAGIC_V1, MAGIC_V2};
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
        let ends = plan.ends.clone();
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
fn damage_inside_the_data_is_an_error_or_skipped_up_to_the_next_valid_record() {
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
        // Only the damaged record is left out: the chain goes on at the record after it (its bodies hold
        // records and magic codes, which are never taken for the next record: they do not name their offset).
        let plans = columnar::plan_commitlog(&commitlog, split, true).expect("skip");
        let damage: Vec<(i64, u64)> = plans[0].damage.iter().map(|d| (d.offset, d.length)).collect();
        assert_eq!(damage, [(offsets[1] as i64, offsets[2] - offsets[1])]);
        let want: Vec<i64> = offsets.iter().filter(|o| **o != offsets[1]).map(|o| *o as i64).collect();
        assert_eq!(read_planned(&commitlog, split, true).expect("read"), want);
    }
}

/// A bit flipped in an older segment's record's TOTALSIZE: the walk, which steps over older records by their
/// TOTALSIZE, lands inside a later record; the chain ends at the damaged record, not where the hop landed, so
/// the intact records its wrong size jumped over are read.
#[test]
fn a_flipped_total_size_loses_only_its_own_record() {
    let dir = tempfile::tempdir().expect("tmp");
    let (offsets, _) = trap_store(dir.path());
    let commitlog = dir.path().join("commitlog");
    let (path, base, data_end) = segments(dir.path()).remove(0);
    let original = std::fs::read(&path).expect("read");
    let second = (offsets[1] as i64 - base) as usize;
    let size = u32::from_be_bytes(original[second..second + 4].try_into().expect("4 bytes"));
    let mut tried = 0;
    for bit in 3..16 {
        let flipped = size ^ (1 << bit);
        let lands = offsets[1] + u64::from(flipped);
        // A landing on a record's own start is a chain that holds together; past the data, another test.
        if flipped < size || offsets.contains(&lands) || lands >= base as u64 + data_end {
            continue;
        }
        tried += 1;
        let mut bytes = original.clone();
        bytes[second..second + 4].copy_from_slice(&flipped.to_be_bytes());
        std::fs::write(&path, &bytes).expect("write");
        for split in [1u64, 100, SEG] {
            let plans = columnar::plan_commitlog(&commitlog, split, true).expect("skip");
            let damage: Vec<(i64, u64)> = plans[0].damage.iter().map(|d| (d.offset, d.length)).collect();
            assert_eq!(damage, [(offsets[1] as i64, offsets[2] - offsets[1])], "bit {bit}, split {split}");
            let want: Vec<i64> = offsets.iter().filter(|o| **o != offsets[1]).map(|o| *o as i64).collect();
            assert_eq!(read_planned(&commitlog, split, true).expect("read"), want, "bit {bit}, split {split}");
        }
    }
    assert!(tried >= 3, "only {tried} flips landed inside the segment's data");
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

/// What reading segment `seg` gives, skipping damage at one split per chain: the rows' offsets, the records its
/// reader left out (offset, length), and the damaged bytes the planner left out (offset, length).
type SegmentRead = (Vec<i64>, Vec<(i64, u64)>, Vec<(i64, u64)>);

fn read_segment(commitlog: &Path, seg: usize) -> SegmentRead {
    let mask = columnar::mask_of(&["commitlog_offset"]).expect("mask");
    let plan = columnar::plan_commitlog(commitlog, SEG, true).expect("skipping damage never fails").remove(seg);
    let (mut rows, mut skipped) = (Vec::new(), Vec::new());
    for (start, end) in plan.starts.iter().zip(&plan.ends) {
        let mut r =
            columnar::SplitReader::open(&plan.path, plan.base, *start, *end, mask, RecordFilter::default(), true)
                .expect("split");
        while let Some(b) = r.next_batch(1000, 1 << 20).expect("batch") {
            rows.extend(offsets_of(&b));
        }
        skipped.extend(r.take_skipped().into_iter().map(|s| (s.offset, s.length)));
    }
    (rows, skipped, plan.damage.iter().map(|d| (d.offset, d.length)).collect())
}

/// The same by the commitlog cursor over the mapped segment: records (the newest segment's checked with the body
/// CRC, as recovery checks them), an older segment's record whose header holds together stepped over, and at
/// anything else damaged bytes up to the next record that validates completely and names its own offset, where
/// the walk goes on (the read-only open's salvage). In the newest segment whether a break is damage or the end
/// of the data is opening's rule (`tests/test_export_tail.py` holds the planner to it): `damaged(offset)` says.
fn walk_segment(commitlog: &Path, seg: usize, newest: bool, damaged: impl Fn(i64) -> bool) -> (SegmentRead, i64) {
    let queue = FileQueue::load(commitlog, SEG).expect("map");
    let file = queue.files()[seg].clone();
    let base = file.start();
    let opts = CheckOptions { check_crc: newest, force_prop_crc: false };
    let mut cursor = Cursor::new(&queue, base, base + SEG, opts);
    let (mut rows, mut skipped, mut damage) = (Vec::new(), Vec::new(), Vec::new());
    loop {
        match cursor.next() {
            None | Some(Step::Blank { .. }) => break,
            Some(Step::Record(r)) => rows.push(r.offset() as i64),
            Some(Step::Zero { offset, .. } | Step::Partial { offset, .. } | Step::Invalid { offset, .. }) => {
                let rest = file.slice((offset - base) as usize, (base + SEG - offset) as usize).expect("bytes");
                // Stepped over by its header, unless the chain ends right after it: then the record's own
                // lengths not adding up make it the damage (a flipped TOTALSIZE), and the search for the next
                // record starts inside it.
                let left = base + SEG - offset;
                if let Some(n) = cursor::header_size(rest, offset, left).filter(|_| !newest) {
                    let after = rest.get(n as usize..).unwrap_or_default();
                    let goes_on = left - n >= END_FILE_MIN_BLANK_LENGTH as u64
                        && (cursor::header_size(after, offset + n, left - n).is_some()
                            || matches!(cursor::classify(after, offset + n, left - n, opts), cursor::Found::Record(_)));
                    if goes_on {
                        skipped.push((offset as i64, n));
                        cursor.seek(offset + n);
                        continue;
                    }
                }
                if newest && !damaged(offset as i64) {
                    break; // the end of the data
                }
                let next = cursor::find_valid_record(&queue, offset + 1, base + SEG, false);
                damage.push((offset as i64, next.unwrap_or(base + SEG) - offset));
                match next {
                    Some(q) => cursor.seek(q),
                    None => break,
                }
            }
            Some(Step::Missing { offset }) => panic!("segment {seg} lost at {offset}"),
        }
    }
    ((rows, skipped, damage), base as i64)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]
    /// Bytes flipped in any segment: the split reader (positioned reads) and the commitlog cursor over the mapped
    /// segment agree on every record, every record left out and every range of damaged bytes. In an older segment
    /// a break is damage, and reading goes on at the next record that validates completely; in the newest it is
    /// the end of the data or damage.
    #[test]
    fn the_split_reader_follows_the_commitlog_cursor(
        flips in proptest::collection::vec((0usize..SEG as usize, any::<u8>()), 1..6), seg in 0usize..8,
    ) {
        let dir = tempfile::tempdir().expect("tmp");
        trap_store(dir.path());
        let segs = segments(dir.path());
        let seg = seg.min(segs.len() - 1);
        let newest = seg == segs.len() - 1;
        let mut bytes = std::fs::read(&segs[seg].0).expect("read");
        for (at, v) in flips {
            bytes[at] ^= v | 1;
        }
        std::fs::write(&segs[seg].0, &bytes).expect("write");
        let commitlog = dir.path().join("commitlog");
        let (rows, skipped, damage) = read_segment(&commitlog, seg);
        let (want, _) = walk_segment(&commitlog, seg, newest, |o| damage.iter().any(|d| d.0 == o));
        prop_assert_eq!(&rows, &want.0);
        prop_assert_eq!(&skipped, &want.1);
        prop_assert_eq!(&damage, &want.2);
    }
}

/// A valid record at `offset`, or (for the other shapes) bytes that hold one with its fields changed.
fn shaped_bytes(shape: u8, raws: &[Vec<u8>], pick: usize, offset: u64, noise: &[u8]) -> Vec<u8> {
    let mut rec = raws[pick % raws.len()].clone();
    let len = rec.len() as i32;
    rec[28..36].copy_from_slice(&(offset as i64).to_be_bytes());
    match shape % 6 {
        0 => {}
        1 => rec[..4].copy_from_slice(&(len + noise.len() as i32 / 2).to_be_bytes()),
        2 => rec[..4].copy_from_slice(&(len - 24).to_be_bytes()),
        3 => rec[..8].copy_from_slice(&[0; 8]),
        4 => rec[4..8].copy_from_slice(&0xCBD4_3194_u32.to_be_bytes()), // a blank
        _ => return noise.to_vec(),
    }
    rec.extend_from_slice(noise);
    rec
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    /// The contract the split reader relies on: at least 8 bytes, and behind a message magic code the whole claimed
    /// record when it fits in the readable bytes, classify exactly as all of them do, whatever the record, the
    /// readable limit and the CRC check.
    #[test]
    fn a_prefix_holding_the_claimed_record_classifies_as_the_whole(
        shape in any::<u8>(), pick in any::<usize>(), noise in proptest::collection::vec(any::<u8>(), 0..200),
        cut in any::<u16>(), extra_file in 0u64..300, extra_prefix in prop_oneof![Just(0usize), 0usize..64], crc in any::<bool>(),
    ) {
        let offset = 4096 * 3 + 20;
        let whole = shaped_bytes(shape, some_records(), pick, offset, &noise);
        let readable = &whole[..(cut as usize % (whole.len() + 1))];
        let to_file_end = whole.len() as u64 + extra_file;
        let opts = CheckOptions { check_crc: crc, force_prop_crc: false };
        let word = |i: usize| readable.get(i..i + 4).map_or(0, |b| i32::from_be_bytes(b.try_into().expect("4 bytes")));
        let message = [MAGIC_V1, MAGIC_V2].contains(&word(4));
        let need = usize::try_from(word(0)).ok().filter(|&n| n <= readable.len() && message).unwrap_or(0).max(8);
        let len = (need + extra_prefix).min(readable.len());
        let prefix = &readable[..len];
        let all = format!("{:?}", cursor::classify(readable, offset, to_file_end, opts));
        prop_assert_eq!(format!("{:?}", cursor::classify(prefix, offset, to_file_end, opts)), all);
    }
}

/// A few records of different shapes (v1 and v2 topics, bodies of 0 to 200 bytes), written once per test run.
fn some_records() -> &'static [Vec<u8>] {
    static RECORDS: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
    RECORDS.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tmp");
        let store = MessageStore::open(dir.path(), small_config()).expect("open");
        let raws = (0..8u32)
            .map(|i| {
                let topic = if i % 4 == 0 { format!("%RETRY%{}", "g".repeat(150)) } else { format!("T{i}") };
                let body = vec![b'a' + i as u8; (i as usize * 37) % 200];
                let r = store.put(&PutMessage { keys: Some("k"), ..PutMessage::new(&topic, 0, &body) }).expect("put");
                store.read(r.offsets[0]).expect("read").expect("record").bytes().to_vec()
            })
            .collect();
        store.close().expect("close");
        raws
    })
}

/// The damage the planner reports with `skip_damage`, as (file, commitlog offset, length).
fn planned_damage(commitlog: &Path, split: u64) -> Vec<(PathBuf, i64, u64)> {
    let plans = columnar::plan_commitlog(commitlog, split, true).expect("skip");
    plans.into_iter().flat_map(|p| p.damage.into_iter().map(move |d| (p.path.clone(), d.offset, d.length))).collect()
}

#[test]
fn a_missing_middle_segment_is_an_error_or_reported_never_skipped_silently() {
    let dir = tempfile::tempdir().expect("tmp");
    let (offsets, _) = trap_store(dir.path());
    let commitlog = dir.path().join("commitlog");
    assert!(segments(dir.path()).len() >= 4);
    let gone = commitlog.join(rmq::file_queue::file_name(SEG));
    std::fs::remove_file(&gone).expect("remove");
    for split in [1u64, 100, SEG] {
        let err = columnar::plan_commitlog(&commitlog, split, false).expect_err("a gap in the log");
        assert!(
            matches!(&err, rmq::error::Error::Corruption { offset, path, .. } if *offset == SEG as i64 && *path == gone),
            "{err}"
        );
        assert!(err.to_string().contains("missing"), "{err}");
        assert_eq!(planned_damage(&commitlog, split), [(gone.clone(), SEG as i64, SEG)]);
        let want: Vec<i64> = offsets.iter().filter(|&&o| !(SEG..2 * SEG).contains(&o)).map(|&o| o as i64).collect();
        assert_eq!(read_planned(&commitlog, split, true).expect("read"), want);
    }
}

#[test]
fn a_truncated_middle_segment_reports_every_byte_it_lost() {
    let dir = tempfile::tempdir().expect("tmp");
    let (offsets, _) = trap_store(dir.path());
    let commitlog = dir.path().join("commitlog");
    let short = commitlog.join(rmq::file_queue::file_name(SEG));
    let f = std::fs::OpenOptions::new().write(true).open(&short).expect("open");
    f.set_len(SEG / 2 + 7).expect("truncate");
    for split in [1u64, 100, SEG] {
        assert!(columnar::plan_commitlog(&commitlog, split, false).is_err());
        let read = read_planned(&commitlog, split, true).expect("read");
        let damage = planned_damage(&commitlog, split);
        assert!(damage.iter().all(|(p, _, _)| *p == short), "{damage:?}");
        // Every record not read lies in a reported range, and the ranges reach the next segment.
        for &o in offsets.iter().filter(|&&o| !read.contains(&(o as i64))) {
            assert!(damage.iter().any(|&(_, d, n)| d <= o as i64 && (o as i64) < d + n as i64), "{o} {damage:?}");
        }
        let (_, last, n) = damage.last().expect("damage");
        assert_eq!(*last + *n as i64, 2 * SEG as i64, "{damage:?}");
    }
}
