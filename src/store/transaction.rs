//! Transactional messages as a RocketMQ 5.3.1 broker keeps them (`TransactionalMessageBridge`,
//! `TransactionalMessageServiceImpl`, `EndTransactionProcessor`, `TransactionalMessageUtil`).
//!
//! - A producer put with `TRAN_MSG=true` is a **half message**: stored in `RMQ_SYS_TRANS_HALF_TOPIC` queue 0 with
//!   `REAL_TOPIC` / `REAL_QID` / `__transactionId__` properties and the transaction bits of its sys flag cleared
//!   ([`half_properties`], called from `put`). Consumers of the real topic never see it.
//! - [`MessageStore::end_transaction`] commits (the message is written to its real topic, as
//!   `endMessageTransaction` builds it) or rolls back, then writes the **op record**: topic
//!   `RMQ_SYS_TRANS_OP_HALF_TOPIC`, the half's queue id, tag `d`, body the half's queue offset followed by `,`.
//!   RocketMQ 5.3.1 batches op bodies per op queue (`TransactionalOpBatchService`, one record per
//!   `transactionOpBatchInterval` holding `o1,o2,...,`); rmq writes one op record per end, synchronously, which is
//!   the bytes 5.3.1 writes for a batch of one and which its check reads the same way.
//! - [`MessageStore::transaction_check`] is one round of `TransactionalMessageServiceImpl.check` over half queue 0:
//!   it reads the op queue to learn which halves are done, re-puts each half that is due for a check (with
//!   `TRANSACTION_CHECK_TIMES` incremented, as `putBackHalfMsgQueue` does) and returns it for the producer's
//!   checker; halves checked `transactionCheckMax` times go to `TRANS_CHECK_MAX_TIME_TOPIC`. The group
//!   `CID_RMQ_SYS_TRANS`'s offsets of both queues are the caller's to keep (in consumerOffset.json): the round takes
//!   them and returns the new ones.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use crate::commitlog::{now_ms, Record};
use crate::error::{Error, Result};
use crate::message::ids::offset_msg_id;
use crate::message::properties::{self, keys, BROKER_MAP_CAPACITY, CLIENT_MAP_CAPACITY};
use crate::message::TransactionType;

use super::put::{InnerMessage, PutResult};
use super::validate::PRODUCER_SYS_FLAGS;
use super::MessageStore;

/// `TopicValidator.RMQ_SYS_TRANS_HALF_TOPIC`: where half messages wait.
pub const HALF_TOPIC: &str = "RMQ_SYS_TRANS_HALF_TOPIC";
/// `TopicValidator.RMQ_SYS_TRANS_OP_HALF_TOPIC`: one record per ended half (or batch of them).
pub const OP_TOPIC: &str = "RMQ_SYS_TRANS_OP_HALF_TOPIC";
/// `TopicValidator.RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC`: halves discarded after too many checks.
pub const CHECK_MAX_TIME_TOPIC: &str = "TRANS_CHECK_MAX_TIME_TOPIC";
/// `MixAll.CID_SYS_RMQ_TRANS`: the group whose offsets track the check's progress in both queues.
pub const CHECK_GROUP: &str = "CID_RMQ_SYS_TRANS";
/// `TransactionalMessageUtil.REMOVE_TAG`: the tag of op records.
pub const REMOVE_TAG: &str = "d";
/// `TransactionalMessageUtil.OFFSET_SEPARATOR`: ends each half queue offset in an op body.
pub const OFFSET_SEPARATOR: char = ',';
/// `TransactionalMessageUtil.TRANSACTION_ID`: the half's UNIQ_KEY, copied by the broker.
pub const TRANSACTION_ID: &str = "__transactionId__";
/// `MessageConst` property names the protocol uses.
pub mod props {
    pub const REAL_TOPIC: &str = "REAL_TOPIC";
    pub const REAL_QID: &str = "REAL_QID";
    pub const PRODUCER_GROUP: &str = "PGROUP";
    pub const CHECK_TIMES: &str = "TRANSACTION_CHECK_TIMES";
    pub const CHECK_IMMUNITY_TIME_IN_SECONDS: &str = "CHECK_IMMUNITY_TIME_IN_SECONDS";
    pub const PREPARED_QUEUE_OFFSET: &str = "TRAN_PREPARED_QUEUE_OFFSET";
}

