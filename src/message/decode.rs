//! Decoding and validating commitlog records (`checkMessageAndReturnSize`, `MessageDecoder.decode`).
//!
//! Every length read from the bytes is checked against what remains; no input makes these functions panic.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::ops::Range;

use super::encode::{parse_crc_value, CRC32_RESERVED_LEN};
use super::properties::{self, keys};
use super::{crc32, host_len, record_len, sysflag, TransactionType, BLANK_MAGIC, MAGIC_V1, MAGIC_V2};

/// The fixed fields of a record plus where its variable parts lie (ranges relative to the record start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordHeader {
    pub total_size: i32,
    pub magic: i32,
    pub body_crc: i32,
    pub queue_id: i32,
    pub flag: i32,
    pub queue_offset: i64,
    pub physical_offset: i64,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub born_host: SocketAddr,
    pub store_timestamp: i64,
    pub store_host: SocketAddr,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    pub body: Range<usize>,
    pub topic: Range<usize>,
    pub properties: Range<usize>,
}

impl RecordHeader {
    /// 2 for a v2 record, else 1.
    pub fn version(&self) -> u8 {
        if self.magic == MAGIC_V2 {
            2
        } else {
            1
        }
    }

    /// The transaction type in SYSFLAG.
    pub fn transaction_type(&self) -> TransactionType {
        TransactionType::of(self.sys_flag)
    }

    /// Body bytes of `record` (the bytes this header was parsed from).
    pub fn body<'a>(&self, record: &'a [u8]) -> &'a [u8] {
        record.get(self.body.clone()).unwrap_or_default()
    }

    /// Topic bytes of `record`.
    pub fn topic<'a>(&self, record: &'a [u8]) -> &'a [u8] {
        record.get(self.topic.clone()).unwrap_or_default()
    }

    /// Properties blob of `record`.
    pub fn properties<'a>(&self, record: &'a [u8]) -> &'a [u8] {
        record.get(self.properties.clone()).unwrap_or_default()
    }
}

/// Why bytes are not a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invalid {
    /// Fewer bytes than the header or the TOTALSIZE claims (a torn write, or the end of the data).
    Truncated,
    /// A magic code that is neither v1, v2 nor blank (0 = never written).
    BadMagic(i32),
    /// A length field that points outside the record or is negative.
    BadLength(&'static str),
    /// TOTALSIZE differs from the size computed from the parts (`calMsgLength`).
    SizeMismatch { stored: i32, computed: usize },
    /// Body CRC differs from the stored BODYCRC.
    BodyCrc { stored: i32, computed: i32 },
    /// The `__CRC32#` property is missing or differs from the record's CRC.
    PropertyCrc,
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Invalid::Truncated => write!(f, "record is truncated"),
            Invalid::BadMagic(m) => write!(f, "bad magic code 0x{:08X}", *m as u32),
            Invalid::BadLength(what) => write!(f, "{what} length is out of range"),
            Invalid::SizeMismatch { stored, computed } => {
                write!(f, "TOTALSIZE {stored} differs from the {computed} bytes its fields need")
            }
            Invalid::BodyCrc { stored, computed } => write!(f, "body CRC {computed} differs from stored {stored}"),
            Invalid::PropertyCrc => write!(f, "property CRC (__CRC32#) is missing or wrong"),
        }
    }
}

/// What the bytes at a position are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordCheck {
    /// A valid message record.
    Message(RecordHeader),
    /// The end-of-file blank; the rest of the segment (`size` bytes from here) holds no record.
    Blank { size: i32 },
    /// Not a record. `size` is TOTALSIZE when it is known to be trustworthy (a length mismatch), as RocketMQ
    /// reports it; `None` otherwise.
    Invalid { reason: Invalid, size: Option<i32> },
}

