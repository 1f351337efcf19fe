//! `report.md`: the headline (tau, speed-up over the target alone, the paired verdict against the
//! unmodified drafter, one table per workload x drafter), the paired comparisons in full, the costs
//! (tokens/s, updates, memory per drafter x method x workload x context), where a cycle's time goes with the run's timing noise, tau per context bin along long generations,
//! acceptance by draft position x context, tau against the scaling slope, and PNG charts. Built from
//! the summary table, the acceptance rates and the timing noise ([`super::publish`]), which come from
//! the run's requests, so `sharpdraft report` rebuilds it at any time.

use crate::acceptance::PositionRate;
use crate::charts::{bar_chart, heat_map, panel_chart, Chart, HeatPanel, Panel, Series};
use crate::error::Result;
use crate::grid::{units, Unit, TARGET_ONLY};
use crate::head_to_head::HeadToHead;
use crate::intervals::{Interval, PairedRatio};
use crate::multiplicity::{Family, ALPHA};
use crate::outline::{Outline, Setting, SlopeRole};
use crate::partial_unit::PartialUnit;
use crate::records::CycleRecord;
use crate::records::RequestRow;
use crate::samples;
use crate::tables::SummaryRow;
use crate::timing_noise::VerifySpread;
use crate::unit_provenance::{self, UnitProvenance};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The summary's `rows` in the order `outline` lists its workloads, drafters and methods.
pub fn in_experiment_order(rows: &[SummaryRow], outline: &Outline) -> Vec<SummaryRow> {
    let mut rows = rows.to_vec();
    sort_as_experiment(&mut rows, outline);
    rows
}

/// Orders rows as the run's experiment lists workloads, drafters (the target alone first) and methods,
/// contexts ascending, bins along the generation.
fn sort_as_experiment(rows: &mut [SummaryRow], outline: &Outline) {
    let workloads: Vec<&str> = outline.workloads.iter().map(|w| w.name.as_str()).collect();
    let drafters: Vec<&str> = outline.drafters.iter().map(String::as_str).collect();
    let methods: Vec<&str> = outline.methods.iter().map(|m| m.name.as_str()).collect();
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

/// `estimate [lo, hi]`, or the estimate alone when there is no interval.
fn with_interval(v: &Interval, digits: usize) -> String {
    if v.known() {
        format!(
            "{} [{}, {}]",
            number(v.estimate, digits),
            number(v.lo, digits),
            number(v.hi, digits)
        )
    } else {
        number(v.estimate, digits)
    }
}

/// Fewer prompts than this in a cell give no verdict: a paired interval over a handful of prompts
/// cannot be wider than their range (2 of 2 faster is a sign test's one-sided p of 0.25).
pub const MIN_PROMPTS_FOR_VERDICT: i64 = 10;

/// A paired comparison's verdict: `higher` or `lower` where the test resolves after the report's
/// multiplicity adjustment (`p_adjusted` below [`ALPHA`]: [`crate::multiplicity`]), the ratio's
/// interval lies off 1 and the cell has at least [`MIN_PROMPTS_FOR_VERDICT`] prompts; `~` where
/// either the adjusted test or the interval does not resolve; `n < 10` where the prompts are too few
/// to decide either way. A verdict whose ratio lies inside the run's timing noise (`noise`: the 10th
/// to 90th percentile of ratios between arms doing the same work) says so.
pub fn verdict(
    ratio: &Interval,
    prompts: i64,
    p_adjusted: f64,
    noise: Option<&VerifySpread>,
) -> String {
    if prompts < MIN_PROMPTS_FOR_VERDICT {
        return format!("n < {MIN_PROMPTS_FOR_VERDICT}");
    }
    // NaN (no test: every ratio 1) never resolves.
    if !(p_adjusted < ALPHA) {
        return "~".into();
    }
    let word = if ratio.lo > 1.0 {
        "higher"
    } else if ratio.hi < 1.0 {
        "lower"
    } else {
        return "~".into();
    };
    match noise {
        Some(n) if (n.p10..=n.p90).contains(&ratio.estimate) => {
            format!("{word} (within timing noise)")
        }
        _ => word.to_string(),
    }
}

/// A p-value as a table cell: two significant digits, `< 0.001` below.
fn p_value(p: f64) -> String {
    if !p.is_finite() {
        "-".into()
    } else if p < 0.001 {
        "< 0.001".into()
    } else {
        format!("{p:.3}")
    }
}

/// One paired comparison as a table cell: the ratio with its interval and [`verdict`], on how many of
/// the `prompts` the first method was `ahead` (the word the table uses: "faster", "ahead"), the
/// signed-rank p and, for a test of the report's family, its Holm-adjusted p.
fn paired_cell(
    ratio: &Interval,
    count: i64,
    ahead: &str,
    prompts: i64,
    (p, p_adjusted): (f64, f64),
    noise: Option<&VerifySpread>,
) -> String {
    let adjusted = if p_adjusted.is_finite() {
        format!(", Holm {}", p_value(p_adjusted))
    } else {
        String::new()
    };
    format!(
        "{} {} ({count}/{prompts} {ahead}, p {}{adjusted})",
        with_interval(ratio, 2),
        verdict(ratio, prompts, p_adjusted, noise),
        p_value(p)
    )
}

/// How `row` compares with the reference method on the same drafter, workload and context: end to end
/// and for the decode alone, each the median over prompts of the ratio of the two arms' tokens/s on
/// the same request, as [`paired_cell`]s.
fn against_reference(row: &SummaryRow, noise: Option<&VerifySpread>) -> (String, String) {
    (
        paired_cell(
            &row.vs_reference,
            row.vs_reference_faster,
            "faster",
            row.prompts,
            (row.vs_reference_p, row.vs_reference_p_adjusted),
            noise,
        ),
        paired_cell(
            &row.decode_vs_reference,
            row.decode_vs_reference_faster,
            "faster",
            row.prompts,
            (
                row.decode_vs_reference_p,
                row.decode_vs_reference_p_adjusted,
            ),
            noise,
        ),
    )
}

/// A row's context as the headline prints it: the prompt length and its multiple of the drafter's
/// n0, or where a long generation started.
fn context_cell(r: &SummaryRow) -> String {
    if r.setting != Setting::LongGeneration && r.n0 > 0 {
        format!(
            "{} ({:.1} n0)",
            r.context,
            r.mean_prompt_tokens / r.n0 as f64
        )
    } else {
        r.context_label()
    }
}

/// The workload x drafter pairs that drafted, in the rows' order: one headline table each.
fn drafting_groups(rows: &[SummaryRow]) -> Vec<(&str, &str)> {
    let mut groups: Vec<(&str, &str)> = Vec::new();
    for r in rows
        .iter()
        .filter(|r| r.bin == "all" && r.drafter != TARGET_ONLY)
    {
        let group = (r.workload.as_str(), r.drafter.as_str());
        if !groups.contains(&group) {
            groups.push(group);
        }
    }
    groups
}

/// The headline: what a reader looks for, in eight columns, one table per workload x drafter (one
/// line per context x method): tau, the speed-ups over the target alone with their intervals, the
/// paired verdicts against the reference method, and whether the outputs are the target's. The
/// paired intervals and tests are in [`paired`], the costs in [`costs`].
pub fn headline(rows: &[SummaryRow], outline: &Outline, noise: Option<&VerifySpread>) -> String {
    let reference = outline.reference_method();
    let groups = drafting_groups(rows);
    if groups.is_empty() {
        return "No arm drafted: the target alone's tokens/s are under Costs.\n".into();
    }
    let mut out = String::new();
    for (workload, drafter) in groups {
        let _ = write!(
            out,
            "### {workload}, drafter {drafter}\n\n| context | method | prompts (requests) | tau | speed-up end to end | decode speed-up | vs {reference}: end to end / decode | = target's output |\n|---|---|---|---|---|---|---|---|\n",
            reference = reference.unwrap_or("-")
        );
        for r in rows
            .iter()
            .filter(|r| r.bin == "all" && r.workload == workload && r.drafter == drafter)
        {
            let paired = match reference {
                None => "-".to_string(),
                Some(reference) if r.method == reference => "(reference)".to_string(),
                Some(_) => format!(
                    "{} {} / {} {}",
                    number(r.vs_reference.estimate, 2),
                    verdict(&r.vs_reference, r.prompts, r.vs_reference_p_adjusted, noise),
                    number(r.decode_vs_reference.estimate, 2),
                    verdict(
                        &r.decode_vs_reference,
                        r.prompts,
                        r.decode_vs_reference_p_adjusted,
                        noise
                    ),
                ),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} ({}) | {} | {} | {} | {} | {} |",
                context_cell(r),
                r.method,
                r.prompts,
                r.requests,
                with_interval(&r.tau, 2),
                with_interval(&r.speedup, 2),
                with_interval(&r.decode_speedup, 2),
                paired,
                match r.matches_target {
                    1 => "yes",
                    0 => "**no**",
                    _ => "n/a",
                },
            );
        }
        out.push('\n');
    }
    out
}

