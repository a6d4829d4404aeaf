//! The dispatch of commitlog records into the consume queues ([`ConsumeQueueStore`]) and the index
//! (spec §12: `ReputMessageService`, `CommitLogDispatcherBuildConsumeQueue`, `CommitLogDispatcherBuildIndex`).

use std::collections::HashMap;
use std::sync::Arc;

use crate::commitlog::cursor::{find_valid_record, nonzero_extent, Step};
use crate::commitlog::CommitLog;
use crate::consume_queue::store::ConsumeQueueStore;
use crate::consume_queue::{self, ConsumeQueue};
use crate::error::{Error, Result};
use crate::index::{IndexService, RawKeys};
use crate::java::decode_utf8_lossy;
use crate::message::properties;
use crate::message::tags::tags_code_of;
use crate::message::TransactionType;

/// The properties dispatch needs, found in one pass (the last occurrence of a name wins, as in Java's map).
#[derive(Debug, Default)]
pub(super) struct StoreProps<'a> {
    pub tags: Option<&'a [u8]>,
    pub keys: Option<&'a [u8]>,
    pub uniq_key: Option<&'a [u8]>,
    pub delay: Option<&'a [u8]>,
}

impl<'a> StoreProps<'a> {
    pub(super) fn of(blob: &'a [u8]) -> Self {
        let mut p = StoreProps::default();
        for (name, value) in properties::iter_raw(blob) {
            match name {
                b"TAGS" => p.tags = Some(value),
                b"KEYS" => p.keys = Some(value),
                b"UNIQ_KEY" => p.uniq_key = Some(value),
                b"DELAY" => p.delay = Some(value),
                _ => {}
            }
        }
        p
    }
}

/// A (topic, queue) that received entries in a dispatch round, for long polling (`arriving`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arrival {
    pub topic: String,
    pub queue_id: i32,
    /// The queue's max offset after the round (last queue offset + 1).
    pub next_offset: i64,
    /// tagsCode of the last entry.
    pub tags_code: i64,
    /// Store timestamp of the last entry.
    pub store_timestamp: i64,
}

/// Something the dispatcher could not dispatch, and what it did about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DispatchIssue {
    /// Commitlog offset of the bad bytes.
    pub offset: u64,
    /// What is wrong.
    pub reason: String,
    /// Bytes jumped over.
    pub skipped: u64,
}

/// What one dispatch round did.
#[derive(Debug, Clone, Default)]
pub struct DispatchRound {
    /// Records dispatched (messages only; blanks excluded).
    pub records: u64,
    /// Consume-queue entries written.
    pub cq_entries: u64,
    /// Reput offset after the round.
    pub reput_offset: u64,
    /// Queues that received entries (only when asked for).
    pub arrivals: Vec<Arrival>,
    /// Problems met in this round.
    pub issues: Vec<DispatchIssue>,
    /// Store timestamp of the last message dispatched in the round (0 when none).
    pub last_store_timestamp: i64,
    /// Records dispatched into `SCHEDULE_TOPIC_XXXX` (delayed messages the schedule service may wait for).
    pub scheduled: u64,
    /// Whether the round built the index on a second thread ([`PARALLEL_MIN_RECORDS`]).
    pub parallel_index: bool,
}

/// How far past the record being dispatched the dispatcher asks the CPU to load the log (the next few records).
const DISPATCH_PREFETCH: u64 = 1024;

/// Rounds of at least this many records, over at least [`PARALLEL_MIN_BYTES`] of commitlog, build the
/// index on a second thread while the dispatching thread parses records and writes consume-queue entries
/// (the two write different files and each stays in commitlog order). Smaller rounds (a few puts at a time)
/// build it inline: a thread per round would cost more than it saves.
pub const PARALLEL_MIN_RECORDS: u64 = 1024;
/// See [`PARALLEL_MIN_RECORDS`].
pub const PARALLEL_MIN_BYTES: u64 = 128 << 10;
/// Messages handed to the index builder at a time.
const CHUNK: usize = 256;
/// Chunks queued for the index builder before the dispatching thread waits for it.
const IN_FLIGHT: usize = 4;

