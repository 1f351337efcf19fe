//! The goodput gate: each cycle, the draft depth k in 0..=K that maximises the expected tokens per
//! second, from what this request has measured, where k = 0 is a plain target step with no drafter
//! work at all (engines now decide from measured cost, not acceptance: vLLM's adaptive verification,
//! llama.cpp's adaptive draft depth, mlx-lm's latch to plain decoding).
//!
//! The model, per cycle at depth k (chains; a tree is drafted whole or not at all):
//! - tokens: `E[k] = 1 + sum_{i=1..k} prod_{j=1..i} a_j`, with `a_j` the acceptance at draft position
//!   j given positions 1..j-1 accepted, counted over this request's cycles (older cycles fade by
//!   [`FADE`] each cycle, so the estimate follows the context as it grows; one pseudo-cycle keeps an
//!   unseen position from reading 0 or 1: at 1/2 for the first position, at the estimate of the
//!   position before for a deeper one, which a chain rarely reaches when the first is rejected);
//! - seconds: the drafter's proposal at the nearest depth measured at or above k (a DFlash block costs
//!   the same at any k; a vanilla chain's passes grow with it, so this never flatters a short chain),
//!   and the target's verification of k + 1 rows, interpolated between a plain step (1 row) and the
//!   verifications measured;
//! - a plain step: 1 token in its measured seconds, or in a verification's if that was less (one row
//!   costs no more than k + 1 on the same weights: the first plain step of a request, right after the
//!   prefill, can run slow and would otherwise flatter drafting until the next plain step).
//!
//! The gate starts with one plain step (to time it) and one cycle at K (to see acceptance), then takes
//! the best k, drafting only where that beats a plain step by [`MARGIN`]: near break-even the timings'
//! noise decides, and a plain step never costs more than the target alone. When that is 0 it steps plainly and probes again: one cycle at K after
//! [`FIRST_PROBE_AFTER`] plain steps, then after twice as many each time the probe still says plain, at
//! most [`LONGEST_PLAIN_RUN`]; a probe that says draft resumes drafting and resets the schedule. A
//! probe is the only way back: plain steps teach the gate nothing about the drafter.

use serde::{Deserialize, Serialize};

/// Whether and how a drafter's proposals are gated (`gate:`, `--gate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum GateMode {
    /// Every cycle drafts the drafter's whole proposal (speculation as it always ran).
    #[default]
    Off,
    /// Each cycle drafts the depth that maximises the expected tokens per second, 0 (a plain target
    /// step, no drafter work) included ([`GoodputGate`]).
    Goodput,
    /// The gate held shut: every cycle is a plain target step, the drafter loaded and never called.
    /// What speculation turned off costs against the target alone.
    Closed,
}

impl GateMode {
    pub fn name(self) -> &'static str {
        match self {
            GateMode::Off => "off",
            GateMode::Goodput => "goodput",
            GateMode::Closed => "closed",
        }
    }
}

/// How much an older cycle's acceptance counts against the latest one's.
pub const FADE: f64 = 0.95;
/// How much more expected tokens per second a depth must promise than a plain step to be drafted.
pub const MARGIN: f64 = 0.03;
/// Plain steps before the first probe.
pub const FIRST_PROBE_AFTER: usize = 16;
/// The longest run of plain steps between two probes.
pub const LONGEST_PLAIN_RUN: usize = 128;
/// Weight of the newest timing in a running mean.
const NEWEST: f64 = 0.3;

/// A running mean that weighs its newest value by [`NEWEST`].
#[derive(Debug, Clone, Copy, Default)]
struct Running(Option<f64>);

impl Running {
    fn add(&mut self, x: f64) {
        if x.is_finite() {
            self.0 = Some(self.0.map_or(x, |m| m + NEWEST * (x - m)));
        }
    }
}

/// The gate of one request ([`GateMode::Goodput`] or [`GateMode::Closed`]).
#[derive(Debug, Clone)]
pub struct GoodputGate {
    mode: GateMode,
    /// K: the drafter's deepest proposal.
    deepest: usize,
    /// Whether depths between 1 and K may be drafted (chains); a tree is drafted whole or not at all.
    any_depth: bool,
    /// Per draft position j (index j - 1): faded counts of cycles that reached it with every earlier
    /// position accepted, and of those that accepted it too.
    reached: Vec<f64>,
    accepted: Vec<f64>,
    plain_seconds: Running,
    /// Per depth k (index k - 1): the drafter's proposal and the target's verification, seconds.
    draft_seconds: Vec<Running>,
    verify_seconds: Vec<Running>,
    /// Plain steps taken since the gate last drafted, and how many it takes before the next probe.
    plain_run: usize,
    probe_after: usize,
    pub plain_cycles: usize,
    pub drafted_cycles: usize,
}

