//! Verification on hand-built distributions: golden greedy cases, and seeded statistical checks that
//! stochastic verification reproduces the target distribution (chain with known q, deterministic trees).
mod common;

use common::chi_square_p_value;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sharpdraft_decode::{verify_greedy, verify_stochastic, Verdict};
use sharpdraft_draft::Proposal;
use sharpdraft_model::sampling::inverse_cdf as sample;

#[test]
fn greedy_accepts_the_longest_matching_prefix_and_emits_the_targets_next_token() {
    let chain = Proposal::chain(vec![7, 8, 9], None);
    assert_eq!(
        verify_greedy(&[7, 8, 5, 1], &chain),
        Verdict {
            accepted: vec![0, 1],
            bonus: 5
        }
    );
    assert_eq!(
        verify_greedy(&[7, 8, 9, 4], &chain),
        Verdict {
            accepted: vec![0, 1, 2],
            bonus: 4
        }
    );
    assert_eq!(
        verify_greedy(&[3, 8, 9, 4], &chain),
        Verdict {
            accepted: vec![],
            bonus: 3
        }
    );
}

#[test]
fn greedy_follows_whichever_sibling_matches() {
    // root -> {a=10 (node 0), b=11 (node 1)}; node 0 -> {12 (node 2)}; node 1 -> {13 (node 3)}.
    let tree = Proposal {
        tokens: vec![10, 11, 12, 13],
        parents: vec![None, None, Some(0), Some(1)],
        draft_probs: None,
    };
    // Rows: root, node0, node1, node2, node3. The target wants 11 after the root, then 13, then 2.
    let argmax = [11, 0, 13, 0, 2];
    assert_eq!(
        verify_greedy(&argmax, &tree),
        Verdict {
            accepted: vec![1, 3],
            bonus: 2
        }
    );
}

const P_ROOT: [f64; 5] = [0.1, 0.2, 0.3, 0.4, 0.0];
const P_NEXT: [f64; 5] = [0.5, 0.0, 0.25, 0.0, 0.25];
const Q_DRAFT: [f64; 5] = [0.4, 0.3, 0.1, 0.1, 0.1];

#[test]
fn rejection_sampling_with_a_known_draft_distribution_reproduces_the_target() {
    let mut rng = StdRng::seed_from_u64(11);
    let (mut first, mut second_given_accept) = ([0usize; 5], [0usize; 5]);
    for _ in 0..40_000 {
        // The drafter samples d1 ~ q and d2 ~ q (its second-step distribution is q too).
        let d1 = sample(&Q_DRAFT, rng.random());
        let d2 = sample(&Q_DRAFT, rng.random());
        let proposal = Proposal::chain(vec![d1, d2], None);
        let mut target = |row: usize| {
            if row == 0 {
                P_ROOT.to_vec()
            } else {
                P_NEXT.to_vec()
            }
        };
        let mut draft = |_: usize| Some(Q_DRAFT.to_vec());
        let mut uniform = || rng.random::<f64>();
        let verdict = verify_stochastic(&mut target, &mut draft, &proposal, &mut uniform);
        let emitted: Vec<i64> = verdict
            .accepted
            .iter()
            .map(|&n| proposal.tokens[n])
            .chain([verdict.bonus])
            .collect();
        first[emitted[0] as usize] += 1;
        if emitted.len() > 1 {
            second_given_accept[emitted[1] as usize] += 1;
        }
    }
    assert_eq!(
        first[4], 0,
        "a token the target gives probability 0 is never emitted"
    );
    assert!(chi_square_p_value(&first, &P_ROOT) > 1e-3, "{first:?}");
    assert!(
        chi_square_p_value(&second_given_accept, &P_NEXT) > 1e-3,
        "{second_given_accept:?}"
    );
}

#[test]
fn deterministic_sibling_candidates_reproduce_the_target() {
    let mut rng = StdRng::seed_from_u64(12);
    let mut first = [0usize; 5];
    // Top-2 candidates (tokens 3 and 0), as a tree drafter proposes them: point masses, tried in order.
    let proposal = Proposal {
        tokens: vec![3, 0],
        parents: vec![None, None],
        draft_probs: None,
    };
    for _ in 0..40_000 {
        let mut target = |_: usize| P_ROOT.to_vec();
        let mut draft = |_: usize| None;
        let mut uniform = || rng.random::<f64>();
        let verdict = verify_stochastic(&mut target, &mut draft, &proposal, &mut uniform);
        let token = verdict
            .accepted
            .first()
            .map_or(verdict.bonus, |&n| proposal.tokens[n]);
        first[token as usize] += 1;
    }
    assert!(chi_square_p_value(&first, &P_ROOT) > 1e-3, "{first:?}");
}

#[test]
fn the_statistical_check_can_fail() {
    // Emitting the draft token unconditionally is not lossless; the same test must reject it.
    let mut rng = StdRng::seed_from_u64(13);
    let mut first = [0usize; 5];
    for _ in 0..40_000 {
        first[sample(&Q_DRAFT, rng.random()) as usize] += 1;
    }
    assert!(chi_square_p_value(&first, &P_ROOT) < 1e-6);
}
