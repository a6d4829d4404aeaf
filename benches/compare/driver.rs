//! rmq's Rust side of `make bench-compare` (benches/compare/run.py defines the workloads, passes them as
//! `key=value` arguments and states the settings): the same `put` and `read` commands as
//! `rmq.bench.CompareDriver` and the Python driver, through the Rust API (`MessageStore::put`, `put_batch`,
//! `get_message`, `query_message`), each with a warm-up pass before the timed one; `dispatch` (puts into a store
//! whose services are not started, then `start_services` and the reput timed until caught up), `recover` (the
//! timed `MessageStore::open` of a store left by a killed writer) and `limits` (crc32fast's bandwidth, and the latency of dependent random loads in memory). Prints
//! one JSON line, with the process's CPU time (user + system, every thread) over each timed span.
//! Built by run.py with `cargo build --release --example compare_driver`.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmq::config::{FlushDiskType, StoreConfig};
use rmq::store::get::{Subscription, MAX_PULL_SIZE};
use rmq::store::{BatchItem, MessageStore, PutMessage};

struct Args(HashMap<String, String>);

impl Args {
    fn str(&self, name: &str) -> &str {
        self.0.get(name).map(String::as_str).unwrap_or_else(|| panic!("missing argument {name}"))
    }
    fn num(&self, name: &str) -> u64 {
        self.str(name).parse().unwrap()
    }
    fn num_or(&self, name: &str, default: u64) -> u64 {
        self.0.get(name).map_or(default, |v| v.parse().unwrap())
    }
}

/// The process's CPU time (user + system, all threads, those ended included) in seconds:
/// `CLOCK_PROCESS_CPUTIME_ID`, in nanoseconds.
#[allow(unsafe_code)]
fn cpu() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id and a pointer to a live, writable timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

fn open_idle(a: &Args, root: &Path) -> Arc<MessageStore> {
    let mut cfg = StoreConfig::default();
    cfg.commit_log.mapped_file_size_commit_log = a.num("segment");
    if a.0.get("flush").map(String::as_str) == Some("SYNC_FLUSH") {
        cfg.commit_log.flush_disk_type = FlushDiskType::SyncFlush;
    }
    Arc::new(MessageStore::open(root, cfg).unwrap())
}

fn open(a: &Args, root: &Path) -> Arc<MessageStore> {
    let store = open_idle(a, root);
    store.start_services().unwrap();
    store
}

/// Message n's KEYS: "key-n", then " k1-n k2-n ..." up to `keys` keys, space separated.
fn write_keys(key: &mut String, n: u64, keys: u64) {
    key.clear();
    write!(key, "key-{n}").unwrap();
    for i in 1..keys {
        write!(key, " k{i}-{n}").unwrap();
    }
}

fn body(a: &Args) -> Vec<u8> {
    (0..a.num("size")).map(|i| b'a' + (i % 26) as u8).collect()
}

/// Messages [start, stop) from the calling thread, as `CompareDriver.putRange`.
fn put_range(store: &MessageStore, a: &Args, start: u64, stop: u64, batch: u64) {
    let (topic, tag, queues, body) = (a.str("topic"), a.str("tag"), a.num("queues"), body(a));
    let host: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let nkeys = a.num_or("keys", 1);
    if batch == 1 {
        let mut key = String::new();
        for n in start..stop {
            write_keys(&mut key, n, nkeys);
            let mut msg = PutMessage::new(topic, (n % queues) as i32, &body);
            msg.tags = Some(tag);
            msg.keys = Some(&key);
            store.put(&msg).unwrap();
        }
    } else {
        let mut n = start;
        while n < stop {
            let keys: Vec<String> = (n..n + batch)
                .map(|k| {
                    let mut key = String::new();
                    write_keys(&mut key, k, nkeys);
                    key
                })
                .collect();
            let items: Vec<BatchItem<'_>> = keys
                .iter()
                .map(|k| BatchItem { body: &body, tags: Some(tag), keys: Some(k), properties: &[], flag: 0 })
                .collect();
            store.put_batch(topic, ((n / batch) % queues) as i32, &items, 0, host, None, 0, true).unwrap();
            n += batch;
        }
    }
}

fn stored(store: &MessageStore, a: &Args) -> u64 {
    (0..a.num("queues")).map(|q| store.max_offset_in_queue(a.str("topic"), q as i32, true) as u64).sum()
}

