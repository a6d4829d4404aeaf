//! One index file (`IndexFile.java`): header, hash slots and entries (layout in the module docs of
//! [`crate::index`]), `putKey` (§7.4) and `selectPhyOffset` (§7.5).
//!
//! Sharing: every access to the mapped bytes happens under the file's `RwLock` (writes under the write
//! lock, reads under either), so no byte is read while it is written. The lock also guards the in-memory
//! header, which mirrors the header bytes: each change is written through to the mapping at once.

use std::path::Path;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::{
    IndexConfig, BEGIN_PHY_OFFSET_POS, BEGIN_TIMESTAMP_POS, END_PHY_OFFSET_POS, END_TIMESTAMP_POS, ENTRY_SIZE,
    HASH_SLOT_COUNT_POS, HEADER_SIZE, INDEX_COUNT_POS, SLOT_SIZE,
};
use crate::error::{Error, Result};
use crate::mmap::{MappedFile, Storage};

/// The 40-byte header (`IndexHeader.java`), big-endian.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexHeader {
    /// Store time of the first indexed message (ms).
    pub begin_timestamp: i64,
    /// Store time of the last indexed message (ms).
    pub end_timestamp: i64,
    /// Commitlog offset of the first indexed message.
    pub begin_phy_offset: i64,
    /// Commitlog offset of the last indexed message.
    pub end_phy_offset: i64,
    /// Slots that became non-empty.
    pub hash_slot_count: i32,
    /// Next entry number; 1 in a file without entries.
    pub index_count: i32,
}

impl IndexHeader {
    /// Format: `{ beginTimestamp i64 | endTimestamp i64 | beginPhyOffset i64 | endPhyOffset i64 |
    /// hashSlotCount i32 | indexCount i32 }`.
    pub fn encode(&self) -> [u8; HEADER_SIZE] {
        let mut b = [0u8; HEADER_SIZE];
        b[BEGIN_TIMESTAMP_POS..END_TIMESTAMP_POS].copy_from_slice(&self.begin_timestamp.to_be_bytes());
        b[END_TIMESTAMP_POS..BEGIN_PHY_OFFSET_POS].copy_from_slice(&self.end_timestamp.to_be_bytes());
        b[BEGIN_PHY_OFFSET_POS..END_PHY_OFFSET_POS].copy_from_slice(&self.begin_phy_offset.to_be_bytes());
        b[END_PHY_OFFSET_POS..HASH_SLOT_COUNT_POS].copy_from_slice(&self.end_phy_offset.to_be_bytes());
        b[HASH_SLOT_COUNT_POS..INDEX_COUNT_POS].copy_from_slice(&self.hash_slot_count.to_be_bytes());
        b[INDEX_COUNT_POS..HEADER_SIZE].copy_from_slice(&self.index_count.to_be_bytes());
        b
    }

    /// Decodes the header as stored (`None` if fewer than 40 bytes). No adjustment of indexCount.
    pub fn decode(b: &[u8]) -> Option<Self> {
        Some(IndexHeader {
            begin_timestamp: be_i64(b, BEGIN_TIMESTAMP_POS)?,
            end_timestamp: be_i64(b, END_TIMESTAMP_POS)?,
            begin_phy_offset: be_i64(b, BEGIN_PHY_OFFSET_POS)?,
            end_phy_offset: be_i64(b, END_PHY_OFFSET_POS)?,
            hash_slot_count: be_i32(b, HASH_SLOT_COUNT_POS)?,
            index_count: be_i32(b, INDEX_COUNT_POS)?,
        })
    }

    /// `isTimeMatched(begin, end)`: the window `[begin, end]` overlaps `[beginTimestamp, endTimestamp]`.
    pub fn is_time_matched(&self, begin: i64, end: i64) -> bool {
        let (fb, fe) = (self.begin_timestamp, self.end_timestamp);
        (begin < fb && end > fe) || (fb <= begin && begin <= fe) || (fb <= end && end <= fe)
    }
}

fn be_i32(b: &[u8], pos: usize) -> Option<i32> {
    Some(i32::from_be_bytes(b.get(pos..pos.checked_add(4)?)?.try_into().ok()?))
}

fn be_i64(b: &[u8], pos: usize) -> Option<i64> {
    Some(i64::from_be_bytes(b.get(pos..pos.checked_add(8)?)?.try_into().ok()?))
}

/// Where and how an index file breaks its own rules (see [`IndexFile::verify`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexDamage {
    /// Byte position in the file.
    pub offset: u64,
    /// What is wrong.
    pub reason: String,
}

/// What a query makes of the message an entry points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Candidate {
    /// The message carries the key.
    Accept,
    /// Not this key (another key with the same hash, a message outside the window, or one removed by retention).
    Reject,
    /// The entry is damaged: no message there, or none with a key of the entry's hash.
    Damaged(String),
}

/// One entry as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    key_hash: i32,
    phy_offset: i64,
    time_diff: i32,
    prev: i32,
}

