//! Bracketing root finding and one-dimensional minimisation on top of argmin.
//!
//! Every correction in this crate is the root of a monotone (Lemma 1) or concave (Model A) function on a
//! known bracket, so Brent's method is the right tool: it cannot diverge and needs no derivative.

use crate::error::{MathError, Result};
use argmin::core::{CostFunction, Error as ArgminError, Executor};
use argmin::solver::brent::{BrentOpt, BrentRoot};

struct Scalar<F: Fn(f64) -> f64>(F);

impl<F: Fn(f64) -> f64> CostFunction for Scalar<F> {
    type Param = f64;
    type Output = f64;
    fn cost(&self, x: &f64) -> std::result::Result<f64, ArgminError> {
        Ok((self.0)(*x))
    }
}

/// Root of `f` on `[lo, hi]`; `f(lo)` and `f(hi)` must differ in sign (or one be zero).
/// `what` names the equation in the error when they do not.
pub fn brent_root(what: &str, f: impl Fn(f64) -> f64, lo: f64, hi: f64, tol: f64) -> Result<f64> {
    let (f_lo, f_hi) = (f(lo), f(hi));
    if f_lo == 0.0 {
        return Ok(lo);
    }
    if f_hi == 0.0 {
        return Ok(hi);
    }
    if !(f_lo.is_finite() && f_hi.is_finite()) || f_lo.signum() == f_hi.signum() {
        return Err(MathError::NoRoot {
            what: what.to_string(),
            lo,
            hi,
        });
    }
    let run = Executor::new(Scalar(f), BrentRoot::new(lo, hi, tol))
        .configure(|state| state.param(lo).max_iters(200))
        .run()
        .map_err(|_| MathError::NoRoot {
            what: what.to_string(),
            lo,
            hi,
        })?;
    run.state.best_param.ok_or_else(|| MathError::NoRoot {
        what: what.to_string(),
        lo,
        hi,
    })
}

/// Minimiser of `f` on `[lo, hi]` (Brent's parabolic search); `f` should be unimodal there.
pub fn brent_minimum(f: impl Fn(f64) -> f64, lo: f64, hi: f64) -> Result<f64> {
    let run = Executor::new(Scalar(f), BrentOpt::new(lo, hi).set_tolerance(1e-10, 1e-12))
        .configure(|state| state.max_iters(500))
        .run()
        .map_err(|e| MathError::NoRoot {
            what: format!("minimum ({e})"),
            lo,
            hi,
        })?;
    run.state.best_param.ok_or_else(|| MathError::NoRoot {
        what: "minimum".into(),
        lo,
        hi,
    })
}

/// Smallest `x` in `[lo, hi_max]` with `f(x) >= 0`, for an `f` that is negative at `lo` and increasing
/// until it first crosses zero. Doubles the step from `lo` until the sign changes, then polishes with
/// Brent. Returns `None` when `f` never reaches zero before `hi_max` or turns down first (`stop(x)`).
pub fn first_crossing(
    what: &str,
    f: impl Fn(f64) -> f64,
    lo: f64,
    hi_max: f64,
    stop: impl Fn(f64) -> bool,
) -> Result<Option<f64>> {
    let f_lo = f(lo);
    if f_lo >= 0.0 {
        return Ok(Some(lo));
    }
    let (mut a, mut step) = (lo, 0.05_f64.max(lo.abs() * 0.05));
    loop {
        let b = (a + step).min(hi_max);
        let f_b = f(b);
        if f_b >= 0.0 {
            return brent_root(what, &f, a, b, 1e-12).map(Some);
        }
        if b >= hi_max || stop(b) {
            return Ok(None);
        }
        a = b;
        step *= 2.0;
    }
}
