//! A report's family of paired tests, adjusted together (Holm 1979).
//!
//! A report states many paired verdicts at once: each drafting method against the reference method
//! (end to end and decode), and the calibrated schedule against each other method (tau and decode), in
//! every cell. At 5% each, a few dozen true nulls give a few false `higher`s by chance alone. Holm's
//! step-down procedure keeps the chance of *any* false verdict in the family at 5% without assuming
//! the tests independent: sort the m raw p ascending, multiply the i-th (from 0) by m - i, take the
//! running maximum, cap at 1. A verdict is stated only where the adjusted p is below [`ALPHA`] and the
//! ratio's interval lies off 1 ([`crate::report::verdict`]).
//!
//! The family is every test the report may state a verdict on: the paired tests of cells with at
//! least [`crate::report::MIN_PROMPTS_FOR_VERDICT`] prompts and a raw p (a cell whose ratios are all 1
//! has none). Smaller cells print their raw p and `n < 10`, and stay out of the family.

use crate::grid::TARGET_ONLY;
use crate::head_to_head::HeadToHead;
use crate::report::MIN_PROMPTS_FOR_VERDICT;
use crate::tables::SummaryRow;

/// The family-wise error rate the adjusted verdicts keep.
pub const ALPHA: f64 = 0.05;

/// Holm's adjusted p of each of `raw` (NaN stays NaN and is not counted in the family's size).
pub fn holm(raw: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..raw.len()).filter(|&i| raw[i].is_finite()).collect();
    order.sort_by(|&a, &b| raw[a].total_cmp(&raw[b]));
    let m = order.len();
    let mut adjusted = vec![f64::NAN; raw.len()];
    let mut running = 0.0f64;
    for (rank, &i) in order.iter().enumerate() {
        running = running.max(((m - rank) as f64 * raw[i]).min(1.0));
        adjusted[i] = running;
    }
    adjusted
}

/// What a report's family holds, for its statement: how many tests, and how many resolve at
/// [`ALPHA`] before and after the adjustment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Family {
    pub tests: usize,
    pub raw_below_alpha: usize,
    pub adjusted_below_alpha: usize,
}

/// One test of the family: where its raw p is read and its adjusted p written.
enum Member {
    /// A summary row's comparison with the reference method: end to end (false) or decode (true).
    Reference { row: usize, decode: bool },
    /// A head-to-head cell's tau (false) or decode (true) comparison.
    HeadToHead { cell: usize, decode: bool },
}

/// Whether a summary row's comparison with the reference method belongs to the family: a whole
/// drafting row (not the target alone, not a context bin) with enough prompts for a verdict.
fn row_in_family(r: &SummaryRow) -> bool {
    r.bin == "all" && r.drafter != TARGET_ONLY && r.prompts >= MIN_PROMPTS_FOR_VERDICT
}

/// Adjusts every test of the family (the reference comparisons of `rows`, the head-to-head
/// comparisons of `cells`) together, writing each adjusted p beside its raw one; tests outside the
/// family keep an adjusted p of NaN. Returns the family's counts.
pub fn adjust(rows: &mut [SummaryRow], cells: &mut [HeadToHead]) -> Family {
    let mut members = Vec::new();
    let mut raw = Vec::new();
    for (i, r) in rows.iter_mut().enumerate() {
        r.vs_reference_p_adjusted = f64::NAN;
        r.decode_vs_reference_p_adjusted = f64::NAN;
        if !row_in_family(r) {
            continue;
        }
        for (decode, p) in [(false, r.vs_reference_p), (true, r.decode_vs_reference_p)] {
            if p.is_finite() {
                members.push(Member::Reference { row: i, decode });
                raw.push(p);
            }
        }
    }
    for (i, c) in cells.iter_mut().enumerate() {
        c.tau.p_adjusted = f64::NAN;
        c.decode.p_adjusted = f64::NAN;
        if (c.prompts as i64) < MIN_PROMPTS_FOR_VERDICT {
            continue;
        }
        for (decode, p) in [(false, c.tau.p), (true, c.decode.p)] {
            if p.is_finite() {
                members.push(Member::HeadToHead { cell: i, decode });
                raw.push(p);
            }
        }
    }
    let adjusted = holm(&raw);
    for (member, &p) in members.iter().zip(&adjusted) {
        match *member {
            Member::Reference { row, decode: false } => rows[row].vs_reference_p_adjusted = p,
            Member::Reference { row, decode: true } => rows[row].decode_vs_reference_p_adjusted = p,
            Member::HeadToHead {
                cell,
                decode: false,
            } => cells[cell].tau.p_adjusted = p,
            Member::HeadToHead { cell, decode: true } => cells[cell].decode.p_adjusted = p,
        }
    }
    Family {
        tests: raw.len(),
        raw_below_alpha: raw.iter().filter(|&&p| p < ALPHA).count(),
        adjusted_below_alpha: adjusted.iter().filter(|&&p| p < ALPHA).count(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holm_multiplies_the_smallest_p_by_the_family_size_and_keeps_the_order() {
        // statsmodels.stats.multitest.multipletests([0.01, 0.04, 0.03, 0.005], method="holm")
        //   -> [0.03, 0.06, 0.06, 0.02]
        let adjusted = holm(&[0.01, 0.04, 0.03, 0.005]);
        for (a, b) in adjusted.iter().zip([0.03, 0.06, 0.06, 0.02]) {
            assert!((a - b).abs() < 1e-12, "{adjusted:?}");
        }
    }

    #[test]
    fn a_missing_p_is_left_out_of_the_family_and_adjusted_p_never_exceed_one() {
        let adjusted = holm(&[f64::NAN, 0.5, 0.9]);
        assert!(adjusted[0].is_nan());
        assert_eq!(adjusted[1], 1.0);
        assert_eq!(adjusted[2], 1.0);
    }

    #[test]
    fn a_family_whose_raw_p_resolves_and_adjusted_p_does_not_prints_no_verdict() {
        // 30 comparisons, each of 10 prompts all ahead: the exact signed-rank p of each is 2/1024,
        // below 0.05 alone, but Holm's adjustment over the 30 lifts every one to 30 x 2/1024 = 0.059.
        let raw = vec![2.0 / 1024.0; 30];
        let adjusted = holm(&raw);
        assert!(adjusted
            .iter()
            .all(|&p| (p - 30.0 * 2.0 / 1024.0).abs() < 1e-12));
        let ratio = crate::intervals::Interval {
            estimate: 1.1,
            lo: 1.05,
            hi: 1.15,
        };
        assert_eq!(crate::report::verdict(&ratio, 10, raw[0], None), "higher");
        assert_eq!(crate::report::verdict(&ratio, 10, adjusted[0], None), "~");
    }

    #[test]
    fn an_interval_holding_one_gives_no_verdict_whatever_the_adjusted_p() {
        let ratio = crate::intervals::Interval {
            estimate: 1.02,
            lo: 0.99,
            hi: 1.05,
        };
        assert_eq!(crate::report::verdict(&ratio, 30, 0.001, None), "~");
    }

    #[test]
    fn one_test_alone_is_its_own_adjustment() {
        assert_eq!(holm(&[0.02]), vec![0.02]);
    }
}
