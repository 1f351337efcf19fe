//! What the tables and the report know of an experiment: its names in the order written, what each
//! method is to a reader (the baseline, a point on the slope chart, an arm that reads the target's
//! attention), the grid's extent and what ties a run folder to it. Lab's experiment YAML makes one
//! (`Experiment::outline`); nothing here reads a drafter specification or loads a model.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// What an experiment decodes with and how often: its file and name, the target and how it runs, the
/// seeds and repeats. Lab's resolved experiment holds it (its record `experiment.json` writes the
/// fields in place) and hands it to the [`Outline`] as it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExperimentHeader {
    /// The experiment YAML.
    pub file: PathBuf,
    pub name: String,
    pub target: String,
    pub device: String,
    pub dtype: String,
    /// 0 is greedy.
    pub temperature: f64,
    pub seeds: Vec<u64>,
    /// Runs of every unit (timing noise; greedy tokens repeat exactly).
    pub repeats: usize,
}

/// An experiment as its run folder's records and report see it.
#[derive(Debug, Clone, PartialEq)]
pub struct Outline {
    pub header: ExperimentHeader,
    /// What a run folder belongs to: the YAML's and its inputs' digest.
    pub config_hash: String,
    /// Drafter names, in the order written.
    pub drafters: Vec<String>,
    /// Methods, in the order written (a beta sweep expanded).
    pub methods: Vec<MethodOutline>,
    pub workloads: Vec<WorkloadOutline>,
    /// Every (drafter, drafting method) pair that decodes: drafters in order, each one's methods in
    /// the experiment's order.
    pub drafting: Vec<(String, String)>,
    /// Context bins along a long generation, in multiples of the drafter's n0.
    pub bins_n0: Vec<f64>,
    /// Whether each request's prompt is prefilled once for every arm.
    pub shared_prefill: bool,
    /// Drafting methods the report pairs with every other drafting method (the experiment's
    /// `head_to_head:`); empty: the calibrated schedule's method, where there is one.
    pub head_to_head: Vec<String>,
}

/// One method, as far as a report tells methods apart.
#[derive(Debug, Clone, PartialEq)]
pub struct MethodOutline {
    pub name: String,
    /// The target alone: a speed-up's denominator.
    pub target_only: bool,
    pub slope: SlopeRole,
    /// Its verification also reads the target's attention (retrieval), work other arms do not do.
    pub reads_target_attention: bool,
}

/// How a method's scaling places it on the slope chart: at a constant beta (the unmodified drafter at
/// 0, a beta sweep's constants), at a calibrated schedule's mean slope (marked apart), or not on the
/// line (the literature's rules, whose shape differs from a constant slope; adaptation, windows,
/// retrieval, the target alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlopeRole {
    Constant,
    Calibrated,
    Apart,
}

/// One workload: its name, setting and the contexts it runs at.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadOutline {
    pub name: String,
    pub setting: Setting,
    /// Long prompt: the requested contexts in tokens; long generation: unused.
    pub contexts: Vec<usize>,
}

/// What the target generates from, and how the context grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Setting {
    /// A document excerpt of the requested length before the question; short answers.
    LongPrompt,
    /// The prompt alone; the context grows while the drafter drafts (LongGenBench, reasoning).
    LongGeneration,
}

impl Setting {
    pub fn name(self) -> &'static str {
        match self {
            Setting::LongPrompt => "long_prompt",
            Setting::LongGeneration => "long_generation",
        }
    }
}

impl Outline {
    /// What a run folder belongs to: [`Self::config_hash`].
    pub fn hash(&self) -> &str {
        &self.config_hash
    }

    /// The method every other drafting method is compared with, request by request: the first
    /// drafting method listed (the unmodified drafter, as the shipped experiments list it).
    pub fn reference_method(&self) -> Option<&str> {
        self.methods
            .iter()
            .find(|m| !m.target_only)
            .map(|m| m.name.as_str())
    }

    /// The first target-only method: the baseline every speed-up divides by.
    pub fn baseline_method(&self) -> Option<&str> {
        self.methods
            .iter()
            .find(|m| m.target_only)
            .map(|m| m.name.as_str())
    }

    /// The methods the report pairs with every other drafting method: those the experiment names, else
    /// its first calibrated schedule (the paper's question), else none.
    pub fn anchors(&self) -> Vec<&str> {
        if !self.head_to_head.is_empty() {
            return self.head_to_head.iter().map(String::as_str).collect();
        }
        self.methods
            .iter()
            .find(|m| m.slope == SlopeRole::Calibrated)
            .map(|m| vec![m.name.as_str()])
            .unwrap_or_default()
    }

    /// The method named `name`.
    pub fn method(&self, name: &str) -> Option<&MethodOutline> {
        self.methods.iter().find(|m| m.name == name)
    }

    /// Where `name` stands among the methods as written.
    pub fn method_rank(&self, name: &str) -> Option<usize> {
        self.methods.iter().position(|m| m.name == name)
    }
}
