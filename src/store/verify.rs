//! The read-only consistency report behind `rmq check` (in the manner of kafka-dump-log's index sanity check
//! and raft-engine's `ctl check`): every byte of the store is read, nothing is written.
//!
//! - **commitlog**: every record from the first segment to the end (length, magic, body CRC, the `__CRC32#`
//!   property where present, its own offset), blank fillers, and what follows the end: zeros, a torn write
//!   (after a crash), or damage with the valid records after it;
//! - **consume queues**: every entry against the record it names (topic, queue id, queue offset, size,
//!   tagsCode), queue offsets dense, entries past the end of the log;
//! - **index**: each file's header, slots and chains ([`IndexFile::verify`]), every entry against its record
//!   (a message carrying a key of the entry's hash), keyed messages no file covers;
//! - **checkpoint** against the data, and `config/consumerOffset.json` against each queue's range.
//!
//! It ends with verdicts a person can act on: what RocketMQ 5.3.1's recovery would do with this store (its
//! normal recovery looks at the last three segments, its abnormal recovery from the checkpoint's segment, and
//! cuts the log at the first record it cannot read) and what rmq's open would do (a read-only open, run for
//! real, in strict and salvage modes).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::index_check::{entry_mismatch, key_hashes};
use super::matching::{tags_code, EntryCode, QueueMatches};
use super::open::OpenOptions;
use super::MessageStore;
use crate::checkpoint::AbortFile;
use crate::commitlog::cursor::{find_valid_record, Cursor, Step};
use crate::commitlog::{CommitLog, Record, RecoveryMode};
use crate::config::StoreConfig;
use crate::consume_queue::store::ConsumeQueueStore;
use crate::error::{Error, Result};
use crate::index::IndexService;
use crate::java::decode_utf8_lossy;
use crate::message::decode::CheckOptions;
use crate::message::properties::{self, keys};
use crate::mmap::Storage;

/// One problem found, in one file at one byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// `commitlog`, `consumequeue`, `index`, `checkpoint`, `offsets`.
    pub area: &'static str,
    /// `damage` (bytes a crash cannot leave), `torn` (what a killed writer leaves), `stale` (a derived file
    /// behind or ahead of the log, rebuilt by an open), `note`.
    pub kind: &'static str,
    /// The file.
    pub path: PathBuf,
    /// Byte position in the file (commitlog: the global offset).
    pub offset: i64,
    /// What is wrong.
    pub what: String,
}

/// What `rmq check` found.
#[derive(Debug, Clone, Default)]
pub struct CheckReport {
    /// Problems, in the order found (commitlog, consume queues, index, checkpoint, offsets).
    pub findings: Vec<Finding>,
    /// Valid records in the commitlog.
    pub records: u64,
    /// Bytes of valid records.
    pub record_bytes: u64,
    /// Commitlog segments.
    pub segments: usize,
    /// Consume-queue entries checked.
    pub cq_entries: u64,
    /// Index entries checked.
    pub index_entries: u64,
    /// What RocketMQ's recovery would do.
    pub rocketmq_verdict: String,
    /// What rmq's open would do.
    pub rmq_verdict: String,
}

impl CheckReport {
    /// No finding of damage, torn bytes or stale derived files.
    pub fn is_clean(&self) -> bool {
        self.findings.iter().all(|f| f.kind == "note")
    }
}

/// A position where the walk met bytes that are not a record, and what it found after them.
struct Break {
    offset: u64,
    path: PathBuf,
    reason: String,
    /// Valid records after it (to the end of the log), with their topics.
    following: u64,
    topics: BTreeMap<String, u64>,
}

