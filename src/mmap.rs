//! Memory-mapped segment files: the crate's one file-backed `unsafe`.
//!
//! Invariants that make the mapping sound to share between threads:
//! 1. Bytes are written only by the holder of the owning log's writer lock, and only at or beyond the
//!    log's published position; readers only read below a published position (release/acquire atomics),
//!    so no byte is read while it is being written.
//! 2. A file is never truncated or deleted while a view of it lives: every view holds an `Arc<MappedFile>`,
//!    and the mapping is dropped (unmapped) with the last `Arc`. Files are removed from disk only through
//!    [`MappedFile::delete_on_drop`], which defers the unlink to that moment.
//! 3. The store directory is locked against other rmq processes (`lock` file), so no other process of ours
//!    truncates a mapped file. (A foreign process that truncates a mapped file can still fault readers; no
//!    mapping can prevent that.)
//! 4. Bytes are written through the mapping only into disk space already claimed for the file
//!    (`posix_fallocate`), so a full disk is an [`Error::DiskFull`] from the write, never a SIGBUS. A file
//!    this process creates is claimed whole before it is mapped (and removed again when that fails); a file
//!    found on disk (RocketMQ's files are sparse) is claimed whole before its first write, which fails with
//!    `DiskFull` if the space is not there. Opening and reading never claim space.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use memmap2::{MmapOptions, MmapRaw};

use crate::error::{Error, Result};
use crate::fault::{self, FaultPoint};
use crate::sync_record::{self, Snapshot};

/// Where a store's files live: on disk, or (a read-only open) as a private overlay of the disk that no write
/// ever reaches.
///
/// In an `Overlay`, an existing file is opened read-only and mapped copy-on-write (`MAP_PRIVATE`): what the
/// store writes (the repairs and rebuilt entries an open works out) stays in this process's memory, and pages
/// it never writes keep showing the file (another process appending to it, a live broker, is seen). A file the
/// store creates is anonymous memory under the name it would have; flushing, claiming space and deleting do
/// nothing. So the same open, recovery and dispatch code runs on a read-only mount or beside a live broker
/// without changing a byte, a file or an mtime.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Storage {
    /// Files on disk, written through shared mappings.
    #[default]
    Disk,
    /// A private copy-on-write overlay of the files; nothing reaches the disk.
    Overlay,
}

/// The largest folio (unit of the page cache) ext4 caches file pages in, from Linux 6.16: 2 MiB. Folios are
/// aligned to their size in the file, so a range starting at a multiple of it splits none.
pub const LARGEST_FOLIO: usize = 2 * 1024 * 1024;

/// One fixed-size file mapped read/write, covering global offsets `[start, start + size)`.
pub struct MappedFile {
    path: PathBuf,
    start: u64,
    size: u64,
    map: MmapRaw,
    /// The open file (`None`: an overlay file that exists only in memory).
    file: Option<File>,
    storage: Storage,
    delete_on_drop: AtomicBool,
    /// The fork generation this mapping was made in: a forked child's copy deletes nothing on drop.
    generation: u64,
    /// The whole file has disk space claimed (invariant 4).
    allocated: AtomicBool,
}

impl std::fmt::Debug for MappedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedFile").field("path", &self.path).field("start", &self.start).finish()
    }
}

/// Raises this process's soft limit on open files (`RLIMIT_NOFILE`) to its hard limit, once. A store keeps each
/// of its files open while it is open (commitlog segments, every consume queue's files, index files), so a broker
/// store of a few thousand queues needs more than the 1,024 a shell often allows, and opening it would fail
/// with "Too many open files". The JVM does the same at start (`-XX:+MaxFDLimit`, on by default), so RocketMQ
/// itself runs with the hard limit; so does Go's runtime. The hard limit is never changed.
pub fn raise_open_file_limit() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        #[allow(unsafe_code)]
        // SAFETY: getrlimit writes one `rlimit` into the struct we own and pass; setrlimit only reads it.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
                lim.rlim_cur = lim.rlim_max;
                libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
            }
        }
    });
}

/// This process's soft limit on open files, if known.
pub fn open_file_limit() -> Option<u64> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    #[allow(unsafe_code)]
    // SAFETY: getrlimit writes one `rlimit` into the struct we own and pass.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0;
    ok.then_some(lim.rlim_cur)
}

