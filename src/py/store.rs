//! The native `MessageStore` and its scan iterator. Arguments are converted with the GIL held; the work
//! runs detached from the interpreter.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::pybacked::{PyBackedBytes, PyBackedStr};
use pyo3::types::{PyBool, PyBytes, PyDict, PyInt, PyList, PyMapping, PyString};
use rustc_hash::FxHashMap;

use super::args;
use super::errors::to_py;
use super::get::{GetMessageResult, QueryMessageResult};
use super::message::{BoundaryType, Message, MessageExt, PutResult, RecordView, TransactionType};
use crate::commitlog::{Record, RecoveryMode};
use crate::config::{Kind, Setting, StoreConfig, Value, SETTINGS};
use crate::error::Error;
use crate::store::get::Subscription;
use crate::store::{self, BatchItem, PutMessage};

/// An arrival as Python sees it: (topic, queue_id, next queue offset).
type Arrival = (String, i32, i64);

/// A service's counters as Python sees them: (name, running, rounds, work, errors, last error).
type ServiceStatsTuple = (&'static str, bool, u64, u64, u64, Option<String>);

/// Records fetched per detached call while scanning.
const SCAN_BATCH: usize = 256;

/// `born_host` when the caller gives none.
const DEFAULT_BORN_HOST: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 0));

fn parse_host(text: &str) -> PyResult<SocketAddr> {
    text.parse::<SocketAddr>().map_err(|_| to_py(Error::InvalidHost(text.to_owned())))
}

/// A host argument: a `str` of the form `ip:port` or `[ipv6]:port`.
fn host(obj: &Bound<'_, PyAny>) -> PyResult<SocketAddr> {
    parse_host(&args::text(obj)?)
}

/// A setting's value from Python, checked against the setting's kind: an `int` (not a bool), a `bool`, a `str`
/// (or None where the setting is optional). Ranges and names are checked by the setting itself.
fn setting_value(setting: &Setting, v: &Bound<'_, PyAny>) -> PyResult<Value> {
    let key = setting.name;
    match setting.kind {
        Kind::Int { .. } => {
            if v.is_instance_of::<PyBool>() || !v.is_instance_of::<PyInt>() {
                return Err(args::argument_type_error_for(&format!("setting {key} must be an int"), v));
            }
            let n: i128 =
                v.extract().map_err(|_| to_py(Error::InvalidConfig(format!("{key} = {v} is out of range"))))?;
            Ok(Value::Int(n))
        }
        Kind::Bool => v
            .cast::<PyBool>()
            .map(|b| Value::Bool(b.is_true()))
            .map_err(|_| args::argument_type_error_for(&format!("setting {key} must be a bool"), v)),
        Kind::OptionalStr if v.is_none() => Ok(Value::Null),
        Kind::Str | Kind::OptionalStr | Kind::Choice(_) => {
            if !v.is_instance_of::<PyString>() {
                return Err(args::argument_type_error_for(&format!("setting {key} must be a str"), v));
            }
            Ok(Value::Str(args::text(v)?.to_string()))
        }
    }
}

fn value_to_py<'py>(py: Python<'py>, v: Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Int(n) => n.into_pyobject(py)?.into_any(),
        Value::Bool(b) => PyBool::new(py, b).to_owned().into_any(),
        Value::Str(s) => PyString::new(py, &s).into_any(),
        Value::Null => py.None().into_bound(py),
    })
}

/// A configuration from a mapping of settings (snake-case names) on top of the defaults, every key and value
/// checked by the one table of settings (`config::SETTINGS`).
fn config_from_dict(d: Option<&Bound<'_, PyAny>>) -> PyResult<StoreConfig> {
    let mut c = StoreConfig::default();
    let Some(d) = d.filter(|d| !d.is_none()) else { return Ok(c) };
    let d = d.cast::<PyMapping>().map_err(|_| args::argument_type_error_for("config must be a mapping", d))?;
    for item in d.items()?.iter() {
        let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract()?;
        if !k.is_instance_of::<PyString>() {
            return Err(args::argument_type_error_for("setting names must be str", &k));
        }
        let key = args::text(&k)?.to_string();
        let setting = StoreConfig::setting(&key)
            .ok_or_else(|| to_py(Error::InvalidConfig(format!("unknown setting {key:?}"))))?;
        let value = setting_value(setting, &v)?;
        setting.set(&mut c, value).map_err(to_py)?;
    }
    Ok(c)
}

/// Checks a configuration as opening a store does (every setting's type and value, then the ranges across
/// settings), without opening anything: `StoreConfig` calls it when it is made.
#[pyfunction]
fn check_config(config: &Bound<'_, PyAny>) -> PyResult<()> {
    config_from_dict(Some(config))?.validate().map_err(to_py)
}

/// A configuration's settings as a dict, in table order.
fn config_to_dict<'py>(py: Python<'py>, c: &StoreConfig) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (name, v) in c.values() {
        d.set_item(name, value_to_py(py, v)?)?;
    }
    Ok(d)
}

/// Every setting as `(name, RocketMQ name, kind, default, doc)`, in table order; kind is "int", "bool", "str",
/// "str?" (str or None) or "choice:A|B|C". Python's `StoreConfig` is a view of this.
/// `(name, RocketMQ name, kind, default, doc)`.
type SettingRow<'py> = (&'static str, &'static str, String, Bound<'py, PyAny>, &'static str);

#[pyfunction]
fn config_settings(py: Python<'_>) -> PyResult<Vec<SettingRow<'_>>> {
    let defaults = StoreConfig::default();
    SETTINGS
        .iter()
        .map(|s| {
            let kind = match s.kind {
                Kind::Int { .. } => "int".to_owned(),
                Kind::Bool => "bool".to_owned(),
                Kind::Str => "str".to_owned(),
                Kind::OptionalStr => "str?".to_owned(),
                Kind::Choice(names) => format!("choice:{}", names.join("|")),
            };
            Ok((s.name, s.java_name, kind, value_to_py(py, s.get(&defaults))?, s.doc))
        })
        .collect()
}

/// The settings a RocketMQ `broker.conf` (a mapping of its properties) gives, as a dict of every setting.
#[pyfunction]
fn config_from_properties<'py>(py: Python<'py>, props: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
    let props =
        props.cast::<PyMapping>().map_err(|_| args::argument_type_error_for("props must be a mapping", props))?;
    let mut pairs = Vec::new();
    for item in props.items()?.iter() {
        let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract()?;
        if !k.is_instance_of::<PyString>() || !v.is_instance_of::<PyString>() {
            return Err(args::argument_type_error_for("props must map str to str", &item));
        }
        pairs.push((args::text(&k)?.to_string(), args::text(&v)?.to_string()));
    }
    let c = StoreConfig::from_properties(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))).map_err(to_py)?;
    config_to_dict(py, &c)
}

