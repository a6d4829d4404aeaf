//! Criterion benchmarks for the key index (spec §7) with the default geometry (5 000 000 slots,
//! 20 000 000 entries, 420 MB files): putting the three keys of a message (UNIQ_KEY and two KEYS) into a
//! fresh index, and querying one key of a warm index holding 10 000 000 keys (hit and miss).
#![allow(clippy::unwrap_used)]

use std::fmt::Write as _;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rmq::index::{IndexConfig, IndexRequest, IndexService};
use rmq::message::TransactionType;

const PUT_MESSAGES: usize = 300_000;
const WARM_KEYS: i64 = 10_000_000;

fn request<'a>(offset: i64, uniq: &'a str, keys: &'a str) -> IndexRequest<'a> {
    IndexRequest {
        topic: "TopicTest",
        commitlog_offset: offset,
        store_timestamp: 1_700_000_000_000 + offset / 1000,
        transaction: TransactionType::NotType,
        uniq_key: Some(uniq),
        keys: Some(keys),
    }
}

fn put(c: &mut Criterion) {
    // Key texts prepared outside the timed loop, as the dispatcher finds them in the record.
    let uniqs: Vec<String> = (0..PUT_MESSAGES).map(|i| format!("7F00000100002A9F{i:016X}")).collect();
    let keys: Vec<String> = (0..PUT_MESSAGES).map(|i| format!("order-{i} user-{}", i % 9973)).collect();
    let mut g = c.benchmark_group("index");
    g.throughput(Throughput::Elements(PUT_MESSAGES as u64));
    g.sample_size(10);
    g.bench_function("put_3_keys_300k_messages", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let tmp = tempfile::tempdir().unwrap();
                let svc = IndexService::load(tmp.path(), IndexConfig::default()).unwrap();
                let start = Instant::now();
                for (i, (u, k)) in uniqs.iter().zip(&keys).enumerate() {
                    svc.build_index(&request(i as i64 * 200, u, k)).unwrap();
                }
                total += start.elapsed();
            }
            total
        })
    });
    g.finish();
}

fn query(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let svc = IndexService::load(tmp.path(), IndexConfig::default()).unwrap();
    let mut key = String::new();
    for i in 0..WARM_KEYS {
        key.clear();
        write!(key, "key-{i}").unwrap();
        let r = IndexRequest { uniq_key: None, keys: Some(&key), ..request(i * 200, "", "") };
        svc.build_index(&r).unwrap();
    }
    assert_eq!(svc.file_paths().len(), 1, "10M keys fit one default file");
    // Query keys spread over the whole index (a fixed LCG, so every run asks the same).
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let probes: Vec<(String, i64)> = (0..4096)
        .map(|_| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            let i = ((x >> 33) % WARM_KEYS as u64) as i64;
            (format!("key-{i}"), i * 200)
        })
        .collect();
    // Warm the mapping (the index was just written, so it is resident; touch every probe once).
    for (k, off) in &probes {
        let got = svc.query("TopicTest", k, 64, 0, i64::MAX, &mut |_| true).phy_offsets;
        assert!(got.contains(off), "{k}");
    }
    let mut g = c.benchmark_group("index");
    g.throughput(Throughput::Elements(1));
    let mut n = 0usize;
    g.bench_function("query_hit_warm_10m_keys", |b| {
        b.iter(|| {
            let (k, _) = &probes[n % probes.len()];
            n += 1;
            black_box(svc.query("TopicTest", k, 64, 0, i64::MAX, &mut |_| true))
        })
    });
    g.bench_function("query_miss_warm_10m_keys", |b| {
        b.iter(|| {
            let (k, _) = &probes[n % probes.len()];
            n += 1;
            black_box(svc.query("OtherTopic", k, 64, 0, i64::MAX, &mut |_| true))
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(5));
    targets = put, query
}
criterion_main!(benches);
