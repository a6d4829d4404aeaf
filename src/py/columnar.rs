//! Columnar decoding for Arrow: split reading of segments and decoding of binary columns, handed to Python through
//! the Arrow C data interface as PyCapsules (`__arrow_c_schema__`, `__arrow_c_array__`, `__arrow_c_stream__`), so
//! pyarrow or any Arrow consumer imports Rust's buffers without copying them.
//!
//! The Arrow schema of the columns is defined here once ([`arrow_field`]); `rmq.arrow` and `rmq.spark` derive theirs
//! from it (`_native.arrow_schema`).

use std::ffi::CStr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use arrow_array::ffi::{to_ffi, FFI_ArrowSchema};
use arrow_array::ffi_stream::FFI_ArrowArrayStream;
use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Int32Array, Int64Array, ListArray, MapArray, RecordBatch,
    RecordBatchOptions, RecordBatchReader, StringArray, StructArray, TimestampMicrosecondArray,
};
use arrow_buffer::{NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{ArrowError, DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyTuple};

use super::args;
use super::errors::{invalid_argument, to_py};
use crate::columnar::{self, Column, ColumnBatch, ColumnMask, ListColumn, RecordFilter, VarColumn};

const SCHEMA_CAPSULE: &CStr = c"arrow_schema";
const ARRAY_CAPSULE: &CStr = c"arrow_array";
const STREAM_CAPSULE: &CStr = c"arrow_array_stream";

/// Columns that can be null (a message without TAGS or UNIQ_KEY); every other column is never null.
const NULLABLE: [&str; 2] = ["tags", "uniq_key"];

/// The Arrow type of a decoder column (timestamps in microseconds, UTC, as Spark uses them).
fn arrow_type(c: &Column) -> DataType {
    match c {
        Column::Int(_) => DataType::Int32,
        Column::Long(_) => DataType::Int64,
        Column::Micros(_) => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        Column::Bool(_) => DataType::Boolean,
        Column::Str(_) => DataType::Utf8,
        Column::Bin(_) => DataType::Binary,
        Column::StrList(_) => DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
        Column::StrMap(_) => DataType::Map(map_entries(), false),
        Column::Skipped => DataType::Null,
    }
}

/// A map's entries field, as Arrow and pyarrow's `map_(string, string)` name it.
fn map_entries() -> Arc<Field> {
    let kv = Fields::from(vec![Field::new("key", DataType::Utf8, false), Field::new("value", DataType::Utf8, true)]);
    Arc::new(Field::new("entries", DataType::Struct(kv), false))
}

/// The Arrow field of column `COLUMNS[i]` holding `c`.
fn arrow_field(i: usize, c: &Column) -> Field {
    let name = columnar::COLUMNS.get(i).copied().unwrap_or("?");
    Field::new(name, arrow_type(c), NULLABLE.contains(&name))
}

/// The fields of a batch's selected columns, in `COLUMNS` order.
fn fields_of(columns: &[Column]) -> Fields {
    columns.iter().enumerate().filter(|(_, c)| !matches!(c, Column::Skipped)).map(|(i, c)| arrow_field(i, c)).collect()
}

/// The Arrow schema of the columns in `mask`.
fn schema_of(mask: ColumnMask) -> Schema {
    Schema::new(fields_of(&ColumnBatch::new(mask).columns))
}

fn arrow_err(e: ArrowError) -> PyErr {
    invalid_argument(format!("Arrow: {e}"))
}

/// Offsets as Arrow needs them (non-empty, starting at 0 or more, never decreasing), checked rather than assumed.
fn offsets(v: Vec<i32>) -> Result<OffsetBuffer<i32>, ArrowError> {
    let ok = v.first().is_some_and(|f| *f >= 0) && v.windows(2).all(|w| w[0] <= w[1]);
    if !ok {
        return Err(ArrowError::InvalidArgumentError("column offsets out of order (over 2 GiB in a batch?)".into()));
    }
    Ok(OffsetBuffer::new(ScalarBuffer::from(v)))
}

fn nulls(valid: Vec<bool>) -> Option<NullBuffer> {
    if valid.is_empty() || valid.iter().all(|v| *v) {
        None
    } else {
        Some(NullBuffer::from(valid))
    }
}

fn strings(c: VarColumn) -> Result<StringArray, ArrowError> {
    StringArray::try_new(offsets(c.offsets)?, c.data.into(), nulls(c.valid))
}

/// One decoder column as an Arrow array, its buffers moved, not copied.
fn arrow_array(c: Column) -> Result<ArrayRef, ArrowError> {
    let list = |l: ListColumn| -> Result<(OffsetBuffer<i32>, StringArray, StringArray), ArrowError> {
        Ok((offsets(l.offsets)?, strings(l.keys)?, strings(l.values)?))
    };
    Ok(match c {
        Column::Int(v) => Arc::new(Int32Array::new(ScalarBuffer::from(v), None)),
        Column::Long(v) => Arc::new(Int64Array::new(ScalarBuffer::from(v), None)),
        Column::Micros(v) => Arc::new(TimestampMicrosecondArray::new(ScalarBuffer::from(v), None).with_timezone("UTC")),
        Column::Bool(v) => Arc::new(BooleanArray::from(v)),
        Column::Str(v) => Arc::new(strings(v)?),
        Column::Bin(v) => Arc::new(BinaryArray::try_new(offsets(v.offsets)?, v.data.into(), nulls(v.valid))?),
        Column::StrList(l) => {
            let (offsets, keys, _) = list(l)?;
            let item = Arc::new(Field::new("item", DataType::Utf8, true));
            Arc::new(ListArray::try_new(item, offsets, Arc::new(keys), None)?)
        }
        Column::StrMap(m) => {
            let (offsets, keys, values) = list(m)?;
            let entries = map_entries();
            let DataType::Struct(kv) = entries.data_type().clone() else {
                return Err(ArrowError::SchemaError("map entries are not a struct".into()));
            };
            let entries_array = StructArray::try_new(kv, vec![Arc::new(keys), Arc::new(values)], None)?;
            Arc::new(MapArray::try_new(entries, offsets, entries_array, None, false)?)
        }
        Column::Skipped => Arc::new(arrow_array::NullArray::new(0)),
    })
}

/// A batch as a struct array of its selected columns; rows null as a whole (`batch.valid`) are null structs.
fn struct_array(batch: ColumnBatch) -> Result<StructArray, ArrowError> {
    let fields = fields_of(&batch.columns);
    let arrays = batch
        .columns
        .into_iter()
        .filter(|c| !matches!(c, Column::Skipped))
        .map(arrow_array)
        .collect::<Result<Vec<_>, _>>()?;
    StructArray::try_new_with_length(fields, arrays, nulls(batch.valid), batch.rows)
}

/// A batch of rows with no null rows, as a RecordBatch of `schema`.
fn record_batch(batch: ColumnBatch, schema: &SchemaRef) -> Result<RecordBatch, ArrowError> {
    let rows = batch.rows;
    let (_, arrays, _) = struct_array(batch)?.into_parts();
    RecordBatch::try_new_with_options(schema.clone(), arrays, &RecordBatchOptions::new().with_row_count(Some(rows)))
}

fn schema_capsule<'py>(py: Python<'py>, data_type: &DataType) -> PyResult<Bound<'py, PyCapsule>> {
    let schema = FFI_ArrowSchema::try_from(data_type).map_err(arrow_err)?;
    PyCapsule::new_with_value(py, schema, SCHEMA_CAPSULE)
}