/// (put_s, dispatched_s, cpu_s, group-commit flushes) of `count` messages into a fresh store at `root`, closed
/// and deleted after unless `last` (the process then exits without closing it, as the other drivers do: run.py
/// deletes it).
fn put_pass(a: &Args, root: &Path, count: u64, last: bool) -> (f64, f64, f64, u64) {
    let (threads, batch) = (a.num("threads"), a.num("batch"));
    let store = open(a, root);
    let per = count / threads;
    let c0 = cpu();
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let store = &store;
            s.spawn(move || put_range(store, a, t * per, (t + 1) * per, batch));
        }
    });
    let put_s = t0.elapsed().as_secs_f64();
    assert!(store.wait_dispatched(Duration::from_secs(3600)), "dispatch did not catch up");
    let dispatched_s = t0.elapsed().as_secs_f64();
    let cpu_s = cpu() - c0;
    assert_eq!(stored(&store, a), count);
    let flushes = store.group_commit_flushes();
    if !last {
        store.close().unwrap();
        std::fs::remove_dir_all(root).unwrap();
    }
    (put_s, dispatched_s, cpu_s, flushes)
}

/// (dispatch_s, cpu_s): `count` single puts into a store without services, then `start_services` and the
/// reput timed until the consume queues and index hold everything.
fn dispatch_pass(a: &Args, root: &Path, count: u64, last: bool) -> (f64, f64) {
    let store = open_idle(a, root);
    put_range(&store, a, 0, count, 1);
    assert!(store.dispatch_behind_bytes() > 0, "dispatched while the services were off");
    let c0 = cpu();
    let t0 = Instant::now();
    store.start_services().unwrap();
    assert!(store.wait_dispatched(Duration::from_secs(3600)), "dispatch did not catch up");
    let dispatch_s = t0.elapsed().as_secs_f64();
    let cpu_s = cpu() - c0;
    assert_eq!(stored(&store, a), count);
    if !last {
        store.close().unwrap();
        std::fs::remove_dir_all(root).unwrap();
    }
    (dispatch_s, cpu_s)
}

fn dispatch(a: &Args) -> String {
    let dir = Path::new(a.str("dir"));
    dispatch_pass(a, &dir.join("warm"), a.num("warmup"), false);
    let count = a.num("count");
    let (dispatch_s, cpu_s) = dispatch_pass(a, &dir.join("timed"), count, true);
    format!("{{\"count\": {count}, \"dispatch_s\": {dispatch_s:.6}, \"cpu_s\": {cpu_s:.6}}}")
}

/// The timed open of the store at `path` (left by a writer killed with SIGKILL: abnormal recovery), with
/// RocketMQ's default sizes as benches/recovery_bench.py writes it.
fn recover(a: &Args) -> String {
    let c0 = cpu();
    let t0 = Instant::now();
    let store = MessageStore::open(Path::new(a.str("path")), StoreConfig::default()).unwrap();
    let open_s = t0.elapsed().as_secs_f64();
    let cpu_s = cpu() - c0;
    let max = store.confirm_offset();
    format!("{{\"open_s\": {open_s:.6}, \"cpu_s\": {cpu_s:.6}, \"max_offset\": {max}}}")
}

/// crc32fast over `bytes` bytes of a 1 MiB buffer, best of 3 (GB/s).
fn limits(a: &Args) -> String {
    let size = a.num("bytes") as usize;
    let buf: Vec<u8> = (0..1usize << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let mut best = f64::MAX;
    for _ in 0..3 {
        let t0 = Instant::now();
        let mut h = crc32fast::Hasher::new();
        for _ in 0..size / buf.len() {
            h.update(&buf);
        }
        std::hint::black_box(h.finalize());
        best = best.min(t0.elapsed().as_secs_f64());
    }
    let (huge_ns, small_ns) =
        (dependent_load_ns(LOAD_REGION, LOADS, true), dependent_load_ns(LOAD_REGION, LOADS, false));
    format!(
        "{{\"count\": {size}, \"crc32fast_gbps\": {:.4}, \"dependent_load_ns\": {huge_ns:.1}, \
         \"dependent_load_4k_ns\": {small_ns:.1}}}",
        size as f64 / best / 1e9
    )
}

/// The region and the number of loads of [`dependent_load_ns`].
const LOAD_REGION: usize = 512 << 20;
const LOADS: usize = 2_000_000;

/// The latency of one load whose address depends on the load before, at random places in `region` bytes of
/// anonymous memory mapped with 2 MiB pages where the kernel gives them (`huge`: `MADV_HUGEPAGE`, the fewest TLB
/// misses, so a floor) or with 4 KiB pages (`MADV_NOHUGEPAGE`, as an index file's mapping mostly is): ns per
/// load, best of 3 chases of `loads` through one random cycle over the region's cache lines. A key query is three
/// such loads in a row (the hash slot, the entry it names, the record the entry names), so three of them bound
/// any store's query on this machine from below.
#[allow(unsafe_code)]
fn dependent_load_ns(region: usize, loads: usize, huge: bool) -> f64 {
    let lines = region / 64;
    // SAFETY: an anonymous private mapping of `region` bytes, checked, unmapped at the end, never aliased.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            region,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(base, libc::MAP_FAILED, "mmap of {region} bytes failed");
    // SAFETY: the mapping above; a hint only.
    unsafe { libc::madvise(base, region, if huge { libc::MADV_HUGEPAGE } else { libc::MADV_NOHUGEPAGE }) };
    // SAFETY: the mapping is `region` bytes, readable and writable, zeroed, u64-aligned.
    let words = unsafe { std::slice::from_raw_parts_mut(base.cast::<u64>(), region / 8) };
    // One cycle through every line in a random order (Sattolo's shuffle), each line's first word the next's index.
    let mut order: Vec<u32> = (0..lines as u32).collect();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for i in (1..lines).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % i as u64) as usize);
    }
    for w in 0..lines {
        words[order[w] as usize * 8] = u64::from(order[(w + 1) % lines]) * 8;
    }
    let mut best = f64::MAX;
    let mut at = 0u64;
    for _ in 0..3 {
        let t0 = Instant::now();
        for _ in 0..loads {
            at = words[at as usize];
        }
        best = best.min(t0.elapsed().as_secs_f64() / loads as f64 * 1e9);
    }
    std::hint::black_box(at);
    // SAFETY: the mapping above, no reference to it kept past this point.
    unsafe { libc::munmap(base, region) };
    best
}

