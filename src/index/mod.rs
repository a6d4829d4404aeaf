//! IndexFile: the message key index (spec §7). Each dispatched message's UNIQ_KEY and KEYS tokens are
//! indexed as `topic#key` in hash files under `<root>/index/`, named by their creation time.
//!
//! One file, all integers big-endian; slot and entry counts are not stored (they come from [`IndexConfig`]):
//!
//! | Offset | Size | Type | Meaning |
//! |---|---|---|---|
//! | 0 | 8 | i64 | beginTimestamp: store time of the first indexed message (ms) |
//! | 8 | 8 | i64 | endTimestamp: store time of the last indexed message (ms) |
//! | 16 | 8 | i64 | beginPhyOffset: commitlog offset of the first indexed message |
//! | 24 | 8 | i64 | endPhyOffset: commitlog offset of the last indexed message |
//! | 32 | 4 | i32 | hashSlotCount: slots that became non-empty |
//! | 36 | 4 | i32 | indexCount: next entry number (starts at 1; entry 0 is never used) |
//! | 40 | 4 × slots | i32 | hash slots: entry number of the newest entry of the slot's chain, 0 = empty |
//! | 40 + 4 × slots | 20 × entries | entry | entries, numbered from 0 (entry 0 is never written) |
//!
//! Entry (20 bytes): `{ keyHash i32 | commitlog offset i64 | timeDiff i32 (seconds from beginTimestamp) |
//! prev i32 (older entry of the same slot chain, 0 = end) }`.
//!
//! File names are the creation wall-clock time as `yyyyMMddHHmmssSSS` in the process's local time zone
//! ([`index_file_name`]); this module is the one place that knows that rule.

mod file;
mod service;

pub use file::{Candidate, IndexDamage, IndexFile, IndexHeader, IndexWriter};
pub use service::{IndexService, MessageKeys, QueryOffsetResult, RawKeys};

use crate::error::{Error, Result};
use crate::message::TransactionType;

/// `IndexHeader.INDEX_HEADER_SIZE`.
pub const HEADER_SIZE: usize = 40;
/// Bytes per hash slot.
pub const SLOT_SIZE: usize = 4;
/// Bytes per entry.
pub const ENTRY_SIZE: usize = 20;
/// Header field offsets.
pub const BEGIN_TIMESTAMP_POS: usize = 0;
/// See the module table.
pub const END_TIMESTAMP_POS: usize = 8;
/// See the module table.
pub const BEGIN_PHY_OFFSET_POS: usize = 16;
/// See the module table.
pub const END_PHY_OFFSET_POS: usize = 24;
/// See the module table.
pub const HASH_SLOT_COUNT_POS: usize = 32;
/// See the module table.
pub const INDEX_COUNT_POS: usize = 36;

const _: () = assert!(HEADER_SIZE == 40);
const _: () = assert!(INDEX_COUNT_POS + 4 == HEADER_SIZE);
const _: () = assert!(ENTRY_SIZE == 4 + 8 + 4 + 4);

pub use crate::config::IndexConfig;

impl IndexConfig {
    /// Checks the ranges: at least one slot, at least two entry numbers (entry 0 is unused), one batch of one,
    /// and a file size that fits RocketMQ's `int` (≤ 2 147 483 647 bytes).
    pub fn validate(&self) -> Result<()> {
        if self.max_hash_slot_num < 1 {
            return Err(Error::InvalidConfig("max_hash_slot_num must be at least 1".into()));
        }
        if self.max_index_num < 2 {
            return Err(Error::InvalidConfig("max_index_num must be at least 2 (entry 0 is never used)".into()));
        }
        if self.max_msgs_num_batch < 1 {
            return Err(Error::InvalidConfig("max_msgs_num_batch must be at least 1".into()));
        }
        if self.file_size() > i32::MAX as u64 {
            return Err(Error::InvalidConfig(format!(
                "index file of {} bytes (40 + 4 × max_hash_slot_num + 20 × max_index_num) exceeds {} bytes; \
                 lower max_hash_slot_num or max_index_num",
                self.file_size(),
                i32::MAX
            )));
        }
        Ok(())
    }

    /// Bytes per index file: `40 + 4 × max_hash_slot_num + 20 × max_index_num` (420 000 040 by default).
    pub fn file_size(&self) -> u64 {
        HEADER_SIZE as u64
            + u64::from(self.max_hash_slot_num) * SLOT_SIZE as u64
            + u64::from(self.max_index_num) * ENTRY_SIZE as u64
    }
}

