//! The commitlog: records appended to a queue of segments, the end-of-file blank and roll rule (spec §1.8),
//! reads by physical offset, scans across segments, and finding the end of the data on open.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use crate::config::CommitLogConfig;
use crate::error::{Error, Result};
use crate::file_queue::FileQueue;
use crate::message::decode::{check_record, property_crc_ok, CheckOptions, RecordCheck};
use crate::message::encode::{finish_record, EncodedRecord};
use crate::message::properties::{self, keys};
use crate::message::{RecordHeader, BLANK_MAGIC, END_FILE_MIN_BLANK_LENGTH, MAGIC_V1, MAGIC_V2};
use crate::mmap::MappedFile;

/// A record located in a mapped segment. Holding it keeps the segment mapped.
#[derive(Debug, Clone)]
pub struct Record {
    pub file: Arc<MappedFile>,
    pub pos: usize,
    pub header: RecordHeader,
}

impl Record {
    /// Global commitlog offset of the record.
    pub fn offset(&self) -> u64 {
        self.file.start() + self.pos as u64
    }

    /// The record's bytes.
    pub fn bytes(&self) -> &[u8] {
        self.file.slice(self.pos, self.header.total_size as usize).unwrap_or_default()
    }
}

/// Where an append landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// Global offset of the first record.
    pub first_offset: u64,
    /// Bytes of the records (without any blank written before them).
    pub wrote_bytes: u64,
    /// Store timestamp given to every record, ms.
    pub store_timestamp: i64,
    /// Start of everything this append wrote, including an end-of-file blank.
    pub dirty_from: u64,
}

/// What opening found at the end of the log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// Global offset where appends continue.
    pub end_offset: u64,
    /// Offset from which records were validated.
    pub validated_from: u64,
    /// Non-zero bytes after the last valid record that were found to hold no record and were zeroed.
    pub discarded_bytes: u64,
    /// Segments after the one holding the end that held no record (a pre-allocated next file surviving a crash)
    /// and were deleted, as RocketMQ's `truncateDirtyFiles` does.
    pub removed_files: u64,
    /// Why validation stopped before the end of the last segment, when it did not stop on zeros.
    pub stop_reason: Option<String>,
}

/// Bytes checked after the end of the data to tell a clean end (zeros) from a torn or corrupt tail.
const CLEAN_END_WINDOW: usize = 64 * 1024;

/// How far ahead of the write position pages are faulted in by the warm-up thread.
const WARM_AHEAD: u64 = 32 * 1024 * 1024;
/// Granularity of one prefault call.
const WARM_CHUNK: u64 = 2 * 1024 * 1024;

/// Background page warm-up (RocketMQ pre-touches its mapped files too): faults the pages just ahead of the
/// write position in on another thread, so puts do not pay for page allocation and zeroing.
#[derive(Debug, Default)]
struct Warmer {
    state: Mutex<WarmState>,
    wake: Condvar,
    requested: AtomicU64,
}

#[derive(Debug, Default)]
struct WarmState {
    target: u64,
    stop: bool,
}

impl Warmer {
    fn request(&self, target: u64) {
        self.requested.store(target, Ordering::Relaxed);
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.target = st.target.max(target);
        self.wake.notify_one();
    }

    fn run(&self, queue: &FileQueue, mut done: u64) {
        loop {
            let target = {
                let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
                while !st.stop && st.target <= done {
                    st = self.wake.wait(st).unwrap_or_else(|p| p.into_inner());
                }
                if st.stop {
                    return;
                }
                st.target
            };
            done = done.max(target.saturating_sub(WARM_AHEAD));
            while done < target {
                let Some(file) = queue.find(done) else { break };
                let end = target.min(file.end()).min(done + WARM_CHUNK);
                file.prefault((done - file.start()) as usize, (end - done) as usize);
                done = end;
            }
            done = done.max(target);
        }
    }
}

/// The commitlog of one store.
#[derive(Debug)]
pub struct CommitLog {
    queue: Arc<FileQueue>,
    warmer: Arc<Warmer>,
    warm_thread: Option<std::thread::JoinHandle<()>>,
    cfg: CommitLogConfig,
    /// The put lock; guards the write position, which is always the published `max_offset` once a put returns.
    writer: Mutex<u64>,
    /// Everything below this offset is fully written (readers' limit).
    max_offset: AtomicU64,
}

