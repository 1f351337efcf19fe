//! The few-row product over GGUF's quantized blocks equals the weights dequantized and multiplied in
//! f64, to the rounding of the rows' 8-bit quantization, for every block type, row count and form this
//! CPU runs; the forms agree to f32 rounding, and in every form a row's result does not depend on the
//! rows beside it or the threads (a decode step and a verification agree exactly).

use sharpdraft_kernel::quantized::{dequantize_block, product, BlockFormat, QuantizedWeight};
use sharpdraft_kernel::KernelForm;

const FORMATS: [BlockFormat; 7] = BlockFormat::ALL;

/// A small deterministic generator (xorshift), so failures reproduce.
struct Bytes(u64);

impl Bytes {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn byte(&mut self) -> u8 {
        self.next() as u8
    }
    /// A value in -1..1.
    fn unit(&mut self) -> f32 {
        (self.next() % 20001) as f32 / 10000.0 - 1.0
    }
}

fn f16_bytes(v: f32) -> [u8; 2] {
    half::f16::from_f32(v).to_le_bytes()
}

/// `outputs` rows of `inputs` values as random blocks of `format`, with small finite f16 scales.
fn random_weight(format: BlockFormat, outputs: usize, inputs: usize, seed: u64) -> Vec<u8> {
    let mut rng = Bytes(seed);
    let blocks = outputs * inputs / format.values();
    let mut data = Vec::with_capacity(blocks * format.bytes());
    for _ in 0..blocks {
        let mut block: Vec<u8> = (0..format.bytes()).map(|_| rng.byte()).collect();
        let scale = 0.01 + 0.02 * rng.unit().abs();
        let (scale_at, second) = match format {
            BlockFormat::Q6K => (208, None),
            BlockFormat::Q4_1 | BlockFormat::Q5_1 | BlockFormat::Q4K => (0, Some(2)),
            _ => (0, None),
        };
        block[scale_at..scale_at + 2].copy_from_slice(&f16_bytes(scale));
        if let Some(at) = second {
            block[at..at + 2].copy_from_slice(&f16_bytes(0.005 * rng.unit()));
        }
        if format == BlockFormat::Q8_0 {
            // ggml's Q8_0 values lie in -127..127.
            for q in &mut block[2..] {
                if *q == 0x80 {
                    *q = 0x81;
                }
            }
        }
        data.extend(block);
    }
    data
}

fn reference(weight: &QuantizedWeight, x: &[f32], rows: usize) -> (Vec<f64>, Vec<f64>) {
    let mut dense = vec![0f32; weight.inputs];
    let (mut out, mut magnitude) = (
        vec![0f64; rows * weight.outputs],
        vec![0f64; rows * weight.outputs],
    );
    for o in 0..weight.outputs {
        weight.dequantize_row(o, &mut dense);
        for r in 0..rows {
            let row = &x[r * weight.inputs..(r + 1) * weight.inputs];
            for (w, v) in dense.iter().zip(row) {
                out[r * weight.outputs + o] += f64::from(*w) * f64::from(*v);
                magnitude[r * weight.outputs + o] += (f64::from(*w) * f64::from(*v)).abs();
            }
        }
    }
    (out, magnitude)
}

fn forms() -> Vec<KernelForm> {
    let mut forms = vec![KernelForm::Libtorch];
    if KernelForm::Avx2.available() {
        forms.push(KernelForm::Avx2);
    }
    forms
}

