//! Splits of a commitlog for parallel reading, and the reader of one split.
//!
//! Where a task may start. A split starts only at a record start of the real log, proven by the planner:
//! [`plan_commitlog`] walks every segment's record chain from its first byte, from record to record by TOTALSIZE
//! (each record's PHYSICALOFFSET must equal its own position), and the split covering bytes
//! `[k * split_size, (k + 1) * split_size)` starts at the first record of that chain at or after its first byte. Nothing is inferred from content: a body holding a well-formed record, even one naming the
//! very offset it landed at (a producer can predict it: it is the commitlog's end), is never a split start,
//! because the chain steps over the whole body. The cost is one pass over the headers on the driver.
//!
//! What the bytes at a position are is decided by the commitlog cursor's rules ([`cursor::classify`]), the
//! ones recovery, dispatch and `get_message` use, applied to bytes read here with positioned reads. Validation
//! follows recovery: the newest segment that starts with a record is validated in full (every length, the body
//! CRC, the offset, a blank that fills the rest of the file) up to the end of the data, and what lies where its
//! chain stops is classified by opening's own rule ([`super::tail`]): zeros or an unfinished append end the
//! data, anything else is damage. Older segments, which recovery trusts, are walked without the body CRC, and a
//! record there whose fields do not add up but whose header holds together ([`cursor::header_size`]: magic code, TOTALSIZE, its own
//! PHYSICALOFFSET) stays in the chain: its reader reports it ([`SplitReader::take_skipped`]); a body with a bad
//! CRC is read and flagged (`body_crc_ok`). A chain that breaks anywhere else is damage: [`Error::Corruption`]
//! naming the segment file and the commitlog offset where the chain broke or, when the caller skips damage, the
//! damaged bytes are left out and reported in [`SegmentPlan::damage`]: the chain goes on at the next record that
//! validates completely (body CRC included) and names its own offset, as the read-only open's salvage goes on
//! (a body holding a record at another position never qualifies), and a split ends where damage begins. The
//! chain and the damage do not depend on the split size, so neither do the rows.
//!
//! Files are read with positioned reads into a window, not mapped: a reader may run against a store a broker
//! is still writing, and a read never faults.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::{tail, ColumnBatch, ColumnMask, RecordFilter};
use crate::commitlog::cursor::{self, Found};
use crate::commitlog::recover::{lost_page_in, tail_zeroed, LOST_PAGE};
use crate::error::{Error, Result};
use crate::file_queue::parse_file_name;
use crate::message::decode::CheckOptions;
use crate::message::{END_FILE_MIN_BLANK_LENGTH, MAGIC_V1, MAGIC_V2};

/// How the newest segment's records are checked, as recovery checks them (`checkCRCOnRecover`).
pub(super) const FULL: CheckOptions = CheckOptions { check_crc: true, force_prop_crc: false };
/// How older segments' records are checked: every length and the offset; a bad body CRC is a flag on the row.
const HEADERS: CheckOptions = CheckOptions { check_crc: false, force_prop_crc: false };

/// Bytes read per positioned read.
pub(super) const CHUNK: usize = 8 << 20;

/// A growable read window over one file (positioned reads; nothing mapped).
pub(super) struct Window {
    pub(super) file: File,
    path: PathBuf,
    pub(super) file_len: u64,
    buf: Vec<u8>,
    /// File position of `buf[0]`.
    at: u64,
}

