//! `sharpdraft bench speculative`: a drafter's end-to-end speed-up over autoregressive decoding of the
//! same target on a prompt set, side by side in one run: for every prompt (at every context length and
//! temperature), AR and each `--scaling` mode over `--rounds`, the order rotating every round so drift
//! of the machine falls on every side, each decode taken again once the machine is quiet when other
//! processes loaded it (as `run` does). The speed-up is pooled over prompts and rounds, with the median
//! and range of the rounds' own ratios beside it. With `--hf-python`, HF transformers' assisted generation (vanilla drafters) decodes the same
//! prompt ids after the workbench, AR and assisted, in the same command.
//!
//! Tokens/s count the whole call, prefill included, and are pooled over the prompts (tokens over
//! seconds). Greedy outputs are checked against AR token for token; sampled ones are lossless by
//! construction (`crates/decode/tests/lossless_sampling.rs` checks the distribution), so only their speed
//! and tau are reported.

use super::common_flags::{ModelArgs, ScalingModesArgs};
use super::paired_rounds;
use super::prompt_set::{PromptSet, PromptSetArgs};
use anyhow::{ensure, Context, Result};
use clap::Args;
use serde::Serialize;
use sharpdraft_decode::drafter_spec::{self, DrafterSpec};
use sharpdraft_decode::scaling::ScalingMode;
use sharpdraft_draft::DrafterKind;
use sharpdraft_model::generate::generate;
use sharpdraft_model::{CausalLm, Sampler, Sampling};
use sharpdraft_report::machine_state::{measure_quietly, Waiting};
use sharpdraft_store::registry;
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Args, Debug)]
pub struct SpeculativeBenchArgs {
    /// Target model: a known name or a model folder.
    #[arg(long)]
    pub target: String,
    #[command(flatten)]
    pub set: PromptSetArgs,
    /// A line put before every prompt in its user turn (e.g. "Complete this Python function.").
    #[arg(long)]
    pub prefix: Option<String>,
    #[arg(long, default_value_t = 96)]
    pub max_new_tokens: usize,
    /// Sampling temperatures, comma-separated; 0 is greedy. Sampling keeps the whole vocabulary.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    pub temperatures: Vec<f64>,
    /// Seed of prompt i's sampling is seed + i (the same for AR and speculative decoding).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// A Python with torch and transformers: also runs crates/cli/benches/hf_assisted.py (AR and
    /// assisted generation with chains of --draft-len, ended as --draft-stop-below ends them) on the
    /// same prompt ids (vanilla only).
    #[arg(long)]
    pub hf_python: Option<PathBuf>,
    /// A Python with the xllamacpp wheel (llama.cpp): also runs crates/cli/benches/llama_decode.py on
    /// the target's GGUF file, alone and drafting with the drafter's (vanilla, a known model imported
    /// from GGUF, at most --draft-len drafts a chain), on the same greedy prompt ids and threads.
    #[arg(long)]
    pub llama_python: Option<PathBuf>,
    /// Rounds over every request: AR and each scaling mode decode it once a round, the order rotating.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    #[arg(long)]
    pub json: bool,
    /// The drafter, and how it drafts.
    #[command(flatten)]
    pub drafter: DrafterSpec,
    #[command(flatten)]
    pub scaling_modes: ScalingModesArgs,
    #[command(flatten)]
    pub model: ModelArgs,
}

/// One decode of one prompt by one engine.
#[derive(Serialize, Clone)]
struct Row {
    /// `workbench` or `hf`.
    engine: &'static str,
    /// `ar`, a scaling mode (`off`, `fixed`, ...) of the drafter, or `assisted` (HF).
    decoding: String,
    requested_context: usize,
    temperature: f64,
    prompt: usize,
    context: usize,
    /// The round (0-based) this decode belongs to (HF's decodes: 0).
    round: usize,
    /// Other processes' share of the cores while the kept attempt ran (NaN without /proc).
    other_cpu_share: f64,
    tokens: usize,
    seconds: f64,
    /// Tokens per target pass (speculative decodes of the workbench).
    #[serde(skip_serializing_if = "Option::is_none")]
    tau: Option<f64>,
    /// Greedy only: the output equals the same engine's AR output.
    #[serde(skip_serializing_if = "Option::is_none")]
    identical_to_ar: Option<bool>,
    /// Draft -> verify cycles and the seconds spent drafting and verifying (workbench speculative).
    #[serde(skip_serializing_if = "Option::is_none")]
    cycles: Option<CycleTimes>,
}

