//! The `consumerOffset.json` codec ([`crate::offsets`]) for `rmq.offsets`, which keeps only the locking and
//! persistence policy.

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyDict, PyMapping};

use super::args;
use super::errors::to_py;
use crate::error::Error;
use crate::offsets::{self, journal, DataVersion, OffsetTable};

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

/// `ConsumerOffsetManager.encode(true)`: the file text for `table` (insertion order matters, as in Java's maps).
#[pyfunction]
fn encode_offsets(
    table: &Bound<'_, PyAny>,
    #[pyo3(from_py_with = args::java_long)] counter: i64,
    #[pyo3(from_py_with = args::java_long)] state_version: i64,
    #[pyo3(from_py_with = args::java_long)] timestamp: i64,
) -> PyResult<String> {
    let table = table_of(table)?;
    Ok(offsets::encode(&table, &DataVersion { counter, state_version, timestamp }))
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

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(encode_offsets, m)?)?;
    m.add_function(wrap_pyfunction!(decode_offsets, m)?)?;
    m.add_function(wrap_pyfunction!(salvage_offsets, m)?)?;
    m.add_function(wrap_pyfunction!(encode_journal_entry, m)?)?;
    m.add_function(wrap_pyfunction!(decode_journal, m)?)?;
    m.add("OFFSETS_JOURNAL_HEADER", pyo3::types::PyBytes::new(m.py(), journal::HEADER))?;
    Ok(())
}