impl Window {
    pub(super) fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let file_len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        Ok(Window { file, path: path.to_owned(), file_len, buf: Vec::new(), at: 0 })
    }

    /// The bytes from `pos` to at least `pos + len` (fewer at the end of the file), reading as needed.
    pub(super) fn get(&mut self, pos: u64, len: usize) -> Result<&[u8]> {
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

/// The bytes at `at` for [`cursor::classify`]: at least 8 (when the file has them), and, behind a message magic
/// code, the whole record that TOTALSIZE claims when it fits in the file, so that they classify as the whole rest
/// of the file would. (Behind any other magic code, a blank's included, the first 8 bytes decide: the blank's
/// TOTALSIZE, the rest of its segment, is never read.)
pub(super) fn record_bytes(w: &mut Window, at: u64) -> Result<&[u8]> {
    let left = w.file_len.saturating_sub(at);
    let head = w.get(at, END_FILE_MIN_BLANK_LENGTH)?;
    let word = |i: usize| head.get(i..i + 4).and_then(|b| <[u8; 4]>::try_from(b).ok()).map_or(0, i32::from_be_bytes);
    let (claimed, magic) = (word(0), word(4));
    let want =
        u64::try_from(claimed).ok().filter(|&n| n <= left && (magic == MAGIC_V1 || magic == MAGIC_V2)).unwrap_or(0);
    w.get(at, (want as usize).max(END_FILE_MIN_BLANK_LENGTH))
}

/// One step of the record chain: what is at `at` of the segment starting at commitlog offset `base`, by the
/// cursor's rules with `opts`. Fewer bytes left than a blank takes end the segment's records, as a blank does.
pub(super) fn step(w: &mut Window, base: i64, at: u64, opts: CheckOptions) -> Result<Found> {
    let left = w.file_len.saturating_sub(at);
    if left < END_FILE_MIN_BLANK_LENGTH as u64 {
        return Ok(Found::Blank);
    }
    let bytes = record_bytes(w, at)?;
    Ok(cursor::classify(bytes, base as u64 + at, left, opts))
}

/// The size of the record at `at` when its header holds together ([`cursor::header_size`]).
fn header_size(w: &mut Window, base: i64, at: u64) -> Result<Option<u64>> {
    let left = w.file_len.saturating_sub(at);
    Ok(cursor::header_size(w.get(at, cursor::HEADER_HOP_LEN)?, base as u64 + at, left))
}

/// Why a step that is neither a record nor a blank breaks the chain (in the words dispatch and `get_message` use).
fn broken(found: Found) -> String {
    match found {
        Found::Zero => "bad magic code 0x00000000".into(),
        Found::Partial => "record is truncated".into(),
        Found::Invalid { reason, .. } => reason,
        Found::Record(_) => "a record".into(),
        Found::Blank => "the end-of-file blank".into(),
    }
}

/// Where a segment's chain ends.
enum ChainEnd {
    /// At the blank filler (or the file's last bytes): the segment is full.
    Blank(u64),
    /// At a position that holds no record.
    Broken { at: u64, reason: String },
}

/// Walks the chain of a segment from position `from` (its first byte, or where a reader goes on after damage),
/// calling `visit` with each record's position. With `full`
/// (the newest segment) records are checked as recovery checks them, and with `unclean` as well (a crash is
/// possible) a record whose topic or properties are zeros where a power loss reverted a page ends the chain, as
/// it ends opening's walk. Otherwise the walk steps over every record whose header holds together
/// ([`cursor::header_size`]), whether or not its other fields add up (its reader checks them and reports a
/// record that does not), which is the same chain at the cost of reading headers.
fn walk(
    w: &mut Window,
    base: i64,
    from: u64,
    full: bool,
    unclean: bool,
    mut visit: impl FnMut(u64),
) -> Result<ChainEnd> {
    // `prev`, the record hopped over last, is visited only once the chain goes on past it or is found to end
    // where its size says: see `hopped_over_damage`.
    let (mut at, mut prev, mut before) = (from, None, None);
    let opts = if full { FULL } else { HEADERS };
    let ended = |at: u64, why: String, prev: Option<u64>| {
        let reason = match prev {
            Some(p) => format!("{why} (the record before it starts at commitlog offset {})", base + p as i64),
            None => why,
        };
        Ok(ChainEnd::Broken { at, reason })
    };
    loop {
        let hop = if full { None } else { header_size(w, base, at)? };
        let size = match hop {
            Some(n) => n,
            None => match step(w, base, at, opts)? {
                Found::Record(h) => {
                    if unclean && full {
                        let rest = w.get(at, h.total_size as usize + 2 * 4096)?;
                        if tail_zeroed(&h, rest) && lost_page_in(rest, at as usize) {
                            prev.map(&mut visit);
                            return ended(at, LOST_PAGE.to_owned(), prev);
                        }
                    }
                    h.total_size as u64
                }
                end => {
                    if let Some(p) = prev.filter(|_| !full) {
                        if let Some(why) = hopped_over_damage(w, base, p)? {
                            return ended(p, why, before);
                        }
                    }
                    prev.map(&mut visit);
                    return match end {
                        Found::Blank => Ok(ChainEnd::Blank(at)),
                        other => ended(at, broken(other), prev),
                    };
                }
            },
        };
        prev.map(&mut visit);
        (before, prev) = (prev, Some(at));
        at += size;
    }
}

/// Why the record at `at`, which a walk over an older segment stepped over by its TOTALSIZE alone and after
/// which the chain ended, is itself the damage: its lengths do not add up (a flipped bit in TOTALSIZE makes the
/// hop land inside or past the records after it). The chain then ends at it, so that the search for where to
/// go on starts inside it and finds the intact records its wrong size would have jumped.
fn hopped_over_damage(w: &mut Window, base: i64, at: u64) -> Result<Option<String>> {
    Ok(match step(w, base, at, HEADERS)? {
        Found::Record(_) => None,
        other => Some(broken(other)),
    })
}

/// Bytes of a segment left out of the rows, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// Commitlog offset of the first byte left out.
    pub offset: i64,
    /// Bytes left out: a record's TOTALSIZE, or from where the chain broke to the next record that validates
    /// completely and names its own offset (or to the end of the segment).
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
    /// `[starts[i], ends[i])`. Empty when the segment holds no record.
    pub starts: Vec<u64>,
    /// Split ends: the next split's start, where damaged bytes left out begin, or `data_end`.
    pub ends: Vec<u64>,
    /// Where the segment's records end (the blank filler, the end of the data, or damage with no valid record
    /// after it in the segment).
    pub data_end: u64,
    /// With damage skipped, the damaged bytes left out, in order: each from where the chain broke to the next
    /// record that validates completely and names its own offset, where the chain goes on (as the read-only
    /// open's salvage goes on), or to the end of the segment.
    pub damage: Vec<Skipped>,
}