/// Which checksums to verify.
#[derive(Debug, Clone, Copy, Default)]
pub struct CheckOptions {
    /// Verify the body CRC (or the property CRC when `force_prop_crc`).
    pub check_crc: bool,
    /// `forceVerifyPropCRC`: verify the `__CRC32#` property instead of the body CRC.
    pub force_prop_crc: bool,
}

struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Invalid> {
        let end = self.at.checked_add(n).ok_or(Invalid::Truncated)?;
        let s = self.buf.get(self.at..end).ok_or(Invalid::Truncated)?;
        self.at = end;
        Ok(s)
    }
    fn arr<const N: usize>(&mut self) -> Result<[u8; N], Invalid> {
        let s = self.take(N)?;
        <[u8; N]>::try_from(s).map_err(|_| Invalid::Truncated)
    }
    fn i8(&mut self) -> Result<i8, Invalid> {
        Ok(i8::from_be_bytes(self.arr()?))
    }
    fn i16(&mut self) -> Result<i16, Invalid> {
        Ok(i16::from_be_bytes(self.arr()?))
    }
    fn i32(&mut self) -> Result<i32, Invalid> {
        Ok(i32::from_be_bytes(self.arr()?))
    }
    fn i64(&mut self) -> Result<i64, Invalid> {
        Ok(i64::from_be_bytes(self.arr()?))
    }
    fn host(&mut self, v6: bool) -> Result<SocketAddr, Invalid> {
        // Java stores the port as an int; anything outside u16 cannot come from a socket address.
        let port = |p: i32| u16::try_from(p).map_err(|_| Invalid::BadLength("port"));
        // Each family is built straight into its SocketAddr variant: going through an `IpAddr` first made the
        // compiler assemble it on the stack and read it back whole, a store-forwarding stall on every record
        // a drain or dispatch parses.
        if v6 {
            let ip = Ipv6Addr::from(self.arr::<16>()?);
            Ok(SocketAddr::V6(SocketAddrV6::new(ip, port(self.i32()?)?, 0, 0)))
        } else {
            let ip = Ipv4Addr::from(self.arr::<4>()?);
            Ok(SocketAddr::V4(SocketAddrV4::new(ip, port(self.i32()?)?)))
        }
    }
    fn range(&mut self, n: usize) -> Result<Range<usize>, Invalid> {
        let start = self.at;
        self.take(n)?;
        Ok(start..self.at)
    }
}

/// Parses the record at the start of `buf` without checking checksums. `buf` may extend past the record.
pub fn parse_header(buf: &[u8]) -> Result<RecordHeader, Invalid> {
    let mut r = Reader { buf, at: 0 };
    let total_size = r.i32()?;
    let magic = r.i32()?;
    if magic != MAGIC_V1 && magic != MAGIC_V2 {
        return Err(Invalid::BadMagic(magic));
    }
    let total = usize::try_from(total_size).map_err(|_| Invalid::BadLength("total"))?;
    if total > buf.len() {
        return Err(Invalid::Truncated);
    }
    let record = buf.get(..total).ok_or(Invalid::Truncated)?;
    match Fixed::of(record) {
        Some(fixed) => fixed.header(record, total_size, magic),
        // Too short for its fixed fields: read field by field, to say which one runs past the end.
        None => parse_fields(record, total_size, magic),
    }
}

/// The header of `record` (TOTALSIZE and MAGICCODE already read and checked), read field by field in the
/// order of the format: the reference [`Fixed::header`] must agree with, and the path for records too short
/// for their fixed fields.
fn parse_fields(record: &[u8], total_size: i32, magic: i32) -> Result<RecordHeader, Invalid> {
    let mut r = Reader { buf: record, at: 8 };
    let body_crc = r.i32()?;
    let queue_id = r.i32()?;
    let flag = r.i32()?;
    let queue_offset = r.i64()?;
    let physical_offset = r.i64()?;
    let sys_flag = r.i32()?;
    let born_timestamp = r.i64()?;
    let born_host = r.host(sys_flag & sysflag::BORNHOST_V6 != 0)?;
    let store_timestamp = r.i64()?;
    let store_host = r.host(sys_flag & sysflag::STOREHOST_V6 != 0)?;
    let reconsume_times = r.i32()?;
    let prepared_transaction_offset = r.i64()?;
    let body_len = r.i32()?;
    let [body, topic, properties] = variable_parts(record, r.at, body_len, magic, sys_flag, total_size)?;
    Ok(RecordHeader {
        total_size,
        magic,
        body_crc,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_timestamp,
        born_host,
        store_timestamp,
        store_host,
        reconsume_times,
        prepared_transaction_offset,
        body,
        topic,
        properties,
    })
}

