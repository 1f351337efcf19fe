//! How far apart in time two arms land that do the same work: the noise under a paired comparison,
//! read off the run itself.
//!
//! Verifying a full block is the target's pass over it: on one request, every arm of one drafter
//! verifies blocks of that shape over nearly the same contexts, whatever the drafter's method. So the
//! ratio of two such arms' verifying times is mostly timing noise, and it is the same kind of ratio as
//! a paired comparison of two methods. A paired difference between two methods of equal tau that lies
//! within the spread of these ratios can be timing, not drafting: two requests can put one arm on the
//! slow side twice, and the paired verdict cannot tell.

use crate::grid::Unit;
use crate::intervals::percentile;
use crate::outline::Outline;
use crate::records::CycleRecord;
use crate::samples::RequestSample;
use std::collections::{BTreeMap, BTreeSet};

/// The spread of the ratio of two arms' mean verifying seconds per full block, over every two arms of
/// one drafter on one request, both ways round (1 = alike; 1.05 = the first 5% slower).
#[derive(Debug, Clone, PartialEq)]
pub struct VerifySpread {
    /// The ratios measured (each pair of arms twice, once each way round).
    pub ratios: usize,
    /// 10th and 90th percentiles of the ratios.
    pub p10: f64,
    pub p90: f64,
}

/// Fewer ratios than this give no spread: the 10th and 90th percentiles of a handful are its ends.
const MIN_RATIOS: usize = 10;

/// The run's spread over every unit, request and drafter with two or more arms that verified full
/// blocks; `None` when fewer than [`MIN_RATIOS`] ratios qualify. Retrieval arms are left out: their
/// verification also reads the target's attention as it runs, work the other arms do not do.
pub fn verify_spread(outline: &Outline, samples: &[RequestSample]) -> Option<VerifySpread> {
    let reads_target_attention: BTreeSet<&str> = outline
        .methods
        .iter()
        .filter(|m| m.reads_target_attention)
        .map(|m| m.name.as_str())
        .collect();
    let mut by_unit: BTreeMap<&Unit, Vec<ArmRequest>> = BTreeMap::new();
    for s in samples {
        by_unit.entry(&s.unit).or_default().push(ArmRequest {
            drafter: s.arm.drafter.as_deref(),
            method: &s.arm.method,
            prompt: s.row.prompt,
            cycles: &s.row.cycles,
        });
    }
    let mut ratios = Vec::new();
    for requests in by_unit.into_values() {
        ratios.extend(pair_ratios(requests, &reads_target_attention));
    }
    spread(ratios)
}

/// One arm's cycles on one request of a unit.
struct ArmRequest<'a> {
    /// `None` for the target alone.
    drafter: Option<&'a str>,
    method: &'a str,
    prompt: usize,
    cycles: &'a [CycleRecord],
}

/// From the arms' requests of one unit: the ratio of the verifying times per full block of every two
/// arms of one drafter on one prompt, both ways round. The target alone verifies nothing, and arms of
/// the `left_out` methods are not compared.
fn pair_ratios<'a>(
    requests: impl IntoIterator<Item = ArmRequest<'a>>,
    left_out: &BTreeSet<&str>,
) -> Vec<f64> {
    let mut by_request: BTreeMap<(&str, usize), Vec<&[CycleRecord]>> = BTreeMap::new();
    for request in requests {
        if let Some(drafter) = request
            .drafter
            .filter(|_| !left_out.contains(request.method))
        {
            by_request
                .entry((drafter, request.prompt))
                .or_default()
                .push(request.cycles);
        }
    }
    let mut ratios = Vec::new();
    for arms in by_request.values() {
        let seconds = full_block_verify(arms);
        for (i, first) in seconds.iter().enumerate() {
            for (j, second) in seconds.iter().enumerate() {
                if i != j {
                    ratios.push(first / second);
                }
            }
        }
    }
    ratios
}

/// Each arm's mean verifying seconds over its full blocks (the most common block size among the arms'
/// cycles: a chain that ends early, with `stop_below`, verifies less), for the arms of one drafter on
/// one request; an arm with no full block is left out. An arm of a few blocks is
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
        .filter(|mean| mean.is_finite() && *mean > 0.0)
        .collect()
}