impl CommitLog {
    /// Opens the log in `dir`, validating records from the last segment that starts with one, and finds the end.
    pub fn open(dir: &Path, cfg: CommitLogConfig) -> Result<(Self, OpenReport)> {
        let queue = Arc::new(FileQueue::load(dir, cfg.mapped_file_size_commit_log)?);
        let warmer = Arc::new(Warmer::default());
        let mut log =
            CommitLog { queue, warmer, warm_thread: None, cfg, writer: Mutex::new(0), max_offset: AtomicU64::new(0) };
        let report = log.find_end()?;
        *log.lock_writer() = report.end_offset;
        log.max_offset.store(report.end_offset, Ordering::Release);
        let (warmer, queue, from) = (log.warmer.clone(), log.queue.clone(), report.end_offset);
        log.warm_thread =
            std::thread::Builder::new().name("rmq-commitlog-warm".into()).spawn(move || warmer.run(&queue, from)).ok();
        Ok((log, report))
    }

    fn lock_writer(&self) -> std::sync::MutexGuard<'_, u64> {
        self.writer.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn check_options(&self) -> CheckOptions {
        CheckOptions { check_crc: self.cfg.check_crc_on_recover, force_prop_crc: self.cfg.force_verify_prop_crc }
    }

    /// The segment queue.
    pub fn queue(&self) -> &FileQueue {
        &self.queue
    }

    /// Segment size in bytes.
    pub fn file_size(&self) -> u64 {
        self.queue.file_size()
    }

    /// Offset of the first byte still stored.
    pub fn min_offset(&self) -> u64 {
        self.queue.min_offset().min(self.max_offset())
    }

    /// Offset one past the last written byte.
    pub fn max_offset(&self) -> u64 {
        self.max_offset.load(Ordering::Acquire)
    }

    fn find_end(&self) -> Result<OpenReport> {
        let files = self.queue.files();
        let Some(last) = files.last() else { return Ok(OpenReport::default()) };
        let starts_with_record = |f: &MappedFile| {
            let head = f.slice(0, f.size() as usize).unwrap_or_default();
            matches!(check_record(head, CheckOptions::default()), RecordCheck::Message(h) if h.physical_offset == f.start() as i64)
        };
        let start = files.iter().rev().find(|f| starts_with_record(f)).unwrap_or(&files[0]).start();
        let mut report = OpenReport { validated_from: start, ..OpenReport::default() };
        let mut offset = start;
        let opts = self.check_options();
        loop {
            let Some(file) = self.queue.find(offset) else { break };
            let pos = (offset - file.start()) as usize;
            let rest = file.slice(pos, (file.end() - offset) as usize).unwrap_or_default();
            if rest.len() < END_FILE_MIN_BLANK_LENGTH {
                offset = file.end();
                continue;
            }
            match check_record(rest, opts) {
                RecordCheck::Message(h) if h.physical_offset == offset as i64 => offset += h.total_size as u64,
                RecordCheck::Blank { size } if size as usize == rest.len() => offset = file.end(),
                RecordCheck::Message(h) => {
                    report.stop_reason = Some(format!("record at {offset} claims offset {}", h.physical_offset));
                    break;
                }
                RecordCheck::Blank { size } => {
                    report.stop_reason = Some(format!("blank at {offset} claims {size} bytes, {} remain", rest.len()));
                    break;
                }
                RecordCheck::Invalid { reason, .. } => {
                    report.stop_reason = Some(reason.to_string());
                    break;
                }
            }
        }
        report.end_offset = offset;
        if offset < last.end() {
            self.settle_tail(offset, &mut report)?;
        }
        Ok(report)
    }