impl GoodputGate {
    /// The gate of a request whose drafter proposes at most `deepest` tokens a cycle, in chains
    /// (`any_depth`) or as a whole tree; [`Self::learn_shape`] narrows both once a whole proposal is
    /// seen.
    pub fn new(mode: GateMode, deepest: usize, any_depth: bool) -> Self {
        Self {
            mode,
            deepest,
            any_depth,
            reached: vec![0.0; deepest],
            accepted: vec![0.0; deepest],
            plain_seconds: Running::default(),
            draft_seconds: vec![Running::default(); deepest],
            verify_seconds: vec![Running::default(); deepest],
            plain_run: 0,
            probe_after: FIRST_PROBE_AFTER,
            plain_cycles: 0,
            drafted_cycles: 0,
        }
    }

    /// The drafter's whole proposal is `depth` positions deep, a chain or not: the depths the gate
    /// chooses from.
    pub fn learn_shape(&mut self, depth: usize, chain: bool) {
        self.deepest = depth.clamp(1, self.reached.len());
        self.any_depth = chain;
    }

    /// The depth to draft this cycle: 0 for a plain target step.
    pub fn choose(&mut self) -> usize {
        if self.mode == GateMode::Closed || self.deepest == 0 {
            return 0;
        }
        if self.plain_seconds.0.is_none() {
            return 0;
        }
        if self.drafted_cycles == 0 {
            return self.deepest;
        }
        if self.plain_run > 0 {
            if self.plain_run < self.probe_after {
                return 0;
            }
            // A probe: the whole proposal, so every position's acceptance is seen again.
            return self.deepest;
        }
        self.best_depth()
    }

    /// The depth of the highest expected tokens per second now, 0 unless a depth beats a plain step by
    /// [`MARGIN`].
    pub fn best_depth(&self) -> usize {
        let plain = self.goodput(0);
        let mut best = (0, plain * (1.0 + MARGIN));
        for k in self.candidates() {
            let g = self.goodput(k);
            if g > best.1 {
                best = (k, g);
            }
        }
        best.0
    }

    fn candidates(&self) -> Vec<usize> {
        if self.any_depth {
            (1..=self.deepest).collect()
        } else {
            vec![self.deepest]
        }
    }

    /// Acceptance at draft position `j` (1-based) given the earlier ones: the faded counts and one
    /// pseudo-cycle at 1/2 for the first position, at the position before's estimate for a deeper one.
    pub fn acceptance(&self, j: usize) -> f64 {
        let prior = if j == 1 { 0.5 } else { self.acceptance(j - 1) };
        (self.accepted[j - 1] + prior) / (self.reached[j - 1] + 1.0)
    }

    /// Expected tokens a cycle at depth `k` emits (the bonus token included).
    pub fn expected_tokens(&self, k: usize) -> f64 {
        let mut chance = 1.0;
        let mut tokens = 1.0;
        for j in 1..=k {
            chance *= self.acceptance(j);
            tokens += chance;
        }
        tokens
    }

    /// Expected seconds of a plain step: its own running mean, or the fastest verification measured if
    /// that is less (a pass of one row reads the same weights as one of k + 1).
    fn plain_seconds(&self) -> f64 {
        let fastest_verification = self
            .verify_seconds
            .iter()
            .filter_map(|v| v.0)
            .fold(f64::INFINITY, f64::min);
        self.plain_seconds
            .0
            .map_or(f64::NAN, |p| p.min(fastest_verification))
    }

    /// Expected seconds of a cycle at depth `k` (a plain step for 0); NaN when nothing is measured.
    pub fn expected_seconds(&self, k: usize) -> f64 {
        let plain = self.plain_seconds();
        if k == 0 {
            return plain;
        }
        // The drafter: the nearest measured depth at or above k, else the deepest measured.
        let draft = (k..=self.deepest)
            .find_map(|d| self.draft_seconds[d - 1].0)
            .or_else(|| (1..k).rev().find_map(|d| self.draft_seconds[d - 1].0))
            .unwrap_or(f64::NAN);
        // The target: measured at k, else on the line from a plain step (k = 0) to the nearest
        // measured depth above, else the deepest measured below.
        let verify = self.verify_seconds[k - 1].0.unwrap_or_else(|| {
            match (k + 1..=self.deepest).find_map(|d| self.verify_seconds[d - 1].0.map(|v| (d, v)))
            {
                Some((d, v)) => plain + (v - plain).max(0.0) * k as f64 / d as f64,
                None => (1..k)
                    .rev()
                    .find_map(|d| self.verify_seconds[d - 1].0)
                    .unwrap_or(f64::NAN),
            }
        });
        draft + verify
    }

