//! ConsumeQueue: the logical queue of one (topic, queue id), 20-byte entries pointing into the commitlog
//! (spec §6). Entry `q` lives at logical byte `q × 20`; files hold `file_size / 20` entries and are named
//! by the logical offset of their first byte.
//!
//! One dispatcher thread appends; any thread reads. Appends write beyond the published logical end and then
//! publish it (release); readers read only below it (acquire), which is the mapping's soundness rule.

pub mod store;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::file_queue::FileQueue;
use crate::mmap::MappedFile;

/// Bytes per entry (`CQ_STORE_UNIT_SIZE`).
pub const UNIT: u64 = 20;
/// Entries per file by default.
pub const DEFAULT_ENTRIES_PER_FILE: u64 = 300_000;
/// `mappedFileSizeConsumeQueue` default: 6 000 000 bytes.
pub const DEFAULT_FILE_SIZE: u64 = DEFAULT_ENTRIES_PER_FILE * UNIT;

/// The configured file size rounded up to a whole number of entries, as RocketMQ's getter does.
pub fn round_file_size(configured: u64) -> u64 {
    configured.div_ceil(UNIT).max(1) * UNIT
}

/// `rollNextFile(q)`: the first queue offset of the file after the one holding `q`.
pub fn roll_next_file(queue_offset: u64, entries_per_file: u64) -> u64 {
    queue_offset + entries_per_file - queue_offset % entries_per_file
}

/// One consume-queue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqEntry {
    /// Commitlog offset of the record.
    pub offset: i64,
    /// TOTALSIZE of the record.
    pub size: i32,
    /// tagsCode (or an ext address).
    pub tags_code: i64,
}

/// The entry `fillPreBlank` writes before the first real entry of a queue that starts mid-file.
pub const PRE_BLANK: CqEntry = CqEntry { offset: 0, size: i32::MAX, tags_code: 0 };

/// Pre-blank entries over `[from, to)` of `file` (positions in it, multiples of 20), in writes of up to 64 KiB.
fn write_pre_blanks(file: &MappedFile, from: usize, to: usize) -> Result<()> {
    let blank = PRE_BLANK.encode();
    let chunk: Vec<u8> =
        blank.iter().copied().cycle().take((to - from).min(1 << 16) / blank.len() * blank.len()).collect();
    let mut pos = from;
    while pos < to {
        let n = (to - pos).min(chunk.len());
        file.write_at(pos, &chunk[..n])?;
        pos += n;
    }
    Ok(())
}

impl CqEntry {
    /// The 20 big-endian bytes.
    pub fn encode(&self) -> [u8; 20] {
        let mut b = [0u8; 20];
        b[..8].copy_from_slice(&self.offset.to_be_bytes());
        b[8..12].copy_from_slice(&self.size.to_be_bytes());
        b[12..].copy_from_slice(&self.tags_code.to_be_bytes());
        b
    }

    /// Decodes 20 bytes (`None` if fewer).
    pub fn decode(b: &[u8]) -> Option<Self> {
        let offset = i64::from_be_bytes(b.get(..8)?.try_into().ok()?);
        let size = i32::from_be_bytes(b.get(8..12)?.try_into().ok()?);
        let tags_code = i64::from_be_bytes(b.get(12..20)?.try_into().ok()?);
        Some(CqEntry { offset, size, tags_code })
    }

    /// RocketMQ's validity test during recovery: `offset ≥ 0 && size > 0` (pre-blank entries pass).
    pub fn is_valid(&self) -> bool {
        self.offset >= 0 && self.size > 0
    }

    /// Whether this is a pre-blank filler rather than a message.
    pub fn is_pre_blank(&self) -> bool {
        *self == PRE_BLANK
    }

    /// Commitlog offset one past the record.
    pub fn end(&self) -> i64 {
        self.offset.saturating_add(i64::from(self.size))
    }
}

/// `BoundaryType` of a time search: the first entry at/after the time (`Lower`) or the last at/before (`Upper`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BoundaryType {
    #[default]
    Lower,
    Upper,
}

/// Outcome of an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    /// The entry was written at `queue_offset`; `new_gap`: the record carried a queue offset further from it
    /// than the entry before did (the first entry after a gap in the queue's records).
    Written { queue_offset: u64, new_gap: bool },
    /// Already present (duplicate-skip rule or an earlier logical offset): nothing written.
    Duplicate,
}

