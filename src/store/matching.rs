//! The derived files matched against the records in one walk over the commitlog.
//!
//! Each record, read once and in order, gives the consume-queue entry and the index keys it should have; they are
//! compared with what the files hold, instead of reading a record back (a random read) for each entry. `rmq
//! check` matches every entry this way; the open after a crash matches the entries written after the
//! checkpoint. A walk only ever spares the per-entry checks (`open::verify_tail`, `index_check::check_entries`,
//! `verify::check_queue`) for a queue or an index file it matched whole, on exactly the entries those checks
//! look at; anything else (an entry that does not name its record, one the walk did not meet) sends the queue
//! or file to its per-entry check, which names the bad entry as before.

use std::collections::HashMap;
use std::sync::Arc;

use super::dispatch::StoreProps;
use super::index_check::{key_hashes_into, topic_hash};
use crate::commitlog::Record;
use crate::consume_queue::store::ConsumeQueueStore;
use crate::consume_queue::{ConsumeQueue, CqEntry};
use crate::index::{IndexFile, IndexService};
use crate::java;
use crate::message::tags::{tags_code_of, SCHEDULE_TOPIC};
use crate::message::TransactionType;

/// The tagsCode a record's consume-queue entry must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EntryCode {
    /// The tagsCode dispatch computes (the Java hash of TAGS, or 0).
    Exact(i64),
    /// A SCHEDULE_TOPIC_XXXX record with a delay level: its tagsCode is the delivery time, computed with the
    /// delay levels in force when it was dispatched, which the store does not keep (a broker's
    /// `messageDelayLevel`). Any value fits: RocketMQ never computes it again, and its schedule service
    /// delivers at once an entry whose time is past now plus its level's delay (`correctDeliverTimestamp`).
    DeliveryTime,
    /// A SCHEDULE_TOPIC_XXXX record whose DELAY is not a number: it gets no entry.
    NoEntry,
}

impl EntryCode {
    /// The code of a record of `topic` with these TAGS and DELAY values, stored at `store_timestamp`.
    pub(super) fn of(
        topic: &[u8],
        tags: Option<&[u8]>,
        delay: Option<&[u8]>,
        store_timestamp: i64,
        delay_levels: &[i64],
    ) -> Self {
        match tags_code_of(topic, tags, delay, store_timestamp, delay_levels) {
            Err(_) => EntryCode::NoEntry,
            Ok(_) if topic == SCHEDULE_TOPIC.as_bytes() && delay.is_some_and(positive_level) => EntryCode::DeliveryTime,
            Ok(code) => EntryCode::Exact(code),
        }
    }

    /// Whether an entry holding `tags_code` fits.
    pub(super) fn fits(self, tags_code: i64) -> bool {
        match self {
            EntryCode::Exact(code) => code == tags_code,
            EntryCode::DeliveryTime => true,
            EntryCode::NoEntry => false,
        }
    }

    /// Whether dispatch writes an entry for the record.
    pub(super) fn has_entry(self) -> bool {
        self != EntryCode::NoEntry
    }
}

fn positive_level(delay: &[u8]) -> bool {
    java::parse_int(&java::decode_utf8_lossy(delay)).is_some_and(|level| level > 0)
}

/// The [`EntryCode`] of `rec`.
pub(super) fn tags_code(rec: &Record, delay_levels: &[i64]) -> EntryCode {
    let h = &rec.header;
    let bytes = rec.bytes();
    let props = StoreProps::of(h.properties(bytes));
    EntryCode::of(h.topic(bytes), props.tags, props.delay, h.store_timestamp, delay_levels)
}

/// Whether consume-queue entry `q` of `cq` names `rec` exactly: the record is of the queue's topic and queue
/// id, has queue offset `q`, and the entry holds its commitlog offset, size and a tagsCode that fits (`code`,
/// from [`tags_code`]). The one rule both the walk and the per-entry check apply.
pub(super) fn entry_names_record(cq: &ConsumeQueue, q: u64, e: &CqEntry, rec: &Record, code: EntryCode) -> bool {
    let h = &rec.header;
    e.offset == rec.offset() as i64
        && e.size == h.total_size
        && h.queue_id == cq.queue_id()
        && u64::try_from(h.queue_offset) == Ok(q)
        && h.topic(rec.bytes()) == cq.topic().as_bytes()
        && code.fits(e.tags_code)
}

