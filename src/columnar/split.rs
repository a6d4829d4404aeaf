//! Splits of a commitlog for parallel reading, and the reader of one split.
//!
//! Where a task may start. A split starts only at a record start of the real log, proven by the planner:
//! [`plan_commitlog`] walks every segment's record chain from its first byte, hopping from header to header
//! (TOTALSIZE, MAGICCODE, and PHYSICALOFFSET, which must equal the record's own position), and the split
//! covering bytes `[k * split_size, (k + 1) * split_size)` starts at the first record of that chain at or after
//! its first byte. Nothing is inferred from content: a body holding a well-formed record, even one naming the
//! very offset it landed at (a producer can predict it: it is the commitlog's end), is never a split start,
//! because the chain steps over the whole body. The cost is one pass over the headers on the driver.
//!
//! Validation follows recovery (`CommitLog::find_end`): the newest segment that starts with a record is
//! validated in full (every length, the body CRC, the offset) up to the end of the data, which is where its
//! chain stops on zeros or on a torn write (bytes after it that hold no valid record). Older segments, which
//! recovery trusts, are walked by their headers, and every record is checked in full by the task that reads
//! it. A chain that breaks anywhere else is damage: [`Error::Corruption`] naming the segment file and the
//! commitlog offset where the chain broke or, when the caller skips damage, the rest of that segment is left
//! out and reported in [`SegmentPlan::damage`]. A record that is in the chain but whose fields do not add up
//! is reported by its reader the same way ([`SplitReader::take_skipped`]). The chain and the damage do not depend on
//! the split size, so neither do the rows.
//!
//! Files are read with positioned reads into a window, not mapped: a reader may run against a store a broker
//! is still writing, and a read never faults.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::{ColumnBatch, ColumnMask, RecordFilter};
use crate::error::{Error, Result};
use crate::file_queue::parse_file_name;
use crate::message::decode::{check_record, CheckOptions, RecordCheck};
use crate::message::{pos, BLANK_MAGIC, END_FILE_MIN_BLANK_LENGTH, MAGIC_V1, MAGIC_V2};

/// Bytes a header hop reads: TOTALSIZE | MAGICCODE | BODYCRC | QUEUEID | FLAG | QUEUEOFFSET | PHYSICALOFFSET.
const HOP_LEN: usize = pos::PHYSICAL_OFFSET + 8;
const _: () = assert!(HOP_LEN == 36);

/// Bytes after the end of the data that tell a clean end (zeros) from a torn or corrupt tail, as recovery checks.
const CLEAN_END_WINDOW: usize = 64 << 10;

/// Bytes read per positioned read.
const CHUNK: usize = 8 << 20;

/// A growable read window over one file (positioned reads; nothing mapped).
struct Window {
    file: File,
    path: PathBuf,
    file_len: u64,
    buf: Vec<u8>,
    /// File position of `buf[0]`.
    at: u64,
}

impl Window {
    fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let file_len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        Ok(Window { file, path: path.to_owned(), file_len, buf: Vec::new(), at: 0 })
    }

    /// The bytes from `pos` to at least `pos + len` (fewer at the end of the file), reading as needed.
    fn get(&mut self, pos: u64, len: usize) -> Result<&[u8]> {
        let want_end = pos.saturating_add(len as u64).min(self.file_len);
        let have_end = self.at + self.buf.len() as u64;
        if pos < self.at || want_end > have_end {
            let read_len =
                (want_end.saturating_sub(pos)).max(CHUNK as u64).min(self.file_len.saturating_sub(pos)) as usize;
            if pos >= self.at && pos < have_end {
                // Keep the overlap, read only what follows it.
                self.buf.drain(..(pos - self.at) as usize);
            } else {
                self.buf.clear();
            }
            self.at = pos;
            let from = self.buf.len().min(read_len);
            self.buf.resize(read_len, 0);
            let mut done = from;
            while done < read_len {
                match self.file.read_at(&mut self.buf[done..], pos + done as u64) {
                    Ok(0) => break,
                    Ok(n) => done += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(Error::io(&self.path, e)),
                }
            }
            self.buf.truncate(done);
        }
        let start = (pos.saturating_sub(self.at) as usize).min(self.buf.len());
        Ok(&self.buf[start..])
    }
}

