//! Where the bf16 read rate goes: the rate at which one thread's products consume weight bytes, f32
//! against bf16 (widened as read, and AVX512-BF16 pair products where the CPU has them), from weights
//! that sit in the core's L2 cache and from weights far larger than every cache, in every form this
//! CPU runs, interleaved over rounds. If bf16 is as slow from L2 as from memory while f32 from L2 is
//! far faster, the bf16 products are bound by their arithmetic, not by the reads.
//!
//! ```sh
//! cargo bench -p sharpdraft-kernel --bench read_rate -- [ROUNDS]
//! ```

use sharpdraft_kernel::products::pair_products_available;
use sharpdraft_kernel::{product, KernelForm, Rows, Shape, Weights};
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

/// GB/s of weights one product over `outputs` rows of weights reads, the median of `repeats`.
fn rate(form: KernelForm, element: Element, rows: usize, outputs: usize, repeats: usize) -> f64 {
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
            product(form, rows_in, weights, shape, &mut out).unwrap();
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
    // 256 KB of weights stay in L2; 1 GB of f32 (0.5 GB of bf16) in no cache.
    let sizes = [("L2", 256 << 10), ("memory", 1 << 30)];
    let mut cases = Vec::new();
    for &form in &forms {
        for &element in &elements {
            if element == Element::Bf16Pairs && form != KernelForm::Avx512 {
                continue;
            }
            for rows in [1, 4] {
                for (place, bytes) in sizes {
                    cases.push((form, element, rows, place, bytes / (INPUTS * 4)));
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
            let (form, element, rows, place, outputs) = cases[c];
            let repeats = if place == "L2" { 200 } else { 3 };
            rates[c].push(rate(form, element, rows, outputs, repeats));
        }
    }
    println!("one thread, {INPUTS} inputs a weight row, {rounds} interleaved rounds; GB/s of weights read: median [min, max]");
    println!("| form | weights | rows | from L2 (256 KB) | from memory (1 GB f32, 0.5 GB bf16) |");
    println!("|---|---|---|---|---|");
    for (c, &(form, element, rows, place, _)) in cases.iter().enumerate() {
        if place != "L2" {
            continue;
        }
        let cell = |r: &Vec<f64>| {
            let mut r = r.clone();
            r.sort_by(f64::total_cmp);
            format!("{:.1} [{:.1}, {:.1}]", r[r.len() / 2], r[0], r[r.len() - 1])
        };
        println!(
            "| {} | {} | {rows} | {} | {} |",
            form.name(),
            element.name(),
            cell(&rates[c]),
            cell(&rates[c + 1])
        );
    }
}
