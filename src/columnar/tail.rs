//! What lies after the end of the data, for the commitlog planner: the facts opening's rule
//! ([`classify_tail`]) asks for, read with positioned reads, and the store around the commitlog (its abort
//! file, checkpoint, consume queues and index) that tells a crash's leftovers from damage.
//!
//! An export or a Spark job over a store therefore says what an open of it says: the remains of an unfinished
//! append (a killed writer, or one still writing) end the data; bytes no kill leaves (a record damaged after a
//! clean close, a record the consume queues already point at) are damage, never a silent end of the data.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::split::{record_bytes, step, Window, CHUNK, FULL};
use crate::checkpoint::{AbortFile, StoreCheckpoint};
use crate::commitlog::cursor::{self, nonzero_extent};
use crate::commitlog::recover::{classify_tail, lost_page_in, Tail, TailFacts, TailPlace};
use crate::consume_queue::{CqEntry, UNIT};
use crate::error::{Error, Result};
use crate::file_queue::parse_file_name;
use crate::index::IndexHeader;
use crate::message::decode::parse_header;
use crate::message::RecordHeader;
use crate::mmap::data_ranges;

/// The store a commitlog directory belongs to: its parent, when the directory is named `commitlog` and the
/// parent holds a store's other files. `None`: a commitlog on its own.
fn store_root(dir: &Path) -> Option<&Path> {
    if dir.file_name()? != "commitlog" {
        return None;
    }
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    ["abort", "checkpoint", "consumequeue", "index", "config"].iter().any(|n| parent.join(n).exists()).then_some(parent)
}

/// What opening would know besides the commitlog's bytes ([`RecoverOptions`](crate::commitlog::RecoverOptions)):
/// whether the last writer closed cleanly, and until when its records were flushed. For a commitlog on its own,
/// opening's defaults: a crash is possible and every record was flushed.
pub(super) struct Around {
    root: Option<PathBuf>,
    pub(super) unclean: bool,
    durable_timestamp: i64,
}

impl Around {
    pub(super) fn of(dir: &Path) -> Result<Self> {
        Ok(match store_root(dir) {
            None => Around { root: None, unclean: true, durable_timestamp: i64::MAX },
            Some(root) => Around {
                unclean: AbortFile::exists(root),
                durable_timestamp: StoreCheckpoint::open_read_only(root)?.values().physic_msg_timestamp,
                root: Some(root.to_owned()),
            },
        })
    }
}

/// Why the bytes from the end of the data on are damage, and the valid records after them (offset, size).
pub(super) struct Damage {
    pub reason: String,
    pub following: Vec<(u64, u64)>,
}

/// Whether the bytes from position `at` of segment `idx` on (the first that is neither a record nor a blank
/// after the newest segment's chain) are damage by opening's rule (`None`: the end of the data, followed by
/// zeros or by the remains of an unfinished append). Before damage is declared the bytes at `at` are read
/// again: a writer that finished the append there meanwhile, or filled the segment's end with its blank and
/// went on in the next segment (a live store), only moved the end of the data.
pub(super) fn damage_after(segs: &[(PathBuf, i64)], idx: usize, at: u64, around: &Around) -> Result<Option<Damage>> {
    let Some((path, base)) = segs.get(idx) else { return Ok(None) };
    let mut w = Window::open(path)?;
    let (p, file_end) = (*base as u64 + at, *base as u64 + w.file_len);
    let next = match segs.get(idx + 1) {
        Some((path, base)) if *base as u64 == file_end => Some((file_end, file_end + file_len(path)?)),
        _ => None,
    };
    // Whether anything after `p` is non-zero, looked for in the window after it (in the next segment too when
    // `p`'s ends within it): where the data ends in zeros, every unfinished append and every damaged record
    // shows there. Opening scans to the end of the last segment; reading a segment's zeroed rest (on ext4 the
    // warm pages are data extents) tripled the planner's time on a fresh 256 MiB segment, to find only bytes
    // lying beyond a run of zeros, which hold no record anyone wrote and which `rmq check` reports.
    let mut nonzero_after = nonzero_in(&mut w, at, at.saturating_add(CLEAN_END_WINDOW))?;
    let left = w.file_len.saturating_sub(at);
    if !nonzero_after && left < CLEAN_END_WINDOW {
        if let Some((path, _)) = segs.get(idx + 1) {
            nonzero_after = nonzero_in(&mut Window::open(path)?, 0, CLEAN_END_WINDOW - left)?;
        }
    }
    let mut facts = PlanTail { segs, idx, at, root: around.root.as_deref(), w, dispatched: None };
    let place = TailPlace { p, file_end, next };
    let Tail::Damaged { following } =
        classify_tail(place, nonzero_after, around.unclean, around.durable_timestamp, &mut facts)?
    else {
        return Ok(None);
    };
    // A record, or the end-of-file blank of a writer that moved on to the next segment (`at` read as zeros).
    if matches!(step(&mut Window::open(path)?, *base, at, FULL)?, cursor::Found::Record(_) | cursor::Found::Blank) {
        return Ok(None);
    }
    let reason = match (following.first(), following.last()) {
        (Some(&(first, _)), Some(&(last, size))) => {
            format!("{} valid record(s) follow, from commitlog offset {first} to {}", following.len(), last + size)
        }
        _ if !around.unclean => "non-zero bytes follow, and the store was closed cleanly (it has no abort file): \
                                 no unfinished write leaves them"
            .to_owned(),
        _ => format!(
            "the consume queues or the index hold entries up to commitlog offset {}: a committed record was here",
            facts.dispatched_end()?
        ),
    };
    Ok(Some(Damage { reason, following }))
}

