//! The native `MessageStore` and its scan iterator. Arguments are converted with the GIL held; the work
//! runs detached from the interpreter.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyDict};

use super::errors::to_py;
use super::message::{extract_properties, join_keys, Message, MessageExt, PutResult, RecordView, TransactionType};
use crate::commitlog::Record;
use crate::config::{FlushDiskType, StoreConfig};
use crate::error::Error;
use crate::store::{self, BatchItem, PutMessage};

/// Records fetched per detached call while scanning.
const SCAN_BATCH: usize = 256;

fn parse_host(text: &str) -> PyResult<SocketAddr> {
    text.parse::<SocketAddr>().map_err(|_| to_py(Error::InvalidHost(text.to_owned())))
}

fn config_from_dict(d: Option<&Bound<'_, PyDict>>) -> PyResult<StoreConfig> {
    let mut c = StoreConfig::default();
    let Some(d) = d else { return Ok(c) };
    for (k, v) in d.iter() {
        let key: String = k.extract()?;
        let cl = &mut c.commit_log;
        match key.as_str() {
            "mapped_file_size_commit_log" => cl.mapped_file_size_commit_log = v.extract()?,
            "max_message_size" => cl.max_message_size = v.extract()?,
            "enabled_append_prop_crc" => cl.enabled_append_prop_crc = v.extract()?,
            "force_verify_prop_crc" => cl.force_verify_prop_crc = v.extract()?,
            "auto_message_version_on_topic_len" => cl.auto_message_version_on_topic_len = v.extract()?,
            "check_crc_on_recover" => cl.check_crc_on_recover = v.extract()?,
            "flush_disk_type" => {
                cl.flush_disk_type = match v.extract::<String>()?.as_str() {
                    "ASYNC_FLUSH" => FlushDiskType::AsyncFlush,
                    "SYNC_FLUSH" => FlushDiskType::SyncFlush,
                    other => {
                        return Err(to_py(Error::InvalidConfig(format!(
                            "flush_disk_type must be ASYNC_FLUSH or SYNC_FLUSH, got {other:?}"
                        ))))
                    }
                }
            }
            "store_host" => c.broker.store_host = parse_host(&v.extract::<String>()?)?,
            "broker_cluster_name" => c.broker.broker_cluster_name = v.extract()?,
            other => return Err(to_py(Error::InvalidConfig(format!("unknown setting {other:?}")))),
        }
    }
    Ok(c)
}

/// The native store; `rmq.MessageStore` subclasses it.
#[pyclass(subclass, frozen, module = "rmq._native")]
pub struct MessageStore {
    inner: Arc<store::MessageStore>,
}

#[pymethods]
impl MessageStore {
    #[new]
    #[pyo3(signature = (path, config=None))]
    fn new(py: Python<'_>, path: PathBuf, config: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let config = config_from_dict(config)?;
        let store = py.detach(|| store::MessageStore::open(&path, config)).map_err(to_py)?;
        Ok(MessageStore { inner: Arc::new(store) })
    }

