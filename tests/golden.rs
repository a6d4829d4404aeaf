//! Golden bytes from spec §16: the reference record A and its variants B–E, the end-of-file blank and roll,
//! tagsCode and index-slot values, CRC values, message ids and size limits. Each test fails if one byte drifts.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;

use rmq::commitlog::CommitLog;
use rmq::config::{CommitLogConfig, StoreConfig};
use rmq::message::decode::{check_record, parse_header, property_crc_ok, CheckOptions, Invalid, RecordCheck};
use rmq::message::encode::{
    encode_record, finish_record, parse_crc_value, strip_crc_property, EncodeInput, EncodeOptions, EncodedRecord,
};
use rmq::message::ids::{decode_offset_msg_id, offset_msg_id};
use rmq::message::properties::{self, encode_map, BROKER_MAP_CAPACITY};
use rmq::message::{crc32, sysflag, tags, MAGIC_V1, MAGIC_V2};
use rmq::store::{MessageStore, PutMessage};
use rmq::Error;

/// Spec §16.1, the hex dump exactly as printed there (offsets are skipped by [`unhex`]).
const RECORD_A: &str = "
0000: 00 00 00 da da a3 20 a7 69 c8 65 ed 00 00 00 03
0010: 00 00 00 00 00 00 00 00 00 00 00 05 00 00 00 00
0020: 00 00 00 00 00 00 00 00 00 00 01 8b cf e5 68 00
0030: c0 a8 00 01 00 00 d4 31 00 00 01 8b cf e5 68 7b
0040: 0a 00 00 02 00 00 2a 9f 00 00 00 00 00 00 00 00
0050: 00 00 00 00 00 00 00 0e 48 65 6c 6c 6f 20 52 6f
0060: 63 6b 65 74 4d 51 09 54 6f 70 69 63 54 65 73 74
0070: 00 68 55 4e 49 51 5f 4b 45 59 01 43 30 41 38 30
0080: 30 30 31 41 31 42 32 31 38 42 34 41 41 43 32 30
0090: 30 30 30 30 30 30 30 30 30 30 30 02 43 4c 55 53
00a0: 54 45 52 01 44 65 66 61 75 6c 74 43 6c 75 73 74
00b0: 65 72 02 54 41 47 53 01 54 61 67 41 02 4b 45 59
00c0: 53 01 6f 72 64 65 72 31 20 6f 72 64 65 72 32 02
00d0: 57 41 49 54 01 74 72 75 65 02
";

/// Record A's consume-queue entry: offset i64 | size i32 | tagsCode i64.
const CQ_ENTRY_A: &str = "0000: 00 00 00 00 00 00 00 00 00 00 00 da 00 00 00 00 00 27 a8 07";

/// Hex pairs of a dump; a leading `xxxx:` offset on each line is ignored.
fn unhex(dump: &str) -> Vec<u8> {
    dump.lines()
        .flat_map(|line| line.split_once(':').map_or(line, |(_, rest)| rest).split_whitespace())
        .map(|pair| u8::from_str_radix(pair, 16).unwrap())
        .collect()
}

fn host(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

const UNIQ: &str = "C0A80001A1B218B4AAC2000000000000";
const BORN: &str = "192.168.0.1:54321";
const STORE: &str = "10.0.0.2:10911";
const STORE_TS: i64 = 1_700_000_000_123;

/// Record A's properties, inserted into `HashMap(128)` in the spec's order.
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

/// Encodes and patches as `doAppend` does: QUEUEOFFSET 5, the given PHYSICALOFFSET, STORETIMESTAMP.
fn encode(inp: &EncodeInput<'_>, prop_crc: bool) -> Vec<u8> {
    let mut buf = Vec::new();
    let rec = encode_record(inp, &opts(prop_crc), &mut buf).unwrap();
    finish_record(&mut buf, &rec, 5, inp.physical_offset, STORE_TS);
    buf
}

fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}

fn be_i64(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().unwrap())
}

const CRC: CheckOptions = CheckOptions { check_crc: true, force_prop_crc: false };
const FORCE: CheckOptions = CheckOptions { check_crc: true, force_prop_crc: true };

fn tags_code(record: &[u8]) -> i64 {
    let h = parse_header(record).unwrap();
    let levels = tags::parse_delay_levels(tags::DEFAULT_DELAY_LEVELS);
    tags::tags_code(h.topic(record), h.properties(record), h.store_timestamp, &levels).unwrap()
}

