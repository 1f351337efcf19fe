//! What a drafter proposes: a tree of draft tokens hanging off the root (the last committed token, whose
//! target KV is computed in the verification pass). A chain is the tree where node i's parent is i - 1.
//!
//! Nodes are stored parents-first: `parents[i] < i` whenever it is `Some`. Example (root r):
//! ```text
//!        r
//!      /   \        tokens  = [a, b, c, d]
//!     a     b       parents = [None, None, Some(0), Some(0)]
//!    / \            depths  = [0, 0, 1, 1]
//!   c   d
//! ```

use tch::Tensor;

#[derive(Debug)]
pub struct Proposal {
    pub tokens: Vec<i64>,
    /// `None`: child of the root.
    pub parents: Vec<Option<usize>>,
    /// `[N, vocab]` full-vocabulary probabilities that node i was sampled from (the drafter's distribution
    /// at its parent). `None` for deterministic drafts (argmax / top-k), which verification treats as
    /// point masses.
    pub draft_probs: Option<Tensor>,
}

impl Proposal {
    pub fn empty() -> Self {
        Self {
            tokens: Vec::new(),
            parents: Vec::new(),
            draft_probs: None,
        }
    }

    pub fn chain(tokens: Vec<i64>, draft_probs: Option<Tensor>) -> Self {
        let parents = (0..tokens.len()).map(|i| i.checked_sub(1)).collect();
        Self {
            tokens,
            parents,
            draft_probs,
        }
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Depth of every node (children of the root have depth 0).
    pub fn depths(&self) -> Vec<i64> {
        let mut depths = Vec::with_capacity(self.parents.len());
        for parent in &self.parents {
            depths.push(parent.map_or(0, |p| depths[p] + 1));
        }
        depths
    }

    /// Children of `parent` (None = root), in proposal order (the order verification tries them in).
    pub fn children(&self, parent: Option<usize>) -> impl Iterator<Item = usize> + '_ {
        self.parents
            .iter()
            .enumerate()
            .filter(move |(_, p)| **p == parent)
            .map(|(i, _)| i)
    }

    /// Checks the parents-first invariant and the probability shape.
    pub fn validate(&self, vocab: i64) -> Result<(), String> {
        if self.tokens.len() != self.parents.len() {
            return Err(format!(
                "{} tokens but {} parents",
                self.tokens.len(),
                self.parents.len()
            ));
        }
        for (i, parent) in self.parents.iter().enumerate() {
            if matches!(parent, Some(p) if *p >= i) {
                return Err(format!(
                    "node {i} has parent {parent:?}: parents must precede children"
                ));
            }
        }
        if let Some(&bad) = self.tokens.iter().find(|&&t| t < 0 || t >= vocab) {
            return Err(format!(
                "draft token {bad} outside the target vocabulary of {vocab}"
            ));
        }
        if let Some(probs) = &self.draft_probs {
            if probs.size() != [self.tokens.len() as i64, vocab] {
                return Err(format!(
                    "draft_probs {:?}, expected [{}, {vocab}]",
                    probs.size(),
                    self.tokens.len()
                ));
            }
        }
        Ok(())
    }
}