    /// Stores one message and returns where it went.
    #[pyo3(signature = (topic, body, *, queue_id=0, tags=None, keys=None, properties=None, flag=0, sys_flag=0,
        transaction_type=TransactionType::NotType, born_host="127.0.0.1:0", born_timestamp=None,
        reconsume_times=0, prepared_transaction_offset=0, wait_store_msg_ok=true))]
    #[allow(clippy::too_many_arguments)]
    fn put(
        &self,
        py: Python<'_>,
        topic: &str,
        body: PyBackedBytes,
        queue_id: i32,
        tags: Option<&str>,
        keys: Option<&Bound<'_, PyAny>>,
        properties: Option<&Bound<'_, PyAny>>,
        flag: i32,
        sys_flag: i32,
        transaction_type: TransactionType,
        born_host: &str,
        born_timestamp: Option<i64>,
        reconsume_times: i32,
        prepared_transaction_offset: i64,
        wait_store_msg_ok: bool,
    ) -> PyResult<PutResult> {
        let keys = join_keys(keys)?;
        let props = extract_properties(properties)?;
        let born_host = parse_host(born_host)?;
        let inner = &self.inner;
        let result = py.detach(|| {
            let refs: Vec<(&str, &str)> = props.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let msg = PutMessage {
                topic,
                queue_id,
                body: &body,
                tags,
                keys: keys.as_deref(),
                properties: &refs,
                flag,
                sys_flag,
                transaction: transaction_type.into(),
                born_host,
                born_timestamp,
                reconsume_times,
                prepared_transaction_offset,
                wait_store_msg_ok,
            };
            inner.put(&msg)
        });
        result.map(|inner| PutResult { inner }).map_err(to_py)
    }

    /// Stores a batch atomically: `messages` are `bytes` (body only) or `Message` objects.
    #[pyo3(signature = (topic, messages, *, queue_id=0, sys_flag=0, born_host="127.0.0.1:0", born_timestamp=None,
        reconsume_times=0, wait_store_msg_ok=true))]
    #[allow(clippy::too_many_arguments)]
    fn put_batch(
        &self,
        py: Python<'_>,
        topic: &str,
        messages: &Bound<'_, PyAny>,
        queue_id: i32,
        sys_flag: i32,
        born_host: &str,
        born_timestamp: Option<i64>,
        reconsume_times: i32,
        wait_store_msg_ok: bool,
    ) -> PyResult<PutResult> {
        let born_host = parse_host(born_host)?;
        enum Item {
            Body(PyBackedBytes),
            Full(Py<Message>),
        }
        let mut items = Vec::new();
        for m in messages.try_iter()? {
            let m = m?;
            if let Ok(b) = m.cast::<PyBytes>() {
                items.push(Item::Body(PyBackedBytes::from(b.clone())));
            } else if let Ok(full) = m.cast::<Message>() {
                items.push(Item::Full(full.clone().unbind()));
            } else if let Ok(b) = m.extract::<PyBackedBytes>() {
                items.push(Item::Body(b));
            } else {
                return Err(PyTypeError::new_err("put_batch takes bytes or rmq.Message items"));
            }
        }
        let inner = &self.inner;
        let result = py.detach(|| {
            let full_props: Vec<Vec<(&str, &str)>> = items
                .iter()
                .map(|it| match it {
                    Item::Full(m) => m.get().properties.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect(),
                    Item::Body(_) => Vec::new(),
                })
                .collect();
            let batch: Vec<BatchItem<'_>> = items
                .iter()
                .zip(&full_props)
                .map(|(it, props)| match it {
                    Item::Body(b) => BatchItem { body: b, ..BatchItem::default() },
                    Item::Full(m) => {
                        let m = m.get();
                        BatchItem {
                            body: &m.body,
                            tags: m.tags.as_deref(),
                            keys: m.keys.as_deref(),
                            properties: props,
                            flag: m.flag,
                        }
                    }
                })
                .collect();
            inner.put_batch(
                topic,
                queue_id,
                &batch,
                sys_flag,
                born_host,
                born_timestamp,
                reconsume_times,
                wait_store_msg_ok,
            )
        });
        result.map(|inner| PutResult { inner }).map_err(to_py)
    }

    /// The message stored at commitlog `offset`, or None past the end (or on an end-of-file blank).
    fn read(&self, py: Python<'_>, offset: u64) -> PyResult<Option<MessageExt>> {
        let inner = &self.inner;
        let rec = py.detach(|| inner.read(offset)).map_err(to_py)?;
        Ok(rec.map(MessageExt::new))
    }

    /// Zero-copy bytes of the record at `offset`, or None.
    fn read_raw(&self, py: Python<'_>, offset: u64) -> PyResult<Option<RecordView>> {
        let inner = &self.inner;
        let rec = py.detach(|| inner.read(offset)).map_err(to_py)?;
        Ok(rec.as_ref().map(RecordView::of))
    }

    /// Iterates stored messages in commitlog order from `from_offset` (a record boundary or segment start).
    #[pyo3(signature = (from_offset=0))]
    fn scan(&self, py: Python<'_>, from_offset: u64) -> PyResult<Scanner> {
        self.inner.check_open().map_err(to_py)?;
        let inner = &self.inner;
        if !from_offset.is_multiple_of(inner.commitlog().file_size()) {
            // A start inside a record is a bad argument, not corruption: `read` says which.
            py.detach(|| inner.read(from_offset)).map_err(to_py)?;
        }
        Ok(Scanner { store: self.inner.clone(), next: from_offset, buffer: VecDeque::new(), done: false })
    }

    /// Flushes written data to disk.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let inner = &self.inner;
        py.detach(|| inner.flush()).map_err(to_py)
    }

    /// Flushes and closes; later calls raise StoreClosedError. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let inner = &self.inner;
        py.detach(|| inner.close()).map_err(to_py)
    }

    /// Whether the store is closed.
    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// The store directory.
    #[getter]
    fn path(&self) -> String {
        self.inner.root().display().to_string()
    }

    /// Commitlog offset of the first stored byte.
    #[getter]
    fn min_offset(&self) -> u64 {
        self.inner.commitlog().min_offset()
    }

    /// Commitlog offset one past the last written byte.
    #[getter]
    fn max_offset(&self) -> u64 {
        self.inner.commitlog().max_offset()
    }

    /// Whether the previous run did not close cleanly (its abort file was found).
    #[getter]
    fn unclean_shutdown(&self) -> bool {
        self.inner.unclean_shutdown()
    }

    /// What opening found: end offset, where validation began, discarded torn bytes, why it stopped.
    #[getter]
    fn open_report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let r = self.inner.open_report();
        let d = PyDict::new(py);
        d.set_item("end_offset", r.end_offset)?;
        d.set_item("validated_from", r.validated_from)?;
        d.set_item("discarded_bytes", r.discarded_bytes)?;
        d.set_item("stop_reason", r.stop_reason.clone())?;
        Ok(d)
    }

    /// The next queue offset of (topic, queue_id): how many messages the queue holds.
    fn next_queue_offset(&self, topic: &str, queue_id: i32) -> i64 {
        self.inner.next_queue_offset(topic, queue_id)
    }

    /// Changes `maxMessageSize` for later puts (values below 10 are ignored, as in RocketMQ).
    fn set_max_message_size(&self, size: i32) {
        self.inner.set_max_message_size(size);
    }

    /// Segment files of the commitlog, in offset order.
    fn commitlog_files(&self) -> Vec<PathBuf> {
        self.inner.commitlog().queue().files().iter().map(|f| f.path().to_owned()).collect()
    }
}