#[test]
fn reference_record_a_is_byte_exact() {
    let props = props_a();
    assert_eq!(
        props,
        b"UNIQ_KEY\x01C0A80001A1B218B4AAC2000000000000\x02CLUSTER\x01DefaultCluster\x02TAGS\x01TagA\x02\
          KEYS\x01order1 order2\x02WAIT\x01true\x02"
    );
    assert_eq!(props.len(), 104);
    let bytes = encode(&input("TopicTest", &props, BORN, STORE, 0), false);
    let golden = unhex(RECORD_A);
    assert_eq!(golden.len(), 218);
    assert_eq!(bytes, golden);
}

#[test]
fn reference_record_a_decodes_field_by_field() {
    let bytes = unhex(RECORD_A);
    let RecordCheck::Message(h) = check_record(&bytes, CRC) else { panic!("record A rejected") };
    assert_eq!(h, parse_header(&bytes).unwrap());
    assert_eq!((h.total_size, h.magic, h.version()), (218, MAGIC_V1, 1));
    assert_eq!(h.body_crc, 1_774_740_973);
    assert_eq!(h.body_crc, 0x69C8_65ED);
    assert_eq!((h.queue_id, h.flag, h.queue_offset, h.physical_offset), (3, 0, 5, 0));
    assert_eq!(h.sys_flag, 0);
    assert_eq!(h.born_timestamp, 1_700_000_000_000);
    assert_eq!(h.born_host, host(BORN));
    assert_eq!(h.store_timestamp, STORE_TS);
    assert_eq!(h.store_host, host(STORE));
    assert_eq!((h.reconsume_times, h.prepared_transaction_offset), (0, 0));
    assert_eq!((h.body.clone(), h.topic.clone(), h.properties.clone()), (88..102, 103..112, 114..218));
    assert_eq!(h.body(&bytes), b"Hello RocketMQ");
    assert_eq!(h.topic(&bytes), b"TopicTest");
    assert_eq!(h.properties(&bytes), &props_a()[..]);
    let parsed = properties::parse(h.properties(&bytes));
    let names: Vec<&str> = parsed.iter().map(|(n, _)| n.as_ref()).collect();
    assert_eq!(names, ["UNIQ_KEY", "CLUSTER", "TAGS", "KEYS", "WAIT"]);
    assert_eq!(properties::get_raw(h.properties(&bytes), "KEYS"), Some(&b"order1 order2"[..]));

    let id = offset_msg_id(h.store_host, h.physical_offset);
    assert_eq!(id, "0A00000200002A9F0000000000000000");
    assert_eq!(decode_offset_msg_id(&id), Some((host(STORE), 0)));

    // The consume-queue entry RocketMQ writes for it: offset, TOTALSIZE, tagsCode ("TagA".hashCode()).
    let code = tags_code(&bytes);
    assert_eq!(code, 2_598_919);
    let mut cq = Vec::new();
    cq.extend_from_slice(&h.physical_offset.to_be_bytes());
    cq.extend_from_slice(&h.total_size.to_be_bytes());
    cq.extend_from_slice(&code.to_be_bytes());
    assert_eq!(cq, unhex(CQ_ENTRY_A));
}

#[test]
fn reference_record_a_through_the_store() {
    // The same message sent through MessageStore::put: the properties the broker builds (client map, then
    // HashMap(128) with CLUSTER added) must come out in record A's order. Only QUEUEOFFSET (first message of
    // the queue) and STORETIMESTAMP (now) differ.
    let dir = tempfile::tempdir().unwrap();
    let mut config = StoreConfig::default();
    config.commit_log.mapped_file_size_commit_log = 64 * 1024;
    config.broker.store_host = host(STORE);
    let store = MessageStore::open(dir.path(), config).unwrap();
    let user = [("UNIQ_KEY", UNIQ)];
    let msg = PutMessage {
        tags: Some("TagA"),
        keys: Some("order1 order2"),
        properties: &user,
        born_host: host(BORN),
        born_timestamp: Some(1_700_000_000_000),
        ..PutMessage::new("TopicTest", 3, b"Hello RocketMQ")
    };
    let r = store.put(&msg).unwrap();
    assert_eq!((r.offsets.as_slice(), r.queue_offset, r.wrote_bytes), (&[0u64][..], 0, 218));
    assert_eq!(r.msg_ids(), ["0A00000200002A9F0000000000000000"]);
    let rec = store.read(0).unwrap().unwrap();
    let mut bytes = rec.bytes().to_vec();
    assert_eq!(be_i64(&bytes, 20), 0);
    assert_eq!(be_i64(&bytes, 56), r.store_timestamp);
    bytes[20..28].copy_from_slice(&5i64.to_be_bytes());
    bytes[56..64].copy_from_slice(&STORE_TS.to_be_bytes());
    assert_eq!(bytes, unhex(RECORD_A));
}