/// The native store; `rmq.MessageStore` subclasses it.
#[pyclass(subclass, frozen, module = "rmq._native")]
pub struct MessageStore {
    pub(crate) inner: Arc<Handle>,
    /// The configured topics' queue counts (`max(write, read)` queue nums), kept by `rmq.topics` through
    /// `_set_queue_limits`: a producer put at or past its topic's count is refused, as the broker's send check
    /// refuses it. Checked here, before the GIL is released, so the check costs a hash lookup.
    queue_limits: RwLock<FxHashMap<String, i32>>,
    /// The last tag expression `get_message` parsed, and what it parsed to: a consumer pulls with the same
    /// expression call after call, and one of many tags is worth parsing once (RocketMQ builds its
    /// `SubscriptionData` once per subscription, not per pull).
    last_subscription: Mutex<Option<(Box<str>, Arc<Subscription>)>>,
}

impl MessageStore {
    /// `expression` parsed, from the one-entry cache when it is the last one parsed.
    fn subscription(&self, expression: &str) -> Arc<Subscription> {
        let cached = |last: &Option<(Box<str>, Arc<Subscription>)>| {
            last.as_ref().filter(|(e, _)| &**e == expression).map(|(_, sub)| sub.clone())
        };
        if let Some(sub) = cached(&self.last_subscription.lock().unwrap_or_else(PoisonError::into_inner)) {
            return sub;
        }
        // Parsed without the lock: another thread's expression does not wait for this one.
        let sub = Arc::new(Subscription::parse(expression));
        *self.last_subscription.lock().unwrap_or_else(PoisonError::into_inner) = Some((expression.into(), sub.clone()));
        sub
    }

