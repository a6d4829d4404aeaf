//! The `consumerOffset.json` codec ([`crate::offsets`]) for `rmq.offsets`, which keeps only the locking and
//! persistence policy.

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::pybacked::{PyBackedBytes, PyBackedStr};
use pyo3::types::{PyDict, PyMapping};

use super::args;
use super::errors::to_py;
use crate::error::Error;
use crate::offsets::{self, journal, BrokerTable, DataVersion, OffsetTable};

/// A `Mapping[str, Mapping[int, int]]` as an offset table in iteration order, every key and value checked.
fn table_of(obj: &Bound<'_, PyAny>) -> PyResult<OffsetTable> {
    let map = obj.cast::<PyMapping>().map_err(|_| {
        args::argument_type_error_for("the offset table must be a Mapping[str, Mapping[int, int]]", obj)
    })?;
    let mut table = OffsetTable::new();
    for item in map.items()?.iter() {
        let (key, queues): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract()?;
        let key = args::text(&key)?.to_string();
        let queues = queues.cast::<PyMapping>().map_err(|_| {
            args::argument_type_error_for(&format!("the offsets of {key:?} must be a Mapping[int, int]"), &queues)
        })?;
        let mut offsets = Vec::new();
        for pair in queues.items()?.iter() {
            let (q, o): (Bound<'_, PyAny>, Bound<'_, PyAny>) = pair.extract()?;
            offsets.push((args::java_int(&q)?, args::java_long(&o)?));
        }
        table.push((key, offsets));
    }
    Ok(table)
}

/// `ConsumerOffsetManager.encode(true)` for a broker that received the commits of `table` in its iteration
/// order (each key's queues in theirs).
#[pyfunction]
fn encode_offsets(
    table: &Bound<'_, PyAny>,
    #[pyo3(from_py_with = args::java_long)] counter: i64,
    #[pyo3(from_py_with = args::java_long)] state_version: i64,
    #[pyo3(from_py_with = args::java_long)] timestamp: i64,
) -> PyResult<String> {
    let mut broker = BrokerTable::new();
    for (key, queues) in table_of(table)? {
        broker.add_empty(&key);
        for (id, offset) in queues {
            broker.commit(&key, id, offset);
        }
    }
    Ok(offsets::encode(&broker, &DataVersion { counter, state_version, timestamp }))
}

/// The offset table as RocketMQ's broker holds it ([`BrokerTable`]): every change goes through it so that it
/// encodes to the broker's bytes. Not thread-safe on its own: `rmq.offsets` guards it with its lock.
#[pyclass(module = "rmq._native")]
#[derive(Clone)]
struct BrokerOffsetTable {
    table: BrokerTable,
}

#[pymethods]
impl BrokerOffsetTable {
    /// The table of a broker that loaded nothing.
    #[new]
    fn new() -> Self {
        BrokerOffsetTable { table: BrokerTable::new() }
    }

    /// The table a broker holds after loading a file with these entries (in file order).
    #[staticmethod]
    fn loaded(table: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(BrokerOffsetTable { table: BrokerTable::decoded(&table_of(table)?) })
    }

    /// `commitOffset`: sets the offset of one queue of `topic@group` (`key`).
    fn commit(
        &mut self,
        #[pyo3(from_py_with = args::text)] key: PyBackedStr,
        #[pyo3(from_py_with = args::java_int)] queue_id: i32,
        #[pyo3(from_py_with = args::java_long)] offset: i64,
    ) {
        self.table.commit(&key, queue_id, offset);
    }

    /// The offset of one queue, None when there is none.
    fn get(&self, #[pyo3(from_py_with = args::text)] key: PyBackedStr, queue_id: i64) -> Option<i64> {
        self.table.get(&key, i32::try_from(queue_id).ok()?)
    }

