//! Fixed slopes for `s(n) = 1 + beta max(0, ln(n / n0))` under Model A (derivations/top-k-mass-scaling.md §4).
//!
//! Two parametrisations, kept apart on purpose:
//! * [`SlopesInC`]: slopes per unit `c = ln((n-k)/(n0-k))` on `c in [0, C]`, where Theorem 2 gives the exact
//!   logit error `E(c; beta) = c (beta D - 1) - sigma^2 beta^2 c^2 / 2` and every slope has a closed form.
//! * [`DeployedSlopes`]: slopes per unit `x = ln(n/n0)`, the form that is actually deployed. Only the
//!   tangent `n0 / ((n0 - k) D)` is closed-form here; secant, minimax and least squares are solved
//!   numerically from the exact error `E_x(x; beta) = G_A(n0 e^x, 1 + beta x) - G_A(n0, 1)`.
//!
//! For `n0 >> k` the two agree to `O(k / n0)`; the CLI reports the deployed ones.

use crate::error::{ensure, Result};
use crate::model_a::ModelA;
use crate::roots::brent_minimum;

/// Closed-form slopes per unit c over the range `[0, c_end]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlopesInC {
    pub model: ModelA,
    pub c_end: f64,
}

impl SlopesInC {
    pub fn new(model: ModelA, c_end: f64) -> Result<Self> {
        ensure(
            c_end.is_finite() && c_end >= 0.0,
            "C",
            c_end,
            "the range end must be finite and >= 0",
        )?;
        ensure(
            model.d() > 0.0,
            "D",
            model.d(),
            "fixed slopes need the sharpening regime D = Delta - sigma^2 > 0",
        )?;
        Ok(Self { model, c_end })
    }

    fn sigma2(&self) -> f64 {
        self.model.sigma * self.model.sigma
    }

    /// Theorem 2: exact logit error of slope `beta` at `c`.
    pub fn error(&self, c: f64, beta: f64) -> f64 {
        c * (beta * self.model.d() - 1.0) - 0.5 * self.sigma2() * beta * beta * c * c
    }

    /// `1 / D`: exact at n0 to first order, under-corrects by `-sigma^2 c^2 / (2 D^2)`.
    pub fn tangent(&self) -> f64 {
        1.0 / self.model.d()
    }

    /// `2 / (D + sqrt(D^2 - 2 sigma^2 C))`, zero error at both ends; `None` beyond n_max.
    pub fn secant(&self) -> Option<f64> {
        let d = self.model.d();
        let disc = d * d - 2.0 * self.sigma2() * self.c_end;
        (disc >= 0.0).then(|| 2.0 / (d + disc.sqrt()))
    }

    /// Equal-ripple slope `2 / (D + sqrt(D^2 - 4 (sqrt2 - 1) sigma^2 C))`.
    pub fn minimax(&self) -> Option<f64> {
        let d = self.model.d();
        let disc = d * d - 4.0 * (2f64.sqrt() - 1.0) * self.sigma2() * self.c_end;
        (disc >= 0.0).then(|| 2.0 / (d + disc.sqrt()))
    }

    /// `max |E|` of the minimax slope: `(3 - 2 sqrt2) / 2 sigma^2 beta^2 C^2`.
    pub fn minimax_max_error(&self) -> Option<f64> {
        let c = self.c_end;
        self.minimax()
            .map(|b| (3.0 - 2.0 * 2f64.sqrt()) / 2.0 * self.sigma2() * b * b * c * c)
    }

    /// Least squares in s, uniform in c: `3/C^3 (D/sigma^2) [C^2/2 - I]` with
    /// `I = a^-2 [4/15 - 2/3 w0^{3/2} + 2/5 w0^{5/2}]`, `a = 2 sigma^2 / D^2`, `w0 = 1 - a C`.
    /// At sigma = 0 the correction is exactly linear and the answer is `1 / D`.
    pub fn least_squares(&self) -> Option<f64> {
        let d = self.model.d();
        let (sigma2, c) = (self.sigma2(), self.c_end);
        if sigma2 == 0.0 || c == 0.0 {
            return Some(1.0 / d);
        }
        let a = 2.0 * sigma2 / (d * d);
        let w0 = 1.0 - a * c;
        if w0 < 0.0 {
            return None;
        }
        let integral = (4.0 / 15.0 - 2.0 / 3.0 * w0.powf(1.5) + 2.0 / 5.0 * w0.powf(2.5)) / (a * a);
        Some(3.0 / c.powi(3) * (d / sigma2) * (c * c / 2.0 - integral))
    }
}

