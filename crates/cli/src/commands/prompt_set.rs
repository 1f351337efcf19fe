//! Held-out chat prompts from a JSONL file, optionally behind an excerpt of a long text to reach a
//! context length: the prompt set `tau` and `bench speculative` share.

use anyhow::{ensure, Context, Result};
use clap::Args;
use sharpdraft_data::datasets::jsonl_field;
use sharpdraft_lab::experiment::prompts::{
    ensure_text_can_fit, excerpt_offset, filler_text, long_prompt_ids, ExcerptSpacing,
};
use sharpdraft_model::TextTokenizer;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct PromptSetArgs {
    /// JSONL file (or .jsonl.gz) of chat prompts.
    #[arg(long)]
    pub prompts: PathBuf,
    /// The prompt field (a string, or a list whose first string is taken).
    #[arg(long, default_value = "prompt")]
    pub field: String,
    /// Prompts to skip (those a drafter was trained on).
    #[arg(long, default_value_t = 0)]
    pub skip: usize,
    #[arg(long, default_value_t = 4)]
    pub count: usize,
    /// Context lengths in tokens when decoding starts, comma-separated; 0 is the prompt alone.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    pub contexts: Vec<usize>,
    /// Long text placed before the question to reach a context: a text file or a folder of .txt files.
    #[arg(long)]
    pub filler: Option<PathBuf>,
    /// Tokens of the filler to skip (keep excerpts clear of text a drafter was trained on).
    #[arg(long, default_value_t = 0)]
    pub filler_offset: usize,
}

/// The questions of a prompt set with the filler they are placed behind.
pub struct PromptSet {
    /// Records `skip..skip + count` of the file.
    pub questions: Vec<String>,
    /// The filler's tokens (empty when every context is the prompt alone).
    filler: Vec<i64>,
    filler_offset: usize,
    /// Where the filler came from, named when it is too short for a context.
    filler_path: Option<PathBuf>,
}

impl PromptSetArgs {
    /// Reads the questions and tokenizes the filler, checking the file holds `skip + count` records,
    /// that each question could fit the target's `positions` before it is tokenized, and that a filler is
    /// given where a context needs one.
    pub fn load(&self, tokenizer: &TextTokenizer, positions: usize) -> Result<PromptSet> {
        ensure!(self.count >= 1, "--count 0: give at least one prompt");
        let mut seen = std::collections::BTreeSet::new();
        for context in &self.contexts {
            ensure!(
                seen.insert(context),
                "--contexts lists {context} twice: give each once"
            );
        }
        let questions = jsonl_field(&self.prompts, &self.field)?;
        ensure!(
            questions.len() >= self.skip.saturating_add(self.count),
            "{}: {} prompts, fewer than --skip {} + --count {}",
            self.prompts.display(),
            questions.len(),
            self.skip,
            self.count
        );
        let questions = questions[self.skip..self.skip + self.count].to_vec();
        for (i, question) in questions.iter().enumerate() {
            ensure_text_can_fit(question, positions)
                .with_context(|| format!("{}: prompt {}", self.prompts.display(), self.skip + i))?;
        }
        let filler = match (&self.filler, self.contexts.iter().any(|&c| c > 0)) {
            (Some(path), true) => tokenizer.encode(&filler_text(path)?, false)?,
            (None, true) => anyhow::bail!("--contexts beyond the prompt need --filler"),
            _ => Vec::new(),
        };
        Ok(PromptSet {
            questions,
            filler,
            filler_offset: self.filler_offset,
            filler_path: self.filler.clone(),
        })
    }
}

impl PromptSet {
    /// Chat-templated ids of question `index` behind an excerpt of the filler (a different excerpt for
    /// every question) that brings it to `context` tokens; the question alone when it is that long.
    pub fn ids(
        &self,
        tokenizer: &TextTokenizer,
        index: usize,
        question: &str,
        context: usize,
    ) -> Result<Vec<i64>> {
        // A prompt file's questions are read one by one, not as a set of known size: stepped.
        let offset = excerpt_offset(
            ExcerptSpacing::Stepped,
            (index, 1),
            self.filler_offset,
            self.filler.len(),
            context,
        );
        long_prompt_ids(tokenizer, question, &self.filler, offset, context).with_context(|| {
            format!(
                "--filler {} with --filler-offset {} for --contexts {context}: give a longer text or a smaller offset or context",
                self.filler_path
                    .as_deref()
                    .map_or("(none)".into(), |p| p.display().to_string()),
                self.filler_offset
            )
        })
    }
}
