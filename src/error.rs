//! The one error type of the core. Each variant says what went wrong and what to do next; corruption and
//! I/O errors carry the file and offset. The Python bindings map each variant to one exception class.

use std::path::{Path, PathBuf};

use crate::message::PutMessageStatus;

/// Result alias used across the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything the store can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A topic name breaks RocketMQ's `TopicValidator` rules (charset `[%|a-zA-Z0-9_-]`, length, reserved names).
    #[error("invalid topic {topic:?}: {reason}")]
    InvalidTopic { topic: String, reason: String },

    /// A message field is not acceptable (RocketMQ status `MESSAGE_ILLEGAL`); nothing was written.
    #[error("illegal message: {0}")]
    IllegalMessage(String),

    /// An end of a transaction was refused (`EndTransactionProcessor`: no half message at the offset, another
    /// producer group or queue offset, already ended, past its immunity deadline), or half messages are
    /// refused; nothing was written.
    #[error("transaction refused: {0}")]
    Transaction(String),

    /// The message (body, or whole record) is larger than the configured limits; nothing was written.
    #[error("message too large: {0}")]
    MessageTooLarge(String),

    /// The encoded properties exceed 32767 bytes (`PROPERTIES_SIZE_EXCEEDED`); nothing was written.
    #[error("properties too large: {size} bytes encoded, the limit is 32767")]
    PropertiesTooLarge { size: usize },

    /// A property name or value cannot be stored (empty, or contains the separators 0x01 / 0x02).
    #[error("invalid property {name:?}: {reason}")]
    InvalidProperty { name: String, reason: String },

    /// A host string is not `ip:port` / `[ipv6]:port`.
    #[error("invalid host address {0:?}: expected \"ip:port\" or \"[ipv6]:port\"")]
    InvalidHost(String),

    /// A configuration value is out of range.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),

    /// An offset given by the caller does not address a record.
    #[error("invalid offset {offset}: {reason}")]
    InvalidOffset { offset: i64, reason: String },

    /// Bytes on disk do not form what the format requires.
    #[error("corrupt data in {path} at offset {offset}: {reason}")]
    Corruption { path: PathBuf, offset: i64, reason: String },

    /// An operating-system I/O call failed.
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The filesystem has no space left (ENOSPC or EDQUOT) for `path`: `needed` bytes could not be claimed, when
    /// the amount is known. Nothing was written and no queue offset was used; the store stays open and
    /// readable, and writes go on once space is freed.
    /// `inodes`: the filesystem has no free inodes left (it refused a new file; `df -h` may show free space).
    #[error("{}", disk_full_text(path, *.needed, *.inodes))]
    DiskFull { path: PathBuf, needed: Option<u64>, inodes: bool },

    /// Another process (a RocketMQ broker, another rmq) or another open store in this one holds the store
    /// directory's lock (RocketMQ's fcntl lock on `<root>/lock`); nothing was changed.
    #[error(
        "store directory {0} is locked: a RocketMQ broker or another rmq store (in this process or another) has it \
         open; nothing was changed: close that first"
    )]
    Locked(PathBuf),

    /// A directory to be deleted as a store ([`crate::checkpoint::remove_store`]) is not one: it is not a
    /// directory, or holds entries no store holds (`foreign` names them); nothing was deleted.
    #[error(
        "{path} is not a store directory ({foreign}); nothing was deleted: give a store's root directory (the one \
         holding commitlog/), or delete it yourself"
    )]
    NotAStore { path: PathBuf, foreign: String },

    /// The store was opened read-only (`read_only=True`); the call would write.
    #[error("store {0} is open read-only and this call would write to it; open it without read_only to write")]
    ReadOnly(PathBuf),

    /// The store was closed; open it again to continue.
    #[error("the store is closed")]
    Closed,

    /// The store was opened by the process this one was forked from ([`crate::fork`]); it belongs to that one.
    #[error(
        "this store was opened by process {0}, which this process was forked from: a forked child cannot use the \
         parent's store (it would write over the parent's records); open it in the child once the parent closed it"
    )]
    Forked(u32),

    /// The disk holding the store is fuller than `disk_space_warning_level_ratio` (RocketMQ's DISK_FULL running
    /// flag, status `SERVICE_NOT_AVAILABLE`): puts are refused, nothing was written, until cleanup brings the
    /// disk below the ratio again.
    #[error(
        "the disk of {path} is {used_percent}% used, over the warning level of {warning_percent}% \
         (disk_space_warning_level_ratio): puts are refused until cleanup or you free space; nothing was written"
    )]
    DiskSpaceWarning { path: PathBuf, used_percent: u32, warning_percent: u32 },

    /// A read-only view's store was deleted and made again (or its commitlog directory replaced) under it: its
    /// mapped files and queues are the old store's, which must not be read against the new one's log.
    #[error("{0} was replaced under this read-only view (its commitlog directory is another one): open it again")]
    Replaced(PathBuf),

    /// A flush failed earlier; the store refuses writes because durability can no longer be promised.
    #[error("the store is poisoned after a failed flush ({0}); reopen it to recover")]
    Poisoned(String),
}

