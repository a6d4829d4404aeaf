//! The index checked against the commitlog, and rebuilt from it where it fails.
//!
//! The index holds nothing of its own: every entry names a message by its commitlog offset, and every file
//! covers the commitlog range between its neighbours' (beginPhyOffset .. endPhyOffset, in file-name order).
//! So each failure has one repair, rebuilding the file's range from the commitlog:
//!
//! - **A file that breaks its own rules** ([`IndexFile::verify`]: chains, slots and header against the
//!   entries). After a crash the files not known to be whole are verified at open: the newest (a power loss
//!   loses its pages out of order) and any rolled after the checkpoint's indexMsgTimestamp. The files rolled
//!   at or before it were flushed when they rolled and are not verified at open (RocketMQ keeps them too);
//!   every file is verified the first time a query reads it, so opening never reads gigabytes of index. Every
//!   open checks each file's header against its first and last entries and the entry after the last (three
//!   reads a file), trusted or not.
//! - **An entry that does not point at a message with a key of its hash**, found by the query that reads it
//!   (and at open after a crash, for the newest file's entries from the checkpoint's restart point on).
//! - **A missing file**: keyed messages between two files' ranges, or before the first file's, that no file
//!   covers. Checked at open; between files this reads only the few unkeyed messages that lie there. A new
//!   file goes into the gap, or, when no file name fits between its neighbours', the file after it is rebuilt
//!   over the gap too.
//!
//! Each rebuild is reported: at open in `RecoveryReport::rebuilt_index_files`, later in `dispatch_issues()`.

use std::sync::Arc;

use super::matching::IndexMatches;
use super::query::record_has_key;
use super::MessageStore;
use crate::commitlog::cursor::{find_valid_record, Step};
use crate::commitlog::{CommitLog, Record};
use crate::error::Result;
use crate::index::{hash_continue, key_hash_from, Candidate, IndexDamage, IndexFile, IndexRequest, IndexService};
use crate::java::decode_utf8_lossy;
use crate::message::properties::{self, keys};
use crate::message::TransactionType;

/// The owned index keys of one record (what `build_index` is given for it).
struct Keys {
    topic: String,
    uniq_key: Option<String>,
    keys: Option<String>,
    transaction: TransactionType,
    offset: i64,
    store_timestamp: i64,
}

impl Keys {
    fn of(rec: &Record) -> Self {
        let bytes = rec.bytes();
        let h = &rec.header;
        let props = h.properties(bytes);
        Keys {
            topic: decode_utf8_lossy(h.topic(bytes)).into_owned(),
            uniq_key: properties::get_raw(props, keys::UNIQ_KEY).map(|v| decode_utf8_lossy(v).into_owned()),
            keys: properties::get_raw(props, keys::KEYS).map(|v| decode_utf8_lossy(v).into_owned()),
            transaction: h.transaction_type(),
            offset: h.physical_offset,
            store_timestamp: h.store_timestamp,
        }
    }

    fn request(&self) -> IndexRequest<'_> {
        IndexRequest {
            topic: &self.topic,
            commitlog_offset: self.offset,
            store_timestamp: self.store_timestamp,
            transaction: self.transaction,
            uniq_key: self.uniq_key.as_deref(),
            keys: self.keys.as_deref(),
        }
    }

    /// Whether `build_index` puts any key for this record.
    fn indexed(&self) -> bool {
        self.transaction != TransactionType::Rollback
            && (self.uniq_key.is_some() || self.keys.as_deref().is_some_and(|k| k.split(' ').any(|t| !t.is_empty())))
    }
}

/// The stored keyHashes of the record's index keys (its UNIQ_KEY, each non-empty KEYS token), in order.
pub(super) fn key_hashes(rec: &Record) -> Vec<i32> {
    let bytes = rec.bytes();
    let h = &rec.header;
    let props = h.properties(bytes);
    let mut out = Vec::new();
    key_hashes_into(
        topic_hash(h.topic(bytes)),
        properties::get_raw(props, keys::UNIQ_KEY),
        properties::get_raw(props, keys::KEYS),
        &mut out,
    );
    out
}

/// The hash a topic's keys are hashed on from (`topic_hash` of [`key_hash_from`]).
pub(super) fn topic_hash(topic: &[u8]) -> i32 {
    hash_continue(0, &decode_utf8_lossy(topic))
}