#[test]
fn each_block_types_product_equals_the_dequantized_weights_times_the_rows() {
    // 150 outputs on 2 threads: each part more than one tile of 64 output rows, the last one short.
    let (outputs, inputs) = (150, 512);
    for (i, format) in FORMATS.into_iter().enumerate() {
        let data = random_weight(format, outputs, inputs, 17 + i as u64);
        let weight = QuantizedWeight::new(format, &data, outputs, inputs).unwrap();
        // One sweep of 1, 3 and 8 rows; two sweeps (8 + 1) and (8 + 8).
        for rows in [1, 3, 8, 9, 16] {
            let mut rng = Bytes(99 + rows as u64);
            let x: Vec<f32> = (0..rows * inputs).map(|_| rng.unit()).collect();
            let (want, magnitude) = reference(&weight, &x, rows);
            for form in forms() {
                let mut out = vec![0f32; rows * outputs];
                product(&weight, &x, rows, &mut out, 2, form).unwrap();
                for (k, (&got, &w)) in out.iter().zip(&want).enumerate() {
                    // The rows' 8-bit quantization: at most half a step of 1/127 of each block's
                    // largest value, on every term.
                    let tolerance = 0.01 * magnitude[k] + 1e-6;
                    assert!(
                        (f64::from(got) - w).abs() <= tolerance,
                        "{} {form:?}, {rows} rows, output {k}: {got} against {w} (tolerance {tolerance})",
                        format.name()
                    );
                }
            }
        }
    }
}

#[test]
fn every_form_computes_each_row_alike_whatever_the_rows_beside_it() {
    // 5 outputs (less than a tile) and 150 (tiles of 64 and a short one, on several threads), over
    // 512 inputs and SmolLM2's 576 (an odd count of 32-value blocks).
    for (outputs, inputs) in [(5, 512), (150, 512), (150, 576)] {
        rows_alike(outputs, inputs);
    }
}

fn rows_alike(outputs: usize, inputs: usize) {
    for (i, format) in FORMATS
        .into_iter()
        .filter(|f| inputs % f.values() == 0)
        .enumerate()
    {
        let data = random_weight(format, outputs, inputs, 3 + i as u64);
        let weight = QuantizedWeight::new(format, &data, outputs, inputs).unwrap();
        let mut rng = Bytes(5);
        // 20 rows: two sweeps of 8 and one of 4.
        let x: Vec<f32> = (0..20 * inputs).map(|_| rng.unit()).collect();
        let mut portable = vec![0f32; 20 * outputs];
        product(&weight, &x, 20, &mut portable, 1, KernelForm::Libtorch).unwrap();
        for form in forms() {
            let mut all = vec![0f32; 20 * outputs];
            product(&weight, &x, 20, &mut all, 3, form).unwrap();
            for (a, b) in all.iter().zip(&portable) {
                assert!(
                    (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                    "{} {form:?}: {a} {b}",
                    format.name()
                );
            }
            for r in 0..20 {
                let mut one = vec![0f32; outputs];
                product(
                    &weight,
                    &x[r * inputs..(r + 1) * inputs],
                    1,
                    &mut one,
                    1,
                    form,
                )
                .unwrap();
                assert_eq!(
                    one,
                    &all[r * outputs..(r + 1) * outputs],
                    "{} {form:?} [{outputs}, {inputs}]: row {r} alone, on one thread",
                    format.name()
                );
            }
        }
    }
}

#[test]
fn a_q8_0_block_dequantizes_to_its_scale_times_its_bytes() {
    let mut block = vec![0u8; 34];
    block[..2].copy_from_slice(&f16_bytes(0.5));
    for (i, q) in block[2..].iter_mut().enumerate() {
        *q = (i as i8 - 16) as u8;
    }
    let mut out = [0f32; 32];
    dequantize_block(BlockFormat::Q8_0, &block, &mut out);
    assert_eq!(out[0], -8.0);
    assert_eq!(out[31], 7.5);
}

#[test]
fn weights_of_partial_blocks_or_the_wrong_byte_count_are_refused_naming_the_type() {
    let err = QuantizedWeight::new(BlockFormat::Q4K, &[0; 144], 1, 100).unwrap_err();
    assert!(err.to_string().contains("Q4_K"), "{err}");
    let err = QuantizedWeight::new(BlockFormat::Q6K, &[0; 100], 1, 256).unwrap_err();
    assert!(err.to_string().contains("210"), "{err}");
}
