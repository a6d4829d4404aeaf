//! Message-shaped Python classes: statuses, the producer-side `Message`, the stored `MessageExt`
//! (decoded lazily from its record), the zero-copy `RecordView`, and `PutResult`.

use std::ffi::c_int;
use std::sync::Arc;

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::pybacked::{PyBackedBytes, PyBackedStr};
use pyo3::types::{PyBytes, PyDict, PyList};

use super::args;
use crate::commitlog::Record;
use crate::java::decode_utf8_lossy;
use crate::message::ids::offset_msg_id;
use crate::message::properties::{self, keys};
use crate::message::{self as msg, tags};
use crate::mmap::MappedFile;

/// What a `__reduce__` returns: the callable that rebuilds the object, and its arguments.
type Reduce<'py, A> = (Bound<'py, PyAny>, A);

macro_rules! py_enum {
    ($(#[$m:meta])* $name:ident <=> $core:path { $($variant:ident = $pyname:literal <=> $corev:ident),* $(,)? }) => {
        $(#[$m])*
        #[pyclass(eq, eq_int, frozen, hash, from_py_object, module = "rmq._native")]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $(#[pyo3(name = $pyname)] $variant),*
        }
        impl From<$core> for $name {
            fn from(v: $core) -> Self {
                match v { $(<$core>::$corev => $name::$variant),* }
            }
        }
        impl From<$name> for $core {
            fn from(v: $name) -> Self {
                match v { $($name::$variant => <$core>::$corev),* }
            }
        }
        #[pymethods]
        impl $name {
            /// The Java constant's name.
            #[getter]
            fn name(&self) -> &'static str {
                match self { $($name::$variant => $pyname),* }
            }
            fn __str__(&self) -> &'static str {
                self.name()
            }
            /// Pickles by name (`getattr(cls, name)`): the same member after a round trip, in any process.
            fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Reduce<'py, (Bound<'py, pyo3::types::PyType>, &'static str)>> {
                let getattr = slf.py().import("builtins")?.getattr("getattr")?;
                Ok((getattr, (slf.py().get_type::<Self>(), slf.get().name())))
            }
        }
    };
}

py_enum! {
    /// RocketMQ's `PutMessageStatus`.
    PutMessageStatus <=> msg::PutMessageStatus {
        PutOk = "PUT_OK" <=> PutOk,
        FlushDiskTimeout = "FLUSH_DISK_TIMEOUT" <=> FlushDiskTimeout,
        FlushSlaveTimeout = "FLUSH_SLAVE_TIMEOUT" <=> FlushSlaveTimeout,
        SlaveNotAvailable = "SLAVE_NOT_AVAILABLE" <=> SlaveNotAvailable,
        ServiceNotAvailable = "SERVICE_NOT_AVAILABLE" <=> ServiceNotAvailable,
        CreateMappedFileFailed = "CREATE_MAPPED_FILE_FAILED" <=> CreateMappedFileFailed,
        MessageIllegal = "MESSAGE_ILLEGAL" <=> MessageIllegal,
        PropertiesSizeExceeded = "PROPERTIES_SIZE_EXCEEDED" <=> PropertiesSizeExceeded,
        OsPageCacheBusy = "OS_PAGE_CACHE_BUSY" <=> OsPageCacheBusy,
        UnknownError = "UNKNOWN_ERROR" <=> UnknownError,
        InSyncReplicasNotEnough = "IN_SYNC_REPLICAS_NOT_ENOUGH" <=> InSyncReplicasNotEnough,
        PutToRemoteBrokerFail = "PUT_TO_REMOTE_BROKER_FAIL" <=> PutToRemoteBrokerFail,
        LmqConsumeQueueNumExceeded = "LMQ_CONSUME_QUEUE_NUM_EXCEEDED" <=> LmqConsumeQueueNumExceeded,
        WheelTimerFlowControl = "WHEEL_TIMER_FLOW_CONTROL" <=> WheelTimerFlowControl,
        WheelTimerMsgIllegal = "WHEEL_TIMER_MSG_ILLEGAL" <=> WheelTimerMsgIllegal,
        WheelTimerNotEnable = "WHEEL_TIMER_NOT_ENABLE" <=> WheelTimerNotEnable,
    }
}

