//! The commitlog: records appended to a queue of segments, the end-of-file blank and roll rule (spec §1.8),
//! reads by physical offset and scans across segments. `cursor` is the one walk over the records that
//! recovery, scan, dispatch and `get_message` share; `recover` finds the end of the data on open.

pub mod cursor;
pub mod pool;
pub mod recover;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::config::{CommitLogConfig, FlushDiskType};
use crate::error::{Error, Result};
use crate::file_queue::{FileQueue, SegmentCache};
use crate::message::decode::{check_record, CheckOptions, RecordCheck};
use crate::message::encode::{finish_record, EncodedRecord};
use crate::message::{RecordHeader, BLANK_MAGIC, END_FILE_MIN_BLANK_LENGTH};
use crate::mmap::MappedFile;
use cursor::{Cursor, Step};
pub use recover::{Damage, OpenReport, RecoverOptions, RecoveryMode};

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
    /// Whether the append asked the `warm` service for pages it has not faulted in yet (it moved the
    /// requested position, or opened a segment the warm service could not reach before it existed): the
    /// caller wakes the service.
    pub wake_warm: bool,
}

/// How far ahead of the write position pages are faulted in by the warm service.
const WARM_AHEAD: u64 = 32 * 1024 * 1024;
/// The same under SYNC_FLUSH, where the warm service also writes the pages back: a shorter distance keeps its
/// bursts of writes (which the puts' flushes queue behind) short; SYNC_FLUSH puts come at disk speed anyway.
const WARM_AHEAD_SYNC: u64 = 4 * 1024 * 1024;
/// Granularity of one prefault call.
const WARM_CHUNK: u64 = 2 * 1024 * 1024;
/// Under SYNC_FLUSH, the warm service's write-back of what it faulted in goes in steps of this many bytes.
const WRITE_BACK_STEP: u64 = 256 * 1024;

/// Page warm-up (RocketMQ pre-touches its mapped files too): appends request that the pages just ahead of the
/// write position be faulted in, and the store's `warm` service does it ([`CommitLog::warm_round`]), so puts
/// do not pay for page allocation and zeroing.
#[derive(Debug, Default)]
struct Warm {
    /// Pages below this offset are wanted in memory.
    requested: AtomicU64,
    /// Pages below this offset were faulted in (or need not be).
    done: AtomicU64,
    /// Serialises rounds; the writer's pace as the rounds have seen it.
    round: Mutex<Pace>,
}

/// Under ASYNC_FLUSH, bytes a flush round should find written for large folios to be worth faulting in: a flush
/// writes back whole folios, and a write through the mapping dirties the whole folio it lands in, so each round
/// writes back up to two folios (2 MiB each on ext4 from Linux 6.16) beyond the new bytes: the one the last
/// round ended in and the one the write position is in. From 16 MiB a round that is at most a quarter more; a
/// writer slower than that (under 32 MiB/s at the default 500 ms) gets pages faulted in one by one, whose cost
/// (a fault per 4 KiB, about 40 % of the throughput of a writer at full speed) is nothing at that pace. A
/// trickle of 100 puts of 1 KiB a second wrote 3.7 MB/s to disk in large folios, 30 times its records.
const LARGE_FOLIOS_PER_FLUSH: u64 = 16 * 1024 * 1024;
/// The least writing that tells the writer's pace: a round that saw less (soon after the last one, or after a
/// roll's extra wake-up) keeps the last judgement and measures on from the same start.
const PACE_SAMPLE: u64 = 1024 * 1024;

/// The writer's pace as the warm rounds see it, for the choice between large folios and single pages
/// ([`LARGE_FOLIOS_PER_FLUSH`]).
#[derive(Debug, Default)]
struct Pace {
    /// When and where (the write position) the current measurement started; `None` before the first round.
    since: Option<(Instant, u64)>,
    /// Whether the last judgement found a writer fast enough for large folios.
    fast: bool,
}

impl Pace {
    /// Whether the writer, at `wrote` at `now`, writes at least [`LARGE_FOLIOS_PER_FLUSH`] bytes per
    /// `flush_interval`. Unknown (the first round, a log cut back) counts as slow: the pages faulted in on that
    /// guess are at most [`WARM_AHEAD`] bytes, and a fast writer is judged fast again the next round.
    fn is_fast(&mut self, now: Instant, wrote: u64, flush_interval: Duration) -> bool {
        match self.since {
            Some((at, from)) if wrote >= from => {
                let (bytes, elapsed) = (wrote - from, now.saturating_duration_since(at));
                if bytes < PACE_SAMPLE && elapsed < flush_interval {
                    return self.fast;
                }
                // bytes / elapsed * interval >= LARGE_FOLIOS_PER_FLUSH, without dividing.
                self.fast = u128::from(bytes) * flush_interval.as_micros()
                    >= u128::from(LARGE_FOLIOS_PER_FLUSH) * elapsed.as_micros();
            }
            _ => self.fast = false,
        }
        self.since = Some((now, wrote));
        self.fast
    }
}

/// What the put lock guards: the write position and the segment it is in.
#[derive(Debug, Default)]
struct WritePos {
    at: u64,
    segment: SegmentCache,
}

