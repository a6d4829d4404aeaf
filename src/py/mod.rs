//! PyO3 bindings: the `rmq._native` extension module. Argument conversion, GIL release, errors and
//! zero-copy buffers only; every rule lives in the core.

mod args;
mod columnar;
mod errors;
mod fault;
mod get;
mod local_offsets;
mod message;
mod offsets;
mod store;
mod topics;
mod transaction;

use pyo3::prelude::*;

/// The extension module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    message::register(m)?;
    get::register(m)?;
    store::register(m)?;
    columnar::register(m)?;
    fault::register(m)?;
    offsets::register(m)?;
    local_offsets::register(m)?;
    topics::register(m)?;
    transaction::register(m)?;
    Ok(())
}