thread_local! {
    /// The index chunks of this thread's parallel rounds, kept between rounds so that a round allocates none.
    static CHUNK_POOL: std::cell::RefCell<Vec<IndexChunk>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// One message's index keys, as the index builder gets them: byte ranges in its chunk's `bytes`.
#[derive(Debug)]
struct IndexItem {
    topic_hash: i32,
    offset: i64,
    store_timestamp: i64,
    uniq_key: Option<(u32, u32)>,
    keys: Option<(u32, u32)>,
}

/// A message's index keys as its record stores them (the index decodes them only when they are not ASCII).
fn raw_keys<'a>(
    topic_hash: i32,
    offset: i64,
    store_timestamp: i64,
    uniq: Option<&'a [u8]>,
    keys: Option<&'a [u8]>,
) -> RawKeys<'a> {
    RawKeys { topic_hash, commitlog_offset: offset, store_timestamp, uniq_key: uniq, keys }
}

/// Messages whose keys go to the index builder together; cleared and reused.
#[derive(Debug)]
struct IndexChunk {
    items: Vec<IndexItem>,
    bytes: Vec<u8>,
}

impl IndexChunk {
    fn new() -> Self {
        IndexChunk { items: Vec::with_capacity(CHUNK), bytes: Vec::with_capacity(CHUNK * 64) }
    }

    fn push(&mut self, topic_hash: i32, offset: i64, store_timestamp: i64, uniq: Option<&[u8]>, keys: Option<&[u8]>) {
        let mut range = |v: &[u8]| {
            let start = self.bytes.len();
            self.bytes.extend_from_slice(v);
            (start as u32, self.bytes.len() as u32)
        };
        let (uniq_key, keys) = (uniq.map(&mut range), keys.map(&mut range));
        self.items.push(IndexItem { topic_hash, offset, store_timestamp, uniq_key, keys });
    }

    fn build(&self, index: &IndexService) -> Result<()> {
        let bytes = |r: Option<(u32, u32)>| r.map(|(a, b)| &self.bytes[a as usize..b as usize]);
        index.build_raw(
            self.items
                .iter()
                .map(|it| raw_keys(it.topic_hash, it.offset, it.store_timestamp, bytes(it.uniq_key), bytes(it.keys))),
        )
    }

    fn clear(&mut self) {
        self.items.clear();
        self.bytes.clear();
    }
}

/// Where a round's index keys go.
enum IndexSink<'a> {
    /// The index is off.
    Off,
    /// Built by the dispatching thread, message by message.
    Inline(&'a IndexService),
    /// Queued, a chunk at a time, for the round's index builder thread.
    Builder {
        chunk: IndexChunk,
        pool: &'a mut Vec<IndexChunk>,
        tx: Option<std::sync::mpsc::SyncSender<IndexChunk>>,
        /// Chunks the builder is done with, to be filled again (at most [`IN_FLIGHT`] + 2 exist at a time).
        back: &'a std::sync::mpsc::Receiver<IndexChunk>,
        failed: &'a std::sync::atomic::AtomicBool,
    },
}

impl IndexSink<'_> {
    fn put(&mut self, topic_hash: i32, offset: i64, ts: i64, uniq: Option<&[u8]>, keys: Option<&[u8]>) -> Result<()> {
        match self {
            IndexSink::Off => Ok(()),
            IndexSink::Inline(index) => index.build_raw(std::iter::once(raw_keys(topic_hash, offset, ts, uniq, keys))),
            IndexSink::Builder { chunk, pool, tx, back, .. } => {
                chunk.push(topic_hash, offset, ts, uniq, keys);
                if chunk.items.len() >= CHUNK {
                    let empty = back.try_recv().ok().or_else(|| pool.pop()).unwrap_or_else(IndexChunk::new);
                    let full = std::mem::replace(chunk, empty);
                    // The builder drains its channel until it is closed, failed or not: a send cannot fail.
                    if let Some(tx) = tx {
                        let _ = tx.send(full);
                    }
                }
                Ok(())
            }
        }
    }

    /// Whether the index builder failed (the round stops: it returns the builder's error).
    fn failed(&self) -> bool {
        matches!(self, IndexSink::Builder { failed, .. } if failed.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Sends what is left and closes the builder's channel.
    fn finish(&mut self) {
        if let IndexSink::Builder { chunk, pool, tx, .. } = self {
            if let Some(tx) = tx.take() {
                let last = std::mem::replace(chunk, IndexChunk { items: Vec::new(), bytes: Vec::new() });
                if last.items.is_empty() {
                    pool.push(last);
                } else {
                    let _ = tx.send(last);
                }
            }
        }
    }
}

/// The topics and queues a round has met, so that a record costs no map lookup, no topic decoding and no
/// topic hashing (records of a few queues alternate).
#[derive(Default)]
struct RoundTopics {
    topics: Vec<RoundTopic>,
}

struct RoundTopic {
    name: Vec<u8>,
    /// `String.hashCode()` of the decoded name, for the index.
    hash: i32,
    queues: Vec<(i32, Arc<ConsumeQueue>)>,
}

impl RoundTopics {
    fn get(&mut self, name: &[u8]) -> usize {
        if let Some(i) = self.topics.iter().position(|t| t.name == name) {
            return i;
        }
        let hash = crate::index::hash_continue(0, &decode_utf8_lossy(name));
        self.topics.push(RoundTopic { name: name.to_vec(), hash, queues: Vec::new() });
        self.topics.len() - 1
    }
}

/// The dispatch rules, independent of threads: everything the reput loop does to one record.
#[derive(Debug)]
pub struct Dispatcher<'a> {
    pub queues: &'a ConsumeQueueStore,
    pub index: Option<&'a IndexService>,
    pub delay_levels: &'a [i64],
    /// A read-only view: a queue whose last entry's record left the log takes the next record at the queue
    /// offset it carries ([`ConsumeQueue::append_after`]).
    pub view: bool,
}

