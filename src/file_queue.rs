//! A directory of fixed-size segment files named by the 20-digit global offset of their first byte
//! (`MappedFileQueue`). All file-name rules live here.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::error::{Error, Result};
use crate::mmap::{MappedFile, Storage};

/// `UtilAll.offset2FileName`: the offset as 20 zero-padded decimal digits.
pub fn file_name(offset: u64) -> String {
    format!("{offset:020}")
}

/// The start offset a segment file name stands for, if it is one (ASCII digits only, fits i64).
pub fn parse_file_name(name: &str) -> Option<u64> {
    if name.is_empty() || name.len() > 20 || !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    name.parse::<i64>().ok().and_then(|v| u64::try_from(v).ok())
}

/// Segments in offset order.
#[derive(Debug)]
pub struct FileQueue {
    dir: PathBuf,
    file_size: u64,
    files: RwLock<Vec<Arc<MappedFile>>>,
    storage: Storage,
    /// How many times segments left the queue (a [`SegmentCache`] holding one is stale once this moves).
    removals: AtomicU64,
}

impl FileQueue {
    /// Opens (creating the directory if needed) and maps every segment in `dir`.
    ///
    /// Like RocketMQ, an empty last file (left by an interrupted creation) is deleted; so is a last file cut short
    /// that holds only zeros ([`interrupted_creation`]). Every other file must be exactly `file_size` bytes,
    /// carry a numeric name, and follow its predecessor without a gap.
    pub fn load(dir: &Path, file_size: u64) -> Result<Self> {
        Self::load_in(Storage::Disk, dir, file_size)
    }

    /// [`FileQueue::load`] in `storage`. In an overlay a missing directory is an empty queue and nothing is
    /// created or deleted (an empty last file is left out, not removed).
    pub fn load_in(storage: Storage, dir: &Path, file_size: u64) -> Result<Self> {
        Self::load_sized(storage, dir, file_size, None).map(|(q, _)| q)
    }

    /// [`FileQueue::load_in`] for files derived from the log (a consume queue's), with `derived` saying whether
    /// other files of the store have `file_size` (so a file of another size is damage even alone in its
    /// directory, not a wrong configuration). Such a file is refused on disk, with the remedy for a derived
    /// file; in an overlay it is read into memory as far as it goes (zeros after a truncation, an extension
    /// left out) and returned with its length, for the open to rebuild in memory what it lost.
    pub fn load_derived_in(
        storage: Storage,
        dir: &Path,
        file_size: u64,
        size_known: bool,
    ) -> Result<(Self, Vec<(PathBuf, u64)>)> {
        Self::load_sized(storage, dir, file_size, Some(size_known))
    }

