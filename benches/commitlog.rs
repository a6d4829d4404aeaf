//! Criterion benchmarks: record encoding, commitlog append (one record and batches of 256), store put and
//! put_batch, opening (recovery) of a 64 MiB log, and a memcpy baseline measured in the same run for scale.
//!
//! Stores are long-lived and replaced by fresh ones in new temporary directories once they pass
//! [`ROTATE_AT`], so measurements include page warm-up and segment rolls, and the disk never fills.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rmq::commitlog::CommitLog;
use rmq::config::{CommitLogConfig, StoreConfig};
use rmq::message::decode::parse_header;
use rmq::message::encode::{encode_record, EncodeInput, EncodeOptions, EncodedRecord};
use rmq::store::{BatchItem, MessageStore, PutMessage};

const SIZES: [usize; 3] = [128, 1024, 4096];
const SEGMENT: u64 = 256 * 1024 * 1024;
const PROPS: &[u8] = b"UNIQ_KEY\x01C0A80001A1B218B4AAC2000000000000\x02TAGS\x01TagA\x02WAIT\x01true\x02";
const BATCH: usize = 256;

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

/// `elements` records of `record_len` bytes each.
fn records(elements: usize, record_len: u64) -> Throughput {
    Throughput::ElementsAndBytes { elements: elements as u64, bytes: elements as u64 * record_len }
}