/// The ranges of bytes `[from, size)` of `file` that may hold data: its data extents as the filesystem reports
/// them (`lseek` `SEEK_DATA`/`SEEK_HOLE`), so that a scan for non-zero bytes can skip holes and space claimed but
/// never written (`posix_fallocate`'s unwritten extents, which ext4 and XFS report as holes). Where the
/// filesystem cannot tell, the whole range. Moves the descriptor's file position (no caller here uses it).
pub fn data_ranges(file: &File, from: usize, size: usize) -> Vec<(usize, usize)> {
    let whole = if from < size { vec![(from, size)] } else { Vec::new() };
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    let seek = |pos: usize, whence: i32| -> Option<usize> {
        let off = libc::off_t::try_from(pos).ok()?;
        #[allow(unsafe_code)]
        // SAFETY: a plain system call on a descriptor `file` owns and keeps open for the call; no memory is
        // passed. The descriptor's file position is not used by any other code (mappings and positioned reads
        // do not depend on it).
        let r = unsafe { libc::lseek(fd, off, whence) };
        usize::try_from(r).ok()
    };
    let mut out = Vec::new();
    let mut at = from;
    while at < size {
        let Some(data) = seek(at, libc::SEEK_DATA) else {
            // ENXIO: no data at or after `at`. Anything else: the filesystem cannot tell.
            let errno = std::io::Error::last_os_error().raw_os_error();
            return if errno == Some(libc::ENXIO) { out } else { whole };
        };
        if data >= size {
            break;
        }
        let hole = seek(data, libc::SEEK_HOLE).map_or(size, |h| h.min(size));
        if hole <= data {
            return whole;
        }
        out.push((data, hole));
        at = hole;
    }
    out
}

/// The bytes `[pos, pos + out.len())` of `file` into `out`, read from the mapping only inside `ranges` (its data
/// extents, ascending, from [`MappedFile::data_ranges`]) and zero elsewhere.
pub fn read_in_extents(file: &MappedFile, ranges: &[(usize, usize)], pos: usize, out: &mut [u8]) {
    let end = pos.saturating_add(out.len());
    let first = ranges.partition_point(|r| r.1 <= pos);
    if let Some(&(a, b)) = ranges.get(first) {
        if a <= pos && end <= b {
            if let Some(src) = file.slice(pos, out.len()) {
                out.copy_from_slice(src);
                return;
            }
        }
    }
    out.fill(0);
    for &(a, b) in ranges.get(first..).unwrap_or_default() {
        let (from, to) = (a.max(pos), b.min(end));
        if from >= to {
            break;
        }
        if let (Some(src), Some(dst)) = (file.slice(from, to - from), out.get_mut(from - pos..to - pos)) {
            dst.copy_from_slice(src);
        }
    }
}

/// A file's bytes read only where its data extents lie ([`MappedFile::extents`]); every other byte is zero.
#[derive(Debug)]
pub struct Extents<'a> {
    file: &'a MappedFile,
    ranges: Vec<(usize, usize)>,
}

impl Extents<'_> {
    /// One past the last byte that may hold data (0 if none does).
    pub fn data_end(&self) -> usize {
        self.ranges.last().map_or(0, |r| r.1)
    }

    /// The bytes `[pos, pos + out.len())` into `out`: read from the mapping inside the data extents, zero in
    /// the holes between and after them. Bytes outside the file read as zero too.
    pub fn read(&self, pos: usize, out: &mut [u8]) {
        read_in_extents(self.file, &self.ranges, pos, out);
    }

    /// Whether a byte of `[from, to)` is non-zero (holes are zero and not read).
    pub fn any_nonzero(&self, from: usize, to: usize) -> bool {
        self.ranges.iter().any(|&(a, b)| {
            let (lo, hi) = (a.max(from), b.min(to));
            lo < hi && self.file.slice(lo, hi - lo).is_some_and(|s| s.iter().fold(0u8, |x, &y| x | y) != 0)
        })
    }
}

impl MappedFile {
    /// Creates a new zero-filled file of `size` bytes with all its disk space claimed, and maps it. Fails if
    /// the file exists. On failure (a full disk is [`Error::DiskFull`]) the file is removed again, so the
    /// directory is left as it was.
    ///
    /// The new file is durable before it is returned: its length is synced, then its directory, so a power
    /// loss after any later sync of its data finds the file (with its full length) where it was created.
    pub fn create(path: &Path, start: u64, size: u64) -> Result<Self> {
        Self::create_in(Storage::Disk, path, start, size)
    }

    /// [`MappedFile::create`] in `storage`: in an overlay, anonymous zeroed memory named `path`.
    pub fn create_in(storage: Storage, path: &Path, start: u64, size: u64) -> Result<Self> {
        if storage == Storage::Overlay {
            let len = map_len(size)?;
            let map = MmapOptions::new().len(len).map_anon().map_err(|e| Error::io(path, e))?;
            return Ok(Self::from_map(path, None, storage, start, size, MmapRaw::from(map), true));
        }
        let file =
            OpenOptions::new().read(true).write(true).create_new(true).open(path).map_err(|e| Error::io(path, e))?;
        let made = allocate(&file, path, size)
            .and_then(|()| sync_file(&file, path))
            .and_then(|()| path.parent().map_or(Ok(()), sync_dir))
            .and_then(|()| Self::map(path, file, start, size));
        match made {
            Ok(f) => {
                f.allocated.store(true, Ordering::Release);
                Ok(f)
            }
            Err(e) => {
                let _ = std::fs::remove_file(path);
                Err(e)
            }
        }
    }

