//! `schedule` (RocketMQ's `ScheduleMessageService`): delivers delayed messages when they are due.
//!
//! A put with a `DELAY` level > 0 is stored in `SCHEDULE_TOPIC_XXXX` queue level − 1 with its real topic and
//! queue in `REAL_TOPIC` / `REAL_QID`, and its consume-queue entry's tagsCode is the delivery time (store time
//! plus the level's delay). For each level, from the level's offset in `config/delayOffset.json`, the service takes
//! the entries whose delivery time has come (a time further ahead than the level's delay is treated as now, as
//! `correctDeliverTimestamp` does), rebuilds each message as `messageTimeUp` does and stores it in its real
//! topic and queue, then advances the level's offset. Then it sleeps until the earliest entry not yet due, or
//! until the reput service dispatches something new (it wakes this service), at most [`IDLE`].
//!
//! The delivered record: body, flag, sys flag, born time and host, reconsume times and **store host** of the
//! scheduled record; properties = the scheduled record's, re-serialized as the broker's `HashMap(128)` (Java
//! builds the properties string before it clears `DELAY` and the timer properties from the map, so they stay
//! in the stored record, as do `REAL_TOPIC` / `REAL_QID`); `WAIT` false (a SYNC_FLUSH delivery does not wait).
//! Entries that cannot be delivered ever (the record is gone, no `REAL_TOPIC` / int `REAL_QID`, an invalid
//! topic, a real topic of `RMQ_SYS_TRANS_HALF_TOPIC`) are skipped and reported in the store's dispatch issues,
//! as RocketMQ skips them; a put that fails for a reason that may pass (I/O, a full disk) is retried after
//! [`RETRY`] from the same entry, where RocketMQ 5.3.1 would go on past it.
//!
//! Crash safety (at least once): a level's offset only passes entries whose delivery was stored; the table
//! is persisted every `flush_delay_offset_interval` (after flushing the commitlog, so the file never claims a
//! delivery a power loss could take back) and when the store closes. After a kill the service resumes from
//! the persisted offsets and delivers again at most what it delivered after the last persist; nothing is
//! delivered before its time, since delivery times are read off the consume queue again.

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use super::ServiceThread;
use crate::commitlog::now_ms;
use crate::error::{Error, Result};
use crate::message::properties::{self, keys, BROKER_MAP_CAPACITY};
use crate::message::tags::SCHEDULE_TOPIC;
use crate::offsets::delay::{self, DelayTable};
use crate::store::put::InnerMessage;
use crate::store::{validate, MessageStore};

/// The service's name in [`MessageStore::service_stats`]; its work counter counts messages delivered.
pub const NAME: &str = "schedule";
/// Wait after a failed round (a delivery that could not be stored).
pub const RETRY: Duration = Duration::from_secs(1);
/// Longest sleep: new entries wake the service, this only bounds the wait should a wake-up be missed.
pub const IDLE: Duration = Duration::from_secs(10);
/// The real topic a scheduled message may not have (`[BUG]` in RocketMQ: discarded).
const TRANS_HALF_TOPIC: &str = "RMQ_SYS_TRANS_HALF_TOPIC";

/// The delay offsets and their persistence state, shared by the service, `close` and the bindings.
#[derive(Debug, Default)]
pub struct ScheduleState {
    inner: Mutex<Option<Loaded>>,
}

#[derive(Debug)]
struct Loaded {
    table: DelayTable,
    /// Offset updates (`versionChangeCounter`): every `delay_offset_update_version_step`-th bumps the version.
    updates: u64,
    /// Changed since the last persist.
    dirty: bool,
}

