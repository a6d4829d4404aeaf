//! Argument conversion for every public call: each function here turns one Python argument into its Rust
//! value or raises a typed error, before the GIL is released and before any lock or file is touched.
//!
//! The rules: ints are Python `int`s and never `bool`s, in the range of the Java type they stand for (queue
//! ids are Java ints, offsets Java longs); timeouts are finite, non-negative seconds; strings are `str`
//! without lone surrogates (they cannot be stored as UTF-8); properties are a `Mapping[str, str]`. A value
//! of the wrong type raises `ArgumentTypeError` (also a `TypeError`), a value out of range
//! `InvalidArgumentError` (also a `ValueError`); PyO3 adds the argument's name as a note.

use std::path::PathBuf;
use std::time::Duration;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::pybacked::{PyBackedBytes, PyBackedStr};
use pyo3::types::{PyBool, PyBytes, PyInt, PyMapping, PyString};

use super::errors::{argument_type_error, invalid_argument};

/// The longest wait a timeout may ask for (a day more than this is a bug, not a wish).
const MAX_TIMEOUT_SECS: f64 = 1e9;

/// The Python type name of `obj`, for messages.
pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".to_owned())
}

/// `ArgumentTypeError` with `what`, naming the type of `obj`.
pub(crate) fn argument_type_error_for(what: &str, obj: &Bound<'_, PyAny>) -> PyErr {
    argument_type_error(format!("{what}, got {}", type_name(obj)))
}

