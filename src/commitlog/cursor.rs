//! THE walk over the commitlog: what the bytes at a position are, and how to move on from there. Recovery,
//! scan, dispatch and `get_message` all read the log through these rules, so they agree on every byte.
//!
//! | step      | bytes at the position                                   | the cursor moves            |
//! |-----------|---------------------------------------------------------|-----------------------------|
//! | `Record`  | a valid record whose stored PHYSICALOFFSET is this one  | past the record             |
//! | `Blank`   | the end-of-file blank, TOTALSIZE = the rest of the file | to the next segment's start |
//! | `Zero`    | 8 zero bytes: nothing was committed here                | not (the caller decides)    |
//! | `Partial` | a record that runs past the readable limit              | not (wait for the writer)   |
//! | `Invalid` | anything else                                           | not (the caller decides)    |
//!
//! A position closer than 8 bytes to its segment's end holds nothing (RocketMQ rolls there), and the cursor
//! steps to the next segment silently.
//!
//! The rules themselves are [`classify`], over bytes however they were read: [`at`] applies them to a mapped
//! segment, the Spark reader (`columnar::split`) to bytes it reads with positioned reads. Where a reader may go on
//! after damaged bytes is [`validates_completely`], searched for by [`find_valid_record`] and by the Spark reader;
//! a walk over a segment it trusts steps over a record whose header holds together by [`header_size`].

use std::sync::Arc;

use crate::file_queue::{FileQueue, SegmentCache};
use crate::message::decode::{check_record, property_crc_ok, CheckOptions, Invalid, RecordCheck};
use crate::message::properties::{self, keys};
use crate::message::{pos, RecordHeader, END_FILE_MIN_BLANK_LENGTH, MAGIC_V1, MAGIC_V2};
use crate::mmap::MappedFile;

use super::Record;

/// What the cursor found at its position.
#[derive(Debug, Clone)]
pub enum Step {
    /// A valid record.
    Record(Record),
    /// The end-of-file blank at `offset`.
    Blank { offset: u64 },
    /// The record header at `offset` is all zeros: the end of the data, or an append whose commit word was
    /// never written.
    Zero { offset: u64, file: Arc<MappedFile> },
    /// A record whose claimed size runs past the cursor's limit (still being written, or torn).
    Partial { offset: u64, file: Arc<MappedFile> },
    /// Bytes that are not a record. `size` is TOTALSIZE when the record's fields agree on it.
    Invalid { offset: u64, file: Arc<MappedFile>, reason: String, size: Option<i32> },
    /// The segment holding `offset` does not exist.
    Missing { offset: u64 },
}

/// A position in the commitlog and the limit it may read up to.
#[derive(Debug)]
pub struct Cursor<'a> {
    queue: &'a FileQueue,
    offset: u64,
    limit: u64,
    opts: CheckOptions,
    segment: SegmentCache,
}

impl<'a> Cursor<'a> {
    /// A cursor at `offset` that reads no byte at or beyond `limit`, checking records with `opts`.
    pub fn new(queue: &'a FileQueue, offset: u64, limit: u64, opts: CheckOptions) -> Self {
        Cursor { queue, offset, limit, opts, segment: SegmentCache::default() }
    }

    /// The current position.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Moves to `offset` (a record start, a blank or a segment start).
    pub fn seek(&mut self, offset: u64) {
        self.offset = offset;
    }

    /// The step at the current position; `None` at the limit. `Record` and `Blank` move the cursor on.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<Step> {
        loop {
            if self.offset >= self.limit {
                return None;
            }
            let offset = self.offset;
            let Some(file) = self.segment.find(self.queue, offset) else { return Some(Step::Missing { offset }) };
            if file.end() - offset < END_FILE_MIN_BLANK_LENGTH as u64 {
                self.offset = file.end();
                continue;
            }
            let step = at(file, offset, self.limit, self.opts);
            match &step {
                Step::Record(r) => self.offset = offset + r.header.total_size as u64,
                Step::Blank { .. } => self.offset = file.end(),
                _ => {}
            }
            return Some(step);
        }
    }

    /// The first position at or after `from` (up to the limit) holding a record that validates completely
    /// (body CRC, the `__CRC32#` property when present) and names its own offset: where a reader may go on
    /// after damaged bytes.
    pub fn resync(&self, from: u64) -> Option<u64> {
        find_valid_record(self.queue, from, self.limit, false)
    }
}

/// What the bytes at `offset` of `file` are, reading no further than `limit`.
pub fn at(file: &Arc<MappedFile>, offset: u64, limit: u64, opts: CheckOptions) -> Step {
    let pos = (offset - file.start()) as usize;
    let avail = (file.end().min(limit).max(offset) - offset) as usize;
    let bytes = file.slice(pos, avail).unwrap_or_default();
    match classify(bytes, offset, file.end() - offset, opts) {
        Found::Record(header) => Step::Record(Record { file: file.clone(), pos, header }),
        Found::Blank => Step::Blank { offset },
        Found::Zero => Step::Zero { offset, file: file.clone() },
        Found::Partial => Step::Partial { offset, file: file.clone() },
        Found::Invalid { reason, size } => Step::Invalid { offset, file: file.clone(), reason, size },
    }
}