/// Where a segment's splits begin and end, as its chain is walked.
struct Cuts {
    split_size: u64,
    /// The next split begins at the first record at or after this position.
    next_cut: u64,
}

impl Cuts {
    fn new(split_size: u64) -> Self {
        Cuts { split_size, next_cut: 0 }
    }

    /// A record of the chain at `at`.
    fn record(&mut self, plan: &mut SegmentPlan, at: u64) {
        if at >= self.next_cut {
            Self::close(plan, at);
            plan.starts.push(at);
            self.next_cut = (at / self.split_size + 1).saturating_mul(self.split_size);
        }
    }

    /// The open split, if any, ends at `at`; the next record begins a split.
    fn close(plan: &mut SegmentPlan, at: u64) {
        if plan.ends.len() < plan.starts.len() {
            plan.ends.push(at);
        }
    }

    /// After damaged bytes: the record the chain goes on at begins a split of its own.
    fn resume(&mut self, plan: &mut SegmentPlan, at: u64) {
        Self::close(plan, at);
        self.next_cut = 0;
    }
}

/// A segment file and the commitlog offset of its first byte.
type Segment = (PathBuf, i64);

/// Commitlog offsets between two listed segments that no file holds: the end of a truncated file, or segment
/// files that are missing.
struct Gap {
    /// Index (in the segment list) of the segment before the gap.
    after: usize,
    /// The file that should hold `offset`: the truncated segment, or the first missing one.
    path: PathBuf,
    offset: i64,
    length: u64,
    reason: String,
}