/// The length of the file at `path`.
pub(super) fn file_len(path: &Path) -> Result<u64> {
    Ok(std::fs::metadata(path).map_err(|e| Error::io(path, e))?.len())
}

/// Bytes after the end of the data in which [`damage_after`] looks for a non-zero byte.
const CLEAN_END_WINDOW: u64 = 64 << 10;

/// Whether `w`'s file holds a non-zero byte in `[from, to)`.
fn nonzero_in(w: &mut Window, from: u64, to: u64) -> Result<bool> {
    let to = to.min(w.file_len);
    if from >= to {
        return Ok(false);
    }
    let bytes = w.get(from, (to - from) as usize)?;
    Ok(nonzero_extent(&bytes[..bytes.len().min((to - from) as usize)]) > 0)
}

/// One past the last non-zero byte of `w`'s file at or after `from` (file positions), reading only the
/// extents that may hold data; with `first`, the first non-zero byte found ends the search (any position
/// after it is returned).
fn last_nonzero(w: &mut Window, from: u64, first: bool) -> Result<Option<u64>> {
    let mut last = None;
    for (a, b) in data_ranges(&w.file, from as usize, w.file_len as usize) {
        let mut pos = a as u64;
        while pos < b as u64 {
            let chunk = w.get(pos, CHUNK)?;
            let n = chunk.len().min((b as u64 - pos) as usize);
            if n == 0 {
                break;
            }
            let extent = nonzero_extent(&chunk[..n]);
            if extent > 0 {
                last = Some(pos + extent as u64);
                if first {
                    return Ok(last);
                }
            }
            pos += n as u64;
        }
    }
    Ok(last)
}

/// [`TailFacts`] for the planner: segment `idx` holds the first invalid position, at `at` of its file.
struct PlanTail<'a> {
    segs: &'a [(PathBuf, i64)],
    idx: usize,
    at: u64,
    root: Option<&'a Path>,
    /// Segment `idx`'s window.
    w: Window,
    dispatched: Option<u64>,
}