    fn load_sized(
        storage: Storage,
        dir: &Path,
        file_size: u64,
        derived: Option<bool>,
    ) -> Result<(Self, Vec<(PathBuf, u64)>)> {
        let overlay = storage == Storage::Overlay;
        let mut resized = Vec::new();
        if overlay && !dir.exists() {
            let queue = FileQueue {
                dir: dir.to_owned(),
                file_size,
                files: RwLock::new(Vec::new()),
                storage,
                removals: AtomicU64::new(0),
            };
            return Ok((queue, resized));
        }
        if !overlay {
            crate::mmap::create_dir_durable(dir)?;
        }
        let (mut names, mut lens): (Vec<(String, PathBuf)>, Vec<u64>) =
            list_segments(storage, dir, file_size)?.into_iter().map(|(n, p, l)| ((n, p), l)).unzip();
        let paths: Vec<&Path> = names.iter().map(|(_, p)| p.as_path()).collect();
        // Only a file named as the segment after the others can be one whose creation was cut short; any other
        // file is the user's, for the name checks below to refuse, never to delete.
        let starts: Vec<Option<u64>> =
            names.iter().map(|(n, _)| parse_file_name(n).filter(|_| n.len() == 20)).collect();
        let next_segment = match starts.as_slice() {
            [.., Some(prev), Some(last)] => prev.checked_add(file_size) == Some(*last),
            [Some(only)] => only.is_multiple_of(file_size),
            _ => false,
        };
        if let Some(last) = interrupted_creation(&paths, &lens, file_size)?.filter(|_| next_segment) {
            if !overlay {
                remove_durably(last)?;
            }
            names.pop();
            lens.pop();
        }
        let any_fits = lens.contains(&file_size);
        let last = names.last().and_then(|(n, _)| parse_file_name(n)).unwrap_or(0);
        #[cfg(test)]
        tests::RACE.with(|hook| hook.borrow_mut().as_mut().map(|f| f("measured")));
        let mut files: Vec<Arc<MappedFile>> = Vec::with_capacity(names.len());
        for ((name, path), len) in names.into_iter().zip(lens) {
            let start = parse_file_name(&name).ok_or_else(|| Error::Corruption {
                path: path.clone(),
                offset: 0,
                reason: "a segment directory may only hold files named by their 20-digit start offset; \
                         move this file out of the directory"
                    .into(),
            })?;
            if let Some(prev) = files.last() {
                if start != prev.end() {
                    return Err(Error::Corruption {
                        path: path.clone(),
                        offset: start as i64,
                        reason: format!(
                            "segment starts at {start} but the previous one ends at {}; a segment is missing",
                            prev.end()
                        ),
                    });
                }
            } else if !start.is_multiple_of(file_size) {
                return Err(Error::Corruption {
                    path: path.clone(),
                    offset: start as i64,
                    reason: format!("first segment offset is not a multiple of the segment size {file_size}"),
                });
            }
            if len != file_size && (any_fits || derived == Some(true)) {
                // The other files have the configured size: this one was truncated or extended.
                if derived.is_none() || !overlay {
                    return Err(size_damage(&path, start, len, file_size, derived.is_some()));
                }
                files.push(Arc::new(read_resized(&path, start, len, file_size)?));
                resized.push((path, len));
                continue;
            }
            match MappedFile::open_in(storage, &path, start, file_size) {
                Ok(f) => files.push(Arc::new(f)),
                // Gone since it was listed (see `list_segments`): retention's first files, or the last one.
                Err(Error::Io { source, .. })
                    if overlay
                        && source.kind() == std::io::ErrorKind::NotFound
                        && (files.is_empty() || start == last) => {}
                Err(e) => return Err(e),
            }
        }
        let queue = FileQueue {
            dir: dir.to_owned(),
            file_size,
            files: RwLock::new(files),
            storage,
            removals: AtomicU64::new(0),
        };
        Ok((queue, resized))
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the files live.
    pub fn storage(&self) -> Storage {
        self.storage
    }

    /// Bytes per segment.
    pub fn file_size(&self) -> u64 {
        self.file_size
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<Arc<MappedFile>>> {
        self.files.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A snapshot of all segments.
    pub fn files(&self) -> Vec<Arc<MappedFile>> {
        self.read().clone()
    }

    /// The first segment.
    pub fn first(&self) -> Option<Arc<MappedFile>> {
        self.read().first().cloned()
    }

    /// The last segment.
    pub fn last(&self) -> Option<Arc<MappedFile>> {
        self.read().last().cloned()
    }

    /// Global offset of the first byte of the first segment (0 when empty).
    pub fn min_offset(&self) -> u64 {
        self.first().map(|f| f.start()).unwrap_or(0)
    }

    /// Counts segments leaving the queue (under its write lock).
    fn removed(&self, count: usize) {
        if count > 0 {
            self.removals.fetch_add(1, Ordering::Release);
        }
    }

    /// The segment holding global `offset`.
    pub fn find(&self, offset: u64) -> Option<Arc<MappedFile>> {
        let files = self.read();
        let first = files.first()?;
        let index = offset.checked_sub(first.start())? / self.file_size;
        files.get(usize::try_from(index).ok()?).cloned()
    }

    /// RocketMQ's `MappedFileQueue.flush(leastPages)` (spec §11.5) over the bytes `[flushed, end)`: from the
    /// file holding `flushed`, flushes a file when it is full (`end` reaches its end), or when `least_pages`
    /// is 0 and it has unflushed bytes, or when `wrote/4096 − flushed/4096 ≥ least_pages` (its positions); a
    /// full file is followed by the next. Returns the new flushed position (never below the first file).
    pub fn flush_pages(&self, flushed: u64, end: u64, least_pages: u64) -> Result<u64> {
        const PAGE: u64 = 4096;
        let mut at = flushed.max(self.min_offset());
        while at < end {
            let Some(file) = self.find(at) else { break };
            let (wrote, done) = (end.min(file.end()) - file.start(), at - file.start());
            let full = file.start() + wrote == file.end();
            let able = full || if least_pages == 0 { wrote > done } else { wrote / PAGE - done / PAGE >= least_pages };
            if !able {
                break;
            }
            file.flush_range(done as usize, (wrote - done) as usize)?;
            at = file.start() + wrote;
            if !full {
                break;
            }
        }
        Ok(at)
    }

    /// The segment after `file`, if any.
    pub fn next_after(&self, file: &MappedFile) -> Option<Arc<MappedFile>> {
        self.find(file.end())
    }

    /// Removes every segment starting after `offset` from the queue; each file is deleted from disk once the
    /// last view of it is dropped. Returns how many were removed.
    pub fn remove_after(&self, offset: u64) -> usize {
        let mut files = self.files.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        let keep = files.iter().take_while(|f| f.start() <= offset).count();
        let removed: Vec<_> = files.drain(keep..).collect();
        self.removed(removed.len());
        for f in &removed {
            f.delete_on_drop();
        }
        removed.len()
    }

    /// Lets go of every segment, deleting none: the queue holds no file after it (a closed store's files are
    /// unmapped and their descriptors closed once no reader's view holds them).
    pub fn release(&self) {
        let released = std::mem::take(&mut *self.files.write().unwrap_or_else(|poisoned| poisoned.into_inner()));
        self.removed(released.len());
    }

    /// Removes the first segment (expired-file cleanup); deleted from disk once unused.
    pub fn remove_first(&self) -> Option<Arc<MappedFile>> {
        let mut files = self.files.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        if files.is_empty() {
            return None;
        }
        let f = files.remove(0);
        self.removed(1);
        f.delete_on_drop();
        Some(f)
    }

    /// Expired-file cleanup: removes the first segment from the queue and unlinks its file now, then syncs the
    /// directory so the removal is durable. Never the last segment (returns None then, as for an empty
    /// queue). A reader still holding a view of the segment keeps its mapping (and so its bytes) until the
    /// view is dropped: unlinking a mapped file is safe. A failed unlink puts nothing back (the segment is
    /// out of the queue; the next open finds the file again and it is cleaned once more).
    pub fn delete_first(&self) -> Result<Option<Arc<MappedFile>>> {
        if self.storage == Storage::Overlay {
            return Ok(None);
        }
        let f = {
            let mut files = self.files.write().unwrap_or_else(|poisoned| poisoned.into_inner());
            if files.len() <= 1 {
                return Ok(None);
            }
            self.removed(1);
            files.remove(0)
        };
        std::fs::remove_file(f.path()).map_err(|e| Error::io(f.path(), e))?;
        crate::mmap::sync_dir(&self.dir)?;
        Ok(Some(f))
    }

    /// Overlay only: maps the segments another process added after the last one since the queue was loaded
    /// (a file whose size is not the segment size yet, one being created, is left for the next call), and
    /// drops the trailing ones whose files are gone or were made again (a writer deletes the segment it made
    /// ahead, which holds nothing, at a close or the next open, and makes it anew later: the old mapping would
    /// read zeros for ever); those are mapped again when they are back. The leading segments whose files are
    /// gone (retention by that process) stay mapped, and readable, until [`FileQueue::drop_gone`]: a reader
    /// behind takes in what they hold first. Returns (added, dropped).
    pub fn refresh(&self) -> Result<(usize, usize)> {
        if self.storage != Storage::Overlay {
            return Ok((0, 0));
        }
        let mut files = self.files.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        let gone = files.iter().take_while(|f| !f.path().exists()).count();
        let current = files[gone..].iter().rposition(|f| f.is_current()).map_or(gone, |i| gone + i + 1);
        let replaced = files.drain(current..).count();
        self.removed(replaced);
        let mut added = 0;
        loop {
            let start = match files.last() {
                Some(f) => f.end(),
                None => {
                    let mut starts: Vec<u64> = std::fs::read_dir(&self.dir)
                        .map(|rd| {
                            rd.filter_map(|e| e.ok())
                                .filter_map(|e| parse_file_name(&e.file_name().to_string_lossy()))
                                .collect()
                        })
                        .unwrap_or_default();
                    starts.sort_unstable();
                    match starts.first() {
                        Some(&s) if s.is_multiple_of(self.file_size) => s,
                        _ => break,
                    }
                }
            };
            let path = self.dir.join(file_name(start));
            match std::fs::metadata(&path) {
                Ok(m) if m.len() == self.file_size => {}
                _ => break,
            }
            files.push(Arc::new(MappedFile::open_in(self.storage, &path, start, self.file_size)?));
            added += 1;
        }
        Ok((added, replaced))
    }

    /// Overlay only: drops the leading segments whose files are gone (retention by the process that writes
    /// them). Returns how many.
    pub fn drop_gone(&self) -> usize {
        if self.storage != Storage::Overlay {
            return 0;
        }
        let mut files = self.files.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        let gone = files.iter().take_while(|f| !f.path().exists()).count();
        files.drain(..gone);
        self.removed(gone);
        gone
    }

    /// Creates and maps the segment starting at `start`, which must follow the last one.
    pub fn create(&self, start: u64) -> Result<Arc<MappedFile>> {
        let mut files = self.files.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        let expected = files.last().map(|f| f.end());
        if expected.is_some_and(|e| e != start) || !start.is_multiple_of(self.file_size) {
            return Err(Error::InvalidOffset {
                offset: start as i64,
                reason: "segment would not follow the last one".into(),
            });
        }
        let path = self.dir.join(file_name(start));
        let file = Arc::new(MappedFile::create_in(self.storage, &path, start, self.file_size)?);
        files.push(file.clone());
        Ok(file)
    }

    /// Creates and maps the segment starting at `start` without adding it to the queue (for
    /// [`FileQueue::adopt`] later).
    pub fn create_detached(&self, start: u64) -> Result<Arc<MappedFile>> {
        if !start.is_multiple_of(self.file_size) {
            return Err(Error::InvalidOffset { offset: start as i64, reason: "not a segment start".into() });
        }
        let path = self.dir.join(file_name(start));
        Ok(Arc::new(MappedFile::create_in(self.storage, &path, start, self.file_size)?))
    }

    /// Appends `file`, a segment made before it was needed (the commitlog's next segment, made ahead by its
    /// `warm` service), which must follow the last one.
    pub fn adopt(&self, file: Arc<MappedFile>) -> Result<()> {
        let mut files = self.files.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        let expected = files.last().map(|f| f.end());
        if expected.is_some_and(|e| e != file.start()) || file.size() != self.file_size {
            return Err(Error::InvalidOffset {
                offset: file.start() as i64,
                reason: "segment would not follow the last one".into(),
            });
        }
        files.push(file);
        Ok(())
    }
}

/// The segment a sequential writer or reader is in, kept from one lookup to the next: a lookup inside it costs
/// one atomic load instead of the queue's lock and a reference count taken and dropped (the put path and the
/// dispatcher each look their segment up per record, and on two cores those shared counters bounce between
/// them). Stale once a segment leaves the queue (retention, truncation): the next lookup asks the queue.
#[derive(Debug, Default)]
pub struct SegmentCache {
    file: Option<Arc<MappedFile>>,
    removals: u64,
}

impl SegmentCache {
    /// The segment of `queue` holding `offset`, as [`FileQueue::find`] finds it.
    pub fn find<'a>(&'a mut self, queue: &FileQueue, offset: u64) -> Option<&'a Arc<MappedFile>> {
        let removals = queue.removals.load(Ordering::Acquire);
        let hit = self.file.as_ref().is_some_and(|f| f.start() <= offset && offset < f.end());
        if !hit || removals != self.removals {
            self.file = queue.find(offset);
            self.removals = removals;
        }
        self.file.as_ref()
    }

    /// Keeps `file` (a segment of the queue the cache is used with) as the current one.
    pub fn set(&mut self, queue: &FileQueue, file: Arc<MappedFile>) {
        self.removals = queue.removals.load(Ordering::Acquire);
        self.file = Some(file);
    }
}

/// The newest of `files` (a directory's fixed-size files, sorted by name, of lengths `lens`) when its creation was
/// cut short and it
/// holds nothing, so that an open can remove it: 0 bytes (the process died before its length was set), or
/// shorter than `file_size` with no byte but zeros while every other file has the full size. The second is
/// what a power loss or a kernel crash in the middle of claiming its space leaves: ext4 grows the length of a
/// file being allocated in steps of up to 128 MiB, each in a journal transaction of its own, and a file is used
/// only once its full length is synced ([`crate::mmap::MappedFile::create`]), so no byte was ever written to
/// it. A short file with any other byte, or beside other files of another size (a store opened with a segment
/// size it was not written with), is not this and is left for the size checks to refuse. Reads the file
/// (only its data extents, [`crate::mmap::data_ranges`]); changes nothing.
pub fn interrupted_creation<'a>(files: &[&'a Path], lens: &[u64], file_size: u64) -> Result<Option<&'a Path>> {
    let (Some(&last), Some((&len, others))) = (files.last(), lens.split_last()) else { return Ok(None) };
    if len == 0 {
        return Ok(Some(last));
    }
    if len >= file_size || others.iter().any(|&l| l != file_size) {
        return Ok(None);
    }
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(last).map_err(|e| Error::io(last, e))?;
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    let mut buf = vec![0u8; (1 << 20).min(len)];
    for (from, to) in crate::mmap::data_ranges(&file, 0, len) {
        let mut at = from;
        while at < to {
            let chunk = &mut buf[..(to - at).min(1 << 20)];
            file.read_exact_at(chunk, at as u64).map_err(|e| Error::io(last, e))?;
            if chunk.iter().any(|&b| b != 0) {
                return Ok(None);
            }
            at += chunk.len();
        }
    }
    Ok(Some(last))
}