    /// Maps an existing file, which must be exactly `size` bytes long.
    pub fn open(path: &Path, start: u64, size: u64) -> Result<Self> {
        Self::open_in(Storage::Disk, path, start, size)
    }

    /// [`MappedFile::open`] in `storage`: in an overlay, opened read-only and mapped copy-on-write.
    pub fn open_in(storage: Storage, path: &Path, start: u64, size: u64) -> Result<Self> {
        let overlay = storage == Storage::Overlay;
        let file = OpenOptions::new().read(true).write(!overlay).open(path).map_err(|e| Error::io(path, e))?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        if len != size {
            return Err(Error::InvalidConfig(format!(
                "{} is {len} bytes but segments of this store are configured as {size} bytes; \
                 open it with the segment size it was written with",
                path.display()
            )));
        }
        if overlay {
            #[allow(unsafe_code)]
            // SAFETY: a private (copy-on-write) mapping of a file opened read-only; the same soundness argument
            // as the shared mappings (module invariants) holds, and no write of ours reaches the file.
            let map =
                unsafe { MmapOptions::new().len(map_len(size)?).map_copy(&file) }.map_err(|e| Error::io(path, e))?;
            return Ok(Self::from_map(path, Some(file), storage, start, size, MmapRaw::from(map), true));
        }
        Self::map(path, file, start, size)
    }

    fn map(path: &Path, file: File, start: u64, size: u64) -> Result<Self> {
        let map = MmapOptions::new().len(map_len(size)?).map_raw(&file).map_err(|e| Error::io(path, e))?;
        Ok(Self::from_map(path, Some(file), Storage::Disk, start, size, map, false))
    }

    fn from_map(
        path: &Path,
        file: Option<File>,
        storage: Storage,
        start: u64,
        size: u64,
        map: MmapRaw,
        allocated: bool,
    ) -> Self {
        MappedFile {
            path: path.to_owned(),
            start,
            size,
            map,
            file,
            storage,
            delete_on_drop: AtomicBool::new(false),
            generation: crate::fork::generation(),
            allocated: AtomicBool::new(allocated),
        }
    }

    /// The ranges of bytes `[from, size)` that may hold data: the file's data extents as the filesystem reports
    /// them (`lseek` `SEEK_DATA`/`SEEK_HOLE`), so that a scan for non-zero bytes can skip holes and space
    /// claimed but never written (`posix_fallocate`'s unwritten extents, which ext4 and XFS report as holes).
    /// Where the filesystem cannot tell (or for an in-memory overlay file), the whole range.
    pub fn data_ranges(&self, from: usize) -> Vec<(usize, usize)> {
        let size = self.map.len();
        match &self.file {
            Some(file) => data_ranges(file, from, size),
            None if from < size => vec![(from, size)],
            None => Vec::new(),
        }
    }

    /// One past the last non-zero byte at or after `from` (`from` when there is none), reading only the data
    /// extents [`MappedFile::data_ranges`] reports: a never-written rest of a file (up to a gigabyte of holes,
    /// each page of which a read through the mapping would fault in) costs nothing, and a hole is never read
    /// (on tmpfs, reading a hole through a mapping allocates its page, which on a full tmpfs kills the process
    /// with SIGBUS).
    pub fn nonzero_end(&self, from: usize) -> usize {
        let mut end = from;
        for (a, b) in self.data_ranges(from) {
            let n = crate::commitlog::cursor::nonzero_extent(self.slice(a, b - a).unwrap_or_default());
            if n > 0 {
                end = a + n;
            }
        }
        end
    }

    /// Whether the file lives on tmpfs (shared memory), where reading a hole through a mapping allocates its page
    /// and, on a full tmpfs, kills the process with SIGBUS (elsewhere a hole reads as the zero page).
    pub fn on_tmpfs(&self) -> bool {
        use std::os::fd::AsRawFd;
        let Some(file) = &self.file else { return false };
        let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
        #[allow(unsafe_code)]
        // SAFETY: fstatfs fills the `statfs` we pass (uninitialised memory we own) for a descriptor `file` keeps
        // open, and it is read only when the call succeeded.
        let Some(st) = (unsafe { (libc::fstatfs(file.as_raw_fd(), st.as_mut_ptr()) == 0).then(|| st.assume_init()) }) else {
            return false;
        };
        const TMPFS_MAGIC: i64 = 0x0102_1994;
        // `f_type`'s integer type differs between C libraries and architectures.
        #[allow(clippy::unnecessary_cast)]
        let kind = st.f_type as i64;
        kind == TMPFS_MAGIC
    }