fn drain(store: &MessageStore, a: &Args) -> u64 {
    let (topic, all, mut n) = (a.str("topic"), Subscription::all(), 0);
    for q in 0..a.num("queues") as i32 {
        let (mut offset, end) = (0, store.max_offset_in_queue(topic, q, true));
        while offset < end {
            let r = store.get_message("bench", topic, q, offset, 32, MAX_PULL_SIZE, &all).unwrap();
            n += r.messages.len() as u64;
            offset = r.next_begin_offset;
        }
    }
    n
}

fn read(a: &Args) -> String {
    let root = Path::new(a.str("dir")).join("read");
    let (count, queries) = (a.num("count"), a.num("queries") as usize);
    let store = open(a, &root);
    let t0 = Instant::now();
    put_range(&store, a, 0, count, 1);
    assert!(store.wait_dispatched(Duration::from_secs(3600)));
    let build_s = t0.elapsed().as_secs_f64();
    assert_eq!(drain(&store, a), count, "the drain did not read every message");
    let c1 = cpu();
    let t1 = Instant::now();
    std::hint::black_box(drain(&store, a));
    let drain_s = t1.elapsed().as_secs_f64();
    let drain_cpu_s = cpu() - c1;
    let keys: Vec<String> = (0..queries as u64).map(|j| format!("key-{}", j * 7919 % count)).collect();
    let topic = a.str("topic");
    for k in &keys {
        assert!(!store.query_message(topic, k, 32, 0, i64::MAX).unwrap().records.is_empty(), "no message for {k}");
    }
    let q0cpu = cpu();
    let mut nanos: Vec<u128> = keys
        .iter()
        .map(|k| {
            let q0 = Instant::now();
            std::hint::black_box(store.query_message(topic, k, 32, 0, i64::MAX).unwrap());
            q0.elapsed().as_nanos()
        })
        .collect();
    let query_cpu_s = cpu() - q0cpu;
    nanos.sort_unstable();
    format!(
        "{{\"count\": {count}, \"build_s\": {build_s:.6}, \"drain_s\": {drain_s:.6}, \"query_median_us\": {:.3}, \
         \"query_p99_us\": {:.3}, \"drain_cpu_s\": {drain_cpu_s:.6}, \"query_cpu_s\": {query_cpu_s:.6}}}",
        nanos[queries / 2] as f64 / 1e3,
        nanos[queries * 99 / 100] as f64 / 1e3
    )
}

fn put(a: &Args) -> String {
    let dir = Path::new(a.str("dir"));
    put_pass(a, &dir.join("warm"), a.num("warmup"), false);
    let count = a.num("count");
    let (put_s, dispatched_s, cpu_s, flushes) = put_pass(a, &dir.join("timed"), count, true);
    // SYNC_FLUSH: the group commit's flushes (messages / flushes = the mean group).
    format!(
        "{{\"count\": {count}, \"put_s\": {put_s:.6}, \"dispatched_s\": {dispatched_s:.6}, \"cpu_s\": {cpu_s:.6}, \
         \"group_commit_flushes\": {flushes}}}"
    )
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args = Args(argv[1..].iter().map(|s| s.split_once('=').unwrap()).map(|(k, v)| (k.into(), v.into())).collect());
    let out = match argv[0].as_str() {
        "put" => put(&args),
        "read" => read(&args),
        "dispatch" => dispatch(&args),
        "recover" => recover(&args),
        "limits" => limits(&args),
        other => panic!("unknown command {other}"),
    };
    println!("{out}");
    // The last store is not closed, as the other drivers halt: run.py deletes it.
    std::process::exit(0);
}
