//! `config/consumerOffset.json.journal`: rmq's own log of the commits made since the last snapshot
//! (`commit_offset(..., journal=True)`), replayed over `consumerOffset.json` by `load()` and folded into the next
//! snapshot. RocketMQ never reads it.
//!
//! Text, UTF-8, one record per line, so that a killed append leaves at most one incomplete last line and any
//! damage stays inside the lines it touches:
//!
//! ```text
//! journal = header record*
//! header  = "rmq-offsets-journal 1" LF                 magic, space, version (decimal)
//! record  = crc SP payload LF
//! crc     = 8 lowercase hex digits                     CRC-32 (IEEE, as zlib) of the payload's bytes
//! payload = "[" snapshot "," group "," topic "," queueId "," offset "]"
//!           snapshot: the data version counter of the snapshot the commit was made on (Java long);
//!           group, topic: JSON strings as fastjson escapes them, non-empty, without '@';
//!           queueId: a Java int >= 0; offset: a Java long
//! ```
//!
//! Reading: a line that does not end in LF is the **torn tail** of an append a kill interrupted (reported,
//! never damage; the writer cuts it before it appends again). A complete line whose checksum or fields do not
//! verify is **damage**: it is left out and reported with its line number and byte offset, and every other
//! line still loads. A journal that does not start with the header was written before version 1 (bare
//! payloads, no checksum); such lines are still read, as are version-1 records appended to it.

use super::{as_long, describe, quote, Parser, Value, TOPIC_GROUP_SEPARATOR};

/// The first line of a version-1 journal.
pub const HEADER: &[u8] = b"rmq-offsets-journal 1\n";
/// The magic that starts the header, whatever the version.
const MAGIC: &[u8] = b"rmq-offsets-journal ";
/// Hex digits of a record's checksum.
const CRC_LEN: usize = 8;
const _: () = assert!(HEADER.len() == MAGIC.len() + 2);

/// One journaled commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Data version counter of the snapshot the commit was made on; replayed over snapshots up to this one.
    pub snapshot: i64,
    /// The consumer group.
    pub group: String,
    /// The topic.
    pub topic: String,
    /// The queue id.
    pub queue_id: i32,
    /// The committed offset (next queue offset to consume).
    pub offset: i64,
}

/// A line left out while reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineIssue {
    /// Byte offset of the line's first byte in the file.
    pub offset: usize,
    /// Line number, from 1.
    pub line: usize,
    /// True for an incomplete last line (a killed append), false for damage.
    pub torn: bool,
    /// What is wrong, for the user.
    pub reason: String,
}

/// What [`decode`] read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Journal {
    /// The good records, in file order.
    pub entries: Vec<Entry>,
    /// Lines left out: damaged ones, and a torn tail last.
    pub issues: Vec<LineIssue>,
    /// Length of the file up to the end of its last complete line (what a writer keeps before appending).
    pub complete_len: usize,
}

/// The record line for `entry`, LF included.
pub fn encode_entry(entry: &Entry) -> String {
    let mut payload = format!("[{},", entry.snapshot);
    quote(&mut payload, &entry.group);
    payload.push(',');
    quote(&mut payload, &entry.topic);
    payload.push_str(&format!(",{},{}]", entry.queue_id, entry.offset));
    format!("{:08x} {payload}\n", crc32fast::hash(payload.as_bytes()))
}

/// Reads a journal's bytes. Never fails: what cannot be read is listed in [`Journal::issues`].
pub fn decode(data: &[u8]) -> Journal {
    let mut out = Journal::default();
    let mut pos = 0;
    let mut line_no = 0;
    let mut legacy_allowed = true;
    if data.is_empty() {
        return out;
    }
    if data.starts_with(HEADER) {
        pos = HEADER.len();
        line_no = 1;
        legacy_allowed = false;
    } else if HEADER.starts_with(data) {
        // A kill while the header of a new journal was being written.
        out.issues.push(LineIssue { offset: 0, line: 1, torn: true, reason: "torn header".into() });
        return out;
    } else if let Some(version) = other_version(data) {
        let reason = format!("journal version {version} is not supported (this rmq reads version 1); file left out");
        out.issues.push(LineIssue { offset: 0, line: 1, torn: false, reason });
        out.complete_len = data.len();
        return out;
    }
    while pos < data.len() {
        line_no += 1;
        let rest = &data[pos..];
        let Some(len) = rest.iter().position(|&b| b == b'\n') else {
            let reason = format!("torn last line of {} bytes (a kill during an append)", rest.len());
            out.issues.push(LineIssue { offset: pos, line: line_no, torn: true, reason });
            break;
        };
        match record(&rest[..len], legacy_allowed) {
            Ok(Some(entry)) => out.entries.push(entry),
            Ok(None) => {}
            Err(reason) => out.issues.push(LineIssue { offset: pos, line: line_no, torn: false, reason }),
        }
        pos += len + 1;
        out.complete_len = pos;
    }
    out
}