/// What a [`CommitLog::flush_pages`] round saw and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushPages {
    /// The end of the log when the round started: the committed position (what a flush can cover).
    pub end: u64,
    /// The write position then: ahead of `end` while the transient store pool holds uncommitted bytes.
    pub wrote: u64,
    /// The clock (ms) then: every record with a smaller store time lies below `wrote`.
    pub clock: i64,
    /// The flushed position after the round.
    pub flushed: u64,
}

/// The commitlog of one store.
#[derive(Debug)]
pub struct CommitLog {
    queue: Arc<FileQueue>,
    warm: Warm,
    /// The segment after the one being written, made ahead by the `warm` service and not in the queue until the
    /// writer rolls into it ([`CommitLog::segment_ahead`]). Its lock is held while it is made or taken.
    ahead: Mutex<Option<Arc<MappedFile>>>,
    /// Whether appends request warm-up (not in an overlay: a private page faulted in writable would stop
    /// showing what a live writer adds to the file).
    warm_enabled: bool,
    cfg: CommitLogConfig,
    /// The put lock; guards the write position, which is always the published `max_offset` once a put returns.
    writer: Mutex<WritePos>,
    /// Everything below this offset is fully written (readers' limit).
    max_offset: AtomicU64,
    /// Everything below this offset was flushed to disk (RocketMQ's `flushedWhere`).
    flushed_where: AtomicU64,
    /// Serialises flushes that move `flushed_where`.
    flush_lock: Mutex<()>,
    /// Damaged ranges `[start, end)` that a salvage open skipped; every walk jumps over them (a range may
    /// begin with a record that reads without its body CRC: the walks that do not check it ask first).
    skips: RwLock<Vec<(u64, u64)>>,
    /// `skips` is not empty.
    any_skips: std::sync::atomic::AtomicBool,
    /// With the transient store pool: puts write into a pooled buffer, and `max_offset` (the readers' limit)
    /// is the committed position, moved by [`commit`](Self::commit).
    pool: Option<PoolWriter>,
}

/// The write side of the transient store pool.
#[derive(Debug)]
struct PoolWriter {
    pool: pool::TransientStorePool,
    /// The buffer of the segment being written. Taken after the put lock; commits take only this.
    active: Mutex<Option<Active>>,
}

/// A borrowed buffer and the segment it stands for.
#[derive(Debug)]
struct Active {
    file: Arc<MappedFile>,
    buf: memmap2::MmapMut,
    /// Global offset up to which the buffer holds written bytes (from the committed position on).
    wrote: u64,
}

impl CommitLog {
    /// Opens the log in `dir` with the default recovery options (strict; a crash assumed possible).
    pub fn open(dir: &Path, cfg: CommitLogConfig) -> Result<(Self, OpenReport)> {
        Self::open_with(dir, cfg, &RecoverOptions::default())
    }

    /// Opens the log in `dir`, validating records from the last segment that starts with one, and settles
    /// the end as `recover` describes.
    pub fn open_with(dir: &Path, cfg: CommitLogConfig, opts: &RecoverOptions) -> Result<(Self, OpenReport)> {
        Self::open_visiting(dir, cfg, opts, &mut |_| {})
    }

    /// [`CommitLog::open_with`], offering each record the log keeps from the recovery start on to `visit`, in
    /// order, as the validating walk reads it (so a caller checks what it derives from the records without a
    /// second read of the log). Records after the end found, or in a range a salvage skipped, are not offered.
    pub fn open_visiting(
        dir: &Path,
        cfg: CommitLogConfig,
        opts: &RecoverOptions,
        visit: &mut dyn FnMut(&Record),
    ) -> Result<(Self, OpenReport)> {
        let queue = Arc::new(FileQueue::load_in(opts.storage, dir, cfg.mapped_file_size_commit_log)?);
        let log = CommitLog {
            queue,
            warm: Warm::default(),
            ahead: Mutex::new(None),
            warm_enabled: opts.storage == crate::mmap::Storage::Disk,
            cfg,
            writer: Mutex::new(WritePos::default()),
            max_offset: AtomicU64::new(0),
            flushed_where: AtomicU64::new(0),
            flush_lock: Mutex::new(()),
            skips: RwLock::new(Vec::new()),
            any_skips: Default::default(),
            pool: None,
        };
        let report = log.recover(opts, visit)?;
        if let Some(last) = log.queue.last().filter(|last| report.end_offset < last.end()) {
            if log.warm_enabled {
                // The writer starts on single pages under either flush ([`CommitLog::set_writing`]; under
                // ASYNC_FLUSH until the warm service has seen it write fast, `Pace`): what was cached past the end
                // goes, and the writer's own first faults, before the first warm round, read nothing around.
                last.evict_from((report.end_offset - last.start()) as usize);
                last.fault_single_pages(true);
            }
        }
        log.lock_writer().at = report.end_offset;
        log.max_offset.store(report.end_offset, Ordering::Release);
        log.flushed_where.store(report.end_offset, Ordering::Release);
        log.warm.done.store(report.end_offset, Ordering::Release);
        log.warm.requested.store(report.end_offset, Ordering::Release);
        Ok((log, report))
    }

