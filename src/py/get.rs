//! `GetMessageResult` and `QueryMessageResult`: what `get_message` and `query_message` return to Python. The
//! messages stay views of their commitlog records; `messages` wraps them as lazily decoded `MessageExt`, `raw`
//! (of a `get_message`) as zero-copy `RecordView`s.

use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use super::message::{GetMessageStatus, MessageExt, RecordView};
use crate::store::{get, QueryResult};

/// The result of one `get_message` call.
#[pyclass(frozen, module = "rmq._native")]
pub struct GetMessageResult {
    inner: get::GetMessageResult,
}

impl GetMessageResult {
    pub(crate) fn new(inner: get::GetMessageResult) -> Self {
        GetMessageResult { inner }
    }
}

#[pymethods]
impl GetMessageResult {
    /// The outcome.
    #[getter]
    fn status(&self) -> GetMessageStatus {
        self.inner.status.into()
    }
    /// The queue offset to pull from next.
    #[getter]
    fn next_begin_offset(&self) -> i64 {
        self.inner.next_begin_offset
    }
    /// The queue's min offset when the call ran (0 for a missing queue).
    #[getter]
    fn min_offset(&self) -> i64 {
        self.inner.min_offset
    }
    /// The queue's max offset when the call ran (0 for a missing queue).
    #[getter]
    fn max_offset(&self) -> i64 {
        self.inner.max_offset
    }
    /// Whether the reader is so far behind that a replica should serve it.
    #[getter]
    fn suggest_pulling_from_slave(&self) -> bool {
        self.inner.suggest_pulling_from_slave
    }
    /// Messages whose tagsCode matched but whose tag did not (hash collisions filtered out).
    #[getter]
    fn filter_message_count(&self) -> u32 {
        self.inner.filter_message_count
    }
    /// Entries passed over because their record is damaged: (queue offset, commitlog offset, reason).
    #[getter]
    fn damaged(&self) -> Vec<(i64, i64, String)> {
        self.inner.damaged.clone()
    }
    /// Sum of the returned records' sizes.
    #[getter]
    fn buffer_total_size(&self) -> u64 {
        self.inner.buffer_total_size
    }
    /// Number of messages.
    #[getter]
    fn message_count(&self) -> usize {
        self.inner.messages.len()
    }
    fn __len__(&self) -> usize {
        self.inner.messages.len()
    }
    /// Queue offset of each message.
    #[getter]
    fn queue_offsets(&self) -> Vec<i64> {
        self.inner.queue_offsets.clone()
    }
    /// The messages as `MessageExt`, decoded field by field on access.
    #[getter]
    fn messages<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.inner.messages.iter().map(|r| MessageExt::new(r.clone())))
    }
    /// The messages as zero-copy `RecordView`s of their commitlog bytes.
    #[getter]
    fn raw<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.inner.messages.iter().map(RecordView::of))
    }
    fn __repr__(&self) -> String {
        format!(
            "GetMessageResult(status={}, next_begin_offset={}, messages={}, min_offset={}, max_offset={})",
            self.inner.status.name(),
            self.inner.next_begin_offset,
            self.inner.messages.len(),
            self.inner.min_offset,
            self.inner.max_offset
        )
    }
}

/// The result of `query_message`: the messages found by key, oldest first, and when and where the index was
/// last updated. Reads as the 3-tuple `(messages, index_last_update_timestamp, index_last_update_phy_offset)`
/// too (indexing, unpacking), as a named tuple would.
#[pyclass(frozen, sequence, module = "rmq._native")]
pub struct QueryMessageResult {
    inner: QueryResult,
}

impl QueryMessageResult {
    pub(crate) fn new(inner: QueryResult) -> Self {
        QueryMessageResult { inner }
    }
    fn fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        (self.messages(py)?, self.inner.index_last_update_timestamp, self.inner.index_last_update_phy_offset)
            .into_pyobject(py)
    }
}

#[pymethods]
impl QueryMessageResult {
    /// The messages as `MessageExt`, decoded field by field on access.
    #[getter]
    fn messages<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.inner.records.iter().map(|r| MessageExt::new(r.clone())))
    }
    /// Store time of the index's newest entry, ms since the epoch.
    #[getter]
    fn index_last_update_timestamp(&self) -> i64 {
        self.inner.index_last_update_timestamp
    }
    /// Commitlog offset of the index's newest entry.
    #[getter]
    fn index_last_update_phy_offset(&self) -> i64 {
        self.inner.index_last_update_phy_offset
    }
    fn __len__(&self) -> usize {
        3
    }
    fn __getitem__<'py>(&self, py: Python<'py>, i: isize) -> PyResult<Bound<'py, PyAny>> {
        self.fields(py)?.as_any().get_item(i)
    }
    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(self.fields(py)?.as_any().try_iter()?.into_any())
    }
    fn __repr__(&self) -> String {
        format!(
            "QueryMessageResult(messages={}, index_last_update_timestamp={}, index_last_update_phy_offset={})",
            self.inner.records.len(),
            self.inner.index_last_update_timestamp,
            self.inner.index_last_update_phy_offset
        )
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<GetMessageResult>()?;
    m.add_class::<QueryMessageResult>()?;
    Ok(())
}