    /// The file's bytes as the data extents `ranges` (from [`MappedFile::data_ranges`]) tell them: a reader of
    /// an old file that never touches a hole, for which a hole reads as zeros (see [`MappedFile::nonzero_end`]
    /// for why a hole must not be read through the mapping).
    pub fn extents(&self, from: usize) -> Extents<'_> {
        Extents { file: self, ranges: self.data_ranges(from) }
    }

    /// Whether the file's path still names the file this maps (not removed, not removed and made again):
    /// another process may delete a segment that holds nothing and create one of the same name later. A
    /// mapping without a file (in memory) is its own.
    pub fn is_current(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        let Some(file) = &self.file else { return true };
        match (file.metadata(), std::fs::metadata(&self.path)) {
            (Ok(mapped), Ok(named)) => mapped.ino() == named.ino() && mapped.dev() == named.dev(),
            _ => false,
        }
    }

    /// Where the file lives.
    pub fn storage(&self) -> Storage {
        self.storage
    }

    /// Path of the file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Global offset of the first byte.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// File size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Global offset one past the last byte.
    pub fn end(&self) -> u64 {
        self.start + self.size
    }

    /// The bytes `[pos, pos + len)` of the file, or `None` if that range is outside it.
    ///
    /// Callers read only ranges below a published position (module invariant 1).
    pub fn slice(&self, pos: usize, len: usize) -> Option<&[u8]> {
        let end = pos.checked_add(len)?;
        if end > self.map.len() {
            return None;
        }
        #[allow(unsafe_code)]
        // SAFETY: `pos..end` lies inside the live mapping (checked above), which stays mapped for as long as
        // `self` lives (it is unmapped only on drop). No thread writes to this range concurrently: writers only
        // write at or beyond the published position, and callers only request ranges below it (invariant 1).
        // Another process truncating the file is excluded by the store lock (invariant 3).
        Some(unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(pos), len) })
    }

    /// Asks the CPU to start loading the bytes `pos..pos + len` into its caches, without waiting for them (a
    /// hint: nothing is read, no fault is taken; a no-op off x86-64 and for a range outside the file). Readers
    /// that know which records they will parse next call it a few records ahead, so the memory latency of
    /// those records overlaps the work on the current one.
    pub fn prefetch(&self, pos: usize, len: usize) {
        let Some(bytes) = self.slice(pos, len) else { return };
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let last = bytes.len().saturating_sub(1);
            for at in (0..bytes.len()).step_by(64).chain((!bytes.is_empty()).then_some(last)) {
                let line = bytes.as_ptr().wrapping_add(at).cast::<i8>();
                #[allow(unsafe_code)]
                // SAFETY: `_mm_prefetch` needs SSE, which every x86-64 CPU has (it is in the target's baseline);
                // it only hints the cache, never dereferences the pointer in a way that can fault, and `line`
                // points into `bytes` (`at` < its length), a live range of the mapping.
                unsafe {
                    _mm_prefetch::<_MM_HINT_T0>(line)
                };
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = bytes;
    }

    /// Copies `data` to `pos`, after claiming the file's disk space if that was not done yet (invariant 4).
    /// Errors, with nothing written: [`Error::DiskFull`] when the space cannot be claimed,
    /// [`Error::InvalidOffset`] for a range outside the file, an injected fault ([`crate::fault`]).
    pub fn write_at(&self, pos: usize, data: &[u8]) -> Result<()> {
        let _recorded = self.begin_write(pos, data.len())?;
        #[allow(unsafe_code)]
        // SAFETY: the destination lies inside the mapping (`begin_write` checked it) and is not published, so no
        // reader holds a slice of it (invariant 1); `data` is a distinct Rust slice, so the ranges do not
        // overlap. The file's space is claimed (`begin_write`), so the page faults this copy takes cannot fail
        // for want of space (invariant 4).
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.map.as_mut_ptr().add(pos), data.len());
        }
        Ok(())
    }

    /// [`write_at`](Self::write_at) of a few bytes whose count is known at compile time: plain stores, no call
    /// to `memmove` (the index writes a 4-byte slot, a 20-byte entry and its 40-byte header per key).
    pub fn write_array<const N: usize>(&self, pos: usize, data: &[u8; N]) -> Result<()> {
        let _recorded = self.begin_write(pos, N)?;
        #[allow(unsafe_code)]
        // SAFETY: as in `write_at`: inside the mapping, unpublished, space claimed; `write_unaligned` has no
        // alignment requirement.
        unsafe {
            self.map.as_mut_ptr().add(pos).cast::<[u8; N]>().write_unaligned(*data);
        }
        Ok(())
    }

    /// The checks before a write of `len` bytes at `pos`: inside the file, no injected fault, space claimed.
    /// Returns [`sync_record`]'s guard, to be held until the bytes are written.
    fn begin_write(&self, pos: usize, len: usize) -> Result<Option<std::sync::RwLockReadGuard<'static, ()>>> {
        pos.checked_add(len).filter(|&e| e <= self.map.len()).ok_or_else(|| Error::InvalidOffset {
            offset: self.start.saturating_add(pos as u64) as i64,
            reason: format!("a write of {len} bytes does not fit in {}", self.path.display()),
        })?;
        fault::check(FaultPoint::Write, &self.path).map_err(|e| Error::io(&self.path, e))?;
        self.claim()?;
        Ok(sync_record::write_point(&self.path))
    }

    /// Claims disk space for the whole file unless that was done (one atomic load when it was).
    pub fn claim(&self) -> Result<()> {
        if self.allocated.load(Ordering::Acquire) {
            return Ok(());
        }
        if let Some(file) = &self.file {
            allocate(file, &self.path, self.size)?;
        }
        self.allocated.store(true, Ordering::Release);
        Ok(())
    }

    /// Whether the file's disk space is claimed, so writes cannot run out of space.
    pub fn is_allocated(&self) -> bool {
        self.allocated.load(Ordering::Acquire)
    }

    /// Writes the 8 bytes at `pos` with one store instruction, after every earlier write to the mapping: the
    /// commit point of an append (the first record's TOTALSIZE and MAGIC, or an end-of-file blank). A process
    /// killed at any instant leaves either all 8 bytes or none of them, and never these bytes without the ones
    /// written before them (the crash model in `commitlog::recover`).
    pub fn write_commit_word(&self, pos: usize, word: [u8; 8]) -> Result<()> {
        pos.checked_add(8).filter(|&e| e <= self.map.len()).ok_or_else(|| Error::InvalidOffset {
            offset: self.start.saturating_add(pos as u64) as i64,
            reason: format!("a commit word does not fit in {}", self.path.display()),
        })?;
        // Not a fault point of its own: it completes the write that `write_at` just checked.
        self.claim()?;
        let _recorded = sync_record::write_point(&self.path);
        // Every byte copied before this call is in the mapping before the word (program order for a killed
        // process; the fence also orders it for any other observer of the shared mapping).
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        #[allow(unsafe_code)]
        // SAFETY: `pos..pos + 8` lies inside the mapping (checked above) and is not published yet, so no reader
        // holds a slice of it (invariant 1); the file's space is claimed (invariant 4). `write_unaligned` has no
        // alignment requirement and is one 8-byte store on the targets rmq builds for.
        unsafe {
            self.map.as_mut_ptr().add(pos).cast::<u64>().write_unaligned(u64::from_ne_bytes(word));
        }
        Ok(())
    }

    /// Flushes `[pos, pos + len)` to disk (msync).
    pub fn flush_range(&self, pos: usize, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        if self.storage == Storage::Overlay {
            return Ok(());
        }
        fault::check(FaultPoint::Flush, &self.path).map_err(|e| Error::io(&self.path, e))?;
        let pending = sync_record::begin(&self.path, || self.snapshot(pos, len));
        self.map.flush_range(pos, len).map_err(|e| Error::io(&self.path, e))?;
        sync_record::commit(pending);
        Ok(())
    }

    /// The pages overlapping `[pos, pos + len)` as the page cache holds them (for [`sync_record`]), read with
    /// `pread` so that bytes a writer is copying at the same time are not read through the mapping.
    fn snapshot(&self, pos: usize, len: usize) -> Snapshot {
        use std::os::unix::fs::FileExt;
        let page = sync_record::PAGE;
        let first = pos / page * page;
        let end = (pos + len).min(self.map.len());
        let mut bytes = vec![0u8; end.saturating_sub(first)];
        if let Some(file) = &self.file {
            let _ = file.read_exact_at(&mut bytes, first as u64);
        }
        let pages = sync_record::pages_of(&bytes, 0, bytes.len())
            .into_iter()
            .map(|(n, b)| (n + (first / page) as u64, b))
            .collect();
        Snapshot::File { len: self.size, pages }
    }

    /// Faults `[pos, pos + len)` in writable ahead of the writer (`MADV_POPULATE_WRITE`), so page allocation
    /// and zeroing happen here rather than inside a put. Contents are not changed. Best effort: kernels
    /// without the advice (before Linux 5.14) simply skip it.
    pub fn prefault(&self, pos: usize, len: usize) {
        #[cfg(target_os = "linux")]
        {
            let len = len.min(self.map.len().saturating_sub(pos));
            if len > 0 {
                let _ = self.map.advise_range(memmap2::Advice::PopulateWrite, pos, len);
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = (pos, len);
    }

    /// Whether faults on the mapping bring pages into the page cache one by one (`true`: `MADV_RANDOM`, no
    /// read-around) or as the kernel likes (`false`: `MADV_NORMAL`). A segment being written under SYNC_FLUSH
    /// wants single pages: from Linux 6.16 ext4 caches file pages in large folios (up to 2 MiB, mapped whole),
    /// and a write through the mapping marks its whole folio dirty, so every msync of a few new KiB wrote the
    /// whole folio back (a 1 KiB write and msync in a 2 MiB folio: 2 MiB written, 643 µs, against 4 KiB and
    /// 178 µs in single pages; 64,000 SYNC_FLUSH puts of 1 KiB from 16 threads wrote 2.5 GB for 78 MB of
    /// records, 188 MB in single pages). Pages already cached keep their folios; only pages faulted in from now
    /// on follow the advice. Best effort: the advice changes no byte, and an error (none is expected on Linux)
    /// leaves the kernel's default.
    pub fn fault_single_pages(&self, single: bool) {
        #[cfg(target_os = "linux")]
        self.advise_on_disk(if single { memmap2::Advice::Random } else { memmap2::Advice::Normal });
        #[cfg(not(target_os = "linux"))]
        let _ = single;
    }

    /// Whether faults on the mapping bring pages into the page cache as 2 MiB folios from the first one
    /// (`true`: `MADV_HUGEPAGE`) or not (`false`: `MADV_NOHUGEPAGE`). Without the advice the kernel sizes a fresh
    /// file's folios by its read-ahead, which grows them step by step (16 KiB, 64 KiB, 256 KiB, 1 MiB, 2 MiB):
    /// the first tens of MiB of every new commitlog segment were mapped by 4 KiB page-table entries, and the
    /// write-back of each such page sends a TLB-shootdown interrupt to the other CPUs running the process (a
    /// 2 MiB folio mapped whole costs one). For the segment a fast writer fills under ASYNC_FLUSH
    /// ([`crate::commitlog::CommitLog::warm_round`]); with the advice, `MADV_RANDOM` no longer makes single
    /// pages, so a slow writer's round takes it off first. Best effort: kernels without transparent huge pages
    /// keep their default; no byte changes.
    pub fn fault_large_folios(&self, large: bool) {
        #[cfg(target_os = "linux")]
        self.advise_on_disk(if large { memmap2::Advice::HugePage } else { memmap2::Advice::NoHugePage });
        #[cfg(not(target_os = "linux"))]
        let _ = large;
    }

    /// `advice` for the whole mapping of a file on disk (an overlay's private copy is left alone). Best effort.
    #[cfg(target_os = "linux")]
    fn advise_on_disk(&self, advice: memmap2::Advice) {
        if let (Some(_), Storage::Disk) = (&self.file, self.storage) {
            let _ = self.map.advise(advice);
        }
    }

    /// Starts writing back the dirty pages of bytes `[pos, pos + len)` and waits for it, without making
    /// anything durable (`sync_file_range`, no `fdatasync`): the warm service's conversion, under SYNC_FLUSH,
    /// of the pages it faulted in (zeros) from claimed-but-unwritten space into written blocks, so that the
    /// group commit's flushes later in that range change no extent (no journal commit, no extent block). Best
    /// effort: an error is the next flush's to report.
    pub fn write_back(&self, pos: usize, len: usize) {
        #[cfg(target_os = "linux")]
        if let (Some(file), Storage::Disk) = (&self.file, self.storage) {
            use std::os::fd::AsRawFd;
            let len = len.min(self.map.len().saturating_sub(pos));
            let (Ok(off), Ok(n)) = (libc::off64_t::try_from(pos), libc::off64_t::try_from(len)) else { return };
            if n == 0 {
                return;
            }
            let flags =
                libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER;
            #[allow(unsafe_code)]
            // SAFETY: a plain system call on a descriptor this `File` owns and keeps open for the call; no memory
            // is passed, and writing pages back changes no byte of the file.
            let _ = unsafe { libc::sync_file_range(file.as_raw_fd(), off, n, flags) };
        }
        #[cfg(not(target_os = "linux"))]
        let _ = (pos, len);
    }

    /// Drops this file's pages from `pos` (rounded down to [`LARGEST_FOLIO`]) to its end
    /// out of the page cache: this process's mapping lets go of them (`MADV_DONTNEED`, on a shared mapping
    /// only; the bytes stay in the page cache or the file), dirty ones are written back
    /// ([`MappedFile::write_back`]), and the kernel drops them (`POSIX_FADV_DONTNEED`; pages another process
    /// maps stay). For the end of a log at open: the pages past it that are still cached (faulted in ahead of
    /// a writer before a close or a kill, read ahead by the validating read of the records before it) sit in
    /// large folios, which a slow writer would dirty, and each flush write back, whole; dropped, they come back
    /// as the writer and the warm service choose ([`MappedFile::fault_single_pages`]). No byte of the file
    /// changes. Best effort.
    pub fn evict_from(&self, pos: usize) {
        #[cfg(target_os = "linux")]
        if let (Some(file), Storage::Disk) = (&self.file, self.storage) {
            use std::os::fd::AsRawFd;
            let pos = pos - pos % LARGEST_FOLIO;
            let len = self.map.len().saturating_sub(pos);
            let (Ok(off), Ok(n)) = (libc::off64_t::try_from(pos), libc::off64_t::try_from(len)) else { return };
            if n == 0 {
                return;
            }
            #[allow(unsafe_code)]
            // SAFETY: `pos..pos + len` lies inside the mapping (len is what is left of it from `pos`, and `pos`
            // is a multiple of the page size). The mapping is shared (`Storage::Disk`), so `MADV_DONTNEED` drops
            // only this process's page-table entries: the bytes stay in the page cache or the file, and the next
            // access faults them in again unchanged; no reference into the range outlives that.
            let _ = unsafe { self.map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, pos, len) };
            self.write_back(pos, len);
            #[allow(unsafe_code)]
            // SAFETY: a plain system call on a descriptor this `File` owns and keeps open for the call; no memory
            // is passed, and dropping clean cached pages changes no byte of the file.
            let _ = unsafe { libc::posix_fadvise(file.as_raw_fd(), off, n, libc::POSIX_FADV_DONTNEED) };
        }
        #[cfg(not(target_os = "linux"))]
        let _ = pos;
    }

    /// Flushes the whole file.
    pub fn flush(&self) -> Result<()> {
        if self.storage == Storage::Overlay {
            return Ok(());
        }
        fault::check(FaultPoint::Flush, &self.path).map_err(|e| Error::io(&self.path, e))?;
        let pending = sync_record::begin(&self.path, || self.snapshot(0, self.map.len()));
        self.map.flush().map_err(|e| Error::io(&self.path, e))?;
        sync_record::commit(pending);
        Ok(())
    }

    /// Removes the file from disk once the last reference to it is dropped.
    pub fn delete_on_drop(&self) {
        if self.storage == Storage::Overlay {
            return;
        }
        self.delete_on_drop.store(true, Ordering::Release);
    }
}