/// `OP_MSG_PULL_NUMS`: op records read per pull.
const OP_PULL: usize = 32;
/// `MAX_PROCESS_TIME_LIMIT`: ms one round may spend on the queue.
const MAX_PROCESS_MS: i64 = 60_000;

/// Whether a producer put is a half message (`SendMessageProcessor`: `TRAN_MSG` parses as true with
/// `Boolean.parseBoolean`, unless it is a pre-4.6.1 retry: reconsumed and delayed).
pub(crate) fn is_half(props: &[(&str, &str)], reconsume_times: i32) -> bool {
    let get = |name: &str| props.iter().rev().find(|(n, _)| *n == name).map(|(_, v)| *v);
    let tran = get(keys::TRAN_MSG).is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let delayed = get(keys::DELAY).and_then(|v| v.parse::<i32>().ok()).is_some_and(|l| l > 0);
    tran && !(reconsume_times > 0 && delayed)
}

/// `parseHalfMessageInner`: the broker map's entries (in insertion order) with `__transactionId__`,
/// `REAL_TOPIC` and `REAL_QID` put after them.
pub(crate) fn half_properties<'a>(
    entries: &mut super::put::Entries<'a>,
    real_topic: &'a str,
    real_qid: &'a str,
    uniq: Option<&'a str>,
) {
    let mut put = |name: &'a str, value: &'a str| match entries.iter_mut().find(|(n, _)| *n == name) {
        Some(slot) => slot.1 = value,
        None => entries.push((name, value)),
    };
    if let Some(u) = uniq.filter(|u| !u.is_empty()) {
        put(TRANSACTION_ID, u);
    }
    put(props::REAL_TOPIC, real_topic);
    put(props::REAL_QID, real_qid);
}

/// How a transaction ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndKind {
    Commit,
    Rollback,
}

/// An `END_TRANSACTION` request (`EndTransactionRequestHeader`).
#[derive(Debug, Clone)]
pub struct EndTransaction<'a> {
    /// Must equal the half's `PGROUP`.
    pub producer_group: &'a str,
    /// The half's commitlog offset.
    pub commit_log_offset: u64,
    /// The half's queue offset in `RMQ_SYS_TRANS_HALF_TOPIC` (`tranStateTableOffset`).
    pub tran_state_table_offset: i64,
    pub kind: EndKind,
    /// An answer to a check (skips the `CHECK_IMMUNITY_TIME_IN_SECONDS` deadline).
    pub from_transaction_check: bool,
}

/// What an end wrote.
#[derive(Debug, Clone)]
pub struct EndResult {
    /// The committed message in its real topic (`None` on rollback).
    pub committed: Option<PutResult>,
    /// The op record.
    pub op: PutResult,
}

/// A half message due for a check, as re-put by the round (its new offsets are what the answer names).
#[derive(Debug, Clone)]
pub struct HalfCheck {
    /// Commitlog offset of the re-put half.
    pub commit_log_offset: u64,
    /// Queue offset of the re-put half in `RMQ_SYS_TRANS_HALF_TOPIC`.
    pub queue_offset: i64,
    /// offsetMsgId of the re-put half.
    pub offset_msg_id: String,
    /// UNIQ_KEY (the transaction id).
    pub transaction_id: String,
    /// `PGROUP`.
    pub producer_group: String,
    /// `REAL_TOPIC` and `REAL_QID`.
    pub topic: String,
    pub queue_id: i32,
    pub body: Vec<u8>,
    /// The re-put half's properties in stored order.
    pub properties: Vec<(String, String)>,
    pub born_timestamp: i64,
    /// `TRANSACTION_CHECK_TIMES` after this check.
    pub check_times: i32,
}

/// The outcome of one check round.
#[derive(Debug, Clone, Default)]
pub struct CheckRound {
    /// The half queue's new `CID_RMQ_SYS_TRANS` offset.
    pub half_offset: i64,
    /// The op queue's new `CID_RMQ_SYS_TRANS` offset.
    pub op_offset: i64,
    /// Halves to ask the producer about.
    pub checks: Vec<HalfCheck>,
    /// Commitlog offsets (in `TRANS_CHECK_MAX_TIME_TOPIC`) of halves discarded after too many checks.
    pub discarded: Vec<u64>,
    /// Halves passed over as done (an op record names them).
    pub done: u64,
}

/// Ends seen since open (or read from the op queue), so a second end of one half is refused.
#[derive(Debug, Default)]
pub(crate) struct TransactionState {
    /// Serialises ends; `None` until the op queue was read.
    ended: Mutex<Option<Ended>>,
}