/// The files of a segment directory (subdirectories left out), in name order, with their lengths.
///
/// In an overlay another process may write the directory while it is read, and a listing is not a snapshot:
/// a file created during `readdir` may be missed while a later one is listed (ext4 lists in hash order), and a
/// listed file may be gone when its length is read (retention removing the first files, a writer removing the
/// segment it made ahead at its close). So a name missing between two listed segments is looked for by name
/// (in both storages: on disk it is simply not found), and in an overlay a listed file that has gone is left out.
fn list_segments(storage: Storage, dir: &Path, file_size: u64) -> Result<Vec<(String, PathBuf, u64)>> {
    let mut names: Vec<(String, PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        match entry.file_type() {
            Ok(t) if t.is_dir() => continue,
            Ok(_) => {}
            Err(e) if storage == Storage::Overlay && e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io(entry.path(), e)),
        }
        names.push((entry.file_name().to_string_lossy().into_owned(), entry.path()));
    }
    names.sort();
    #[cfg(test)]
    tests::RACE.with(|hook| hook.borrow_mut().as_mut().map(|f| f("listed")));
    let mut i = 1;
    while i < names.len() {
        let start = |k: usize| names.get(k).filter(|(n, _)| n.len() == 20).and_then(|(n, _)| parse_file_name(n));
        if let (Some(a), Some(b)) = (start(i - 1), start(i)) {
            if let Some((expected, path)) =
                missing_segment(dir, a, file_size, b).filter(|_| a.is_multiple_of(file_size))
            {
                names.insert(i, (file_name(expected), path));
            }
        }
        i += 1;
    }
    let mut out = Vec::with_capacity(names.len());
    for (name, path) in names {
        match std::fs::metadata(&path) {
            Ok(m) => out.push((name, path, m.len())),
            Err(e) if storage == Storage::Overlay && e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(&path, e)),
        }
    }
    Ok(out)
}

