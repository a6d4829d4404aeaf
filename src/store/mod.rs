//! `MessageStore`: the write path (checks, properties as a broker builds them, queue offsets, append, flush)
//! and the read path by physical offset, over one store directory.

pub mod clean;
pub mod dispatch;
pub mod get;
mod index_check;
mod matching;
pub mod open;
pub mod put;
mod query;
pub mod send_back;
pub mod services;
pub mod transaction;
pub mod validate;
pub mod verify;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use crate::checkpoint::{AbortFile, CheckpointValues, LockFile, StoreCheckpoint};
use crate::commitlog::{CommitLog, OpenReport, Record, RecoveryMode};
use crate::config::{FlushDiskType, StoreConfig};
use crate::consume_queue::store::ConsumeQueueStore;
use crate::consume_queue::{ConsumeQueue, CqEntry};
use crate::error::{Error, Result};
use crate::index::IndexService;
use crate::message::ids::UniqIdGenerator;
use dispatch::{DispatchIssue, DispatchRound, Dispatcher};
pub use put::{BatchItem, PutMessage, PutResult};
pub use query::QueryResult;

pub(crate) type QueueTable = FxHashMap<String, FxHashMap<i32, i64>>;

/// An open store directory.
#[derive(Debug)]
pub struct MessageStore {
    root: PathBuf,
    /// Which directory `<root>/commitlog` was at the open (device, inode): a read-only view's `refresh` refuses
    /// to go on when the path names another (the store was replaced under it).
    log_dir: Option<(u64, u64)>,
    /// Fixed at open, except `maxMessageSize`, which lives in `max_message_size`.
    config: StoreConfig,
    /// `maxMessageSize`, re-read on every put as RocketMQ does.
    max_message_size: AtomicI32,
    commitlog: CommitLog,
    /// Next queue offset per (topic, queue id): `topicQueueTable`. Taken before the put lock.
    queue_table: Mutex<QueueTable>,
    uniq: UniqIdGenerator,
    open_report: OpenReport,
    unclean_shutdown: bool,
    /// The fork generation and process that opened the store ([`crate::fork`]): a forked child refuses it.
    generation: u64,
    opened_by: u32,
    state: Mutex<State>,
    /// Why the last `close` failed, for the next call (which has nothing left to retry).
    close_failure: Mutex<Option<String>>,
    /// `state` is `Open` (set with it, cleared before it leaves `Open`): every put checks it.
    writable: AtomicBool,
    queues: ConsumeQueueStore,
    index: Option<IndexService>,
    delay_levels: Vec<i64>,
    /// The dispatch position (`reputFromOffset`); the mutex serialises dispatch rounds.
    reput: Mutex<u64>,
    /// Published copy of the dispatch position, with `dispatched` signalled on every advance.
    reput_offset: AtomicU64,
    dispatched: Condvar,
    /// Guards `dispatched`; holds how many threads wait on it, so a dispatch round with no one waiting
    /// (the usual case under a stream of puts) skips the condvar's syscall.
    dispatched_lock: Mutex<usize>,
    /// Advances on every dispatch round that adds consume-queue entries and on every
    /// [`wake_arrival_waiters`](Self::wake_arrival_waiters); `dispatched` is signalled with it (long polling).
    arrival_seq: AtomicU64,
    /// The end of the data known flushed (dispatch never passes it under SYNC_FLUSH); advanced only by flushes.
    flushed_offset: AtomicU64,
    /// `<root>/checkpoint`, written on flush and close for RocketMQ's recovery.
    checkpoint: StoreCheckpoint,
    /// Store time of the last message dispatched (0: none since open).
    dispatched_timestamp: AtomicI64,
    /// Store time of the last append (0: none since open); set after the append is published.
    appended_timestamp: AtomicI64,
    /// Store time of the last message known flushed (the checkpoint's physicMsgTimestamp; 0: none).
    flushed_timestamp: AtomicI64,
    recovery: RecoveryReport,
    issues: Mutex<IssueLog>,
    /// The background services (`services/`), started by `start_services`, stopped first by `close`.
    services: services::Services,
    /// SYNC_FLUSH: what puts and the group commit service share (`services/group_commit.rs`).
    group_commit: services::group_commit::GroupCommit,
    /// The transient store pool's commit service (`services/commit.rs`).
    commit_state: services::commit::CommitState,
    /// Expired-file cleanup state (`clean.rs`).
    clean: clean::CleanState,
    /// The schedule service's delay offsets (`services/schedule.rs`).
    schedule: services::schedule::ScheduleState,
    /// Ends of transactions (`transaction.rs`).
    transactions: transaction::TransactionState,
}