/// What the index needs of one dispatched message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexRequest<'a> {
    /// Topic of the message.
    pub topic: &'a str,
    /// Commitlog offset of the record.
    pub commitlog_offset: i64,
    /// Store timestamp of the record (ms).
    pub store_timestamp: i64,
    /// Transaction type; ROLLBACK records are not indexed.
    pub transaction: TransactionType,
    /// The UNIQ_KEY property, if present (indexed even when empty, as RocketMQ does).
    pub uniq_key: Option<&'a str>,
    /// The KEYS property, if present: tokens separated by single spaces, empty tokens skipped.
    pub keys: Option<&'a str>,
}

/// Continues Java's `String.hashCode()` recurrence `h = 31·h + c` over the UTF-16 code units of `s`.
pub(crate) fn hash_continue(h: i32, s: &str) -> i32 {
    if !s.is_ascii() {
        return s.encode_utf16().fold(h, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)));
    }
    hash_continue_ascii(h, s.as_bytes())
}

/// [`hash_continue`] over ASCII bytes (one UTF-16 unit each; the caller checked they are ASCII).
pub(crate) fn hash_continue_ascii(h: i32, bytes: &[u8]) -> i32 {
    // Four units per step: 31⁴·h + 31³·c0 + 31²·c1 + 31·c2 + c3 equals four single steps in wrapping
    // arithmetic, with a quarter of the dependent multiplies.
    const P2: i32 = 31 * 31;
    const P3: i32 = 31 * 31 * 31;
    const P4: i32 = 31 * 31 * 31 * 31;
    let mut chunks = bytes.chunks_exact(4);
    let mut h = h;
    for c in &mut chunks {
        let [a, b, c, d] = [c[0], c[1], c[2], c[3]].map(i32::from);
        h = h
            .wrapping_mul(P4)
            .wrapping_add(a.wrapping_mul(P3))
            .wrapping_add(b.wrapping_mul(P2))
            .wrapping_add(c.wrapping_mul(31))
            .wrapping_add(d);
    }
    chunks.remainder().iter().fold(h, |h, &b| h.wrapping_mul(31).wrapping_add(i32::from(b)))
}

/// `indexKeyHashMethod` (§7.3) applied to a raw `String.hashCode()`: `abs(h)`, and 0 for `Integer.MIN_VALUE`.
pub(crate) fn abs_hash(h: i32) -> i32 {
    h.checked_abs().unwrap_or(0)
}

/// The stored keyHash (§7.3) of the key string `topic#key`, computed without building that string.
pub fn key_hash(topic: &str, key: &str) -> i32 {
    key_hash_from(hash_continue(0, topic), key)
}

/// [`key_hash`] from the topic's own `String.hashCode()`, so a message's keys share one topic hash.
pub(crate) fn key_hash_from(topic_hash: i32, key: &str) -> i32 {
    abs_hash(hash_continue(key_seed(topic_hash), key))
}

/// The hash of `topic#` from the topic's `String.hashCode()`: where every key of the topic continues.
pub(crate) fn key_seed(topic_hash: i32) -> i32 {
    topic_hash.wrapping_mul(31).wrapping_add(i32::from(b'#'))
}

/// Local broken-down time of `ms` (since the epoch): (year, month 1–12, day, hour, minute, second).
#[allow(unsafe_code)]
#[allow(clippy::useless_conversion)] // time_t is not i64 on every platform
fn local_fields(ms: i64) -> Option<(i64, i64, i64, i64, i64, i64)> {
    let secs: libc::time_t = ms.div_euclid(1000).try_into().ok()?;
    // SAFETY: `tm` is plain data (its one pointer field may be null) that localtime_r fully initialises on
    // success; both pointers are valid for the duration of the call and not retained.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&secs, &mut tm).is_null() {
            return None;
        }
        tm
    };
    Some((
        i64::from(tm.tm_year) + 1900,
        i64::from(tm.tm_mon) + 1,
        i64::from(tm.tm_mday),
        i64::from(tm.tm_hour),
        i64::from(tm.tm_min),
        i64::from(tm.tm_sec),
    ))
}

