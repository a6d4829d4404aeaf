//! The read path `getMessage` (spec §13): statuses, `nextOffsetCorrection`, the consume-queue scan with its
//! filter, size and hot/cold batch limits, and tag subscriptions (spec §4).
//!
//! Messages are handed over as [`Record`]s: each shares its commitlog segment (no copy) and is decoded only
//! when a field is read.

use std::sync::{Arc, OnceLock};

use super::MessageStore;
use crate::commitlog::{CommitLog, Record};
use crate::config::{BrokerRole, ReadConfig};
use crate::consume_queue::{roll_next_file, CqEntry, UNIT};
use crate::error::Result;
use crate::file_queue::FileQueue;
use crate::java::{decode_utf8_lossy, string_hash};
use crate::message::decode::parse_header;
use crate::message::properties::{self, keys};
use crate::mmap::MappedFile;

/// `GetMessageStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GetMessageStatus {
    /// At least one message returned.
    Found,
    /// In range, but every entry examined was filtered out (or none was examined).
    NoMatchedMessage,
    /// The commitlog bytes of the first candidates are gone (deleted by cleanup).
    MessageWasRemoving,
    /// In range, but the consume-queue file holding the offset is gone.
    OffsetFoundNull,
    /// The offset is past the max offset.
    OffsetOverflowBadly,
    /// The offset equals the max offset: nothing new yet.
    OffsetOverflowOne,
    /// The offset is below the min offset.
    OffsetTooSmall,
    /// The queue could not be found or created. RocketMQ 5.3.1's default store never answers it (it creates a
    /// missing queue), and neither does rmq; kept for RocketMQ's full set.
    NoMatchedLogicQueue,
    /// The queue is empty (max offset 0), or does not exist (RocketMQ 5.3.1 creates it empty in memory).
    NoMessageInQueue,
}

impl GetMessageStatus {
    /// RocketMQ's constant name.
    pub fn name(self) -> &'static str {
        match self {
            GetMessageStatus::Found => "FOUND",
            GetMessageStatus::NoMatchedMessage => "NO_MATCHED_MESSAGE",
            GetMessageStatus::MessageWasRemoving => "MESSAGE_WAS_REMOVING",
            GetMessageStatus::OffsetFoundNull => "OFFSET_FOUND_NULL",
            GetMessageStatus::OffsetOverflowBadly => "OFFSET_OVERFLOW_BADLY",
            GetMessageStatus::OffsetOverflowOne => "OFFSET_OVERFLOW_ONE",
            GetMessageStatus::OffsetTooSmall => "OFFSET_TOO_SMALL",
            GetMessageStatus::NoMatchedLogicQueue => "NO_MATCHED_LOGIC_QUEUE",
            GetMessageStatus::NoMessageInQueue => "NO_MESSAGE_IN_QUEUE",
        }
    }
}

/// A tag subscription (`SubscriptionData` built by `FilterAPI.build`): `*` (or empty) takes everything,
/// otherwise the tags separated by `||`, trimmed, empty ones dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    /// The tags in the expression's order, each once.
    tags: Vec<String>,
    /// Indexes into `tags`, in the tags' byte order: the exact check is a binary search.
    by_text: Vec<u32>,
    /// The tags' hash codes, sorted, each once: the consume-queue check is a binary search (RocketMQ keeps
    /// both in hash sets; a subscription of many tags costs log n per message, not n).
    codes: Vec<i32>,
}

impl Subscription {
    /// Every message.
    pub const fn all() -> Self {
        Subscription { tags: Vec::new(), by_text: Vec::new(), codes: Vec::new() }
    }

    /// Parses a tag expression such as `TagA || TagB`.
    pub fn parse(expression: &str) -> Self {
        let e = expression.trim();
        if e.is_empty() || e == "*" {
            return Self::all();
        }
        let mut seen = rustc_hash::FxHashSet::default();
        let tags: Vec<String> =
            e.split("||").map(str::trim).filter(|t| !t.is_empty() && seen.insert(*t)).map(str::to_owned).collect();
        if tags.is_empty() {
            return Self::all();
        }
        let mut by_text: Vec<u32> = (0..tags.len() as u32).collect();
        by_text.sort_unstable_by(|&a, &b| tags[a as usize].cmp(&tags[b as usize]));
        let mut codes: Vec<i32> = tags.iter().map(|t| string_hash(t)).collect();
        codes.sort_unstable();
        codes.dedup();
        Subscription { tags, by_text, codes }
    }