/// The paired comparisons in full: each drafting method against the reference method on the same
/// drafter and requests, end to end and decode alone (ratio, interval, verdict, how many prompts it
/// was the faster on, the signed-rank p); `None` without a second method.
pub(crate) fn paired(
    rows: &[SummaryRow],
    outline: &Outline,
    noise: Option<&VerifySpread>,
) -> Option<String> {
    let reference = outline.reference_method()?;
    let compared: Vec<&SummaryRow> = rows
        .iter()
        .filter(|r| r.bin == "all" && r.drafter != TARGET_ONLY && r.method != reference)
        .collect();
    if compared.is_empty() {
        return None;
    }
    let mut out = format!(
        "| workload | context | drafter | method | prompts | vs {reference}, paired | decode vs {reference} |\n|---|---|---|---|---|---|---|\n"
    );
    for r in compared {
        let (vs, decode_vs) = against_reference(r, noise);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {vs} | {decode_vs} |",
            r.workload,
            context_cell(r),
            r.drafter,
            r.method,
            r.prompts,
        );
    }
    Some(out)
}

/// Each anchor against each other method ([`crate::head_to_head`]), a table per anchor with its
/// heading; `None` without an anchor or another method.
fn head_to_head_tables(cells: &[HeadToHead], noise: Option<&VerifySpread>) -> Option<String> {
    let mut out = String::new();
    let mut anchors: Vec<&str> = Vec::new();
    for c in cells {
        if !anchors.contains(&c.anchor.as_str()) {
            anchors.push(&c.anchor);
        }
    }
    for anchor in anchors {
        let of_anchor: Vec<&HeadToHead> = cells.iter().filter(|c| c.anchor == anchor).collect();
        out.push_str(&head_to_head_table(anchor, &of_anchor, noise));
    }
    (!out.is_empty()).then_some(out)
}

