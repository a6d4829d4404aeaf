//! Message ids (spec §5): the broker's offsetMsgId and the client's UNIQ_KEY. Uppercase hex throughout.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicI64, AtomicU16, Ordering};

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// Appends the uppercase hex of `bytes` (`UtilAll.bytes2string`).
pub fn push_hex(out: &mut String, bytes: &[u8]) {
    for &b in bytes {
        out.push(HEX[usize::from(b >> 4)] as char);
        out.push(HEX[usize::from(b & 0xF)] as char);
    }
}

fn ip_bytes(ip: IpAddr, out: &mut Vec<u8>) {
    match ip {
        IpAddr::V4(v4) => out.extend_from_slice(&v4.octets()),
        IpAddr::V6(v6) => out.extend_from_slice(&v6.octets()),
    }
}

/// `MessageDecoder.createMessageId`: `store ip | store port i32 | commitlog offset i64`, 32 or 56 hex chars.
pub fn offset_msg_id(store_host: SocketAddr, physical_offset: i64) -> String {
    let mut out = Vec::with_capacity(56);
    write_offset_msg_id(&mut out, store_host, physical_offset);
    // Hex digits only: always valid UTF-8.
    String::from_utf8(out).unwrap_or_default()
}

/// Appends the offsetMsgId of [`offset_msg_id`] to `out` as ASCII, without allocating.
pub fn write_offset_msg_id(out: &mut Vec<u8>, store_host: SocketAddr, physical_offset: i64) {
    let mut bytes = [0u8; 28];
    let n = match store_host.ip() {
        IpAddr::V4(v4) => {
            bytes[..4].copy_from_slice(&v4.octets());
            4
        }
        IpAddr::V6(v6) => {
            bytes[..16].copy_from_slice(&v6.octets());
            16
        }
    };
    bytes[n..n + 4].copy_from_slice(&i32::from(store_host.port()).to_be_bytes());
    bytes[n + 4..n + 12].copy_from_slice(&physical_offset.to_be_bytes());
    for &b in &bytes[..n + 12] {
        out.push(HEX[usize::from(b >> 4)]);
        out.push(HEX[usize::from(b & 0xF)]);
    }
}

/// `MessageDecoder.decodeMessageId`: the store host and commitlog offset of an offsetMsgId.
pub fn decode_offset_msg_id(id: &str) -> Option<(SocketAddr, i64)> {
    let bytes = parse_hex(id)?;
    let ip_len = match bytes.len() {
        16 => 4,
        28 => 16,
        _ => return None,
    };
    let ip = match ip_len {
        4 => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(bytes.get(..4)?).ok()?)),
        _ => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(bytes.get(..16)?).ok()?)),
    };
    let port = i32::from_be_bytes(bytes.get(ip_len..ip_len + 4)?.try_into().ok()?);
    let offset = i64::from_be_bytes(bytes.get(ip_len + 4..ip_len + 12)?.try_into().ok()?);
    Some((SocketAddr::new(ip, u16::try_from(port).ok()?), offset))
}

/// `UtilAll.string2bytes` (upper-cases first); `None` for odd length or non-hex characters.
pub fn parse_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let nibble = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    s.as_bytes().chunks(2).map(|p| Some(nibble(*p.first()?)? << 4 | nibble(*p.get(1)?)?)).collect()
}

/// Generates UNIQ_KEY ids as `MessageClientIDSetter` does: a per-process prefix `ip | pid i16 | random i32`,
/// then `ms since the start of the current month (local time) i32 | counter i16`.
pub struct UniqIdGenerator {
    /// The prefix in upper-case hex, as every id starts (20 chars for IPv4, 44 for IPv6).
    prefix_hex: Vec<u8>,
    counter: AtomicU16,
    month: AtomicI64, // start of the current month, ms
    next_month: AtomicI64,
}

impl std::fmt::Debug for UniqIdGenerator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UniqIdGenerator").field("prefix_len", &(self.prefix_hex.len() / 2)).finish()
    }
}