/// [`key_hashes`] from a record's topic hash and its UNIQ_KEY and KEYS values, appended to `out`.
pub(super) fn key_hashes_into(topic_hash: i32, uniq_key: Option<&[u8]>, keys: Option<&[u8]>, out: &mut Vec<i32>) {
    if let Some(u) = uniq_key {
        out.push(key_hash_from(topic_hash, &decode_utf8_lossy(u)));
    }
    if let Some(k) = keys {
        out.extend(decode_utf8_lossy(k).split(' ').filter(|t| !t.is_empty()).map(|t| key_hash_from(topic_hash, t)));
    }
}

/// Whether one of the record's index keys (its UNIQ_KEY, each non-empty KEYS token) has the stored keyHash
/// `hash`. Borrows the record's bytes (no copy for valid UTF-8): checks of every index entry call it.
pub(super) fn has_key_hash(rec: &Record, hash: i32) -> bool {
    let bytes = rec.bytes();
    let h = &rec.header;
    let topic = decode_utf8_lossy(h.topic(bytes));
    let topic_hash = hash_continue(0, &topic);
    let props = h.properties(bytes);
    if properties::get_raw(props, keys::UNIQ_KEY)
        .is_some_and(|u| key_hash_from(topic_hash, &decode_utf8_lossy(u)) == hash)
    {
        return true;
    }
    properties::get_raw(props, keys::KEYS)
        .is_some_and(|k| decode_utf8_lossy(k).split(' ').any(|t| !t.is_empty() && key_hash_from(topic_hash, t) == hash))
}

/// Offers the records starting in `[from, to]` (commitlog offsets, both inclusive) to `visit`, in order,
/// until it returns false. Bytes that are not a record are stepped over to the next valid record (dispatch
/// reports them); a segment removed by retention is stepped over to the log's start.
pub(super) fn each_record(
    log: &CommitLog,
    from: u64,
    to: u64,
    visit: &mut dyn FnMut(&Record) -> Result<bool>,
) -> Result<()> {
    let limit = log.max_offset();
    let mut cursor = log.cursor(from.max(log.min_offset()), limit);
    while cursor.offset() <= to {
        let at = cursor.offset();
        let file = match cursor.next() {
            None => return Ok(()),
            Some(Step::Record(rec)) => {
                if let Some(to) = log.skip_at(at) {
                    cursor.seek(to);
                    continue;
                }
                if !visit(&rec)? {
                    return Ok(());
                }
                continue;
            }
            Some(Step::Blank { .. }) => continue,
            Some(Step::Missing { offset }) if offset < log.min_offset() => {
                cursor.seek(log.min_offset());
                continue;
            }
            Some(Step::Missing { .. } | Step::Partial { .. }) => return Ok(()),
            Some(Step::Zero { file, .. } | Step::Invalid { file, .. }) => file,
        };
        let next = log
            .skip_at(at)
            .or_else(|| find_valid_record(log.queue(), at + 1, file.end().min(limit), false))
            .unwrap_or(file.end());
        cursor.seek(next);
    }
    Ok(())
}

/// Takes the index back to the end of the commitlog when it holds entries past it: the log was cut in the
/// middle (a truncating open drops every record after the damage) or lost pages the index kept. The files
/// whose entries all lie past the end are removed, newest first, and the file spanning the end is rebuilt up
/// to it and becomes the newest. Without this, the files past a cut outlived it (`rmq check`: stale entries),
/// and queries and opens kept meeting entries past the end. Reads nothing when no entry points past the end.
/// Returns one line per file removed or rebuilt. A rebuild that fails (a full disk) fails the open, unlike the
/// repairs of [`check_at_open`]: the spanning file is the newest, so new entries would go in after the ones
/// past the end, and once the log grew past them no open would see them again (they would name whatever
/// record came to lie there). The files already removed stay removed; the next open rebuilds the spanning file.
pub(super) fn cut_at_end(index: &IndexService, log: &CommitLog) -> Result<Vec<String>> {
    let end = log.max_offset();
    if index.last_indexed_offset().is_none_or(|o| o < end as i64) {
        return Ok(Vec::new());
    }
    // The file spanning the end is the first (oldest first) whose entries reach it; one whose entries all lie
    // past the end goes with the files after it. (Read off the endPhyOffsets: a damaged beginPhyOffset further
    // on cannot hide a file past the end. A damaged endPhyOffset before it only makes the rebuild longer.)
    let files = index.files();
    let Some(first) = files.iter().position(|f| f.has_entries() && f.end_phy_offset() >= end as i64) else {
        return Ok(Vec::new());
    };
    let keep = if files[first].begin_phy_offset() >= end as i64 { first } else { first + 1 };
    let mut out: Vec<String> = index
        .remove_after(keep)?
        .iter()
        .map(|p| format!("{}: every entry points past the end of the commitlog ({end}); removed", p.display()))
        .collect();
    if keep > first {
        let files = index.files();
        let what = format!("{}: entries point past the end of the commitlog ({end})", files[first].path().display());
        let range = rebuild(index, log, &files, first, true)?;
        out.push(rebuilt_line(Ok(range), &what));
    }
    Ok(out)
}

