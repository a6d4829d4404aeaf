//! Opening a store: the lock, recovery of the commitlog (`commitlog::recover`), and the check of the derived
//! files against it.
//!
//! Order matters. The consume queues and the index are loaded first, because what they point at is evidence:
//! a record that was dispatched was committed, so damage before it cannot be a torn write. Then the commitlog
//! settles its end. Then each consume queue is checked against the commitlog: a hole (entries lost out of
//! order, as a power loss loses pages) or a tail entry that does not point at a record of its topic and queue
//! with its queue offset, size and tagsCode cuts the queue at the first bad entry, and the queue is rebuilt
//! from the commitlog. Entries are checked from the newest back to the checkpoint's durable point
//! (`logicsMsgTimestamp`), and at least the newest one. After a crash, dispatch restarts no later than the
//! newest segment stored at or before the checkpoint's min timestamp less 3 s, where RocketMQ's abnormal
//! recovery starts (and where the commitlog's walk started, `commitlog::recover`), so pages of derived files
//! lost by a power loss are written again. Queue offsets are then taken from the queues, so a queue
//! offset is never handed out twice.
//!
//! After a crash the checks cost no second read of the log: the commitlog's validating walk offers each record
//! it keeps to `matching`, which compares the consume-queue entry and index entries the record should have
//! with what the files hold. A queue or index file matched whole needs no per-entry check (random reads of the
//! log); any other is checked entry by entry as before. Dispatch then passes over the records the walk found in
//! place, provided nothing changed the queues or the index since (a repair, a cut tail).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicU64};
use std::sync::{Condvar, Mutex};

use super::matching::{entry_names_record, tags_code, IndexMatches, Matches, QueueMatches};
use super::{IssueLog, MessageStore, QueueTable, RecoveryReport, State};
use crate::checkpoint::{AbortFile, LockFile, StoreCheckpoint};
use crate::commitlog::{CommitLog, RecoverOptions, RecoveryMode};
use crate::config::StoreConfig;
use crate::consume_queue::store::ConsumeQueueStore;
use crate::consume_queue::ConsumeQueue;
use crate::error::{Error, Result};
use crate::index::IndexService;
use crate::message::ids::UniqIdGenerator;
use crate::mmap::Storage;

/// How to open a store.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenOptions {
    /// What to do with damage inside the commitlog's data (bytes a killed process cannot leave).
    pub recovery: RecoveryMode,
    /// Open without writing anything at all: no lock, no abort file, no checkpoint, no repair, no file
    /// created, deleted or resized. The files are mapped copy-on-write ([`crate::mmap::Storage::Overlay`]):
    /// the end of the log and any consume queue or index file that is missing, stale or damaged are worked
    /// out in memory by the same rules as a writable open. Every writing call fails with
    /// [`Error::ReadOnly`]. Safe on a read-only mount and on a directory a live broker writes (a consistent
    /// view up to the last complete record at the time of the open).
    pub read_only: bool,
}

