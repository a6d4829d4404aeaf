//! Property tests for the record decoder (`check_record`, `parse_header`): no input makes it panic or return
//! ranges outside the buffer, records that still validate after mutation re-encode to the same bytes, and
//! every field survives encode → decode. `make fuzz` runs more cases (`PROPTEST_CASES`).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use proptest::prelude::*;
use rmq::message::decode::{check_record, parse_header, property_crc_ok, CheckOptions, RecordCheck, RecordHeader};
use rmq::message::encode::{encode_record, finish_record, is_v2, EncodeInput, EncodeOptions};
use rmq::message::{crc32, properties, record_len, sysflag, tags, MAGIC_V1, MAGIC_V2};

fn opts(prop_crc: bool) -> EncodeOptions {
    EncodeOptions { max_message_size: 4 * 1024 * 1024, auto_version: true, prop_crc, fix_separator: true }
}

/// IPv4, IPv6, and IPv4-mapped IPv6 (which must come back as IPv4).
fn host() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        (any::<[u8; 4]>(), any::<u16>()).prop_map(|(ip, p)| SocketAddr::from((ip, p))),
        (any::<[u8; 16]>(), any::<u16>()).prop_map(|(ip, p)| SocketAddr::from((ip, p))),
        (any::<[u8; 4]>(), any::<u16>())
            .prop_map(|(ip, p)| SocketAddr::new(IpAddr::V6(std::net::Ipv4Addr::from(ip).to_ipv6_mapped()), p)),
    ]
}

/// The address as Java stores it (`Inet4Address` for IPv4-mapped IPv6).
fn canonical(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, |v4| SocketAddr::new(IpAddr::V4(v4), addr.port())),
        IpAddr::V4(_) => addr,
    }
}

/// Property text: non-empty, no separators, any other Unicode.
fn text() -> impl Strategy<Value = String> {
    "[^\u{1}\u{2}]{1,16}"
}

/// Everything that goes into one record.
#[derive(Debug, Clone)]
struct Msg {
    topic: String,
    body: Vec<u8>,
    tags: Option<String>,
    keys: Option<String>,
    user: Vec<(String, String)>,
    born: SocketAddr,
    store: SocketAddr,
    sys_flag: i32,
    flag: i32,
    queue_id: i32,
    born_timestamp: i64,
    store_timestamp: i64,
    reconsume_times: i32,
    prepared_transaction_offset: i64,
    queue_offset: i64,
    physical_offset: i64,
    prop_crc: bool,
}

impl Msg {
    /// Properties in insertion order: TAGS, KEYS, then the user's (a repeated name keeps its first place and
    /// takes the last value, as in a Java map).
    fn entries(&self) -> Vec<(&str, &str)> {
        let mut out: Vec<(&str, &str)> = Vec::new();
        let given =
            self.tags.iter().map(|t| ("TAGS", t.as_str())).chain(self.keys.iter().map(|k| ("KEYS", k.as_str())));
        for (n, v) in given.chain(self.user.iter().map(|(n, v)| (n.as_str(), v.as_str()))) {
            match out.iter_mut().find(|(name, _)| *name == n) {
                Some(slot) => slot.1 = v,
                None => out.push((n, v)),
            }
        }
        out
    }

    fn encode(&self) -> Vec<u8> {
        let mut blob = Vec::new();
        properties::encode_map(&self.entries(), properties::BROKER_MAP_CAPACITY, &mut blob);
        let input = EncodeInput {
            topic: &self.topic,
            queue_id: self.queue_id,
            flag: self.flag,
            body: &self.body,
            properties: &blob,
            sys_flag: self.sys_flag,
            born_timestamp: self.born_timestamp,
            born_host: self.born,
            store_host: self.store,
            store_timestamp: 0,
            reconsume_times: self.reconsume_times,
            prepared_transaction_offset: self.prepared_transaction_offset,
            queue_offset: 0,
            physical_offset: 0,
        };
        let mut buf = Vec::new();
        let rec = encode_record(&input, &opts(self.prop_crc), &mut buf).unwrap();
        finish_record(&mut buf, &rec, self.queue_offset, self.physical_offset, self.store_timestamp);
        buf
    }
}