/// Epoch seconds of a local wall-clock time (`mktime`, DST resolved by the C library).
#[allow(unsafe_code)]
#[allow(clippy::useless_conversion)] // time_t is not i64 on every platform
fn local_to_epoch_secs(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64) -> Option<i64> {
    // SAFETY: `tm` is plain data (its one pointer field may be null) that we fill in; mktime only reads and
    // normalises the struct we own, through a pointer valid for the duration of the call.
    let secs = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        tm.tm_year = i32::try_from(y - 1900).ok()?;
        tm.tm_mon = i32::try_from(mo - 1).ok()?;
        tm.tm_mday = i32::try_from(d).ok()?;
        tm.tm_hour = i32::try_from(h).ok()?;
        tm.tm_min = i32::try_from(mi).ok()?;
        tm.tm_sec = i32::try_from(s).ok()?;
        tm.tm_isdst = -1;
        libc::mktime(&mut tm)
    };
    if secs == -1 {
        return None;
    }
    Some(i64::from(secs))
}

/// `UtilAll.timeMillisToHumanString`: `yyyyMMddHHmmssSSS` of `ms` in the local time zone (UTC if the C
/// library cannot convert it). 1700000000123 → `20231114221320123` in UTC.
pub fn index_file_name(ms: i64) -> String {
    let (y, mo, d, h, mi, s) = local_fields(ms).unwrap_or_else(|| utc_fields(ms));
    format!("{y:04}{mo:02}{d:02}{h:02}{mi:02}{s:02}{:03}", ms.rem_euclid(1000))
}

/// The epoch ms an [`index_file_name`] stands for, or `None` if `name` is not 17 digits of a local time.
pub fn parse_index_file_name(name: &str) -> Option<i64> {
    if name.len() != 17 || !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let num = |r: std::ops::Range<usize>| name.get(r).and_then(|t| t.parse::<i64>().ok());
    let secs = local_to_epoch_secs(num(0..4)?, num(4..6)?, num(6..8)?, num(8..10)?, num(10..12)?, num(12..14)?)?;
    Some(secs * 1000 + num(14..17)?)
}

fn utc_fields(ms: i64) -> (i64, i64, i64, i64, i64, i64) {
    let (y, m, d) = crate::message::ids::civil_from_days(ms.div_euclid(86_400_000));
    let secs = ms.div_euclid(1000).rem_euclid(86_400);
    (y, i64::from(m), i64::from(d), secs / 3600, secs / 60 % 60, secs % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_and_size() {
        let c = IndexConfig::default();
        assert_eq!(c.file_size(), 420_000_040);
        assert!(c.validate().is_ok());
        for bad in [
            IndexConfig { max_hash_slot_num: 0, ..c },
            IndexConfig { max_index_num: 1, ..c },
            IndexConfig { max_msgs_num_batch: 0, ..c },
            IndexConfig { max_index_num: 200_000_000, ..c },
        ] {
            assert!(matches!(bad.validate(), Err(Error::InvalidConfig(_))), "{bad:?}");
        }
    }

    #[test]
    fn incremental_hash_matches_java_string_hash() {
        for (topic, key) in [
            ("TopicTest", "C0A80001A1B218B4AAC2000000000000"),
            ("TopicTest", "order1"),
            ("TopicTest", "ogaQmc"),
            ("T", ""),
            ("", "abcdefghi"),
            ("标签", "😀x"),
            ("TopicTest", "键"),
        ] {
            let full = crate::java::string_hash(&format!("{topic}#{key}"));
            assert_eq!(key_hash(topic, key), full.checked_abs().unwrap_or(0), "{topic}#{key}");
        }
        assert_eq!(crate::java::string_hash("TopicTest#order1"), -2137216219);
        assert_eq!(key_hash("TopicTest", "order1"), 2137216219);
        assert_eq!(key_hash("TopicTest", "ogaQmc"), 0);
    }

    #[test]
    fn utc_fallback_formats_like_localtime_in_utc() {
        assert_eq!(utc_fields(1_700_000_000_123), (2023, 11, 14, 22, 13, 20));
        assert_eq!(utc_fields(0), (1970, 1, 1, 0, 0, 0));
        assert_eq!(utc_fields(-1), (1969, 12, 31, 23, 59, 59));
    }

    #[test]
    fn file_name_round_trip() {
        for ms in [1_700_000_000_123, 1_600_000_000_000, 1_234_567_890_999] {
            let name = index_file_name(ms);
            assert_eq!(name.len(), 17);
            assert_eq!(parse_index_file_name(&name), Some(ms), "{name}");
        }
        assert_eq!(parse_index_file_name("2023111422132012"), None);
        assert_eq!(parse_index_file_name("2023111422132012x"), None);
    }
}
