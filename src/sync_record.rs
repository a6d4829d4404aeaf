//! The sync-recording seam: tests record what each sync made durable, stop the clock just before any sync or
//! write ("the power fails here"), and build the file trees a power loss can leave at that instant.
//!
//! **The power-loss model** (DESIGN's crash model; `tests/power_loss.rs` runs it):
//! - The unit of loss is a 4 KiB page ([`PAGE`]). A page of a file holds, after the power loss, either its
//!   durable version (what the last sync covering it wrote, zeros when none did: every file rmq creates is
//!   allocated zero-filled) or its newest version (the page cache at the instant of the loss), chosen
//!   independently for every page of every file: write-back reaches the disk in any order and any subset.
//! - A sync of a file makes its content durable: an msync of a mapped range ([`crate::mmap::MappedFile`]
//!   `flush_range` / `flush`) the pages overlapping the range, an fsync / fdatasync the whole file. The file's
//!   length becomes durable with the sync too; before the first one it is the newest length, 0, or a length in
//!   between (a file whose space was being claimed: ext4's `fallocate` grows the length in steps, each in a
//!   journal transaction of its own).
//! - A sync of a file does not make its directory entry durable. Creating, removing or renaming an entry
//!   becomes durable when its directory is synced ([`crate::mmap::sync_dir`]); until then the entry may be found
//!   in its old state or its new one (a removed file with its durable content; a created one, per page, as any
//!   file). An entry whose directory is missing from the image is missing too.
//! - Pages are written whole (no torn sector inside a page) and bytes read back are the bytes written (no bit
//!   rot: that is damage, the damage matrix's subject).
//!
//! Snapshots are taken just before each sync call and kept only if it succeeds, so the durable state recorded is
//! never ahead of the disk's (bytes written while the sync runs may reach the disk too; the model does not count
//! on them). Events are numbered from 1 under a recorded root: every sync, and every write (a copy into a
//! mapping, a commit word, a `pwrite`). A cut at event `n` captures the durable state and the content of every
//! file at that instant, on the thread that is about to make event `n`, after every copy other threads are
//! making has finished: pages are written whole (a copy torn in the middle is what a killed process leaves, the
//! kill suite's subject). Snapshots for syncs are taken the same way.
//!
//! Cost when nothing is recorded: one relaxed atomic load per sync or write.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, RwLock, RwLockReadGuard};

/// The unit of loss: every page of every file is lost or kept on its own.
pub const PAGE: usize = 4096;

/// What the syncs recorded so far made durable of one path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Durable {
    /// The directory entry: `Some(true)` durably present, `Some(false)` durably absent, `None` never seen by a
    /// directory sync (absent after a power loss unless the newest state wins).
    pub entry: Option<bool>,
    /// The path is a directory.
    pub is_dir: bool,
    /// The file length made durable by its last sync (`None`: never synced).
    pub len: Option<u64>,
    /// Page number → (sync number, the page's content then; shorter at the end of the file).
    pub pages: BTreeMap<u64, (u64, Vec<u8>)>,
}

/// The state at one cut: what was durable, and what the page cache held.
#[derive(Debug, Clone)]
pub struct Capture {
    /// The power fails just before this event (1-based count of syncs and writes under the recorded root).
    pub at: u64,
    /// Durable state by path.
    pub durable: BTreeMap<PathBuf, Durable>,
    /// Every path under the root at the cut: a file with its content, or a directory (`None`).
    pub current: BTreeMap<PathBuf, Option<Vec<u8>>>,
}

struct Recording {
    root: PathBuf,
    events: u64,
    /// Syncs begun, by path.
    syncs: BTreeMap<PathBuf, u64>,
    durable: BTreeMap<PathBuf, Durable>,
    cut: Box<dyn Fn(u64) -> bool + Send>,
    captures: Vec<Capture>,
}

static ON: AtomicBool = AtomicBool::new(false);
static RECORDINGS: Mutex<Vec<Recording>> = Mutex::new(Vec::new());
/// Held shared by every write while recording, exclusively by captures and snapshots: they see no copy half done.
static COPIES: RwLock<()> = RwLock::new(());