/// What opening did to the derived files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Where dispatch restarted (commitlog offset). After a crash, the records from here on that the validating
    /// walk found in their consume queues and the index already are passed over, as dispatch would write nothing
    /// for them.
    pub dispatched_from: u64,
    /// Records dispatched while opening (already-present entries are skipped, so this may exceed what changed);
    /// records passed over after a crash (`dispatched_from`) are not counted.
    pub redispatched_records: u64,
    /// Consume-queue entries written while opening.
    pub rebuilt_cq_entries: u64,
    /// Index entries written while opening: keys of records the index did not hold (files lost or behind the
    /// log), not counting the index files rebuilt (`rebuilt_index_files`).
    pub reindexed_keys: u64,
    /// Directories under `consumequeue/` that are not a topic / queue id and were left alone.
    pub skipped_dirs: Vec<PathBuf>,
    /// Queues (`topic/queueId`) whose entries disagreed with the commitlog (a hole, or an entry that does not
    /// point at its record) and were cut and rebuilt from the commitlog.
    pub rebuilt_queues: Vec<String>,
    /// Why each rebuilt queue was rebuilt, in the order of `rebuilt_queues`.
    pub rebuilt_reasons: Vec<String>,
    /// Where dispatch restarted because the previous run did not close cleanly: the start of the newest
    /// segment stored at or before the checkpoint's min timestamp less 3 s (None after a clean close).
    pub checkpoint_restart: Option<u64>,
    /// Why dispatch could not catch up while opening (a full disk: a consume-queue or index file could not be
    /// created), if it could not. The store opened anyway: records from `dispatched_from` on are readable by
    /// offset and reach their queues once space is freed; their queue offsets are not handed out again.
    pub dispatch_blocked: Option<String>,
    /// Index files rebuilt from the commitlog while opening, one line each: the file, where and what was
    /// wrong (a file breaking its own rules, an entry not pointing at its message, a file lost), and the
    /// commitlog range rebuilt.
    pub rebuilt_index_files: Vec<String>,
    /// What became of `transient_store_pool_enable` (None: not enabled): "on: ..." (with whether the buffers
    /// are locked in memory) or "ignored: ..." (not ASYNC_FLUSH, or a SLAVE).
    pub transient_store_pool: Option<String>,
    /// Which of RocketMQ's recoveries ran (chosen by the abort file): `Normal` validated the last three
    /// segments, `Abnormal` everything from the segment holding the checkpoint's durable point.
    pub path: crate::commitlog::recover::RecoveryPath,
    /// The commitlog segment recovery started from (its start offset), and its file.
    pub start_offset: u64,
    pub start_segment: Option<PathBuf>,
    /// Commitlog bytes validated (records walked with their CRCs when `check_crc_on_recover`).
    pub validated_bytes: u64,
    /// Time spent validating the commitlog, and the whole open (validation, the derived files' checks,
    /// dispatch).
    pub validate_time: std::time::Duration,
    pub open_time: std::time::Duration,
    /// Index files kept after a crash without being read at open: rolled (full, flushed) files whose
    /// endTimestamp is at or before the checkpoint's indexMsgTimestamp (RocketMQ keeps them too, §7.5).
    pub index_files_trusted: u64,
}

impl RecoveryReport {
    /// Records that `cq` was cut and rebuilt from the commitlog, and why.
    pub(crate) fn rebuilt_queue(&mut self, cq: &ConsumeQueue, why: String) {
        self.rebuilt_queue_id(cq.topic(), cq.queue_id(), why);
    }