impl ScheduleState {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Loaded>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Loads `delayOffset.json` (or its `.bak`) and corrects each configured level's offset into its queue's
    /// range, as `load()` + `correctDelayOffset()` do. Idempotent.
    fn load(&self, store: &MessageStore) -> Result<()> {
        let mut g = self.lock();
        if g.is_some() {
            return Ok(());
        }
        let mut table = delay::load(&store.root().join(delay::FILE))?;
        let mut dirty = false;
        // Only the configured levels (`delayLevelTable`'s keys): a level the file has and the levels do not
        // keeps its offset, for when it is configured again.
        let levels = 1..=i32::try_from(store.delay_levels.len()).unwrap_or(i32::MAX);
        for (level, offset) in table.in_order().into_iter().filter(|(level, _)| levels.contains(level)) {
            let (min, max) = (
                store.min_offset_in_queue(SCHEDULE_TOPIC, level - 1),
                store.max_offset_in_queue(SCHEDULE_TOPIC, level - 1, true),
            );
            let corrected = offset.clamp(min, max.max(min));
            if corrected != offset {
                table.put(level, corrected);
                dirty = true;
            }
        }
        *g = Some(Loaded { table, updates: 0, dirty });
        Ok(())
    }

    /// The level's offset (0 when it has none).
    fn offset(&self, level: i32) -> i64 {
        self.lock().as_ref().and_then(|l| l.table.get(level)).unwrap_or(0)
    }

    /// `updateOffset`: records `offset` for `level`; the data version advances every `step` updates.
    fn update(&self, level: i32, offset: i64, step: u64) {
        let mut g = self.lock();
        let Some(l) = g.as_mut() else { return };
        if l.table.get(level) == Some(offset) {
            return;
        }
        l.table.put(level, offset);
        l.dirty = true;
        l.updates += 1;
        if step > 0 && l.updates % step == 0 {
            let v = &mut l.table.version;
            v.counter += 1;
            v.timestamp = now_ms();
        }
    }

    /// A copy of the table, if the service loaded it.
    pub(crate) fn snapshot(&self) -> Option<DelayTable> {
        self.lock().as_ref().map(|l| l.table.clone())
    }

    /// Persists the table when it changed since the last persist (the commitlog must be flushed first).
    pub(crate) fn persist(&self, store: &MessageStore) -> Result<()> {
        let table = {
            let mut g = self.lock();
            let Some(l) = g.as_mut().filter(|l| l.dirty) else { return Ok(()) };
            l.dirty = false;
            l.table.clone()
        };
        delay::persist(&store.root().join(delay::FILE), &table).inspect_err(|_| {
            if let Some(l) = self.lock().as_mut() {
                l.dirty = true;
            }
        })
    }
}

/// Starts the service: loads the offsets (an unreadable `.bak` fails the start), then runs.
pub(crate) fn spawn(store: &Arc<MessageStore>) -> Result<()> {
    store.schedule.load(store)?;
    let weak = Arc::downgrade(store);
    store.services().spawn(ServiceThread::new(NAME), move |svc| run(&weak, svc))
}

fn run(store: &Weak<MessageStore>, svc: &ServiceThread) {
    let mut wait = Duration::ZERO;
    let mut last_persist = Instant::now();
    while svc.wait_for_running(wait) {
        let Some(s) = store.upgrade() else { return };
        if s.is_closed() {
            return;
        }
        wait = match round(&s, svc) {
            Ok(r) => {
                svc.count_round();
                r.next_due
                    .map_or(IDLE, |due| Duration::from_millis(u64::try_from(due - now_ms()).unwrap_or(0)).min(IDLE))
            }
            Err(e) => {
                svc.record_error(&e);
                RETRY
            }
        };
        let interval = Duration::from_millis(s.config.schedule.flush_delay_offset_interval.max(1));
        if last_persist.elapsed() >= interval {
            last_persist = Instant::now();
            if let Err(e) = persist_durably(&s) {
                svc.record_error(&e);
            }
        }
        wait = wait.min(interval.saturating_sub(last_persist.elapsed()));
    }
}

/// Flushes the commitlog (every delivery the table counts becomes durable), then persists the table.
pub(crate) fn persist_durably(store: &MessageStore) -> Result<()> {
    store.check_writable()?;
    store.commitlog.commit(0).inspect_err(|e| store.poison(e))?;
    store.flush_commitlog(0)?;
    store.schedule.persist(store)
}

