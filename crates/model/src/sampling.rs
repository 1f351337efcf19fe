//! Turning logits into tokens: greedy, or seeded sampling with temperature, top-k and top-p. The
//! filtered distribution is exposed on its own so that verification can use the very same one.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tch::{Kind, Tensor};

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
        let keep_sorted = before.lt(self.top_p);
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
    pub fn sample(&mut self, logits: &Tensor) -> i64 {
        if self.sampling.is_greedy() {
            return logits.argmax(-1, false).int64_value(&[]);
        }
        let probs = self.sampling.probabilities(logits);
        self.sample_from(&probs)
    }

    /// One token from probabilities `[vocab]` by inverse CDF with this sampler's seeded generator.
    pub fn sample_from(&mut self, probs: &Tensor) -> i64 {
        let probs = Vec::<f32>::try_from(probs.to_kind(Kind::Float).to_device(tch::Device::Cpu))
            .unwrap_or_default();
        let total: f64 = probs.iter().map(|&p| p as f64).sum();
        let mut u = self.rng.random::<f64>() * total;
        let mut last_positive = 0;
        for (i, &p) in probs.iter().enumerate() {
            if p > 0.0 {
                last_positive = i;
                u -= p as f64;
                if u < 0.0 {
                    return i as i64;
                }
            }
        }
        last_positive as i64
    }

    /// A uniform draw in [0, 1) from the same generator (rejection sampling uses it).
    pub fn uniform(&mut self) -> f64 {
        self.rng.random::<f64>()
    }
}