/// Checks the store at `root` without writing anything (module docs). Errors only when the store cannot be
/// read at all (no commitlog directory, a segment layout no open accepts).
pub fn check(root: &Path, config: StoreConfig) -> Result<CheckReport> {
    let mut rep = CheckReport::default();
    let unclean = AbortFile::exists(root);
    let live = crate::checkpoint::lock_holder(root);
    // rmq's verdict: the open itself, read-only. Salvage opens whatever strict would refuse.
    let strict =
        MessageStore::open_with(root, config.clone(), &OpenOptions { read_only: true, ..OpenOptions::default() });
    let salvage_opts = OpenOptions { recovery: RecoveryMode::Salvage, read_only: true };
    let (store, strict_error) = match strict {
        Ok(s) => (s, None),
        Err(Error::Corruption { path, offset, reason }) => {
            let s = MessageStore::open_with(root, config.clone(), &salvage_opts)?;
            (s, Some(format!("{}: {reason} (offset {offset})", path.display())))
        }
        Err(e) => return Err(e),
    };
    let log = &store.commitlog;
    rep.segments = log.queue().files().len();
    let size = config.consume_queue.mapped_file_size_consume_queue;
    let (queues, skipped) = ConsumeQueueStore::load_in(Storage::Overlay, &root.join("consumequeue"), size)?;
    let file_size = crate::consume_queue::round_file_size(size);
    for (topic, queue_id, path, len) in queues.resized() {
        rep.findings.push(Finding {
            area: "consumequeue",
            kind: "damage",
            path: path.clone(),
            offset: (*len).min(file_size) as i64,
            what: format!(
                "{topic}/{queue_id}: the file is {len} bytes where the store's consume-queue files are {file_size}: \
                 it was {}. A writable open refuses the store (move its consumequeue directory aside, and the open \
                 rebuilds every queue from the commitlog); a read-only open reads it as far as it goes",
                if *len < file_size { "truncated" } else { "extended" }
            ),
        });
    }
    if let Some(index) = store.index.as_ref() {
        for why in index.left_out() {
            rep.findings.push(Finding {
                area: "index",
                kind: "stale",
                path: root.join("index"),
                offset: 0,
                what: why.clone(),
            });
        }
    }
    let all = queues.all();
    for cq in &all {
        cq.recover()?;
    }
    let mut seen = QueueMatches::new(all, i64::MIN);
    let delay_levels = crate::message::tags::parse_delay_levels(&config.dispatch.message_delay_level);
    let open = store.open_report();
    // A store open for writing elsewhere (a broker, another rmq) goes on growing while it is checked: what was
    // written after the read-only open settled its end is not part of this check. Past that end the log holds
    // appends in progress, and consume-queue and index entries, offsets and index slots may already name them.
    let horizon = live.map(|_| open.end_offset);
    // Records from where the open's dispatch restarted reach their queues (a queue without files is made):
    // only older ones of a queue without files are left out of it.
    let mut queueless = Queueless::new(store.recovery_report().dispatched_from);
    let walk = walk_log(log, &mut rep, &mut seen, &mut queueless, &delay_levels, horizon);
    if let Some(pid) = live {
        let who = if pid == 0 { "this process".to_owned() } else { format!("process {pid}") };
        rep.findings.push(Finding {
            area: "commitlog",
            kind: "note",
            path: root.join("lock"),
            offset: open.end_offset as i64,
            what: format!(
                "the store is open for writing ({who} holds its lock): what was written after commitlog offset {} \
                 (where this check's view of the log ends) is not checked, nor are entries, offsets and index slots \
                 that name it",
                open.end_offset
            ),
        });
    }
    for b in &walk {
        let torn = open.torn_bytes > 0 && b.offset == open.end_offset && live.is_none();
        rep.findings.push(Finding {
            area: "commitlog",
            kind: if torn { "torn" } else { "damage" },
            path: b.path.clone(),
            offset: b.offset as i64,
            what: if torn {
                format!("{}: an unfinished write left by a killed process ({} bytes)", b.reason, open.torn_bytes)
            } else {
                format!("{}; {} valid records follow", b.reason, b.following)
            },
        });
    }
    if open.removed_files > 0 {
        // The torn write's non-zero bytes run from the end to `end + torn_bytes`: past the end's segment, the
        // segments after it hold part of it (written into before the kill), not nothing.
        let size = log.file_size().max(1);
        let torn_past_segment = open.end_offset + open.torn_bytes > (open.end_offset / size + 1) * size;
        let what = if torn_past_segment {
            format!(
                "{} segment(s) after the end hold bytes of the torn write after it (written past the end before \
                 the process was killed); the open removes them",
                open.removed_files
            )
        } else {
            format!("{} segment(s) after the end hold nothing (pre-allocated)", open.removed_files)
        };
        rep.findings.push(Finding {
            area: "commitlog",
            kind: "note",
            path: log.queue().dir().to_owned(),
            offset: open.end_offset as i64,
            what,
        });
    }
    check_queues(skipped, &seen, &delay_levels, log, horizon, &mut rep);
    check_queueless(root, queueless, &mut rep);
    check_index(root, &config, log, horizon, &mut rep)?;
    check_checkpoint(root, &store, live.is_some(), &mut rep);
    if live.is_none() {
        check_offsets(root, &store, &mut rep);
    }
    rep.rocketmq_verdict = rocketmq_verdict(log, &store, &walk, unclean);
    rep.rmq_verdict = rmq_verdict(&store, strict_error, &walk, &rep.findings, live.is_some());
    if live.is_none() {
        // After the verdicts, which say the same in their own words.
        lacking_entries(root, &store, unclean, &mut rep);
    }
    Ok(rep)
}

