//! The I/O fault seam: named points in the core where tests make an operating-system call fail.
//!
//! | point      | where it is checked                                                                  |
//! |------------|--------------------------------------------------------------------------------------|
//! | `Flush`    | every msync of a mapped file ([`crate::mmap::MappedFile`] `flush` / `flush_range`)   |
//! | `Fsync`    | every fsync / fdatasync: lock, abort, checkpoint, each new mapped file, directories  |
//! | `Allocate` | every claim of disk space (`posix_fallocate` of segments, queue, index, checkpoint)  |
//! | `Write`    | every write to a file: a copy into a mapping, and the pwrite of the marker files     |
//!
//! A fault is armed with [`inject`]: the first `after` matching checks pass, the next `times` fail with
//! `errno` (before the call is made, so nothing is written), then the fault disarms itself. A fault may be
//! limited to paths under a prefix, so tests running in parallel in one process do not hit each other's
//! stores. An injected `ENOSPC` surfaces exactly as a real one: [`crate::Error::DiskFull`].
//!
//! A fault may stall instead of failing ([`Fault::stalled`]): a check it fires on blocks until the fault is
//! disarmed, then passes (a slow disk, for the SYNC_FLUSH timeout path).
//!
//! Cost when nothing is armed: one relaxed atomic load per check, then a predictable branch.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

/// A place in the core where a fault can be injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultPoint {
    /// Flushing a mapped range to disk (msync).
    Flush,
    /// Forcing a file to disk (fsync / fdatasync).
    Fsync,
    /// Claiming disk space for a file (posix_fallocate).
    Allocate,
    /// Writing bytes into a file (through its mapping or with pwrite).
    Write,
}

impl FaultPoint {
    /// Every point, in declaration order.
    pub const ALL: [FaultPoint; 4] = [FaultPoint::Flush, FaultPoint::Fsync, FaultPoint::Allocate, FaultPoint::Write];

    /// The point's name as the Python API spells it.
    pub fn name(self) -> &'static str {
        match self {
            FaultPoint::Flush => "flush",
            FaultPoint::Fsync => "fsync",
            FaultPoint::Allocate => "allocate",
            FaultPoint::Write => "write",
        }
    }

    /// The point called `name` (see [`FaultPoint::name`]).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// One armed fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// Where it fires.
    pub point: FaultPoint,
    /// Matching checks that pass before the first failure.
    pub after: u64,
    /// Failures before the fault disarms itself; `None`: until [`disarm`].
    pub times: Option<u64>,
    /// The `errno` of the injected error (e.g. `libc::EIO`, `libc::ENOSPC`).
    pub errno: i32,
    /// Only checks on paths under this prefix match; `None`: every path.
    pub path_prefix: Option<PathBuf>,
    /// Instead of failing, a check it fires on waits until the fault is disarmed, then passes.
    pub stall: bool,
}

impl Fault {
    /// A fault at `point` failing the very next matching check once with `errno`, on any path.
    pub fn new(point: FaultPoint, errno: i32) -> Self {
        Fault { point, after: 0, times: Some(1), errno, path_prefix: None, stall: false }
    }

    /// A fault at `point` that blocks every matching check until it is disarmed ([`disarm`],
    /// [`disarm_under`]), then lets it pass: the operation is slow, not failed.
    pub fn stalled(point: FaultPoint) -> Self {
        Fault { point, after: 0, times: None, errno: 0, path_prefix: None, stall: true }
    }

    /// Limits the fault to paths under `prefix`.
    pub fn under(mut self, prefix: impl Into<PathBuf>) -> Self {
        self.path_prefix = Some(prefix.into());
        self
    }

    /// Lets `after` matching checks pass first.
    pub fn after(mut self, after: u64) -> Self {
        self.after = after;
        self
    }

    /// Fails `times` checks (`None`: every check until disarmed).
    pub fn times(mut self, times: Option<u64>) -> Self {
        self.times = times;
        self
    }
}

#[derive(Debug)]
struct Armed {
    /// Tells this arming apart from later ones (a stalled check waits for its own to go).
    id: u64,
    fault: Fault,
    /// Matching checks seen so far.
    seen: u64,
    /// Failures injected so far.
    fired: u64,
}

/// Bit `p` set: at least one fault is armed at point `p`.
static ARMED: AtomicU8 = AtomicU8::new(0);
static FAULTS: Mutex<Vec<Armed>> = Mutex::new(Vec::new());
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn faults() -> std::sync::MutexGuard<'static, Vec<Armed>> {
    FAULTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn publish(list: &[Armed]) {
    let bits = list.iter().fold(0u8, |b, a| b | a.fault.point.bit());
    ARMED.store(bits, Ordering::Relaxed);
}