    fn lock_writer(&self) -> std::sync::MutexGuard<'_, WritePos> {
        self.writer.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Read-only (overlay) logs: takes in what another process appended since the open or the last refresh.
    /// New segments are mapped, and the end moves over every complete record (and blank) after it, stopping
    /// before the first position that is not one (a record still being written is taken next time). Segments
    /// deleted underneath stay readable until [`CommitLog::drop_gone`]. Returns the new end.
    pub fn refresh(&self) -> Result<u64> {
        self.queue.refresh()?;
        let mut w = self.lock_writer();
        let end = &mut w.at;
        let Some(last) = self.queue.last() else { return Ok(*end) };
        let mut cursor =
            Cursor::new(&self.queue, (*end).max(self.queue.min_offset()), last.end(), self.check_options());
        let mut at = cursor.offset();
        loop {
            match cursor.next() {
                Some(Step::Record(_)) => at = cursor.offset(),
                // The end is a blank's start until the segment after it exists, as at the open (`recover`).
                Some(Step::Blank { offset }) if self.queue.find(cursor.offset()).is_none() => {
                    at = at.max(offset);
                    break;
                }
                Some(Step::Blank { .. }) => at = cursor.offset(),
                _ => break,
            }
        }
        if at > *end {
            *end = at;
            self.max_offset.store(at, Ordering::Release);
        }
        Ok(*end)
    }

    /// Read-only (overlay) logs: drops the first segments whose files another process deleted (retention), once
    /// what they hold was taken in. Returns how many.
    pub fn drop_gone(&self) -> usize {
        self.queue.drop_gone()
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

    pub(crate) fn check_options(&self) -> CheckOptions {
        CheckOptions { check_crc: self.cfg.check_crc_on_recover, force_prop_crc: self.cfg.force_verify_prop_crc }
    }

    /// Records a damaged range that walks skip (salvage).
    pub(crate) fn add_skip(&self, from: u64, to: u64) {
        self.skips.write().unwrap_or_else(|p| p.into_inner()).push((from, to));
        self.any_skips.store(true, Ordering::Release);
    }

    /// Where a walk at `offset` goes on, if a salvage open skipped a range from there (one atomic load when
    /// nothing was skipped). Walks ask at invalid bytes, and at records too: a record whose body CRC is wrong
    /// reads as a record to a walk that does not check it, yet the salvage called it damage.
    pub fn skip_at(&self, offset: u64) -> Option<u64> {
        if !self.any_skips.load(Ordering::Acquire) {
            return None;
        }
        self.skips.read().unwrap_or_else(|p| p.into_inner()).iter().find(|(a, _)| *a == offset).map(|&(_, b)| b)
    }

    /// A cursor over the published data from `offset` (no byte at or beyond `limit` is read).
    pub fn cursor(&self, offset: u64, limit: u64) -> Cursor<'_> {
        Cursor::new(&self.queue, offset, limit.min(self.max_offset()), CheckOptions::default())
    }

    /// The store time of the last record before [`max_offset`](Self::max_offset): the newest segment holding a
    /// record, walked from its start. `None` when the log holds no record.
    pub fn newest_store_timestamp(&self) -> Option<i64> {
        self.queue.files().iter().rev().find_map(|f| {
            let mut c = self.cursor(f.start(), self.max_offset());
            let mut ts = None;
            while let Some(cursor::Step::Record(r)) = c.next() {
                ts = Some(r.header.store_timestamp);
            }
            ts
        })
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
        let mut w = self.lock_writer();
        let WritePos { at: wrote, segment } = &mut *w;
        if let Some(pw) = &self.pool {
            return self.append_pooled(pw, wrote, segment, buf, records, queue_offset);
        }
        let dirty_from = *wrote;
        let mut file = self.writable_file(segment, *wrote)?;
        let mut pos = (*wrote - file.start()) as usize;
        let remaining = file.end() - *wrote;
        let rolled = total + END_FILE_MIN_BLANK_LENGTH as u64 > remaining;
        if rolled {
            // Create the next segment before touching this one, so a failure changes nothing.
            let next = match self.queue.next_after(file) {
                Some(next) => next,
                None => self.next_segment(file.end())?,
            };
            if remaining >= END_FILE_MIN_BLANK_LENGTH as u64 {
                let mut blank = [0u8; END_FILE_MIN_BLANK_LENGTH];
                blank[..4].copy_from_slice(&(remaining as i32).to_be_bytes());
                blank[4..].copy_from_slice(&BLANK_MAGIC.to_be_bytes());
                file.write_commit_word(pos, blank)?;
            }
            *wrote = file.end();
            self.max_offset.store(*wrote, Ordering::Release);
            segment.set(&self.queue, next);
            file = self.writable_file(segment, *wrote)?;
            pos = 0;
        }
        let first_offset = *wrote;
        let store_timestamp = stamp_records(buf, records, first_offset, &queue_offset);
        // The commit protocol (`recover`'s crash model): every byte but the first record's first 8, then those
        // 8 with one store. A kill before that store leaves an append that recovery can tell is unfinished.
        let (word, rest) = buf.split_at(END_FILE_MIN_BLANK_LENGTH.min(buf.len()));
        let word = <[u8; END_FILE_MIN_BLANK_LENGTH]>::try_from(word).map_err(|_| {
            Error::IllegalMessage(format!("an append of {total} bytes is shorter than a record header"))
        })?;
        file.write_at(pos + END_FILE_MIN_BLANK_LENGTH, rest)?;
        file.write_commit_word(pos, word)?;
        *wrote = first_offset + total;
        self.max_offset.store(*wrote, Ordering::Release);
        // A new segment: the warm rounds stopped at its end (they create only the segment after the writer's).
        let mut wake_warm = rolled && self.warm_enabled;
        if self.warm_enabled {
            let ahead = self.warm_ahead();
            if *wrote + ahead / 2 > self.warm.requested.load(Ordering::Relaxed) {
                self.warm.requested.fetch_max(*wrote + ahead, Ordering::AcqRel);
                wake_warm = true;
            }
        }
        Ok(Appended { first_offset, wrote_bytes: total, store_timestamp, dirty_from, wake_warm })
    }

