//! Message properties (spec §3): `name 0x01 value 0x02` per entry, UTF-8, in Java `HashMap` iteration order.
//!
//! Format: `{ name | 0x01 | value | 0x02 }*` (a trailing 0x02 after the last pair too).

use std::borrow::Cow;

use crate::error::{Error, Result};
use crate::java;

/// `NAME_VALUE_SEPARATOR`.
pub const NAME_VALUE_SEPARATOR: u8 = 0x01;
/// `PROPERTY_SEPARATOR`.
pub const PROPERTY_SEPARATOR: u8 = 0x02;
/// Largest encoded properties blob (the length field is an i16).
pub const MAX_PROPERTIES_LEN: usize = i16::MAX as usize;
/// Initial capacity of the map the broker serializes (`new HashMap<>(128)`).
pub const BROKER_MAP_CAPACITY: usize = 128;
/// Initial capacity of a producer's `Message.properties` (`new HashMap<>()`).
pub const CLIENT_MAP_CAPACITY: usize = 16;

/// Property names the store reads (`MessageConst`).
pub mod keys {
    pub const TAGS: &str = "TAGS";
    pub const KEYS: &str = "KEYS";
    pub const UNIQ_KEY: &str = "UNIQ_KEY";
    pub const WAIT: &str = "WAIT";
    pub const CLUSTER: &str = "CLUSTER";
    pub const DELAY: &str = "DELAY";
    pub const CRC32: &str = "__CRC32#";
    pub const INNER_NUM: &str = "INNER_NUM";
    pub const INNER_BASE: &str = "INNER_BASE";
    pub const TRAN_MSG: &str = "TRAN_MSG";
    pub const REAL_TOPIC: &str = "REAL_TOPIC";
    pub const REAL_QID: &str = "REAL_QID";
    pub const RETRY_TOPIC: &str = "RETRY_TOPIC";
    pub const ORIGIN_MESSAGE_ID: &str = "ORIGIN_MESSAGE_ID";
    pub const TIMER_DELIVER_MS: &str = "TIMER_DELIVER_MS";
    pub const TIMER_DELAY_SEC: &str = "TIMER_DELAY_SEC";
    pub const TIMER_DELAY_MS: &str = "TIMER_DELAY_MS";
    /// The timer properties `checkIfTimerMessage` clears from a message with a delay level.
    pub const TIMER: [&str; 3] = [TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS];
    /// Separator of several keys inside `KEYS`.
    pub const KEY_SEPARATOR: char = ' ';
}

/// Rejects names and values a properties string cannot carry: empty ones (dropped by every parser) and
/// ones containing the separators.
pub fn check_property(name: &str, value: &str) -> Result<()> {
    let bad = |reason: &str| Err(Error::InvalidProperty { name: name.to_owned(), reason: reason.to_owned() });
    if name.is_empty() {
        return bad("the name is empty");
    }
    if value.is_empty() {
        return bad("the value is empty (RocketMQ drops empty values when parsing)");
    }
    let has_sep = |s: &str| s.bytes().any(|b| b == NAME_VALUE_SEPARATOR || b == PROPERTY_SEPARATOR);
    if has_sep(name) || has_sep(value) {
        return bad("names and values may not contain the bytes 0x01 or 0x02 (the property separators)");
    }
    Ok(())
}

/// Java `HashMap` bucket of `key` in a table of `capacity` (a power of two): `(h ^ (h >>> 16)) & (cap − 1)`.
pub fn hashmap_bucket(key: &str, capacity: usize) -> usize {
    let h = name_hash(key) as u32;
    ((h ^ (h >> 16)) as usize) & (capacity - 1)
}

/// `String.hashCode()` of a property name; the names every put carries are hashed at compile time (a put
/// orders its map twice, as the producer's and as the broker's).
fn name_hash(name: &str) -> i32 {
    const TAGS: i32 = java::ascii_hash(keys::TAGS.as_bytes());
    const KEYS: i32 = java::ascii_hash(keys::KEYS.as_bytes());
    const WAIT: i32 = java::ascii_hash(keys::WAIT.as_bytes());
    const UNIQ_KEY: i32 = java::ascii_hash(keys::UNIQ_KEY.as_bytes());
    const CLUSTER: i32 = java::ascii_hash(keys::CLUSTER.as_bytes());
    match name {
        keys::TAGS => TAGS,
        keys::KEYS => KEYS,
        keys::WAIT => WAIT,
        keys::UNIQ_KEY => UNIQ_KEY,
        keys::CLUSTER => CLUSTER,
        _ => java::string_hash(name),
    }
}