/// What one step of the chain walk finds at a position.
enum Step {
    /// A record of this many bytes.
    Record(u64),
    /// The end-of-file blank (or fewer bytes left than a blank takes): the segment's records end here.
    Blank,
    /// No record, and why.
    Broken(String),
}

/// One step of the record chain: what is at `at` of the segment starting at commitlog offset `base`. With
/// `full`, a record is validated as recovery validates the newest segment (every length, the body CRC, a blank
/// that fills the rest of the file); otherwise by its header (size within the segment, magic code,
/// PHYSICALOFFSET). This is the one place that decides what the walk accepts.
fn step(w: &mut Window, base: i64, at: u64, full: bool) -> Result<Step> {
    let left = w.file_len.saturating_sub(at);
    if left < END_FILE_MIN_BLANK_LENGTH as u64 {
        return Ok(Step::Blank);
    }
    let head = w.get(at, HOP_LEN)?;
    let word = |i: usize| head.get(i..i + 4).and_then(|b| <[u8; 4]>::try_from(b).ok()).map(i32::from_be_bytes);
    let (Some(total), Some(magic)) = (word(pos::TOTAL_SIZE), word(pos::MAGIC)) else {
        return Ok(Step::Broken("the record header is cut off by the end of the file".into()));
    };
    if magic == BLANK_MAGIC {
        if full && u64::try_from(total).ok() != Some(left) {
            return Ok(Step::Broken(format!("the blank filler claims {total} bytes, {left} remain")));
        }
        return Ok(Step::Blank);
    }
    if magic != MAGIC_V1 && magic != MAGIC_V2 {
        return Ok(Step::Broken(format!("bad magic code 0x{:08X}", magic as u32)));
    }
    let size = match u64::try_from(total) {
        Ok(n) if n >= HOP_LEN as u64 && n <= left => n,
        _ => return Ok(Step::Broken(format!("TOTALSIZE {total} does not fit the {left} bytes left in the segment"))),
    };
    let stored =
        head.get(pos::PHYSICAL_OFFSET..HOP_LEN).and_then(|b| <[u8; 8]>::try_from(b).ok()).map(i64::from_be_bytes);
    let here = base + at as i64;
    match stored {
        Some(s) if s == here => {}
        Some(s) => return Ok(Step::Broken(format!("the record there names commitlog offset {s} instead of its own"))),
        None => return Ok(Step::Broken("the record header is cut off by the end of the file".into())),
    }
    if full {
        let bytes = w.get(at, size as usize)?;
        let record = bytes.get(..size as usize).unwrap_or_default();
        match check_record(record, CheckOptions { check_crc: true, force_prop_crc: false }) {
            RecordCheck::Message(h) if h.total_size as u64 == size => {}
            RecordCheck::Invalid { reason, .. } => return Ok(Step::Broken(reason.to_string())),
            _ => return Ok(Step::Broken("not a whole record".into())),
        }
    }
    Ok(Step::Record(size))
}

/// Where a segment's chain ends.
enum ChainEnd {
    /// At the blank filler (or the file's last bytes): the segment is full.
    Blank(u64),
    /// At a position that holds no record.
    Broken { at: u64, reason: String },
}

/// Walks the chain of a segment from its first byte, calling `visit` with each record's position.
fn walk(w: &mut Window, base: i64, full: bool, mut visit: impl FnMut(u64)) -> Result<ChainEnd> {
    let (mut at, mut prev) = (0u64, None);
    loop {
        match step(w, base, at, full)? {
            Step::Record(size) => {
                visit(at);
                prev = Some(at);
                at += size;
            }
            Step::Blank => return Ok(ChainEnd::Blank(at)),
            Step::Broken(why) => {
                let reason = match prev {
                    Some(p) => format!("{why} (the record before it starts at commitlog offset {})", base + p as i64),
                    None => why,
                };
                return Ok(ChainEnd::Broken { at, reason });
            }
        }
    }
}

