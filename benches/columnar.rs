//! Criterion benchmark for the Spark source's decoder (`src/columnar.rs`): reading a 100k-message segment into
//! Arrow-ready columns, every column and a single one, and the planner's walk of the record chain (header hops
//! for a full segment, full validation for the newest one). Rows per second are Criterion's element throughput.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rmq::columnar::{self, RecordFilter, ALL_COLUMNS};
use rmq::config::StoreConfig;
use rmq::store::{BatchItem, MessageStore};

const MESSAGES: u64 = 100_000;

fn columnar(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = StoreConfig::default();
    cfg.commit_log.mapped_file_size_commit_log = 256 * 1024 * 1024;
    cfg.dispatch.message_index_enable = false;
    let store = MessageStore::open(tmp.path(), cfg).unwrap();
    let body = [b'x'; 100];
    let keys: Vec<String> = (0..500).map(|i| format!("order-{i} customer-{}", i % 97)).collect();
    let items: Vec<BatchItem<'_>> = keys
        .iter()
        .map(|k| BatchItem { body: &body, tags: Some("TagA"), keys: Some(k.as_str()), properties: &[], flag: 0 })
        .collect();
    let host = "192.168.1.7:5000".parse().unwrap();
    for _ in 0..MESSAGES / 500 {
        store.put_batch("Bench", 0, &items, 0, host, None, 0, true).unwrap();
    }
    store.close().unwrap();
    let dir = tmp.path().join("commitlog");
    let seg = dir.join("00000000000000000000");
    let end = columnar::plan_commitlog(&dir, 1 << 30, false).unwrap()[0].data_end;
    let mut g = c.benchmark_group("columnar");
    g.sample_size(10);
    g.throughput(Throughput::Elements(MESSAGES));
    let one = columnar::mask_of(&["commitlog_offset"]).unwrap();
    for (name, mask) in [("all_columns", ALL_COLUMNS), ("one_column", one)] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let mut r = columnar::SplitReader::open(&seg, 0, 0, end, mask, RecordFilter::default(), false).unwrap();
                let mut rows = 0;
                while let Some(batch) = r.next_batch(8192, 64 << 20).unwrap() {
                    rows += batch.rows;
                }
                assert_eq!(rows as u64, MESSAGES);
                black_box(rows)
            })
        });
    }
    // The newest segment is validated in full (as recovery does); a copy followed by a newer segment is an older
    // one, walked by its headers.
    g.bench_function("plan_newest_segment", |b| {
        b.iter(|| black_box(columnar::plan_commitlog(&dir, 64 << 20, false).unwrap()))
    });
    // The same segment as an older one: ended by its blank filler, followed by a newer segment with one record.
    let older = tempfile::tempdir().unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    let left = (bytes.len() as u64 - end) as i32;
    bytes[end as usize..end as usize + 8]
        .copy_from_slice(&[left.to_be_bytes(), 0xCBD4_3194_u32.to_be_bytes()].concat());
    let first = i32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize;
    let mut newer = bytes[..first].to_vec();
    newer[28..36].copy_from_slice(&(bytes.len() as i64).to_be_bytes());
    newer.resize(64 << 10, 0);
    std::fs::write(older.path().join("00000000000000000000"), &bytes).unwrap();
    std::fs::write(older.path().join(format!("{:020}", bytes.len())), &newer).unwrap();
    drop(bytes);
    g.bench_function("plan_older_segment", |b| {
        b.iter(|| black_box(columnar::plan_commitlog(older.path(), 64 << 20, false).unwrap()))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(5));
    targets = columnar
}
criterion_main!(benches);
