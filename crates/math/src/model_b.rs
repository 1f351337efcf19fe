//! Model B (derivations/top-k-mass-scaling.md §3): all n logits i.i.d. N(0, sigma^2) and the top-k are the k largest by
//! value. The semi-analytic logit mass puts the top-k at Blom's expected order statistics and treats the
//! bulk as annealed but truncated at the k/n quantile:
//! `G_B(n, s) = ln sum_{i<=k} e^{s sigma z_i(n)} - ln n - s^2 sigma^2 / 2 - ln Phi((t - s sigma^2) / sigma)`,
//! `t = sigma Phi^-1(1 - k/n)`, `z_i(n) = Phi^-1(1 - (i - 3/8) / (n + 1/4))`.

use crate::error::{ensure, ensure_finite, Result};
use crate::mass::tilted_moments;
use crate::roots::brent_root;
use statrs::distribution::{Continuous, ContinuousCDF, Normal};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelB {
    pub k: usize,
    pub sigma: f64,
    pub n0: f64,
}

fn standard_normal() -> Normal {
    Normal::new(0.0, 1.0).expect("N(0, 1) is a valid distribution")
}

/// Blom's approximation to the expected i-th largest of n standard normals (i = 1 is the maximum).
pub fn blom_score(n: f64, i: usize) -> f64 {
    standard_normal().inverse_cdf(1.0 - (i as f64 - 0.375) / (n + 0.25))
}

impl ModelB {
    pub fn new(k: usize, sigma: f64, n0: f64) -> Result<Self> {
        ensure(k >= 1, "k", k as f64, "the top set needs at least one key")?;
        ensure_finite("sigma", sigma)?;
        ensure(
            sigma > 0.0,
            "sigma",
            sigma,
            "Model B needs a positive logit spread",
        )?;
        ensure(
            n0.is_finite() && n0 > k as f64,
            "n0",
            n0,
            &format!("the training length must exceed k = {k}"),
        )?;
        Ok(Self { k, sigma, n0 })
    }

    fn check_n(&self, n: f64) -> Result<()> {
        ensure(
            n.is_finite() && n > self.k as f64,
            "n",
            n,
            &format!("the row must see more keys than k = {}", self.k),
        )
    }

    /// Semi-analytic `G_B(n, s)`.
    pub fn logit_mass(&self, n: f64, s: f64) -> Result<f64> {
        self.check_n(n)?;
        ensure_finite("s", s)?;
        let normal = standard_normal();
        let top = (1..=self.k).map(|i| (self.sigma * blom_score(n, i), 1.0));
        let log_a = tilted_moments(top, s).log_partition;
        let t = self.sigma * normal.inverse_cdf(1.0 - self.k as f64 / n);
        let var = self.sigma * self.sigma;
        let log_bulk = n.ln() + s * s * var / 2.0 + normal.cdf((t - s * var) / self.sigma).ln();
        Ok(log_a - log_bulk)
    }

    /// Scale that restores `G_B(n0, 1)` at n (the root is unique: Lemma 1 holds for value-ranked top-k).
    pub fn exact_scale(&self, n: f64) -> Result<f64> {
        let target = self.logit_mass(self.n0, 1.0)?;
        self.check_n(n)?;
        let f = |s: f64| {
            self.logit_mass(n, s)
                .map(|g| g - target)
                .unwrap_or(f64::NAN)
        };
        brent_root("G_B(n, s) = G_B(n0, 1)", f, 0.05, 20.0, 1e-12)
    }

    /// Crude extreme-value law `s*(n) ~ 1 + (sqrt(2 ln n) - sqrt(2 ln n0)) / sigma`.
    pub fn crude_scale(&self, n: f64) -> Result<f64> {
        self.check_n(n)?;
        Ok(1.0 + ((2.0 * n.ln()).sqrt() - (2.0 * self.n0.ln()).sqrt()) / self.sigma)
    }

    /// Its slope at n0, `1 / (sigma sqrt(2 ln n0))`: biased low because sqrt(2 ln n) converges slowly.
    pub fn crude_slope(&self) -> f64 {
        1.0 / (self.sigma * (2.0 * self.n0.ln()).sqrt())
    }

    /// Refined closed-form slope from the local law (§4):
    /// `(1 - sigma <1/h(z_i)>_p) / (sigma z_bar_p - sigma^2)`, h the standard normal hazard function,
    /// `<.>_p` weighted by the softmax of `sigma z_i` over the top-k.
    pub fn refined_slope(&self) -> f64 {
        let normal = standard_normal();
        let z: Vec<f64> = (1..=self.k).map(|i| blom_score(self.n0, i)).collect();
        let scaled: Vec<f64> = z.iter().map(|zi| self.sigma * zi).collect();
        let log_z = tilted_moments(scaled.iter().map(|&l| (l, 1.0)), 1.0).log_partition;
        let (mut z_bar, mut inv_hazard) = (0.0, 0.0);
        for (zi, li) in z.iter().zip(&scaled) {
            let p = (li - log_z).exp();
            z_bar += p * zi;
            inv_hazard += p * (1.0 - normal.cdf(*zi)) / normal.pdf(*zi);
        }
        (1.0 - self.sigma * inv_hazard) / (self.sigma * z_bar - self.sigma * self.sigma)
    }

    /// Slope of the semi-analytic correction at n0, `-(dG_B/d ln n) / (dG_B/ds)` by central differences.
    pub fn semi_analytic_slope(&self) -> Result<f64> {
        let h: f64 = 1e-4;
        let g_n = (self.logit_mass(self.n0 * h.exp(), 1.0)?
            - self.logit_mass(self.n0 * (-h).exp(), 1.0)?)
            / (2.0 * h);
        let g_s =
            (self.logit_mass(self.n0, 1.0 + h)? - self.logit_mass(self.n0, 1.0 - h)?) / (2.0 * h);
        Ok(-g_n / g_s)
    }
}