    #[allow(clippy::too_many_arguments)]
    fn batch_call(
        &self,
        py: Python<'_>,
        check_only: bool,
        topic: PyBackedStr,
        messages: &Bound<'_, PyAny>,
        queue_id: i32,
        tags: Option<args::BatchTags>,
        keys: Option<Vec<Option<args::KeysText>>>,
        sys_flag: i32,
        born_host: SocketAddr,
        born_timestamp: Option<i64>,
        reconsume_times: i32,
        wait_store_msg_ok: bool,
    ) -> PyResult<Option<PutResult>> {
        self.check_queue_limit(&topic, queue_id)?;
        enum Item {
            Body(PyBackedBytes),
            Full(Py<Message>),
        }
        let mut items = Vec::new();
        let iter = messages.try_iter().map_err(|_| {
            args::argument_type_error_for("messages must be an iterable of bytes or rmq.Message", messages)
        })?;
        let per_message = tags.is_some() || keys.is_some();
        for m in iter {
            let m = m?;
            if let Ok(b) = m.cast::<PyBytes>() {
                items.push(Item::Body(PyBackedBytes::from(b.clone())));
            } else if let Ok(full) = m.cast::<Message>() {
                if per_message {
                    return Err(super::errors::invalid_argument(format!(
                        "messages[{}] is an rmq.Message, which carries its own tags and keys: put_batch's tags= \
                         and keys= go with bodies (bytes)",
                        items.len()
                    )));
                }
                items.push(Item::Full(full.clone().unbind()));
            } else if let Ok(b) = m.extract::<PyBackedBytes>() {
                items.push(Item::Body(b));
            } else {
                return Err(args::argument_type_error_for("put_batch takes bytes or rmq.Message items", &m));
            }
        }
        let n = items.len();
        let tags_len = match &tags {
            Some(args::BatchTags::Each(v)) => Some(v.len()),
            _ => None,
        };
        for (name, len) in [("tags", tags_len), ("keys", keys.as_ref().map(Vec::len))] {
            if let Some(len) = len.filter(|&len| len != n) {
                return Err(super::errors::invalid_argument(format!(
                    "{name} has {len} entries for {n} messages (one per message)"
                )));
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
                .enumerate()
                .map(|(i, (it, props))| match it {
                    Item::Body(b) => BatchItem {
                        body: b,
                        tags: tags.as_ref().and_then(|t| t.of(i)),
                        keys: keys.as_ref().and_then(|k| k[i].as_deref()),
                        ..BatchItem::default()
                    },
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
            let (f, h, b, r, w) = (sys_flag, born_host, born_timestamp, reconsume_times, wait_store_msg_ok);
            if check_only {
                inner.check_batch(&topic, queue_id, &batch, f, h, b, r, w).map(|()| None)
            } else {
                inner.put_batch(&topic, queue_id, &batch, f, h, b, r, w).map(Some)
            }
        });
        Ok(result.map_err(to_py)?.map(|inner| PutResult { inner }))
    }

    fn check_queue_limit(&self, topic: &str, queue_id: i32) -> PyResult<()> {
        let limits = self.queue_limits.read().unwrap_or_else(PoisonError::into_inner);
        match limits.get(topic) {
            Some(&n) if queue_id >= n => Err(super::errors::invalid_argument(format!(
                "queue_id {queue_id} is illegal for topic {topic:?}: it is configured with {n} queues"
            ))),
            _ => Ok(()),
        }
    }
}

#[pymethods]
impl MessageStore {
    #[new]
    #[pyo3(signature = (path, config=None, recovery=None, read_only=false))]
    fn new(
        py: Python<'_>,
        #[pyo3(from_py_with = args::path)] path: PathBuf,
        config: Option<&Bound<'_, PyAny>>,
        recovery: Option<&Bound<'_, PyAny>>,
        read_only: bool,
    ) -> PyResult<Self> {
        let recovery = match recovery {
            None => RecoveryMode::Strict,
            Some(r) => RecoveryMode::parse(&args::text(r)?).map_err(to_py)?,
        };
        let config = config_from_dict(config)?;
        let options = store::open::OpenOptions { recovery, read_only };
        let store = py.detach(|| store::MessageStore::open_with(&path, config, &options)).map_err(to_py)?;
        Ok(MessageStore {
            inner: Arc::new(Handle(Arc::new(store))),
            queue_limits: RwLock::default(),
            last_subscription: Mutex::default(),
        })
    }

    /// Replaces the configured topics' queue counts (`rmq.topics` calls it whenever its table changes).
    fn _set_queue_limits(&self, limits: FxHashMap<String, i32>) {
        *self.queue_limits.write().unwrap_or_else(PoisonError::into_inner) = limits;
    }

    /// Stores one message and returns where it went.
    ///
    /// `delay_level` > 0 sets the `DELAY` property (as `Message.setDelayTimeLevel`): the message is stored in
    /// `SCHEDULE_TOPIC_XXXX` and the schedule service delivers it to `topic` once the level's delay passed; a
    /// `DELAY` given in `properties` does the same. 0 (the default) sets nothing.
    #[pyo3(signature = (topic, body, *, queue_id=0, tags=None, keys=None, properties=None, flag=0, sys_flag=0,
        transaction_type=TransactionType::NotType, born_host=DEFAULT_BORN_HOST, born_timestamp=None,
        reconsume_times=0, prepared_transaction_offset=0, wait_store_msg_ok=true, delay_level=0),
        text_signature = "(self, /, topic, body, *, queue_id=0, tags=None, keys=None, properties=None, flag=0, \
                          sys_flag=0, transaction_type=..., born_host='127.0.0.1:0', born_timestamp=None, \
                          reconsume_times=0, prepared_transaction_offset=0, wait_store_msg_ok=True, delay_level=0)")]
    #[allow(clippy::too_many_arguments)]
    fn put(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::text)] topic: PyBackedStr,
        #[pyo3(from_py_with = args::body)] body: PyBackedBytes,
        #[pyo3(from_py_with = args::java_int)] queue_id: i32,
        #[pyo3(from_py_with = args::opt_text)] tags: Option<PyBackedStr>,
        #[pyo3(from_py_with = args::keys_text)] keys: Option<args::KeysText>,
        #[pyo3(from_py_with = args::properties)] properties: Option<Vec<(String, String)>>,
        #[pyo3(from_py_with = args::java_int)] flag: i32,
        #[pyo3(from_py_with = args::java_int)] sys_flag: i32,
        #[pyo3(from_py_with = args::typed::<TransactionType>)] transaction_type: TransactionType,
        #[pyo3(from_py_with = host)] born_host: SocketAddr,
        #[pyo3(from_py_with = args::opt_java_long)] born_timestamp: Option<i64>,
        #[pyo3(from_py_with = args::java_int)] reconsume_times: i32,
        #[pyo3(from_py_with = args::java_long)] prepared_transaction_offset: i64,
        #[pyo3(from_py_with = args::boolean)] wait_store_msg_ok: bool,
        #[pyo3(from_py_with = args::java_int)] delay_level: i32,
    ) -> PyResult<PutResult> {
        self.check_queue_limit(&topic, queue_id)?;
        let mut props = properties.unwrap_or_default();
        if delay_level != 0 {
            if props.iter().any(|(k, _)| k == "DELAY") {
                return Err(to_py(Error::InvalidProperty {
                    name: "DELAY".into(),
                    reason: "given both as delay_level and as a property".into(),
                }));
            }
            props.push(("DELAY".into(), delay_level.to_string()));
        }
        let inner = &self.inner;
        let result = py.detach(|| {
            let refs: Vec<(&str, &str)> = props.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let msg = PutMessage {
                topic: &topic,
                queue_id,
                body: &body,
                tags: tags.as_deref(),
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

    /// Stores a batch atomically: `messages` are `bytes` (body only) or `Message` objects. With bodies, `tags`
    /// (one `str` for every message, or one per message) and `keys` (one entry per message, each as `put`'s
    /// `keys`) give what a `Message` would, without building one per message; a `Message` carries its own and
    /// refuses them.
    #[pyo3(signature = (topic, messages, *, queue_id=0, tags=None, keys=None, sys_flag=0, born_host=DEFAULT_BORN_HOST,
        born_timestamp=None, reconsume_times=0, wait_store_msg_ok=true),
        text_signature = "(self, /, topic, messages, *, queue_id=0, tags=None, keys=None, sys_flag=0, \
                          born_host='127.0.0.1:0', born_timestamp=None, reconsume_times=0, wait_store_msg_ok=True)")]
    #[allow(clippy::too_many_arguments)]
    fn put_batch(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::text)] topic: PyBackedStr,
        messages: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::java_int)] queue_id: i32,
        #[pyo3(from_py_with = args::batch_tags)] tags: Option<args::BatchTags>,
        #[pyo3(from_py_with = args::batch_keys)] keys: Option<Vec<Option<args::KeysText>>>,
        #[pyo3(from_py_with = args::java_int)] sys_flag: i32,
        #[pyo3(from_py_with = host)] born_host: SocketAddr,
        #[pyo3(from_py_with = args::opt_java_long)] born_timestamp: Option<i64>,
        #[pyo3(from_py_with = args::java_int)] reconsume_times: i32,
        #[pyo3(from_py_with = args::boolean)] wait_store_msg_ok: bool,
    ) -> PyResult<PutResult> {
        let put = self.batch_call(
            py,
            false,
            topic,
            messages,
            queue_id,
            tags,
            keys,
            sys_flag,
            born_host,
            born_timestamp,
            reconsume_times,
            wait_store_msg_ok,
        )?;
        put.ok_or_else(|| super::errors::invalid_argument("put_batch wrote nothing".to_owned()))
    }

    /// The checks `put_batch` makes before it writes, with the same arguments, writing nothing: raises what
    /// `put_batch` would raise for a bad topic, message, tag, key or property, or a batch too large. A caller
    /// that splits its messages over several `put_batch` calls checks them all first, so that a bad message
    /// writes none of them. (The store's state, such as closed, read-only or a full disk, is `put_batch`'s.)
    #[pyo3(signature = (topic, messages, *, queue_id=0, tags=None, keys=None, sys_flag=0, born_host=DEFAULT_BORN_HOST,
        born_timestamp=None, reconsume_times=0, wait_store_msg_ok=true),
        text_signature = "(self, /, topic, messages, *, queue_id=0, tags=None, keys=None, sys_flag=0, \
                          born_host='127.0.0.1:0', born_timestamp=None, reconsume_times=0, wait_store_msg_ok=True)")]
    #[allow(clippy::too_many_arguments)]
    fn check_batch(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::text)] topic: PyBackedStr,
        messages: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::java_int)] queue_id: i32,
        #[pyo3(from_py_with = args::batch_tags)] tags: Option<args::BatchTags>,
        #[pyo3(from_py_with = args::batch_keys)] keys: Option<Vec<Option<args::KeysText>>>,
        #[pyo3(from_py_with = args::java_int)] sys_flag: i32,
        #[pyo3(from_py_with = host)] born_host: SocketAddr,
        #[pyo3(from_py_with = args::opt_java_long)] born_timestamp: Option<i64>,
        #[pyo3(from_py_with = args::java_int)] reconsume_times: i32,
        #[pyo3(from_py_with = args::boolean)] wait_store_msg_ok: bool,
    ) -> PyResult<()> {
        self.batch_call(
            py,
            true,
            topic,
            messages,
            queue_id,
            tags,
            keys,
            sys_flag,
            born_host,
            born_timestamp,
            reconsume_times,
            wait_store_msg_ok,
        )?;
        Ok(())
    }

    /// The message stored at commitlog `offset`, or None past the end (or on an end-of-file blank).
    fn read(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::commitlog_offset)] offset: u64,
    ) -> PyResult<Option<MessageExt>> {
        let inner = &self.inner;
        let rec = py.detach(|| inner.read(offset)).map_err(to_py)?;
        Ok(rec.map(MessageExt::new))
    }

    /// Zero-copy bytes of the record at `offset`, or None.
    fn read_raw(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::commitlog_offset)] offset: u64,
    ) -> PyResult<Option<RecordView>> {
        let inner = &self.inner;
        let rec = py.detach(|| inner.read(offset)).map_err(to_py)?;
        Ok(rec.as_ref().map(RecordView::of))
    }

    /// Iterates stored messages in commitlog order from `from_offset` (a record boundary or segment start).
    #[pyo3(signature = (from_offset=0))]
    fn scan(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::commitlog_offset)] from_offset: u64,
    ) -> PyResult<Scanner> {
        self.inner.check_open().map_err(to_py)?;
        let inner = &self.inner;
        if !from_offset.is_multiple_of(inner.commitlog().file_size()) {
            // A start inside a record is a bad argument, not corruption: `read` says which.
            py.detach(|| inner.read(from_offset)).map_err(to_py)?;
        }
        Ok(Scanner {
            store: self.inner.clone(),
            next: from_offset,
            buffer: VecDeque::new(),
            done: false,
            skipped: Vec::new(),
        })
    }

    /// Flushes written data to disk.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let inner = &self.inner;
        py.detach(|| inner.flush()).map_err(to_py)
    }

    /// `consumerSendMsgBack`: sends the message stored at commitlog `offset` back for consumer `group`, as the
    /// broker does: to `%RETRY%<group>` delayed by `delay_level` (0: the broker's choice, 3 + reconsume
    /// times; clamped to the highest level), or to `%DLQ%<group>` once its reconsume times reached
    /// `max_reconsume_times` or when `delay_level` < 0. Returns (put result, topic, dead_letter, delay level).
    #[pyo3(signature = (offset, group, *, delay_level=0, max_reconsume_times=16))]
    fn send_message_back(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::java_long)] offset: i64,
        #[pyo3(from_py_with = args::text)] group: PyBackedStr,
        #[pyo3(from_py_with = args::java_int)] delay_level: i32,
        #[pyo3(from_py_with = args::java_int)] max_reconsume_times: i32,
    ) -> PyResult<(PutResult, String, bool, i32)> {
        let offset = u64::try_from(offset).map_err(|_| {
            to_py(Error::InvalidOffset { offset, reason: "a commitlog offset is never negative".into() })
        })?;
        let inner = &self.inner;
        let r =
            py.detach(|| inner.send_message_back(offset, &group, delay_level, max_reconsume_times)).map_err(to_py)?;
        Ok((PutResult { inner: r.put }, r.topic, r.dead_letter, r.delay_level))
    }

    /// The schedule service's progress: {delay level: next queue offset to deliver in `SCHEDULE_TOPIC_XXXX`
    /// queue level − 1}, in RocketMQ's order. While the service runs, its live table; otherwise what
    /// `config/delayOffset.json` (or its `.bak`) holds.
    fn delay_offsets<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let inner = &self.inner;
        let t = py.detach(|| inner.delay_offsets()).map_err(to_py)?;
        let d = PyDict::new(py);
        for (level, offset) in t.in_order() {
            d.set_item(level, offset)?;
        }
        Ok(d)
    }

    /// Writes `config/delayOffset.json` now (after flushing the commitlog) if the schedule service runs and its
    /// offsets changed; the service does this every `flush_delay_offset_interval` ms and `close` once more.
    fn persist_delay_offsets(&self, py: Python<'_>) -> PyResult<()> {
        let inner = &self.inner;
        py.detach(|| inner.persist_delay_offsets()).map_err(to_py)
    }

    /// Flushes and closes; later calls raise StoreClosedError. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let inner = &self.inner;
        py.detach(|| inner.close()).map_err(to_py)
    }

    /// RocketMQ's `executeDeleteFilesManually`: the next 20 runs of the cleanup service delete expired
    /// commitlog segments whatever the hour (`delete_when`); returns at once.
    fn delete_expired_files(&self) -> PyResult<()> {
        self.inner.delete_expired_files().map_err(to_py)
    }

    /// One cleanup run now, as a manual run, waiting for it: expired commitlog segments (never the last one)
    /// and the consume-queue and index files wholly below the new minimum. Returns what it deleted.
    fn delete_expired_files_now<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let inner = &self.inner;
        let r = py.detach(|| inner.delete_expired_files_now()).map_err(to_py)?;
        let paths = |v: &[PathBuf]| v.iter().map(|p| p.display().to_string()).collect::<Vec<_>>();
        let d = PyDict::new(py);
        d.set_item("commitlog", paths(&r.commitlog))?;
        d.set_item("consume_queue", paths(&r.consume_queue))?;
        d.set_item("index", paths(&r.index))?;
        d.set_item("min_offset", r.min_offset)?;
        d.set_item("disk_used_ratio", r.disk_used_ratio)?;
        let reasons = [
            ("time", r.reasons.time),
            ("space", r.reasons.space),
            ("immediately", r.reasons.immediately),
            ("manual", r.reasons.manual),
        ];
        d.set_item("reasons", reasons.iter().filter(|(_, on)| *on).map(|(n, _)| *n).collect::<Vec<_>>())?;
        Ok(d)
    }

    /// Whether puts are refused because the disk is over `disk_space_warning_level_ratio` (RocketMQ's
    /// DISK_FULL flag, set and cleared by the cleanup runs).
    #[getter]
    fn disk_full(&self) -> bool {
        self.inner.is_disk_full()
    }

    /// The checkpoint's values (spec §8.1) as the store holds them.
    #[getter]
    fn checkpoint<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let v = self.inner.checkpoint();
        let d = PyDict::new(py);
        d.set_item("physic_msg_timestamp", v.physic_msg_timestamp)?;
        d.set_item("logics_msg_timestamp", v.logics_msg_timestamp)?;
        d.set_item("index_msg_timestamp", v.index_msg_timestamp)?;
        d.set_item("master_flushed_offset", v.master_flushed_offset)?;
        d.set_item("confirm_phy_offset", v.confirm_phy_offset)?;
        Ok(d)
    }

    /// The settings in force, as a dict in `StoreConfig`'s order (what the Rust core was given; also
    /// `max_message_size` as last set).
    #[getter]
    fn settings<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        config_to_dict(py, &self.inner.config())
    }

    /// Whether the store was opened read-only (`read_only=True`).
    #[getter]
    fn read_only(&self) -> bool {
        self.inner.is_read_only()
    }

    /// A read-only store takes in what another process (a live broker) wrote since it was opened or last
    /// refreshed; segments deleted underneath read as MESSAGE_WAS_REMOVING. Returns the new end of the log.
    /// On a writable store it changes nothing and returns the end.
    fn refresh(&self, py: Python<'_>) -> PyResult<u64> {
        py.detach(|| self.inner.refresh()).map_err(to_py)
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

    /// What opening found: end offset, where validation began, discarded torn bytes, deleted empty trailing
    /// segments, why it stopped.
    #[getter]
    fn open_report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let r = self.inner.open_report();
        let d = PyDict::new(py);
        d.set_item("end_offset", r.end_offset)?;
        d.set_item("validated_from", r.validated_from)?;
        d.set_item("discarded_bytes", r.discarded_bytes)?;
        d.set_item("removed_files", r.removed_files)?;
        d.set_item("stop_reason", r.stop_reason.clone())?;
        d.set_item("torn_bytes", r.torn_bytes)?;
        d.set_item("recovery", r.mode.name())?;
        let damage = PyList::empty(py);
        for x in &r.damage {
            damage.append(damage_dict(py, x)?)?;
        }
        d.set_item("damage", damage)?;
        Ok(d)
    }

    /// The next queue offset of (topic, queue_id): how many messages the queue holds.
    fn next_queue_offset(
        &self,
        #[pyo3(from_py_with = args::text)] topic: PyBackedStr,
        #[pyo3(from_py_with = args::java_int)] queue_id: i32,
    ) -> PyResult<i64> {
        self.inner.check_open().map_err(to_py)?;
        Ok(self.inner.next_queue_offset(&topic, queue_id))
    }

    /// Changes `maxMessageSize` for later puts: 10 to `i32::MAX` bytes. Smaller values, which RocketMQ ignores
    /// silently, raise `InvalidArgumentError` and change nothing.
    fn set_max_message_size(&self, #[pyo3(from_py_with = args::max_message_size)] size: i32) -> PyResult<()> {
        self.inner.check_open().map_err(to_py)?;
        self.inner.set_max_message_size(size);
        Ok(())
    }

    /// One dispatch round: at most `max_records` records from the reput offset into the consume queues and
    /// the index. Returns (records dispatched, reput offset after, arrivals as (topic, queue_id, next_offset)).
    #[pyo3(signature = (max_records=4096, want_arrivals=false))]
    fn _dispatch(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::count_u64)] max_records: u64,
        #[pyo3(from_py_with = args::boolean)] want_arrivals: bool,
    ) -> PyResult<(u64, u64, Vec<Arrival>)> {
        let inner = &self.inner;
        let round = py.detach(|| inner.dispatch(max_records, want_arrivals)).map_err(to_py)?;
        let arrivals = round.arrivals.into_iter().map(|a| (a.topic, a.queue_id, a.next_offset)).collect();
        Ok((round.records, round.reput_offset, arrivals))
    }

    /// Starts the store's background services (reput, warm, flush, group commit, commit, clean) once; later
    /// calls do nothing. The Python constructor calls it unless `start_services=False`.
    fn start_services(&self, py: Python<'_>) -> PyResult<()> {
        let inner = &self.inner;
        py.detach(|| inner.start_services()).map_err(to_py)
    }

    /// The background services' counters: (name, running, rounds, work, errors, last error) each.
    fn _service_stats(&self) -> Vec<ServiceStatsTuple> {
        self.inner
            .service_stats()
            .into_iter()
            .map(|s| (s.name, s.running, s.rounds, s.work, s.errors, s.last_error))
            .collect()
    }

    /// The arrival sequence: advances after every dispatch round that adds consume-queue entries, and on
    /// `wake_arrival_waiters()`.
    #[getter]
    fn arrival_seq(&self) -> u64 {
        self.inner.arrival_seq()
    }

    /// Waits (GIL released) until the arrival sequence differs from `seen`, the store closes, or `timeout`
    /// seconds pass; returns the sequence then.
    fn wait_arrival(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::count_u64)] seen: u64,
        #[pyo3(from_py_with = args::seconds)] timeout: f64,
    ) -> PyResult<u64> {
        let inner = &self.inner;
        let deadline = Instant::now().checked_add(args::duration(timeout));
        loop {
            let (slice, last) = wait_slice(deadline);
            let seq = py.detach(|| inner.wait_arrival(seen, slice));
            if seq != seen || last || inner.is_closed() {
                return Ok(seq);
            }
            py.check_signals()?;
        }
    }

    /// Wakes every thread in `wait_arrival` (the sequence advances without an arrival).
    fn wake_arrival_waiters(&self) {
        self.inner.wake_arrival_waiters();
    }

    /// Waits (GIL released) until (topic, queue_id) holds a dispatched message at or after `offset`; False on
    /// timeout (seconds) or when the store closes first.
    fn wait_queue_beyond(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::text)] topic: PyBackedStr,
        #[pyo3(from_py_with = args::java_int)] queue_id: i32,
        #[pyo3(from_py_with = args::java_long)] offset: i64,
        #[pyo3(from_py_with = args::seconds)] timeout: f64,
    ) -> PyResult<bool> {
        let inner = &self.inner;
        let deadline = Instant::now().checked_add(args::duration(timeout));
        loop {
            let (slice, last) = wait_slice(deadline);
            if py.detach(|| inner.wait_queue_beyond(&topic, queue_id, offset, slice)) {
                return Ok(true);
            }
            if last || inner.is_closed() {
                return Ok(false);
            }
            py.check_signals()?;
        }
    }

    /// Dispatches everything written so far on the calling thread; returns the number of records.
    fn dispatch_all(&self, py: Python<'_>) -> PyResult<u64> {
        self.inner.check_open().map_err(to_py)?;
        let inner = &self.inner;
        py.detach(|| {
            let mut total = 0;
            loop {
                let round = inner.dispatch(u64::MAX, false)?;
                total += round.records;
                if round.records == 0 && round.reput_offset >= inner.confirm_offset() {
                    return Ok(total);
                }
            }
        })
        .map_err(to_py)
    }

    /// Waits until everything written before the call is in the consume queues and the index. Returns
    /// False on timeout (seconds) or if the store closes first.
    #[pyo3(signature = (timeout=10.0))]
    fn _wait_dispatched(&self, py: Python<'_>, #[pyo3(from_py_with = args::seconds)] timeout: f64) -> bool {
        let inner = &self.inner;
        let timeout = args::duration(timeout);
        py.detach(|| inner.wait_dispatched(timeout))
    }

    /// Commitlog offset below which everything is flushed to disk (RocketMQ's flushedWhere): moved by the flush
    /// service under ASYNC_FLUSH, by each put under SYNC_FLUSH, by `flush()` and `close()`.
    #[getter]
    fn flushed_offset(&self) -> u64 {
        self.inner.flushed_offset()
    }

    /// Commitlog offset below which everything is in the mapped files (readable, flushable); without a
    /// transient store pool, `max_offset`.
    #[getter]
    fn committed_offset(&self) -> u64 {
        self.inner.committed_offset()
    }

    /// Commitlog offset up to which every record is dispatched.
    #[getter]
    fn reput_offset(&self) -> u64 {
        self.inner.reput_offset()
    }

    /// Offset dispatch may read up to (the end of the log; under SYNC_FLUSH the end of flushed data).
    #[getter]
    fn confirm_offset(&self) -> u64 {
        self.inner.confirm_offset()
    }

    /// Bytes written but not yet dispatched.
    #[getter]
    fn dispatch_behind_bytes(&self) -> u64 {
        self.inner.dispatch_behind_bytes()
    }

    /// What opening did to the consume queues and index.
    #[getter]
    fn recovery_report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let r = self.inner.recovery_report();
        let d = PyDict::new(py);
        d.set_item("dispatched_from", r.dispatched_from)?;
        d.set_item("redispatched_records", r.redispatched_records)?;
        d.set_item("rebuilt_cq_entries", r.rebuilt_cq_entries)?;
        d.set_item("reindexed_keys", r.reindexed_keys)?;
        d.set_item("skipped_dirs", r.skipped_dirs.iter().map(|p| p.display().to_string()).collect::<Vec<_>>())?;
        d.set_item("rebuilt_queues", r.rebuilt_queues.clone())?;
        d.set_item("rebuilt_reasons", r.rebuilt_reasons.clone())?;
        d.set_item("rebuilt_index_files", r.rebuilt_index_files.clone())?;
        d.set_item("transient_store_pool", r.transient_store_pool.clone())?;
        d.set_item("checkpoint_restart", r.checkpoint_restart)?;
        d.set_item("dispatch_blocked", r.dispatch_blocked.as_deref())?;
        d.set_item("path", r.path.name())?;
        d.set_item("start_offset", r.start_offset)?;
        d.set_item("start_segment", r.start_segment.as_ref().map(|p| p.display().to_string()))?;
        d.set_item("validated_bytes", r.validated_bytes)?;
        d.set_item("validate_seconds", r.validate_time.as_secs_f64())?;
        d.set_item("open_seconds", r.open_time.as_secs_f64())?;
        d.set_item("index_files_trusted", r.index_files_trusted)?;
        Ok(d)
    }

    /// Records dispatch could not handle: (total count, recent ones as (offset, reason, skipped bytes)).
    fn dispatch_issues(&self) -> (u64, Vec<(u64, String, u64)>) {
        let (total, recent) = self.inner.dispatch_issues();
        (total, recent.into_iter().map(|i| (i.offset, i.reason, i.skipped)).collect())
    }

    /// `queryMessage`: messages of `topic` whose UNIQ_KEY or one of whose KEYS is `key`.
    ///
    /// Only messages stored in [begin, end] (ms since the epoch) count; at most `max_num`, capped at
    /// `max_msgs_num_batch` (64) as RocketMQ caps it. Unlike RocketMQ, another key with the same hash never
    /// comes back: each candidate's topic and keys are checked.
    #[pyo3(signature = (topic, key, max_num=32, begin=0, end=i64::MAX))]
    fn query_message(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::text)] topic: PyBackedStr,
        #[pyo3(from_py_with = args::text)] key: PyBackedStr,
        #[pyo3(from_py_with = args::count_usize)] max_num: usize,
        #[pyo3(from_py_with = args::java_long)] begin: i64,
        #[pyo3(from_py_with = args::java_long)] end: i64,
    ) -> PyResult<QueryMessageResult> {
        let inner = &self.inner;
        py.detach(|| inner.query_message(&topic, &key, max_num, begin, end)).map(QueryMessageResult::new).map_err(to_py)
    }

    /// `getOffsetInQueueByTime`: the queue offset of the first message stored at or after `timestamp`
    /// (LOWER) or of the last stored at or before it (UPPER), clamped to [min, max]; 0 for a missing queue.
    #[pyo3(signature = (topic, queue_id, timestamp, boundary=BoundaryType::Lower))]
    fn get_offset_in_queue_by_time(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::text)] topic: PyBackedStr,
        #[pyo3(from_py_with = args::java_int)] queue_id: i32,
        #[pyo3(from_py_with = args::java_long)] timestamp: i64,
        #[pyo3(from_py_with = args::typed::<BoundaryType>)] boundary: BoundaryType,
    ) -> PyResult<i64> {
        self.inner.check_open().map_err(to_py)?;
        let inner = &self.inner;
        Ok(py.detach(|| inner.offset_in_queue_by_time(&topic, queue_id, timestamp, boundary.into())))
    }

    /// `getMinOffsetInQueue`: the first queue offset still readable; -1 if the queue does not exist.
    fn get_min_offset_in_queue(
        &self,
        #[pyo3(from_py_with = args::text)] topic: PyBackedStr,
        #[pyo3(from_py_with = args::java_int)] queue_id: i32,
    ) -> PyResult<i64> {
        self.inner.check_open().map_err(to_py)?;
        Ok(self.inner.min_offset_in_queue(&topic, queue_id))
    }

    /// `getMaxOffsetInQueue`: one past the last dispatched entry (0 for a missing queue); with
    /// committed=False the next queue offset a put would take.
    #[pyo3(signature = (topic, queue_id, committed=true))]
    fn get_max_offset_in_queue(
        &self,
        #[pyo3(from_py_with = args::text)] topic: PyBackedStr,
        #[pyo3(from_py_with = args::java_int)] queue_id: i32,
        #[pyo3(from_py_with = args::boolean)] committed: bool,
    ) -> PyResult<i64> {
        self.inner.check_open().map_err(to_py)?;
        Ok(self.inner.max_offset_in_queue(&topic, queue_id, committed))
    }

    /// `getCommitLogOffsetInQueue`: commitlog offset of the message at `queue_offset`, 0 if none.
    fn get_commitlog_offset_in_queue(
        &self,
        #[pyo3(from_py_with = args::text)] topic: PyBackedStr,
        #[pyo3(from_py_with = args::java_int)] queue_id: i32,
        #[pyo3(from_py_with = args::java_long)] queue_offset: i64,
    ) -> PyResult<i64> {
        self.inner.check_open().map_err(to_py)?;
        Ok(self.inner.commitlog_offset_in_queue(&topic, queue_id, queue_offset))
    }

    /// `getMessageStoreTimeStamp`: store time (ms) of the message at `queue_offset`, -1 if none.
    fn get_message_store_timestamp(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::text)] topic: PyBackedStr,
        #[pyo3(from_py_with = args::java_int)] queue_id: i32,
        #[pyo3(from_py_with = args::java_long)] queue_offset: i64,
    ) -> PyResult<i64> {
        self.inner.check_open().map_err(to_py)?;
        let inner = &self.inner;
        Ok(py.detach(|| inner.message_store_timestamp(&topic, queue_id, queue_offset)))
    }

    /// `getMessage` (spec §13): up to `max_msgs` messages of (topic, queue_id) from queue `offset` whose tag
    /// matches `subscription` (`*` or None for all, or `TagA || TagB`), within `max_total_msg_size` bytes and
    /// the hot/cold caps. One call, GIL released; the messages are views of the commitlog, not copies.
    #[pyo3(signature = (group, topic, queue_id, offset, max_msgs=32, subscription=None, max_total_msg_size=crate::store::get::MAX_PULL_SIZE))]
    #[allow(clippy::too_many_arguments)]
    fn get_message(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::text)] group: PyBackedStr,
        #[pyo3(from_py_with = args::text)] topic: PyBackedStr,
        #[pyo3(from_py_with = args::java_int)] queue_id: i32,
        #[pyo3(from_py_with = args::java_long)] offset: i64,
        #[pyo3(from_py_with = args::count_u32)] max_msgs: u32,
        #[pyo3(from_py_with = args::opt_text)] subscription: Option<PyBackedStr>,
        #[pyo3(from_py_with = args::count_u64)] max_total_msg_size: u64,
    ) -> PyResult<GetMessageResult> {
        let inner = &self.inner;
        static ALL: Subscription = Subscription::all();
        let parsed = subscription.as_deref().map(|e| self.subscription(e));
        let sub: &Subscription = parsed.as_deref().unwrap_or(&ALL);
        let res = py
            .detach(|| inner.get_message(&group, &topic, queue_id, offset, max_msgs, max_total_msg_size, sub))
            .map_err(to_py)?;
        Ok(GetMessageResult::new(res))
    }

    /// `lookMessageByOffset`: the message at commitlog `offset` (and of `size` bytes, if given), or None
    /// when no message starts there.
    #[pyo3(signature = (offset, size=None))]
    fn look_message_by_offset(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::java_long)] offset: i64,
        #[pyo3(from_py_with = args::opt_java_int)] size: Option<i32>,
    ) -> PyResult<Option<MessageExt>> {
        self.inner.check_open().map_err(to_py)?;
        let Ok(offset) = u64::try_from(offset) else { return Ok(None) };
        let inner = &self.inner;
        let rec = py.detach(|| inner.read(offset)).ok().flatten();
        Ok(rec.filter(|r| size.is_none_or(|s| s == r.header.total_size)).map(MessageExt::new))
    }

    /// Up to `max_entries` consume-queue entries from `from_offset` (clamped to the min offset), as
    /// (queue_offset, commitlog_offset, size, tags_code) tuples.
    #[pyo3(signature = (topic, queue_id, from_offset=0, max_entries=1024))]
    fn _cq_entries(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::text)] topic: PyBackedStr,
        #[pyo3(from_py_with = args::java_int)] queue_id: i32,
        #[pyo3(from_py_with = args::java_long)] from_offset: i64,
        #[pyo3(from_py_with = args::count_usize)] max_entries: usize,
    ) -> PyResult<Vec<(i64, i64, i32, i64)>> {
        self.inner.check_open().map_err(to_py)?;
        let Some(cq) = self.inner.consume_queue(&topic, queue_id) else { return Ok(Vec::new()) };
        let (first, entries) = py.detach(|| cq.entries(from_offset.max(0) as u64, max_entries));
        Ok(entries
            .into_iter()
            .enumerate()
            .map(|(i, e)| (first as i64 + i as i64, e.offset, e.size, e.tags_code))
            .collect())
    }

    /// Topics that have consume queues, sorted.
    fn topics(&self) -> PyResult<Vec<String>> {
        self.inner.check_open().map_err(to_py)?;
        let mut t: Vec<String> = self.inner.consume_queues().all().iter().map(|q| q.topic().to_owned()).collect();
        t.dedup();
        Ok(t)
    }

    /// Queue ids of `topic` that have consume queues, ascending.
    fn queue_ids(&self, #[pyo3(from_py_with = args::text)] topic: PyBackedStr) -> PyResult<Vec<i32>> {
        self.inner.check_open().map_err(to_py)?;
        Ok(self.inner.consume_queues().queue_ids(&topic))
    }

    /// Files of the consume queue of (topic, queue_id), in offset order.
    fn consume_queue_files(
        &self,
        #[pyo3(from_py_with = args::text)] topic: PyBackedStr,
        #[pyo3(from_py_with = args::java_int)] queue_id: i32,
    ) -> PyResult<Vec<PathBuf>> {
        self.inner.check_open().map_err(to_py)?;
        Ok(self.inner.consume_queue(&topic, queue_id).map(|q| q.file_paths()).unwrap_or_default())
    }

    /// Index files, oldest first.
    fn index_files(&self) -> PyResult<Vec<PathBuf>> {
        self.inner.check_open().map_err(to_py)?;
        Ok(self.inner.index().map(|i| i.file_paths()).unwrap_or_default())
    }

    /// Each index file's name and header as the store holds it (oldest first): (name, beginTimestamp,
    /// endTimestamp, beginPhyOffset, endPhyOffset, hashSlotCount, indexCount). A read-only store's file rebuilt
    /// in memory (the repair a writable open would make) is there too, though not on disk.
    fn index_file_headers(&self) -> PyResult<Vec<IndexFileHeaderTuple>> {
        self.inner.check_open().map_err(to_py)?;
        let Some(index) = self.inner.index() else { return Ok(Vec::new()) };
        Ok(index
            .files()
            .iter()
            .map(|f| {
                let h = f.header();
                let (begin_ts, end_ts, begin_phy, end_phy) =
                    (h.begin_timestamp, h.end_timestamp, h.begin_phy_offset, h.end_phy_offset);
                (f.name(), begin_ts, end_ts, begin_phy, end_phy, h.hash_slot_count, h.index_count)
            })
            .collect())
    }

    /// Segment files of the commitlog, in offset order.
    fn commitlog_files(&self) -> PyResult<Vec<PathBuf>> {
        self.inner.check_open().map_err(to_py)?;
        Ok(self.inner.commitlog().queue().files().iter().map(|f| f.path().to_owned()).collect())
    }
}