/// Capacity of a `HashMap(initial)` after `len` insertions (it doubles whenever size exceeds 0.75 × capacity).
pub fn hashmap_capacity(initial: usize, len: usize) -> usize {
    let mut cap = initial.next_power_of_two().max(1);
    while len * 4 > cap * 3 {
        cap *= 2;
    }
    cap
}

/// Property maps up to this size are ordered without allocating.
const SMALL_MAP: usize = 16;

/// Reorders `entries` (given in insertion order, names unique) into the iteration order of a Java
/// `HashMap(initial_capacity)` filled in that order: by bucket, insertion order within a bucket.
/// (Buckets of 8 or more colliding names become trees in Java, whose order differs; property maps never
/// get there in practice.)
pub fn sort_hashmap_order<N: AsRef<str>, V>(entries: &mut [(N, V)], initial_capacity: usize) {
    let cap = hashmap_capacity(initial_capacity, entries.len());
    if entries.len() <= SMALL_MAP {
        // Stable insertion sort by bucket, without allocating (property maps are small); each name is hashed
        // once (this runs twice per put).
        let mut buckets = [0usize; SMALL_MAP];
        for (b, (name, _)) in buckets.iter_mut().zip(entries.iter()) {
            *b = hashmap_bucket(name.as_ref(), cap);
        }
        for i in 1..entries.len() {
            let mut j = i;
            while j > 0 && buckets[j - 1] > buckets[j] {
                buckets.swap(j - 1, j);
                entries.swap(j - 1, j);
                j -= 1;
            }
        }
    } else {
        entries.sort_by_cached_key(|(name, _)| hashmap_bucket(name.as_ref(), cap));
    }
}

/// Appends `name 0x01 value 0x02` for each entry, in the given order.
pub fn write_properties<'a>(out: &mut Vec<u8>, entries: impl IntoIterator<Item = (&'a str, &'a str)>) {
    for (name, value) in entries {
        out.extend_from_slice(name.as_bytes());
        out.push(NAME_VALUE_SEPARATOR);
        out.extend_from_slice(value.as_bytes());
        out.push(PROPERTY_SEPARATOR);
    }
}

/// Serializes a map given in insertion order (later duplicates replace the value in place) the way Java
/// `messageProperties2String(HashMap(initial_capacity))` does.
pub fn encode_map(entries: &[(&str, &str)], initial_capacity: usize, out: &mut Vec<u8>) {
    let mut unique: Vec<(&str, &str)> = Vec::with_capacity(entries.len());
    for &(name, value) in entries {
        match unique.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => unique.push((name, value)),
        }
    }
    sort_hashmap_order(&mut unique, initial_capacity);
    write_properties(out, unique.iter().copied());
}

/// Iterates the accepted `(name, value)` byte pairs of a properties blob in stored order, as
/// `string2messageProperties` accepts them: a segment ends at 0x02 (or the end); it counts only if its first
/// 0x01 has a non-empty name before it and a non-empty value after it (the value may contain 0x01).
pub fn iter_raw(blob: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    blob.split(|&b| b == PROPERTY_SEPARATOR).filter_map(|seg| {
        let sep = seg.iter().position(|&b| b == NAME_VALUE_SEPARATOR)?;
        let (name, value) = (seg.get(..sep)?, seg.get(sep + 1..)?);
        (!name.is_empty() && !value.is_empty()).then_some((name, value))
    })
}

/// The value of `name` (the last occurrence wins, as in the Java map).
pub fn get_raw<'a>(blob: &'a [u8], name: &str) -> Option<&'a [u8]> {
    iter_raw(blob).filter(|(n, _)| *n == name.as_bytes()).last().map(|(_, v)| v)
}

/// Decoded properties as Java sees them: names and values decoded from UTF-8 with Java's replacement rules,
/// duplicates collapsed (later value wins, first position kept).
pub fn parse(blob: &[u8]) -> Vec<(Cow<'_, str>, Cow<'_, str>)> {
    let mut out: Vec<(Cow<'_, str>, Cow<'_, str>)> = Vec::new();
    for (n, v) in iter_raw(blob) {
        let (n, v) = (java::decode_utf8_lossy(n), java::decode_utf8_lossy(v));
        match out.iter_mut().find(|(name, _)| *name == n) {
            Some(slot) => slot.1 = v,
            None => out.push((n, v)),
        }
    }
    out
}

