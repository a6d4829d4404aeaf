//! Expired-file cleanup (spec §14): RocketMQ's `CleanCommitLogService` and `CleanConsumeQueueService` as one
//! round function, [`MessageStore::clean_round`], that takes its clock and disk-usage probe as arguments. The
//! service (`services/clean.rs`) calls it every `clean_resource_interval` with the store's clock and probe
//! (the real ones unless a test replaced them); [`MessageStore::delete_expired_files_now`] calls it at once.
//!
//! Deletion unlinks a segment as soon as it leaves its file queue: a reader holding a view of it (a message's
//! bytes, a scanner) keeps the mapping, and so the bytes, until it drops the view. So, unlike RocketMQ, nothing
//! waits for readers (`destroy_mapped_file_interval_forcibly`) and no file is left half-destroyed
//! (`redelete_hanged_file_interval`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::store::MessageStore;

/// RocketMQ's `executeDeleteFilesManually`: the next 20 runs delete expired files whatever the hour.
pub const MANUAL_RUNS: u32 = 20;

/// The time a cleanup round sees: the wall clock in ms and the local hour of day (Java's
/// `Calendar.HOUR_OF_DAY` in the default time zone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanTime {
    /// Milliseconds since the epoch (`System.currentTimeMillis`).
    pub now_ms: i64,
    /// Local hour, 0-23.
    pub local_hour: i32,
}

impl CleanTime {
    /// The real time.
    pub fn now() -> Self {
        let now_ms = crate::commitlog::now_ms();
        CleanTime { now_ms, local_hour: local_hour(now_ms / 1000) }
    }
}

/// The local hour of `secs` since the epoch (`localtime_r`, which reads `TZ` as the JVM does on Linux).
pub fn local_hour(secs: i64) -> i32 {
    let t = secs as libc::time_t;
    // SAFETY: `tm` is plain data, zero is a valid value; `localtime_r` writes only into it and reads `t`.
    #[allow(unsafe_code)]
    let hour = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            return 0;
        }
        tm.tm_hour
    };
    hour
}

/// `UtilAll.getDiskPartitionSpaceUsedPercent(path)`: the used fraction of the filesystem holding `path`,
/// `ceil(100 * used / (used + usable)) / 100` with `used = total - free` and `usable` what an unprivileged
/// user may still claim (statvfs `f_bavail`); -1 when the path does not exist or the call fails.
pub fn disk_used_ratio(path: &Path) -> f64 {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else { return -1.0 };
    // SAFETY: `st` is plain data; statvfs reads the NUL-terminated path and writes only into `st`.
    #[allow(unsafe_code)]
    let st = unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut st) != 0 {
            return -1.0;
        }
        st
    };
    let frsize = st.f_frsize as u128;
    let (total, free, usable) =
        (st.f_blocks as u128 * frsize, st.f_bfree as u128 * frsize, st.f_bavail as u128 * frsize);
    if total == 0 {
        return -1.0;
    }
    let used = total - free.min(total);
    let entire = used + usable;
    if entire == 0 {
        return -1.0;
    }
    let round = u128::from((used * 100) % entire != 0);
    ((used * 100) / entire + round) as f64 / 100.0
}

/// The disk-usage probe: the used fraction (0.0-1.0, -1 unknown) of the filesystem holding a path.
pub type UsageProbe = Arc<dyn Fn(&Path) -> f64 + Send + Sync>;
/// The clock a cleanup round reads.
pub type CleanClock = Arc<dyn Fn() -> CleanTime + Send + Sync>;

/// Cleanup state kept by the store.
#[derive(Default)]
pub struct CleanState {
    /// Runs left that delete whatever the hour (`manualDeleteFileSeveralTimes`).
    manual_runs: AtomicU32,
    /// RocketMQ's DISK_FULL running flag: set while the disk is over the warning ratio; puts are refused.
    disk_full: AtomicBool,
    /// Used percent when the flag was set, for the put error.
    disk_full_percent: AtomicU32,
    /// `lastPhysicalMinOffset` of `CleanConsumeQueueService`.
    last_physical_min: AtomicI64,
    /// Totals, for `service_stats` readers and tests.
    deleted_commitlog: AtomicU64,
    deleted_consume_queue: AtomicU64,
    /// One round at a time (the service and a direct call).
    round: Mutex<()>,
    probe: Mutex<Option<UsageProbe>>,
    clock: Mutex<Option<CleanClock>>,
}

impl std::fmt::Debug for CleanState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CleanState")
            .field("manual_runs", &self.manual_runs)
            .field("disk_full", &self.disk_full)
            .finish_non_exhaustive()
    }
}

/// Why a round deleted commitlog segments (several may hold).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CleanReasons {
    /// The local hour is one of `delete_when`'s.
    pub time: bool,
    /// The disk is over one of the ratios (`isSpaceToDelete`).
    pub space: bool,
    /// Over the forced-cleaning or warning ratio: segments go whether expired or not (`cleanImmediately`).
    pub immediately: bool,
    /// A manual run (`delete_expired_files`, `delete_expired_files_now`).
    pub manual: bool,
}

