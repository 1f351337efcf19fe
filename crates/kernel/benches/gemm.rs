//! This kernel against the gemm crate on the products a CPU decode makes: `x [rows, k] W^T` with `W`
//! larger than any cache (Qwen2.5-Coder-1.5B's LM head, 151936 x 1536 f32, 0.93 GB), 1 to 16 rows, one
//! thread each, paired and interleaved: every round times each row count with both, in an order that
//! alternates, and the summary gives the median time of each and the median and range of their ratio.
//!
//! ```sh
//! cargo bench -p sharpdraft-kernel --features compare-gemm -- [ROUNDS] [OUTPUTS]
//! ```

use sharpdraft_kernel::{product, KernelForm, Rows, Shape, Weights};
use std::time::Instant;

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let rounds = args.first().copied().unwrap_or(5);
    let outputs = args.get(1).copied().unwrap_or(151_936);
    let inputs = 1536;
    let form = KernelForm::best();
    let weight: Vec<f32> = (0..outputs * inputs)
        .map(|i| ((i * 7919) % 1000) as f32 * 1e-3 - 0.5)
        .collect();
    let row_counts = [1usize, 4, 5, 8, 12, 16];
    // times[row count][0 = this kernel, 1 = gemm], one per round
    let mut times = vec![[Vec::new(), Vec::new()]; row_counts.len()];
    for round in 0..rounds {
        for (c, &rows) in row_counts.iter().enumerate() {
            let shape = Shape {
                rows,
                inputs,
                outputs,
            };
            let x: Vec<f32> = (0..rows * inputs).map(|i| (i % 13) as f32 * 0.01).collect();
            let mut ours = vec![0.0f32; rows * outputs];
            let mut theirs = vec![0.0f32; rows * outputs];
            let mut run = |which: usize| {
                let started = Instant::now();
                if which == 0 {
                    product(form, Rows::F32(&x), Weights::F32(&weight), shape, &mut ours).unwrap();
                } else {
                    // dst [rows, outputs] and lhs [rows, inputs] row-major; rhs = W^T [inputs,
                    // outputs]: element (i, o) at o * inputs + i.
                    unsafe {
                        gemm::gemm(
                            rows,
                            outputs,
                            inputs,
                            theirs.as_mut_ptr(),
                            1,
                            outputs as isize,
                            false,
                            x.as_ptr(),
                            1,
                            inputs as isize,
                            weight.as_ptr(),
                            inputs as isize,
                            1,
                            0.0,
                            1.0,
                            false,
                            false,
                            false,
                            gemm::Parallelism::None,
                        )
                    };
                }
                times[c][which].push(started.elapsed().as_secs_f64() * 1e3);
            };
            let first = (round + c) % 2;
            run(first);
            run(1 - first);
            let worst = ours
                .iter()
                .zip(&theirs)
                .map(|(a, b)| (a - b).abs() / (1.0 + b.abs()))
                .fold(0.0f32, f32::max);
            assert!(
                worst < 1e-3,
                "{rows} rows: the two products differ by {worst}"
            );
        }
    }
    println!(
        "{outputs} x {inputs} f32 weights, one thread, {rounds} interleaved rounds; this kernel in its {} form, gemm 0.19 at its widest",
        form.name()
    );
    println!("| rows | this kernel (ms) | gemm (ms) | gemm / this kernel: median [min, max] |");
    println!("|---|---|---|---|");
    for (c, &rows) in row_counts.iter().enumerate() {
        let mut ratios: Vec<f64> = times[c][1]
            .iter()
            .zip(&times[c][0])
            .map(|(g, o)| g / o)
            .collect();
        let (low, high) = (
            ratios.iter().copied().fold(f64::INFINITY, f64::min),
            ratios.iter().copied().fold(0.0, f64::max),
        );
        let ratio = median(&mut ratios);
        let ours = median(&mut times[c][0].clone());
        let theirs = median(&mut times[c][1].clone());
        println!("| {rows} | {ours:.1} | {theirs:.1} | {ratio:.2} [{low:.2}, {high:.2}] |");
    }
}
