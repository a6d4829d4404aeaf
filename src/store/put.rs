//! The write path: pre-put checks, properties as a broker builds them, queue offsets, append, and the
//! flush handling that decides a put's status.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use smallvec::SmallVec;

use crate::commitlog::{now_ms, Appended};
use crate::config::FlushDiskType;
use crate::error::{Error, Result};
use crate::message::encode::{
    check_record, encode_record, strip_crc_property, EncodeInput, EncodeOptions, EncodedRecord,
};
use crate::message::ids::{offset_msg_id, UniqKey};
use crate::message::properties::{self, keys, BROKER_MAP_CAPACITY, CLIENT_MAP_CAPACITY};
use crate::message::tags::SCHEDULE_TOPIC;
use crate::message::{PutMessageStatus, TransactionType};

use super::{services, transaction, validate, MessageStore};

/// Property entries in map order; up to 16 live on the stack (a put's map has 5 or 6).
pub(crate) type Entries<'a> = SmallVec<[(&'a str, &'a str); 16]>;
/// Per-record results of a put; a single put's live inline.
pub type PerRecord<T> = SmallVec<[T; 1]>;

/// A batch's records, encoded one after the other in `buf`, with their UNIQ_KEYs.
struct EncodedBatch {
    buf: Vec<u8>,
    records: Vec<EncodedRecord>,
    uniq_keys: PerRecord<UniqKey>,
}

thread_local! {
    /// Encoding buffers a thread reuses from put to put (taken out while in use, so a nested put on the same
    /// thread just makes its own).
    static SCRATCH: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A reused encoding buffer, empty when taken; back to the thread's pool when dropped unless it grew past
/// [`Scratch::KEEP`] (one huge message does not pin its size for the thread's life).
struct Scratch(Vec<u8>);

impl Scratch {
    const KEEP: usize = 1 << 20;

    fn take(capacity: usize) -> Self {
        let mut buf = SCRATCH.try_with(|p| p.borrow_mut().pop()).ok().flatten().unwrap_or_default();
        buf.reserve(capacity);
        Scratch(buf)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let mut buf = std::mem::take(&mut self.0);
        if buf.capacity() <= Self::KEEP {
            buf.clear();
            let _ = SCRATCH.try_with(|p| {
                let mut pool = p.borrow_mut();
                if pool.len() < 4 {
                    pool.push(buf);
                }
            });
        }
    }
}

/// One message as a producer hands it to a broker.
#[derive(Debug, Clone)]
pub struct PutMessage<'a> {
    pub topic: &'a str,
    pub queue_id: i32,
    pub body: &'a [u8],
    pub tags: Option<&'a str>,
    /// Index keys joined by single spaces (the `KEYS` property).
    pub keys: Option<&'a str>,
    /// User properties in insertion order.
    pub properties: &'a [(&'a str, &'a str)],
    pub flag: i32,
    /// Compression and multi-tags bits (see [`validate::PRODUCER_SYS_FLAGS`]).
    pub sys_flag: i32,
    pub transaction: TransactionType,
    pub born_host: SocketAddr,
    /// Producer timestamp, ms; `None` = now.
    pub born_timestamp: Option<i64>,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    /// The `WAIT` property (`waitStoreMsgOK`).
    pub wait_store_msg_ok: bool,
}

impl<'a> PutMessage<'a> {
    /// A plain message with defaults for every producer-side field.
    pub fn new(topic: &'a str, queue_id: i32, body: &'a [u8]) -> Self {
        PutMessage {
            topic,
            queue_id,
            body,
            tags: None,
            keys: None,
            properties: &[],
            flag: 0,
            sys_flag: 0,
            transaction: TransactionType::NotType,
            born_host: SocketAddr::from(([127, 0, 0, 1], 0)),
            born_timestamp: None,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            wait_store_msg_ok: true,
        }
    }
}

/// One member of a batch: what may differ between members.
#[derive(Debug, Clone, Copy, Default)]
pub struct BatchItem<'a> {
    pub body: &'a [u8],
    pub tags: Option<&'a str>,
    pub keys: Option<&'a str>,
    pub properties: &'a [(&'a str, &'a str)],
    pub flag: i32,
}

/// The result of a successful put (single message or batch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutResult {
    /// `PUT_OK`, or `FLUSH_DISK_TIMEOUT` when a sync flush failed (the message is stored but not durable).
    pub status: PutMessageStatus,
    /// Commitlog offset of each record.
    pub offsets: PerRecord<u64>,
    /// Bytes written for the records.
    pub wrote_bytes: u64,
    /// Queue offset of the first message (0 for PREPARED / ROLLBACK messages, which take none).
    pub queue_offset: i64,
    /// Store timestamp, ms.
    pub store_timestamp: i64,
    /// UNIQ_KEY of each message.
    pub uniq_keys: PerRecord<UniqKey>,
    /// Store host (for message ids).
    pub store_host: SocketAddr,
}

impl PutResult {
    /// offsetMsgId of each record.
    pub fn msg_ids(&self) -> Vec<String> {
        self.offsets.iter().map(|&o| offset_msg_id(self.store_host, o as i64)).collect()
    }
}

/// A message the store's own services write (RocketMQ's `MessageExtBrokerInner` handed straight to
/// `putMessage` by broker code: a delayed message delivered, a transaction committed, an op record): the
/// properties are stored exactly as given, already in the order the Java map would serialize them, and
/// system topics are allowed.
#[derive(Debug, Clone)]
pub struct InnerMessage<'a> {
    pub topic: &'a str,
    pub queue_id: i32,
    pub body: &'a [u8],
    /// The properties string as stored (`name 0x01 value 0x02` ...).
    pub properties: &'a [u8],
    pub flag: i32,
    /// Compression and multi-tags bits; the transaction bits come from `transaction`.
    pub sys_flag: i32,
    pub transaction: TransactionType,
    pub born_host: SocketAddr,
    pub born_timestamp: i64,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    /// Whether a SYNC_FLUSH put waits for the flush.
    pub wait_store_msg_ok: bool,
}