/// Every record of the log with CRCs; the positions that are not records (past which the walk resynchronises
/// at the next valid record), each with the valid records after it. Up to `horizon` when there is one (a live
/// store: the end its read-only open settled), else to the end of the last segment.
fn walk_log(
    log: &CommitLog,
    rep: &mut CheckReport,
    seen: &mut QueueMatches,
    queueless: &mut Queueless,
    delay_levels: &[i64],
    horizon: Option<u64>,
) -> Vec<Break> {
    let queue = log.queue();
    let Some(last) = queue.last() else { return Vec::new() };
    let limit = horizon.unwrap_or(last.end()).min(last.end());
    let opts = CheckOptions { check_crc: true, ..log.check_options() };
    let mut cursor = Cursor::new(queue, queue.min_offset(), limit, opts);
    let mut breaks: Vec<Break> = Vec::new();
    loop {
        let at = cursor.offset();
        let (file, reason) = match cursor.next() {
            None | Some(Step::Missing { .. }) => break,
            Some(Step::Record(rec)) => {
                rep.records += 1;
                rep.record_bytes += u64::from(rec.header.total_size.unsigned_abs());
                if !seen.record(&rec, tags_code(&rec, delay_levels)) {
                    note_queueless(&rec, seen, queueless);
                }
                if !breaks.is_empty() {
                    let topic = decode_utf8_lossy(rec.header.topic(rec.bytes())).into_owned();
                    for b in &mut breaks {
                        b.following += 1;
                        *b.topics.entry(topic.clone()).or_default() += 1;
                    }
                }
                continue;
            }
            Some(Step::Blank { .. }) => continue,
            Some(Step::Zero { file, .. }) => (file, "nothing was written here".to_owned()),
            Some(Step::Partial { file, .. }) => (file, "record is truncated".to_owned()),
            Some(Step::Invalid { file, reason, .. }) => (file, reason),
        };
        // All zeros from here to the end of the last segment: the clean end of the data (only the data extents
        // the filesystem reports are read).
        if at >= limit || log.last_nonzero_end(at) <= at {
            break;
        }
        breaks.push(Break { offset: at, path: file.path().to_owned(), reason, following: 0, topics: BTreeMap::new() });
        match find_valid_record(queue, at + 1, limit, false) {
            Some(next) => cursor.seek(next),
            None => break,
        }
    }
    breaks
}

/// Whether a consume-queue or index entry naming commitlog `offset` lies past a live store's `horizon`.
fn past(horizon: Option<u64>, offset: i64) -> bool {
    horizon.is_some_and(|h| u64::try_from(offset).is_ok_and(|o| o >= h))
}

/// Every entry of every queue on disk against its record: a queue whose every entry the walk matched is done;
/// the others are checked entry by entry, to name the first bad one.
fn check_queues(
    skipped: Vec<PathBuf>,
    seen: &QueueMatches,
    delay_levels: &[i64],
    log: &CommitLog,
    horizon: Option<u64>,
    rep: &mut CheckReport,
) {
    for dir in skipped {
        rep.findings.push(Finding {
            area: "consumequeue",
            kind: "note",
            path: dir,
            offset: 0,
            what: "not a topic or queue-id directory; left alone".into(),
        });
    }
    let log_min = log.min_offset() as i64;
    let end = log.max_offset() as i64;
    for (cq, matched) in seen.matched() {
        let (min, max) = (cq.min_offset(), cq.max_offset());
        let expected = (min..max)
            .filter_map(|q| cq.entry(q))
            .filter(|e| !(e.is_pre_blank() || (0..log_min).contains(&e.offset)))
            .filter(|e| !past(horizon, e.offset))
            .count() as u64;
        if expected == matched {
            rep.cq_entries += (min..max).filter_map(|q| cq.entry(q)).filter(|e| !e.is_pre_blank()).count() as u64;
            continue;
        }
        check_queue(cq, delay_levels, log, log_min, end, horizon, rep);
    }
}

