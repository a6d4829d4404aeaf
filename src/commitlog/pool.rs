//! RocketMQ's `TransientStorePool` (spec §11.5): off-heap buffers of one commitlog segment each (anonymous
//! mappings, `mlock`ed when the process may), into which puts write before the commit service copies the
//! bytes into the segment's file mapping. A buffer is borrowed for the segment being written and returned once
//! that segment is full and committed.

use std::sync::Mutex;

use memmap2::MmapMut;

use crate::error::{Error, Result};

/// The machine's physical memory in bytes, if the system says.
fn physical_memory() -> Option<u64> {
    #[allow(unsafe_code)]
    // SAFETY: `sysconf` reads a system value; no memory is passed.
    let (pages, page) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
    let (pages, page) = (u64::try_from(pages).ok()?, u64::try_from(page).ok()?);
    pages.checked_mul(page)
}

/// The pool of write buffers.
#[derive(Debug)]
pub struct TransientStorePool {
    available: Mutex<Vec<MmapMut>>,
    size: u32,
    buffer_len: usize,
    /// Why a buffer could not be locked in memory (e.g. `RLIMIT_MEMLOCK`), if one could not: the pool works
    /// unlocked then, its pages may be swapped out.
    lock_error: Option<String>,
}

impl TransientStorePool {
    /// `size` buffers of `buffer_len` bytes each, each locked in memory if possible.
    pub fn new(size: u32, buffer_len: u64) -> Result<Self> {
        let len = usize::try_from(buffer_len)
            .map_err(|_| Error::InvalidConfig(format!("a transient store buffer of {buffer_len} bytes")))?;
        // Each buffer is a whole segment held in memory for the store's life (locked when it may be): a pool
        // larger than the machine's memory can never be made, and refusing it beats an out-of-memory abort.
        let total = u64::from(size).saturating_mul(buffer_len);
        if let Some(memory) = physical_memory().filter(|&m| total > m) {
            return Err(Error::InvalidConfig(format!(
                "transient_store_pool_size ({size}) buffers of one segment ({buffer_len} bytes) need {total} bytes, \
                 more than this machine's memory ({memory} bytes)"
            )));
        }
        let mut available = Vec::new();
        available.try_reserve_exact(size as usize).map_err(|_| {
            Error::InvalidConfig(format!("transient_store_pool_size ({size}) buffers cannot be listed in memory"))
        })?;
        let mut lock_error = None;
        for _ in 0..size {
            let map = MmapMut::map_anon(len)
                .map_err(|e| Error::Io { path: "transient store pool (anonymous mapping)".into(), source: e })?;
            if lock_error.is_none() {
                if let Err(e) = map.lock() {
                    lock_error = Some(format!("mlock of {len} bytes failed ({e}); the pool works unlocked"));
                }
            }
            available.push(map);
        }
        Ok(TransientStorePool { available: Mutex::new(available), size, buffer_len: len, lock_error })
    }

    /// Takes a buffer; `None` when every buffer is in use.
    pub(crate) fn borrow(&self) -> Option<MmapMut> {
        self.available.lock().unwrap_or_else(|p| p.into_inner()).pop()
    }

    /// Gives a buffer back.
    pub(crate) fn give_back(&self, buffer: MmapMut) {
        self.available.lock().unwrap_or_else(|p| p.into_inner()).push(buffer);
    }

    /// Buffers not in use.
    pub fn available(&self) -> usize {
        self.available.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Buffers in the pool.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Bytes per buffer (the segment size).
    pub fn buffer_len(&self) -> usize {
        self.buffer_len
    }

    /// Why the buffers are not locked in memory, if they are not.
    pub fn lock_error(&self) -> Option<&str> {
        self.lock_error.as_deref()
    }
}