    /// Expected tokens per second at depth `k`; NaN when its seconds are unknown.
    pub fn goodput(&self, k: usize) -> f64 {
        self.expected_tokens(k) / self.expected_seconds(k)
    }

    /// A plain step took `seconds`.
    pub fn record_plain(&mut self, seconds: f64) {
        self.plain_seconds.add(seconds);
        self.plain_cycles += 1;
        if self.drafted_cycles > 0 {
            self.plain_run += 1;
        }
    }

    /// A cycle drafted `depth` positions deep (chosen), proposing in `draft_seconds` and verifying in
    /// `verify_seconds`, and the target accepted its first `accepted` positions.
    pub fn record_draft(
        &mut self,
        depth: usize,
        draft_seconds: f64,
        verify_seconds: f64,
        accepted: usize,
    ) {
        let depth = depth.clamp(1, self.deepest);
        self.draft_seconds[depth - 1].add(draft_seconds);
        self.verify_seconds[depth - 1].add(verify_seconds);
        for j in 0..self.deepest {
            self.reached[j] *= FADE;
            self.accepted[j] *= FADE;
        }
        for j in 0..depth.min(accepted + 1) {
            self.reached[j] += 1.0;
            if j < accepted {
                self.accepted[j] += 1.0;
            }
        }
        self.drafted_cycles += 1;
        if self.plain_run > 0 {
            // A probe: drafting resumes if it now pays, else the next probe waits twice as long.
            if self.best_depth() > 0 {
                self.probe_after = FIRST_PROBE_AFTER;
            } else {
                self.probe_after = (self.probe_after * 2).min(LONGEST_PLAIN_RUN);
            }
            self.plain_run = 0;
        }
    }