/// Consecutive entries `from..next` of one queue that the walk matched, and whether one of their records was
/// stored before the checkpoint's durable time.
#[derive(Debug, Clone, Copy)]
struct Run {
    from: u64,
    next: u64,
    old: bool,
}

struct QueueMatch {
    cq: Arc<ConsumeQueue>,
    matched: u64,
    run: Option<Run>,
    /// The queue's maxPhysicOffset when the walk began.
    end: i64,
}

/// Consume queues by (topic, queue id), and what the walk found of each: how many entries name their record
/// exactly, and the newest run of consecutive such entries.
pub(super) struct QueueMatches {
    queues: Vec<QueueMatch>,
    by_key: HashMap<(Vec<u8>, i32), usize>,
    last: Option<usize>,
    /// Records stored before this time were flushed by the checkpoint (`verify_tail`'s stop).
    durable_ts: i64,
}

impl QueueMatches {
    /// Matches for `queues`; `durable_ts`: the checkpoint's durable time (see [`QueueMatches::tail_verified`]).
    pub(super) fn new(queues: impl IntoIterator<Item = Arc<ConsumeQueue>>, durable_ts: i64) -> Self {
        let mut m = QueueMatches { queues: Vec::new(), by_key: HashMap::new(), last: None, durable_ts };
        for cq in queues {
            m.by_key.insert((cq.topic().as_bytes().to_vec(), cq.queue_id()), m.queues.len());
            let end = cq.max_physic_offset();
            m.queues.push(QueueMatch { cq, matched: 0, run: None, end });
        }
        m
    }

    /// Each queue with the number of its entries that the walk found to name their record exactly.
    pub(super) fn matched(&self) -> impl Iterator<Item = (&Arc<ConsumeQueue>, u64)> {
        self.queues.iter().map(|m| (&m.cq, m.matched))
    }

    /// Offers one record and its tagsCode ([`tags_code`]): its consume-queue entry, if the queue holds one at
    /// the record's queue offset, is compared with it. Returns whether dispatch, with the queues as they were
    /// when the walk began, writes no entry for it: it gets none, or its queue covers it (the record ends at
    /// or before the queue's maxPhysicOffset: `ConsumeQueue::append`'s duplicate rule, spec §6.2).
    /// Whether `topic`/`queue_id` has a consume queue here.
    pub(super) fn has_queue(&self, topic: &[u8], queue_id: i32) -> bool {
        self.by_key.contains_key(&(topic.to_vec(), queue_id))
    }

    pub(super) fn record(&mut self, rec: &Record, code: EntryCode) -> bool {
        let h = &rec.header;
        if !matches!(h.transaction_type(), TransactionType::NotType | TransactionType::Commit) {
            return true;
        }
        if h.queue_offset < 0 {
            return false;
        }
        let topic = h.topic(rec.bytes());
        let hit = self.last.filter(|&i| {
            let cq = &self.queues[i].cq;
            cq.queue_id() == h.queue_id && cq.topic().as_bytes() == topic
        });
        let Some(i) = hit.or_else(|| self.by_key.get(&(topic.to_vec(), h.queue_id)).copied()) else { return false };
        self.last = Some(i);
        let q = h.queue_offset as u64;
        let m = &mut self.queues[i];
        let covered = CqEntry { offset: rec.offset() as i64, size: h.total_size, tags_code: 0 }.end() <= m.end;
        // No entry there: past the queue's end (dispatch adds it) or below its start.
        let Some(e) = m.cq.entry(q) else { return covered };
        if !entry_names_record(&m.cq, q, &e, rec, code) {
            m.run = None;
            return covered;
        }
        m.matched += 1;
        let old = h.store_timestamp < self.durable_ts;
        m.run = match m.run {
            Some(r) if r.next == q => Some(Run { next: q + 1, old: r.old || old, ..r }),
            _ => Some(Run { from: q, next: q + 1, old }),
        };
        covered
    }