    /// Turns the transient store pool on: later appends write into its buffers, and readers see what
    /// [`commit`](Self::commit) copied into the files.
    pub fn attach_pool(&mut self, pool: pool::TransientStorePool) {
        self.pool = Some(PoolWriter { pool, active: Mutex::new(None) });
    }

    /// The transient store pool, when on.
    pub fn transient_pool(&self) -> Option<&pool::TransientStorePool> {
        self.pool.as_ref().map(|p| &p.pool)
    }

    /// The write position: one past the last byte appended (ahead of [`max_offset`](Self::max_offset), the
    /// committed position, while the transient store pool holds uncommitted bytes).
    pub fn wrote_offset(&self) -> u64 {
        self.lock_writer().at
    }

    /// The committed position (RocketMQ's `committedWhere`): what readers see and flushes cover. Without the
    /// transient store pool, every appended byte is committed.
    pub fn committed_where(&self) -> u64 {
        self.max_offset()
    }

    /// `append` with the transient store pool: the records go into the segment's buffer; the file sees them at
    /// the next commit. A roll commits the full segment at once and returns its buffer to the pool.
    fn append_pooled(
        &self,
        pw: &PoolWriter,
        wrote: &mut u64,
        segment: &mut SegmentCache,
        buf: &mut [u8],
        records: &[EncodedRecord],
        queue_offset: impl Fn(usize) -> i64,
    ) -> Result<Appended> {
        let total = buf.len() as u64;
        let dirty_from = *wrote;
        let mut active = pw.active.lock().unwrap_or_else(|p| p.into_inner());
        let mut file = Arc::clone(self.writable_file(segment, *wrote)?);
        let remaining = file.end() - *wrote;
        if total + END_FILE_MIN_BLANK_LENGTH as u64 > remaining {
            let next = match self.queue.next_after(&file) {
                Some(next) => next,
                None => self.next_segment(file.end())?,
            };
            let a = self.activate(pw, &mut active, &file, *wrote)?;
            if remaining >= END_FILE_MIN_BLANK_LENGTH as u64 {
                let pos = (*wrote - file.start()) as usize;
                let mut blank = [0u8; END_FILE_MIN_BLANK_LENGTH];
                blank[..4].copy_from_slice(&(remaining as i32).to_be_bytes());
                blank[4..].copy_from_slice(&BLANK_MAGIC.to_be_bytes());
                a.buf[pos..pos + END_FILE_MIN_BLANK_LENGTH].copy_from_slice(&blank);
                a.wrote = *wrote + END_FILE_MIN_BLANK_LENGTH as u64;
            }
            self.commit_active(a, 0)?;
            self.max_offset.store(file.end(), Ordering::Release);
            if let Some(done) = active.take() {
                pw.pool.give_back(done.buf);
            }
            *wrote = file.end();
            file = next;
        }
        let a = self.activate(pw, &mut active, &file, *wrote)?;
        let first_offset = *wrote;
        let store_timestamp = stamp_records(buf, records, first_offset, &queue_offset);
        let pos = (first_offset - file.start()) as usize;
        a.buf[pos..pos + buf.len()].copy_from_slice(buf);
        *wrote = first_offset + total;
        a.wrote = *wrote;
        // The pool writes into its buffers, not the mapping: nothing to warm.
        Ok(Appended { first_offset, wrote_bytes: total, store_timestamp, dirty_from, wake_warm: false })
    }

