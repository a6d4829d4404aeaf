//! The `topics.json` codec ([`crate::offsets::topics`]) for `rmq.topics`, which keeps the validation, locking
//! and persistence policy.

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;

use super::args;
use super::errors::to_py;
use crate::error::Error;
use crate::offsets::topics::{self, TopicConfig, TopicTable};
use crate::offsets::DataVersion;

/// A topic config as Python sees it: (name, read queues, write queues, perm, order, sys flag, filter type,
/// [(attribute, value), ...]).
type TopicTuple = (String, i32, i32, i32, bool, i32, String, Vec<(String, String)>);

fn to_tuple(t: &TopicConfig) -> TopicTuple {
    (
        t.name.clone(),
        t.read_queue_nums,
        t.write_queue_nums,
        t.perm,
        t.order,
        t.sys_flag,
        t.filter_type.clone(),
        t.attributes.clone(),
    )
}

fn from_tuple(t: TopicTuple) -> TopicConfig {
    let (name, read_queue_nums, write_queue_nums, perm, order, sys_flag, filter_type, attributes) = t;
    TopicConfig { name, read_queue_nums, write_queue_nums, perm, order, sys_flag, filter_type, attributes }
}

/// The topic table as RocketMQ's `TopicConfigManager` holds it ([`TopicTable`]): every change goes through it
/// so that it encodes to the broker's bytes. Not thread-safe on its own: `rmq.topics` guards it.
#[pyclass(module = "rmq._native")]
#[derive(Clone)]
struct TopicConfigTable {
    table: TopicTable,
}

#[pymethods]
impl TopicConfigTable {
    /// The table of a manager that loaded nothing.
    #[new]
    fn new() -> Self {
        TopicConfigTable { table: TopicTable::new() }
    }

    /// The table a manager holds after loading a file with these topics (in file order).
    #[staticmethod]
    fn loaded(topics: Vec<TopicTuple>) -> Self {
        let topics: Vec<TopicConfig> = topics.into_iter().map(from_tuple).collect();
        TopicConfigTable { table: TopicTable::decoded(&topics) }
    }

    /// `putTopicConfig` (the caller has validated the values).
    fn put(&mut self, topic: TopicTuple) {
        self.table.put(from_tuple(topic));
    }

    /// Removes a topic; returns whether it was there.
    fn remove(&mut self, name: &str) -> bool {
        self.table.remove(name).is_some()
    }

    /// One topic, None when unknown.
    fn get(&self, name: &str) -> Option<TopicTuple> {
        self.table.get(name).map(to_tuple)
    }

    /// The topics in the broker's order.
    fn topics(&self) -> Vec<TopicTuple> {
        self.table.in_order().into_iter().map(to_tuple).collect()
    }

    /// An independent copy.
    fn copy(&self) -> Self {
        self.clone()
    }

    /// `TopicConfigManager.encode(true)`: the file's text.
    fn encode(
        &self,
        #[pyo3(from_py_with = args::java_long)] counter: i64,
        #[pyo3(from_py_with = args::java_long)] state_version: i64,
        #[pyo3(from_py_with = args::java_long)] timestamp: i64,
    ) -> String {
        topics::encode(&self.table, &DataVersion { counter, state_version, timestamp })
    }

    fn __len__(&self) -> usize {
        self.table.len()
    }
}

/// What `decode_topics` returns: the topics in file order and (counter, state_version, timestamp).
type DecodedTuple = (Vec<TopicTuple>, (i64, i64, i64));

/// Reads a `topics.json`'s bytes; raises `CorruptionError` (naming `path`) when they are not one.
#[pyfunction]
#[pyo3(signature = (data, path))]
fn decode_topics(
    py: Python<'_>,
    #[pyo3(from_py_with = args::body)] data: PyBackedBytes,
    #[pyo3(from_py_with = args::path)] path: PathBuf,
) -> PyResult<DecodedTuple> {
    let d = py.detach(|| topics::decode(&data)).map_err(|e| {
        to_py(Error::Corruption { path, offset: i64::try_from(e.position).unwrap_or(i64::MAX), reason: e.reason })
    })?;
    let v = d.version;
    Ok((d.topics.iter().map(to_tuple).collect(), (v.counter, v.state_version, v.timestamp)))
}

/// Checks a topic name for creation as the broker's `updateAndCreateTopic` does (`TopicValidator`: the name
/// rules, and not a system topic); raises `InvalidTopicError`.
#[pyfunction]
fn check_topic_config_name(#[pyo3(from_py_with = args::text)] topic: pyo3::pybacked::PyBackedStr) -> PyResult<()> {
    crate::store::validate::check_topic_name(&topic).map_err(to_py)?;
    if crate::store::validate::is_system_topic(&topic) {
        let reason = "the name is a system topic's; system topics are not created by users".to_owned();
        return Err(to_py(Error::InvalidTopic { topic: topic.to_string(), reason }));
    }
    Ok(())
}

/// Checks a topic a producer may send to, as `put` does (the name rules, and not a topic that refuses
/// producers' messages); raises `InvalidTopicError`. For callers that must refuse a topic before they do
/// anything else (`rmq replay --to-topic`, before the destination store is created).
#[pyfunction]
fn check_producer_topic(#[pyo3(from_py_with = args::text)] topic: pyo3::pybacked::PyBackedStr) -> PyResult<()> {
    crate::store::validate::check_topic(&topic).map_err(to_py)
}

/// Checks a topic name as every put does (`TopicValidator.validateTopic`: the name rules only, system topics
/// allowed); raises `InvalidTopicError`. For callers that take a topic name to read (consumers).
#[pyfunction]
fn check_topic_name(#[pyo3(from_py_with = args::text)] topic: pyo3::pybacked::PyBackedStr) -> PyResult<()> {
    crate::store::validate::check_topic_name(&topic).map_err(to_py)
}

/// `TopicValidator.isSystemTopic`: the broker's system topics and the `rmq_sys_` prefix.
#[pyfunction]
fn is_system_topic(#[pyo3(from_py_with = args::text)] topic: pyo3::pybacked::PyBackedStr) -> bool {
    crate::store::validate::is_system_topic(&topic)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<TopicConfigTable>()?;
    m.add_function(wrap_pyfunction!(is_system_topic, m)?)?;
    m.add_function(wrap_pyfunction!(decode_topics, m)?)?;
    m.add_function(wrap_pyfunction!(check_topic_config_name, m)?)?;
    m.add_function(wrap_pyfunction!(check_producer_topic, m)?)?;
    m.add_function(wrap_pyfunction!(check_topic_name, m)?)?;
    Ok(())
}