#[derive(Serialize, Clone, Copy)]
struct CycleTimes {
    cycles: usize,
    draft_seconds: f64,
    verify_seconds: f64,
}

/// One engine's decoding at one context and temperature, pooled over the prompts.
#[derive(Serialize)]
struct Summary {
    engine: &'static str,
    decoding: String,
    requested_context: usize,
    temperature: f64,
    prompts: usize,
    tokens_per_s: f64,
    /// The same engine's AR over the same prompts.
    ar_tokens_per_s: f64,
    speedup_vs_ar: f64,
    /// Each round's speed-up (pooled over the round's prompts): median, lowest and highest.
    round_speedups: [f64; 3],
    /// Tokens per target pass, pooled (workbench only).
    #[serde(skip_serializing_if = "Option::is_none")]
    tau: Option<f64>,
    /// Greedy: prompts whose output equals AR's.
    #[serde(skip_serializing_if = "Option::is_none")]
    identical_to_ar: Option<usize>,
    /// Mean seconds per cycle drafting and verifying (workbench only).
    #[serde(skip_serializing_if = "Option::is_none")]
    draft_seconds_per_cycle: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    verify_seconds_per_cycle: Option<f64>,
    /// Workbench speculative tokens/s over HF assisted tokens/s on the same prompts (with --hf-python).
    #[serde(skip_serializing_if = "Option::is_none")]
    vs_hf_assisted: Option<f64>,
    /// Workbench tokens/s over llama.cpp's AR tokens/s on the same prompts (with --llama-python).
    #[serde(skip_serializing_if = "Option::is_none")]
    vs_llama_ar: Option<f64>,
}

pub fn run(args: &SpeculativeBenchArgs) -> Result<()> {
    ensure!(
        args.temperatures
            .iter()
            .all(|t| sharpdraft_model::is_valid_temperature(*t)),
        "--temperatures {:?}: every temperature must lie in 0..={}",
        args.temperatures,
        sharpdraft_model::MAX_TEMPERATURE
    );
    ensure!(
        args.hf_python.is_none() || args.drafter.kind == DrafterKind::Vanilla,
        "--hf-python compares with HF's assisted generation, which drafts with a small LM: it needs --kind vanilla"
    );
    ensure!(
        args.llama_python.is_none() || args.drafter.kind == DrafterKind::Vanilla,
        "--llama-python compares with llama.cpp's speculation, which drafts with a small LM: it needs --kind vanilla"
    );
    super::bounds::ensure_within("rounds", args.rounds, 1, super::bounds::MAX_REPEATS)?;
    let target = args.model.load(&args.target)?;
    let tokenizer = target.tokenizer()?;
    let set = args.set.load(tokenizer, target.net.config.positions())?;
    let requests = build_requests(args, &target, &set)?;

    let decodings: Vec<Option<ScalingMode>> = std::iter::once(None)
        .chain(args.scaling_modes.modes.iter().copied().map(Some))
        .collect();
    let wait_budget = paired_rounds::wait_budget(args.rounds * requests.len() * decodings.len());
    warm_up(args, &target, &requests, &decodings)?;
    let mut rows = Vec::new();
    for request in &requests {
        let mut ar_ids: Option<Vec<i64>> = None;
        for round in 0..args.rounds {
            // AR first in round 0, then each scaling mode in turn: the order rotates a place a round.
            let mut order = decodings.clone();
            order.rotate_left(round % decodings.len());
            for decoding in order {
                let what = format!(
                    "{} of prompt {} (round {})",
                    decoding.map_or("AR".to_string(), |s| format!("scaling {}", s.name())),
                    request.prompt,
                    round + 1
                );
                let waiting = paired_rounds::waiting(paired_rounds::RETRIES, &wait_budget, &what);
                let row = match decoding {
                    None => {
                        let (row, ids) = decode_ar(args, &target, request, &waiting)?;
                        ar_ids.get_or_insert(ids);
                        row
                    }
                    Some(scaling) => {
                        let spec = args.drafter.with_scaling_mode(scaling);
                        decode_speculatively(
                            args,
                            &target,
                            request,
                            &spec,
                            &waiting,
                            ar_ids.as_deref(),
                        )?
                    }
                };
                let row = Row { round, ..row };
                report_row(&row);
                rows.push(row);
            }
        }
    }
    if let Some(python) = &args.hf_python {
        rows.extend(run_hf(python, args, &requests)?);
    }
    if let Some(python) = &args.llama_python {
        rows.extend(run_llama(python, args, &requests)?);
    }
    print_summaries(&rows, args.json);
    Ok(())
}

