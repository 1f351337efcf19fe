//! EAGLE-3.1's training-time test loss: unrolled draft steps fed the head's own outputs.

use super::*;
use crate::training::{weighted_mean, Divergence};
use sharpdraft_model::LogitRows;
use tch::{Kind, Tensor};

impl Eagle3Head {
    /// EAGLE-3's training-time test (docs/drafters.md §2.4) on one window, as a differentiable scalar.
    ///
    /// `embeddings` `[T, H]` (the target's embedding of `tokens`), `features` `[T, 3 Ht]` (the target's taps
    /// at the same rows), `targets`: per target row r, the target's distribution over the draft vocabulary
    /// for token r + 1 as `(draft ids [T, K], probabilities [T, K])` (zero probability = unused slot).
    ///
    /// Step 0 feeds pairs i = (fc(h_i), e(x_{i+1})) at position i. Step j > 0 feeds, for the same i, the
    /// draft's own step j - 1 output with e(x_{i+1+j}) at position i + j: exactly what depth j of a draft
    /// tree sees. Its query attends to step 0's keys of pairs 0..=i (causal) and to its own keys of steps
    /// 1..=j (the diagonal), as a tree node attends to the stable context and its ancestors. Step j's loss
    /// is `divergence` against the target at row i + 1 + j (rows weighted by `row_weights` `[T]`, when
    /// given), and the steps are weighted `decay^j`.
    #[allow(clippy::too_many_arguments)]
    pub fn ttt_loss(
        &self,
        embeddings: &Tensor,
        features: &Tensor,
        targets: (&Tensor, &Tensor),
        steps: usize,
        decay: f64,
        divergence: Divergence,
        row_weights: Option<&Tensor>,
    ) -> Tensor {
        let t = embeddings.size()[0];
        let device = embeddings.device();
        let pairs = t - 1;
        let mut hidden = self.fuse(&features.narrow(0, 0, pairs));
        let (mut keys, mut values): (Vec<Tensor>, Vec<Tensor>) = (Vec::new(), Vec::new());
        let mut total = Tensor::zeros([], (Kind::Float, device));
        let mut weight_sum = 0.0;
        for j in 0..steps.min(pairs as usize - 1) as i64 {
            let n = pairs - j;
            let hidden_j = hidden.narrow(0, 0, n);
            let emb = embeddings.narrow(0, 1 + j, n);
            let positions = Tensor::arange_start(j, j + n, (Kind::Int64, device));
            let (residual, mut q, k, v) = self.project(&emb, &hidden_j, &positions);
            if !self.query_scaling.is_off() {
                // Row r of step j sees the r + 1 causal pairs and its j earlier steps.
                let counts: Vec<i64> = (0..n).map(|r| r + 1 + j).collect();
                q = self
                    .query_scaling
                    .scaled(&q, 0, &counts)
                    .expect("one row count per query row");
            }
            keys.push(k);
            values.push(v);
            // [causal over step 0 | identity for each later step], every block cut to the n live pairs.
            let rows = Tensor::arange(n, (Kind::Int64, device));
            let causal = rows.unsqueeze(1).ge_tensor(&rows.unsqueeze(0));
            let eye = rows.unsqueeze(1).eq_tensor(&rows.unsqueeze(0));
            let mut blocks = vec![causal];
            blocks.extend((1..=j).map(|_| eye.shallow_clone()));
            let mask = Tensor::cat(&blocks, 1);
            let all_keys = Tensor::cat(
                &keys.iter().map(|k| k.narrow(1, 0, n)).collect::<Vec<_>>(),
                1,
            );
            let all_values = Tensor::cat(
                &values.iter().map(|v| v.narrow(1, 0, n)).collect::<Vec<_>>(),
                1,
            );
            let (next_hidden, log_q) = self.finish(
                residual,
                &q,
                &all_keys,
                &all_values,
                Some(&mask),
                LogitRows::All,
            ); // log_q [n, dv]
            let (ids, probs) = (targets.0.narrow(0, 1 + j, n), targets.1.narrow(0, 1 + j, n));
            let losses = divergence.rows(&log_q, &ids, &probs);
            let step_loss = match row_weights {
                Some(w) => weighted_mean(&losses, &w.narrow(0, 1 + j, n)),
                None => losses.mean(Kind::Float),
            };
            let w = decay.powi(j as i32);
            total = total + step_loss * w;
            weight_sum += w;
            hidden = next_hidden;
        }
        total / weight_sum.max(1e-9)
    }
}
