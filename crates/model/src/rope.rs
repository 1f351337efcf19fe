//! Rotary position embedding in HF's layout (`rotate_half`: the first and second halves of each head
//! form the rotated pairs), with llama3 frequency scaling. GGUF imports convert llama.cpp's interleaved
//! Q/K rows to this layout once (`gguf::unpermute_rows`), so the forward pass has one RoPE.

use crate::config::{Llama3Scaling, ModelConfig};
use tch::{Device, Kind, Tensor};

pub struct Rope {
    /// `[head_dim / 2]` inverse frequencies, f32.
    inv_freq: Tensor,
}

impl Rope {
    pub fn new(config: &ModelConfig, device: Device) -> Self {
        Self::with_base(
            config.head_dim,
            config.rope_theta,
            config.rope_scaling,
            device,
        )
    }

    /// RoPE for `head_dim` with base `theta` (drafters carry their own base, e.g. EAGLE-3's 10000).
    pub fn with_base(
        head_dim: i64,
        theta: f64,
        scaling: Option<Llama3Scaling>,
        device: Device,
    ) -> Self {
        let freqs: Vec<f32> = (0..head_dim / 2)
            .map(|i| {
                let base = 1.0 / theta.powf(2.0 * i as f64 / head_dim as f64);
                scaling.map_or(base, |s| llama3_frequency(base, &s)) as f32
            })
            .collect();
        Self {
            inv_freq: Tensor::from_slice(&freqs).to_device(device),
        }
    }

    /// `(cos, sin)` for `positions` `[T]`, each `[T, 1, head_dim]` in `kind` (broadcasts over heads).
    pub fn tables(&self, positions: &Tensor, kind: Kind) -> (Tensor, Tensor) {
        let angles = positions.to_kind(Kind::Float).unsqueeze(1) * self.inv_freq.unsqueeze(0); // [T, D/2]
        let angles = Tensor::cat(&[&angles, &angles], -1).unsqueeze(1); // [T, 1, D]
        (angles.cos().to_kind(kind), angles.sin().to_kind(kind))
    }
}

/// Applies RoPE to `x` `[T, heads, head_dim]`.
pub fn apply(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
    let half = x.size()[2] / 2;
    let first = x.narrow(2, 0, half);
    let second = x.narrow(2, half, half);
    let rotated = Tensor::cat(&[&(-second), &first], 2);
    x * cos + rotated * sin
}

/// Llama 3.1's smooth interpolation between scaled low frequencies and unscaled high frequencies.
fn llama3_frequency(inv_freq: f64, s: &Llama3Scaling) -> f64 {
    let low_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
    let high_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
    let wavelen = 2.0 * std::f64::consts::PI / inv_freq;
    if wavelen < high_wavelen {
        inv_freq
    } else if wavelen > low_wavelen {
        inv_freq / s.factor
    } else {
        let smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor)
            / (s.high_freq_factor - s.low_freq_factor);
        (1.0 - smooth) * inv_freq / s.factor + smooth * inv_freq
    }
}
