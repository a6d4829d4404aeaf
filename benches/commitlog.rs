//! Criterion benchmarks: record encoding, commitlog append, store put / put_batch, and a memcpy baseline
//! measured in the same run for scale.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::net::SocketAddr;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rmq::commitlog::CommitLog;
use rmq::config::{CommitLogConfig, StoreConfig};
use rmq::message::encode::{encode_record, EncodeInput, EncodeOptions, EncodedRecord};
use rmq::store::{BatchItem, MessageStore, PutMessage};

const SIZES: [usize; 3] = [128, 1024, 4096];
const SEGMENT: u64 = 256 * 1024 * 1024;
const PROPS: &[u8] = b"UNIQ_KEY\x01C0A80001A1B218B4AAC2000000000000\x02TAGS\x01TagA\x02WAIT\x01true\x02";

fn input(body: &[u8]) -> EncodeInput<'_> {
    let host: SocketAddr = "10.0.0.2:10911".parse().unwrap();
    EncodeInput {
        topic: "TopicTest",
        queue_id: 0,
        flag: 0,
        body,
        properties: PROPS,
        sys_flag: 0,
        born_timestamp: 1,
        born_host: host,
        store_host: host,
        store_timestamp: 0,
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        queue_offset: 0,
        physical_offset: 0,
    }
}

fn opts() -> EncodeOptions {
    EncodeOptions { max_message_size: 4 * 1024 * 1024, auto_version: true, prop_crc: false, fix_separator: true }
}

fn memcpy(c: &mut Criterion) {
    let mut g = c.benchmark_group("memcpy");
    for size in [4096usize, 1 << 20] {
        let src = vec![1u8; size];
        let mut dst = vec![0u8; size];
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_function(format!("{size}"), |b| {
            b.iter(|| {
                dst.copy_from_slice(black_box(&src));
                black_box(&dst);
            })
        });
    }
    g.finish();
}

fn encode(c: &mut Criterion) {
    let mut g = c.benchmark_group("encode");
    for size in SIZES {
        let body = vec![7u8; size];
        let mut buf = Vec::with_capacity(size + 512);
        g.throughput(Throughput::Elements(1));
        g.bench_function(format!("{size}B"), |b| {
            b.iter(|| {
                buf.clear();
                black_box(encode_record(&input(&body), &opts(), &mut buf).unwrap());
            })
        });
    }
    g.finish();
}

/// Appends pre-encoded records of one size, 256 per iteration, into a fresh store every few hundred MiB.
fn append(c: &mut Criterion) {
    let mut g = c.benchmark_group("append");
    for size in SIZES {
        let body = vec![7u8; size];
        let mut template = Vec::new();
        let mut recs: Vec<EncodedRecord> = Vec::new();
        for _ in 0..256 {
            recs.push(encode_record(&input(&body), &opts(), &mut template).unwrap());
        }
        println!("append/{size}B: record size {} bytes", recs[0].len);
        g.throughput(Throughput::Elements(256));
        g.bench_function(format!("{size}B_x256"), |b| {
            b.iter_batched_ref(
                || {
                    let dir = tempfile::tempdir().unwrap();
                    let cfg = CommitLogConfig { mapped_file_size_commit_log: SEGMENT, ..CommitLogConfig::default() };
                    let (log, _) = CommitLog::open(dir.path(), cfg).unwrap();
                    (dir, log, template.clone())
                },
                |(_, log, buf)| {
                    // One batch of 256 records per call; many calls per fresh log.
                    for _ in 0..64 {
                        black_box(log.append(buf, &recs, |i| i as i64).unwrap());
                    }
                },
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

fn store_put(c: &mut Criterion) {
    let mut g = c.benchmark_group("store");
    let body = vec![7u8; 128];
    let mut config = StoreConfig::default();
    config.commit_log.mapped_file_size_commit_log = SEGMENT;
    g.throughput(Throughput::Elements(1000));
    g.bench_function("put_128B_x1000", |b| {
        b.iter_batched_ref(
            || {
                let dir = tempfile::tempdir().unwrap();
                let store = MessageStore::open(dir.path(), config.clone()).unwrap();
                (store, dir)
            },
            |(store, _)| {
                for _ in 0..1000 {
                    black_box(store.put(&PutMessage::new("TopicTest", 0, &body)).unwrap());
                }
            },
            BatchSize::PerIteration,
        )
    });
    let items: Vec<BatchItem<'_>> = (0..256).map(|_| BatchItem { body: &body, ..BatchItem::default() }).collect();
    let host: SocketAddr = "127.0.0.1:1".parse().unwrap();
    g.throughput(Throughput::Elements(256 * 16));
    g.bench_function("put_batch_128B_x256_x16", |b| {
        b.iter_batched_ref(
            || {
                let dir = tempfile::tempdir().unwrap();
                let store = MessageStore::open(dir.path(), config.clone()).unwrap();
                (store, dir)
            },
            |(store, _)| {
                for _ in 0..16 {
                    black_box(store.put_batch("TopicTest", 0, &items, 0, host, None, 0, true).unwrap());
                }
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = memcpy, encode, append, store_put
}
criterion_main!(benches);