#[derive(Debug)]
struct Writer {
    /// End offset in the commitlog of the last entry written or recovered (`maxPhysicOffset`), −1 if none.
    max_physic_offset: i64,
    /// Entries written at a position other than their queue offset (RocketMQ logs a warning and appends).
    gaps: u64,
    /// How far the last entry written lay before the queue offset its record carried.
    shift: u64,
    /// One past the highest queue offset a dispatched record carried (beyond `max_offset` only after gaps).
    next_expected: u64,
}

/// What [`ConsumeQueue::recover`] found after the queue's valid entries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Non-zero bytes after the first invalid entry (and the 20 bytes it takes): a hole a killed process cannot
    /// leave (entries are written in order), so entries after it were lost (power loss, damage) and the queue
    /// must be rebuilt from the commitlog from its last good entry on.
    pub hole: bool,
    /// The first invalid entry holds non-zero bytes: a write a kill cut short, or, after a clean close, damage
    /// (then its record lies before where dispatch restarts, and is dispatched again only if the queue is).
    pub torn_entry: bool,
}

/// The consume queue of one (topic, queue id).
#[derive(Debug)]
pub struct ConsumeQueue {
    topic: String,
    queue_id: i32,
    files: FileQueue,
    writer: Mutex<Writer>,
    /// Logical byte offset one past the last published entry (`last.start + readPosition`).
    max_logical: AtomicU64,
    /// `minLogicOffset`.
    min_logical: AtomicU64,
    /// Published copy of `maxPhysicOffset`.
    max_physic: AtomicI64,
    /// Logical offset flushed to disk.
    flushed: AtomicU64,
}

impl ConsumeQueue {
    /// Opens the queue directory `dir` (created if needed) with `file_size`-byte files, without recovering.
    pub fn open(dir: &Path, topic: &str, queue_id: i32, file_size: u64) -> Result<Self> {
        Self::open_in(crate::mmap::Storage::Disk, dir, topic, queue_id, file_size)
    }

    /// [`ConsumeQueue::open`] in `storage` (see [`crate::mmap::Storage`]).
    pub fn open_in(
        storage: crate::mmap::Storage,
        dir: &Path,
        topic: &str,
        queue_id: i32,
        file_size: u64,
    ) -> Result<Self> {
        Self::open_sized(storage, dir, topic, queue_id, file_size, false).map(|(cq, _)| cq)
    }

