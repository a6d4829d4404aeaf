//! Golden bytes from spec §16: the reference record, its variants, the end-of-file blank, CRC values.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;

use rmq::commitlog::CommitLog;
use rmq::config::CommitLogConfig;
use rmq::message::decode::{check_record, parse_header, property_crc_ok, CheckOptions, RecordCheck};
use rmq::message::encode::{encode_record, finish_record, EncodeInput, EncodeOptions};
use rmq::message::ids::offset_msg_id;
use rmq::message::properties::{encode_map, BROKER_MAP_CAPACITY};
use rmq::message::{crc32, tags};

const RECORD_A: &str = concat!(
    "000000dadaa320a769c865ed0000000300000000000000000000000500000000",
    "00000000000000000000018bcfe56800c0a800010000d4310000018bcfe5687b",
    "0a00000200002a9f0000000000000000000000000000000e48656c6c6f20526f",
    "636b65744d5109546f706963546573740068554e49515f4b4559014330413830",
    "30303141314232313842344141433230303030303030303030303002434c5553",
    "5445520144656661756c74436c757374657202544147530154616741024b4559",
    "53016f7264657231206f72646572320257414954017472756502",
);

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn host(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

const UNIQ: &str = "C0A80001A1B218B4AAC2000000000000";

fn props_a() -> Vec<u8> {
    let mut out = Vec::new();
    let entries = [
        ("UNIQ_KEY", UNIQ),
        ("WAIT", "true"),
        ("TAGS", "TagA"),
        ("KEYS", "order1 order2"),
        ("CLUSTER", "DefaultCluster"),
    ];
    encode_map(&entries, BROKER_MAP_CAPACITY, &mut out);
    out
}

fn input<'a>(topic: &'a str, props: &'a [u8], born: &str, store: &str, phys: i64) -> EncodeInput<'a> {
    EncodeInput {
        topic,
        queue_id: 3,
        flag: 0,
        body: b"Hello RocketMQ",
        properties: props,
        sys_flag: 0,
        born_timestamp: 1_700_000_000_000,
        born_host: host(born),
        store_host: host(store),
        store_timestamp: 0,
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        queue_offset: 0,
        physical_offset: phys,
    }
}

fn opts(prop_crc: bool) -> EncodeOptions {
    EncodeOptions { max_message_size: 4 * 1024 * 1024, auto_version: true, prop_crc, fix_separator: true }
}

fn encode(inp: &EncodeInput<'_>, prop_crc: bool) -> Vec<u8> {
    let mut buf = Vec::new();
    let rec = encode_record(inp, &opts(prop_crc), &mut buf).unwrap();
    finish_record(&mut buf, &rec, 5, inp.physical_offset, 1_700_000_000_123);
    buf
}

#[test]
fn reference_record_a_is_byte_exact() {
    let props = props_a();
    assert_eq!(props.len(), 104);
    let bytes = encode(&input("TopicTest", &props, "192.168.0.1:54321", "10.0.0.2:10911", 0), false);
    assert_eq!(bytes, unhex(RECORD_A));
    let h = parse_header(&bytes).unwrap();
    assert_eq!(h.total_size, 218);
    assert_eq!(h.body_crc, 1_774_740_973);
    assert_eq!((h.queue_id, h.queue_offset, h.physical_offset), (3, 5, 0));
    assert_eq!(h.store_timestamp, 1_700_000_000_123);
    assert_eq!(h.born_host, host("192.168.0.1:54321"));
    assert_eq!(h.store_host, host("10.0.0.2:10911"));
    assert_eq!(h.topic(&bytes), b"TopicTest");
    assert_eq!(offset_msg_id(h.store_host, h.physical_offset), "0A00000200002A9F0000000000000000");
    let levels = tags::parse_delay_levels(tags::DEFAULT_DELAY_LEVELS);
    let code = tags::tags_code(h.topic(&bytes), h.properties(&bytes), h.store_timestamp, &levels).unwrap();
    assert_eq!(code.to_be_bytes(), [0, 0, 0, 0, 0, 0x27, 0xA8, 0x07]);
    assert!(matches!(
        check_record(&bytes, CheckOptions { check_crc: true, force_prop_crc: false }),
        RecordCheck::Message(_)
    ));
}

#[test]
fn variant_b_ipv6_born_host() {
    let props = props_a();
    let b = encode(&input("TopicTest", &props, "[2001:db8::1]:54321", "10.0.0.2:10911", 218), false);
    assert_eq!(b.len(), 230);
    assert_eq!(&b[36..40], &[0, 0, 0, 0x10]);
    assert_eq!(&b[48..52], &[0x20, 0x01, 0x0d, 0xb8]);
    assert_eq!(&b[64..68], &[0, 0, 0xd4, 0x31]);
    assert_eq!(i64::from_be_bytes(b[68..76].try_into().unwrap()), 1_700_000_000_123);
    assert_eq!(&b[76..80], &[10, 0, 0, 2]);
    assert_eq!(i32::from_be_bytes(b[96..100].try_into().unwrap()), 14);
    let h = parse_header(&b).unwrap();
    assert_eq!(offset_msg_id(h.store_host, h.physical_offset), "0A00000200002A9F00000000000000DA");
}

#[test]
fn ipv6_store_host_and_both() {
    let props = props_a();
    let s = encode(&input("TopicTest", &props, "192.168.0.1:54321", "[2001:db8::2]:10911", 0), false);
    assert_eq!(s.len(), 230);
    assert_eq!(&s[36..40], &[0, 0, 0, 0x20]);
    let both = encode(&input("TopicTest", &props, "[2001:db8::1]:1", "[2001:db8::2]:10911", 0), false);
    assert_eq!(both.len(), 218 + 24);
    assert_eq!(&both[36..40], &[0, 0, 0, 0x30]);
    let h = parse_header(&both).unwrap();
    assert_eq!(offset_msg_id(h.store_host, 0).len(), 56);
    // IPv4-mapped IPv6 is stored as IPv4 (Java's Inet4Address).
    let mapped = encode(&input("TopicTest", &props, "[::ffff:192.168.0.1]:54321", "10.0.0.2:10911", 0), false);
    assert_eq!(mapped, unhex(RECORD_A));
}

#[test]
fn variant_c_v2_topic() {
    let props = props_a();
    let topic: String = "abc".chars().cycle().take(200).collect();
    let c = encode(&input(&topic, &props, "192.168.0.1:54321", "10.0.0.2:10911", 4096), false);
    assert_eq!(c.len(), 410);
    assert_eq!(&c[4..8], &[0xDA, 0xA3, 0x20, 0xAB]);
    assert_eq!(&c[102..104], &[0x00, 0xC8]);
    let t127 = "a".repeat(127);
    let v1 = encode(&input(&t127, &props, "192.168.0.1:54321", "10.0.0.2:10911", 0), false);
    assert_eq!(&v1[4..8], &[0xDA, 0xA3, 0x20, 0xA7]);
    assert_eq!(v1[102], 0x7F);
    let t128 = "a".repeat(128);
    let v2 = encode(&input(&t128, &props, "192.168.0.1:54321", "10.0.0.2:10911", 0), false);
    assert_eq!(&v2[4..8], &[0xDA, 0xA3, 0x20, 0xAB]);
    assert_eq!(parse_header(&v2).unwrap().topic(&v2), t128.as_bytes());
}

#[test]
fn variant_d_property_crc() {
    let props = props_a();
    let d = encode(&input("TopicTest", &props, "192.168.0.1:54321", "10.0.0.2:10911", 0), true);
    assert_eq!(d.len(), 238);
    assert_eq!(&d[112..114], &[0x00, 0x7C]);
    assert_eq!(&d[218..], b"__CRC32#\x019725818021\x02");
    assert_eq!(crc32(&d[..218]), 1_208_185_279);
    let h = parse_header(&d).unwrap();
    assert!(property_crc_ok(&d, &h));
    let force = CheckOptions { check_crc: true, force_prop_crc: true };
    assert!(matches!(check_record(&d, force), RecordCheck::Message(_)));
    for i in (8..218).step_by(7) {
        let mut bad = d.clone();
        bad[i] ^= 0x40;
        assert!(!matches!(check_record(&bad, force), RecordCheck::Message(_)), "flip at {i} accepted");
    }
    // Record A has no CRC property: forced verification rejects it.
    assert!(!matches!(check_record(&unhex(RECORD_A), force), RecordCheck::Message(_)));
    // Properties without a trailing separator get one before the tail.
    let d2 = encode(&input("TopicTest", &props[..props.len() - 1], "192.168.0.1:54321", "10.0.0.2:10911", 0), true);
    assert_eq!(d2.len(), 238);
    assert_eq!(&d2[..218], &d[..218]);
}

#[test]
fn variant_e_empty_body_crc_on() {
    let mut inp = input("TopicTest", b"", "192.168.0.1:54321", "10.0.0.2:10911", 0);
    inp.body = b"";
    let e = encode(&inp, true);
    assert_eq!(e.len(), 120);
    assert_eq!(&e[8..12], &[0, 0, 0, 0]);
    assert_eq!(&e[100..], b"__CRC32#\x011307068091\x02");
    assert_eq!(crc32(&e[..100]), 1_908_607_031);
}

#[test]
fn crc_vectors_16_5() {
    assert_eq!(crc32(b"123456789"), 1_274_296_614);
    assert_eq!(crc32(b"Hello RocketMQ"), 1_774_740_973);
    assert_eq!(crc32(b""), 0);
}

#[test]
fn end_of_file_blank_and_roll_16_3() {
    let dir = tempfile::tempdir().unwrap();
    let size = 4096u64;
    let cfg = CommitLogConfig { mapped_file_size_commit_log: size, ..CommitLogConfig::default() };
    let (log, _) = CommitLog::open(dir.path(), cfg.clone()).unwrap();
    let props = props_a();
    let one = encode(&input("TopicTest", &props, "192.168.0.1:54321", "10.0.0.2:10911", 0), false);
    let append = |log: &CommitLog| {
        let mut buf = Vec::new();
        let rec = encode_record(
            &input("TopicTest", &props, "192.168.0.1:54321", "10.0.0.2:10911", 0),
            &opts(false),
            &mut buf,
        )
        .unwrap();
        log.append(&mut buf, &[rec], |_| 0).unwrap()
    };
    // 18 records of 218 bytes = 3924; 172 bytes remain; the 19th (218 + 8 > 172) rolls.
    for i in 0..18u64 {
        assert_eq!(append(&log).first_offset, i * 218);
    }
    let rolled = append(&log);
    assert_eq!(rolled.first_offset, size);
    let seg0 = std::fs::read(dir.path().join("00000000000000000000")).unwrap();
    assert_eq!(&seg0[3924..3932], &[0, 0, 0, 172, 0xCB, 0xD4, 0x31, 0x94]);
    assert!(dir.path().join("00000000000000004096").exists());
    // The rolled record is record A with its own physical offset.
    let seg1 = std::fs::read(dir.path().join("00000000000000004096")).unwrap();
    assert_eq!(i64::from_be_bytes(seg1[28..36].try_into().unwrap()), 4096);
    assert_eq!(&seg1[36..56], &one[36..56]);
    assert_eq!(&seg1[64..218], &one[64..218]);
    // Scans step over the blank.
    let mut at = 0;
    let mut n = 0;
    while let Some((rec, next)) = log.next_record(at).unwrap() {
        assert_eq!(rec.offset(), if n < 18 { n * 218 } else { 4096 });
        n += 1;
        at = next;
    }
    assert_eq!(n, 19);
    // Exactly L + 8 == remaining fits: 4096 - 218 = 3878 bytes left in segment 1 after one record.
    drop(log);
    let (log, report) = CommitLog::open(dir.path(), cfg).unwrap();
    assert_eq!(report.end_offset, 4096 + 218);
    assert_eq!(report.discarded_bytes, 0);
    let big_body = vec![7u8; 3878 - 8 - (218 - 14)];
    let mut buf = Vec::new();
    let mut inp = input("TopicTest", &props, "192.168.0.1:54321", "10.0.0.2:10911", 0);
    inp.body = &big_body;
    let rec = encode_record(&inp, &opts(false), &mut buf).unwrap();
    assert_eq!(rec.len + 8, 3878);
    assert_eq!(log.append(&mut buf, &[rec], |_| 0).unwrap().first_offset, 4096 + 218);
    assert_eq!(log.max_offset(), 8192 - 8);
    // A record larger than a segment is refused and writes nothing.
    let huge = vec![0u8; 5000];
    inp.body = &huge;
    let mut buf = Vec::new();
    let rec = encode_record(&inp, &opts(false), &mut buf).unwrap();
    assert!(log.append(&mut buf, &[rec], |_| 0).is_err());
    assert_eq!(log.max_offset(), 8192 - 8);
}

#[test]
fn index_slot_vectors_16_4() {
    let slot = |key: &str| {
        let h = rmq::java::string_hash(key);
        let key_hash = if h == i32::MIN { 0 } else { h.abs() };
        key_hash % 5_000_000
    };
    assert_eq!(slot("TopicTest#KEY1"), 1_969_516);
    assert_eq!(slot("TopicTest#ogaQmc"), 0);
    assert_eq!(slot("TopicTest#order1"), 2_216_219);
    assert_eq!(slot("TopicTest#order2"), 2_216_218);
    assert_eq!(slot("TopicTest#C0A80001A1B218B4AAC2000000000000"), 4_268_817);
    let levels = tags::parse_delay_levels(tags::DEFAULT_DELAY_LEVELS);
    let code = tags::tags_code(b"T", b"TAGS\x01polygenelubricants\x02", 0, &levels).unwrap();
    assert_eq!(code.to_be_bytes(), [0xFF, 0xFF, 0xFF, 0xFF, 0x80, 0, 0, 0]);
}