impl<'a> InnerMessage<'a> {
    /// A message built from a stored record (`header` decoded from `bytes`), as the broker's services copy a
    /// `MessageExt` into a `MessageExtBrokerInner`: its body, flag, producer sys flags, transaction type, born
    /// host and time and reconsume times, with a new topic, queue and properties string.
    pub fn from_record(
        header: &crate::message::decode::RecordHeader,
        bytes: &'a [u8],
        topic: &'a str,
        queue_id: i32,
        properties: &'a [u8],
    ) -> Self {
        InnerMessage {
            topic,
            queue_id,
            body: header.body(bytes),
            properties,
            flag: header.flag,
            sys_flag: header.sys_flag & validate::PRODUCER_SYS_FLAGS,
            transaction: header.transaction_type(),
            born_host: header.born_host,
            born_timestamp: header.born_timestamp,
            reconsume_times: header.reconsume_times,
            prepared_transaction_offset: 0,
            wait_store_msg_ok: false,
        }
    }
}

impl MessageStore {
    /// Stores a message the store builds itself ([`InnerMessage`]): the same checks, queue offsets, append and
    /// flush handling as [`put`](Self::put), without a producer's property handling. As RocketMQ's
    /// `handleScheduleMessage` hook does for every put of transaction type NOT or COMMIT, a `DELAY` level > 0
    /// stores the message in `SCHEDULE_TOPIC_XXXX` (see [`put`](Self::put)); a `DELAY` that is not an int is
    /// [`Error::IllegalMessage`] and nothing is written.
    pub fn put_inner(&self, msg: &InnerMessage<'_>) -> Result<PutResult> {
        let mut props = Vec::new();
        let msg = self.schedule_hook(msg, &mut props)?;
        self.put_inner_as_is(&msg, self.config.broker.store_host)
    }