fn recordings() -> std::sync::MutexGuard<'static, Vec<Recording>> {
    RECORDINGS.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Starts recording the syncs and writes of every path under `root` (which must exist and be durable, e.g. a
/// fresh temporary directory), capturing the state just before each event whose number `n` (from 1) has
/// `cut(n)`.
/// Replaces an earlier recording of the same root.
pub fn record(root: &Path, cut: impl Fn(u64) -> bool + Send + 'static) {
    let mut list = recordings();
    list.retain(|r| r.root != root);
    let mut durable = BTreeMap::new();
    durable.insert(root.to_owned(), Durable { entry: Some(true), is_dir: true, ..Durable::default() });
    list.push(Recording {
        root: root.to_owned(),
        events: 0,
        syncs: BTreeMap::new(),
        durable,
        cut: Box::new(cut),
        captures: Vec::new(),
    });
    ON.store(true, Ordering::Relaxed);
}

/// Stops recording `root`. Returns its captures, in event order, and how many events were recorded.
pub fn stop(root: &Path) -> (Vec<Capture>, u64) {
    let mut list = recordings();
    let Some(i) = list.iter().position(|r| r.root == root) else { return (Vec::new(), 0) };
    let r = list.remove(i);
    ON.store(!list.is_empty(), Ordering::Relaxed);
    (r.captures, r.events)
}

/// How many events (syncs and writes) have been recorded under `root` so far.
pub fn events(root: &Path) -> u64 {
    recordings().iter().find(|r| r.root == root).map_or(0, |r| r.events)
}

/// How many syncs (msync, fsync, directory syncs) of paths under `under` were begun so far in the recording of
/// `root` (including any that then failed): e.g. the msyncs of the commitlog, `under` = `<root>/commitlog`.
pub fn syncs(root: &Path, under: &Path) -> u64 {
    recordings()
        .iter()
        .find(|r| r.root == root)
        .map_or(0, |r| r.syncs.iter().filter(|(p, _)| p.starts_with(under)).map(|(_, n)| n).sum())
}

/// What a sync is about to make durable.
#[derive(Debug)]
pub(crate) enum Snapshot {
    /// A file's length and the content of whole pages.
    File { len: u64, pages: Vec<(u64, Vec<u8>)> },
    /// A directory's entries (name → is a directory).
    Dir(Vec<(PathBuf, bool)>),
}

/// A snapshot waiting for its sync to succeed.
#[derive(Debug)]
pub(crate) struct Pending {
    path: PathBuf,
    seq: u64,
    snapshot: Snapshot,
}

/// Called just before a sync of `path`: counts it, takes a capture if it is a cut, and returns the snapshot
/// to [`commit`] once the sync succeeded. `None` (nothing to do) when `path` is not being recorded.
#[inline]
pub(crate) fn begin(path: &Path, snapshot: impl FnOnce() -> Snapshot) -> Option<Pending> {
    if !ON.load(Ordering::Relaxed) {
        return None;
    }
    begin_recorded(path, snapshot)
}

#[cold]
fn begin_recorded(path: &Path, snapshot: impl FnOnce() -> Snapshot) -> Option<Pending> {
    let seq = count(path)?;
    if let Some(r) = recordings().iter_mut().find(|r| path.starts_with(&r.root)) {
        *r.syncs.entry(path.to_owned()).or_default() += 1;
    }
    let _no_copies = COPIES.write().unwrap_or_else(std::sync::PoisonError::into_inner);
    Some(Pending { path: path.to_owned(), seq, snapshot: snapshot() })
}

/// Called just before a write into a file under a recorded root: counts it, and takes a capture if it is a cut.
/// While recording, the returned guard is to be held until the write is done.
#[inline]
pub(crate) fn write_point(path: &Path) -> Option<RwLockReadGuard<'static, ()>> {
    if ON.load(Ordering::Relaxed) {
        write_recorded(path)
    } else {
        None
    }
}

#[cold]
fn write_recorded(path: &Path) -> Option<RwLockReadGuard<'static, ()>> {
    count(path)?;
    Some(COPIES.read().unwrap_or_else(std::sync::PoisonError::into_inner))
}

/// Counts one event of the recording holding `path`, capturing the state if it is a cut; its number.
#[cold]
fn count(path: &Path) -> Option<u64> {
    let mut list = recordings();
    let r = list.iter_mut().find(|r| path.starts_with(&r.root))?;
    r.events += 1;
    let seq = r.events;
    if (r.cut)(seq) {
        let _no_copies = COPIES.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        let current = read_tree(&r.root);
        r.captures.push(Capture { at: seq, durable: r.durable.clone(), current });
    }
    Some(seq)
}

