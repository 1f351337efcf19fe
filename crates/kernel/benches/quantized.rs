//! The few-row product over GGUF blocks (`quantized.rs`) on matrices of Qwen2.5-Coder-1.5B's MLP shape
//! (8960 x 1536), per block type, row count and thread count: milliseconds a product and the bytes of
//! blocks read per second (`cargo bench -p sharpdraft-kernel --bench quantized`). The products turn
//! over copies of the matrix that together exceed the last-level cache many times, so each reads its
//! blocks from memory, as a decode step does (one matrix alone, 5 to 11 MB, would stay in cache).

use sharpdraft_kernel::quantized::{product, BlockFormat, QuantizedWeight};
use sharpdraft_kernel::KernelForm;
use std::time::Instant;

/// Bytes of blocks the copies of a matrix take together: several times any L3 of these machines.
const STREAMED_BYTES: usize = 256 << 20;

fn main() {
    let (outputs, inputs) = (8960, 1536);
    let form = KernelForm::best();
    for format in BlockFormat::ALL {
        let blocks = outputs * inputs / format.values();
        let bytes = blocks * format.bytes();
        let copies = STREAMED_BYTES.div_ceil(bytes);
        let mut data = vec![0u8; copies * bytes];
        for (i, b) in data.iter_mut().enumerate() {
            *b = (i.wrapping_mul(2654435761) >> 13) as u8;
        }
        // Small finite f16 scales where each block keeps them.
        for block in data.chunks_exact_mut(format.bytes()) {
            let at = if format == BlockFormat::Q6K { 208 } else { 0 };
            block[at..at + 2].copy_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
            if matches!(
                format,
                BlockFormat::Q4K | BlockFormat::Q4_1 | BlockFormat::Q5_1
            ) {
                block[2..4].copy_from_slice(&half::f16::from_f32(0.001).to_le_bytes());
            }
        }
        let weights: Vec<QuantizedWeight> = data
            .chunks_exact(bytes)
            .map(|copy| QuantizedWeight::new(format, copy, outputs, inputs).unwrap())
            .collect();
        for threads in [1, 2] {
            for rows in [1, 4, 7, 16] {
                let x: Vec<f32> = (0..rows * inputs)
                    .map(|i| ((i % 97) as f32 - 48.0) / 50.0)
                    .collect();
                let mut out = vec![0f32; rows * outputs];
                for weight in &weights {
                    product(weight, &x, rows, &mut out, threads, form).unwrap();
                }
                let repeats = 2 * copies;
                let started = Instant::now();
                for i in 0..repeats {
                    product(&weights[i % copies], &x, rows, &mut out, threads, form).unwrap();
                }
                let seconds = started.elapsed().as_secs_f64() / repeats as f64;
                println!(
                    "{:<5} {threads} threads {rows:>2} rows: {:>7.3} ms, {:>5.1} GB/s of blocks from memory",
                    format.name(),
                    1e3 * seconds,
                    bytes as f64 / seconds / 1e9
                );
            }
        }
    }
}