/// Untimed decodes before the measured ones: the target alone and each drafter decoding, a few tokens
/// of the first request, so the first measured decode does not read the weights' pages in (a model's
/// files are mapped, not read, at load).
fn warm_up(
    args: &SpeculativeBenchArgs,
    target: &CausalLm,
    requests: &[Request],
    decodings: &[Option<ScalingMode>],
) -> Result<()> {
    let Some(first) = requests.first() else {
        return Ok(());
    };
    let tokens = args.max_new_tokens.min(8);
    generate(
        &target.net,
        &first.ids,
        tokens,
        &mut Sampler::new(first.sampling),
        &[],
    )?;
    if let Some(scaling) = decodings.iter().flatten().next() {
        drafter_spec::decode_requests(
            &args.drafter.with_scaling_mode(*scaling),
            target,
            &[first.ids.as_slice()],
            tokens,
            None,
            |_| first.sampling,
        )
        .context("the warm-up decode")?;
    }
    Ok(())
}

/// The target alone's decode of `request`, measured with the load check: its row and its ids.
fn decode_ar(
    args: &SpeculativeBenchArgs,
    target: &CausalLm,
    request: &Request,
    waiting: &Waiting<'_>,
) -> Result<(Row, Vec<i64>)> {
    let kept = measure_quietly(waiting, || {
        generate(
            &target.net,
            &request.ids,
            args.max_new_tokens,
            &mut Sampler::new(request.sampling),
            &target.stop_tokens(),
        )
    })?;
    let ar = kept.value;
    let seconds = ar.ids.len() as f64 / ar.tokens_per_second();
    let mut row = request.row("workbench", "ar", ar.ids.len(), seconds);
    row.other_cpu_share = kept.other_share;
    Ok((row, ar.ids))
}

/// `spec`'s speculative decode of `request`, measured with the load check; greedy outputs checked
/// against the target alone's (`ar_ids`, once it has decoded).
fn decode_speculatively(
    args: &SpeculativeBenchArgs,
    target: &CausalLm,
    request: &Request,
    spec: &DrafterSpec,
    waiting: &Waiting<'_>,
    ar_ids: Option<&[i64]>,
) -> Result<Row> {
    let kept = measure_quietly(waiting, || {
        drafter_spec::decode_requests(
            spec,
            target,
            &[request.ids.as_slice()],
            args.max_new_tokens,
            None,
            |_| request.sampling,
        )
        .with_context(|| {
            format!(
                "prompt {}, --contexts {}",
                request.prompt, request.requested_context
            )
        })
    })?;
    let decoded = kept
        .value
        .into_iter()
        .next()
        .context("one request decoded")?
        .report;
    let mut row = request.row(
        "workbench",
        spec.scaling.mode.name(),
        decoded.ids.len(),
        decoded.total_seconds,
    );
    row.other_cpu_share = kept.other_share;
    row.tau = Some(decoded.tau());
    row.identical_to_ar = ar_ids
        .filter(|_| request.sampling.is_greedy())
        .map(|ar| ar == decoded.ids.as_slice());
    row.cycles = Some(CycleTimes {
        cycles: decoded.cycles.len(),
        draft_seconds: decoded.cycles.iter().map(|c| c.draft_seconds).sum(),
        verify_seconds: decoded.cycles.iter().map(|c| c.verify_seconds).sum(),
    });
    Ok(row)
}

