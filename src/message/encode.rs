//! Encoding a commitlog record (`MessageExtEncoder.encode` + the patching done by `doAppend`).
//!
//! Format: `{ total i32 | magic i32 | body_crc i32 | queue_id i32 | flag i32 | queue_offset i64 |
//! physical_offset i64 | sys_flag i32 | born_ts i64 | born_host ip+i32 | store_ts i64 | store_host ip+i32 |
//! reconsume_times i32 | prepared_tx_offset i64 | body_len i32 | body | topic_len i8/i16 | topic |
//! props_len i16 | props }`, big-endian.

use std::net::{IpAddr, SocketAddr};

use super::properties::{self, keys, MAX_PROPERTIES_LEN, NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR};
use super::{crc32, pos, record_len, sysflag, MAGIC_V1, MAGIC_V2};
use crate::error::{Error, Result};

/// Bytes of the `__CRC32#` tail: name, 0x01, ten digits, 0x02.
pub const CRC32_RESERVED_LEN: usize = keys::CRC32.len() + 1 + 10 + 1;
const _: () = assert!(CRC32_RESERVED_LEN == 20);

/// Slack RocketMQ allows between the body limit and the whole-record limit.
pub const RECORD_SLACK: usize = 64 * 1024;

/// What goes into one record. Offsets and the store timestamp may be placeholders, patched by [`finish_record`].
#[derive(Debug, Clone)]
pub struct EncodeInput<'a> {
    pub topic: &'a str,
    pub queue_id: i32,
    pub flag: i32,
    pub body: &'a [u8],
    /// The serialized properties, without any `__CRC32#` entry.
    pub properties: &'a [u8],
    /// SYSFLAG without the host-family bits, which are derived from the addresses.
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub born_host: SocketAddr,
    pub store_host: SocketAddr,
    pub store_timestamp: i64,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    pub queue_offset: i64,
    pub physical_offset: i64,
}

/// How the record must be written.
#[derive(Debug, Clone, Copy)]
pub struct EncodeOptions {
    /// `maxMessageSize`.
    pub max_message_size: i32,
    /// `autoMessageVersionOnTopicLen`.
    pub auto_version: bool,
    /// `enabledAppendPropCRC`.
    pub prop_crc: bool,
    /// Append 0x02 to properties that lack it before the CRC tail (single messages; not batch members).
    pub fix_separator: bool,
}

/// Facts about an encoded record needed to finish it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodedRecord {
    /// Offset of the record inside the output buffer.
    pub start: usize,
    /// TOTALSIZE.
    pub len: usize,
    /// Position of STORETIMESTAMP inside the record.
    pub store_timestamp_pos: usize,
    /// Whether the last 20 bytes are the `__CRC32#` tail to fill.
    pub prop_crc: bool,
}

/// IPv4-mapped IPv6 addresses are IPv4 to Java (`Inet4Address`), so they are stored in 4 bytes.
pub fn canonical_host(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), v6.port()),
            None => addr,
        },
        v4 => v4,
    }
}

/// Appends `ip bytes | port i32` (`socketAddress2ByteBuffer`).
pub fn write_host(out: &mut Vec<u8>, addr: SocketAddr) {
    match addr.ip() {
        IpAddr::V4(ip) => out.extend_from_slice(&ip.octets()),
        IpAddr::V6(ip) => out.extend_from_slice(&ip.octets()),
    }
    out.extend_from_slice(&i32::from(addr.port()).to_be_bytes());
}

/// Whether the record for `topic` is v2 (`topic.length() > 127` in UTF-16 units, with auto versioning on).
pub fn is_v2(topic: &str, auto_version: bool) -> bool {
    auto_version && (topic.len() > 127 && topic.encode_utf16().count() > 127)
}

/// The properties length a record will carry, and whether a separator must be added before the CRC tail.
fn stored_properties_len(props: &[u8], opts: &EncodeOptions) -> (usize, bool) {
    if !opts.prop_crc {
        return (props.len(), false);
    }
    let add_sep = opts.fix_separator && props.last().is_some_and(|&b| b != PROPERTY_SEPARATOR);
    (props.len() + usize::from(add_sep) + CRC32_RESERVED_LEN, add_sep)
}

/// What [`encode_record`] checks, and the record's layout: every error a record can be refused with, found
/// without writing a byte (a batch's check before anything is put, [`check_record`]).
struct Layout {
    born: std::net::SocketAddr,
    store: std::net::SocketAddr,
    sys_flag: i32,
    v2: bool,
    topic_len: usize,
    props_len: usize,
    add_sep: bool,
    total: usize,
}

fn layout(input: &EncodeInput<'_>, opts: &EncodeOptions) -> Result<Layout> {
    let born = canonical_host(input.born_host);
    let store = canonical_host(input.store_host);
    let mut sys_flag = input.sys_flag & !(sysflag::BORNHOST_V6 | sysflag::STOREHOST_V6);
    if born.is_ipv6() {
        sys_flag |= sysflag::BORNHOST_V6;
    }
    if store.is_ipv6() {
        sys_flag |= sysflag::STOREHOST_V6;
    }
    let v2 = is_v2(input.topic, opts.auto_version);
    let topic_len = input.topic.len();
    let topic_limit = if v2 { i16::MAX as usize } else { i8::MAX as usize };
    if topic_len > topic_limit {
        return Err(Error::IllegalMessage(format!(
            "topic of {topic_len} bytes does not fit a v{} record (at most {topic_limit})",
            if v2 { 2 } else { 1 }
        )));
    }
    let (props_len, add_sep) = stored_properties_len(input.properties, opts);
    if props_len > MAX_PROPERTIES_LEN {
        return Err(Error::PropertiesTooLarge { size: props_len });
    }
    let max_body = usize::try_from(opts.max_message_size).unwrap_or(0);
    if input.body.len() > max_body {
        return Err(Error::MessageTooLarge(format!(
            "body of {} bytes exceeds max_message_size {max_body}",
            input.body.len()
        )));
    }
    let total = record_len(v2, sys_flag, input.body.len(), topic_len, props_len);
    let max_total = (max_body + RECORD_SLACK).min(i32::MAX as usize);
    if total > max_total {
        return Err(Error::MessageTooLarge(format!(
            "record of {total} bytes exceeds max_message_size + 64 KiB = {max_total}"
        )));
    }
    Ok(Layout { born, store, sys_flag, v2, topic_len, props_len, add_sep, total })
}