/// Records what a successful sync made durable.
pub(crate) fn commit(pending: Option<Pending>) {
    let Some(p) = pending else { return };
    let mut list = recordings();
    let Some(r) = list.iter_mut().find(|r| p.path.starts_with(&r.root)) else { return };
    match p.snapshot {
        Snapshot::File { len, pages } => {
            let d = r.durable.entry(p.path).or_default();
            d.len = Some(len);
            d.pages.retain(|&n, _| (n as usize) * PAGE < len as usize);
            for (n, bytes) in pages {
                match d.pages.get(&n) {
                    Some((seq, _)) if *seq > p.seq => {}
                    _ => {
                        d.pages.insert(n, (p.seq, bytes));
                    }
                }
            }
        }
        Snapshot::Dir(entries) => {
            let listed: BTreeMap<PathBuf, bool> = entries.into_iter().collect();
            for (path, d) in r.durable.iter_mut() {
                if path.parent() == Some(p.path.as_path()) && !listed.contains_key(path) {
                    d.entry = Some(false);
                }
            }
            for (path, is_dir) in listed {
                let d = r.durable.entry(path).or_default();
                d.entry = Some(true);
                d.is_dir = is_dir;
            }
        }
    }
}

/// The pages of `bytes` (a file's content from offset 0) overlapping `[pos, pos + len)`.
pub(crate) fn pages_of(bytes: &[u8], pos: usize, len: usize) -> Vec<(u64, Vec<u8>)> {
    let first = pos / PAGE;
    let end = (pos + len).min(bytes.len());
    let mut out = Vec::new();
    let mut n = first;
    while n * PAGE < end {
        let page = bytes.get(n * PAGE..((n + 1) * PAGE).min(bytes.len())).unwrap_or_default();
        out.push((n as u64, page.to_vec()));
        n += 1;
    }
    out
}

/// A whole file's snapshot read from disk (the page cache), for files written with `pwrite`.
pub(crate) fn file_snapshot(path: &Path) -> Snapshot {
    let bytes = std::fs::read(path).unwrap_or_default();
    Snapshot::File { len: bytes.len() as u64, pages: pages_of(&bytes, 0, bytes.len()) }
}

/// A directory's snapshot: its entries now.
pub(crate) fn dir_snapshot(dir: &Path) -> Snapshot {
    let entries = std::fs::read_dir(dir)
        .map(|it| it.filter_map(|e| e.ok()).map(|e| (e.path(), e.file_type().is_ok_and(|t| t.is_dir()))).collect())
        .unwrap_or_default();
    Snapshot::Dir(entries)
}

/// Every path under `root` (not `root` itself): files with their content, directories as `None`.
fn read_tree(root: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(it) = std::fs::read_dir(&d) else { continue };
        for e in it.filter_map(|e| e.ok()) {
            let path = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.insert(path.clone(), None);
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                out.insert(path, Some(bytes));
            }
        }
    }
    out
}

/// What building one image chose.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImageStats {
    /// Files written into the image.
    pub files: u64,
    /// Paths (files or directories) whose entry was not durable in its newest state and was decided randomly.
    pub entry_choices: u64,
    /// Pages whose durable and newest versions differed.
    pub page_choices: u64,
    /// Of those, pages that got their newest version.
    pub newest_pages: u64,
    /// Files never synced that got a length between 0 and their newest one.
    pub short_files: u64,
}

/// A small seeded generator (SplitMix64) so images are reproducible from their seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A fair coin.
    pub fn coin(&mut self) -> bool {
        self.next_u64() & 1 == 1
    }

    /// A number in `[0, n)` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// Writes into `dest` (an empty directory standing for `root`) one file tree a power loss at `capture` can
/// leave, choosing every undecided entry and page with `seed` (module docs: the model).
pub fn build_image(capture: &Capture, root: &Path, dest: &Path, seed: u64) -> std::io::Result<ImageStats> {
    let mut rng = Rng::new(seed);
    let mut stats = ImageStats::default();
    let paths: BTreeSet<&PathBuf> =
        capture.durable.keys().chain(capture.current.keys()).filter(|p| p.starts_with(root) && *p != root).collect();
    let mut present: BTreeSet<PathBuf> = BTreeSet::new();
    present.insert(root.to_owned());
    let none = Durable::default();
    for path in paths {
        if !path.parent().is_some_and(|p| present.contains(p)) {
            continue;
        }
        let durable = capture.durable.get(path).unwrap_or(&none);
        let current = capture.current.get(path);
        let now = current.is_some();
        let then = durable.entry.unwrap_or(false);
        let keep = if now == then {
            now
        } else {
            stats.entry_choices += 1;
            rng.coin()
        };
        if !keep {
            continue;
        }
        let rel = path.strip_prefix(root).map_err(std::io::Error::other)?;
        let target = dest.join(rel);
        let is_dir = match current {
            Some(c) => c.is_none(),
            None => durable.is_dir,
        };
        present.insert(path.clone());
        if is_dir {
            std::fs::create_dir_all(&target)?;
            continue;
        }
        let newest: Option<&[u8]> = current.and_then(|c| c.as_deref());
        let bytes = file_image(durable, newest, &mut rng, &mut stats);
        std::fs::write(&target, bytes)?;
        stats.files += 1;
    }
    Ok(stats)
}

