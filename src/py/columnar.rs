//! Columnar decoding for Arrow: split reading of segments and decoding of binary columns, handed to Python as
//! zero-copy buffers (`ArrowBuffer`) that `pyarrow.py_buffer` wraps without copying.

use std::ffi::c_int;
use std::path::PathBuf;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use super::args;
use super::errors::{invalid_argument, to_py};
use crate::columnar::{self, Column, ColumnBatch, ColumnMask, RecordFilter, VarColumn};

/// Bytes owned by Rust, exported read-only through the buffer protocol.
#[pyclass(module = "rmq._native", frozen)]
pub struct ArrowBuffer {
    data: Vec<u8>,
}

#[pymethods]
impl ArrowBuffer {
    fn __len__(&self) -> usize {
        self.data.len()
    }
    #[allow(unsafe_code)]
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        if flags & ffi::PyBUF_WRITABLE == ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err("Arrow buffers are read-only"));
        }
        let data = &slf.get().data;
        // SAFETY: `view` is the buffer struct Python passed in. PyBuffer_FillInfo stores a new reference to `slf`
        // in `view.obj`, so the frozen object and its never-mutated Vec outlive every view of it.
        let rc = unsafe {
            ffi::PyBuffer_FillInfo(view, slf.as_ptr(), data.as_ptr() as *mut _, data.len() as ffi::Py_ssize_t, 1, flags)
        };
        if rc == -1 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }
}

fn buf<'py>(py: Python<'py>, data: Vec<u8>) -> PyResult<Bound<'py, PyAny>> {
    Ok(Bound::new(py, ArrowBuffer { data })?.into_any())
}

fn le<T: Copy, const N: usize>(values: &[T], to: fn(T) -> [u8; N]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * N);
    for v in values {
        out.extend_from_slice(&to(*v));
    }
    out
}

/// Arrow's validity bitmap (LSB first).
fn bitmap(flags: &[bool]) -> Vec<u8> {
    let mut out = vec![0u8; flags.len().div_ceil(8)];
    for (i, f) in flags.iter().enumerate() {
        if *f {
            out[i / 8] |= 1 << (i % 8);
        }
    }
    out
}

fn var<'py>(py: Python<'py>, c: VarColumn) -> PyResult<Bound<'py, PyAny>> {
    let nulls = c.null_count();
    let validity = if nulls == 0 { py.None().into_bound(py) } else { buf(py, bitmap(&c.valid))? };
    let items =
        [buf(py, le(&c.offsets, i32::to_le_bytes))?, buf(py, c.data)?, validity, nulls.into_pyobject(py)?.into_any()];
    Ok(PyTuple::new(py, items)?.into_any())
}

/// `(rows, row_validity or None, [column or None, ...])`, columns in `COLUMNS` order. A column is
/// `(kind, buffers...)`: `("int"|"long"|"micros", values)`, `("bool", bitmap)`,
/// `("str"|"bin", (offsets, data, validity or None, nulls))`, `("list", offsets, var)`, `("map", offsets, keys, values)`.
fn to_python<'py>(py: Python<'py>, batch: ColumnBatch) -> PyResult<Bound<'py, PyAny>> {
    let rows = batch.rows;
    let row_valid =
        if batch.valid.iter().all(|v| *v) { py.None().into_bound(py) } else { buf(py, bitmap(&batch.valid))? };
    let mut cols: Vec<Bound<'py, PyAny>> = Vec::with_capacity(batch.columns.len());
    for c in batch.columns {
        let item = match c {
            Column::Skipped => py.None().into_bound(py),
            Column::Int(v) => ("int", buf(py, le(&v, i32::to_le_bytes))?).into_pyobject(py)?.into_any(),
            Column::Long(v) => ("long", buf(py, le(&v, i64::to_le_bytes))?).into_pyobject(py)?.into_any(),
            Column::Micros(v) => ("micros", buf(py, le(&v, i64::to_le_bytes))?).into_pyobject(py)?.into_any(),
            Column::Bool(v) => ("bool", buf(py, bitmap(&v))?).into_pyobject(py)?.into_any(),
            Column::Str(v) => ("str", var(py, v)?).into_pyobject(py)?.into_any(),
            Column::Bin(v) => ("bin", var(py, v)?).into_pyobject(py)?.into_any(),
            Column::StrList(l) => {
                ("list", buf(py, le(&l.offsets, i32::to_le_bytes))?, var(py, l.keys)?).into_pyobject(py)?.into_any()
            }
            Column::StrMap(m) => {
                let offsets = buf(py, le(&m.offsets, i32::to_le_bytes))?;
                ("map", offsets, var(py, m.keys)?, var(py, m.values)?).into_pyobject(py)?.into_any()
            }
        };
        cols.push(item);
    }
    Ok((rows, row_valid, PyList::new(py, cols)?).into_pyobject(py)?.into_any())
}