/// BODY, TOPIC and PROPERTIES of `record`, the body starting at `at` (right after BODYLENGTH, `body_len`),
/// each length checked against what remains, and TOTALSIZE against the sum of the parts (`calMsgLength`).
#[inline]
fn variable_parts(
    record: &[u8],
    at: usize,
    body_len: i32,
    magic: i32,
    sys_flag: i32,
    total_size: i32,
) -> Result<[Range<usize>; 3], Invalid> {
    let body_len = usize::try_from(body_len).map_err(|_| Invalid::BadLength("body"))?;
    let mut r = Reader { buf: record, at };
    let body = r.range(body_len).map_err(|_| Invalid::BadLength("body"))?;
    let v2 = magic == MAGIC_V2;
    let topic_len = if v2 { i32::from(r.i16()?) } else { i32::from(r.i8()?) };
    let topic_len = usize::try_from(topic_len).map_err(|_| Invalid::BadLength("topic"))?;
    let topic = r.range(topic_len).map_err(|_| Invalid::BadLength("topic"))?;
    let props_len = usize::try_from(r.i16()?).map_err(|_| Invalid::BadLength("properties"))?;
    let properties = r.range(props_len).map_err(|_| Invalid::BadLength("properties"))?;
    let computed = record_len(v2, sys_flag, body_len, topic_len, props_len);
    if computed != record.len() {
        return Err(Invalid::SizeMismatch { stored: total_size, computed });
    }
    Ok([body, topic, properties])
}

/// The fixed fields of a record long enough to hold them all (every record that parses): each is read at its
/// offset from one slice whose length is checked once, where [`parse_fields`] checks and advances field by
/// field (half the time of a parse). A drain, a dispatch, a query and a recovery parse every record they
/// touch.
struct Fixed<'a> {
    /// The record's first `72 + both host lengths` bytes: everything up to and including BODYLENGTH.
    head: &'a [u8],
    /// BORNHOST's and STOREHOST's lengths (8 for IPv4, 20 for IPv6, by SYSFLAG).
    born_len: usize,
    store_len: usize,
}

impl<'a> Fixed<'a> {
    /// `None` when `record` ends before BODYLENGTH (or before SYSFLAG, which says how long the hosts are).
    #[inline]
    fn of(record: &'a [u8]) -> Option<Self> {
        let sys_flag = i32::from_be_bytes(*record.get(36..40)?.first_chunk::<4>()?);
        let born_len = host_len(sys_flag & sysflag::BORNHOST_V6 != 0);
        let store_len = host_len(sys_flag & sysflag::STOREHOST_V6 != 0);
        let head = record.get(..72 + born_len + store_len)?;
        Some(Fixed { head, born_len, store_len })
    }

    #[inline]
    fn arr<const N: usize>(&self, at: usize) -> [u8; N] {
        // Every offset asked for lies inside `head` (its length is checked in `of`); the fallback is never taken.
        self.head.get(at..at + N).and_then(|s| s.first_chunk::<N>()).copied().unwrap_or([0; N])
    }
    #[inline]
    fn i32(&self, at: usize) -> i32 {
        i32::from_be_bytes(self.arr(at))
    }
    #[inline]
    fn i64(&self, at: usize) -> i64 {
        i64::from_be_bytes(self.arr(at))
    }
    #[inline]
    fn host(&self, at: usize, len: usize) -> Result<SocketAddr, Invalid> {
        let port = |p: i32| u16::try_from(p).map_err(|_| Invalid::BadLength("port"));
        if len == 20 {
            let ip = Ipv6Addr::from(self.arr::<16>(at));
            Ok(SocketAddr::V6(SocketAddrV6::new(ip, port(self.i32(at + 16))?, 0, 0)))
        } else {
            let ip = Ipv4Addr::from(self.arr::<4>(at));
            Ok(SocketAddr::V4(SocketAddrV4::new(ip, port(self.i32(at + 4))?)))
        }
    }