/// What [`classify`] found: a [`Step`] without the segment it was read from.
#[derive(Debug, Clone)]
pub enum Found {
    /// A valid record whose stored PHYSICALOFFSET is its own.
    Record(RecordHeader),
    /// The end-of-file blank, filling the rest of the segment.
    Blank,
    /// 8 zero bytes.
    Zero,
    /// A record that runs past the readable bytes but not past its segment.
    Partial,
    /// Anything else; `size` as in [`Step::Invalid`].
    Invalid { reason: String, size: Option<i32> },
}

/// The rules of the walk over bytes read any way (a mapping, or positioned reads: the Spark reader must not map
/// a live broker's files). `bytes` are the readable bytes from commitlog offset `offset`, cut at the reader's
/// limit or the segment end, `to_file_end` the bytes from `offset` to the segment end. A prefix of the readable
/// bytes gives the same answer as all of them when it holds at least 8 bytes and, behind a message magic code,
/// the whole claimed record (TOTALSIZE, the first 4 bytes) when that fits in the readable bytes.
pub fn classify(bytes: &[u8], offset: u64, to_file_end: u64, opts: CheckOptions) -> Found {
    let avail = bytes.len() as u64;
    let head_zero = bytes.get(..END_FILE_MIN_BLANK_LENGTH).is_some_and(|h| h.iter().all(|&b| b == 0));
    if head_zero {
        return Found::Zero;
    }
    match check_record(bytes, opts) {
        RecordCheck::Message(header) if header.physical_offset == offset as i64 => Found::Record(header),
        RecordCheck::Message(h) => Found::Invalid {
            reason: format!("the record here claims offset {}", h.physical_offset),
            size: Some(h.total_size),
        },
        RecordCheck::Blank { size } if u64::try_from(size).ok() == Some(to_file_end) => Found::Blank,
        RecordCheck::Blank { size } => Found::Invalid {
            reason: format!("an end-of-file blank claims {size} bytes where {to_file_end} remain"),
            size: None,
        },
        // A record that ends past the limit but inside its segment may still be being written.
        RecordCheck::Invalid { reason: Invalid::Truncated, .. }
            if avail < to_file_end
                && claimed_size(bytes).is_some_and(|n| n as u64 > avail && n as u64 <= to_file_end) =>
        {
            Found::Partial
        }
        RecordCheck::Invalid { reason, size } => Found::Invalid { reason: reason.to_string(), size },
    }
}

/// Bytes of a record header that [`header_size`] reads: TOTALSIZE | MAGICCODE | BODYCRC | QUEUEID | FLAG |
/// QUEUEOFFSET | PHYSICALOFFSET.
pub const HEADER_HOP_LEN: usize = pos::PHYSICAL_OFFSET + 8;
const _: () = assert!(HEADER_HOP_LEN == 36);

/// TOTALSIZE of the record at the start of `bytes` (commitlog offset `offset`, `to_file_end` bytes before its
/// segment ends) when its header holds together, whatever its other fields say: a message magic code, a TOTALSIZE
/// that covers the header and fits in the segment, and a PHYSICALOFFSET naming its own offset. A walk over a
/// segment it trusts (an older one, whose records are checked one by one when they are read) steps over such a
/// record by its size instead of ending there, and whoever reads the record reports it.
pub fn header_size(bytes: &[u8], offset: u64, to_file_end: u64) -> Option<u64> {
    let head = bytes.get(..HEADER_HOP_LEN)?;
    let word = |i: usize| head.get(i..i + 4).and_then(|b| <[u8; 4]>::try_from(b).ok()).map(i32::from_be_bytes);
    let magic = word(pos::MAGIC)?;
    let stored = head.get(pos::PHYSICAL_OFFSET..).and_then(|b| <[u8; 8]>::try_from(b).ok()).map(i64::from_be_bytes)?;
    let size = u64::try_from(word(pos::TOTAL_SIZE)?).ok()?;
    let fits = size >= HEADER_HOP_LEN as u64 && size <= to_file_end;
    ((magic == MAGIC_V1 || magic == MAGIC_V2) && fits && stored == offset as i64).then_some(size)
}

/// TOTALSIZE at the start of `bytes`, when it is there and positive.
fn claimed_size(bytes: &[u8]) -> Option<usize> {
    let word = <[u8; 4]>::try_from(bytes.get(..4)?).ok()?;
    usize::try_from(i32::from_be_bytes(word)).ok().filter(|&n| n > 0)
}