    /// Whether every message matches.
    pub fn is_all(&self) -> bool {
        self.tags.is_empty()
    }

    /// The subscribed tags (empty for `*`).
    pub fn tags(&self) -> &[String] {
        &self.tags
    }

    /// `isMatchedByConsumeQueue`: the entry's tagsCode, truncated to 32 bits, is one of the tags' hashes.
    pub fn matches_tags_code(&self, tags_code: i64) -> bool {
        self.is_all() || self.codes.binary_search(&(tags_code as i32)).is_ok()
    }

    /// The exact check on the stored message: its `TAGS` value is one of the subscribed tags, so a tag with
    /// the same hash never gets through (RocketMQ leaves this to the client).
    pub fn matches_record(&self, record: &Record) -> bool {
        if self.is_all() {
            return true;
        }
        let bytes = record.bytes();
        let Some(tags) = properties::get_raw(record.header.properties(bytes), keys::TAGS) else { return false };
        self.matches_tag(&decode_utf8_lossy(tags))
    }

    /// Whether `tag` is one of the subscribed tags (true for `*`).
    pub fn matches_tag(&self, tag: &str) -> bool {
        self.is_all() || self.by_text.binary_search_by(|&i| self.tags[i as usize].as_str().cmp(tag)).is_ok()
    }
}

/// What `getMessage` returns.
#[derive(Debug, Clone)]
pub struct GetMessageResult {
    /// The outcome.
    pub status: GetMessageStatus,
    /// The queue offset to pull from next.
    pub next_begin_offset: i64,
    /// The queue's min offset (0 for a missing queue).
    pub min_offset: i64,
    /// The queue's max offset (0 for a missing queue).
    pub max_offset: i64,
    /// The messages, in queue order, each a view of its commitlog record.
    pub messages: Vec<Record>,
    /// The queue offset of each message.
    pub queue_offsets: Vec<i64>,
    /// Sum of the records' sizes.
    pub buffer_total_size: u64,
    /// Messages dropped by the exact tag check after their tagsCode matched (`filterMessageCount`).
    pub filter_message_count: u32,
    /// The reader is far behind (more than the hot share of memory): a replica could serve it.
    pub suggest_pulling_from_slave: bool,
    /// Entries passed over because their record is damaged (its segment exists, but the bytes there are not
    /// the record the entry names): (queue offset, commitlog offset, what is wrong). Each is also reported in
    /// `dispatch_issues`. Reading went on with the next entry.
    pub damaged: Vec<(i64, i64, String)>,
}

impl GetMessageResult {
    fn status_only(status: GetMessageStatus, next: i64, min: i64, max: i64) -> Self {
        GetMessageResult {
            status,
            next_begin_offset: next,
            min_offset: min,
            max_offset: max,
            messages: Vec::new(),
            queue_offsets: Vec::new(),
            buffer_total_size: 0,
            filter_message_count: 0,
            suggest_pulling_from_slave: false,
            damaged: Vec::new(),
        }
    }
}

/// How many consume-queue entries ahead of the one being read `getMessage` asks the CPU to load the records
/// of ([`MappedFile::prefetch`]). A drain reads records scattered over the commitlog (the queues interleave),
/// each a cache miss; asking a few records early overlaps those misses instead of paying them one by one.
const PREFETCH_AHEAD: usize = 12;

/// The commitlog segment of the last record read, kept across the entries of one `getMessage` so that
/// consecutive records of one segment need no lookup (the segment list's lock, a reference count each).
#[derive(Default)]
struct Segment(Option<Arc<MappedFile>>);