    /// [`ConsumeQueue::open_in`], with `size_known` when other consume-queue files of the store have the
    /// configured size: a file of another size is then damage ([`FileQueue::load_derived_in`]); in an overlay
    /// it is read as far as it goes and returned (path, length).
    pub fn open_sized(
        storage: crate::mmap::Storage,
        dir: &Path,
        topic: &str,
        queue_id: i32,
        file_size: u64,
        size_known: bool,
    ) -> Result<(Self, Vec<(std::path::PathBuf, u64)>)> {
        let file_size = round_file_size(file_size);
        let (files, resized) = FileQueue::load_derived_in(storage, dir, file_size, size_known)?;
        let end = files.last().map(|f| f.end()).unwrap_or(0);
        let min = files.first().map(|f| f.start()).unwrap_or(0);
        let cq = ConsumeQueue {
            topic: topic.to_owned(),
            queue_id,
            files,
            writer: Mutex::new(Writer { max_physic_offset: -1, gaps: 0, shift: 0, next_expected: 0 }),
            max_logical: AtomicU64::new(end),
            min_logical: AtomicU64::new(min),
            max_physic: AtomicI64::new(-1),
            flushed: AtomicU64::new(end),
        };
        Ok((cq, resized))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Writer> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The queue id.
    pub fn queue_id(&self) -> i32 {
        self.queue_id
    }

    /// The directory of the queue's files.
    pub fn dir(&self) -> &Path {
        self.files.dir()
    }

    /// Bytes per file.
    pub fn file_size(&self) -> u64 {
        self.files.file_size()
    }

    /// Entries per file.
    pub fn entries_per_file(&self) -> u64 {
        self.file_size() / UNIT
    }

    /// Lets go of the queue's files, deleting none (a closed store's).
    pub fn release(&self) {
        self.files.release();
    }

    /// Paths of the queue's files.
    pub fn file_paths(&self) -> Vec<PathBuf> {
        self.files.files().iter().map(|f| f.path().to_owned()).collect()
    }

    /// `getMinOffsetInQueue`.
    pub fn min_offset(&self) -> u64 {
        self.min_logical.load(Ordering::Acquire) / UNIT
    }

    /// `getMaxOffsetInQueue`: the next queue offset to be written (counting pre-blank entries).
    pub fn max_offset(&self) -> u64 {
        self.max_logical.load(Ordering::Acquire) / UNIT
    }

    /// `getMaxPhysicOffset`: commitlog end offset of the last entry, −1 if none.
    pub fn max_physic_offset(&self) -> i64 {
        self.max_physic.load(Ordering::Acquire)
    }

    /// Entries that were appended at a position other than their queue offset.
    pub fn gaps(&self) -> u64 {
        self.lock().gaps
    }

    /// The next queue offset to hand out: the max offset, or one past the highest queue offset a dispatched
    /// record carried if that is higher (after damage left a gap), so a queue offset is never reused.
    pub fn next_queue_offset(&self) -> u64 {
        self.max_offset().max(self.lock().next_expected)
    }

    /// `putMessagePositionInfo` (spec §6.2): appends the entry for the record at commitlog `offset` with queue
    /// offset `cq_offset`, unless the duplicate rules say it is already there.
    pub fn append(&self, offset: i64, size: i32, tags_code: i64, cq_offset: i64) -> Result<Appended> {
        self.append_after(offset, size, tags_code, cq_offset, -1)
    }

    /// [`ConsumeQueue::append`] for a read-only view, which takes in what another process wrote only when it
    /// refreshes: when the queue's last entry ends at or before `log_min` (its record left the log, with the
    /// records after it that the view never saw: the writer made and deleted their segments between two
    /// refreshes), a record carrying a higher queue offset is written at that offset, and the slots before it
    /// hold pre-blank entries, which read as removed. Appending at the end instead (RocketMQ's rule for a gap)
    /// would put every later message of the queue at a lower queue offset than its record and the writer's
    /// consume queue give it.
    pub fn append_after(
        &self,
        offset: i64,
        size: i32,
        tags_code: i64,
        cq_offset: i64,
        log_min: i64,
    ) -> Result<Appended> {
        let bad = |reason: &str| Error::InvalidOffset { offset, reason: reason.to_owned() };
        if offset < 0 || size <= 0 {
            return Err(bad("a consume-queue entry needs a non-negative offset and a positive size"));
        }
        let expect = u64::try_from(cq_offset)
            .ok()
            .and_then(|q| q.checked_mul(UNIT))
            .filter(|e| *e <= i64::MAX as u64)
            .ok_or_else(|| bad("queue offset out of range"))?;
        let mut w = self.lock();
        let entry = CqEntry { offset, size, tags_code };
        if entry.end() <= w.max_physic_offset {
            return Ok(Appended::Duplicate);
        }
        let file_size = self.file_size();
        let mut cur = self.max_logical.load(Ordering::Relaxed);
        if cq_offset != 0 && expect > cur && w.max_physic_offset >= 0 && w.max_physic_offset <= log_min {
            cur = self.fill_removed(cur, expect)?;
        }
        let file = match self.files.last() {
            Some(last) if cur < last.end() => last,
            Some(last) => self.files.create(last.end())?,
            None => {
                let start = expect - expect % file_size;
                let file = self.files.create(start)?;
                cur = start;
                if cq_offset != 0 {
                    self.fill_pre_blank(&file, expect)?;
                    cur = expect;
                    self.min_logical.store(expect, Ordering::Release);
                    self.max_logical.store(expect, Ordering::Release);
                } else {
                    self.min_logical.store(start, Ordering::Release);
                }
                file
            }
        };
        let mut new_gap = false;
        if cq_offset != 0 {
            if expect < cur {
                return Ok(Appended::Duplicate);
            }
            if expect > cur {
                w.gaps += 1;
            }
            let shift = (expect - cur) / UNIT;
            new_gap = shift > w.shift;
            w.shift = shift;
            w.next_expected = w.next_expected.max(expect / UNIT + 1);
        }
        w.max_physic_offset = entry.end();
        self.max_physic.store(entry.end(), Ordering::Release);
        let pos = (cur - file.start()) as usize;
        file.write_at(pos, &entry.encode())?;
        self.max_logical.store(cur + UNIT, Ordering::Release);
        Ok(Appended::Written { queue_offset: cur / UNIT, new_gap })
    }

    /// Pre-blank entries from `cur` (the end) up to `until`, in as many files as that takes; returns the new end.
    fn fill_removed(&self, mut cur: u64, until: u64) -> Result<u64> {
        while cur < until {
            let file = match self.files.last() {
                Some(last) if cur < last.end() => last,
                Some(last) => self.files.create(last.end())?,
                None => break,
            };
            let stop = until.min(file.end());
            write_pre_blanks(&file, (cur - file.start()) as usize, (stop - file.start()) as usize)?;
            cur = stop;
            self.max_logical.store(cur, Ordering::Release);
        }
        Ok(cur)
    }

    fn fill_pre_blank(&self, file: &MappedFile, until: u64) -> Result<()> {
        write_pre_blanks(file, 0, (until - file.start()) as usize)
    }

    fn read_entry(&self, file: &MappedFile, logical: u64) -> Option<CqEntry> {
        CqEntry::decode(file.slice(usize::try_from(logical.checked_sub(file.start())?).ok()?, UNIT as usize)?)
    }

    /// The entry at queue offset `q`, if it is between the min and max offsets.
    pub fn entry(&self, q: u64) -> Option<CqEntry> {
        let logical = q.checked_mul(UNIT)?;
        if logical < self.min_logical.load(Ordering::Acquire) || logical >= self.max_logical.load(Ordering::Acquire) {
            return None;
        }
        let file = self.files.find(logical)?;
        self.read_entry(&file, logical)
    }

    /// Up to `max` entries from queue offset `from` (clamped to the min offset), across files, in order.
    /// Returns the queue offset of the first entry returned and the entries.
    pub fn entries(&self, from: u64, max: usize) -> (u64, Vec<CqEntry>) {
        let max_logical = self.max_logical.load(Ordering::Acquire);
        let from = from.max(self.min_offset());
        let mut out = Vec::new();
        let Some(mut logical) = from.checked_mul(UNIT) else { return (from, out) };
        while out.len() < max && logical < max_logical {
            let Some(file) = self.files.find(logical) else { break };
            let end = file.end().min(max_logical).min(logical + (max - out.len()) as u64 * UNIT);
            let bytes = file.slice((logical - file.start()) as usize, (end - logical) as usize).unwrap_or_default();
            out.extend(bytes.chunks_exact(UNIT as usize).filter_map(CqEntry::decode));
            if end == logical {
                break;
            }
            logical = end;
        }
        (from, out)
    }

    /// `ConsumeQueue.recover` (spec §6.4): scans the last three files for valid entries and truncates after them.
    /// Returns what lay after the valid entries ([`Recovered`]).
    pub fn recover(&self) -> Result<Recovered> {
        let files = self.files.files();
        let mut w = self.lock();
        let Some(last) = files.last() else { return Ok(Recovered::default()) };
        let mut max_physic = -1i64;
        let mut process = last.start();
        let from = files.len().saturating_sub(3);
        // Only the files' data extents are read: the holes of a sparse file (RocketMQ makes its queue files
        // sparse, and so do `cp --sparse` and `rsync -S`) read as zeros without being touched.
        for file in &files[from..] {
            let data = file.extents(0);
            let size = file.size() as usize;
            let mut valid = 0usize;
            let mut chunk = [0u8; UNIT as usize];
            while valid + chunk.len() <= size.min(data.data_end() + chunk.len()) {
                data.read(valid, &mut chunk);
                let Some(e) = CqEntry::decode(&chunk) else { break };
                if !e.is_valid() {
                    break;
                }
                // Unlike RocketMQ, a pre-blank (0, 2^31-1) does not count as a message end: it would make the
                // duplicate rule skip every record below 2 GiB of the commitlog.
                if !e.is_pre_blank() {
                    max_physic = e.end();
                }
                valid += UNIT as usize;
            }
            process = file.start() + valid as u64;
            if valid + chunk.len() <= size {
                break;
            }
        }
        // The first invalid entry not all zeros: torn by a killed write, or damaged.
        let torn_entry = files.iter().find(|f| process >= f.start() && process < f.end()).is_some_and(|f| {
            let at = (process - f.start()) as usize;
            f.extents(at).any_nonzero(at, at + UNIT as usize)
        });
        // A torn last entry is at most 20 bytes; anything non-zero after it is a hole.
        let hole = files.iter().filter(|f| f.end() > process + UNIT).any(|f| {
            let from = ((process + UNIT).max(f.start()) - f.start()) as usize;
            f.nonzero_end(from) > from
        });
        if max_physic < 0 {
            // Nothing valid in the scanned files (the newest files lost as zeros in a power loss): the queue
            // ends after the entry before them, whose record the duplicate rule must still count as there.
            max_physic = (process / UNIT)
                .checked_sub(1)
                .and_then(|q| files.iter().find(|f| q * UNIT >= f.start() && q * UNIT < f.end()).map(|f| (f, q)))
                .and_then(|(f, q)| self.read_entry(f, q * UNIT))
                .filter(|e| e.is_valid() && !e.is_pre_blank())
                .map_or(-1, |e| e.end());
        }
        self.truncate_files_after(process)?;
        w.max_physic_offset = max_physic;
        self.max_physic.store(max_physic, Ordering::Release);
        Ok(Recovered { hole, torn_entry })
    }

    /// The first queue offset whose entry cannot be right: not a valid entry (`offset ≥ 0`, `size > 0`), not
    /// after the previous entry's record, or reaching past `log_end`. Reads every entry once (20 bytes each,
    /// sequentially), so damage anywhere in the queue is found, not only in its newest files.
    pub fn first_disorder(&self, log_end: i64) -> Option<u64> {
        let mut prev_end = -1i64;
        let mut q = self.min_offset();
        let max = self.max_offset();
        while q < max {
            let (from, entries) = self.entries(q, 4096);
            if entries.is_empty() {
                return Some(q);
            }
            for (i, e) in entries.iter().enumerate() {
                let at = from + i as u64;
                if e.is_pre_blank() {
                    continue;
                }
                if !e.is_valid() || e.offset < prev_end || e.end() > log_end {
                    return Some(at);
                }
                prev_end = e.end();
            }
            q = from + entries.len() as u64;
        }
        None
    }

    /// Drops every entry from queue offset `q` on (they disagree with the commitlog) and republishes the max
    /// physical offset from the entry before `q`. Only called while no other thread uses the queue (open).
    pub fn truncate_to(&self, q: u64) -> Result<()> {
        let mut w = self.lock();
        self.truncate_files_after(q.saturating_mul(UNIT))?;
        let max_physic = q
            .checked_sub(1)
            .and_then(|p| self.entry(p))
            .filter(|e| !e.is_pre_blank() && e.is_valid())
            .map_or(-1, |e| e.end());
        w.max_physic_offset = max_physic;
        self.max_physic.store(max_physic, Ordering::Release);
        Ok(())
    }

    /// Drops every file starting after `logical`, zeroes stale bytes after it in its own file, and publishes
    /// it as the end. Only called while no other thread uses the queue (open, recovery).
    fn truncate_files_after(&self, logical: u64) -> Result<()> {
        self.files.remove_after(logical);
        if let Some(file) = self.files.find(logical).filter(|f| logical < f.end()) {
            let pos = (logical - file.start()) as usize;
            let dirty = file.nonzero_end(pos) - pos;
            if dirty > 0 {
                file.write_at(pos, &vec![0u8; dirty])?;
                file.flush_range(pos, dirty)?;
            }
        }
        let end = match self.files.last() {
            Some(last) => logical.min(last.end()).max(last.start()),
            None => 0,
        };
        self.max_logical.store(end, Ordering::Release);
        self.flushed.store(self.flushed.load(Ordering::Relaxed).min(end), Ordering::Relaxed);
        if self.files.last().is_none() {
            self.min_logical.store(0, Ordering::Release);
        } else if self.min_logical.load(Ordering::Relaxed) > end {
            self.min_logical.store(end, Ordering::Release);
        }
        Ok(())
    }

    /// `truncateDirtyLogicFiles(processOffset)` (spec §10.6): removes entries from the first one pointing at or
    /// beyond the end of the commitlog. Only called while no other thread uses the queue. Returns, when entries
    /// were removed, the queue offset cut at and whether a removed entry after it points inside the log (then
    /// the first was damaged, entries being in log order, and the records of the ones after it must be
    /// dispatched again).
    pub fn truncate_dirty(&self, process_offset: i64) -> Result<Option<(u64, bool)>> {
        let mut w = self.lock();
        if w.max_physic_offset < process_offset {
            return Ok(None); // nothing points at or beyond it
        }
        let entries_before = self.max_logical.load(Ordering::Acquire);
        // Whether a removed entry points inside the log, and the first queue offset removed.
        let mut inside = false;
        let mut cut_at = None;
        // The end of the last message entry kept (none: -1, as when every file goes).
        let mut max_physic = -1;
        loop {
            let Some(last) = self.files.last() else {
                self.truncate_files_after(0)?;
                break;
            };
            // Only the file's data extents are read: a hole reads as zeros (see `recover`).
            let data = last.extents(0);
            let entry_at = |pos: u64| {
                let mut chunk = [0u8; UNIT as usize];
                data.read(pos as usize, &mut chunk);
                CqEntry::decode(&chunk)
            };
            // Past the data's end every entry is zeros: neither kept nor counted as removed.
            let entries = (data.data_end() as u64).div_ceil(UNIT).min(last.size() / UNIT).max(1);
            let mut keep = 0u64;
            let mut delete = false;
            for i in 0..entries {
                let Some(e) = entry_at(i * UNIT) else { break };
                // Unlike RocketMQ, the first entry is validated too: a never-written (zero) first entry is
                // not kept as an entry.
                if i == 0 && (e.offset >= process_offset || !e.is_valid()) {
                    delete = true;
                    break;
                }
                if !e.is_valid() || e.offset >= process_offset {
                    break;
                }
                keep += UNIT;
                if !e.is_pre_blank() {
                    max_physic = e.end();
                }
            }
            inside |= (keep / UNIT..entries)
                .filter_map(|i| entry_at(i * UNIT))
                .any(|e| e.is_valid() && !e.is_pre_blank() && e.offset < process_offset && e.end() <= process_offset);
            cut_at = Some((last.start() + keep) / UNIT);
            if delete {
                self.files.remove_after(last.start().saturating_sub(1));
                if last.start() == 0 || self.files.last().is_none() {
                    self.truncate_files_after(0)?;
                    break;
                }
                continue;
            }
            self.truncate_files_after(last.start() + keep)?;
            break;
        }
        let max_physic = if self.files.last().is_some() { max_physic.min(process_offset) } else { -1 };
        w.max_physic_offset = w.max_physic_offset.min(max_physic);
        self.max_physic.store(w.max_physic_offset, Ordering::Release);
        let removed = self.max_logical.load(Ordering::Acquire) < entries_before;
        Ok(cut_at.filter(|_| removed).map(|q| (q, inside)))
    }

    /// `correctMinOffset(minCommitLogOffset)` (spec §6.5): moves the min offset to the first entry whose
    /// record is still in the commitlog. RocketMQ searches the first file only, since its consume-queue cleanup
    /// deletes the files wholly below the commitlog's min before it corrects; rmq goes on to the next file when
    /// every entry of one is below it: after a kill between retention's commitlog deletion and its consume-queue
    /// cleanup (or a copy of the store made then), the queue's min is right from the open, not from the first
    /// cleanup round on (RocketMQ's `CleanConsumeQueueService` comes 10 s after its start).
    pub fn correct_min_offset(&self, min_commitlog_offset: i64) {
        let m = min_commitlog_offset;
        let _w = self.lock();
        let max_logical = self.max_logical.load(Ordering::Acquire);
        let min_logical = self.min_logical.load(Ordering::Acquire);
        if min_logical >= max_logical {
            return;
        }
        let Some(last) = self.files.last() else { return };
        // Stale whole queue: the last entry's record is gone. (The last entry need not be in the last file: a
        // file after it may exist empty, e.g. after a power loss kept a newer file's entry but not its pages.)
        let newest = self.files.find(max_logical - UNIT).unwrap_or(last);
        if let Some(e) = self.read_entry(&newest, max_logical - UNIT) {
            if e.offset < m {
                self.min_logical.store(max_logical, Ordering::Release);
                return;
            }
        }
        // Pre-blank entries never count as "still in the commitlog" (RocketMQ would stop on them when m = 0).
        let at_or_after = |e: &CqEntry| !e.is_pre_blank() && e.offset >= m;
        for file in self.files.files().iter() {
            let (start, intact) = match min_logical.checked_sub(file.start()) {
                Some(s) if s < file.size() => (s, true),
                Some(_) => continue, // the min lies after this file
                None => (0, false),
            };
            let read_end = file.end().min(max_logical);
            if file.start() + start >= read_end {
                return;
            }
            let count = (read_end - file.start() - start) / UNIT;
            let entry_at = |i: u64| self.read_entry(file, file.start() + start + i * UNIT);
            if intact && entry_at(0).is_some_and(|e| at_or_after(&e)) {
                return;
            }
            if count > 0 && read_end < max_logical && entry_at(count - 1).is_some_and(|e| !at_or_after(&e)) {
                continue; // every entry of this file is below the commitlog's min (a newer file holds the rest)
            }
            // First entry with offset >= m by binary search over the (sorted) commitlog offsets, pre-blanks first.
            let (mut lo, mut hi) = (0u64, count);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if entry_at(mid).is_some_and(|e| at_or_after(&e)) {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            if lo < count {
                self.min_logical.store(file.start() + start + lo * UNIT, Ordering::Release);
            }
            return;
        }
    }

    /// `getOffsetInQueueByTime` inside the queue (spec §6.7), before the store's clamping. `store_time(offset,
    /// size)` returns the record's store timestamp or −1; `min_physic` is the commitlog's min offset.
    pub fn offset_by_time(
        &self,
        timestamp: i64,
        boundary: BoundaryType,
        min_physic: i64,
        store_time: &dyn Fn(i64, i32) -> i64,
    ) -> u64 {
        let files = self.files.files();
        let max_logical = self.max_logical.load(Ordering::Acquire);
        let Some(last) = files.last() else { return 0 };
        let entry_time = |f: &MappedFile, logical: u64| -> i64 {
            if logical + UNIT > max_logical {
                return -1;
            }
            self.read_entry(f, logical).map(|e| store_time(e.offset, e.size)).unwrap_or(-1)
        };
        let file = match boundary {
            BoundaryType::Lower => {
                files.iter().take(files.len() - 1).find(|f| entry_time(f, f.end() - UNIT) >= timestamp).unwrap_or(last)
            }
            BoundaryType::Upper => match files.iter().rev().find(|f| entry_time(f, f.start()) <= timestamp) {
                Some(f) => f,
                None => return 0,
            },
        };
        self.binary_search_by_time(file, timestamp, boundary, min_physic, max_logical, &entry_time)
    }

    #[allow(clippy::too_many_arguments)]
    fn binary_search_by_time(
        &self,
        file: &MappedFile,
        timestamp: i64,
        boundary: BoundaryType,
        min_physic: i64,
        max_logical: u64,
        entry_time: &dyn Fn(&MappedFile, u64) -> i64,
    ) -> u64 {
        let unit = UNIT as i64;
        let start = file.start() as i64;
        let low0 = (self.min_logical.load(Ordering::Acquire) as i64 - start).max(0);
        let range = if max_logical < file.end() { max_logical as i64 - start } else { file.size() as i64 };
        let ceiling = range - unit;
        let floor = low0;
        if ceiling < floor {
            return 0;
        }
        let at = |pos: i64| entry_time(file, (start + pos) as u64);
        let result = |pos: i64| ((start + pos) / unit).max(0) as u64;
        if at(ceiling) < timestamp {
            return match boundary {
                BoundaryType::Lower => result(ceiling + unit),
                BoundaryType::Upper => result(ceiling),
            };
        }
        if at(floor) > timestamp {
            return match boundary {
                BoundaryType::Lower => result(0),
                BoundaryType::Upper => 0,
            };
        }
        let (mut low, mut high) = (low0, ceiling);
        let (mut left, mut right, mut target) = (-1i64, -1i64, -1i64);
        while high >= low {
            let mid = (low + high) / (2 * unit) * unit;
            let Some(e) = self.read_entry(file, (start + mid) as u64) else { return 0 };
            if e.offset < min_physic {
                low = mid + unit;
                left = mid;
                continue;
            }
            let t = at(mid);
            if t < 0 {
                return 0;
            }
            match t.cmp(&timestamp) {
                std::cmp::Ordering::Equal => {
                    target = mid;
                    break;
                }
                std::cmp::Ordering::Greater => {
                    high = mid - unit;
                    right = mid;
                }
                std::cmp::Ordering::Less => {
                    low = mid + unit;
                    left = mid;
                }
            }
        }
        if target != -1 {
            let mut pos = target;
            match boundary {
                BoundaryType::Lower => {
                    while pos - unit >= floor && at(pos - unit) == timestamp {
                        pos -= unit;
                    }
                }
                BoundaryType::Upper => {
                    while pos + unit <= ceiling && at(pos + unit) == timestamp {
                        pos += unit;
                    }
                }
            }
            return result(pos);
        }
        let pos = match boundary {
            BoundaryType::Lower => right,
            BoundaryType::Upper => left,
        };
        // Java's integer division of (start + -1) / 20 truncates toward zero.
        ((start + pos) / unit).max(0) as u64
    }

    /// Flushes written entries to disk.
    pub fn flush(&self) -> Result<()> {
        let end = self.max_logical.load(Ordering::Acquire);
        let mut at = self.flushed.load(Ordering::Relaxed);
        while at < end {
            let Some(file) = self.files.find(at) else { break };
            let stop = end.min(file.end());
            file.flush_range((at - file.start()) as usize, (stop - at) as usize)?;
            at = stop;
        }
        self.flushed.store(end, Ordering::Relaxed);
        Ok(())
    }

    /// Logical byte offset below which the entries are flushed to disk.
    pub fn flushed_offset(&self) -> u64 {
        self.flushed.load(Ordering::Relaxed)
    }

    /// Flushes as the consume-queue flush service does ([`FileQueue::flush_pages`]: only files that are full
    /// or hold `least_pages` new pages; 0: everything). Returns whether every written entry is flushed.
    pub fn flush_pages(&self, least_pages: u64) -> Result<bool> {
        let end = self.max_logical.load(Ordering::Acquire);
        let at = self.files.flush_pages(self.flushed.load(Ordering::Relaxed), end, least_pages)?;
        self.flushed.fetch_max(at, Ordering::Relaxed);
        Ok(at >= end)
    }

    /// Shares the mapped files (for tests and tools).
    pub fn files(&self) -> Vec<Arc<MappedFile>> {
        self.files.files()
    }

    /// `iterateFrom(from)`: the published entries of the one file holding queue offset `from`, from that entry
    /// to the end of the file or the max offset. `None` below the min offset, at or past the max offset, or
    /// when the file is gone (deleted by cleanup before the min offset was corrected).
    pub fn file_slice(&self, from: u64) -> Option<CqSlice> {
        let logical = from.checked_mul(UNIT)?;
        let max_logical = self.max_logical.load(Ordering::Acquire);
        if logical < self.min_logical.load(Ordering::Acquire) || logical >= max_logical {
            return None;
        }
        let file = self.files.find(logical)?;
        let pos = usize::try_from(logical - file.start()).ok()?;
        let len = usize::try_from(file.end().min(max_logical) - logical).ok()?;
        file.slice(pos, len)?;
        Some(CqSlice { file, pos, len, first: from })
    }

    /// The file-deleting half of `deleteExpiredFile(m)` (spec §6.5): removes files, oldest first and never the
    /// last one, whose last entry points below commitlog offset `min_commitlog_offset`; stops at the first
    /// file kept. The min offset is not changed: call [`ConsumeQueue::correct_min_offset`] after it, as
    /// RocketMQ does. Returns the files removed (unlinked at once, the directory synced; a reader's view of
    /// one keeps its bytes until dropped).
    pub fn delete_expired_files(&self, min_commitlog_offset: i64) -> Result<Vec<PathBuf>> {
        let mut deleted = Vec::new();
        loop {
            let files = self.files.files();
            if files.len() <= 1 {
                return Ok(deleted);
            }
            let Some(first) = files.first() else { return Ok(deleted) };
            let mut chunk = [0u8; UNIT as usize];
            let at = (first.size() - UNIT) as usize;
            first.extents(at).read(at, &mut chunk);
            let last_entry = CqEntry::decode(&chunk);
            match last_entry {
                Some(e) if e.offset < min_commitlog_offset => match self.files.delete_first()? {
                    Some(f) => deleted.push(f.path().to_owned()),
                    None => return Ok(deleted),
                },
                _ => return Ok(deleted),
            }
        }
    }
}

/// The entries of one consume-queue file from a queue offset on ([`ConsumeQueue::file_slice`]); holds the file
/// mapped while it lives.
#[derive(Debug, Clone)]
pub struct CqSlice {
    file: Arc<MappedFile>,
    pos: usize,
    len: usize,
    first: u64,
}

impl CqSlice {
    /// Queue offset of the first entry.
    pub fn first_offset(&self) -> u64 {
        self.first
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len / UNIT as usize
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len < UNIT as usize
    }

    /// (queue offset, entry) pairs in order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, CqEntry)> + '_ {
        let bytes = self.file.slice(self.pos, self.len).unwrap_or_default();
        bytes.chunks_exact(UNIT as usize).zip(self.first..).filter_map(|(b, q)| Some((q, CqEntry::decode(b)?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_bytes() {
        assert_eq!(PRE_BLANK.encode(), [0, 0, 0, 0, 0, 0, 0, 0, 0x7F, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0, 0, 0]);
        let e = CqEntry { offset: 0x0102030405060708, size: 218, tags_code: -1 };
        assert_eq!(CqEntry::decode(&e.encode()), Some(e));
        assert_eq!(round_file_size(128), 140);
        assert_eq!(round_file_size(6_000_000), 6_000_000);
        assert_eq!(roll_next_file(5, 300_000), 300_000);
        assert_eq!(roll_next_file(300_000, 300_000), 600_000);
    }
}