/// One mapped index file.
pub struct IndexFile {
    map: MappedFile,
    slot_num: u32,
    index_num: u32,
    header: RwLock<IndexHeader>,
    /// Checked by [`IndexFile::verify`], or created by this process.
    checked: std::sync::atomic::AtomicBool,
    /// A view of a file another process holds the store's lock for ([`IndexFile::set_beside_writer`]).
    beside_writer: std::sync::atomic::AtomicBool,
    /// The data extents of a sparse file found on tmpfs (a copy made with `cp --sparse`, or RocketMQ's own,
    /// which it maps without claiming): reads go only there, holes read as zeros (see [`MappedFile::on_tmpfs`]).
    /// Empty otherwise. Only while `sparse` is set: a writer (this process, having claimed the file's space)
    /// or a live writer beside a view may fill the holes later.
    extents: Vec<(usize, usize)>,
    sparse: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for IndexFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexFile").field("path", &self.map.path()).field("header", &self.header()).finish()
    }
}

/// The header stored at the start of `map` (a stored indexCount ≤ 0 reads as 1); `None` if unreadable.
fn stored_header(map: &MappedFile) -> Option<IndexHeader> {
    let mut h = map.slice(0, HEADER_SIZE).and_then(IndexHeader::decode)?;
    if h.index_count <= 0 {
        h.index_count = 1;
    }
    Some(h)
}

impl IndexFile {
    /// Creates a fresh (zero, sparse) file continuing after a previous file whose header ended at
    /// `prev_end_phy_offset` / `prev_end_timestamp` (0 for the first file). As in RocketMQ, only those
    /// values are written now (each only if > 0); counts reach the disk with the first key.
    pub fn create(path: &Path, cfg: IndexConfig, prev_end_phy_offset: i64, prev_end_timestamp: i64) -> Result<Self> {
        Self::create_in(Storage::Disk, path, cfg, prev_end_phy_offset, prev_end_timestamp)
    }

    /// [`IndexFile::create`] in `storage` (an overlay file lives in memory only).
    pub fn create_in(
        storage: Storage,
        path: &Path,
        cfg: IndexConfig,
        prev_end_phy_offset: i64,
        prev_end_timestamp: i64,
    ) -> Result<Self> {
        cfg.validate()?;
        let map = MappedFile::create_in(storage, path, 0, cfg.file_size())?;
        let mut h = IndexHeader { index_count: 1, ..IndexHeader::default() };
        let mut header = || -> Result<()> {
            if prev_end_phy_offset > 0 {
                h.begin_phy_offset = prev_end_phy_offset;
                h.end_phy_offset = prev_end_phy_offset;
                map.write_at(BEGIN_PHY_OFFSET_POS, &h.encode()[BEGIN_PHY_OFFSET_POS..HASH_SLOT_COUNT_POS])?;
            }
            if prev_end_timestamp > 0 {
                h.begin_timestamp = prev_end_timestamp;
                h.end_timestamp = prev_end_timestamp;
                map.write_at(BEGIN_TIMESTAMP_POS, &h.encode()[BEGIN_TIMESTAMP_POS..BEGIN_PHY_OFFSET_POS])?;
            }
            Ok(())
        };
        if let Err(e) = header() {
            // A file whose header could not be written is not left behind (it would read as an empty file
            // starting at offset 0).
            drop(map);
            if storage != Storage::Overlay {
                let _ = std::fs::remove_file(path);
            }
            return Err(e);
        }
        let f = Self::from_parts(map, cfg, h);
        f.mark_checked();
        Ok(f)
    }

    /// Maps an existing file, which must be exactly `cfg.file_size()` bytes, and loads its header
    /// (a stored indexCount ≤ 0 reads as 1).
    pub fn open(path: &Path, cfg: IndexConfig) -> Result<Self> {
        Self::open_in(Storage::Disk, path, cfg)
    }

    /// [`IndexFile::open`] in `storage` (an overlay maps the file copy-on-write).
    pub fn open_in(storage: Storage, path: &Path, cfg: IndexConfig) -> Result<Self> {
        cfg.validate()?;
        let map = MappedFile::open_in(storage, path, 0, cfg.file_size())?;
        let extents = if map.on_tmpfs() { map.data_ranges(0) } else { Vec::new() };
        let sparse = !extents.is_empty() && extents != [(0, map.size() as usize)];
        let h = stored_header(&map).ok_or_else(|| Error::Corruption {
            path: path.to_owned(),
            offset: 0,
            reason: "index header unreadable".into(),
        })?;
        let mut f = Self::from_parts(map, cfg, h);
        if sparse {
            f.extents = extents;
            f.sparse.store(true, std::sync::atomic::Ordering::Release);
        }
        if storage == Storage::Overlay {
            f.settle_header();
        }
        Ok(f)
    }