impl MessageStore {
    /// Opens (creating if needed) the store at `root`: takes the lock, recovers the commitlog and checks the
    /// derived files against it (module docs), dispatches what they lack, and marks the store as running
    /// (abort file).
    ///
    /// An open that fails after taking the lock removes, before it lets the lock go, the files and directories
    /// it made (the lock file aside): see [`HeldForOpen`].
    pub fn open_with(root: &Path, mut config: StoreConfig, options: &OpenOptions) -> Result<Self> {
        let began = std::time::Instant::now();
        config.validate()?;
        crate::mmap::raise_open_file_limit();
        config.broker.store_host = crate::message::encode::canonical_host(config.broker.store_host);
        let storage = if options.read_only { Storage::Overlay } else { Storage::Disk };
        let lock = if options.read_only {
            if !root.is_dir() {
                let e = std::io::Error::new(std::io::ErrorKind::NotFound, "no store directory here");
                return Err(Error::io(root, e));
            }
            None
        } else {
            crate::mmap::create_dir_durable(root)?;
            Some(LockFile::acquire(root)?)
        };
        let mut held = HeldForOpen::new(root, lock);
        let unclean_shutdown = AbortFile::exists(root);
        let checkpoint =
            if options.read_only { StoreCheckpoint::open_read_only(root)? } else { StoreCheckpoint::open(root)? };
        let cq_size = config.consume_queue.mapped_file_size_consume_queue;
        let (queues, skipped_dirs) = ConsumeQueueStore::load_in(storage, &root.join("consumequeue"), cq_size)?;
        let index = if config.dispatch.message_index_enable {
            Some(IndexService::load_in(storage, &root.join("index"), config.index, crate::commitlog::now_ms)?)
        } else {
            None
        };
        // A view of a store another process holds the lock of: what that writer has not dispatched yet is its
        // work in progress, not loss.
        let beside_writer = options.read_only && crate::checkpoint::lock_holder(root).is_some();
        if let Some(ix) = index.as_ref().filter(|_| beside_writer) {
            // The newest index file is not damage to rebuild from the commitlog at every open.
            ix.set_beside_writer();
        }
        let mut holes = Vec::new();
        let mut torn_entries = Vec::new();
        for cq in queues.all() {
            let r = cq.recover()?;
            if r.hole {
                holes.push(cq);
            } else if r.torn_entry && !unclean_shutdown {
                // After a clean close no write was cut short: the last entry was damaged.
                torn_entries.push(cq);
            }
        }
        let dispatched_end = queues
            .all()
            .iter()
            .map(|cq| cq.max_physic_offset())
            .chain(index.as_ref().and_then(IndexService::last_indexed_offset).map(|o| o.saturating_add(1)))
            .max()
            .map_or(0, |m| m.max(0) as u64);
        let cp = checkpoint.values();
        // RocketMQ's `getMinTimestamp()` (spec §8.1): the abnormal path starts at a segment stored before it.
        let start_timestamp = cp.physic_msg_timestamp.min(cp.logics_msg_timestamp).saturating_sub(3000).max(0);
        let index_safe_timestamp = if config.dispatch.message_index_enable && config.dispatch.message_index_safe {
            cp.index_msg_timestamp
        } else {
            i64::MAX
        };
        let recover = RecoverOptions {
            mode: options.recovery,
            unclean: unclean_shutdown,
            dispatched_end,
            durable_timestamp: cp.physic_msg_timestamp,
            start_timestamp,
            index_safe_timestamp,
            storage,
        };
        let delay_levels = crate::message::tags::parse_delay_levels(&config.dispatch.message_delay_level);
        let durable_ts = cp.logics_msg_timestamp.min(cp.physic_msg_timestamp);
        // After a crash the consume-queue and index entries written since the checkpoint are matched against
        // their records as the validating walk reads them; only a queue or an index file it does not match whole
        // is checked entry by entry (`verify_tail`, `index_check::check_at_open`).
        let mut matches = unclean_shutdown.then(|| {
            Matches::new(
                QueueMatches::new(queues.all(), durable_ts),
                index.as_ref().map(|ix| (ix, IndexMatches::new(ix.files().into_iter().filter(|f| f.has_entries())))),
            )
        });
        // The newest index file's slots and chains are checked after a crash (`index_check::check_at_open`);
        // nothing changes the file before that check, so on disk (no live writer) it runs beside the walk.
        let newest_index = match &index {
            Some(ix) if unclean_shutdown && storage == Storage::Disk => ix.files().pop().filter(|f| f.has_entries()),
            _ => None,
        };
        let (opened, newest_verified) = std::thread::scope(|scope| {
            let verifying = newest_index.as_ref().map(|f| scope.spawn(move || f.verify()));
            let mut visit = |rec: &crate::commitlog::Record| {
                if let Some(m) = &mut matches {
                    m.record(rec, &delay_levels);
                }
            };
            let opened =
                CommitLog::open_visiting(&root.join("commitlog"), config.commit_log.clone(), &recover, &mut visit);
            (opened, verifying.and_then(|h| h.join().ok()))
        });
        let (mut commitlog, open_report) = opened?;
        if open_report.rewalked_cut {
            // What the walk matched was cut away: the derived files are checked entry by entry instead.
            matches = None;
        }
        let transient_store_pool = if options.read_only { None } else { attach_pool(&mut commitlog, &config)? };
        // From here on opening changes the derived files: a process killed before it finishes must leave the
        // abort file, so that the next open does not take half-rebuilt queues or index for a clean close.
        let abort = if options.read_only { None } else { Some(AbortFile::create(root)?) };
        // Index entries past the end of the log (a cut in the middle, or pages the log lost and the index kept)
        // go before anything reads the index.
        let cut_index = match &index {
            Some(ix) => super::index_check::cut_at_end(ix, &commitlog)?,
            None => Vec::new(),
        };
        // The checkpoint's times are store times of records the log holds (spec §8.1). After a cut in the middle
        // (or lost pages) they may lie after the newest record kept: they come back to it, so that the next
        // crash's recovery starts early enough. Checked at every writable open, not only the one that cut: a
        // process stopped between the cut and this point leaves a log that the next open finds whole. (A
        // read-only open shows the file as it is: `rmq check` reports times ahead of the data.)
        let newest_kept = || open_report.last_store_timestamp.or_else(|| commitlog.newest_store_timestamp());
        if !options.read_only && cp.physic_msg_timestamp.max(cp.logics_msg_timestamp).max(cp.index_msg_timestamp) > 0 {
            let newest = newest_kept().unwrap_or(0);
            checkpoint.update_and_flush(|v| {
                v.physic_msg_timestamp = v.physic_msg_timestamp.min(newest);
                v.logics_msg_timestamp = v.logics_msg_timestamp.min(newest);
                v.index_msg_timestamp = v.index_msg_timestamp.min(newest);
            })?;
        }
        let end = commitlog.max_offset();
        let min = commitlog.min_offset();
        let mut recovery = RecoveryReport {
            skipped_dirs,
            transient_store_pool,
            path: open_report.path,
            start_offset: open_report.validated_from,
            start_segment: commitlog.queue().find(open_report.validated_from).map(|f| f.path().to_owned()),
            validated_bytes: open_report.validated_bytes,
            validate_time: open_report.validate_time,
            ..RecoveryReport::default()
        };
        // Dispatch restarts where every queue and the index are complete. Re-dispatching a record that is
        // already there changes nothing (duplicate rules of §6.2 and §7.5), so erring early is safe.
        let mut cq_frontier: Option<i64> = None;
        let mut repaired_frontier: Option<u64> = None;
        let mut at_boundary = Vec::new();
        // Consume-queue files of another size than the store's (a view reads them as far as they go; a writable
        // open refused them): what they lost is dispatched again, in memory.
        let cq_file_size = crate::consume_queue::round_file_size(cq_size);
        for (topic, queue_id, path, len) in queues.resized() {
            if let Some(cq) = queues.find(topic, *queue_id) {
                lower(&mut repaired_frontier, last_entry_end(&cq, min, end));
            }
            recovery.rebuilt_queue_id(
                topic,
                *queue_id,
                format!(
                    "{} is {len} bytes where the store's consume-queue files are {cq_file_size}: it was {}; read as \
                     far as it goes, and what it lost dispatched again in memory",
                    path.display(),
                    if *len < cq_file_size { "truncated" } else { "extended" }
                ),
            );
        }
        // After a clean close nothing the log kept was lost, and nothing was cut: an entry past its end is damage.
        let whole_log = !unclean_shutdown && open_report.damage.is_empty();
        for cq in queues.all() {
            // Entries from the first one pointing past the end are cut (RocketMQ's rule). When that entry was
            // damaged (good entries after it point inside the log, or the log lost nothing), the queue is also
            // dispatched again from its new last entry: the records of the entries cut lie before where dispatch
            // restarts (the furthest queue's end). Without that, the message of queue offset 23 was lost from
            // its queue and the one of 24 written at 23, or the next put was given the queue offset of a message
            // the log holds.
            let Some((q, inside)) = cq.truncate_dirty(end as i64)? else { continue };
            if inside || whole_log {
                lower(&mut repaired_frontier, last_entry_end(&cq, min, end));
                recovery.rebuilt_queue(
                    &cq,
                    if inside {
                        format!(
                            "entry {q} points past the end of the commitlog while entries after it point inside it: \
                             cut there and rebuilt"
                        )
                    } else {
                        format!("entry {q} points past the end of a cleanly closed commitlog: cut there and rebuilt")
                    },
                );
            }
        }
        let restart =
            unclean_shutdown.then(|| checkpoint_restart(&commitlog, start_timestamp.min(index_safe_timestamp)));
        // The walk's verdicts hold for what the per-entry checks look at only if it began at or before `restart`.
        let walked = matches.as_ref().filter(|m| restart.is_some_and(|r| m.covers(r)));
        let walked_queues = walked.map(|m| &m.queues);
        let walked_index = walked.and_then(|m| m.index.as_ref());
        for cq in queues.all() {
            let hole = holes.iter().any(|h| std::sync::Arc::ptr_eq(h, &cq));
            let torn = torn_entries.iter().any(|h| std::sync::Arc::ptr_eq(h, &cq));
            let disorder = cq.first_disorder(end as i64);
            let tail = if walked_queues.is_some_and(|w| w.tail_verified(&cq, min as i64)) {
                None
            } else {
                verify_tail(&cq, &commitlog, durable_ts, &delay_levels)
            };
            let bad = match (disorder, tail) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            // Beside a live writer a "hole" may be the writer's next entries, written between this view's scan
            // of the queue and its look past the scan's end: the view cuts there and dispatches the rest from the
            // log in memory, as for a hole, without calling it loss.
            if hole || torn || bad.is_some() {
                let from_q = bad.unwrap_or(cq.max_offset()).min(cq.max_offset());
                cq.truncate_to(from_q)?;
                lower(&mut repaired_frontier, last_entry_end(&cq, min, end));
                if !(beside_writer && hole && !torn && bad.is_none()) {
                    recovery.rebuilt_queue(
                        &cq,
                        match bad {
                            Some(q) => {
                                format!("entry {q} is damaged or does not point at its record; cut there and rebuilt")
                            }
                            None if hole => {
                                format!("entries lost after queue offset {from_q} (a hole); cut there and rebuilt")
                            }
                            None => format!(
                                "entry {from_q} is damaged (not a valid entry, after a clean close); cut there and \
                                 rebuilt"
                            ),
                        },
                    );
                }
            }
            let m = cq.max_physic_offset();
            if m >= 0 {
                cq_frontier = Some(cq_frontier.map_or(m, |f| f.max(m)));
                // A queue that ends exactly at a file boundary may have lost its newest file (deleted, or
                // truncated to nothing): dispatch from its last entry on, so any later record of it comes back.
                // Beside a live writer the queue may simply not have its next file yet (the writer's dispatch lags
                // its log): the view dispatches the rest in memory as for any queue, and says nothing was lost.
                let max = cq.max_offset();
                if !hole && !torn && bad.is_none() && max > 0 && max.is_multiple_of(cq.entries_per_file()) {
                    lower(&mut repaired_frontier, last_entry_end(&cq, min, end));
                    if !beside_writer {
                        at_boundary.push((cq.clone(), max));
                    }
                }
            }
        }
        if !unclean_shutdown {
            for lost in missing_tails(&queues, &commitlog, min, end)? {
                lower(&mut repaired_frontier, lost.redo_from);
                let name = format!("{}/{}", lost.topic, lost.queue_id);
                if recovery.rebuilt_queues.contains(&name) {
                    continue; // cut above, which said why
                }
                let why = format!(
                    "the consume queue ends at queue offset {} after a clean close while the commitlog holds a \
                     message of the queue after its last entry (queue offset {}, commitlog offset {}): entries \
                     lost, dispatched again from there",
                    lost.next, lost.queue_offset, lost.offset
                );
                recovery.rebuilt_queue_id(&lost.topic, lost.queue_id, why);
            }
        }
        for (cq, q0, found) in missing_heads(&queues, &commitlog)? {
            cq.truncate_to(0)?;
            lower(&mut repaired_frontier, min);
            recovery.rebuilt_queue(
                &cq,
                format!(
                    "the consume-queue files before queue offset {q0} are missing while the commitlog still holds \
                     the message at queue offset {} (commitlog offset {}); rebuilt",
                    found.1, found.0
                ),
            );
        }
        let mut from = cq_frontier.map_or(min, |f| (f.max(0) as u64).clamp(min, end));
        if let Some(index) = &index {
            let trusted_to = unclean_shutdown.then_some(cp.index_msg_timestamp);
            let pre_verified = newest_index.as_ref().zip(newest_verified.as_ref());
            let (rebuilt, trusted) =
                super::index_check::check_at_open(index, &commitlog, restart, trusted_to, walked_index, pre_verified)?;
            recovery.rebuilt_index_files = cut_index;
            recovery.rebuilt_index_files.extend(index.left_out().iter().cloned());
            recovery.rebuilt_index_files.extend(rebuilt);
            recovery.index_files_trusted = trusted;
            let indexed = match index.last_indexed_offset() {
                None => min,
                // After a clean close the last indexed record is complete; after a crash it may have only
                // some of its keys, so it is dispatched again (the index skips the keys it already has).
                Some(o) => {
                    let o = (o.max(0) as u64).clamp(min, end);
                    match commitlog.read(o) {
                        // A newest file left out (truncated) may have held the rest of this record's keys.
                        Ok(Some(rec)) if !unclean_shutdown && index.left_out().is_empty() => {
                            o + rec.header.total_size as u64
                        }
                        _ => o,
                    }
                }
            };
            from = from.min(indexed);
        }
        if let Some(f) = repaired_frontier {
            from = from.min(f);
        }
        if let Some(restart) = restart {
            recovery.checkpoint_restart = Some(restart);
            from = from.min(restart);
        }
        recovery.dispatched_from = from;
        // Records the walk found in their queues and the index already are passed over: dispatch writes nothing
        // for them (with nothing skipped by a salvage, the walk met every record dispatch would).
        let (reput, passed_timestamp) = match matches.as_ref().filter(|_| open_report.damage.is_empty()) {
            Some(m) => match m.dispatch_from(from, end, &queues, index.as_ref()) {
                Some((to, ts)) => (to, (to >= end).then_some(ts)),
                None => (from, None),
            },
            None => (from, None),
        };
        let uniq = UniqIdGenerator::new(config.broker.store_host.ip());
        let mut store = MessageStore {
            root: root.to_owned(),
            log_dir: super::dir_identity(&root.join("commitlog")),
            max_message_size: AtomicI32::new(config.commit_log.max_message_size),
            config,
            commitlog,
            queue_table: Mutex::new(QueueTable::default()),
            uniq,
            open_report,
            unclean_shutdown,
            generation: crate::fork::generation(),
            opened_by: std::process::id(),
            state: Mutex::new(State::Closed),
            close_failure: Mutex::new(None),
            writable: AtomicBool::new(false),
            queues,
            index,
            delay_levels,
            reput: Mutex::new(reput),
            reput_offset: AtomicU64::new(reput),
            dispatched: Condvar::new(),
            dispatched_lock: Mutex::new(0),
            arrival_seq: AtomicU64::new(0),
            flushed_offset: AtomicU64::new(end),
            group_commit: Default::default(),
            commit_state: Default::default(),
            checkpoint,
            dispatched_timestamp: AtomicI64::new(passed_timestamp.unwrap_or(0)),
            appended_timestamp: AtomicI64::new(0),
            flushed_timestamp: AtomicI64::new(0),
            recovery,
            issues: Mutex::new(IssueLog::default()),
            services: super::services::Services::default(),
            clean: super::clean::CleanState::default(),
            schedule: Default::default(),
            transactions: super::transaction::TransactionState::default(),
        };
        // Catch up before taking puts: queue offsets come from the queues (spec §10.7).
        let keys_before = store.index.as_ref().map_or(0, IndexService::entry_count);
        loop {
            let round = match store.dispatch(u64::MAX, false) {
                Ok(round) => round,
                // A full disk (catching up needs a new consume-queue or index file): the store still opens and
                // reads; dispatch goes on (reput service) once space is freed.
                Err(e @ Error::DiskFull { .. }) => {
                    store.recovery.dispatch_blocked = Some(e.to_string());
                    break;
                }
                Err(e) => return Err(e),
            };
            store.recovery.redispatched_records += round.records;
            store.recovery.rebuilt_cq_entries += round.cq_entries;
            if round.records == 0 && round.reput_offset >= end {
                break;
            }
        }
        store.recovery.reindexed_keys =
            store.index.as_ref().map_or(0, IndexService::entry_count).saturating_sub(keys_before);
        for (cq, before) in at_boundary {
            if cq.max_offset() > before {
                store.recovery.rebuilt_queue(
                    &cq,
                    format!(
                        "entries after queue offset {before} were missing (the newest consume-queue file was lost); \
                         rebuilt"
                    ),
                );
            }
        }
        // What open found is taken as flushed (the flushed offset starts at the end too).
        store.flushed_timestamp.store(
            store.dispatched_timestamp.load(std::sync::atomic::Ordering::Acquire),
            std::sync::atomic::Ordering::Release,
        );
        let min = store.commitlog.min_offset() as i64;
        let mut table = QueueTable::default();
        for cq in store.queues.all() {
            cq.correct_min_offset(min);
            table.entry(cq.topic().to_owned()).or_default().insert(cq.queue_id(), cq.next_queue_offset() as i64);
        }
        if store.recovery.dispatch_blocked.is_some() {
            // The queues lag the log: the records not dispatched yet hold queue offsets too, which must never
            // be handed out again.
            store.queue_offsets_after_reput(&mut table);
        }
        *store.queue_table.get_mut().unwrap_or_else(|p| p.into_inner()) = table;
        let state = match (held.keep(), abort) {
            (Some(lock), Some(abort)) => {
                store.checkpoint_after_flush()?;
                State::Open { _lock: lock, abort }
            }
            _ => State::ReadOnly,
        };
        *store.writable.get_mut() = matches!(state, State::Open { .. });
        *store.state.get_mut().unwrap_or_else(|p| p.into_inner()) = state;
        store.recovery.open_time = began.elapsed();
        Ok(store)
    }
}