/// `anchor` against each other method, with its heading.
fn head_to_head_table(anchor: &str, cells: &[&HeadToHead], noise: Option<&VerifySpread>) -> String {
    let cell = |paired: &PairedRatio, prompts: usize, noise: Option<&VerifySpread>| {
        let (ahead, prompts) = (paired.ahead as i64, prompts as i64);
        paired_cell(
            &paired.ratio,
            ahead,
            "ahead",
            prompts,
            (paired.p, paired.p_adjusted),
            noise,
        )
    };
    let mut out = format!(
        "\n## `{anchor}` against each method, paired\n\n\
         Whether `{anchor}` beats the other methods of its drafter on the same prompts. \
         tau: `{anchor}`'s tau pooled over the prompts (tokens emitted over target passes) over \
         the method's on the same prompts, with its interval over prompts (tau is a count: pooled, a \
         comparison where many prompts tie exactly does not pin to 1 as a median of per-prompt ratios \
         would). Decode: per prompt the ratio of their decode tokens/s on the same requests, then the \
         median over prompts with its interval. Each with its verdict (as above; tau is counted, not \
         timed, so its verdict has no timing noise), how many prompts put `{anchor}` ahead, the \
         Wilcoxon signed-rank p of the per-prompt log ratios and its Holm-adjusted p. Above 1: \
         `{anchor}` ahead.\n\n\
         | workload | context | drafter | method | prompts | tau: {anchor} / method | decode: {anchor} / method |\n|---|---|---|---|---|---|---|\n"
    );
    for c in cells {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            c.workload,
            c.context,
            c.drafter,
            c.method,
            c.prompts,
            cell(&c.tau, c.prompts, None),
            cell(&c.decode, c.prompts, noise),
        );
    }
    out
}

/// What each arm costs beside its speed: its absolute tokens/s, how far its outputs loop, its
/// updates, memory, and the requests decoded again under load.
fn costs(rows: &[SummaryRow]) -> String {
    let mut out = String::from(
        "| workload | context | drafter | method | tokens/s | distinct 4-grams | updates (s) | adaptation MiB | drafter weights MiB | peak MiB | decoded again / still under load |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows.iter().filter(|r| r.bin == "all") {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} ({}) | {} | {} | {} | {} |",
            r.workload,
            context_cell(r),
            r.drafter,
            r.method,
            number(r.tokens_per_s.estimate, 1),
            number(r.distinct_4grams, 2),
            r.updates,
            number(r.update_seconds, 1),
            number(mib(r.adaptation_bytes), 1),
            number(mib(r.drafter_weight_bytes), 1),
            number(mib(r.peak_rss_bytes), 0),
            if r.loaded_requests > 0 {
                format!("{} / **{}**", r.retried_requests, r.loaded_requests)
            } else {
                format!("{} / 0", r.retried_requests)
            },
        );
    }
    out
}

/// Where a cycle's time goes, per drafting row: its drafting and verification against the target
/// alone's time per token on the same requests; `None` when no row drafted.
fn cycle_costs(rows: &[SummaryRow]) -> Option<String> {
    let drafting: Vec<&SummaryRow> = rows
        .iter()
        .filter(|r| r.bin == "all" && r.drafter != TARGET_ONLY && r.cycles > 0)
        .collect();
    if drafting.is_empty() {
        return None;
    }
    let mut out = String::from(
        "Medians over each row's cycles: drafting (proposing a block, and taking in the verified \
         tokens) and verifying (the target's pass over the block, the verdict, committing), beside the \
         target alone's decode time per token on the same requests. A cycle emits tau tokens, so \
         drafting pays where tau x the target's time per token exceeds the two together: the last \
         column is that ratio, the decode speed-up these medians predict. The first cycle's drafting \
         (median over requests) stands apart: a drafter that takes in the prompt on its first proposal, \
         not in its prefill, pays for it there, which the decode speed-up counts and these medians do not. \
         A gated method counts its plain target steps among its cycles (in brackets), and its medians \
         go over the cycles that drafted.\n\n\
         | workload | context | drafter | method | cycles | draft ms | verify ms | target alone, ms per token | verify / target's token | tau x target's token / cycle | first cycle's draft ms |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in drafting {
        let per_cycle = r.draft_ms + r.verify_ms;
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.workload,
            r.context_label(),
            r.drafter,
            r.method,
            if r.plain_cycles > 0 {
                format!("{} ({} plain)", r.cycles, r.plain_cycles)
            } else {
                r.cycles.to_string()
            },
            number(r.draft_ms, 1),
            number(r.verify_ms, 1),
            number(r.target_ms_per_token, 1),
            number(r.verify_ms / r.target_ms_per_token, 2),
            number(r.tau.estimate * r.target_ms_per_token / per_cycle, 2),
            number(r.first_draft_ms, 1),
        );
    }
    Some(out)
}

/// The run's timing noise, under the cycle costs: how far apart two arms verify that do the same work.
fn timing_noise(noise: &VerifySpread) -> String {
    format!(
        "\n**Timing noise.** Two arms of one drafter verify the same blocks on the same request: the \
         target's work, whatever the drafting method (retrieval arms, which also read the target's \
         attention as it runs, are left out). Here the ratio of two such arms' mean verifying time per \
         full block lies between {} and {} (10th to 90th percentile of {} ratios, each pair of arms both \
         ways round). A paired ratio between methods of equal tau within that range can be this noise, \
         not the method, above all on few requests.\n",
        number(noise.p10, 2),
        number(noise.p90, 2),
        noise.ratios
    )
}

/// tau per context bin along long generations, one column per bin.
fn generation_bins(rows: &[SummaryRow]) -> Option<String> {
    let binned: Vec<&SummaryRow> = rows
        .iter()
        .filter(|r| r.setting == Setting::LongGeneration && r.bin != "all")
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
    type Cells = BTreeMap<String, (Interval, i64)>;
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
                    let _ = write!(out, " {} ({cycles} cycles) |", with_interval(tau, 2));
                }
                None => out.push_str(" - |"),
            }
        }
        out.push('\n');
    }
    Some(out)
}

