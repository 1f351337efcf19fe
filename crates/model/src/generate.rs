//! Autoregressive generation: chunked prefill, then one token per forward pass.

use crate::error::{ModelError, Result};
use crate::kv_cache::KvCache;
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
        // A prompt: a model run as stored multiplies its f32 weights for many rows (weight_blocks.rs).
        let out = crate::weight_blocks::prompt(|| net.forward(input, cache))?;
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

/// The target's prefill of one prompt: its cache, the last row's logits and the hidden states of the
/// taps asked for, with the seconds it took. A run computes it once per request and hands it to every
/// arm (the target alone and each drafter x method), each decoding from its own copy of the cache
/// ([`Self::cache_copy`]): the prefill is the same computation in every arm, so it is measured once and
/// counted in each arm's time.
pub struct PromptPrefill {
    prompt: Vec<i64>,
    cache: KvCache,
    last_logits: Tensor,
    taps: Vec<Tap>,
    /// `[prompt, taps x hidden]`, the taps in `taps`' order; `None` without taps.
    hidden: Option<Tensor>,
    seconds: f64,
}

impl PromptPrefill {
    /// Runs `prompt` through `net` into a cache of `capacity` positions, recording `taps`.
    pub fn run(net: &Transformer, prompt: &[i64], taps: &[Tap], capacity: i64) -> Result<Self> {
        let _guard = tch::no_grad_guard();
        let mut cache = net.new_cache(capacity);
        let started = Instant::now();
        let (last_logits, hidden) = prefill_with_taps(net, prompt, &mut cache, taps)?;
        Ok(Self {
            prompt: prompt.to_vec(),
            cache,
            last_logits,
            taps: taps.to_vec(),
            hidden,
            seconds: started.elapsed().as_secs_f64(),
        })
    }

    pub fn prompt(&self) -> &[i64] {
        &self.prompt
    }

    /// Wall seconds of the prefill.
    pub fn seconds(&self) -> f64 {
        self.seconds
    }

    /// The last prompt row's logits, `[vocab]`.
    pub fn last_logits(&self) -> &Tensor {
        &self.last_logits
    }

    /// The hidden states of `taps` (each one this prefill recorded), concatenated in that order on
    /// features, `[prompt, taps x hidden]`; `None` for no taps.
    pub fn hidden(&self, taps: &[Tap]) -> Result<Option<Tensor>> {
        if taps.is_empty() {
            return Ok(None);
        }
        let all = self.hidden.as_ref().ok_or_else(|| {
            ModelError::tensor("prefill hidden states", "the prefill recorded no taps")
        })?;
        if taps == self.taps.as_slice() {
            return Ok(Some(all.shallow_clone()));
        }
        let width = all.size()[1] / self.taps.len() as i64;
        let blocks = taps
            .iter()
            .map(|tap| {
                let at = self.taps.iter().position(|t| t == tap).ok_or_else(|| {
                    ModelError::tensor(
                        "prefill hidden states",
                        format!("tap {tap:?} was not recorded (recorded: {:?})", self.taps),
                    )
                })?;
                Ok(all.narrow(1, at as i64 * width, width))
            })
            .collect::<Result<Vec<Tensor>>>()?;
        Ok(Some(Tensor::cat(&blocks, 1)))
    }

    /// A cache of `capacity` positions holding the prompt, copied: decoding from it changes nothing
    /// another arm reads.
    pub fn cache_copy(&self, capacity: i64) -> Result<KvCache> {
        self.cache.copy_with_capacity(capacity)
    }

    /// The prefill's own cache, for its one user.
    pub fn into_cache(self) -> KvCache {
        self.cache
    }
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
    let capacity = prompt.len() as i64 + max_new_tokens as i64 + 1;
    let prefilled = PromptPrefill::run(net, prompt, &[], capacity)?;
    let (prefill_seconds, logits) = (prefilled.seconds, prefilled.last_logits.shallow_clone());
    decode_after(
        net,
        prompt,
        prefilled.into_cache(),
        logits,
        prefill_seconds,
        max_new_tokens,
        sampler,
        stop,
    )
}

/// [`generate`] from a prefill shared with other arms: its cache copied, its seconds counted as this
/// generation's prefill.
pub fn generate_from(
    net: &Transformer,
    prefilled: &PromptPrefill,
    max_new_tokens: usize,
    sampler: &mut Sampler,
    stop: &[i64],
) -> Result<Generation> {
    let prompt = prefilled.prompt();
    net.config.ensure_positions(prompt.len(), max_new_tokens)?;
    let cache = prefilled.cache_copy(prompt.len() as i64 + max_new_tokens as i64 + 1)?;
    decode_after(
        net,
        prompt,
        cache,
        prefilled.last_logits.shallow_clone(),
        prefilled.seconds,
        max_new_tokens,
        sampler,
        stop,
    )
}

/// One token per forward pass after a prefill that left `cache` and the last row's `logits`.
#[allow(clippy::too_many_arguments)]
fn decode_after(
    net: &Transformer,
    prompt: &[i64],
    mut cache: KvCache,
    mut logits: Tensor,
    prefill_seconds: f64,
    max_new_tokens: usize,
    sampler: &mut Sampler,
    stop: &[i64],
) -> Result<Generation> {
    let _guard = tch::no_grad_guard();
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
