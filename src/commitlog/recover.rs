//! Finding the end of the commitlog on open: the crash model, and what each recovery mode does.
//!
//! **What a killed process leaves.** An append copies its bytes into the mapping in two steps: first
//! everything except the first 8 bytes of its first record (in any byte order: `memcpy` may write the middle of
//! a large copy before its head), then those 8 bytes (TOTALSIZE and MAGIC) with one store, the append's
//! *commit word* ([`MappedFile::write_commit_word`](crate::mmap::MappedFile::write_commit_word)). A roll first
//! writes the end-of-file blank of the full segment, also with one store, then appends into the next segment.
//! A put is acknowledged only after its commit word is written, and the next append starts only after that.
//! So a process killed at any instant leaves the log's valid records, then at most one unfinished append:
//! zeros where its commit word belongs, and any subset of its other bytes (in the same segment, or at the
//! start of the next one after a roll). Nothing after it.
//!
//! **What opening does.** It walks the records from the recovery start ([`Cursor`]) to the first position
//! `P` that is not a valid record or blank, and classifies what lies from `P` on:
//! - *clean*: only zeros. The end of the data is `P`.
//! - *torn*: the previous run did not close (the abort file was there), no consume-queue or index entry
//!   points at or beyond `P` (so nothing there was ever dispatched, which only happens to committed records),
//!   and every valid record found after `P` lies where the unfinished append can: in `P`'s segment, or (after
//!   a roll, with at most the blank filler's 8 bytes left in `P`'s segment) in the next one, and nothing
//!   non-zero anywhere after that. (Nothing else about those records can be trusted: a torn record validates
//!   when its body and lengths are whole, whatever its queue offset, store time or properties hold.) The remains are zeroed, later segments
//!   removed, and `OpenReport::torn_bytes` says how much was discarded.
//! - *damaged*: anything else, i.e. bytes that a kill cannot leave. With [`RecoveryMode::Strict`] (the
//!   default) opening fails with `Error::Corruption` naming file and offset and changes nothing; with
//!   `Truncate` the log is cut at `P` as RocketMQ's recovery cuts it and the records dropped are counted;
//!   with `Salvage` only the damaged bytes are skipped (up to the next record that validates completely and
//!   names its own offset) and every valid record after them is kept. Each cut or skip is reported in
//!   `OpenReport::damage`.
//!
//! The one case the bytes cannot decide: damage that destroys exactly the commit word of the last append of a
//! crashed run, before anything dispatched it, looks like that append never committed; it is reported as a
//! torn write.

use std::path::PathBuf;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::file_queue::FileQueue;
use crate::message::decode::CheckOptions;
use crate::message::RecordHeader;
use crate::mmap::MappedFile;

use super::cursor::{find_valid_record_starting_before, Cursor, Step};
use super::{CommitLog, Record};

/// What opening does with damage inside the data (bytes a killed process cannot leave).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecoveryMode {
    /// Refuse to open, naming file and offset; nothing is changed.
    #[default]
    Strict,
    /// Cut the log at the first damaged record, as RocketMQ's recovery does, and report what was cut.
    Truncate,
    /// Skip only the damaged bytes and keep every valid record after them.
    Salvage,
}

impl RecoveryMode {
    /// The mode's name: `strict`, `truncate` or `salvage`.
    pub fn name(self) -> &'static str {
        match self {
            RecoveryMode::Strict => "strict",
            RecoveryMode::Truncate => "truncate",
            RecoveryMode::Salvage => "salvage",
        }
    }

    /// Parses a mode's name.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "strict" => Ok(RecoveryMode::Strict),
            "truncate" => Ok(RecoveryMode::Truncate),
            "salvage" => Ok(RecoveryMode::Salvage),
            other => Err(Error::InvalidConfig(format!(
                "recovery must be \"strict\", \"truncate\" or \"salvage\", not {other:?}"
            ))),
        }
    }
}

/// What opening knows besides the commitlog's bytes.
#[derive(Debug, Clone, Copy)]
pub struct RecoverOptions {
    pub mode: RecoveryMode,
    /// The previous run did not close cleanly (the abort file exists), so a torn append is possible.
    pub unclean: bool,
    /// The end of the highest record that a consume queue or the index refers to (0: none). Such records
    /// were dispatched, hence committed: damage before this point cannot be a torn write (after a kill; a
    /// power loss can keep a consume-queue page and lose the commitlog pages it points at).
    pub dispatched_end: u64,
    /// Where the segments live: on disk, or a read-only overlay in which the end is settled in memory only
    /// (a torn tail is not zeroed, no segment is removed from disk).
    pub storage: crate::mmap::Storage,
    /// The checkpoint's `physicMsgTimestamp` (0: nothing known flushed): every record stored before this time was
    /// flushed, so a power loss cannot have lost its pages. `i64::MAX` (the default, for a commitlog opened on
    /// its own) assumes every record was flushed: only a kill's torn append is told apart from damage.
    pub durable_timestamp: i64,
    /// The abnormal path's start time (RocketMQ's `dispatchFromStoreTimestamp`): the checkpoint's
    /// `getMinTimestamp()`, i.e. `min(physicMsgTimestamp, logicsMsgTimestamp) - 3 s` floored at 0, and with
    /// `messageIndexSafe` at most `indexMsgTimestamp`. After a crash validation starts at the newest segment
    /// whose first record was stored at or before it (spec §10.3). `i64::MAX` (a commitlog opened on its own):
    /// the newest segment.
    pub start_timestamp: i64,
    /// With `messageIndexSafe`: the checkpoint's `indexMsgTimestamp`; recovery starts at a segment whose first
    /// record was stored at or before it (both paths). `i64::MAX` without it.
    pub index_safe_timestamp: i64,
}

