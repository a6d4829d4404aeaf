//! The store's marker files (spec §8): `lock` (RocketMQ's fcntl lock, held while open; see [`LockFile`]) and `abort` (present while open, so
//! its presence at start-up means the last run did not close cleanly), and the `checkpoint`.
//!
//! A full disk: none of these needs new space to open a store that has them already. `lock` is rewritten only
//! when its content differs; `abort` is created empty first (an empty file needs no data block) and its
//! process id is written only if space allows, so a full disk never makes it half-written; the checkpoint's
//! 4096 bytes are claimed when it is created, so its in-place rewrite never needs space. Every write and sync
//! passes the fault seam ([`crate::fault`]); ENOSPC is [`Error::DiskFull`].

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::fault::{self, FaultPoint};

/// Holds RocketMQ's lock on a store directory: a POSIX record lock (`fcntl(F_SETLK)`, `F_WRLCK`) on byte
/// range [0, 1) of `<root>/lock`, content `lock`: the lock a broker takes with the JDK's
/// `FileChannel.tryLock(0, 1, false)` in `DefaultMessageStore.start`, so a running broker and rmq exclude each
/// other both ways. (`flock` would not do: on Linux it and `fcntl` locks do not see each other.)
///
/// POSIX record locks belong to a process, not to a file descriptor, which has two consequences:
/// - they never conflict within one process, so a second store on the same directory in this process is
///   refused by an in-process registry of locked directories (keyed by the root's device and inode, so two
///   paths to one directory are one entry), checked before `<root>/lock` is opened;
/// - closing ANY descriptor of the file releases the process's lock on it. Nothing in rmq opens `<root>/lock`
///   except [`LockFile::acquire`], and it opens it only after the registry said this process holds no lock
///   on it. Code in the same process that opens and closes `<root>/lock` (to copy or hash the directory, for
///   instance) silently drops the lock while the store is open: leave that file alone, or copy the directory
///   from another process.
///
/// The lock is released when the store closes (the descriptor is closed before the directory leaves the
/// registry, so another thread cannot take a lock that this close then drops) and by the kernel when the
/// process exits, however it exits (`kill -9` included). A child created by `fork` does not hold it.
#[derive(Debug)]
pub struct LockFile {
    file: Option<File>,
    key: (u64, u64),
}

/// Store roots (device, inode) that a [`LockFile`] of this process holds, each with the fork generation it was
/// taken in ([`crate::fork`]): a child made by `fork` inherits the parent's entries but none of its locks, so
/// only entries of the process's own generation count.
static LOCKED_ROOTS: std::sync::Mutex<Vec<((u64, u64), u64)>> = std::sync::Mutex::new(Vec::new());

fn locked_roots() -> std::sync::MutexGuard<'static, Vec<((u64, u64), u64)>> {
    let mut roots = LOCKED_ROOTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let now = crate::fork::generation();
    roots.retain(|&(_, generation)| generation == now);
    roots
}

/// Result of trying RocketMQ's lock on a descriptor.
enum TryLock {
    Taken,
    HeldElsewhere,
}

/// RocketMQ's lock as a `struct flock`: a write lock on byte 0 (`{F_WRLCK, SEEK_SET, start 0, len 1}`).
fn first_byte_write_lock() -> libc::flock {
    #[allow(unsafe_code)]
    // SAFETY: `struct flock` is plain old data for which all-zero bytes are a valid value (the fields that
    // matter are set below; the platform's extra fields stay zero, as the kernel expects).
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as _;
    fl.l_whence = libc::SEEK_SET as _;
    fl.l_start = 0;
    fl.l_len = 1;
    fl
}

