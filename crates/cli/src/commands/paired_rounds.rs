//! One-off speed-ups measured as `run` measures them: the target alone and speculation alternate over
//! rounds (which goes first swaps every round, so a load that comes or goes mid-command falls on both),
//! each decode taken again once the machine is quiet if other processes' load passed a tenth of the
//! cores, and the ratio reported as the median over rounds with its range and the load seen.

use serde::Serialize;
use sharpdraft_report::intervals::median;
use sharpdraft_report::machine_state::{measure_quietly, Waiting};
use std::cell::Cell;
use std::time::Duration;

/// The widest range of per-round ratios (high / low - 1) a printed speed-up is trusted with.
pub const TRUSTED_SPREAD: f64 = 0.10;

/// One round: each side's tokens/s and other processes' share of the cores while it ran.
#[derive(Debug, Clone, Serialize)]
pub struct Round {
    pub baseline_tokens_per_s: f64,
    pub treatment_tokens_per_s: f64,
    pub ratio: f64,
    pub baseline_other_cpu_share: f64,
    pub treatment_other_cpu_share: f64,
}

/// The ratio treatment / baseline over alternated rounds.
#[derive(Debug, Clone, Serialize)]
pub struct PairedRatio {
    pub median: f64,
    pub low: f64,
    pub high: f64,
    /// Other processes' largest share of the cores during a kept decode.
    pub other_cpu_share: f64,
    pub rounds: Vec<Round>,
}

impl PairedRatio {
    /// Whether the rounds agree closely enough ([`TRUSTED_SPREAD`]) for the median to mean something.
    pub fn trusted(&self) -> bool {
        self.high / self.low - 1.0 <= TRUSTED_SPREAD
    }

    /// The line a command prints: the median with its range, the load, and a warning when too wide.
    pub fn describe(&self, what: &str) -> String {
        let mut line = format!(
            "{what}: median {:.2}x over {} alternated rounds (range {:.2}-{:.2}x); other processes took at most {:.0}% of the cores",
            self.median,
            self.rounds.len(),
            self.low,
            self.high,
            100.0 * self.other_cpu_share
        );
        if !self.trusted() {
            line.push_str(&format!(
                "\nthe rounds differ by more than {:.0}%: too wide to trust; run again on a quieter machine or with more --rounds",
                100.0 * TRUSTED_SPREAD
            ));
        }
        line
    }
}

/// Retries of a decode that ran under load, as `run`'s default `timing:`.
pub const RETRIES: usize = 3;

/// The longest a one-off command waits for quiet before measuring a decode again; a command's whole
/// budget for waiting is as much again for every decode it makes ([`wait_budget`]).
pub const MAX_WAIT: Duration = Duration::from_secs(30);

/// What a command making `decodes` decodes may spend waiting for quiet in all.
pub fn wait_budget(decodes: usize) -> Cell<Duration> {
    Cell::new(MAX_WAIT.saturating_mul(u32::try_from(decodes).unwrap_or(u32::MAX)))
}

/// The load check of one decode (`what` names it in the lines that say the command waits).
pub fn waiting<'a>(retries: usize, budget: &'a Cell<Duration>, what: &'a str) -> Waiting<'a> {
    Waiting {
        retries,
        max_wait: MAX_WAIT,
        budget_left: budget,
        what,
    }
}

/// [median, lowest, highest] of `values` (NaN where there are none).
pub fn median_and_range(values: &[f64]) -> [f64; 3] {
    let low = values.iter().copied().fold(f64::NAN, f64::min);
    let high = values.iter().copied().fold(f64::NAN, f64::max);
    [median(values), low, high]
}

/// Runs `baseline` and `treatment` (each returning its tokens/s and its output) `rounds` times,
/// alternating which goes first, each measured with the load check (taken again up to `retries` times
/// when it ran under load); returns the ratio and each side's first output.
pub fn alternate<A, B>(
    rounds: usize,
    retries: usize,
    mut baseline: impl FnMut() -> anyhow::Result<(f64, A)>,
    mut treatment: impl FnMut() -> anyhow::Result<(f64, B)>,
) -> anyhow::Result<(PairedRatio, A, B)> {
    anyhow::ensure!(rounds >= 1, "--rounds 0: give at least one round");
    let budget = wait_budget(2 * rounds);
    let mut measured = Vec::with_capacity(rounds);
    let (mut first_a, mut first_b) = (None, None);
    for round in 0..rounds {
        let mut run_baseline = || {
            measure_quietly(
                &waiting(retries, &budget, "the target alone's decode"),
                &mut baseline,
            )
        };
        let mut run_treatment = || {
            measure_quietly(
                &waiting(retries, &budget, "the speculative decode"),
                &mut treatment,
            )
        };
        let (a, b) = if round % 2 == 0 {
            let a = run_baseline()?;
            (a, run_treatment()?)
        } else {
            let b = run_treatment()?;
            (run_baseline()?, b)
        };
        measured.push(Round {
            baseline_tokens_per_s: a.value.0,
            treatment_tokens_per_s: b.value.0,
            ratio: b.value.0 / a.value.0,
            baseline_other_cpu_share: a.other_share,
            treatment_other_cpu_share: b.other_share,
        });
        first_a.get_or_insert(a.value.1);
        first_b.get_or_insert(b.value.1);
    }
    let ratios: Vec<f64> = measured.iter().map(|r| r.ratio).collect();
    let [median, low, high] = median_and_range(&ratios);
    let other_cpu_share = measured
        .iter()
        .flat_map(|r| [r.baseline_other_cpu_share, r.treatment_other_cpu_share])
        .filter(|s| s.is_finite())
        .fold(0.0, f64::max);
    let ratio = PairedRatio {
        median,
        low,
        high,
        other_cpu_share,
        rounds: measured,
    };
    Ok((
        ratio,
        first_a.expect("a round ran"),
        first_b.expect("a round ran"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_alternate_which_side_goes_first_and_the_median_is_the_middle_ratio() {
        let order = std::cell::RefCell::new(Vec::new());
        let rates = [10.0, 10.0, 10.0];
        let spec = [20.0, 25.0, 21.0];
        let (mut a, mut b) = (0, 0);
        // No retries: a test beside other tests' load must call each side exactly once a round.
        let (ratio, first_a, first_b) = alternate(
            3,
            0,
            || {
                order.borrow_mut().push('a');
                a += 1;
                Ok((rates[a - 1], a))
            },
            || {
                order.borrow_mut().push('b');
                b += 1;
                Ok((spec[b - 1], b))
            },
        )
        .unwrap();
        assert_eq!(order.into_inner(), ['a', 'b', 'b', 'a', 'a', 'b']);
        assert_eq!(
            (first_a, first_b),
            (1, 1),
            "each side's first output is kept"
        );
        assert_eq!((ratio.median, ratio.low, ratio.high), (2.1, 2.0, 2.5));
        assert!(!ratio.trusted(), "2.0 to 2.5 is a 25% spread");
        assert!(ratio.describe("speed-up").contains("too wide to trust"));
    }

    #[test]
    fn rounds_that_agree_are_trusted_and_say_nothing_more() {
        let (ratio, ..) = alternate(2, 0, || Ok((10.0, ())), || Ok((20.5, ()))).unwrap();
        assert!(ratio.trusted());
        assert_eq!(ratio.median, 2.05);
        assert!(!ratio.describe("speed-up").contains("too wide"));
    }
}
