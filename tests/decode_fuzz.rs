//! Property tests for the record decoder: no input makes it panic, and encoding round-trips.
//! `make fuzz` runs more cases (PROPTEST_CASES).
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;

use proptest::prelude::*;
use rmq::message::decode::{check_record, parse_header, CheckOptions, RecordCheck};
use rmq::message::encode::{encode_record, finish_record, EncodeInput, EncodeOptions};
use rmq::message::properties;

fn opts() -> EncodeOptions {
    EncodeOptions { max_message_size: 4 * 1024 * 1024, auto_version: true, prop_crc: false, fix_separator: true }
}

fn host() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        (any::<[u8; 4]>(), any::<u16>()).prop_map(|(ip, p)| SocketAddr::from((ip, p))),
        (any::<[u8; 16]>(), any::<u16>())
            .prop_filter("not v4-mapped", |(ip, _)| std::net::Ipv6Addr::from(*ip).to_ipv4_mapped().is_none())
            .prop_map(|(ip, p)| SocketAddr::from((ip, p))),
    ]
}

fn text() -> impl Strategy<Value = String> {
    "[^\u{1}\u{2}]{1,12}"
}

fn valid_record() -> impl Strategy<Value = Vec<u8>> {
    (
        "[a-zA-Z0-9_%|-]{1,255}",
        proptest::collection::vec(any::<u8>(), 0..512),
        proptest::collection::vec((text(), text()), 0..6),
        host(),
        host(),
        any::<i32>(),
        0i32..1024,
    )
        .prop_map(|(topic, body, props, born, store, flag, queue_id)| {
            let refs: Vec<(&str, &str)> = props.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let mut blob = Vec::new();
            properties::encode_map(&refs, 128, &mut blob);
            let input = EncodeInput {
                topic: &topic,
                queue_id,
                flag,
                body: &body,
                properties: &blob,
                sys_flag: 0,
                born_timestamp: 1,
                born_host: born,
                store_host: store,
                store_timestamp: 2,
                reconsume_times: 0,
                prepared_transaction_offset: 0,
                queue_offset: 0,
                physical_offset: 0,
            };
            let mut buf = Vec::new();
            let rec = encode_record(&input, &opts(), &mut buf).unwrap();
            finish_record(&mut buf, &rec, 3, 0, 2);
            buf
        })
}

/// 2000 cases by default; `PROPTEST_CASES` overrides (`make fuzz`).
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2000)
}

fn assert_sound(bytes: &[u8]) {
    for check_crc in [false, true] {
        if let RecordCheck::Message(h) = check_record(bytes, CheckOptions { check_crc, force_prop_crc: false }) {
            assert!(h.total_size as usize <= bytes.len());
            assert!(h.body.end <= h.total_size as usize && h.topic.end <= h.total_size as usize);
            assert!(h.properties.end == h.total_size as usize);
        }
    }
    let _ = parse_header(bytes);
    let _ = check_record(bytes, CheckOptions { check_crc: true, force_prop_crc: true });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        assert_sound(&bytes);
    }

    #[test]
    fn mutated_records_never_panic(
        rec in valid_record(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut bytes = rec.clone();
        for (i, v) in flips {
            let at = i.index(bytes.len());
            bytes[at] = v;
        }
        assert_sound(&bytes);
        assert_sound(&rec[..cut.index(rec.len())]);
    }

    #[test]
    fn valid_records_round_trip(rec in valid_record()) {
        match check_record(&rec, CheckOptions { check_crc: true, force_prop_crc: false }) {
            RecordCheck::Message(h) => {
                prop_assert_eq!(h.total_size as usize, rec.len());
                prop_assert_eq!(h.queue_offset, 3);
                prop_assert_eq!(h.version(), if h.topic.len() > 127 { 2 } else { 1 });
            }
            other => prop_assert!(false, "valid record rejected: {:?}", other),
        }
    }
}