impl Segment {
    /// The segment holding `at`: the one kept, or the queue's (then kept); `None` when no segment holds it.
    fn holding(&mut self, queue: &FileQueue, at: u64) -> Option<&Arc<MappedFile>> {
        if !self.0.as_ref().is_some_and(|f| f.start() <= at && at < f.end()) {
            self.0 = queue.find(at);
        }
        self.0.as_ref()
    }
}

/// `maxPullSize` ceiling: 128 MiB.
pub const MAX_PULL_SIZE: u64 = 128 * 1024 * 1024;

/// `StoreUtil.TOTAL_PHYSICAL_MEMORY_SIZE`: physical memory from the OS, 24 GiB if unknown.
pub fn total_physical_memory() -> u64 {
    static MEM: OnceLock<u64> = OnceLock::new();
    *MEM.get_or_init(|| physical_memory().unwrap_or(24 * 1024 * 1024 * 1024))
}

#[allow(unsafe_code)]
fn physical_memory() -> Option<u64> {
    // SAFETY: sysconf only reads its integer argument and returns a value; it touches no memory of ours.
    let (pages, page_size) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
    let pages = u64::try_from(pages).ok()?;
    let page_size = u64::try_from(page_size).ok()?;
    pages.checked_mul(page_size).filter(|&m| m > 0)
}

/// The share of memory whose data counts as hot (`TOTAL_PHYSICAL_MEMORY_SIZE × ratio / 100`).
fn hot_bytes(cfg: &ReadConfig) -> u64 {
    (total_physical_memory() as f64 * (f64::from(cfg.access_message_in_memory_max_ratio) / 100.0)) as u64
}

/// `isTheBatchFull` with batchNum 1.
fn batch_full(cfg: &ReadConfig, size: u64, max_msgs: u64, max_pull: u64, total: u64, count: u64, hot: bool) -> bool {
    if total == 0 || count == 0 {
        return false;
    }
    if count + 1 > max_msgs || total + size > max_pull {
        return true;
    }
    if hot {
        total + size > cfg.max_transfer_bytes_on_message_in_memory
            || count > cfg.max_transfer_count_on_message_in_memory.saturating_sub(1)
    } else {
        total + size > cfg.max_transfer_bytes_on_message_in_disk
            || count > cfg.max_transfer_count_on_message_in_disk.saturating_sub(1)
    }
}

impl MessageStore {
    /// `nextOffsetCorrection(old, new)`: a slave keeps the client's offset unless `offset_check_in_slave`.
    fn next_offset_correction(&self, old: i64, new: i64) -> i64 {
        let r = &self.config.read;
        if r.broker_role != BrokerRole::Slave || r.offset_check_in_slave {
            new
        } else {
            old
        }
    }