/// One file's content after the power loss: its length, then each page durable or newest.
fn file_image(durable: &Durable, newest: Option<&[u8]>, rng: &mut Rng, stats: &mut ImageStats) -> Vec<u8> {
    let old_len = durable.len.unwrap_or(0) as usize;
    let len = match newest {
        None => old_len,
        Some(n) if n.len() == old_len => old_len,
        Some(n) if durable.len.is_none() && n.len() > PAGE && rng.below(3) == 0 => {
            // Never synced: a length on the way to the newest one, as a file whose space was being claimed
            // (ext4's `fallocate` grows the length in steps, each its own journal transaction).
            stats.short_files += 1;
            (1 + rng.below(n.len().div_ceil(PAGE) as u64 - 1) as usize) * PAGE
        }
        Some(n) => {
            if rng.coin() {
                n.len()
            } else {
                old_len
            }
        }
    };
    let mut out = vec![0u8; len];
    let mut page = 0usize;
    while page * PAGE < len {
        let range = page * PAGE..((page + 1) * PAGE).min(len);
        let mut old = vec![0u8; range.len()];
        if let Some((_, b)) = durable.pages.get(&(page as u64)) {
            let n = b.len().min(old.len());
            old[..n].copy_from_slice(&b[..n]);
        }
        let new = newest.and_then(|n| n.get(range.start..range.end.min(n.len()))).map(|b| {
            let mut v = b.to_vec();
            v.resize(range.len(), 0);
            v
        });
        let chosen = match new {
            Some(new) if new != old => {
                stats.page_choices += 1;
                if rng.coin() {
                    stats.newest_pages += 1;
                    new
                } else {
                    old
                }
            }
            _ => old,
        };
        out[range].copy_from_slice(&chosen);
        page += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(len: u64, pages: &[(u64, &[u8])]) -> Durable {
        Durable {
            entry: Some(true),
            is_dir: false,
            len: Some(len),
            pages: pages.iter().map(|(n, b)| (*n, (1, b.to_vec()))).collect(),
        }
    }

    #[test]
    fn every_page_is_durable_or_newest_and_both_occur() {
        let durable = file(3 * PAGE as u64, &[(0, &[1u8; PAGE]), (1, &[2u8; PAGE])]);
        let newest: Vec<u8> = [[1u8; PAGE], [9u8; PAGE], [9u8; PAGE]].concat();
        let mut seen = BTreeSet::new();
        for seed in 0..64 {
            let mut stats = ImageStats::default();
            let img = file_image(&durable, Some(&newest), &mut Rng::new(seed), &mut stats);
            assert_eq!(img.len(), 3 * PAGE);
            assert_eq!(&img[..PAGE], &[1u8; PAGE][..], "an unchanged page is never a choice");
            let p1 = img[PAGE];
            let p2 = img[2 * PAGE];
            assert!(p1 == 2 || p1 == 9, "page 1 is its durable or its newest version");
            assert!(p2 == 0 || p2 == 9, "page 2 was never synced: zeros or its newest version");
            assert!(img[PAGE..2 * PAGE].iter().all(|&b| b == p1), "a page is never torn");
            assert_eq!(stats.page_choices, 2);
            seen.insert((p1, p2));
        }
        assert_eq!(seen.len(), 4, "every combination of the two undecided pages occurs");
    }

    #[test]
    fn the_newest_sync_of_a_page_wins_whatever_the_commit_order() {
        let root = std::env::temp_dir().join(format!("rmq-sync-record-unit-{}", std::process::id()));
        let path = root.join("f");
        record(&root, |_| false);
        let a = begin(&path, || Snapshot::File { len: 8, pages: vec![(0, vec![1; 8])] });
        let b = begin(&path, || Snapshot::File { len: 8, pages: vec![(0, vec![2; 8])] });
        commit(b);
        commit(a);
        let d = recordings().iter().find(|r| r.root == root).and_then(|r| r.durable.get(&path).cloned());
        assert_eq!(d.and_then(|d| d.pages.get(&0).cloned()), Some((2, vec![2; 8])));
        assert_eq!(stop(&root).1, 2);
        assert!(begin(&path, || Snapshot::Dir(Vec::new())).is_none(), "nothing is recorded after stop");
    }
}
