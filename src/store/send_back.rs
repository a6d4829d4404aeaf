//! `consumerSendMsgBack` (the broker's `AbstractSendMessageProcessor`): a message a consumer group failed to
//! consume goes back to the store, to be consumed again later or parked in the group's dead-letter queue.
//!
//! From the stored record at the given commitlog offset, as RocketMQ 5.3.1 builds it: the record's properties
//! (the broker's `HashMap(128)`) gain `RETRY_TOPIC` (the record's topic, unless it already has one), `WAIT` =
//! `false`, `DELAY` and `ORIGIN_MESSAGE_ID` (kept if present, else the record's offset message id); body, flag,
//! sys flag, born time and host are the record's, reconsume times one more, the store host this store's.
//! - Retry: topic `%RETRY%<group>` queue 0 (the group's one retry queue), `DELAY` = the level asked for, or
//!   3 + reconsume times when 0 is asked for; the put's schedule hook then stores it in `SCHEDULE_TOPIC_XXXX`,
//!   so the retry comes back after that level's delay (10 s, 30 s, 1 min, ... with the default levels).
//! - Dead letter, once the record's reconsume times reach `max_reconsume_times` or a negative level is asked
//!   for: topic `%DLQ%<group>` queue 0, `DELAY` = `0` (stored at once, never delivered again).

use crate::error::{Error, Result};
use crate::message::ids::offset_msg_id;
use crate::message::properties::{self, keys, BROKER_MAP_CAPACITY};

use super::put::{InnerMessage, PutResult};
use super::{validate, MessageStore};

/// `MixAll.RETRY_GROUP_TOPIC_PREFIX`.
pub const RETRY_GROUP_TOPIC_PREFIX: &str = "%RETRY%";
/// `MixAll.DLQ_GROUP_TOPIC_PREFIX`.
pub const DLQ_GROUP_TOPIC_PREFIX: &str = "%DLQ%";
/// Delay level the broker picks for the first retry (`3 + reconsumeTimes`).
pub const FIRST_RETRY_LEVEL: i32 = 3;

/// Where a message sent back went.
#[derive(Debug, Clone)]
pub struct SendBackResult {
    /// The put (in `SCHEDULE_TOPIC_XXXX` for a delayed retry).
    pub put: PutResult,
    /// `%RETRY%<group>` or `%DLQ%<group>`.
    pub topic: String,
    /// Whether it went to the dead-letter queue.
    pub dead_letter: bool,
    /// The delay level of a retry (0 for a dead letter).
    pub delay_level: i32,
}

impl MessageStore {
    /// Sends the record at commitlog `offset` back for `group` (see the module docs). `delay_level`: 0 = the
    /// broker decides (3 + reconsume times), > 0 that level (clamped to the highest), < 0 straight to the
    /// dead-letter queue. Errors: no record at `offset` ([`Error::InvalidOffset`]), a group that makes an
    /// invalid topic, and the put's errors; nothing is written then.
    pub fn send_message_back(
        &self,
        offset: u64,
        group: &str,
        delay_level: i32,
        max_reconsume_times: i32,
    ) -> Result<SendBackResult> {
        self.check_writable()?;
        if group.is_empty() {
            return Err(Error::IllegalMessage("the consumer group is empty".into()));
        }
        let retry_topic = format!("{RETRY_GROUP_TOPIC_PREFIX}{group}");
        let dlq_topic = format!("{DLQ_GROUP_TOPIC_PREFIX}{group}");
        validate::check_topic_name(&retry_topic)?;
        validate::check_topic_name(&dlq_topic)?;
        let rec = self.read(offset)?.ok_or_else(|| Error::InvalidOffset {
            offset: i64::try_from(offset).unwrap_or(i64::MAX),
            reason: "no message starts at this commitlog offset".into(),
        })?;
        let (h, bytes) = (&rec.header, rec.bytes());
        let topic = crate::java::decode_utf8_lossy(h.topic(bytes));
        let parsed = properties::parse(h.properties(bytes));
        let dead_letter = h.reconsume_times >= max_reconsume_times || delay_level < 0;
        let level = match (dead_letter, delay_level) {
            (true, _) => 0,
            (false, 0) => FIRST_RETRY_LEVEL.saturating_add(h.reconsume_times),
            (false, l) => l,
        };
        let level_text = level.to_string();
        // `msgExt.getMsgId()`: the offset message id of the record (store host, PHYSICALOFFSET as stored).
        let origin = match parsed.iter().find(|(n, _)| n == keys::ORIGIN_MESSAGE_ID) {
            Some((_, v)) if !v.trim().is_empty() => v.to_string(),
            _ => offset_msg_id(h.store_host, h.physical_offset),
        };
        // The map as the broker changes it, in order: putProperty(RETRY_TOPIC) if absent, WAIT, DELAY, then
        // ORIGIN_MESSAGE_ID (the same value when it had one).
        let mut entries: Vec<(&str, &str)> = parsed.iter().map(|(n, v)| (n.as_ref(), v.as_ref())).collect();
        if !parsed.iter().any(|(n, _)| n == keys::RETRY_TOPIC) {
            entries.push((keys::RETRY_TOPIC, &topic));
        }
        entries.push((keys::WAIT, "false"));
        entries.push((keys::DELAY, &level_text));
        entries.push((keys::ORIGIN_MESSAGE_ID, &origin));
        let mut props = Vec::with_capacity(h.properties.len() + 128);
        properties::encode_map(&entries, BROKER_MAP_CAPACITY, &mut props);
        let new_topic = if dead_letter { &dlq_topic } else { &retry_topic };
        let msg = InnerMessage {
            reconsume_times: h.reconsume_times.saturating_add(1),
            ..InnerMessage::from_record(h, bytes, new_topic, 0, &props)
        };
        let put = self.put_inner(&msg)?;
        let delay_level =
            if dead_letter { 0 } else { self.schedule_level(Some(&level_text), msg.transaction)?.unwrap_or(0) };
        Ok(SendBackResult { put, topic: new_topic.clone(), dead_letter, delay_level })
    }
}
