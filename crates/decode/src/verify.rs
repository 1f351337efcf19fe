//! Verification as pure functions: target distributions and a proposal in, the accepted path and the
//! bonus token out. The driver applies the verdict to the caches.
//!
//! Rows: row 0 is the root (the last committed token), row `1 + i` is proposal node i; a node's target
//! distribution is the one at its parent's row.

use sharpdraft_draft::Proposal;
use sharpdraft_model::sampling::inverse_cdf;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Proposal nodes on the accepted path, root to leaf.
    pub accepted: Vec<usize>,
    /// The token the target emits after the accepted path.
    pub bonus: i64,
}

/// Greedy verification: follow the child whose token equals the target's argmax at the current row;
/// stop at the first row where none does and emit that argmax. `target_argmax[row]` for rows `0..=N`.
pub fn verify_greedy(target_argmax: &[i64], proposal: &Proposal) -> Verdict {
    let mut accepted = Vec::new();
    let (mut node, mut row) = (None, 0);
    loop {
        let want = target_argmax[row];
        match proposal
            .children(node)
            .find(|&child| proposal.tokens[child] == want)
        {
            Some(child) => {
                accepted.push(child);
                node = Some(child);
                row = child + 1;
            }
            None => {
                return Verdict {
                    accepted,
                    bonus: want,
                }
            }
        }
    }
}

/// Lossless stochastic verification (Leviathan et al. 2023; SpecInfer's multi-candidate rule for
/// trees, docs/drafters.md §5.2-5.3). At each row, children are tried in proposal order: child x is accepted with
/// probability `min(1, p(x) / q(x))`; after a rejection `p <- norm(max(0, p - q))`. Deterministic drafts
/// have `q = point mass at x`, which makes this "accept with p(x), else zero p(x) and renormalise". When no
/// child is accepted, or a leaf is reached, the bonus is drawn from the current `p`.
///
/// `target_probs(row)`: the target's (filtered) distribution at a row. `draft_probs(node)`: the
/// distribution node was sampled from, or `None` for deterministic drafts. `uniform()`: draws in [0, 1).
pub fn verify_stochastic(
    target_probs: &mut dyn FnMut(usize) -> Vec<f64>,
    draft_probs: &mut dyn FnMut(usize) -> Option<Vec<f64>>,
    proposal: &Proposal,
    uniform: &mut dyn FnMut() -> f64,
) -> Verdict {
    let mut accepted = Vec::new();
    let (mut node, mut row) = (None, 0);
    'rows: loop {
        let mut p = normalized(target_probs(row));
        let children: Vec<usize> = proposal.children(node).collect();
        for child in children {
            let x = proposal.tokens[child] as usize;
            let q = draft_probs(child);
            let accept = match &q {
                None => p[x],
                Some(q) if q[x] > 0.0 => (p[x] / q[x]).min(1.0),
                Some(_) => 0.0,
            };
            if uniform() < accept {
                accepted.push(child);
                node = Some(child);
                row = child + 1;
                continue 'rows;
            }
            let residual: Vec<f64> = match &q {
                None => p
                    .iter()
                    .enumerate()
                    .map(|(i, &pi)| if i == x { 0.0 } else { pi })
                    .collect(),
                Some(q) => p.iter().zip(q).map(|(pi, qi)| (pi - qi).max(0.0)).collect(),
            };
            // p == q exactly leaves nothing: rejection then had probability 0, so keep p.
            if residual.iter().sum::<f64>() > 1e-12 {
                p = normalized(residual);
            }
        }
        return Verdict {
            accepted,
            bonus: inverse_cdf(&p, uniform()),
        };
    }
}

fn normalized(mut p: Vec<f64>) -> Vec<f64> {
    let total: f64 = p.iter().sum();
    if total > 0.0 {
        p.iter_mut().for_each(|x| *x /= total);
    }
    p
}
