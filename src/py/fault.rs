//! Binding of the I/O fault seam ([`crate::fault`]), wrapped by `rmq.testing`.

use std::path::PathBuf;

use pyo3::prelude::*;

use super::errors::InvalidInputError;
use crate::fault::{self, Fault, FaultPoint};

fn point(name: &str) -> PyResult<FaultPoint> {
    FaultPoint::from_name(name).ok_or_else(|| {
        let names: Vec<&str> = FaultPoint::ALL.iter().map(|p| p.name()).collect();
        InvalidInputError::new_err(format!("unknown fault point {name:?}; the points are {}", names.join(", ")))
    })
}

/// Arms a fault at `point` ("flush", "fsync", "allocate", "write"): the first `after` matching checks pass, the
/// next `times` (None: all until disarmed) fail with `errno` before any I/O is done. `path` limits the fault to
/// files under that path. Replaces a fault armed at the same point and path.
#[pyfunction]
#[pyo3(signature = (point_name, after, times, errno, path=None))]
fn _inject_fault(point_name: &str, after: u64, times: Option<u64>, errno: i32, path: Option<PathBuf>) -> PyResult<()> {
    let point = point(point_name)?;
    if errno <= 0 {
        return Err(InvalidInputError::new_err(format!("errno must be a positive error number, not {errno}")));
    }
    if times == Some(0) {
        return Err(InvalidInputError::new_err("times must be at least 1 (or None for every check)"));
    }
    fault::inject(Fault { point, after, times, errno, path_prefix: path, stall: false });
    Ok(())
}

/// Disarms the faults at `point` (every fault when None); returns how many were armed.
#[pyfunction]
#[pyo3(signature = (point_name=None))]
fn _disarm_faults(point_name: Option<&str>) -> PyResult<usize> {
    let point = point_name.map(point).transpose()?;
    Ok(fault::disarm(point))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_inject_fault, m)?)?;
    m.add_function(wrap_pyfunction!(_disarm_faults, m)?)?;
    Ok(())
}
