//! The index service (`IndexService.java`, spec §7.5): the ordered list of index files under
//! `<root>/index/`, `buildIndex` for dispatched messages, `queryOffset` across files, rollover and
//! expired-file deletion.
//!
//! Sharing: builders are serialised by the `writer` mutex, which also holds the file being written, so a
//! dispatched message costs one mutex and one file write lock however many keys it has. Queries take the
//! file list's read lock and each file's read lock; a rollover takes the list's write lock only to append.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard};

use super::{
    abs_hash, hash_continue, hash_continue_ascii, index_file_name, key_hash_from, key_seed, parse_index_file_name,
    Candidate, IndexConfig, IndexDamage, IndexFile, IndexRequest,
};
use crate::error::{Error, Result};
use crate::java::decode_utf8_lossy;
use crate::message::TransactionType;
use crate::mmap::Storage;

/// How many keys ahead of the one being put [`IndexService::build_many`] prefetches a slot.
const PREFETCH_AHEAD: usize = 8;

thread_local! {
    /// The hashed keys of this thread's last [`IndexService::build_many`], kept so that a build allocates none.
    static HASHED: std::cell::Cell<Hashed> = std::cell::Cell::new(Hashed::default());
}

/// Messages with their keys hashed: `(commitlog offset, store timestamp, first hash, end of hashes)` each, the
/// hashes of all of them in `hashes` (UNIQ_KEY first, then each non-empty KEYS token, as `buildIndex` puts them).
#[derive(Debug, Default)]
struct Hashed {
    messages: Vec<(i64, i64, u32, u32)>,
    hashes: Vec<i32>,
}

impl Hashed {
    /// Empties the buffers and makes room for `messages` messages (a new thread's first build allocates
    /// twice, not once per doubling).
    fn reserve(&mut self, messages: usize) {
        self.messages.clear();
        self.hashes.clear();
        self.messages.reserve(messages);
        self.hashes.reserve(messages * 4);
    }

    fn push(&mut self, m: &MessageKeys<'_>) {
        let from = self.hashes.len() as u32;
        let tokens = m.keys.as_deref().into_iter().flat_map(|k| k.split(' ')).filter(|t| !t.is_empty());
        let keys = m.uniq_key.as_deref().into_iter().chain(tokens);
        self.hashes.extend(keys.map(|k| key_hash_from(m.topic_hash, k)));
        self.messages.push((m.commitlog_offset, m.store_timestamp, from, self.hashes.len() as u32));
    }

    /// [`push`](Self::push) of a message's keys as stored (UTF-8 bytes): ASCII keys (the rule) are hashed from
    /// their bytes, with no decoding; others are decoded as Java decodes them first.
    fn push_raw(&mut self, keys: &RawKeys<'_>) {
        let RawKeys { topic_hash, commitlog_offset, store_timestamp, uniq_key, keys: text } = *keys;
        if !uniq_key.is_none_or(<[u8]>::is_ascii) || !text.is_none_or(<[u8]>::is_ascii) {
            let (uniq_key, keys) = (uniq_key.map(decode_utf8_lossy), text.map(decode_utf8_lossy));
            return self.push(&MessageKeys { topic_hash, commitlog_offset, store_timestamp, uniq_key, keys });
        }
        let from = self.hashes.len() as u32;
        let seed = key_seed(topic_hash);
        let tokens = text.into_iter().flat_map(|k| k.split(|&b| b == b' ')).filter(|t| !t.is_empty());
        let keys = uniq_key.into_iter().chain(tokens);
        self.hashes.extend(keys.map(|k| abs_hash(hash_continue_ascii(seed, k))));
        self.messages.push((commitlog_offset, store_timestamp, from, self.hashes.len() as u32));
    }
}

/// One message's index keys as its record stores them (UTF-8 bytes), for [`IndexService::build_raw`].
#[derive(Debug, Clone, Copy)]
pub struct RawKeys<'a> {
    /// `hash_continue(0, topic)`.
    pub topic_hash: i32,
    /// Commitlog offset of the record.
    pub commitlog_offset: i64,
    /// Store timestamp of the record (ms).
    pub store_timestamp: i64,
    /// The UNIQ_KEY property's bytes, if present.
    pub uniq_key: Option<&'a [u8]>,
    /// The KEYS property's bytes, if present.
    pub keys: Option<&'a [u8]>,
}

/// What `queryOffset` returns: the matching commitlog offsets (newest first, deduplicated) and the newest
/// file's end values (`indexLastUpdateTimestamp`, `indexLastUpdatePhyoffset`; 0 without files).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueryOffsetResult {
    /// Commitlog offsets found, newest first.
    pub phy_offsets: Vec<i64>,
    /// endTimestamp of the newest index file.
    pub index_last_update_timestamp: i64,
    /// endPhyOffset of the newest index file.
    pub index_last_update_phy_offset: i64,
}

/// One message's index keys for [`IndexService::build_many`]: the message is not a ROLLBACK, and its topic
/// is given by its `String.hashCode()`.
#[derive(Debug, Clone)]
pub struct MessageKeys<'a> {
    /// `hash_continue(0, topic)`.
    pub topic_hash: i32,
    /// Commitlog offset of the record.
    pub commitlog_offset: i64,
    /// Store timestamp of the record (ms).
    pub store_timestamp: i64,
    /// The UNIQ_KEY property, if present.
    pub uniq_key: Option<Cow<'a, str>>,
    /// The KEYS property, if present: tokens separated by single spaces, empty tokens skipped.
    pub keys: Option<Cow<'a, str>>,
}