/// One queue, entry by entry against its record.
fn check_queue(
    cq: &crate::consume_queue::ConsumeQueue,
    delay_levels: &[i64],
    log: &CommitLog,
    log_min: i64,
    end: i64,
    horizon: Option<u64>,
    rep: &mut CheckReport,
) {
    {
        let (min, max) = (cq.min_offset(), cq.max_offset());
        let mut bad = 0u64;
        let mut first_bad: Option<(u64, String)> = None;
        for q in min..max {
            let Some(e) = cq.entry(q) else { continue };
            if e.is_pre_blank() || past(horizon, e.offset) {
                continue;
            }
            rep.cq_entries += 1;
            let problem = if e.offset >= end {
                Some(format!("points at commitlog offset {} at or past the end of the log ({end})", e.offset))
            } else if e.offset < log_min {
                None // removed by retention
            } else {
                match log.read(e.offset as u64) {
                    Ok(Some(rec)) => {
                        let bytes = rec.bytes();
                        let h = &rec.header;
                        let props = h.properties(bytes);
                        let code = EntryCode::of(
                            h.topic(bytes),
                            properties::get_raw(props, keys::TAGS),
                            properties::get_raw(props, keys::DELAY),
                            h.store_timestamp,
                            delay_levels,
                        );
                        let mut diffs = Vec::new();
                        if h.topic(bytes) != cq.topic().as_bytes() || h.queue_id != cq.queue_id() {
                            diffs.push(format!(
                                "the record is of {}/{}",
                                decode_utf8_lossy(h.topic(bytes)),
                                h.queue_id
                            ));
                        }
                        if h.queue_offset != q as i64 {
                            diffs.push(format!("the record has queue offset {}", h.queue_offset));
                        }
                        if h.total_size != e.size {
                            diffs.push(format!("size {} where the record has {}", e.size, h.total_size));
                        }
                        if !code.fits(e.tags_code) {
                            diffs.push(match code {
                                EntryCode::Exact(c) => format!("tagsCode {} where the record gives {c}", e.tags_code),
                                _ => "an entry where the record gets none (its DELAY is not a number)".to_owned(),
                            });
                        }
                        (!diffs.is_empty()).then(|| diffs.join(", "))
                    }
                    Ok(None) => Some(format!("no record at commitlog offset {}", e.offset)),
                    Err(err) => Some(err.to_string()),
                }
            };
            if let Some(p) = problem {
                bad += 1;
                first_bad.get_or_insert((q, p));
            }
        }
        if let Some((q, what)) = first_bad {
            let path = cq.files().iter().find(|f| q * 20 >= f.start() && q * 20 < f.end()).map(|f| f.path().to_owned());
            rep.findings.push(Finding {
                area: "consumequeue",
                kind: "stale",
                path: path.unwrap_or_else(|| cq.dir().to_owned()),
                offset: ((q * 20) % cq.file_size()) as i64,
                what: format!(
                    "{}/{}: entry {q}: {what}{}",
                    cq.topic(),
                    cq.queue_id(),
                    if bad > 1 { format!(" (and {} more entries)", bad - 1) } else { String::new() }
                ),
            });
        }
    }
}

