//! `MessageStore`: the write path (checks, properties as a broker builds them, queue offsets, append, flush)
//! and the read path by physical offset, over one store directory.

pub mod validate;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;

use crate::checkpoint::{AbortFile, LockFile};
use crate::commitlog::{now_ms, Appended, CommitLog, OpenReport, Record};
use crate::config::{FlushDiskType, StoreConfig};
use crate::error::{Error, Result};
use crate::message::encode::{encode_record, strip_crc_property, EncodeInput, EncodeOptions, EncodedRecord};
use crate::message::ids::{offset_msg_id, UniqIdGenerator};
use crate::message::properties::{self, keys, BROKER_MAP_CAPACITY, CLIENT_MAP_CAPACITY};
use crate::message::{PutMessageStatus, TransactionType};

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
    pub offsets: Vec<u64>,
    /// Bytes written for the records.
    pub wrote_bytes: u64,
    /// Queue offset of the first message (0 for PREPARED / ROLLBACK messages, which take none).
    pub queue_offset: i64,
    /// Store timestamp, ms.
    pub store_timestamp: i64,
    /// UNIQ_KEY of each message.
    pub uniq_keys: Vec<String>,
    /// Store host (for message ids).
    pub store_host: SocketAddr,
}

impl PutResult {
    /// offsetMsgId of each record.
    pub fn msg_ids(&self) -> Vec<String> {
        self.offsets.iter().map(|&o| offset_msg_id(self.store_host, o as i64)).collect()
    }
}

type QueueTable = HashMap<String, HashMap<i32, i64>>;

/// An open store directory.
#[derive(Debug)]
pub struct MessageStore {
    root: PathBuf,
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
    state: Mutex<State>,
}

#[derive(Debug)]
enum State {
    Open { _lock: LockFile, abort: AbortFile },
    Poisoned(String),
    Closed,
}

impl MessageStore {
    /// Opens (creating if needed) the store at `root`: takes the lock, finds the end of the commitlog,
    /// rebuilds the queue-offset table, and marks the store as running (abort file).
    pub fn open(root: &Path, mut config: StoreConfig) -> Result<Self> {
        config.validate()?;
        config.broker.store_host = crate::message::encode::canonical_host(config.broker.store_host);
        std::fs::create_dir_all(root).map_err(|e| Error::io(root, e))?;
        let lock = LockFile::acquire(root)?;
        let unclean_shutdown = AbortFile::exists(root);
        let (commitlog, open_report) = CommitLog::open(&root.join("commitlog"), config.commit_log.clone())?;
        let queue_table = rebuild_queue_table(&commitlog)?;
        let abort = AbortFile::create(root)?;
        let uniq = UniqIdGenerator::new(config.broker.store_host.ip());
        Ok(MessageStore {
            root: root.to_owned(),
            max_message_size: AtomicI32::new(config.commit_log.max_message_size),
            config,
            commitlog,
            queue_table: Mutex::new(queue_table),
            uniq,
            open_report,
            unclean_shutdown,
            state: Mutex::new(State::Open { _lock: lock, abort }),
        })
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

    /// Changes `maxMessageSize` for later puts (RocketMQ re-reads it on every put; values below 10 are ignored).
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
        match &*self.state() {
            State::Open { .. } => Ok(()),
            State::Poisoned(why) => Err(Error::Poisoned(why.clone())),
            State::Closed => Err(Error::Closed),
        }
    }

    /// Errors unless the store is open (reads work on a poisoned store).
    pub fn check_open(&self) -> Result<()> {
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

    /// Stores one message.
    pub fn put(&self, msg: &PutMessage<'_>) -> Result<PutResult> {
        self.check_writable()?;
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
        // As a broker: the producer's HashMap(16) string is parsed into HashMap(128), CLUSTER is added, and
        // the map is serialized again.
        let mut client = client_property_order(msg.tags, msg.keys, Some(wait), msg.properties, uniq.as_deref());
        if let Some(cluster) = config.broker.broker_cluster_name.as_deref() {
            // The broker always sets its own cluster name (`SendMessageProcessor`), keeping the entry's position.
            match client.iter_mut().find(|(n, _)| *n == keys::CLUSTER) {
                Some(slot) => slot.1 = cluster,
                None => client.push((keys::CLUSTER, cluster)),
            }
        }
        properties::sort_hashmap_order(&mut client, BROKER_MAP_CAPACITY);
        let mut props = Vec::with_capacity(256);
        properties::write_properties(&mut props, client.iter().copied());
        let props = strip_if_crc(&props, config.commit_log.enabled_append_prop_crc);
        let input = EncodeInput {
            topic: msg.topic,
            queue_id: msg.queue_id,
            flag: msg.flag,
            body: msg.body,
            properties: &props,
            sys_flag: msg.sys_flag | msg.transaction.bits(),
            born_timestamp: msg.born_timestamp.unwrap_or(now),
            born_host: msg.born_host,
            store_host: config.broker.store_host,
            store_timestamp: now,
            reconsume_times: msg.reconsume_times,
            prepared_transaction_offset: msg.prepared_transaction_offset,
            queue_offset: 0,
            physical_offset: 0,
        };
        let mut buf = Vec::with_capacity(128 + msg.body.len() + props.len());
        let rec = encode_record(&input, &self.encode_options(true), &mut buf)?;
        let uniq_keys = vec![uniq.unwrap_or_default()];
        self.append(msg.topic, msg.queue_id, msg.transaction, &mut buf, &[rec], uniq_keys)
    }

    /// Stores a batch (RocketMQ's traditional batch): one record per item, consecutive queue offsets, one
    /// store timestamp, all in one segment. Batch members cannot be transactional or delayed.
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
        let mut buf = Vec::with_capacity(items.iter().map(|i| 160 + i.body.len()).sum());
        let mut records = Vec::with_capacity(items.len());
        let mut uniq_keys = Vec::with_capacity(items.len());
        let mut props = Vec::with_capacity(256);
        let mut batch_body_len = 0usize;
        for item in items {
            validate::check_properties(item.tags, item.keys, item.properties)?;
            if item.properties.iter().any(|(n, _)| *n == keys::DELAY) {
                return Err(Error::IllegalMessage("batch messages cannot carry a DELAY property".into()));
            }
            let uniq = self.uniq_key(item.properties, now);
            let client = client_property_order(item.tags, item.keys, Some(wait), item.properties, uniq.as_deref());
            props.clear();
            properties::write_properties(&mut props, client.iter().copied());
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
            records.push(encode_record(&input, &opts, &mut buf)?);
            uniq_keys.push(uniq.unwrap_or_default());
        }
        self.append(topic, queue_id, TransactionType::NotType, &mut buf, &records, uniq_keys)
    }