/// An Arrow schema defined in Rust, for `pyarrow.schema(obj)` (Arrow PyCapsule interface).
#[pyclass(module = "rmq._native", frozen)]
pub struct ArrowSchema {
    schema: SchemaRef,
}

#[pymethods]
impl ArrowSchema {
    /// A PyCapsule named "arrow_schema" holding an ArrowSchema struct (a struct type whose children are the fields).
    fn __arrow_c_schema__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        schema_capsule(py, &DataType::Struct(self.schema.fields().clone()))
    }
    /// The column names, in order.
    #[getter]
    fn names(&self) -> Vec<String> {
        self.schema.fields().iter().map(|f| f.name().clone()).collect()
    }
}

/// An Arrow array owned by Rust (a struct array for decoded rows), exported without copying through the Arrow
/// PyCapsule interface: `pyarrow.array(obj)`, or `pyarrow.record_batch(obj)` for a struct array without null rows.
/// Each export is a new pair of capsules sharing the same immutable buffers; a buffer is freed when the last
/// consumer releases it.
#[pyclass(module = "rmq._native", frozen)]
pub struct ArrowArray {
    array: ArrayRef,
}

#[pymethods]
impl ArrowArray {
    fn __len__(&self) -> usize {
        self.array.len()
    }
    /// A PyCapsule named "arrow_schema" holding the array's type.
    fn __arrow_c_schema__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        schema_capsule(py, self.array.data_type())
    }
    /// `(schema capsule, array capsule)`: "arrow_schema" and "arrow_array" PyCapsules. `requested_schema` is
    /// ignored (the array is handed over as it is, which the interface allows).
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_array__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let _ = requested_schema;
        let (array, schema) = to_ffi(&self.array.to_data()).map_err(arrow_err)?;
        let schema = PyCapsule::new_with_value(py, schema, SCHEMA_CAPSULE)?;
        let array = PyCapsule::new_with_value(py, array, ARRAY_CAPSULE)?;
        PyTuple::new(py, [schema, array])
    }
}