    /// After the last valid record: zeros mean a clean end. Otherwise the bytes after it are searched for any
    /// valid record; if one exists the log is corrupt in the middle and opening fails rather than dropping it;
    /// if none exists the torn bytes are zeroed so they can never be mistaken for data later.
    fn settle_tail(&self, end: u64, report: &mut OpenReport) -> Result<()> {
        let files = self.queue.files();
        let Some(file) = self.queue.find(end) else { return Ok(()) };
        let pos = (end - file.start()) as usize;
        let tail = file.slice(pos, (file.end() - end) as usize).unwrap_or_default();
        let is_last = files.last().is_some_and(|l| Arc::ptr_eq(l, &file));
        let window = tail.get(..CLEAN_END_WINDOW.min(tail.len())).unwrap_or_default();
        if is_last && window.iter().all(|&b| b == 0) {
            report.stop_reason = None;
            return Ok(());
        }
        // Evidence of data is a record that is whole and has its body CRC, whatever the verification mode: under
        // `force_verify_prop_crc` every record written without the `__CRC32#` entry fails validation, and
        // treating those as torn would zero intact data.
        let opts = CheckOptions { check_crc: true, force_prop_crc: false };
        for f in files.iter().filter(|f| f.end() > end) {
            // From `pos` itself: a record there that is whole with a good body CRC (it failed only the
            // configured check) is data, not a torn write.
            let from = if Arc::ptr_eq(f, &file) { pos } else { 0 };
            let bytes = f.slice(0, f.size() as usize).unwrap_or_default();
            if let Some(found) = find_valid_record(bytes, from, f.start(), opts, self.cfg.enabled_append_prop_crc) {
                return Err(Error::Corruption {
                    path: file.path().to_owned(),
                    offset: end as i64,
                    reason: format!(
                        "{}; yet a valid record follows at offset {found}. The store is not opened, so nothing \
                         is dropped: copy the directory aside and inspect it before repairing",
                        report.stop_reason.as_deref().unwrap_or("invalid record")
                    ),
                });
            }
        }
        // No record follows: the bytes are a torn write. Zero them within this file.
        let dirty_end = tail.iter().rposition(|&b| b != 0).map(|i| i + 1).unwrap_or(0);
        if dirty_end > 0 {
            let zeros = vec![0u8; 1 << 16];
            let mut at = 0;
            while at < dirty_end {
                let n = (dirty_end - at).min(zeros.len());
                file.write(pos + at, &zeros[..n]);
                at += n;
            }
            file.flush_range(pos, dirty_end)?;
            report.discarded_bytes = dirty_end as u64;
        }
        // Later segments hold no record (checked above): RocketMQ's recovery destroys every file starting after
        // the end, such as the all-zero next file its allocator pre-creates, so the directories stay alike.
        report.removed_files = self.queue.remove_after(end) as u64;
        Ok(())
    }

    /// Appends the encoded records in `buf` (laid out back to back as `records` describe) as one unit: they
    /// land in one segment, after an end-of-file blank if the current segment cannot hold them all.
    /// `queue_offset(i)` gives record `i`'s QUEUEOFFSET; it runs under the put lock.
    pub fn append(
        &self,
        buf: &mut [u8],
        records: &[EncodedRecord],
        queue_offset: impl Fn(usize) -> i64,
    ) -> Result<Appended> {
        let total = buf.len() as u64;
        let file_size = self.file_size();
        if total + END_FILE_MIN_BLANK_LENGTH as u64 > file_size {
            return Err(Error::MessageTooLarge(format!(
                "{total} bytes cannot fit in a commitlog segment of {file_size} bytes (8 are kept for the end-of-file blank)"
            )));
        }
        let mut wrote = self.lock_writer();
        let dirty_from = *wrote;
        let mut file = self.writable_file(*wrote)?;
        let mut pos = (*wrote - file.start()) as usize;
        let remaining = file.end() - *wrote;
        if total + END_FILE_MIN_BLANK_LENGTH as u64 > remaining {
            // Create the next segment before touching this one, so a failure changes nothing.
            let next = match self.queue.next_after(&file) {
                Some(next) => next,
                None => self.queue.create(file.end())?,
            };
            if remaining >= END_FILE_MIN_BLANK_LENGTH as u64 {
                let mut blank = [0u8; END_FILE_MIN_BLANK_LENGTH];
                blank[..4].copy_from_slice(&(remaining as i32).to_be_bytes());
                blank[4..].copy_from_slice(&BLANK_MAGIC.to_be_bytes());
                file.write_at(pos, &blank)?;
            }
            *wrote = file.end();
            self.max_offset.store(*wrote, Ordering::Release);
            file = next;
            pos = 0;
        }
        let store_timestamp = now_ms();
        let first_offset = *wrote;
        for (i, rec) in records.iter().enumerate() {
            let phys = first_offset + rec.start as u64;
            if let Some(bytes) = buf.get_mut(rec.start..rec.start + rec.len) {
                finish_record(bytes, rec, queue_offset(i), phys as i64, store_timestamp);
            }
        }
        file.write_at(pos, buf)?;
        *wrote = first_offset + total;
        self.max_offset.store(*wrote, Ordering::Release);
        if *wrote + WARM_AHEAD / 2 > self.warmer.requested.load(Ordering::Relaxed) {
            self.warmer.request(*wrote + WARM_AHEAD);
        }
        Ok(Appended { first_offset, wrote_bytes: total, store_timestamp, dirty_from })
    }

    /// The segment to write at `offset`, created if it does not exist yet.
    fn writable_file(&self, offset: u64) -> Result<Arc<MappedFile>> {
        match self.queue.find(offset) {
            Some(f) if offset < f.end() => Ok(f),
            _ => {
                let start = offset - offset % self.file_size();
                match self.queue.find(start) {
                    Some(f) => Ok(f),
                    None => self.queue.create(start),
                }
            }
        }
    }