    /// `getMessage(group, topic, queueId, offset, maxMsgNums, maxTotalMsgSize, filter)` (spec §13): up to
    /// `max_msgs` messages of the queue from `offset` that match `subscription`, within the byte and hot/cold
    /// caps, with the status and the offset to pull from next. `group` is only for the caller's bookkeeping,
    /// as in RocketMQ. Fails only when the store is closed.
    #[allow(clippy::too_many_arguments)] // RocketMQ's signature, argument for argument
    pub fn get_message(
        &self,
        group: &str,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_msgs: u32,
        max_total_msg_size: u64,
        subscription: &Subscription,
    ) -> Result<GetMessageResult> {
        use GetMessageStatus as S;
        let _ = group;
        self.check_open()?;
        let Some(cq) = self.queues.find(topic, queue_id) else {
            // RocketMQ 5.3.1's findConsumeQueue creates the queue (in memory) and reads it empty; rmq answers
            // the same without creating anything.
            return Ok(GetMessageResult::status_only(
                S::NoMessageInQueue,
                self.next_offset_correction(offset, 0),
                0,
                0,
            ));
        };
        let (min, max) = (cq.min_offset() as i64, cq.max_offset() as i64);
        let early =
            |status, new| Ok(GetMessageResult::status_only(status, self.next_offset_correction(offset, new), min, max));
        if max == 0 {
            return early(S::NoMessageInQueue, 0);
        }
        if offset < min {
            return early(S::OffsetTooSmall, min);
        }
        if offset == max {
            return early(S::OffsetOverflowOne, offset);
        }
        if offset > max {
            return early(S::OffsetOverflowBadly, max);
        }
        let cfg = &self.config.read;
        let max_msgs = u64::from(max_msgs);
        let max_filter_bytes = cfg.max_filter_message_size.max(max_msgs.saturating_mul(UNIT));
        let max_pull = max_total_msg_size.clamp(100, MAX_PULL_SIZE);
        let max_offset_py = self.commitlog.max_offset() as i64;
        let commitlog_min = self.commitlog.min_offset() as i64;
        let hot = hot_bytes(cfg);
        let mut res = GetMessageResult::status_only(S::NoMatchedMessage, offset, min, max);
        let expect =
            max_msgs.min((max - offset) as u64).min(cfg.max_transfer_count_on_message_in_memory.max(1)) as usize;
        res.messages.reserve(expect);
        res.queue_offsets.reserve(expect);
        let mut max_phy_pulling = 0i64;
        let (mut seg, mut ahead_seg) = (Segment::default(), Segment::default());
        let mut files_left = cfg.travel_cq_file_num_when_get_message;
        while res.messages.is_empty() && res.next_begin_offset < max && files_left > 0 {
            files_left -= 1;
            let next = res.next_begin_offset;
            let Some(slice) = cq.file_slice(next as u64) else {
                res.status = S::OffsetFoundNull;
                res.next_begin_offset =
                    self.next_offset_correction(next, roll_next_file(next as u64, cq.entries_per_file()) as i64);
                break;
            };
            let mut next_phy_file_start = i64::MIN;
            let mut ahead = slice.iter();
            for (_, e) in ahead.by_ref().take(PREFETCH_AHEAD) {
                self.prefetch_entry(&mut ahead_seg, &e, subscription);
            }
            for (q, e) in slice.iter() {
                if let Some((_, a)) = ahead.next() {
                    self.prefetch_entry(&mut ahead_seg, &a, subscription);
                }
                let q = q as i64;
                if q >= max {
                    break;
                }
                let size = u64::try_from(e.size).unwrap_or(0);
                let in_mem = max_offset_py.saturating_sub(e.offset) as u64 <= hot;
                if ((q - offset) as u64).saturating_mul(UNIT) >= max_filter_bytes
                    || batch_full(
                        cfg,
                        size,
                        max_msgs,
                        max_pull,
                        res.buffer_total_size,
                        res.messages.len() as u64,
                        in_mem,
                    )
                    || res.buffer_total_size >= max_pull
                {
                    break;
                }
                max_phy_pulling = e.offset;
                res.next_begin_offset = q + 1;
                if next_phy_file_start != i64::MIN && e.offset < next_phy_file_start {
                    continue;
                }
                if !subscription.matches_tags_code(e.tags_code) {
                    if res.messages.is_empty() {
                        res.status = S::NoMatchedMessage;
                    }
                    continue;
                }
                let live = e.offset >= commitlog_min && !e.is_pre_blank();
                if !(live && self.push_intact_record(&mut seg, e.offset, e.size, &mut res.messages)) {
                    // Not an intact record: the checks again, one by one, to say what is wrong.
                    let record = if live { self.entry_record(&mut seg, e.offset, e.size) } else { Err(None) };
                    match record {
                        Ok(record) => res.messages.push(record),
                        Err(Some(reason)) => {
                            // The segment is there but the record is not what the entry says: report it and go
                            // on with the next entry, never past intact messages.
                            self.report_damage(e.offset, format!("{topic}/{queue_id} entry {q}: {reason}"));
                            res.damaged.push((q, e.offset, reason));
                            continue;
                        }
                        Err(None) => {
                            // The segment is gone (retention): as RocketMQ, skip the rest of it.
                            if res.messages.is_empty() {
                                res.status = S::MessageWasRemoving;
                            }
                            let seg = self.commitlog.file_size() as i64;
                            next_phy_file_start = (e.offset.max(0) / seg + 1) * seg;
                            continue;
                        }
                    }
                }
                // The record is the last message now (pushed where it stays: no move of it after the parse).
                if !res.messages.last().is_some_and(|r| subscription.matches_record(r)) {
                    res.messages.pop();
                    if res.messages.is_empty() {
                        res.status = S::NoMatchedMessage;
                    }
                    res.filter_message_count += 1;
                    continue;
                }
                res.buffer_total_size += size;
                res.queue_offsets.push(q);
                res.status = S::Found;
                next_phy_file_start = i64::MIN;
            }
        }
        res.suggest_pulling_from_slave = max_offset_py.saturating_sub(max_phy_pulling) as u64 > hot;
        Ok(res)
    }
}