/// The halves an op record names: by half queue offset, and by transaction ([`TxKey`]), which every copy the
/// check re-puts shares, so ending an older copy of an ended transaction is refused too.
#[derive(Debug, Default)]
struct Ended {
    offsets: HashSet<i64>,
    transactions: HashSet<TxKey>,
}

impl Ended {
    fn contains(&self, queue_offset: i64, key: Option<&TxKey>) -> bool {
        self.offsets.contains(&queue_offset) || key.is_some_and(|k| self.transactions.contains(k))
    }

    fn insert(&mut self, queue_offset: i64, key: Option<TxKey>) {
        self.offsets.insert(queue_offset);
        if let Some(k) = key {
            self.transactions.insert(k);
        }
    }
}

/// What tells one transaction from another across the copies of its half that the check re-puts
/// (`renewHalfMessageInner` keeps the body, the born time and host and every property but the check count):
/// the transaction id (UNIQ_KEY) alone is not enough, as a producer may give two transactions the same one
/// (RocketMQ commits both), so with it the born time and host and the body's CRC.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct TxKey {
    id: String,
    born_timestamp: i64,
    born_host: std::net::SocketAddr,
    body_crc: i32,
}

impl TxKey {
    fn of(half: &Stored) -> Option<Self> {
        let h = &half.record.header;
        let id = half.get(keys::UNIQ_KEY).filter(|u| !u.is_empty())?;
        Some(TxKey {
            id: id.to_owned(),
            born_timestamp: h.born_timestamp,
            born_host: h.born_host,
            body_crc: h.body_crc,
        })
    }
}

/// A decoded stored message: header fields and its properties in stored order.
struct Stored {
    record: Record,
    props: Vec<(String, String)>,
}

impl Stored {
    fn get(&self, name: &str) -> Option<&str> {
        self.props.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    fn set(&mut self, name: &str, value: String) {
        match self.props.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = value,
            None => self.props.push((name.to_owned(), value)),
        }
    }

    /// `messageProperties2String` of the decoded `HashMap(128)`.
    fn encoded_props(&self) -> Vec<u8> {
        let entries: Vec<(&str, &str)> = self.props.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        let mut out = Vec::with_capacity(256);
        properties::encode_map(&entries, BROKER_MAP_CAPACITY, &mut out);
        out
    }

    fn topic(&self) -> String {
        String::from_utf8_lossy(self.record.header.topic(self.record.bytes())).into_owned()
    }

    fn body(&self) -> &[u8] {
        self.record.header.body(self.record.bytes())
    }
}

impl MessageStore {
    fn stored(&self, offset: u64) -> Result<Option<Stored>> {
        let Some(record) = self.read(offset)? else { return Ok(None) };
        let props = properties::parse(record.header.properties(record.bytes()))
            .into_iter()
            .map(|(n, v)| (n.into_owned(), v.into_owned()))
            .collect();
        Ok(Some(Stored { record, props }))
    }

    /// Dispatches until the consume queues hold everything written before the call.
    fn catch_up(&self) -> Result<()> {
        while self.reput_offset() < self.confirm_offset() {
            let before = self.reput_offset();
            self.dispatch(4096, false)?;
            if self.reput_offset() == before {
                break;
            }
        }
        Ok(())
    }

