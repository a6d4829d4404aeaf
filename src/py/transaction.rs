//! Bindings of the transactional-message protocol (`store/transaction.rs`): ending a half message and one
//! round of the half-message check.

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::{PyBytes, PyDict, PyList};

use super::args;
use super::errors::{invalid_argument, to_py};
use super::message::PutResult;
use super::store::MessageStore;
use crate::store::transaction::{EndKind, EndTransaction};

/// Commits or rolls back the half message at `commit_log_offset` (`END_TRANSACTION`); returns
/// `(committed, op)`: the committed message's `PutResult` (None on rollback) and the op record's.
#[pyfunction]
#[pyo3(signature = (store, producer_group, commit_log_offset, tran_state_table_offset, commit, *,
    from_transaction_check=false))]
fn end_transaction(
    py: Python<'_>,
    store: &MessageStore,
    #[pyo3(from_py_with = args::text)] producer_group: PyBackedStr,
    #[pyo3(from_py_with = args::java_long)] commit_log_offset: i64,
    #[pyo3(from_py_with = args::java_long)] tran_state_table_offset: i64,
    #[pyo3(from_py_with = args::boolean)] commit: bool,
    #[pyo3(from_py_with = args::boolean)] from_transaction_check: bool,
) -> PyResult<(Option<PutResult>, PutResult)> {
    let offset = u64::try_from(commit_log_offset)
        .map_err(|_| to_py(crate::Error::Transaction(format!("commit_log_offset {commit_log_offset} is negative"))))?;
    let req = EndTransaction {
        producer_group: &producer_group,
        commit_log_offset: offset,
        tran_state_table_offset,
        kind: if commit { EndKind::Commit } else { EndKind::Rollback },
        from_transaction_check,
    };
    let inner = &store.inner;
    let r = py.detach(|| inner.end_transaction(&req)).map_err(to_py)?;
    Ok((r.committed.map(|inner| PutResult { inner }), PutResult { inner: r.op }))
}

/// One round of the half-message check from the `CID_RMQ_SYS_TRANS` offsets (None: the queue's minimum).
/// Returns a dict: `half_offset`, `op_offset` (the new offsets to commit), `checks` (a list of dicts, one
/// per half re-put for a check), `discarded` (commitlog offsets in TRANS_CHECK_MAX_TIME_TOPIC), `done`.
#[pyfunction]
#[pyo3(signature = (store, half_offset=None, op_offset=None, *, timeout_ms=None, check_max=None))]
fn transaction_check<'py>(
    py: Python<'py>,
    store: &MessageStore,
    #[pyo3(from_py_with = args::opt_java_long)] half_offset: Option<i64>,
    #[pyo3(from_py_with = args::opt_java_long)] op_offset: Option<i64>,
    #[pyo3(from_py_with = args::opt_java_long)] timeout_ms: Option<i64>,
    #[pyo3(from_py_with = args::opt_java_int)] check_max: Option<i32>,
) -> PyResult<Bound<'py, PyDict>> {
    let timeout_ms = timeout_ms
        .map(|t| {
            u64::try_from(t).map_err(|_| {
                invalid_argument(format!("timeout_ms must be a number of milliseconds, 0 or more, got {t}"))
            })
        })
        .transpose()?;
    let inner = &store.inner;
    let r = py.detach(|| inner.transaction_check(half_offset, op_offset, timeout_ms, check_max)).map_err(to_py)?;
    let out = PyDict::new(py);
    out.set_item("half_offset", r.half_offset)?;
    out.set_item("op_offset", r.op_offset)?;
    out.set_item("done", r.done)?;
    out.set_item("discarded", r.discarded)?;
    let checks = PyList::empty(py);
    for c in r.checks {
        let d = PyDict::new(py);
        d.set_item("commit_log_offset", c.commit_log_offset)?;
        d.set_item("queue_offset", c.queue_offset)?;
        d.set_item("offset_msg_id", c.offset_msg_id)?;
        d.set_item("transaction_id", c.transaction_id)?;
        d.set_item("producer_group", c.producer_group)?;
        d.set_item("topic", c.topic)?;
        d.set_item("queue_id", c.queue_id)?;
        d.set_item("body", PyBytes::new(py, &c.body))?;
        d.set_item("properties", PyDict::from_sequence(&PyList::new(py, c.properties)?.into_any())?)?;
        d.set_item("born_timestamp", c.born_timestamp)?;
        d.set_item("check_times", c.check_times)?;
        checks.append(d)?;
    }
    out.set_item("checks", checks)?;
    Ok(out)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(end_transaction, m)?)?;
    m.add_function(wrap_pyfunction!(transaction_check, m)?)?;
    Ok(())
}