    /// Whether the gate is between two probes, stepping plainly.
    pub fn stepping_plainly(&self) -> bool {
        self.plain_run > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gate over chains of 3 that has timed a plain step at 10 ms and cycles at every depth.
    fn timed(draft_ms: f64, verify_ms: f64) -> GoodputGate {
        let mut gate = GoodputGate::new(GateMode::Goodput, 3, true);
        gate.record_plain(0.010);
        for k in 1..=3 {
            gate.draft_seconds[k - 1].add(draft_ms / 1e3);
            gate.verify_seconds[k - 1].add(verify_ms / 1e3);
        }
        gate.drafted_cycles = 1;
        gate
    }

    fn accept_every_draft(gate: &mut GoodputGate, cycles: usize) {
        for _ in 0..cycles {
            gate.record_draft(3, 0.002, 0.011, 3);
        }
    }

    #[test]
    fn the_first_cycle_times_a_plain_step_and_the_second_drafts_the_whole_proposal() {
        let mut gate = GoodputGate::new(GateMode::Goodput, 3, true);
        assert_eq!(gate.choose(), 0);
        gate.record_plain(0.01);
        assert_eq!(gate.choose(), 3);
    }

    #[test]
    fn a_drafter_the_target_accepts_drafts_deep_and_one_it_rejects_steps_plainly() {
        let mut good = timed(2.0, 11.0);
        accept_every_draft(&mut good, 20);
        assert_eq!(good.best_depth(), 3);
        let mut bad = timed(2.0, 11.0);
        for _ in 0..20 {
            bad.record_draft(3, 0.002, 0.011, 0);
        }
        assert_eq!(bad.best_depth(), 0);
    }

    #[test]
    fn near_break_even_the_gate_steps_plainly() {
        // Half the first drafts accepted, none deeper: about 1.5 tokens a cycle in 15 ms against a
        // plain step's 1 in 10 ms, a few per cent more tokens a second: within the margin, so plain.
        let mut gate = timed(4.0, 11.0);
        for i in 0..40 {
            gate.record_draft(3, 0.004, 0.011, usize::from(i % 2 == 0));
        }
        let ratio = gate.goodput(3) / gate.goodput(0);
        assert!(ratio > 1.0 && ratio < 1.0 + MARGIN, "{ratio}");
        assert_eq!(gate.best_depth(), 0);
    }

    #[test]
    fn a_deeper_position_is_expected_no_likelier_than_the_one_before_until_it_is_seen() {
        let mut gate = timed(2.0, 11.0);
        for _ in 0..10 {
            gate.record_draft(3, 0.002, 0.011, 0);
        }
        // Position 1 rejected every time: positions 2 and 3, never reached, read no better.
        assert!(gate.acceptance(2) <= gate.acceptance(1) + 1e-12);
        assert!(gate.acceptance(3) <= gate.acceptance(2) + 1e-12);
    }

    #[test]
    fn a_slow_first_plain_step_does_not_flatter_drafting() {
        // The first plain step took 30 ms; verifications of 4 rows take 11: a plain step is expected
        // at 11 ms at most, so a drafter the target rejects is still not worth drafting.
        let mut gate = GoodputGate::new(GateMode::Goodput, 3, true);
        gate.record_plain(0.030);
        for _ in 0..4 {
            gate.record_draft(3, 0.003, 0.011, 0);
        }
        assert!((gate.expected_seconds(0) - 0.011).abs() < 1e-12);
        assert_eq!(gate.best_depth(), 0);
    }

    #[test]
    fn expected_tokens_count_the_bonus_and_every_position_reached() {
        let mut gate = timed(2.0, 11.0);
        accept_every_draft(&mut gate, 200);
        // Every position accepted: near 1 + 3 tokens (faded counts hold about 20 cycles, and the
        // pseudo-cycle at 1/2 keeps each acceptance just below 1).
        let tokens = gate.expected_tokens(3);
        assert!(tokens > 3.8 && tokens < 4.0, "{tokens}");
        assert_eq!(gate.expected_tokens(0), 1.0);
    }

    #[test]
    fn a_plain_run_probes_after_its_schedule_and_waits_twice_as_long_when_the_probe_says_plain() {
        let mut gate = timed(2.0, 11.0);
        for _ in 0..20 {
            gate.record_draft(3, 0.002, 0.011, 0);
        }
        assert_eq!(gate.choose(), 0);
        let mut plain = 0;
        loop {
            let k = gate.choose();
            if k > 0 {
                break;
            }
            gate.record_plain(0.01);
            plain += 1;
        }
        assert_eq!(plain, FIRST_PROBE_AFTER);
        gate.record_draft(3, 0.002, 0.011, 0);
        assert_eq!(gate.probe_after, 2 * FIRST_PROBE_AFTER);
        assert!(!gate.stepping_plainly());
        assert_eq!(gate.choose(), 0);
    }

    #[test]
    fn a_probe_that_finds_acceptance_back_resumes_drafting() {
        let mut gate = timed(2.0, 11.0);
        for _ in 0..5 {
            gate.record_draft(3, 0.002, 0.011, 0);
        }
        gate.record_plain(0.01);
        assert!(gate.stepping_plainly());
        accept_every_draft(&mut gate, 1);
        // One good probe after a few bad cycles, with faded counts: drafting pays again.
        accept_every_draft(&mut gate, 6);
        assert!(gate.best_depth() > 0);
        assert_eq!(gate.probe_after, FIRST_PROBE_AFTER);
    }

    #[test]
    fn a_tree_is_drafted_whole_or_not_at_all() {
        let mut gate = GoodputGate::new(GateMode::Goodput, 3, false);
        gate.record_plain(0.01);
        gate.record_draft(3, 0.001, 0.011, 1);
        assert!(matches!(gate.best_depth(), 0 | 3));
    }

    #[test]
    fn a_closed_gate_never_drafts() {
        let mut gate = GoodputGate::new(GateMode::Closed, 3, true);
        for _ in 0..10 {
            assert_eq!(gate.choose(), 0);
            gate.record_plain(0.01);
        }
    }

    #[test]
    fn an_unmeasured_depth_costs_the_deeper_proposal_and_an_interpolated_verification() {
        let mut gate = GoodputGate::new(GateMode::Goodput, 4, true);
        gate.record_plain(0.010);
        gate.record_draft(4, 0.004, 0.014, 4);
        // Depth 2: the drafter as at 4 (4 ms), the target halfway from 10 ms to 14 ms (12 ms).
        assert!((gate.expected_seconds(2) - 0.016).abs() < 1e-12);
    }
}