    /// Marks a view's file as one a live writer (another process holding the store's lock) may still be
    /// filling: its checks then take the writer's progress for what it is ([`IndexFile::check_header`],
    /// [`IndexFile::verify`]). Without the mark (a writable open, `rmq check`, a view of a store nobody writes)
    /// the same bytes are damage, as a lost header update after a crash leaves them. No effect on disk.
    pub fn set_beside_writer(&self) {
        if self.map.storage() == Storage::Overlay {
            self.beside_writer.store(true, std::sync::atomic::Ordering::Release);
            // The writer may fill the holes: read the mapping as it is.
            self.sparse.store(false, std::sync::atomic::Ordering::Release);
        }
    }

    fn is_beside_writer(&self) -> bool {
        self.beside_writer.load(std::sync::atomic::Ordering::Acquire)
    }

    /// In a view of a file a live writer may be filling: the header read again (at most 64 times) until it
    /// agrees with the entries it names ([`IndexFile::check_header`], but for the entry after the last). A
    /// writer updates the header after each key, field by field in RocketMQ, so a read in between can pair one
    /// key's indexCount with the previous key's endPhyOffset: damage to a check, a rebuild of the whole file
    /// for the view. A header that still disagrees is damage, checked and handled as on disk.
    fn settle_header(&self) {
        for _ in 0..64 {
            // The entry after the last may be the writer's next one already: not asked here.
            if self.header_damage(false).is_ok() {
                return;
            }
            std::thread::yield_now();
            #[cfg(test)]
            tests::SETTLE.with(|hook| hook.borrow_mut().as_mut().map(|f| f()));
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
            let Some(h) = stored_header(&self.map) else { return };
            *self.header.write().unwrap_or_else(std::sync::PoisonError::into_inner) = h;
        }
    }