/// What a report is written from: the summary's rows, the run's timing noise, the acceptance per
/// draft position, and which units are finished (with the requests unfinished ones have).
pub struct ReportInputs<'a> {
    pub rows: &'a [SummaryRow],
    pub noise: Option<&'a VerifySpread>,
    pub acceptance: &'a [PositionRate],
    /// The calibrated schedule against each other method, paired over prompts.
    pub head_to_head: &'a [HeadToHead],
    /// The family of paired tests the verdicts were adjusted over.
    pub family: Family,
    /// Each unit's provenance.
    pub provenance: &'a [UnitProvenance],
    pub finished: &'a [&'a Unit],
    pub unfinished: &'a [PartialUnit],
}

/// Writes `report.md` and its charts into folder `dir` from `inputs` of `outline`; returns the
/// report's path.
pub fn write(dir: &Path, outline: &Outline, inputs: &ReportInputs) -> Result<PathBuf> {
    let rows = inputs.rows;
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Run {}\n\nExperiment `{}` (config hash `{}`), target `{}`, device {}, dtype {}, temperature {}.\n",
        outline.header.name,
        sharpdraft_store::paths::in_repository(&outline.header.file),
        outline.hash(),
        outline.header.target,
        outline.header.device,
        outline.header.dtype,
        outline.header.temperature,
    );
    md.push_str(&unfinished_units(outline, inputs.finished));
    let usual = unit_provenance::usual_digests(inputs.provenance);
    let flagged = inputs
        .provenance
        .iter()
        .filter(|u| !unit_provenance::flags(u, &usual).is_empty())
        .count();
    if flagged > 0 {
        let _ = writeln!(
            md,
            "**{flagged} of {} units are flagged under Provenance** (a tree with uncommitted changes, or drafter weights the other units did not run).\n",
            inputs.provenance.len()
        );
    }
    md.push_str(if outline.shared_prefill {
        "The target's prefill of each request is made once, taken again if it ran under load, and \
         handed to every arm, each decoding from its own copy of the cache: every arm's prefill and \
         end-to-end seconds count that prefill's measured seconds as its own (the drafter's own prefill \
         added), so a speed-up's two arms hold the same prefill time. "
    } else {
        "Every arm runs the target's prefill of each request itself (`timing: {shared_prefill: \
         false}`). "
    });
    md.push_str(
        "Timing is paired: within a unit (workload x context x seed x repeat) every request is decoded by \
         the target alone and by every drafter x method back to back, in an order that rotates from \
         request to request. The prompt is the unit of evidence: under greedy decoding the repeats and \
         seeds of one prompt emit the same tokens, so they are combined first (tau pooled over them, \
         each time by their median), and every interval and test goes over prompts. Speedup: the median \
         over prompts of tokens/s against the target alone on the same request, update time included; \
         decode speedup leaves the prefill out. Brackets: a 95% percentile-bootstrap interval over \
         prompts (2000 resamples; none with one prompt). tau: tokens per target pass (bonus included), \
         pooled over requests, with its interval over prompts. The headline's `vs` column compares each \
         method with the first drafting method on the same drafter, paired: the median over prompts of \
         the ratio of the two methods' tokens/s on the same request (end to end / the decode alone) \
         and its verdict; the table after it gives each ratio's interval, how many prompts the method \
         was the faster on, the two-sided Wilcoxon signed-rank p of the log ratios over prompts, and \
         that p adjusted for the report's family of tests (below). Verdict: `higher` or `lower` when \
         the adjusted p is below 0.05, the interval lies off 1 and the cell has at least 10 prompts; \
         `~` otherwise (these prompts do not resolve the difference); `n < 10` when the prompts are too \
         few for any verdict (an interval over a handful of prompts cannot be wider than their range: \
         over 2 prompts the brackets are the range of the 2). A verdict whose ratio lies within the \
         run's timing noise (below) says so. \
         Load: an arm whose decode of a request ran while other processes took more than 10% \
         of the cores is decoded again once the machine is quiet (the experiment's `timing:`); the last \
         column of Costs counts the requests decoded again, and those whose kept decode still ran under load \
         (`results.parquet` has each decode's share, and each unit's load average, steal and throttling). \
         `= target's output`: under greedy decoding, whether every request reproduced the target's own \
         output token for token (lossless verification says it must). \
         Memory: adaptation bytes exactly (adapters, optimizer state, gradients, buffer), the drafter's \
         weights, and the process's peak resident memory during a request. Raw rows: `results.parquet`, \
         `cycles.parquet` (from which `sharpdraft report` rebuilds everything here); this table: \
         `summary.parquet`; acceptance by draft position: `acceptance.parquet`.\n\n",
    );
    md.push_str(&family_statement(&inputs.family));
    md.push_str("\n## Headline\n\n");
    md.push_str(&headline(rows, outline, inputs.noise));
    if let Some(paired) = paired(rows, outline, inputs.noise) {
        md.push_str("\n## Paired against the reference method\n\n");
        md.push_str(&paired);
    }
    if let Some(table) = head_to_head_tables(inputs.head_to_head, inputs.noise) {
        md.push_str(&table);
    }
    md.push_str("\n## Costs\n\n");
    md.push_str(&costs(rows));
    if let Some(costs) = cycle_costs(rows) {
        md.push_str("\n## Where a cycle goes\n\n");
        md.push_str(&costs);
        if let Some(noise) = inputs.noise {
            md.push_str(&timing_noise(noise));
        }
    }
    if let Some(bins) = generation_bins(rows) {
        md.push_str(
            "\n## tau along long generations, by context bin (multiples of the drafter's n0)\n\n",
        );
        md.push_str(&bins);
    }
    if let Some(table) = acceptance_table(inputs.acceptance) {
        md.push_str("\n## Acceptance by draft position and context\n\n");
        md.push_str(&table);
    }
    if let Some(table) = slope_table(rows) {
        md.push_str("\n## tau and decode speed-up against the scaling slope\n\n");
        md.push_str(&table);
    }
    if let Some(table) = unit_provenance::table(inputs.provenance) {
        md.push_str("\n## Provenance\n\n");
        md.push_str(&table);
    }
    if let Some(requests) = unfinished_requests(outline, inputs.unfinished) {
        md.push_str("\n## Requests of unfinished units\n\n");
        md.push_str(&requests);
    }
    let charts = charts(dir, outline, rows, inputs.acceptance)?;
    if !charts.is_empty() {
        md.push_str("\n## Charts\n\n");
        for chart in charts {
            let _ = writeln!(md, "![{chart}]({chart})\n");
        }
    }
    let path = dir.join("report.md");
    sharpdraft_store::atomic_write::write_whole(&path, md)?;
    Ok(path)
}

