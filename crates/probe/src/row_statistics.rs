//! Statistics of a group of query rows from their full logit rows (derivations/top-k-mass-scaling.md §5), on libtorch in f64.
//!
//! Input `logits` `[H, R, L]`: the softmax inputs `q.k / sqrt(d)` of R rows over L keys, `-inf` where a
//! key is invisible. One row is at most L values per head: the probe never holds an n x n matrix.

use tch::{Kind, Tensor};

/// Per-row statistics that do not depend on k, each `[H, R]` (n is `[R]`).
pub struct RowStatistics {
    pub n: Vec<f64>,
    pub entropy: Vec<f64>,
    pub lse: Vec<f64>,
    /// Attention on key 0 (the BOS / sink position).
    pub sink_share: Vec<f64>,
    pub per_k: Vec<TopKStatistics>,
}

/// Per-row statistics of one k, each flattened `[H, R]` (head-major).
pub struct TopKStatistics {
    pub k: i64,
    /// `M_k`, the softmax mass on the k largest logits.
    pub mass: Vec<f64>,
    /// Plain mean and variance of the logits outside the top k (`mu_hat`, `sigma_hat^2`).
    pub background_mean: Vec<f64>,
    pub background_var: Vec<f64>,
    /// `<l>_{R,p}`: attention-weighted mean of the top-k logits.
    pub top_mean: Vec<f64>,
    /// `<l>_{B,p}`: attention-weighted mean of the background logits.
    pub weighted_background_mean: Vec<f64>,
    /// `M_k` at each scale of the probe's s grid (`[S][H * R]`), for estimator (iii).
    pub mass_at_scale: Vec<Vec<f64>>,
}

fn to_vec(t: &Tensor) -> Vec<f64> {
    Vec::<f64>::try_from(
        t.to_kind(Kind::Double)
            .flatten(0, -1)
            .to_device(tch::Device::Cpu),
    )
    .expect("a f64 tensor")
}

/// Computes every statistic of the rows in `logits` for each k of `ks` (each below every row's n).
pub fn row_statistics(logits: &Tensor, ks: &[i64], scales: &[f64]) -> RowStatistics {
    let l = logits.to_kind(Kind::Double); // [H, R, L]
    let visible = l.isfinite();
    let n = visible.sum_dim_intlist(&[-1i64][..], false, Kind::Double); // [H, R]
    let zeroed = l.masked_fill(&visible.logical_not(), 0.0);
    let lse = l.logsumexp([-1], false); // [H, R]
    let p = (&l - lse.unsqueeze(-1)).exp(); // invisible keys: exp(-inf) = 0
    let mean_p = (&p * &zeroed).sum_dim_intlist(&[-1i64][..], false, Kind::Double); // E_p[l]
    let entropy = &lse - &mean_p;
    let sink = p.select(-1, 0);
    let sum = zeroed.sum_dim_intlist(&[-1i64][..], false, Kind::Double);
    let sum_sq = (&zeroed * &zeroed).sum_dim_intlist(&[-1i64][..], false, Kind::Double);
    // log Z(s) over all keys, shared by every k: the full rows are the expensive part.
    let lse_at_scale: Vec<Tensor> = scales
        .iter()
        .map(|&s| (&l * s).logsumexp([-1], false))
        .collect();
    let per_k = ks
        .iter()
        .map(|&k| {
            let (top, top_index) = l.topk(k, -1, true, true); // [H, R, k]
            let lse_top = top.logsumexp([-1], false);
            let mass = (&lse_top - &lse).exp();
            let rest = &n - k as f64;
            let background_mean =
                (&sum - top.sum_dim_intlist(&[-1i64][..], false, Kind::Double)) / &rest;
            let background_var = (&sum_sq
                - (&top * &top).sum_dim_intlist(&[-1i64][..], false, Kind::Double))
                / &rest
                - &background_mean * &background_mean;
            let top_weights = (&top - lse_top.unsqueeze(-1)).exp();
            let top_mean = (&top_weights * &top).sum_dim_intlist(&[-1i64][..], false, Kind::Double);
            // <l>_B from the background's own softmax (the top k masked out), not from
            // E_p[l] = M <l>_R + (1 - M) <l>_B: that divides by 1 - M, which is 0 in f64 for a head
            // that puts all its mass on k keys.
            let background = l.scatter_value(-1, &top_index, f64::NEG_INFINITY); // [H, R, L]
            let background_weights =
                (&background - background.logsumexp([-1], false).unsqueeze(-1)).exp();
            let weighted_background_mean =
                (&background_weights * &zeroed).sum_dim_intlist(&[-1i64][..], false, Kind::Double);
            let mass_at_scale = scales
                .iter()
                .zip(&lse_at_scale)
                .map(|(&s, lse_s)| to_vec(&((&top * s).logsumexp([-1], false) - lse_s).exp()))
                .collect();
            TopKStatistics {
                k,
                mass: to_vec(&mass),
                background_mean: to_vec(&background_mean),
                background_var: to_vec(&background_var),
                top_mean: to_vec(&top_mean),
                weighted_background_mean: to_vec(&weighted_background_mean),
                mass_at_scale,
            }
        })
        .collect();
    RowStatistics {
        n: to_vec(&n.select(0, 0)),
        entropy: to_vec(&entropy),
        lse: to_vec(&lse),
        sink_share: to_vec(&sink),
        per_k,
    }
}