py_enum! {
    /// Transaction type carried in SYSFLAG bits 2–3.
    TransactionType <=> msg::TransactionType {
        NotType = "NOT_TYPE" <=> NotType,
        Prepared = "PREPARED" <=> Prepared,
        Commit = "COMMIT" <=> Commit,
        Rollback = "ROLLBACK" <=> Rollback,
    }
}

py_enum! {
    /// Which side of a time a queue-offset search returns (`BoundaryType`): LOWER = the first message stored
    /// at or after it, UPPER = the last stored at or before it.
    BoundaryType <=> crate::consume_queue::BoundaryType {
        Lower = "LOWER" <=> Lower,
        Upper = "UPPER" <=> Upper,
    }
}

py_enum! {
    /// RocketMQ's `GetMessageStatus`: the outcome of `get_message`.
    GetMessageStatus <=> crate::store::get::GetMessageStatus {
        Found = "FOUND" <=> Found,
        NoMatchedMessage = "NO_MATCHED_MESSAGE" <=> NoMatchedMessage,
        MessageWasRemoving = "MESSAGE_WAS_REMOVING" <=> MessageWasRemoving,
        OffsetFoundNull = "OFFSET_FOUND_NULL" <=> OffsetFoundNull,
        OffsetOverflowBadly = "OFFSET_OVERFLOW_BADLY" <=> OffsetOverflowBadly,
        OffsetOverflowOne = "OFFSET_OVERFLOW_ONE" <=> OffsetOverflowOne,
        OffsetTooSmall = "OFFSET_TOO_SMALL" <=> OffsetTooSmall,
        NoMatchedLogicQueue = "NO_MATCHED_LOGIC_QUEUE" <=> NoMatchedLogicQueue,
        NoMessageInQueue = "NO_MESSAGE_IN_QUEUE" <=> NoMessageInQueue,
    }
}

/// A message to put in a batch: body plus what may differ between members.
#[pyclass(frozen, module = "rmq._native")]
pub struct Message {
    pub(crate) body: PyBackedBytes,
    // The caller's `str`s, borrowed (no copy): a batch of messages is built in a hot loop.
    pub(crate) tags: Option<PyBackedStr>,
    pub(crate) keys: Option<args::KeysText>,
    pub(crate) properties: Vec<(String, String)>,
    pub(crate) flag: i32,
}

#[pymethods]
impl Message {
    #[new]
    #[pyo3(signature = (body, *, tags=None, keys=None, properties=None, flag=0))]
    fn new(
        #[pyo3(from_py_with = args::body)] body: PyBackedBytes,
        #[pyo3(from_py_with = args::opt_text)] tags: Option<PyBackedStr>,
        #[pyo3(from_py_with = args::keys_text)] keys: Option<args::KeysText>,
        #[pyo3(from_py_with = args::properties)] properties: Option<Vec<(String, String)>>,
        #[pyo3(from_py_with = args::java_int)] flag: i32,
    ) -> PyResult<Self> {
        Ok(Message { body, tags, keys, properties: properties.unwrap_or_default(), flag })
    }

    #[getter]
    fn body<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.body)
    }
    #[getter]
    fn tags(&self) -> Option<&str> {
        self.tags.as_deref()
    }
    #[getter]
    fn keys(&self) -> Vec<&str> {
        self.keys.as_deref().map(|k| crate::java::split_java(k, keys::KEY_SEPARATOR)).unwrap_or_default()
    }
    #[getter]
    fn properties<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in &self.properties {
            d.set_item(k, v)?;
        }
        Ok(d)
    }
    #[getter]
    fn flag(&self) -> i32 {
        self.flag
    }
    /// Pickles as the constructor's call (`copy` and `multiprocessing` use it too), under every protocol: body,
    /// tags, the keys as their `KEYS` text, properties and flag.
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Reduce<'py, (Bound<'py, PyBytes>,)>> {
        let kwargs = PyDict::new(py);
        kwargs.set_item("tags", self.tags.as_deref())?;
        kwargs.set_item("keys", self.keys.as_deref())?;
        kwargs.set_item("properties", self.properties(py)?)?;
        kwargs.set_item("flag", self.flag)?;
        let partial = py.import("functools")?.getattr("partial")?;
        Ok((partial.call((py.get_type::<Self>(),), Some(&kwargs))?, (self.body(py),)))
    }
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let repr = |v: Option<&str>| -> PyResult<String> { Ok(v.into_pyobject(py)?.repr()?.to_string()) };
        Ok(format!(
            "Message(body=<{} bytes>, tags={}, keys={}, flag={})",
            self.body.len(),
            repr(self.tags.as_deref())?,
            repr(self.keys.as_deref())?,
            self.flag
        ))
    }
}