    /// As [`rebuilt_queue`](Self::rebuilt_queue); a queue found twice (two checks saw the same loss, as a newest
    /// file left empty after a clean close) is listed once, its reasons joined.
    pub(crate) fn rebuilt_queue_id(&mut self, topic: &str, queue_id: i32, why: String) {
        let name = format!("{topic}/{queue_id}");
        match self.rebuilt_queues.iter().position(|q| *q == name) {
            Some(i) => {
                let reason = &mut self.rebuilt_reasons[i];
                reason.push_str("; also: ");
                reason.push_str(&why);
            }
            None => {
                self.rebuilt_queues.push(name);
                self.rebuilt_reasons.push(why);
            }
        }
    }
}

#[derive(Debug, Default)]
struct IssueLog {
    total: u64,
    recent: Vec<DispatchIssue>,
}

/// Most recent dispatch issues kept for inspection.
const ISSUES_KEPT: usize = 100;

#[derive(Debug)]
enum State {
    Open {
        _lock: LockFile,
        abort: AbortFile,
    },
    /// Opened read-only: reads only, nothing held, nothing written (see [`open::OpenOptions::read_only`]).
    ReadOnly,
    Poisoned(String),
    Closed,
}

impl MessageStore {
    /// Opens (creating if needed) the store at `root` with strict recovery (see [`open::OpenOptions`]).
    pub fn open(root: &Path, config: StoreConfig) -> Result<Self> {
        Self::open_with(root, config, &open::OpenOptions::default())
    }

    /// Raises `table` to one past the queue offset of every record from the dispatch position to the end of the
    /// log (records that are in the commitlog but not yet in their consume queue). Stops at unreadable bytes.
    pub(crate) fn queue_offsets_after_reput(&self, table: &mut QueueTable) {
        let mut offset = self.reput_offset();
        while let Ok(Some((rec, next))) = self.commitlog.next_record(offset) {
            let h = &rec.header;
            if h.transaction_type().takes_queue_offset() {
                let topic = crate::java::decode_utf8_lossy(h.topic(rec.bytes())).into_owned();
                let slot = table.entry(topic).or_default().entry(h.queue_id).or_insert(0);
                *slot = (*slot).max(h.queue_offset.saturating_add(1));
            }
            offset = next;
        }
    }

    /// The store directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A copy of the configuration in force.
    pub fn config(&self) -> StoreConfig {
        let mut config = self.config.clone();
        config.commit_log.max_message_size = self.max_message_size.load(Ordering::Relaxed);
        config
    }

    /// Changes `maxMessageSize` for later puts (RocketMQ re-reads it on every put). Values below 10 are ignored,
    /// as RocketMQ's `updateMaxMessageSize` ignores them; the Python binding refuses them before they get here.
    pub fn set_max_message_size(&self, size: i32) {
        if size >= 10 {
            self.max_message_size.store(size, Ordering::Relaxed);
        }
    }

    /// What opening found at the end of the commitlog.
    pub fn open_report(&self) -> &OpenReport {
        &self.open_report
    }

    /// Whether the previous run left the abort file behind (it did not close cleanly).
    pub fn unclean_shutdown(&self) -> bool {
        self.unclean_shutdown
    }