/// What one round did.
#[derive(Debug, Clone, Copy, Default)]
pub struct Round {
    /// Messages delivered.
    pub delivered: u64,
    /// The earliest delivery time (ms) of an entry not yet due, if any.
    pub next_due: Option<i64>,
}

/// One round over every level: delivers what is due.
pub fn round(store: &MessageStore, svc: &ServiceThread) -> Result<Round> {
    let step = store.config.schedule.delay_offset_update_version_step;
    let mut out = Round::default();
    for (i, &delay_ms) in store.delay_levels.iter().enumerate() {
        let level = i32::try_from(i + 1).unwrap_or(i32::MAX);
        let Some(cq) = store.consume_queue(SCHEDULE_TOPIC, level - 1) else { continue };
        let mut offset = store.schedule.offset(level).max(cq.min_offset() as i64);
        let max = cq.max_offset() as i64;
        let mut result = Ok(());
        while offset < max && !svc.is_stopped() {
            let Some(entry) = cq.entry(offset as u64) else { break };
            let now = now_ms();
            // correctDeliverTimestamp: a time beyond now + the level's delay is not to be believed.
            let due = if entry.tags_code > now.saturating_add(delay_ms) { now } else { entry.tags_code };
            if due > now {
                out.next_due = Some(out.next_due.map_or(due, |d| d.min(due)));
                break;
            }
            if !entry.is_pre_blank() {
                match deliver(store, entry.offset, entry.size) {
                    Ok(true) => {
                        // Counted as it is delivered, before its level's offset moves past it: whoever sees the
                        // offset (`delay_offsets`) finds it in the stats.
                        out.delivered += 1;
                        svc.count_work(1);
                    }
                    Ok(false) => {}
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
            offset += 1;
            store.schedule.update(level, offset, step);
        }
        store.schedule.update(level, offset, step);
        result?;
    }
    Ok(out)
}

/// `messageTimeUp` + the put: stores the scheduled record at `offset` in its real topic and queue. Ok(false)
/// when the entry can never be delivered (reported and skipped); Err when the put failed in a way that may pass.
fn deliver(store: &MessageStore, offset: i64, size: i32) -> Result<bool> {
    let skip = |reason: String| {
        store.report_damage(offset, format!("scheduled message skipped: {reason}"));
        Ok(false)
    };
    let rec = match u64::try_from(offset).ok().map(|o| store.read(o)) {
        Some(Ok(Some(rec))) if rec.header.total_size == size => rec,
        Some(Err(e)) => return Err(e),
        _ => return skip("no record of the entry's size at its commitlog offset".into()),
    };
    let (h, bytes) = (&rec.header, rec.bytes());
    let parsed = properties::parse(h.properties(bytes));
    let get = |name: &str| parsed.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_ref());
    let Some(topic) = get(keys::REAL_TOPIC) else { return skip("no REAL_TOPIC property".into()) };
    let Some(queue_id) = get(keys::REAL_QID).and_then(crate::java::parse_int) else {
        return skip("no REAL_QID property holding an int".into());
    };
    if topic == TRANS_HALF_TOPIC {
        return skip(format!("its real topic is {TRANS_HALF_TOPIC}"));
    }
    if let Err(e) = validate::check_topic_name(topic) {
        return skip(e.to_string());
    }
    let entries: Vec<(&str, &str)> = parsed.iter().map(|(n, v)| (n.as_ref(), v.as_ref())).collect();
    let mut props = Vec::with_capacity(h.properties.len() + 16);
    properties::encode_map(&entries, BROKER_MAP_CAPACITY, &mut props);
    let msg = InnerMessage::from_record(h, bytes, topic, queue_id, &props);
    match store.put_inner_as_is(&msg, h.store_host) {
        Ok(_) => Ok(true),
        Err(e @ (Error::Io { .. } | Error::DiskFull { .. } | Error::DiskSpaceWarning { .. })) => Err(e),
        Err(e @ (Error::Poisoned(_) | Error::Closed | Error::ReadOnly(_) | Error::Locked(_))) => Err(e),
        Err(e) => skip(e.to_string()),
    }
}

impl MessageStore {
    /// The schedule service's progress: (delay level, next queue offset to deliver in `SCHEDULE_TOPIC_XXXX`
    /// queue level − 1) in RocketMQ's order, and the data version. While the service runs this is its live
    /// table; otherwise what `config/delayOffset.json` (or its `.bak`) holds.
    pub fn delay_offsets(&self) -> Result<DelayTable> {
        self.check_open()?;
        match self.schedule.snapshot() {
            Some(t) => Ok(t),
            None => delay::load(&self.root.join(delay::FILE)),
        }
    }

    /// Persists the schedule service's offsets now (after flushing the commitlog), if it runs and they
    /// changed; `close` does this too.
    pub fn persist_delay_offsets(&self) -> Result<()> {
        persist_durably(self)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::config::StoreConfig;
    use crate::message::TransactionType;
    use std::net::SocketAddr;

    fn scheduled<'a>(props: &'a [u8], level: i32) -> InnerMessage<'a> {
        InnerMessage {
            topic: SCHEDULE_TOPIC,
            queue_id: level - 1,
            body: b"b",
            properties: props,
            flag: 0,
            sys_flag: 0,
            transaction: TransactionType::NotType,
            born_host: SocketAddr::from(([10, 0, 0, 1], 1)),
            born_timestamp: 1,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            wait_store_msg_ok: false,
        }
    }

    #[test]
    fn a_round_delivers_what_is_due_skips_what_never_can_and_waits_for_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = StoreConfig::default();
        config.dispatch.message_delay_level = "1s 1h".into();
        let store = MessageStore::open(dir.path(), config).unwrap();
        let host = store.config().broker.store_host;
        // Level 1 (1 s): no REAL_TOPIC (skipped), a good one, one whose real topic is the half topic (skipped).
        store.put_inner_as_is(&scheduled(b"DELAY\x011\x02", 1), host).unwrap();
        store.put_inner_as_is(&scheduled(b"DELAY\x011\x02REAL_TOPIC\x01T\x02REAL_QID\x013\x02", 1), host).unwrap();
        let half = b"DELAY\x011\x02REAL_TOPIC\x01RMQ_SYS_TRANS_HALF_TOPIC\x02REAL_QID\x010\x02";
        store.put_inner_as_is(&scheduled(half, 1), host).unwrap();
        // Level 2 (1 h): not due.
        store.put_inner_as_is(&scheduled(b"DELAY\x012\x02REAL_TOPIC\x01T\x02REAL_QID\x010\x02", 2), host).unwrap();
        store.dispatch(u64::MAX, false).unwrap();
        store.schedule.load(&store).unwrap();
        let svc = ServiceThread::new("t");
        let r = round(&store, &svc).unwrap();
        assert_eq!(r.delivered, 0, "nothing is due yet");
        assert!(r.next_due.is_some_and(|d| d > now_ms()));
        std::thread::sleep(Duration::from_millis(1100));
        let r = round(&store, &svc).unwrap();
        assert_eq!(r.delivered, 1);
        let due = r.next_due.unwrap();
        assert!(due > now_ms() + 3_000_000, "level 2 waits an hour");
        assert_eq!(store.next_queue_offset("T", 3), 1);
        assert_eq!(store.delay_offsets().unwrap().in_order(), vec![(1, 3), (2, 0)]);
        assert_eq!(store.dispatch_issues().0, 2, "two entries skipped and reported");
        // Persisted on close, read back by a new open.
        store.close().unwrap();
        let table = delay::load(&dir.path().join(delay::FILE)).unwrap();
        assert_eq!(table.in_order(), vec![(1, 3), (2, 0)]);
    }
}
