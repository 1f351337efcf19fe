//! Attention of queries over cached keys and values, shared by the target and the drafters: libtorch's
//! fused attention for many rows, grouped products for the few rows of a decode step, a verification or
//! a drafter's block, and those products split over the keys across the kernel's threads when a
//! few-row pass meets a long context.

use crate::cpu::few_rows;
use crate::mask::{RowKeys, Visibility};
use crate::time_split::{self, Step};
use std::sync::{Arc, Mutex};
use tch::{Device, Kind, Tensor};

/// Rows up to which grouped-query attention runs as grouped products (a decode step, a verification, a
/// drafter's block): libtorch's attention with a mask repeats every key and value for each query head
/// of its group first, which over a long context costs more than the attention itself (`bench rows
/// --context 4096`).
const GROUPED_ROWS: i64 = 16;

/// Keys from which a few-row pass on the kernel takes its attention onto the kernel's threads (its own
/// products, or libtorch's split over the keys where those do not apply). Inside such a pass libtorch
/// runs single-threaded (`cpu/few_rows.rs`), so otherwise each layer's attention runs on one core while
/// the others wait; below this many keys the parts' hand-offs and the extra operations cost about what
/// they save (`bench rows --context 512`: within the noise).
const SPLIT_KEYS: i64 = 1024;