/// How long a wait with the GIL released lasts before the thread takes it back to run Python's signal handlers
/// (Ctrl-C raises `KeyboardInterrupt` within this, not at the end of a long poll).
const SIGNAL_CHECK: Duration = Duration::from_millis(100);

/// The next slice of a wait until `deadline` (None: beyond any clock), and whether it is the last.
fn wait_slice(deadline: Option<Instant>) -> (Duration, bool) {
    let left = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(Instant::now()));
    (left.min(SIGNAL_CHECK), left <= SIGNAL_CHECK)
}

/// (name, beginTimestamp, endTimestamp, beginPhyOffset, endPhyOffset, hashSlotCount, indexCount).
type IndexFileHeaderTuple = (String, i64, i64, i64, i64, i32, i32);

/// What Python holds of an open store: the `MessageStore` object and each of its `Scanner`s share one, and the
/// last of them to go closes the store there and then, as `close()` does. The store's services hold it only
/// weakly, but each upgrades that for a round (the reput service naps inside one while puts arrive): left to
/// the last `Arc`, a store whose Python object was dropped (or never closed before the interpreter exits) would
/// close later on a service thread, or not at all, keeping its lock (a reopen in this process: `StoreLockedError`)
/// and its abort marker (the next open: the abnormal recovery).
pub(crate) struct Handle(Arc<store::MessageStore>);