    /// `EndTransactionProcessor.processRequest` for a commit or rollback: finds the half by commitlog offset,
    /// checks it (`checkPrepareMessage`: producer group, queue offset, commitlog offset; and, unless answering
    /// a check, the `CHECK_IMMUNITY_TIME_IN_SECONDS` deadline), then on commit writes the message to its real
    /// topic and queue, and writes the op record. A half that is not one ([`Error::Transaction`]), that names
    /// another group or offset, or that was already ended is refused and nothing is written.
    pub fn end_transaction(&self, req: &EndTransaction<'_>) -> Result<EndResult> {
        self.check_writable()?;
        let mut ended = self.transactions.ended.lock().unwrap_or_else(|p| p.into_inner());
        let half = self.stored(req.commit_log_offset).ok().flatten().ok_or_else(|| {
            Error::Transaction(format!(
                "find prepared transaction message failed: no message starts at commitlog offset {}",
                req.commit_log_offset
            ))
        })?;
        let h = &half.record.header;
        if half.topic() != HALF_TOPIC {
            return Err(Error::Transaction(format!(
                "the message at commitlog offset {} is in topic {:?}, not a half message ({HALF_TOPIC})",
                req.commit_log_offset,
                half.topic()
            )));
        }
        if !req.from_transaction_check {
            if let Some(immunity) = half.get(props::CHECK_IMMUNITY_TIME_IN_SECONDS).filter(|s| !s.is_empty()) {
                let timeout = self.config.transaction.transaction_time_out as i64;
                if now_ms() - h.born_timestamp > util_immunity_ms(immunity, timeout) {
                    return Err(Error::Transaction(format!(
                        "ILLEGAL_OPERATION: the half at {} passed its CHECK_IMMUNITY_TIME_IN_SECONDS ({immunity} s) \
                         and was not checked; it can only be ended as the answer to a check",
                        req.commit_log_offset
                    )));
                }
            }
        }
        if half.get(props::PRODUCER_GROUP) != Some(req.producer_group) {
            return Err(Error::Transaction(format!(
                "the producer group wrong: the half at {} belongs to {:?}, not {:?}",
                req.commit_log_offset,
                half.get(props::PRODUCER_GROUP),
                req.producer_group
            )));
        }
        if h.queue_offset != req.tran_state_table_offset {
            return Err(Error::Transaction(format!(
                "the transaction state table offset wrong: the half at {} has queue offset {}, not {}",
                req.commit_log_offset, h.queue_offset, req.tran_state_table_offset
            )));
        }
        if h.physical_offset != req.commit_log_offset as i64 {
            return Err(Error::Transaction(format!("the commit log offset wrong: {}", req.commit_log_offset)));
        }
        if ended.is_none() {
            *ended = Some(self.ended_from_op_queue(h.queue_id)?);
        }
        let key = TxKey::of(&half);
        if ended.as_ref().is_some_and(|e| e.contains(h.queue_offset, key.as_ref())) {
            return Err(Error::Transaction(format!(
                "the half at commitlog offset {} (queue offset {}) was already committed or rolled back",
                req.commit_log_offset, h.queue_offset
            )));
        }
        // The commit and the op record in one append: both or neither (a full disk, a refused message), so a
        // failed end leaves nothing committed and the half open for a retry or the check.
        let target = match req.kind {
            EndKind::Commit => Some(Self::commit_target(&half)?),
            EndKind::Rollback => None,
        };
        let committed_props = half.encoded_props();
        let commit = target.as_ref().map(|(topic, queue_id)| {
            tx_message(
                topic,
                *queue_id,
                half.body(),
                &committed_props,
                h.flag,
                h.sys_flag,
                TransactionType::Commit,
                (h.born_host, h.born_timestamp),
                h.reconsume_times,
                h.physical_offset,
            )
        });
        let record = Self::op_record(&[h.queue_offset]);
        let op = self.op_message(h.queue_id, &record);
        let mut written = self.put_inner_all(&[commit, Some(op)].into_iter().flatten().collect::<Vec<_>>())?;
        let op = written.pop().ok_or_else(|| Error::Transaction("the op record was not written".into()))?;
        if let Some(e) = ended.as_mut() {
            e.insert(h.queue_offset, key);
        }
        Ok(EndResult { committed: written.pop(), op })
    }

    /// `endMessageTransaction` + the processor's changes: the real topic and queue of a committed half. The
    /// committed message keeps the half's body, flag, born time and host, reconsume times; its properties are
    /// serialized before `REAL_TOPIC`/`REAL_QID` are cleared from the map, so the stored string keeps them (and
    /// `TRAN_MSG`); its sys flag has the COMMIT type, and its prepared transaction offset is the half's
    /// commitlog offset.
    fn commit_target(half: &Stored) -> Result<(String, i32)> {
        let h = &half.record.header;
        let topic = half.get(props::REAL_TOPIC).unwrap_or_default().to_owned();
        let queue_id: i32 = half
            .get(props::REAL_QID)
            .and_then(|q| q.parse().ok())
            .ok_or_else(|| Error::Transaction(format!("the half at {} has no numeric REAL_QID", h.physical_offset)))?;
        super::validate::check_topic_name(&topic)
            .map_err(|_| Error::Transaction(format!("the half at {} has no valid REAL_TOPIC", h.physical_offset)))?;
        Ok((topic, queue_id))
    }