    /// Stores `msgs`, each as [`put_inner`](Self::put_inner) would, in one append: back to back in one segment,
    /// made visible and (under SYNC_FLUSH) durable together, and all of them or none. Any error (a refused
    /// message, a full disk when the records need a new segment) comes before a byte is written or a queue
    /// offset taken, and a kill leaves all or none of them (the append's commit word). For writes that mean
    /// nothing apart: RocketMQ's `EndTransactionProcessor` puts a commit and then its op record, and a failure
    /// between the two leaves the message committed and its half not ended, to be checked and committed again.
    pub(crate) fn put_inner_all(&self, msgs: &[InnerMessage<'_>]) -> Result<Vec<PutResult>> {
        self.check_writable()?;
        self.check_disk_space()?;
        let mut props = vec![Vec::new(); msgs.len()];
        let msgs =
            msgs.iter().zip(props.iter_mut()).map(|(m, p)| self.schedule_hook(m, p)).collect::<Result<Vec<_>>>()?;
        let store_host = self.config.broker.store_host;
        let mut buf = Vec::with_capacity(msgs.iter().map(|m| 128 + m.body.len() + m.properties.len()).sum());
        let mut records = Vec::with_capacity(msgs.len());
        let mut uniq_keys = Vec::with_capacity(msgs.len());
        for m in &msgs {
            let (record, uniq) = self.encode_inner(m, store_host, &mut buf)?;
            records.push(record);
            uniq_keys.push(uniq);
        }
        let (appended, queue_offsets) = {
            let mut table = self.queue_table.lock().unwrap_or_else(|p| p.into_inner());
            let queue_offsets: Vec<i64> = msgs
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    if !m.transaction.takes_queue_offset() {
                        return 0;
                    }
                    let same = |e: &&InnerMessage<'_>| {
                        e.transaction.takes_queue_offset() && e.topic == m.topic && e.queue_id == m.queue_id
                    };
                    let before = msgs.get(..i).unwrap_or_default().iter().filter(same).count() as i64;
                    table.get(m.topic).and_then(|q| q.get(&m.queue_id)).copied().unwrap_or(0) + before
                })
                .collect();
            let appended = self.commitlog.append(&mut buf, &records, |i| queue_offsets.get(i).copied().unwrap_or(0))?;
            for (m, &q) in msgs.iter().zip(&queue_offsets) {
                if m.transaction.takes_queue_offset() {
                    let next = table.entry(m.topic.to_owned()).or_default().entry(m.queue_id).or_insert(0);
                    *next = (*next).max(q + 1);
                }
            }
            (appended, queue_offsets)
        };
        let status = self.after_append(&appended, msgs.iter().any(|m| m.wait_store_msg_ok));
        Ok(records
            .iter()
            .zip(uniq_keys)
            .zip(queue_offsets)
            .map(|((r, uniq), queue_offset)| PutResult {
                status,
                offsets: PerRecord::from_buf([appended.first_offset + r.start as u64]),
                wrote_bytes: r.len as u64,
                queue_offset,
                store_timestamp: appended.store_timestamp,
                uniq_keys: PerRecord::from_buf([uniq]),
                store_host,
            })
            .collect())
    }

    /// `msg` as RocketMQ's `handleScheduleMessage` hook leaves it (see [`put_inner`](Self::put_inner)): as it is,
    /// or, with a `DELAY` level > 0, in `SCHEDULE_TOPIC_XXXX` with the properties `transformDelayLevelMessage`
    /// gives it, written into `props`.
    fn schedule_hook<'s>(&self, msg: &InnerMessage<'s>, props: &'s mut Vec<u8>) -> Result<InnerMessage<'s>> {
        let text = properties::get_raw(msg.properties, keys::DELAY).map(crate::java::decode_utf8_lossy);
        let Some(level) = self.schedule_level(text.as_deref(), msg.transaction)? else {
            return Ok(msg.clone());
        };
        if msg.body.is_empty() {
            // As `put` refuses it (see `broker_properties`): a message sent back for a retry, or a commit, due
            // later with an empty body, which RocketMQ's schedule service would drop.
            return Err(Error::IllegalMessage(
                "a delayed message needs a body: RocketMQ puts it again when due and refuses an empty body then; \
                 nothing was written"
                    .into(),
            ));
        }
        // `transformDelayLevelMessage` on the message's map (HashMap(128) filled in stored order).
        let parsed = properties::parse(msg.properties);
        let (level_text, qid_text) = (level.to_string(), msg.queue_id.to_string());
        let clamped = text.as_deref().and_then(crate::java::parse_int) != Some(level);
        let mut entries: Vec<(&str, &str)> =
            parsed.iter().map(|(n, v)| (n.as_ref(), v.as_ref())).filter(|(n, _)| !keys::TIMER.contains(n)).collect();
        if clamped {
            entries.push((keys::DELAY, &level_text));
        }
        entries.push((keys::REAL_TOPIC, msg.topic));
        entries.push((keys::REAL_QID, &qid_text));
        props.clear();
        properties::encode_map(&entries, BROKER_MAP_CAPACITY, props);
        let props: &'s [u8] = props;
        Ok(InnerMessage { topic: SCHEDULE_TOPIC, queue_id: level - 1, properties: props, ..msg.clone() })
    }

    /// `handleScheduleMessage`'s decision: the delay level (clamped to the highest configured level) when a
    /// message of transaction type `transaction` with `DELAY` text `delay` goes to `SCHEDULE_TOPIC_XXXX`, None
    /// when it is stored as is (no DELAY, a level of 0 or less, a PREPARED or ROLLBACK message). A DELAY that is
    /// not a Java int fails as the broker's `Integer.parseInt` does, before anything is written.
    pub(crate) fn schedule_level(&self, delay: Option<&str>, transaction: TransactionType) -> Result<Option<i32>> {
        if !matches!(transaction, TransactionType::NotType | TransactionType::Commit) {
            return Ok(None);
        }
        let Some(text) = delay else { return Ok(None) };
        let level = crate::java::parse_int(text).ok_or_else(|| {
            Error::IllegalMessage(format!(
                "the DELAY property must be a delay level (an int), got {text:?}; nothing was written"
            ))
        })?;
        if level <= 0 {
            return Ok(None);
        }
        let max = i32::try_from(self.delay_levels.len()).unwrap_or(i32::MAX);
        if max == 0 {
            return Err(Error::IllegalMessage("DELAY is set but message_delay_level defines no levels".into()));
        }
        Ok(Some(level.min(max)))
    }

    /// [`put_inner`](Self::put_inner) without the schedule hook, with the store host written into the record
    /// (the schedule service delivers a message with the store host it was stored with, as `messageTimeUp`
    /// does).
    pub(crate) fn put_inner_as_is(&self, msg: &InnerMessage<'_>, store_host: SocketAddr) -> Result<PutResult> {
        self.check_writable()?;
        self.check_disk_space()?;
        let mut buf = Scratch::take(128 + msg.body.len() + msg.properties.len());
        let (record, uniq) = self.encode_inner(msg, store_host, &mut buf.0)?;
        let uniq_keys = PerRecord::from_buf([uniq]);
        self.append(msg.topic, msg.queue_id, msg.transaction, &mut buf.0, &[record], uniq_keys, msg.wait_store_msg_ok)
    }

    /// Checks `msg` (topic, sys flag, queue id and the other fields a put checks) and encodes it onto `out`, with
    /// `store_host` in the record; returns the record and the UNIQ_KEY its properties carry.
    fn encode_inner(
        &self,
        msg: &InnerMessage<'_>,
        store_host: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Result<(EncodedRecord, UniqKey)> {
        validate::check_topic_name(msg.topic)?;
        validate::check_message_fields(
            msg.sys_flag,
            msg.queue_id,
            msg.reconsume_times,
            msg.prepared_transaction_offset,
        )?;
        let props = strip_if_crc(msg.properties, self.config.commit_log.enabled_append_prop_crc);
        let uniq = properties::get_raw(&props, keys::UNIQ_KEY)
            .map(|u| UniqKey::from(String::from_utf8_lossy(u).as_ref()))
            .unwrap_or_default();
        let input = EncodeInput {
            topic: msg.topic,
            queue_id: msg.queue_id,
            flag: msg.flag,
            body: msg.body,
            properties: &props,
            sys_flag: msg.sys_flag | msg.transaction.bits(),
            born_timestamp: msg.born_timestamp,
            born_host: msg.born_host,
            store_host,
            store_timestamp: now_ms(),
            reconsume_times: msg.reconsume_times,
            prepared_transaction_offset: msg.prepared_transaction_offset,
            queue_offset: 0,
            physical_offset: 0,
        };
        Ok((encode_record(&input, &self.encode_options(true), out)?, uniq))
    }

    /// Stores one message. A `DELAY` property with a level > 0 (message of transaction type NOT or COMMIT) is
    /// stored as RocketMQ's broker stores it: the level clamped to the highest level of `message_delay_level`,
    /// `REAL_TOPIC` / `REAL_QID` added to the broker's property map (the timer properties `TIMER_DELIVER_MS`,
    /// `TIMER_DELAY_SEC`, `TIMER_DELAY_MS` removed from it), topic `SCHEDULE_TOPIC_XXXX`, queue level − 1;
    /// the schedule service delivers it to its topic and queue when due. A `DELAY` of 0 or less is stored as
    /// is in the message's own topic; one that is not an int is [`Error::IllegalMessage`] (nothing written).
    pub fn put(&self, msg: &PutMessage<'_>) -> Result<PutResult> {
        self.check_writable()?;
        self.check_disk_space()?;
        validate::check_topic(msg.topic)?;
        validate::check_message_fields(
            msg.sys_flag,
            msg.queue_id,
            msg.reconsume_times,
            msg.prepared_transaction_offset,
        )?;
        validate::check_properties(msg.tags, msg.keys, msg.properties)?;
        let config = &self.config;
        let now = now_ms();
        let uniq = self.uniq_key(msg.properties, now);
        let wait = if msg.wait_store_msg_ok { "true" } else { "false" };
        let mut props = Scratch::take(256);
        let (topic, queue_id, tran) = if msg.properties.is_empty() {
            // No properties of the producer's own: not a half message, no delay, a generated UNIQ_KEY.
            let cluster = config.broker.broker_cluster_name.as_deref();
            let u = uniq.as_deref().unwrap_or_default();
            write_plain_properties(&mut props.0, msg.tags, msg.keys, wait, u, cluster);
            (msg.topic, msg.queue_id, msg.transaction)
        } else {
            self.broker_properties(msg, wait, uniq.as_deref(), &mut props.0)?
        };
        let props = strip_if_crc(&props.0, config.commit_log.enabled_append_prop_crc);
        let input = EncodeInput {
            topic,
            queue_id,
            flag: msg.flag,
            body: msg.body,
            properties: &props,
            sys_flag: msg.sys_flag | tran.bits(),
            born_timestamp: msg.born_timestamp.unwrap_or(now),
            born_host: msg.born_host,
            store_host: config.broker.store_host,
            store_timestamp: now,
            reconsume_times: msg.reconsume_times,
            prepared_transaction_offset: msg.prepared_transaction_offset,
            queue_offset: 0,
            physical_offset: 0,
        };
        let uniq = uniq.unwrap_or_else(|| given_uniq_key(msg.properties));
        self.append_one(&input, tran, uniq, msg.wait_store_msg_ok)
    }

    /// The broker's property map of a put that carries properties of its own, written to `out` in its
    /// iteration order, and where the message goes: a half message to the half topic's queue 0, a delayed one
    /// to the schedule topic's queue of its level.
    fn broker_properties<'a>(
        &self,
        msg: &PutMessage<'a>,
        wait: &str,
        uniq: Option<&str>,
        out: &mut Vec<u8>,
    ) -> Result<(&'a str, i32, TransactionType)> {
        let config = &self.config;
        let (level_text, qid_text, real_qid): (String, String, String);
        // As a broker: the producer's HashMap(16) string is parsed into HashMap(128), CLUSTER is added, and
        // the map is serialized again.
        let mut client = client_property_order(msg.tags, msg.keys, Some(wait), msg.properties, uniq);
        if let Some(cluster) = config.broker.broker_cluster_name.as_deref() {
            // The broker always sets its own cluster name (`SendMessageProcessor`), keeping the entry's position.
            match client.iter_mut().find(|(n, _)| *n == keys::CLUSTER) {
                Some(slot) => slot.1 = cluster,
                None => client.push((keys::CLUSTER, cluster)),
            }
        }
        // A half message (`TransactionalMessageBridge.parseHalfMessageInner`): the real topic and queue in
        // properties, stored in the half topic's queue 0 with the transaction bits cleared.
        let half = transaction::is_half(msg.properties, msg.reconsume_times);
        let (mut topic, mut queue_id, tran) = if half {
            if config.transaction.reject_transaction_message {
                return Err(Error::Transaction(
                    "sending transaction messages is forbidden (reject_transaction_message)".into(),
                ));
            }
            let uniq_key = client.iter().find(|(n, _)| *n == keys::UNIQ_KEY).map(|(_, v)| *v);
            real_qid = msg.queue_id.to_string();
            transaction::half_properties(&mut client, msg.topic, &real_qid, uniq_key);
            (transaction::HALF_TOPIC, 0, TransactionType::NotType)
        } else {
            (msg.topic, msg.queue_id, msg.transaction)
        };
        properties::sort_hashmap_order(&mut client, BROKER_MAP_CAPACITY);
        let delay = client.iter().find(|(n, _)| *n == keys::DELAY).map(|(_, v)| *v);
        // A half message is of type NOT here, so a DELAY on it schedules it as the broker's hook does (its
        // REAL_TOPIC becomes the half topic, which the schedule service then refuses to deliver, reporting it).
        if let Some(level) = self.schedule_level(delay, tran)? {
            // `transformDelayLevelMessage`: the same map gains REAL_TOPIC and REAL_QID (and a clamped DELAY).
            if delay.and_then(crate::java::parse_int) != Some(level) {
                level_text = level.to_string();
                if let Some(slot) = client.iter_mut().find(|(n, _)| *n == keys::DELAY) {
                    slot.1 = &level_text;
                }
            }
            qid_text = queue_id.to_string();
            // `checkIfTimerMessage` clears the timer properties of a message with a delay level.
            client.retain(|(n, _)| !keys::TIMER.contains(n));
            put_entry(&mut client, keys::REAL_TOPIC, topic);
            put_entry(&mut client, keys::REAL_QID, &qid_text);
            properties::sort_hashmap_order(&mut client, BROKER_MAP_CAPACITY);
            (topic, queue_id) = (SCHEDULE_TOPIC, level - 1);
        }
        // RocketMQ's producer refuses every empty body ("the message body length is zero"), and its broker,
        // taking over a store that holds one, cannot put it again where these go next: the schedule service
        // drops a delayed one when it is due, and the transaction check stalls on a half (both re-put through
        // the put hook, which refuses a body Java reads back as null).
        if msg.body.is_empty() && (half || topic == SCHEDULE_TOPIC) {
            let what = if half { "a transactional half message" } else { "a delayed message" };
            return Err(Error::IllegalMessage(format!(
                "{what} needs a body: RocketMQ puts it again later and refuses an empty body then; nothing was written"
            )));
        }
        properties::write_properties(out, client.iter().copied());
        Ok((topic, queue_id, tran))
    }

    /// Stores a batch (RocketMQ's traditional batch): one record per item, consecutive queue offsets, one
    /// store timestamp, all in one segment. Batch members cannot be transactional or delayed. Every item is
    /// checked and encoded before anything is written: a bad one writes nothing of the batch.
    #[allow(clippy::too_many_arguments)]
    pub fn put_batch(
        &self,
        topic: &str,
        queue_id: i32,
        items: &[BatchItem<'_>],
        sys_flag: i32,
        born_host: SocketAddr,
        born_timestamp: Option<i64>,
        reconsume_times: i32,
        wait_store_msg_ok: bool,
    ) -> Result<PutResult> {
        self.check_writable()?;
        self.check_disk_space()?;
        let EncodedBatch { mut buf, records, uniq_keys } = self.encode_batch(
            topic,
            queue_id,
            items,
            sys_flag,
            born_host,
            born_timestamp,
            reconsume_times,
            wait_store_msg_ok,
            false,
        )?;
        self.append(topic, queue_id, TransactionType::NotType, &mut buf, &records, uniq_keys, wait_store_msg_ok)
    }

    /// The checks [`MessageStore::put_batch`] makes before it writes (topic, fields, every item's tags, keys and
    /// properties, sizes, the encoding of each record), writing nothing: `Ok` when that batch would be
    /// accepted by them. A caller that splits its messages over several batches checks them all first, so that
    /// a bad message writes none of them.
    #[allow(clippy::too_many_arguments)]
    pub fn check_batch(
        &self,
        topic: &str,
        queue_id: i32,
        items: &[BatchItem<'_>],
        sys_flag: i32,
        born_host: SocketAddr,
        born_timestamp: Option<i64>,
        reconsume_times: i32,
        wait_store_msg_ok: bool,
    ) -> Result<()> {
        self.encode_batch(
            topic,
            queue_id,
            items,
            sys_flag,
            born_host,
            born_timestamp,
            reconsume_times,
            wait_store_msg_ok,
            true,
        )
        .map(drop)
    }

    /// A batch checked and encoded, not yet appended.
    #[allow(clippy::too_many_arguments)]
    fn encode_batch(
        &self,
        topic: &str,
        queue_id: i32,
        items: &[BatchItem<'_>],
        sys_flag: i32,
        born_host: SocketAddr,
        born_timestamp: Option<i64>,
        reconsume_times: i32,
        wait_store_msg_ok: bool,
        dry: bool,
    ) -> Result<EncodedBatch> {
        validate::check_topic(topic)?;
        validate::check_message_fields(sys_flag, queue_id, reconsume_times, 0)?;
        if items.is_empty() {
            return Err(Error::IllegalMessage("a batch needs at least one message".into()));
        }
        let config = &self.config;
        let opts = self.encode_options(false);
        let max_body = usize::try_from(opts.max_message_size).unwrap_or(0);
        let now = now_ms();
        let wait = if wait_store_msg_ok { "true" } else { "false" };
        // A dry run (`check_batch`) makes the same checks without the records' bytes: no buffer, body copy or CRC.
        let mut buf = if dry { Vec::new() } else { Vec::with_capacity(items.iter().map(|i| 160 + i.body.len()).sum()) };
        let mut records = Vec::with_capacity(items.len());
        let mut uniq_keys = PerRecord::with_capacity(items.len());
        let mut props = Vec::with_capacity(256);
        let mut batch_body_len = 0usize;
        for item in items {
            validate::check_properties(item.tags, item.keys, item.properties)?;
            if item.properties.iter().any(|(n, _)| *n == keys::DELAY) {
                return Err(Error::IllegalMessage("batch messages cannot carry a DELAY property".into()));
            }
            let uniq = self.uniq_key(item.properties, now);
            props.clear();
            match uniq.as_deref() {
                Some(u) if item.properties.is_empty() => {
                    write_plain_batch_properties(&mut props, item.tags, item.keys, wait, u)
                }
                _ => {
                    let client =
                        client_property_order(item.tags, item.keys, Some(wait), item.properties, uniq.as_deref());
                    properties::write_properties(&mut props, client.iter().copied());
                }
            }
            let stored = strip_if_crc(&props, config.commit_log.enabled_append_prop_crc);
            // The client's batch encoding of this member: 4+4+4+4+4 + body + 2 + properties.
            batch_body_len += 22 + item.body.len() + stored.len();
            if batch_body_len > max_body {
                return Err(Error::MessageTooLarge(format!(
                    "the batch body exceeds max_message_size {max_body} (message body size exceeded)"
                )));
            }
            let input = EncodeInput {
                topic,
                queue_id,
                flag: item.flag,
                body: item.body,
                properties: &stored,
                sys_flag,
                born_timestamp: born_timestamp.unwrap_or(now),
                born_host,
                store_host: config.broker.store_host,
                store_timestamp: now,
                reconsume_times,
                prepared_transaction_offset: 0,
                queue_offset: 0,
                physical_offset: 0,
            };
            if dry {
                check_record(&input, &opts)?;
            } else {
                records.push(encode_record(&input, &opts, &mut buf)?);
            }
            uniq_keys.push(uniq.unwrap_or_else(|| given_uniq_key(item.properties)));
        }
        Ok(EncodedBatch { buf, records, uniq_keys })
    }

    /// Encodes one record and appends it (the single-message puts).
    fn append_one(
        &self,
        input: &EncodeInput<'_>,
        transaction: TransactionType,
        uniq_key: UniqKey,
        wait: bool,
    ) -> Result<PutResult> {
        let mut buf = Scratch::take(128 + input.body.len() + input.properties.len());
        let rec = encode_record(input, &self.encode_options(true), &mut buf.0)?;
        let uniq_keys = PerRecord::from_buf([uniq_key]);
        self.append(input.topic, input.queue_id, transaction, &mut buf.0, &[rec], uniq_keys, wait)
    }

    #[allow(clippy::too_many_arguments)]
    fn append(
        &self,
        topic: &str,
        queue_id: i32,
        transaction: TransactionType,
        buf: &mut [u8],
        records: &[EncodedRecord],
        uniq_keys: PerRecord<UniqKey>,
        wait: bool,
    ) -> Result<PutResult> {
        let config = &self.config;
        let takes_offset = transaction.takes_queue_offset();
        let (appended, base) = {
            let mut table = self.queue_table.lock().unwrap_or_else(|p| p.into_inner());
            // The queue's entry, looked up once when it exists (every put but a queue's first).
            let slot = table.get_mut(topic).and_then(|q| q.get_mut(&queue_id));
            let base = slot.as_deref().copied().unwrap_or(0);
            let appended: Appended =
                self.commitlog.append(buf, records, |i| if takes_offset { base + i as i64 } else { 0 })?;
            if takes_offset {
                let next = base + records.len() as i64;
                match slot {
                    Some(offset) => *offset = next,
                    None => {
                        table.entry(topic.to_owned()).or_default().insert(queue_id, next);
                    }
                }
            }
            (appended, base)
        };
        let status = self.after_append(&appended, wait);
        Ok(PutResult {
            status,
            offsets: records.iter().map(|r| appended.first_offset + r.start as u64).collect(),
            wrote_bytes: appended.wrote_bytes,
            queue_offset: if takes_offset { base } else { 0 },
            store_timestamp: appended.store_timestamp,
            uniq_keys,
            store_host: config.broker.store_host,
        })
    }

    /// What every append does after it: the store's newest timestamp, the transient pool's commit, under
    /// SYNC_FLUSH the flush (waited for when `wait`) that gives the put its status, and the services woken.
    #[inline]
    fn after_append(&self, appended: &Appended, wait: bool) -> PutMessageStatus {
        let config = &self.config;
        let end = appended.first_offset + appended.wrote_bytes;
        self.appended_timestamp.fetch_max(appended.store_timestamp, Ordering::AcqRel);
        if self.commitlog.transient_pool().is_some() {
            // Failing only on an injected write fault; the bytes stay in the buffer for the next commit.
            let _ = self.after_pooled_put();
        }
        let mut status = PutMessageStatus::PutOk;
        if config.commit_log.flush_disk_type == FlushDiskType::SyncFlush {
            status = self.sync_flush(appended.dirty_from, end, appended.store_timestamp, wait);
        }
        self.services.wakeup(services::reput::NAME);
        if config.flush.wake_flush_when_put_message {
            self.services.wakeup(services::flush::NAME);
        }
        if appended.wake_warm {
            self.services.wakeup(services::warm::NAME);
        }
        status
    }

    /// A new UNIQ_KEY for a message whose properties `props` carry none (None when they carry one:
    /// [`given_uniq_key`]).
    fn uniq_key(&self, props: &[(&str, &str)], now: i64) -> Option<UniqKey> {
        if props.iter().any(|(n, _)| *n == keys::UNIQ_KEY) {
            None
        } else {
            Some(self.uniq.next_id(now))
        }
    }
}

impl MessageStore {
    fn encode_options(&self, single: bool) -> EncodeOptions {
        let config = &self.config;
        EncodeOptions {
            max_message_size: self.max_message_size.load(Ordering::Relaxed),
            auto_version: config.commit_log.auto_message_version_on_topic_len,
            prop_crc: config.commit_log.enabled_append_prop_crc,
            fix_separator: single,
        }
    }
}

/// The UNIQ_KEY the producer gave in `props` (the one a put then stores and reports), empty if none.
fn given_uniq_key(props: &[(&str, &str)]) -> UniqKey {
    props.iter().find(|(n, _)| *n == keys::UNIQ_KEY).map(|(_, v)| UniqKey::from(*v)).unwrap_or_default()
}

fn strip_if_crc(props: &[u8], enabled: bool) -> std::borrow::Cow<'_, [u8]> {
    if enabled {
        strip_crc_property(props)
    } else {
        std::borrow::Cow::Borrowed(props)
    }
}

/// The stored properties of a put that carries none of the producer's own (only `tags`, `keys`, the WAIT flag,
/// the generated UNIQ_KEY and the broker's CLUSTER), written straight in the order the general path
/// ([`client_property_order`], CLUSTER put, the broker's `HashMap(128)` order) gives them: by their buckets in
/// a table of 128 (UNIQ_KEY 28, CLUSTER 28, TAGS 62, KEYS 87, WAIT 93), UNIQ_KEY before CLUSTER in their
/// shared bucket because the broker puts CLUSTER after parsing the producer's string. The unit test
/// `plain_properties_match_the_general_order` holds the two paths equal.
fn write_plain_properties(
    out: &mut Vec<u8>,
    tags: Option<&str>,
    keys_text: Option<&str>,
    wait: &str,
    uniq: &str,
    cluster: Option<&str>,
) {
    let entries = [
        Some((keys::UNIQ_KEY, uniq)),
        cluster.map(|c| (keys::CLUSTER, c)),
        tags.map(|t| (keys::TAGS, t)),
        keys_text.map(|k| (keys::KEYS, k)),
        Some((keys::WAIT, wait)),
    ];
    properties::write_properties(out, entries.into_iter().flatten());
}

/// The properties of a batch member that carries none of the producer's own, in the producer's `HashMap(16)`
/// order that [`client_property_order`] gives them (buckets KEYS 7, UNIQ_KEY 12, WAIT 13, TAGS 14; a batch
/// member's map gets no CLUSTER). The unit test `plain_properties_match_the_general_order` holds the two equal.
fn write_plain_batch_properties(
    out: &mut Vec<u8>,
    tags: Option<&str>,
    keys_text: Option<&str>,
    wait: &str,
    uniq: &str,
) {
    let entries = [
        keys_text.map(|k| (keys::KEYS, k)),
        Some((keys::UNIQ_KEY, uniq)),
        Some((keys::WAIT, wait)),
        tags.map(|t| (keys::TAGS, t)),
    ];
    properties::write_properties(out, entries.into_iter().flatten());
}

/// `map.put(name, value)` on a map kept as entries in insertion order: an existing entry keeps its place.
fn put_entry<'a>(entries: &mut Entries<'a>, name: &'a str, value: &'a str) {
    match entries.iter_mut().find(|(n, _)| *n == name) {
        Some(slot) => slot.1 = value,
        None => entries.push((name, value)),
    }
}