/// One request per context x prompt x temperature: the prompt's ids (with `--prefix`), checked against
/// the target's positions with room for the new tokens.
fn build_requests(
    args: &SpeculativeBenchArgs,
    target: &CausalLm,
    set: &PromptSet,
) -> Result<Vec<Request>> {
    let tokenizer = target.tokenizer()?;
    let mut requests = Vec::new();
    for &requested in &args.set.contexts {
        for (i, question) in set.questions.iter().enumerate() {
            let question = match &args.prefix {
                Some(prefix) => format!("{prefix}\n\n{question}"),
                None => question.clone(),
            };
            let ids = set.ids(tokenizer, i, &question, requested)?;
            target
                .net
                .config
                .ensure_positions(ids.len(), args.max_new_tokens)
                .with_context(|| format!("--contexts {requested}, prompt {}", args.set.skip + i))?;
            for &temperature in &args.temperatures {
                requests.push(Request {
                    requested_context: requested,
                    prompt: args.set.skip + i,
                    ids: ids.clone(),
                    sampling: sampling(temperature, args.seed + i as u64),
                });
            }
        }
    }

    Ok(requests)
}

/// The summary of every (engine, decoding, context, temperature) group: JSON with the rows, or a table.
fn print_summaries(rows: &[Row], json: bool) {
    let summaries = summarise(rows);
    if json {
        println!(
            "{}",
            serde_json::json!({"rows": rows, "summary": summaries})
        );
    } else {
        println!(
            "{:<10} {:<9} {:>8} {:>5} {:>8} {:>10} {:>10} {:>8} {:>17} {:>6} {:>10} {:>8} {:>12} {:>14}",
            "engine",
            "decoding",
            "context",
            "temp",
            "prompts",
            "tokens/s",
            "AR tok/s",
            "speedup",
            "rounds: med (range)",
            "tau",
            "identical",
            "vs HF",
            "vs llama AR",
            "draft/verify s"
        );
        for s in &summaries {
            println!(
                "{:<10} {:<9} {:>8} {:>5} {:>8} {:>10.2} {:>10.2} {:>7.2}x {:>17} {:>6} {:>10} {:>8} {:>12} {:>14}",
                s.engine,
                s.decoding,
                s.requested_context,
                s.temperature,
                s.prompts,
                s.tokens_per_s,
                s.ar_tokens_per_s,
                s.speedup_vs_ar,
                {
                    let [median, low, high] = s.round_speedups;
                    format!("{median:.2} ({low:.2}-{high:.2})")
                },
                s.tau.map_or("-".into(), |t| format!("{t:.2}")),
                s.identical_to_ar
                    .map_or("-".into(), |n| format!("{n}/{}", s.prompts)),
                s.vs_hf_assisted.map_or("-".into(), |r| format!("{r:.2}x")),
                s.vs_llama_ar.map_or("-".into(), |r| format!("{r:.2}x")),
                match (s.draft_seconds_per_cycle, s.verify_seconds_per_cycle) {
                    (Some(d), Some(v)) => format!("{d:.3}/{v:.3}"),
                    _ => "-".into(),
                },
            );
        }
        for s in &summaries {
            let [_, low, high] = s.round_speedups;
            if high / low - 1.0 > paired_rounds::TRUSTED_SPREAD {
                println!(
                    "{} {} at {} tokens, T {}: the rounds' speed-ups range {low:.2}-{high:.2}x, more than {:.0}% apart: too wide to trust; run again on a quieter machine or with more --rounds",
                    s.engine,
                    s.decoding,
                    s.requested_context,
                    s.temperature,
                    100.0 * paired_rounds::TRUSTED_SPREAD
                );
            }
        }
    }
}