impl Default for RecoverOptions {
    /// Strict, and a crash is assumed possible (a commitlog opened on its own has no abort file to tell), with
    /// no checkpoint (so no power loss).
    fn default() -> Self {
        RecoverOptions {
            mode: RecoveryMode::Strict,
            unclean: true,
            dispatched_end: 0,
            durable_timestamp: i64::MAX,
            start_timestamp: i64::MAX,
            index_safe_timestamp: i64::MAX,
            storage: crate::mmap::Storage::Disk,
        }
    }
}

/// Which of RocketMQ's recoveries opening ran (spec §10.4, §10.5), chosen by the abort file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecoveryPath {
    /// `recoverNormally`: the previous run closed cleanly; the last three segments are validated.
    #[default]
    Normal,
    /// `recoverAbnormally`: the previous run did not close (abort file); everything from the segment holding
    /// the checkpoint's durable point (minus RocketMQ's 3 s margin) is validated and dispatched again.
    Abnormal,
}

impl RecoveryPath {
    /// `"normal"` or `"abnormal"`.
    pub fn name(self) -> &'static str {
        match self {
            RecoveryPath::Normal => "normal",
            RecoveryPath::Abnormal => "abnormal",
        }
    }
}

/// Damaged bytes that opening cut (truncate) or skipped (salvage).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    pub path: PathBuf,
    /// Global offset of the first damaged byte.
    pub offset: u64,
    /// How many bytes were cut or skipped.
    pub bytes: u64,
    pub reason: String,
    /// Valid records that were in the cut bytes (truncate), 0 for a skip.
    pub dropped_records: u64,
}

/// What opening found at the end of the log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// Global offset where appends continue.
    pub end_offset: u64,
    /// Offset from which records were validated (the start of the segment recovery started from).
    pub validated_from: u64,
    /// Which of RocketMQ's two recoveries ran: `Normal` after a clean close, `Abnormal` after a crash.
    pub path: RecoveryPath,
    /// Commitlog bytes walked and validated (records, with their CRCs when `check_crc_on_recover`, and the
    /// end-of-segment blanks): from `validated_from` to the end found, plus what a salvage skipped.
    pub validated_bytes: u64,
    /// How long the walk took.
    pub validate_time: std::time::Duration,
    /// Non-zero bytes after the end that were zeroed (a torn write, or what truncate cut in the last segment).
    pub discarded_bytes: u64,
    /// Bytes of an unfinished (unacknowledged) append that were discarded.
    pub torn_bytes: u64,
    /// Segments after the one holding the end that were deleted (a pre-allocated next file surviving a crash,
    /// the rest of a torn append, or what truncate cut).
    pub removed_files: u64,
    /// Why validation stopped before the end of the last segment, when it did not stop on zeros.
    pub stop_reason: Option<String>,
    /// Damage cut or skipped (only with `Truncate` or `Salvage`).
    pub damage: Vec<Damage>,
    /// The mode opening ran with.
    pub mode: RecoveryMode,
    /// The store time of the last record the walk kept (`None` when it kept none: see
    /// [`CommitLog::newest_store_timestamp`](super::CommitLog::newest_store_timestamp)).
    pub last_store_timestamp: Option<i64>,
    /// After a cut, the segments before the walk's start that the next open validates were walked too, and the
    /// log was cut again there: the records offered to `visit` are gone.
    pub rewalked_cut: bool,
}

/// What lies from the first invalid position on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tail {
    /// Only zeros: the end of the data.
    Clean,
    /// The remains of an unfinished append (a kill) or of pages a power loss reverted.
    Torn,
    /// Bytes neither leaves; `following`: the valid records after them (offset, size).
    Damaged { following: Vec<(u64, u64)> },
}

/// Where the first invalid position `p` lies: the end of its segment, and the segment after it (start, end).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TailPlace {
    pub p: u64,
    pub file_end: u64,
    pub next: Option<(u64, u64)>,
}

