//! Dispatch through the store (spec §12): consume-queue entries and index keys for every record, the
//! transaction rules, blank fillers, schedule-topic tagsCode, idempotent re-dispatch, recovery on reopen,
//! and rebuilding deleted or damaged derived files.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rmq::consume_queue::BoundaryType;
use rmq::message::encode::{encode_record, EncodeInput, EncodeOptions};
use rmq::message::tags::{parse_delay_levels, DEFAULT_DELAY_LEVELS};
use rmq::message::{PutMessageStatus, TransactionType};
use rmq::store::dispatch::Dispatcher;
use rmq::store::{MessageStore, PutMessage};

mod common;
use common::small_config as config;

fn open(root: &Path) -> MessageStore {
    MessageStore::open(root, config()).unwrap()
}

fn dispatch_all(store: &MessageStore) -> u64 {
    let mut n = 0;
    loop {
        let round = store.dispatch(1000, false).unwrap();
        n += round.records;
        if round.records == 0 && round.reput_offset >= store.confirm_offset() {
            return n;
        }
    }
}

/// Every file under the derived directories with its bytes.
fn derived_snapshot(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for sub in ["consumequeue", "index"] {
        let mut stack = vec![root.join(sub)];
        while let Some(dir) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&dir) else { continue };
            for e in rd {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    out.insert(p.clone(), std::fs::read(&p).unwrap());
                }
            }
        }
    }
    out
}

/// Appends a record the put path would refuse (a system topic, a path-like topic), as a broker's internal
/// services or a crafted commitlog could hold. Returns the store timestamp.
fn append_foreign(store: &MessageStore, topic: &str, queue_id: i32, queue_offset: i64, properties: &[u8]) -> i64 {
    append_raw(store, topic, queue_id, 0, queue_offset, properties)
}

/// [`append_foreign`] with `sys_flag` (a transaction type, say). Returns the store timestamp.
fn append_raw(
    store: &MessageStore,
    topic: &str,
    queue_id: i32,
    sys_flag: i32,
    queue_offset: i64,
    properties: &[u8],
) -> i64 {
    let input = EncodeInput {
        topic,
        queue_id,
        flag: 0,
        body: b"foreign",
        properties,
        sys_flag,
        born_timestamp: 1,
        born_host: "127.0.0.1:1".parse().unwrap(),
        store_host: "127.0.0.1:10911".parse().unwrap(),
        store_timestamp: 0,
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        queue_offset: 0,
        physical_offset: 0,
    };
    let opts = EncodeOptions { max_message_size: 1 << 20, auto_version: true, prop_crc: false, fix_separator: true };
    let mut buf = Vec::new();
    let rec = encode_record(&input, &opts, &mut buf).unwrap();
    store.commitlog().append(&mut buf, &[rec], |_| queue_offset).unwrap().store_timestamp
}

struct Put {
    topic: &'static str,
    queue_id: i32,
    offset: u64,
    size: i32,
    queue_offset: i64,
    tags: String,
    keys: String,
    uniq: String,
}

fn fill(store: &MessageStore, n: usize) -> Vec<Put> {
    let mut out = Vec::new();
    for i in 0..n {
        let topic = ["TopicA", "TopicB"][i % 2];
        let queue_id = (i % 3) as i32;
        let tags = format!("Tag{}", i % 4);
        let keys = format!("k{i} order{}", i / 2);
        let body = vec![b'x'; 20 + i % 50];
        let mut m = PutMessage::new(topic, queue_id, &body);
        m.tags = Some(&tags);
        m.keys = Some(&keys);
        let r = store.put(&m).unwrap();
        assert_eq!(r.status, PutMessageStatus::PutOk);
        let rec = store.read(r.offsets[0]).unwrap().unwrap();
        out.push(Put {
            topic,
            queue_id,
            offset: r.offsets[0],
            size: rec.header.total_size,
            queue_offset: r.queue_offset,
            tags,
            keys,
            uniq: r.uniq_keys[0].to_string(),
        });
    }
    out
}

