//! `check_batch` against `put_batch`: a dry run of the same checks (no record bytes, no body copy, no CRC) must
//! refuse exactly the batches `put_batch` refuses, with the same error, and accept the rest. The Spark writer
//! relies on it to put a task's rows all or nothing.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;

use proptest::prelude::*;
use rmq::config::StoreConfig;
use rmq::store::{BatchItem, MessageStore};

/// Tags, keys and property values, some refused (a property separator, an empty key list) and some long.
const TEXTS: [&str; 6] = ["TagA", "k1 k2", "", "a\u{1}b", "é", "x"];
const NAMES: [&str; 5] = ["color", "DELAY", "UNIQ_KEY", "bad\u{2}name", "size"];

#[derive(Debug, Clone)]
struct Item {
    body: usize,
    tags: Option<usize>,
    keys: Option<usize>,
    props: Vec<(usize, usize)>,
}

/// Mostly what is accepted (so that most batches are), now and then what is not.
fn text() -> impl Strategy<Value = usize> {
    prop_oneof![8 => prop_oneof![Just(0usize), Just(1), Just(4), Just(5)], 1 => Just(2usize), 1 => Just(3usize)]
}

fn item() -> impl Strategy<Value = Item> {
    (
        prop_oneof![12 => 0usize..300, 3 => 1500usize..2500, 1 => Just(70_000usize)],
        proptest::option::of(text()),
        proptest::option::of(text()),
        proptest::collection::vec((prop_oneof![8 => prop_oneof![Just(0usize), Just(4)], 1 => 1usize..4], text()), 0..3),
    )
        .prop_map(|(body, tags, keys, props)| Item { body, tags, keys, props })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn check_batch_refuses_what_put_batch_refuses(
        topic_len in prop_oneof![12 => 1usize..20, 2 => Just(127usize), 1 => Just(128usize)],
        items in proptest::collection::vec(item(), 0..6),
        queue_id in prop_oneof![8 => Just(0), 4 => Just(3), 1 => Just(-1)],
        long_value in proptest::bool::weighted(0.1),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let mut cfg = StoreConfig::default();
        cfg.commit_log.mapped_file_size_commit_log = 1 << 20;
        cfg.commit_log.max_message_size = 64 * 1024;
        cfg.commit_log.auto_message_version_on_topic_len = false;
        cfg.dispatch.message_index_enable = false;
        let store = MessageStore::open(tmp.path(), cfg).unwrap();
        let topic = "T".repeat(topic_len);
        let big = "v".repeat(20_000);
        let bodies: Vec<Vec<u8>> = items.iter().map(|i| vec![b'b'; i.body]).collect();
        let props: Vec<Vec<(&str, &str)>> = items
            .iter()
            .map(|i| i.props.iter().map(|&(n, v)| (NAMES[n], if long_value { big.as_str() } else { TEXTS[v] })).collect())
            .collect();
        let batch: Vec<BatchItem<'_>> = items
            .iter()
            .zip(&bodies)
            .zip(&props)
            .map(|((i, body), props)| BatchItem {
                body,
                tags: i.tags.map(|t| TEXTS[t]),
                keys: i.keys.map(|k| TEXTS[k]),
                properties: props,
                flag: 0,
            })
            .collect();
        let host: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let checked = store.check_batch(&topic, queue_id, &batch, 0, host, None, 0, true);
        let before = store.commitlog().max_offset();
        let put = store.put_batch(&topic, queue_id, &batch, 0, host, None, 0, true);
        match (&checked, &put) {
            (Ok(()), Ok(_)) => {}
            (Err(c), Err(p)) => {
                prop_assert_eq!(c.to_string(), p.to_string());
                prop_assert_eq!(store.commitlog().max_offset(), before, "a refused batch wrote nothing");
            }
            _ => prop_assert!(false, "check_batch {:?} but put_batch {:?}", checked, put.map(drop)),
        }
    }
}
