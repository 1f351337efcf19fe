//! Several sequences generated at once, packed into one KV cache: each decoding pass runs one new row
//! per unfinished sequence, so the weights are read once for all of them (decoding on a CPU is bound by
//! reading the weights). The transformer stays one sequence wide: every row carries its own sequence's
//! positions, and an explicit mask lets it see only its own sequence's keys (a block-diagonal causal
//! mask over the packed cache). A sequence that stops leaves the pass; its keys stay, masked.
//!
//! Worked example, two prompts of 3 and 2 tokens: the prefills fill cache slots 0-2 (sequence 0) and
//! 3-4 (sequence 1); the first decoding pass writes slot 5 (sequence 0, position 3) and slot 6
//! (sequence 1, position 2); row 0 sees slots {0, 1, 2, 5}, row 1 slots {3, 4, 6}.

use crate::error::Result;
use crate::generate::{Generation, PREFILL_CHUNK};
use crate::mask::AttentionMask;
use crate::sampling::Sampler;
use crate::transformer::{ForwardInput, LogitRows, Transformer};
use crate::KvCache;
use std::time::Instant;
use tch::{Device, Kind, Tensor};

/// `[rows, keys]` visibility: row r (its sequence `row_sequence[r]`, cache slot `past + r`) sees the
/// keys of its own sequence up to its own slot. `owner[j]` is the sequence of cache slot j.
fn packed_mask(owner: &[i64], row_sequence: &[i64], past: i64, device: Device) -> AttentionMask {
    let keys = owner.len() as i64;
    let rows = row_sequence.len() as i64;
    let owner = Tensor::from_slice(owner).to_device(device).unsqueeze(0); // [1, L]
    let row = Tensor::from_slice(row_sequence)
        .to_device(device)
        .unsqueeze(1); // [T, 1]
    let key_index = Tensor::arange(keys, (Kind::Int64, device)).unsqueeze(0); // [1, L]
    let row_slot = Tensor::arange(rows, (Kind::Int64, device)).unsqueeze(1) + past; // [T, 1]
    AttentionMask::Rows(
        owner
            .eq_tensor(&row)
            .logical_and(&key_index.le_tensor(&row_slot)),
    )
}

/// Generates up to `max_new_tokens` after each of `prompts` (each with its own sampler), stopping a
/// sequence after any id in `stop`. Returns one [`Generation`] per prompt, in order; the seconds are the
/// whole batch's, shared.
pub fn generate_packed(
    net: &Transformer,
    prompts: &[Vec<i64>],
    max_new_tokens: usize,
    samplers: &mut [Sampler],
    stop: &[i64],
) -> Result<Vec<Generation>> {
    assert_eq!(prompts.len(), samplers.len(), "one sampler per prompt");
    if max_new_tokens == 0 || prompts.is_empty() {
        return Ok(prompts
            .iter()
            .map(|p| Generation {
                prompt_ids: p.clone(),
                ids: Vec::new(),
                prefill_seconds: 0.0,
                decode_seconds: 0.0,
            })
            .collect());
    }
    for prompt in prompts {
        net.config.ensure_positions(prompt.len(), max_new_tokens)?;
    }
    let _guard = tch::no_grad_guard();
    let device = net.device();
    let capacity: usize =
        prompts.iter().map(Vec::len).sum::<usize>() + prompts.len() * max_new_tokens;
    let mut cache = net.new_cache(capacity as i64 + 1);
    let mut owner: Vec<i64> = Vec::with_capacity(capacity + 1);
    let started = Instant::now();
    // Prefill each prompt in chunks; its last row's logits give its first token.
    let mut next = Vec::with_capacity(prompts.len());
    for (s, prompt) in prompts.iter().enumerate() {
        let logits = prefill_one(net, s, prompt, &mut cache, &mut owner)?;
        next.push(samplers[s].sample(&logits)?);
    }
    let prefill_seconds = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let mut outputs: Vec<Vec<i64>> = vec![Vec::with_capacity(max_new_tokens); prompts.len()];
    let mut active: Vec<usize> = Vec::new();
    for (s, &token) in next.iter().enumerate() {
        outputs[s].push(token);
        if !(stop.contains(&token) || max_new_tokens <= 1) {
            active.push(s);
        }
    }
    while !active.is_empty() {
        let past = cache.len();
        let rows: Vec<i64> = active.iter().map(|&s| s as i64).collect();
        owner.extend(&rows);
        let mask = packed_mask(&owner, &rows, past, device);
        let ids: Vec<i64> = active
            .iter()
            .map(|&s| *outputs[s].last().expect("one token"))
            .collect();
        // A sequence's next position: its prompt, plus its tokens before the one fed now.
        let positions: Vec<i64> = active
            .iter()
            .map(|&s| (prompts[s].len() + outputs[s].len() - 1) as i64)
            .collect();
        let ids = Tensor::from_slice(&ids).to_device(device);
        let positions = Tensor::from_slice(&positions).to_device(device);
        let input = ForwardInput {
            mask: &mask,
            ..ForwardInput::causal(&ids, &positions)
        };
        let logits = net
            .forward(input, &mut cache)?
            .logits
            .expect("logits requested"); // [A, vocab]
        let mut still = Vec::with_capacity(active.len());
        for (row, &s) in active.iter().enumerate() {
            let token = samplers[s].sample(&logits.get(row as i64))?;
            outputs[s].push(token);
            if !(stop.contains(&token) || outputs[s].len() >= max_new_tokens) {
                still.push(s);
            }
        }
        active = still;
    }
    let decode_seconds = started.elapsed().as_secs_f64();
    Ok(prompts
        .iter()
        .zip(outputs)
        .map(|(prompt, ids)| Generation {
            prompt_ids: prompt.clone(),
            ids,
            prefill_seconds,
            decode_seconds,
        })
        .collect())
}

/// Prefills sequence `s`'s `prompt` into the packed `cache` in chunks, each key's owner recorded in
/// `owner`; returns the logits of its last row `[vocab]`, which give its first token.
fn prefill_one(
    net: &Transformer,
    s: usize,
    prompt: &[i64],
    cache: &mut KvCache,
    owner: &mut Vec<i64>,
) -> Result<Tensor> {
    let device = net.device();
    let mut last = None;
    for (c, chunk) in prompt.chunks(PREFILL_CHUNK as usize).enumerate() {
        let past = cache.len();
        let start = (c * PREFILL_CHUNK as usize) as i64;
        owner.extend(std::iter::repeat_n(s as i64, chunk.len()));
        let mask = packed_mask(owner, &vec![s as i64; chunk.len()], past, device);
        let ids = Tensor::from_slice(chunk).to_device(device);
        let positions =
            Tensor::arange_start(start, start + chunk.len() as i64, (Kind::Int64, device));
        let input = ForwardInput {
            mask: &mask,
            logits: LogitRows::Last,
            ..ForwardInput::causal(&ids, &positions)
        };
        last = net.forward(input, cache)?.logits;
    }
    Ok(last
        .expect("a prompt has at least one token")
        .squeeze_dim(0))
}
