//! Criterion benchmarks for the derived files: consume-queue append, and dispatch (consume-queue entry plus
//! three index keys: UNIQ_KEY and two KEYS) of a store's records into fresh consume queues and a fresh
//! default-sized index, as the reput service does. A plain scan of the same records (decode only) is
//! measured in the same run as the floor.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rmq::config::StoreConfig;
use rmq::consume_queue::store::ConsumeQueueStore;
use rmq::consume_queue::ConsumeQueue;
use rmq::index::{IndexConfig, IndexService};
use rmq::message::tags::{parse_delay_levels, DEFAULT_DELAY_LEVELS};
use rmq::store::dispatch::Dispatcher;
use rmq::store::{BatchItem, MessageStore};

/// Messages in the dispatched store.
const MESSAGES: usize = 400_000;
const BATCH: usize = 200;

fn cq_append(c: &mut Criterion) {
    let mut g = c.benchmark_group("consume_queue");
    const N: u64 = 300_000;
    g.throughput(Throughput::Elements(N));
    g.sample_size(10);
    g.bench_function("append_300k", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let tmp = tempfile::tempdir().unwrap();
                let cq = ConsumeQueue::open(tmp.path(), "TopicTest", 0, 6_000_000).unwrap();
                let start = Instant::now();
                for q in 0..N {
                    black_box(cq.append(q as i64 * 200, 200, 12345, q as i64).unwrap());
                }
                total += start.elapsed();
            }
            total
        })
    });
    g.finish();
}

/// A store of `MESSAGES` 100-byte messages over 4 topics × 8 queues, each with two keys.
fn build_store(root: &Path) -> MessageStore {
    let mut cfg = StoreConfig::default();
    cfg.commit_log.mapped_file_size_commit_log = 256 * 1024 * 1024;
    cfg.dispatch.message_index_enable = false; // the bench builds its own derived files
    let store = MessageStore::open(root, cfg).unwrap();
    let body = [b'x'; 100];
    let keys: Vec<String> = (0..MESSAGES).map(|i| format!("order-{i} user-{}", i % 9973)).collect();
    let topics = ["TopicA", "TopicB", "TopicC", "TopicD"];
    for (n, chunk) in keys.chunks(BATCH).enumerate() {
        let items: Vec<BatchItem<'_>> = chunk
            .iter()
            .map(|k| BatchItem { body: &body, tags: Some("TagA"), keys: Some(k), properties: &[], flag: 0 })
            .collect();
        let localhost = "127.0.0.1:5000".parse().unwrap();
        store.put_batch(topics[n % 4], (n % 8) as i32, &items, 0, localhost, None, 0, true).unwrap();
    }
    store
}

fn dispatch(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let store = build_store(&tmp.path().join("store"));
    let levels = parse_delay_levels(DEFAULT_DELAY_LEVELS);
    let end = store.commitlog().max_offset();
    let mut g = c.benchmark_group("dispatch");
    g.throughput(Throughput::Elements(MESSAGES as u64));
    g.sample_size(10);
    g.bench_function("scan_decode_only", |b| {
        b.iter(|| {
            let mut at = 0;
            let mut n = 0usize;
            while let Some((rec, next)) = store.commitlog().next_record(at).unwrap() {
                black_box(rec.header.store_timestamp);
                n += 1;
                at = next;
            }
            assert_eq!(n, MESSAGES);
        })
    });
    for (name, with_index) in [("cq_only", false), ("cq_and_index_3_keys", true)] {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let out = tempfile::tempdir().unwrap();
                    let (queues, _) = ConsumeQueueStore::load(&out.path().join("cq"), 6_000_000).unwrap();
                    let index = IndexService::load(&out.path().join("index"), IndexConfig::default()).unwrap();
                    let d = Dispatcher {
                        queues: &queues,
                        index: if with_index { Some(&index) } else { None },
                        delay_levels: &levels,
                        view: false,
                    };
                    let start = Instant::now();
                    let round = d.run(store.commitlog(), 0, end, u64::MAX, false).unwrap();
                    total += start.elapsed();
                    assert_eq!(round.records, MESSAGES as u64);
                }
                total
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(5));
    targets = cq_append, dispatch
}
criterion_main!(benches);