    /// The active buffer for `file` (borrowed if there is none yet), whose content starts at `at`.
    fn activate<'a>(
        &self,
        pw: &PoolWriter,
        active: &'a mut Option<Active>,
        file: &Arc<MappedFile>,
        at: u64,
    ) -> Result<&'a mut Active> {
        if active.as_ref().is_some_and(|a| a.file.start() != file.start()) {
            // Cannot happen: a roll commits and returns the buffer before moving on.
            return Err(Error::Corruption {
                path: file.path().to_owned(),
                offset: at as i64,
                reason: "the transient store buffer belongs to another segment".into(),
            });
        }
        if active.is_none() {
            let buf = pw.pool.borrow().ok_or_else(|| Error::Io {
                path: file.path().to_owned(),
                source: std::io::Error::other("every transient store buffer is in use"),
            })?;
            *active = Some(Active { file: file.clone(), buf, wrote: at });
        }
        active.as_mut().ok_or(Error::Closed)
    }

    /// Copies what the buffer holds past the committed position into the file, when at least `least_pages`
    /// 4 KiB pages are waiting (0: whatever is there). The commit-word protocol holds: every byte but the
    /// range's first 8 (the first record's, or the end-of-file blank's, size and magic), then those 8 with one
    /// store; a kill before that store leaves what recovery takes for an unfinished append. Returns whether
    /// anything moved.
    fn commit_active(&self, a: &mut Active, least_pages: u64) -> Result<bool> {
        let from = self.max_offset().max(a.file.start());
        let to = a.wrote;
        if to <= from {
            return Ok(false);
        }
        let page = crate::sync_record::PAGE as u64;
        if least_pages > 0 && to / page - from / page < least_pages {
            return Ok(false);
        }
        let pos = (from - a.file.start()) as usize;
        let len = (to - from) as usize;
        let bytes = a.buf.get(pos..pos + len).unwrap_or_default();
        if len >= END_FILE_MIN_BLANK_LENGTH {
            let (word, rest) = bytes.split_at(END_FILE_MIN_BLANK_LENGTH);
            a.file.write_at(pos + END_FILE_MIN_BLANK_LENGTH, rest)?;
            let word = <[u8; END_FILE_MIN_BLANK_LENGTH]>::try_from(word).unwrap_or_default();
            a.file.write_commit_word(pos, word)?;
        }
        self.max_offset.store(to, Ordering::Release);
        Ok(true)
    }

    /// With the transient store pool: commits the appended bytes into the file (RocketMQ's `commit`), when at
    /// least `least_pages` pages wait (0: all). Returns whether the committed position moved. Without the pool
    /// nothing waits: `false`.
    pub fn commit(&self, least_pages: u64) -> Result<bool> {
        let Some(pw) = &self.pool else { return Ok(false) };
        let mut active = pw.active.lock().unwrap_or_else(|p| p.into_inner());
        match active.as_mut() {
            Some(a) => self.commit_active(a, least_pages),
            None => Ok(false),
        }
    }

    /// The segment to write at `offset` (kept in `segment` from put to put), created if it does not exist yet.
    fn writable_file<'a>(&self, segment: &'a mut SegmentCache, offset: u64) -> Result<&'a Arc<MappedFile>> {
        if segment.find(&self.queue, offset).is_none() {
            let start = offset - offset % self.file_size();
            let file = match self.queue.find(start) {
                Some(f) => f,
                None => self.create_to_write(start)?,
            };
            segment.set(&self.queue, file);
        }
        segment.find(&self.queue, offset).ok_or_else(|| Error::InvalidOffset {
            offset: offset as i64,
            reason: "no commitlog segment holds the write position".into(),
        })
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
        let _g = self.flush_lock.lock().unwrap_or_else(|p| p.into_inner());
        let end = self.max_offset();
        for f in self.queue.files() {
            f.flush()?;
        }
        self.flushed_where.fetch_max(end, Ordering::AcqRel);
        Ok(())
    }

    /// One round of the ASYNC_FLUSH flush service (RocketMQ's `CommitLog.flush(leastPages)`): from
    /// [`flushed_where`](Self::flushed_where), flushes each full segment and the segment being written when
    /// `least_pages` new pages accumulated there (0: any new byte), see [`FileQueue::flush_pages`]. Returns the
    /// end of the log read at the start, the clock then, and the new flushed position (equal to the end when
    /// everything was flushed). The end and the clock are read under the put lock: every record stored before
    /// that clock (store time below it) lies below that end.
    pub fn flush_pages(&self, least_pages: u64) -> Result<FlushPages> {
        let _g = self.flush_lock.lock().unwrap_or_else(|p| p.into_inner());
        let (end, wrote, clock) = {
            let w = self.lock_writer();
            (self.max_offset(), w.at, now_ms())
        };
        let at = self.queue.flush_pages(self.flushed_where(), end, least_pages)?;
        self.flushed_where.fetch_max(at, Ordering::AcqRel);
        Ok(FlushPages { end, wrote, clock, flushed: self.flushed_where() })
    }

    /// Everything below this offset is flushed to disk (`flushedWhere`): moved by [`flush`](Self::flush) and
    /// [`flush_pages`](Self::flush_pages); the end of the log as recovered at open.
    pub fn flushed_where(&self) -> u64 {
        self.flushed_where.load(Ordering::Acquire)
    }

    /// The record at `offset`; `None` past the end, before the start, or on an end-of-file blank.
    pub fn read(&self, offset: u64) -> Result<Option<Record>> {
        let max = self.max_offset();
        if offset >= max || offset < self.queue.min_offset() {
            return Ok(None);
        }
        let Some(file) = self.queue.find(offset) else { return Ok(None) };
        Self::read_in(file, offset, max)
    }

    /// [`read`](Self::read) in a segment the caller already holds (`file` must hold `offset`, and `max` be a
    /// published end): no lookup of the segment, no lock. For loops that read many records of one segment.
    pub fn read_in(file: Arc<MappedFile>, offset: u64, max: u64) -> Result<Option<Record>> {
        if offset < file.start() || offset >= file.end().min(max) {
            return Ok(None);
        }
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

    /// The first record at or after `offset` in scan order (stepping over blanks into the next segment, and
    /// over ranges a salvage open skipped), with the offset after it. `offset` must be a record boundary, a
    /// blank, or a segment start. Bytes that are not a record raise `Error::Corruption` naming file and offset.
    pub fn next_record(&self, offset: u64) -> Result<Option<(Record, u64)>> {
        let mut cursor = self.cursor(offset.max(self.queue.min_offset()), u64::MAX);
        loop {
            let at = cursor.offset();
            let (file, reason) = match cursor.next() {
                None | Some(Step::Missing { .. }) => return Ok(None),
                Some(Step::Record(r)) => match self.skip_at(at) {
                    Some(to) => {
                        cursor.seek(to);
                        continue;
                    }
                    None => return Ok(Some((r, cursor.offset()))),
                },
                Some(Step::Blank { .. }) => continue,
                Some(Step::Partial { file, .. }) => (file, "record is truncated".to_owned()),
                Some(Step::Zero { file, .. }) => (file, "bad magic code 0x00000000".to_owned()),
                Some(Step::Invalid { file, reason, .. }) => (file, reason),
            };
            match self.skip_at(at) {
                Some(to) => cursor.seek(to),
                None => {
                    return Err(Error::Corruption { path: file.path().to_owned(), offset: at as i64, reason });
                }
            }
        }
    }
}