/// The report of a rebuild of `what`: the commitlog range read, or why it failed.
fn rebuilt_line(result: Result<(u64, u64)>, what: &str) -> String {
    match result {
        Ok((from, to)) => format!("{what}; rebuilt from commitlog [{from}, {to}]"),
        Err(e) => format!("{what}; could not be rebuilt: {e}"),
    }
}

/// Rebuilds the range of file `at` of `files` (replacing it) or, with `target` false, the missing range
/// between `files[at - 1]` and `files[at]` (inserting new files). Returns the commitlog range read.
fn rebuild(
    index: &IndexService,
    log: &CommitLog,
    files: &[Arc<IndexFile>],
    at: usize,
    target: bool,
) -> Result<(u64, u64)> {
    let prev = at.checked_sub(1).and_then(|p| files.get(p));
    let next = if target { files.get(at + 1) } else { files.get(at) };
    let from = prev.map_or(log.min_offset(), |p| p.end_phy_offset().max(0) as u64);
    let to = next.map_or(u64::MAX, |n| n.begin_phy_offset().max(0) as u64);
    let replaced = if target { files.get(at) } else { None };
    index.rebuild(replaced, prev, next, &mut |sink| {
        each_record(log, from, to, &mut |rec| {
            let k = Keys::of(rec);
            sink(&k.request())?;
            Ok(true)
        })
    })?;
    Ok((from, to.min(log.max_offset())))
}

/// What a query for `topic`/`key` in `[begin, end]` makes of the message at `offset` that an entry with
/// keyHash `hash` points at; `candidate`: the entry has the queried key's hash and time. The message must
/// carry a key of that hash (a `Reject` when it is another key of the same hash or outside the window);
/// otherwise the entry is damaged. An accepted message comes back with the verdict (read once).
#[allow(clippy::too_many_arguments)]
fn judge_entry(
    log: &CommitLog,
    offset: i64,
    hash: i32,
    candidate: bool,
    topic: &str,
    key: &str,
    begin: i64,
    end: i64,
) -> (Candidate, Option<Record>) {
    let Ok(at) = u64::try_from(offset) else {
        return (Candidate::Damaged("a negative commitlog offset".into()), None);
    };
    if at < log.min_offset() {
        return (Candidate::Reject, None); // removed by retention
    }
    let verdict = match log.read(at) {
        Ok(Some(rec)) => {
            let ts = rec.header.store_timestamp;
            if candidate && record_has_key(&rec, topic, key) {
                if ts < begin || ts > end {
                    Candidate::Reject
                } else {
                    return (Candidate::Accept, Some(rec));
                }
            } else if has_key_hash(&rec, hash) {
                Candidate::Reject
            } else {
                Candidate::Damaged("the message there has no key of the entry's hash".into())
            }
        }
        Ok(None) if at >= log.max_offset() => Candidate::Damaged("points past the end of the commitlog".into()),
        Ok(None) => Candidate::Damaged("no message starts there".into()),
        Err(e) => Candidate::Damaged(format!("no message starts there ({e})")),
    };
    (verdict, None)
}

/// The first entry of `file`, from the newest back to the first whose message starts before `down_to` (and
/// at least the newest), that does not point at a message with a key of its hash: `(byte position, reason)`.
/// A message's entries lie next to each other (one per key), so its key hashes are worked out once.
fn check_entries(file: &IndexFile, log: &CommitLog, down_to: u64) -> Option<(u64, String)> {
    let mut bad = None;
    let mut first = true;
    // The last message read: its offset and its key hashes (None: no message starts there).
    let mut last: Option<(i64, Option<Vec<i32>>)> = None;
    file.entries_back(&mut |n, hash, offset| {
        let at = u64::try_from(offset).unwrap_or(u64::MAX);
        if !first && at < down_to {
            return false;
        }
        first = false;
        if last.as_ref().is_none_or(|(o, _)| *o != offset) {
            let hashes = match log.read(at) {
                Ok(Some(rec)) => Some(key_hashes(&rec)),
                _ => None,
            };
            last = Some((offset, hashes));
        }
        let ok = match last.as_ref().and_then(|(_, h)| h.as_ref()) {
            Some(hashes) => hashes.contains(&hash),
            None => at < log.min_offset() && offset >= 0,
        };
        if !ok {
            let found = last.as_ref().is_some_and(|(_, h)| h.is_some());
            bad = Some((file.entry_position(n) + 4, entry_mismatch(n, offset, found)));
        }
        ok
    });
    bad
}