/// What [`classify_tail`] asks about the bytes from the first invalid position `p` on, each only when the rule
/// needs it. Opening answers from the mapped segments; the commitlog planner (`columnar::split`), which reads a
/// store a broker may be writing, with positioned reads. One rule, so that an export and an open never disagree
/// on what a store holds.
pub(crate) trait TailFacts {
    /// Every position after `p` (to the end of the last segment) holding a record that validates completely and
    /// names its own offset, in order, with its header.
    fn following(&mut self) -> Result<Vec<(u64, RecordHeader)>>;
    /// Whether the bytes at `p` are what a power loss leaves ([`lost_page_in`]).
    fn lost_page(&mut self) -> Result<bool>;
    /// One past the last non-zero byte of `p`'s segment from `p`, relative to `p` (0: all zero).
    fn here_extent(&mut self) -> Result<u64>;
    /// Whether a segment starting after the one after `p`'s holds a non-zero byte.
    fn beyond_next(&mut self) -> Result<bool>;
    /// [`RecoverOptions::dispatched_end`].
    fn dispatched_end(&mut self) -> Result<u64>;
}

/// Classifies the bytes from `place.p` (the first position that is neither a record nor a blank) to the end of
/// the last segment, given whether any of them is non-zero (module docs: clean, torn or damaged). `unclean` and
/// `durable_timestamp` as in [`RecoverOptions`].
pub(crate) fn classify_tail(
    place: TailPlace,
    nonzero_after: bool,
    unclean: bool,
    durable_timestamp: i64,
    facts: &mut dyn TailFacts,
) -> Result<Tail> {
    if !nonzero_after {
        return Ok(Tail::Clean);
    }
    let p = place.p;
    let following = facts.following()?;
    let damaged = |following: Vec<(u64, RecordHeader)>| Tail::Damaged {
        following: following.into_iter().map(|(o, h)| (o, h.total_size as u64)).collect(),
    };
    // A power loss: pages written after the last sync reached the disk in any subset, so the first lost page
    // may be followed by any later pages (and by consume-queue pages pointing at lost records). What is
    // left at `p` shows it: zeros running to a page end inside the record. Records stored before the
    // checkpoint's durable time were flushed and cannot be lost this way.
    if unclean && facts.lost_page()? && !following.iter().any(|(_, h)| h.store_timestamp < durable_timestamp) {
        return Ok(Tail::Torn);
    }
    if !unclean || facts.dispatched_end()? > p {
        return Ok(damaged(following));
    }
    // Where an unfinished append may lie: in `p`'s segment from `p`, or (after a roll) at the start of the
    // next segment, with at most the torn blank left in `p`'s segment.
    let in_next = |o: u64| place.next.is_some_and(|(start, end)| o >= start && o < end);
    let in_file = |o: u64| o > p && o < place.file_end;
    let mut here_extent = None;
    let mut ok = !facts.beyond_next()?;
    let mut prev: Option<(u64, &RecordHeader)> = None;
    for (o, h) in &following {
        if !in_file(*o) {
            let extent = match here_extent {
                Some(e) => e,
                None => *here_extent.insert(facts.here_extent()?),
            };
            ok &= in_next(*o) && extent <= 8;
        }
        if let Some((po, ph)) = prev {
            // Records of one append, in order and not overlapping. Their other fields cannot be compared: a
            // torn record validates when its body and lengths are whole, whatever its queue offset, store time
            // or properties hold (the body CRC covers none of them).
            ok &= *o >= po + ph.total_size as u64;
        }
        prev = Some((*o, h));
    }
    Ok(if ok { Tail::Torn } else { damaged(following) })
}

impl CommitLog {
    /// Walks the log from the recovery start and settles its end (module docs). `visit` is offered each record
    /// the log keeps, in order, while its bytes are at hand.
    pub(super) fn recover(&self, opts: &RecoverOptions, visit: &mut dyn FnMut(&Record)) -> Result<OpenReport> {
        let files = self.queue.files();
        let path = if opts.unclean { RecoveryPath::Abnormal } else { RecoveryPath::Normal };
        let mut report = OpenReport { mode: opts.mode, path, ..OpenReport::default() };
        let Some(last) = files.last() else { return Ok(report) };
        let began = std::time::Instant::now();
        let from = self.recovery_start(&files, opts);
        let mut start = files.get(from).map_or(0, |f| f.start());
        report.validated_from = start;
        // Where the non-zero bytes end, from `start` on: what `classify` needs at the position the walk stops.
        // The scan reads the zeros after the data (a pre-allocated segment's rest, as large as a good part of the
        // walk), so on disk it runs beside the walk: the store's lock keeps writers out, and nothing changes the
        // files before the walk stops. (In an overlay a live writer may append meanwhile: scanned when needed.)
        let mut tail = TailScan::start(&self.queue, start, opts.storage == crate::mmap::Storage::Disk);
        let mut end = self.walk(start, last.end(), opts, &mut report, &mut tail, visit)?;
        // A cut moves the end back, and with it the segments the next open (after this one's clean close)
        // validates: three back from the new end. Those before this walk's start are walked too (records not
        // offered to `visit`), so that the cut store opens without meeting damage this walk never read, where
        // RocketMQ's next recovery would cut again. Until the start stops moving.
        while !report.damage.is_empty() {
            let files = self.queue.files();
            let next = RecoverOptions { unclean: false, ..*opts };
            let earlier = files.get(self.recovery_start(&files, &next)).map_or(0, |f| f.start());
            if earlier >= start {
                break;
            }
            let newest = report.last_store_timestamp;
            let mut tail = TailScan::start(&self.queue, earlier, false);
            let stopped = self.walk(earlier, start, opts, &mut report, &mut tail, &mut |_| {})?;
            if stopped < start {
                // Cut again, before everything the first walk kept.
                report.rewalked_cut = true;
                end = stopped;
            } else {
                report.last_store_timestamp = newest;
            }
            start = earlier;
            report.validated_from = start;
        }
        report.end_offset = end;
        report.validated_bytes = end.saturating_sub(start) + report.damage.iter().map(|d| d.bytes).sum::<u64>();
        report.validate_time = began.elapsed();
        if report.damage.is_empty() && report.torn_bytes == 0 {
            // A clean end: segments after it hold nothing (RocketMQ pre-allocates the next one, and its
            // recovery destroys every file starting after the end; so does rmq).
            report.removed_files += self.queue.remove_after(end) as u64;
        }
        Ok(report)
    }