    /// The header, with the same checks and errors as reading `record` field by field: no fixed field can run
    /// past the end, so what can fail is a port, a length, or TOTALSIZE against the parts.
    #[inline]
    fn header(&self, record: &[u8], total_size: i32, magic: i32) -> Result<RecordHeader, Invalid> {
        let sys_flag = self.i32(36);
        let born_host = self.host(48, self.born_len)?;
        let at = 48 + self.born_len;
        let store_timestamp = self.i64(at);
        let store_host = self.host(at + 8, self.store_len)?;
        let at = at + 8 + self.store_len;
        let [body, topic, properties] =
            variable_parts(record, at + 16, self.i32(at + 12), magic, sys_flag, total_size)?;
        Ok(RecordHeader {
            total_size,
            magic,
            body_crc: self.i32(8),
            queue_id: self.i32(12),
            flag: self.i32(16),
            queue_offset: self.i64(20),
            physical_offset: self.i64(28),
            sys_flag,
            born_timestamp: self.i64(40),
            born_host,
            store_timestamp,
            store_host,
            reconsume_times: self.i32(at),
            prepared_transaction_offset: self.i64(at + 4),
            body,
            topic,
            properties,
        })
    }
}

/// `checkMessageAndReturnSize` for the bytes at the start of `buf` (which may run to the segment end).
pub fn check_record(buf: &[u8], opts: CheckOptions) -> RecordCheck {
    let invalid = |reason, size| RecordCheck::Invalid { reason, size };
    if buf.len() <= 4 {
        return invalid(Invalid::Truncated, None);
    }
    let word = |at: usize| buf.get(at..at + 4).and_then(|s| <[u8; 4]>::try_from(s).ok()).map(i32::from_be_bytes);
    let (Some(total), Some(magic)) = (word(0), word(4)) else {
        return invalid(Invalid::Truncated, None);
    };
    if magic == BLANK_MAGIC {
        return RecordCheck::Blank { size: total };
    }
    let header = match parse_header(buf) {
        Ok(h) => h,
        Err(reason @ Invalid::SizeMismatch { stored, .. }) => return invalid(reason, Some(stored)),
        Err(reason) => return invalid(reason, None),
    };
    let record = buf.get(..header.total_size as usize).unwrap_or_default();
    if opts.check_crc {
        if opts.force_prop_crc {
            if !property_crc_ok(record, &header) {
                return invalid(Invalid::PropertyCrc, None);
            }
        } else if !header.body.is_empty() {
            let computed = crc32(header.body(record));
            if computed != header.body_crc {
                return invalid(Invalid::BodyCrc { stored: header.body_crc, computed }, None);
            }
        }
    }
    RecordCheck::Message(header)
}