/// The report's family of paired tests and what its adjustment leaves standing.
fn family_statement(family: &Family) -> String {
    if family.tests == 0 {
        return "Multiplicity: no cell has the prompts for a verdict, so the report states none.\n"
            .into();
    }
    format!(
        "Multiplicity: the report's family is its {} paired tests in cells of at least \
         {MIN_PROMPTS_FOR_VERDICT} prompts (each drafting method against the reference method, end to \
         end and decode; the calibrated schedule against each other method, tau and decode, where the \
         experiment has one). {} of them have p < {ALPHA} before adjustment, {} after Holm's step-down \
         adjustment over all {}, which keeps the chance of any false verdict in the family at {ALPHA}; \
         only those state `higher` or `lower`.\n",
        family.tests, family.raw_below_alpha, family.adjusted_below_alpha, family.tests
    )
}

/// The acceptance of each draft position given the earlier ones, per arm (rows) and context bin, one
/// column per position; `None` when no arm drafted.
fn acceptance_table(rates: &[PositionRate]) -> Option<String> {
    let depth = rates.iter().map(|r| r.position).max()?;
    let mut out = String::from(
        "P(draft position k accepted | positions 1..k-1 accepted), over every cycle of the arm whose \
         context (committed tokens when it drafted) falls in the bin, in multiples of the drafter's n0; \
         in brackets the cycles that reached position k. Softmax dilution, which query scaling \
         corrects, lowers whole rows as the bin grows; depth drift (a chain straying from the target as \
         it builds on its own guesses) tilts each row down from left to right at every context. The \
         heat map `acceptance_by_position.png` shows the same numbers.\n\n| workload | drafter | method | context bin |",
    );
    for k in 1..=depth {
        let _ = write!(out, " k = {k} |");
    }
    out.push_str("\n|---|---|---|---|");
    out.push_str(&"---|".repeat(depth));
    out.push('\n');
    let mut lines: BTreeMap<(usize, [String; 4]), Vec<&PositionRate>> = BTreeMap::new();
    let mut order = 0;
    let mut last: Option<[String; 4]> = None;
    for r in rates {
        let key = [
            r.workload.clone(),
            r.drafter.clone(),
            r.method.clone(),
            r.bin.clone(),
        ];
        if last.as_ref() != Some(&key) {
            order += 1;
            last = Some(key.clone());
        }
        lines.entry((order, key)).or_default().push(r);
    }
    for ((_, [workload, drafter, method, bin]), cells) in lines {
        let _ = write!(out, "| {workload} | {drafter} | {method} | {bin} |");
        for k in 1..=depth {
            match cells.iter().find(|r| r.position == k) {
                Some(r) => {
                    let _ = write!(out, " {} ({}) |", number(r.rate(), 2), r.reached);
                }
                None => out.push_str(" - |"),
            }
        }
        out.push('\n');
    }
    Some(out)
}

/// tau and the decode speed-up of every arm whose scaling has a slope (the unmodified drafter at 0, a
/// beta sweep, the calibrated schedule's mean slope, logn, YaRN and Llama 4 at their nominal slopes),
/// per workload, drafter and context; `None` where fewer than three slopes were run.
fn slope_table(rows: &[SummaryRow]) -> Option<String> {
    let sloped: Vec<&SummaryRow> = rows
        .iter()
        .filter(|r| r.bin == "all" && r.drafter != TARGET_ONLY && r.scaling_slope.is_finite())
        .collect();
    let mut slopes: Vec<f64> = sloped.iter().map(|r| r.scaling_slope).collect();
    slopes.sort_by(f64::total_cmp);
    slopes.dedup();
    if slopes.len() < 3 {
        return None;
    }
    let mut out = String::from(
        "Each arm at the slope beta its scaling drafts with: 0 for the unmodified drafter, the constant \
         of a beta sweep, the mean over heads of a calibrated schedule, and for the literature's fixed \
         rules their nominal slope (logn 1 / ln n0; YaRN 0.2, the slope of (1 + 0.1 ln(n / n0))^2 at n0; \
         Llama 4 0.1, its step function's envelope). The charts `slope_sensitivity.png` and \
         `slope_decode_speedup.png` draw tau and the decode speed-up against beta per context, the \
         calibrated schedule marked apart.\n\n\
         | workload | drafter | context | method | beta | prompts | tau | decode speedup |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    let mut ordered = sloped;
    ordered.sort_by(|a, b| {
        (&a.workload, &a.drafter, a.context)
            .cmp(&(&b.workload, &b.drafter, b.context))
            .then(a.scaling_slope.total_cmp(&b.scaling_slope))
    });
    for r in ordered {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            r.workload,
            r.drafter,
            r.context_label(),
            r.method,
            number(r.scaling_slope, 3),
            r.prompts,
            with_interval(&r.tau, 2),
            with_interval(&r.decode_speedup, 2),
        );
    }
    Some(out)
}