fn export<'py>(py: Python<'py>, array: ArrayRef) -> PyResult<Bound<'py, ArrowArray>> {
    Bound::new(py, ArrowArray { array })
}

fn mask(columns: Option<Vec<String>>) -> PyResult<ColumnMask> {
    match columns {
        None => Ok(columnar::ALL_COLUMNS),
        Some(names) => columnar::mask_of(&names).map_err(|n| {
            invalid_argument(format!("unknown column {n:?}; the columns are {}", columnar::COLUMNS.join(", ")))
        }),
    }
}

/// The split reader shared by `__next__` and an exported stream: the records left out with `skip_damage` are
/// collected in one place either way.
struct Reading {
    inner: columnar::SplitReader,
    skipped: Arc<Mutex<Vec<columnar::Skipped>>>,
    schema: SchemaRef,
    max_rows: usize,
    max_bytes: usize,
}

impl Reading {
    fn next_columns(&mut self) -> crate::error::Result<Option<ColumnBatch>> {
        let batch = self.inner.next_batch(self.max_rows, self.max_bytes);
        let skipped = self.inner.take_skipped();
        if !skipped.is_empty() {
            self.skipped.lock().unwrap_or_else(|e| e.into_inner()).extend(skipped);
        }
        batch
    }
}

/// The stream behind `SplitReader.__arrow_c_stream__`: an error ends it with the error's message (the Arrow C
/// stream interface carries a message, not rmq's exception type).
impl Iterator for Reading {
    type Item = Result<RecordBatch, ArrowError>;
    fn next(&mut self) -> Option<Self::Item> {
        match self.next_columns() {
            Ok(Some(batch)) => Some(record_batch(batch, &self.schema)),
            Ok(None) => None,
            Err(e) => Some(Err(ArrowError::ExternalError(Box::new(e)))),
        }
    }
}

impl RecordBatchReader for Reading {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

/// Reads the records of one split (`[start, end)` of one commitlog segment, `start` a record start proven by
/// `plan_commitlog`), batch by batch: iterate it for `ArrowArray` struct batches (errors raise rmq's exceptions),
/// or hand it to an Arrow consumer as a stream (`__arrow_c_stream__`, e.g. `pyarrow.RecordBatchReader.from_stream`).
#[pyclass(module = "rmq._native")]
pub struct SplitReader {
    reading: Option<Reading>,
    skipped: Arc<Mutex<Vec<columnar::Skipped>>>,
    schema: SchemaRef,
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
        #[pyo3(from_py_with = args::byte_limit_usize)] max_bytes: usize,
    ) -> PyResult<Self> {
        let mask = mask(columns)?;
        let filter = RecordFilter { topics, min_store_ms, max_store_ms };
        let inner = py
            .detach(|| columnar::SplitReader::open(&path, base, start, end, mask, filter, skip_damage))
            .map_err(to_py)?;
        let schema = Arc::new(schema_of(mask));
        let skipped = Arc::new(Mutex::new(Vec::new()));
        let reading = Reading { inner, skipped: skipped.clone(), schema: schema.clone(), max_rows, max_bytes };
        Ok(SplitReader { reading: Some(reading), skipped, schema })
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// The next batch as an `ArrowArray` (a struct array of the selected columns, no null rows); StopIteration at
    /// the end of the split.
    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, ArrowArray>>> {
        let Some(reading) = self.reading.as_mut() else { return Ok(None) };
        let batch = py.detach(|| reading.next_columns()).map_err(to_py)?;
        match batch {
            Some(b) => Ok(Some(export(py, Arc::new(struct_array(b).map_err(arrow_err)?))?)),
            None => {
                self.reading = None;
                Ok(None)
            }
        }
    }

    /// The schema of the batches: a PyCapsule named "arrow_schema".
    fn __arrow_c_schema__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        schema_capsule(py, &DataType::Struct(self.schema.fields().clone()))
    }

    /// The rest of the split as a PyCapsule named "arrow_array_stream" (`requested_schema` is ignored). The
    /// stream takes the reader over: iterating this object afterwards yields nothing. A damaged record ends the
    /// stream with an error naming file and offset, unless `skip_damage`; `take_skipped` still reports what the
    /// stream left out.
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(
        &mut self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema;
        let Some(reading) = self.reading.take() else {
            return Err(invalid_argument("the split reader was already read or handed over as a stream".to_owned()));
        };
        let stream = FFI_ArrowArrayStream::new(Box::new(reading));
        PyCapsule::new_with_value(py, stream, STREAM_CAPSULE)
    }