impl CommitLog {
    /// Whether appends requested pages that the `warm` service could fault in and has not yet (pages past the
    /// segment after the one being written wait for the writer).
    pub fn warm_wanted(&self) -> bool {
        let done = self.warm.done.load(Ordering::Acquire);
        let size = self.file_size();
        let reachable = self.queue.find(done).is_some() || done - done % size == self.segment_after_writer();
        self.warm.requested.load(Ordering::Acquire) > done && reachable
    }

    /// The segment starting at `start` for a roll: the one made ahead if it is that one (added to the queue
    /// now), else a new one.
    #[cold]
    #[inline(never)]
    fn next_segment(&self, start: u64) -> Result<Arc<MappedFile>> {
        let mut ahead = self.ahead.lock().unwrap_or_else(|p| p.into_inner());
        let next = match ahead.take() {
            Some(file) if file.start() == start => {
                self.queue.adopt(file.clone())?;
                file
            }
            stale => {
                // Made for a log that has since been cut back: not the next segment.
                if let Some(file) = stale {
                    file.delete_on_drop();
                }
                self.create_to_write(start)?
            }
        };
        if let Some(full) = start.checked_sub(self.file_size()).and_then(|s| self.queue.find(s)) {
            self.set_writing(&full, false);
        }
        Ok(next)
    }

    /// A new segment in the queue at `start`, prepared for the writer ([`CommitLog::set_writing`]).
    fn create_to_write(&self, start: u64) -> Result<Arc<MappedFile>> {
        let file = self.queue.create(start)?;
        self.set_writing(&file, true);
        Ok(file)
    }

    /// On disk: a segment the writer will write (a new one, the one made ahead; `writing`, before any of its
    /// pages is faulted in) brings its pages into the page cache one by one under SYNC_FLUSH
    /// ([`MappedFile::fault_single_pages`]), so that a group commit's msync writes back the pages the puts
    /// changed, not the large folios around them (under ASYNC_FLUSH the warm service chooses per round,
    /// [`CommitLog::warm_round`]; the last segment at open starts on single pages under either, `open_visiting`);
    /// one it has filled and left (not `writing`) reads ahead again under either, for a reader catching up on it
    /// after its pages left the page cache.
    fn set_writing(&self, file: &MappedFile, writing: bool) {
        if self.warm_enabled && (!writing || self.cfg.flush_disk_type == FlushDiskType::SyncFlush) {
            file.fault_single_pages(writing);
        }
    }

    /// The `warm` service's segment holding `offset` when that is the one after the segment being written: made
    /// now if it was not (RocketMQ's `AllocateMappedFileService` makes its next file ahead too), so the round can
    /// fault in its first pages and the put that rolls into it neither creates a file under the put lock nor
    /// faults in and zeroes those pages itself. `None` for any other segment. A failure (a full disk) changes
    /// nothing: the writer's roll meets it again and reports it. A close deletes the segment
    /// ([`CommitLog::drop_segment_ahead`]); after a crash the next open does (`recover`: segments after the end
    /// that hold nothing).
    fn segment_ahead(&self, offset: u64) -> Result<Option<Arc<MappedFile>>> {
        let start = offset - offset % self.file_size();
        if start != self.segment_after_writer() {
            return Ok(None);
        }
        let mut ahead = self.ahead.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(file) = ahead.as_ref().filter(|f| f.start() == start) {
            return Ok(Some(file.clone()));
        }
        // The writer makes and takes segments under this lock too: it has not rolled into `start` yet.
        if self.queue.last().is_none_or(|last| last.end() != start) {
            return Ok(None);
        }
        if let Some(stale) = ahead.take() {
            stale.delete_on_drop();
        }
        let file = self.queue.create_detached(start)?;
        self.set_writing(&file, true);
        *ahead = Some(file.clone());
        Ok(Some(file))
    }

