//! Queries: by key (`queryMessage`, through the index checked against the commitlog, see `index_check.rs`) and
//! by time (`getOffsetInQueueByTime`, `getMessageStoreTimeStamp`, `pickupStoreTimestamp`).

use super::MessageStore;
use crate::commitlog::Record;
use crate::consume_queue::BoundaryType;
use crate::error::Result;
use crate::message::properties::{self, keys};

/// The result of a key query: matching records, oldest first, and the index's last update.
#[derive(Debug, Clone, Default)]
pub struct QueryResult {
    pub records: Vec<Record>,
    pub index_last_update_timestamp: i64,
    pub index_last_update_phy_offset: i64,
}

impl MessageStore {
    /// `pickupStoreTimestamp`: the store time of the record at (offset, size), −1 if it is not in the log.
    pub fn pickup_store_timestamp(&self, offset: i64, size: i32) -> i64 {
        let (min, max) = (self.commitlog.min_offset() as i64, self.commitlog.max_offset() as i64);
        if offset < min || offset.saturating_add(i64::from(size)) > max {
            return -1;
        }
        match self.commitlog.read(offset as u64) {
            Ok(Some(rec)) if rec.header.total_size == size => rec.header.store_timestamp,
            _ => -1,
        }
    }

    /// `getMessageStoreTimeStamp`: store time of the message at `queue_offset`, −1 if none.
    pub fn message_store_timestamp(&self, topic: &str, queue_id: i32, queue_offset: i64) -> i64 {
        match self.cq_entry(topic, queue_id, queue_offset) {
            Some(e) if !e.is_pre_blank() => self.pickup_store_timestamp(e.offset, e.size),
            _ => -1,
        }
    }

    /// `getOffsetInQueueByTime` (spec §6.7): 0 for a missing queue, otherwise clamped to [min, max].
    pub fn offset_in_queue_by_time(&self, topic: &str, queue_id: i32, timestamp: i64, boundary: BoundaryType) -> i64 {
        let Some(cq) = self.queues.find(topic, queue_id) else { return 0 };
        let min_physic = self.commitlog.min_offset() as i64;
        let found = cq.offset_by_time(timestamp, boundary, min_physic, &|o, s| self.pickup_store_timestamp(o, s));
        (found as i64).clamp(cq.min_offset() as i64, cq.max_offset() as i64)
    }

    /// `queryMessage`: records of `topic` whose UNIQ_KEY or one of whose KEYS equals `key`, stored between
    /// `begin` and `end` (ms, inclusive), at most `max_num` (capped at `maxMsgsNumBatch`), oldest first.
    /// Unlike RocketMQ, hash collisions are filtered out (each candidate's topic and keys are checked) and
    /// the window applies to the records' exact store times, not the index's whole-second approximation.
    pub fn query_message(&self, topic: &str, key: &str, max_num: usize, begin: i64, end: i64) -> Result<QueryResult> {
        self.check_open()?;
        let Some(index) = &self.index else { return Ok(QueryResult::default()) };
        let mut found: Vec<Record> = Vec::new();
        let res = self.query_index(index, topic, key, max_num, begin, end, &mut found)?;
        found.sort_by_key(|r| r.offset());
        found.dedup_by_key(|r| r.offset());
        // RocketMQ sets the index's last update on the result with its first message: none found, 0 and 0.
        let (stamp, phy) =
            if found.is_empty() { (0, 0) } else { (res.index_last_update_timestamp, res.index_last_update_phy_offset) };
        Ok(QueryResult { records: found, index_last_update_timestamp: stamp, index_last_update_phy_offset: phy })
    }
}

/// Whether `rec` belongs to `topic` and carries `key` as its UNIQ_KEY or one of its KEYS.
pub(super) fn record_has_key(rec: &Record, topic: &str, key: &str) -> bool {
    let bytes = rec.bytes();
    let h = &rec.header;
    if crate::java::decode_utf8_lossy(h.topic(bytes)) != topic {
        return false;
    }
    let props = h.properties(bytes);
    if properties::get_raw(props, keys::UNIQ_KEY).is_some_and(|u| crate::java::decode_utf8_lossy(u) == key) {
        return true;
    }
    properties::get_raw(props, keys::KEYS)
        .map(crate::java::decode_utf8_lossy)
        .is_some_and(|k| k.split(keys::KEY_SEPARATOR).any(|t| !t.is_empty() && t == key))
}
