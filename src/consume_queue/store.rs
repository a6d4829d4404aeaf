//! The consume queues of a store: `consumequeue/<topic>/<queueId>/`, one [`ConsumeQueue`] each, loaded at open
//! and created as dispatch first writes into a queue.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustc_hash::FxHashMap;

use super::ConsumeQueue;
use crate::error::{Error, Result};

type QueueMap = FxHashMap<String, FxHashMap<i32, Arc<ConsumeQueue>>>;

/// Whether `topic` may name a consume-queue directory: 1..=255 bytes of `[%|a-zA-Z0-9_+-]`, so it can never
/// be a path (`..`, `/`) however the record that carries it was written. That is the topics a producer may
/// send (`[%|a-zA-Z0-9_-]`, checked at the put) and the `+` of the retry topics RocketMQ 5.x's POP consumers
/// make (`%RETRY%<group>+<topic>`, with `enableRetryTopicV2`). A directory of any other name (`T.bak`, an
/// operator's copy of a queue) is left alone, never loaded as a queue nor rebuilt.
pub fn path_safe_topic(topic: &str) -> bool {
    !topic.is_empty()
        && topic.len() <= 255
        && topic.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'%' | b'|' | b'_' | b'-' | b'+'))
}

/// Every consume queue of a store: `consumequeue/<topic>/<queueId>/`.
#[derive(Debug)]
pub struct ConsumeQueueStore {
    dir: PathBuf,
    file_size: u64,
    storage: crate::mmap::Storage,
    queues: RwLock<QueueMap>,
    resized: Vec<(String, i32, PathBuf, u64)>,
}