fn mask(columns: Option<Vec<String>>) -> PyResult<ColumnMask> {
    match columns {
        None => Ok(columnar::ALL_COLUMNS),
        Some(names) => columnar::mask_of(&names).map_err(|n| {
            invalid_argument(format!("unknown column {n:?}; the columns are {}", columnar::COLUMNS.join(", ")))
        }),
    }
}

/// Reads the records of one split (`[start, end)` of one commitlog segment, `start` a record start proven by
/// `plan_commitlog`), batch by batch.
#[pyclass(module = "rmq._native")]
pub struct SplitReader {
    inner: Option<columnar::SplitReader>,
    skipped: Vec<columnar::Skipped>,
    max_rows: usize,
    max_bytes: usize,
}

#[pymethods]
impl SplitReader {
    #[new]
    #[pyo3(signature = (path, base, start, end, *, columns=None, topics=None, min_store_ms=None,
        max_store_ms=None, skip_damage=false, max_rows=8192, max_bytes=64 << 20))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        #[pyo3(from_py_with = args::path)] path: PathBuf,
        #[pyo3(from_py_with = args::java_long)] base: i64,
        #[pyo3(from_py_with = args::commitlog_offset)] start: u64,
        #[pyo3(from_py_with = args::commitlog_offset)] end: u64,
        #[pyo3(from_py_with = args::opt_strings)] columns: Option<Vec<String>>,
        #[pyo3(from_py_with = args::opt_strings)] topics: Option<Vec<String>>,
        #[pyo3(from_py_with = args::opt_java_long)] min_store_ms: Option<i64>,
        #[pyo3(from_py_with = args::opt_java_long)] max_store_ms: Option<i64>,
        #[pyo3(from_py_with = args::boolean)] skip_damage: bool,
        #[pyo3(from_py_with = args::count_usize)] max_rows: usize,
        #[pyo3(from_py_with = args::count_usize)] max_bytes: usize,
    ) -> PyResult<Self> {
        let mask = mask(columns)?;
        let filter = RecordFilter { topics, min_store_ms, max_store_ms };
        let inner = py
            .detach(|| columnar::SplitReader::open(&path, base, start, end, mask, filter, skip_damage))
            .map_err(to_py)?;
        Ok(SplitReader { inner: Some(inner), skipped: Vec::new(), max_rows, max_bytes })
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// The next batch (see `decode_records` for its shape); StopIteration at the end of the split.
    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Some(inner) = self.inner.as_mut() else { return Ok(None) };
        let (max_rows, max_bytes) = (self.max_rows, self.max_bytes);
        let batch = py.detach(|| inner.next_batch(max_rows, max_bytes)).map_err(to_py)?;
        self.skipped.extend(inner.take_skipped());
        match batch {
            Some(b) => Ok(Some(to_python(py, b)?)),
            None => {
                self.inner = None;
                Ok(None)
            }
        }
    }

    /// The records left out so far with `skip_damage`, as `(commitlog offset, length, reason)`; each is returned
    /// once.
    fn take_skipped(&mut self) -> Vec<(i64, u64, String)> {
        std::mem::take(&mut self.skipped).into_iter().map(|s| (s.offset, s.length, s.reason)).collect()
    }
}

/// The splits of a commitlog directory: `[(path, base, starts, data_end, damage or None)]` per segment, damage
/// being `(commitlog offset, length, reason)`. Raises CorruptionError on damage unless `skip_damage`.
#[pyfunction]
#[pyo3(signature = (dir, split_size, *, skip_damage=false))]
#[allow(clippy::type_complexity)]
fn plan_commitlog(
    py: Python<'_>,
    #[pyo3(from_py_with = args::path)] dir: PathBuf,
    #[pyo3(from_py_with = args::count_u64)] split_size: u64,
    #[pyo3(from_py_with = args::boolean)] skip_damage: bool,
) -> PyResult<Vec<(String, i64, Vec<u64>, u64, Option<(i64, u64, String)>)>> {
    let plans = py.detach(|| columnar::plan_commitlog(&dir, split_size, skip_damage)).map_err(to_py)?;
    Ok(plans
        .into_iter()
        .map(|p| {
            let damage = p.damage.map(|d| (d.offset, d.length, d.reason));
            (p.path.display().to_string(), p.base, p.starts, p.data_end, damage)
        })
        .collect())
}

#[allow(unsafe_code)]
fn bytes_of(b: &PyBuffer<u8>) -> PyResult<&[u8]> {
    if !b.is_c_contiguous() {
        return Err(invalid_argument("buffer must be contiguous".to_owned()));
    }
    // SAFETY: the buffer is C-contiguous bytes (item type u8 checked by PyBuffer::get) and stays alive, with
    // its exporter, for as long as `b` (the returned slice borrows it). Arrow buffers are immutable.
    Ok(unsafe { std::slice::from_raw_parts(b.buf_ptr() as *const u8, b.len_bytes()) })
}