/// Read-only, zero-copy view of one stored record's bytes (buffer protocol). Keeps its segment mapped.
#[pyclass(frozen, module = "rmq._native")]
pub struct RecordView {
    file: Arc<MappedFile>,
    pos: usize,
    len: usize,
}

impl RecordView {
    pub(crate) fn of(record: &Record) -> Self {
        RecordView { file: record.file.clone(), pos: record.pos, len: record.header.total_size as usize }
    }
    fn bytes(&self) -> &[u8] {
        self.file.slice(self.pos, self.len).unwrap_or_default()
    }
}

#[pymethods]
impl RecordView {
    /// Commitlog offset of the record.
    #[getter]
    fn offset(&self) -> u64 {
        self.file.start() + self.pos as u64
    }
    fn __len__(&self) -> usize {
        self.len
    }
    fn __bytes__<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, self.bytes())
    }
    #[allow(unsafe_code)]
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        if flags & ffi::PyBUF_WRITABLE == ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err("record views are read-only"));
        }
        let bytes = slf.get().bytes();
        // SAFETY: `view` is the buffer struct Python passed in. The pointer stays valid while the exporter
        // lives: PyBuffer_FillInfo stores a new reference to `slf` in `view.obj`, and `slf` owns an
        // `Arc<MappedFile>` that keeps the segment mapped; the range is published, so it is never written.
        let rc = unsafe {
            ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                bytes.as_ptr() as *mut _,
                bytes.len() as ffi::Py_ssize_t,
                1,
                flags,
            )
        };
        if rc == -1 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }
    fn __repr__(&self) -> String {
        format!("RecordView(offset={}, len={})", self.offset(), self.len)
    }
}

/// A stored message, decoded lazily from its record (`MessageExt`).
#[pyclass(frozen, module = "rmq._native")]
pub struct MessageExt {
    record: Record,
}

impl MessageExt {
    pub(crate) fn new(record: Record) -> Self {
        MessageExt { record }
    }
    fn bytes(&self) -> &[u8] {
        self.record.bytes()
    }
    fn props(&self) -> &[u8] {
        self.record.header.properties(self.bytes())
    }
    fn prop(&self, name: &str) -> Option<String> {
        properties::get_raw(self.props(), name).map(|v| decode_utf8_lossy(v).into_owned())
    }
}