    /// Whether `queues` are the queues the walk began with, each still at the maxPhysicOffset it had then.
    fn unchanged(&self, queues: &ConsumeQueueStore) -> bool {
        let all = queues.all();
        all.len() == self.queues.len()
            && all.iter().all(|cq| {
                let key = (cq.topic().as_bytes().to_vec(), cq.queue_id());
                self.by_key.get(&key).is_some_and(|&i| {
                    let m = &self.queues[i];
                    Arc::ptr_eq(&m.cq, cq) && m.end == cq.max_physic_offset()
                })
            })
    }

    /// Whether the walk settles `open::verify_tail` for `cq` (which would then find nothing): the entries it
    /// checks, from the newest back to the first whose record was stored before the durable time (or to the
    /// queue's start, a pre-blank, or an entry below the log's start `log_min`), all name their records.
    pub(super) fn tail_verified(&self, cq: &ConsumeQueue, log_min: i64) -> bool {
        let (min, max) = (cq.min_offset(), cq.max_offset());
        if max <= min {
            return true;
        }
        let key = (cq.topic().as_bytes().to_vec(), cq.queue_id());
        let Some(Run { from, next, old }) = self.by_key.get(&key).and_then(|&i| self.queues[i].run) else {
            return false;
        };
        next == max
            && (old || from <= min || cq.entry(from - 1).is_some_and(|e| e.is_pre_blank() || e.offset < log_min))
    }
}

/// The entries of one index file the open checks, and how far the walk got through them.
struct FileMatch {
    file: Arc<IndexFile>,
    /// The next entry number to meet.
    next: i32,
    /// The newest entry number to check.
    last: i32,
    /// No entry so far failed.
    whole: bool,
}

/// Index entries matched against the records: each entry (in commitlog order) must point at a record the walk
/// meets, which has a key of the entry's hash.
pub(super) struct IndexMatches {
    /// The files to match, until the walk's first record says where it starts.
    pending: Vec<Arc<IndexFile>>,
    files: Vec<FileMatch>,
}

impl IndexMatches {
    /// Matches for `files`. The walk's first record sets the entries matched: for each file, from the newest
    /// back to the first whose message starts before that record, and at least the newest. A walk that starts
    /// at or before `index_check::check_entries`' `down_to` thus covers every entry that check looks at.
    pub(super) fn new(files: impl IntoIterator<Item = Arc<IndexFile>>) -> Self {
        IndexMatches { pending: files.into_iter().collect(), files: Vec::new() }
    }

    fn start(&mut self, down_to: u64) {
        for file in std::mem::take(&mut self.pending) {
            let (mut first, mut last) = (None, None);
            file.entries_back(&mut |n, _, offset| {
                let at = u64::try_from(offset).unwrap_or(u64::MAX);
                if last.is_some() && at < down_to {
                    return false;
                }
                last.get_or_insert(n);
                first = Some(n);
                true
            });
            let (next, last) = match (first, last) {
                (Some(a), Some(b)) => (a, b),
                _ => (1, 0),
            };
            self.files.push(FileMatch { file, next, last, whole: true });
        }
    }

    /// Offers one record at commitlog offset `o`: the files' next entries that point at it must carry one of its
    /// keys' hashes (`has_key_hash`); an entry pointing before it points at no record the walk met.
    pub(super) fn record(&mut self, o: u64, has_key_hash: &mut dyn FnMut(i32) -> bool) {
        if !self.pending.is_empty() {
            self.start(o);
        }
        let o = o as i64;
        for f in &mut self.files {
            while f.whole && f.next <= f.last {
                let Some((hash, at)) = f.file.entry_key(f.next) else {
                    f.whole = false;
                    break;
                };
                if at > o {
                    break;
                }
                if at < o || !has_key_hash(hash) {
                    f.whole = false;
                    break;
                }
                f.next += 1;
            }
        }
    }

    /// Whether every entry of `file` that the open checks was met and names its record.
    pub(super) fn verified(&self, file: &Arc<IndexFile>) -> bool {
        self.files.iter().any(|f| Arc::ptr_eq(&f.file, file) && f.whole && f.next > f.last)
    }
}