impl TailFacts for PlanTail<'_> {
    fn following(&mut self) -> Result<Vec<(u64, RecordHeader)>> {
        let mut out = Vec::new();
        for (j, (path, base)) in self.segs.iter().enumerate().skip(self.idx) {
            let mut own;
            let w = if j == self.idx {
                &mut self.w
            } else {
                own = Window::open(path)?;
                &mut own
            };
            let from = if j == self.idx { self.at + 1 } else { 0 };
            let base = *base as u64;
            for (a, b) in data_ranges(&w.file, from as usize, w.file_len as usize) {
                let (mut q, end) = (a as u64, b as u64);
                while let Some(c) = next_candidate(w, q, end)? {
                    let bytes = record_bytes(w, c)?;
                    if cursor::validates_completely(bytes, base + c, false) {
                        if let Ok(h) = parse_header(bytes) {
                            q = c + (h.total_size as u64).max(1);
                            out.push((base + c, h));
                            continue;
                        }
                    }
                    q = c + 1;
                }
            }
        }
        Ok(out)
    }

    fn lost_page(&mut self) -> Result<bool> {
        let head = self.w.get(self.at, 8)?;
        let claimed = head.get(..4).map_or(0, |b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]));
        let want = usize::try_from(claimed).unwrap_or(0).max(8) + 2 * 4096;
        let bytes = self.w.get(self.at, want)?;
        let bytes = &bytes[..bytes.len().min(want)];
        Ok(lost_page_in(bytes, self.at as usize))
    }

    fn here_extent(&mut self) -> Result<u64> {
        Ok(last_nonzero(&mut self.w, self.at, false)?.map_or(0, |e| e - self.at))
    }

    fn beyond_next(&mut self) -> Result<bool> {
        for (path, _) in self.segs.iter().skip(self.idx + 2) {
            if last_nonzero(&mut Window::open(path)?, 0, true)?.is_some() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn dispatched_end(&mut self) -> Result<u64> {
        if self.dispatched.is_none() {
            self.dispatched = Some(self.root.map_or(Ok(0), dispatched_end)?);
        }
        Ok(self.dispatched.unwrap_or(0))
    }
}

/// The first position in `[from, to)` of `w`'s file (a segment starting at commitlog offset `base`) where a
/// record validates completely and names its own offset: where a reader goes on after damaged bytes, as the
/// read-only open's salvage and the commitlog cursor do.
pub(super) fn next_valid(w: &mut Window, base: i64, from: u64, to: u64) -> Result<Option<u64>> {
    let mut q = from;
    while let Some(c) = next_candidate(w, q, to)? {
        if cursor::validates_completely(record_bytes(w, c)?, base as u64 + c, false) {
            return Ok(Some(c));
        }
        q = c + 1;
    }
    Ok(None)
}

/// The first position in `[from, end)` of `w`'s file whose bytes 4..8 are a message magic code.
fn next_candidate(w: &mut Window, from: u64, end: u64) -> Result<Option<u64>> {
    let mut p = from;
    while p + 8 <= end {
        let chunk = w.get(p, CHUNK)?;
        // The range's last candidate's magic code ends 7 bytes past it (zeros, where the range ends at a hole).
        let n = chunk.len().min((end - p) as usize + 7);
        if let Some(c) = cursor::next_candidate(&chunk[..n], 0) {
            return Ok(Some(p + c as u64).filter(|&c| c < end));
        }
        if n < 8 {
            break;
        }
        // Overlap by 7 bytes so that no magic code straddling the chunk end is missed.
        p += (n - 7) as u64;
    }
    Ok(None)
}

/// [`RecoverOptions::dispatched_end`](crate::commitlog::RecoverOptions) of the store at `root`, read with
/// positioned reads: the end of the last entry of every consume queue, and one past the newest index file's
/// endPhyOffset (0: nothing dispatched). A file removed while it is read (retention on a live store) counts
/// as holding nothing.
fn dispatched_end(root: &Path) -> Result<u64> {
    let mut end = 0i64;
    for topic in subdirs(&root.join("consumequeue"))? {
        for queue in subdirs(&topic)? {
            end = end.max(queue_end(&queue)?);
        }
    }
    let index = root.join("index");
    let mut names: Vec<String> = listing(&index)?
        .into_iter()
        .filter(|n| !n.is_empty() && n.len() <= 18 && n.bytes().all(|b| b.is_ascii_digit()))
        .collect();
    names.sort();
    for name in names.iter().rev() {
        let mut head = [0u8; 40];
        if !read_at(&index.join(name), &mut head, 0)? {
            continue;
        }
        if let Some(h) = IndexHeader::decode(&head).filter(|h| h.index_count > 1) {
            end = end.max(h.end_phy_offset.saturating_add(1));
            break;
        }
    }
    Ok(end.max(0) as u64)
}

/// The names in a directory (none if it is missing).
fn listing(dir: &Path) -> Result<Vec<String>> {
    let entries = match std::fs::read_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        r => r.map_err(|e| Error::io(dir, e))?,
    };
    let mut out = Vec::new();
    for entry in entries {
        out.push(entry.map_err(|e| Error::io(dir, e))?.file_name().to_string_lossy().into_owned());
    }
    Ok(out)
}

fn subdirs(dir: &Path) -> Result<Vec<PathBuf>> {
    Ok(listing(dir)?.into_iter().map(|n| dir.join(n)).filter(|p| p.is_dir()).collect())
}

/// Reads `buf.len()` bytes at `at`; false when the file is gone or shorter.
fn read_at(path: &Path, buf: &mut [u8], at: u64) -> Result<bool> {
    let file = match File::open(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        r => r.map_err(|e| Error::io(path, e))?,
    };
    match file.read_exact_at(buf, at) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// The end of the last message entry of one consume queue (-1: none). Entries are written in order from a
/// file's start, so the valid ones of a file are a prefix, found by bisection.
fn queue_end(dir: &Path) -> Result<i64> {
    let mut names: Vec<(u64, String)> =
        listing(dir)?.into_iter().filter(|n| n.len() == 20).filter_map(|n| Some((parse_file_name(&n)?, n))).collect();
    names.sort();
    for (_, name) in names.iter().rev() {
        let path = dir.join(name);
        let Ok(meta) = std::fs::metadata(&path) else { continue };
        let entry = |i: u64| -> Result<Option<CqEntry>> {
            let mut b = [0u8; UNIT as usize];
            Ok(if read_at(&path, &mut b, i * UNIT)? { CqEntry::decode(&b).filter(CqEntry::is_valid) } else { None })
        };
        // The number of valid entries: entries [0, lo) are valid, [hi, n) are not.
        let (mut lo, mut hi) = (0u64, meta.len() / UNIT);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if entry(mid)?.is_some() {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        if let Some(e) = lo.checked_sub(1).map(entry).transpose()?.flatten().filter(|e| !e.is_pre_blank()) {
            return Ok(e.end());
        }
    }
    Ok(-1)
}