#[test]
fn variant_b_ipv6_born_host() {
    let props = props_a();
    let b = encode(&input("TopicTest", &props, "[2001:db8::1]:54321", STORE, 218), false);
    assert_eq!(b.len(), 230);
    assert_eq!(be_i32(&b, 0), 230);
    assert_eq!(be_i32(&b, 36), 0x10);
    let born: [u8; 20] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0, 0, 0xd4, 0x31];
    assert_eq!(&b[48..68], &born);
    assert_eq!(be_i64(&b, 68), STORE_TS);
    assert_eq!(&b[76..84], &[10, 0, 0, 2, 0, 0, 0x2a, 0x9f]);
    assert_eq!(be_i32(&b, 84), 0); // RECONSUMETIMES
    assert_eq!(be_i32(&b, 96), 14); // BODYLENGTH
    assert_eq!(&b[100..114], b"Hello RocketMQ");
    // Everything after the born host is record A shifted by 12.
    assert_eq!(&b[68..], &unhex(RECORD_A)[56..]);
    let h = parse_header(&b).unwrap();
    assert_eq!((h.born_host, h.store_timestamp, h.physical_offset), (host("[2001:db8::1]:54321"), STORE_TS, 218));
    assert_eq!(offset_msg_id(h.store_host, h.physical_offset), "0A00000200002A9F00000000000000DA");
    assert!(matches!(check_record(&b, CRC), RecordCheck::Message(_)));
}

#[test]
fn ipv6_store_host_and_both() {
    let props = props_a();
    let store_v6 = "[2001:db8::2]:10911";
    let s = encode(&input("TopicTest", &props, BORN, store_v6, 0), false);
    assert_eq!(s.len(), 230);
    assert_eq!(be_i32(&s, 36), 0x20);
    assert_eq!(be_i64(&s, 56), STORE_TS); // born host is IPv4: STORETIMESTAMP stays at 56
    assert_eq!(&s[64..68], &[0x20, 0x01, 0x0d, 0xb8]);
    assert_eq!(&s[80..84], &[0, 0, 0x2a, 0x9f]);
    assert_eq!(be_i32(&s, 96), 14);
    let h = parse_header(&s).unwrap();
    let id = offset_msg_id(h.store_host, h.physical_offset);
    assert_eq!(id, "20010DB800000000000000000000000200002A9F0000000000000000");
    assert_eq!(decode_offset_msg_id(&id), Some((host(store_v6), 0)));

    let both = encode(&input("TopicTest", &props, "[2001:db8::1]:54321", store_v6, 0), false);
    assert_eq!(both.len(), 218 + 24);
    assert_eq!(be_i32(&both, 0), 242);
    assert_eq!(be_i32(&both, 36), 0x30);
    assert_eq!(be_i64(&both, 68), STORE_TS);
    assert_eq!(&both[76..80], &[0x20, 0x01, 0x0d, 0xb8]);
    assert_eq!(be_i32(&both, 108), 14);
    assert_eq!(&both[112..126], b"Hello RocketMQ");
    let h = parse_header(&both).unwrap();
    assert_eq!((h.born_host, h.store_host), (host("[2001:db8::1]:54321"), host(store_v6)));
    assert_eq!(offset_msg_id(h.store_host, 0).len(), 56);

    // IPv4-mapped IPv6 addresses are Inet4Address to Java: stored in 4 bytes, no v6 bit.
    let mapped = encode(&input("TopicTest", &props, "[::ffff:192.168.0.1]:54321", "[::ffff:10.0.0.2]:10911", 0), false);
    assert_eq!(mapped, unhex(RECORD_A));
    // A caller-supplied v6 bit never contradicts the address family.
    let mut lying = input("TopicTest", &props, BORN, STORE, 0);
    lying.sys_flag = sysflag::BORNHOST_V6 | sysflag::STOREHOST_V6;
    assert_eq!(encode(&lying, false), unhex(RECORD_A));
}

