//! tagsCode (spec §4): the value a consume-queue entry carries for tag filtering.

use super::properties::{self, keys};
use crate::java;

/// The schedule (delay) topic, whose tagsCode is the delivery time.
pub const SCHEDULE_TOPIC: &str = "SCHEDULE_TOPIC_XXXX";

/// RocketMQ's default `messageDelayLevel`.
pub const DEFAULT_DELAY_LEVELS: &str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h";

/// `parseDelayLevel`: delay in ms per level (index 0 = level 1). Entries with an unknown unit are skipped.
pub fn parse_delay_levels(spec: &str) -> Vec<i64> {
    java::split_java(spec, ' ')
        .into_iter()
        .filter_map(|item| {
            let unit = match item.chars().last()? {
                's' => 1000,
                'm' => 60_000,
                'h' => 3_600_000,
                'd' => 86_400_000,
                _ => return None,
            };
            let n: i64 = item.get(..item.len() - 1)?.parse().ok()?;
            Some(n * unit)
        })
        .collect()
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