struct Request {
    requested_context: usize,
    prompt: usize,
    ids: Vec<i64>,
    sampling: Sampling,
}

impl Request {
    fn row(&self, engine: &'static str, decoding: &str, tokens: usize, seconds: f64) -> Row {
        Row {
            engine,
            decoding: decoding.to_string(),
            requested_context: self.requested_context,
            temperature: self.sampling.temperature,
            prompt: self.prompt,
            context: self.ids.len(),
            round: 0,
            other_cpu_share: f64::NAN,
            tokens,
            seconds,
            tau: None,
            identical_to_ar: None,
            cycles: None,
        }
    }
}

/// Temperature `t` over the whole vocabulary (greedy at 0).
fn sampling(temperature: f64, seed: u64) -> Sampling {
    Sampling {
        temperature,
        top_p: 1.0,
        top_k: 0,
        seed,
    }
}

/// Progress on stderr, one line a decode (stdout keeps the table or the JSON).
fn report_row(row: &Row) {
    eprintln!(
        "{:<9} {:<8} context {:>6} T {} prompt {:>3}: {:>4} tokens in {:>6.2} s ({:.2} tokens/s){}{}",
        row.engine,
        row.decoding,
        row.context,
        row.temperature,
        row.prompt,
        row.tokens,
        row.seconds,
        row.tokens as f64 / row.seconds.max(1e-9),
        row.tau.map_or(String::new(), |t| format!(", tau {t:.2}")),
        match row.identical_to_ar {
            Some(true) => ", = AR",
            Some(false) => ", DIFFERS from AR",
            None => "",
        }
    );
}

/// The speed-up of each round in which `members` decoded (their tokens/s over the same engine's AR of
/// the same requests in that round, pooled over prompts): [median, lowest, highest].
fn round_speedups(rows: &[Row], members: &[&Row]) -> [f64; 3] {
    let rounds: std::collections::BTreeSet<usize> = members.iter().map(|r| r.round).collect();
    let ratios: Vec<f64> = rounds
        .iter()
        .map(|&round| {
            let mine = || members.iter().copied().filter(move |r| r.round == round);
            let ar = rows.iter().filter(|r| {
                r.round == round
                    && r.decoding == "ar"
                    && mine().any(|m| {
                        m.engine == r.engine
                            && m.prompt == r.prompt
                            && m.requested_context == r.requested_context
                            && m.temperature == r.temperature
                    })
            });
            pooled_rate(mine()) / pooled_rate(ar)
        })
        .collect();
    paired_rounds::median_and_range(&ratios)
}

/// Tokens per second of `rows` pooled: their tokens over their seconds.
fn pooled_rate<'a>(rows: impl Iterator<Item = &'a Row>) -> f64 {
    let (tokens, seconds) = rows.fold((0usize, 0.0f64), |(t, s), r| (t + r.tokens, s + r.seconds));
    tokens as f64 / seconds.max(1e-9)
}