#[test]
fn variant_c_v2_topic_and_the_127_128_boundary() {
    let props = props_a();
    let topic: String = "abc".chars().cycle().take(200).collect();
    let c = encode(&input(&topic, &props, BORN, STORE, 4096), false);
    assert_eq!(c.len(), 410);
    assert_eq!(be_i32(&c, 0), 410);
    assert_eq!(&c[4..8], &[0xDA, 0xA3, 0x20, 0xAB]);
    assert_eq!(be_i64(&c, 28), 4096);
    assert_eq!(&c[102..104], &[0x00, 0xC8]);
    assert_eq!(&c[104..107], b"abc");
    assert_eq!(&c[304..306], &[0x00, 0x68]); // PROPERTIESLENGTH 104
    let h = parse_header(&c).unwrap();
    assert_eq!((h.magic, h.version()), (MAGIC_V2, 2));
    assert_eq!(h.topic(&c), topic.as_bytes());
    assert_eq!(h.properties(&c), &props[..]);

    let t127 = "a".repeat(127);
    let v1 = encode(&input(&t127, &props, BORN, STORE, 0), false);
    assert_eq!(&v1[4..8], &[0xDA, 0xA3, 0x20, 0xA7]);
    assert_eq!(v1[102], 0x7F);
    assert_eq!(v1.len(), 91 + 14 + 127 + 104);
    let t128 = "a".repeat(128);
    let v2 = encode(&input(&t128, &props, BORN, STORE, 0), false);
    assert_eq!(&v2[4..8], &[0xDA, 0xA3, 0x20, 0xAB]);
    assert_eq!(&v2[102..104], &[0x00, 0x80]);
    assert_eq!(v2.len(), 92 + 14 + 128 + 104);
    assert_eq!(parse_header(&v2).unwrap().topic(&v2), t128.as_bytes());

    // Without autoMessageVersionOnTopicLen a 128-byte topic cannot be written as v1 (Java would write the
    // length byte 0x80 and the record would not decode): refused.
    let mut buf = Vec::new();
    let no_auto = EncodeOptions { auto_version: false, ..opts(false) };
    let err = encode_record(&input(&t128, &props, BORN, STORE, 0), &no_auto, &mut buf).unwrap_err();
    assert!(matches!(err, Error::IllegalMessage(_)), "{err:?}");
    assert!(buf.is_empty());
    // 64 two-byte chars: 64 UTF-16 units (v1 by the Java rule) but 128 UTF-8 bytes: refused too.
    let wide = "é".repeat(64);
    assert!(matches!(
        encode_record(&input(&wide, &props, BORN, STORE, 0), &opts(false), &mut buf),
        Err(Error::IllegalMessage(_))
    ));
}

#[test]
fn variant_d_property_crc() {
    let props = props_a();
    let d = encode(&input("TopicTest", &props, BORN, STORE, 0), true);
    assert_eq!(d.len(), 238);
    assert_eq!(be_i32(&d, 0), 238);
    assert_eq!(&d[112..114], &[0x00, 0x7C]);
    let tail = unhex("5F 5F 43 52 43 33 32 23 01 39 37 32 35 38 31 38 30 32 31 02");
    assert_eq!(&d[218..], &tail[..]);
    assert_eq!(&d[218..], b"__CRC32#\x019725818021\x02");
    assert_eq!(crc32(&d[..218]), 1_208_185_279);
    // Apart from TOTALSIZE and PROPERTIESLENGTH, the first 218 bytes are record A's.
    let a = unhex(RECORD_A);
    assert_eq!(&d[4..112], &a[4..112]);
    assert_eq!(&d[114..218], &a[114..218]);

    let h = parse_header(&d).unwrap();
    let value = properties::get_raw(h.properties(&d), "__CRC32#").unwrap();
    assert_eq!(value, b"9725818021");
    assert_eq!(parse_crc_value(value), 1_208_185_279);
    assert!(property_crc_ok(&d, &h));
    assert!(matches!(check_record(&d, FORCE), RecordCheck::Message(_)));
    assert!(matches!(check_record(&d, CRC), RecordCheck::Message(_)));

    // A flipped byte anywhere in the covered bytes, or in the stored digits, fails forced verification.
    for i in (0..218).chain(227..237) {
        for flip in [0x01u8, 0x80] {
            let mut bad = d.clone();
            bad[i] ^= flip;
            if let Ok(h) = parse_header(&bad) {
                assert!(!property_crc_ok(&bad, &h), "flip 0x{flip:02X} at {i} accepted by property_crc_ok");
            }
            assert!(!matches!(check_record(&bad, FORCE), RecordCheck::Message(_)), "flip at {i} accepted");
        }
    }
    // Record A carries no CRC property: forced verification rejects it, body-CRC verification accepts it.
    assert!(matches!(check_record(&a, FORCE), RecordCheck::Invalid { reason: Invalid::PropertyCrc, .. }));
    assert!(matches!(check_record(&a, CRC), RecordCheck::Message(_)));

    // Properties without the trailing separator get one before the tail: the same record.
    let d2 = encode(&input("TopicTest", &props[..props.len() - 1], BORN, STORE, 0), true);
    assert_eq!(d2, d);
    // A stale __CRC32# entry anywhere in the producer's properties is removed before the tail is added.
    for stale in [
        [&b"__CRC32#\x010000000001\x02"[..], &props].concat(),
        [&props[..42], b"__CRC32#\x01123\x02", &props[42..]].concat(),
        [&props[..], b"__CRC32#\x019725818021\x02"].concat(),
    ] {
        assert_eq!(strip_crc_property(&stale).as_ref(), &props[..]);
    }
}