    /// Flushes `[from, to)` to disk, segment by segment.
    pub fn flush_range(&self, from: u64, to: u64) -> Result<()> {
        let mut at = from;
        while at < to {
            let Some(file) = self.queue.find(at) else { break };
            let end = to.min(file.end());
            file.flush_range((at - file.start()) as usize, (end - at) as usize)?;
            at = end;
        }
        Ok(())
    }

    /// Flushes everything written so far.
    pub fn flush(&self) -> Result<()> {
        for f in self.queue.files() {
            f.flush()?;
        }
        Ok(())
    }

    /// The record at `offset`; `None` past the end, before the start, or on an end-of-file blank.
    pub fn read(&self, offset: u64) -> Result<Option<Record>> {
        let max = self.max_offset();
        if offset >= max || offset < self.queue.min_offset() {
            return Ok(None);
        }
        let Some(file) = self.queue.find(offset) else { return Ok(None) };
        let pos = (offset - file.start()) as usize;
        let avail = (file.end().min(max) - offset) as usize;
        let bytes = file.slice(pos, avail).unwrap_or_default();
        match check_record(bytes, CheckOptions::default()) {
            RecordCheck::Message(header) if header.physical_offset == offset as i64 => {
                Ok(Some(Record { file, pos, header }))
            }
            RecordCheck::Blank { .. } => Ok(None),
            RecordCheck::Message(h) => Err(Error::InvalidOffset {
                offset: offset as i64,
                reason: format!("the record found there claims offset {}", h.physical_offset),
            }),
            RecordCheck::Invalid { reason, .. } => Err(Error::InvalidOffset {
                offset: offset as i64,
                reason: format!("no record starts there ({reason})"),
            }),
        }
    }

    /// The first record at or after `offset` in scan order (stepping over blanks into the next segment),
    /// with the offset after it. `offset` must be a record boundary, a blank, or a segment start.
    pub fn next_record(&self, mut offset: u64) -> Result<Option<(Record, u64)>> {
        loop {
            let max = self.max_offset();
            if offset >= max {
                return Ok(None);
            }
            offset = offset.max(self.queue.min_offset());
            let Some(file) = self.queue.find(offset) else { return Ok(None) };
            if file.end() - offset < END_FILE_MIN_BLANK_LENGTH as u64 {
                offset = file.end();
                continue;
            }
            let pos = (offset - file.start()) as usize;
            let bytes = file.slice(pos, (file.end().min(max) - offset) as usize).unwrap_or_default();
            match check_record(bytes, CheckOptions::default()) {
                RecordCheck::Message(header) if header.physical_offset == offset as i64 => {
                    let next = offset + header.total_size as u64;
                    return Ok(Some((Record { file, pos, header }, next)));
                }
                RecordCheck::Blank { .. } => offset = file.end(),
                RecordCheck::Message(h) => {
                    return Err(Error::Corruption {
                        path: file.path().to_owned(),
                        offset: offset as i64,
                        reason: format!("record claims offset {}", h.physical_offset),
                    })
                }
                RecordCheck::Invalid { reason, .. } => {
                    return Err(Error::Corruption {
                        path: file.path().to_owned(),
                        offset: offset as i64,
                        reason: reason.to_string(),
                    })
                }
            }
        }
    }
}

impl Drop for CommitLog {
    fn drop(&mut self) {
        self.warmer.state.lock().unwrap_or_else(|p| p.into_inner()).stop = true;
        self.warmer.wake.notify_one();
        if let Some(t) = self.warm_thread.take() {
            let _ = t.join();
        }
    }
}

/// Searches `bytes` (a whole segment starting at global `base`) from `from` for a position holding a record
/// that validates completely and names its own offset: body CRC, and the `__CRC32#` property when it has one
/// (or always, when `require_prop_crc`: this store writes the property on every record).
fn find_valid_record(bytes: &[u8], from: usize, base: u64, opts: CheckOptions, require_prop_crc: bool) -> Option<u64> {
    let magics = [MAGIC_V1.to_be_bytes(), MAGIC_V2.to_be_bytes()];
    let mut q = from;
    while q + 8 <= bytes.len() {
        let word = bytes.get(q + 4..q + 8)?;
        if magics.iter().any(|m| m == word) {
            if let RecordCheck::Message(h) = check_record(bytes.get(q..)?, opts) {
                let record = bytes.get(q..q + h.total_size as usize)?;
                let has_prop_crc = properties::get_raw(h.properties(record), keys::CRC32).is_some();
                if h.physical_offset == (base + q as u64) as i64
                    && (!(has_prop_crc || require_prop_crc) || property_crc_ok(record, &h))
                {
                    return Some(base + q as u64);
                }
            }
        }
        q += 1;
    }
    None
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}