/// An `int` (not a `bool`), or an integer that converts through `__index__` (a NumPy integer), as i128; ints
/// beyond i64 are out of every range here. Extracted as an i64 (`PyLong_AsLongLong`): under the stable ABI
/// PyO3 builds an i128 from temporary Python ints (a shift and two conversions), a cost on every put's
/// `queue_id` and every `get_message`'s offsets.
fn exact_int(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<i128> {
    let wrong = || argument_type_error(format!("expected {what} (an int), got {}", type_name(obj)));
    if obj.is_instance_of::<PyBool>() {
        return Err(wrong());
    }
    let index;
    let int = if obj.is_instance_of::<PyInt>() {
        obj
    } else {
        index = obj.call_method0("__index__").map_err(|_| wrong())?;
        if index.is_instance_of::<PyBool>() || !index.is_instance_of::<PyInt>() {
            return Err(wrong());
        }
        &index
    };
    int.extract::<i64>().map(i128::from).map_err(|_| invalid_argument(format!("{int} is out of range for {what}")))
}

/// An `int` in `[lo, hi]`.
fn int_in(obj: &Bound<'_, PyAny>, what: &str, lo: i128, hi: i128) -> PyResult<i128> {
    let v = exact_int(obj, what)?;
    if v < lo || v > hi {
        return Err(invalid_argument(format!("{v} is out of range for {what} [{lo}, {hi}]")));
    }
    Ok(v)
}

/// A Java `int` (queue ids, flags, sizes).
pub(crate) fn java_int(obj: &Bound<'_, PyAny>) -> PyResult<i32> {
    let v = int_in(obj, "a Java int", i32::MIN.into(), i32::MAX.into())?;
    Ok(i32::try_from(v).unwrap_or_default())
}

/// A Java `long` (queue offsets, timestamps).
pub(crate) fn java_long(obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    let v = int_in(obj, "a Java long", i64::MIN.into(), i64::MAX.into())?;
    Ok(i64::try_from(v).unwrap_or_default())
}

/// `None` or a Java `long`.
pub(crate) fn opt_java_long(obj: &Bound<'_, PyAny>) -> PyResult<Option<i64>> {
    if obj.is_none() {
        return Ok(None);
    }
    java_long(obj).map(Some)
}

/// `None` or a Java `int`.
pub(crate) fn opt_java_int(obj: &Bound<'_, PyAny>) -> PyResult<Option<i32>> {
    if obj.is_none() {
        return Ok(None);
    }
    java_int(obj).map(Some)
}

/// A commitlog offset in bytes: a non-negative Java `long`.
pub(crate) fn commitlog_offset(obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    let v = int_in(obj, "a commitlog offset", 0, i64::MAX.into())?;
    Ok(u64::try_from(v).unwrap_or_default())
}

/// A count or a size: an int in `[0, max]`.
fn count(obj: &Bound<'_, PyAny>, max: u64) -> PyResult<u64> {
    let v = int_in(obj, "a count", 0, max.into())?;
    Ok(u64::try_from(v).unwrap_or_default())
}

/// A count that fits a u32.
pub(crate) fn count_u32(obj: &Bound<'_, PyAny>) -> PyResult<u32> {
    Ok(u32::try_from(count(obj, u32::MAX.into())?).unwrap_or_default())
}

/// A count that fits a Java long (and so a u64).
pub(crate) fn count_u64(obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    count(obj, i64::MAX as u64)
}

/// A count of items held in memory: at most a Java int.
pub(crate) fn count_usize(obj: &Bound<'_, PyAny>) -> PyResult<usize> {
    Ok(usize::try_from(count(obj, i32::MAX as u64)?).unwrap_or_default())
}

/// A limit in bytes that a read must be able to reach: an int in `[1, i32::MAX]` (0 would end every batch
/// before its first row, and a reader would yield empty batches forever).
pub(crate) fn byte_limit_usize(obj: &Bound<'_, PyAny>) -> PyResult<usize> {
    let v = int_in(obj, "a size in bytes", 1, i32::MAX.into())?;
    Ok(usize::try_from(v).unwrap_or_default())
}

/// A `maxMessageSize` for later puts: an int in `[10, i32::MAX]` (RocketMQ's `updateMaxMessageSize` ignores
/// smaller values silently; here they are refused).
pub(crate) fn max_message_size(obj: &Bound<'_, PyAny>) -> PyResult<i32> {
    let lo = crate::config::MIN_MAX_MESSAGE_SIZE;
    let v = int_in(obj, "max_message_size (bytes)", lo.into(), i32::MAX.into())?;
    Ok(i32::try_from(v).unwrap_or_default())
}

/// An int or a float of seconds: finite and not negative (NaN, infinities and negative values are refused).
pub(crate) fn seconds(obj: &Bound<'_, PyAny>) -> PyResult<f64> {
    if obj.is_instance_of::<PyBool>()
        || !(obj.is_instance_of::<PyInt>() || obj.is_instance_of::<pyo3::types::PyFloat>())
    {
        return Err(argument_type_error(format!(
            "expected a timeout in seconds (int or float), got {}",
            type_name(obj)
        )));
    }
    let v: f64 = obj.extract().map_err(|_| invalid_argument(format!("timeout {obj} is out of range")))?;
    if !v.is_finite() || v < 0.0 {
        return Err(invalid_argument(format!("a timeout must be finite and not negative, got {v} seconds")));
    }
    Ok(v)
}

/// Seconds as a `Duration`, capped at `MAX_TIMEOUT_SECS`.
pub(crate) fn duration(secs: f64) -> Duration {
    Duration::try_from_secs_f64(secs.clamp(0.0, MAX_TIMEOUT_SECS)).unwrap_or(Duration::ZERO)
}

/// A `str` that can be stored as UTF-8 (no lone surrogates).
pub(crate) fn text(obj: &Bound<'_, PyAny>) -> PyResult<PyBackedStr> {
    let s =
        obj.cast::<PyString>().map_err(|_| argument_type_error(format!("expected a str, got {}", type_name(obj))))?;
    PyBackedStr::try_from(s.clone()).map_err(|_| {
        invalid_argument(format!(
            "{} contains a lone surrogate, which cannot be stored as UTF-8",
            s.repr().map(|r| r.to_string()).unwrap_or_default()
        ))
    })
}

/// `None` or a `str` (see `text`).
pub(crate) fn opt_text(obj: &Bound<'_, PyAny>) -> PyResult<Option<PyBackedStr>> {
    if obj.is_none() {
        return Ok(None);
    }
    text(obj).map(Some)
}

/// `None` or a list of `str`s.
pub(crate) fn opt_strings(obj: &Bound<'_, PyAny>) -> PyResult<Option<Vec<String>>> {
    if obj.is_none() {
        return Ok(None);
    }
    if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyBytes>() {
        return Err(argument_type_error(format!("expected a list of str, got {}", type_name(obj))));
    }
    let iter =
        obj.try_iter().map_err(|_| argument_type_error(format!("expected a list of str, got {}", type_name(obj))))?;
    iter.map(|item| text(&item?).map(|s| s.to_string())).collect::<PyResult<Vec<_>>>().map(Some)
}

/// `bytes` or `bytearray`.
pub(crate) fn body(obj: &Bound<'_, PyAny>) -> PyResult<PyBackedBytes> {
    obj.extract::<PyBackedBytes>()
        .map_err(|_| argument_type_error(format!("expected bytes or bytearray, got {}", type_name(obj))))
}

/// A `bool` (not an int).
pub(crate) fn boolean(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    obj.cast::<PyBool>()
        .map(|b| b.is_true())
        .map_err(|_| argument_type_error(format!("expected a bool, got {}", type_name(obj))))
}

/// A path: a `str` or an `os.PathLike`.
pub(crate) fn path(obj: &Bound<'_, PyAny>) -> PyResult<PathBuf> {
    obj.extract::<PathBuf>()
        .map_err(|_| argument_type_error(format!("expected a path (str or os.PathLike), got {}", type_name(obj))))
}

/// A value of a PyO3 class or enum, with a typed error for anything else.
pub(crate) fn typed<'a, 'py, T>(obj: &'a Bound<'py, PyAny>) -> PyResult<T>
where
    T: FromPyObject<'a, 'py>,
    T::Error: Into<PyErr>,
{
    obj.extract::<T>().map_err(|e| {
        let e: PyErr = e.into();
        let py = obj.py();
        if e.is_instance_of::<PyTypeError>(py) {
            argument_type_error(format!("{}, got {}", e.value(py), type_name(obj)))
        } else {
            invalid_argument(e.value(py).to_string())
        }
    })
}

/// `keys` given as one string (several keys separated by spaces) or a sequence of strings; None for none. A
/// `str` is borrowed (no copy; a put's hot path).
pub(crate) fn keys_text(obj: &Bound<'_, PyAny>) -> PyResult<Option<KeysText>> {
    if obj.is_none() {
        return Ok(None);
    }
    if obj.is_instance_of::<PyString>() {
        return Ok(Some(KeysText::Str(text(obj)?)));
    }
    // A sequence keeps the order the keys are stored in; a set has none, and a dict's values would be dropped.
    if obj.cast::<pyo3::types::PySequence>().is_err() {
        return Err(argument_type_error(format!("keys must be a str or a sequence of str, got {}", type_name(obj))));
    }
    let parts = opt_strings(obj).map_err(|e| {
        if e.is_instance_of::<PyTypeError>(obj.py()) {
            argument_type_error(format!("keys must be a str or a sequence of str, got {}", type_name(obj)))
        } else {
            e
        }
    })?;
    Ok(parts.map(|p| KeysText::Joined(p.join(" "))))
}

/// The `KEYS` text of a put: the caller's `str`, or a sequence's keys joined by spaces.
pub(crate) enum KeysText {
    Str(PyBackedStr),
    Joined(String),
}

impl std::ops::Deref for KeysText {
    type Target = str;
    fn deref(&self) -> &str {
        match self {
            KeysText::Str(s) => s,
            KeysText::Joined(s) => s,
        }
    }
}

/// `tags=` of `put_batch`: one tag for every message, or a sequence with one (or None) per message.
pub(crate) enum BatchTags {
    Every(PyBackedStr),
    Each(Vec<Option<PyBackedStr>>),
}

impl BatchTags {
    /// The tag of message `i` (`i` below the checked length).
    pub(crate) fn of(&self, i: usize) -> Option<&str> {
        match self {
            BatchTags::Every(t) => Some(t),
            BatchTags::Each(v) => v[i].as_deref(),
        }
    }
}

/// `tags=` of `put_batch` (see [`BatchTags`]); None for none.
pub(crate) fn batch_tags(obj: &Bound<'_, PyAny>) -> PyResult<Option<BatchTags>> {
    if obj.is_none() {
        return Ok(None);
    }
    if obj.is_instance_of::<PyString>() {
        return Ok(Some(BatchTags::Every(text(obj)?)));
    }
    let expected = "tags must be a str or a sequence of str or None, one per message";
    Ok(Some(BatchTags::Each(per_message(obj, "tags", expected, opt_text)?)))
}

/// `keys=` of `put_batch`: a sequence with one entry per message, each as `put`'s `keys` (a `str`, a sequence
/// of `str`, or None); None for none.
pub(crate) fn batch_keys(obj: &Bound<'_, PyAny>) -> PyResult<Option<Vec<Option<KeysText>>>> {
    if obj.is_none() {
        return Ok(None);
    }
    let expected = "keys must be a sequence with one entry (str, list of str or None) per message";
    per_message(obj, "keys", expected, keys_text).map(Some)
}

/// The items of `put_batch`'s per-message argument `name` (a sequence, not a `str` or `bytes`), each converted
/// by `item`; an item's error names its index (`name[i]: ...`).
fn per_message<T>(
    obj: &Bound<'_, PyAny>,
    name: &str,
    expected: &str,
    item: impl Fn(&Bound<'_, PyAny>) -> PyResult<T>,
) -> PyResult<Vec<T>> {
    if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyBytes>() {
        return Err(argument_type_error_for(expected, obj));
    }
    let iter = obj.try_iter().map_err(|_| argument_type_error_for(expected, obj))?;
    iter.enumerate().map(|(i, x)| item(&x?).map_err(|e| prefix(e, &format!("{name}[{i}]")))).collect()
}

/// A `Mapping[str, str]` (or None), in iteration order.
pub(crate) fn properties(obj: &Bound<'_, PyAny>) -> PyResult<Option<Vec<(String, String)>>> {
    if obj.is_none() {
        return Ok(None);
    }
    let map = obj
        .cast::<PyMapping>()
        .map_err(|_| argument_type_error(format!("properties must be a Mapping[str, str], got {}", type_name(obj))))?;
    let mut out = Vec::new();
    for item in map.items()?.iter() {
        let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract()?;
        let name = text(&k).map_err(|e| prefix(e, "property name"))?.to_string();
        let value = text(&v).map_err(|e| prefix(e, &format!("property {name:?}")))?.to_string();
        out.push((name, value));
    }
    Ok(Some(out))
}

/// The same error class with `what: ` before the message.
fn prefix(e: PyErr, what: &str) -> PyErr {
    Python::attach(|py| {
        let msg = format!("{what}: {}", e.value(py));
        if e.is_instance_of::<PyTypeError>(py) {
            argument_type_error(msg)
        } else {
            invalid_argument(msg)
        }
    })
}