/// Searches from `from` up to `limit`, across segments, for a position holding a record that validates
/// completely and names its own offset: body CRC, and the `__CRC32#` property when it has one (always when
/// `require_prop_crc`).
pub fn find_valid_record(queue: &FileQueue, from: u64, limit: u64, require_prop_crc: bool) -> Option<u64> {
    find_valid_record_in(queue, from, limit, limit, require_prop_crc)
}

/// [`find_valid_record`] for a record that starts before `starts_before` and may end after it (within its
/// segment): the search reads nothing at or after `starts_before` but the candidates' own bytes. For the bytes
/// after a damaged position up to the last non-zero byte of the log, without faulting in the never-written
/// rest of its segment (up to a gigabyte of holes).
pub fn find_valid_record_starting_before(
    queue: &FileQueue,
    from: u64,
    starts_before: u64,
    require_prop_crc: bool,
) -> Option<u64> {
    find_valid_record_in(queue, from, starts_before, u64::MAX, require_prop_crc)
}

/// Candidates start before `starts_before`; a record's bytes are read up to `read_to` (and its segment's end).
fn find_valid_record_in(
    queue: &FileQueue,
    from: u64,
    starts_before: u64,
    read_to: u64,
    require_prop_crc: bool,
) -> Option<u64> {
    let mut at_offset = from;
    while at_offset < starts_before {
        let file = queue.find(at_offset).or_else(|| queue.files().into_iter().find(|f| f.start() > at_offset))?;
        let base = file.start();
        if base >= starts_before {
            return None; // the next segment after a gap starts past the search
        }
        let start = at_offset.max(base);
        let end = file.end().min(read_to);
        let bytes = file.slice(0, (end.max(base) - base) as usize).unwrap_or_default();
        // A candidate at q has its magic at q + 4..q + 8.
        let search_end = ((file.end().min(starts_before) - base) as usize).saturating_add(7);
        let search = bytes.get(..search_end.min(bytes.len())).unwrap_or_default();
        let mut q = (start - base) as usize;
        while q + 8 <= search.len() {
            match next_candidate(search, q) {
                None => break,
                Some(c) => q = c,
            }
            if bytes.get(q..).is_some_and(|rest| validates_completely(rest, base + q as u64, require_prop_crc)) {
                return Some(base + q as u64);
            }
            q += 1;
        }
        at_offset = file.end();
    }
    None
}

/// Whether the record at the start of `bytes` (which may run on past it), at commitlog offset `offset`,
/// validates completely and names its own offset: lengths, body CRC, and the `__CRC32#` property when it has one
/// (always when `require_prop_crc`). Where a reader may go on after damaged bytes.
pub fn validates_completely(bytes: &[u8], offset: u64, require_prop_crc: bool) -> bool {
    let RecordCheck::Message(h) = check_record(bytes, CheckOptions { check_crc: true, force_prop_crc: false }) else {
        return false;
    };
    let record = bytes.get(..h.total_size as usize).unwrap_or_default();
    let has_prop_crc = properties::get_raw(h.properties(record), keys::CRC32).is_some();
    h.physical_offset == offset as i64 && (!(has_prop_crc || require_prop_crc) || property_crc_ok(record, &h))
}

/// The first position `q >= from` whose bytes `q + 4..q + 8` are a message magic code: a candidate record start
/// for [`validates_completely`].
pub fn next_candidate(bytes: &[u8], from: usize) -> Option<usize> {
    let magics = [MAGIC_V1.to_be_bytes(), MAGIC_V2.to_be_bytes()];
    memchr_magic(bytes, from.checked_add(4)?, &magics).map(|m| m - 4)
}

/// The first position `p >= from` (p ≥ 4) where `bytes[p..p + 4]` is one of `magics`.
fn memchr_magic(bytes: &[u8], from: usize, magics: &[[u8; 4]; 2]) -> Option<usize> {
    let mut p = from;
    // Both magic codes start with 0xDA: look for that byte first.
    while p + 4 <= bytes.len() {
        let rel = bytes.get(p..)?.iter().position(|&b| b == 0xDA)?;
        p += rel;
        let word = bytes.get(p..p + 4)?;
        if magics.iter().any(|m| m == word) {
            return Some(p);
        }
        p += 1;
    }
    None
}

/// Offset one past the last non-zero byte of `bytes`, or 0 when all are zero. Scans from the end in blocks
/// (the OR-fold vectorises), so a mostly-zero segment tail costs little more than reading it.
pub fn nonzero_extent(bytes: &[u8]) -> usize {
    let mut end = bytes.len();
    while end > 0 {
        let start = end.saturating_sub(4096);
        let block = bytes.get(start..end).unwrap_or_default();
        if block.iter().fold(0u8, |a, &b| a | b) != 0 {
            return start + block.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        }
        end = start;
    }
    0
}