/// `fcntl(fd, F_SETLK, {F_WRLCK, SEEK_SET, start 0, len 1})`, the call the JDK makes for
/// `tryLock(0, 1, false)`. EAGAIN / EACCES: another process holds a conflicting lock.
fn try_record_lock(file: &File) -> std::io::Result<TryLock> {
    use std::os::fd::AsRawFd;
    let fl = first_byte_write_lock();
    #[allow(unsafe_code)]
    // SAFETY: the descriptor is open for the duration of the call (`file` is borrowed), and `fl` is a valid,
    // initialised `struct flock` that F_SETLK only reads.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &fl) };
    if rc == 0 {
        return Ok(TryLock::Taken);
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EAGAIN | libc::EACCES) => Ok(TryLock::HeldElsewhere),
        _ => Err(err),
    }
}

/// Whether the store at `root` is open for writing somewhere: in this process (the registry), or in another
/// one, a broker or another rmq, that holds RocketMQ's lock on `<root>/lock` (asked with `F_GETLK` on a
/// read-only descriptor: nothing is taken, created or written). `Some(pid)` for another process (0 when the
/// kernel does not say, or for this one), `None` when nobody holds it or there is no lock file.
pub fn lock_holder(root: &Path) -> Option<u32> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(root).ok()?;
    if locked_roots().iter().any(|&(key, _)| key == (meta.dev(), meta.ino())) {
        return Some(0);
    }
    let file = File::open(root.join("lock")).ok()?;
    let mut fl = first_byte_write_lock();
    #[allow(unsafe_code)]
    // SAFETY: the descriptor is open for the duration of the call (`file` is borrowed), and `fl` is a valid,
    // initialised `struct flock` that F_GETLK reads and overwrites with the conflicting lock, if any.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETLK, &mut fl) };
    (rc == 0 && fl.l_type != libc::F_UNLCK as libc::c_short).then(|| u32::try_from(fl.l_pid).unwrap_or(0))
}

/// Opens `path` for reading and writing, creating it empty if missing and keeping its bytes if not.
fn open_or_create(path: &Path) -> Result<File> {
    OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).map_err(|e| Error::io(path, e))
}

/// `pwrite` of all of `data` at `pos`, through the fault seam.
fn write_at(file: &File, path: &Path, data: &[u8], pos: u64) -> Result<()> {
    fault::check(FaultPoint::Write, path).map_err(|e| Error::io(path, e))?;
    let _recorded = crate::sync_record::write_point(path);
    file.write_all_at(data, pos).map_err(|e| Error::io(path, e))
}

/// fsync (`data_only`: fdatasync) through the fault seam and the sync recorder.
fn sync(file: &File, path: &Path, data_only: bool) -> Result<()> {
    fault::check(FaultPoint::Fsync, path).map_err(|e| Error::io(path, e))?;
    let pending = crate::sync_record::begin(path, || crate::sync_record::file_snapshot(path));
    if data_only { file.sync_data() } else { file.sync_all() }.map_err(|e| Error::io(path, e))?;
    crate::sync_record::commit(pending);
    Ok(())
}

impl LockFile {
    /// Takes the lock or fails with [`Error::Locked`], changing nothing: the registry is checked first, and
    /// `<root>/lock` is opened (created empty if missing) and locked before anything is written. The content
    /// `lock` is written (and synced) only when the file does not hold it already, so re-opening needs no disk
    /// space. If it cannot be written (a full disk when the store is first created), the file is left empty,
    /// the lock released and the error returned.
    pub fn acquire(root: &Path) -> Result<Self> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(root).map_err(|e| Error::io(root, e))?;
        let key = (meta.dev(), meta.ino());
        // Held across the attempt, so two threads opening the same directory cannot both get past the registry.
        let mut roots = locked_roots();
        if roots.iter().any(|&(k, _)| k == key) {
            return Err(Error::Locked(root.to_owned()));
        }
        let path = root.join("lock");
        let file = open_or_create(&path)?;
        match try_record_lock(&file).map_err(|e| Error::io(&path, e))? {
            TryLock::Taken => {}
            TryLock::HeldElsewhere => return Err(Error::Locked(root.to_owned())),
        }
        let mut head = [0u8; 4];
        let held = file.read_at(&mut head, 0).map_err(|e| Error::io(&path, e))?;
        if held < head.len() || &head != b"lock" {
            if let Err(e) = write_at(&file, &path, b"lock", 0).and_then(|()| sync(&file, &path, false)) {
                let _ = file.set_len(0);
                return Err(e);
            }
        }
        roots.push((key, crate::fork::generation()));
        Ok(LockFile { file: Some(file), key })
    }
}