/// Appends the upper-case hex of `bytes` to `out` from `at`; returns the new end (stops where `out` ends).
fn write_hex(out: &mut [u8], mut at: usize, bytes: &[u8]) -> usize {
    for &b in bytes {
        if let Some(pair) = out.get_mut(at..at + 2) {
            pair.copy_from_slice(&[HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xF)]]);
            at += 2;
        }
    }
    at
}

impl UniqIdGenerator {
    /// A generator whose ids carry `ip`.
    pub fn new(ip: IpAddr) -> Self {
        let mut prefix = Vec::with_capacity(22);
        ip_bytes(ip, &mut prefix);
        prefix.extend_from_slice(&(std::process::id() as u16).to_be_bytes());
        prefix.extend_from_slice(&random_i32().to_be_bytes());
        let mut prefix_hex = vec![0u8; prefix.len() * 2];
        write_hex(&mut prefix_hex, 0, &prefix);
        UniqIdGenerator {
            prefix_hex,
            counter: AtomicU16::new(0),
            month: AtomicI64::new(0),
            next_month: AtomicI64::new(0),
        }
    }

    /// The next id for a message created at `now_ms`, as 32 (IPv4) or 56 (IPv6) hex chars.
    pub fn next_id(&self, now_ms: i64) -> UniqKey {
        if now_ms >= self.next_month.load(Ordering::Relaxed) {
            let (start, next) = month_bounds(now_ms);
            self.month.store(start, Ordering::Relaxed);
            self.next_month.store(next, Ordering::Relaxed);
        }
        let mut diff = now_ms - self.month.load(Ordering::Relaxed);
        if diff < 0 && diff > -1_000_000 {
            diff = 0;
        }
        let counter = self.counter.fetch_add(1, Ordering::Relaxed);
        let mut bytes = [0u8; UniqKey::INLINE];
        let mut len = self.prefix_hex.len().min(UniqKey::INLINE);
        bytes[..len].copy_from_slice(&self.prefix_hex[..len]);
        let mut tail = [0u8; 6];
        tail[..4].copy_from_slice(&(diff as i32).to_be_bytes());
        tail[4..].copy_from_slice(&counter.to_be_bytes());
        len = write_hex(&mut bytes, len, &tail);
        UniqKey(Repr::Inline { len: len as u8, bytes })
    }
}

/// A UNIQ_KEY as a put result carries it. A generated id (32 or 56 hex chars) is held inline, so a put
/// allocates nothing for it; a longer one (a UNIQ_KEY a producer set itself) is held on the heap.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct UniqKey(Repr);

#[derive(Clone, PartialEq, Eq)]
enum Repr {
    /// UTF-8 (only ever built from a `&str` or from hex digits).
    Inline {
        len: u8,
        bytes: [u8; UniqKey::INLINE],
    },
    Heap(String),
}

impl Default for Repr {
    fn default() -> Self {
        Repr::Inline { len: 0, bytes: [0; UniqKey::INLINE] }
    }
}

impl UniqKey {
    /// The longest key held inline: an IPv6 generator's id.
    pub const INLINE: usize = 56;

    /// The key as text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Inline { len, bytes } => {
                bytes.get(..usize::from(*len)).and_then(|b| std::str::from_utf8(b).ok()).unwrap_or_default()
            }
            Repr::Heap(s) => s,
        }
    }
}

impl From<&str> for UniqKey {
    fn from(s: &str) -> Self {
        let mut bytes = [0u8; UniqKey::INLINE];
        match bytes.get_mut(..s.len()) {
            Some(head) => {
                head.copy_from_slice(s.as_bytes());
                UniqKey(Repr::Inline { len: s.len() as u8, bytes })
            }
            None => UniqKey(Repr::Heap(s.to_owned())),
        }
    }
}

