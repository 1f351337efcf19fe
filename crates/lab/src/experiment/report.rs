//! `sharpdraft report RUN_DIR`: `report.md` with the headline table (tau, speedup over the target
//! alone, update seconds, memory per drafter x method x workload x context), tau per context bin along
//! long generations, and PNG charts: tau against context per drafter and method, speedup bars and
//! memory bars. Built from the summary table alone, so `sharpdraft report` rebuilds it at any time.

use super::config::Experiment;
use super::grid::TARGET_ONLY;
use crate::error::Result;
use crate::plot::{bar_chart, line_chart, Chart, Series};
use crate::table::Table;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One summary row, as the report reads it.
#[derive(Debug, Clone)]
pub struct SummaryRow {
    pub drafter: String,
    pub method: String,
    pub workload: String,
    pub setting: String,
    pub context: i64,
    pub bin: String,
    pub bin_lo_n0: f64,
    pub bin_hi_n0: f64,
    pub n0: i64,
    pub requests: i64,
    pub mean_prompt_tokens: f64,
    pub cycles: i64,
    pub tau: f64,
    /// Mean share of distinct 4-grams in the outputs (low: the outputs loop).
    pub distinct_4grams: f64,
    pub speedup: f64,
    pub tokens_per_s: f64,
    pub update_seconds: f64,
    pub updates: i64,
    pub adaptation_bytes: i64,
    pub drafter_weight_bytes: i64,
    pub peak_rss_bytes: i64,
    /// 1: every request reproduced the target's greedy output; 0: one did not; -1: not comparable.
    pub matches_target: i64,
}

/// The rows of a summary table ([`super::tables::build`]), in the order `experiment` lists its
/// workloads, drafters and methods.
pub fn summary_rows(t: &Table, experiment: &Experiment) -> Result<Vec<SummaryRow>> {
    if t.columns.is_empty() {
        return Ok(Vec::new());
    }
    let s = |n: &str| t.strs(n).map(|v| v.to_vec());
    let i = |n: &str| t.i64s(n).map(|v| v.to_vec());
    let f = |n: &str| t.f64s(n).map(|v| v.to_vec());
    let (drafter, method, workload, setting, bin) = (
        s("drafter")?,
        s("method")?,
        s("workload")?,
        s("setting")?,
        s("bin")?,
    );
    let (context, n0, requests, cycles, updates) = (
        i("context")?,
        i("n0")?,
        i("requests")?,
        i("cycles")?,
        i("updates")?,
    );
    let (adaptation, weights, peak, matches) = (
        i("adaptation_bytes")?,
        i("drafter_weight_bytes")?,
        i("peak_rss_bytes")?,
        i("matches_target")?,
    );
    let distinct = f("distinct_4grams")?;
    let (lo, hi, prompt_tokens, tau, speedup, tps, update_s) = (
        f("bin_lo_n0")?,
        f("bin_hi_n0")?,
        f("mean_prompt_tokens")?,
        f("tau")?,
        f("speedup")?,
        f("tokens_per_s")?,
        f("update_seconds")?,
    );
    Ok((0..t.rows())
        .map(|r| SummaryRow {
            drafter: drafter[r].clone(),
            method: method[r].clone(),
            workload: workload[r].clone(),
            setting: setting[r].clone(),
            context: context[r],
            bin: bin[r].clone(),
            bin_lo_n0: lo[r],
            bin_hi_n0: hi[r],
            n0: n0[r],
            requests: requests[r],
            mean_prompt_tokens: prompt_tokens[r],
            cycles: cycles[r],
            tau: tau[r],
            distinct_4grams: distinct[r],
            speedup: speedup[r],
            tokens_per_s: tps[r],
            update_seconds: update_s[r],
            updates: updates[r],
            adaptation_bytes: adaptation[r],
            drafter_weight_bytes: weights[r],
            peak_rss_bytes: peak[r],
            matches_target: matches[r],
        })
        .collect::<Vec<_>>())
    .map(|mut rows| {
        sort_as_experiment(&mut rows, experiment);
        rows
    })
}