/// Verifies the `__CRC32#` property: its value (read last digit first) equals the CRC of all record bytes
/// except the last 20.
pub fn property_crc_ok(record: &[u8], header: &RecordHeader) -> bool {
    let Some(value) = properties::get_raw(header.properties(record), keys::CRC32) else {
        return false;
    };
    let Some(covered) = record.len().checked_sub(CRC32_RESERVED_LEN).and_then(|n| record.get(..n)) else {
        return false;
    };
    parse_crc_value(value) == crc32(covered)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `parse_header` as it was before [`Fixed`]: every field read in turn.
    fn field_by_field(buf: &[u8]) -> Result<RecordHeader, Invalid> {
        let mut r = Reader { buf, at: 0 };
        let (total_size, magic) = (r.i32()?, r.i32()?);
        if magic != MAGIC_V1 && magic != MAGIC_V2 {
            return Err(Invalid::BadMagic(magic));
        }
        let total = usize::try_from(total_size).map_err(|_| Invalid::BadLength("total"))?;
        parse_fields(buf.get(..total).ok_or(Invalid::Truncated)?, total_size, magic)
    }

    /// A well-formed record with the given shape (fields filled from `seed`).
    fn record(v2: bool, born_v6: bool, store_v6: bool, lens: (usize, usize, usize), seed: u8) -> Vec<u8> {
        let (body, topic, props) = lens;
        let mut sys_flag = 0;
        if born_v6 {
            sys_flag |= sysflag::BORNHOST_V6;
        }
        if store_v6 {
            sys_flag |= sysflag::STOREHOST_V6;
        }
        let total = record_len(v2, sys_flag, body, topic, props);
        let mut b = Vec::with_capacity(total);
        b.extend_from_slice(&(total as i32).to_be_bytes());
        b.extend_from_slice(&(if v2 { MAGIC_V2 } else { MAGIC_V1 }).to_be_bytes());
        b.extend((0..28).map(|i| seed.wrapping_add(i))); // BODYCRC .. PHYSICALOFFSET
        b.extend_from_slice(&sys_flag.to_be_bytes());
        b.extend((0..8).map(|i| seed ^ i)); // BORNTIMESTAMP
        for v6 in [born_v6, store_v6] {
            b.extend((0..if v6 { 16 } else { 4 }).map(|i| seed.wrapping_mul(i)));
            b.extend_from_slice(&(i32::from(seed) * 100).to_be_bytes()); // the port
            b.extend((0..8).map(|i| seed.wrapping_add(i * 3))); // BORN... then STORETIMESTAMP; trimmed below
        }
        b.truncate(b.len() - 8); // no timestamp after STOREHOST: RECONSUMETIMES follows it
        b.extend((0..12).map(|i| seed.wrapping_sub(i))); // RECONSUMETIMES, PREPAREDTRANSACTIONOFFSET
        b.extend_from_slice(&(body as i32).to_be_bytes());
        b.extend(std::iter::repeat_n(b'b', body));
        if v2 {
            b.extend_from_slice(&(topic as i16).to_be_bytes());
        } else {
            b.push(topic as u8);
        }
        b.extend(std::iter::repeat_n(b't', topic));
        b.extend_from_slice(&(props as i16).to_be_bytes());
        b.extend(std::iter::repeat_n(b'p', props));
        b
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        /// The fixed-offset parse answers exactly as reading field by field: the same header, or the same
        /// error, for well-formed records and for records with bytes overwritten (lengths, ports, SYSFLAG's
        /// host bits, MAGICCODE), cut short or followed by more bytes.
        #[test]
        fn fixed_offsets_parse_as_field_by_field_reading(
            shape in (any::<bool>(), any::<bool>(), any::<bool>(), 0usize..40, 0usize..20, 0usize..20, any::<u8>()),
            writes in proptest::collection::vec((0usize..130, any::<u8>()), 0..4),
            cut in proptest::option::of(0usize..160),
            extra in 0usize..8,
        ) {
            let (v2, born_v6, store_v6, body, topic, props, seed) = shape;
            let mut b = record(v2, born_v6, store_v6, (body, topic, props), seed);
            prop_assert_eq!(parse_header(&b).map(|h| h.total_size as usize), Ok(b.len()));
            b.extend(std::iter::repeat_n(0xEE, extra));
            for (at, byte) in writes {
                if let Some(x) = b.get_mut(at) {
                    *x = byte;
                }
            }
            if let Some(cut) = cut {
                b.truncate(cut);
            }
            prop_assert_eq!(parse_header(&b), field_by_field(&b));
        }
    }
}