    /// The commitlog.
    pub fn commitlog(&self) -> &CommitLog {
        &self.commitlog
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn check_writable(&self) -> Result<()> {
        if self.writable.load(Ordering::Acquire) && !crate::fork::forked_since(self.generation) {
            return Ok(());
        }
        self.check_not_forked()?;
        match &*self.state() {
            State::Open { .. } => Ok(()),
            State::ReadOnly => Err(Error::ReadOnly(self.root.clone())),
            State::Poisoned(why) => Err(Error::Poisoned(why.clone())),
            State::Closed => Err(Error::Closed),
        }
    }

    /// Whether the store was opened read-only.
    pub fn is_read_only(&self) -> bool {
        matches!(&*self.state(), State::ReadOnly)
    }

    /// A read-only store takes in what another process (a live broker) wrote since the open or the last
    /// refresh: new segments and every complete record after the end, dispatched into the store's in-memory
    /// view of the queues and index; segments deleted underneath (retention) are dropped, so their messages
    /// read as `MESSAGE_WAS_REMOVING`. Returns the new end of the log. On a writable store it changes nothing
    /// (the store sees its own writes) and returns the end.
    pub fn refresh(&self) -> Result<u64> {
        self.check_open()?;
        if !self.is_read_only() {
            return Ok(self.commitlog.max_offset());
        }
        if self.log_dir.is_some() && dir_identity(&self.root.join("commitlog")) != self.log_dir {
            return Err(Error::Replaced(self.root.clone()));
        }
        // Segments the writer's retention deleted meanwhile are still mapped: what they hold is dispatched
        // before they are dropped, so a view that was behind loses none of it. When every mapped segment was
        // deleted, the writer may also have made and deleted segments the view never saw: the log goes on at
        // the first segment still stored, mapped by a second pass once the gone ones are dropped.
        let mut end;
        loop {
            end = self.commitlog.refresh()?;
            self.flushed_offset.fetch_max(end, Ordering::AcqRel);
            loop {
                let round = self.dispatch(u64::MAX, false)?;
                if round.records == 0 || round.reput_offset >= end {
                    break;
                }
            }
            if self.commitlog.drop_gone() == 0 || self.commitlog.queue().last().is_some() {
                break;
            }
        }
        let min = self.commitlog.min_offset() as i64;
        for cq in self.queues.all() {
            cq.correct_min_offset(min);
        }
        Ok(end)
    }

    /// Errors in a process forked from the one that opened the store ([`crate::fork`]).
    fn check_not_forked(&self) -> Result<()> {
        match crate::fork::forked_since(self.generation) {
            true => Err(Error::Forked(self.opened_by)),
            false => Ok(()),
        }
    }

    /// Errors unless the store is open (reads work on a poisoned store).
    pub fn check_open(&self) -> Result<()> {
        self.check_not_forked()?;
        match &*self.state() {
            State::Closed => Err(Error::Closed),
            _ => Ok(()),
        }
    }

    /// Whether `close` has run.
    pub fn is_closed(&self) -> bool {
        matches!(&*self.state(), State::Closed)
    }

    /// The next queue offset to assign for (topic, queue): the number of messages the queue holds.
    pub fn next_queue_offset(&self, topic: &str, queue_id: i32) -> i64 {
        let table = self.queue_table.lock().unwrap_or_else(|p| p.into_inner());
        table.get(topic).and_then(|q| q.get(&queue_id)).copied().unwrap_or(0)
    }

    /// The record at commitlog `offset` (`None` past the end or on a blank).
    pub fn read(&self, offset: u64) -> Result<Option<Record>> {
        self.check_open()?;
        self.commitlog.read(offset)
    }

    /// The first record at or after `offset` in log order, and the offset after it.
    pub fn next_record(&self, offset: u64) -> Result<Option<(Record, u64)>> {
        self.check_open()?;
        self.commitlog.next_record(offset)
    }

    /// [`next_record`](Self::next_record) as a store opened with [`RecoveryMode::Salvage`] reads: damage the open
    /// did not meet (opening reads the newest segments only, so damage in an older one is met first here) is
    /// stepped over to the next record that validates completely and names its own offset, as the open's
    /// salvage steps over what it meets, and each range stepped over is added to `skipped`. In any other mode
    /// damage is [`Error::Corruption`], as from `next_record`.
    pub fn next_record_salvaging(
        &self,
        offset: u64,
        skipped: &mut Vec<crate::commitlog::Damage>,
    ) -> Result<Option<(Record, u64)>> {
        let mut at = offset;
        loop {
            match self.next_record(at) {
                Err(Error::Corruption { path, offset, reason }) if self.open_report.mode == RecoveryMode::Salvage => {
                    let from = offset.max(0) as u64;
                    let limit = self.commitlog.max_offset();
                    let next =
                        crate::commitlog::cursor::find_valid_record(self.commitlog.queue(), from + 1, limit, false);
                    let to = next.unwrap_or(limit).max(from);
                    skipped.push(crate::commitlog::Damage {
                        path,
                        offset: from,
                        bytes: to - from,
                        reason,
                        dropped_records: 0,
                    });
                    self.commitlog.add_skip(from, to);
                    match next {
                        Some(q) => at = q,
                        None => return Ok(None),
                    }
                }
                other => return other,
            }
        }
    }

    /// Flushes all written data to disk: the commitlog, then the consume queues and the index. A poisoned
    /// store refuses ([`Error::Poisoned`]): after a failed flush, a later one that succeeds does not prove the
    /// earlier data reached the disk, so nothing may be declared durable until the store is reopened.
    pub fn flush(&self) -> Result<()> {
        self.check_writable()?;
        let dispatched = self.dispatched_timestamp.load(Ordering::Acquire);
        self.commitlog.commit(0).inspect_err(|e| self.poison(e))?;
        self.flush_commitlog(0)?;
        self.services.wakeup(services::reput::NAME);
        // Puts may run meanwhile: claim no time past what the commitlog flush covered.
        self.flush_derived(dispatched.min(self.flushed_timestamp()))
    }

    /// Flushes the commitlog ([`CommitLog::flush_pages`] with `least_pages`; a failure poisons the store) and
    /// moves the flushed offset and the flushed store time. The time is one the flush covers: the store time of
    /// the last append that completed before the flush read the end, unless a record with that same
    /// millisecond could still follow (then one ms less).
    pub(crate) fn flush_commitlog(&self, least_pages: u64) -> Result<()> {
        let appended = self.appended_timestamp.load(Ordering::Acquire);
        let round = self.commitlog.flush_pages(least_pages).inspect_err(|e| self.poison(e))?;
        self.flushed_offset.fetch_max(round.flushed, Ordering::AcqRel);
        if round.flushed >= round.wrote {
            let covered = if appended < round.clock { appended } else { appended - 1 };
            self.flushed_timestamp.fetch_max(covered.max(0), Ordering::AcqRel);
        }
        Ok(())
    }

    /// Marks the store poisoned after a failed flush: nothing more may be declared durable.
    pub(crate) fn poison(&self, e: &Error) {
        let mut state = self.state();
        if matches!(&*state, State::Open { .. }) {
            self.writable.store(false, Ordering::Release);
            *state = State::Poisoned(e.to_string());
        }
    }

    /// Everything below this commitlog offset is flushed to disk (RocketMQ's `flushedWhere`): moved by the
    /// flush service (ASYNC_FLUSH), by each put (SYNC_FLUSH), by `flush` and `close`.
    pub fn flushed_offset(&self) -> u64 {
        self.flushed_offset.load(Ordering::Acquire).max(self.commitlog.flushed_where())
    }

    /// Everything below this commitlog offset is in the mapped files, readable and flushable (RocketMQ's
    /// committed position; without a transient store pool, the end of the log).
    pub fn committed_offset(&self) -> u64 {
        self.commitlog.max_offset()
    }

    /// Store time of the last message known flushed to the commitlog (0: none since open).
    pub fn flushed_timestamp(&self) -> i64 {
        self.flushed_timestamp.load(Ordering::Acquire)
    }

    /// Flushes the consume queues and the index, then records in the checkpoint that messages dispatched up to
    /// store time `dispatched` are flushed. The commitlog must be flushed first.
    fn flush_derived(&self, dispatched: i64) -> Result<()> {
        self.queues.flush()?;
        if let Some(index) = &self.index {
            index.flush()?;
        }
        self.write_checkpoint(dispatched)
    }

    /// Records in the checkpoint file what is now flushed: messages dispatched up to store time `dispatched`
    /// (so in the commitlog and the consume queues) and the last index file rolled. Values only move forward.
    fn write_checkpoint(&self, dispatched: i64) -> Result<()> {
        let rolled = self.index.as_ref().map_or(0, IndexService::rolled_end_timestamp);
        self.checkpoint.update_and_flush(|v| {
            v.physic_msg_timestamp = v.physic_msg_timestamp.max(dispatched);
            v.logics_msg_timestamp = v.logics_msg_timestamp.max(dispatched);
            v.index_msg_timestamp = v.index_msg_timestamp.max(rolled);
        })
    }

    /// After open's dispatch: flushes what it rebuilt and records it in the checkpoint.
    fn checkpoint_after_flush(&self) -> Result<()> {
        let dispatched = self.dispatched_timestamp.load(Ordering::Acquire);
        if dispatched == 0 && self.index.as_ref().map_or(0, IndexService::rolled_end_timestamp) == 0 {
            return Ok(());
        }
        self.commitlog.flush()?;
        self.flush_derived(dispatched)
    }

    /// The checkpoint file's values (spec §8.1).
    pub fn checkpoint(&self) -> CheckpointValues {
        self.checkpoint.values()
    }

    /// Dispatches whatever is left, flushes everything, releases the lock and removes the abort file.
    /// Idempotent. In a process forked from the one that opened the store it does nothing. A poisoned store
    /// keeps its abort file so the next open knows the last run did not end
    /// cleanly; so does a store whose dispatch could not finish.
    pub fn close(&self) -> Result<()> {
        if crate::fork::forked_since(self.generation) {
            // A forked child's copy (its exit drops it too): the store, its threads and its files are the
            // parent's, and stay as they are.
            return Ok(());
        }
        self.services.shutdown();
        let cleaning = self.wait_clean_round();
        let previous = {
            let mut state = self.state();
            self.writable.store(false, Ordering::Release);
            std::mem::replace(&mut *state, State::Closed)
        };
        drop(cleaning);
        let was_open = matches!(previous, State::Open { .. });
        let result = match previous {
            State::Open { _lock, abort } => (|| {
                self.commitlog.commit(0)?;
                self.flush_commitlog(0)?;
                // The segment the `warm` service made ahead of the writer holds nothing.
                self.commitlog.drop_segment_ahead();
                self.drain()?;
                self.flush_derived(self.dispatched_timestamp.load(Ordering::Acquire))?;
                // The delay offsets last: every delivery they count is flushed above.
                self.schedule.persist(self)?;
                abort.remove()
            })(),
            // What was put since the flush failed was never made durable: the close says so.
            State::Poisoned(why) => Err(Error::Poisoned(why)),
            State::ReadOnly => Ok(()),
            // A close after one that failed: that one's work cannot be finished now (the services are stopped
            // and the store closed); the next open recovers it, as after a crash.
            State::Closed => match self.close_failure.lock().unwrap_or_else(|p| p.into_inner()).take() {
                Some(why) => Err(Error::Poisoned(format!(
                    "an earlier close() failed: {why}; it cannot be finished now, and the abort marker stays"
                ))),
                None => Ok(()),
            },
        };
        if let (Err(e), true) = (&result, was_open) {
            *self.close_failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
        }
        // A closed store holds no file: each is unmapped and its descriptor closed now, not when the last
        // reference to the store goes (a reader's view of a file keeps that file until it is dropped).
        self.commitlog.release();
        self.queues.release();
        if let Some(index) = &self.index {
            index.release();
        }
        self.checkpoint.release();
        self.notify_dispatched();
        result
    }

    /// Dispatches until the reput offset reaches the confirm offset.
    fn drain(&self) -> Result<()> {
        loop {
            let round = self.dispatch(u64::MAX, false)?;
            if round.records == 0 && round.reput_offset >= self.confirm_offset() {
                return Ok(());
            }
        }
    }
}

/// Which directory `path` is (device, inode); `None` if it cannot be read.
pub(super) fn dir_identity(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

impl Drop for MessageStore {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

impl MessageStore {
    /// The offset dispatch may read up to: the end of the log, or under SYNC_FLUSH the end of flushed data
    /// (so a message becomes consumable only once durable, as RocketMQ's confirm offset).
    pub fn confirm_offset(&self) -> u64 {
        match self.config.commit_log.flush_disk_type {
            FlushDiskType::AsyncFlush => self.commitlog.max_offset(),
            FlushDiskType::SyncFlush => self.flushed_offset.load(Ordering::Acquire).min(self.commitlog.max_offset()),
        }
    }

    /// The dispatch position: every record before it is in its consume queue and the index.
    pub fn reput_offset(&self) -> u64 {
        self.reput_offset.load(Ordering::Acquire)
    }

    /// Bytes written but not dispatched yet (`dispatchBehindBytes`).
    pub fn dispatch_behind_bytes(&self) -> u64 {
        self.confirm_offset().saturating_sub(self.reput_offset())
    }

    /// What opening did to the consume queues and index.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// Records damage met outside dispatch (a read of a consume-queue entry), once per commitlog offset among
    /// the recent issues.
    pub(crate) fn report_damage(&self, offset: i64, reason: String) {
        let offset = offset.max(0) as u64;
        let mut log = self.issues.lock().unwrap_or_else(|p| p.into_inner());
        if log.recent.iter().any(|i| i.offset == offset && i.reason == reason) {
            return;
        }
        log.total += 1;
        log.recent.push(DispatchIssue { offset, reason, skipped: 0 });
        let excess = log.recent.len().saturating_sub(ISSUES_KEPT);
        log.recent.drain(..excess);
    }

    /// Dispatch problems met so far: the total count and the most recent ones.
    pub fn dispatch_issues(&self) -> (u64, Vec<DispatchIssue>) {
        let log = self.issues.lock().unwrap_or_else(|p| p.into_inner());
        (log.total, log.recent.clone())
    }

    /// One dispatch round (spec §12.1): records from the reput offset to the confirm offset, at most
    /// `max_records`, into the consume queues and the index. Rounds are serialised.
    pub fn dispatch(&self, max_records: u64, want_arrivals: bool) -> Result<DispatchRound> {
        let mut reput = self.reput.lock().unwrap_or_else(|p| p.into_inner());
        let end = self.confirm_offset();
        let dispatcher = Dispatcher {
            queues: &self.queues,
            index: self.index.as_ref(),
            delay_levels: &self.delay_levels,
            view: self.is_read_only(),
        };
        let round = dispatcher.run(&self.commitlog, *reput, end, max_records, want_arrivals)?;
        if !round.issues.is_empty() {
            let mut log = self.issues.lock().unwrap_or_else(|p| p.into_inner());
            log.total += round.issues.len() as u64;
            log.recent.extend(round.issues.iter().cloned());
            let excess = log.recent.len().saturating_sub(ISSUES_KEPT);
            log.recent.drain(..excess);
        }
        *reput = round.reput_offset;
        self.reput_offset.store(round.reput_offset, Ordering::Release);
        self.dispatched_timestamp.fetch_max(round.last_store_timestamp, Ordering::AcqRel);
        drop(reput);
        let waiters = self.dispatched_lock.lock().unwrap_or_else(|p| p.into_inner());
        if round.cq_entries > 0 {
            self.arrival_seq.fetch_add(1, Ordering::AcqRel);
        }
        if *waiters > 0 {
            self.dispatched.notify_all();
        }
        Ok(round)
    }

    /// Waits until everything written before the call is dispatched; `false` on timeout or when the store
    /// closes first.
    pub fn wait_dispatched(&self, timeout: Duration) -> bool {
        let target = self.confirm_offset();
        let deadline = Instant::now() + timeout;
        let mut g = self.dispatched_lock.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if self.reput_offset() >= target {
                return true;
            }
            if self.is_closed() {
                return false;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            *g += 1;
            g = self.dispatched.wait_timeout(g, deadline - now).unwrap_or_else(|p| p.into_inner()).0;
            *g -= 1;
        }
    }

    /// The arrival sequence: it advances after every dispatch round that adds consume-queue entries (and on
    /// [`wake_arrival_waiters`](Self::wake_arrival_waiters)). Long polling reads it, checks its queue, and
    /// waits for it to move ([`wait_arrival`](Self::wait_arrival)), so no arrival between the check and the
    /// wait is missed.
    pub fn arrival_seq(&self) -> u64 {
        self.arrival_seq.load(Ordering::Acquire)
    }

    /// Waits until the arrival sequence differs from `seen`, the store closes, or `timeout` passes; returns
    /// the sequence then. Returns at once when it already differs.
    pub fn wait_arrival(&self, seen: u64, timeout: Duration) -> u64 {
        let deadline = Instant::now().checked_add(timeout);
        let mut g = self.dispatched_lock.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let seq = self.arrival_seq();
            if seq != seen || self.is_closed() {
                return seq;
            }
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => Duration::from_secs(3600),
            };
            if left.is_zero() {
                return seq;
            }
            *g += 1;
            g = self.dispatched.wait_timeout(g, left).unwrap_or_else(|p| p.into_inner()).0;
            *g -= 1;
        }
    }

    /// Wakes every [`wait_arrival`](Self::wait_arrival) (a consumer shutting down or rebalancing): the
    /// sequence advances without an arrival, and waiters re-check their queues.
    pub fn wake_arrival_waiters(&self) {
        let waiters = self.dispatched_lock.lock().unwrap_or_else(|p| p.into_inner());
        self.arrival_seq.fetch_add(1, Ordering::AcqRel);
        if *waiters > 0 {
            self.dispatched.notify_all();
        }
    }

    /// Wakes the threads waiting in [`wait_dispatched`](Self::wait_dispatched) /
    /// [`wait_arrival`](Self::wait_arrival), if any. A waiter checks its condition and registers under the
    /// lock, and the condition (reput offset, arrival sequence, closed) changes before this takes the lock, so
    /// no wake-up is lost.
    fn notify_dispatched(&self) {
        let waiters = self.dispatched_lock.lock().unwrap_or_else(|p| p.into_inner());
        if *waiters > 0 {
            self.dispatched.notify_all();
        }
    }

    /// Waits until (topic, queue) holds a dispatched message at or after queue offset `offset`; false on
    /// timeout or when the store closes first (long polling: RocketMQ's `PullRequestHoldService`).
    pub fn wait_queue_beyond(&self, topic: &str, queue_id: i32, offset: i64, timeout: Duration) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            let seen = self.arrival_seq();
            if self.max_offset_in_queue(topic, queue_id, true) > offset {
                return true;
            }
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => Duration::from_secs(3600),
            };
            if left.is_zero() || self.is_closed() {
                return false;
            }
            self.wait_arrival(seen, left);
        }
    }

    /// The consume queue of (topic, queue), if it exists.
    pub fn consume_queue(&self, topic: &str, queue_id: i32) -> Option<Arc<ConsumeQueue>> {
        self.queues.find(topic, queue_id)
    }

    /// All consume queues.
    pub fn consume_queues(&self) -> &ConsumeQueueStore {
        &self.queues
    }

    /// The index service (`None` when `message_index_enable` is off).
    pub fn index(&self) -> Option<&IndexService> {
        self.index.as_ref()
    }

    /// `getMaxOffsetInQueue`: the dispatched max offset (0 for a queue that does not exist), or with
    /// `committed = false` the next queue offset to assign.
    pub fn max_offset_in_queue(&self, topic: &str, queue_id: i32, committed: bool) -> i64 {
        if committed {
            self.queues.find(topic, queue_id).map_or(0, |cq| cq.max_offset() as i64)
        } else {
            self.next_queue_offset(topic, queue_id)
        }
    }

    /// `getMinOffsetInQueue`: 0 for a queue that does not exist (RocketMQ 5.3.1 creates it empty in memory; rmq
    /// creates nothing).
    pub fn min_offset_in_queue(&self, topic: &str, queue_id: i32) -> i64 {
        self.queues.find(topic, queue_id).map_or(0, |cq| cq.min_offset() as i64)
    }

    /// The consume-queue entry at `queue_offset`.
    pub fn cq_entry(&self, topic: &str, queue_id: i32, queue_offset: i64) -> Option<CqEntry> {
        let q = u64::try_from(queue_offset).ok()?;
        self.queues.find(topic, queue_id)?.entry(q)
    }

    /// `getCommitLogOffsetInQueue`: 0 when there is no such entry.
    pub fn commitlog_offset_in_queue(&self, topic: &str, queue_id: i32, queue_offset: i64) -> i64 {
        self.cq_entry(topic, queue_id, queue_offset).filter(|e| !e.is_pre_blank()).map_or(0, |e| e.offset)
    }
}