/// Why entry `n`, pointing at commitlog `offset`, does not hold: no message starts there, or (`found`) the one
/// there has no key of the entry's hash, which is damage to the entry or to the message's keys (a record's
/// properties carry no CRC, so changed KEYS or UNIQ_KEY bytes are seen only here).
pub(super) fn entry_mismatch(n: i32, offset: i64, found: bool) -> String {
    if found {
        format!(
            "entry {n} (commitlog offset {offset}): the message there has no key of the entry's hash (the entry \
             is damaged, or the message's keys are: its properties carry no CRC)"
        )
    } else {
        format!("entry {n} (commitlog offset {offset}): no message starts there")
    }
}

/// The open's check of the index (module docs). `restart`: after a crash, where dispatch restarts (entries
/// from there on are checked against their messages); None after a clean close. `trusted_to`: after a crash,
/// the checkpoint's `indexMsgTimestamp`. A file rolled before the newest (full, and flushed when it was rolled)
/// whose endTimestamp is at or before it is kept as it is, not read at all: RocketMQ keeps those files after a
/// crash and deletes the newer ones (§7.5); rmq checks the newer ones and rebuilds what fails. (A trusted file
/// damaged by something other than the crash is still found by the first query that reads it.) `walked`: the
/// open's walk from `restart`; a file whose checked entries it matched whole needs no per-entry check.
/// `pre_verified`: a file's [`IndexFile::verify`], already worked out (the file unchanged since). Returns
/// what was rebuilt and why, one line per file or range, and how many files were trusted.
pub(super) fn check_at_open(
    index: &IndexService,
    log: &CommitLog,
    restart: Option<u64>,
    trusted_to: Option<i64>,
    walked: Option<&IndexMatches>,
    pre_verified: Option<(&Arc<IndexFile>, &std::result::Result<(), IndexDamage>)>,
) -> Result<(Vec<String>, u64)> {
    let mut rebuilt = Vec::new();
    // A rebuild that fails (a full disk) is reported and the open goes on: a query tries again later.
    let mut repair = |files: &[Arc<IndexFile>], at: usize, target: bool, what: String| -> bool {
        let mut result = rebuild(index, log, files, at, target);
        if !target && matches!(result, Err(crate::error::Error::InvalidConfig(_))) {
            // No file name fits between the two files (named by the millisecond they were created in, they
            // may be 1 ms apart): the file after the gap is rebuilt over the gap and its own range instead.
            result = rebuild(index, log, files, at, true);
        }
        let ok = result.is_ok();
        rebuilt.push(rebuilt_line(result, &what));
        ok
    };
    let trusted = |files: &[Arc<IndexFile>], at: usize| {
        trusted_to.is_some_and(|ts| {
            at + 1 < files.len() && files.get(at).is_some_and(|f| f.has_entries() && f.end_timestamp() <= ts)
        })
    };
    let trusted_count = {
        let files = index.files();
        (0..files.len()).filter(|&at| trusted(&files, at)).count() as u64
    };
    // After a crash, every file with entries that is not trusted, newest first: the newest may have lost
    // pages out of order, and one rolled after the checkpoint's indexMsgTimestamp is not known to be whole.
    if let Some(restart) = restart {
        let mut at = index.files().len();
        while at > 0 {
            at -= 1;
            let files = index.files();
            let Some(f) = files.get(at) else { continue };
            // A file rebuilt since the load (`cut_at_end`) is whole.
            if !f.has_entries() || f.is_checked() || trusted(&files, at) {
                continue;
            }
            let verified = match pre_verified {
                Some((pf, r)) if Arc::ptr_eq(pf, f) => r.clone(),
                _ => f.verify(),
            };
            let found = match verified {
                Err(d) => Some((d.offset, d.reason)),
                Ok(()) if walked.is_some_and(|w| w.verified(f)) => None,
                Ok(()) => check_entries(f, log, restart),
            };
            match found {
                None => f.mark_checked(),
                Some((pos, reason)) => {
                    repair(&files, at, true, format!("{} at byte {pos}: {reason}", f.path().display()));
                }
            }
        }
    }
    // Each file's header against its entries, oldest first, trusted files too (three entry reads a file): the
    // ranges below are read off the headers, and a damaged header found only by a later open would make that
    // open repair what this one let stand.
    let mut at = 0;
    loop {
        let files = index.files();
        let Some(f) = files.get(at) else { break };
        if let Err(d) = f.check_header() {
            repair(&files, at, true, format!("{} at byte {}: {}", f.path().display(), d.offset, d.reason));
        }
        at += 1;
    }
    // Keyed messages that no file covers: before the first file, and between two files.
    let mut rounds = index.files().len() + 1;
    while rounds > 0 {
        rounds -= 1;
        let files: Vec<Arc<IndexFile>> = index.files();
        let with_entries: Vec<usize> = (0..files.len()).filter(|&i| files[i].has_entries()).collect();
        let mut gap = None;
        for (k, &i) in with_entries.iter().enumerate() {
            let begin = files[i].begin_phy_offset().max(0) as u64;
            let (from, skip_first) = match k.checked_sub(1).map(|p| with_entries[p]) {
                None => (log.min_offset(), false),
                Some(p) => (files[p].end_phy_offset().max(0) as u64, true),
            };
            if from >= begin {
                continue;
            }
            let mut keyed = None;
            let mut skip = skip_first;
            each_record(log, from, begin.saturating_sub(1), &mut |rec| {
                if std::mem::take(&mut skip) && rec.offset() == from {
                    return Ok(true);
                }
                if rec.offset() >= begin {
                    return Ok(false);
                }
                if Keys::of(rec).indexed() {
                    keyed = Some(rec.offset());
                    return Ok(false);
                }
                Ok(true)
            })?;
            if let Some(first) = keyed {
                gap = Some((i, first, begin));
                break;
            }
        }
        let Some((i, first, begin)) = gap else { break };
        let what = format!(
            "no index file covered the keyed message at commitlog offset {first} (before {}, which begins at \
             {begin}): a file was lost",
            files[i].path().display()
        );
        if !repair(&files, i, false, what) {
            break;
        }
    }
    Ok((rebuilt, trusted_count))
}

