//! Criterion benchmark for the read path: `get_message` of 32-message batches from a hot queue of
//! 100-byte messages (every status check, the consume-queue scan, and one record view per message).
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rmq::config::StoreConfig;
use rmq::store::get::{Subscription, MAX_PULL_SIZE};
use rmq::store::{BatchItem, MessageStore};

const MESSAGES: i64 = 64_000;

fn get_message(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = StoreConfig::default();
    cfg.commit_log.mapped_file_size_commit_log = 256 * 1024 * 1024;
    cfg.consume_queue.mapped_file_size_consume_queue = 20 * 100_000;
    cfg.dispatch.message_index_enable = false;
    let store = MessageStore::open(tmp.path(), cfg).unwrap();
    let body = [b'x'; 100];
    let items: Vec<BatchItem<'_>> =
        (0..500).map(|_| BatchItem { body: &body, tags: Some("TagA"), keys: None, properties: &[], flag: 0 }).collect();
    let host = "127.0.0.1:5000".parse().unwrap();
    for _ in 0..MESSAGES / 500 {
        store.put_batch("Pull", 0, &items, 0, host, None, 0, true).unwrap();
    }
    while store.dispatch(u64::MAX, false).unwrap().records > 0 {}
    let mut g = c.benchmark_group("get_message");
    g.throughput(Throughput::Elements(32));
    // A subscription of 10,000 tags, the stored one last: each entry's tag code and each record's tag are found
    // by binary search (a linear search per message before).
    let many: Vec<String> = (0..10_000).map(|i| format!("Tag{i}")).chain(["TagA".to_owned()]).collect();
    let subs = [
        ("batch_32_all", Subscription::all()),
        ("batch_32_tag", Subscription::parse("TagA")),
        ("batch_32_of_10k_tags", Subscription::parse(&many.join(" || "))),
    ];
    for (name, sub) in subs {
        let mut offset = 0i64;
        g.bench_function(name, |b| {
            b.iter(|| {
                let r = store.get_message("G", "Pull", 0, offset, 32, MAX_PULL_SIZE, &sub).unwrap();
                offset = if r.next_begin_offset >= MESSAGES { 0 } else { r.next_begin_offset };
                black_box(r)
            })
        });
    }
    g.finish();
    let mut g = c.benchmark_group("subscription");
    g.throughput(Throughput::Elements(many.len() as u64));
    let expression = many.join(" || ");
    g.bench_function("parse_10k_tags", |b| b.iter(|| black_box(Subscription::parse(black_box(&expression)))));
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(4));
    targets = get_message
}
criterion_main!(benches);
