//! Model A (derivations/top-k-mass-scaling.md §2): k relevant keys with logit advantage Delta over a stationary Gaussian
//! background N(mu, sigma^2), annealed. Its logit top-k mass is
//! `G_A(n, s) = ln(k / (n - k)) + s Delta - s^2 sigma^2 / 2`, and the exact correction (Theorem 1) solves
//! `G_A(n, s*) = G_A(n0, 1)` on the increasing branch.

use crate::error::{ensure, ensure_finite, Result};
use crate::mass::expit;
use crate::roots::first_crossing;

/// Model A with equal advantages. `k` is real-valued so that calibration can pool heads freely.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelA {
    pub k: f64,
    pub delta: f64,
    pub sigma: f64,
    pub n0: f64,
}

/// How far the exact correction of Model A reaches (Theorem 1, "existence").
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CorrectionReach {
    /// `D <= 0`: at s = 1 a larger query already lowers the top-k mass; no s > 1 helps (beta = 0).
    NotSharpening,
    /// `sigma = 0` and `D > 0`: s* = 1 + c/Delta exists for every n.
    Unbounded,
    /// A root exists for `n <= n_max = k + (n0 - k) exp(D^2 / (2 sigma^2))`.
    UpTo(f64),
}

impl ModelA {
    /// Validates `k >= 1`, `n0 > k`, `sigma >= 0`, all finite.
    pub fn new(k: f64, delta: f64, sigma: f64, n0: f64) -> Result<Self> {
        for (name, v) in [("k", k), ("delta", delta), ("sigma", sigma), ("n0", n0)] {
            ensure_finite(name, v)?;
        }
        ensure(k >= 1.0, "k", k, "the top set needs at least one key")?;
        ensure(
            n0 > k,
            "n0",
            n0,
            &format!("the training length must exceed k = {k}"),
        )?;
        ensure(
            sigma >= 0.0,
            "sigma",
            sigma,
            "a standard deviation cannot be negative",
        )?;
        Ok(Self {
            k,
            delta,
            sigma,
            n0,
        })
    }

    /// Model A fitted to measurements at n0: the top-k mass `m0 = M_k(n0, 1)` and the background
    /// logit standard deviation. Inverts `logit m0 = ln(k/(n0-k)) + Delta - sigma^2/2` for Delta.
    pub fn from_measured(k: f64, n0: f64, mass_at_n0: f64, sigma: f64) -> Result<Self> {
        ensure(
            mass_at_n0 > 0.0 && mass_at_n0 < 1.0,
            "mass_at_n0",
            mass_at_n0,
            "must lie in (0, 1)",
        )?;
        let model = Self::new(k, 0.0, sigma, n0)?;
        let delta = crate::mass::logit(mass_at_n0) - (k / (n0 - k)).ln() + sigma * sigma / 2.0;
        Ok(Self { delta, ..model })
    }

    /// `D = Delta - sigma^2`, the slope of `G_A` in s at s = 1. Positive means sharpening helps.
    pub fn d(&self) -> f64 {
        self.delta - self.sigma * self.sigma
    }

    /// `c(n) = ln((n - k) / (n0 - k))`: growth of the background's log-partition from n0 to n.
    pub fn dilution(&self, n: f64) -> Result<f64> {
        ensure(
            n.is_finite() && n > self.k,
            "n",
            n,
            &format!("the row must see more keys than k = {}", self.k),
        )?;
        Ok(((n - self.k) / (self.n0 - self.k)).ln())
    }

    /// `G_A(n, s)`.
    pub fn logit_mass(&self, n: f64, s: f64) -> Result<f64> {
        ensure_finite("s", s)?;
        let c = self.dilution(n)?;
        Ok((self.k / (self.n0 - self.k)).ln() - c + s * self.delta
            - s * s * self.sigma * self.sigma / 2.0)
    }

    /// `M_k(n, s)` under the model.
    pub fn mass(&self, n: f64, s: f64) -> Result<f64> {
        self.logit_mass(n, s).map(expit)
    }

    /// `M_k(n, s) / M_k(n0, 1)`: how much of the training-length top-k mass a scale keeps at n.
    pub fn mass_ratio(&self, n: f64, s: f64) -> Result<f64> {
        Ok(self.mass(n, s)? / self.mass(self.n0, 1.0)?)
    }

    /// Where the exact correction exists.
    pub fn reach(&self) -> CorrectionReach {
        let d = self.d();
        if d <= 0.0 {
            CorrectionReach::NotSharpening
        } else if self.sigma == 0.0 {
            CorrectionReach::Unbounded
        } else {
            let exponent = d * d / (2.0 * self.sigma * self.sigma);
            CorrectionReach::UpTo(self.k + (self.n0 - self.k) * exponent.exp())
        }
    }