fn check_queues(store: &MessageStore, puts: &[Put]) {
    let mut counts: BTreeMap<(&str, i32), i64> = BTreeMap::new();
    for p in puts {
        *counts.entry((p.topic, p.queue_id)).or_default() += 1;
        let e = store.cq_entry(p.topic, p.queue_id, p.queue_offset).expect("entry");
        assert_eq!(e.offset, p.offset as i64);
        assert_eq!(e.size, p.size);
        assert_eq!(e.tags_code, i64::from(rmq::java::string_hash(&p.tags)));
    }
    for ((topic, q), n) in counts {
        assert_eq!(store.max_offset_in_queue(topic, q, true), n, "{topic}/{q}");
        assert_eq!(store.max_offset_in_queue(topic, q, false), n);
        assert_eq!(store.min_offset_in_queue(topic, q), 0);
    }
}

fn check_keys(store: &MessageStore, puts: &[Put]) {
    for p in puts {
        for key in p.keys.split(' ').chain([p.uniq.as_str()]) {
            let res = store.query_message(p.topic, key, 64, 0, i64::MAX).unwrap();
            let offsets: Vec<u64> = res.records.iter().map(|r| r.offset()).collect();
            let expected: Vec<u64> = puts
                .iter()
                .filter(|q| q.topic == p.topic && (q.uniq == key || q.keys.split(' ').any(|k| k == key)))
                .map(|q| q.offset)
                .collect();
            assert_eq!(offsets, expected, "{}#{key}", p.topic);
        }
    }
}

#[test]
fn dispatch_builds_every_queue_and_key() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(tmp.path());
    let puts = fill(&store, 120);
    assert!(store.commitlog().queue().files().len() > 2, "several segments, so blank fillers are crossed");
    assert_eq!(store.max_offset_in_queue("TopicA", 0, true), 0, "nothing dispatched yet");
    assert_eq!(store.max_offset_in_queue("TopicA", 0, false), 20, "but offsets were assigned");
    assert_eq!(dispatch_all(&store), 120);
    assert_eq!(store.dispatch_behind_bytes(), 0);
    check_queues(&store, &puts);
    check_keys(&store, &puts);
    assert!(store.index().unwrap().file_paths().len() > 10, "maxIndexNum 16: many index files");
    assert_eq!(store.dispatch_issues().0, 0);
}

#[test]
fn redispatch_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(tmp.path());
    let puts = fill(&store, 60);
    dispatch_all(&store);
    store.flush().unwrap();
    let before = derived_snapshot(tmp.path());
    // Run the dispatcher again over the whole log: every entry and key is already there.
    let levels = parse_delay_levels(DEFAULT_DELAY_LEVELS);
    let d = Dispatcher { queues: store.consume_queues(), index: store.index(), delay_levels: &levels, view: false };
    let round = d.run(store.commitlog(), 0, store.commitlog().max_offset(), u64::MAX, false).unwrap();
    assert_eq!(round.records, 60);
    assert_eq!(round.cq_entries, 0);
    store.flush().unwrap();
    assert_eq!(derived_snapshot(tmp.path()), before);
    check_keys(&store, &puts);
}

#[test]
fn reopen_restores_queues_offsets_and_index() {
    let tmp = tempfile::tempdir().unwrap();
    let puts = {
        let store = open(tmp.path());
        let puts = fill(&store, 50);
        // Half dispatched, then a clean close dispatches the rest.
        store.dispatch(25, false).unwrap();
        store.close().unwrap();
        puts
    };
    let before = derived_snapshot(tmp.path());
    let store = open(tmp.path());
    assert_eq!(store.recovery_report().rebuilt_cq_entries, 0);
    assert_eq!(derived_snapshot(tmp.path()), before, "a clean reopen rewrites nothing");
    check_queues(&store, &puts);
    check_keys(&store, &puts);
    // Puts continue the queue offsets.
    let r = store.put(&PutMessage::new("TopicA", 0, b"next")).unwrap();
    assert_eq!(r.queue_offset, puts.iter().filter(|p| p.topic == "TopicA" && p.queue_id == 0).count() as i64);
}