impl Dispatcher<'_> {
    /// Dispatches records from `from` up to `end` (a record is dispatched only if it ends at or before
    /// `end`), at most `max_records`. Blanks jump to the next segment; a record whose TOTALSIZE disagrees with
    /// its fields is skipped by its size (RocketMQ's "[BUG]" branch); other bad bytes skip the rest of their
    /// segment, as a RocketMQ master does. Each skip is reported. A large round builds the index on a second
    /// thread ([`PARALLEL_MIN_RECORDS`]); either way the round returns once the consume queues and the index
    /// hold everything it dispatched, and an error of either fails it.
    pub fn run(
        &self,
        log: &CommitLog,
        from: u64,
        end: u64,
        max_records: u64,
        want_arrivals: bool,
    ) -> Result<DispatchRound> {
        match self.index {
            Some(index) if max_records >= PARALLEL_MIN_RECORDS && end.saturating_sub(from) >= PARALLEL_MIN_BYTES => {
                self.run_parallel(index, log, from, end, max_records, want_arrivals)
            }
            Some(index) => self.run_with(log, from, end, max_records, want_arrivals, &mut IndexSink::Inline(index)),
            None => self.run_with(log, from, end, max_records, want_arrivals, &mut IndexSink::Off),
        }
    }

    fn run_parallel(
        &self,
        index: &IndexService,
        log: &CommitLog,
        from: u64,
        end: u64,
        max_records: u64,
        want_arrivals: bool,
    ) -> Result<DispatchRound> {
        let mut pool = CHUNK_POOL.with(|p| std::mem::take(&mut *p.borrow_mut()));
        let failed = std::sync::atomic::AtomicBool::new(false);
        let (back_tx, back) = std::sync::mpsc::sync_channel::<IndexChunk>(IN_FLIGHT + 4);
        let result = std::thread::scope(|s| {
            let (tx, rx) = std::sync::mpsc::sync_channel::<IndexChunk>(IN_FLIGHT);
            let failed = &failed;
            let builder = std::thread::Builder::new().name("rmq-index".into()).spawn_scoped(s, move || {
                let mut built = Ok(());
                for mut chunk in rx {
                    if built.is_ok() {
                        built = chunk.build(index);
                        if built.is_err() {
                            failed.store(true, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                    chunk.clear();
                    // Never full: the dispatching thread takes a returned chunk before it makes a new one.
                    let _ = back_tx.try_send(chunk);
                }
                built
            });
            let Ok(builder) = builder else {
                // No thread to be had: build it inline.
                return self.run_with(log, from, end, max_records, want_arrivals, &mut IndexSink::Inline(index));
            };
            let chunk = pool.pop().unwrap_or_else(IndexChunk::new);
            let mut sink = IndexSink::Builder { chunk, pool: &mut pool, tx: Some(tx), back: &back, failed };
            let round = self.run_with(log, from, end, max_records, want_arrivals, &mut sink);
            sink.finish();
            drop(sink);
            let built = builder
                .join()
                .map_err(|_| Error::Poisoned("the index builder thread of a dispatch round panicked".into()))?;
            let mut round = round?;
            built?;
            round.parallel_index = true;
            Ok(round)
        });
        pool.extend(back.try_iter());
        CHUNK_POOL.with(|p| *p.borrow_mut() = pool);
        result
    }

    fn run_with(
        &self,
        log: &CommitLog,
        from: u64,
        end: u64,
        max_records: u64,
        want_arrivals: bool,
        sink: &mut IndexSink<'_>,
    ) -> Result<DispatchRound> {
        let mut round = DispatchRound { reput_offset: from, ..DispatchRound::default() };
        let mut arrivals: HashMap<usize, Arrival> = HashMap::new();
        let mut topics = RoundTopics::default();
        let log_min = if self.view { log.min_offset() as i64 } else { -1 };
        let mut cursor = log.cursor(from.max(log.min_offset()), end);
        let mut prefetched = 0u64;
        while round.records < max_records && !sink.failed() {
            let at = cursor.offset();
            let (file, reason) = match cursor.next() {
                None => break,
                Some(Step::Record(rec)) => {
                    if let Some(to) = log.skip_at(at) {
                        cursor.seek(to);
                        continue;
                    }
                    let h = &rec.header;
                    let record = rec.bytes();
                    let size = h.total_size as u64;
                    // The records after this one, into the CPU's caches while this one is dispatched: the putting
                    // thread wrote them on another core moments ago, and each of their lines is a miss.
                    let ahead = (at + size + DISPATCH_PREFETCH).min(end).min(rec.file.end());
                    let from = prefetched.max(at + size);
                    if from < ahead {
                        rec.file.prefetch((from - rec.file.start()) as usize, (ahead - from) as usize);
                        prefetched = ahead;
                    }
                    let topic_bytes = h.topic(record);
                    let props = StoreProps::of(h.properties(record));
                    let code = tags_code_of(topic_bytes, props.tags, props.delay, h.store_timestamp, self.delay_levels);
                    match code.ok() {
                        None => round.issues.push(DispatchIssue {
                            offset: at,
                            reason: "DELAY of a SCHEDULE_TOPIC_XXXX record is not a number".into(),
                            skipped: size,
                        }),
                        Some(code) => {
                            let written =
                                self.dispatch_record(h, record, &props, code, log_min, &mut topics, sink, &mut round)?;
                            if let (true, Some(cq)) = (want_arrivals, written) {
                                let key = Arc::as_ptr(&cq) as usize;
                                let a = arrivals.entry(key).or_insert_with(|| Arrival {
                                    topic: cq.topic().to_owned(),
                                    queue_id: cq.queue_id(),
                                    next_offset: 0,
                                    tags_code: 0,
                                    store_timestamp: 0,
                                });
                                a.next_offset = cq.max_offset() as i64;
                                a.tags_code = code;
                                a.store_timestamp = h.store_timestamp;
                            }
                            round.records += 1;
                            round.scheduled +=
                                u64::from(topic_bytes == crate::message::tags::SCHEDULE_TOPIC.as_bytes());
                            round.last_store_timestamp = h.store_timestamp;
                        }
                    }
                    continue;
                }
                Some(Step::Blank { .. }) => continue,
                // Appends are published whole, so below the confirm offset a record that runs past it is
                // damage (its TOTALSIZE), not one being written.
                Some(Step::Partial { file, .. }) => (file, "record runs past the end of the data".to_owned()),
                Some(Step::Missing { offset }) => {
                    // A segment removed by retention under the dispatcher: go on from the log's start.
                    let min = log.min_offset();
                    if offset < min {
                        cursor.seek(min);
                        continue;
                    }
                    break;
                }
                Some(Step::Zero { file, .. }) => (file, "bad magic code 0x00000000".to_owned()),
                Some(Step::Invalid { file, reason, .. }) => (file, reason),
            };
            // Bytes inside the published data that are not a record: damage. Go on with the next record that
            // validates completely and names its own offset in this segment (never skipping intact records),
            // or with the next segment if there is none. A rest of the segment that is all zeros is not an issue.
            if let Some(to) = log.skip_at(at) {
                cursor.seek(to);
                continue;
            }
            let seg_end = file.end().min(end);
            let rest = file.slice((at - file.start()) as usize, (seg_end - at) as usize).unwrap_or_default();
            if nonzero_extent(rest) == 0 {
                cursor.seek(file.end());
                continue;
            }
            let next = find_valid_record(log.queue(), at + 1, seg_end, false).unwrap_or(file.end());
            round.issues.push(DispatchIssue {
                offset: at,
                reason: if next < file.end() {
                    format!("{reason}; skipped to the next valid record at {next}")
                } else {
                    format!("{reason}; no valid record follows in this segment, the rest of it is skipped")
                },
                skipped: next - at,
            });
            cursor.seek(next);
        }
        let offset = cursor.offset();
        round.reput_offset = offset;
        round.arrivals = arrivals.into_values().collect();
        round.arrivals.sort_by(|a, b| (&a.topic, a.queue_id).cmp(&(&b.topic, b.queue_id)));
        Ok(round)
    }

    /// Builds the consume-queue entry and the index keys of one record. Returns the queue written to.
    #[allow(clippy::too_many_arguments)]
    fn dispatch_record(
        &self,
        h: &crate::message::RecordHeader,
        record: &[u8],
        props: &StoreProps<'_>,
        tags_code: i64,
        log_min: i64,
        topics: &mut RoundTopics,
        sink: &mut IndexSink<'_>,
        round: &mut DispatchRound,
    ) -> Result<Option<Arc<ConsumeQueue>>> {
        let topic_bytes = h.topic(record);
        let t = topics.get(topic_bytes);
        let transaction = h.transaction_type();
        let mut written = None;
        if matches!(transaction, TransactionType::NotType | TransactionType::Commit) {
            let known = topics.topics[t].queues.iter().find(|(q, _)| *q == h.queue_id).map(|(_, cq)| cq);
            let cq = match known {
                Some(cq) => Some(cq),
                None => {
                    let topic = decode_utf8_lossy(topic_bytes);
                    match self.queues.find_or_create(&topic, h.queue_id, h.physical_offset) {
                        Ok(cq) => {
                            let queues = &mut topics.topics[t].queues;
                            queues.push((h.queue_id, cq));
                            queues.last().map(|(_, cq)| cq)
                        }
                        // A record naming a queue no directory can hold (damage) is reported and passed over.
                        Err(e @ Error::InvalidTopic { .. }) => {
                            round.issues.push(DispatchIssue {
                                offset: h.physical_offset as u64,
                                reason: format!("no consume queue: {e}"),
                                skipped: 0,
                            });
                            None
                        }
                        // Its directory could not be made (a full disk: ext4 needs a block for a directory):
                        // dispatch stops here and tries again, as when a consume-queue file cannot be claimed.
                        // Passed over, the queue's acknowledged messages were never in it.
                        Err(e) => return Err(e),
                    }
                }
            };
            if let Some(cq) = cq {
                match cq.append_after(h.physical_offset, h.total_size, tags_code, h.queue_offset, log_min) {
                    Ok(consume_queue::Appended::Written { queue_offset, new_gap }) => {
                        round.cq_entries += 1;
                        written = Some(Arc::clone(cq));
                        if new_gap {
                            // RocketMQ's rule (appended at the queue's end) keeps the queue dense, but this message
                            // now sits at another queue offset than its record says: never silently.
                            round.issues.push(DispatchIssue {
                                offset: h.physical_offset as u64,
                                reason: format!(
                                    "the record carries queue offset {} but {}/{} is at {queue_offset}: written there, \
                                     and the messages after it as many places early (a message of the queue before \
                                     it is missing from the log, or the record's QUEUEOFFSET is damaged)",
                                    h.queue_offset,
                                    cq.topic(),
                                    cq.queue_id()
                                ),
                                skipped: 0,
                            });
                        }
                    }
                    Ok(consume_queue::Appended::Duplicate) => {}
                    Err(Error::InvalidOffset { reason, .. }) => round.issues.push(DispatchIssue {
                        offset: h.physical_offset as u64,
                        reason: format!("no consume-queue entry: {reason}"),
                        skipped: 0,
                    }),
                    Err(e) => return Err(e),
                }
            }
        }
        if transaction != TransactionType::Rollback && (props.uniq_key.is_some() || props.keys.is_some()) {
            let hash = topics.topics[t].hash;
            sink.put(hash, h.physical_offset, h.store_timestamp, props.uniq_key, props.keys)?;
        }
        Ok(written)
    }
}