/// Iterator over stored messages; fetches records in batches with the interpreter detached.
#[pyclass(module = "rmq._native")]
pub struct Scanner {
    store: Arc<store::MessageStore>,
    next: u64,
    buffer: VecDeque<Record>,
    done: bool,
}

#[pymethods]
impl Scanner {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<MessageExt>> {
        if self.buffer.is_empty() && !self.done {
            let store = &self.store;
            let mut next = self.next;
            let fetched: Result<Vec<Record>, Error> = py.detach(|| {
                let mut out = Vec::with_capacity(SCAN_BATCH);
                while out.len() < SCAN_BATCH {
                    match store.next_record(next) {
                        Ok(Some((rec, after))) => {
                            out.push(rec);
                            next = after;
                        }
                        Ok(None) => break,
                        Err(e) if out.is_empty() => return Err(e),
                        Err(_) => break, // report it on the next call, after the good records
                    }
                }
                Ok(out)
            });
            let fetched = fetched.map_err(|e| {
                self.done = true;
                to_py(e)
            })?;
            self.next = next;
            if fetched.is_empty() {
                self.done = true;
            }
            self.buffer.extend(fetched);
        }
        Ok(self.buffer.pop_front().map(MessageExt::new))
    }

    /// Commitlog offset where the scan continues.
    #[getter]
    fn position(&self) -> u64 {
        self.buffer.front().map(|r| r.offset()).unwrap_or(self.next)
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<MessageStore>()?;
    m.add_class::<Scanner>()?;
    Ok(())
}