    /// Walks the log from `start` (a segment start) to `limit`, validating every record (module docs), and
    /// returns where the data ends: `limit` or the end of the last segment when nothing stopped the walk, else
    /// the first position that is neither a record nor a blank, classified and handled by `opts.mode` (cut, or
    /// with salvage skipped and walked on). `visit` is offered each record kept.
    fn walk(
        &self,
        start: u64,
        limit: u64,
        opts: &RecoverOptions,
        report: &mut OpenReport,
        tail: &mut TailScan,
        visit: &mut dyn FnMut(&Record),
    ) -> Result<u64> {
        let last_end = self.queue.last().map_or(0, |f| f.end());
        let mut cursor = Cursor::new(&self.queue, start, limit.min(last_end), self.check_options());
        let mut reread = None;
        // The end-of-file blank just passed, while nothing has followed it.
        let mut blank = None;
        let end = loop {
            let (p, file, reason) = match cursor.next() {
                // RocketMQ's recovery stops at a blank with no segment after it, its end at the blank's start
                // (spec §10.4: a writer killed after the blank, before the next segment existed): so does rmq,
                // and the next append writes there (the blank again and a roll, or a record that fits).
                None => match (cursor.offset().min(last_end), blank) {
                    (at, Some(b)) if at == last_end => break b,
                    (at, _) => break at,
                },
                // The body CRC does not cover the topic and properties: a record whose later page a power loss
                // reverted to zeros still validates. Such a record is the first lost position.
                Some(Step::Record(r))
                    if opts.unclean && tail_zeroed(&r.header, r.bytes()) && lost_page_at(&r.file, r.offset()) =>
                {
                    let reason = LOST_PAGE.to_owned();
                    (r.offset(), r.file.clone(), reason)
                }
                Some(Step::Record(r)) => {
                    report.last_store_timestamp = Some(r.header.store_timestamp);
                    blank = None;
                    visit(&r);
                    continue;
                }
                Some(Step::Blank { offset }) => {
                    blank = Some(offset);
                    continue;
                }
                Some(Step::Missing { offset }) => break offset,
                Some(Step::Zero { offset, file }) => (offset, file, "nothing was written here".to_owned()),
                Some(Step::Partial { offset, file }) => (offset, file, "record is truncated".to_owned()),
                Some(Step::Invalid { offset, file, reason, .. }) => (offset, file, reason),
            };
            #[cfg(test)]
            tests::BEFORE_CLASSIFY.with(|hook| hook.borrow_mut().as_mut().map(|f| f()));
            let tail = self.classify(p, &file, opts, tail.nonzero_end(self, start).max(p))?;
            // In an overlay another process may be appending: the records and consume-queue entries just read
            // after `p` may be newer than the zeros read at `p`. The writer commits in order, so when `p` now
            // holds a record (or the end-of-file blank of a roll), the writer only moved the end on. Once per
            // position: a record that validates but ends in a lost page (above) is read as one again.
            if tail != Tail::Clean && opts.storage == crate::mmap::Storage::Overlay && reread != Some(p) {
                std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
                let now = super::cursor::at(&file, p, file.end(), self.check_options());
                if matches!(now, Step::Record(_) | Step::Blank { .. }) {
                    reread = Some(p);
                    cursor.seek(p);
                    continue;
                }
            }
            match tail {
                Tail::Clean => break p,
                Tail::Torn => {
                    report.stop_reason = Some(reason);
                    report.torn_bytes = self.cut(p, &file, report)?;
                    break p;
                }
                Tail::Damaged { following } => match opts.mode {
                    RecoveryMode::Strict => {
                        return Err(Error::Corruption {
                            path: file.path().to_owned(),
                            offset: p as i64,
                            reason: strict_message(&reason, &following),
                        })
                    }
                    // Salvage goes on at the next valid record; with none after the damage it cuts, as truncate.
                    RecoveryMode::Salvage if !following.is_empty() => {
                        let q = following.first().map_or(p, |&(q, _)| q);
                        let path = file.path().to_owned();
                        report.damage.push(Damage { path, offset: p, bytes: q - p, reason, dropped_records: 0 });
                        self.add_skip(p, q);
                        cursor.seek(q);
                    }
                    RecoveryMode::Truncate | RecoveryMode::Salvage => {
                        report.stop_reason = Some(reason.clone());
                        let bytes = self.cut(p, &file, report)?;
                        let dropped_records = following.len() as u64;
                        let path = file.path().to_owned();
                        report.damage.push(Damage { path, offset: p, bytes, reason, dropped_records });
                        break p;
                    }
                },
            }
        };
        Ok(end)
    }