/// The lock of a writable open (`None` for a read-only one) and the names the open may create in the store
/// directory, noted once the lock is held: an open that fails (a commitlog it refuses, a bad abort marker, a
/// full disk) drops this before it returns, which removes what it made, each only if it did not exist when the
/// lock was taken (files, then the directories it made if they are empty), and only then lets the lock go, so
/// no other open can have made any of it meanwhile. A refused directory is left as it was found (a mistyped
/// path, a directory that is not a store) but for the `lock` file (RocketMQ's broker leaves one too): removing
/// it could let two processes hold the lock, one on the removed file.
struct HeldForOpen {
    root: PathBuf,
    /// Each name, and whether it existed when the lock was taken; `None` once the open succeeded.
    existed: Option<Vec<(&'static str, bool)>>,
    lock: Option<LockFile>,
}

impl HeldForOpen {
    const NAMES: [&'static str; 6] = ["abort", "abort.bak", "checkpoint", "commitlog", "consumequeue", "index"];

    fn new(root: &Path, lock: Option<LockFile>) -> Self {
        let existed =
            lock.as_ref().map(|_| Self::NAMES.iter().map(|&n| (n, root.join(n).symlink_metadata().is_ok())).collect());
        HeldForOpen { root: root.to_owned(), existed, lock }
    }

    /// The open succeeded: the lock, for the store to hold.
    fn keep(&mut self) -> Option<LockFile> {
        self.existed = None;
        self.lock.take()
    }
}

impl Drop for HeldForOpen {
    fn drop(&mut self) {
        for (name, existed) in self.existed.take().into_iter().flatten() {
            let path = self.root.join(name);
            match path.symlink_metadata() {
                Ok(_) if existed => {}
                Ok(m) if m.is_dir() => {
                    let _ = std::fs::remove_dir(&path);
                }
                Ok(_) => {
                    let _ = std::fs::remove_file(&path);
                }
                Err(_) => {}
            }
        }
        // `lock` is dropped after this, releasing the lock.
    }
}

/// The first queue offset, among the newest entries of `cq`, whose entry does not point at a record of the
/// queue's topic and queue id with that queue offset, size and tagsCode. Checks from the newest entry back
/// until an entry whose record is older than `durable_ts` (the checkpoint: older entries were flushed), and
/// at least the newest entry.
fn verify_tail(cq: &ConsumeQueue, log: &CommitLog, durable_ts: i64, delay_levels: &[i64]) -> Option<u64> {
    let (min, max) = (cq.min_offset(), cq.max_offset());
    let log_min = log.min_offset() as i64;
    let mut bad = None;
    let mut q = max;
    while q > min {
        q -= 1;
        let Some(e) = cq.entry(q) else {
            bad = Some(q);
            continue;
        };
        if e.is_pre_blank() || e.offset < log_min {
            break;
        }
        let record = log.read(e.offset.max(0) as u64);
        if record.is_err() && starts_in_damage(log, e.offset.max(0) as u64) {
            // The log, not the entry, is damaged there: the entry keeps its place (RocketMQ never looks), and
            // get_message reports the record. Cut, the queue was dispatched again without that message and every
            // later one of it took a queue offset one lower than its record's.
            continue;
        }
        let ok_ts = record
            .ok()
            .flatten()
            .filter(|r| entry_names_record(cq, q, &e, r, tags_code(r, delay_levels)))
            .map(|r| r.header.store_timestamp);
        match ok_ts {
            None => bad = Some(q),
            Some(ts) if ts < durable_ts => break,
            Some(_) => {}
        }
    }
    bad
}

/// Whether a record may start at `offset` that damage in the log made unreadable: the chain of records from the
/// start of its segment lands on it, or it lies in bytes that are not records, before the next valid record. An
/// entry whose offset falls inside an intact record (or past the segment's records) points at no record.
fn starts_in_damage(log: &CommitLog, offset: u64) -> bool {
    use crate::commitlog::cursor::{find_valid_record, Step};
    let Some(file) = log.queue().find(offset) else { return false };
    let seg_end = file.end().min(log.max_offset());
    let mut cursor = log.cursor(file.start(), seg_end);
    loop {
        let at = cursor.offset();
        if at >= offset {
            return at == offset;
        }
        match cursor.next() {
            Some(Step::Record(_)) => {}
            Some(Step::Partial { .. } | Step::Zero { .. } | Step::Invalid { .. }) => {
                let next = find_valid_record(log.queue(), at + 1, seg_end, false).unwrap_or(seg_end);
                if offset < next {
                    return true;
                }
                cursor.seek(next);
            }
            Some(Step::Blank { .. } | Step::Missing { .. }) | None => return false,
        }
    }
}

/// How far back from the end of the log an open after a clean close looks for messages missing from the end
/// of their consume queues ([`missing_tails`]).
const TAIL_SCAN: u64 = 64 << 20;

/// A queue whose newest consume-queue entries are gone: the first record of it past its end.
struct MissingTail {
    topic: String,
    queue_id: i32,
    /// The queue's next queue offset as its consume queue has it.
    next: u64,
    /// The first record of the queue past its last entry (its queue offset and commitlog offset).
    queue_offset: u64,
    offset: u64,
    /// Where dispatch must start again to bring every lost message back: `offset` when its queue offset is
    /// the queue's next one, otherwise (messages of the queue before the part read) the end of the queue's
    /// last entry.
    redo_from: u64,
}

/// After a clean close every message is in its consume queue, so a queue's consume queue ending before a
/// message of the queue that the log holds has lost its newest entries (zeroed or cut off after the close):
/// left so, the next put would hand out their queue offsets again and their messages would never be read.
/// Reads the records from where the first queue ends (at most the last [`TAIL_SCAN`] bytes of the log) and
/// returns, per queue, the first message past the record of its last entry. Queues without a consume queue are
/// passed over (a deleted topic leaves its records in the log), and so are PREPARED and ROLLBACK records, which
/// take no queue offset.
fn missing_tails(queues: &ConsumeQueueStore, log: &CommitLog, min: u64, end: u64) -> Result<Vec<MissingTail>> {
    // Per topic and queue: the queue's next queue offset and where its last entry's record ends. A queue
    // leaves the map once reported.
    let mut ends: std::collections::HashMap<Vec<u8>, std::collections::HashMap<i32, (u64, u64)>> =
        std::collections::HashMap::new();
    for cq in queues.all() {
        let at = (cq.max_offset(), last_entry_end(&cq, min, end));
        ends.entry(cq.topic().as_bytes().to_vec()).or_default().insert(cq.queue_id(), at);
    }
    let first_end = ends.values().flat_map(|q| q.values()).map(|&(_, e)| e).min().unwrap_or(min);
    let from = first_end.max(end.saturating_sub(TAIL_SCAN)).max(min);
    if from >= end {
        return Ok(Vec::new());
    }
    let mut found = Vec::new();
    super::index_check::each_record(log, from, end, &mut |rec| {
        let h = &rec.header;
        let topic = h.topic(rec.bytes());
        let queue = ends.get_mut(topic).filter(|_| h.transaction_type().takes_queue_offset() && h.queue_offset >= 0);
        // Past the queue's last entry, so in no entry of it (a damaged QUEUEOFFSET does not matter here).
        if let Some(queue) = queue {
            if let Some(&(next, frontier)) = queue.get(&h.queue_id).filter(|&&(_, f)| rec.offset() >= f) {
                let queue_offset = h.queue_offset as u64;
                found.push(MissingTail {
                    topic: crate::java::decode_utf8_lossy(topic).into_owned(),
                    queue_id: h.queue_id,
                    next,
                    queue_offset,
                    offset: rec.offset(),
                    redo_from: if queue_offset == next { rec.offset() } else { frontier },
                });
                queue.remove(&h.queue_id);
            }
        }
        Ok(rec.offset() < end)
    })?;
    Ok(found)
}

/// A queue whose first files are missing, its first remaining queue offset, and the message found before it
/// (commitlog offset, queue offset).
type MissingHead = (std::sync::Arc<ConsumeQueue>, u64, (u64, i64));

/// Queues whose first consume-queue files are missing: the first file starts at queue offset `q0` > 0 and its
/// first entry points at or after the log's start, yet the log holds a message of the queue with a lower
/// queue offset before that entry. (Retention removes a file only once all its entries are below the log's
/// start, so the message before `q0` lies below it too.) One pass over the log from its start to the
/// furthest such entry; nothing is read when no queue is in that position. Returns each queue with `q0` and
/// the commitlog offset and queue offset of the message found.
fn missing_heads(queues: &ConsumeQueueStore, log: &CommitLog) -> Result<Vec<MissingHead>> {
    let log_min = log.min_offset();
    let mut watch = std::collections::HashMap::new();
    for cq in queues.all() {
        let q0 = cq.files().first().map_or(0, |f| f.start() / crate::consume_queue::UNIT);
        if q0 == 0 {
            continue;
        }
        if let Some(e) = cq.entry(q0).filter(|e| !e.is_pre_blank() && e.is_valid() && e.offset >= log_min as i64) {
            watch.insert((cq.topic().as_bytes().to_vec(), cq.queue_id()), (cq, q0, e.offset as u64));
        }
    }
    let Some(to) = watch.values().map(|(_, _, bound)| *bound).max() else { return Ok(Vec::new()) };
    let mut found = Vec::new();
    super::index_check::each_record(log, log_min, to, &mut |rec| {
        let h = &rec.header;
        let key = (h.topic(rec.bytes()).to_vec(), h.queue_id);
        if let Some((_, q0, bound)) = watch.get(&key) {
            if rec.offset() < *bound && h.queue_offset >= 0 && (h.queue_offset as u64) < *q0 {
                if let Some((cq, q0, _)) = watch.remove(&key) {
                    found.push((cq, q0, (rec.offset(), h.queue_offset)));
                }
            }
        }
        Ok(!watch.is_empty() && rec.offset() < to)
    })?;
    Ok(found)
}

/// After a crash: the start of the newest segment whose first record was stored at or before `start_ts`, the
/// checkpoint's min timestamp less 3 s (RocketMQ's abnormal recovery dispatches from there, spec §10.3); the
/// log's start when the checkpoint has no durable point.
fn checkpoint_restart(log: &CommitLog, start_ts: i64) -> u64 {
    let min = log.min_offset();
    if start_ts <= 0 {
        return min;
    }
    for f in log.queue().files().iter().rev() {
        if let Ok(Some(rec)) = log.read(f.start()) {
            if rec.header.store_timestamp != 0 && rec.header.store_timestamp <= start_ts {
                return f.start().max(min);
            }
        }
    }
    min
}

/// Turns the transient store pool on when it is enabled and effective (ASYNC_FLUSH on a role other than SLAVE,
/// as RocketMQ's `isTransientStorePoolEnable`). Returns what became of the setting, for the recovery report.
fn attach_pool(commitlog: &mut CommitLog, config: &StoreConfig) -> Result<Option<String>> {
    let tp = &config.transient_pool;
    if !tp.transient_store_pool_enable {
        return Ok(None);
    }
    if config.commit_log.flush_disk_type != crate::config::FlushDiskType::AsyncFlush {
        return Ok(Some("ignored: the transient store pool works only with ASYNC_FLUSH".into()));
    }
    if config.read.broker_role == crate::config::BrokerRole::Slave {
        return Ok(Some("ignored: the transient store pool is not used on a SLAVE".into()));
    }
    let pool = crate::commitlog::pool::TransientStorePool::new(tp.transient_store_pool_size, commitlog.file_size())?;
    let status = match pool.lock_error() {
        None => format!("on: {} buffers of {} bytes, locked in memory", pool.size(), pool.buffer_len()),
        Some(why) => format!("on: {} buffers of {} bytes, not locked: {why}", pool.size(), pool.buffer_len()),
    };
    commitlog.attach_pool(pool);
    Ok(Some(status))
}

/// Lowers the dispatch restart point `frontier` to `to` (sets it when there is none).
fn lower(frontier: &mut Option<u64>, to: u64) {
    *frontier = Some(frontier.map_or(to, |f| f.min(to)));
}

/// Where the records after `cq`'s last entry begin (the end of that entry's record), within `[min, end]`: a
/// rebuilt queue is dispatched again from there.
fn last_entry_end(cq: &ConsumeQueue, min: u64, end: u64) -> u64 {
    u64::try_from(cq.max_physic_offset()).unwrap_or(min).clamp(min, end)
}
