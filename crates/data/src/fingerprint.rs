//! What a probe, a calibration or a training run read, fingerprinted so test prompts can be kept
//! apart from it ([`DataFingerprint`]: a hash of each prompt text, and of every [`SHINGLE`] consecutive
//! tokens of its token stream, taken every [`STRIDE`] tokens); `calibrate` copies a probe's into the
//! schedule it writes. A request that holds one of those prompts, or [`SHINGLE`] tokens in a row that
//! hash alike (so any overlap of `STRIDE + SHINGLE - 1` tokens), overlaps the data ([`overlap`]).

use crate::datasets::{jsonl_field, locate, token_stream, Source};
use crate::error::{bail, Context, Result};
use sha2::{Digest, Sha256};
use sharpdraft_math::DataFingerprint;
use sharpdraft_model::CausalLm;
use std::collections::BTreeSet;
use std::path::Path;

/// Tokens in one hashed window.
pub const SHINGLE: usize = 32;
/// Tokens between the starts of two recorded windows.
pub const STRIDE: usize = 16;

/// The first 16 hex digits of the sha256 of `bytes`.
fn short_hash(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// The hash of a prompt text (surrounding white space left out).
pub fn prompt_hash(text: &str) -> String {
    short_hash(text.trim().as_bytes())
}

/// The hash of [`SHINGLE`] token ids.
fn window_hash(ids: &[i64]) -> String {
    let bytes: Vec<u8> = ids.iter().flat_map(|id| id.to_le_bytes()).collect();
    short_hash(&bytes)
}

/// An empty fingerprint with this module's window shape.
pub fn empty() -> DataFingerprint {
    DataFingerprint {
        shingle: SHINGLE,
        stride: STRIDE,
        prompts: Vec::new(),
        windows: Vec::new(),
    }
}

/// Adds every window of `ids` (every [`STRIDE`] tokens) to `fingerprint`.
pub fn add_tokens(fingerprint: &mut DataFingerprint, ids: &[i64]) {
    let mut start = 0;
    while start + SHINGLE <= ids.len() {
        fingerprint
            .windows
            .push(window_hash(&ids[start..start + SHINGLE]));
        start += STRIDE;
    }
}

/// Adds the hash of each prompt text.
pub fn add_prompts<'a>(
    fingerprint: &mut DataFingerprint,
    texts: impl IntoIterator<Item = &'a String>,
) {
    fingerprint
        .prompts
        .extend(texts.into_iter().map(|t| prompt_hash(t)));
}

/// Sorted and without repeats, so a schedule lists each hash once.
pub fn tidy(fingerprint: &mut DataFingerprint) {
    fingerprint.prompts.sort();
    fingerprint.prompts.dedup();
    fingerprint.windows.sort();
    fingerprint.windows.dedup();
}

/// Two fingerprints as one (the drafter's probe and the target's, say); `None` when either is unknown.
pub fn joined(a: Option<&DataFingerprint>, b: Option<&DataFingerprint>) -> Option<DataFingerprint> {
    let (a, b) = (a?, b?);
    if (a.shingle, a.stride) != (b.shingle, b.stride) {
        return None;
    }
    let mut out = a.clone();
    out.prompts.extend(b.prompts.iter().cloned());
    out.windows.extend(b.windows.iter().cloned());
    tidy(&mut out);
    Some(out)
}

/// The prompt texts a data source reads as prompts: every record of a JSONL source, the prompts of a
/// target-continuations source (`skip..skip + prompts`); none for plain texts.
pub fn source_prompts(source: &Source, base: &Path) -> Result<Vec<String>> {
    Ok(match source {
        Source::Jsonl {
            path, field, pypi, ..
        } => jsonl_field(&locate(base, path, pypi.as_ref())?, field)?,
        Source::TargetContinuations {
            path,
            field,
            pypi,
            skip,
            prompts,
            ..
        } => jsonl_field(&locate(base, path, pypi.as_ref())?, field)?
            .into_iter()
            .skip(*skip)
            .take(*prompts)
            .collect(),
        Source::TextFile(_) | Source::PypiTexts { .. } | Source::Include(_) => Vec::new(),
    })
}

/// What a drafter's training data holds: its prompts, and the windows of its plain texts (each text
/// source's tokens up to its `max_tokens`). The answers a target generates for its prompts are not
/// read: they are never test prompts.
pub fn training_fingerprint(
    sources: &[Source],
    base: &Path,
    target: &CausalLm,
) -> Result<DataFingerprint> {
    let mut fingerprint = empty();
    for source in sources {
        add_prompts(&mut fingerprint, &source_prompts(source, base)?);
        if matches!(source, Source::TextFile(_) | Source::PypiTexts { .. }) {
            let ids = token_stream(std::slice::from_ref(source), base, target)?;
            add_tokens(&mut fingerprint, &ids);
        }
    }
    tidy(&mut fingerprint);
    Ok(fingerprint)
}