#[test]
fn variant_e_empty_body_no_properties_crc_on() {
    let mut inp = input("TopicTest", b"", BORN, STORE, 0);
    inp.body = b"";
    let e = encode(&inp, true);
    assert_eq!(e.len(), 120);
    assert_eq!(be_i32(&e, 0), 120);
    assert_eq!(be_i32(&e, 8), 0); // BODYCRC of an empty body
    assert_eq!(be_i32(&e, 84), 0); // BODYLENGTH
    assert_eq!(e[88], 9);
    assert_eq!(&e[98..100], &[0x00, 0x14]); // PROPERTIESLENGTH 20
    assert_eq!(&e[100..], b"__CRC32#\x011307068091\x02");
    assert_eq!(crc32(&e[..100]), 1_908_607_031);
    assert!(matches!(check_record(&e, FORCE), RecordCheck::Message(_)));
    let h = parse_header(&e).unwrap();
    assert!(h.body.is_empty());
}

#[test]
fn crc_vectors_16_5() {
    assert_eq!(crc32(b"123456789"), 1_274_296_614);
    assert_eq!(crc32(b"123456789") as u32, 0xCBF4_3926 & 0x7FFF_FFFF);
    assert_eq!(crc32(b"Hello RocketMQ"), 1_774_740_973);
    assert_eq!(crc32(b""), 0);
    // A flipped body byte is caught when CRCs are checked, and only then.
    let mut a = unhex(RECORD_A);
    a[90] ^= 0x01;
    assert!(matches!(check_record(&a, CRC), RecordCheck::Invalid { reason: Invalid::BodyCrc { .. }, .. }));
    assert!(matches!(check_record(&a, CheckOptions::default()), RecordCheck::Message(_)));
}

fn log(dir: &std::path::Path, size: u64) -> CommitLog {
    CommitLog::open(dir, CommitLogConfig { mapped_file_size_commit_log: size, ..CommitLogConfig::default() }).unwrap().0
}

/// Appends one record of exactly `len` bytes (topic `TopicTest`, no properties: 100 + body).
fn append_len(log: &CommitLog, len: usize) -> u64 {
    append_batch(log, &[len]).0[0]
}

/// Appends records of the given lengths as one unit; returns their offsets.
fn append_batch(log: &CommitLog, lens: &[usize]) -> (Vec<u64>, rmq::Result<()>) {
    let bodies: Vec<Vec<u8>> = lens.iter().map(|&l| vec![0x5A; l - 100]).collect();
    let mut buf = Vec::new();
    let recs: Vec<EncodedRecord> = bodies
        .iter()
        .map(|b| {
            let mut inp = input("TopicTest", b"", BORN, STORE, 0);
            inp.body = b;
            encode_record(&inp, &opts(false), &mut buf).unwrap()
        })
        .collect();
    assert_eq!(recs.iter().map(|r| r.len).collect::<Vec<_>>(), lens);
    match log.append(&mut buf, &recs, |i| i as i64) {
        Ok(a) => (recs.iter().map(|r| a.first_offset + r.start as u64).collect(), Ok(())),
        Err(e) => (Vec::new(), Err(e)),
    }
}

const BLANK_1824: &str = "00 00 07 20 CB D4 31 94";
const BLANK_8: &str = "00 00 00 08 CB D4 31 94";