/// The commitlog segments (files named by the 20-digit offset of their first byte) of `dir`, in offset order,
/// and the gaps between them (offsets no file holds).
///
/// A broker may be writing the directory meanwhile, and a listing is not a snapshot: a segment created during
/// `readdir` may be missed while a newer one is listed (ext4 lists in hash order), and a listed file may be gone
/// before its length is read (retention at the front, a writer removing its segment made ahead at its close).
/// So a segment missing between two listed ones is looked up by name (the earlier segment's length is the
/// step), and a listed file that has gone is left out (as in [`crate::file_queue::FileQueue::load`]'s views).
/// A gap that remains is damage unless the segment before it has gone too (retention removes the oldest
/// segments first, so then everything before the gap was removed after the listing).
fn segments(dir: &Path) -> Result<(Vec<Segment>, Vec<Gap>)> {
    let gone = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
    let mut listed = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name();
        let Some(base) = name.to_str().filter(|n| n.len() == 20).and_then(parse_file_name) else { continue };
        match entry.file_type() {
            Ok(t) if t.is_file() => listed.push((entry.path(), base as i64)),
            Ok(_) => {}
            Err(e) if gone(&e) => {}
            Err(e) => return Err(Error::io(entry.path(), e)),
        }
    }
    listed.sort_by_key(|s| s.1);
    #[cfg(test)]
    tests::LISTED.with(|hook| hook.borrow_mut().as_mut().map(|f| f(&mut listed)));
    let mut out = Vec::with_capacity(listed.len());
    let mut lens = Vec::with_capacity(listed.len());
    let mut i = 0;
    while let Some((path, base)) = listed.get(i).cloned() {
        i += 1;
        let len = match std::fs::metadata(&path) {
            Ok(m) => m.len(),
            Err(e) if gone(&e) => continue,
            Err(e) => return Err(Error::io(&path, e)),
        };
        out.push((path, base));
        lens.push(len);
        if let Some(&(_, next)) = listed.get(i) {
            let (Ok(start), Ok(next)) = (u64::try_from(base), u64::try_from(next)) else { continue };
            if let Some((expected, path)) = crate::file_queue::missing_segment(dir, start, len, next) {
                listed.insert(i, (path, expected as i64));
            }
        }
    }
    // The segments' size: the length most of them have (the largest of the most common).
    let mut counted = lens.clone();
    counted.sort_unstable();
    let size = counted.chunk_by(|a, b| a == b).max_by_key(|run| (run.len(), run[0])).map_or(0, |run| run[0]);
    let mut gaps = Vec::new();
    let mut first = 0;
    for i in 0..out.len().saturating_sub(1) {
        let (base, len, next) = (out[i].1 as u64, lens[i], out[i + 1].1 as u64);
        let end = base.saturating_add(len);
        if end >= next {
            continue; // contiguous, or overlapping (an extended file: its walk reports it)
        }
        if !out[i].0.exists() {
            first = i + 1; // removed by retention since the listing, with everything before it
            gaps.clear();
            continue;
        }
        let name = |p: &Path| p.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let mut missing_from = end;
        if len < size {
            let to = base.saturating_add(size).min(next);
            gaps.push(Gap {
                after: i,
                path: out[i].0.clone(),
                offset: end as i64,
                length: to - end,
                reason: format!(
                    "the file is {len} bytes where the other files of this directory are {size}: it was truncated, \
                     and commitlog offsets [{end}, {to}) are in no file"
                ),
            });
            missing_from = to;
        }
        if missing_from < next {
            let path = dir.join(crate::file_queue::file_name(missing_from));
            let files = if size > 0 && next - missing_from > size { "segment files from" } else { "segment file" };
            gaps.push(Gap {
                after: i,
                reason: format!(
                    "{files} {} missing: commitlog offsets [{missing_from}, {next}) between {} and {} are in no \
                     file",
                    name(&path),
                    name(&out[i].0),
                    name(&out[i + 1].0),
                ),
                path,
                offset: missing_from as i64,
                length: next - missing_from,
            });
        }
    }
    out.drain(..first);
    for g in &mut gaps {
        g.after -= first;
    }
    Ok((out, gaps))
}