    /// Theorem 1: `s*(n) = 1 + 2c / (D + sqrt(D^2 - 2 sigma^2 c))`, the rationalised root that is also
    /// exact at sigma = 0. `None` when no root exists (D <= 0 away from n0, or n > n_max). For n < n0 the
    /// same formula gives the s < 1 that would match the mass; deployment clamps to 1 there.
    pub fn exact_scale(&self, n: f64) -> Result<Option<f64>> {
        let c = self.dilution(n)?;
        if c == 0.0 {
            return Ok(Some(1.0));
        }
        let d = self.d();
        let discriminant = d * d - 2.0 * self.sigma * self.sigma * c;
        if d <= 0.0 || discriminant < 0.0 {
            return Ok(None);
        }
        Ok(Some(1.0 + 2.0 * c / (d + discriminant.sqrt())))
    }

    /// Tangent slope per unit `ln(n/n0)` at n0: `n0 / ((n0 - k) D)`; 0 when D <= 0 (the guard).
    pub fn tangent_slope(&self) -> f64 {
        let d = self.d();
        if d <= 0.0 {
            0.0
        } else {
            self.n0 / ((self.n0 - self.k) * d)
        }
    }
}

/// Model A with heterogeneous advantages `Delta_i` (derivations/top-k-mass-scaling.md §2): `ln A(s) = ln sum_i e^{s Delta_i}`
/// and the correction solves `H(s) = H(1) + c(n)` with `H(s) = ln A(s) - s^2 sigma^2 / 2`, taken on the
/// increasing branch of H.
#[derive(Debug, Clone, PartialEq)]
pub struct PlantedKeys {
    pub advantages: Vec<f64>,
    pub sigma: f64,
    pub n0: f64,
}

impl PlantedKeys {
    pub fn new(advantages: Vec<f64>, sigma: f64, n0: f64) -> Result<Self> {
        ensure(
            !advantages.is_empty(),
            "k",
            0.0,
            "need at least one relevant key",
        )?;
        for &a in &advantages {
            ensure_finite("advantage", a)?;
        }
        ensure_finite("sigma", sigma)?;
        ensure(
            sigma >= 0.0,
            "sigma",
            sigma,
            "a standard deviation cannot be negative",
        )?;
        let k = advantages.len() as f64;
        ensure(
            n0.is_finite() && n0 > k,
            "n0",
            n0,
            &format!("the training length must exceed k = {k}"),
        )?;
        Ok(Self {
            advantages,
            sigma,
            n0,
        })
    }

    fn k(&self) -> f64 {
        self.advantages.len() as f64
    }

    /// `H(s)` and `H'(s) = <Delta>_{R,s} - s sigma^2`.
    fn h(&self, s: f64) -> (f64, f64) {
        let m = crate::mass::tilted_moments(self.advantages.iter().map(|&a| (a, 1.0)), s);
        let var = self.sigma * self.sigma;
        (m.log_partition - s * s * var / 2.0, m.mean - s * var)
    }

    /// The exact correction at n, or `None` when H peaks before reaching `H(1) + c(n)` (or n < n0, where
    /// no sharpening is deployed: returns the s <= 1 root only if H is increasing there).
    pub fn exact_scale(&self, n: f64) -> Result<Option<f64>> {
        let k = self.k();
        ensure(
            n.is_finite() && n > k,
            "n",
            n,
            &format!("the row must see more keys than k = {k}"),
        )?;
        let c = ((n - k) / (self.n0 - k)).ln();
        let (h1, slope1) = self.h(1.0);
        if slope1 <= 0.0 {
            return Ok(if c == 0.0 { Some(1.0) } else { None });
        }
        if c <= 0.0 {
            // Below n0 the matching scale lies in [0, 1); report it only when [0, 1] brackets it.
            let f = |s: f64| self.h(s).0 - h1 - c;
            return Ok(crate::roots::brent_root("H(s) = H(1) + c", f, 0.0, 1.0, 1e-12).ok());
        }
        let f = |s: f64| self.h(s).0 - h1 - c;
        first_crossing("H(s) = H(1) + c", f, 1.0, 1e6, |s| self.h(s).1 <= 0.0)
    }

    /// Tangent slope per unit `ln(n/n0)`: `n0 / ((n0 - k)(<Delta>_p - sigma^2))`, 0 when not sharpening.
    pub fn tangent_slope(&self) -> f64 {
        let (_, slope1) = self.h(1.0);
        if slope1 <= 0.0 {
            0.0
        } else {
            self.n0 / ((self.n0 - self.k()) * slope1)
        }
    }
}
