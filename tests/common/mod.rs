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

/// Copies the store (or any directory) at `from` into `to`, recursively.
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("create the copy's directory");
    for e in std::fs::read_dir(from).expect("list the directory to copy") {
        let e = e.expect("a directory entry");
        if e.file_type().expect("the entry's type").is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).expect("copy a file");
        }
    }
}