fn map_len(size: u64) -> Result<usize> {
    usize::try_from(size).map_err(|_| Error::InvalidConfig(format!("segment size {size} too large")))
}

/// Claims disk space for bytes `[0, size)` of `file` (`posix_fallocate`, mode 0: blocks are reserved, contents
/// and existing data unchanged, the length extended to `size` if shorter). Already claimed blocks cost nothing.
/// A full disk is [`Error::DiskFull`] with `needed = size`. Filesystems without `fallocate` are handled by
/// glibc, which writes a zero into every unallocated block instead.
pub fn allocate(file: &File, path: &Path, size: u64) -> Result<()> {
    let full = |path: &Path| Error::disk_full(path, size);
    fault::check(FaultPoint::Allocate, path).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOSPC | libc::EDQUOT) => full(path),
        _ => Error::io(path, e),
    })?;
    if size == 0 {
        return Ok(());
    }
    let len = libc::off_t::try_from(size)
        .map_err(|_| Error::InvalidConfig(format!("file size {size} is too large for this platform")))?;
    let rc = posix_fallocate(file, len);
    match rc {
        0 => Ok(()),
        libc::ENOSPC | libc::EDQUOT => Err(full(path)),
        errno => Err(Error::io(path, std::io::Error::from_raw_os_error(errno))),
    }
}