/// Deployed slopes per unit `ln(n/n0)` over `[n0, n_end]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeployedSlopes {
    pub tangent: f64,
    /// Exact at n0 and at n_end; `None` when n_end is beyond n_max.
    pub secant: Option<f64>,
    /// Minimises `max_x |E_x(x; beta)|` over the range.
    pub minimax: f64,
    /// Least squares of `s(n) - s*(n)`, uniform in x; `None` when s* does not exist over the whole range.
    pub least_squares: Option<f64>,
}

/// Grid over x used to find the worst error of a slope before refining it.
const ERROR_GRID: usize = 256;
/// Simpson intervals for the least-squares integral.
const SIMPSON_INTERVALS: usize = 2048;

/// Exact logit error of the deployed slope `beta` at `x = ln(n/n0) >= 0`.
pub fn deployed_error(model: &ModelA, x: f64, beta: f64) -> f64 {
    let n = model.n0 * x.exp();
    let c = ((n - model.k) / (model.n0 - model.k)).ln();
    beta * x * model.d() - 0.5 * model.sigma * model.sigma * beta * beta * x * x - c
}

/// Worst `|E_x|` over `[0, x_end]`: grid search, then Brent refinement around the worst grid point.
pub fn deployed_max_error(model: &ModelA, x_end: f64, beta: f64) -> f64 {
    let abs_error = |x: f64| deployed_error(model, x, beta).abs();
    let step = x_end / ERROR_GRID as f64;
    let (worst_i, worst) = (0..=ERROR_GRID)
        .map(|i| (i, abs_error(i as f64 * step)))
        .fold((0, f64::NEG_INFINITY), |best, cur| {
            if cur.1 > best.1 {
                cur
            } else {
                best
            }
        });
    let lo = worst_i.saturating_sub(1) as f64 * step;
    let hi = ((worst_i + 1).min(ERROR_GRID)) as f64 * step;
    match brent_minimum(|x| -abs_error(x), lo, hi) {
        Ok(x) => abs_error(x).max(worst),
        Err(_) => worst,
    }
}

impl DeployedSlopes {
    /// Slopes for `model` over `[n0, n_end]`. With `D <= 0` every slope is 0 (the calibration guard:
    /// sharpening does not raise the top-k mass there). An empty range (`n_end <= n0`) gives the tangent
    /// for every slope, its limit.
    pub fn new(model: &ModelA, n_end: f64) -> Result<Self> {
        ensure(
            n_end.is_finite() && n_end > model.k,
            "range end",
            n_end,
            &format!("must exceed k = {}", model.k),
        )?;
        if model.d() <= 0.0 {
            return Ok(Self {
                tangent: 0.0,
                secant: Some(0.0),
                minimax: 0.0,
                least_squares: Some(0.0),
            });
        }
        let tangent = model.tangent_slope();
        let x_end = (n_end / model.n0).ln();
        if x_end <= 1e-12 {
            return Ok(Self {
                tangent,
                secant: Some(tangent),
                minimax: tangent,
                least_squares: Some(tangent),
            });
        }
        let secant = model.exact_scale(n_end)?.map(|s| (s - 1.0) / x_end);
        // The minimax slope lies between under-correcting (0) and a few tangents; max|E| is unimodal in it.
        let minimax = brent_minimum(|b| deployed_max_error(model, x_end, b), 0.0, 4.0 * tangent)?;
        Ok(Self {
            tangent,
            secant,
            minimax,
            least_squares: least_squares_in_x(model, x_end)?,
        })
    }
}

/// `3 / X^3 * integral_0^X x (s*(x) - 1) dx` by composite Simpson.
fn least_squares_in_x(model: &ModelA, x_end: f64) -> Result<Option<f64>> {
    let h = x_end / SIMPSON_INTERVALS as f64;
    let mut integral = 0.0;
    for i in 0..=SIMPSON_INTERVALS {
        let x = i as f64 * h;
        let Some(s) = model.exact_scale(model.n0 * x.exp())? else {
            return Ok(None);
        };
        let weight = if i == 0 || i == SIMPSON_INTERVALS {
            1.0
        } else if i % 2 == 1 {
            4.0
        } else {
            2.0
        };
        integral += weight * x * (s - 1.0);
    }
    integral *= h / 3.0;
    Ok(Some(3.0 * integral / x_end.powi(3)))
}