    #[allow(clippy::too_many_arguments)]
    fn append(
        &self,
        topic: &str,
        queue_id: i32,
        transaction: TransactionType,
        buf: &mut [u8],
        records: &[EncodedRecord],
        uniq_keys: Vec<String>,
    ) -> Result<PutResult> {
        let config = &self.config;
        let takes_offset = transaction.takes_queue_offset();
        let (appended, base) = {
            let mut table = self.queue_table.lock().unwrap_or_else(|p| p.into_inner());
            let base = table.get(topic).and_then(|q| q.get(&queue_id)).copied().unwrap_or(0);
            let appended: Appended =
                self.commitlog.append(buf, records, |i| if takes_offset { base + i as i64 } else { 0 })?;
            if takes_offset {
                let queues = match table.get_mut(topic) {
                    Some(q) => q,
                    None => table.entry(topic.to_owned()).or_default(),
                };
                queues.insert(queue_id, base + records.len() as i64);
            }
            (appended, base)
        };
        let end = appended.first_offset + appended.wrote_bytes;
        let mut status = PutMessageStatus::PutOk;
        if config.commit_log.flush_disk_type == FlushDiskType::SyncFlush {
            if let Err(e) = self.commitlog.flush_range(appended.dirty_from, end) {
                *self.state() = State::Poisoned(e.to_string());
                status = PutMessageStatus::FlushDiskTimeout;
            }
        }
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

    fn uniq_key(&self, props: &[(&str, &str)], now: i64) -> Option<String> {
        if props.iter().any(|(n, _)| *n == keys::UNIQ_KEY) {
            None
        } else {
            Some(self.uniq.next_id(now))
        }
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

    /// Flushes all written data to disk.
    pub fn flush(&self) -> Result<()> {
        self.check_open()?;
        if let Err(e) = self.commitlog.flush() {
            *self.state() = State::Poisoned(e.to_string());
            return Err(e);
        }
        Ok(())
    }

    /// Flushes, releases the lock and removes the abort file. Idempotent. A poisoned store keeps its abort file
    /// so the next open knows the last run did not end cleanly.
    pub fn close(&self) -> Result<()> {
        let previous = std::mem::replace(&mut *self.state(), State::Closed);
        match previous {
            State::Open { _lock, abort } => {
                self.commitlog.flush()?;
                abort.remove()
            }
            State::Poisoned(_) | State::Closed => Ok(()),
        }
    }
}

impl Drop for MessageStore {
    fn drop(&mut self) {
        let _ = self.close();
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

fn strip_if_crc(props: &[u8], enabled: bool) -> std::borrow::Cow<'_, [u8]> {
    if enabled {
        strip_crc_property(props)
    } else {
        std::borrow::Cow::Borrowed(props)
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
) -> Vec<(&'a str, &'a str)> {
    let mut entries: Vec<(&str, &str)> = Vec::with_capacity(user.len() + 4);
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

/// Rebuilds the next queue offset of every (topic, queue) from the records in the commitlog.
fn rebuild_queue_table(log: &CommitLog) -> Result<QueueTable> {
    let mut table = QueueTable::new();
    let mut offset = log.min_offset();
    while let Some((rec, next)) = log.next_record(offset)? {
        let h = &rec.header;
        if h.transaction_type().takes_queue_offset() {
            let topic = crate::java::decode_utf8_lossy(h.topic(rec.bytes())).into_owned();
            let slot = table.entry(topic).or_default().entry(h.queue_id).or_insert(0);
            *slot = (*slot).max(h.queue_offset + 1);
        }
        offset = next;
    }
    Ok(table)
}