fn msg() -> impl Strategy<Value = Msg> {
    let transaction = prop_oneof![
        Just(0),
        Just(sysflag::TRANSACTION_PREPARED),
        Just(sysflag::TRANSACTION_COMMIT),
        Just(sysflag::TRANSACTION_ROLLBACK)
    ];
    let producer_bits = (any::<bool>(), any::<bool>(), 0..4i32, transaction)
        .prop_map(|(c, m, kind, tx)| i32::from(c) | (i32::from(m) << 1) | (kind << 8) | tx);
    (
        (
            "[a-zA-Z0-9_%|-]{1,255}",
            proptest::collection::vec(any::<u8>(), 0..2048),
            proptest::option::of(text()),
            proptest::option::of(text()),
            proptest::collection::vec(("[A-Za-z_][A-Za-z0-9_#.]{0,11}", text()), 0..6),
            host(),
            host(),
            producer_bits,
        ),
        (
            any::<i32>(),
            0..i32::MAX,
            any::<i64>(),
            any::<i64>(),
            any::<i32>(),
            0..i64::MAX,
            0..i64::MAX,
            0..i64::MAX,
            any::<bool>(),
        ),
    )
        .prop_map(|((topic, body, tags, keys, user, born, store, sys_flag), rest)| {
            let (flag, queue_id, born_timestamp, store_timestamp, reconsume_times, prepared, qo, po, prop_crc) = rest;
            Msg {
                topic,
                body,
                tags,
                keys,
                user,
                born,
                store,
                sys_flag,
                flag,
                queue_id,
                born_timestamp,
                store_timestamp,
                reconsume_times,
                prepared_transaction_offset: prepared,
                queue_offset: qo,
                physical_offset: po,
                prop_crc,
            }
        })
}

/// Encodes the fields of a decoded record again, when the encoder can produce that record at all: a UTF-8
/// topic whose length picks the same version, no IPv4-mapped IPv6 host (stored as IPv4), a body CRC the
/// encoder would compute (an empty body's stored CRC is never checked), no `__CRC32#` handling.
fn reencode(bytes: &[u8], h: &RecordHeader) -> Option<Vec<u8>> {
    let topic = std::str::from_utf8(h.topic(bytes)).ok()?;
    let mapped = |a: SocketAddr| matches!(a.ip(), IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some());
    if is_v2(topic, true) != (h.magic == MAGIC_V2) || mapped(h.born_host) || mapped(h.store_host) {
        return None;
    }
    if h.body_crc != crc32(h.body(bytes)) {
        return None;
    }
    let input = EncodeInput {
        topic,
        queue_id: h.queue_id,
        flag: h.flag,
        body: h.body(bytes),
        properties: h.properties(bytes),
        sys_flag: h.sys_flag,
        born_timestamp: h.born_timestamp,
        born_host: h.born_host,
        store_host: h.store_host,
        store_timestamp: h.store_timestamp,
        reconsume_times: h.reconsume_times,
        prepared_transaction_offset: h.prepared_transaction_offset,
        queue_offset: h.queue_offset,
        physical_offset: h.physical_offset,
    };
    let mut out = Vec::new();
    let max = EncodeOptions { max_message_size: i32::MAX, ..opts(false) };
    encode_record(&input, &max, &mut out).ok()?;
    Some(out)
}

/// Whatever the bytes: no panic, and an accepted record's ranges lie inside it, in field order.
fn assert_sound(bytes: &[u8]) {
    let levels = tags::parse_delay_levels(tags::DEFAULT_DELAY_LEVELS);
    for check_crc in [false, true] {
        for force_prop_crc in [false, true] {
            match check_record(bytes, CheckOptions { check_crc, force_prop_crc }) {
                RecordCheck::Message(h) => {
                    let total = h.total_size as usize;
                    assert!(total <= bytes.len());
                    assert!(h.body.start <= h.body.end && h.body.end < h.topic.start);
                    assert!(h.topic.end < h.properties.start && h.properties.end == total);
                    assert_eq!(
                        total,
                        record_len(h.magic == MAGIC_V2, h.sys_flag, h.body.len(), h.topic.len(), h.properties.len())
                    );
                    assert!(h.magic == MAGIC_V1 || h.magic == MAGIC_V2);
                    let record = &bytes[..total];
                    let _ = property_crc_ok(record, &h);
                    let _ = properties::parse(h.properties(record));
                    let _ = tags::tags_code(h.topic(record), h.properties(record), h.store_timestamp, &levels);
                    if let Some(again) = reencode(record, &h) {
                        assert_eq!(again, record, "a valid record must re-encode to its own bytes");
                    }
                }
                RecordCheck::Blank { .. } => assert!(bytes.len() >= 8),
                RecordCheck::Invalid { .. } => {}
            }
        }
    }
    let _ = parse_header(bytes);
}