#[test]
fn end_of_file_blank_16_3() {
    // The spec's 1 GiB example scaled to 4 KiB segments: write position 2272 leaves the same 1824 bytes.
    let size = 4096u64;
    let dir = tempfile::tempdir().unwrap();
    let log = log(dir.path(), size);
    assert_eq!(append_len(&log, 1136), 0);
    assert_eq!(append_len(&log, 1136), 1136);
    assert_eq!(log.max_offset(), 2272);
    // 1817 + 8 > 1824: the blank goes at 2272 and the record at the start of the next file.
    assert_eq!(append_len(&log, 1817), size);
    let seg0 = std::fs::read(dir.path().join("00000000000000000000")).unwrap();
    assert_eq!(&seg0[2272..2280], &unhex(BLANK_1824)[..]);
    assert!(seg0[2280..].iter().all(|&b| b == 0), "only 8 bytes of blank are written");
    let seg1 = std::fs::read(dir.path().join("00000000000000004096")).unwrap();
    assert_eq!(seg1.len(), 4096);
    assert_eq!((be_i32(&seg1, 0), be_i64(&seg1, 28)), (1817, 4096));
    assert_eq!(be_i64(&seg1, 20), 0, "the rolled record keeps its queue offset");
    // Reads: the blank is not a record; scans step over it to the next file start.
    assert!(log.read(2272).unwrap().is_none());
    assert!(matches!(check_record(&seg0[2272..], CRC), RecordCheck::Blank { size: 1824 }));
    let (rec, next) = log.next_record(1136).unwrap().unwrap();
    assert_eq!((rec.offset(), next), (1136, 2272));
    let (rec, next) = log.next_record(2272).unwrap().unwrap();
    assert_eq!((rec.offset(), next), (4096, 4096 + 1817));

    // 1816 + 8 == 1824 fits, leaving exactly 8 bytes, which the next append fills with an 8-byte blank.
    let dir = tempfile::tempdir().unwrap();
    let log2 = log_at_2272(dir.path());
    assert_eq!(append_len(&log2, 1816), 2272);
    assert_eq!(log2.max_offset(), size - 8);
    assert_eq!(append_len(&log2, 200), size);
    let seg0 = std::fs::read(dir.path().join("00000000000000000000")).unwrap();
    assert_eq!(&seg0[4088..], &unhex(BLANK_8)[..]);
    let names: Vec<String> = {
        let mut n: Vec<String> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        n.sort();
        n
    };
    assert_eq!(names, ["00000000000000000000", "00000000000000004096"]);
}

fn log_at_2272(dir: &std::path::Path) -> CommitLog {
    let log = log(dir, 4096);
    append_len(&log, 1136);
    append_len(&log, 1136);
    log
}

#[test]
fn batch_that_does_not_fit_as_a_whole_moves_entirely_16_3() {
    let dir = tempfile::tempdir().unwrap();
    let log = log_at_2272(dir.path());
    // 600 + 600 fit in 1824 with the blank; the third member does not: all three go to the next file.
    let (offsets, res) = append_batch(&log, &[600, 600, 620]);
    res.unwrap();
    assert_eq!(offsets, [4096, 4696, 5296]);
    let seg0 = std::fs::read(dir.path().join("00000000000000000000")).unwrap();
    assert_eq!(&seg0[2272..2280], &unhex(BLANK_1824)[..]);
    assert!(seg0[2280..].iter().all(|&b| b == 0));
    for (i, off) in offsets.iter().enumerate() {
        let rec = log.read(*off).unwrap().unwrap();
        assert_eq!((rec.header.physical_offset, rec.header.queue_offset), (*off as i64, i as i64));
    }
    // A batch that fits exactly (sum + 8 == remaining) stays.
    let dir = tempfile::tempdir().unwrap();
    let log = log_at_2272(dir.path());
    let (offsets, res) = append_batch(&log, &[900, 916]);
    res.unwrap();
    assert_eq!(offsets, [2272, 3172]);
    assert_eq!(log.max_offset(), 4088);
}

#[test]
fn record_larger_than_a_segment_is_refused_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = log_at_2272(dir.path());
    let before = std::fs::read(dir.path().join("00000000000000000000")).unwrap();
    // 4089 + 8 > 4096: could never fit, so no blank is written and no file is created.
    let (_, res) = append_batch(&log, &[4089]);
    assert!(matches!(res, Err(Error::MessageTooLarge(_))));
    let (_, res) = append_batch(&log, &[2000, 2089]);
    assert!(matches!(res, Err(Error::MessageTooLarge(_))));
    assert_eq!(log.max_offset(), 2272);
    assert_eq!(std::fs::read(dir.path().join("00000000000000000000")).unwrap(), before);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    // 4088 + 8 == 4096 is the largest record a 4 KiB segment takes: it rolls and fills the next file.
    assert_eq!(append_len(&log, 4088), 4096);
}

