//! Fork awareness: a store belongs to the process that opened it.
//!
//! `fork(2)` copies a process with one thread, the one that forked: the child has the parent's mappings of the
//! store (shared with the parent: a write lands in the parent's segments), its memory (the write position, the
//! locks, possibly held by a thread that does not exist in the child) and its Python objects, but none of its
//! service threads and none of its `fcntl` lock. A child that used the store, or closed it on exit (dropping
//! its copy of the objects), would write over the parent's next records, remove the parent's `abort` marker and
//! the segment made ahead of the parent's writer. So each store and mapped file remembers the fork generation
//! it was made in ([`generation`]), a counter a `pthread_atfork` child handler moves on; a store whose
//! generation is not the process's refuses every call ([`crate::error::Error::Forked`]) and its close and drops
//! touch nothing. A child opens the store again if it wants one (after the parent closed it: the lock).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

static GENERATION: AtomicU64 = AtomicU64::new(0);
static REGISTER: Once = Once::new();

extern "C" fn in_child() {
    GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// The process's fork generation: 0 in the process that first asked, moved on in every child forked since.
pub fn generation() -> u64 {
    REGISTER.call_once(|| {
        #[allow(unsafe_code)]
        // SAFETY: registers a handler that only increments an atomic, which is async-signal-safe as the child of
        // a fork of a multithreaded process requires; no pointer or memory is passed.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
        debug_assert_eq!(rc, 0, "pthread_atfork");
    });
    GENERATION.load(Ordering::Relaxed)
}

/// Whether something made in `born` (a [`generation`]) belongs to a process this one was forked from.
pub fn forked_since(born: u64) -> bool {
    GENERATION.load(Ordering::Relaxed) != born
}
