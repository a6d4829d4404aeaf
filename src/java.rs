//! Java semantics the store formats depend on (spec §15).
//!
//! RocketMQ hashes strings with `String.hashCode()` over UTF-16 code units of the string Java obtains by
//! decoding the stored UTF-8 bytes. Decoding never fails: malformed input becomes U+FFFD, following Java's
//! rules, which differ from the Unicode "maximal subpart" practice only for UTF-8-encoded surrogates
//! (`ED A0..BF ..`): Java replaces the whole 3-byte sequence (or a truncated 2-byte tail) by one U+FFFD.

/// `String.hashCode()` of a Rust string: `h = 31·h + c` over UTF-16 code units, wrapping i32.
pub fn string_hash(s: &str) -> i32 {
    if s.is_ascii() {
        return ascii_hash(s.as_bytes());
    }
    s.encode_utf16().fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

fn ascii_hash(bytes: &[u8]) -> i32 {
    bytes.iter().fold(0i32, |h, &b| h.wrapping_mul(31).wrapping_add(i32::from(b)))
}

/// `new String(bytes, UTF_8).hashCode()`: the hash Java computes for text stored as (possibly malformed) UTF-8.
pub fn utf8_bytes_hash(bytes: &[u8]) -> i32 {
    if bytes.is_ascii() {
        return ascii_hash(bytes);
    }
    match std::str::from_utf8(bytes) {
        Ok(s) => string_hash(s),
        Err(_) => string_hash(&decode_utf8_lossy(bytes)),
    }
}

/// Decodes UTF-8 exactly as `new String(bytes, StandardCharsets.UTF_8)` does on JDK 17.
pub fn decode_utf8_lossy(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    if let Ok(s) = std::str::from_utf8(bytes) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(bytes.len() + 8);
    let mut rest = bytes;
    while !rest.is_empty() {
        match std::str::from_utf8(rest) {
            Ok(s) => {
                out.push_str(s);
                break;
            }
            Err(e) => {
                let (valid, bad) = rest.split_at(e.valid_up_to());
                // `valid` is valid UTF-8 by construction of `valid_up_to`.
                out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                out.push('\u{FFFD}');
                let skip = java_malformed_len(bad).unwrap_or(match e.error_len() {
                    Some(n) => n,
                    None => bad.len(), // truncated sequence at the end: one U+FFFD for the tail
                });
                rest = bad.get(skip..).unwrap_or_default();
            }
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Java's malformed length where it differs from the maximal-subpart rule: a surrogate encoded in UTF-8.
fn java_malformed_len(bad: &[u8]) -> Option<usize> {
    match bad {
        [0xED, b2, rest @ ..] if (0xA0..=0xBF).contains(b2) => match rest.first() {
            Some(b3) if b3 & 0xC0 == 0x80 => Some(3),
            _ => Some(2),
        },
        _ => None,
    }
}

/// Java `String.split(sep)` for a literal single-character separator: trailing empty tokens are removed.
pub fn split_java(s: &str, sep: char) -> Vec<&str> {
    if !s.contains(sep) {
        return vec![s];
    }
    let mut parts: Vec<&str> = s.split(sep).collect();
    while parts.last().is_some_and(|p| p.is_empty()) {
        parts.pop();
    }
    parts
}

/// Java `Integer.parseInt`: optional sign, ASCII digits only, no whitespace, must fit i32.
pub fn parse_int(s: &str) -> Option<i32> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse::<i32>().ok()
}

/// Bins of a Java `HashMap` (or, with `concurrent`, a `ConcurrentHashMap`) created with `initial` bins after
/// `n` insertions at load factor 0.75: a `HashMap` grows when its size exceeds the threshold, a
/// `ConcurrentHashMap` when it reaches it.
pub fn hash_map_bins(n: usize, initial: usize, concurrent: bool) -> usize {
    let mut bins = initial.max(1);
    while if concurrent { n >= bins * 3 / 4 } else { n > bins * 3 / 4 } {
        bins *= 2;
    }
    bins
}

/// The bin of a string key: `spread(hashCode) & (bins - 1)`, where `spread(h) = h ^ (h >>> 16)`.
pub fn hash_map_bin(key: &str, bins: usize) -> usize {
    let h = string_hash(key) as u32;
    ((h ^ (h >> 16)) as usize) & (bins - 1)
}

/// Indices of `keys` (in insertion order) in a Java hash map's iteration order: by bin, then insertion order
/// within a bin. Exact while the map has not grown (a grown `ConcurrentHashMap` may reorder a bin's keys).
pub fn hash_map_order(keys: &[&str], initial: usize, concurrent: bool) -> Vec<usize> {
    let bins = hash_map_bins(keys.len(), initial, concurrent);
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by_key(|&i| hash_map_bin(keys[i], bins));
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_vectors_16_4() {
        assert_eq!(string_hash(""), 0);
        assert_eq!(string_hash("TagA"), 2598919);
        assert_eq!(string_hash("TagA||TagB"), 1789476431);
        assert_eq!(string_hash("标签"), 857175);
        assert_eq!(string_hash("😀"), 1772899);
        assert_eq!(string_hash("polygenelubricants"), i32::MIN);
        assert_eq!(string_hash("TopicTest#KEY1"), -1656969516);
        assert_eq!(string_hash("TopicTest#ogaQmc"), i32::MIN);
        assert_eq!(string_hash("TopicTest#order1"), -2137216219);
        assert_eq!(string_hash("TopicTest#order2"), -2137216218);
        assert_eq!(string_hash("TopicTest#C0A80001A1B218B4AAC2000000000000"), -2044268817);
    }

    #[test]
    fn malformed_utf8_follows_java() {
        assert_eq!(utf8_bytes_hash(&[0xC3, 0x28]), 2031563);
        assert_eq!(utf8_bytes_hash(&[0xED, 0xA0, 0x80]), 65533);
        assert_eq!(utf8_bytes_hash(&[0x80, 0x80]), 2097056);
        let count = |b: &[u8]| decode_utf8_lossy(b).chars().filter(|&c| c == '\u{FFFD}').count();
        // Identical to maximal subpart (verified on JDK 17).
        for (bytes, n) in [
            (&[0xC3, 0x28][..], 1),
            (&[0xE2, 0x82], 1),
            (&[0xE2, 0x82, 0x28], 1),
            (&[0xF0, 0x90, 0x8C], 1),
            (&[0xC0, 0xAF], 2),
            (&[0xFF], 1),
            (&[0xF4, 0x90, 0x80, 0x80], 4),
            (&[0xE0, 0x80, 0x8F], 3),
            (&[0x80, 0x80], 2),
            (&[0xF4, 0x90], 2),
            (&[0xF0, 0x80], 2),
            (&[0xE0, 0xA0], 1),
            (&[0xC2], 1),
            (&[0xF8], 1),
            (&[0xED, 0x9F, 0xBF], 0),
        ] {
            assert_eq!(count(bytes), n, "{bytes:02X?}");
        }
        // Different from maximal subpart: surrogates.
        for bytes in [&[0xED, 0xA0, 0x80][..], &[0xED, 0xBF, 0xBF], &[0xED, 0xB0, 0x80], &[0xED, 0xA0], &[0xED, 0xBF]] {
            assert_eq!(decode_utf8_lossy(bytes), "\u{FFFD}", "{bytes:02X?}");
        }
        assert_eq!(decode_utf8_lossy(&[0xED, 0xA0, 0x41]), "\u{FFFD}A");
    }

    #[test]
    fn split_and_parse() {
        assert_eq!(split_java("a b  ", ' '), vec!["a", "b"]);
        assert_eq!(split_java(" a", ' '), vec!["", "a"]);
        assert_eq!(split_java("", ' '), vec![""]);
        assert_eq!(split_java("  ", ' '), Vec::<&str>::new());
        assert_eq!(parse_int("+3"), Some(3));
        assert_eq!(parse_int("-3"), Some(-3));
        assert_eq!(parse_int(" 3"), None);
        assert_eq!(parse_int("abc"), None);
        assert_eq!(parse_int("2147483648"), None);
    }

    #[test]
    fn hash_map_growth_and_order() {
        assert_eq!(hash_map_bins(0, 1024, true), 1024);
        assert_eq!(hash_map_bins(767, 1024, true), 1024);
        assert_eq!(hash_map_bins(768, 1024, true), 2048);
        assert_eq!(hash_map_bins(96, 128, false), 128);
        assert_eq!(hash_map_bins(97, 128, false), 256);
        // "Orders" and "T\"x\u{e9}\n" in RocketMQ 5.3.1's groupTopicMap for G2 (tests/data): Orders first.
        assert_eq!(hash_map_order(&["T\"x\u{e9}\n", "Orders"], 8, false), [1, 0]);
    }
}