thread_local! {
    /// Inside [`row_by_row`] on this thread.
    static ROW_BY_ROW: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `pass` with every row of its attention computed alone, over the keys that row sees, as a
/// one-row pass over the same keys computes it: libtorch's products round differently for different
/// row counts (about 1e-6), which a model run as stored turns into different 8-bit rows for the next
/// product and so into different logits (tenths of a logit on SmolLM2-135M), so a verification would
/// not reproduce the decode steps it stands for (`weight_blocks`).
pub fn row_by_row<T>(pass: impl FnOnce() -> T) -> T {
    few_rows::with_setting(&ROW_BY_ROW, true, pass)
}

/// [`attend_unmarked`] one row at a time: row `t` of `q` `[H, T, D]` over the keys and values it sees
/// (a prefix of `[Hkv, L, D]` as a view, as a decode step's cache hands them; a tree row's columns
/// gathered), unmasked, as a one-row pass at that position computes it. `[T, H * D]`.
fn attend_row_by_row(
    q: &Tensor,
    keys: &Tensor,
    values: &Tensor,
    visible: Option<&Visibility>,
    softmax_scale: f64,
) -> Tensor {
    let (_, rows, _) = q.size3().expect("queries are [H, T, D]");
    let out: Vec<Tensor> = (0..rows)
        .map(|t| {
            let q_t = q.narrow(1, t, 1);
            let (k, v) = match visible.map(|v| &v.row_keys()[t as usize]) {
                None => (keys.shallow_clone(), values.shallow_clone()),
                Some(RowKeys::First(n)) => (keys.narrow(1, 0, *n), values.narrow(1, 0, *n)),
                Some(RowKeys::Columns(columns)) => (
                    keys.index_select(1, columns),
                    values.index_select(1, columns),
                ),
            };
            attend_unmarked(&q_t, &k, &v, None, softmax_scale)
        })
        .collect();
    Tensor::cat(&out, 0)
}

/// Grouped-query attention of queries `[H, T, D]` over keys and values `[Hkv, L, D]` with an optional
/// `[T, L]` visibility mask; returns `[T, H * D]`. A pass of several layers builds its [`Visibility`]
/// once and calls [`attend_visible`].
pub fn attend(
    q: &Tensor,
    keys: &Tensor,
    values: &Tensor,
    visible: Option<&Tensor>,
    softmax_scale: f64,
) -> Tensor {
    let visibility = visible.map(|mask| Visibility::new(mask.shallow_clone()));
    attend_visible(q, keys, values, visibility.as_ref(), softmax_scale)
}

/// [`attend`] under a pass's [`Visibility`], whose scores' bias is built once for all its layers.
pub fn attend_visible(
    q: &Tensor,
    keys: &Tensor,
    values: &Tensor,
    visible: Option<&Visibility>,
    softmax_scale: f64,
) -> Tensor {
    time_split::mark(
        Step::Attention,
        || 0,
        || attend_unmarked(q, keys, values, visible, softmax_scale),
    )
}

/// [`attend_visible`] without its time-split mark.
fn attend_unmarked(
    q: &Tensor,
    keys: &Tensor,
    values: &Tensor,
    visible: Option<&Visibility>,
    softmax_scale: f64,
) -> Tensor {
    let (heads, rows, head_dim) = q.size3().expect("queries are [H, T, D]");
    let (kv_heads, length) = (keys.size()[0], keys.size()[1]);
    if rows > 1 && !q.requires_grad() && ROW_BY_ROW.with(|on| on.get()) {
        return attend_row_by_row(q, keys, values, visible, softmax_scale);
    }
    if rows <= GROUPED_ROWS && heads != kv_heads && !q.requires_grad() {
        // Inside a kernel pass over a long context: the kernel's products, else libtorch's split
        // over the keys across the kernel's threads.
        if let Some(threads) = few_rows::kernel_threads().filter(|_| length >= SPLIT_KEYS) {
            let on_kernel = attend_on_kernel(q, keys, values, visible, softmax_scale, threads)
                .or_else(|| {
                    let splits = threads > 1 && q.device() == Device::Cpu;
                    splits
                        .then(|| attend_split(q, keys, values, visible, softmax_scale, threads))
                        .flatten()
                });
            if let Some(out) = on_kernel {
                return out;
            }
        }
        return attend_grouped(q, keys, values, visible, softmax_scale);
    }
    let out = Tensor::scaled_dot_product_attention(
        &q.unsqueeze(0),
        &keys.unsqueeze(0),
        &values.unsqueeze(0),
        visible.map(|v| v.mask().view([1, 1, rows, -1])),
        0.0,
        false,
        softmax_scale,
        true,
    ); // [1, H, T, D]
    out.squeeze_dim(0)
        .permute([1, 0, 2])
        .reshape([rows, heads * head_dim])
}

/// [`attend`] for grouped-query heads without repeating keys and values: the `G = H / Hkv` query heads
/// of a key head are its rows. `q` `[H, T, D]`, `keys`/`values` `[Hkv, L, D]`, `visible` over `[T, L]`.
fn attend_grouped(
    q: &Tensor,
    keys: &Tensor,
    values: &Tensor,
    visible: Option<&Visibility>,
    softmax_scale: f64,
) -> Tensor {
    let (heads, rows, head_dim) = q.size3().expect("queries are [H, T, D]");
    let kv_heads = keys.size()[0];
    let grouped = q.contiguous().view([kv_heads, -1, head_dim]); // [Hkv, G T, D]
    let scores = masked_scores(&grouped, keys, visible, rows, softmax_scale); // [Hkv, G T, L]
    scores
        .softmax(-1, Kind::Float)
        .to_kind(values.kind())
        .matmul(values) // [Hkv, G T, D]
        .view([heads, rows, head_dim])
        .permute([1, 0, 2])
        .reshape([rows, heads * head_dim])
}

/// Scaled f32 scores `[Hkv, G T, L]` of grouped queries `[Hkv, G T, D]` over `keys` `[Hkv, L, D]`, with
/// the keys `visible` hides at minus infinity.
fn masked_scores(
    grouped: &Tensor,
    keys: &Tensor,
    visible: Option<&Visibility>,
    rows: i64,
    softmax_scale: f64,
) -> Tensor {
    let scores = grouped.matmul(&keys.transpose(1, 2)).to_kind(Kind::Float) * softmax_scale;
    mask_scores(scores, visible, rows)
}

/// Scores `[Hkv, G T, L]` (fresh: changed in place) with the keys `visible` hides at minus infinity
/// (its bias, built once a pass, added over the query heads; [`Visibility::hide`]).
fn mask_scores(scores: Tensor, visible: Option<&Visibility>, rows: i64) -> Tensor {
    match visible {
        Some(visible) => visible.hide(scores, rows),
        None => scores,
    }
}

/// [`attend_grouped`] inside a kernel pass, its two products on the kernel: the scores with the lanes
/// across a key head's grouped rows (`few_rows::key_scores`), the probabilities times the values as a
/// weighted sum of value rows (`few_rows::weighted_sum`), so that keys and values are each read once,
/// over the kernel's threads. libtorch's GEMM packs (copies) the whole key or value matrix before
/// multiplying a few rows by it, which over a long context took most of a pass; scores as one dot
/// product per key and row cost a 4-row pass 5x a one-row pass's attention. Between them the kernel's
/// softmax where this CPU has its body, else libtorch's ([`softmax_over_threads`]). A row's result
/// does not depend on the rows beside it. f32 only (`None` otherwise, or where a tensor is not laid
/// out for the kernel).
fn attend_on_kernel(
    q: &Tensor,
    keys: &Tensor,
    values: &Tensor,
    visible: Option<&Visibility>,
    softmax_scale: f64,
    threads: usize,
) -> Option<Tensor> {
    if [q, keys, values].iter().any(|t| t.kind() != Kind::Float) {
        return None;
    }
    let (heads, rows, head_dim) = q.size3().ok()?;
    let kv_heads = keys.size()[0];
    let grouped_rows = heads / kv_heads * rows;
    let grouped = q.contiguous().view([kv_heads, grouped_rows, head_dim]);
    // Scaled queries: a multiply of [Hkv, G T, D] rather than of the scores.
    let scores = few_rows::key_scores(&(grouped * softmax_scale), keys, threads)?; // [Hkv, G T, L]
    let probs = softmax_over_threads(mask_scores(scores, visible, rows), threads)?;
    Some(
        few_rows::weighted_sum(&probs, values, threads)? // [Hkv, G T, D]
            .view([heads, rows, head_dim])
            .permute([1, 0, 2])
            .reshape([rows, heads * head_dim]),
    )
}

/// The softmax over the last dimension of fresh f32 scores `[Hkv, G T, L]`, its rows split over the
/// kernel's threads: the kernel's own softmax in place where this CPU has its body
/// (`few_rows::softmax_in_place`), else libtorch's ([`libtorch_softmax_over_threads`]). `None` when a
/// part failed (the caller then attends another way).
fn softmax_over_threads(scores: Tensor, threads: usize) -> Option<Tensor> {
    time_split::mark(
        Step::AttentionSoftmax,
        || 0,
        || {
            let scores = scores.contiguous();
            match few_rows::softmax_in_place(&scores, threads) {
                Some(true) => Some(scores),
                // Some rows may be softmaxed and others not: nothing to finish from.
                Some(false) => None,
                None => libtorch_softmax_over_threads(&scores, threads),
            }
        },
    )
}

/// libtorch's softmax over the last dimension of f32 scores `[Hkv, G T, L]`, its rows split over the
/// kernel's threads, into a contiguous tensor of the same shape. Inside a kernel pass libtorch runs on
/// one thread, so one core took the whole softmax while the others waited: about a tenth of a 4-row
/// verification over 4096 keys (`perf`, before). `None` when a part failed.
fn libtorch_softmax_over_threads(scores: &Tensor, threads: usize) -> Option<Tensor> {
    let (kv_heads, grouped_rows, length) = scores.size3().ok()?;
    let rows = kv_heads * grouped_rows;
    let flat = scores.contiguous().view([rows, length]);
    let probs = Tensor::empty([rows, length], (Kind::Float, scores.device()));
    let parts = (threads as i64).clamp(1, rows.max(1));
    let chunk = (rows + parts - 1) / parts;
    let failed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let jobs: Vec<sharpdraft_kernel::workers::Part> = (0..parts)
        .map(|p| (p * chunk, chunk.min(rows - p * chunk)))
        .filter(|&(_, len)| len > 0)
        .map(|(start, len)| {
            // Row slices of contiguous `[rows, L]` tensors: each part writes only its own rows.
            let (input, output) = (flat.narrow(0, start, len), probs.narrow(0, start, len));
            let failed = Arc::clone(&failed);
            Box::new(move || {
                let _guard = tch::no_grad_guard();
                if input.f_softmax_int_out(&output, -1, Kind::Float).is_err() {
                    failed.store(true, std::sync::atomic::Ordering::Relaxed);
                }
            }) as sharpdraft_kernel::workers::Part
        })
        .collect();
    let ran = sharpdraft_kernel::workers::run_anywhere(jobs);
    (ran && !failed.load(std::sync::atomic::Ordering::Relaxed))
        .then(|| probs.view([kv_heads, grouped_rows, length]))
}

/// One part of a split attention: over its keys, the scores' maximum `m` `[Hkv, G T, 1]`, the sum of
/// `exp(score - m)` `[Hkv, G T, 1]` and the values weighted by those exponentials `[Hkv, G T, D]` (f32).
struct PartialAttention {
    max: Tensor,
    sum: Tensor,
    weighted: Tensor,
}

impl PartialAttention {
    fn over(
        grouped: &Tensor,
        keys: &Tensor,
        values: &Tensor,
        visible: Option<&Visibility>,
        rows: i64,
        softmax_scale: f64,
    ) -> Self {
        let scores = masked_scores(grouped, keys, visible, rows, softmax_scale);
        // A row that sees none of these keys has maximum -inf; the finite floor keeps its
        // exponentials at 0 rather than NaN, and its weight in the merge at 0.
        let max = scores
            .amax([-1i64].as_slice(), true)
            .clamp_min(f32::MIN as f64);
        let exponentials = (scores - &max).exp();
        let sum = exponentials.sum_dim_intlist([-1i64].as_slice(), true, Kind::Float);
        let weighted = exponentials
            .to_kind(values.kind())
            .matmul(values)
            .to_kind(Kind::Float);
        Self { max, sum, weighted }
    }
}

/// [`attend_grouped`] split along the keys into one part per kernel thread, each part's softmax kept
/// unnormalised and the parts merged by their maxima (as flash-decoding does); `None` when a part
/// failed.
fn attend_split(
    q: &Tensor,
    keys: &Tensor,
    values: &Tensor,
    visible: Option<&Visibility>,
    softmax_scale: f64,
    threads: usize,
) -> Option<Tensor> {
    let (heads, rows, head_dim) = q.size3().expect("queries are [H, T, D]");
    let (kv_heads, length) = (keys.size()[0], keys.size()[1]);
    let grouped = q.contiguous().view([kv_heads, -1, head_dim]);
    let parts = threads.min((length / (SPLIT_KEYS / 2)) as usize).max(1) as i64;
    let chunk = (length + parts - 1) / parts;
    let results: Vec<Arc<Mutex<Option<PartialAttention>>>> =
        (0..parts).map(|_| Arc::new(Mutex::new(None))).collect();
    let job = |p: i64| -> sharpdraft_kernel::workers::Part {
        let (start, len) = (p * chunk, chunk.min(length - p * chunk));
        let grouped = grouped.shallow_clone();
        let keys = keys.narrow(1, start, len);
        let values = values.narrow(1, start, len);
        let visible = visible.map(|v| v.keys(start, len));
        let slot = Arc::clone(&results[p as usize]);
        Box::new(move || {
            let _guard = tch::no_grad_guard();
            let part = PartialAttention::over(
                &grouped,
                &keys,
                &values,
                visible.as_ref(),
                rows,
                softmax_scale,
            );
            *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(part);
        })
    };
    if !sharpdraft_kernel::workers::run_anywhere((0..parts).map(job).collect()) {
        return None;
    }
    let parts: Vec<PartialAttention> = results
        .iter()
        .map(|slot| slot.lock().unwrap_or_else(|e| e.into_inner()).take())
        .collect::<Option<_>>()?;
    let max = Tensor::stack(&parts.iter().map(|p| &p.max).collect::<Vec<_>>(), 0)
        .amax([0i64].as_slice(), false); // [Hkv, G T, 1]
    let mut sum = Tensor::zeros_like(&max);
    let mut weighted = Tensor::zeros(
        [kv_heads, heads / kv_heads * rows, head_dim],
        (Kind::Float, q.device()),
    );
    for part in &parts {
        let scale = (&part.max - &max).exp();
        sum += &part.sum * &scale;
        weighted += &part.weighted * &scale;
    }
    Some(
        (weighted / sum)
            .to_kind(values.kind())
            .view([heads, rows, head_dim])
            .permute([1, 0, 2])
            .reshape([rows, heads * head_dim]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys `[Hkv, L, D]` and a mask under which row 0 sees only the last 16 keys (so the first part
    /// of a split sees none for it) and the other rows see every key but a stripe.
    fn inputs(
        kv_heads: i64,
        heads: i64,
        rows: i64,
        length: i64,
    ) -> (Tensor, Tensor, Tensor, Tensor) {
        let options = (Kind::Float, Device::Cpu);
        let q = Tensor::randn([heads, rows, 32], options) * 3.0;
        let keys = Tensor::randn([kv_heads, length, 32], options);
        let values = Tensor::randn([kv_heads, length, 32], options);
        let visible = Tensor::ones([rows, length], (Kind::Bool, Device::Cpu));
        let _ = visible.get(0).narrow(0, 0, length - 16).fill_(0);
        let _ = visible.narrow(1, 100, 50).fill_(0);
        (q, keys, values, visible)
    }

    /// Scores `[3, 7, 4100]` (parts of unequal sizes, and more threads than some splits need) whose
    /// last 100 keys are hidden.
    fn hidden_tail_scores() -> Tensor {
        tch::manual_seed(4);
        let scores = Tensor::randn([3, 7, 4100], (Kind::Float, Device::Cpu)) * 4.0;
        let _ = scores.narrow(2, 4000, 100).fill_(f64::NEG_INFINITY);
        scores
    }

    #[test]
    fn the_kernels_softmax_split_over_threads_is_within_1e_5_of_libtorchs_and_the_same_whatever_the_split(
    ) {
        let scores = hidden_tail_scores();
        let expected = scores.softmax(-1, Kind::Float);
        let one_thread = scores.copy();
        if few_rows::softmax_in_place(&one_thread, 1).is_none() {
            sharpdraft_testing::skip_cpu_form(
                sharpdraft_kernel::KernelForm::Avx2.available(),
                "this CPU has no softmax body (AVX2 + FMA)",
            );
            return;
        }
        for threads in [1, 2, 3, 5] {
            let kernel = scores.copy();
            assert_eq!(few_rows::softmax_in_place(&kernel, threads), Some(true));
            assert!(
                kernel.eq_tensor(&one_thread).all().int64_value(&[]) == 1,
                "{threads} threads: not the same bits as one"
            );
            let hidden = kernel.narrow(2, 4000, 100);
            assert_eq!(
                hidden.count_nonzero(None).int64_value(&[]),
                0,
                "hidden keys weigh 0"
            );
            let relative = ((&kernel - &expected).abs() / (expected.abs() + 1e-30))
                .max()
                .double_value(&[]);
            assert!(
                relative < 1e-5,
                "{threads} threads: relative difference {relative}"
            );
        }
    }

    #[test]
    fn a_few_row_pass_over_a_long_context_times_its_softmax_apart_from_the_rest_of_attention() {
        if sharpdraft_kernel::form::current() == sharpdraft_kernel::KernelForm::Libtorch {
            sharpdraft_testing::skip_cpu_form(
                sharpdraft_kernel::KernelForm::best() != sharpdraft_kernel::KernelForm::Libtorch,
                "this CPU has no form of the kernel",
            );
            return;
        }
        tch::manual_seed(9);
        let (q, keys, values, visible) = inputs(3, 9, 4, 2048);
        let visible = Visibility::new(visible);
        let (_, split) = time_split::record(Device::Cpu, || {
            few_rows::with_kernel(|| attend_visible(&q, &keys, &values, Some(&visible), 0.125))
        });
        let (attention, softmax) = (
            split.steps[&Step::Attention],
            split.steps[&Step::AttentionSoftmax],
        );
        assert_eq!((attention.calls, softmax.calls), (1, 1));
        assert!(softmax.seconds > 0.0 && attention.seconds > 0.0);
    }

    #[test]
    fn libtorchs_softmax_split_over_threads_is_its_softmax_in_one_piece_to_the_bit() {
        let scores = hidden_tail_scores();
        let expected = scores.softmax(-1, Kind::Float);
        for threads in [1, 2, 3, 5] {
            let split = libtorch_softmax_over_threads(&scores, threads).expect("every part ran");
            assert_eq!(split.size(), [3, 7, 4100]);
            assert!(
                split.eq_tensor(&expected).all().int64_value(&[]) == 1,
                "{threads} threads"
            );
        }
    }

    #[test]
    fn attention_split_over_the_keys_across_threads_equals_attention_in_one_piece() {
        tch::manual_seed(5);
        for (kv_heads, heads, rows, length, threads) in
            [(3, 9, 4, 4100, 2), (2, 12, 1, 1024, 2), (1, 4, 16, 3000, 3)]
        {
            let (q, keys, values, visible) = inputs(kv_heads, heads, rows, length);
            let visible = Visibility::new(visible);
            for mask in [None, Some(&visible)] {
                let split =
                    attend_split(&q, &keys, &values, mask, 0.125, threads).expect("every part ran");
                let whole = attend_grouped(&q, &keys, &values, mask, 0.125);
                let diff = (split - whole).abs().max().double_value(&[]);
                assert!(
                    diff < 1e-5,
                    "{heads}/{kv_heads} heads, {rows} rows, {length} keys, {threads} threads, \
                     mask {}: {diff}",
                    mask.is_some()
                );
            }
        }
    }

    #[test]
    fn bf16_attention_leaves_the_kernel_to_the_split_which_equals_attention_in_one_piece() {
        tch::manual_seed(7);
        let (q, keys, values, visible) = inputs(3, 9, 4, 2048);
        let visible = Visibility::new(visible);
        let (q, keys, values) = (
            q.to_kind(Kind::BFloat16),
            keys.to_kind(Kind::BFloat16),
            values.to_kind(Kind::BFloat16),
        );
        for mask in [None, Some(&visible)] {
            assert!(attend_on_kernel(&q, &keys, &values, mask, 0.125, 2).is_none());
            let split = attend_split(&q, &keys, &values, mask, 0.125, 2).expect("every part ran");
            let whole = attend_grouped(&q, &keys, &values, mask, 0.125);
            assert_eq!(split.kind(), Kind::BFloat16);
            let diff = (split.to_kind(Kind::Float) - whole.to_kind(Kind::Float))
                .abs()
                .max()
                .double_value(&[]);
            // Both round their output to bf16 (8 bits of mantissa) once.
            assert!(diff < 2e-2, "mask {}: {diff}", mask.is_some());
        }
    }

    #[test]
    fn attention_on_the_kernel_equals_attention_in_libtorch() {
        tch::manual_seed(6);
        for (kv_heads, heads, rows, length) in [
            (3, 9, 4, 4100),
            (3, 9, 1, 300),
            (2, 12, 4, 700),
            (1, 4, 16, 2000),
        ] {
            let (q, keys, values, visible) = inputs(kv_heads, heads, rows, length);
            let visible = Visibility::new(visible);
            for mask in [None, Some(&visible)] {
                let Some(kernel) = attend_on_kernel(&q, &keys, &values, mask, 0.125, 2) else {
                    sharpdraft_testing::skip_cpu_form(
                        sharpdraft_kernel::KernelForm::best()
                            != sharpdraft_kernel::KernelForm::Libtorch,
                        "this CPU has no form of the kernel",
                    );
                    return;
                };
                let libtorch = attend_grouped(&q, &keys, &values, mask, 0.125);
                let diff = (kernel - libtorch).abs().max().double_value(&[]);
                assert!(
                    diff < 1e-5,
                    "{heads}/{kv_heads} heads, {rows} rows, {length} keys, mask {}: {diff}",
                    mask.is_some()
                );
            }
        }
    }

    #[test]
    fn a_rows_attention_on_the_kernel_is_the_same_to_the_bit_alone_or_among_the_rows_of_a_verification(
    ) {
        tch::manual_seed(8);
        let options = (Kind::Float, Device::Cpu);
        let (q, keys, values) = (
            Tensor::randn([9, 4, 64], options),
            Tensor::randn([3, 4100, 64], options),
            Tensor::randn([3, 4100, 64], options),
        );
        // A chain's mask: row r sees the context and the rows up to itself.
        let visible = Tensor::ones([4, 4100], (Kind::Bool, Device::Cpu)).tril(4100 - 4);
        let together_visible = Visibility::new(visible.shallow_clone());
        let Some(together) =
            attend_on_kernel(&q, &keys, &values, Some(&together_visible), 0.125, 2)
        else {
            sharpdraft_testing::skip_cpu_form(
                sharpdraft_kernel::KernelForm::best() != sharpdraft_kernel::KernelForm::Libtorch,
                "this CPU has no form of the kernel",
            );
            return;
        };
        for row in 0..4 {
            let mask = Visibility::new(visible.narrow(0, row, 1));
            let alone =
                attend_on_kernel(&q.narrow(1, row, 1), &keys, &values, Some(&mask), 0.125, 2)
                    .expect("the kernel ran for four rows");
            let differing = together
                .narrow(0, row, 1)
                .ne_tensor(&alone)
                .sum(Kind::Int64)
                .int64_value(&[]);
            assert_eq!(differing, 0, "row {row}: {differing} outputs differ");
        }
    }
}