/// fsync of a whole file (content and length), through the fault seam (`Fsync`) and the sync recorder.
pub fn sync_file(file: &File, path: &Path) -> Result<()> {
    fault::check(FaultPoint::Fsync, path).map_err(|e| Error::io(path, e))?;
    let pending = sync_record::begin(path, || sync_record::file_snapshot(path));
    file.sync_all().map_err(|e| Error::io(path, e))?;
    sync_record::commit(pending);
    Ok(())
}

/// fsync of a directory: makes the creation, removal and renaming of its entries durable (a file's own sync
/// does not). Through the fault seam (`Fsync`) and the sync recorder.
pub fn sync_dir(dir: &Path) -> Result<()> {
    fault::check(FaultPoint::Fsync, dir).map_err(|e| Error::io(dir, e))?;
    let pending = sync_record::begin(dir, || sync_record::dir_snapshot(dir));
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| Error::io(dir, e))?;
    sync_record::commit(pending);
    Ok(())
}

/// `create_dir_all` that makes every directory it creates durable: each new directory's parent is synced,
/// deepest last, so a power loss never loses a directory (and the files in it) that a later sync relied on.
pub fn create_dir_durable(dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut missing = Vec::new();
    let mut at = Some(dir);
    while let Some(d) = at.filter(|d| !d.as_os_str().is_empty() && !d.is_dir()) {
        missing.push(d.to_owned());
        at = d.parent();
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    for d in missing.iter().rev() {
        if let Some(parent) = d.parent().filter(|p| !p.as_os_str().is_empty()) {
            sync_dir(parent)?;
        }
    }
    Ok(())
}

/// `posix_fallocate(fd, 0, len)`, retried on EINTR; returns the error number (0: success).
fn posix_fallocate(file: &File, len: libc::off_t) -> i32 {
    use std::os::fd::AsRawFd;
    loop {
        #[allow(unsafe_code)]
        // SAFETY: a plain system call on a file descriptor this `File` owns and keeps open for the call; no
        // memory is passed.
        let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
        if rc != libc::EINTR {
            return rc;
        }
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        if self.delete_on_drop.load(Ordering::Acquire) && !crate::fork::forked_since(self.generation) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod data_ranges_tests {
    use super::*;

    /// Every non-zero byte lies in a reported range, whatever the filesystem under the temp dir reports.
    #[test]
    fn data_ranges_cover_every_written_byte() {
        let tmp = tempfile::tempdir().unwrap();
        let size = 4 << 20;
        let f = MappedFile::create(&tmp.path().join("seg"), 0, size).unwrap();
        let writes = [(0usize, 7usize), (300_000, 100), (2 << 20, 4096), (size as usize - 3, 3)];
        for &(at, n) in &writes {
            f.write_at(at, &vec![0xAB; n]).unwrap();
        }
        f.flush().unwrap();
        let g = MappedFile::open(&tmp.path().join("seg"), 0, size).unwrap();
        for from in [0usize, 5, 299_999, 1 << 20, size as usize - 1] {
            let ranges = g.data_ranges(from);
            assert!(ranges.windows(2).all(|w| w[0].1 <= w[1].0), "{ranges:?}");
            for &(at, n) in &writes {
                for b in at.max(from)..at + n {
                    assert!(ranges.iter().any(|&(x, y)| x <= b && b < y), "byte {b} from {from}: {ranges:?}");
                }
            }
        }
        let overlay = MappedFile::open_in(Storage::Overlay, &tmp.path().join("seg"), 0, size).unwrap();
        assert!(overlay.data_ranges(10).iter().any(|&(x, y)| x <= 300_000 && 300_000 < y));
        assert_eq!(g.data_ranges(size as usize), Vec::new());
    }

    #[test]
    fn extents_read_holes_as_zeros_and_data_as_written() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("sparse");
        let size = 1usize << 20;
        // A sparse file, as RocketMQ makes its queue files: data on two pages, holes around them.
        let file = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path).unwrap();
        file.set_len(size as u64).unwrap();
        use std::os::unix::fs::FileExt;
        file.write_all_at(&[7u8; 30], 4096 - 10).unwrap();
        file.write_all_at(&[9u8; 5], 600_000).unwrap();
        let f = MappedFile::open(&path, 0, size as u64).unwrap();
        let x = f.extents(0);
        let mut got = vec![0xFFu8; 40];
        x.read(4096 - 20, &mut got);
        let mut want = vec![0u8; 40];
        want[10..40].fill(7);
        assert_eq!(got, want);
        let mut got = [0xFFu8; 10];
        x.read(599_998, &mut got);
        assert_eq!(got, [0, 0, 9, 9, 9, 9, 9, 0, 0, 0]);
        x.read(size - 4, &mut got); // runs past the file's end: zeros
        assert_eq!(got, [0; 10]);
        assert!(x.any_nonzero(599_000, 600_001) && !x.any_nonzero(600_005, size));
        assert!(x.data_end() > 600_004 && x.data_end() <= size);
        assert_eq!(f.nonzero_end(0), 600_005);
        assert_eq!(f.nonzero_end(600_005), 600_005);
    }
}