/// The segment a directory listing missed between `start` (a listed segment of `len` bytes) and `next` (the
/// next listed one), when it exists now: its start and path. See `list_segments`.
pub(crate) fn missing_segment(dir: &Path, start: u64, len: u64, next: u64) -> Option<(u64, PathBuf)> {
    let expected = start.checked_add(len).filter(|&e| len > 0 && e < next)?;
    let path = dir.join(file_name(expected));
    path.is_file().then_some((expected, path))
}

/// Removes `path` and syncs its directory, so that the removal survives a power loss.
pub fn remove_durably(path: &Path) -> Result<()> {
    std::fs::remove_file(path).map_err(|e| Error::io(path, e))?;
    path.parent().map_or(Ok(()), crate::mmap::sync_dir)
}

/// A file of a directory of fixed-size files whose size differs from its siblings': damage, named by file and
/// the offset where its data ends (or where the extension begins). `derived`: a consume queue's file, which
/// the open rebuilds from the log when the whole `consumequeue` directory is gone.
pub fn size_damage(path: &Path, start: u64, len: u64, file_size: u64, derived: bool) -> Error {
    Error::Corruption {
        path: path.to_owned(),
        offset: start.saturating_add(len.min(file_size)) as i64,
        reason: format!(
            "the file is {len} bytes where the other files of {} are {file_size}: it was {}. Nothing was changed; {}",
            if derived { "the store's consume queues" } else { "this directory" },
            if len < file_size { "truncated" } else { "extended" },
            if derived {
                "a read-only open reads past it (`rmq check` reports it); to repair, move the store's consumequeue \
                 directory aside and open the store: it rebuilds every consume queue from the commitlog"
            } else if path.parent().and_then(Path::file_name).is_some_and(|d| d == "index") {
                "the index is derived from the commitlog: move the store's index directory aside and open the \
                 store, which rebuilds it"
            } else {
                // Moving the commitlog aside (the advice once given for any such file) empties the store.
                "restore it from a copy: the commitlog holds the only copy of its messages, so never move it aside"
            }
        ),
    }
}