impl MessageStore {
    /// Starts loading the record `e` names into the CPU caches, if it is one `getMessage` may read (a real
    /// entry the subscription's tagsCode check lets through, in a segment, below the published end).
    fn prefetch_entry(&self, seg: &mut Segment, e: &CqEntry, subscription: &Subscription) {
        let (Ok(at), Ok(size)) = (u64::try_from(e.offset), u64::try_from(e.size)) else { return };
        if e.is_pre_blank() || !subscription.matches_tags_code(e.tags_code) {
            return;
        }
        let end = at.saturating_add(size);
        if end > self.commitlog.max_offset() {
            return;
        }
        if let Some(file) = seg.holding(self.commitlog.queue(), at) {
            if end <= file.end() {
                file.prefetch((at - file.start()) as usize, size as usize);
            }
        }
    }

    /// The common case of [`entry_record`](Self::entry_record), with no intermediate copies of the record's
    /// header: when the record the entry names is intact (in a segment, a record starting at the offset with
    /// the entry's size, its body CRC right), pushes it onto `out` and returns true. Otherwise returns false
    /// with `out` unchanged, and the caller asks `entry_record`, which makes the same checks and says which
    /// failed.
    fn push_intact_record(&self, seg: &mut Segment, offset: i64, size: i32, out: &mut Vec<Record>) -> bool {
        let Ok(at) = u64::try_from(offset) else { return false };
        let max = self.commitlog.max_offset();
        let Some(file) = seg.holding(self.commitlog.queue(), at) else { return false };
        let end = file.end().min(max);
        if at >= end {
            return false;
        }
        let pos = (at - file.start()) as usize;
        let Some(bytes) = file.slice(pos, (end - at) as usize) else { return false };
        let Ok(header) = parse_header(bytes) else { return false };
        if header.physical_offset != offset || header.total_size != size {
            return false;
        }
        let body = header.body(bytes);
        if !body.is_empty() && crate::message::crc32(body) != header.body_crc {
            return false;
        }
        out.push(Record { file: Arc::clone(file), pos, header });
        true
    }

