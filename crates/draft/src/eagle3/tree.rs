//! The shape of an EAGLE-3 draft tree, its bounds, and the pure steps of growing and pruning it:
//! choosing the next frontier from scored children and re-ranking the grown tree into a proposal.

use crate::drafter::{DraftError, Result};
use serde::Deserialize;

/// Tree (or chain) shape of one proposal. A `tree:` block (or the `--tree-*` flags: one declaration
/// for both) names any of its fields; the others take EAGLE's defaults ([`TreeShape::EAGLE`]). On the
/// command line no `--tree-*` flag means no tree (a chain).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct TreeShape {
    /// EAGLE-3 dynamic tree: expansion steps after the first layer (a chain of K tokens has depth
    /// K - 1).
    #[serde(default = "eagle_depth")]
    #[arg(id = "tree_depth", long = "tree-depth", value_name = "TREE_DEPTH", default_value_t = eagle_depth())]
    pub depth: usize,
    /// EAGLE-3 dynamic tree: children kept per node and frontier width; 1 means a chain.
    #[serde(default = "eagle_top_k")]
    #[arg(id = "tree_topk", long = "tree-topk", value_name = "TREE_TOPK", default_value_t = eagle_top_k())]
    pub top_k: usize,
    /// EAGLE-3 dynamic tree: draft tokens kept per cycle after re-ranking (EAGLE's total_token - 1).
    #[serde(default = "eagle_total_tokens")]
    #[arg(id = "tree_tokens", long = "tree-tokens", value_name = "TREE_TOKENS", default_value_t = eagle_total_tokens())]
    pub total_tokens: usize,
}

fn eagle_depth() -> usize {
    TreeShape::EAGLE.depth
}
fn eagle_top_k() -> usize {
    TreeShape::EAGLE.top_k
}
fn eagle_total_tokens() -> usize {
    TreeShape::EAGLE.total_tokens
}

/// The deepest tree a drafter expands: each step is one head pass over the frontier.
pub const MAX_TREE_DEPTH: usize = 64;

/// The most draft tokens one tree may keep (the target verifies them all in one pass).
pub const MAX_TREE_TOKENS: usize = 1024;

impl TreeShape {
    /// EAGLE's dynamic tree: depth 5, 8 children a node, 48 draft tokens kept.
    pub const EAGLE: TreeShape = TreeShape {
        depth: 5,
        top_k: 8,
        total_tokens: 48,
    };

    /// Checks the shape against a draft vocabulary of `draft_vocab` tokens: every option at least 1 (depth
    /// at least 0), top-k at most the vocabulary, and bounds that keep one tree's passes and cache rows
    /// small. Errors name the command-line option.
    pub fn validate(&self, draft_vocab: usize) -> Result<()> {
        let invalid = |option: &str, value: usize, reason: String| DraftError::InvalidOption {
            option: option.into(),
            value: value.to_string(),
            reason,
        };
        // A chain of `--draft-len` K is the tree of depth K - 1 and top-k 1: its bound is the flag's.
        let is_chain = self.top_k == 1 && self.total_tokens == self.depth + 1;
        if is_chain && self.depth > MAX_TREE_DEPTH {
            return Err(invalid(
                "--draft-len",
                self.total_tokens,
                format!(
                    "an EAGLE-3 chain drafts at most {} tokens (its head runs one step per draft)",
                    MAX_TREE_DEPTH + 1
                ),
            ));
        }
        if self.top_k == 0 || self.top_k > draft_vocab.min(MAX_TREE_TOKENS) {
            return Err(invalid(
                "--tree-topk",
                self.top_k,
                format!(
                    "must lie in 1..={} (the draft vocabulary has {draft_vocab} tokens)",
                    draft_vocab.min(MAX_TREE_TOKENS)
                ),
            ));
        }
        if self.depth > MAX_TREE_DEPTH {
            return Err(invalid(
                "--tree-depth",
                self.depth,
                format!("must lie in 1..={MAX_TREE_DEPTH}"),
            ));
        }
        let reachable = self.top_k + self.depth * self.top_k * self.top_k;
        if self.total_tokens == 0 || self.total_tokens > reachable.min(MAX_TREE_TOKENS) {
            return Err(invalid(
                "--tree-tokens",
                self.total_tokens,
                format!(
                    "must lie in 1..={} (a tree of depth {} and top-k {} holds at most {reachable} nodes; one verification pass at most {MAX_TREE_TOKENS})",
                    reachable.min(MAX_TREE_TOKENS),
                    self.depth,
                    self.top_k
                ),
            ));
        }
        Ok(())
    }