    /// The op record `record` ([`MessageStore::op_record`]) as a message of op queue `queue_id`, born now at the
    /// store's host.
    fn op_message<'a>(&self, queue_id: i32, (body, props): &'a (String, Vec<u8>)) -> InnerMessage<'a> {
        let born = (self.config.broker.store_host, now_ms());
        tx_message(OP_TOPIC, queue_id, body.as_bytes(), props, 0, 0, TransactionType::NotType, born, 0, 0)
    }

    /// An op record's body and properties (`makeOpMessageInner` of `new Message(OP_TOPIC, "d", body)`):
    /// properties `TAGS`, `WAIT` in a `HashMap(16)`'s order (the UNIQ_KEY Java sets afterwards is not in the
    /// stored string).
    fn op_record(half_offsets: &[i64]) -> (String, Vec<u8>) {
        let mut body = String::new();
        for o in half_offsets {
            body.push_str(&o.to_string());
            body.push(OFFSET_SEPARATOR);
        }
        let mut props = Vec::with_capacity(32);
        properties::encode_map(&[(keys::TAGS, REMOVE_TAG), (keys::WAIT, "true")], CLIENT_MAP_CAPACITY, &mut props);
        (body, props)
    }

    /// The halves named by every op record of op queue `queue_id` still stored (their ids read from the half
    /// queue of the same id).
    fn ended_from_op_queue(&self, queue_id: i32) -> Result<Ended> {
        self.catch_up()?;
        let mut ended = Ended::default();
        let Some(cq) = self.queues.find(OP_TOPIC, queue_id) else { return Ok(ended) };
        let halves = self.queues.find(HALF_TOPIC, queue_id);
        let (mut q, max) = (cq.min_offset(), cq.max_offset());
        while q < max {
            let (first, entries) = cq.entries(q, 1024);
            if entries.is_empty() {
                break;
            }
            let next = first + entries.len() as u64;
            for e in entries {
                let Some(op) = self.stored(e.offset as u64).ok().flatten() else { continue };
                for half_offset in op_offsets(op.body()) {
                    let half = halves
                        .as_ref()
                        .and_then(|cq| u64::try_from(half_offset).ok().and_then(|o| cq.entry(o)))
                        .and_then(|entry| self.stored(entry.offset as u64).ok().flatten());
                    ended.insert(half_offset, half.as_ref().and_then(TxKey::of));
                }
            }
            q = next;
        }
        Ok(ended)
    }

    /// One round of `TransactionalMessageServiceImpl.check` over half queue 0, from the `CID_RMQ_SYS_TRANS`
    /// offsets `half_offset` and `op_offset` (`None`: never committed, start at the queue's minimum).
    /// `timeout_ms` and `check_max` default to `transactionTimeOut` and `transactionCheckMax`.
    pub fn transaction_check(
        &self,
        half_offset: Option<i64>,
        op_offset: Option<i64>,
        timeout_ms: Option<u64>,
        check_max: Option<i32>,
    ) -> Result<CheckRound> {
        self.check_writable()?;
        self.catch_up()?;
        let timeout = timeout_ms.unwrap_or(self.config.transaction.transaction_time_out) as i64;
        let check_max = check_max.unwrap_or(self.config.transaction.transaction_check_max);
        let queue_min = |topic: &str| self.queues.find(topic, 0).map_or(0, |cq| cq.min_offset() as i64);
        let half_offset = half_offset.unwrap_or_else(|| queue_min(HALF_TOPIC));
        let op_offset = op_offset.unwrap_or_else(|| queue_min(OP_TOPIC));
        let mut round = CheckRound { half_offset, op_offset, ..CheckRound::default() };
        if half_offset < 0 || op_offset < 0 {
            return Ok(round);
        }
        let start = now_ms();
        let mut ops = OpView::default();
        let mut pull = self.fill_op_remove_map(&mut ops, op_offset, half_offset)?;
        let (mut i, mut new_offset, mut null_count) = (half_offset, half_offset, 1);
        let half_cq = self.queues.find(HALF_TOPIC, 0);
        loop {
            if now_ms() - start > MAX_PROCESS_MS {
                break;
            }
            if let Some(op_off) = ops.remove.remove(&i) {
                ops.release(op_off, i);
                round.done += 1;
                i += 1;
                new_offset = i;
                continue;
            }
            // getHalfMsg(i): pull one message of half queue 0.
            let (min, max) = half_cq.as_ref().map_or((0, 0), |cq| (cq.min_offset() as i64, cq.max_offset() as i64));
            let entry = half_cq.as_ref().and_then(|cq| u64::try_from(i).ok().and_then(|q| cq.entry(q)));
            let msg = match entry.filter(|e| e.is_valid() && i >= min && i < max) {
                Some(e) => self.stored(e.offset as u64).ok().flatten(),
                None => None,
            };
            let Some(mut msg) = msg else {
                null_count += 1;
                if null_count > 2 || i >= max || max == 0 {
                    break; // NO_NEW_MSG, or the second miss in a row
                }
                i = if i < min { min } else { i + 1 }; // OFFSET_ILLEGAL: the pull's next begin offset
                new_offset = i;
                continue;
            };
            let now = now_ms();
            // needDiscard, then needSkip (older than fileReservedTime).
            let discard = {
                let times = msg.get(props::CHECK_TIMES).map(java_int);
                match times {
                    Some(t) if t >= check_max => true,
                    _ => {
                        msg.set(props::CHECK_TIMES, times.map_or(1, |t| t + 1).to_string());
                        now - msg.record.header.born_timestamp > self.config.clean.reserved_ms()
                    }
                }
            };
            if discard {
                round.discarded.push(self.discard_half(&msg)?);
                i += 1;
                new_offset = i;
                continue;
            }
            if msg.record.header.store_timestamp >= start {
                break; // stored during this round: check it later
            }
            let age = now - msg.record.header.born_timestamp;
            let mut immunity = timeout;
            if let Some(text) = msg.get(props::CHECK_IMMUNITY_TIME_IN_SECONDS).map(str::to_owned) {
                immunity = impl_immunity_ms(&text, timeout);
                if age < immunity && self.check_prepare_queue_offset(&mut ops, &msg)? {
                    i += 1;
                    new_offset = i;
                    continue;
                }
            } else if (0..immunity).contains(&age) {
                break; // new arrived: check it later
            }
            let need_check = (pull.last_born.is_none() && age > immunity)
                || pull.last_born.is_some_and(|b| b - start > timeout)
                || age <= -1;
            if need_check && self.end_copy_of_ended(&msg)? {
                // Another copy of its half was ended (the producer ended the original after the check re-put
                // it): this copy is done too. RocketMQ would ask about it again and commit a second time.
                round.done += 1;
            } else if need_check {
                round.checks.push(self.put_back_half(&msg)?);
            } else {
                if pull.last_born.is_none() {
                    // The op queue had nothing more. Java sleeps a second and looks again; rmq writes op records
                    // synchronously, so the next round looks at this half again.
                    break;
                }
                pull = self.fill_op_remove_map(&mut ops, pull.next_offset, half_offset)?;
                continue;
            }
            i += 1;
            new_offset = i;
        }
        round.half_offset = new_offset;
        ops.done.sort_unstable();
        let mut op_new = op_offset;
        for d in &ops.done {
            if *d == op_new {
                op_new += 1;
            } else if *d > op_new {
                break;
            }
        }
        round.op_offset = op_new.max(ops.illegal_reset.unwrap_or(op_new));
        Ok(round)
    }

    /// When `half`'s transaction was ended through another copy of its half, writes the op record that marks
    /// this copy done too and returns true.
    fn end_copy_of_ended(&self, half: &Stored) -> Result<bool> {
        let h = &half.record.header;
        let Some(key) = TxKey::of(half) else { return Ok(false) };
        let mut ended = self.transactions.ended.lock().unwrap_or_else(|p| p.into_inner());
        if ended.is_none() {
            *ended = Some(self.ended_from_op_queue(h.queue_id)?);
        }
        let Some(e) = ended.as_mut().filter(|e| e.contains(h.queue_offset, Some(&key))) else { return Ok(false) };
        let record = Self::op_record(&[h.queue_offset]);
        let op = self.op_message(h.queue_id, &record);
        self.put_inner(&op)?;
        e.insert(h.queue_offset, Some(key));
        Ok(true)
    }

    /// `fillOpRemoveMap`: up to 32 op records from `from`; each `d` record's half offsets at or after
    /// `mini_offset` go to the remove map, other records are done at once.
    fn fill_op_remove_map(&self, ops: &mut OpView, from: i64, mini_offset: i64) -> Result<OpPull> {
        let Some(cq) = self.queues.find(OP_TOPIC, 0) else { return Ok(OpPull { next_offset: from, last_born: None }) };
        let (min, max) = (cq.min_offset() as i64, cq.max_offset() as i64);
        if from < min || from > max {
            // OFFSET_ILLEGAL: the consume offset moves to the next begin offset.
            let next = if from < min { min } else { max };
            ops.illegal_reset = Some(next);
            return Ok(OpPull { next_offset: next, last_born: None });
        }
        if from == max {
            return Ok(OpPull { next_offset: from, last_born: None });
        }
        let (_, entries) = cq.entries(from as u64, OP_PULL);
        let mut q = from;
        let mut last_born = None;
        for e in entries {
            let op_off = q;
            q += 1;
            let Some(op) = self.stored(e.offset as u64).ok().flatten() else { continue };
            last_born = Some(op.record.header.born_timestamp);
            let mut set = HashSet::new();
            if op.get(keys::TAGS) == Some(REMOVE_TAG) {
                for off in op_offsets(op.body()) {
                    if off >= mini_offset {
                        ops.remove.insert(off, op_off);
                        set.insert(off);
                    }
                }
            }
            if set.is_empty() {
                ops.done.push(op_off);
            } else {
                ops.pending.insert(op_off, set);
            }
        }
        Ok(OpPull { next_offset: q, last_born })
    }

    /// `checkPrepareQueueOffset`: true when the half is passed over (its first copy was ended, or it was
    /// re-put with `TRAN_PREPARED_QUEUE_OFFSET`).
    fn check_prepare_queue_offset(&self, ops: &mut OpView, msg: &Stored) -> Result<bool> {
        match msg.get(props::PREPARED_QUEUE_OFFSET).map(java_long) {
            Some(-1) => Ok(false),
            Some(prepared) if ops.remove.contains_key(&prepared) => {
                if let Some(op_off) = ops.remove.remove(&prepared) {
                    ops.done.push(op_off);
                }
                Ok(true)
            }
            _ => {
                // renewImmunityHalfMessageInner
                let mut copy = Stored { record: msg.record.clone(), props: msg.props.clone() };
                let prepared = msg
                    .get(props::PREPARED_QUEUE_OFFSET)
                    .map_or_else(|| msg.record.header.queue_offset.to_string(), str::to_owned);
                copy.set(props::PREPARED_QUEUE_OFFSET, prepared);
                self.renew(&copy)?;
                Ok(true)
            }
        }
    }

    /// `renewHalfMessageInner` + put: the half again at the end of the half queue (flag, reconsume times and
    /// prepared offset are not carried over, as in Java).
    fn renew(&self, msg: &Stored) -> Result<PutResult> {
        let h = &msg.record.header;
        self.put_inner(&tx_message(
            HALF_TOPIC,
            h.queue_id,
            msg.body(),
            &msg.encoded_props(),
            0,
            h.sys_flag,
            TransactionType::NotType,
            (h.born_host, h.born_timestamp),
            0,
            0,
        ))
    }

    /// `putBackHalfMsgQueue`, then what `sendCheckMessage` tells the producer.
    fn put_back_half(&self, msg: &Stored) -> Result<HalfCheck> {
        let r = self.renew(msg)?;
        let commit_log_offset = r.offsets.first().copied().unwrap_or(0);
        let renewed =
            self.stored(commit_log_offset)?.unwrap_or(Stored { record: msg.record.clone(), props: msg.props.clone() });
        Ok(HalfCheck {
            commit_log_offset,
            queue_offset: r.queue_offset,
            offset_msg_id: offset_msg_id(r.store_host, commit_log_offset as i64),
            transaction_id: msg.get(keys::UNIQ_KEY).unwrap_or_default().to_owned(),
            producer_group: msg.get(props::PRODUCER_GROUP).unwrap_or_default().to_owned(),
            topic: msg.get(props::REAL_TOPIC).unwrap_or_default().to_owned(),
            queue_id: msg.get(props::REAL_QID).map_or(0, java_int),
            body: msg.body().to_vec(),
            properties: renewed.props,
            born_timestamp: msg.record.header.born_timestamp,
            check_times: msg.get(props::CHECK_TIMES).map_or(0, java_int),
        })
    }

    /// `DefaultTransactionalMessageCheckListener.resolveDiscardMsg`: the half into
    /// `TRANS_CHECK_MAX_TIME_TOPIC` queue 0.
    fn discard_half(&self, msg: &Stored) -> Result<u64> {
        let h = &msg.record.header;
        let r = self.put_inner(&tx_message(
            CHECK_MAX_TIME_TOPIC,
            0,
            msg.body(),
            &msg.encoded_props(),
            h.flag,
            h.sys_flag,
            TransactionType::of(h.sys_flag),
            (h.born_host, h.born_timestamp),
            h.reconsume_times,
            0,
        ))?;
        Ok(r.offsets.first().copied().unwrap_or(0))
    }
}