#[pymethods]
impl MessageExt {
    /// Topic.
    #[getter]
    fn topic(&self) -> String {
        decode_utf8_lossy(self.record.header.topic(self.bytes())).into_owned()
    }
    #[getter]
    fn queue_id(&self) -> i32 {
        self.record.header.queue_id
    }
    /// Position in its consume queue (entries, not bytes).
    #[getter]
    fn queue_offset(&self) -> i64 {
        self.record.header.queue_offset
    }
    /// Commitlog offset of the record, bytes.
    #[getter]
    fn commitlog_offset(&self) -> i64 {
        self.record.header.physical_offset
    }
    /// Record size in bytes (TOTALSIZE).
    #[getter]
    fn store_size(&self) -> i32 {
        self.record.header.total_size
    }
    #[getter]
    fn body_crc(&self) -> i32 {
        self.record.header.body_crc
    }
    #[getter]
    fn flag(&self) -> i32 {
        self.record.header.flag
    }
    #[getter]
    fn sys_flag(&self) -> i32 {
        self.record.header.sys_flag
    }
    #[getter]
    fn transaction_type(&self) -> TransactionType {
        self.record.header.transaction_type().into()
    }
    /// Producer timestamp, ms since the epoch.
    #[getter]
    fn born_timestamp(&self) -> i64 {
        self.record.header.born_timestamp
    }
    /// `ip:port` or `[ipv6]:port`.
    #[getter]
    fn born_host(&self) -> String {
        self.record.header.born_host.to_string()
    }
    /// Broker store timestamp, ms since the epoch.
    #[getter]
    fn store_timestamp(&self) -> i64 {
        self.record.header.store_timestamp
    }
    #[getter]
    fn store_host(&self) -> String {
        self.record.header.store_host.to_string()
    }
    #[getter]
    fn reconsume_times(&self) -> i32 {
        self.record.header.reconsume_times
    }
    /// A copy of this message whose `reconsume_times` reads `times`; the record (and `raw`) are unchanged. The
    /// orderly push consumer hands it to its listener when it retries a message in place, as RocketMQ's client
    /// counts retries on the `MessageExt` it holds.
    fn with_reconsume_times(&self, #[pyo3(from_py_with = args::java_int)] times: i32) -> MessageExt {
        let mut record = self.record.clone();
        record.header.reconsume_times = times;
        MessageExt { record }
    }
    #[getter]
    fn prepared_transaction_offset(&self) -> i64 {
        self.record.header.prepared_transaction_offset
    }
    /// 1 or 2 (v2 records have a 2-byte topic length).
    #[getter]
    fn version(&self) -> u8 {
        self.record.header.version()
    }
    /// Body bytes (a copy; see `body_view` for zero-copy).
    #[getter]
    fn body<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, self.record.header.body(self.bytes()))
    }
    /// Zero-copy memoryview of the body.
    #[getter]
    fn body_view<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let view = Bound::new(py, RecordView::of(&self.record))?;
        let mv = py.import("builtins")?.getattr("memoryview")?.call1((view,))?;
        mv.get_item(pyo3::types::PySlice::new(
            py,
            self.record.header.body.start as isize,
            self.record.header.body.end as isize,
            1,
        ))
    }
    /// All properties as Java parses them (later duplicates win).
    #[getter]
    fn properties<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in properties::parse(self.props()) {
            d.set_item(k.as_ref(), v.as_ref())?;
        }
        Ok(d)
    }
    /// The `TAGS` property.
    #[getter]
    fn tags(&self) -> Option<String> {
        self.prop(keys::TAGS)
    }
    /// The `KEYS` property split on spaces.
    #[getter]
    fn keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let text = self.prop(keys::KEYS).unwrap_or_default();
        let parts: Vec<&str> =
            if text.is_empty() { Vec::new() } else { crate::java::split_java(&text, keys::KEY_SEPARATOR) };
        PyList::new(py, parts)
    }
    /// The client message id (`UNIQ_KEY`).
    #[getter]
    fn uniq_key(&self) -> Option<String> {
        self.prop(keys::UNIQ_KEY)
    }
    /// The broker message id (offsetMsgId): store host and commitlog offset in hex.
    #[getter]
    fn msg_id(&self) -> String {
        offset_msg_id(self.record.header.store_host, self.record.header.physical_offset)
    }
    /// The consume-queue tag code (Java hash of TAGS; delivery time on the schedule topic with the default levels).
    #[getter]
    fn tags_code(&self) -> Option<i64> {
        let levels = tags::parse_delay_levels(tags::DEFAULT_DELAY_LEVELS);
        let h = &self.record.header;
        tags::tags_code(h.topic(self.bytes()), self.props(), h.store_timestamp, &levels).ok()
    }
    /// Whether the body CRC matches the stored BODYCRC.
    #[getter]
    fn body_crc_ok(&self) -> bool {
        let h = &self.record.header;
        msg::crc32(h.body(self.bytes())) == h.body_crc
    }
    /// Zero-copy view of the whole record.
    #[getter]
    fn raw(&self) -> RecordView {
        RecordView::of(&self.record)
    }
    /// Pickles as the record's bytes (and a `with_reconsume_times` count): unpickled, in any process, it is a
    /// `MessageExt` of its own copy of the record, checked again as `read` checks one (one whole record; the body
    /// CRC is not required, `body_crc_ok` says what it said before), no store needed.
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Reduce<'py, (Bound<'py, PyBytes>, i32)>> {
        let rebuild = py.import("rmq._native")?.getattr("_message_ext")?;
        Ok((rebuild, (PyBytes::new(py, self.bytes()), self.record.header.reconsume_times)))
    }
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "MessageExt(topic={}, queue_id={}, queue_offset={}, commitlog_offset={}, store_size={})",
            self.topic().into_pyobject(py)?.repr()?,
            self.queue_id(),
            self.queue_offset(),
            self.commitlog_offset(),
            self.store_size()
        ))
    }
}

/// Result of `put` / `put_batch`.
#[pyclass(frozen, module = "rmq._native")]
pub struct PutResult {
    pub(crate) inner: crate::store::PutResult,
}

