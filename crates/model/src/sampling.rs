//! Turning logits into tokens: greedy, or seeded sampling with temperature, top-k and top-p. The
//! filtered distribution is exposed on its own so that verification can use the very same one.

use crate::error::{ModelError, Result};
use crate::time_split::{self, Step};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tch::{Kind, Tensor};

/// The highest sampling temperature the workbench takes: at 100 sampling is all but uniform over any
/// vocabulary already, and a larger value would only measure the same thing more slowly.
pub const MAX_TEMPERATURE: f64 = 100.0;

/// Whether `temperature` is one the workbench samples at: finite and in `0..=`[`MAX_TEMPERATURE`]
/// (0 is greedy). Every command and config checks its temperatures with this.
pub fn is_valid_temperature(temperature: f64) -> bool {
    (0.0..=MAX_TEMPERATURE).contains(&temperature)
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// 0 means greedy.
    pub temperature: f64,
    /// 1 keeps everything.
    pub top_p: f64,
    /// 0 keeps everything.
    pub top_k: i64,
    pub seed: u64,
}

impl Sampling {
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            top_p: 1.0,
            top_k: 0,
            seed: 0,
        }
    }

    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0
    }

    /// The distribution sampled from, `[.., vocab]` f32 probabilities: softmax(logits / T) restricted to
    /// the top-k and then to the smallest top-p prefix, renormalised.
    pub fn probabilities(&self, logits: &Tensor) -> Tensor {
        time_split::mark(Step::Sampling, || 0, || self.restricted_softmax(logits))
    }

    fn restricted_softmax(&self, logits: &Tensor) -> Tensor {
        let mut scaled = logits.to_kind(Kind::Float) / self.temperature.max(1e-6);
        let vocab = *scaled.size().last().unwrap_or(&0);
        if self.top_k > 0 && self.top_k < vocab {
            let (top, _) = scaled.topk(self.top_k, -1, true, true);
            let threshold = top.narrow(-1, self.top_k - 1, 1);
            scaled = scaled.masked_fill(&scaled.lt_tensor(&threshold), f64::NEG_INFINITY);
        }
        let probs = scaled.softmax(-1, Kind::Float);
        if self.top_p >= 1.0 {
            return probs;
        }
        let (sorted, order) = probs.sort(-1, true);
        let before = sorted.cumsum(-1, Kind::Float) - &sorted; // mass strictly above each token
                                                               // The most likely token is always kept (no mass lies above it), however small top_p is: a p
                                                               // below f32's smallest value would otherwise keep nothing and renormalise 0 / 0.
        let keep_sorted = before.lt(self.top_p).logical_or(&before.le(0.0));
        let keep = keep_sorted.zeros_like().scatter(-1, &order, &keep_sorted);
        let kept = probs * keep.to_kind(Kind::Float);
        let total = kept.sum_dim_intlist(&[-1i64][..], true, Kind::Float);
        kept / total
    }
}

pub struct Sampler {
    pub sampling: Sampling,
    rng: StdRng,
}

impl Sampler {
    pub fn new(sampling: Sampling) -> Self {
        Self {
            rng: StdRng::seed_from_u64(sampling.seed),
            sampling,
        }
    }

    /// One token from logits `[vocab]`.
    pub fn sample(&mut self, logits: &Tensor) -> Result<i64> {
        if self.sampling.is_greedy() {
            return time_split::mark(
                Step::Sampling,
                || 0,
                || Ok(logits.f_argmax(-1, false)?.f_int64_value(&[])?),
            );
        }
        let probs = self.sampling.probabilities(logits);
        self.sample_from(&probs)
    }

    /// One token from probabilities `[vocab]` (not necessarily normalised) by inverse CDF with this
    /// sampler's seeded generator. A failed copy to the host is an error, never a default token.
    pub fn sample_from(&mut self, probs: &Tensor) -> Result<i64> {
        time_split::mark(Step::Sampling, || 0, || self.draw_from(probs))
    }

    fn draw_from(&mut self, probs: &Tensor) -> Result<i64> {
        let probs: Vec<f64> = Vec::<f64>::try_from(
            probs
                .f_to_kind(Kind::Double)?
                .f_to_device(tch::Device::Cpu)?,
        )?;
        let total: f64 = probs.iter().sum();
        if !(total.is_finite() && total > 0.0) {
            return Err(ModelError::tensor(
                "sampling probabilities",
                format!("their sum is {total}, not a positive finite number"),
            ));
        }
        Ok(inverse_cdf(&probs, self.rng.random::<f64>() * total))
    }

    /// A uniform draw in [0, 1) from the same generator (rejection sampling uses it).
    pub fn uniform(&mut self) -> f64 {
        self.rng.random::<f64>()
    }
}

/// Inverse-CDF sampling: the first token whose cumulative probability exceeds `u` (a draw in
/// `[0, sum(p))`), or the last token of positive probability when rounding leaves `u` at the total.
/// The one implementation for drafting, verification's bonus token and the first token.
pub fn inverse_cdf(p: &[f64], u: f64) -> i64 {
    let mut remaining = u;
    let mut last = 0;
    for (i, &pi) in p.iter().enumerate() {
        if pi > 0.0 {
            last = i;
            remaining -= pi;
            if remaining < 0.0 {
                return i as i64;
            }
        }
    }
    last as i64
}
