//! tagsCode (spec §4): the value a consume-queue entry carries for tag filtering.

use super::properties::{self, keys};
use crate::java;

/// The schedule (delay) topic, whose tagsCode is the delivery time.
pub const SCHEDULE_TOPIC: &str = "SCHEDULE_TOPIC_XXXX";

/// RocketMQ's default `messageDelayLevel`.
pub const DEFAULT_DELAY_LEVELS: &str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h";

/// `parseDelayLevel`: delay in ms per level (index 0 = level 1), for a spec [`check_delay_levels`] accepts (a
/// store's config is checked when it opens); an entry it refuses is skipped.
pub fn parse_delay_levels(spec: &str) -> Vec<i64> {
    java::split_java(spec, ' ').into_iter().filter_map(|item| delay_of(item).ok()).collect()
}

/// `parseDelayLevel`'s acceptance: the delays in ms per level, or why the spec is refused. RocketMQ's schedule
/// service fails to load (and the broker with it) on any entry that is not a Java `long` followed by one of
/// `s`, `m`, `h`, `d` (an empty spec or entry, as from two spaces in a row; `1S`, `1.5s`, a number past
/// `long`); a spec of spaces only defines no levels (Java's `split` drops trailing empty strings). The product
/// wraps around as Java's `long` does.
pub fn check_delay_levels(spec: &str) -> Result<Vec<i64>, String> {
    java::split_java(spec, ' ')
        .into_iter()
        .enumerate()
        .map(|(i, item)| delay_of(item).map_err(|why| format!("level {} ({item:?}) {why}", i + 1)))
        .collect()
}

fn delay_of(item: &str) -> Result<i64, &'static str> {
    let unit: i64 = match item.chars().last() {
        Some('s') => 1000,
        Some('m') => 60_000,
        Some('h') => 3_600_000,
        Some('d') => 86_400_000,
        Some(_) => return Err("does not end in s, m, h or d"),
        None => return Err("is empty"),
    };
    let digits = &item[..item.len() - 1];
    let n = crate::java::parse_long(digits).ok_or("is not a whole number of that unit")?;
    Ok(n.wrapping_mul(unit))
}

/// Why a tagsCode could not be computed (the record is then treated as corrupt by RocketMQ).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadDelay;

/// `tagsString2tagsCode` plus the schedule-topic rule: the sign-extended Java hash of TAGS, or for
/// `SCHEDULE_TOPIC_XXXX` with `DELAY` > 0 the delivery timestamp.
pub fn tags_code(topic: &[u8], props: &[u8], store_timestamp: i64, delay_levels: &[i64]) -> Result<i64, BadDelay> {
    let tags = properties::get_raw(props, keys::TAGS);
    let delay = if topic == SCHEDULE_TOPIC.as_bytes() { properties::get_raw(props, keys::DELAY) } else { None };
    tags_code_of(topic, tags, delay, store_timestamp, delay_levels)
}

/// [`tags_code`] from the already extracted TAGS and DELAY values.
pub fn tags_code_of(
    topic: &[u8],
    tags: Option<&[u8]>,
    delay: Option<&[u8]>,
    store_timestamp: i64,
    delay_levels: &[i64],
) -> Result<i64, BadDelay> {
    let mut code = match tags {
        Some(tags) => i64::from(java::utf8_bytes_hash(tags)),
        None => 0,
    };
    if topic == SCHEDULE_TOPIC.as_bytes() {
        if let Some(delay) = delay {
            let text = java::decode_utf8_lossy(delay);
            let level = java::parse_int(&text).ok_or(BadDelay)?;
            let max = delay_levels.len() as i32;
            let level = level.min(max);
            if level > 0 {
                let delay = usize::try_from(level - 1).ok().and_then(|i| delay_levels.get(i)).copied().unwrap_or(1000);
                code = store_timestamp + delay;
            }
        }
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_levels_are_accepted_and_refused_as_parse_delay_level_does() {
        assert_eq!(check_delay_levels(DEFAULT_DELAY_LEVELS), Ok(parse_delay_levels(DEFAULT_DELAY_LEVELS)));
        assert_eq!(check_delay_levels("1s 1m 2h").map(|l| l.len()), Ok(3));
        assert_eq!(check_delay_levels("+5s -1s 0m 2d 3h "), Ok(vec![5000, -1000, 0, 172_800_000, 10_800_000]));
        // Spaces only: Java's split drops the trailing empty strings, no levels.
        assert_eq!(check_delay_levels("   "), Ok(vec![]));
        // Java's long arithmetic wraps.
        assert_eq!(check_delay_levels("999999999999d"), Ok(vec![999_999_999_999_i64.wrapping_mul(86_400_000)]));
        for bad in ["", "1s  2s", " 1s", "1S", "1.5s", "1x 2y", "s", "+s", "1 s", "99999999999999999999s", "1sec"] {
            assert!(check_delay_levels(bad).is_err(), "{bad:?} is accepted");
        }
        assert_eq!(check_delay_levels("1s 2S"), Err("level 2 (\"2S\") does not end in s, m, h or d".to_owned()));
    }

    #[test]
    fn vectors_16_4() {
        let levels = parse_delay_levels(DEFAULT_DELAY_LEVELS);
        assert_eq!(levels.len(), 18);
        assert_eq!(levels[17], 7_200_000);
        let ts = 1_700_000_000_123;
        let s = SCHEDULE_TOPIC.as_bytes();
        assert_eq!(tags_code(b"T", b"TAGS\x01TagA\x02", ts, &levels), Ok(2598919));
        assert_eq!(tags_code(b"T", b"TAGS\x01polygenelubricants\x02", ts, &levels), Ok(-2147483648));
        assert_eq!(tags_code(s, b"DELAY\x013\x02", ts, &levels), Ok(1_700_000_010_123));
        assert_eq!(tags_code(s, b"DELAY\x0199\x02", ts, &levels), Ok(1_700_007_200_123));
        assert_eq!(tags_code(s, b"TAGS\x01TagA\x02DELAY\x010\x02", ts, &levels), Ok(2598919));
        assert_eq!(tags_code(s, b"DELAY\x01abc\x02", ts, &levels), Err(BadDelay));
        assert_eq!(tags_code(b"T", b"DELAY\x01abc\x02", ts, &levels), Ok(0));
        assert_eq!(tags_code(b"T", b"TAGS\x01\xC3\x28\x02", ts, &levels), Ok(2031563));
        assert_eq!(tags_code(b"T", b"TAGS\x01\xED\xA0\x80\x02", ts, &levels), Ok(65533));
    }
}
