//! The client's local `offsets.json` codec ([`crate::offsets::local`]) for `rmq.local_offsets`, which keeps
//! the file handling.

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;

use super::args;
use super::errors::to_py;
use crate::error::Error;
use crate::offsets::local::{self, LocalEntry};

/// A queue's offset as Python sees it: (topic, broker name, queue id, offset).
type EntryTuple = (String, String, i32, i64);

fn entries_of(obj: &Bound<'_, PyAny>) -> PyResult<Vec<LocalEntry>> {
    let mut out = Vec::new();
    for item in obj.try_iter()? {
        let item = item?;
        let (topic, broker, queue_id, offset): (
            Bound<'_, PyAny>,
            Bound<'_, PyAny>,
            Bound<'_, PyAny>,
            Bound<'_, PyAny>,
        ) = item.extract().map_err(|_| {
            args::argument_type_error_for("an entry must be a (topic, broker_name, queue_id, offset) tuple", &item)
        })?;
        out.push(LocalEntry {
            topic: args::text(&topic)?.to_string(),
            broker_name: args::text(&broker)?.to_string(),
            queue_id: args::java_int(&queue_id)?,
            offset: args::java_long(&offset)?,
        });
    }
    Ok(out)
}

/// What `LocalFileOffsetStore.persistAll` writes over a file holding `persisted` (file order) for a store whose
/// table holds `memory` (in the order it put them); each an iterable of (topic, broker name, queue id, offset).
#[pyfunction]
fn encode_local_offsets(persisted: &Bound<'_, PyAny>, memory: &Bound<'_, PyAny>) -> PyResult<String> {
    Ok(local::encode(&entries_of(persisted)?, &entries_of(memory)?))
}

/// Reads the file's bytes: the entries in file order and the reasons entries were left out; raises
/// `CorruptionError` (naming `path` and the byte offset) only when the document cannot be read at all.
#[pyfunction]
fn decode_local_offsets(
    py: Python<'_>,
    #[pyo3(from_py_with = args::body)] data: PyBackedBytes,
    #[pyo3(from_py_with = args::path)] path: PathBuf,
) -> PyResult<(Vec<EntryTuple>, Vec<String>)> {
    let decoded = py.detach(|| local::decode(&data)).map_err(|e| {
        to_py(Error::Corruption { path, offset: i64::try_from(e.position).unwrap_or(i64::MAX), reason: e.reason })
    })?;
    let entries = decoded.entries.into_iter().map(|e| (e.topic, e.broker_name, e.queue_id, e.offset)).collect();
    Ok((entries, decoded.issues.into_iter().map(|i| i.reason).collect()))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(encode_local_offsets, m)?)?;
    m.add_function(wrap_pyfunction!(decode_local_offsets, m)?)?;
    Ok(())
}
