//! ASYNC_FLUSH put throughput with and without the transient store pool (puts write into a pooled off-heap
//! buffer that the commit service copies into the file every 200 ms, against puts writing into the file
//! mapping; the pool also without `wake_commit_when_put_message`, which wakes the service on every put), 128-byte and 4 KiB bodies, one producer thread, services started, 256 MiB segments (so runs roll
//! segments), `RMQ_BENCH_SECS` seconds (default 3) per configuration in `RMQ_BENCH_DIR` (default: the system
//! temporary directory). Prints one line per configuration, and the pool's mlock outcome.
//!
//! `cargo bench --bench transient_pool` (`make bench-pool`).
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use rmq::config::StoreConfig;
use rmq::store::{MessageStore, PutMessage};

fn run(pool: bool, wake: bool, body_len: usize, secs: f64) -> (u64, f64, Option<String>) {
    let base = std::env::var_os("RMQ_BENCH_DIR").map(std::path::PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let tmp = tempfile::tempdir_in(base).unwrap();
    let mut cfg = StoreConfig::default();
    cfg.commit_log.mapped_file_size_commit_log = 256 * 1024 * 1024;
    cfg.dispatch.message_index_enable = false;
    cfg.transient_pool.transient_store_pool_enable = pool;
    cfg.transient_pool.transient_store_pool_size = 2;
    cfg.transient_pool.wake_commit_when_put_message = wake;
    let store = Arc::new(MessageStore::open(&tmp.path().join("store"), cfg).unwrap());
    store.start_services().unwrap();
    let report = store.recovery_report().transient_store_pool.clone();
    let body = vec![b'x'; body_len];
    let msg = PutMessage::new("Bench", 0, &body);
    for _ in 0..1000 {
        store.put(&msg).unwrap();
    }
    let deadline = Duration::from_secs_f64(secs);
    let start = Instant::now();
    let mut puts = 0u64;
    while start.elapsed() < deadline {
        for _ in 0..256 {
            store.put(&msg).unwrap();
        }
        puts += 256;
    }
    let secs = start.elapsed().as_secs_f64();
    store.close().unwrap();
    (puts, secs, report)
}

fn main() {
    let secs: f64 = std::env::var("RMQ_BENCH_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(3.0);
    println!("ASYNC_FLUSH puts, one thread, {secs} s per configuration");
    println!("{:<12} {:>8} {:>12} {:>10}", "pool", "body", "puts/s", "MB/s");
    for body_len in [128usize, 4096] {
        for (pool, wake) in [(false, false), (true, true), (true, false)] {
            let (puts, secs, report) = run(pool, wake, body_len, secs);
            let rate = puts as f64 / secs;
            println!(
                "{:<12} {:>8} {:>12.0} {:>10.1}",
                match (pool, wake) {
                    (false, _) => "off",
                    (true, true) => "on",
                    (true, false) => "on, no wake",
                },
                body_len,
                rate,
                rate * body_len as f64 / 1e6
            );
            if let Some(r) = report.filter(|_| body_len == 128 && wake) {
                println!("    pool: {r}");
            }
        }
    }
}