/// Where a record's length fields are: TOTALSIZE, BODYLENGTH, TOPICLENGTH (1 or 2 bytes), PROPERTIESLENGTH.
fn length_fields(h: &RecordHeader) -> [(usize, usize); 4] {
    let topic_len_width = if h.magic == MAGIC_V2 { 2 } else { 1 };
    [(0, 4), (h.body.start - 4, 4), (h.topic.start - topic_len_width, topic_len_width), (h.properties.start - 2, 2)]
}

/// `default` cases (sized so the debug-build `cargo test` stays at a few seconds); `PROPTEST_CASES`
/// overrides every test (`make fuzz`).
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(2000), ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        assert_sound(&bytes);
    }

    /// Random bytes behind a plausible TOTALSIZE and a real magic, so parsing gets past the first two fields.
    #[test]
    fn plausible_headers_never_panic(
        v2 in any::<bool>(),
        total_delta in -8i32..8,
        rest in proptest::collection::vec(any::<u8>(), 0..400),
    ) {
        let magic = if v2 { MAGIC_V2 } else { MAGIC_V1 };
        let mut bytes = ((rest.len() as i32 + 8).saturating_add(total_delta)).to_be_bytes().to_vec();
        bytes.extend_from_slice(&magic.to_be_bytes());
        bytes.extend_from_slice(&rest);
        assert_sound(&bytes);
    }

}