/// A file of `len` bytes where `file_size` were expected, in an overlay: anonymous memory of `file_size`
/// holding the file's bytes as far as they go.
fn read_resized(path: &Path, start: u64, len: u64, file_size: u64) -> Result<MappedFile> {
    use std::io::Read;
    let f = MappedFile::create_in(Storage::Overlay, path, start, file_size)?;
    let mut data = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(len.min(file_size)).read_to_end(&mut data))
        .map_err(|e| Error::io(path, e))?;
    f.write_at(0, &data)?;
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// Runs while `FileQueue::load_in` reads a directory, after it "listed" the names and after it
        /// "measured" their lengths: a test stands in for another process changing the directory then.
        pub(super) static RACE: crate::race::Hook<dyn FnMut(&str)> = const { std::cell::RefCell::new(None) };
    }

    #[test]
    #[allow(clippy::unwrap_used)]
    fn a_view_reads_a_directory_another_process_changes_meanwhile() {
        let dir = tempfile::tempdir().unwrap();
        let (d, path) = (dir.path().to_owned(), move |n: u64| dir.path().join(file_name(n)));
        let starts = |q: &FileQueue| q.files().iter().map(|f| f.start()).collect::<Vec<_>>();
        let load = |storage, race: Box<dyn FnMut(&str)>| {
            RACE.with(|h| *h.borrow_mut() = Some(race));
            let q = FileQueue::load_in(storage, &d, 160);
            RACE.with(|h| *h.borrow_mut() = None);
            q
        };
        for n in [0, 160, 320] {
            std::fs::write(path(n), [1u8; 160]).unwrap();
        }
        // A listing missed a file made during it (listed in hash order) and saw a later one: found by name.
        let elsewhere = tempfile::tempdir().unwrap();
        let hidden = elsewhere.path().join("160");
        std::fs::rename(path(160), &hidden).unwrap();
        for storage in [Storage::Overlay, Storage::Disk] {
            let q = load(storage, Box::new(|_| {}));
            assert!(matches!(q, Err(Error::Corruption { .. })), "a real gap is still damage");
        }
        let (h, back) = (hidden.clone(), path(160));
        let q = load(
            Storage::Overlay,
            Box::new(move |stage| {
                if stage == "listed" && h.exists() {
                    std::fs::rename(&h, &back).unwrap();
                }
            }),
        )
        .unwrap();
        assert_eq!(starts(&q), [0, 160, 320]);
        // Files gone after the listing (retention removed the first, the writer its segment made ahead) are
        // left out of a view; on disk (the store's lock keeps others out) it is an error, as before.
        for stage in ["listed", "measured"] {
            for gone in [0, 320] {
                let p = path(gone);
                let q = load(
                    Storage::Overlay,
                    Box::new(move |s| {
                        if s == stage {
                            std::fs::remove_file(&p).unwrap();
                        }
                    }),
                )
                .unwrap_or_else(|e| panic!("{stage} {gone}: {e}"));
                let want: Vec<u64> = [0, 160, 320].into_iter().filter(|&s| s != gone).collect();
                assert_eq!(starts(&q), want, "{stage} {gone}");
                drop(q);
                std::fs::write(path(gone), [1u8; 160]).unwrap();
            }
        }
        let p = path(320);
        let q = load(
            Storage::Disk,
            Box::new(move |s| {
                if s == "measured" {
                    std::fs::remove_file(&p).unwrap();
                }
            }),
        );
        assert!(matches!(q, Err(Error::Io { .. })), "{q:?}");
        std::fs::write(path(320), [1u8; 160]).unwrap();
        // A file gone from the middle is damage in a view too.
        let p = path(160);
        let q = load(
            Storage::Overlay,
            Box::new(move |s| {
                if s == "listed" {
                    std::fs::remove_file(&p).unwrap();
                }
            }),
        );
        assert!(matches!(q, Err(Error::Corruption { .. })), "{q:?}");
    }

    #[test]
    fn names() {
        assert_eq!(file_name(0), "00000000000000000000");
        assert_eq!(file_name(1_073_741_824), "00000000001073741824");
        assert_eq!(file_name(2_147_483_648), "00000000002147483648");
        assert_eq!(parse_file_name("00000000001073741824"), Some(1_073_741_824));
        assert_eq!(parse_file_name("abc"), None);
        assert_eq!(parse_file_name("-1"), None);
        assert_eq!(parse_file_name(""), None);
    }

    #[test]
    #[allow(clippy::unwrap_used)]
    fn a_short_newest_file_of_zeros_is_an_interrupted_creation() {
        let dir = tempfile::tempdir().unwrap();
        let path = |n: u64| dir.path().join(file_name(n));
        let write = |n: u64, bytes: &[u8]| std::fs::write(path(n), bytes).unwrap();
        write(0, &[7u8; 4096]);
        let (full, short) = (path(0), path(4096));
        let len = |p: &Path| std::fs::metadata(p).unwrap().len();
        let check = |bytes: &[u8]| {
            write(4096, bytes);
            let lens = [len(&full), len(&short)];
            interrupted_creation(&[full.as_path(), short.as_path()], &lens, 4096).unwrap().is_some()
        };
        assert!(check(&[]), "empty");
        assert!(check(&[0u8; 1]) && check(&[0u8; 2048]) && check(&[0u8; 4095]), "short, all zeros");
        let mut one = [0u8; 4095];
        one[4094] = 1;
        assert!(!check(&one), "a byte of data");
        assert!(!check(&[0u8; 4096]), "full length");
        assert!(!check(&[0u8; 5000]), "longer");
        write(0, &[7u8; 8192]);
        assert!(!check(&[0u8; 2048]), "beside a file of another size");
        let only = interrupted_creation(&[short.as_path()], &[len(&short)], 4096).unwrap();
        assert_eq!(only, Some(short.as_path()), "the only file");
        assert_eq!(interrupted_creation(&[], &[], 4096).unwrap(), None);
        write(0, &[7u8; 4096]);
        write(4096, &[0u8; 2048]);
        let after = FileQueue::load(dir.path(), 4096).unwrap();
        assert_eq!(after.files().len(), 1, "load removed the short file of zeros");
        assert!(!short.exists());
    }

    #[test]
    #[allow(clippy::unwrap_used)]
    fn a_file_of_zeros_not_named_as_the_next_segment_is_never_removed() {
        for (others, name) in [
            (&[][..], "notes.txt"),
            (&[][..], "00000000000000000000.bak"),
            (&[][..], "99999999999999999999"),
            (&[][..], "00000000000000001000"),
            (&[0u64][..], "00000000000000012288"),
            (&[0u64][..], "zzz"),
        ] {
            let dir = tempfile::tempdir().unwrap();
            for &o in others {
                std::fs::write(dir.path().join(file_name(o)), [7u8; 4096]).unwrap();
            }
            let theirs = dir.path().join(name);
            std::fs::write(&theirs, [0u8; 1024]).unwrap();
            let q = FileQueue::load(dir.path(), 4096);
            assert!(matches!(q, Err(Error::Corruption { .. })), "{name}: {q:?}");
            assert_eq!(std::fs::read(&theirs).unwrap(), vec![0u8; 1024], "{name} was changed");
            std::fs::write(&theirs, []).unwrap();
            let q = FileQueue::load(dir.path(), 4096);
            assert!(matches!(q, Err(Error::Corruption { .. })), "{name}, empty: {q:?}");
            assert!(theirs.exists(), "{name}, empty, was removed");
        }
    }

    #[test]
    #[allow(clippy::unwrap_used)]
    fn a_segment_made_detached_joins_only_where_it_follows() {
        let dir = tempfile::tempdir().unwrap();
        let q = FileQueue::load(dir.path(), 4096).unwrap();
        q.create(0).unwrap();
        let far = q.create_detached(8192).unwrap();
        assert!(q.adopt(far.clone()).is_err(), "a gap");
        far.delete_on_drop();
        drop(far);
        assert!(q.create_detached(100).is_err(), "not a segment start");
        let next = q.create_detached(4096).unwrap();
        assert_eq!(q.files().len(), 1, "not in the queue until adopted");
        q.adopt(next).unwrap();
        assert_eq!(q.files().iter().map(|f| f.start()).collect::<Vec<_>>(), [0, 4096]);
        let mut names: Vec<_> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        assert_eq!(names, [file_name(0), file_name(4096)]);
    }
}