#[pymethods]
impl PutResult {
    #[getter]
    fn status(&self) -> PutMessageStatus {
        self.inner.status.into()
    }
    /// Commitlog offset of the first record.
    #[getter]
    fn wrote_offset(&self) -> u64 {
        self.inner.offsets.first().copied().unwrap_or(0)
    }
    /// Commitlog offset of every record.
    #[getter]
    fn offsets(&self) -> Vec<u64> {
        self.inner.offsets.to_vec()
    }
    /// Bytes written.
    #[getter]
    fn wrote_bytes(&self) -> u64 {
        self.inner.wrote_bytes
    }
    /// Queue offset of the first message.
    #[getter]
    fn queue_offset(&self) -> i64 {
        self.inner.queue_offset
    }
    /// Number of messages.
    #[getter]
    fn msg_num(&self) -> usize {
        self.inner.offsets.len()
    }
    /// Store timestamp, ms since the epoch.
    #[getter]
    fn store_timestamp(&self) -> i64 {
        self.inner.store_timestamp
    }
    /// offsetMsgId; for a batch, the ids joined by commas (as RocketMQ reports them).
    #[getter]
    fn msg_id(&self) -> String {
        self.inner.msg_ids().join(",")
    }
    /// offsetMsgId of every record.
    #[getter]
    fn msg_ids(&self) -> Vec<String> {
        self.inner.msg_ids()
    }
    /// UNIQ_KEY of the first message ("" when the caller supplied its own in properties).
    #[getter]
    fn uniq_key(&self) -> &str {
        self.inner.uniq_keys.first().map_or("", |k| k.as_str())
    }
    /// UNIQ_KEY of every message.
    #[getter]
    fn uniq_keys(&self) -> Vec<&str> {
        self.inner.uniq_keys.iter().map(|k| k.as_str()).collect()
    }
    fn __repr__(&self) -> String {
        format!(
            "PutResult(status={}, wrote_offset={}, wrote_bytes={}, queue_offset={}, msg_num={})",
            self.inner.status.name(),
            self.wrote_offset(),
            self.inner.wrote_bytes,
            self.inner.queue_offset,
            self.msg_num()
        )
    }
}

/// A pickled `MessageExt` ([`MessageExt::__reduce__`]): the record in memory of its own (a copy, mapped
/// anonymously at the record's commitlog offset, so `raw.offset` and `commitlog_offset` agree), after the checks
/// `read` makes (a message record, its length the bytes' length; a body whose CRC does not match comes back as it
/// went, `body_crc_ok` false, as `read` returns it). Bytes that are not one whole record raise
/// `InvalidArgumentError`.
#[pyfunction]
fn _message_ext(
    #[pyo3(from_py_with = args::body)] record: PyBackedBytes,
    #[pyo3(from_py_with = args::java_int)] reconsume_times: i32,
) -> PyResult<MessageExt> {
    use crate::message::decode::{check_record, CheckOptions, RecordCheck};
    let bad = |why: String| super::errors::invalid_argument(format!("not a pickled MessageExt: {why}"));
    let mut header = match check_record(&record, CheckOptions::default()) {
        RecordCheck::Message(h) if h.total_size as usize == record.len() => h,
        RecordCheck::Message(h) => return Err(bad(format!("a record of {} bytes in {}", h.total_size, record.len()))),
        RecordCheck::Blank { .. } => return Err(bad("an end-of-file blank".into())),
        RecordCheck::Invalid { reason, .. } => return Err(bad(reason.to_string())),
    };
    let start = u64::try_from(header.physical_offset).unwrap_or(0);
    let path = std::path::Path::new("(pickled MessageExt)");
    let file = MappedFile::create_in(crate::mmap::Storage::Overlay, path, start, record.len() as u64)
        .and_then(|f| f.write_at(0, &record).map(|()| f))
        .map_err(super::errors::to_py)?;
    header.reconsume_times = reconsume_times;
    Ok(MessageExt { record: Record { file: Arc::new(file), pos: 0, header } })
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_message_ext, m)?)?;
    m.add_class::<PutMessageStatus>()?;
    m.add_class::<TransactionType>()?;
    m.add_class::<Message>()?;
    m.add_class::<MessageExt>()?;
    m.add_class::<BoundaryType>()?;
    m.add_class::<GetMessageStatus>()?;
    m.add_class::<RecordView>()?;
    m.add_class::<PutResult>()?;
    Ok(())
}