/// A paragraph naming the grid's units that are not among `finished` (a run still going, or killed, or
/// one shard of several); empty when the grid is whole.
fn unfinished_units(outline: &Outline, finished: &[&Unit]) -> String {
    const NAMED: usize = 8;
    let finished: BTreeSet<&Unit> = finished.iter().copied().collect();
    let grid = units(outline);
    let missing: Vec<&Unit> = grid.iter().filter(|u| !finished.contains(u)).collect();
    if missing.is_empty() {
        return String::new();
    }
    let mut named: Vec<String> = missing
        .iter()
        .take(NAMED)
        .map(|u| format!("`{}`", u.id()))
        .collect();
    if missing.len() > NAMED {
        named.push(format!("and {} more", missing.len() - NAMED));
    }
    format!(
        "**A part of the grid: {} of its {} units.** Not here: {} (`run --resume` decodes a stopped \
         run's, `merge` joins the shards that hold the others). Every figure below is over the units \
         here alone.\n\n",
        grid.len() - missing.len(),
        grid.len(),
        named.join(", ")
    )
}

/// Every arm's figures on each request that `unfinished` units have finished: in no table, chart or
/// median above, since a unit's medians wait for all its requests. Each speed-up is against the
/// target alone ([`samples::baseline`]) on the same request. None when there are none.
fn unfinished_requests(outline: &Outline, unfinished: &[PartialUnit]) -> Option<String> {
    let greedy = outline.header.temperature == 0.0;
    let with_requests: Vec<&PartialUnit> = unfinished
        .iter()
        .filter(|p| p.requests_done() > 0)
        .collect();
    if with_requests.is_empty() {
        return None;
    }
    let mut out = String::from(
        "**In no figure above.** A unit stopped part way keeps the requests all its arms have \
         finished in `units/partial/`, and `run --resume` goes on from the next one. Each request \
         stands alone here (no medians, no intervals): tau is tokens per target pass; the speed-ups \
         are tokens/s against the target alone on the same request, end to end and the decode alone; \
         drafting and verifying are the request's seconds in each, summed over its cycles.\n\n\
         | unit | prompt | drafter | method | tokens | tau | tokens/s | speed-up | decode only | \
         drafting s | verifying s | = target's output |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for partial in with_requests {
        let target = samples::baseline(outline, &partial.arms);
        for request in 0..partial.requests_done() {
            let reference = target.and_then(|a| a.requests.get(request));
            for arm in &partial.arms {
                // Records are checked to hold as many requests in every arm; one that does not
                // shows what it has.
                let Some(r) = arm.requests.get(request) else {
                    continue;
                };
                let ratio =
                    |of: fn(&RequestRow) -> f64| reference.map_or(f64::NAN, |t| of(r) / of(t));
                let same = match samples::matches_target(r, reference, greedy) {
                    _ if arm.arm.drafter.is_none() => "",
                    1 => "yes",
                    0 => "no",
                    _ => "-",
                };
                let seconds = |of: fn(&CycleRecord) -> f64| -> String {
                    if r.cycles.is_empty() {
                        String::new()
                    } else {
                        number(r.cycles.iter().map(of).sum(), 1)
                    }
                };
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {same} |",
                    partial.unit.id(),
                    r.prompt,
                    arm.arm.drafter_name(),
                    arm.arm.method,
                    r.generated,
                    number(r.tau(), 2),
                    number(r.tokens_per_second(), 2),
                    number(ratio(RequestRow::tokens_per_second), 2),
                    number(ratio(RequestRow::decode_tokens_per_second), 2),
                    seconds(|c| c.draft_seconds),
                    seconds(|c| c.verify_seconds),
                );
            }
        }
    }
    Some(out)
}

/// The colour index of each method, in the experiment's order: the same method has the same colour in
/// every chart.
fn method_colours(outline: &Outline) -> BTreeMap<String, usize> {
    outline
        .methods
        .iter()
        .enumerate()
        .map(|(i, m)| (m.name.clone(), i))
        .collect()
}

/// Draws the charts; returns their file names.
fn charts(
    dir: &Path,
    outline: &Outline,
    rows: &[SummaryRow],
    acceptance: &[PositionRate],
) -> Result<Vec<String>> {
    let colours = method_colours(outline);
    let colour = |method: &str| colours.get(method).copied().unwrap_or(0);
    let mut written: Vec<String> = [
        tau_chart(dir, rows, &colour)?,
        speedup_chart(dir, rows, &colour)?,
        memory_chart(dir, rows)?,
    ]
    .into_iter()
    .flatten()
    .collect();
    let slope_charts: [(&str, &str, &str, fn(&SummaryRow) -> Interval); 2] = [
        (
            "slope_sensitivity.png",
            "tau against the scaling slope beta, per context (95% intervals)",
            "tau (tokens per target pass)",
            |r| r.tau,
        ),
        (
            "slope_decode_speedup.png",
            "decode speed-up against the scaling slope beta, per context (95% intervals)",
            "decode tokens/s ratio over the target alone",
            |r| r.decode_speedup,
        ),
    ];
    for (file, title, y_label, value) in slope_charts {
        if let Some(panels) = slope_panels(outline, rows, value) {
            panel_chart(
                &dir.join(file),
                &Chart {
                    title,
                    x_label: "beta (0: the unmodified drafter)",
                    y_label,
                    log_x: false,
                    reference_y: None,
                },
                &panels,
            )?;
            written.push(file.to_string());
        }
    }
    let heat = acceptance_panels(acceptance);
    if !heat.is_empty() {
        heat_map(
            &dir.join("acceptance_by_position.png"),
            "P(position k accepted | 1..k-1 accepted), per context bin (multiples of n0)",
            &heat,
        )?;
        written.push("acceptance_by_position.png".to_string());
    }
    Ok(written)
}

