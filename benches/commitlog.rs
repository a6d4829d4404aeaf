//! Criterion benchmarks: record encoding, commitlog append, store put / put_batch, and a memcpy baseline
//! measured in the same run for scale.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::net::SocketAddr;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
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

/// Bytes a benchmark store may reach before it is replaced by a fresh one (keeps the disk from filling).
const ROTATE_AT: u64 = 512 * 1024 * 1024;

/// A commitlog that is reopened empty whenever it grows past [`ROTATE_AT`]; the rotation is amortized over
/// hundreds of iterations, and pages are warmed ahead of the writer as in normal operation.
struct Rotating<T> {
    dir: tempfile::TempDir,
    open: fn(&std::path::Path) -> T,
    size: fn(&T) -> u64,
    value: Option<T>,
}

impl<T> Rotating<T> {
    fn new(open: fn(&std::path::Path) -> T, size: fn(&T) -> u64) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let value = Some(open(dir.path()));
        Rotating { dir, open, size, value }
    }

    fn get(&mut self) -> &T {
        if self.value.as_ref().is_some_and(|v| (self.size)(v) > ROTATE_AT) {
            self.value = None;
            self.dir = tempfile::tempdir().unwrap();
            self.value = Some((self.open)(self.dir.path()));
        }
        self.value.as_ref().unwrap()
    }
}

fn open_log(dir: &std::path::Path) -> CommitLog {
    let cfg = CommitLogConfig { mapped_file_size_commit_log: SEGMENT, ..CommitLogConfig::default() };
    CommitLog::open(dir, cfg).unwrap().0
}

fn open_store(dir: &std::path::Path) -> MessageStore {
    let mut config = StoreConfig::default();
    config.commit_log.mapped_file_size_commit_log = SEGMENT;
    MessageStore::open(dir, config).unwrap()
}

/// Appends batches of 256 pre-encoded records of one size.
fn append(c: &mut Criterion) {
    let mut g = c.benchmark_group("append");
    for size in SIZES {
        let body = vec![7u8; size];
        let mut buf = Vec::new();
        let mut recs: Vec<EncodedRecord> = Vec::new();
        for _ in 0..256 {
            recs.push(encode_record(&input(&body), &opts(), &mut buf).unwrap());
        }
        println!("append/{size}B: record size {} bytes", recs[0].len);
        let mut log = Rotating::new(open_log, |l: &CommitLog| l.max_offset());
        g.throughput(Throughput::Elements(256));
        g.bench_function(format!("{size}B_x256"), |b| {
            b.iter(|| black_box(log.get().append(&mut buf, &recs, |i| i as i64).unwrap()))
        });
    }
    g.finish();
}

fn store_put(c: &mut Criterion) {
    let mut g = c.benchmark_group("store");
    let body = vec![7u8; 128];
    let mut store = Rotating::new(open_store, |s: &MessageStore| s.commitlog().max_offset());
    g.throughput(Throughput::Elements(1));
    g.bench_function("put_128B", |b| {
        b.iter(|| black_box(store.get().put(&PutMessage::new("TopicTest", 0, &body)).unwrap()))
    });
    let items: Vec<BatchItem<'_>> = (0..256).map(|_| BatchItem { body: &body, ..BatchItem::default() }).collect();
    let host: SocketAddr = "127.0.0.1:1".parse().unwrap();
    g.throughput(Throughput::Elements(256));
    g.bench_function("put_batch_128B_x256", |b| {
        b.iter(|| black_box(store.get().put_batch("TopicTest", 0, &items, 0, host, None, 0, true).unwrap()))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = memcpy, encode, append, store_put
}
criterion_main!(benches);