/// What one cleanup round did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CleanReport {
    /// Why it ran (all false: nothing was due, nothing deleted).
    pub reasons: CleanReasons,
    /// Commitlog segments deleted, oldest first.
    pub commitlog: Vec<PathBuf>,
    /// Consume-queue files deleted.
    pub consume_queue: Vec<PathBuf>,
    /// Index files deleted (unlinked once no query reads them).
    pub index: Vec<PathBuf>,
    /// The commitlog min offset after the round.
    pub min_offset: u64,
    /// The used fraction of the commitlog's disk the round saw (-1 unknown).
    pub disk_used_ratio: f64,
}

impl MessageStore {
    fn clean(&self) -> &CleanState {
        &self.clean
    }

    /// Replaces the disk-usage probe the cleanup service uses (default: [`disk_used_ratio`]). For tests.
    pub fn set_clean_usage_probe(&self, probe: Option<UsageProbe>) {
        *self.clean().probe.lock().unwrap_or_else(|p| p.into_inner()) = probe;
    }

    /// Replaces the clock the cleanup service uses (default: [`CleanTime::now`]). For tests.
    pub fn set_clean_clock(&self, clock: Option<CleanClock>) {
        *self.clean().clock.lock().unwrap_or_else(|p| p.into_inner()) = clock;
    }

    /// The clock in force.
    pub fn clean_time(&self) -> CleanTime {
        let clock = self.clean().clock.lock().unwrap_or_else(|p| p.into_inner()).clone();
        clock.map_or_else(CleanTime::now, |c| c())
    }

    /// The used fraction of `path`'s disk by the probe in force.
    pub fn clean_usage(&self, path: &Path) -> f64 {
        let probe = self.clean().probe.lock().unwrap_or_else(|p| p.into_inner()).clone();
        probe.map_or_else(|| disk_used_ratio(path), |p| p(path))
    }

    /// `executeDeleteFilesManually`: the next [`MANUAL_RUNS`] runs of the cleanup service delete expired
    /// segments whatever the hour, and the service is woken for the first. Returns at once.
    pub fn delete_expired_files(&self) -> Result<()> {
        self.check_writable()?;
        self.clean().manual_runs.store(MANUAL_RUNS, Ordering::Release);
        self.services().wakeup(super::services::clean::NAME);
        Ok(())
    }

    /// Manual runs left.
    pub fn manual_clean_runs(&self) -> u32 {
        self.clean().manual_runs.load(Ordering::Acquire)
    }

    /// One cleanup round now, as a manual run (expired segments go whatever the hour; the space rules apply as
    /// in every round), with the store's clock and probe, pausing as configured. Returns what it deleted.
    pub fn delete_expired_files_now(&self) -> Result<CleanReport> {
        let time = self.clean_time();
        self.clean_round(time, &|p| self.clean_usage(p), &std::thread::sleep, true)
    }

    /// Whether the disk is over the warning ratio (RocketMQ's DISK_FULL flag): puts are refused.
    pub fn is_disk_full(&self) -> bool {
        self.clean().disk_full.load(Ordering::Acquire)
    }

    /// Errors with [`Error::DiskSpaceWarning`] while the DISK_FULL flag is set (checked by every put).
    pub(crate) fn check_disk_space(&self) -> Result<()> {
        if !self.is_disk_full() {
            return Ok(());
        }
        Err(Error::DiskSpaceWarning {
            path: self.commitlog.queue().dir().to_owned(),
            used_percent: self.clean().disk_full_percent.load(Ordering::Acquire),
            warning_percent: (self.config.clean.warning_ratio() * 100.0).round() as u32,
        })
    }

    /// Segments deleted by cleanup since the store opened: (commitlog, consume queue).
    pub fn deleted_file_counts(&self) -> (u64, u64) {
        let c = self.clean();
        (c.deleted_commitlog.load(Ordering::Relaxed), c.deleted_consume_queue.load(Ordering::Relaxed))
    }

    /// One round of `CleanCommitLogService.run` then `CleanConsumeQueueService.run` at time `time`, with the
    /// disk-usage probe `usage` and `pause` for the configured pauses between deletions. `manual_now` counts
    /// this round as manual without using up a manual run.
    pub fn clean_round(
        &self,
        time: CleanTime,
        usage: &dyn Fn(&Path) -> f64,
        pause: &dyn Fn(Duration),
        manual_now: bool,
    ) -> Result<CleanReport> {
        let _one = self.wait_clean_round();
        self.check_writable()?;
        let mut report = self.clean_commitlog(time, usage, pause, manual_now)?;
        self.clean_consume_queues(pause, &mut report)?;
        report.min_offset = self.commitlog.min_offset();
        Ok(report)
    }