    /// The records left out so far with `skip_damage`, as `(commitlog offset, length, reason)`; each is returned
    /// once.
    fn take_skipped(&mut self) -> Vec<(i64, u64, String)> {
        let taken = std::mem::take(&mut *self.skipped.lock().unwrap_or_else(|e| e.into_inner()));
        taken.into_iter().map(|s| (s.offset, s.length, s.reason)).collect()
    }
}

/// The splits of a commitlog directory: `[(path, base, starts, ends, damage)]` per segment (split `i` reads
/// `[starts[i], ends[i])`), damage being a list of `(commitlog offset, length, reason)` left out. Raises
/// CorruptionError on damage unless `skip_damage`.
#[pyfunction]
#[pyo3(signature = (dir, split_size, *, skip_damage=false))]
#[allow(clippy::type_complexity)]
fn plan_commitlog(
    py: Python<'_>,
    #[pyo3(from_py_with = args::path)] dir: PathBuf,
    #[pyo3(from_py_with = args::count_u64)] split_size: u64,
    #[pyo3(from_py_with = args::boolean)] skip_damage: bool,
) -> PyResult<Vec<(String, i64, Vec<u64>, Vec<u64>, Vec<(i64, u64, String)>)>> {
    let plans = py.detach(|| columnar::plan_commitlog(&dir, split_size, skip_damage)).map_err(to_py)?;
    Ok(plans
        .into_iter()
        .map(|p| {
            let damage = p.damage.into_iter().map(|d| (d.offset, d.length, d.reason)).collect();
            (p.path.display().to_string(), p.base, p.starts, p.ends, damage)
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
) -> PyResult<Bound<'py, ArrowArray>> {
    let mask = mask(columns)?;
    let validity = validity.as_ref().map(bytes_of).transpose()?;
    let rows = arrow_rows(bytes_of(&offsets)?, bytes_of(&data)?, validity, offset, length)?;
    let batch = py
        .detach(|| columnar::decode_records(rows, mask, strict))
        .map_err(|(row, why)| invalid_argument(format!("row {row} is not a commitlog record: {why}")))?;
    export(py, Arc::new(struct_array(batch).map_err(arrow_err)?))
}

/// Java `String.hashCode` (the consume queue's tagsCode for an ordinary topic) of each string of an Arrow
/// string array given as its buffers, as an int64 `ArrowArray` (null where the string is null).
#[pyfunction]
#[pyo3(signature = (offsets, data, validity, offset, length))]
fn java_hash_strings<'py>(
    py: Python<'py>,
    #[pyo3(from_py_with = args::typed::<PyBuffer<u8>>)] offsets: PyBuffer<u8>,
    #[pyo3(from_py_with = args::typed::<PyBuffer<u8>>)] data: PyBuffer<u8>,
    #[pyo3(from_py_with = args::typed::<Option<PyBuffer<u8>>>)] validity: Option<PyBuffer<u8>>,
    #[pyo3(from_py_with = args::count_usize)] offset: usize,
    #[pyo3(from_py_with = args::count_usize)] length: usize,
) -> PyResult<Bound<'py, ArrowArray>> {
    let validity = validity.as_ref().map(bytes_of).transpose()?;
    let rows = arrow_rows(bytes_of(&offsets)?, bytes_of(&data)?, validity, offset, length)?;
    let values: Vec<i64> =
        rows.iter().map(|row| row.map_or(0, |b| i64::from(crate::java::utf8_bytes_hash(b)))).collect();
    let valid: Vec<bool> = rows.iter().map(Option::is_some).collect();
    export(py, Arc::new(Int64Array::new(ScalarBuffer::from(values), nulls(valid))))
}

/// The Arrow schema of the named columns (all by default), in `COLUMNS` order: the one definition that
/// `rmq.arrow.arrow_schema` and the Spark source's schema derive from.
#[pyfunction(name = "arrow_schema")]
#[pyo3(signature = (columns=None))]
fn schema_of_columns(#[pyo3(from_py_with = args::opt_strings)] columns: Option<Vec<String>>) -> PyResult<ArrowSchema> {
    Ok(ArrowSchema { schema: Arc::new(schema_of(mask(columns)?)) })
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ArrowArray>()?;
    m.add_class::<ArrowSchema>()?;
    m.add_class::<SplitReader>()?;
    m.add("COLUMNS", columnar::COLUMNS.to_vec())?;
    m.add_function(wrap_pyfunction!(plan_commitlog, m)?)?;
    m.add_function(wrap_pyfunction!(decode_records, m)?)?;
    m.add_function(wrap_pyfunction!(java_hash_strings, m)?)?;
    m.add_function(wrap_pyfunction!(schema_of_columns, m)?)?;
    Ok(())
}