    pub fn chain(len: usize) -> Self {
        Self {
            depth: len.saturating_sub(1),
            top_k: 1,
            total_tokens: len,
        }
    }
}

/// One node of the growing draft tree.
pub struct Node {
    pub token: i64,
    pub parent: Option<usize>,
    pub score: f64,
    /// Cache row of this node once it has been fed (frontier nodes only).
    pub row: Option<i64>,
}

/// A scored candidate child of a frontier node: the parent node, the token, the cumulative
/// log-probability of the path ending in it, and the frontier row its parent was fed at.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Child {
    pub parent: usize,
    pub token: i64,
    pub score: f64,
    pub row: usize,
}

/// One expansion step: adds every child to `nodes`, best first (by cumulative score; equal scores keep
/// the order given), and returns the next frontier, the `top_k` best children as node indices, with
/// the frontier rows of their parents (whose hidden states the next step continues from).
pub fn grow(
    nodes: &mut Vec<Node>,
    mut children: Vec<Child>,
    top_k: usize,
) -> (Vec<usize>, Vec<i64>) {
    children.sort_by(|a, b| b.score.total_cmp(&a.score));
    let mut frontier = Vec::new();
    let mut rows = Vec::new();
    for (rank, child) in children.into_iter().enumerate() {
        nodes.push(Node {
            token: child.token,
            parent: Some(child.parent),
            score: child.score,
            row: None,
        });
        if rank < top_k {
            frontier.push(nodes.len() - 1);
            rows.push(child.row as i64);
        }
    }
    (frontier, rows)
}

/// The proposal's tree: the `total_tokens` best nodes by score, closed under ancestors (a node is
/// taken with every ancestor not yet taken, or skipped when they do not all fit), in creation order
/// (parents before children). Returns the kept node indices and, for each, its parent's position in
/// that list (`None` for children of the root).
pub fn rerank(nodes: &[Node], total_tokens: usize) -> Result<(Vec<usize>, Vec<Option<usize>>)> {
    let mut order: Vec<usize> = (0..nodes.len()).collect();
    order.sort_by(|&a, &b| nodes[b].score.total_cmp(&nodes[a].score));
    let mut keep = vec![false; nodes.len()];
    let mut kept = 0;
    for &n in &order {
        if kept >= total_tokens {
            break;
        }
        let mut chain = vec![n];
        let mut ancestor = nodes[n].parent;
        while let Some(a) = ancestor {
            chain.push(a);
            ancestor = nodes[a].parent;
        }
        let new: Vec<usize> = chain.into_iter().filter(|&c| !keep[c]).collect();
        if kept + new.len() > total_tokens {
            continue;
        }
        kept += new.len();
        new.into_iter().for_each(|c| keep[c] = true);
    }
    let kept_nodes: Vec<usize> = (0..nodes.len()).filter(|&i| keep[i]).collect();
    let mut position = vec![None; nodes.len()];
    for (i, &n) in kept_nodes.iter().enumerate() {
        position[n] = Some(i);
    }
    let parents = kept_nodes
        .iter()
        .map(|&n| match nodes[n].parent {
            None => Ok(None),
            Some(p) => position[p].map(Some).ok_or_else(|| {
                DraftError::Protocol(format!(
                    "EAGLE-3 tree: node {n} was kept without its parent {p}"
                ))
            }),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((kept_nodes, parents))
}
