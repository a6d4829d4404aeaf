//! SYNC_FLUSH throughput and put latency (p50 / p99 / p99.9) with 1, 4 and 16 producer threads: the group
//! commit service (`start_services`) against the per-put msync it replaces (the inline path a store without
//! running services takes). Each run writes 128-byte bodies into a fresh store for `RMQ_BENCH_SECS` seconds
//! (default 3) per configuration, in `RMQ_BENCH_DIR` (default: the system temporary directory; put it on the
//! disk you care about: on tmpfs an msync costs nothing).
//!
//! `cargo bench --bench sync_flush` (`make bench-sync`). Prints one line per configuration.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmq::config::{FlushDiskType, StoreConfig};
use rmq::message::PutMessageStatus;
use rmq::store::{MessageStore, PutMessage};

const BODY: [u8; 128] = [b'x'; 128];

struct Outcome {
    puts: u64,
    secs: f64,
    latencies_us: Vec<f64>,
    flushes: u64,
}

fn run(group: bool, threads: usize, secs: f64) -> Outcome {
    let base = std::env::var_os("RMQ_BENCH_DIR").map(std::path::PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let tmp = tempfile::tempdir_in(base).unwrap();
    let mut cfg = StoreConfig::default();
    cfg.commit_log.mapped_file_size_commit_log = 256 * 1024 * 1024;
    cfg.commit_log.flush_disk_type = FlushDiskType::SyncFlush;
    cfg.dispatch.message_index_enable = false;
    let store = Arc::new(MessageStore::open(&tmp.path().join("store"), cfg).unwrap());
    if group {
        store.start_services().unwrap();
    }
    // Warm-up: the segment exists and its first pages are in.
    for _ in 0..100 {
        store.put(&PutMessage::new("Bench", 0, &BODY)).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (store, stop) = (store.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut lat = Vec::with_capacity(1 << 16);
                let msg = PutMessage::new("Bench", (t % 8) as i32, &BODY);
                while !stop.load(Ordering::Relaxed) {
                    let t0 = Instant::now();
                    let r = store.put(&msg).unwrap();
                    lat.push(t0.elapsed().as_secs_f64() * 1e6);
                    assert_eq!(r.status, PutMessageStatus::PutOk);
                }
                lat
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    let mut latencies_us: Vec<f64> = workers.into_iter().flat_map(|w| w.join().unwrap()).collect();
    let secs = start.elapsed().as_secs_f64();
    let flushes = store.group_commit_flushes();
    store.close().unwrap();
    latencies_us.sort_by(f64::total_cmp);
    Outcome { puts: latencies_us.len() as u64, secs, latencies_us, flushes }
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument (e.g. `group`) selects configurations.
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let secs: f64 = std::env::var("RMQ_BENCH_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(3.0);
    println!("SYNC_FLUSH puts of 128 B bodies, {secs} s per configuration");
    println!(
        "{:<22} {:>8} {:>10} {:>12} {:>10} {:>10} {:>10}",
        "path", "threads", "puts", "puts/s", "p50 us", "p99 us", "p999 us"
    );
    for group in [true, false] {
        for threads in [1usize, 4, 16] {
            let name = if group { "group commit" } else { "per-put msync (inline)" };
            if filter.as_deref().is_some_and(|f| !name.contains(f)) {
                continue;
            }
            let o = run(group, threads, secs);
            let l = &o.latencies_us;
            println!(
                "{name:<22} {threads:>8} {:>10} {:>12.0} {:>10.0} {:>10.0} {:>10.0}{}",
                o.puts,
                o.puts as f64 / o.secs,
                pct(l, 0.5),
                pct(l, 0.99),
                pct(l, 0.999),
                if group {
                    format!("   ({:.1} puts per flush)", o.puts as f64 / o.flushes.max(1) as f64)
                } else {
                    String::new()
                }
            );
        }
    }
}