#[test]
fn deleted_or_damaged_derived_files_are_rebuilt_on_open() {
    let tmp = tempfile::tempdir().unwrap();
    let puts = {
        let store = open(tmp.path());
        let puts = fill(&store, 80);
        store.close().unwrap();
        puts
    };
    // 1. Both derived directories deleted: rebuilt entirely from the commitlog.
    std::fs::remove_dir_all(tmp.path().join("consumequeue")).unwrap();
    std::fs::remove_dir_all(tmp.path().join("index")).unwrap();
    {
        let store = open(tmp.path());
        assert_eq!(store.recovery_report().rebuilt_cq_entries, 80);
        check_queues(&store, &puts);
        check_keys(&store, &puts);
        store.close().unwrap();
    }
    // 2. The newest consume-queue entry zeroed (the last dispatch write lost): recovered and re-dispatched.
    // (Older entries of other queues lost out of order, as only a power loss can do, are not detected:
    // delete the derived directories to rebuild them.)
    let newest = puts.iter().max_by_key(|p| p.offset).unwrap();
    let qdir = tmp.path().join(format!("consumequeue/{}/{}", newest.topic, newest.queue_id));
    let mut files: Vec<PathBuf> = std::fs::read_dir(&qdir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let last = files.last().unwrap();
    let mut bytes = std::fs::read(last).unwrap();
    let used = bytes.chunks(20).take_while(|c| c.iter().any(|&b| b != 0)).count();
    assert!(used >= 1);
    bytes[(used - 1) * 20..].fill(0);
    std::fs::write(last, &bytes).unwrap();
    {
        let store = open(tmp.path());
        assert!(store.recovery_report().rebuilt_cq_entries >= 1);
        check_queues(&store, &puts);
        store.close().unwrap();
    }
    // 3. A consume-queue entry beyond the end of the commitlog (the log lost its tail) is dropped.
    let bogus = rmq::consume_queue::CqEntry { offset: 1 << 40, size: 100, tags_code: 0 }.encode();
    let mut bytes = std::fs::read(last).unwrap();
    let used = bytes.chunks(20).take_while(|c| c.iter().any(|&b| b != 0)).count();
    if used < 5 {
        bytes[used * 20..used * 20 + 20].copy_from_slice(&bogus);
        std::fs::write(last, &bytes).unwrap();
        let store = open(tmp.path());
        check_queues(&store, &puts);
    }
}

#[test]
fn transactions_and_schedule_topic() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(tmp.path());
    let mut offsets = Vec::new();
    for (i, t) in
        [TransactionType::NotType, TransactionType::Prepared, TransactionType::Commit, TransactionType::Rollback]
            .into_iter()
            .enumerate()
    {
        let key = format!("tx{i}");
        let mut m = PutMessage::new("TxTopic", 0, b"body");
        m.transaction = t;
        m.keys = Some(&key);
        offsets.push(store.put(&m).unwrap().offsets[0]);
    }
    dispatch_all(&store);
    // PREPARED and ROLLBACK take no queue entry.
    assert_eq!(store.max_offset_in_queue("TxTopic", 0, true), 2);
    assert_eq!(store.cq_entry("TxTopic", 0, 0).unwrap().offset, offsets[0] as i64);
    assert_eq!(store.cq_entry("TxTopic", 0, 1).unwrap().offset, offsets[2] as i64);
    // ROLLBACK is not indexed; PREPARED is.
    let found = |k: &str| store.query_message("TxTopic", k, 64, 0, i64::MAX).unwrap().records.len();
    assert_eq!((found("tx0"), found("tx1"), found("tx2"), found("tx3")), (1, 1, 1, 0));
}

