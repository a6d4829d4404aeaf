//! rmq: Apache RocketMQ's message store, byte-compatible with the Java original.
//!
//! Modules follow the on-disk file kinds: [`message`] (the commitlog record), [`mmap`] and [`file_queue`]
//! (segments), [`commitlog`], [`checkpoint`] (marker files), and [`store`] (the put and read paths).
//! The Python bindings live in `py` behind the `python` feature; nothing else depends on them.

pub mod checkpoint;
pub mod columnar;
pub mod commitlog;
pub mod config;
pub mod consume_queue;
pub mod error;
pub mod fault;
pub mod file_queue;
pub mod fork;
pub mod index;
pub mod java;
pub mod message;
pub mod mmap;
pub mod offsets;
pub mod store;
pub mod sync_record;

#[cfg(feature = "python")]
mod py;

pub use config::StoreConfig;
pub use error::{Error, Result};
pub use store::{MessageStore, PutMessage, PutResult};

/// Seams for unit tests that provoke a race: code another process would run at a given instant.
#[cfg(test)]
pub(crate) mod race {
    /// A thread-local slot for the code, `F` a `dyn FnMut(..)`; empty outside the test that sets it.
    pub(crate) type Hook<F> = std::cell::RefCell<Option<Box<F>>>;
}