/// Each index file whole, and every entry against its record.
fn check_index(
    root: &Path,
    config: &StoreConfig,
    log: &CommitLog,
    horizon: Option<u64>,
    rep: &mut CheckReport,
) -> Result<()> {
    if !config.dispatch.message_index_enable {
        return Ok(());
    }
    let index = IndexService::load_in(Storage::Overlay, &root.join("index"), config.index, crate::commitlog::now_ms)?;
    let files = index.files();
    for (i, f) in files.iter().enumerate() {
        let newest = i + 1 == files.len();
        if newest && horizon.is_some() {
            // Being written: its slots and chains change under the check (entries of messages dispatched after
            // its view of the log ended). Its entries are still checked against their records, below.
        } else if let Err(d) = f.check_header().and_then(|()| f.verify()) {
            rep.findings.push(Finding {
                area: "index",
                kind: "stale",
                path: f.path().to_owned(),
                offset: d.offset as i64,
                what: d.reason,
            });
            continue;
        }
        let mut bad = 0u64;
        let mut first: Option<(u64, String)> = None;
        let log_min = log.min_offset() as i64;
        let mut cached: Option<(i64, Option<Vec<i32>>)> = None;
        f.entries_back(&mut |n, hash, offset| {
            if past(horizon, offset) {
                return true;
            }
            rep.index_entries += 1;
            if offset < log_min && offset >= 0 {
                return true;
            }
            // Entries are in commitlog order, and a message's keys are neighbours: its record is read once.
            if cached.as_ref().is_none_or(|(o, _)| *o != offset) {
                let hashes = match log.read(offset.max(0) as u64) {
                    Ok(Some(rec)) => Some(key_hashes(&rec)),
                    _ => None,
                };
                cached = Some((offset, hashes));
            }
            let hashes = cached.as_ref().and_then(|(_, h)| h.as_ref());
            if !hashes.is_some_and(|h| h.contains(&hash)) {
                bad += 1;
                first.get_or_insert((f.entry_position(n), entry_mismatch(n, offset, hashes.is_some())));
            }
            true
        });
        if let Some((pos, what)) = first {
            rep.findings.push(Finding {
                area: "index",
                kind: "stale",
                path: f.path().to_owned(),
                offset: pos as i64,
                what: if bad > 1 { format!("{what} (and {} more entries)", bad - 1) } else { what },
            });
        }
    }
    Ok(())
}

/// Messages below `dispatched_from` (those an open does not dispatch again) of queues with no consume queue:
/// per topic and queue id, (messages in the log, first and last queue offset, commitlog offset of the first).
struct Queueless {
    dispatched_from: u64,
    queues: BTreeMap<(String, i32), (u64, i64, i64, u64)>,
}

impl Queueless {
    fn new(dispatched_from: u64) -> Self {
        Queueless { dispatched_from, queues: BTreeMap::new() }
    }
}

/// Counts `rec` in `queueless` when it is a message of a queue (one that takes a queue offset) whose consume
/// queue does not exist.
fn note_queueless(rec: &Record, seen: &QueueMatches, queueless: &mut Queueless) {
    let h = &rec.header;
    if !h.transaction_type().takes_queue_offset() || h.queue_offset < 0 || rec.offset() >= queueless.dispatched_from {
        return;
    }
    let topic = h.topic(rec.bytes());
    if seen.has_queue(topic, h.queue_id) {
        return;
    }
    let e = queueless.queues.entry((decode_utf8_lossy(topic).into_owned(), h.queue_id)).or_insert((
        0,
        h.queue_offset,
        h.queue_offset,
        rec.offset(),
    ));
    e.0 += 1;
    e.1 = e.1.min(h.queue_offset);
    e.2 = e.2.max(h.queue_offset);
}

/// Queues the log holds messages of but which have no consume queue. RocketMQ's `deleteTopic` leaves a topic's
/// messages in the log and removes its consume queues, and an open cannot tell that from consume-queue files
/// lost: it leaves those messages out of any queue and hands their queue offsets out again to new messages
/// (as RocketMQ does). A topic still configured in `config/topics.json` was not deleted: lost files, damage.
fn check_queueless(root: &Path, queueless: Queueless, rep: &mut CheckReport) {
    let configured: BTreeMap<String, i32> = std::fs::read(root.join("config").join("topics.json"))
        .ok()
        .and_then(|text| crate::offsets::topics::decode(&text).ok())
        .map(|d| d.topics.into_iter().map(|t| (t.name, t.read_queue_nums.max(t.write_queue_nums))).collect())
        .unwrap_or_default();
    for ((topic, queue_id), (n, first, last, offset)) in queueless.queues {
        let lost = configured.get(&topic).is_some_and(|&nums| queue_id < nums);
        let what = format!(
            "{topic}/{queue_id}: the log holds {n} messages of this queue (queue offsets {first}-{last}) and it has \
             no consume queue: {}; an open leaves them out of the queue, and new messages of it take their queue \
             offsets again",
            if lost {
                "its files were lost (the topic is configured in config/topics.json, so it was not deleted)"
            } else {
                "a deleted topic's, or its files were lost"
            }
        );
        rep.findings.push(Finding {
            area: "consumequeue",
            kind: if lost { "damage" } else { "note" },
            path: root.join("consumequeue").join(&topic).join(queue_id.to_string()),
            offset: offset as i64,
            what,
        });
    }
}