    fn from_parts(map: MappedFile, cfg: IndexConfig, h: IndexHeader) -> Self {
        IndexFile {
            map,
            slot_num: cfg.max_hash_slot_num,
            index_num: cfg.max_index_num,
            header: RwLock::new(h),
            checked: std::sync::atomic::AtomicBool::new(false),
            beside_writer: std::sync::atomic::AtomicBool::new(false),
            extents: Vec::new(),
            sparse: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The `N` bytes at `pos`, `None` past the end of the file; in a sparse file on tmpfs only its data extents
    /// are read (see `extents`).
    fn bytes<const N: usize>(&self, pos: usize) -> Option<[u8; N]> {
        let mut out = [0u8; N];
        if self.sparse.load(std::sync::atomic::Ordering::Acquire) {
            pos.checked_add(N).filter(|&end| end <= self.map.size() as usize)?;
            crate::mmap::read_in_extents(&self.map, &self.extents, pos, &mut out);
            return Some(out);
        }
        out.copy_from_slice(self.map.slice(pos, N)?);
        Some(out)
    }

    /// Path of the file.
    pub fn path(&self) -> &Path {
        self.map.path()
    }

    /// The file name (its creation time, see [`crate::index::index_file_name`]).
    pub fn name(&self) -> String {
        self.path().file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    }

    fn read(&self) -> RwLockReadGuard<'_, IndexHeader> {
        self.header.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A copy of the in-memory header.
    pub fn header(&self) -> IndexHeader {
        *self.read()
    }

    /// Store time of the first indexed message (ms).
    pub fn begin_timestamp(&self) -> i64 {
        self.read().begin_timestamp
    }

    /// Store time of the last indexed message (ms).
    pub fn end_timestamp(&self) -> i64 {
        self.read().end_timestamp
    }

    /// Commitlog offset of the first indexed message.
    pub fn begin_phy_offset(&self) -> i64 {
        self.read().begin_phy_offset
    }

    /// Commitlog offset of the last indexed message.
    pub fn end_phy_offset(&self) -> i64 {
        self.read().end_phy_offset
    }

    /// Whether at least one key was put (`indexCount > 1`).
    pub fn has_entries(&self) -> bool {
        self.read().index_count > 1
    }

    /// Keys put (`indexCount` less the unused entry 0).
    pub fn entry_count(&self) -> u64 {
        u64::try_from(self.read().index_count).unwrap_or(0).saturating_sub(1)
    }

    /// `isWriteFull`: `indexCount ≥ maxIndexNum`.
    pub fn is_write_full(&self) -> bool {
        i64::from(self.read().index_count) >= i64::from(self.index_num)
    }

    /// `isTimeMatched(begin, end)` on the current header.
    pub fn is_time_matched(&self, begin: i64, end: i64) -> bool {
        self.read().is_time_matched(begin, end)
    }

    /// Exclusive access for a batch of puts (one lock for all keys of a message).
    pub fn writer(&self) -> IndexWriter<'_> {
        IndexWriter { file: self, header: self.header.write().unwrap_or_else(std::sync::PoisonError::into_inner) }
    }

    /// `putKey` (§7.4) of one already hashed key; `Ok(false)` if the file is full. See [`IndexWriter::put_key`].
    pub fn put_key(&self, key_hash: i32, phy_offset: i64, store_timestamp: i64) -> Result<bool> {
        self.writer().put_key(key_hash, phy_offset, store_timestamp)
    }

    /// `selectPhyOffset` (§7.5) for the stored keyHash `key_hash` (see [`crate::index::key_hash`]): walks the
    /// slot's chain newest first and offers each entry to `judge` as `(offset, keyHash, candidate)`, where a
    /// candidate has the queried keyHash, a time in `[begin, end]` and an offset not yet in `out`; accepted
    /// candidates are appended until `out` holds `max_num`. Entries of other keys are offered too, so that
    /// the judge can check them against their messages: a damaged keyHash that stays in its slot would
    /// otherwise hide its key without a trace. The walk stops at a negative timeDiff, an invalid or self-referencing prev, an entry older
    /// than `begin`, or after `indexCount` steps (a cycle in a damaged file). Unlike RocketMQ, entry 1 reads
    /// as stored at beginTimestamp (its true time) rather than through its possibly skewed timeDiff. An entry
    /// `judge` finds damaged (it does not point at a message with a key of that hash) ends the walk with the
    /// entry's position.
    pub fn select_phy_offsets(
        &self,
        key_hash: i32,
        max_num: usize,
        begin: i64,
        end: i64,
        out: &mut Vec<i64>,
        judge: &mut dyn FnMut(i64, i32, bool) -> Candidate,
    ) -> std::result::Result<(), IndexDamage> {
        let h = self.read();
        let Some(mut slot_value) = self.slot(key_hash) else { return Ok(()) };
        if self.map.storage() == crate::mmap::Storage::Overlay {
            slot_value = self.before_snapshot_end(slot_value, h.index_count);
        }
        if slot_value <= 0 || slot_value > h.index_count || h.index_count <= 1 {
            return Ok(());
        }
        let mut n = slot_value;
        for _ in 0..h.index_count {
            if out.len() >= max_num {
                break;
            }
            let Some(e) = self.entry(n) else { break };
            if e.time_diff < 0 {
                break;
            }
            // Entry 1 is the file's first put, stored at exactly beginTimestamp. Its timeDiff may have been
            // taken against the previous file's endTimestamp (the §7.4 quirk), so it is not used here.
            let time_read =
                if n == 1 { h.begin_timestamp } else { h.begin_timestamp.wrapping_add(i64::from(e.time_diff) * 1000) };
            let candidate =
                e.key_hash == key_hash && begin <= time_read && time_read <= end && !out.contains(&e.phy_offset);
            match judge(e.phy_offset, e.key_hash, candidate) {
                Candidate::Accept if candidate => out.push(e.phy_offset),
                Candidate::Accept | Candidate::Reject => {}
                Candidate::Damaged(reason) => {
                    return Err(IndexDamage {
                        offset: self.entry_pos(n) as u64 + 4,
                        reason: format!("entry {n} (commitlog offset {}): {reason}", e.phy_offset),
                    })
                }
            }
            if e.prev <= 0 || e.prev > h.index_count || e.prev == n || time_read < begin {
                break;
            }
            n = e.prev;
        }
        Ok(())
    }

    /// In a view of a file another process is still writing (an overlay sees the writer's later bytes where it
    /// wrote none of its own): a slot the writer pointed at an entry after the view's header (`index_count`,
    /// read at the open or the view's last write) is followed back through those newer entries, which the writer
    /// wrote whole before the slot, to the newest one the view's header covers. Those newer entries are not
    /// offered (their messages may lie past the view's end; a refresh takes them in), and without this walk
    /// every older key of the slot would be missed. Returns the slot value to start from (0: none).
    fn before_snapshot_end(&self, slot_value: i32, index_count: i32) -> i32 {
        let mut n = slot_value;
        let mut steps = 0u32;
        while n >= index_count && i64::from(n) < i64::from(self.index_num) && steps < self.index_num {
            match self.entry(n) {
                Some(e) if e.prev < n => n = e.prev,
                _ => return 0,
            }
            steps += 1;
        }
        n
    }

    /// Whether the file's newest entries, those of the message at `phy_offset` (the last one indexed, at
    /// endPhyOffset), include one for `key_hash`: the key was indexed for that message already.
    pub fn contains(&self, key_hash: i32, phy_offset: i64) -> bool {
        let h = self.read();
        self.contains_in(&h, key_hash, phy_offset)
    }

    /// A message's keys are put together and messages in commitlog order, so the keys of the last message are
    /// the file's last entries: they are read back from the end, not through the slots, which damage can cut
    /// (a zeroed slot would make the key look missing and a re-dispatch would put it twice).
    fn contains_in(&self, h: &IndexHeader, key_hash: i32, phy_offset: i64) -> bool {
        let mut n = h.index_count.saturating_sub(1);
        while n >= 1 {
            let Some(e) = self.entry(n) else { return false };
            if e.phy_offset != phy_offset {
                return false;
            }
            if e.key_hash == key_hash {
                return true;
            }
            n -= 1;
        }
        false
    }

    /// The header against the file's first and last entries (what the open relies on to see which commitlog
    /// range each file covers): indexCount in range and the entry after the last one empty, beginPhyOffset and
    /// endPhyOffset those entries' offsets, beginTimestamp not after endTimestamp. Three entry reads;
    /// [`IndexFile::verify`] checks everything. (A file before the newest is full when it was written by
    /// `putKey`, but one rebuilt from records whose keys changed since may hold fewer entries: the empty entry
    /// after the last one is what shows that a count was not lowered.)
    pub fn check_header(&self) -> std::result::Result<(), IndexDamage> {
        self.header_damage(!self.is_beside_writer())
    }

    /// [`IndexFile::check_header`], with the entry after the last required to be empty or not.
    fn header_damage(&self, after_last_empty: bool) -> std::result::Result<(), IndexDamage> {
        let h = self.read();
        let damage = |offset: usize, reason: String| Err(IndexDamage { offset: offset as u64, reason });
        if i64::from(h.index_count) > i64::from(self.index_num) {
            return damage(
                INDEX_COUNT_POS,
                format!("indexCount {} exceeds maxIndexNum {}", h.index_count, self.index_num),
            );
        }
        let slots_used = h.hash_slot_count;
        if slots_used < 0 || slots_used as u32 > self.slot_num || (h.index_count <= 1) != (slots_used == 0) {
            return damage(
                HASH_SLOT_COUNT_POS,
                format!("hashSlotCount {slots_used} with indexCount {}", h.index_count),
            );
        }
        // Entries are written in order from entry 1 on: the one after the last holds nothing yet. (A count
        // lowered by damage would hide the entries after it from every query, and a file saying it holds none
        // would be written over from entry 1.) Not beside a live writer: there they are the writer's later
        // entries (what the header covers is checked below all the same).
        let next = h.index_count.max(1);
        if i64::from(next) < i64::from(self.index_num) && after_last_empty {
            let pos = self.entry_pos(next);
            if self.bytes::<ENTRY_SIZE>(pos).is_some_and(|b| b.iter().any(|&x| x != 0)) {
                return damage(
                    pos,
                    format!("indexCount {} but entry {next}, after the last, holds data", h.index_count),
                );
            }
        }
        if h.index_count <= 1 {
            return Ok(());
        }
        // A file holding entries has a store time of its first message: positive (a flipped high bit made it
        // negative once, and every entry then read as older than any query's window: keys lost silently).
        if h.begin_timestamp <= 0 {
            return damage(BEGIN_TIMESTAMP_POS, format!("beginTimestamp {} in a file with entries", h.begin_timestamp));
        }
        if h.begin_timestamp > h.end_timestamp {
            return damage(
                BEGIN_TIMESTAMP_POS,
                format!("beginTimestamp {} after endTimestamp {}", h.begin_timestamp, h.end_timestamp),
            );
        }
        let first = self.entry(1).map(|e| e.phy_offset);
        if first != Some(h.begin_phy_offset) {
            return damage(
                BEGIN_PHY_OFFSET_POS,
                format!("beginPhyOffset {} but entry 1 points at {first:?}", h.begin_phy_offset),
            );
        }
        let last = self.entry(h.index_count - 1).map(|e| e.phy_offset);
        if last != Some(h.end_phy_offset) {
            return damage(
                END_PHY_OFFSET_POS,
                format!("endPhyOffset {} but the last entry points at {last:?}", h.end_phy_offset),
            );
        }
        Ok(())
    }

    /// The structural check of the whole file (`rmq check`'s and the open's): the header against the entries,
    /// and every entry's chain link against the entries before it. In a file written by `putKey` (RocketMQ's or
    /// ours), entry `n`'s prev is the previous entry with the same slot (0 if none), its commitlog offset is
    /// not below the previous entry's, the first and last entries hold beginPhyOffset and endPhyOffset, each
    /// slot holds the newest entry of its chain (0 if none) and hashSlotCount counts the slots in use. A lost
    /// page, a flipped bit or a zeroed range breaks one of these unless it leaves the bytes as they were.
    /// What it cannot see (a commitlog offset changed to another one between its neighbours) is left to the
    /// per-entry check against the record ([`IndexFile::entries_back`]).
    pub fn verify(&self) -> std::result::Result<(), IndexDamage> {
        let h = self.read();
        let damage = |offset: usize, reason: String| Err(IndexDamage { offset: offset as u64, reason });
        let count = h.index_count;
        if i64::from(count) > i64::from(self.index_num) {
            return damage(INDEX_COUNT_POS, format!("indexCount {count} exceeds maxIndexNum {}", self.index_num));
        }
        if h.hash_slot_count < 0 || h.hash_slot_count as u32 > self.slot_num {
            return damage(HASH_SLOT_COUNT_POS, format!("hashSlotCount {} out of range", h.hash_slot_count));
        }
        let slot_num = self.slot_num as usize;
        let mut newest = vec![0i32; slot_num];
        let mut used = 0i64;
        let mut prev_offset = i64::MIN;
        for n in 1..count {
            let Some(e) = self.entry(n) else {
                return damage(self.entry_pos(n), format!("entry {n} lies outside the file"));
            };
            let pos = self.entry_pos(n);
            if e.key_hash < 0 {
                return damage(pos, format!("entry {n}: negative keyHash {}", e.key_hash));
            }
            if e.phy_offset < prev_offset {
                return damage(
                    pos + 4,
                    format!("entry {n}: commitlog offset {} below the previous entry's {prev_offset}", e.phy_offset),
                );
            }
            if n == 1 && e.phy_offset != h.begin_phy_offset {
                return damage(
                    BEGIN_PHY_OFFSET_POS,
                    format!("beginPhyOffset {} but entry 1 points at {}", h.begin_phy_offset, e.phy_offset),
                );
            }
            if e.time_diff < 0 {
                return damage(pos + 12, format!("entry {n}: negative timeDiff {}", e.time_diff));
            }
            let slot = (e.key_hash.unsigned_abs() % self.slot_num) as usize;
            if e.prev != newest[slot] {
                return damage(
                    pos + 16,
                    format!("entry {n}: prev {} but the chain's previous entry is {}", e.prev, newest[slot]),
                );
            }
            if newest[slot] == 0 {
                used += 1;
            }
            newest[slot] = n;
            prev_offset = e.phy_offset;
        }
        if count > 1 && prev_offset != h.end_phy_offset {
            return damage(
                END_PHY_OFFSET_POS,
                format!("endPhyOffset {} but the last entry points at {prev_offset}", h.end_phy_offset),
            );
        }
        if i64::from(h.hash_slot_count) != used {
            return damage(
                HASH_SLOT_COUNT_POS,
                format!("hashSlotCount {} but {used} slots hold a chain", h.hash_slot_count),
            );
        }
        if HEADER_SIZE + slot_num * SLOT_SIZE > self.map.size() as usize {
            return damage(HEADER_SIZE, "the slot table lies outside the file".into());
        }
        let beside_writer = self.is_beside_writer();
        for (i, want) in newest.iter().enumerate() {
            let Some(stored) = self.bytes::<SLOT_SIZE>(HEADER_SIZE + i * SLOT_SIZE) else {
                return damage(HEADER_SIZE, "the slot table lies outside the file".into());
            };
            let mut stored = i32::from_be_bytes(stored);
            if beside_writer && stored >= count {
                // A live writer's later entry: its chain leads back to what the view's header covers, as a query
                // reads it (`before_snapshot_end`).
                stored = self.before_snapshot_end(stored, count);
            }
            if stored != *want {
                return damage(
                    HEADER_SIZE + i * SLOT_SIZE,
                    format!("slot {i} holds {stored} but its chain's newest entry is {want}"),
                );
            }
        }
        Ok(())
    }

    /// Offers the entries from the newest back, as `(number, keyHash, commitlog offset)`, to `visit` until it
    /// returns false (the check of entries against their records).
    pub fn entries_back(&self, visit: &mut dyn FnMut(i32, i32, i64) -> bool) {
        let h = self.read();
        for n in (1..h.index_count).rev() {
            match self.entry(n) {
                Some(e) if visit(n, e.key_hash, e.phy_offset) => {}
                _ => return,
            }
        }
    }

    /// The keyHash and commitlog offset of entry `n` (the check of entries against their records, in commitlog
    /// order). `n` is meant to be in `1..indexCount` (the caller reads the header once); `None` only past the
    /// end of the file.
    pub fn entry_key(&self, n: i32) -> Option<(i32, i64)> {
        self.entry(n).map(|e| (e.key_hash, e.phy_offset))
    }

    /// Whether the file's oldest entries, those of the message at `phy_offset` (the first one indexed, at
    /// beginPhyOffset: the rest of a message whose keys a roll split over two files), include one for
    /// `key_hash`. Read from the first entry on, not through the slots, as [`IndexFile::contains`] reads the
    /// last message's from the end.
    pub fn contains_first(&self, key_hash: i32, phy_offset: i64) -> bool {
        let h = self.read();
        (1..h.index_count)
            .map_while(|n| self.entry(n).filter(|e| e.phy_offset == phy_offset))
            .any(|e| e.key_hash == key_hash)
    }

    /// Whether the file was checked ([`IndexFile::verify`]) or written whole by this process.
    pub fn is_checked(&self) -> bool {
        self.checked.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Marks the file as checked.
    pub fn mark_checked(&self) {
        self.checked.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Byte position of entry `n` in the file (for reports).
    pub fn entry_position(&self, n: i32) -> u64 {
        self.entry_pos(n) as u64
    }

    /// Rewrites the header and forces the file to disk.
    pub fn flush(&self) -> Result<()> {
        {
            let h = self.header.write().unwrap_or_else(std::sync::PoisonError::into_inner);
            self.map.write_at(0, &h.encode())?;
        }
        self.map.flush()
    }

    /// Where the file lives.
    pub fn storage(&self) -> Storage {
        self.map.storage()
    }

    /// Removes the file from disk once the last reference to it is dropped.
    pub fn delete_on_drop(&self) {
        self.map.delete_on_drop();
    }

    fn slot_pos(&self, key_hash: i32) -> usize {
        // keyHash ≥ 0 (abs applied), so the remainder is a valid slot.
        HEADER_SIZE + (key_hash.unsigned_abs() % self.slot_num) as usize * SLOT_SIZE
    }

    fn entry_pos(&self, n: i32) -> usize {
        HEADER_SIZE + self.slot_num as usize * SLOT_SIZE + n.max(0) as usize * ENTRY_SIZE
    }

    /// Starts loading `key_hash`'s slot into the CPU's caches (a hint; see [`MappedFile::prefetch`]).
    pub fn prefetch_slot(&self, key_hash: i32) {
        self.map.prefetch(self.slot_pos(key_hash), SLOT_SIZE);
    }

    fn slot(&self, key_hash: i32) -> Option<i32> {
        Some(i32::from_be_bytes(self.bytes::<SLOT_SIZE>(self.slot_pos(key_hash))?))
    }

    fn entry(&self, n: i32) -> Option<Entry> {
        let b = self.bytes::<ENTRY_SIZE>(self.entry_pos(n))?;
        Some(Entry {
            key_hash: be_i32(&b, 0)?,
            phy_offset: be_i64(&b, 4)?,
            time_diff: be_i32(&b, 12)?,
            prev: be_i32(&b, 16)?,
        })
    }
}

/// Exclusive access to an [`IndexFile`] (its write lock); queries of the file wait until it is dropped.
pub struct IndexWriter<'a> {
    file: &'a IndexFile,
    header: RwLockWriteGuard<'a, IndexHeader>,
}

impl IndexWriter<'_> {
    /// The in-memory header.
    pub fn header(&self) -> IndexHeader {
        *self.header
    }

    /// `putKey` (§7.4): appends entry `indexCount` for `key_hash` (a stored keyHash, ≥ 0) at the head of
    /// its slot's chain and writes the slot and the header through. Returns `Ok(false)`, changing nothing, if
    /// the file is full (`indexCount ≥ maxIndexNum`): the caller rolls to a new file. A write that fails (no
    /// space to claim for a sparse file, an I/O fault) is an error, never taken for a full file: the header
    /// in memory stays as it was, and what reached the file before the failure is what a put torn by a crash
    /// leaves (an entry past indexCount, or a slot pointing at it), which the next put repairs.
    ///
    /// The entry's timeDiff is taken against the header's beginTimestamp *before* this put, so the first
    /// entry of a file stores its distance from the previous file's endTimestamp (0 for the first file).
    pub fn put_key(&mut self, key_hash: i32, phy_offset: i64, store_timestamp: i64) -> Result<bool> {
        let f = self.file;
        let h = &mut *self.header;
        if i64::from(h.index_count) >= i64::from(f.index_num) {
            return Ok(false);
        }
        let slot_pos = f.slot_pos(key_hash);
        // The file's space first (a sparse file found on disk: a full disk fails here, typed, with nothing
        // read from a hole); from then on this process fills the holes, so reads go to the mapping.
        f.map.claim()?;
        f.sparse.store(false, std::sync::atomic::Ordering::Release);
        let Some(mut slot_value) = f.map.slice(slot_pos, SLOT_SIZE).and_then(|b| be_i32(b, 0)) else {
            return Err(Error::InvalidOffset {
                offset: slot_pos as i64,
                reason: format!("slot {slot_pos} is outside {}", f.path().display()),
            });
        };
        if f.map.storage() == crate::mmap::Storage::Overlay && slot_value >= h.index_count {
            // A view indexing after its header into a file a live writer went on filling: link to the newest
            // entry the view's header covers, not to none (which would cut the slot's older keys off).
            slot_value = f.before_snapshot_end(slot_value, h.index_count);
        }
        if slot_value == h.index_count && slot_value > 0 {
            // A put torn between its slot and its header (a crash) left the slot pointing at the entry this put
            // overwrites: link to what that entry linked to, so the older entries of the chain stay reachable
            // (keeping the slot's value would make the new entry its own predecessor and cut the chain).
            slot_value = f.entry(slot_value).map_or(0, |e| e.prev);
        }
        if slot_value <= 0 || slot_value >= h.index_count {
            slot_value = 0;
        }
        let time_diff = store_timestamp.wrapping_sub(h.begin_timestamp) / 1000;
        let time_diff =
            if h.begin_timestamp <= 0 || time_diff < 0 { 0 } else { i32::try_from(time_diff).unwrap_or(i32::MAX) };
        // Format: { keyHash i32 | phyOffset i64 | timeDiff i32 | prev i32 }
        let mut e = [0u8; ENTRY_SIZE];
        e[0..4].copy_from_slice(&key_hash.to_be_bytes());
        e[4..12].copy_from_slice(&phy_offset.to_be_bytes());
        e[12..16].copy_from_slice(&time_diff.to_be_bytes());
        e[16..20].copy_from_slice(&slot_value.to_be_bytes());
        f.map.write_array(f.entry_pos(h.index_count), &e)?;
        f.map.write_array(slot_pos, &h.index_count.to_be_bytes())?;
        let mut next = *h;
        if next.index_count <= 1 {
            next.begin_phy_offset = phy_offset;
            next.begin_timestamp = store_timestamp;
        }
        if slot_value == 0 {
            next.hash_slot_count = next.hash_slot_count.wrapping_add(1);
        }
        next.index_count += 1;
        next.end_phy_offset = phy_offset;
        next.end_timestamp = store_timestamp;
        f.map.write_array(0, &next.encode())?;
        *h = next;
        Ok(true)
    }

    /// [`IndexFile::contains`] under this lock.
    pub fn contains(&self, key_hash: i32, phy_offset: i64) -> bool {
        self.file.contains_in(&self.header, key_hash, phy_offset)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;

    thread_local! {
        /// Runs before each read of the header again in a view ([`IndexFile::settle_header`]): a test finishes
        /// the writer's update there.
        pub(crate) static SETTLE: crate::race::Hook<dyn FnMut()> = const { std::cell::RefCell::new(None) };
    }

    fn small() -> IndexConfig {
        IndexConfig { max_hash_slot_num: 4, max_index_num: 3, max_msgs_num_batch: 64 }
    }

    /// Golden bytes of a whole small file, pinning the layout table of the module docs.
    #[test]
    fn golden_small_file() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        let f = IndexFile::create(&path, small(), 0x10, 2000).unwrap();
        let fresh = std::fs::read(&path).unwrap();
        assert_eq!(fresh.len(), 40 + 16 + 60);
        assert_eq!(
            &fresh[..40],
            &[
                0, 0, 0, 0, 0, 0, 7, 0xD0, 0, 0, 0, 0, 0, 0, 7, 0xD0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0,
                0x10, 0, 0, 0, 0, 0, 0, 0, 0
            ]
        );
        assert!(f.put_key(6, 0x20, 5999).unwrap()); // slot 2; timeDiff (5999 − 2000) / 1000 = 3
        assert!(f.put_key(10, 0x30, 9000).unwrap()); // slot 2 again; begin is now 5999 → timeDiff 3
        assert!(!f.put_key(1, 0x40, 9000).unwrap(), "maxIndexNum 3 → 2 entries");
        let b = std::fs::read(&path).unwrap();
        let mut expect = vec![0u8; 116];
        expect[..40].copy_from_slice(
            &IndexHeader {
                begin_timestamp: 5999,
                end_timestamp: 9000,
                begin_phy_offset: 0x20,
                end_phy_offset: 0x30,
                hash_slot_count: 1,
                index_count: 3,
            }
            .encode(),
        );
        expect[40 + 8..40 + 12].copy_from_slice(&[0, 0, 0, 2]); // slot 2 → entry 2
        expect[76..96].copy_from_slice(&[0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0x20, 0, 0, 0, 3, 0, 0, 0, 0]);
        expect[96..116].copy_from_slice(&[0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0, 0x30, 0, 0, 0, 3, 0, 0, 0, 1]);
        assert_eq!(b, expect);
        assert_eq!(&b[..8], &5999i64.to_be_bytes());
        assert_eq!(&b[32..40], &[0, 0, 0, 1, 0, 0, 0, 3]);
        let reopened = IndexFile::open(&path, small()).unwrap();
        assert_eq!(reopened.header(), f.header());
        let mut out = Vec::new();
        reopened.select_phy_offsets(10, 64, 0, i64::MAX, &mut out, &mut |_, _, _| Candidate::Accept).unwrap();
        assert_eq!(out, [0x30]);
        out.clear();
        reopened.select_phy_offsets(6, 64, 0, i64::MAX, &mut out, &mut |_, _, _| Candidate::Accept).unwrap();
        assert_eq!(out, [0x20]);
    }

    #[test]
    fn header_round_trip_and_time_match() {
        let h = IndexHeader {
            begin_timestamp: 100,
            end_timestamp: 200,
            begin_phy_offset: -3,
            end_phy_offset: i64::MAX,
            hash_slot_count: 7,
            index_count: -1,
        };
        assert_eq!(IndexHeader::decode(&h.encode()), Some(h));
        assert_eq!(IndexHeader::decode(&[0u8; 39]), None);
        for (b, e, want) in [
            (50, 150, true),
            (150, 250, true),
            (120, 180, true),
            (50, 250, true),
            (100, 100, true),
            (200, 200, true),
            (50, 100, true),
            (200, 300, true),
            (50, 99, false),
            (201, 300, false),
            (250, 50, false),
        ] {
            assert_eq!(h.is_time_matched(b, e), want, "[{b}, {e}]");
        }
    }
}