#[test]
fn reader_rules_at_the_end_of_data_16_3() {
    for short in [&[][..], &[0u8; 4][..], &[0x00, 0x00, 0x00, 0xda][..]] {
        assert!(matches!(check_record(short, CRC), RecordCheck::Invalid { reason: Invalid::Truncated, .. }));
    }
    assert!(matches!(check_record(&[0u8; 64], CRC), RecordCheck::Invalid { reason: Invalid::BadMagic(0), .. }));
    // A record cut short of its TOTALSIZE.
    let a = unhex(RECORD_A);
    assert!(matches!(check_record(&a[..217], CRC), RecordCheck::Invalid { reason: Invalid::Truncated, .. }));
    // TOTALSIZE that disagrees with the fields (calMsgLength) reports the stored size, as RocketMQ does.
    let mut m = a.clone();
    m.extend_from_slice(&[0; 4]);
    m[0..4].copy_from_slice(&222i32.to_be_bytes());
    assert!(matches!(
        check_record(&m, CRC),
        RecordCheck::Invalid { reason: Invalid::SizeMismatch { stored: 222, computed: 218 }, size: Some(222) }
    ));
}

#[test]
fn hashes_and_tags_code_16_4() {
    let props = |tags: &[u8]| [&b"TAGS\x01"[..], tags, b"\x02"].concat();
    let levels = tags::parse_delay_levels(tags::DEFAULT_DELAY_LEVELS);
    let code = |topic: &[u8], p: &[u8]| tags::tags_code(topic, p, STORE_TS, &levels).unwrap();
    // tagsCode goes into the consume queue as a big-endian i64, sign-extended from the i32 hash.
    for (tag, hash, cq) in [
        ("TagA", 2_598_919, "00 00 00 00 00 27 A8 07"),
        ("TagA||TagB", 1_789_476_431, "00 00 00 00 6A A9 3E 4F"),
        ("标签", 857_175, "00 00 00 00 00 0D 14 57"),
        ("😀", 1_772_899, "00 00 00 00 00 1B 0D 63"),
        ("polygenelubricants", -2_147_483_648, "FF FF FF FF 80 00 00 00"),
    ] {
        assert_eq!(rmq::java::string_hash(tag), hash, "{tag}");
        let c = code(b"TopicTest", &props(tag.as_bytes()));
        assert_eq!(c, i64::from(hash), "{tag}");
        assert_eq!(c.to_be_bytes().to_vec(), unhex(cq), "{tag}");
        // Subscriptions compare (int) tagsCode with the tag's hash.
        assert_eq!(c as i32, hash);
    }
    assert_eq!("标签".len(), 6);
    // MULTI_TAGS_FLAG does not split the value: a record with that flag still hashes the whole string.
    let p = props(b"TagA||TagB");
    let mut inp = input("TopicTest", &p, BORN, STORE, 0);
    inp.sys_flag = sysflag::MULTI_TAGS;
    let rec = encode(&inp, false);
    assert_eq!(tags_code(&rec), 1_789_476_431);
    // No TAGS, or an empty one (dropped by the parser): 0.
    assert_eq!(code(b"TopicTest", b"KEYS\x01a\x02"), 0);
    assert_eq!(code(b"TopicTest", b"TAGS\x01\x02"), 0);
    // Malformed UTF-8 inside TAGS is hashed as Java decodes it.
    assert_eq!(code(b"T", &props(&[0xC3, 0x28])), 2_031_563);
    assert_eq!(code(b"T", &props(&[0xED, 0xA0, 0x80])), 65_533);
    assert_eq!(code(b"T", &props(&[0x80, 0x80])), 2_097_056);
    // SCHEDULE_TOPIC_XXXX: deliver time for DELAY > 0, clamped to the table; ignored elsewhere.
    let sched = tags::SCHEDULE_TOPIC.as_bytes();
    assert_eq!(code(sched, b"DELAY\x013\x02"), 1_700_000_010_123);
    assert_eq!(code(sched, b"DELAY\x0199\x02"), 1_700_007_200_123);
    assert_eq!(code(sched, b"TAGS\x01TagA\x02DELAY\x010\x02"), 2_598_919);
    assert_eq!(code(b"TopicTest", b"DELAY\x013\x02"), 0);
    assert!(tags::tags_code(sched, b"DELAY\x01abc\x02", STORE_TS, &levels).is_err());
}