/// What a store's root directory may hold (spec §9.1, a RocketMQ broker's `storePathRootDir`), and rmq's own
/// `rmq-groups/` (the consumer groups' registries): nothing else is a store's.
pub const STORE_ROOT_NAMES: &[&str] = &[
    "commitlog",
    "consumequeue",
    "consumequeue_ext",
    "batchconsumequeue",
    "index",
    "checkpoint",
    "abort",
    "abort.bak",
    "lock",
    "config",
    "timerlog",
    "timerwheel",
    "compaction",
    "epochFileCheckpoint",
    "brokerIdentity",
    "rmq-groups",
];

/// The names of the entries of the directory `root` that no store holds ([`STORE_ROOT_NAMES`]), sorted: empty
/// for a store or an empty directory.
pub fn foreign_entries(root: &Path) -> Result<Vec<String>> {
    let mut foreign = Vec::new();
    for entry in std::fs::read_dir(root).map_err(|e| Error::io(root, e))? {
        let name = entry.map_err(|e| Error::io(root, e))?.file_name();
        if !name.to_str().is_some_and(|n| STORE_ROOT_NAMES.contains(&n)) {
            foreign.push(name.to_string_lossy().into_owned());
        }
    }
    foreign.sort();
    Ok(foreign)
}

/// The configuration files a broker or rmq keeps in `<root>/config/` (spec §9.1), each also with `.bak`,
/// `.tmp`, `.lock` and `.journal` after it.
const CONFIG_FILE_NAMES: &[&str] = &[
    "consumerOffset.json",
    "delayOffset.json",
    "topics.json",
    "subscriptionGroup.json",
    "consumerFilter.json",
    "consumerOrderInfo.json",
    "messageRequestMode.json",
    "topicQueueMapping.json",
    "lmqConsumerOffset.json",
    "timercheck",
    "timermetrics",
];

/// Whether the file at `rel` (a path inside a store's root, in components) is one a store holds: a segment of
/// the commitlog, a consume queue (`<topic>/<queue id>/` below its directory), the index or the timer log, a
/// configuration file, a group registry, or one of the root's files.
fn is_store_file(rel: &[&str]) -> bool {
    let digits = |name: &str, n: usize| name.len() == n && name.bytes().all(|b| b.is_ascii_digit());
    match rel {
        [name] => ["checkpoint", "abort", "abort.bak", "lock", "timerwheel", "epochFileCheckpoint", "brokerIdentity"]
            .contains(name),
        ["commitlog" | "timerlog", name] => digits(name, 20),
        ["index", name] => digits(name, 17),
        ["consumequeue" | "consumequeue_ext" | "batchconsumequeue", _, _, name] => digits(name, 20),
        ["compaction", .., name] => digits(name, 20),
        ["config", name] => {
            let mut base = *name;
            while let Some(stem) = [".bak", ".tmp", ".lock", ".journal"].iter().find_map(|x| base.strip_suffix(x)) {
                base = stem;
            }
            CONFIG_FILE_NAMES.contains(&base)
        }
        ["rmq-groups", name] => [".registry", ".lock", ".tmp"].iter().any(|x| name.ends_with(x)),
        _ => false,
    }
}