/// The first whole record (body CRC good, at its own offset) at or after `from`, unless the bytes from `from`
/// start with a window of zeros (a clean end). This is how recovery tells a torn tail (no record follows) from
/// damage in the middle of the data (one does).
fn valid_record_after(w: &mut Window, base: i64, from: u64) -> Result<Option<u64>> {
    if w.get(from, CLEAN_END_WINDOW)?.iter().take(CLEAN_END_WINDOW).all(|b| *b == 0) {
        return Ok(None);
    }
    let magics = [MAGIC_V1.to_be_bytes(), MAGIC_V2.to_be_bytes()];
    let mut p = from;
    while p + END_FILE_MIN_BLANK_LENGTH as u64 <= w.file_len {
        let chunk = w.get(p, CHUNK)?;
        let n = chunk.len();
        let candidates: Vec<u64> = (0..n.saturating_sub(7))
            .filter(|i| chunk.get(i + 4..i + 8).is_some_and(|m| magics.iter().any(|v| v == m)))
            .map(|i| p + i as u64)
            .collect();
        for c in candidates {
            if let Step::Record(_) = step(w, base, c, true)? {
                return Ok(Some(c));
            }
        }
        if n < 8 {
            break;
        }
        // Overlap by 7 bytes so that no magic code straddling the chunk end is missed.
        p += (n - 7) as u64;
    }
    Ok(None)
}

/// Bytes of a segment left out of the rows, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// Commitlog offset of the first byte left out.
    pub offset: i64,
    /// Bytes left out (a record's TOTALSIZE, or the rest of the segment where its chain broke).
    pub length: u64,
    pub reason: String,
}

/// What the planner proved about one segment.
#[derive(Debug, Clone)]
pub struct SegmentPlan {
    pub path: PathBuf,
    /// Commitlog offset of the segment's first byte.
    pub base: i64,
    /// Split starts: positions of records of the chain, ascending. Split `i` reads the records in
    /// `[starts[i], starts[i + 1])`, the last one up to `data_end`. Empty when the segment holds no record.
    pub starts: Vec<u64>,
    /// Where the segment's records end (the blank filler, the end of the data, or the damage).
    pub data_end: u64,
    /// Where the chain broke, when damage is skipped: the rest of the segment is not read.
    pub damage: Option<Skipped>,
}

/// The commitlog segments (files named by the 20-digit offset of their first byte) of `dir`, in offset order.
fn segments(dir: &Path) -> Result<Vec<(PathBuf, i64)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name();
        let Some(base) = name.to_str().filter(|n| n.len() == 20).and_then(parse_file_name) else { continue };
        if entry.file_type().map_err(|e| Error::io(entry.path(), e))?.is_file() {
            out.push((entry.path(), base as i64));
        }
    }
    out.sort_by_key(|s| s.1);
    Ok(out)
}

/// Plans the splits of the commitlog directory `dir`: each segment's record chain walked once, cut at the
/// first record at or after every multiple of `split_size` bytes (see the module docs). Damage is an
/// [`Error::Corruption`] naming file and offset, or, with `skip_damage`, reported in the plan.
pub fn plan_commitlog(dir: &Path, split_size: u64, skip_damage: bool) -> Result<Vec<SegmentPlan>> {
    if split_size == 0 {
        return Err(Error::InvalidConfig("the split size must be at least 1 byte".into()));
    }
    let segs = segments(dir)?;
    // The newest segment that starts with a whole record holds the end of the data; newer ones (a crash leaves
    // the pre-allocated next segment all-zero) must hold no record.
    let mut last = None;
    for (i, (path, base)) in segs.iter().enumerate().rev() {
        let mut w = Window::open(path)?;
        if matches!(step(&mut w, *base, 0, true)?, Step::Record(_)) {
            last = Some(i);
            break;
        }
    }
    let mut plans = Vec::with_capacity(segs.len());
    for (i, (path, base)) in segs.into_iter().enumerate() {
        let mut w = Window::open(&path)?;
        let mut plan = SegmentPlan { path, base, starts: Vec::new(), data_end: 0, damage: None };
        let broken = if last.is_none_or(|l| i > l) {
            valid_record_after(&mut w, base, 0)?.map(|found| ChainEnd::Broken {
                at: 0,
                reason: format!(
                    "the segment after the end of the data does not start with a record, yet a valid record \
                     follows at commitlog offset {}",
                    base + found as i64
                ),
            })
        } else {
            let full = Some(i) == last;
            let mut next_cut = 0u64;
            let starts = &mut plan.starts;
            let end = walk(&mut w, base, full, |at| {
                if at >= next_cut {
                    starts.push(at);
                    next_cut = (at / split_size + 1).saturating_mul(split_size);
                }
            })?;
            match end {
                ChainEnd::Blank(at) => {
                    plan.data_end = at;
                    None
                }
                ChainEnd::Broken { at, reason } => {
                    plan.data_end = at;
                    match (full, valid_record_after(&mut w, base, at)?) {
                        (true, None) => None, // the end of the data: zeros, or a torn write
                        (true, Some(found)) => Some(ChainEnd::Broken {
                            at,
                            reason: format!(
                                "{reason}; yet a valid record follows at commitlog offset {}",
                                base + found as i64
                            ),
                        }),
                        (false, _) => Some(ChainEnd::Broken { at, reason }),
                    }
                }
            }
        };
        if let Some(ChainEnd::Broken { at, reason }) = broken {
            if !skip_damage {
                return Err(Error::Corruption { path: plan.path, offset: base + at as i64, reason });
            }
            plan.damage = Some(Skipped { offset: base + at as i64, length: w.file_len.saturating_sub(at), reason });
        }
        plans.push(plan);
    }
    Ok(plans)
}