/// tau against context, one panel per workload x drafter, one line per method (in its `colour`):
/// long prompts at their start length, long generations per bin (at the bin's geometric middle),
/// both in multiples of n0. Returns the file's name, `None` where no drafting row has a point.
fn tau_chart(
    dir: &Path,
    rows: &[SummaryRow],
    colour: &dyn Fn(&str) -> usize,
) -> Result<Option<String>> {
    let mut tau: BTreeMap<(String, String), Series> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.n0 > 0) {
        let x = if r.setting == Setting::LongPrompt && r.bin == "all" {
            r.mean_prompt_tokens / r.n0 as f64
        } else if r.setting == Setting::LongGeneration && r.bin != "all" && r.bin_hi_n0.is_finite()
        {
            (r.bin_lo_n0.max(r.bin_hi_n0 / 2.0) * r.bin_hi_n0).sqrt()
        } else {
            continue;
        };
        tau.entry(panel_key(r))
            .or_insert_with(|| Series::new(&r.method, colour(&r.method)))
            .push(x, r.tau.estimate, (r.tau.lo, r.tau.hi));
    }
    if tau.is_empty() {
        return Ok(None);
    }
    panel_chart(
        &dir.join("tau_vs_context.png"),
        &Chart {
            title: "tau against context (95% intervals)",
            x_label: "context (multiples of the drafter's n0)",
            y_label: "tau (tokens per target pass)",
            log_x: true,
            reference_y: None,
        },
        &panels(tau),
    )?;
    Ok(Some("tau_vs_context.png".to_string()))
}

/// Speed-up against the context at the start (long prompt: the excerpt and question; long
/// generation: the prompt it grows from), in tokens: one panel per workload x drafter, one line per
/// method (in its `colour`). Returns the file's name, `None` where no row has a speed-up.
fn speedup_chart(
    dir: &Path,
    rows: &[SummaryRow],
    colour: &dyn Fn(&str) -> usize,
) -> Result<Option<String>> {
    let mut speedup: BTreeMap<(String, String), Series> = BTreeMap::new();
    for r in rows
        .iter()
        .filter(|r| r.bin == "all" && r.drafter != TARGET_ONLY && r.speedup.estimate.is_finite())
    {
        speedup
            .entry(panel_key(r))
            .or_insert_with(|| Series::new(&r.method, colour(&r.method)))
            .push(
                r.mean_prompt_tokens.max(1.0),
                r.speedup.estimate,
                (r.speedup.lo, r.speedup.hi),
            );
    }
    if speedup.is_empty() {
        return Ok(None);
    }
    panel_chart(
        &dir.join("speedup.png"),
        &Chart {
            title: "speed-up over the target alone (median, 95% intervals)",
            x_label: "tokens of context when decoding starts",
            y_label: "tokens/s ratio, paired per request",
            log_x: true,
            reference_y: Some(1.0),
        },
        &panels(speedup),
    )?;
    Ok(Some("speedup.png".to_string()))
}

/// The drafter's memory (weights and adaptation state) per drafter and method, as bars. Returns the
/// file's name, `None` where no row drafted.
fn memory_chart(dir: &Path, rows: &[SummaryRow]) -> Result<Option<String>> {
    let memory = memory_bars(
        rows.iter()
            .filter(|r| r.bin == "all" && r.drafter != TARGET_ONLY)
            .map(|r| {
                (
                    r.drafter.as_str(),
                    r.method.as_str(),
                    r.adaptation_bytes + r.drafter_weight_bytes,
                )
            }),
    );
    if memory.is_empty() {
        return Ok(None);
    }
    bar_chart(
        &dir.join("memory.png"),
        &Chart {
            title: "drafter memory: weights + adaptation state (the most over the grid's cells)",
            x_label: "MiB",
            y_label: "",
            log_x: false,
            reference_y: None,
        },
        &memory,
    )?;
    Ok(Some("memory.png".to_string()))
}