/// Pools rows per (engine, decoding, context, temperature), in the order they first appear, with each
/// speculative decoding's ratio to its engine's AR and (workbench) to HF's assisted generation.
fn summarise(rows: &[Row]) -> Vec<Summary> {
    let mut groups: Vec<(&'static str, &str, usize, f64)> = Vec::new();
    for r in rows {
        let key = (
            r.engine,
            r.decoding.as_str(),
            r.requested_context,
            r.temperature,
        );
        if !groups.contains(&key) {
            groups.push(key);
        }
    }
    let pooled = |engine: &str, decoding: &str, context: usize, temperature: f64| {
        let members: Vec<&Row> = rows
            .iter()
            .filter(|r| {
                r.engine == engine
                    && r.decoding == decoding
                    && r.requested_context == context
                    && r.temperature == temperature
            })
            .collect();
        let rate = pooled_rate(members.iter().copied());
        (members, rate)
    };
    groups
        .iter()
        .filter(|(_, decoding, ..)| *decoding != "ar")
        .map(|&(engine, decoding, context, temperature)| {
            let (members, rate) = pooled(engine, decoding, context, temperature);
            let (_, ar_rate) = pooled(engine, "ar", context, temperature);
            let times: Vec<CycleTimes> = members.iter().filter_map(|r| r.cycles).collect();
            let cycles: usize = times.iter().map(|t| t.cycles).sum();
            let per_cycle = |seconds: f64| (cycles > 0).then(|| seconds / cycles as f64);
            // Pooled tau: tokens emitted over target passes, each prompt emitting its tau per cycle.
            let emitted: f64 = members
                .iter()
                .filter_map(|r| Some(r.tau? * r.cycles?.cycles as f64))
                .sum();
            let tau = (cycles > 0).then(|| emitted / cycles as f64);
            let hf = (engine == "workbench")
                .then(|| pooled("hf", "assisted", context, temperature))
                .filter(|(m, _)| !m.is_empty())
                .map(|(_, hf_rate)| rate / hf_rate);
            let llama = (engine == "workbench")
                .then(|| pooled(LLAMA, "ar", context, temperature))
                .filter(|(m, _)| !m.is_empty())
                .map(|(_, llama_rate)| rate / llama_rate);
            let prompts: std::collections::BTreeSet<usize> =
                members.iter().map(|r| r.prompt).collect();
            Summary {
                engine,
                decoding: decoding.to_string(),
                requested_context: context,
                temperature,
                prompts: prompts.len(),
                tokens_per_s: rate,
                ar_tokens_per_s: ar_rate,
                speedup_vs_ar: rate / ar_rate,
                round_speedups: round_speedups(rows, &members),
                tau,
                // A prompt counts when its output equals AR's in every round.
                identical_to_ar: (temperature == 0.0).then(|| {
                    prompts
                        .iter()
                        .filter(|&&p| {
                            members
                                .iter()
                                .filter(|r| r.prompt == p)
                                .all(|r| r.identical_to_ar == Some(true))
                        })
                        .count()
                }),
                vs_hf_assisted: hf,
                vs_llama_ar: llama,
                draft_seconds_per_cycle: per_cycle(times.iter().map(|t| t.draft_seconds).sum()),
                verify_seconds_per_cycle: per_cycle(times.iter().map(|t| t.verify_seconds).sum()),
            }
        })
        .collect()
}

/// HF's AR and assisted generation on the same prompt ids: one process, every request in order.
fn run_hf(python: &Path, args: &SpeculativeBenchArgs, requests: &[Request]) -> Result<Vec<Row>> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/hf_assisted.py");
    let target_dir = registry::resolve(&args.target)?;
    let drafter_dir = registry::resolve(&args.drafter.checkpoint)?;
    let file = tempfile::NamedTempFile::new().context("a temporary file for HF's requests")?;
    let list: Vec<serde_json::Value> = requests
        .iter()
        .map(|r| {
            serde_json::json!({
                "prompt_ids": r.ids,
                "temperature": r.sampling.temperature,
                "seed": r.sampling.seed,
            })
        })
        .collect();
    std::fs::write(
        file.path(),
        serde_json::json!({ "requests": list }).to_string(),
    )?;
    eprintln!(
        "HF transformers: {} requests through {}",
        requests.len(),
        python.display()
    );
    let out = Command::new(python)
        .arg(&script)
        .arg("--target")
        .arg(&target_dir)
        .arg("--drafter")
        .arg(&drafter_dir)
        .arg("--requests")
        .arg(file.path())
        .args([
            "--max-new-tokens",
            &args.max_new_tokens.to_string(),
            "--draft-len",
            &args.drafter.draft_len.to_string(),
            "--stop-below",
            &args.drafter.stop_below.unwrap_or(0.0).to_string(),
            "--threads",
            &tch::get_num_threads().to_string(),
        ])
        .output()
        .with_context(|| format!("running {}", python.display()))?;
    ensure!(
        out.status.success(),
        "{} failed: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("{} printed no JSON object", script.display()))?;
    eprintln!(
        "HF transformers {} on torch {}",
        report["transformers"], report["torch"]
    );
    let results = report["rows"]
        .as_array()
        .filter(|rows| rows.len() == requests.len())
        .with_context(|| format!("{}: expected {} rows", script.display(), requests.len()))?;
    let mut rows = Vec::new();
    for (request, result) in requests.iter().zip(results) {
        let number = |key: &str| {
            result[key]
                .as_f64()
                .with_context(|| format!("{}: row without {key}", script.display()))
        };
        let ar = request.row(
            "hf",
            "ar",
            number("ar_tokens")? as usize,
            number("ar_seconds")?,
        );
        let mut assisted = request.row(
            "hf",
            "assisted",
            number("assisted_tokens")? as usize,
            number("assisted_seconds")?,
        );
        assisted.identical_to_ar = request
            .sampling
            .is_greedy()
            .then(|| result["identical"].as_bool() == Some(true));
        report_row(&ar);
        report_row(&assisted);
        rows.extend([ar, assisted]);
    }
    Ok(rows)
}

/// The engine name of llama.cpp's rows.
const LLAMA: &str = "llama.cpp";

/// llama.cpp (the xllamacpp wheel under `python`) on the target's GGUF file, alone (`ar`) and drafting
/// with the drafter's (`draft`, at most `--draft-len` drafts a chain), on the greedy requests' ids,
/// each ending where the model ends its turn. Its drafting output is checked against its own AR text.
fn run_llama(python: &Path, args: &SpeculativeBenchArgs, requests: &[Request]) -> Result<Vec<Row>> {
    let greedy: Vec<&Request> = requests.iter().filter(|r| r.sampling.is_greedy()).collect();
    ensure!(
        !greedy.is_empty(),
        "--llama-python decodes greedily: --temperatures needs a 0"
    );
    let target = registry::gguf_file(&args.target)
        .with_context(|| format!("--llama-python runs --target {}'s GGUF file", args.target))?;
    let drafter = registry::gguf_file(&args.drafter.checkpoint).with_context(|| {
        format!(
            "--llama-python runs --drafter {}'s GGUF file",
            args.drafter.checkpoint
        )
    })?;
    let prompts: Vec<Vec<i64>> = greedy.iter().map(|r| r.ids.clone()).collect();
    let python = python.display().to_string();
    let threads = tch::get_num_threads();
    // llama.cpp's `n_predict` is the prefill's token and `decode_tokens` more.
    let decode_tokens = args.max_new_tokens.saturating_sub(1) as i64;
    eprintln!(
        "llama.cpp: {} greedy requests through {python}, alone and drafting",
        greedy.len()
    );
    let run = |draft: Option<(&Path, usize)>| {
        super::bench::run_llama(
            &python,
            &target,
            draft,
            &prompts,
            decode_tokens,
            threads,
            true,
        )
    };
    let alone = run(None)?;
    let drafting = run(Some((&drafter, args.drafter.draft_len)))?;
    ensure!(
        alone.len() == greedy.len() && drafting.len() == greedy.len(),
        "llama.cpp answered {} and {} rows for {} requests",
        alone.len(),
        drafting.len(),
        greedy.len()
    );
    let mut rows = Vec::new();
    for ((request, ar), draft) in greedy.iter().zip(&alone).zip(&drafting) {
        let ar_row = request.row(LLAMA, "ar", ar.tokens, ar.seconds);
        let mut draft_row = request.row(LLAMA, "draft", draft.tokens, draft.seconds);
        draft_row.identical_to_ar = match (&ar.text, &draft.text) {
            (Some(a), Some(d)) => Some(a == d),
            _ => None,
        };
        report_row(&ar_row);
        report_row(&draft_row);
        rows.extend([ar_row, draft_row]);
    }
    let (drafts, accepted) = drafting
        .iter()
        .fold((0, 0), |(d, a), r| (d + r.drafts, a + r.accepted));
    eprintln!(
        "llama.cpp drafting: {accepted} of {drafts} drafts accepted ({:.0}%)",
        100.0 * accepted as f64 / drafts.max(1) as f64
    );
    Ok(rows)
}