fn memcpy(c: &mut Criterion) {
    let mut g = c.benchmark_group("memcpy");
    for size in [4096usize, 1 << 20] {
        let src = vec![1u8; size];
        let mut dst = vec![0u8; size];
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_function(format!("{size}B"), |b| {
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
        let len = encode_record(&input(&body), &opts(), &mut buf).unwrap().len as u64;
        g.throughput(records(1, len));
        g.bench_function(format!("{size}B"), |b| {
            b.iter(|| {
                buf.clear();
                black_box(encode_record(&input(black_box(&body)), &opts(), &mut buf).unwrap());
            })
        });
    }
    g.finish();
}

/// `parse_header` of an encoded record (every read path parses each record it touches: drains, dispatch,
/// queries, recovery); IPv4 hosts, the store's own properties.
fn decode(c: &mut Criterion) {
    let mut g = c.benchmark_group("decode");
    for size in SIZES {
        let body = vec![7u8; size];
        let mut buf = Vec::with_capacity(size + 512);
        let len = encode_record(&input(&body), &opts(), &mut buf).unwrap().len as u64;
        g.throughput(records(1, len));
        g.bench_function(format!("parse_header_{size}B"), |b| b.iter(|| black_box(parse_header(black_box(&buf)))));
    }
    g.finish();
}

/// Bytes a benchmark store may reach before it is replaced by a fresh one (keeps the disk from filling).
const ROTATE_AT: u64 = 512 * 1024 * 1024;

/// A log or store that is reopened empty, in a new directory, whenever it grows past [`ROTATE_AT`]; the
/// rotation is amortized over hundreds of iterations, and pages are warmed ahead of the writer as in normal
/// operation.
struct Rotating<T> {
    // Declared before `dir` so it is dropped (and its files unmapped) before the directory is removed.
    value: Option<T>,
    dir: tempfile::TempDir,
    open: fn(&Path) -> T,
    size: fn(&T) -> u64,
}

impl<T> Rotating<T> {
    fn new(open: fn(&Path) -> T, size: fn(&T) -> u64) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let value = Some(open(dir.path()));
        Rotating { value, dir, open, size }
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

fn log_config() -> CommitLogConfig {
    CommitLogConfig { mapped_file_size_commit_log: SEGMENT, ..CommitLogConfig::default() }
}

fn open_log(dir: &Path) -> CommitLog {
    CommitLog::open(dir, log_config()).unwrap().0
}

fn store_config() -> StoreConfig {
    let mut config = StoreConfig::default();
    config.commit_log.mapped_file_size_commit_log = SEGMENT;
    config
}

fn open_store(dir: &Path) -> MessageStore {
    MessageStore::open(dir, store_config()).unwrap()
}

/// Appends pre-encoded records through `CommitLog::append` (offsets patched, copied into the mapping): one
/// record per call, and batches of 256 per call.
fn append(c: &mut Criterion) {
    let mut g = c.benchmark_group("append");
    for size in SIZES {
        let body = vec![7u8; size];
        let mut one = Vec::new();
        let rec = [encode_record(&input(&body), &opts(), &mut one).unwrap()];
        let len = rec[0].len as u64;
        let mut log = Rotating::new(open_log, |l: &CommitLog| l.max_offset());
        g.throughput(records(1, len));
        g.bench_function(format!("{size}B"), |b| {
            b.iter(|| black_box(log.get().append(&mut one, &rec, |_| 0).unwrap()))
        });

        let mut buf = Vec::new();
        let recs: Vec<EncodedRecord> =
            (0..BATCH).map(|_| encode_record(&input(&body), &opts(), &mut buf).unwrap()).collect();
        g.throughput(records(BATCH, len));
        g.bench_function(format!("{size}B_x{BATCH}"), |b| {
            b.iter(|| black_box(log.get().append(&mut buf, &recs, |i| i as i64).unwrap()))
        });
    }
    g.finish();
}

/// The whole put path: checks, UNIQ_KEY, properties in broker order, encode, queue offset, append.
fn store_put(c: &mut Criterion) {
    let mut g = c.benchmark_group("store");
    let host: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let mut store = Rotating::new(open_store, |s: &MessageStore| s.commitlog().max_offset());
    for size in SIZES {
        let body = vec![7u8; size];
        let len = store.get().put(&PutMessage::new("TopicTest", 0, &body)).unwrap().wrote_bytes;
        g.throughput(records(1, len));
        g.bench_function(format!("put_{size}B"), |b| {
            b.iter(|| black_box(store.get().put(&PutMessage::new("TopicTest", 0, black_box(&body))).unwrap()))
        });
    }
    let body = vec![7u8; 128];
    let items: Vec<BatchItem<'_>> = (0..BATCH).map(|_| BatchItem { body: &body, ..BatchItem::default() }).collect();
    let wrote = store.get().put_batch("TopicTest", 0, &items, 0, host, None, 0, true).unwrap().wrote_bytes;
    g.throughput(records(BATCH, wrote / BATCH as u64));
    g.bench_function(format!("put_batch_128B_x{BATCH}"), |b| {
        b.iter(|| black_box(store.get().put_batch("TopicTest", 0, &items, 0, host, None, 0, true).unwrap()))
    });
    g.finish();
}

/// Size of the log that opening validates.
const RECOVERY_LOG: u64 = 64 * 1024 * 1024;

/// Opening an existing log: every record of the last segment is validated with its body CRC
/// (`checkCRCOnRecover`), and the store rebuilds its queue-offset table by scanning the log.
fn recovery(c: &mut Criterion) {
    let mut g = c.benchmark_group("open");
    g.sample_size(10);
    let dir = tempfile::tempdir().unwrap();
    let body = vec![7u8; 1024];
    let count = {
        let store = open_store(dir.path());
        let mut n = 0u64;
        while store.commitlog().max_offset() < RECOVERY_LOG {
            store.put(&PutMessage::new("TopicTest", (n % 8) as i32, &body)).unwrap();
            n += 1;
        }
        n
    };
    let log_dir = dir.path().join("commitlog");
    let bytes = open_log(&log_dir).max_offset();
    g.throughput(Throughput::ElementsAndBytes { elements: count, bytes });
    g.bench_function("commitlog_64MiB_1KiB", |b| {
        b.iter_batched(|| (), |()| open_log(&log_dir), BatchSize::PerIteration);
    });
    g.bench_function("store_64MiB_1KiB", |b| {
        b.iter_batched(|| (), |()| open_store(dir.path()), BatchSize::PerIteration);
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = memcpy, encode, decode, append, store_put, recovery
}
criterion_main!(benches);