/// Reads the records of one split: those in `[start, end)` of one segment, `start` being a record start the
/// planner proved.
pub struct SplitReader {
    w: Window,
    base: i64,
    pos: u64,
    end: u64,
    mask: ColumnMask,
    filter: RecordFilter,
    skip_damage: bool,
    skipped: Vec<Skipped>,
    done: bool,
}

impl SplitReader {
    /// `path` is a segment whose first byte is commitlog offset `base`; `start` is a split start of its
    /// [`SegmentPlan`] and `end` the next one (or its `data_end`). With `skip_damage`, a record whose fields do
    /// not add up is left out and reported by [`SplitReader::take_skipped`] instead of failing the read.
    pub fn open(
        path: &Path,
        base: i64,
        start: u64,
        end: u64,
        mask: ColumnMask,
        filter: RecordFilter,
        skip_damage: bool,
    ) -> Result<Self> {
        let w = Window::open(path)?;
        let end = end.min(w.file_len);
        Ok(SplitReader { w, base, pos: start, end, mask, filter, skip_damage, skipped: Vec::new(), done: start >= end })
    }

    /// The next batch of at most `max_rows` rows and about `max_bytes` of data, or `None` at the end of the split.
    pub fn next_batch(&mut self, max_rows: usize, max_bytes: usize) -> Result<Option<ColumnBatch>> {
        let mut batch = ColumnBatch::new(self.mask);
        while !self.done && batch.rows < max_rows.max(1) && batch.data_bytes() < max_bytes {
            if self.pos >= self.end {
                self.done = true;
                break;
            }
            let at = self.pos;
            let size = match step(&mut self.w, self.base, at, false)? {
                Step::Record(size) => size,
                Step::Blank => {
                    self.done = true;
                    break;
                }
                Step::Broken(why) => {
                    return Err(self.damage(
                        at,
                        format!("{why}; splits start at record starts the planner proved, so the file changed since"),
                    ));
                }
            };
            let record = self.w.get(at, size as usize)?.get(..size as usize).unwrap_or_default();
            match check_record(record, CheckOptions::default()) {
                RecordCheck::Message(h) if h.total_size as u64 == size => {
                    if self.filter.keeps(record, &h) {
                        batch.push_record(record, &h);
                    }
                }
                RecordCheck::Invalid { reason, .. } if self.skip_damage => {
                    self.skipped.push(Skipped {
                        offset: self.base + at as i64,
                        length: size,
                        reason: reason.to_string(),
                    });
                }
                RecordCheck::Invalid { reason, .. } => return Err(self.damage(at, reason.to_string())),
                _ => return Err(self.damage(at, "not a whole record".into())),
            }
            self.pos += size;
        }
        if batch.rows == 0 && self.done {
            return Ok(None);
        }
        Ok(Some(batch))
    }

    /// Records left out so far (with `skip_damage`), taken: each is reported once.
    pub fn take_skipped(&mut self) -> Vec<Skipped> {
        std::mem::take(&mut self.skipped)
    }

    fn damage(&self, at: u64, reason: String) -> Error {
        Error::Corruption { path: self.w.path.clone(), offset: self.base + at as i64, reason }
    }
}