impl std::ops::Deref for Handle {
    type Target = Arc<store::MessageStore>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        let _ = self.0.close(); // a failure to close is the next open's to report, as after a crash
    }
}

/// One damaged range (`open_report["damage"]`, `Scanner.skipped`) as a dict.
fn damage_dict<'py>(py: Python<'py>, x: &crate::commitlog::Damage) -> PyResult<Bound<'py, PyDict>> {
    let e = PyDict::new(py);
    e.set_item("path", x.path.display().to_string())?;
    e.set_item("offset", x.offset)?;
    e.set_item("bytes", x.bytes)?;
    e.set_item("reason", x.reason.clone())?;
    e.set_item("dropped_records", x.dropped_records)?;
    Ok(e)
}

/// Iterator over stored messages; fetches records in batches with the interpreter detached.
#[pyclass(module = "rmq._native")]
pub struct Scanner {
    store: Arc<Handle>,
    next: u64,
    buffer: VecDeque<Record>,
    done: bool,
    /// Damage stepped over so far (a store opened with `recovery="salvage"`).
    skipped: Vec<crate::commitlog::Damage>,
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
            let skipped = &mut self.skipped;
            let fetched: Result<Vec<Record>, Error> = py.detach(|| {
                let mut out = Vec::with_capacity(SCAN_BATCH);
                while out.len() < SCAN_BATCH {
                    match store.next_record_salvaging(next, skipped) {
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

    /// The damage a scan of a store opened with `recovery="salvage"` stepped over so far, beyond what the open
    /// met (`open_report["damage"]`): dicts of `path`, `offset`, `bytes`, `reason`, `dropped_records` (0).
    #[getter]
    fn skipped<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for x in &self.skipped {
            out.append(damage_dict(py, x)?)?;
        }
        Ok(out)
    }

    /// Commitlog offset where the scan continues.
    #[getter]
    fn position(&self) -> u64 {
        self.buffer.front().map(|r| r.offset()).unwrap_or(self.next)
    }
}

/// `rmq dump --index`: the header of one index file and its entries, newest first, as
/// `(number, keyHash, commitlog offset)`; read-only (the file is mapped copy-on-write).
#[pyfunction]
#[pyo3(signature = (path, max_hash_slot_num, max_index_num))]
#[allow(clippy::type_complexity)]
fn index_file_entries<'py>(
    py: Python<'py>,
    #[pyo3(from_py_with = args::path)] path: PathBuf,
    #[pyo3(from_py_with = args::java_int)] max_hash_slot_num: i32,
    #[pyo3(from_py_with = args::java_int)] max_index_num: i32,
) -> PyResult<(Bound<'py, PyDict>, Vec<(i32, i32, i64)>)> {
    let cfg = crate::index::IndexConfig {
        max_hash_slot_num: u32::try_from(max_hash_slot_num)
            .map_err(|_| to_py(Error::InvalidConfig("max_hash_slot_num must be positive".into())))?,
        max_index_num: u32::try_from(max_index_num)
            .map_err(|_| to_py(Error::InvalidConfig("max_index_num must be positive".into())))?,
        max_msgs_num_batch: 64,
    };
    let (h, entries) = py
        .detach(|| -> crate::error::Result<_> {
            let f = crate::index::IndexFile::open_in(crate::mmap::Storage::Overlay, &path, cfg)?;
            let mut entries = Vec::new();
            f.entries_back(&mut |n, hash, offset| {
                entries.push((n, hash, offset));
                true
            });
            Ok((f.header(), entries))
        })
        .map_err(to_py)?;
    let d = PyDict::new(py);
    d.set_item("begin_timestamp", h.begin_timestamp)?;
    d.set_item("end_timestamp", h.end_timestamp)?;
    d.set_item("begin_phy_offset", h.begin_phy_offset)?;
    d.set_item("end_phy_offset", h.end_phy_offset)?;
    d.set_item("hash_slot_count", h.hash_slot_count)?;
    d.set_item("index_count", h.index_count)?;
    Ok((d, entries))
}

/// `rmq check`: reads every byte of the store at `path` and writes none (see `store::verify`). Returns a dict:
/// `findings` (area, kind, path, offset, what), counts, and the RocketMQ and rmq verdicts.
#[pyfunction]
#[pyo3(signature = (path, config=None))]
fn check_store<'py>(
    py: Python<'py>,
    #[pyo3(from_py_with = args::path)] path: PathBuf,
    config: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let config = config_from_dict(config)?;
    let rep = py.detach(|| store::verify::check(&path, config)).map_err(to_py)?;
    let d = PyDict::new(py);
    let findings = pyo3::types::PyList::empty(py);
    for f in &rep.findings {
        let item = PyDict::new(py);
        item.set_item("area", f.area)?;
        item.set_item("kind", f.kind)?;
        item.set_item("path", f.path.display().to_string())?;
        item.set_item("offset", f.offset)?;
        item.set_item("what", &f.what)?;
        findings.append(item)?;
    }
    d.set_item("clean", rep.is_clean())?;
    d.set_item("findings", findings)?;
    d.set_item("records", rep.records)?;
    d.set_item("record_bytes", rep.record_bytes)?;
    d.set_item("segments", rep.segments)?;
    d.set_item("cq_entries", rep.cq_entries)?;
    d.set_item("index_entries", rep.index_entries)?;
    d.set_item("rocketmq_verdict", &rep.rocketmq_verdict)?;
    d.set_item("rmq_verdict", &rep.rmq_verdict)?;
    Ok(d)
}

/// The file sizes of the store at `path`, read off its files (`FileSizes::read`): a dict with the
/// `StoreConfig` names of those it could read (`mapped_file_size_commit_log`, `mapped_file_size_consume_queue`,
/// `max_hash_slot_num`, `max_index_num`; without the last two when `index` is false). Writes nothing.
#[pyfunction]
#[pyo3(signature = (path, *, index=true))]
fn sizes_from_files<'py>(
    py: Python<'py>,
    #[pyo3(from_py_with = args::path)] path: PathBuf,
    #[pyo3(from_py_with = args::boolean)] index: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let read = if index { crate::config::FileSizes::read } else { crate::config::FileSizes::read_segments };
    let sizes = py.detach(|| read(&path)).map_err(to_py)?;
    let d = PyDict::new(py);
    if let Some(s) = sizes.mapped_file_size_commit_log {
        d.set_item("mapped_file_size_commit_log", s)?;
    }
    if let Some(s) = sizes.mapped_file_size_consume_queue {
        d.set_item("mapped_file_size_consume_queue", s)?;
    }
    if let Some((slots, entries)) = sizes.index {
        d.set_item("max_hash_slot_num", slots)?;
        d.set_item("max_index_num", entries)?;
    }
    Ok(d)
}

