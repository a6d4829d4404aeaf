//! Criterion benchmark for the Spark source's decoder (`src/columnar.rs`): reading a 100k-message segment into
//! Arrow-ready columns, every column and a single one, and the record-boundary search a mid-segment split
//! starts with. Rows per second are Criterion's element throughput.
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
    cfg.message_index_enable = false;
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
    let seg = tmp.path().join("commitlog").join("00000000000000000000");
    let end = columnar::segment_data_end(&seg, 0).unwrap();
    let mut g = c.benchmark_group("columnar");
    g.sample_size(10);
    g.throughput(Throughput::Elements(MESSAGES));
    let one = columnar::mask_of(&["commitlog_offset"]).unwrap();
    for (name, mask) in [("all_columns", ALL_COLUMNS), ("one_column", one)] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let mut r = columnar::SplitReader::open(&seg, 0, 0, end, end, mask, RecordFilter::default()).unwrap();
                let mut rows = 0;
                while let Some(batch) = r.next_batch(8192, 64 << 20).unwrap() {
                    rows += batch.rows;
                }
                assert_eq!(rows as u64, MESSAGES);
                black_box(rows)
            })
        });
    }
    g.throughput(Throughput::Elements(1));
    g.bench_function("find_boundary", |b| {
        let mut from = 1u64;
        b.iter(|| {
            from = (from * 7919 + 13) % (end - 1000);
            black_box(columnar::find_boundary(&seg, 0, from, end).unwrap())
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(5));
    targets = columnar
}
criterion_main!(benches);
