//! Attention's two products over a long context, per grouped row count, in every form this CPU runs:
//! the scores ([`KeyScores`]) and the weighted sum of the values ([`WeightedSum`]) of one key head's
//! grouped rows (its query heads times the pass's rows: 3 for a SmolLM2 decode step, 6 for a
//! verification of one draft, 12 for one of three) over 4096 keys of width 64, on one thread. Rounds
//! interleave every form and row count, and the summary gives each one's median time over the rounds,
//! its time per row, and what it costs against the form's 16-row product per row. A row count that costs
//! far more per row than a wider one shows a body the compiler did not vectorise (AVX2's 8-lane scores
//! once came out scalar, and a one-row decode step over 4096 keys took longer than a 4-row
//! verification).
//!
//! Each product is timed twice: on one key head the core holds in its caches, as the bodies' own
//! rate, and "from memory", each call on the next of a pool of key heads (and value heads) larger than
//! any last-level cache, as a pass over a long context meets its keys and values. The difference is
//! what reading them costs beyond the arithmetic: about the read time itself where the body waits for
//! its reads, less where it hides them behind its products.
//!
//! ```sh
//! cargo bench -p sharpdraft-kernel --bench attention -- [ROUNDS] [KEYS]
//! cargo bench --profile dev -p sharpdraft-kernel --bench attention   # as `make run` builds it
//! ```
//!
//! The two profiles can compile a body differently: AVX2's 16-lane scores, left to the compiler, ran
//! well in the dev profile and 3 to 5 times slower a row in the release one
//! (`experiments/results/kernel-attention-avx2-ab`).

use sharpdraft_kernel::key_scores::KeyScores;
use sharpdraft_kernel::weighted_sum::WeightedSum;
use sharpdraft_kernel::KernelForm;
use std::time::Instant;

const WIDTH: usize = 64;
const ROW_COUNTS: [usize; 7] = [1, 3, 6, 8, 9, 12, 16];
/// The products timed, in the order of `times`' last index.
const PRODUCTS: [&str; 4] = [
    "scores",
    "weighted sum",
    "scores from memory",
    "weighted sum from memory",
];

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Microseconds of one call of `work`, the best of a few (one call is tens to hundreds of us).
fn time_us(mut work: impl FnMut()) -> f64 {
    (0..5)
        .map(|_| {
            let started = Instant::now();
            work();
            started.elapsed().as_secs_f64() * 1e6
        })
        .fold(f64::INFINITY, f64::min)
}

/// Key heads (and as many value heads) in the "from memory" pool: 48 of 1 MiB each way at 4096 keys,
/// 96 MiB in all, three times the largest last-level cache of the machines here.
const POOL: usize = 48;

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let rounds = args.first().copied().unwrap_or(9);
    let keys = args.get(1).copied().unwrap_or(4096);
    let forms: Vec<KernelForm> = [KernelForm::Avx512, KernelForm::Avx2, KernelForm::Neon]
        .into_iter()
        .filter(|f| f.available())
        .collect();
    // Values in [-0.5, 0.5): no denormals, no overflow.
    let fill = |n: usize, seed: usize| -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 7919 + seed) % 1000) as f32 * 1e-3 - 0.5)
            .collect()
    };
    let key_rows = fill(keys * WIDTH, 1);
    let value_rows = fill(keys * WIDTH, 2);
    let key_pool: Vec<Vec<f32>> = (0..POOL).map(|h| fill(keys * WIDTH, 10 + h)).collect();
    let value_pool: Vec<Vec<f32>> = (0..POOL).map(|h| fill(keys * WIDTH, 100 + h)).collect();
    // The pool's next head, round after round: each was last read POOL - 1 heads ago.
    let mut next_head = 0usize;
    let mut pool_head = move || {
        next_head = (next_head + 1) % POOL;
        next_head
    };
    // times[form][row count][product], one per round: PRODUCTS' order.
    let mut times = vec![vec![[const { Vec::new() }; 4]; ROW_COUNTS.len()]; forms.len()];
    for round in 0..rounds {
        for (f, &form) in forms.iter().enumerate() {
            // Alternate the order of the row counts from round to round.
            let mut order: Vec<usize> = (0..ROW_COUNTS.len()).collect();
            if (round + f) % 2 == 1 {
                order.reverse();
            }
            for c in order {
                let rows = ROW_COUNTS[c];
                let queries = fill(rows * WIDTH, 3);
                let weights = fill(rows * keys, 4);
                let scores = KeyScores {
                    queries: &queries,
                    keys: &key_rows,
                    rows,
                    key_count: keys,
                    width: WIDTH,
                };
                let mut out = vec![0f32; rows * keys];
                times[f][c][0].push(time_us(|| {
                    scores.write_to(form, 0..keys, &mut out).expect("scores");
                }));
                let sum = WeightedSum {
                    weights: &weights,
                    values: &value_rows,
                    rows,
                    keys,
                    width: WIDTH,
                };
                let mut acc = vec![0f32; rows * WIDTH];
                times[f][c][1].push(time_us(|| {
                    sum.add_to(form, 0..keys, &mut acc).expect("weighted sum");
                }));
                times[f][c][2].push(time_us(|| {
                    let scores = KeyScores {
                        keys: &key_pool[pool_head()],
                        ..scores
                    };
                    scores.write_to(form, 0..keys, &mut out).expect("scores");
                }));
                times[f][c][3].push(time_us(|| {
                    let sum = WeightedSum {
                        values: &value_pool[pool_head()],
                        ..sum
                    };
                    sum.add_to(form, 0..keys, &mut acc).expect("weighted sum");
                }));
            }
        }
    }
    print_table(&forms, &mut times, keys, rounds);
}

/// The medians of `times[form][row count][product]` as a markdown table, per row and against the
/// form's widest row count.
fn print_table(forms: &[KernelForm], times: &mut [Vec<[Vec<f64>; 4]>], keys: usize, rounds: usize) {
    println!(
        "one key head, {keys} keys of width {WIDTH}, 1 thread, {rounds} interleaved rounds; median us \
         of a product, us per row, and per row against the form's 16 rows"
    );
    println!("| form | product | rows | us | us per row | per row vs 16 rows |");
    println!("|---|---|---|---|---|---|");
    for (f, form) in forms.iter().enumerate() {
        for (p, product) in PRODUCTS.iter().enumerate() {
            let widest = median(&mut times[f][ROW_COUNTS.len() - 1][p].clone())
                / ROW_COUNTS[ROW_COUNTS.len() - 1] as f64;
            for (c, &rows) in ROW_COUNTS.iter().enumerate() {
                let us = median(&mut times[f][c][p]);
                let per_row = us / rows as f64;
                println!(
                    "| {} | {product} | {rows} | {us:.1} | {per_row:.1} | {:.2} |",
                    form.name(),
                    per_row / widest
                );
            }
        }
    }
}
