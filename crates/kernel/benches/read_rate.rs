//! Where the bf16 read rate goes: the rate at which the products consume weight bytes, f32 against
//! bf16 (widened as read, and AVX512-BF16 pair products where the CPU has them), from weights that sit
//! in the core's L2 cache (one thread) and from weights far larger than every cache (one thread, and
//! split by columns over two as a pass splits them), in every form this CPU runs, interleaved over
//! rounds. If bf16 were as slow from L2 as from memory while f32 from L2 is far faster, the bf16
//! products would be bound by their arithmetic, not by the reads.
//!
//! ```sh
//! cargo bench -p sharpdraft-kernel --bench read_rate -- [ROUNDS]
//! ```

use sharpdraft_kernel::products::{checked_operands, multiply, pair_products_available};
use sharpdraft_kernel::{product, workers, KernelForm, Rows, Shape, Weights};
use std::time::Instant;

const INPUTS: usize = 1536;

#[derive(Clone, Copy, PartialEq)]
enum Element {
    F32,
    Bf16Widened,
    Bf16Pairs,
}

impl Element {
    fn name(self) -> &'static str {
        match self {
            Element::F32 => "f32",
            Element::Bf16Widened => "bf16 widened",
            Element::Bf16Pairs => "bf16 pairs",
        }
    }
    fn bytes(self) -> usize {
        if self == Element::F32 {
            4
        } else {
            2
        }
    }
}

/// `out = x W^T` with its columns split over `threads` threads (the spinning workers, as a pass).
fn split_product(
    threads: usize,
    form: KernelForm,
    x: Rows<'_>,
    w: Weights<'_>,
    shape: Shape,
    out: &mut [f32],
) {
    if threads == 1 {
        return product(form, x, w, shape, out).unwrap();
    }
    let operands = checked_operands(form, x, w, shape, out).unwrap();
    let per = shape.outputs.div_ceil(threads);
    let parts = (0..threads)
        .map(|t| {
            let columns = (t * per).min(shape.outputs)..((t + 1) * per).min(shape.outputs);
            // SAFETY: the slices hold `shape` and outlive `run`, which waits for every part; each part
            // writes its own columns.
            Box::new(move || unsafe { multiply(operands, shape, columns) }) as workers::Part
        })
        .collect();
    assert_eq!(
        workers::run(parts),
        Some(true),
        "the workers are free and no part panics"
    );
}

/// GB/s of weights one product over `outputs` rows of weights reads on `threads` threads, the median
/// of `repeats`.
fn rate(
    form: KernelForm,
    element: Element,
    rows: usize,
    outputs: usize,
    threads: usize,
    repeats: usize,
) -> f64 {
    let shape = Shape {
        rows,
        inputs: INPUTS,
        outputs,
    };
    let x: Vec<f32> = (0..rows * INPUTS).map(|i| (i % 7) as f32 * 0.1).collect();
    let x_bf16: Vec<u16> = x.iter().map(|v| (v.to_bits() >> 16) as u16).collect();
    let w32: Vec<f32> = if element == Element::F32 {
        (0..outputs * INPUTS)
            .map(|i| (i % 11) as f32 * 0.01)
            .collect()
    } else {
        Vec::new()
    };
    let w16: Vec<u16> = if element == Element::F32 {
        Vec::new()
    } else {
        (0..outputs * INPUTS)
            .map(|i| 0x3c00 + (i % 11) as u16)
            .collect()
    };
    let mut out = vec![0.0; rows * outputs];
    let mut seconds: Vec<f64> = (0..repeats + 1)
        .map(|_| {
            let (rows_in, weights) = match element {
                Element::F32 => (Rows::F32(&x), Weights::F32(&w32)),
                Element::Bf16Widened => (Rows::F32(&x), Weights::Bf16(&w16)),
                Element::Bf16Pairs => (Rows::Bf16Pairs(&x_bf16), Weights::Bf16(&w16)),
            };
            let started = Instant::now();
            split_product(threads, form, rows_in, weights, shape, &mut out);
            started.elapsed().as_secs_f64()
        })
        .skip(1) // the first brings the weights into cache (or not)
        .collect();
    seconds.sort_by(f64::total_cmp);
    (outputs * INPUTS * element.bytes()) as f64 / seconds[seconds.len() / 2] / 1e9
}

fn main() {
    let rounds: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(3);
    let forms: Vec<KernelForm> = KernelForm::ALL
        .into_iter()
        .filter(|f| *f != KernelForm::Libtorch && f.available())
        .collect();
    let mut elements = vec![Element::F32, Element::Bf16Widened];
    if pair_products_available() {
        elements.push(Element::Bf16Pairs);
    }
    // 256 KB of weights stay in L2 (one thread); 1 GB of f32 (0.5 GB of bf16) in no cache (one
    // thread, then two).
    let sizes = [
        ("L2", 256 << 10, 1),
        ("memory", 1 << 30, 1),
        ("memory", 1 << 30, 2),
    ];
    let mut cases = Vec::new();
    for &form in &forms {
        for &element in &elements {
            if element == Element::Bf16Pairs && form != KernelForm::Avx512 {
                continue;
            }
            for rows in [1, 4] {
                for (place, bytes, threads) in sizes {
                    cases.push((form, element, rows, place, bytes / (INPUTS * 4), threads));
                }
            }
        }
    }
    let mut rates = vec![Vec::new(); cases.len()];
    for round in 0..rounds {
        // Alternate the order of the cases from round to round.
        let order: Vec<usize> = if round % 2 == 0 {
            (0..cases.len()).collect()
        } else {
            (0..cases.len()).rev().collect()
        };
        for c in order {
            let (form, element, rows, place, outputs, threads) = cases[c];
            let repeats = if place == "L2" { 200 } else { 3 };
            rates[c].push(rate(form, element, rows, outputs, threads, repeats));
        }
    }
    println!("{INPUTS} inputs a weight row, {rounds} interleaved rounds; GB/s of weights read: median [min, max]");
    println!("| form | weights | rows | from L2 (256 KB), 1 thread | from memory (1 GB f32, 0.5 GB bf16), 1 thread | the same, 2 threads |");
    println!("|---|---|---|---|---|---|");
    for (c, &(form, element, rows, place, _, _)) in cases.iter().enumerate() {
        if place != "L2" {
            continue;
        }
        let cell = |r: &Vec<f64>| {
            let mut r = r.clone();
            r.sort_by(f64::total_cmp);
            format!("{:.1} [{:.1}, {:.1}]", r[r.len() / 2], r[0], r[r.len() - 1])
        };
        println!(
            "| {} | {} | {rows} | {} | {} | {} |",
            form.name(),
            element.name(),
            cell(&rates[c]),
            cell(&rates[c + 1]),
            cell(&rates[c + 2])
        );
    }
}
