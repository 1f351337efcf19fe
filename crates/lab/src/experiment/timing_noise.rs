//! How far apart in time arms land that do the same work: the noise under a paired comparison, read
//! off the run itself.
//!
//! Verifying a full block is the target's pass over it: on one request, every arm of one drafter
//! verifies blocks of that shape over nearly the same contexts, whatever the drafter's method. So the
//! spread of the arms' verifying time per full block around their median is timing noise alone. A
//! paired difference between two methods of equal tau that lies within it is timing, not drafting; two
//! requests can put one arm on the slow side twice, and the paired verdict cannot tell.

use super::intervals::median;
use super::records::UnitRecord;
use sharpdraft_decode::CycleRecord;
use std::collections::BTreeMap;

/// The spread of each arm's verifying seconds per full block over the median of its drafter's arms on
/// the same request (1 = the median; 1.05 = 5% slower).
#[derive(Debug, Clone, PartialEq)]
pub struct VerifySpread {
    /// The (arm, request) pairs measured.
    pub pairs: usize,
    /// 10th and 90th percentiles of the ratios.
    pub p10: f64,
    pub p90: f64,
}

/// Fewer ratios than this give no spread.
const MIN_PAIRS: usize = 4;

/// The run's spread over every unit, request and drafter with two or more arms that verified full blocks;
/// `None` when fewer than [`MIN_PAIRS`] arm x request pairs qualify.
pub fn verify_spread(units: &[UnitRecord]) -> Option<VerifySpread> {
    let mut groups = Vec::new();
    for unit in units {
        // (drafter, request's position) -> each arm's cycles on that request
        let mut by_request: BTreeMap<(&str, usize), Vec<&[CycleRecord]>> = BTreeMap::new();
        for arm in &unit.arms {
            let Some(drafter) = arm.arm.drafter.as_deref() else {
                continue;
            };
            for (position, request) in arm.requests.iter().enumerate() {
                by_request
                    .entry((drafter, position))
                    .or_default()
                    .push(&request.cycles);
            }
        }
        groups.extend(by_request.values().map(|arms| full_block_verify(arms)));
    }
    spread(&groups)
}

/// Each arm's mean verifying seconds over its full blocks (the most common block size among the arms'
/// cycles: a chain that ends early, or the last cycle before the token budget, verifies less), for the
/// arms of one drafter on one request; an arm with no full block is left out. An arm of a few blocks is
/// kept: its mean is noisier, and so is every paired comparison made on that request.
fn full_block_verify(arms: &[&[CycleRecord]]) -> Vec<f64> {
    let mut counts: BTreeMap<usize, usize> = BTreeMap::new();
    for cycle in arms.iter().flat_map(|cycles| cycles.iter()) {
        *counts.entry(cycle.drafted).or_default() += 1;
    }
    // The most common size; of equally common ones, the largest.
    let Some((&full, _)) = counts.iter().max_by_key(|&(&size, &n)| (n, size)) else {
        return Vec::new();
    };
    arms.iter()
        .filter_map(|cycles| {
            let seconds: Vec<f64> = cycles
                .iter()
                .filter(|c| c.drafted == full)
                .map(|c| c.verify_seconds)
                .collect();
            (!seconds.is_empty()).then(|| seconds.iter().sum::<f64>() / seconds.len() as f64)
        })
        .collect()
}

/// Percentiles of every arm's time over its group's median, over the groups of two or more arms.
fn spread(groups: &[Vec<f64>]) -> Option<VerifySpread> {
    let mut ratios: Vec<f64> = groups
        .iter()
        .filter(|arms| arms.len() >= 2)
        .flat_map(|arms| {
            let middle = median(arms);
            arms.iter().map(move |seconds| seconds / middle)
        })
        .filter(|ratio| ratio.is_finite())
        .collect();
    if ratios.len() < MIN_PAIRS {
        return None;
    }
    ratios.sort_by(f64::total_cmp);
    let at = |q: f64| ratios[(q * (ratios.len() - 1) as f64).round() as usize];
    Some(VerifySpread {
        pairs: ratios.len(),
        p10: at(0.1),
        p90: at(0.9),
    })
}

#[cfg(test)]
mod tests {
    use super::{full_block_verify, spread, VerifySpread};
    use sharpdraft_decode::CycleRecord;

    fn cycle(drafted: usize, verify_seconds: f64) -> CycleRecord {
        CycleRecord {
            context: 100,
            drafted,
            accepted: 1,
            accepted_per_position: vec![1],
            bonus: 1,
            draft_seconds: 0.01,
            verify_seconds,
        }
    }

    #[test]
    fn an_arm_is_timed_over_its_full_blocks_only() {
        // Blocks of 4 are the most common; the 2-token block (a chain ended early) costs less and is
        // left out, so it does not make its arm look fast.
        let first = vec![
            cycle(4, 0.2),
            cycle(4, 0.2),
            cycle(4, 0.2),
            cycle(4, 0.2),
            cycle(2, 0.05),
        ];
        let second = vec![cycle(4, 0.3); 4];
        assert_eq!(full_block_verify(&[&first, &second]), vec![0.2, 0.3]);
    }

    #[test]
    fn an_arm_with_no_full_block_is_left_out() {
        let full = vec![cycle(4, 0.25); 6];
        let cut_short = vec![cycle(2, 0.1); 3];
        assert_eq!(full_block_verify(&[&full, &cut_short]), vec![0.25]);
        assert!(full_block_verify(&[]).is_empty());
    }

    #[test]
    fn arms_doing_the_same_work_in_the_same_time_have_no_spread() {
        let groups = vec![vec![0.25; 3], vec![0.5; 3]];
        assert_eq!(
            spread(&groups),
            Some(VerifySpread {
                pairs: 6,
                p10: 1.0,
                p90: 1.0
            })
        );
    }

    #[test]
    fn the_spread_is_each_arm_over_its_own_groups_median() {
        // Two requests of very different cost: each arm is compared with its own request's arms.
        let groups = vec![vec![0.9, 1.0, 1.1], vec![9.0, 10.0, 11.0]];
        let found = spread(&groups).unwrap();
        assert_eq!(found.pairs, 6);
        assert!(
            (found.p10 - 0.9).abs() < 1e-12 && (found.p90 - 1.1).abs() < 1e-12,
            "{found:?}"
        );
    }

    #[test]
    fn a_lone_arm_or_too_few_pairs_give_no_spread() {
        assert_eq!(
            spread(&[vec![0.3], vec![0.4]]),
            None,
            "a lone arm has nothing to differ from"
        );
        assert_eq!(spread(&[vec![0.3, 0.4]]), None, "two pairs are too few");
    }
}