    /// {queue id: offset} of one key in the broker's order (empty when the key is unknown).
    fn queues<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = args::text)] key: PyBackedStr,
    ) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        for (id, offset) in self.table.queues(&key).unwrap_or_default() {
            out.set_item(id, offset)?;
        }
        Ok(out)
    }

    /// The keys in the broker's order.
    fn keys(&self) -> Vec<String> {
        self.table.keys().map(str::to_owned).collect()
    }

    /// Removes a key; returns whether it was there.
    fn remove(&mut self, #[pyo3(from_py_with = args::text)] key: PyBackedStr) -> bool {
        self.table.remove(&key)
    }

    /// {key: {queue id: offset}} in the broker's order.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        for (key, queues) in self.table.in_order() {
            let q = PyDict::new(py);
            for (id, offset) in queues {
                q.set_item(id, offset)?;
            }
            out.set_item(key, q)?;
        }
        Ok(out)
    }

    /// An independent copy.
    fn copy(&self) -> Self {
        self.clone()
    }

    /// `ConsumerOffsetManager.encode(true)`: the file's text.
    fn encode(
        &self,
        #[pyo3(from_py_with = args::java_long)] counter: i64,
        #[pyo3(from_py_with = args::java_long)] state_version: i64,
        #[pyo3(from_py_with = args::java_long)] timestamp: i64,
    ) -> String {
        offsets::encode(&self.table, &DataVersion { counter, state_version, timestamp })
    }

    fn __len__(&self) -> usize {
        self.table.len()
    }

    fn __contains__(&self, #[pyo3(from_py_with = args::text)] key: PyBackedStr) -> bool {
        self.table.contains(&key)
    }
}

/// What `decode_offsets` returns: the table, (counter, state_version, timestamp), and the issues as
/// (key or None, reason).
type DecodedTuple<'py> = (Bound<'py, PyDict>, (i64, i64, i64), Vec<(Option<String>, String)>);

/// Reads the file's bytes, keeping every good entry; raises `CorruptionError` (naming `path` and the byte
/// offset) only when the document cannot be read at all.
#[pyfunction]
#[pyo3(signature = (data, path))]
fn decode_offsets<'py>(
    py: Python<'py>,
    #[pyo3(from_py_with = args::body)] data: PyBackedBytes,
    #[pyo3(from_py_with = args::path)] path: PathBuf,
) -> PyResult<DecodedTuple<'py>> {
    let decoded = py.detach(|| offsets::decode(&data)).map_err(|e| {
        to_py(Error::Corruption { path, offset: i64::try_from(e.position).unwrap_or(i64::MAX), reason: e.reason })
    })?;
    to_tuple(py, decoded)
}

/// Recovers the entries that still parse from a file `decode_offsets` refuses; the damaged spans are issues.
#[pyfunction]
fn salvage_offsets<'py>(
    py: Python<'py>,
    #[pyo3(from_py_with = args::body)] data: PyBackedBytes,
) -> PyResult<DecodedTuple<'py>> {
    let decoded = py.detach(|| offsets::salvage(&data));
    to_tuple(py, decoded)
}

