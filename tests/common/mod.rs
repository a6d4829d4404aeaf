//! Helpers shared by the Rust integration tests (each test crate that says `mod common;` compiles them).
#![allow(dead_code)]

use rmq::config::StoreConfig;

/// Commitlog segment size of the small test stores: a few dozen records per segment.
pub const SEG: u64 = 4096;

/// A store config with `SEG`-byte segments, 5-entry consume-queue files and a 64-slot, 16-entry index, so
/// tests cross every kind of file boundary with a handful of messages.
pub fn small_config() -> StoreConfig {
    let mut c = StoreConfig::default();
    c.commit_log.mapped_file_size_commit_log = SEG;
    c.consume_queue.mapped_file_size_consume_queue = 100; // 5 entries per file
    c.index.max_hash_slot_num = 64;
    c.index.max_index_num = 16;
    c
}