impl Error {
    /// Wraps an `io::Error` with the path it concerns; a full disk (ENOSPC, EDQUOT) becomes [`Error::DiskFull`].
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        match source.raw_os_error() {
            Some(libc::ENOSPC) => {
                let path = path.into();
                let inodes = no_free_inodes(&path);
                Error::DiskFull { path, needed: None, inodes }
            }
            Some(libc::EDQUOT) => Error::DiskFull { path: path.into(), needed: None, inodes: false },
            Some(libc::EMFILE) => {
                let limit = crate::mmap::open_file_limit().map_or_else(String::new, |n| format!(" ({n})"));
                let why = format!(
                    "{source}: a store keeps each of its files open (commitlog segments, consume-queue and index \
                     files), more than this process may{limit}; raise the limit (`ulimit -n`, LimitNOFILE= for a \
                     systemd service) and open it again"
                );
                Error::Io { path: path.into(), source: std::io::Error::new(source.kind(), why) }
            }
            _ => Error::Io { path: path.into(), source },
        }
    }

    /// [`Error::DiskFull`] for claiming `needed` bytes of `path`.
    pub fn disk_full(path: impl Into<PathBuf>, needed: u64) -> Self {
        Error::DiskFull { path: path.into(), needed: Some(needed), inodes: false }
    }

    /// The `PutMessageStatus` RocketMQ would report for this failure of a put, if it is one.
    pub fn put_status(&self) -> Option<PutMessageStatus> {
        match self {
            Error::InvalidTopic { .. }
            | Error::IllegalMessage(_)
            | Error::MessageTooLarge(_)
            | Error::InvalidProperty { .. }
            | Error::InvalidHost(_) => Some(PutMessageStatus::MessageIllegal),
            Error::PropertiesTooLarge { .. } => Some(PutMessageStatus::PropertiesSizeExceeded),
            Error::Closed
            | Error::Forked(_)
            | Error::Replaced(_)
            | Error::Poisoned(_)
            | Error::ReadOnly(_)
            | Error::DiskSpaceWarning { .. } => Some(PutMessageStatus::ServiceNotAvailable),
            Error::Io { .. } | Error::DiskFull { .. } => Some(PutMessageStatus::CreateMappedFileFailed),
            _ => None,
        }
    }
}

fn disk_full_text(path: &Path, needed: Option<u64>, inodes: bool) -> String {
    let path = path.display();
    if inodes {
        return format!(
            "no free inodes left on the filesystem of {path} (it holds as many files as it can; `df -i` shows it, \
             `df -h` may show free space); nothing was written: delete files, or give the store a filesystem with \
             more inodes, and retry"
        );
    }
    let needed = needed.map(|n| format!(" ({n} bytes needed)")).unwrap_or_default();
    format!("no space left on the device for {path}{needed}; nothing was written: free space and retry")
}

/// Whether the filesystem holding `path` (or its nearest existing parent) has no free inodes, so that ENOSPC
/// on creating a file there means no inode rather than no space. A filesystem that does not count inodes
/// (btrfs reports 0 of 0) never has none left.
fn no_free_inodes(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let Some(dir) = path.ancestors().find(|p| !p.as_os_str().is_empty() && p.exists()) else { return false };
        let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else { return false };
        let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
        #[allow(unsafe_code)]
        // SAFETY: `c` is a NUL-terminated path that lives across the call, and `st` is writable memory of the
        // struct's size, which statvfs fills entirely when it returns 0 (read only then).
        let st = unsafe {
            if libc::statvfs(c.as_ptr(), st.as_mut_ptr()) != 0 {
                return false;
            }
            st.assume_init()
        };
        st.f_files > 0 && st.f_favail == 0
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        false
    }
}
