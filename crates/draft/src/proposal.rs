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

    /// The proposal cut to its nodes above depth `depth` (depth 0 holds the root's children), when
    /// those are a prefix of its nodes, as in a chain or a tree grown level by level: node indices,
    /// and so the drafter's reading of the accepted path, stay what they were. A proposal whose
    /// shallow nodes are not a prefix is returned whole.
    pub fn within_depth(self, depth: usize) -> Self {
        let depths = self.depths();
        let keep = depths.iter().take_while(|&&d| (d as usize) < depth).count();
        if keep == self.len() || depths[keep..].iter().any(|&d| (d as usize) < depth) {
            return self;
        }
        Self {
            tokens: self.tokens[..keep].to_vec(),
            parents: self.parents[..keep].to_vec(),
            draft_probs: self.draft_probs.map(|q| q.narrow(0, 0, keep as i64)),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_cut_to_a_depth_keeps_its_first_drafts() {
        let cut = Proposal::chain(vec![5, 6, 7, 8], None).within_depth(2);
        assert_eq!(cut.tokens, vec![5, 6]);
        assert_eq!(cut.parents, vec![None, Some(0)]);
    }

    #[test]
    fn a_tree_grown_level_by_level_is_cut_to_its_shallow_levels() {
        // Two children of the root, then one child of each.
        let tree = Proposal {
            tokens: vec![1, 2, 3, 4],
            parents: vec![None, None, Some(0), Some(1)],
            draft_probs: None,
        };
        let cut = tree.within_depth(1);
        assert_eq!(cut.tokens, vec![1, 2]);
    }

    #[test]
    fn a_tree_whose_shallow_nodes_are_not_a_prefix_is_kept_whole() {
        let tree = Proposal {
            tokens: vec![1, 3, 2],
            parents: vec![None, Some(0), None],
            draft_probs: None,
        };
        assert_eq!(tree.within_depth(1).len(), 3);
    }
}