/// Orders rows as the run's experiment lists workloads, drafters (the target alone first) and methods,
/// contexts ascending, bins along the generation.
fn sort_as_experiment(rows: &mut [SummaryRow], experiment: &Experiment) {
    let workloads: Vec<&str> = experiment
        .workloads
        .iter()
        .map(|w| w.name.as_str())
        .collect();
    let drafters: Vec<&str> = experiment
        .drafters
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    let methods: Vec<&str> = experiment.methods.iter().map(|m| m.name.as_str()).collect();
    let rank =
        |names: &[&str], name: &str| names.iter().position(|n| *n == name).unwrap_or(usize::MAX);
    rows.sort_by(|a, b| {
        let key = |r: &SummaryRow| {
            (
                rank(&workloads, &r.workload),
                r.context,
                if r.drafter == TARGET_ONLY {
                    0
                } else {
                    1 + rank(&drafters, &r.drafter).min(usize::MAX - 1)
                },
                rank(&methods, &r.method),
            )
        };
        key(a)
            .cmp(&key(b))
            .then(a.bin_lo_n0.total_cmp(&b.bin_lo_n0))
    });
}

fn mib(bytes: i64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

fn number(v: f64, digits: usize) -> String {
    if v.is_finite() {
        format!("{v:.digits$}")
    } else {
        "-".into()
    }
}

/// The headline table (one line per drafter x method x workload x context) as markdown.
pub fn headline(rows: &[SummaryRow]) -> String {
    let mut out = String::from(
        "| workload | context | drafter | method | requests | tau | speedup vs target alone | tokens/s | = target's output | distinct 4-grams | updates (s) | adaptation MiB | drafter weights MiB | peak MiB |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows.iter().filter(|r| r.bin == "all") {
        let context = if r.setting == "long_generation" {
            format!("generation from {:.0}", r.mean_prompt_tokens)
        } else if r.n0 > 0 {
            format!(
                "{} ({:.1} n0)",
                r.context,
                r.mean_prompt_tokens / r.n0 as f64
            )
        } else {
            r.context.to_string()
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} ({}) | {} | {} | {} |",
            r.workload,
            context,
            r.drafter,
            r.method,
            r.requests,
            number(r.tau, 2),
            number(r.speedup, 2),
            number(r.tokens_per_s, 1),
            match (r.drafter == TARGET_ONLY, r.matches_target) {
                (true, _) => "-",
                (false, 1) => "yes",
                (false, 0) => "**no**",
                _ => "n/a",
            },
            number(r.distinct_4grams, 2),
            r.updates,
            number(r.update_seconds, 1),
            number(mib(r.adaptation_bytes), 1),
            number(mib(r.drafter_weight_bytes), 1),
            number(mib(r.peak_rss_bytes), 0),
        );
    }
    out
}

/// tau per context bin along long generations, one column per bin.
fn generation_bins(rows: &[SummaryRow]) -> Option<String> {
    let binned: Vec<&SummaryRow> = rows
        .iter()
        .filter(|r| r.setting == "long_generation" && r.bin != "all")
        .collect();
    if binned.is_empty() {
        return None;
    }
    let mut edges: Vec<(f64, String)> = binned
        .iter()
        .map(|r| (r.bin_lo_n0, r.bin.clone()))
        .collect();
    edges.sort_by(|a, b| a.0.total_cmp(&b.0));
    edges.dedup_by(|a, b| a.1 == b.1);
    let mut out = String::from(
        "Outputs that loop make these figures measure the loop: the headline's distinct 4-grams \
         column says (near 1 for prose).\n\n| workload | drafter | method |",
    );
    for (_, label) in &edges {
        let _ = write!(out, " {label} |");
    }
    out.push_str("\n|---|---|---|");
    out.push_str(&"---|".repeat(edges.len()));
    out.push('\n');
    // (workload, drafter, method) -> bin label -> (tau, cycles)
    type Cells = BTreeMap<String, (f64, i64)>;
    let mut lines: BTreeMap<(String, String, String), Cells> = BTreeMap::new();
    for r in binned {
        lines
            .entry((r.workload.clone(), r.drafter.clone(), r.method.clone()))
            .or_default()
            .insert(r.bin.clone(), (r.tau, r.cycles));
    }
    for ((workload, drafter, method), cells) in lines {
        let _ = write!(out, "| {workload} | {drafter} | {method} |");
        for (_, label) in &edges {
            match cells.get(label) {
                Some((tau, cycles)) => {
                    let _ = write!(out, " {tau:.2} ({cycles} cycles) |");
                }
                None => out.push_str(" - |"),
            }
        }
        out.push('\n');
    }
    Some(out)
}