/// The index files of one store and the rules for writing and querying them.
#[derive(Debug)]
pub struct IndexService {
    dir: PathBuf,
    storage: Storage,
    cfg: IndexConfig,
    clock: fn() -> i64,
    files: RwLock<Vec<Arc<IndexFile>>>,
    /// The file being written (the last one), held by whoever builds or rolls.
    writer: Mutex<Option<Arc<IndexFile>>>,
    /// End timestamp of the last file filled and rolled by this process (0: none), for the checkpoint.
    rolled_end_timestamp: std::sync::atomic::AtomicI64,
    /// Held while a file is rebuilt, so that two queries finding the same damage rebuild it once.
    rebuild_lock: Mutex<()>,
    /// Why files were left out at load (one truncated or extended among files of the configured size): their
    /// ranges are rebuilt from the commitlog as a lost file's are.
    left_out: Vec<String>,
}

/// What [`IndexService::rebuild`] hands its feed: put the keys of one message.
pub type RebuildSink<'a> = dyn FnMut(&IndexRequest<'_>) -> Result<()> + 'a;

/// Suffix of a file being rebuilt ([`IndexService::rebuild`]); one left by a crash is removed at load.
const REBUILD_SUFFIX: &str = ".rebuild";

impl IndexService {
    /// Lets go of every index file, deleting none (a closed store's): each is unmapped and its descriptor
    /// closed once no query holds it.
    pub fn release(&self) {
        self.writer.lock().unwrap_or_else(|p| p.into_inner()).take();
        std::mem::take(&mut *self.files.write().unwrap_or_else(|p| p.into_inner()));
    }

    /// Loads every index file in `dir` (created if missing) in file-name order, naming new files by the
    /// wall clock. Names that are not all digits are skipped; a file whose size does not match `cfg` is an
    /// [`Error::InvalidConfig`] (slot and entry counts are not stored, so it cannot be read).
    pub fn load(dir: &Path, cfg: IndexConfig) -> Result<Self> {
        Self::load_with_clock(dir, cfg, crate::commitlog::now_ms)
    }

    /// [`IndexService::load`] with a clock for new file names (tests pin it to provoke name collisions).
    pub fn load_with_clock(dir: &Path, cfg: IndexConfig, clock: fn() -> i64) -> Result<Self> {
        Self::load_in(Storage::Disk, dir, cfg, clock)
    }

