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

impl LockFile {
    /// Takes the lock or fails with [`Error::Locked`].
    pub fn acquire(root: &Path) -> Result<Self> {
        let path = root.join("lock");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
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