/// Whether a file of `size` bytes lies in some queue directory under `dir` (topic / queue id / file): then the
/// size is the store's, and a file of another size is damage.
fn any_file_of_size(dir: &Path, size: u64) -> Result<bool> {
    for topic in read_dirs(dir)? {
        for queue in read_dirs(&topic)? {
            let Ok(entries) = std::fs::read_dir(&queue) else { continue };
            if entries.flatten().any(|e| e.metadata().is_ok_and(|m| m.is_file() && m.len() == size)) {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

impl ConsumeQueueStore {
    /// Lets go of every queue's files, deleting none (a closed store's: see [`FileQueue::release`]).
    pub fn release(&self) {
        let queues = self.queues.read().unwrap_or_else(|p| p.into_inner());
        for cq in queues.values().flat_map(|q| q.values()) {
            cq.release();
        }
    }

    /// Loads every queue directory under `dir` (created if missing). Directories that cannot be a topic or a
    /// queue id are left alone and returned as `skipped`, as RocketMQ ignores non-numeric queue directories.
    pub fn load(dir: &Path, file_size: u64) -> Result<(Self, Vec<PathBuf>)> {
        Self::load_in(crate::mmap::Storage::Disk, dir, file_size)
    }

    /// [`ConsumeQueueStore::load`] in `storage`: in an overlay a missing directory holds no queue, and queues
    /// created later live in memory (see [`crate::mmap::Storage`]).
    pub fn load_in(storage: crate::mmap::Storage, dir: &Path, file_size: u64) -> Result<(Self, Vec<PathBuf>)> {
        let mut queues = QueueMap::default();
        let mut skipped = Vec::new();
        let mut resized = Vec::new();
        if storage == crate::mmap::Storage::Overlay && !dir.exists() {
            let store =
                ConsumeQueueStore { dir: dir.to_owned(), file_size, storage, queues: RwLock::new(queues), resized };
            return Ok((store, skipped));
        }
        if storage == crate::mmap::Storage::Disk {
            crate::mmap::create_dir_durable(dir)?;
        }
        let size_known = any_file_of_size(dir, super::round_file_size(file_size))?;
        for topic_entry in read_dirs(dir)? {
            let name = topic_entry.file_name().and_then(|n| n.to_str()).map(str::to_owned);
            let Some(topic) = name.filter(|t| path_safe_topic(t)) else {
                skipped.push(topic_entry);
                continue;
            };
            for queue_entry in read_dirs(&topic_entry)? {
                let id = queue_entry.file_name().and_then(|n| n.to_str()).and_then(crate::java::parse_int);
                let Some(queue_id) = id.filter(|q| *q >= 0) else {
                    skipped.push(queue_entry);
                    continue;
                };
                let (cq, damaged) =
                    ConsumeQueue::open_sized(storage, &queue_entry, &topic, queue_id, file_size, size_known)?;
                resized.extend(damaged.into_iter().map(|(path, len)| (topic.clone(), queue_id, path, len)));
                queues.entry(topic.clone()).or_default().insert(queue_id, Arc::new(cq));
            }
        }
        let store = ConsumeQueueStore { dir: dir.to_owned(), file_size, storage, queues: RwLock::new(queues), resized };
        Ok((store, skipped))
    }

    /// Files of another size than the configured one that an overlay read as far as they go (topic, queue id,
    /// path, length; [`FileQueue::load_derived_in`]).
    pub fn resized(&self) -> &[(String, i32, PathBuf, u64)] {
        &self.resized
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, QueueMap> {
        self.queues.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The queue, if it exists.
    pub fn find(&self, topic: &str, queue_id: i32) -> Option<Arc<ConsumeQueue>> {
        self.read().get(topic).and_then(|q| q.get(&queue_id)).cloned()
    }

    /// The queue, created (directory only; files come with the first entry) if it does not exist. `dispatching`
    /// is the commitlog offset of the record about to be dispatched into it: when the directory already holds
    /// files (in an overlay beside a live writer, a queue the writer created after the open), they are
    /// recovered as an open recovers them and cut where they point at or past that record, so the queue ends
    /// at its last entry written before it (the dispatch goes on from there), never at the end of its file.
    pub fn find_or_create(&self, topic: &str, queue_id: i32, dispatching: i64) -> Result<Arc<ConsumeQueue>> {
        if let Some(cq) = self.find(topic, queue_id) {
            return Ok(cq);
        }
        if !path_safe_topic(topic) || queue_id < 0 {
            return Err(Error::InvalidTopic {
                topic: topic.to_owned(),
                reason: format!("cannot hold a consume queue (queue id {queue_id})"),
            });
        }
        let mut map = self.queues.write().unwrap_or_else(|p| p.into_inner());
        let queues = map.entry(topic.to_owned()).or_default();
        if let Some(cq) = queues.get(&queue_id) {
            return Ok(cq.clone());
        }
        let dir = self.dir.join(topic).join(queue_id.to_string());
        let cq = Arc::new(ConsumeQueue::open_in(self.storage, &dir, topic, queue_id, self.file_size)?);
        if !cq.files().is_empty() {
            cq.recover()?; // a hole cuts the queue there: the dispatch from `dispatching` on cannot refill it
            cq.truncate_dirty(dispatching)?;
        }
        queues.insert(queue_id, cq.clone());
        Ok(cq)
    }

    /// Every queue, ordered by topic then queue id.
    pub fn all(&self) -> Vec<Arc<ConsumeQueue>> {
        let map = self.read();
        let mut out: Vec<_> = map.values().flat_map(|q| q.values().cloned()).collect();
        out.sort_by(|a, b| (a.topic(), a.queue_id()).cmp(&(b.topic(), b.queue_id())));
        out
    }

    /// The queue ids of `topic`, ascending.
    pub fn queue_ids(&self, topic: &str) -> Vec<i32> {
        let mut ids: Vec<i32> = self.read().get(topic).map(|q| q.keys().copied().collect()).unwrap_or_default();
        ids.sort_unstable();
        ids
    }

    /// Flushes every queue.
    pub fn flush(&self) -> Result<()> {
        for cq in self.all() {
            cq.flush()?;
        }
        Ok(())
    }
}

fn read_dirs(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        if entry.file_type().map_err(|e| Error::io(entry.path(), e))?.is_dir() {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}