/// The paths (relative to `root`) of the files under `root` that no store holds ([`is_store_file`]), found by
/// a walk that does not follow symbolic links (removing one removes the link only); at most `limit`.
fn foreign_files(root: &Path, limit: usize) -> Result<Vec<String>> {
    let mut foreign = Vec::new();
    let mut stack = vec![(root.to_owned(), Vec::<String>::new())];
    while let Some((dir, rel)) = stack.pop() {
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))? {
            let entry = entry.map_err(|e| Error::io(&dir, e))?;
            let kind = entry.file_type().map_err(|e| Error::io(entry.path(), e))?;
            entries.push((entry.file_name().to_string_lossy().into_owned(), kind));
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, kind) in entries {
            let mut path = rel.clone();
            path.push(name);
            let parts: Vec<&str> = path.iter().map(String::as_str).collect();
            let known_dir = match parts.as_slice() {
                [top] => STORE_ROOT_NAMES.contains(top),
                [top, ..] => !["config", "commitlog", "timerlog", "index", "rmq-groups"].contains(top),
                [] => false,
            };
            let fine =
                if kind.is_dir() || kind.is_symlink() && parts.len() == 1 { known_dir } else { is_store_file(&parts) };
            if kind.is_dir() && fine {
                stack.push((dir.join(&path[path.len() - 1]), path));
            } else if !fine {
                foreign.push(path.join("/"));
                if foreign.len() >= limit {
                    return Ok(foreign);
                }
            }
        }
    }
    foreign.sort();
    Ok(foreign)
}

/// [`Error::NotAStore`] unless `root` is a directory holding only what a store holds, at every depth.
fn check_store_dir(root: &Path) -> Result<()> {
    let not_a_store = |foreign: String| Err(Error::NotAStore { path: root.to_owned(), foreign });
    match std::fs::metadata(root) {
        Ok(meta) if !meta.is_dir() => return not_a_store("it is not a directory".into()),
        Ok(_) => {}
        Err(e) => return Err(Error::io(root, e)),
    }
    let foreign = foreign_files(root, 4)?;
    if foreign.is_empty() {
        return Ok(());
    }
    let shown: Vec<String> = foreign.iter().take(3).map(|n| format!("{n:?}")).collect();
    let more = if foreign.len() > 3 { " and more".to_owned() } else { String::new() };
    not_a_store(format!("it holds other files than a store's: {}{more}", shown.join(", ")))
}

/// Deletes the store directory `root` and everything in it with its lock held ([`LockFile::acquire`]), so that
/// no process that has the store open (a broker, rmq, this process) loses it underneath: [`Error::Locked`] then,
/// and nothing is deleted. The lock file goes with the directory; the lock is released after.
///
/// Only a store is deleted, so that a mistyped path never wipes someone's files: a `root` that is not a
/// directory, or holds anything a store does not at any depth ([`is_store_file`]; an empty directory is fine), is
/// [`Error::NotAStore`], checked before the lock is taken (which would create `lock` in it) and again with it
/// held; nothing is deleted or created then.
pub fn remove_store(root: &Path) -> Result<()> {
    check_store_dir(root)?;
    let lock = LockFile::acquire(root)?;
    let removed = check_store_dir(root).and_then(|()| std::fs::remove_dir_all(root).map_err(|e| Error::io(root, e)));
    drop(lock);
    removed
}

impl Drop for LockFile {
    fn drop(&mut self) {
        // Close first (which releases the record lock), then let the directory be opened again in this process.
        drop(self.file.take());
        locked_roots().retain(|&(k, _)| k != self.key);
    }
}

/// The `abort` marker.
#[derive(Debug)]
pub struct AbortFile {
    path: PathBuf,
}

impl AbortFile {
    /// Whether `<root>/abort` exists (the previous run did not shut down cleanly).
    pub fn exists(root: &Path) -> bool {
        root.join("abort").exists()
    }