    /// The index of the segment recovery validates from (spec §10.3, with rmq's stricter rules).
    ///
    /// - **Normal** (clean close): RocketMQ's `recoverNormally` starts three segments from the end, at a segment
    ///   that `isMappedFileMatchedRecover` accepts: its first record validates, has a store time, names an
    ///   offset at or before `dispatchFromPhyOffset` (what the consume queues and index hold), and with
    ///   `messageIndexSafe` was stored at or before `indexMsgTimestamp`. None accepted: the first segment.
    ///   Nothing before it is read: after a clean close every byte was flushed, so a bit flipped there is not
    ///   looked for (as in RocketMQ; `rmq check` reads everything).
    /// - **Abnormal** (crash): the newest segment whose first record validates and was stored at or before
    ///   `start_timestamp` (the checkpoint's min timestamp less 3 s); none: the first segment. Every record
    ///   stored after the checkpoint's durable point lies at or after it. rmq also starts no later than the
    ///   segment before the newest one that starts with a record, so that the end of that segment, where a
    ///   roll writes its end-of-file blank, is validated too (RocketMQ starts at the newest segment when the
    ///   checkpoint is recent).
    fn recovery_start(&self, files: &[Arc<MappedFile>], opts: &RecoverOptions) -> usize {
        let first = |f: &Arc<MappedFile>| match super::cursor::at(f, f.start(), f.end(), self.check_options()) {
            Step::Record(r) if r.header.store_timestamp != 0 => Some(r.header),
            _ => None,
        };
        let index_safe = |h: &RecordHeader| h.store_timestamp <= opts.index_safe_timestamp;
        if opts.unclean {
            let newest = files.iter().rposition(|f| self.starts_with_record(f)).unwrap_or(0);
            let matched = files
                .iter()
                .rposition(|f| first(f).is_some_and(|h| h.store_timestamp <= opts.start_timestamp && index_safe(&h)))
                .unwrap_or(0);
            matched.min(newest.saturating_sub(1))
        } else {
            let top = files.len().saturating_sub(3);
            files
                .get(..=top)
                .unwrap_or_default()
                .iter()
                .rposition(|f| {
                    first(f).is_some_and(|h| {
                        u64::try_from(h.physical_offset).is_ok_and(|o| o <= opts.dispatched_end) && index_safe(&h)
                    })
                })
                .unwrap_or(0)
        }
    }

    fn starts_with_record(&self, f: &Arc<MappedFile>) -> bool {
        matches!(super::cursor::at(f, f.start(), f.end(), CheckOptions::default()), Step::Record(_))
    }

    /// Classifies the bytes from `p` (the first position that is neither a record nor a blank) to the end of
    /// the last segment ([`classify_tail`]). `nonzero_end`: [`CommitLog::last_nonzero_end`] at `p`.
    fn classify(&self, p: u64, file: &Arc<MappedFile>, opts: &RecoverOptions, nonzero_end: u64) -> Result<Tail> {
        let next = self.queue.files().iter().find(|f| f.start() == file.end()).map(|n| (n.start(), n.end()));
        let place = TailPlace { p, file_end: file.end(), next };
        let mut facts = MappedTail { log: self, file, p, opts, nonzero_end };
        classify_tail(place, nonzero_end > p, opts.unclean, opts.durable_timestamp, &mut facts)
    }

    /// Every position after `p` and before `nonzero_end` (one past the log's last non-zero byte: no record
    /// starts after it) holding a record that validates completely and names its own offset, in order, with
    /// its header.
    fn valid_records_after(&self, p: u64, nonzero_end: u64) -> Vec<(u64, RecordHeader)> {
        let Some(last) = self.queue.last() else { return Vec::new() };
        let opts = CheckOptions { check_crc: true, force_prop_crc: false };
        let limit = nonzero_end.min(last.end());
        let prop_crc = self.cfg.enabled_append_prop_crc;
        let mut out = Vec::new();
        let mut from = p + 1;
        while let Some(q) = find_valid_record_starting_before(&self.queue, from, limit, prop_crc) {
            let Some(file) = self.queue.find(q) else { break };
            let Step::Record(r) = super::cursor::at(&file, q, file.end(), opts) else { break };
            from = q + r.header.total_size as u64;
            out.push((q, r.header));
        }
        out
    }