impl MessageStore {
    /// [`IndexService::query_checked`] with the store's judge; a damaged file is rebuilt from the commitlog,
    /// reported in `dispatch_issues()`, and the query asked again.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn query_index(
        &self,
        index: &IndexService,
        topic: &str,
        key: &str,
        max_num: usize,
        begin: i64,
        end: i64,
        found: &mut Vec<Record>,
    ) -> Result<crate::index::QueryOffsetResult> {
        let hash = key_hash_from(hash_continue(0, topic), key);
        let mut attempts = index.files().len() + 2;
        loop {
            found.clear();
            let mut judge = |offset: i64, hash: i32, candidate: bool| {
                let (c, rec) = judge_entry(&self.commitlog, offset, hash, candidate, topic, key, begin, end);
                found.extend(rec);
                c
            };
            // Entries keep whole seconds from the file's begin, so an entry reads up to 999 ms early: widen
            // the window by that much and check each candidate's real store time instead.
            match index.query_checked(topic, key, max_num, begin.saturating_sub(999), end, &mut judge) {
                Ok(res) => return Ok(res),
                Err((file, damage)) => {
                    let files = index.files();
                    let Some(at) = files.iter().position(|f| Arc::ptr_eq(f, &file)) else { continue };
                    let what =
                        format!("index file {} at byte {}: {}", file.path().display(), damage.offset, damage.reason);
                    match rebuild(index, &self.commitlog, &files, at, true) {
                        Ok((from, to)) => {
                            self.report_damage(from as i64, format!("{what}; rebuilt from commitlog [{from}, {to}]"))
                        }
                        Err(e) => {
                            // Not rebuilt (a full disk): said, and the files answer as they are.
                            let at = file.begin_phy_offset();
                            self.report_damage(at, format!("{what}; could not be rebuilt ({e}), keys may be missing"));
                            found.clear();
                            let mut accept = |offset: i64| {
                                let (_, rec) = judge_entry(&self.commitlog, offset, hash, true, topic, key, begin, end);
                                let ok = rec.is_some();
                                found.extend(rec);
                                ok
                            };
                            return Ok(index.query(topic, key, max_num, begin.saturating_sub(999), end, &mut accept));
                        }
                    }
                    attempts -= 1;
                    if attempts == 0 {
                        return Err(crate::error::Error::Corruption {
                            path: file.path().to_owned(),
                            offset: damage.offset as i64,
                            reason: format!("{}; still damaged after a rebuild", damage.reason),
                        });
                    }
                }
            }
        }
    }
}
