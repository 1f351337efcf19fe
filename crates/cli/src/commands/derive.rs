//! `sharpdraft derive`: Model A (derivations/top-k-mass-scaling.md §2, §5) evaluated at one context length.

use clap::error::ErrorKind;
use clap::{Args, CommandFactory};
use serde::Serialize;
use sharpdraft_math::{CorrectionReach, DeployedSlopes, MathError, ModelA};

#[derive(Args, Debug)]
pub struct DeriveArgs {
    /// Size of the top set whose softmax mass is preserved.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub k: u32,
    /// Logit advantage Delta of the k relevant keys over the background mean.
    #[arg(long, allow_negative_numbers = true)]
    pub delta: f64,
    /// Standard deviation sigma of the background logits (>= 0).
    #[arg(long, allow_negative_numbers = true)]
    pub sigma: f64,
    /// The drafter's training length n0 (> k).
    #[arg(long, allow_negative_numbers = true)]
    pub n0: f64,
    /// Context length n at which to evaluate (> k).
    #[arg(long, allow_negative_numbers = true)]
    pub n: f64,
    /// End of the deployment range [n0, range-end] the fixed slopes are fitted over (default: n).
    #[arg(long, allow_negative_numbers = true)]
    pub range_end: Option<f64>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `n_max` as JSON: a number, the string "inf", or null (no correction exists: D <= 0).
#[derive(Serialize)]
#[serde(untagged)]
enum NMax {
    Finite(f64),
    Unbounded(&'static str),
}

#[derive(Serialize)]
struct MassRatio {
    tangent: f64,
    secant: Option<f64>,
    minimax: f64,
    ls: Option<f64>,
    exact: Option<f64>,
    uncorrected: f64,
}

#[derive(Serialize)]
struct Derivation {
    s_exact: Option<f64>,
    n_max: Option<NMax>,
    #[serde(rename = "D")]
    d: f64,
    beta_tangent: f64,
    beta_secant: Option<f64>,
    beta_minimax: f64,
    beta_ls: Option<f64>,
    mass_ratio: MassRatio,
}

/// A domain error in the arguments is reported the way clap reports a bad flag (usage, exit code 2).
fn argument_error(error: MathError) -> ! {
    crate::Cli::command()
        .error(ErrorKind::ValueValidation, error.to_string())
        .exit()
}

fn derive(args: &DeriveArgs) -> Result<Derivation, MathError> {
    let model = ModelA::new(args.k as f64, args.delta, args.sigma, args.n0)?;
    let n = args.n;
    model.dilution(n)?;
    let slopes = DeployedSlopes::new(&model, args.range_end.unwrap_or(n))?;
    let x = (n / model.n0).ln().max(0.0);
    let ratio = |beta: f64| model.mass_ratio(n, 1.0 + beta * x);
    let s_exact = model.exact_scale(n)?;
    Ok(Derivation {
        s_exact,
        n_max: match model.reach() {
            CorrectionReach::NotSharpening => None,
            CorrectionReach::Unbounded => Some(NMax::Unbounded("inf")),
            CorrectionReach::UpTo(n_max) => Some(NMax::Finite(n_max)),
        },
        d: model.d(),
        beta_tangent: slopes.tangent,
        beta_secant: slopes.secant,
        beta_minimax: slopes.minimax,
        beta_ls: slopes.least_squares,
        mass_ratio: MassRatio {
            tangent: ratio(slopes.tangent)?,
            secant: slopes.secant.map(ratio).transpose()?,
            minimax: ratio(slopes.minimax)?,
            ls: slopes.least_squares.map(ratio).transpose()?,
            exact: s_exact.map(|s| model.mass_ratio(n, s)).transpose()?,
            uncorrected: model.mass_ratio(n, 1.0)?,
        },
    })
}

pub fn run(args: &DeriveArgs) -> anyhow::Result<()> {
    let result = derive(args).unwrap_or_else(|e| argument_error(e));
    if args.json {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        print_table(args, &result);
    }
    Ok(())
}

fn print_table(args: &DeriveArgs, r: &Derivation) {
    let fmt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.5}"));
    let n0 = args.n0;
    let range_end = args.range_end.unwrap_or(args.n);
    println!(
        "Model A: k = {}, Delta = {}, sigma = {}, n0 = {n0}",
        args.k, args.delta, args.sigma
    );
    println!(
        "at n = {} ({:.3} n0); slopes fitted over [n0, {range_end}]",
        args.n,
        args.n / n0
    );
    println!();
    println!("  D = Delta - sigma^2        {:.5}", r.d);
    let n_max = match &r.n_max {
        None => "none (D <= 0: sharpening lowers the top-k mass; beta = 0)".to_string(),
        Some(NMax::Unbounded(_)) => "unbounded (sigma = 0)".to_string(),
        Some(NMax::Finite(v)) => format!("{v:.1} ({:.2} n0)", v / n0),
    };
    println!("  n_max                      {n_max}");
    println!("  exact correction s*(n)     {}", fmt(r.s_exact));
    println!();
    println!(
        "  {:<14} {:>9} {:>9} {:>16}",
        "schedule", "beta", "s(n)", "M(n,s)/M(n0,1)"
    );
    let x = (args.n / n0).ln().max(0.0);
    let row = |name: &str, beta: Option<f64>, ratio: Option<f64>| {
        let s = beta.map(|b| 1.0 + b * x);
        println!(
            "  {:<14} {:>9} {:>9} {:>16}",
            name,
            fmt(beta),
            fmt(s),
            fmt(ratio)
        );
    };
    let m = &r.mass_ratio;
    row("uncorrected", Some(0.0), Some(m.uncorrected));
    row("tangent", Some(r.beta_tangent), Some(m.tangent));
    row("secant", r.beta_secant, m.secant);
    row("minimax", Some(r.beta_minimax), Some(m.minimax));
    row("least squares", r.beta_ls, m.ls);
    println!(
        "  {:<14} {:>9} {:>9} {:>16}",
        "exact",
        "-",
        fmt(r.s_exact),
        fmt(m.exact)
    );
}