/// Plans the splits of the commitlog directory `dir`: each segment's record chain walked once, cut at the
/// first record at or after every multiple of `split_size` bytes (see the module docs). Damage is an
/// [`Error::Corruption`] naming file and offset, or, with `skip_damage`, reported in the plan.
pub fn plan_commitlog(dir: &Path, split_size: u64, skip_damage: bool) -> Result<Vec<SegmentPlan>> {
    if split_size == 0 {
        return Err(Error::InvalidConfig("the split size must be at least 1 byte".into()));
    }
    let (segs, gaps) = segments(dir)?;
    // The newest segment that starts with a whole record holds the end of the data; newer ones (a crash leaves
    // the pre-allocated next segment all-zero) must hold no record.
    let mut last = None;
    for (i, (path, base)) in segs.iter().enumerate().rev() {
        let mut w = Window::open(path)?;
        if matches!(step(&mut w, *base, 0, FULL)?, Found::Record(_)) {
            last = Some(i);
            break;
        }
    }
    let around = tail::Around::of(dir)?;
    let mut plans = Vec::with_capacity(segs.len());
    // Plans of missing segment files (no splits, only the gap as damage), merged in by offset at the end.
    let mut missing = Vec::new();
    // The first position after the newest segment's chain that is neither a record nor a blank (segment, file
    // position, why): what lies from there on is classified as opening classifies it.
    let mut end_at: Option<(usize, u64, String)> = None;
    const AFTER_END: &str = "the segment after the end of the data does not start with a record";
    for (i, (path, base)) in segs.iter().enumerate() {
        let mut plan = SegmentPlan {
            path: path.clone(),
            base: *base,
            starts: Vec::new(),
            ends: Vec::new(),
            data_end: 0,
            damage: Vec::new(),
        };
        if last.is_none_or(|l| i > l) {
            if end_at.is_none() {
                // What its start holds, when that is not the zeros of a segment made ahead (a damaged first
                // record: say what is wrong with it, as opening does).
                let why = match step(&mut Window::open(path)?, *base, 0, FULL)? {
                    found @ Found::Invalid { .. } => {
                        format!("the segment's first record is damaged: {}", broken(found))
                    }
                    _ => AFTER_END.into(),
                };
                end_at = Some((i, 0, why));
            }
            plans.push(plan);
            continue;
        }
        let mut w = Window::open(path)?;
        let full = Some(i) == last;
        let mut cuts = Cuts::new(split_size);
        let mut from = 0;
        loop {
            match walk(&mut w, *base, from, full, around.unclean, |at| cuts.record(&mut plan, at))? {
                ChainEnd::Blank(at) => plan.data_end = at,
                ChainEnd::Broken { at, reason } if full => {
                    plan.data_end = at;
                    end_at = Some((i, at, reason));
                }
                ChainEnd::Broken { at, reason } => {
                    if !skip_damage {
                        return Err(Error::Corruption { path: plan.path, offset: base + at as i64, reason });
                    }
                    let len = w.file_len;
                    let resume = tail::next_valid(&mut w, *base, at + 1, len)?;
                    let to = resume.unwrap_or(len);
                    plan.damage.push(Skipped { offset: base + at as i64, length: to - at, reason });
                    match resume {
                        Some(q) => {
                            cuts.resume(&mut plan, at);
                            from = q;
                            continue;
                        }
                        None => plan.data_end = at,
                    }
                }
            }
            break;
        }
        let end = plan.data_end;
        Cuts::close(&mut plan, end);
        // Offsets no file holds between this segment and the next, which holds records: never skipped silently.
        for g in gaps.iter().filter(|g| g.after == i && last.is_some_and(|l| i < l)) {
            if !skip_damage {
                return Err(Error::Corruption { path: g.path.clone(), offset: g.offset, reason: g.reason.clone() });
            }
            let skipped = Skipped { offset: g.offset, length: g.length, reason: g.reason.clone() };
            if g.path == plan.path {
                plan.damage.push(skipped);
            } else {
                missing.push(SegmentPlan {
                    path: g.path.clone(),
                    base: g.offset,
                    starts: Vec::new(),
                    ends: Vec::new(),
                    data_end: 0,
                    damage: vec![skipped],
                });
            }
        }
        plans.push(plan);
    }
    while let Some((i, at, reason)) = end_at.take() {
        let Some(why) = tail::damage_after(&segs, i, at, &around)? else { break };
        let (path, base) = &segs[i];
        let reason = format!("{reason}; {}", why.reason);
        if !skip_damage {
            return Err(Error::Corruption { path: path.clone(), offset: base + at as i64, reason });
        }
        let length = tail::file_len(path)?;
        let seg = *base as u64;
        // The valid records after the damage: when the first lies in the same segment (the newest one, or the
        // one after it when its first record is the damage) the chain goes on there (salvage's rule), validated
        // as the newest segment's is, and the end of the data is classified again where it next breaks.
        let resume = why.following.first().map(|&(o, _)| o).filter(|&o| o > seg + at && o < seg + length);
        if let Some(q) = resume {
            let q = q - seg;
            let plan = &mut plans[i];
            plan.damage.push(Skipped { offset: base + at as i64, length: q - at, reason });
            let mut cuts = Cuts::new(split_size);
            cuts.resume(plan, at);
            let mut w = Window::open(path)?;
            match walk(&mut w, *base, q, true, around.unclean, |p| cuts.record(plan, p))? {
                ChainEnd::Blank(e) => {
                    plan.data_end = e;
                    end_at = (i + 1 < segs.len()).then(|| (i + 1, 0, AFTER_END.into()));
                }
                ChainEnd::Broken { at: e, reason } => {
                    plan.data_end = e;
                    end_at = Some((i, e, reason));
                }
            }
            let end = plan.data_end;
            Cuts::close(plan, end);
            continue;
        }
        plans[i].damage.push(Skipped { offset: base + at as i64, length: length.saturating_sub(at), reason });
        // Later segments whose valid records are left out with it.
        for plan in plans.iter_mut().skip(i + 1) {
            let (from, length) = (plan.base as u64, tail::file_len(&plan.path)?);
            if why.following.iter().any(|&(o, _)| o >= from && o < from + length) {
                let reason = format!("valid records after the damage at commitlog offset {}", base + at as i64);
                plan.damage.push(Skipped { offset: plan.base, length, reason });
            }
        }
    }
    if !missing.is_empty() {
        plans.extend(missing);
        plans.sort_by_key(|p| p.base);
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
            let size = match step(&mut self.w, self.base, at, HEADERS)? {
                Found::Record(h) => {
                    let size = h.total_size as u64;
                    let record = self.w.get(at, size as usize)?.get(..size as usize).unwrap_or_default();
                    if self.filter.keeps(record, &h) {
                        batch.push_record(record, &h);
                    }
                    size
                }
                Found::Blank => {
                    self.done = true;
                    break;
                }
                other => {
                    let why = broken(other);
                    // A record of the chain whose other fields do not add up: the planner kept it by its size.
                    let Some(n) = header_size(&mut self.w, self.base, at)? else {
                        return Err(self.damage(
                            at,
                            format!(
                                "{why}; splits start at record starts the planner proved, so the file changed since"
                            ),
                        ));
                    };
                    if !self.skip_damage {
                        return Err(self.damage(at, why));
                    }
                    self.skipped.push(Skipped { offset: self.base + at as i64, length: n, reason: why });
                    n
                }
            };
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    type Listing = dyn FnMut(&mut Vec<(PathBuf, i64)>);

    thread_local! {
        /// Sees the planner's listing of a commitlog directory (a test makes it miss a segment, as a listing
        /// made while a broker creates one can).
        pub(super) static LISTED: crate::race::Hook<Listing> = const { std::cell::RefCell::new(None) };
    }

    #[test]
    fn a_plan_does_not_miss_a_segment_a_listing_missed_or_fail_on_one_gone() {
        let tmp = tempfile::tempdir().unwrap();
        let mut cfg = crate::config::StoreConfig::default();
        cfg.commit_log.mapped_file_size_commit_log = 4096;
        let store = crate::store::MessageStore::open(tmp.path(), cfg).unwrap();
        while store.commitlog().max_offset() < 3 * 4096 + 100 {
            store.put(&crate::store::PutMessage::new("T", 0, &[7u8; 100])).unwrap();
        }
        store.close().unwrap();
        let dir = tmp.path().join("commitlog");
        let whole = plan_commitlog(&dir, 1 << 20, false).unwrap();
        let bases = |plans: &[SegmentPlan]| plans.iter().map(|p| p.base).collect::<Vec<_>>();
        assert_eq!(bases(&whole), [0, 4096, 8192, 12288]);
        let plan = |race: Box<Listing>| {
            LISTED.with(|h| *h.borrow_mut() = Some(race));
            let plan = plan_commitlog(&dir, 1 << 20, false);
            LISTED.with(|h| *h.borrow_mut() = None);
            plan.unwrap()
        };
        // Missed by the listing: found by name.
        let missed = plan(Box::new(|listed| {
            listed.remove(1);
        }));
        assert_eq!(bases(&missed), bases(&whole));
        assert_eq!(
            missed.iter().map(|p| p.data_end).collect::<Vec<_>>(),
            whole.iter().map(|p| p.data_end).collect::<Vec<_>>()
        );
        // Listed, then gone (retention removed the first segment): left out.
        let first = dir.join(crate::file_queue::file_name(0));
        let kept = std::fs::read(&first).unwrap();
        let f = first.clone();
        let retained = plan(Box::new(move |_| std::fs::remove_file(&f).unwrap()));
        assert_eq!(bases(&retained), [4096, 8192, 12288]);
        std::fs::write(&first, kept).unwrap();
    }
}