/// The version of a well-formed header of another version (digits only, no leading zero); None otherwise,
/// and a damaged header is read as a damaged first line.
fn other_version(data: &[u8]) -> Option<&str> {
    let rest = data.strip_prefix(MAGIC)?;
    let end = rest.iter().position(|&b| b == b'\n')?;
    let version = std::str::from_utf8(&rest[..end]).ok()?;
    let well_formed = !version.is_empty() && version.bytes().all(|b| b.is_ascii_digit()) && !version.starts_with('0');
    (well_formed && version != "1").then_some(version)
}

/// One complete line (without its LF): a record, `None` for a blank line of a pre-version-1 journal.
fn record(line: &[u8], legacy_allowed: bool) -> Result<Option<Entry>, String> {
    if legacy_allowed {
        match line.first() {
            None => return Ok(None),
            Some(b'[') => return payload(line).map(Some),
            Some(_) => {}
        }
    }
    let (crc, rest) = line.split_at_checked(CRC_LEN).ok_or("line too short for a record")?;
    let body = rest.strip_prefix(b" ").ok_or("no space after the checksum")?;
    let want = std::str::from_utf8(crc)
        .ok()
        .filter(|h| h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
        .and_then(|h| u32::from_str_radix(h, 16).ok())
        .ok_or("checksum is not 8 lowercase hex digits")?;
    let got = crc32fast::hash(body);
    if got != want {
        return Err(format!("checksum mismatch (stored {want:08x}, computed {got:08x})"));
    }
    payload(body).map(Some)
}

/// `[snapshot, group, topic, queueId, offset]`, checked as `commit_offset` checks a commit.
fn payload(body: &[u8]) -> Result<Entry, String> {
    let mut p = Parser { text: body, pos: 0 };
    let value = p.value(1).map_err(|e| e.to_string())?;
    if p.peek().is_some() {
        return Err(format!("trailing bytes after the record (at byte {})", p.pos));
    }
    let Value::Array(fields) = value else { return Err(format!("the record is {}, not an array", describe(&value))) };
    let [snapshot, group, topic, queue_id, offset] = &fields[..] else {
        return Err(format!("the record has {} fields, not 5", fields.len()));
    };
    let name = |what: &str, v: &Value| match v {
        Value::Str(Ok(s)) if s.is_empty() => Err(format!("{what} is empty")),
        Value::Str(Ok(s)) if s.contains(TOPIC_GROUP_SEPARATOR) => Err(format!("{what} {s:?} contains '@'")),
        Value::Str(Ok(s)) => Ok(s.clone()),
        Value::Str(Err(raw)) => Err(format!("{what} {raw}")),
        other => Err(format!("{what} is {}, not a string", describe(other))),
    };
    let queue = as_long(queue_id)?;
    let queue_id =
        i32::try_from(queue).ok().filter(|q| *q >= 0).ok_or(format!("queue id {queue} is not a Java int >= 0"))?;
    Ok(Entry {
        snapshot: as_long(snapshot)?,
        group: name("group", group)?,
        topic: name("topic", topic)?,
        queue_id,
        offset: as_long(offset)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(n: i64) -> Entry {
        Entry { snapshot: 3, group: "G\u{e9}\"".into(), topic: format!("T{n}"), queue_id: 7, offset: n }
    }

    fn journal(n: i64) -> Vec<u8> {
        let mut data = HEADER.to_vec();
        for i in 0..n {
            data.extend_from_slice(encode_entry(&entry(i)).as_bytes());
        }
        data
    }

    #[test]
    fn golden_line() {
        let e = Entry { snapshot: 1, group: "G".into(), topic: "T".into(), queue_id: 0, offset: 5 };
        let payload = r#"[1,"G","T",0,5]"#;
        let crc = crc32fast::hash(payload.as_bytes());
        assert_eq!(encode_entry(&e), format!("{crc:08x} {payload}\n"));
        assert_eq!(crc, 0xe8bc_9bdb); // zlib.crc32(b'[1,"G","T",0,5]')
        let data = [HEADER, encode_entry(&e).as_bytes()].concat();
        assert_eq!(decode(&data), Journal { entries: vec![e], issues: vec![], complete_len: data.len() });
    }

    #[test]
    fn torn_tail_at_every_length_is_torn_not_damage() {
        let full = journal(3);
        let line = encode_entry(&entry(2)).len();
        for cut in 0..full.len() {
            let j = decode(&full[..cut]);
            assert!(j.issues.iter().all(|i| i.torn), "cut {cut}: {:?}", j.issues);
            assert!(j.issues.len() <= 1);
            let complete = full.len() - line;
            if cut >= complete {
                assert_eq!(j.entries, vec![entry(0), entry(1)]);
            }
        }
        assert!(decode(&full).issues.is_empty());
        assert_eq!(decode(b""), Journal::default());
    }

    #[test]
    fn every_flipped_bit_is_reported_and_the_other_lines_load() {
        let full = journal(4);
        for i in 0..full.len() {
            for bit in 0..8 {
                let mut data = full.clone();
                data[i] ^= 1 << bit;
                let j = decode(&data);
                let damaged: Vec<_> = j.issues.iter().filter(|x| !x.torn).collect();
                assert!(!damaged.is_empty() || data.last() != Some(&b'\n'), "byte {i} bit {bit} went unnoticed");
                assert!(j.entries.iter().all(|e| (0..4).map(entry).any(|x| x == *e)), "byte {i} bit {bit}");
                if i == MAGIC.len() && j.entries.is_empty() {
                    continue; // the version digit now names another version: the file is left out, reported
                }
                assert!(j.entries.len() >= 2, "byte {i} bit {bit}: one flip costs at most two lines");
                let line_end = |at: usize| data[at..].iter().position(|&b| b == b'\n').map_or(data.len(), |n| at + n);
                assert!(
                    damaged.is_empty() || damaged.iter().any(|x| x.offset <= i && i <= line_end(x.offset)),
                    "byte {i} bit {bit}: {damaged:?}"
                );
            }
        }
    }

    #[test]
    fn pre_version_1_lines_are_read() {
        let mut data = b"[0,\"G\",\"T\",1,5]\n\n[0,\"G\",\"T\",2,6]\n".to_vec();
        data.extend_from_slice(encode_entry(&entry(9)).as_bytes());
        data.extend_from_slice(b"[0,\"G@x\",\"T\",2,6]\n[0,\"G\",\"T\",-1,6]\n[0,\"G\",\"T\",1,1.5]\n");
        let j = decode(&data);
        assert_eq!(j.entries.len(), 3);
        assert_eq!(j.entries[2], entry(9));
        assert_eq!(j.issues.iter().map(|i| i.line).collect::<Vec<_>>(), [5, 6, 7]);
        // Version 1 does not take bare payloads: they have no checksum.
        let v1 = [HEADER, b"[0,\"G\",\"T\",1,5]\n"].concat();
        assert_eq!(decode(&v1).issues.len(), 1);
    }

    #[test]
    fn unknown_version_is_left_out_whole() {
        let data = [b"rmq-offsets-journal 2\n".as_slice(), encode_entry(&entry(1)).as_bytes()].concat();
        let j = decode(&data);
        assert!(j.entries.is_empty());
        assert_eq!(j.issues.len(), 1);
        assert!(!j.issues[0].torn);
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_decode_without_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            let j = decode(&bytes);
            proptest::prop_assert!(j.complete_len <= bytes.len());
        }

        #[test]
        fn records_round_trip(group in "[^@]{1,6}", topic in "[^@]{1,6}", queue_id in 0..=i32::MAX, offset: i64, snapshot: i64) {
            let e = Entry { snapshot, group, topic, queue_id, offset };
            let data = [HEADER, encode_entry(&e).as_bytes()].concat();
            let j = decode(&data);
            proptest::prop_assert!(j.issues.is_empty(), "{:?}", j.issues);
            proptest::prop_assert_eq!(j.entries, vec![e]);
        }
    }
}
