//! RocketMQ's `TransientStorePool` (spec §11.5): off-heap buffers of one commitlog segment each (anonymous
//! mappings, `mlock`ed when the process may), into which puts write before the commit service copies the
//! bytes into the segment's file mapping. A buffer is borrowed for the segment being written and returned once
//! that segment is full and committed.

use std::sync::Mutex;

use memmap2::MmapMut;

use crate::error::{Error, Result};

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
        let mut available = Vec::with_capacity(size as usize);
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