/// The panels of a slope chart of `value` (tau, or the decode speed-up), one per workload and
/// drafter: a line per context through the constant-beta arms, and the calibrated schedule's points as
/// a series of their own; `None` where no panel has three constant slopes (no sweep was run).
fn slope_panels(
    outline: &Outline,
    rows: &[SummaryRow],
    value: fn(&SummaryRow) -> Interval,
) -> Option<Vec<Panel>> {
    let role = |name: &str| outline.method(name).map_or(SlopeRole::Apart, |m| m.slope);
    let whole: Vec<&SummaryRow> = rows
        .iter()
        .filter(|r| r.bin == "all" && r.drafter != TARGET_ONLY && r.scaling_slope.is_finite())
        .collect();
    let mut contexts: Vec<usize> = whole.iter().map(|r| r.context as usize).collect();
    contexts.sort_unstable();
    contexts.dedup();
    let calibrated_colour = contexts.len();
    let mut lines: BTreeMap<(String, String), Series> = BTreeMap::new();
    for r in &whole {
        let (name, colour) = match role(&r.method) {
            SlopeRole::Constant => {
                let c = contexts
                    .iter()
                    .position(|&c| c == r.context as usize)
                    .unwrap_or(0);
                (format!("context {}", r.context_label()), c)
            }
            SlopeRole::Calibrated => ("calibrated schedule".to_string(), calibrated_colour),
            SlopeRole::Apart => continue,
        };
        lines
            .entry((
                format!("{} {}", r.workload, r.drafter),
                format!("{colour:04}"),
            ))
            .or_insert_with(|| Series::new(name, colour))
            .push(
                r.scaling_slope,
                value(r).estimate,
                (value(r).lo, value(r).hi),
            );
    }
    let swept = lines.values().any(|s| {
        let mut betas: Vec<f64> = s.points.iter().map(|p| p.0).collect();
        betas.sort_by(f64::total_cmp);
        betas.dedup();
        s.colour != Some(calibrated_colour) && betas.len() >= 3
    });
    swept.then(|| panels(lines))
}

/// The heat map's panels: one per workload x drafter x method, rows the context bins, columns the
/// draft positions.
fn acceptance_panels(rates: &[PositionRate]) -> Vec<HeatPanel> {
    let mut out: Vec<HeatPanel> = Vec::new();
    let depth = rates.iter().map(|r| r.position).max().unwrap_or(0);
    for r in rates {
        let title = format!("{} {} / {}", r.workload, r.drafter, r.method);
        if out.last().is_none_or(|p| p.title != title) {
            out.push(HeatPanel {
                title,
                rows: Vec::new(),
                columns: (1..=depth).map(|k| format!("k = {k}")).collect(),
                values: Vec::new(),
            });
        }
        let panel = out.last_mut().expect("pushed above");
        if panel.rows.last() != Some(&r.bin) {
            panel.rows.push(r.bin.clone());
            panel.values.push(vec![f64::NAN; depth]);
        }
        if let Some(cell) = panel
            .values
            .last_mut()
            .and_then(|row| row.get_mut(r.position - 1))
        {
            *cell = r.rate();
        }
    }
    out
}

/// One bar per drafter x method from `(drafter, method, bytes)` cells, in the order they first come:
/// the most MiB over the cells (workloads and contexts), since a drafter's weights and adaptation state
/// hardly change with them and a bar per cell repeated each one (twenty arms x five units: a hundred).
fn memory_bars<'r>(cells: impl IntoIterator<Item = (&'r str, &'r str, i64)>) -> Vec<(String, f64)> {
    let mut bars: Vec<(String, f64)> = Vec::new();
    for (drafter, method, bytes) in cells {
        let label = format!("{drafter} / {method}");
        match bars.iter_mut().find(|(l, _)| *l == label) {
            Some((_, most)) => *most = most.max(mib(bytes)),
            None => bars.push((label, mib(bytes))),
        }
    }
    bars
}

/// Where a row's line goes in a chart of panels: the panel (workload and drafter) and the method.
fn panel_key(r: &SummaryRow) -> (String, String) {
    (format!("{} {}", r.workload, r.drafter), r.method.clone())
}

/// The lines keyed by [`panel_key`], one panel per workload and drafter (in name order), each line's
/// points in x order and the lines in the experiment's order of methods (their colours).
fn panels(lines: BTreeMap<(String, String), Series>) -> Vec<Panel> {
    let mut panels: Vec<Panel> = Vec::new();
    for ((title, _method), mut series) in lines {
        series.sort();
        match panels.last_mut() {
            Some(panel) if panel.title == title => panel.series.push(series),
            _ => panels.push(Panel {
                title,
                series: vec![series],
            }),
        }
    }
    for panel in &mut panels {
        panel.series.sort_by_key(|s| s.colour);
    }
    panels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_has_one_bar_per_drafter_and_method_at_its_largest() {
        let mib = 1 << 20;
        let bars = memory_bars([
            ("dflash", "unmodified", 300 * mib),
            ("dflash", "online-full", 1500 * mib),
            ("dflash", "unmodified", 310 * mib),
            ("eagle", "unmodified", 200 * mib),
        ]);
        assert_eq!(
            bars,
            [
                ("dflash / unmodified".to_string(), 310.0),
                ("dflash / online-full".to_string(), 1500.0),
                ("eagle / unmodified".to_string(), 200.0),
            ]
        );
    }

    #[test]
    fn each_workload_and_drafter_gets_a_panel_with_its_methods_in_the_experiments_order() {
        let mut lines = BTreeMap::new();
        for (panel, method, colour) in [
            ("code dflash", "window", 5),
            ("code dflash", "unmodified", 0),
            ("code eagle", "fixed", 1),
            ("code dflash", "fixed", 1),
        ] {
            let mut series = Series::new(method, colour);
            series.push(8192.0, 1.0, (f64::NAN, f64::NAN));
            series.push(256.0, 1.5, (f64::NAN, f64::NAN));
            lines.insert((panel.to_string(), method.to_string()), series);
        }
        let panels = panels(lines);
        let titles: Vec<&str> = panels.iter().map(|p| p.title.as_str()).collect();
        assert_eq!(titles, ["code dflash", "code eagle"]);
        let methods: Vec<&str> = panels[0].series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(methods, ["unmodified", "fixed", "window"]);
        assert_eq!(
            panels[0].series[0].points,
            [(256.0, 1.5), (8192.0, 1.0)],
            "points in x order"
        );
    }
}