fn to_tuple(py: Python<'_>, decoded: offsets::Decoded) -> PyResult<DecodedTuple<'_>> {
    let table = PyDict::new(py);
    for (key, queues) in decoded.table {
        let q = PyDict::new(py);
        for (id, offset) in queues {
            q.set_item(id, offset)?;
        }
        table.set_item(key, q)?;
    }
    let v = decoded.version;
    let issues = decoded.issues.into_iter().map(|i| (i.key, i.reason)).collect();
    Ok((table, (v.counter, v.state_version, v.timestamp), issues))
}

/// One journal record line (LF included) for a commit made on top of snapshot `snapshot`.
#[pyfunction]
fn encode_journal_entry(
    #[pyo3(from_py_with = args::java_long)] snapshot: i64,
    group: &Bound<'_, PyAny>,
    topic: &Bound<'_, PyAny>,
    #[pyo3(from_py_with = args::java_int)] queue_id: i32,
    #[pyo3(from_py_with = args::java_long)] offset: i64,
) -> PyResult<Vec<u8>> {
    let entry = journal::Entry {
        snapshot,
        group: args::text(group)?.to_string(),
        topic: args::text(topic)?.to_string(),
        queue_id,
        offset,
    };
    Ok(journal::encode_entry(&entry).into_bytes())
}

/// What `decode_journal` returns: the records as (snapshot, group, topic, queue id, offset), the lines left out
/// as (byte offset, line number, torn, reason), and the length up to the end of the last complete line.
type JournalTuple = (Vec<(i64, String, String, i32, i64)>, Vec<(usize, usize, bool, String)>, usize);

/// Reads a journal's bytes; never raises for their content.
#[pyfunction]
fn decode_journal(py: Python<'_>, #[pyo3(from_py_with = args::body)] data: PyBackedBytes) -> JournalTuple {
    let j = py.detach(|| journal::decode(&data));
    let entries = j.entries.into_iter().map(|e| (e.snapshot, e.group, e.topic, e.queue_id, e.offset)).collect();
    let issues = j.issues.into_iter().map(|i| (i.offset, i.line, i.torn, i.reason)).collect();
    (entries, issues, j.complete_len)
}

/// `delayOffset.json` as RocketMQ 5.3.1's `ScheduleMessageService.encode(true)` writes it for a service that
/// loaded (or put) `table`'s (level, offset) pairs in order, with the given data version.
#[pyfunction]
fn encode_delay_offsets(
    table: Vec<(i64, i64)>,
    #[pyo3(from_py_with = args::java_long)] counter: i64,
    #[pyo3(from_py_with = args::java_long)] state_version: i64,
    #[pyo3(from_py_with = args::java_long)] timestamp: i64,
) -> PyResult<String> {
    let mut pairs = Vec::with_capacity(table.len());
    for (level, offset) in table {
        let level = i32::try_from(level)
            .map_err(|_| pyo3::exceptions::PyValueError::new_err(format!("delay level {level} is not a Java int")))?;
        pairs.push((level, offset));
    }
    let version = DataVersion { counter, state_version, timestamp };
    Ok(offsets::delay::encode(&offsets::delay::DelayTable::loaded(&pairs, version)))
}

/// What `decode_delay_offsets` returns: (level, offset) in file order, (counter, stateVersion, timestamp), and
/// the entries left out as (key, reason).
type DelayTuple = (Vec<(i32, i64)>, (i64, i64, i64), Vec<(Option<String>, String)>);

/// Reads `delayOffset.json` bytes; raises `CorruptionError` (naming `path`) when they are not a document.
#[pyfunction]
#[pyo3(signature = (data, path))]
fn decode_delay_offsets(
    py: Python<'_>,
    #[pyo3(from_py_with = args::body)] data: PyBackedBytes,
    #[pyo3(from_py_with = args::path)] path: PathBuf,
) -> PyResult<DelayTuple> {
    let (table, v, issues) = py.detach(|| offsets::delay::decode(&data)).map_err(|e| {
        to_py(Error::Corruption { path, offset: i64::try_from(e.position).unwrap_or(i64::MAX), reason: e.reason })
    })?;
    let issues = issues.into_iter().map(|i| (i.key, i.reason)).collect();
    Ok((table, (v.counter, v.state_version, v.timestamp), issues))
}

/// The schedule service's progress in the store at `root` as it would load it (`config/delayOffset.json`, or
/// its `.bak` when the file is missing, empty or does not decode): (level, next queue offset to deliver in
/// `SCHEDULE_TOPIC_XXXX` queue level − 1), in file order; empty when neither file exists. Reads only.
#[pyfunction]
fn load_delay_offsets(py: Python<'_>, #[pyo3(from_py_with = args::path)] root: PathBuf) -> PyResult<Vec<(i32, i64)>> {
    py.detach(|| offsets::delay::load(&root.join(offsets::delay::FILE))).map(|t| t.in_order()).map_err(to_py)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(load_delay_offsets, m)?)?;
    m.add_function(wrap_pyfunction!(encode_delay_offsets, m)?)?;
    m.add_function(wrap_pyfunction!(decode_delay_offsets, m)?)?;
    m.add_class::<BrokerOffsetTable>()?;
    m.add_function(wrap_pyfunction!(encode_offsets, m)?)?;
    m.add_function(wrap_pyfunction!(decode_offsets, m)?)?;
    m.add_function(wrap_pyfunction!(salvage_offsets, m)?)?;
    m.add_function(wrap_pyfunction!(encode_journal_entry, m)?)?;
    m.add_function(wrap_pyfunction!(decode_journal, m)?)?;
    m.add("OFFSETS_JOURNAL_HEADER", pyo3::types::PyBytes::new(m.py(), journal::HEADER))?;
    Ok(())
}