/// Writes `report.md` and its charts into run folder `dir` from the summary `rows` of `experiment`;
/// returns the report's path.
pub fn write(dir: &Path, experiment: &Experiment, rows: &[SummaryRow]) -> Result<PathBuf> {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Run {}\n\nExperiment `{}` (config hash `{}`), target `{}`, device {}, dtype {}, temperature {}.\n",
        experiment.name,
        experiment.file.display(),
        experiment.hash(),
        experiment.target,
        experiment.device,
        experiment.dtype,
        experiment.temperature,
    );
    md.push_str(
        "tau: tokens per target pass (bonus included), pooled over requests. Speedup: geometric mean over \
         requests of tokens/s against the target alone on the same request (update time included). \
         `= target's output`: under greedy decoding, whether every request reproduced the target's own \
         output token for token (lossless verification says it must). \
         Memory: adaptation bytes exactly (adapters, optimizer state, gradients, buffer), the drafter's \
         weights, and the process's peak resident memory during the unit. Raw rows: `results.parquet`, \
         `cycles.parquet`; this table: `summary.parquet`.\n\n## Headline\n\n",
    );
    md.push_str(&headline(rows));
    if let Some(bins) = generation_bins(rows) {
        md.push_str(
            "\n## tau along long generations, by context bin (multiples of the drafter's n0)\n\n",
        );
        md.push_str(&bins);
    }
    let charts = charts(dir, rows)?;
    if !charts.is_empty() {
        md.push_str("\n## Charts\n\n");
        for chart in charts {
            let _ = writeln!(md, "![{chart}]({chart})\n");
        }
    }
    let path = dir.join("report.md");
    crate::atomic_write::write_whole(&path, md)?;
    Ok(path)
}

/// Draws the charts; returns their file names.
fn charts(dir: &Path, rows: &[SummaryRow]) -> Result<Vec<String>> {
    let mut written = Vec::new();
    let drafting: Vec<&SummaryRow> = rows.iter().filter(|r| r.n0 > 0).collect();
    // tau against context: long prompts at their start length, long generations per bin (at the
    // bin's geometric middle), both in multiples of n0.
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for r in &drafting {
        let x = if r.setting == "long_prompt" && r.bin == "all" {
            r.mean_prompt_tokens / r.n0 as f64
        } else if r.setting == "long_generation" && r.bin != "all" && r.bin_hi_n0.is_finite() {
            (r.bin_lo_n0.max(r.bin_hi_n0 / 2.0) * r.bin_hi_n0).sqrt()
        } else {
            continue;
        };
        series
            .entry(format!("{} {} / {}", r.workload, r.drafter, r.method))
            .or_default()
            .push((x, r.tau));
    }
    if !series.is_empty() {
        let series: Vec<Series> = series
            .into_iter()
            .map(|(name, mut points)| {
                points.sort_by(|a, b| a.0.total_cmp(&b.0));
                Series { name, points }
            })
            .collect();
        line_chart(
            &dir.join("tau_vs_context.png"),
            &Chart {
                title: "tau against context",
                x_label: "context (multiples of the drafter's n0)",
                y_label: "tau (tokens per target pass)",
                log_x: true,
            },
            &series,
        )?;
        written.push("tau_vs_context.png".to_string());
    }
    let whole: Vec<&SummaryRow> = rows.iter().filter(|r| r.bin == "all").collect();
    let label =
        |r: &SummaryRow| format!("{} {} / {} @{}", r.workload, r.drafter, r.method, r.context);
    let speedups: Vec<(String, f64)> = whole
        .iter()
        .filter(|r| r.drafter != TARGET_ONLY && r.speedup.is_finite())
        .map(|r| (label(r), r.speedup))
        .collect();
    if !speedups.is_empty() {
        bar_chart(
            &dir.join("speedup.png"),
            &Chart {
                title: "speedup over the target alone",
                x_label: "tokens/s ratio (geometric mean over requests)",
                y_label: "",
                log_x: false,
            },
            &speedups,
        )?;
        written.push("speedup.png".to_string());
    }
    let memory: Vec<(String, f64)> = whole
        .iter()
        .filter(|r| r.drafter != TARGET_ONLY)
        .map(|r| (label(r), mib(r.adaptation_bytes + r.drafter_weight_bytes)))
        .collect();
    if !memory.is_empty() {
        bar_chart(
            &dir.join("memory.png"),
            &Chart {
                title: "drafter memory: weights + adaptation state",
                x_label: "MiB",
                y_label: "",
                log_x: false,
            },
            &memory,
        )?;
        written.push("memory.png".to_string());
    }
    Ok(written)
}