    /// Where the segment after the one being written starts (the only one made ahead).
    fn segment_after_writer(&self) -> u64 {
        let size = self.file_size();
        (self.max_offset() / size + 1) * size
    }

    /// Lets go of every segment (a closed store's), deleting none but the one made ahead of the writer. The
    /// transient store pool's buffer goes too: a close commits it first, and after a close nothing can.
    pub fn release(&self) {
        self.drop_segment_ahead();
        self.writer.lock().unwrap_or_else(|p| p.into_inner()).segment = SegmentCache::default();
        if let Some(pool) = &self.pool {
            pool.active.lock().unwrap_or_else(|p| p.into_inner()).take();
        }
        self.queue.release();
    }

    /// Deletes the segment made ahead, if any (it holds nothing). For a writer whose services are stopped (a
    /// close): a closed store's directory holds its data only.
    pub fn drop_segment_ahead(&self) {
        if let Some(file) = self.ahead.lock().unwrap_or_else(|p| p.into_inner()).take() {
            file.delete_on_drop();
        }
    }

    /// How far ahead of the write position the warm service works.
    fn warm_ahead(&self) -> u64 {
        match self.cfg.flush_disk_type {
            FlushDiskType::SyncFlush => WARM_AHEAD_SYNC,
            FlushDiskType::AsyncFlush => WARM_AHEAD,
        }
    }

    /// Under ASYNC_FLUSH, for a writer at `wrote` that has slowed down (judged fast before, slow now): the pages
    /// faulted in ahead of it for a fast writer, in large folios, leave the page cache from the folio boundary
    /// ([`crate::mmap::LARGEST_FOLIO`]) at or below `wrote` on ([`MappedFile::evict_from`]: the folio the
    /// writer is in, written back first if dirty, and the zeros ahead), and the warm position goes back to the
    /// writer's page, so that this round faults them in again one by one. The writer, slow, is far from the end
    /// of them; a page it dirties meanwhile stays cached as it is (the kernel drops clean pages only).
    fn unwarm_ahead(&self, wrote: u64) {
        let done = self.warm.done.load(Ordering::Acquire);
        let mut at = wrote;
        while at < done {
            let file = self.queue.find(at).or_else(|| {
                let ahead = self.ahead.lock().unwrap_or_else(|p| p.into_inner());
                ahead.as_ref().filter(|f| f.start() <= at && at < f.end()).cloned()
            });
            let Some(file) = file else { break };
            file.evict_from((at - file.start()) as usize);
            at = file.end();
        }
        // Under the round lock, the only other writer of `done` (`fetch_max` at the end of a round).
        self.warm.done.store(wrote - wrote % crate::sync_record::PAGE as u64, Ordering::Release);
    }