/// The producer's property map in its iteration order (Java `HashMap(16)`), built as the Java client builds
/// it: TAGS, KEYS, WAIT from the constructor, then user properties, then UNIQ_KEY at send time.
fn client_property_order<'a>(
    tags: Option<&'a str>,
    keys_text: Option<&'a str>,
    wait: Option<&'a str>,
    user: &[(&'a str, &'a str)],
    uniq: Option<&'a str>,
) -> Entries<'a> {
    let mut entries = Entries::new();
    entries.extend(tags.map(|t| (keys::TAGS, t)));
    entries.extend(keys_text.map(|k| (keys::KEYS, k)));
    entries.extend(wait.map(|w| (keys::WAIT, w)));
    for &(n, v) in user {
        match entries.iter_mut().find(|(name, _)| *name == n) {
            Some(slot) => slot.1 = v,
            None => entries.push((n, v)),
        }
    }
    entries.extend(uniq.map(|u| (keys::UNIQ_KEY, u)));
    properties::sort_hashmap_order(&mut entries, CLIENT_MAP_CAPACITY);
    entries
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::config::StoreConfig;

    fn inner<'a>(topic: &'a str, props: &'a [u8]) -> InnerMessage<'a> {
        InnerMessage {
            topic,
            queue_id: 2,
            body: b"payload",
            properties: props,
            flag: 7,
            sys_flag: 0,
            transaction: TransactionType::NotType,
            born_host: SocketAddr::from(([10, 0, 0, 1], 4242)),
            born_timestamp: 1_700_000_000_000,
            reconsume_times: 3,
            prepared_transaction_offset: 0,
            wait_store_msg_ok: false,
        }
    }

    #[test]
    fn put_inner_stores_the_properties_as_given_and_takes_system_topics() {
        let dir = tempfile::tempdir().unwrap();
        let store = MessageStore::open(dir.path(), StoreConfig::default()).unwrap();
        let props = b"REAL_TOPIC\x01T\x02UNIQ_KEY\x01AB\x02REAL_QID\x013\x02";
        let r = store.put_inner(&inner("SCHEDULE_TOPIC_XXXX", props)).unwrap();
        assert_eq!(r.queue_offset, 0);
        assert_eq!(r.uniq_keys.as_slice(), [UniqKey::from("AB")]);
        let rec = store.read(r.offsets[0]).unwrap().unwrap();
        let (h, bytes) = (&rec.header, rec.bytes());
        assert_eq!(h.topic(bytes), b"SCHEDULE_TOPIC_XXXX");
        assert_eq!(h.properties(bytes), &props[..]);
        assert_eq!((h.queue_id, h.flag, h.reconsume_times), (2, 7, 3));
        assert_eq!(h.born_timestamp, 1_700_000_000_000);
        assert_eq!(store.next_queue_offset("SCHEDULE_TOPIC_XXXX", 2), 1);
    }

    fn levels(spec: &str) -> StoreConfig {
        let mut c = StoreConfig::default();
        c.dispatch.message_delay_level = spec.to_owned();
        c
    }

    #[test]
    fn a_delay_level_puts_the_message_in_the_schedule_topic_with_its_real_topic_and_queue() {
        let dir = tempfile::tempdir().unwrap();
        let store = MessageStore::open(dir.path(), levels("1s 2s 3s")).unwrap();
        let props = [("biz", "1"), ("DELAY", "7"), ("TIMER_DELAY_SEC", "9")];
        let r = store.put(&PutMessage { properties: &props, ..PutMessage::new("T", 5, b"x") }).unwrap();
        let rec = store.read(r.offsets[0]).unwrap().unwrap();
        let (h, bytes) = (&rec.header, rec.bytes());
        assert_eq!((h.topic(bytes), h.queue_id), (SCHEDULE_TOPIC.as_bytes(), 2));
        let p = properties::parse(h.properties(bytes));
        let get = |k: &str| p.iter().find(|(n, _)| n == k).map(|(_, v)| v.to_string());
        assert_eq!(get("DELAY").as_deref(), Some("3"), "clamped to the highest level");
        assert_eq!((get("REAL_TOPIC").as_deref(), get("REAL_QID").as_deref()), (Some("T"), Some("5")));
        assert_eq!(get("TIMER_DELAY_SEC"), None);
        assert_eq!((store.next_queue_offset(SCHEDULE_TOPIC, 2), store.next_queue_offset("T", 5)), (1, 0));
        // The same through put_inner (the hook applies to every put of type NOT / COMMIT).
        let r = store.put_inner(&inner("T", b"DELAY\x011\x02UNIQ_KEY\x01AB\x02")).unwrap();
        let rec = store.read(r.offsets[0]).unwrap().unwrap();
        let (h, bytes) = (&rec.header, rec.bytes());
        assert_eq!((h.topic(bytes), h.queue_id), (SCHEDULE_TOPIC.as_bytes(), 0));
        assert_eq!(properties::get_raw(h.properties(bytes), keys::REAL_QID), Some(&b"2"[..]));
    }

    #[test]
    fn a_delay_that_is_not_an_int_is_refused_and_nothing_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let store = MessageStore::open(dir.path(), StoreConfig::default()).unwrap();
        for bad in ["x", "2147483648", "+"] {
            let props = [("DELAY", bad)];
            let err = store.put(&PutMessage { properties: &props, ..PutMessage::new("T", 0, b"x") });
            assert!(matches!(err, Err(Error::IllegalMessage(_))), "{bad}");
            let raw = format!("DELAY\x01{bad}\x02");
            assert!(matches!(store.put_inner(&inner("T", raw.as_bytes())), Err(Error::IllegalMessage(_))));
        }
        assert_eq!(store.commitlog().max_offset(), 0);
        assert_eq!(store.next_queue_offset("T", 0), 0);
        // A PREPARED message is not scheduled, so its DELAY is not parsed.
        let props = [("DELAY", "x")];
        let prepared =
            PutMessage { properties: &props, transaction: TransactionType::Prepared, ..PutMessage::new("T", 0, b"x") };
        assert!(store.put(&prepared).is_ok());
    }

    #[test]
    fn put_inner_refuses_a_topic_that_would_be_a_path_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = MessageStore::open(dir.path(), StoreConfig::default()).unwrap();
        let before = store.commitlog().max_offset();
        assert!(matches!(store.put_inner(&inner("../x", b"")), Err(Error::InvalidTopic { .. })));
        assert_eq!(store.commitlog().max_offset(), before);
        assert_eq!(store.next_queue_offset("../x", 2), 0);
    }

    /// The general order: the producer's map, the broker's CLUSTER put into it, the broker's map order.
    fn general_order(
        tags: Option<&str>,
        keys_text: Option<&str>,
        wait: &str,
        uniq: &str,
        cluster: Option<&str>,
    ) -> Vec<u8> {
        let mut entries = client_property_order(tags, keys_text, Some(wait), &[], Some(uniq));
        if let Some(c) = cluster {
            put_entry(&mut entries, keys::CLUSTER, c);
        }
        properties::sort_hashmap_order(&mut entries, BROKER_MAP_CAPACITY);
        let mut out = Vec::new();
        properties::write_properties(&mut out, entries.iter().copied());
        out
    }

    #[test]
    fn plain_properties_match_the_general_order() {
        let uniq = "7F0000013E0F7E67633F935A83770000";
        for tags in [None, Some("TagA"), Some("a||b")] {
            for keys_text in [None, Some("k1"), Some("k1 k2 k3")] {
                for wait in ["true", "false"] {
                    for cluster in [None, Some("DefaultCluster"), Some("c")] {
                        let mut fast = Vec::new();
                        write_plain_properties(&mut fast, tags, keys_text, wait, uniq, cluster);
                        assert_eq!(
                            fast,
                            general_order(tags, keys_text, wait, uniq, cluster),
                            "{tags:?} {keys_text:?} {wait} {cluster:?}"
                        );
                    }
                    let mut batch = Vec::new();
                    write_plain_batch_properties(&mut batch, tags, keys_text, wait, uniq);
                    let client = client_property_order(tags, keys_text, Some(wait), &[], Some(uniq));
                    let mut general = Vec::new();
                    properties::write_properties(&mut general, client.iter().copied());
                    assert_eq!(batch, general, "batch {tags:?} {keys_text:?} {wait}");
                }
            }
        }
    }

    #[test]
    fn a_put_without_properties_stores_the_general_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = MessageStore::open(dir.path(), StoreConfig::default()).unwrap();
        let msg = PutMessage { tags: Some("TagA"), keys: Some("k1 k2"), ..PutMessage::new("T", 0, b"body") };
        let r = store.put(&msg).unwrap();
        let rec = store.read(r.offsets[0]).unwrap().unwrap();
        let uniq = r.uniq_keys[0].to_string();
        let expected = general_order(Some("TagA"), Some("k1 k2"), "true", &uniq, Some("DefaultCluster"));
        assert_eq!(rec.header.properties(rec.bytes()), &expected[..]);
    }
}