#[test]
fn schedule_topic_tags_code_is_the_delivery_time() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(tmp.path());
    // Producers cannot send to SCHEDULE_TOPIC_XXXX; write the record as a broker's delay service would.
    let stored_at = append_foreign(&store, "SCHEDULE_TOPIC_XXXX", 2, 0, b"DELAY\x013\x02TAGS\x01TagA\x02");
    dispatch_all(&store);
    let e = store.cq_entry("SCHEDULE_TOPIC_XXXX", 2, 0).unwrap();
    assert_eq!(e.tags_code, stored_at + 10_000, "level 3 = 10 s");
    // A non-numeric DELAY on the schedule topic is reported and skipped, and dispatch goes on.
    append_foreign(&store, "SCHEDULE_TOPIC_XXXX", 2, 1, b"DELAY\x01abc\x02");
    store.put(&PutMessage::new("After", 0, b"x")).unwrap();
    dispatch_all(&store);
    let (n, issues) = store.dispatch_issues();
    assert_eq!(n, 1);
    assert!(issues[0].reason.contains("DELAY"), "{issues:?}");
    assert_eq!(store.max_offset_in_queue("After", 0, true), 1);
    assert_eq!(store.max_offset_in_queue("SCHEDULE_TOPIC_XXXX", 2, true), 1);
}

#[test]
fn a_topic_that_is_a_path_never_becomes_a_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(tmp.path());
    // A foreign record naming "../x" (the put path refuses such topics; a crafted commitlog may hold one).
    append_foreign(&store, "../x", 0, 0, b"");
    dispatch_all(&store);
    assert!(!tmp.path().join("x").exists());
    assert!(!tmp.path().join("consumequeue/../x").exists());
    assert_eq!(store.dispatch_issues().0, 1);
    assert!(store.consume_queue("../x", 0).is_none());
}

/// Topics a producer may not send but RocketMQ 5.x's POP consumers make (`%RETRY%<group>+<topic>`): their queues
/// are served, as RocketMQ serves them, and found again by the next open. Other names (`J.T`, which a store
/// written through `DefaultMessageStore` directly may hold) get no directory, and a directory of such a name
/// (an operator's `T.bak` copy of a queue) is left alone, never loaded or rebuilt.
#[test]
fn pop_retry_topics_get_their_queues_and_other_names_none() {
    let tmp = tempfile::tempdir().unwrap();
    let served = ["%RETRY%CID+JT", "A+B"];
    {
        let store = open(tmp.path());
        for topic in served.iter().chain(&["J.T"]) {
            append_foreign(&store, topic, 1, 0, b"");
            append_foreign(&store, topic, 1, 1, b"");
            assert!(store.put(&PutMessage::new(topic, 1, b"x")).is_err(), "the put path refuses {topic:?}");
        }
        dispatch_all(&store);
        assert_eq!(store.dispatch_issues().0, 2, "J.T's two records are reported");
        for topic in served {
            assert_eq!(store.max_offset_in_queue(topic, 1, true), 2, "{topic}");
        }
        assert!(!tmp.path().join("consumequeue").join("J.T").exists());
        store.close().unwrap();
    }
    // An operator's copy of a queue directory beside it.
    let cq = tmp.path().join("consumequeue");
    std::fs::create_dir_all(cq.join("A.bak").join("1")).unwrap();
    let file = std::fs::read_dir(cq.join("A+B").join("1")).unwrap().next().unwrap().unwrap().path();
    let copy = cq.join("A.bak").join("1").join(file.file_name().unwrap());
    std::fs::copy(&file, &copy).unwrap();
    let before = std::fs::read(&copy).unwrap();
    let store = open(tmp.path());
    for topic in served {
        assert!(cq.join(topic).join("1").is_dir(), "{topic}");
        assert_eq!(store.max_offset_in_queue(topic, 1, true), 2, "{topic}");
    }
    assert_eq!(store.recovery_report().skipped_dirs, vec![cq.join("A.bak")]);
    store.close().unwrap();
    assert_eq!(std::fs::read(&copy).unwrap(), before, "the copy is left as it was");
}