/// Whether [`encode_record`] would encode `input`: the same checks and errors, nothing written or computed
/// beyond them (no body copy, no CRC). Returns the record's length.
pub fn check_record(input: &EncodeInput<'_>, opts: &EncodeOptions) -> Result<usize> {
    layout(input, opts).map(|l| l.total)
}

/// Checks every limit, then appends the record to `out`. On error `out` is unchanged.
pub fn encode_record(input: &EncodeInput<'_>, opts: &EncodeOptions, out: &mut Vec<u8>) -> Result<EncodedRecord> {
    let Layout { born, store, sys_flag, v2, topic_len, props_len, add_sep, total } = layout(input, opts)?;
    let start = out.len();
    out.reserve(total);
    let be32 = |out: &mut Vec<u8>, v: i32| out.extend_from_slice(&v.to_be_bytes());
    let be64 = |out: &mut Vec<u8>, v: i64| out.extend_from_slice(&v.to_be_bytes());
    be32(out, total as i32);
    be32(out, if v2 { MAGIC_V2 } else { MAGIC_V1 });
    be32(out, crc32(input.body));
    be32(out, input.queue_id);
    be32(out, input.flag);
    be64(out, input.queue_offset);
    be64(out, input.physical_offset);
    be32(out, sys_flag);
    be64(out, input.born_timestamp);
    write_host(out, born);
    let store_timestamp_pos = out.len() - start;
    be64(out, input.store_timestamp);
    write_host(out, store);
    be32(out, input.reconsume_times);
    be64(out, input.prepared_transaction_offset);
    be32(out, input.body.len() as i32);
    out.extend_from_slice(input.body);
    if v2 {
        out.extend_from_slice(&(topic_len as i16).to_be_bytes());
    } else {
        out.push(topic_len as u8);
    }
    out.extend_from_slice(input.topic.as_bytes());
    out.extend_from_slice(&(props_len as i16).to_be_bytes());
    out.extend_from_slice(input.properties);
    if add_sep {
        out.push(PROPERTY_SEPARATOR);
    }
    if opts.prop_crc {
        out.resize(start + total, 0);
    }
    debug_assert_eq!(out.len() - start, total);
    Ok(EncodedRecord { start, len: total, store_timestamp_pos, prop_crc: opts.prop_crc })
}

/// Patches QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP, then writes the `__CRC32#` tail if the record has one.
/// `record` is exactly the record's bytes.
pub fn finish_record(
    record: &mut [u8],
    info: &EncodedRecord,
    queue_offset: i64,
    physical_offset: i64,
    store_timestamp: i64,
) {
    patch(record, pos::QUEUE_OFFSET, &queue_offset.to_be_bytes());
    patch(record, pos::PHYSICAL_OFFSET, &physical_offset.to_be_bytes());
    patch(record, info.store_timestamp_pos, &store_timestamp.to_be_bytes());
    if info.prop_crc && record.len() >= CRC32_RESERVED_LEN {
        let tail_at = record.len() - CRC32_RESERVED_LEN;
        let crc = record.get(..tail_at).map(crc32).unwrap_or(0);
        let tail = crc_tail(crc);
        patch(record, tail_at, &tail);
    }
}

fn patch(record: &mut [u8], at: usize, bytes: &[u8]) {
    if let Some(dst) = record.get_mut(at..at + bytes.len()) {
        dst.copy_from_slice(bytes);
    }
}

/// The 20-byte `__CRC32#` entry: name, 0x01, ten decimal digits least-significant first, 0x02.
pub fn crc_tail(crc: i32) -> [u8; CRC32_RESERVED_LEN] {
    let mut tail = [0u8; CRC32_RESERVED_LEN];
    let name = keys::CRC32.as_bytes();
    tail[..name.len()].copy_from_slice(name);
    tail[name.len()] = NAME_VALUE_SEPARATOR;
    let mut v = crc;
    for d in tail[name.len() + 1..name.len() + 11].iter_mut() {
        if v > 0 {
            *d = b'0' + (v % 10) as u8;
            v /= 10;
        } else {
            *d = b'0';
        }
    }
    tail[CRC32_RESERVED_LEN - 1] = PROPERTY_SEPARATOR;
    tail
}

/// Reads a `__CRC32#` value back the way the verifier does: characters from last to first, `v = v*10 + (c − '0')`.
pub fn parse_crc_value(value: &[u8]) -> i32 {
    value.iter().rev().fold(0i32, |v, &c| v.wrapping_mul(10).wrapping_add(i32::from(c) - i32::from(b'0')))
}

/// Removes any `__CRC32#` entry from a properties blob (done before re-adding the tail).
pub fn strip_crc_property(props: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let needle = keys::CRC32.as_bytes();
    if props.windows(needle.len()).any(|w| w == needle) {
        std::borrow::Cow::Owned(properties::delete_property(props, keys::CRC32))
    } else {
        std::borrow::Cow::Borrowed(props)
    }
}
