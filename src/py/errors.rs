//! The Python exception tree, rooted at `RmqError`, mirroring [`crate::Error`].

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

use super::message::PutMessageStatus;
use crate::error::Error;

create_exception!(_native, RmqError, PyException, "Base class of every error rmq raises.");
create_exception!(_native, InvalidInputError, RmqError, "An argument was rejected; nothing was written.");
create_exception!(_native, InvalidTopicError, InvalidInputError, "The topic breaks RocketMQ's topic rules.");
create_exception!(_native, InvalidMessageError, InvalidInputError, "A message field is illegal (MESSAGE_ILLEGAL).");
create_exception!(
    _native,
    MessageTooLargeError,
    InvalidInputError,
    "Body or record exceeds the size limits (MESSAGE_ILLEGAL)."
);
create_exception!(
    _native,
    PropertiesTooLargeError,
    InvalidInputError,
    "Encoded properties exceed 32767 bytes (PROPERTIES_SIZE_EXCEEDED)."
);
create_exception!(_native, InvalidPropertyError, InvalidInputError, "A property name or value cannot be stored.");
create_exception!(_native, InvalidHostError, InvalidInputError, "A host is not 'ip:port' or '[ipv6]:port'.");
create_exception!(_native, InvalidOffsetError, InvalidInputError, "No record starts at the given offset.");
create_exception!(_native, InvalidConfigError, InvalidInputError, "A configuration value is out of range or unknown.");
create_exception!(
    _native,
    TransactionError,
    InvalidInputError,
    "An end of a transaction was refused (not a half message, wrong group or offset, already ended); nothing was written."
);
create_exception!(_native, CorruptionError, RmqError, "Stored bytes do not form what the format requires.");
create_exception!(_native, StoreIOError, RmqError, "An operating-system I/O call failed.");
create_exception!(_native, StoreStateError, RmqError, "The store cannot serve the call in its current state.");
create_exception!(_native, StoreClosedError, StoreStateError, "The store is closed.");
create_exception!(_native, StoreLockedError, StoreStateError, "Another open store holds the directory.");
create_exception!(_native, ReadOnlyError, StoreStateError, "The store is open read-only; the call would write.");
create_exception!(
    _native,
    StorePoisonedError,
    StoreStateError,
    "A flush failed; the store refuses writes until reopened."
);

/// `DiskFullError(StoreIOError, OSError)`: built at import, since a class with two bases cannot be declared
/// with `create_exception!`. Instances carry `errno == ENOSPC`.
static DISK_FULL_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

fn disk_full_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    DISK_FULL_ERROR
        .get_or_try_init(py, || {
            let bases = PyTuple::new(py, [py.get_type::<StoreIOError>(), py.get_type::<PyOSError>()])?;
            let ns = PyDict::new(py);
            ns.set_item(
                "__doc__",
                "The disk is full (ENOSPC): nothing was written and no queue offset was used. Also an OSError with \
                 errno ENOSPC. The store stays open and readable; free space and retry.",
            )?;
            ns.set_item("__module__", "rmq")?;
            let ty = py.get_type::<PyType>().call1(("DiskFullError", bases, ns))?;
            Ok(ty.cast_into::<PyType>()?.unbind())
        })
        .map(|t| t.bind(py))
}

/// `InvalidArgumentError(InvalidInputError, ValueError)`: an argument's value is out of range.
static INVALID_ARGUMENT: PyOnceLock<Py<PyType>> = PyOnceLock::new();
/// `ArgumentTypeError(InvalidInputError, TypeError)`: an argument has the wrong type.
static ARGUMENT_TYPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// A subclass of `InvalidInputError` and a builtin (`create_exception!` takes one base only).
fn input_subclass<'py>(
    py: Python<'py>,
    name: &str,
    builtin: Bound<'py, PyType>,
    doc: &str,
) -> PyResult<Bound<'py, PyType>> {
    let bases = PyTuple::new(py, [py.get_type::<InvalidInputError>(), builtin])?;
    let ns = PyDict::new(py);
    ns.set_item("__doc__", doc)?;
    ns.set_item("__module__", "rmq")?;
    let ty = py.get_type::<PyType>().call1((name, bases, ns))?;
    Ok(ty.cast_into::<PyType>()?)
}

/// An error of class `cell` (or `InvalidInputError` if the module was not initialised) with `message`, and
/// the `status`, `path` and `offset` attributes every `RmqError` has (all None here).
fn input_error(cell: &PyOnceLock<Py<PyType>>, message: String) -> PyErr {
    Python::attach(|py| {
        let err = match cell.get(py) {
            Some(ty) => PyErr::from_type(ty.bind(py).clone(), message),
            None => InvalidInputError::new_err(message),
        };
        let value = err.value(py);
        for attr in ["status", "path", "offset"] {
            let _ = value.setattr(attr, py.None());
        }
        err
    })
}

/// `InvalidArgumentError`: a value out of range (also a `ValueError`); nothing was changed.
pub(crate) fn invalid_argument(message: String) -> PyErr {
    input_error(&INVALID_ARGUMENT, message)
}