/// A message built by the transaction code (a `MessageExtBrokerInner`): the producer's sys flags only, born
/// host and time as given, no wait for the flush.
#[allow(clippy::too_many_arguments)]
fn tx_message<'a>(
    topic: &'a str,
    queue_id: i32,
    body: &'a [u8],
    props: &'a [u8],
    flag: i32,
    sys_flag: i32,
    transaction: TransactionType,
    born: (std::net::SocketAddr, i64),
    reconsume_times: i32,
    prepared_transaction_offset: i64,
) -> InnerMessage<'a> {
    InnerMessage {
        topic,
        queue_id,
        body,
        properties: props,
        flag,
        sys_flag: sys_flag & PRODUCER_SYS_FLAGS,
        transaction,
        born_host: born.0,
        born_timestamp: born.1,
        reconsume_times,
        prepared_transaction_offset,
        wait_store_msg_ok: false,
    }
}

/// What the check knows of the op queue: `removeMap`, `opMsgMap`, `doneOpOffset`.
#[derive(Debug, Default)]
struct OpView {
    /// Half offset → op record offset naming it.
    remove: HashMap<i64, i64>,
    /// Op record offset → its half offsets not yet passed.
    pending: HashMap<i64, HashSet<i64>>,
    /// Op record offsets fully used.
    done: Vec<i64>,
    /// Where an illegal op offset was reset to.
    illegal_reset: Option<i64>,
}