    /// One warm-up round: faults in the pages requested ahead of the write position (at most [`WARM_AHEAD`]
    /// bytes, [`WARM_AHEAD_SYNC`] under SYNC_FLUSH, in chunks of [`WARM_CHUNK`]); under SYNC_FLUSH, writes each
    /// chunk back too, in steps of [`WRITE_BACK_STEP`] ([`MappedFile::write_back`]). The round stops at the end
    /// of the segment after the one being written, which the round creates when the request reaches it
    /// ([`CommitLog::segment_ahead`]); the rest of the request waits for the writer to move on, which wakes the
    /// service again ([`Appended::wake_warm`]). Under ASYNC_FLUSH, with `flush_interval` the flush service's,
    /// a writer too slow for large folios ([`LARGE_FOLIOS_PER_FLUSH`]) gets the round's pages faulted in one by
    /// one ([`MappedFile::fault_single_pages`]), and one that slowed down since the last round gets those faulted
    /// in ahead of it for a fast writer again that way ([`CommitLog::unwarm_ahead`]; the service runs a round
    /// every second when no put wakes it, so a slow-down is seen within about a second). Returns the bytes
    /// faulted in, or why that segment could not be created (the pages before it were faulted in; the writer's
    /// roll tries again and reports its own failure).
    pub fn warm_round(&self, flush_interval: Duration) -> Result<u64> {
        let mut pace = self.warm.round.lock().unwrap_or_else(|p| p.into_inner());
        let single = if self.cfg.flush_disk_type == FlushDiskType::AsyncFlush {
            let (was_fast, wrote) = (pace.fast, self.max_offset());
            let slow = !pace.is_fast(Instant::now(), wrote, flush_interval);
            if was_fast && slow {
                self.unwarm_ahead(wrote);
            }
            slow
        } else {
            false
        };
        let target = self.warm.requested.load(Ordering::Acquire);
        let start = self.warm.done.load(Ordering::Acquire).max(target.saturating_sub(self.warm_ahead()));
        let mut done = start;
        let mut failed = None;
        let next = self.segment_after_writer();
        if target > next {
            // The next segment first, before the pages up to it: making it takes a few syncs, faulting the pages
            // in far longer when the host zeroes slowly, and a roll that comes first waits for it.
            failed = self.segment_ahead(next).err();
        }
        while done < target {
            let file = match self.queue.find(done) {
                Some(file) => file,
                None if failed.is_some() => break,
                None => match self.segment_ahead(done) {
                    Ok(Some(file)) => file,
                    Ok(None) => break,
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                },
            };
            let end = target.min(file.end()).min(done + WARM_CHUNK);
            if single {
                // For these pages only: the advice covers the whole mapping, and the writer, far behind at this
                // pace, faults in none of its own.
                file.fault_large_folios(false);
                file.fault_single_pages(true);
            } else if self.cfg.flush_disk_type == FlushDiskType::AsyncFlush {
                // A fast writer: 2 MiB folios from the segment's first page, each mapped whole (one TLB
                // shootdown when it is written back, not one per 4 KiB page).
                file.fault_large_folios(true);
            }
            file.prefault((done - file.start()) as usize, (end - done) as usize);
            if single {
                file.fault_single_pages(false);
            }
            if self.cfg.flush_disk_type == FlushDiskType::SyncFlush {
                // In small steps, each waited for: a put's flush queues behind at most one of them.
                let mut at = done;
                while at < end {
                    let step = (end - at).min(WRITE_BACK_STEP);
                    file.write_back((at - file.start()) as usize, step as usize);
                    at += step;
                }
            }
            done = end;
        }
        self.warm.done.fetch_max(done, Ordering::AcqRel);
        failed.map_or(Ok(done - start), Err)
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// Stamps the records of an append starting at commitlog offset `first_offset` (their queue offsets,
/// physical offsets and one store time, read now under the put lock) and returns that store time.
fn stamp_records(
    buf: &mut [u8],
    records: &[EncodedRecord],
    first_offset: u64,
    queue_offset: &impl Fn(usize) -> i64,
) -> i64 {
    let store_timestamp = now_ms();
    for (i, rec) in records.iter().enumerate() {
        let phys = first_offset + rec.start as u64;
        if let Some(bytes) = buf.get_mut(rec.start..rec.start + rec.len) {
            finish_record(bytes, rec, queue_offset(i), phys as i64, store_timestamp);
        }
    }
    store_timestamp
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;
    const INTERVAL: Duration = Duration::from_millis(500);

    #[test]
    fn a_writer_is_slow_until_it_writes_fast() {
        let t0 = Instant::now();
        let mut pace = Pace::default();
        assert!(!pace.is_fast(t0, 100 * MIB, INTERVAL), "unknown counts as slow");
        // 16 MiB in 100 ms: 80 MiB per flush interval.
        assert!(pace.is_fast(t0 + Duration::from_millis(100), 116 * MIB, INTERVAL));
        // 16 MiB in 1 s: 8 MiB per interval, under the 16 MiB that large folios need.
        assert!(!pace.is_fast(t0 + Duration::from_millis(1100), 132 * MIB, INTERVAL));
        // Exactly 16 MiB per interval is fast enough.
        assert!(pace.is_fast(t0 + Duration::from_millis(1600), 148 * MIB, INTERVAL));
    }

    #[test]
    fn a_short_sample_keeps_the_last_judgement_and_measures_on_from_its_start() {
        let t0 = Instant::now();
        let mut pace = Pace::default();
        pace.is_fast(t0, 0, INTERVAL);
        assert!(pace.is_fast(t0 + Duration::from_millis(10), 32 * MIB, INTERVAL));
        // A round soon after (a roll's wake-up) with little written: still fast, and the start stays put.
        assert!(pace.is_fast(t0 + Duration::from_millis(11), 32 * MIB + 4096, INTERVAL));
        // Measured from 10 ms: 1 MiB in 990 ms is slow.
        assert!(!pace.is_fast(t0 + Duration::from_millis(1000), 33 * MIB, INTERVAL));
        // A trickle seen a flush interval later, however little it wrote, is judged (slow).
        assert!(!pace.is_fast(t0 + Duration::from_millis(1600), 33 * MIB + 1024, INTERVAL));
    }

    #[test]
    fn a_log_cut_back_restarts_the_measurement_as_slow() {
        let t0 = Instant::now();
        let mut pace = Pace::default();
        pace.is_fast(t0, 64 * MIB, INTERVAL);
        assert!(pace.is_fast(t0 + Duration::from_millis(10), 96 * MIB, INTERVAL));
        assert!(!pace.is_fast(t0 + Duration::from_millis(20), 10 * MIB, INTERVAL));
        assert!(pace.is_fast(t0 + Duration::from_millis(30), 42 * MIB, INTERVAL));
    }

    #[test]
    fn a_shorter_flush_interval_asks_more_of_a_fast_writer() {
        let t0 = Instant::now();
        let mut pace = Pace::default();
        pace.is_fast(t0, 0, INTERVAL);
        // 100 MiB/s: fast at 500 ms (50 MiB per flush), slow at 10 ms (1 MiB per flush).
        let mut other = Pace::default();
        other.is_fast(t0, 0, Duration::from_millis(10));
        assert!(pace.is_fast(t0 + Duration::from_millis(200), 20 * MIB, INTERVAL));
        assert!(!other.is_fast(t0 + Duration::from_millis(200), 20 * MIB, Duration::from_millis(10)));
    }
}