    /// One past the last non-zero byte at or after `p`, over every segment (`p` when all are zero).
    /// Only the data extents the filesystem reports are read ([`MappedFile::data_ranges`]): a segment's tail that
    /// was claimed and never written costs nothing.
    pub(crate) fn last_nonzero_end(&self, p: u64) -> u64 {
        last_nonzero_end_in(&self.queue, p)
    }

    /// Zeroes everything from `p` to the end of its segment and removes every later segment. Returns the
    /// non-zero bytes discarded.
    fn cut(&self, p: u64, file: &Arc<MappedFile>, report: &mut OpenReport) -> Result<u64> {
        let discarded = self.last_nonzero_end(p).saturating_sub(p);
        let pos = (p - file.start()) as usize;
        let dirty = file.nonzero_end(pos) - pos;
        // In an overlay the bytes stay (nothing past the end is read; a live writer may still complete them).
        if dirty > 0 && file.storage() == crate::mmap::Storage::Disk {
            let zeros = vec![0u8; 1 << 16];
            let mut at = 0;
            while at < dirty {
                let n = (dirty - at).min(zeros.len());
                // A failed write (a full disk, an I/O error) fails the open: the log must not be taken as
                // cut while the bytes after its end are still there.
                file.write_at(pos + at, zeros.get(..n).unwrap_or_default())?;
                at += n;
            }
            file.flush_range(pos, dirty)?;
        }
        report.discarded_bytes += dirty as u64;
        report.removed_files += self.queue.remove_after(p) as u64;
        Ok(discarded)
    }
}

/// [`CommitLog::last_nonzero_end`] over `queue`'s segments.
fn last_nonzero_end_in(queue: &FileQueue, p: u64) -> u64 {
    let mut end = p;
    for f in queue.files().iter().filter(|f| f.end() > p) {
        let from = (p.max(f.start()) - f.start()) as usize;
        let n = f.nonzero_end(from);
        if n > from {
            end = f.start() + n as u64;
        }
    }
    end
}

/// [`CommitLog::last_nonzero_end`] from a position, worked out on a thread of its own while the walk runs.
struct TailScan(Option<std::thread::JoinHandle<u64>>, Option<u64>);

impl TailScan {
    /// Starts the scan from `from` on a thread if `beside`; otherwise it runs when asked.
    fn start(queue: &Arc<FileQueue>, from: u64, beside: bool) -> Self {
        if !beside {
            return TailScan(None, None);
        }
        let queue = Arc::clone(queue);
        let handle =
            std::thread::Builder::new().name("rmq-tail-scan".into()).spawn(move || last_nonzero_end_in(&queue, from));
        TailScan(handle.ok(), None)
    }

    /// `log.last_nonzero_end(from)`: the scan's result, or worked out here if the thread could not run.
    fn nonzero_end(&mut self, log: &CommitLog, from: u64) -> u64 {
        if let Some(end) = self.1 {
            return end;
        }
        let end = self.0.take().and_then(|h| h.join().ok()).unwrap_or_else(|| log.last_nonzero_end(from));
        self.1 = Some(end);
        end
    }
}

impl Drop for TailScan {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            let _ = h.join();
        }
    }
}

/// [`TailFacts`] from the mapped segments, for opening.
struct MappedTail<'a> {
    log: &'a CommitLog,
    file: &'a Arc<MappedFile>,
    p: u64,
    opts: &'a RecoverOptions,
    /// [`CommitLog::last_nonzero_end`] at `p`.
    nonzero_end: u64,
}

impl TailFacts for MappedTail<'_> {
    fn following(&mut self) -> Result<Vec<(u64, RecordHeader)>> {
        Ok(self.log.valid_records_after(self.p, self.nonzero_end))
    }

    fn lost_page(&mut self) -> Result<bool> {
        Ok(lost_page_at(self.file, self.p))
    }

    fn here_extent(&mut self) -> Result<u64> {
        let (f, p) = (self.file, self.p);
        let pos = (p - f.start()) as usize;
        Ok((f.nonzero_end(pos) - pos) as u64)
    }

    fn beyond_next(&mut self) -> Result<bool> {
        let files = self.log.queue.files();
        let end = self.file.end();
        Ok(files.iter().filter(|f| f.start() > end).any(|f| f.nonzero_end(0) > 0))
    }

    fn dispatched_end(&mut self) -> Result<u64> {
        Ok(self.opts.dispatched_end)
    }
}

/// Whether a valid record's topic holds a zero byte, or its properties end in one (RocketMQ's properties end
/// with the 0x02 separator): bytes a lost page leaves, which the body CRC does not see.
pub(crate) fn tail_zeroed(header: &RecordHeader, bytes: &[u8]) -> bool {
    header.topic(bytes).contains(&0) || header.properties(bytes).last() == Some(&0)
}