/// Where a request meets data it must be kept apart from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Overlap {
    /// The request's prompt text is one of the data's prompts.
    Prompt,
    /// The request's tokens from this position on match a window of the data.
    Window(usize),
}

/// Whether a request (its prompt `text` and its token `ids`) overlaps `data`: its prompt first, then
/// every window of its tokens at every offset.
pub fn overlap(data: &DataFingerprint, text: &str, ids: &[i64]) -> Result<Option<Overlap>> {
    if data.shingle == 0 {
        bail!("a data fingerprint with windows of 0 tokens");
    }
    let prompts: BTreeSet<&str> = data.prompts.iter().map(String::as_str).collect();
    if prompts.contains(prompt_hash(text).as_str()) {
        return Ok(Some(Overlap::Prompt));
    }
    let windows: BTreeSet<&str> = data.windows.iter().map(String::as_str).collect();
    if data.shingle != SHINGLE {
        // Windows of another size cannot be compared with this version's.
        return Ok(None);
    }
    Ok((0..ids.len().saturating_sub(SHINGLE - 1))
        .find(|&at| windows.contains(window_hash(&ids[at..at + SHINGLE]).as_str()))
        .map(Overlap::Window))
}

/// Refuses `what` (a workload's prompt, already described) when it overlaps `data` read by `source`
/// (a schedule or training config, described).
pub fn refuse_overlap(
    data: &DataFingerprint,
    text: &str,
    ids: &[i64],
    what: &str,
    source: &str,
) -> Result<()> {
    match overlap(data, text, ids).with_context(|| source.to_string())? {
        None => Ok(()),
        Some(Overlap::Prompt) => bail!(
            "{what} is one of the prompts {source} read: a test prompt must be held out from it (raise the workload's skip, or calibrate or train on other prompts)"
        ),
        Some(Overlap::Window(at)) => bail!(
            "{what} holds, from its token {at} on, text {source} read: a test prompt must be held out from it (move the workload's filler_offset, or calibrate or train on other text)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fingerprint_of(ids: &[i64], prompts: &[&str]) -> DataFingerprint {
        let mut f = empty();
        add_tokens(&mut f, ids);
        add_prompts(
            &mut f,
            &prompts.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
        );
        tidy(&mut f);
        f
    }

    #[test]
    fn a_request_holding_enough_of_the_data_at_any_offset_is_found() {
        let data: Vec<i64> = (1000..1400).collect();
        let f = fingerprint_of(&data, &[]);
        // 47 tokens of the data (STRIDE + SHINGLE - 1) somewhere inside a request, off the stride.
        let mut request: Vec<i64> = (0..20).collect();
        request.extend(&data[101..101 + STRIDE + SHINGLE - 1]);
        request.extend(0..20);
        assert_eq!(
            overlap(&f, "q", &request).unwrap(),
            Some(Overlap::Window(20 + 11))
        );
    }

    #[test]
    fn a_request_sharing_fewer_tokens_than_a_window_is_not_refused() {
        let data: Vec<i64> = (1000..1400).collect();
        let f = fingerprint_of(&data, &[]);
        let mut request: Vec<i64> = (0..20).collect();
        request.extend(&data[100..100 + SHINGLE - 1]);
        assert_eq!(overlap(&f, "q", &request).unwrap(), None);
    }

    #[test]
    fn a_prompt_text_matches_whatever_white_space_surrounds_it() {
        let f = fingerprint_of(&[], &["What is 2 + 2?"]);
        assert_eq!(
            overlap(&f, "  What is 2 + 2?\n", &[1, 2, 3]).unwrap(),
            Some(Overlap::Prompt)
        );
        assert_eq!(overlap(&f, "What is 2 + 3?", &[1, 2, 3]).unwrap(), None);
    }

    #[test]
    fn the_refusal_names_the_prompt_and_the_source() {
        let f = fingerprint_of(&[], &["Q"]);
        let err = refuse_overlap(&f, "Q", &[], "workload \"w\": prompt 31", "schedule s.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("prompt 31") && err.contains("schedule s.yaml"),
            "{err}"
        );
    }

    #[test]
    fn fingerprints_join_only_when_both_are_known() {
        let a = fingerprint_of(&(0..64).collect::<Vec<_>>(), &["a"]);
        let b = fingerprint_of(&[], &["b"]);
        let both = joined(Some(&a), Some(&b)).unwrap();
        assert_eq!(both.prompts.len(), 2);
        assert_eq!(both.windows, a.windows);
        assert!(joined(Some(&a), None).is_none());
    }
}