/// The 10th and 90th percentiles (nearest rank) of `ratios`, non-finite ones left out.
fn spread(mut ratios: Vec<f64>) -> Option<VerifySpread> {
    ratios.retain(|r| r.is_finite());
    if ratios.len() < MIN_RATIOS {
        return None;
    }
    ratios.sort_by(f64::total_cmp);
    Some(VerifySpread {
        ratios: ratios.len(),
        p10: percentile(&ratios, 0.1),
        p90: percentile(&ratios, 0.9),
    })
}

#[cfg(test)]
mod tests {
    use super::{full_block_verify, pair_ratios, spread, ArmRequest, VerifySpread};
    use crate::records::CycleRecord;
    use std::collections::BTreeSet;

    fn request<'a>(
        drafter: Option<&'a str>,
        method: &'a str,
        prompt: usize,
        cycles: &'a [CycleRecord],
    ) -> ArmRequest<'a> {
        ArmRequest {
            drafter,
            method,
            prompt,
            cycles,
        }
    }

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
            cycle(4, 0.25),
            cycle(4, 0.25),
            cycle(4, 0.25),
            cycle(2, 0.05),
        ];
        let second = vec![cycle(4, 0.5); 4];
        assert_eq!(full_block_verify(&[&first, &second]), vec![0.25, 0.5]);
    }

    #[test]
    fn an_arm_with_no_full_block_is_left_out() {
        let full = vec![cycle(4, 0.25); 6];
        let cut_short = vec![cycle(2, 0.125); 3];
        assert_eq!(full_block_verify(&[&full, &cut_short]), vec![0.25]);
        assert!(full_block_verify(&[]).is_empty());
    }

    #[test]
    fn every_two_arms_of_a_drafter_on_a_prompt_are_compared_both_ways_round() {
        let (fast, slow) = (vec![cycle(4, 0.25); 3], vec![cycle(4, 0.5); 3]);
        let mut ratios = pair_ratios(
            [
                request(Some("dflash"), "unmodified", 0, &fast),
                request(Some("dflash"), "fixed", 0, &slow),
            ],
            &BTreeSet::new(),
        );
        ratios.sort_by(f64::total_cmp);
        assert_eq!(ratios, vec![0.5, 2.0]);
    }

    #[test]
    fn the_target_alone_other_drafters_and_other_prompts_are_not_paired() {
        let (fast, slow) = (vec![cycle(4, 0.25); 3], vec![cycle(4, 0.5); 3]);
        let ratios = pair_ratios(
            [
                request(None, "ar", 0, &fast),
                request(Some("dflash"), "unmodified", 0, &slow),
                request(Some("eagle"), "unmodified", 0, &fast),
                request(Some("dflash"), "unmodified", 1, &fast),
            ],
            &BTreeSet::new(),
        );
        assert!(ratios.is_empty(), "{ratios:?}");
    }

    #[test]
    fn arms_of_a_left_out_method_are_not_compared() {
        // Retrieval's verification also reads the target's attention: not the same work.
        let (fast, slow) = (vec![cycle(4, 0.25); 3], vec![cycle(4, 0.5); 3]);
        let arms = || {
            [
                request(Some("dflash"), "unmodified", 0, &fast),
                request(Some("dflash"), "fixed", 0, &fast),
                request(Some("dflash"), "retrieval", 0, &slow),
            ]
        };
        assert_eq!(
            pair_ratios(arms(), &BTreeSet::from(["retrieval"])),
            vec![1.0, 1.0]
        );
        assert_eq!(pair_ratios(arms(), &BTreeSet::new()).len(), 6);
    }

    #[test]
    fn arms_doing_the_same_work_in_the_same_time_have_no_spread() {
        let same = vec![cycle(4, 0.25); 3];
        let ratios = pair_ratios(
            (0..4).map(|_| request(Some("dflash"), "unmodified", 0, &same)),
            &BTreeSet::new(),
        );
        assert_eq!(
            spread(ratios),
            Some(VerifySpread {
                ratios: 12,
                p10: 1.0,
                p90: 1.0
            })
        );
    }

    #[test]
    fn the_spread_is_the_tenth_to_ninetieth_percentile_of_the_ratios() {
        let ratios: Vec<f64> = (1..=11).map(|i| i as f64 / 10.0).collect();
        let found = spread(ratios).unwrap();
        assert_eq!((found.ratios, found.p10, found.p90), (11, 0.2, 1.0));
    }

    #[test]
    fn too_few_ratios_give_no_spread() {
        assert_eq!(spread(vec![1.0; 9]), None);
        assert_eq!(
            spread(vec![f64::NAN; 12]),
            None,
            "non-finite ratios are not counted"
        );
    }
}