/// Deletes the store directory `path` with its lock held; raises `StoreLockedError` (nothing deleted) when a
/// process (a broker, rmq, this one) has the store open, and `InvalidArgumentError` (nothing deleted) when `path`
/// is not a directory or holds anything a store does not.
#[pyfunction]
fn remove_store(py: Python<'_>, #[pyo3(from_py_with = args::path)] path: PathBuf) -> PyResult<()> {
    py.detach(|| crate::checkpoint::remove_store(&path)).map_err(to_py)
}

/// The names of the entries of the directory `path` that no store holds (`checkpoint::STORE_ROOT_NAMES`: a
/// broker's root names and rmq's `rmq-groups`), sorted; empty for a store or an empty directory.
#[pyfunction]
fn foreign_store_entries(py: Python<'_>, #[pyo3(from_py_with = args::path)] path: PathBuf) -> PyResult<Vec<String>> {
    py.detach(|| crate::checkpoint::foreign_entries(&path)).map_err(to_py)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(remove_store, m)?)?;
    m.add_function(wrap_pyfunction!(foreign_store_entries, m)?)?;
    m.add_function(wrap_pyfunction!(sizes_from_files, m)?)?;
    m.add_function(wrap_pyfunction!(config_settings, m)?)?;
    m.add_function(wrap_pyfunction!(check_config, m)?)?;
    m.add_function(wrap_pyfunction!(config_from_properties, m)?)?;
    m.add_class::<MessageStore>()?;
    m.add_class::<Scanner>()?;
    m.add_function(wrap_pyfunction!(check_store, m)?)?;
    m.add_function(wrap_pyfunction!(index_file_entries, m)?)?;
    Ok(())
}