/// The rows of an Arrow binary or string array given as its buffers: `offsets` (int32, `offset + length + 1`
/// entries), `data`, optional `validity` bitmap, and the array's `offset` and `length`; `None` for a null row.
fn arrow_rows<'a>(
    offsets: &'a [u8],
    data: &'a [u8],
    validity: Option<&'a [u8]>,
    offset: usize,
    length: usize,
) -> PyResult<Vec<Option<&'a [u8]>>> {
    let need = (offset + length + 1) * 4;
    if offsets.len() < need {
        return Err(invalid_argument(format!("offsets buffer holds {} bytes, {need} needed", offsets.len())));
    }
    let at = |i: usize| {
        let v = i32::from_le_bytes([offsets[i * 4], offsets[i * 4 + 1], offsets[i * 4 + 2], offsets[i * 4 + 3]]);
        usize::try_from(v).ok()
    };
    let mut rows = Vec::with_capacity(length);
    for r in offset..offset + length {
        let valid = validity.is_none_or(|v| v.get(r / 8).is_some_and(|b| b & (1 << (r % 8)) != 0));
        let slice = at(r).zip(at(r + 1)).and_then(|(s, e)| data.get(s..e));
        match (valid, slice) {
            (false, _) => rows.push(None),
            (true, Some(b)) => rows.push(Some(b)),
            (true, None) => return Err(invalid_argument(format!("row {}: offsets out of range", r - offset))),
        }
    }
    Ok(rows)
}

/// Decodes the records of an Arrow binary array given as its buffers (see `arrow_rows`). A row that is null
/// stays null; a row that is not exactly one record becomes null, or, with `strict`, raises ValueError naming it.
#[pyfunction]
#[pyo3(signature = (offsets, data, validity, offset, length, *, columns=None, strict=false))]
#[allow(clippy::too_many_arguments)]
fn decode_records<'py>(
    py: Python<'py>,
    #[pyo3(from_py_with = args::typed::<PyBuffer<u8>>)] offsets: PyBuffer<u8>,
    #[pyo3(from_py_with = args::typed::<PyBuffer<u8>>)] data: PyBuffer<u8>,
    #[pyo3(from_py_with = args::typed::<Option<PyBuffer<u8>>>)] validity: Option<PyBuffer<u8>>,
    #[pyo3(from_py_with = args::count_usize)] offset: usize,
    #[pyo3(from_py_with = args::count_usize)] length: usize,
    #[pyo3(from_py_with = args::opt_strings)] columns: Option<Vec<String>>,
    #[pyo3(from_py_with = args::boolean)] strict: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let mask = mask(columns)?;
    let validity = validity.as_ref().map(bytes_of).transpose()?;
    let rows = arrow_rows(bytes_of(&offsets)?, bytes_of(&data)?, validity, offset, length)?;
    let batch = py
        .detach(|| columnar::decode_records(rows, mask, strict))
        .map_err(|(row, why)| invalid_argument(format!("row {row} is not a commitlog record: {why}")))?;
    to_python(py, batch)
}

/// Java `String.hashCode` (the consume queue's tagsCode for an ordinary topic) of each string of an Arrow
/// string array given as its buffers; returns `(values, validity or None)` as int64 buffers.
#[pyfunction]
#[pyo3(signature = (offsets, data, validity, offset, length))]
fn java_hash_strings<'py>(
    py: Python<'py>,
    #[pyo3(from_py_with = args::typed::<PyBuffer<u8>>)] offsets: PyBuffer<u8>,
    #[pyo3(from_py_with = args::typed::<PyBuffer<u8>>)] data: PyBuffer<u8>,
    #[pyo3(from_py_with = args::typed::<Option<PyBuffer<u8>>>)] validity: Option<PyBuffer<u8>>,
    #[pyo3(from_py_with = args::count_usize)] offset: usize,
    #[pyo3(from_py_with = args::count_usize)] length: usize,
) -> PyResult<Bound<'py, PyTuple>> {
    let validity = validity.as_ref().map(bytes_of).transpose()?;
    let rows = arrow_rows(bytes_of(&offsets)?, bytes_of(&data)?, validity, offset, length)?;
    let mut values = Vec::with_capacity(length * 8);
    for row in &rows {
        let h = row.map_or(0, |b| i64::from(crate::java::utf8_bytes_hash(b)));
        values.extend_from_slice(&h.to_le_bytes());
    }
    let valid: Vec<bool> = rows.iter().map(Option::is_some).collect();
    let validity = if valid.iter().all(|v| *v) { py.None().into_bound(py) } else { buf(py, bitmap(&valid))? };
    PyTuple::new(py, [buf(py, values)?, validity])
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ArrowBuffer>()?;
    m.add_class::<SplitReader>()?;
    m.add("COLUMNS", columnar::COLUMNS.to_vec())?;
    m.add_function(wrap_pyfunction!(plan_commitlog, m)?)?;
    m.add_function(wrap_pyfunction!(decode_records, m)?)?;
    m.add_function(wrap_pyfunction!(java_hash_strings, m)?)?;
    Ok(())
}
