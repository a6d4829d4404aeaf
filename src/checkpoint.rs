//! The store's marker files (spec §8): `lock` (exclusive while open) and `abort` (present while open, so
//! its presence at start-up means the last run did not close cleanly).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Holds the exclusive lock on `<root>/lock` (an OS file lock on byte range [0, 1), content `lock`).
#[derive(Debug)]
pub struct LockFile {
    _file: File,
}

/// Opens `path` for reading and writing, creating it empty if missing and keeping its bytes if not.
fn open_or_create(path: &Path) -> Result<File> {
    OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).map_err(|e| Error::io(path, e))
}

impl LockFile {
    /// Takes the lock or fails with [`Error::Locked`].
    pub fn acquire(root: &Path) -> Result<Self> {
        let path = root.join("lock");
        let mut file = open_or_create(&path)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Err(Error::Locked(root.to_owned())),
            Err(std::fs::TryLockError::Error(e)) => return Err(Error::io(&path, e)),
        }
        file.write_all(b"lock").map_err(|e| Error::io(&path, e))?;
        file.sync_all().map_err(|e| Error::io(&path, e))?;
        Ok(LockFile { _file: file })
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
    pub fn create(root: &Path) -> Result<Self> {
        let path = root.join("abort");
        let bak = root.join("abort.bak");
        let previous = std::fs::read(&path).unwrap_or_default();
        std::fs::write(&bak, previous).map_err(|e| Error::io(&bak, e))?;
        std::fs::write(&path, std::process::id().to_string()).map_err(|e| Error::io(&path, e))?;
        Ok(AbortFile { path })
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
    file: File,
    values: std::sync::Mutex<CheckpointValues>,
}

impl StoreCheckpoint {
    /// Opens `<root>/checkpoint`, creating it (4096 zero bytes) if missing; a shorter file is extended.
    pub fn open(root: &Path) -> Result<Self> {
        use std::os::unix::fs::FileExt;
        let path = root.join("checkpoint");
        let file = open_or_create(&path)?;
        let len = file.metadata().map_err(|e| Error::io(&path, e))?.len();
        if len < CHECKPOINT_FILE_SIZE {
            file.set_len(CHECKPOINT_FILE_SIZE).map_err(|e| Error::io(&path, e))?;
        }
        let mut head = [0u8; 40];
        file.read_exact_at(&mut head, 0).map_err(|e| Error::io(&path, e))?;
        Ok(StoreCheckpoint { path, file, values: std::sync::Mutex::new(CheckpointValues::decode(&head)) })
    }

    /// The values in memory (as last read or updated).
    pub fn values(&self) -> CheckpointValues {
        *self.values.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Changes the values in memory and writes them to the file, then syncs it.
    pub fn update_and_flush(&self, change: impl FnOnce(&mut CheckpointValues)) -> Result<()> {
        use std::os::unix::fs::FileExt;
        let mut v = self.values.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let before = *v;
        change(&mut v);
        if *v == before {
            return Ok(());
        }
        self.file.write_all_at(&v.encode(), 0).map_err(|e| Error::io(&self.path, e))?;
        self.file.sync_data().map_err(|e| Error::io(&self.path, e))
    }
}