#[test]
fn time_queries_through_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(tmp.path());
    let mut stamps = Vec::new();
    for i in 0..12 {
        let r = store.put(&PutMessage::new("T", 1, format!("m{i}").as_bytes())).unwrap();
        stamps.push(r.store_timestamp);
        if i % 4 == 3 {
            std::thread::sleep(std::time::Duration::from_millis(3));
        }
    }
    dispatch_all(&store);
    for (q, ts) in stamps.iter().enumerate() {
        assert_eq!(store.message_store_timestamp("T", 1, q as i64), *ts);
        let lower = store.offset_in_queue_by_time("T", 1, *ts, BoundaryType::Lower);
        assert_eq!(lower, stamps.iter().position(|t| t == ts).unwrap() as i64);
        let upper = store.offset_in_queue_by_time("T", 1, *ts, BoundaryType::Upper);
        assert_eq!(upper, stamps.iter().rposition(|t| t == ts).unwrap() as i64);
    }
    // Before the first: clamped to min; after the last: max (LOWER) and the last entry (UPPER).
    assert_eq!(store.offset_in_queue_by_time("T", 1, 0, BoundaryType::Lower), 0);
    assert_eq!(store.offset_in_queue_by_time("T", 1, 0, BoundaryType::Upper), 0);
    assert_eq!(store.offset_in_queue_by_time("T", 1, i64::MAX, BoundaryType::Lower), 12);
    assert_eq!(store.offset_in_queue_by_time("T", 1, i64::MAX, BoundaryType::Upper), 11);
    // Missing queue: 0; missing entries: -1 / 0.
    assert_eq!(store.offset_in_queue_by_time("T", 7, 5, BoundaryType::Lower), 0);
    assert_eq!(store.message_store_timestamp("T", 7, 0), -1);
    assert_eq!(store.message_store_timestamp("T", 1, -1), -1);
    assert_eq!(store.message_store_timestamp("T", 1, 12), -1);
    assert_eq!(store.commitlog_offset_in_queue("T", 1, 12), 0);
    assert_eq!(store.min_offset_in_queue("T", 7), 0);
    assert_eq!(store.max_offset_in_queue("T", 7, true), 0);
}

/// 1,600 puts over two topics and three queues, with every 40th record one a put would not make: malformed
/// UTF-8 in KEYS, empty and repeated tokens, a UNIQ_KEY alone, no keys, PREPARED and ROLLBACK records with
/// keys (neither takes a queue offset; ROLLBACK is not indexed), COMMIT.
fn fill_varied(store: &MessageStore) {
    let mut raw_offset = 0;
    for i in 0..1_600 {
        if i % 40 == 7 {
            let (sys_flag, props): (i32, &[u8]) = match (i / 40) % 6 {
                0 => (0, b"KEYS\x01bad\xff\xfe  key-2 key-2 \xe2\x82\x02UNIQ_KEY\x01U-raw\x02"),
                1 => (0, b"UNIQ_KEY\x01only-uniq\x02"),
                2 => (0, b"TAGS\x01no-keys\x02"),
                3 => (0x4, b"KEYS\x01prepared-key\x02UNIQ_KEY\x01U-prep\x02"),
                4 => (0xC, b"KEYS\x01rollback-key\x02UNIQ_KEY\x01U-rb\x02"),
                _ => (0x8, b"KEYS\x01commit-key\x02"),
            };
            let takes_offset = sys_flag == 0 || sys_flag == 0x8;
            append_raw(store, "Raw", 0, sys_flag, if takes_offset { raw_offset } else { 0 }, props);
            raw_offset += i64::from(takes_offset);
            continue;
        }
        let topic = ["TopicA", "TopicB"][i % 2];
        let keys = format!("k{i} order{} ", i / 2);
        let body = vec![b'x'; 20 + i % 50];
        let mut m = PutMessage::new(topic, (i % 3) as i32, &body);
        m.tags = Some("T");
        m.keys = Some(&keys);
        store.put(&m).unwrap();
    }
}

/// The derived files' bytes: consume queues by path, index files in name order (their names come from the clock).
fn derived_bytes(root: &Path) -> (BTreeMap<PathBuf, Vec<u8>>, Vec<Vec<u8>>) {
    let mut queues = derived_snapshot(root);
    let index = queues.iter().filter(|(p, _)| p.starts_with(root.join("index"))).map(|(_, b)| b.clone()).collect();
    queues.retain(|p, _| p.starts_with(root.join("consumequeue")));
    let queues = queues.into_iter().map(|(p, b)| (p.strip_prefix(root).unwrap().to_owned(), b)).collect();
    (queues, index)
}

