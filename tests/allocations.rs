//! Heap allocations per message on the hot paths in steady state (issue 19: "keep every hot path
//! allocation-free per message"), counted by a global allocator wrapper over every thread of the process
//! (services off: dispatch is driven here, and a large dispatch round's index builder thread counts too),
//! after a warm-up that creates the queues, the index file and the first mapped pages.
#![allow(clippy::unwrap_used)]
// The crate forbids unsafe code; a counting global allocator cannot be written without it.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use rmq::store::get::{Subscription, MAX_PULL_SIZE};
use rmq::store::{MessageStore, PutMessage};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCS.load(Ordering::Relaxed)
}

/// Allocations per call of `f` over `n` calls.
fn per_call(n: u64, mut f: impl FnMut(u64)) -> f64 {
    let before = allocations();
    for i in 0..n {
        f(i);
    }
    (allocations() - before) as f64 / n as f64
}

#[test]
fn allocations_per_message_on_the_hot_paths() {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = rmq::config::StoreConfig::default();
    config.commit_log.mapped_file_size_commit_log = 64 << 20;
    let store = MessageStore::open(tmp.path(), config).unwrap();
    let body = [b'x'; 128];
    // Three keys per message, as issue 19's dispatch figure has them.
    let keys: Vec<String> = (0..40_000).map(|i| format!("key-{i} order-{i} user-{}", i % 97)).collect();
    let put = |i: u64| {
        let mut m = PutMessage::new("BenchTopic", (i % 4) as i32, &body);
        m.tags = Some("TagA");
        m.keys = Some(&keys[i as usize]);
        store.put(&m).unwrap();
    };
    per_call(1_000, put);
    while store.dispatch(u64::MAX, false).unwrap().records > 0 {}
    let puts = per_call(10_000, |i| put(1_000 + i));
    // Rounds of 4,096 records (the reput service's hold up to 32,768): large enough that the index is built on
    // a second thread, whose allocations count too.
    let (dispatch_rounds, dispatch) = {
        let before = allocations();
        let (mut n, mut rounds) = (0, 0);
        loop {
            let r = store.dispatch(4_096, false).unwrap().records;
            if r == 0 {
                break;
            }
            n += r;
            rounds += 1;
        }
        let allocs = allocations() - before;
        (allocs as f64 / rounds as f64, allocs as f64 / n as f64)
    };
    let all = Subscription::all();
    let mut offset = [0i64; 4];
    let gets = per_call(1_000, |i| {
        let q = (i % 4) as usize;
        let r = store.get_message("G", "BenchTopic", q as i32, offset[q], 32, MAX_PULL_SIZE, &all).unwrap();
        offset[q] = r.next_begin_offset;
    }) / 32.0;
    println!(
        "allocations per message: put {puts:.6}, dispatch {dispatch:.6} ({dispatch_rounds:.1} a round), \
         get_message {gets:.3}"
    );
    assert_eq!(puts, 0.0, "a put allocates nothing in steady state");
    // Dispatch allocates per round (its index builder thread, the channels to it, the round's table of
    // topics and queues), never per record (consume queue + index, 3 keys): a round holds up to 4,096.
    assert!(dispatch_rounds <= 24.0, "dispatch: {dispatch_rounds} allocations per round, {dispatch} per record");
    // get_message allocates its result's two vectors per call, not per message.
    assert!(gets <= 3.0 / 32.0, "get_message: {gets} allocations per message");
}