/// `ArgumentTypeError`: a value of the wrong type (also a `TypeError`); nothing was changed.
pub(crate) fn argument_type_error(message: String) -> PyErr {
    input_error(&ARGUMENT_TYPE, message)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("DiskFullError", disk_full_type(py)?)?;
    let add = |name: &str, ty: Bound<'_, pyo3::types::PyType>| -> PyResult<()> {
        ty.setattr("__module__", "rmq")?;
        m.add(name, ty)
    };
    add("RmqError", py.get_type::<RmqError>())?;
    add("InvalidInputError", py.get_type::<InvalidInputError>())?;
    add("InvalidTopicError", py.get_type::<InvalidTopicError>())?;
    add("InvalidMessageError", py.get_type::<InvalidMessageError>())?;
    add("MessageTooLargeError", py.get_type::<MessageTooLargeError>())?;
    add("PropertiesTooLargeError", py.get_type::<PropertiesTooLargeError>())?;
    add("InvalidPropertyError", py.get_type::<InvalidPropertyError>())?;
    add("InvalidHostError", py.get_type::<InvalidHostError>())?;
    add("InvalidOffsetError", py.get_type::<InvalidOffsetError>())?;
    add("InvalidConfigError", py.get_type::<InvalidConfigError>())?;
    add("TransactionError", py.get_type::<TransactionError>())?;
    add("CorruptionError", py.get_type::<CorruptionError>())?;
    add("StoreIOError", py.get_type::<StoreIOError>())?;
    add("StoreStateError", py.get_type::<StoreStateError>())?;
    add("StoreClosedError", py.get_type::<StoreClosedError>())?;
    add("StoreLockedError", py.get_type::<StoreLockedError>())?;
    add("ReadOnlyError", py.get_type::<ReadOnlyError>())?;
    add("StorePoisonedError", py.get_type::<StorePoisonedError>())?;
    let invalid = INVALID_ARGUMENT.get_or_try_init(py, || {
        let doc = "An argument's value is out of range (NaN timeout, int beyond its Java type, lone surrogate); \
                   nothing was changed.";
        input_subclass(py, "InvalidArgumentError", py.get_type::<PyValueError>(), doc).map(Bound::unbind)
    })?;
    m.add("InvalidArgumentError", invalid.bind(py))?;
    let wrong_type = ARGUMENT_TYPE.get_or_try_init(py, || {
        let doc = "An argument has the wrong type (a bool for an int, a str for bytes); nothing was changed.";
        input_subclass(py, "ArgumentTypeError", py.get_type::<PyTypeError>(), doc).map(Bound::unbind)
    })?;
    m.add("ArgumentTypeError", wrong_type.bind(py))?;
    Ok(())
}

/// Converts a core error to its Python exception, with `status`, `path` and `offset` attributes.
pub(crate) fn to_py(err: Error) -> PyErr {
    let mut msg = err.to_string();
    // The operating system's error number of a failed I/O call (`StoreIOError.errno`, as an `OSError` has).
    let os_errno = match &err {
        Error::Io { source, .. } => source.raw_os_error(),
        _ => None,
    };
    if os_errno == Some(libc::EROFS) {
        msg.push_str(
            "; the file system is read-only: rmq.MessageStore(path, read_only=True) reads the store without writing",
        );
    }
    let status = err.put_status();
    let (path, offset) = match &err {
        Error::Corruption { path, offset, .. } => (Some(path.display().to_string()), Some(*offset)),
        Error::Io { path, .. } | Error::DiskFull { path, .. } | Error::NotAStore { path, .. } => {
            (Some(path.display().to_string()), None)
        }
        Error::InvalidOffset { offset, .. } => (None, Some(*offset)),
        Error::Locked(path) | Error::ReadOnly(path) | Error::DiskSpaceWarning { path, .. } => {
            (Some(path.display().to_string()), None)
        }
        _ => (None, None),
    };
    let py_err = match err {
        Error::InvalidTopic { .. } => InvalidTopicError::new_err(msg),
        Error::IllegalMessage(_) => InvalidMessageError::new_err(msg),
        Error::MessageTooLarge(_) => MessageTooLargeError::new_err(msg),
        Error::PropertiesTooLarge { .. } => PropertiesTooLargeError::new_err(msg),
        Error::InvalidProperty { .. } => InvalidPropertyError::new_err(msg),
        Error::InvalidHost(_) => InvalidHostError::new_err(msg),
        Error::InvalidConfig(_) => InvalidConfigError::new_err(msg),
        Error::InvalidOffset { .. } => InvalidOffsetError::new_err(msg),
        Error::Transaction(_) => TransactionError::new_err(msg),
        Error::Corruption { .. } => CorruptionError::new_err(msg),
        Error::Io { .. } => StoreIOError::new_err(msg),
        Error::DiskFull { ref path, .. } => Python::attach(|py| match disk_full_type(py) {
            // OSError(errno, strerror, filename) sets `errno`, `strerror` and `filename`.
            Ok(ty) => PyErr::from_type(ty.clone(), (libc::ENOSPC, msg, path.display().to_string())),
            Err(e) => e,
        }),
        Error::Locked(_) => StoreLockedError::new_err(msg),
        Error::ReadOnly(_) => ReadOnlyError::new_err(msg),
        Error::Closed => StoreClosedError::new_err(msg),
        Error::Poisoned(_) => StorePoisonedError::new_err(msg),
        Error::DiskSpaceWarning { .. } | Error::Forked(_) | Error::Replaced(_) => StoreStateError::new_err(msg),
        Error::NotAStore { .. } => invalid_argument(msg),
    };
    Python::attach(|py| {
        let value = py_err.value(py);
        let _ = value.setattr("status", status.map(PutMessageStatus::from));
        let _ = value.setattr("path", path);
        let _ = value.setattr("offset", offset);
        if value.is_instance_of::<StoreIOError>() && !value.is_instance_of::<PyOSError>() {
            let _ = value.setattr("errno", os_errno);
        }
    });
    py_err
}