// Tests over generated messages cost more per case (bodies up to 2 KiB, Unicode properties).
proptest! {
    #![proptest_config(ProptestConfig { cases: cases(1000), ..ProptestConfig::default() })]

    #[test]
    fn mutated_records_never_panic(
        m in msg(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let rec = m.encode();
        let mut bytes = rec.clone();
        for (i, v) in flips {
            let at = i.index(bytes.len());
            bytes[at] = v;
        }
        assert_sound(&bytes);
        assert_sound(&rec[..cut.index(rec.len())]);
        // Trailing bytes after a record are not part of it.
        let mut longer = rec.clone();
        longer.extend_from_slice(&rec);
        assert_sound(&longer);
    }

    #[test]
    fn overwritten_length_fields_never_panic(
        m in msg(),
        field in 0usize..4,
        value in prop_oneof![any::<i32>(), -4i32..4, Just(i32::MAX), Just(i32::MIN), Just(0)],
        relative in any::<bool>(),
    ) {
        let rec = m.encode();
        let h = parse_header(&rec).unwrap();
        let (at, width) = length_fields(&h)[field];
        let mut bytes = rec.clone();
        let old = match width {
            4 => i32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()),
            2 => i32::from(i16::from_be_bytes(bytes[at..at + 2].try_into().unwrap())),
            _ => i32::from(bytes[at] as i8),
        };
        let new = if relative { old.wrapping_add(value) } else { value };
        let be = new.to_be_bytes();
        bytes[at..at + width].copy_from_slice(&be[4 - width..]);
        assert_sound(&bytes);
        if bytes != rec && (field == 0 || field == 3) {
            // A changed TOTALSIZE or PROPERTIESLENGTH (the last field) can never match calMsgLength again. (A
            // changed body or topic length moves the later reads, which random bytes can satisfy by chance.)
            prop_assert!(!matches!(check_record(&bytes, CheckOptions::default()), RecordCheck::Message(_)));
        }
    }

    #[test]
    fn body_bit_flip_is_caught_by_the_crc(m in msg(), at in any::<prop::sample::Index>(), bit in 0u8..8) {
        prop_assume!(!m.body.is_empty());
        let mut bytes = m.encode();
        let h = parse_header(&bytes).unwrap();
        let i = h.body.start + at.index(h.body.len());
        bytes[i] ^= 1 << bit;
        let crc = CheckOptions { check_crc: true, force_prop_crc: false };
        prop_assert!(!matches!(check_record(&bytes, crc), RecordCheck::Message(_)));
        prop_assert!(matches!(check_record(&bytes, CheckOptions::default()), RecordCheck::Message(_)));
        if m.prop_crc {
            let force = CheckOptions { check_crc: true, force_prop_crc: true };
            prop_assert!(!matches!(check_record(&bytes, force), RecordCheck::Message(_)));
        }
    }

    /// encode → decode gives back every field.
    #[test]
    fn every_field_round_trips(m in msg()) {
        let bytes = m.encode();
        let crc = CheckOptions { check_crc: true, force_prop_crc: m.prop_crc };
        let RecordCheck::Message(h) = check_record(&bytes, crc) else {
            return Err(TestCaseError::fail(format!("valid record rejected: {m:?}")));
        };
        prop_assert_eq!(&h, &parse_header(&bytes).unwrap());
        prop_assert_eq!(h.total_size as usize, bytes.len());
        let v2 = m.topic.len() > 127;
        prop_assert_eq!(h.magic, if v2 { MAGIC_V2 } else { MAGIC_V1 });
        prop_assert_eq!(h.version(), if v2 { 2 } else { 1 });
        prop_assert_eq!(h.body_crc, crc32(&m.body));
        prop_assert_eq!((h.queue_id, h.flag), (m.queue_id, m.flag));
        prop_assert_eq!((h.queue_offset, h.physical_offset), (m.queue_offset, m.physical_offset));
        let (born, store) = (canonical(m.born), canonical(m.store));
        let mut expected_flag = m.sys_flag;
        if born.is_ipv6() { expected_flag |= sysflag::BORNHOST_V6; }
        if store.is_ipv6() { expected_flag |= sysflag::STOREHOST_V6; }
        prop_assert_eq!(h.sys_flag, expected_flag);
        prop_assert_eq!((h.born_host, h.store_host), (born, store));
        prop_assert_eq!((h.born_timestamp, h.store_timestamp), (m.born_timestamp, m.store_timestamp));
        prop_assert_eq!((h.reconsume_times, h.prepared_transaction_offset), (m.reconsume_times, m.prepared_transaction_offset));
        prop_assert_eq!(h.body(&bytes), &m.body[..]);
        prop_assert_eq!(h.topic(&bytes), m.topic.as_bytes());

        let mut expected: BTreeMap<String, String> =
            m.entries().into_iter().map(|(n, v)| (n.to_owned(), v.to_owned())).collect();
        let blob = h.properties(&bytes);
        if m.prop_crc {
            prop_assert!(property_crc_ok(&bytes, &h));
            let value = properties::get_raw(blob, "__CRC32#").unwrap();
            expected.insert("__CRC32#".into(), String::from_utf8(value.to_vec()).unwrap());
            prop_assert!(blob.ends_with(b"\x02") && blob[blob.len() - 20..].starts_with(b"__CRC32#\x01"));
        }
        let parsed: BTreeMap<String, String> =
            properties::parse(blob).into_iter().map(|(n, v)| (n.into_owned(), v.into_owned())).collect();
        prop_assert_eq!(parsed, expected);

        let levels = tags::parse_delay_levels(tags::DEFAULT_DELAY_LEVELS);
        let code = tags::tags_code(h.topic(&bytes), blob, h.store_timestamp, &levels).unwrap();
        let tags_value = m.entries().into_iter().find(|(n, _)| *n == "TAGS").map(|(_, v)| v);
        prop_assert_eq!(code, tags_value.map_or(0, |t| i64::from(rmq::java::string_hash(t))));
        if !m.prop_crc {
            let again = reencode(&bytes, &h);
            prop_assert_eq!(again.as_deref(), Some(&bytes[..]));
        }
    }
}