#[test]
fn index_slots_16_4() {
    // keyHash = abs(hashCode) with abs(Integer.MIN_VALUE) forced to 0; slot = keyHash % 5 000 000;
    // slot byte position = 40-byte header + 4 × slot.
    let slot = |key: &str| {
        let h = rmq::java::string_hash(key);
        let key_hash = if h == i32::MIN { 0 } else { h.abs() };
        assert!(key_hash >= 0);
        key_hash % 5_000_000
    };
    for (key, hash, expected) in [
        ("TopicTest#KEY1", -1_656_969_516, 1_969_516),
        ("TopicTest#ogaQmc", i32::MIN, 0),
        ("TopicTest#order1", -2_137_216_219, 2_216_219),
        ("TopicTest#order2", -2_137_216_218, 2_216_218),
        ("TopicTest#C0A80001A1B218B4AAC2000000000000", -2_044_268_817, 4_268_817),
    ] {
        assert_eq!(rmq::java::string_hash(key), hash, "{key}");
        assert_eq!(slot(key), expected, "{key}");
    }
    assert_eq!(40 + 4 * slot("TopicTest#KEY1"), 7_878_104);
    assert_eq!(40 + 4 * slot("TopicTest#ogaQmc"), 40);
}

#[test]
fn message_ids_16_8() {
    assert_eq!(offset_msg_id(host(STORE), 218), "0A00000200002A9F00000000000000DA");
    // Parsing upper-cases first; wrong lengths and non-hex are not ids.
    assert_eq!(decode_offset_msg_id("0a00000200002a9f00000000000000da"), Some((host(STORE), 218)));
    for bad in ["", "0A", "0A00000200002A9F00000000000000D", "0A00000200002A9F00000000000000DX"] {
        assert_eq!(decode_offset_msg_id(bad), None, "{bad}");
    }
    let v6 = host("[2001:db8::2]:10911");
    let id = offset_msg_id(v6, i64::MAX);
    assert_eq!(id.len(), 56);
    assert!(id.ends_with("00002A9F7FFFFFFFFFFFFFFF"));
    assert_eq!(decode_offset_msg_id(&id), Some((v6, i64::MAX)));
    // The synthetic UNIQ_KEY of record A: IP C0A80001 | pid A1B2 | class-loader hash 18B4AAC2 | time 0 | counter 0.
    assert_eq!(&UNIQ[..8], "C0A80001");
    assert_eq!(&UNIQ[8..12], "A1B2");
    assert_eq!(&UNIQ[12..20], "18B4AAC2");
    assert_eq!(&UNIQ[20..], "000000000000");
}

#[test]
fn size_limits_1_7() {
    let mut buf = Vec::new();
    let blob = |len: usize| {
        let mut p = b"K\x01".to_vec();
        p.resize(len - 1, b'v');
        p.push(0x02);
        p
    };
    let try_encode = |props: &[u8], prop_crc: bool, buf: &mut Vec<u8>| {
        encode_record(&input("TopicTest", props, BORN, STORE, 0), &opts(prop_crc), buf).map(|r| r.len)
    };
    assert_eq!(try_encode(&blob(32_767), false, &mut buf).unwrap(), 91 + 14 + 9 + 32_767);
    let err = try_encode(&blob(32_768), false, &mut buf).unwrap_err();
    assert!(matches!(err, Error::PropertiesTooLarge { size: 32_768 }), "{err:?}");
    // With the CRC tail the 20 bytes count, and so does an added separator.
    assert!(try_encode(&blob(32_747), true, &mut buf).is_ok());
    assert!(matches!(try_encode(&blob(32_748), true, &mut buf), Err(Error::PropertiesTooLarge { size: 32_768 })));
    let unterminated = &blob(32_748)[..32_747];
    assert!(matches!(try_encode(unterminated, true, &mut buf), Err(Error::PropertiesTooLarge { size: 32_768 })));
    // The body limit is maxMessageSize itself.
    let small = EncodeOptions { max_message_size: 14, ..opts(false) };
    assert!(encode_record(&input("TopicTest", b"", BORN, STORE, 0), &small, &mut buf).is_ok());
    let tight = EncodeOptions { max_message_size: 13, ..opts(false) };
    buf.clear();
    let err = encode_record(&input("TopicTest", b"", BORN, STORE, 0), &tight, &mut buf).unwrap_err();
    assert!(matches!(err, Error::MessageTooLarge(_)), "{err:?}");
    assert!(buf.is_empty(), "a refused record leaves the buffer as it was");
}