    /// The record a consume-queue entry names: `Err(None)` when its segment is gone, `Err(Some(why))` when the
    /// segment is there but the bytes at the offset are not a record of that size.
    fn entry_record(&self, seg: &mut Segment, offset: i64, size: i32) -> std::result::Result<Record, Option<String>> {
        let at = u64::try_from(offset).map_err(|_| Some(format!("negative commitlog offset {offset}")))?;
        let Some(file) = seg.holding(self.commitlog.queue(), at) else { return Err(None) };
        match CommitLog::read_in(Arc::clone(file), at, self.commitlog.max_offset()) {
            Ok(Some(r)) if r.header.total_size == size => {
                // The body CRC too: a damaged body is never delivered as if it were the message.
                let h = &r.header;
                let body = h.body(r.bytes());
                if body.is_empty() || crate::message::crc32(body) == h.body_crc {
                    Ok(r)
                } else {
                    Err(Some(format!("the body CRC of the record at commitlog offset {at} does not match")))
                }
            }
            Ok(Some(r)) => Err(Some(format!(
                "the record at commitlog offset {at} is {} bytes, the entry says {size}",
                r.header.total_size
            ))),
            Ok(None) => Err(Some(format!("no record at commitlog offset {at}"))),
            Err(e) => Err(Some(e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscription_parsing() {
        assert!(Subscription::parse("*").is_all());
        assert!(Subscription::parse("  ").is_all());
        assert!(Subscription::parse(" || ").is_all());
        let s = Subscription::parse("TagA || TagB||TagA");
        assert_eq!(s.tags(), ["TagA", "TagB"]);
        assert!(s.matches_tags_code(2598919));
        assert!(!s.matches_tags_code(0));
        // tagsCode is compared on its low 32 bits, as RocketMQ casts it to int.
        let p = Subscription::parse("polygenelubricants");
        assert!(p.matches_tags_code(-2147483648));
        assert!(p.matches_tags_code(0x7_8000_0000));
    }

    proptest::proptest! {
        /// Against the plain reading of `FilterAPI.build` and `isMatchedByConsumeQueue`: the tags in order, each
        /// once; a code matches when some tag hashes to it (pairs such as "Aa" / "BB" share one); a tag matches
        /// when it is one of them.
        #[test]
        fn subscription_matches_the_plain_model(
            picks in proptest::collection::vec(0usize..12, 0..20),
            spaces in proptest::collection::vec(0usize..3, 20),
            probe in 0usize..12,
        ) {
            const POOL: [&str; 12] = ["Aa", "BB", "AaAa", "BBBB", "AaBB", "TagA", "TagB", "x", "tag with space",
                                      "\u{e9}t\u{e9}", "*x", "polygenelubricants"];
            let expr = picks
                .iter()
                .zip(&spaces)
                .map(|(&i, &sp)| format!("{}{}{}", " ".repeat(sp), POOL[i], " ".repeat(sp)))
                .collect::<Vec<_>>()
                .join("||");
            let s = Subscription::parse(&expr);
            let mut model: Vec<&str> = Vec::new();
            for &i in &picks {
                if !model.contains(&POOL[i]) {
                    model.push(POOL[i]);
                }
            }
            proptest::prop_assert_eq!(s.is_all(), model.is_empty());
            proptest::prop_assert_eq!(s.tags(), model.as_slice());
            let tag = POOL[probe];
            proptest::prop_assert_eq!(s.matches_tag(tag), model.is_empty() || model.contains(&tag));
            let code = string_hash(tag);
            let by_code = model.is_empty() || model.iter().any(|t| string_hash(t) == code);
            proptest::prop_assert_eq!(s.matches_tags_code(i64::from(code)), by_code);
        }
    }

    #[test]
    fn a_subscription_of_many_tags_matches_each_of_them() {
        let tags: Vec<String> = (0..100_000).map(|i| format!("tag-{i}")).collect();
        let s = Subscription::parse(&tags.join(" || "));
        assert_eq!(s.tags().len(), tags.len());
        for t in tags.iter().step_by(997) {
            assert!(s.matches_tag(t) && s.matches_tags_code(i64::from(string_hash(t))), "{t}");
        }
        assert!(!s.matches_tag("tag-100000") && !s.matches_tag("tag-") && !s.matches_tag(""));
    }

    #[test]
    fn batch_full_rules() {
        let cfg = ReadConfig::default();
        assert!(!batch_full(&cfg, 10_000_000, 1, 100, 0, 0, true), "the first message always fits");
        assert!(batch_full(&cfg, 1, 1, 1 << 30, 1, 1, true), "count");
        assert!(batch_full(&cfg, 101, 64, 200, 100, 1, true), "maxPullSize");
        assert!(batch_full(&cfg, 1, 64, 1 << 30, 256 * 1024, 1, true), "hot bytes");
        assert!(!batch_full(&cfg, 1, 64, 1 << 30, 1000, 31, true));
        assert!(batch_full(&cfg, 1, 64, 1 << 30, 1000, 32, true), "hot count 32");
        assert!(batch_full(&cfg, 1, 64, 1 << 30, 1000, 8, false), "cold count 8");
        assert!(batch_full(&cfg, 1, 64, 1 << 30, 64 * 1024, 1, false), "cold bytes");
        assert!(total_physical_memory() > 0);
    }
}