/// Dispatches `log` with the dispatcher alone into fresh consume queues and index under `root`, in rounds of
/// `max_records`; whether some round built the index on a second thread.
fn dispatch_into(log: &rmq::commitlog::CommitLog, root: &Path, max_records: u64) -> bool {
    let cfg = config();
    let (queues, _) = rmq::consume_queue::store::ConsumeQueueStore::load(&root.join("consumequeue"), 100).unwrap();
    let index = rmq::index::IndexService::load(&root.join("index"), cfg.index).unwrap();
    let levels = parse_delay_levels(DEFAULT_DELAY_LEVELS);
    let d = Dispatcher { queues: &queues, index: Some(&index), delay_levels: &levels, view: false };
    let (mut from, end, mut parallel) = (0, log.max_offset(), false);
    while from < end {
        let round = d.run(log, from, end, max_records, false).unwrap();
        assert!(round.issues.is_empty(), "{:?}", round.issues);
        parallel |= round.parallel_index;
        from = round.reput_offset;
    }
    parallel
}

#[test]
fn a_large_round_builds_the_index_on_a_second_thread_into_the_same_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(&tmp.path().join("log"));
    fill_varied(&store);
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    assert!(
        dispatch_into(store.commitlog(), &a, u64::MAX),
        "a round of the whole log builds the index on a second thread"
    );
    assert!(!dispatch_into(store.commitlog(), &b, 100), "rounds of 100 records build it inline");
    let (qa, ia) = derived_bytes(&a);
    let (qb, ib) = derived_bytes(&b);
    assert!(qa.len() > 100 && ia.len() > 100, "many consume-queue and index files (rolls inside the rounds)");
    assert_eq!(qa, qb, "the consume queues are the same bytes");
    assert_eq!(ia.len(), ib.len());
    for (n, (x, y)) in ia.iter().zip(&ib).enumerate() {
        assert!(x == y, "index file {n} differs");
    }
    // The store's own dispatch (one round here) answers the queries the keys ask for (each raw kind comes 6-7
    // times: `fill_varied`).
    assert!(store.dispatch(u64::MAX, false).unwrap().parallel_index);
    for (topic, key, n) in [
        ("Raw", "key-2", 7),
        ("Raw", "only-uniq", 7),
        ("Raw", "prepared-key", 7),
        ("Raw", "rollback-key", 0),
        ("TopicB", "k1599", 1),
    ] {
        assert_eq!(store.query_message(topic, key, 64, 0, i64::MAX).unwrap().records.len(), n, "{key}");
    }
}

#[test]
fn a_failure_of_the_index_builder_fails_the_round_and_a_retry_completes_it() {
    use rmq::fault::{self, Fault, FaultPoint};
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("a");
    let store = open(&root);
    fill_varied(&store);
    dispatch_into(store.commitlog(), &tmp.path().join("b"), 100);
    // The index files are 64 slots and 16 entries: a new one is needed every few messages, and cannot be had.
    let index_dir = root.join("index");
    fault::inject(Fault::new(FaultPoint::Allocate, libc::ENOSPC).times(None).under(&index_dir));
    let failed = store.dispatch(u64::MAX, false);
    fault::disarm_under(&index_dir);
    let err = failed.expect_err("the round fails with its index builder's error");
    assert!(matches!(err, rmq::Error::DiskFull { .. }), "{err:?}");
    assert_eq!(store.reput_offset(), 0, "a failed round advances nothing");
    let round = store.dispatch(u64::MAX, false).unwrap();
    assert!(round.parallel_index);
    assert_eq!(store.dispatch_behind_bytes(), 0);
    assert_eq!(store.dispatch_issues().0, 0);
    store.close().unwrap();
    let (qa, ia) = derived_bytes(&root);
    let (qb, ib) = derived_bytes(&tmp.path().join("b"));
    assert_eq!(qa, qb);
    assert!(ia == ib, "the index is what an undisturbed dispatch writes");
}