/// Arms `fault`, replacing a fault armed earlier at the same point with the same path prefix.
pub fn inject(fault: Fault) {
    let mut list = faults();
    list.retain(|a| !(a.fault.point == fault.point && a.fault.path_prefix == fault.path_prefix));
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    list.push(Armed { id, fault, seen: 0, fired: 0 });
    publish(&list);
}

/// Disarms every fault at `point` (every fault when `None`). Returns how many were armed.
pub fn disarm(point: Option<FaultPoint>) -> usize {
    let mut list = faults();
    let before = list.len();
    list.retain(|a| point.is_some_and(|p| a.fault.point != p));
    publish(&list);
    before - list.len()
}

/// Disarms the faults limited to paths under `prefix` (each Rust test cleans up its own).
pub fn disarm_under(prefix: &Path) -> usize {
    let mut list = faults();
    let before = list.len();
    list.retain(|a| a.fault.path_prefix.as_deref() != Some(prefix));
    publish(&list);
    before - list.len()
}

/// Failures (or stalls) fired so far by the faults armed under `prefix`: a test waits on it to know a stalled
/// check has been reached.
pub fn fired_under(prefix: &Path) -> u64 {
    faults().iter().filter(|a| a.fault.path_prefix.as_deref() == Some(prefix)).map(|a| a.fired).sum()
}

/// Whether any fault is armed at `point`.
pub fn is_armed(point: FaultPoint) -> bool {
    ARMED.load(Ordering::Relaxed) & point.bit() != 0
}

/// Checks `point` for `path`: `Err` with the armed errno when a fault fires, before the caller's I/O call.
#[inline]
pub fn check(point: FaultPoint, path: &Path) -> std::io::Result<()> {
    if ARMED.load(Ordering::Relaxed) & point.bit() == 0 {
        return Ok(());
    }
    check_armed(point, path)
}

#[cold]
fn check_armed(point: FaultPoint, path: &Path) -> std::io::Result<()> {
    let mut list = faults();
    let Some(i) = list
        .iter()
        .position(|a| a.fault.point == point && a.fault.path_prefix.as_deref().is_none_or(|p| path.starts_with(p)))
    else {
        return Ok(());
    };
    let Some(armed) = list.get_mut(i) else { return Ok(()) };
    armed.seen += 1;
    if armed.seen <= armed.fault.after {
        return Ok(());
    }
    armed.fired += 1;
    if armed.fault.stall {
        let id = armed.id;
        drop(list);
        while faults().iter().any(|a| a.id == id) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        return Ok(());
    }
    let errno = armed.fault.errno;
    if armed.fault.times.is_some_and(|t| armed.fired >= t) {
        list.remove(i);
        publish(&list);
    }
    Err(std::io::Error::from_raw_os_error(errno))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_times_and_prefix() {
        let dir = PathBuf::from("/fault-unit-test/a");
        let other = Path::new("/fault-unit-test/b/x");
        let inside = dir.join("x");
        inject(Fault::new(FaultPoint::Write, libc::EIO).under(&dir).after(2).times(Some(2)));
        assert!(check(FaultPoint::Write, other).is_ok(), "a path outside the prefix never fails");
        assert!(check(FaultPoint::Flush, &inside).is_ok(), "another point never fails");
        assert!(check(FaultPoint::Write, &inside).is_ok());
        assert!(check(FaultPoint::Write, &inside).is_ok());
        for _ in 0..2 {
            let e = check(FaultPoint::Write, &inside).expect_err("armed");
            assert_eq!(e.raw_os_error(), Some(libc::EIO));
        }
        assert!(check(FaultPoint::Write, &inside).is_ok(), "disarmed after `times` failures");
        assert_eq!(disarm_under(&dir), 0);
        inject(Fault::new(FaultPoint::Allocate, libc::ENOSPC).under(&dir).times(None));
        for _ in 0..5 {
            assert!(check(FaultPoint::Allocate, &inside).is_err());
        }
        assert_eq!(disarm_under(&dir), 1);
        assert!(check(FaultPoint::Allocate, &inside).is_ok());
        assert_eq!(FaultPoint::from_name("fsync"), Some(FaultPoint::Fsync));
        assert_eq!(FaultPoint::from_name("nope"), None);
    }
}