impl OpView {
    fn release(&mut self, op_off: i64, half: i64) {
        if let Some(set) = self.pending.get_mut(&op_off) {
            set.remove(&half);
            if set.is_empty() {
                self.pending.remove(&op_off);
                self.done.push(op_off);
            }
        }
    }
}

/// One op pull: where the next starts and the born time of its last record (`None`: nothing found).
#[derive(Debug, Clone, Copy)]
struct OpPull {
    next_offset: i64,
    last_born: Option<i64>,
}

/// The half queue offsets of an op body (`split(",")`, each `Long.parseLong` or −1).
pub fn op_offsets(body: &[u8]) -> impl Iterator<Item = i64> + '_ {
    body.split(|&b| b == OFFSET_SEPARATOR as u8)
        .filter(|s| !s.is_empty())
        .map(|s| std::str::from_utf8(s).ok().and_then(|t| t.parse().ok()).unwrap_or(-1))
}

fn java_int(s: &str) -> i32 {
    s.parse().unwrap_or(-1)
}

fn java_long(s: &str) -> i64 {
    s.parse().unwrap_or(-1)
}

/// `TransactionalMessageServiceImpl.getImmunityTime`: seconds × 1000, or the timeout if unparsable.
fn impl_immunity_ms(text: &str, timeout: i64) -> i64 {
    match java_long(text) {
        -1 => timeout,
        s => s.saturating_mul(1000),
    }
}