/// What the walk matches: the consume queues and, when the index is on, the index files; and what dispatch would
/// make of the records it met.
pub(super) struct Matches {
    pub queues: QueueMatches,
    pub index: Option<IndexMatches>,
    /// The commitlog offset of the first record met.
    pub from: Option<u64>,
    /// With the index on: the file `build_index` writes to and its endPhyOffset when the walk began.
    index_writing: Option<Option<(Arc<IndexFile>, i64)>>,
    /// The first record met that dispatch would write something for (or report), and the store time of the
    /// last record met.
    pending: Option<u64>,
    last_timestamp: i64,
    /// The last topic's key hash base, and a buffer for a record's key hashes.
    topic_hash: Option<(Vec<u8>, i32)>,
    hashes: Vec<i32>,
}

impl Matches {
    /// Matches for the queues and, when the index is on, its files (`index`: the service and the files to match).
    pub(super) fn new(queues: QueueMatches, index: Option<(&IndexService, IndexMatches)>) -> Self {
        let (index_writing, index) = match index {
            Some((service, files)) => (Some(service.writing()), Some(files)),
            None => (None, None),
        };
        Matches {
            queues,
            index,
            from: None,
            index_writing,
            pending: None,
            last_timestamp: 0,
            topic_hash: None,
            hashes: Vec::new(),
        }
    }

    /// Offers one record (the walk's records come in commitlog order) to the queues and the index. Its
    /// properties are read once for both.
    pub(super) fn record(&mut self, rec: &Record, delay_levels: &[i64]) {
        self.from.get_or_insert(rec.offset());
        let h = &rec.header;
        let bytes = rec.bytes();
        let topic = h.topic(bytes);
        let props = StoreProps::of(h.properties(bytes));
        let code = EntryCode::of(topic, props.tags, props.delay, h.store_timestamp, delay_levels);
        let queue_passes = self.queues.record(rec, code);
        // `IndexService::build_index` passes over a ROLLBACK message, one without keys, and one below the
        // endPhyOffset of the file it writes to.
        let keyed =
            h.transaction_type() != TransactionType::Rollback && (props.uniq_key.is_some() || props.keys.is_some());
        let index_passes = match &self.index_writing {
            Some(writing) if keyed => writing.as_ref().is_some_and(|(_, end)| (rec.offset() as i64) < *end),
            _ => true,
        };
        if self.pending.is_none() && !(code.has_entry() && queue_passes && index_passes) {
            self.pending = Some(rec.offset());
        }
        self.last_timestamp = h.store_timestamp;
        let Some(ix) = &mut self.index else { return };
        let (cache, buf) = (&mut self.topic_hash, &mut self.hashes);
        let mut filled = false;
        ix.record(rec.offset(), &mut |hash| {
            if !filled {
                filled = true;
                let base = match cache {
                    Some((t, hash)) if t.as_slice() == topic => *hash,
                    _ => {
                        let hash = topic_hash(topic);
                        *cache = Some((topic.to_vec(), hash));
                        hash
                    }
                };
                buf.clear();
                key_hashes_into(base, props.uniq_key, props.keys, buf);
            }
            buf.contains(&hash)
        });
    }

    /// Whether the walk covers every record from `down_to` on (it began at or before it).
    pub(super) fn covers(&self, down_to: u64) -> bool {
        self.from.is_some_and(|f| f <= down_to)
    }

    /// Where dispatch from `from` first writes something, if the walk can tell: every record it met from
    /// `from` up to the returned offset gets nothing from dispatch (its entry and keys are there already), with
    /// the queues and index as they were when the walk began. That holds only if the walk began at or before
    /// `from` and they are unchanged: the same queues at the same maxPhysicOffset, the same index file written
    /// at the same endPhyOffset. Returns the offset (`end` when dispatch would write nothing) and the store
    /// time of the last record met (dispatch's last one had it not passed over them).
    pub(super) fn dispatch_from(
        &self,
        from: u64,
        end: u64,
        queues: &ConsumeQueueStore,
        index: Option<&IndexService>,
    ) -> Option<(u64, i64)> {
        let index_unchanged = match (&self.index_writing, index) {
            (None, None) => true,
            (Some(before), Some(ix)) => match (before, ix.writing()) {
                (None, None) => true,
                (Some((a, x)), Some((b, y))) => Arc::ptr_eq(a, &b) && *x == y,
                _ => false,
            },
            _ => false,
        };
        let to = self.pending.unwrap_or(end);
        (self.covers(from) && to > from && index_unchanged && self.queues.unchanged(queues))
            .then_some((to, self.last_timestamp))
    }
}