    /// Writes `<root>/abort` with this process id, keeping the previous content in `abort.bak`
    /// (`MixAll.string2File`).
    ///
    /// The marker's presence is what matters; its content is informative. Each file is made to exist (empty,
    /// which needs no disk space) before its content is written; when the disk is full the content is not
    /// written and the file stays empty rather than half-written. Other I/O errors are returned.
    ///
    /// The marker is made durable before this returns (the file and then `root` are synced): a power loss after
    /// anything this run writes must find it, or the next open would take unsynced remains for damage. On a
    /// full disk (a sync failing with ENOSPC) the marker is left as written, so a full store still opens; it
    /// survives a kill, and only a power loss before the next successful sync can lose it.
    pub fn create(root: &Path) -> Result<Self> {
        let path = root.join("abort");
        let bak = root.join("abort.bak");
        let previous = std::fs::read(&path).unwrap_or_default();
        write_marker(&bak, &previous)?;
        let file = write_marker(&path, std::process::id().to_string().as_bytes())?;
        match sync(&file, &path, false).and_then(|()| crate::mmap::sync_dir(root)) {
            Ok(()) | Err(Error::DiskFull { .. }) => Ok(AbortFile { path }),
            Err(e) => Err(e),
        }
    }

    /// Removes the marker after a clean shutdown.
    pub fn remove(self) -> Result<()> {
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(&self.path, e)),
        }
    }
}

/// Makes `path` exist holding `content`, or, when the disk is full, exist empty. Returns the open file.
fn write_marker(path: &Path, content: &[u8]) -> Result<File> {
    let file = OpenOptions::new().write(true).create(true).truncate(true).open(path).map_err(|e| Error::io(path, e))?;
    match write_at(&file, path, content, 0) {
        Ok(()) => Ok(file),
        Err(Error::DiskFull { .. }) => file.set_len(0).map(|()| file).map_err(|e| Error::io(path, e)),
        Err(e) => Err(e),
    }
}

/// The values of `<root>/checkpoint` (spec §8.1): five big-endian longs at the start of a 4096-byte file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckpointValues {
    /// Store time of the last message known flushed to the commitlog.
    pub physic_msg_timestamp: i64,
    /// Store time of the last message with a flushed consume-queue entry.
    pub logics_msg_timestamp: i64,
    /// End time of the last index file that was filled and rolled.
    pub index_msg_timestamp: i64,
    /// HA bookkeeping; kept as found.
    pub master_flushed_offset: i64,
    /// Commitlog confirm offset; kept as found.
    pub confirm_phy_offset: i64,
}

/// Size of the checkpoint file (RocketMQ maps 4096 bytes).
pub const CHECKPOINT_FILE_SIZE: u64 = 4096;

impl CheckpointValues {
    fn decode(b: &[u8; 40]) -> Self {
        let at = |i: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[i..i + 8]);
            i64::from_be_bytes(x)
        };
        CheckpointValues {
            physic_msg_timestamp: at(0),
            logics_msg_timestamp: at(8),
            index_msg_timestamp: at(16),
            master_flushed_offset: at(24),
            confirm_phy_offset: at(32),
        }
    }

    fn encode(&self) -> [u8; 40] {
        let mut b = [0u8; 40];
        for (i, v) in [
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.index_msg_timestamp,
            self.master_flushed_offset,
            self.confirm_phy_offset,
        ]
        .iter()
        .enumerate()
        {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_be_bytes());
        }
        b
    }
}

/// `<root>/checkpoint`, RocketMQ's `StoreCheckpoint`. rmq writes it on `flush` and `close` so that
/// RocketMQ, opening the directory after a crash, starts its recovery and keeps its index files as it would
/// with its own checkpoint. rmq's own recovery does not need it.
#[derive(Debug)]
pub struct StoreCheckpoint {
    path: PathBuf,
    /// The file; `None` once [`release`](Self::release)d (an update that would write it is then refused).
    file: std::sync::Mutex<Option<File>>,
    /// Opened read-only: updates stay in memory.
    read_only: bool,
    values: std::sync::Mutex<CheckpointValues>,
    /// The values in memory differ from the file's (an [`update`](Self::update) not written yet).
    dirty: std::sync::atomic::AtomicBool,
}