/// `TransactionalMessageUtil.getImmunityTime`: seconds × 1000, at least the timeout.
fn util_immunity_ms(text: &str, timeout: i64) -> i64 {
    text.parse::<i64>().map_or(0, |s| s.saturating_mul(1000)).max(timeout)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn op_bodies_parse_as_java_splits_them() {
        assert_eq!(op_offsets(b"3,").collect::<Vec<_>>(), vec![3]);
        assert_eq!(op_offsets(b"3,17,x,").collect::<Vec<_>>(), vec![3, 17, -1]);
        assert_eq!(op_offsets(b"").count(), 0);
    }

    #[test]
    fn immunity_rules_of_both_java_helpers() {
        assert_eq!(impl_immunity_ms("10", 6000), 10_000);
        assert_eq!(impl_immunity_ms("x", 6000), 6000);
        assert_eq!(util_immunity_ms("2", 6000), 6000);
        assert_eq!(util_immunity_ms("20", 6000), 20_000);
    }

    #[test]
    fn a_half_is_tran_msg_true_unless_an_old_clients_delayed_retry() {
        assert!(is_half(&[("TRAN_MSG", "TRUE")], 0));
        assert!(!is_half(&[("TRAN_MSG", "yes")], 0));
        assert!(!is_half(&[("TRAN_MSG", "true"), ("DELAY", "3")], 1));
        assert!(is_half(&[("TRAN_MSG", "true"), ("DELAY", "3")], 0));
    }
}
