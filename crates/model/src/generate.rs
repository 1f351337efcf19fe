//! Autoregressive generation: chunked prefill, then one token per forward pass.

use crate::error::Result;
use crate::mask::AttentionMask;
use crate::sampling::Sampler;
use crate::transformer::{ForwardInput, LogitRows, Tap, Transformer};
use std::time::Instant;
use tch::{Kind, Tensor};

/// Prompt rows per prefill pass: bounds activation memory on long prompts.
pub const PREFILL_CHUNK: i64 = 512;

#[derive(Debug, Clone)]
pub struct Generation {
    pub prompt_ids: Vec<i64>,
    /// Generated ids only (a stop token, when hit, is included).
    pub ids: Vec<i64>,
    pub prefill_seconds: f64,
    pub decode_seconds: f64,
}

impl Generation {
    /// Generated tokens per second of wall time, prefill included.
    pub fn tokens_per_second(&self) -> f64 {
        self.ids.len() as f64 / (self.prefill_seconds + self.decode_seconds).max(1e-9)
    }
}

/// Runs `ids` through `net` in chunks and returns the last row's logits `[vocab]`.
pub fn prefill(
    net: &Transformer,
    ids: &[i64],
    cache: &mut crate::kv_cache::KvCache,
) -> Result<Tensor> {
    Ok(prefill_with_taps(net, ids, cache, &[])?.0)
}

/// [`prefill`] that also returns the requested taps for every prompt row, concatenated on features
/// (`[len, features]`; `None` without taps). Drafters on target features start from these.
pub fn prefill_with_taps(
    net: &Transformer,
    ids: &[i64],
    cache: &mut crate::kv_cache::KvCache,
    taps: &[Tap],
) -> Result<(Tensor, Option<Tensor>)> {
    let device = net.device();
    let mut last = None;
    let mut hidden = Vec::new();
    for chunk in ids.chunks(PREFILL_CHUNK as usize) {
        let start = cache.len();
        let ids = Tensor::from_slice(chunk).to_device(device);
        let positions =
            Tensor::arange_start(start, start + chunk.len() as i64, (Kind::Int64, device));
        let input = ForwardInput {
            logits: LogitRows::Last,
            taps,
            ..ForwardInput::causal(&ids, &positions)
        };
        let out = net.forward(input, cache)?;
        if !taps.is_empty() {
            hidden.push(Tensor::cat(&out.hidden, -1));
        }
        last = out.logits;
    }
    let hidden = (!hidden.is_empty()).then(|| Tensor::cat(&hidden, 0));
    Ok((
        last.expect("prefill of an empty prompt").squeeze_dim(0),
        hidden,
    ))
}

/// Generates up to `max_new_tokens` after `prompt`, stopping after any id in `stop`.
pub fn generate(
    net: &Transformer,
    prompt: &[i64],
    max_new_tokens: usize,
    sampler: &mut Sampler,
    stop: &[i64],
) -> Result<Generation> {
    net.config.ensure_positions(prompt.len(), max_new_tokens)?;
    let _guard = tch::no_grad_guard();
    let mut cache = net.new_cache(prompt.len() as i64 + max_new_tokens as i64 + 1);
    let started = Instant::now();
    let mut logits = prefill(net, prompt, &mut cache)?;
    let prefill_seconds = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let mut ids = Vec::with_capacity(max_new_tokens);
    let device = net.device();
    net.decoding(|| -> Result<()> {
        while ids.len() < max_new_tokens {
            let next = sampler.sample(&logits)?;
            ids.push(next);
            if stop.contains(&next) || ids.len() == max_new_tokens {
                break;
            }
            let position = cache.len();
            let input_ids = Tensor::from_slice(&[next]).to_device(device);
            let positions = Tensor::from_slice(&[position]).to_device(device);
            let input = ForwardInput {
                mask: &AttentionMask::Causal,
                ..ForwardInput::causal(&input_ids, &positions)
            };
            logits = net
                .forward(input, &mut cache)?
                .logits
                .expect("logits requested")
                .squeeze_dim(0);
        }
        Ok(())
    })?;
    Ok(Generation {
        prompt_ids: prompt.to_vec(),
        ids,
        prefill_seconds,
        decode_seconds: started.elapsed().as_secs_f64(),
    })
}