impl StoreCheckpoint {
    /// Opens `<root>/checkpoint`, creating it (4096 zero bytes, disk space claimed) if missing; a shorter file
    /// is extended. On a full disk a missing file is not left behind (a shorter one is left as it was) and the
    /// error is [`Error::DiskFull`]. A full-size file found sparse (RocketMQ maps it) gets its space claimed
    /// when possible; if not, opening goes on and a later update may fail with `DiskFull`.
    pub fn open(root: &Path) -> Result<Self> {
        let path = root.join("checkpoint");
        let existed = path.exists();
        let file = open_or_create(&path)?;
        let len = file.metadata().map_err(|e| Error::io(&path, e))?.len();
        // A whole file is left alone (claiming its space again would change its mtime: an open that then fails
        // on damage must leave the store as it found it).
        match if len >= CHECKPOINT_FILE_SIZE {
            Ok(())
        } else {
            crate::mmap::allocate(&file, &path, CHECKPOINT_FILE_SIZE)
        } {
            Ok(()) => {}
            Err(e) => {
                if existed {
                    let _ = file.set_len(len);
                } else {
                    let _ = std::fs::remove_file(&path);
                }
                return Err(e);
            }
        }
        let mut head = [0u8; 40];
        file.read_exact_at(&mut head, 0).map_err(|e| Error::io(&path, e))?;
        Ok(StoreCheckpoint {
            path,
            file: std::sync::Mutex::new(Some(file)),
            read_only: false,
            values: std::sync::Mutex::new(CheckpointValues::decode(&head)),
            dirty: Default::default(),
        })
    }

