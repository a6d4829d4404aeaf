//! Split reading (`src/columnar.rs`): record boundaries found from any byte, splits that lose and duplicate
//! nothing, the end of the data, and decoding of records handed over one by one.

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

fn segments(dir: &Path) -> Vec<(PathBuf, i64, u64)> {
    let mut out: Vec<(PathBuf, i64, u64)> = std::fs::read_dir(dir.join("commitlog"))
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .map(|p| {
            let base: i64 = p.file_name().and_then(|n| n.to_str()).and_then(|n| n.parse().ok()).expect("name");
            let end = columnar::segment_data_end(&p, base).expect("end");
            (p, base, end)
        })
        .collect();
    out.sort_by_key(|s| s.1);
    out
}

fn offsets_of(batch: &ColumnBatch) -> Vec<i64> {
    match &batch.columns[3] {
        Column::Long(v) => v.clone(),
        other => panic!("commitlog_offset column is {other:?}"),
    }
}

fn read_cuts(path: &Path, base: i64, cuts: &[u64], limit: u64) -> Vec<i64> {
    let mask = columnar::mask_of(&["commitlog_offset"]).expect("mask");
    let mut got = Vec::new();
    for w in cuts.windows(2) {
        let mut r = columnar::SplitReader::open(path, base, w[0], w[1], limit, mask, RecordFilter::default())
            .expect("open split");
        while let Some(b) = r.next_batch(7, 1 << 20).expect("batch") {
            got.extend(offsets_of(&b));
        }
    }
    got
}

#[test]
fn every_record_start_is_found_from_every_byte_before_it() {
    let dir = tempfile::tempdir().expect("tmp");
    let (offsets, _) = trap_store(dir.path());
    for (path, base, limit) in segments(dir.path()) {
        let starts: Vec<u64> = offsets
            .iter()
            .filter(|o| (**o as i64) >= base && (**o as i64) < base + SEG as i64)
            .map(|o| *o - base as u64)
            .collect();
        let mut next = 0;
        for from in 0..limit {
            while next < starts.len() && starts[next] < from {
                next += 1;
            }
            let want = starts.get(next).copied();
            assert_eq!(columnar::find_boundary(&path, base, from, limit).expect("find"), want, "from {from} in {base}");
        }
    }
}

#[test]
fn segments_end_at_the_blank_or_the_data() {
    let dir = tempfile::tempdir().expect("tmp");
    let (offsets, raws) = trap_store(dir.path());
    let segs = segments(dir.path());
    assert!(segs.len() >= 4);
    for (_, _, end) in &segs[..segs.len() - 1] {
        assert_eq!(*end, SEG); // full, ended by the blank filler
    }
    let (_, last_base, last_end) = segs.last().expect("last");
    let last = offsets.last().expect("offset");
    assert_eq!(*last_base as u64 + last_end, last + raws.last().expect("raw").len() as u64);
}

#[test]
fn whole_segments_read_every_record_with_its_fields() {
    let dir = tempfile::tempdir().expect("tmp");
    let (offsets, raws) = trap_store(dir.path());
    let mut got = Vec::new();
    for (path, base, limit) in segments(dir.path()) {
        let mut r = columnar::SplitReader::open(&path, base, 0, SEG, limit, ALL_COLUMNS, RecordFilter::default())
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
    for (path, base, limit) in segments(dir.path()) {
        let mut r =
            columnar::SplitReader::open(&path, base, 0, SEG, limit, ALL_COLUMNS, filter.clone()).expect("split");
        while let Some(b) = r.next_batch(1000, 1 << 30).expect("batch") {
            got.extend(offsets_of(&b));
        }
    }
    let want: Vec<i64> = (0..raws.len()).filter(|i| i % 7 != 0 && i % 3 == 1).map(|i| offsets[i] as i64).collect();
    assert_eq!(got, want);
}

#[test]
fn damage_inside_the_data_is_an_error() {
    let dir = tempfile::tempdir().expect("tmp");
    let (offsets, _) = trap_store(dir.path());
    let (path, base, limit) = segments(dir.path()).remove(0);
    let mut bytes = std::fs::read(&path).expect("read");
    let second = (offsets[1] as i64 - base) as usize;
    bytes[second + 4..second + 8].copy_from_slice(&[0, 0, 0, 0]);
    std::fs::write(&path, &bytes).expect("write");
    let mut r =
        columnar::SplitReader::open(&path, base, 0, SEG, limit, ALL_COLUMNS, RecordFilter::default()).expect("split");
    let mut err = None;
    loop {
        match r.next_batch(1, 1 << 30) {
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    let err = err.expect("a corruption error");
    assert!(matches!(err, rmq::error::Error::Corruption { offset, .. } if offset == offsets[1] as i64), "{err}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn any_cuts_lose_and_duplicate_nothing(seed_cuts in proptest::collection::vec(0u64..SEG, 0..30), seg in 0usize..4) {
        let dir = tempfile::tempdir().expect("tmp");
        trap_store(dir.path());
        let segs = segments(dir.path());
        let (path, base, limit) = &segs[seg.min(segs.len() - 1)];
        let mut cuts: Vec<u64> = seed_cuts.into_iter().filter(|c| c < limit).collect();
        cuts.extend([0, *limit]);
        cuts.sort_unstable();
        cuts.dedup();
        prop_assert_eq!(read_cuts(path, *base, &cuts, *limit), read_cuts(path, *base, &[0, *limit], *limit));
    }
}

/// Segments of arbitrary bytes, and valid segments with bytes flipped: every reader call returns records or an
/// error, never panics, and never returns a record that is not at its own offset.
fn read_everything(path: &Path, base: i64, cuts: &[u64], limit: u64) -> Result<usize, rmq::error::Error> {
    let mut rows = 0;
    for w in cuts.windows(2) {
        let mut r = columnar::SplitReader::open(path, base, w[0], w[1], limit, ALL_COLUMNS, RecordFilter::default())?;
        while let Some(b) = r.next_batch(5, 1 << 20)? {
            for off in offsets_of(&b) {
                assert!(off >= base + w[0] as i64 && off < base + w[1] as i64, "record {off} outside its split");
            }
            rows += b.rows;
        }
    }
    Ok(rows)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..3000), cut in 0u64..3000) {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("00000000000000000000");
        std::fs::write(&path, &bytes).expect("write");
        let len = bytes.len() as u64;
        let end = columnar::segment_data_end(&path, 0).expect("end");
        prop_assert!(end <= len);
        let _ = columnar::find_boundary(&path, 0, cut.min(len), len);
        let _ = read_everything(&path, 0, &[0, cut.min(len), len], len);
        let _ = columnar::decode_records([Some(bytes.as_slice())], ALL_COLUMNS, false);
    }

    #[test]
    fn flipped_bytes_never_panic(flips in proptest::collection::vec((0usize..SEG as usize, any::<u8>()), 1..8),
                                 cut in 0u64..SEG) {
        let dir = tempfile::tempdir().expect("tmp");
        trap_store(dir.path());
        let (path, base, _) = segments(dir.path()).remove(1);
        let mut bytes = std::fs::read(&path).expect("read");
        for (at, v) in flips {
            bytes[at] ^= v | 1;
        }
        std::fs::write(&path, &bytes).expect("write");
        let limit = columnar::segment_data_end(&path, base).expect("end");
        let _ = read_everything(&path, base, &[0, cut.min(limit), limit], limit);
    }
}