/// Records of the log that the consume queues or the index do not hold (files deleted or lost, or behind the
/// log), which the open dispatched: after a clean shutdown that is a stale derived file; after a crash it is
/// what a killed writer leaves (the derived files are flushed less often than the log), a note.
fn lacking_entries(root: &Path, store: &MessageStore, unclean: bool, rep: &mut CheckReport) {
    let rec = store.recovery_report();
    let (kind, why) = if unclean {
        ("note", "as a crash leaves them, the derived files being flushed after the log")
    } else {
        ("stale", "their files are missing or behind the log, after a clean shutdown")
    };
    let lacking = [
        (
            "consumequeue",
            rec.rebuilt_cq_entries,
            format!(
                "the consume queues lack {} entries of records in the log ({why}): an open dispatches them",
                rec.rebuilt_cq_entries
            ),
        ),
        (
            "index",
            rec.reindexed_keys,
            format!("the index lacks {} keys of records in the log ({why}): an open indexes them", rec.reindexed_keys),
        ),
    ];
    for (area, n, what) in lacking {
        if n > 0 {
            let (path, offset) = (root.join(area), rec.dispatched_from as i64);
            rep.findings.push(Finding { area, kind, path, offset, what });
        }
    }
}

/// The checkpoint's durable points against the data: a point later than the newest record means the
/// checkpoint was written for data that is not there (a lost or cut commitlog). An all-zero checkpoint beside
/// records is noted, unless a live writer holds the store (its first checkpoint flush is still to come).
fn check_checkpoint(root: &Path, store: &MessageStore, live: bool, rep: &mut CheckReport) {
    let v = store.checkpoint();
    let path = root.join("checkpoint");
    if !path.exists() {
        rep.findings.push(Finding {
            area: "checkpoint",
            kind: "note",
            path,
            offset: 0,
            what: "no checkpoint file".into(),
        });
        return;
    }
    let newest = store.commitlog.newest_store_timestamp();
    if !live && newest.is_some() && v.physic_msg_timestamp.max(v.logics_msg_timestamp).max(v.index_msg_timestamp) == 0 {
        // Not damage: a writer killed before its first checkpoint flush leaves it so. But it decides where an
        // open after a crash starts, which an operator weighing a store wants to know.
        rep.findings.push(Finding {
            area: "checkpoint",
            kind: "note",
            path: path.clone(),
            offset: 0,
            what: "the checkpoint holds no flush time (all zero) though the commitlog holds records: an open \
                   after a crash validates the commitlog from its first segment (as RocketMQ's does)"
                .into(),
        });
    }
    if let Some(newest) = newest {
        for (name, at, value) in
            [("physicMsgTimestamp", 0, v.physic_msg_timestamp), ("logicsMsgTimestamp", 8, v.logics_msg_timestamp)]
        {
            if value > newest {
                rep.findings.push(Finding {
                    area: "checkpoint",
                    kind: "damage",
                    path: path.clone(),
                    offset: at,
                    what: format!("{name} {value} is after the newest record's store time {newest}"),
                });
            }
        }
    }
}

/// Committed offsets against each queue's range.
fn check_offsets(root: &Path, store: &MessageStore, rep: &mut CheckReport) {
    let path = root.join("config").join("consumerOffset.json");
    let Ok(text) = std::fs::read(&path) else { return };
    let decoded = match crate::offsets::decode(&text) {
        Ok(d) => d,
        Err(e) => {
            rep.findings.push(Finding { area: "offsets", kind: "damage", path, offset: 0, what: format!("{e:?}") });
            return;
        }
    };
    for issue in &decoded.issues {
        rep.findings.push(Finding {
            area: "offsets",
            kind: "damage",
            path: path.clone(),
            offset: 0,
            what: format!("{issue:?}"),
        });
    }
    for (key, queues) in &decoded.table {
        let Some((topic, group)) = key.split_once('@') else { continue };
        for &(q, committed) in queues {
            let max = store.queues.find(topic, q).map_or(0, |cq| cq.max_offset() as i64);
            if committed > max {
                rep.findings.push(Finding {
                    area: "offsets",
                    kind: "damage",
                    path: path.clone(),
                    offset: 0,
                    what: format!(
                        "group {group} committed offset {committed} on {topic}/{q}, past the queue's end {max}"
                    ),
                });
            }
        }
    }
}