/// Why a valid record for which [`tail_zeroed`] and [`lost_page_at`] hold after a crash ends the data.
pub(crate) const LOST_PAGE: &str = "the record's topic or properties are zeros (a page lost in a power loss)";

/// Whether the bytes at `p` (the first position of `file` that is neither a record nor a blank) are what a
/// power loss leaves. A page that reverted to its older version holds, in an append-only file, the bytes synced
/// before and then zeros to its end. An append writes its commit word (the first 8 bytes) last, so a version of
/// the first record page that holds the commit word holds the rest of the record's bytes in that page too:
/// - a header that gives a size (the commit word is there): a later page of the record ends in zeros that
///   start inside the record;
/// - a header that does not: the page (or pages) holding the first 8 bytes is zero from there to its end. (A
///   kill leaves the first 8 bytes zero and the rest of the record written, which is not this shape.)
fn lost_page_at(file: &MappedFile, p: u64) -> bool {
    let Some(pos) = p.checked_sub(file.start()).and_then(|x| usize::try_from(x).ok()) else { return false };
    let Some(bytes) = file.slice(pos, (file.size() as usize).saturating_sub(pos)) else { return false };
    lost_page_in(bytes, pos)
}

/// [`lost_page_at`] on `bytes`, the segment's bytes from position `pos` of its file on: to its end, or at least
/// to the end of the page after the one holding the end of the record that the first four bytes claim.
pub(crate) fn lost_page_in(bytes: &[u8], pos: usize) -> bool {
    const PAGE: usize = 4096;
    let total = bytes.get(..4).map_or(0, |b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let first_boundary = PAGE - pos % PAGE;
    // Relative to `p`: where the pages to look at start, and how far into the record the zeros must begin.
    let (mut lo, until) = match usize::try_from(total) {
        Ok(t) if t > 8 && t <= bytes.len() => (first_boundary, t),
        _ => (0, 8.min(bytes.len())),
    };
    while lo < until {
        let hi = (lo + PAGE - (pos + lo) % PAGE).min(bytes.len());
        let page = bytes.get(lo..hi).unwrap_or_default();
        let zeros_from = lo + page.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        if zeros_from < hi && zeros_from < until {
            return true;
        }
        lo = hi;
    }
    false
}

fn strict_message(reason: &str, following: &[(u64, u64)]) -> String {
    let what = match (following.first(), following.last()) {
        (Some(&(first, _)), Some(&(last, size))) => {
            format!("; {} valid record(s) follow, from offset {first} to {}", following.len(), last + size)
        }
        _ => String::new(),
    };
    format!(
        "{reason}{what}. These bytes cannot be left by a killed process, so the store was not opened and nothing \
         was changed. Open with recovery=\"truncate\" to cut the log here as RocketMQ does (dropping what \
         follows), or recovery=\"salvage\" to skip only the damaged bytes and keep every valid record after them"
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::cell::RefCell;
    use std::os::unix::fs::FileExt;
    use std::path::Path;

    use super::*;
    use crate::commitlog::CommitLogConfig;
    use crate::file_queue::file_name;
    use crate::mmap::Storage;
    use crate::store::{MessageStore, PutMessage};

    thread_local! {
        /// Runs when the walk has met the first position that is neither a record nor a blank, before it looks
        /// at what follows: a test stands in for a writer appending at that instant.
        pub(super) static BEFORE_CLASSIFY: crate::race::Hook<dyn FnMut()> = const { RefCell::new(None) };
    }

    const SEG: u64 = 4096;

    /// A closed store whose log spans four segments of `seg` bytes; every record's (offset, size).
    fn written(root: &Path, seg: u64) -> Vec<(u64, u64)> {
        let mut cfg = crate::config::StoreConfig::default();
        cfg.commit_log.mapped_file_size_commit_log = seg;
        let store = MessageStore::open(root, cfg).unwrap();
        let mut i = 0;
        while store.commitlog().max_offset() < 3 * seg + seg / 2 {
            let body = vec![b'a' + (i % 26) as u8; 60 + i % 90];
            store.put(&PutMessage { keys: Some("k"), ..PutMessage::new("T", (i % 2) as i32, &body) }).unwrap();
            i += 1;
        }
        let (mut out, mut at) = (Vec::new(), 0);
        while let Some((r, next)) = store.commitlog().next_record(at).unwrap() {
            out.push((r.offset(), r.header.total_size as u64));
            at = next;
        }
        store.close().unwrap();
        out
    }

    /// Opens the log in `dir` read-only, as a view beside a live writer does (a crash is possible: the
    /// writer's abort file is there), with the consume queues pointing up to `dispatched_end`.
    fn open_overlay(dir: &Path, seg: u64, dispatched_end: u64) -> Result<OpenReport> {
        let cfg = CommitLogConfig { mapped_file_size_commit_log: seg, ..CommitLogConfig::default() };
        let opts = RecoverOptions { storage: Storage::Overlay, dispatched_end, ..RecoverOptions::default() };
        CommitLog::open_with(dir, cfg, &opts).map(|(_, report)| report)
    }

    /// Stores `[from, to)` (global offsets) of `image`, each segment's bytes by start, into the segment files.
    fn store(dir: &Path, image: &[(u64, Vec<u8>)], from: u64, to: u64) {
        for (start, bytes) in image {
            let (a, b) = (from.max(*start), to.min(start + SEG));
            if a < b {
                let file = std::fs::OpenOptions::new().write(true).open(dir.join(file_name(*start))).unwrap();
                file.write_all_at(&bytes[(a - start) as usize..(b - start) as usize], a - start).unwrap();
            }
        }
    }

    #[test]
    fn a_view_of_a_record_whose_last_page_a_power_loss_reverted_ends_the_data_there() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("s");
        let seg = 16 * 1024;
        let records = written(&root, seg);
        let dir = root.join("commitlog");
        // A record whose properties (after the body the CRC covers) cross a page boundary: a power loss that
        // reverted the later page leaves a record that validates, with zeros at the end of its properties.
        let cfg = CommitLogConfig { mapped_file_size_commit_log: seg, ..CommitLogConfig::default() };
        let (log, _) = CommitLog::open_with(&dir, cfg, &RecoverOptions::default()).unwrap();
        let (p, page) = records
            .iter()
            .rev()
            .find_map(|&(o, _)| {
                let r = log.read(o).unwrap().unwrap();
                let props = r.header.properties(r.bytes());
                let start = o + (props.as_ptr() as usize - r.bytes().as_ptr() as usize) as u64;
                let page = (start / 4096 + 1) * 4096;
                (start + 1 < page && page < start + props.len() as u64 && !page.is_multiple_of(seg))
                    .then_some((o, page))
            })
            .unwrap();
        drop(log);
        let end = records.last().map(|(o, s)| o + s).unwrap();
        for k in 0..end.div_ceil(seg) {
            let file = std::fs::OpenOptions::new().write(true).open(dir.join(file_name(k * seg))).unwrap();
            let (a, b) = (page.max(k * seg), end.min((k + 1) * seg));
            if a < b {
                file.write_all_at(&vec![0u8; (b - a) as usize], a - k * seg).unwrap();
            }
        }
        let report = open_overlay(&dir, seg, 0).unwrap();
        assert_eq!((report.end_offset, report.stop_reason.as_deref()), (p, Some(LOST_PAGE)));
    }

    #[test]
    fn a_view_takes_an_end_the_writer_moved_on_meanwhile_for_the_end_and_still_sees_damage() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("s");
        let records = written(&root, SEG);
        let dir = root.join("commitlog");
        let end = records.last().map(|(o, s)| o + s).unwrap();
        let image: Vec<(u64, Vec<u8>)> =
            (0..end.div_ceil(SEG)).map(|k| (k * SEG, std::fs::read(dir.join(file_name(k * SEG))).unwrap())).collect();
        let zeros: Vec<(u64, Vec<u8>)> = image.iter().map(|(s, _)| (*s, vec![0u8; SEG as usize])).collect();
        // Where the writer was when the view read the log: at the end-of-file blank of a roll (the last record
        // of segment 2 ends there), and at a record in the middle of segment 3.
        let roll = records.iter().filter(|(o, s)| o + s <= 3 * SEG).map(|(o, s)| o + s).max().unwrap();
        let middle = records.iter().map(|(o, _)| *o).find(|o| *o > 3 * SEG + 1000).unwrap();
        assert!(roll < 3 * SEG && records.iter().any(|(o, _)| *o == 3 * SEG));
        for p in [roll, middle] {
            // The view reads nothing from `p` on (the writer's bytes are not there yet); the writer stores them
            // all while the view walks: the view's end moves on to the writer's.
            store(&dir, &zeros, p, end);
            let (d, img) = (dir.clone(), image.clone());
            BEFORE_CLASSIFY.with(|h| *h.borrow_mut() = Some(Box::new(move || store(&d, &img, p, end))));
            let report = open_overlay(&dir, SEG, end);
            BEFORE_CLASSIFY.with(|h| *h.borrow_mut() = None);
            let report = report.unwrap_or_else(|e| panic!("at {p}: {e}"));
            assert_eq!((report.end_offset, report.damage.len(), report.torn_bytes), (end, 0, 0), "at {p}");
            // Damage stays damage: the commit word at `p` never comes, the records after it are there.
            store(&dir, &zeros, p, p + 8);
            match open_overlay(&dir, SEG, end) {
                Err(Error::Corruption { offset, .. }) => assert_eq!(offset as u64, p, "at {p}"),
                other => panic!("at {p}: expected damage, got {other:?}"),
            }
            store(&dir, &image, 0, end);
        }
    }
}