    /// Reads `<root>/checkpoint` without writing anything: a missing or short file reads as zeros (no durable
    /// point), and updates stay in memory.
    pub fn open_read_only(root: &Path) -> Result<Self> {
        let path = root.join("checkpoint");
        let mut head = [0u8; 40];
        match File::open(&path) {
            Ok(file) => {
                let len = file.metadata().map_err(|e| Error::io(&path, e))?.len();
                if len >= head.len() as u64 {
                    file.read_exact_at(&mut head, 0).map_err(|e| Error::io(&path, e))?;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(&path, e)),
        }
        Ok(StoreCheckpoint {
            path,
            file: std::sync::Mutex::new(None),
            read_only: true,
            values: std::sync::Mutex::new(CheckpointValues::decode(&head)),
            dirty: Default::default(),
        })
    }

    /// The values in memory (as last read or updated).
    pub fn values(&self) -> CheckpointValues {
        *self.values.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Changes the values in memory and writes them to the file, then syncs it. The 40 bytes are rewritten in
    /// place within one claimed block, as RocketMQ does (the file is RocketMQ's, so its layout stays). If the
    /// write fails the values in memory are kept as they were, so a retry writes them again.
    pub fn update_and_flush(&self, change: impl FnOnce(&mut CheckpointValues)) -> Result<()> {
        let mut v = self.values.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut next = *v;
        change(&mut next);
        if next == *v && !self.dirty.load(std::sync::atomic::Ordering::Acquire) {
            return Ok(());
        }
        if self.read_only {
            *v = next;
            return Ok(());
        }
        let held = self.file.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(file) = held.as_ref() else { return Err(Error::Closed) };
        write_at(file, &self.path, &next.encode(), 0)?;
        *v = next;
        sync(file, &self.path, true)?;
        self.dirty.store(false, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// Closes the file (a closed store's); the values stay readable in memory.
    pub fn release(&self) {
        self.file.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    }

    /// Changes the values in memory only (RocketMQ's setters); the next [`update_and_flush`](Self::update_and_flush)
    /// writes them.
    pub fn update(&self, change: impl FnOnce(&mut CheckpointValues)) {
        let mut v = self.values.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let before = *v;
        change(&mut v);
        if *v != before {
            self.dirty.store(true, std::sync::atomic::Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_refuses_a_second_lock_by_any_path_until_the_first_is_dropped() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("store");
        std::fs::create_dir(&root).expect("mkdir");
        std::os::unix::fs::symlink(&root, tmp.path().join("alias")).expect("symlink");
        let first = LockFile::acquire(&root).expect("first lock");
        for path in [root.clone(), tmp.path().join("alias"), tmp.path().join("./store/.")] {
            assert!(matches!(LockFile::acquire(&path), Err(Error::Locked(ref p)) if *p == path));
        }
        let other = tmp.path().join("other");
        std::fs::create_dir(&other).expect("mkdir");
        let independent = LockFile::acquire(&other).expect("another directory locks on its own");
        drop(first);
        let again = LockFile::acquire(&tmp.path().join("alias")).expect("free after drop");
        drop((again, independent));
        // Read only now: closing a descriptor of `lock` would release this process's lock on it.
        assert_eq!(std::fs::read(root.join("lock")).expect("read"), b"lock");
    }

    #[test]
    fn remove_store_deletes_only_a_directory_holding_nothing_but_a_stores_files() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let home = tmp.path().join("home");
        std::fs::create_dir_all(home.join("commitlog")).expect("mkdir");
        std::fs::write(home.join("thesis.tex"), b"mine").expect("write");
        assert!(matches!(remove_store(&home), Err(Error::NotAStore { ref path, .. }) if *path == home));
        assert!(!home.join("lock").exists() && home.join("thesis.tex").exists());
        let file = home.join("thesis.tex");
        assert!(matches!(remove_store(&file), Err(Error::NotAStore { .. })));
        std::fs::remove_file(&file).expect("rm");
        for name in ["config", "index", "rmq-groups"] {
            std::fs::create_dir(home.join(name)).expect("mkdir");
        }
        std::fs::write(home.join("checkpoint"), b"").expect("write");
        // Inside a store's own directories, a file no store holds is someone's too.
        for (dir, file, named) in [
            ("commitlog", "NOTES.txt", "commitlog/NOTES.txt"),
            ("consumequeue/T/0", "README", "consumequeue/T/0/README"),
            ("consumequeue/T", "00000000000000000000", "consumequeue/T/00000000000000000000"),
            ("config/backup/commitlog-copy", "00000000000000000000", "config/backup"),
            ("config", "mine.json", "config/mine.json"),
            ("index", "00000000000000000000", "index/00000000000000000000"),
            ("rmq-groups", "notes", "rmq-groups/notes"),
        ] {
            std::fs::create_dir_all(home.join(dir)).expect("mkdir");
            std::fs::write(home.join(dir).join(file), b"mine").expect("write");
            let refused = remove_store(&home);
            assert!(
                matches!(refused, Err(Error::NotAStore { ref foreign, .. }) if foreign.contains(named)),
                "{dir}/{file}: {refused:?}"
            );
            assert!(home.join(dir).join(file).exists() && !home.join("lock").exists());
            std::fs::remove_file(home.join(dir).join(file)).expect("rm");
            if dir.starts_with("config/") {
                std::fs::remove_dir_all(home.join("config/backup")).expect("rm");
            }
        }
        for (dir, file) in [
            ("commitlog", "00000000000000000000"),
            ("consumequeue/T/0", "00000000000000000000"),
            ("index", "20261130121332412"),
            ("config", "topics.json.bak"),
            ("config", "consumerOffset.json.journal"),
            ("config", "timercheck"),
            ("rmq-groups", "G.registry"),
        ] {
            std::fs::create_dir_all(home.join(dir)).expect("mkdir");
            std::fs::write(home.join(dir).join(file), b"").expect("write");
        }
        std::os::unix::fs::symlink(tmp.path(), home.join("timerlog")).expect("symlink");
        remove_store(&home).expect("a store's files only");
        assert!(!home.exists() && tmp.path().exists());
    }
}