fn describe_topics(topics: &BTreeMap<String, u64>) -> String {
    let mut v: Vec<String> = topics.iter().map(|(t, n)| format!("{t} ({n})")).collect();
    if v.len() > 8 {
        let more = v.len() - 8;
        v.truncate(8);
        v.push(format!("{more} more topics"));
    }
    v.join(", ")
}

/// What RocketMQ 5.3.1's recovery would do: after a clean shutdown it validates the last three segments,
/// after a crash from the newest segment whose first record is older than the checkpoint; it cuts the log at
/// the first record it cannot read (CRC checked) and drops the consume-queue entries past the cut.
fn rocketmq_verdict(log: &CommitLog, store: &MessageStore, walk: &[Break], unclean: bool) -> String {
    let files = log.queue().files();
    let start = if unclean {
        store.recovery.checkpoint_restart.unwrap_or(log.min_offset())
    } else {
        files.len().checked_sub(3).and_then(|i| files.get(i)).map_or(log.min_offset(), |f| f.start())
    };
    let Some(first) = walk.iter().find(|b| b.offset >= start) else {
        if let Some(b) = walk.first() {
            return format!(
                "RocketMQ's recovery would not look at offset {} (it validates from {start}); the damage there \
                 would surface when a consumer reads those messages",
                b.offset
            );
        }
        return "clean: RocketMQ's recovery would keep every record".into();
    };
    if first.following == 0 {
        return format!(
            "RocketMQ would cut the commitlog at offset {} (the end of the data; nothing valid follows)",
            first.offset
        );
    }
    format!(
        "RocketMQ would truncate the commitlog at offset {}, dropping {} messages of topics {}",
        first.offset,
        first.following,
        describe_topics(&first.topics)
    )
}

/// What rmq's open would do, from the read-only opens this check ran.
/// With `live` (the store is open for writing elsewhere) an append in progress and records its writer has not
/// dispatched yet are that writer's business, not findings.
fn rmq_verdict(
    store: &MessageStore,
    strict_error: Option<String>,
    walk: &[Break],
    findings: &[Finding],
    live: bool,
) -> String {
    let open = store.open_report();
    let rec = store.recovery_report();
    let mut parts = Vec::new();
    if let Some(e) = strict_error {
        // The first sentence: the file, the offset and what is wrong (the rest lists the options, said below).
        let what = e.split(". ").next().unwrap_or(&e);
        parts.push(format!(
            "rmq refuses to open it (strict): {what}; recovery=\"truncate\" cuts the log there as RocketMQ does, \
             recovery=\"salvage\" skips {} damaged range(s) and keeps every valid record",
            open.damage.len()
        ));
    } else if let Some(b) = walk.iter().find(|b| b.offset < open.validated_from) {
        parts.push(format!(
            "rmq opens it; the damage at offset {} lies before the segments an open validates: get_message \
             reports those records and goes on",
            b.offset
        ));
    }
    if open.torn_bytes > 0 && !live {
        parts.push(format!("rmq discards the torn write at offset {} ({} bytes)", open.end_offset, open.torn_bytes));
    }
    if !rec.rebuilt_queues.is_empty() {
        parts.push(format!("rmq rebuilds consume queues {}", rec.rebuilt_queues.join(", ")));
    }
    let kept_queues = findings.iter().filter(|f| f.area == "consumequeue" && f.kind == "stale").count();
    if kept_queues > rec.rebuilt_queues.len() {
        parts.push(
            "older consume-queue entries that disagree with the log are kept by the open (it checks from the \
             checkpoint on); get_message reports and passes over them"
                .into(),
        );
    }
    if !rec.rebuilt_index_files.is_empty() && !live {
        parts.push(format!("rmq rebuilds {} index range(s) at open", rec.rebuilt_index_files.len()));
    }
    if findings.iter().any(|f| f.area == "index" && f.kind == "stale") {
        parts.push("rmq rebuilds a damaged index file from the commitlog the first time a query reads it".into());
    }
    if rec.rebuilt_cq_entries > 0 && !live {
        parts.push(format!("rmq dispatches {} missing consume-queue entries", rec.rebuilt_cq_entries));
    }
    if rec.reindexed_keys > 0 && !live {
        parts.push(format!("rmq indexes {} keys missing from the index", rec.reindexed_keys));
    }
    if parts.is_empty() {
        "clean: rmq opens it as it is".into()
    } else {
        parts.join("; ")
    }
}