    /// Waits for a cleanup round in progress (a direct call's; `close` stops the service first) and keeps the
    /// next from starting while the guard lives: `close` holds it so no file is deleted once the store closed.
    pub(crate) fn wait_clean_round(&self) -> std::sync::MutexGuard<'_, ()> {
        self.clean().round.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `isSpaceToDelete`: (delete, clean immediately), setting or clearing the DISK_FULL flag; the used ratio.
    fn space_to_delete(&self, usage: &dyn Fn(&Path) -> f64) -> (bool, bool, f64) {
        let cfg = &self.config.clean;
        let (warning, forcibly) = (cfg.warning_ratio(), cfg.forcibly_ratio());
        let state = self.clean();
        // Over the warning ratio: the DISK_FULL flag (puts refused); over either: delete at once.
        let over = |ratio: f64| {
            if ratio > warning {
                state.disk_full_percent.store((ratio * 100.0).round().max(0.0) as u32, Ordering::Release);
                state.disk_full.store(true, Ordering::Release);
                return true;
            }
            ratio > forcibly
        };
        let physic = usage(self.commitlog.queue().dir());
        if over(physic) {
            return (true, true, physic);
        }
        state.disk_full.store(false, Ordering::Release);
        let logics = usage(&self.root.join("consumequeue"));
        if over(logics) {
            return (true, true, physic);
        }
        state.disk_full.store(false, Ordering::Release);
        let max_used = cfg.max_used_ratio();
        let delete = physic < 0.0 || physic > max_used || logics < 0.0 || logics > max_used;
        (delete, false, physic)
    }

    /// `CleanCommitLogService.deleteExpiredFiles` + `deleteExpiredFileByTime`.
    fn clean_commitlog(
        &self,
        time: CleanTime,
        usage: &dyn Fn(&Path) -> f64,
        pause: &dyn Fn(Duration),
        manual_now: bool,
    ) -> Result<CleanReport> {
        let cfg = &self.config.clean;
        let mut report = CleanReport::default();
        let time_up = cfg.delete_hours()?.contains(&time.local_hour);
        let (space, immediately, ratio) = self.space_to_delete(usage);
        report.disk_used_ratio = ratio;
        let state = self.clean();
        let manual = manual_now
            || state.manual_runs.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1)).is_ok();
        report.reasons = CleanReasons { time: time_up, space, immediately, manual };
        if !(time_up || space || manual) {
            return Ok(report);
        }
        let clean_at_once = cfg.clean_file_forcibly_enable && immediately;
        let reserved = cfg.reserved_ms();
        let queue = self.commitlog.queue();
        let files = queue.files();
        let candidates = files.len().saturating_sub(1);
        for (i, file) in files.iter().take(candidates).enumerate() {
            let expired = clean_at_once || {
                let modified = mtime_ms(file.path())?;
                time.now_ms >= modified.saturating_add(reserved)
            };
            if !expired {
                break;
            }
            // Never a segment holding records not dispatched yet (a backlog, or dispatch blocked by a full disk,
            // when the forced clean deletes whatever its age): their messages would never reach their queues,
            // and the next message of each queue would be filed at a lower queue offset than its record's.
            if file.end() > self.reput_offset.load(Ordering::Acquire) {
                break;
            }
            // The snapshot's first file is the queue's first: cleanup is the only remover of leading files.
            match queue.first() {
                Some(first) if first.start() == file.start() => {}
                _ => break,
            }
            let Some(gone) = queue.delete_first()? else { break };
            state.deleted_commitlog.fetch_add(1, Ordering::Relaxed);
            report.commitlog.push(gone.path().to_owned());
            if report.commitlog.len() >= cfg.delete_file_batch_max as usize {
                break;
            }
            if cfg.delete_commit_log_files_interval > 0 && i + 1 < candidates {
                pause(Duration::from_millis(cfg.delete_commit_log_files_interval));
            }
        }
        Ok(report)
    }

    /// `CleanConsumeQueueService.deleteExpiredFiles`: when the commitlog min offset rose since the last run,
    /// every consume queue deletes its files wholly below it and corrects its min offset, then the index.
    fn clean_consume_queues(&self, pause: &dyn Fn(Duration), report: &mut CleanReport) -> Result<()> {
        let min = self.commitlog.min_offset() as i64;
        let state = self.clean();
        if min <= state.last_physical_min.load(Ordering::Acquire) {
            return Ok(());
        }
        state.last_physical_min.store(min, Ordering::Release);
        let interval = self.config.clean.delete_consume_queue_files_interval;
        for cq in self.queues.all() {
            let deleted = cq.delete_expired_files(min)?;
            cq.correct_min_offset(min);
            if !deleted.is_empty() {
                state.deleted_consume_queue.fetch_add(deleted.len() as u64, Ordering::Relaxed);
                report.consume_queue.extend(deleted);
                if interval > 0 {
                    pause(Duration::from_millis(interval));
                }
            }
        }
        if let Some(index) = self.index() {
            let before = index.file_paths();
            if index.delete_expired(min) > 0 {
                let after = index.file_paths();
                report.index.extend(before.into_iter().filter(|p| !after.contains(p)));
            }
        }
        Ok(())
    }
}

/// `File.lastModified()` in ms.
fn mtime_ms(path: &Path) -> Result<i64> {
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).map_err(|e| Error::io(path, e))?;
    Ok(match modified.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX),
    })
}