/// `MessageUtils.deleteProperty`: removes every `name 0x01 …` entry whose name starts at index 0 or right
/// after a 0x02, from the name through the next 0x02 inclusive (or to the end).
pub fn delete_property(blob: &[u8], name: &str) -> Vec<u8> {
    let is_target =
        |piece: &[u8]| piece.starts_with(name.as_bytes()) && piece.get(name.len()) == Some(&NAME_VALUE_SEPARATOR);
    blob.split_inclusive(|&b| b == PROPERTY_SEPARATOR).filter(|piece| !is_target(piece)).flatten().copied().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_names_hashed_at_compile_time_hash_as_java_does() {
        for name in [keys::TAGS, keys::KEYS, keys::WAIT, keys::UNIQ_KEY, keys::CLUSTER, keys::DELAY, "biz", "é"] {
            assert_eq!(name_hash(name), java::string_hash(name), "{name}");
        }
        // String.hashCode() of each, as Java computes it.
        assert_eq!((name_hash("TAGS"), name_hash("KEYS"), name_hash("WAIT")), (2567193, 2303476, 2656629));
        assert_eq!((name_hash("UNIQ_KEY"), name_hash("CLUSTER")), (488471169, 1590074842));
    }

    #[test]
    fn hashmap_order_vector_15_4() {
        let entries = [
            ("UNIQ_KEY", "C0A80001A1B218B4AAC2000000000000"),
            ("WAIT", "true"),
            ("TAGS", "TagA"),
            ("KEYS", "order1 order2"),
            ("CLUSTER", "DefaultCluster"),
        ];
        let mut out = Vec::new();
        encode_map(&entries, BROKER_MAP_CAPACITY, &mut out);
        assert_eq!(
            out,
            b"UNIQ_KEY\x01C0A80001A1B218B4AAC2000000000000\x02CLUSTER\x01DefaultCluster\x02TAGS\x01TagA\x02KEYS\x01order1 order2\x02WAIT\x01true\x02"
        );
        for (k, b) in [
            ("UNIQ_KEY", 28),
            ("CLUSTER", 28),
            ("TAGS", 62),
            ("KEYS", 87),
            ("WAIT", 93),
            ("DELAY", 61),
            ("REAL_TOPIC", 113),
            ("REAL_QID", 127),
            ("TRAN_MSG", 73),
            ("PGROUP", 29),
            ("__CRC32#", 39),
            ("INNER_NUM", 110),
            ("INNER_BASE", 1),
            ("MIN_OFFSET", 48),
            ("MAX_OFFSET", 118),
            ("TRACE_ON", 100),
            ("MSG_REGION", 23),
        ] {
            assert_eq!(hashmap_bucket(k, 128), b, "{k}");
        }
    }

    #[test]
    fn capacity_growth() {
        assert_eq!(hashmap_capacity(128, 96), 128);
        assert_eq!(hashmap_capacity(128, 97), 256);
        assert_eq!(hashmap_capacity(16, 12), 16);
        assert_eq!(hashmap_capacity(16, 13), 32);
    }

    #[test]
    fn parse_vector_16_8() {
        let blob = b"A\x01\x02B\x011\x02\x01x\x02C\x01\x01y\x02D";
        let parsed = parse(blob);
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[0], (Cow::Borrowed("B"), Cow::Borrowed("1")));
        assert_eq!(parsed[1], (Cow::Borrowed("C"), Cow::Borrowed("\u{1}y")));
        for empty in [&b""[..], b" ", b"aaa", b"k1\x01", b"\x01v1"] {
            assert!(parse(empty).is_empty());
        }
        assert_eq!(get_raw(b"k\x011\x02k\x012\x02", "k"), Some(&b"2"[..]));
    }

    #[test]
    fn delete_property_rules() {
        let d = |s: &[u8]| delete_property(s, "__CRC32#");
        assert_eq!(d(b"__CRC32#\x01123\x02A\x01b\x02"), b"A\x01b\x02");
        assert_eq!(d(b"A\x01b\x02__CRC32#\x01123\x02C\x01d\x02"), b"A\x01b\x02C\x01d\x02");
        assert_eq!(d(b"A\x01b\x02__CRC32#\x01123\x02"), b"A\x01b\x02");
        assert_eq!(d(b"A\x01b\x02__CRC32#\x01123"), b"A\x01b\x02");
        assert_eq!(d(b"X__CRC32#\x011\x02"), b"X__CRC32#\x011\x02");
        assert_eq!(d(b"A\x01__CRC32#\x01\x02"), b"A\x01__CRC32#\x01\x02");
        assert_eq!(d(b"__CRC32#\x01"), b"");
        assert_eq!(d(b"__CRC32#"), b"__CRC32#");
    }
}