impl std::ops::Deref for UniqKey {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Display for UniqKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Debug for UniqKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl PartialEq<str> for UniqKey {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for UniqKey {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl From<UniqKey> for String {
    fn from(k: UniqKey) -> String {
        k.as_str().to_owned()
    }
}

fn random_i32() -> i32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.finish() as i32
}

/// Start of the month containing `now_ms` and of the next month, in the local time zone, as epoch ms.
fn month_bounds(now_ms: i64) -> (i64, i64) {
    local_month_bounds(now_ms).unwrap_or_else(|| {
        // Fall back to UTC months if the C library cannot convert.
        let days = now_ms.div_euclid(86_400_000);
        let (y, m, _) = civil_from_days(days);
        let start = days_from_civil(y, m, 1) * 86_400_000;
        let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
        (start, days_from_civil(ny, nm, 1) * 86_400_000)
    })
}

#[allow(unsafe_code)]
#[allow(clippy::useless_conversion)] // time_t is not i64 on every platform
fn local_month_bounds(now_ms: i64) -> Option<(i64, i64)> {
    let secs: libc::time_t = now_ms.div_euclid(1000).try_into().ok()?;
    // SAFETY: `tm` is plain data that localtime_r fully initialises on success; both pointers are valid for
    // the duration of the calls and not retained. mktime only reads and normalises the struct we own.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&secs, &mut tm).is_null() {
            return None;
        }
        tm.tm_mday = 1;
        tm.tm_hour = 0;
        tm.tm_min = 0;
        tm.tm_sec = 0;
        tm.tm_isdst = -1;
        let mut next = tm;
        let start = libc::mktime(&mut tm);
        next.tm_mon += 1;
        let end = libc::mktime(&mut next);
        if start == -1 || end == -1 {
            return None;
        }
        Some((i64::from(start) * 1000, i64::from(end) * 1000))
    }
}

/// Civil (year, month, day) of `z` days since 1970-01-01, proleptic Gregorian (H. Hinnant's algorithm).
pub(crate) fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = i64::from(if m > 2 { m - 3 } else { m + 9 });
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_msg_id_vectors() {
        let host: SocketAddr = "10.0.0.2:10911".parse().unwrap_or_else(|_| unreachable!());
        assert_eq!(offset_msg_id(host, 218), "0A00000200002A9F00000000000000DA");
        assert_eq!(offset_msg_id(host, 0), "0A00000200002A9F0000000000000000");
        assert_eq!(decode_offset_msg_id("0a00000200002a9f00000000000000da"), Some((host, 218)));
        let v6: SocketAddr = "[2001:db8::1]:10911".parse().unwrap_or_else(|_| unreachable!());
        let id = offset_msg_id(v6, 42);
        assert_eq!(id.len(), 56);
        assert_eq!(decode_offset_msg_id(&id), Some((v6, 42)));
        assert_eq!(decode_offset_msg_id("XYZ"), None);
    }

    #[test]
    fn uniq_ids() {
        let g = UniqIdGenerator::new(IpAddr::V4(Ipv4Addr::new(192, 168, 0, 1)));
        let now = 1_700_000_000_123;
        let a = g.next_id(now);
        let b = g.next_id(now);
        assert_eq!(a.len(), 32);
        assert!(a.starts_with("C0A80001"));
        assert_eq!(&a[8..12], format!("{:04X}", std::process::id() as u16), "the pid after the ip");
        assert_eq!(&a[..20], &b[..20]);
        let ca = u16::from_str_radix(&a[28..], 16).unwrap_or(0);
        let cb = u16::from_str_radix(&b[28..], 16).unwrap_or(0);
        assert_eq!(cb, ca.wrapping_add(1));
        let (start, next) = month_bounds(now);
        assert!(start <= now && now < next);
        let t = i64::from(u32::from_str_radix(&a[20..28], 16).unwrap_or(0));
        assert_eq!(start + t, now);
        let g6 = UniqIdGenerator::new("2001:db8::1".parse().unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        assert_eq!(g6.next_id(now).len(), 56);
    }

    #[test]
    fn civil_roundtrip() {
        for days in [-1000, 0, 19_000, 19_675, 30_000] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }
}