    /// [`IndexService::load_with_clock`] in `storage`: in an overlay a missing directory holds no file, nothing
    /// is created or deleted, and new or rebuilt files live in memory (see [`crate::mmap::Storage`]).
    pub fn load_in(storage: Storage, dir: &Path, cfg: IndexConfig, clock: fn() -> i64) -> Result<Self> {
        cfg.validate()?;
        let overlay = storage == Storage::Overlay;
        if !overlay {
            crate::mmap::create_dir_durable(dir)?;
        }
        let mut names = Self::list_names(storage, dir)?;
        if overlay {
            // Another process may be creating files meanwhile, and a listing is not a snapshot: a file made
            // during it may be missed while a newer one is seen (ext4 lists in hash order), which would leave a
            // hole in the keys this view finds. Listed again until two listings agree.
            for _ in 0..8 {
                let again = Self::list_names(storage, dir)?;
                if again == names {
                    break;
                }
                names = again;
            }
        }
        // A newest file whose creation was cut short (0 bytes, or short and all zeros) holds nothing, so it goes,
        // as such a last segment does in `FileQueue::load`.
        let paths: Vec<PathBuf> = names.iter().map(|n| dir.join(n)).collect();
        let mut lens = Vec::with_capacity(paths.len());
        let mut kept = Vec::with_capacity(paths.len());
        for (name, path) in names.into_iter().zip(paths) {
            match std::fs::metadata(&path) {
                Ok(m) => {
                    lens.push(m.len());
                    kept.push((name, path));
                }
                // Gone since it was listed (retention by the process writing the store).
                Err(e) if overlay && e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(&path, e)),
            }
        }
        let (mut names, paths): (Vec<String>, Vec<PathBuf>) = kept.into_iter().unzip();
        let refs: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
        if let Some(last) = crate::file_queue::interrupted_creation(&refs, &lens, cfg.file_size())? {
            if !overlay {
                crate::file_queue::remove_durably(last)?;
            }
            names.pop();
            lens.pop();
        }
        let size = cfg.file_size();
        let odd: Vec<usize> = (0..lens.len()).filter(|&i| lens[i] != size).collect();
        let mut left_out = Vec::new();
        if let [i] = odd[..] {
            if lens.len() > 1 {
                // The other index files have the configured size: this one was truncated or extended. The index is
                // derived: the file is left out (removed by a writable open) and its range rebuilt from the
                // commitlog, as a lost file's is. (Several of another size: the store was written with other
                // index settings, refused below.)
                let path = dir.join(&names[i]);
                left_out.push(format!(
                    "{} is {} bytes where the store's index files are {size}: it was {}; left out, and its range \
                     rebuilt from the commitlog",
                    path.display(),
                    lens[i],
                    if lens[i] < size { "truncated" } else { "extended" }
                ));
                if !overlay {
                    crate::file_queue::remove_durably(&path)?;
                }
                names.remove(i);
                lens.remove(i);
            }
        }
        if let Some((n, &len)) = names.iter().zip(&lens).find(|(_, &l)| l != size) {
            if lens.contains(&size) {
                return Err(crate::file_queue::size_damage(&dir.join(n), 0, len, size, false));
            }
        }
        let mut files = Vec::with_capacity(names.len());
        for n in &names {
            match IndexFile::open_in(storage, &dir.join(n), cfg) {
                Ok(f) => files.push(Arc::new(f)),
                Err(Error::Io { source, .. }) if overlay && source.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        let last = files.last().cloned();
        Ok(IndexService {
            dir: dir.to_owned(),
            storage,
            cfg,
            clock,
            files: RwLock::new(files),
            writer: Mutex::new(last),
            rolled_end_timestamp: std::sync::atomic::AtomicI64::new(0),
            rebuild_lock: Mutex::new(()),
            left_out,
        })
    }

    /// Why files were left out at load (see the field), for the open's report.
    pub fn left_out(&self) -> &[String] {
        &self.left_out
    }

    /// The index files' names in `dir`, sorted (a missing directory in an overlay holds none). A rebuild's
    /// leftover (`REBUILD_SUFFIX`) is removed on disk and skipped; names that are not all digits are skipped.
    fn list_names(storage: Storage, dir: &Path) -> Result<Vec<String>> {
        let overlay = storage == Storage::Overlay;
        let listing = match std::fs::read_dir(dir) {
            Err(e) if overlay && e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            r => r.map_err(|e| Error::io(dir, e))?.collect(),
        };
        let mut names = Vec::new();
        for entry in listing {
            let entry = entry.map_err(|e| Error::io(dir, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let is_file = match entry.file_type() {
                Ok(t) => t.is_file(),
                Err(e) if overlay && e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io(entry.path(), e)),
            };
            // A rebuild cut short by a crash: the file it was replacing (or the gap it was filling) is found
            // again by the checks at open.
            if is_file && name.ends_with(REBUILD_SUFFIX) {
                if !overlay {
                    std::fs::remove_file(entry.path()).map_err(|e| Error::io(entry.path(), e))?;
                }
                continue;
            }
            // RocketMQ skips names that do not parse as a long; ours are always digits.
            if is_file && !name.is_empty() && name.len() <= 18 && name.bytes().all(|b| b.is_ascii_digit()) {
                names.push(name);
            }
        }
        names.sort();
        #[cfg(test)]
        tests::LISTING.with(|hook| hook.borrow_mut().as_mut().map(|f| f(&mut names)));
        Ok(names)
    }

    /// Marks a view's files as ones a live writer may still be filling ([`IndexFile::set_beside_writer`]).
    pub fn set_beside_writer(&self) {
        for f in self.list().iter() {
            f.set_beside_writer();
        }
    }

    /// End timestamp of the last index file this process filled and rolled, 0 if none (RocketMQ's
    /// checkpoint `indexMsgTimestamp`: files ending after it are rebuilt by its recovery after a crash).
    pub fn rolled_end_timestamp(&self) -> i64 {
        self.rolled_end_timestamp.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The settings the files are read and written with.
    pub fn config(&self) -> IndexConfig {
        self.cfg
    }

    /// The directory of the files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn list(&self) -> RwLockReadGuard<'_, Vec<Arc<IndexFile>>> {
        self.files.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lock_writer(&self) -> MutexGuard<'_, Option<Arc<IndexFile>>> {
        self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Paths of the files, oldest first.
    pub fn file_paths(&self) -> Vec<PathBuf> {
        self.list().iter().map(|f| f.path().to_owned()).collect()
    }

    /// The files, oldest first.
    pub fn files(&self) -> Vec<Arc<IndexFile>> {
        self.list().clone()
    }

    /// Keys held by every file.
    pub fn entry_count(&self) -> u64 {
        self.files().iter().map(|f| f.entry_count()).sum()
    }

    /// Commitlog offset of the last message with an indexed key (the newest file with entries), if any.
    pub fn last_indexed_offset(&self) -> Option<i64> {
        self.list().iter().rev().find(|f| f.has_entries()).map(|f| f.end_phy_offset())
    }

    /// The file [`IndexService::build_index`] writes to and its endPhyOffset: a message below that offset is
    /// passed over as indexed already. `None` before the first file.
    pub fn writing(&self) -> Option<(Arc<IndexFile>, i64)> {
        self.lock_writer().as_ref().map(|f| (Arc::clone(f), f.end_phy_offset()))
    }

    /// `buildIndex` (§7.5) for one dispatched message: puts `topic#UNIQ_KEY` and `topic#token` for each
    /// non-empty KEYS token, rolling to a new file when the current one is full. Messages below the last
    /// file's endPhyOffset are already indexed and skipped, ROLLBACK messages are never indexed.
    ///
    /// Beyond RocketMQ (which re-puts every key of a message at exactly endPhyOffset), a key already
    /// indexed for that message is not put again, so re-dispatching the last message after a crash
    /// leaves no duplicate entries.
    pub fn build_index(&self, req: &IndexRequest<'_>) -> Result<()> {
        if req.transaction == TransactionType::Rollback {
            return Ok(());
        }
        if req.uniq_key.is_none() && req.keys.is_none() {
            return Ok(());
        }
        self.build_many(std::iter::once(MessageKeys {
            topic_hash: hash_continue(0, req.topic),
            commitlog_offset: req.commitlog_offset,
            store_timestamp: req.store_timestamp,
            uniq_key: req.uniq_key.map(Cow::Borrowed),
            keys: req.keys.map(Cow::Borrowed),
        }))
    }

    /// [`IndexService::build_index`] of messages in commitlog order (none a ROLLBACK), each topic given by its
    /// `String.hashCode()` (dispatch hashes a topic once for many messages), taking the writer once for all
    /// of them (a dispatch round's chunk): the same entries as one call per message. Queries still interleave
    /// between messages (each message takes the file's header lock on its own).
    pub fn build_many<'k>(&self, msgs: impl IntoIterator<Item = MessageKeys<'k>>) -> Result<()> {
        let msgs = msgs.into_iter();
        self.build_with(msgs.size_hint().0, |hashed| msgs.for_each(|m| hashed.push(&m)))
    }

    /// [`build_many`](Self::build_many) of keys as records store them (dispatch): decoded only when not ASCII.
    pub fn build_raw<'k>(&self, msgs: impl IntoIterator<Item = RawKeys<'k>>) -> Result<()> {
        let msgs = msgs.into_iter();
        self.build_with(msgs.size_hint().0, |hashed| msgs.for_each(|m| hashed.push_raw(&m)))
    }

    /// Hashes about `messages` messages' keys with `fill` into this thread's reused buffers, then builds them.
    fn build_with(&self, messages: usize, fill: impl FnOnce(&mut Hashed)) -> Result<()> {
        HASHED.with(|cell| {
            // A nested build on this thread (none today) would find the buffers taken: it makes its own.
            let mut hashed = cell.take();
            hashed.reserve(messages);
            fill(&mut hashed);
            let built = self.build_hashed(&hashed);
            cell.replace(hashed);
            built
        })
    }

    /// [`build_many`](Self::build_many) of messages whose keys are hashed already. The slot of the key
    /// [`PREFETCH_AHEAD`] places ahead is prefetched before each put: the slots of a file are spread over
    /// megabytes, so a put's slot read is a cache miss, and a few in flight together cost little more than one.
    fn build_hashed(&self, hashed: &Hashed) -> Result<()> {
        let mut current: Option<MutexGuard<'_, Option<Arc<IndexFile>>>> = None;
        let mut file: Option<Arc<IndexFile>> = None;
        let hashes = hashed.hashes.as_slice();
        for &(offset, ts, from, to) in &hashed.messages {
            let (mut k, to) = (from as usize, to as usize);
            if k == to {
                continue;
            }
            let current = current.get_or_insert_with(|| self.lock_writer());
            // A full last file is kept for the checks below (a re-dispatched message must not open a file);
            // the first put into it fails and rolls.
            let mut f = match (&file, &**current) {
                (Some(f), _) | (None, Some(f)) => Arc::clone(f),
                (None, None) => self.roll(current)?,
            };
            let (end, has_entries) = {
                let h = f.header();
                (h.end_phy_offset, h.index_count > 1)
            };
            if offset < end {
                file = Some(f);
                continue;
            }
            // At endPhyOffset the message may be partly indexed already (the last one before a crash). Its keys
            // can be in this file or, if it is still empty, in the previous one.
            let check_dup = offset == end;
            let dup_file = match check_dup {
                false => None,
                true if has_entries => Some(Arc::clone(&f)),
                true => self.previous(&f),
            };
            loop {
                let mut w = f.writer();
                let mut rolled = false;
                while k < to {
                    let hash = hashes[k];
                    if let Some(&ahead) = hashes.get(k + PREFETCH_AHEAD) {
                        f.prefetch_slot(ahead);
                    }
                    let seen = check_dup
                        && match &dup_file {
                            Some(d) if Arc::ptr_eq(d, &f) => w.contains(hash, offset),
                            Some(d) => d.contains(hash, offset),
                            None => false,
                        };
                    if !seen && !w.put_key(hash, offset, ts)? {
                        if w.header().index_count <= 1 {
                            return Err(Error::Corruption {
                                path: f.path().to_owned(),
                                offset: 0,
                                reason: "cannot put a key into an empty index file".into(),
                            });
                        }
                        rolled = true;
                        break;
                    }
                    k += 1;
                }
                drop(w);
                if !rolled {
                    break;
                }
                f = self.roll(current)?;
            }
            file = Some(f);
        }
        Ok(())
    }

    fn previous(&self, file: &Arc<IndexFile>) -> Option<Arc<IndexFile>> {
        let files = self.list();
        let i = files.iter().position(|f| Arc::ptr_eq(f, file))?;
        i.checked_sub(1).and_then(|p| files.get(p)).cloned()
    }

    /// Flushes the current file, then creates the next one, continuing the current one's end values, and makes
    /// it current. The flush comes first so that a file exists on disk only after every earlier one is durable:
    /// a power loss can revert the newest file (re-dispatch from the last durable entry rebuilds it) but never
    /// leave an empty file before a later one, whose end offset would make dispatch skip the keys lost with it.
    /// Names come from the clock; a name not after the last file's (same millisecond, or a clock that went
    /// back) becomes the last name's time + 1 ms, so names stay unique and ordered.
    fn roll(&self, current: &mut MutexGuard<'_, Option<Arc<IndexFile>>>) -> Result<Arc<IndexFile>> {
        let prev = current.clone();
        if let Some(p) = &prev {
            p.flush()?;
        }
        let (prev_end, prev_ts) = prev.as_ref().map_or((0, 0), |f| (f.end_phy_offset(), f.end_timestamp()));
        let mut ms = (self.clock)();
        let mut name = index_file_name(ms);
        if let Some(last_name) = prev.as_ref().map(|f| f.name()) {
            if name <= last_name {
                ms = parse_index_file_name(&last_name).unwrap_or(ms);
                // A DST fold can map ms + 1 to an earlier wall-clock name; step until it sorts after.
                for _ in 0..=3_600_000 {
                    ms += 1;
                    name = index_file_name(ms);
                    if name > last_name {
                        break;
                    }
                }
                if name <= last_name {
                    return Err(Error::InvalidConfig(format!("no index file name after {last_name}")));
                }
            }
        }
        let file = Arc::new(IndexFile::create_in(self.storage, &self.dir.join(&name), self.cfg, prev_end, prev_ts)?);
        self.files.write().unwrap_or_else(std::sync::PoisonError::into_inner).push(Arc::clone(&file));
        **current = Some(Arc::clone(&file));
        if prev.is_some() {
            self.rolled_end_timestamp.fetch_max(prev_ts, std::sync::atomic::Ordering::AcqRel);
        }
        Ok(file)
    }

    /// `queryOffset(topic, key, maxNum, begin, end)` (§7.5): offsets of entries with the key's hash stored
    /// in `[begin, end]`, newest file first, at most `min(max_num, maxMsgsNumBatch)`. Each candidate is
    /// offered to `accept` (the store checks the message really has the key); only accepted ones count.
    /// The files are taken as they are: the store queries through [`IndexService::query_checked`].
    pub fn query(
        &self,
        topic: &str,
        key: &str,
        max_num: usize,
        begin: i64,
        end: i64,
        accept: &mut dyn FnMut(i64) -> bool,
    ) -> QueryOffsetResult {
        let mut judge =
            |o: i64, _, candidate: bool| if candidate && accept(o) { Candidate::Accept } else { Candidate::Reject };
        match self.query_inner(topic, key, max_num, begin, end, &mut judge, false) {
            Ok(r) | Err((_, _, r)) => r,
        }
    }

    /// [`IndexService::query`] that checks each file it reads: a file not checked yet is verified
    /// ([`IndexFile::verify`]) first, and `judge` may find an entry damaged. Either way the damaged file and
    /// what is wrong come back instead of a result that could miss keys; the store rebuilds the file
    /// ([`IndexService::rebuild`]) and asks again.
    #[allow(clippy::type_complexity)]
    pub fn query_checked(
        &self,
        topic: &str,
        key: &str,
        max_num: usize,
        begin: i64,
        end: i64,
        judge: &mut dyn FnMut(i64, i32, bool) -> Candidate,
    ) -> std::result::Result<QueryOffsetResult, (Arc<IndexFile>, IndexDamage)> {
        self.query_inner(topic, key, max_num, begin, end, judge, true).map_err(|(f, d, _)| (f, d))
    }

    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    fn query_inner(
        &self,
        topic: &str,
        key: &str,
        max_num: usize,
        begin: i64,
        end: i64,
        judge: &mut dyn FnMut(i64, i32, bool) -> Candidate,
        check: bool,
    ) -> std::result::Result<QueryOffsetResult, (Arc<IndexFile>, IndexDamage, QueryOffsetResult)> {
        let max_num = max_num.min(self.cfg.max_msgs_num_batch);
        let files = self.list();
        let mut res = QueryOffsetResult::default();
        if let Some(last) = files.last() {
            let h = last.header();
            res.index_last_update_timestamp = h.end_timestamp;
            res.index_last_update_phy_offset = h.end_phy_offset;
        }
        if max_num == 0 {
            return Ok(res);
        }
        let hash = key_hash_from(hash_continue(0, topic), key);
        for f in files.iter().rev() {
            if check && !f.is_checked() {
                match f.verify() {
                    Ok(()) => f.mark_checked(),
                    Err(d) => return Err((Arc::clone(f), d, res)),
                }
            }
            if f.is_time_matched(begin, end) {
                if let Err(d) = f.select_phy_offsets(hash, max_num, begin, end, &mut res.phy_offsets, judge) {
                    if check {
                        return Err((Arc::clone(f), d, res));
                    }
                }
            }
            if f.begin_timestamp() < begin || res.phy_offsets.len() >= max_num {
                break;
            }
        }
        Ok(res)
    }

    /// Rebuilds the index of the commitlog range that lies between the files `prev` and `next` (either may
    /// be absent: the start of the log, the end of the log), replacing `target` (a damaged file of that
    /// range) or filling a range whose file is missing. `feed` offers the range's messages in commitlog order
    /// to the sink it is given. Keys of the boundary messages that `prev` or `next` already hold (a message
    /// whose keys a roll split over two files) are not put again, so a rebuilt file holds what the original
    /// held, byte for byte when nothing else changed. New files get names between their neighbours' (the
    /// target's own name first) and are written under a temporary name, synced and renamed into place, so a
    /// crash leaves the old file or the new one. Queries see the old files until the new ones are in.
    /// Returns the new files.
    pub fn rebuild(
        &self,
        target: Option<&Arc<IndexFile>>,
        prev: Option<&Arc<IndexFile>>,
        next: Option<&Arc<IndexFile>>,
        feed: &mut dyn FnMut(&mut RebuildSink<'_>) -> Result<()>,
    ) -> Result<Vec<Arc<IndexFile>>> {
        let _rebuilding = self.rebuild_lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut current = self.lock_writer();
        if let Some(t) = target {
            if !self.list().iter().any(|f| Arc::ptr_eq(f, t)) {
                // Rebuilt (or removed by retention) by another caller meanwhile.
                return Ok(Vec::new());
            }
        }
        let first_name = match target {
            Some(t) => t.name(),
            None => self.name_between(prev, next, 0)?,
        };
        let (mut end_phy, mut end_ts) = prev.map_or((0, 0), |p| (p.end_phy_offset(), p.end_timestamp()));
        let mut names = vec![first_name];
        // In an overlay the new files live in memory under their final names.
        let overlay = self.storage == Storage::Overlay;
        let tmp = |name: &str| {
            if overlay {
                self.dir.join(name)
            } else {
                self.dir.join(format!("{name}{REBUILD_SUFFIX}"))
            }
        };
        let mut file = IndexFile::create_in(self.storage, &tmp(&names[0]), self.cfg, end_phy, end_ts)?;
        let mut built: Vec<IndexFile> = Vec::new();
        let mut sink = |req: &IndexRequest<'_>| -> Result<()> {
            if req.transaction == TransactionType::Rollback {
                return Ok(());
            }
            let topic_hash = hash_continue(0, req.topic);
            let tokens = req.keys.into_iter().flat_map(|k| k.split(' ')).filter(|t| !t.is_empty());
            for key in req.uniq_key.into_iter().chain(tokens) {
                let hash = key_hash_from(topic_hash, key);
                let offset = req.commitlog_offset;
                // A message whose keys a roll split: those in the file before are its last entries, those in
                // the file after its first (read without the slots, which damage can cut).
                if prev.is_some_and(|p| p.end_phy_offset() == offset && p.contains(hash, offset))
                    || next.is_some_and(|n| n.begin_phy_offset() == offset && n.contains_first(hash, offset))
                {
                    continue;
                }
                while !file.put_key(hash, offset, req.store_timestamp)? {
                    if file.header().index_count <= 1 {
                        return Err(Error::Corruption {
                            path: file.path().to_owned(),
                            offset: 0,
                            reason: "cannot put a key into an empty index file".into(),
                        });
                    }
                    (end_phy, end_ts) = (file.end_phy_offset(), file.end_timestamp());
                    // The next name: one ms after the last one (the rebuilt file's own, the first time), before
                    // `next`'s.
                    let last = names.last().and_then(|l| parse_index_file_name(l));
                    let name = match last {
                        Some(ms) => index_file_name(ms + 1),
                        None => self.name_between(prev, next, names.len())?,
                    };
                    if names.last().is_some_and(|l| *l >= name) || next.is_some_and(|n| name >= n.name()) {
                        return Err(Error::InvalidConfig(format!(
                            "no index file name fits between {} and the next file",
                            names.last().map_or("", String::as_str)
                        )));
                    }
                    let full = std::mem::replace(
                        &mut file,
                        IndexFile::create_in(self.storage, &tmp(&name), self.cfg, end_phy, end_ts)?,
                    );
                    built.push(full);
                    names.push(name);
                }
            }
            Ok(())
        };
        if let Err(e) = feed(&mut sink) {
            // Nothing of a failed rebuild stays: the temporary files go (an overlay's live only in memory).
            if !overlay {
                for f in built.iter().chain(std::iter::once(&file)) {
                    let _ = std::fs::remove_file(f.path());
                }
            }
            return Err(e);
        }
        built.push(file);
        let mut fresh = Vec::with_capacity(built.len());
        for (f, name) in built.into_iter().zip(&names) {
            if overlay {
                f.mark_checked();
                fresh.push(Arc::new(f));
                continue;
            }
            f.flush()?;
            let from = f.path().to_owned();
            drop(f);
            let to = self.dir.join(name);
            std::fs::rename(&from, &to).map_err(|e| Error::io(&from, e))?;
            let opened = IndexFile::open(&to, self.cfg)?;
            opened.mark_checked();
            fresh.push(Arc::new(opened));
        }
        if !overlay {
            crate::mmap::sync_dir(&self.dir)?;
        }
        let mut files = self.files.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(t) = target {
            files.retain(|f| !Arc::ptr_eq(f, t));
        }
        files.extend(fresh.iter().cloned());
        files.sort_by_key(|f| f.name());
        let was_current = match (target, &*current) {
            (Some(t), Some(c)) => Arc::ptr_eq(t, c),
            _ => false,
        };
        if was_current || current.is_none() {
            *current = files.last().cloned();
        }
        Ok(fresh)
    }

    /// A file name after `prev`'s and before `next`'s, the `k`-th of a run of new files: the previous name's
    /// time + 1 + k ms, or, without a previous file, the next name's time − 1000 + k ms.
    fn name_between(&self, prev: Option<&Arc<IndexFile>>, next: Option<&Arc<IndexFile>>, k: usize) -> Result<String> {
        let k = k as i64;
        let ms = match (prev.and_then(|p| parse_index_file_name(&p.name())), next) {
            (Some(p), _) => p + 1 + k,
            (None, Some(n)) => parse_index_file_name(&n.name()).unwrap_or(0) - 1000 + k,
            (None, None) => (self.clock)() + k,
        };
        let name = index_file_name(ms);
        let fits = prev.is_none_or(|p| name > p.name()) && next.is_none_or(|n| name < n.name());
        if fits {
            Ok(name)
        } else {
            Err(Error::InvalidConfig(format!("no index file name fits between {prev:?} and {next:?}")))
        }
    }

    /// Removes every file after the first `keep`, newest first, each unlinked at once and the directory synced
    /// (in an overlay they are only forgotten): what a cut of the commitlog left wholly past its end. The last
    /// file kept becomes the one written to. Returns the paths removed.
    pub fn remove_after(&self, keep: usize) -> Result<Vec<PathBuf>> {
        let _rebuilding = self.rebuild_lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut current = self.lock_writer();
        let mut files = self.files.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut removed = Vec::new();
        while files.len() > keep {
            let Some(f) = files.pop() else { break };
            if self.storage == Storage::Disk {
                // Newest first: a crash part way leaves a prefix of the files, which the next open cuts again.
                std::fs::remove_file(f.path()).map_err(|e| Error::io(f.path(), e))?;
            }
            removed.push(f.path().to_owned());
        }
        if !removed.is_empty() && self.storage == Storage::Disk {
            crate::mmap::sync_dir(&self.dir)?;
        }
        *current = files.last().cloned();
        Ok(removed)
    }

    /// Forces every file (header rewritten first) to disk.
    pub fn flush(&self) -> Result<()> {
        for f in self.list().iter() {
            f.flush()?;
        }
        Ok(())
    }

    /// `deleteExpiredFile(minCommitLogOffset)` (§7.5): removes files, oldest first and never the last one,
    /// whose endPhyOffset is below `min_commitlog_offset`. Returns how many were removed; each is unlinked
    /// once no query uses it any more.
    pub fn delete_expired(&self, min_commitlog_offset: i64) -> usize {
        let mut files = self.files.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = files
            .iter()
            .take(files.len().saturating_sub(1))
            .take_while(|f| f.end_phy_offset() < min_commitlog_offset)
            .count();
        for f in files.drain(..n) {
            f.delete_on_drop();
        }
        n
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn small() -> IndexConfig {
        IndexConfig { max_hash_slot_num: 8, max_index_num: 24, max_msgs_num_batch: 64 }
    }

    type Listing = dyn FnMut(&mut Vec<String>);

    thread_local! {
        /// Sees each listing of the index directory (a test makes one miss a file, as a listing made while
        /// another process creates files can).
        pub(super) static LISTING: crate::race::Hook<Listing> = const { std::cell::RefCell::new(None) };
    }

    #[test]
    fn a_view_finds_the_keys_of_a_slot_the_writer_went_on_using() {
        let dir = tempfile::tempdir().unwrap();
        let one_slot = IndexConfig { max_hash_slot_num: 1, max_index_num: 64, max_msgs_num_batch: 64 };
        let fixed = || 1_700_000_000_000;
        let writer = IndexService::load_with_clock(dir.path(), one_slot, fixed).unwrap();
        let put = |i: i64| index_key(&writer, i);
        (0..5).for_each(put);
        let view = IndexService::load_in(Storage::Overlay, dir.path(), one_slot, fixed).unwrap();
        // The writer goes on: the one slot now points at entries after the view's header.
        (5..8).for_each(put);
        let found = |key: &str| view.query("T", key, 8, 0, i64::MAX, &mut |_| true).phy_offsets;
        for i in 0..5 {
            assert_eq!(found(&format!("k{i}")), [100 * i], "k{i}");
        }
        assert!(found("k6").is_empty(), "after the view's snapshot: its refresh takes it in");
        // The view indexes a message itself (its dispatch after the open): the slot's older keys stay linked.
        let req = IndexRequest {
            topic: "T",
            commitlog_offset: 500,
            store_timestamp: 1_700_000_000_005,
            transaction: TransactionType::NotType,
            uniq_key: None,
            keys: Some("k5"),
        };
        view.build_index(&req).unwrap();
        for i in 0..6 {
            assert_eq!(found(&format!("k{i}")), [100 * i], "k{i} after the view's own put");
        }
    }

    /// Indexes key `k{i}` of a message at commitlog offset `100 * i`, stored `i` ms after 1,700,000,000,000.
    fn index_key(svc: &IndexService, i: i64) {
        let key = format!("k{i}");
        let req = IndexRequest {
            topic: "T",
            commitlog_offset: 100 * i,
            store_timestamp: 1_700_000_000_000 + i,
            transaction: TransactionType::NotType,
            uniq_key: None,
            keys: Some(&key),
        };
        svc.build_index(&req).unwrap();
    }

    /// Writes `h` over the header of the file at `path` (as another process's mapping would).
    fn write_header(path: &Path, h: &crate::index::file::IndexHeader) {
        use std::os::unix::fs::FileExt;
        std::fs::OpenOptions::new().write(true).open(path).unwrap().write_all_at(&h.encode(), 0).unwrap();
    }

    #[test]
    fn a_view_of_a_file_the_writer_went_on_filling_passes_the_checks_of_an_open() {
        // On main a read-only open beside a live writer found "slot N holds X but its chain's newest entry is Y"
        // (or "entry N, after the last, holds data") in the writer's newest file and rebuilt it from the
        // commitlog in memory: seconds for a million keys, at every open.
        let dir = tempfile::tempdir().unwrap();
        let cfg = IndexConfig { max_hash_slot_num: 4, max_index_num: 64, max_msgs_num_batch: 64 };
        let fixed = || 1_700_000_000_000;
        let writer = IndexService::load_with_clock(dir.path(), cfg, fixed).unwrap();
        let put = |i: i64| index_key(&writer, i);
        (0..12).for_each(put);
        let view = IndexService::load_in(Storage::Overlay, dir.path(), cfg, fixed).unwrap();
        (12..20).for_each(put); // every slot moves past the view's header, entries follow its last
        let file = view.files().pop().unwrap();
        assert_eq!(file.header().index_count, 13);
        // A view that does not know of a writer (nobody held the lock at its open): what a crash would leave.
        assert!(file.check_header().is_err());
        assert!(file.verify().is_err());
        view.set_beside_writer();
        assert_eq!(file.check_header(), Ok(()));
        assert_eq!(file.verify(), Ok(()));
        // The same bytes on disk (a writable open) are damage: a count lowered, slots past it.
        let mut torn = IndexFile::open(file.path(), cfg).unwrap().header();
        torn.index_count = 13;
        write_header(file.path(), &torn);
        let reopened = IndexFile::open(file.path(), cfg).unwrap();
        assert!(reopened.check_header().is_err());
        assert!(reopened.verify().is_err());
    }

    #[test]
    fn a_view_reads_a_header_again_until_it_agrees_with_the_entries() {
        // A writer updates the header after each key (RocketMQ field by field): a view reading in between can
        // pair one key's indexCount with the previous key's endPhyOffset.
        let dir = tempfile::tempdir().unwrap();
        let cfg = IndexConfig { max_hash_slot_num: 4, max_index_num: 64, max_msgs_num_batch: 64 };
        let fixed = || 1_700_000_000_000;
        let writer = IndexService::load_with_clock(dir.path(), cfg, fixed).unwrap();
        (0..6).for_each(|i| index_key(&writer, i));
        let path = writer.files().pop().unwrap().path().to_owned();
        let whole = writer.files().pop().unwrap().header();
        let mut half = whole;
        half.end_phy_offset = 400; // the count of the sixth key, the end of the fifth
        write_header(&path, &half);
        let mut rereads = 0;
        crate::index::file::tests::SETTLE.with(|h| {
            *h.borrow_mut() = Some(Box::new(move || {
                rereads += 1;
                if rereads == 3 {
                    write_header(&path, &whole); // the writer finishes its update
                }
            }))
        });
        let view = IndexService::load_in(Storage::Overlay, dir.path(), cfg, fixed).unwrap();
        crate::index::file::tests::SETTLE.with(|h| *h.borrow_mut() = None);
        let seen = view.files().pop().unwrap();
        assert_eq!(seen.header(), whole);
        assert_eq!(seen.verify(), Ok(()));
        let found = view.query("T", "k5", 8, 0, i64::MAX, &mut |_| true).phy_offsets;
        assert_eq!(found, [500]);
    }

    #[test]
    fn a_view_does_not_miss_a_file_a_listing_missed() {
        static NOW: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(1_700_000_000_000);
        let clock = || NOW.fetch_add(1_000, std::sync::atomic::Ordering::Relaxed);
        let dir = tempfile::tempdir().unwrap();
        let svc = IndexService::load_with_clock(dir.path(), small(), clock).unwrap();
        for i in 0..60i64 {
            let key = format!("k{i}");
            let req = IndexRequest {
                topic: "T",
                commitlog_offset: 100 * i,
                store_timestamp: clock(),
                transaction: TransactionType::NotType,
                uniq_key: None,
                keys: Some(&key),
            };
            svc.build_index(&req).unwrap();
        }
        let all = svc.file_paths();
        assert_eq!(all.len(), 3);
        drop(svc);
        let mut first = true;
        LISTING.with(|h| {
            *h.borrow_mut() = Some(Box::new(move |names: &mut Vec<String>| {
                if std::mem::take(&mut first) {
                    names.remove(1);
                }
            }))
        });
        let view = IndexService::load_in(Storage::Overlay, dir.path(), small(), clock);
        LISTING.with(|h| *h.borrow_mut() = None);
        assert_eq!(view.unwrap().file_paths(), all);
    }

    /// Every file's bytes, oldest first.
    fn contents(svc: &IndexService) -> Vec<Vec<u8>> {
        svc.file_paths().iter().map(|p| std::fs::read(p).unwrap()).collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Dispatch's path (keys as stored bytes, hashed without decoding when ASCII, a slot prefetched ahead)
        /// writes the same files as `buildIndex` one message at a time from Java-decoded strings: ASCII,
        /// non-ASCII and malformed UTF-8 keys, empty tokens, files rolling over.
        #[test]
        fn raw_keys_index_as_decoded_keys_do(
            msgs in proptest::collection::vec(
                (
                    proptest::option::of(proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'Z'), Just(0xC3u8), Just(0xA9u8), Just(0xFFu8)], 0..6)),
                    proptest::option::of(proptest::collection::vec(prop_oneof![Just(b'k'), Just(b' '), Just(b'7'), Just(0xE2u8), Just(0x82u8), Just(0xACu8), Just(0x80u8)], 0..12)),
                ),
                1..40,
            )
        ) {
            let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
            let fixed = || 1_700_000_000_000;
            let raw = IndexService::load_with_clock(a.path(), small(), fixed).unwrap();
            let one = IndexService::load_with_clock(b.path(), small(), fixed).unwrap();
            let topic = "Topic\u{e9}";
            let topic_hash = hash_continue(0, topic);
            let keys: Vec<RawKeys<'_>> = msgs
                .iter()
                .enumerate()
                .map(|(i, (u, k))| RawKeys {
                    topic_hash,
                    commitlog_offset: 100 * i as i64,
                    store_timestamp: 1_700_000_000_000 + 1_000 * i as i64,
                    uniq_key: u.as_deref(),
                    keys: k.as_deref(),
                })
                .collect();
            raw.build_raw(keys.iter().copied()).unwrap();
            for m in &keys {
                let (u, k) = (m.uniq_key.map(decode_utf8_lossy), m.keys.map(decode_utf8_lossy));
                one.build_index(&IndexRequest {
                    topic,
                    commitlog_offset: m.commitlog_offset,
                    store_timestamp: m.store_timestamp,
                    transaction: TransactionType::NotType,
                    uniq_key: u.as_deref(),
                    keys: k.as_deref(),
                })
                .unwrap();
            }
            prop_assert_eq!(contents(&raw), contents(&one));
        }
    }
}
