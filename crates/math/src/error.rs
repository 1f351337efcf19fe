//! Errors of the numerical core. Every variant names the offending parameter and its value, so a
//! researcher who mistypes `--n0` sees which flag was wrong instead of a NaN three tables later.

/// Result alias for the math crate.
pub type Result<T> = std::result::Result<T, MathError>;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MathError {
    /// A parameter outside the domain where the formula means anything (e.g. `k >= n`).
    #[error("invalid {name} = {value}: {reason}")]
    InvalidParameter {
        name: &'static str,
        value: f64,
        reason: String,
    },

    /// A root that the caller asked for does not exist in the bracket that the theory allows.
    #[error("no root of {what} in [{lo}, {hi}]")]
    NoRoot { what: String, lo: f64, hi: f64 },

    /// Calibration input that cannot support the requested estimator (e.g. no bin at n <= n0).
    #[error("calibration input: {0}")]
    Calibration(String),

    /// A schedule that does not parse or does not validate.
    #[error("schedule: {0}")]
    Schedule(String),
}

/// Fails with [`MathError::InvalidParameter`] unless `ok` holds. `value` is reported as given.
pub(crate) fn ensure(ok: bool, name: &'static str, value: f64, reason: &str) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(MathError::InvalidParameter {
            name,
            value,
            reason: reason.to_string(),
        })
    }
}

/// A finite number; NaN and infinities are rejected with the parameter's name.
pub(crate) fn ensure_finite(name: &'static str, value: f64) -> Result<()> {
    ensure(value.is_finite(), name, value, "must be a finite number")
}
