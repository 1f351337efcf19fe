//! EAGLE-3's tree search as pure functions, checked against trees worked out by hand: which children
//! become the next frontier, and which nodes the re-ranking keeps for verification.

use sharpdraft_draft::eagle3::tree::{grow, rerank, Child, Node};

fn root_children(scores: &[(i64, f64)]) -> Vec<Node> {
    scores
        .iter()
        .map(|&(token, score)| Node {
            token,
            parent: None,
            score,
            row: None,
        })
        .collect()
}

fn child(parent: usize, token: i64, score: f64, row: usize) -> Child {
    Child {
        parent,
        token,
        score,
        row,
    }
}

#[test]
fn the_best_children_by_path_score_form_the_next_frontier_with_their_parents_rows() {
    // Depth 0: tokens 10 (log p -0.1) and 20 (-0.5). Their children's path scores:
    // 10 -> 11: -0.3, 10 -> 12: -1.0, 20 -> 21: -0.6, 20 -> 22: -2.0.
    let mut nodes = root_children(&[(10, -0.1), (20, -0.5)]);
    let children = vec![
        child(0, 11, -0.3, 0),
        child(0, 12, -1.0, 0),
        child(1, 21, -0.6, 1),
        child(1, 22, -2.0, 1),
    ];
    let (frontier, rows) = grow(&mut nodes, children, 2);
    let tokens: Vec<i64> = nodes.iter().map(|n| n.token).collect();
    assert_eq!(
        tokens,
        [10, 20, 11, 21, 12, 22],
        "children are added best first"
    );
    assert_eq!(frontier, [2, 3], "11 and 21 are the two best");
    assert_eq!(rows, [0, 1], "each continues from its parent's row");
    assert_eq!(nodes[3].parent, Some(1));
}

#[test]
fn reranking_keeps_the_best_nodes_with_all_their_ancestors_in_creation_order() {
    // Root children 10 (-0.1), 20 (-0.5); grandchildren 11 (-0.3, of 10), 21 (-0.6, of 20),
    // 12 (-1.0, of 10); great-grandchild 111 (-0.35, of 11).
    let mut nodes = root_children(&[(10, -0.1), (20, -0.5)]);
    grow(
        &mut nodes,
        vec![
            child(0, 11, -0.3, 0),
            child(1, 21, -0.6, 1),
            child(0, 12, -1.0, 0),
        ],
        2,
    );
    grow(&mut nodes, vec![child(2, 111, -0.35, 0)], 1);
    // Best first: 10, 11, 111, 20, 21, 12. Four tokens keep 10, 11, 111, 20.
    let (kept, parents) = rerank(&nodes, 4).unwrap();
    let tokens: Vec<i64> = kept.iter().map(|&i| nodes[i].token).collect();
    assert_eq!(
        tokens,
        [10, 20, 11, 111],
        "creation order: parents before children"
    );
    assert_eq!(parents, [None, None, Some(0), Some(2)]);
}

#[test]
fn a_node_whose_ancestors_do_not_fit_is_skipped_and_the_next_best_that_fit_are_kept() {
    // A chain 1 -> 2 -> 3 where 3 scores best but brings both ancestors: with room for 2 tokens it is
    // skipped, and the next best, 1 and then 2, are kept (4 scores worse than both).
    let mut nodes = root_children(&[(1, -0.2), (4, -0.9)]);
    grow(&mut nodes, vec![child(0, 2, -0.3, 0)], 1);
    grow(&mut nodes, vec![child(2, 3, -0.05, 0)], 1);
    let (kept, parents) = rerank(&nodes, 2).unwrap();
    let tokens: Vec<i64> = kept.iter().map(|&i| nodes[i].token).collect();
    assert_eq!(tokens, [1, 2]);
    assert_eq!(parents, [None, Some(0)]);
    let (kept, _) = rerank(&nodes, 3).unwrap();
    assert_eq!(kept.len(), 3);
}

#[test]
fn a_chain_reranks_to_itself() {
    let mut nodes = root_children(&[(7, -0.1)]);
    grow(&mut nodes, vec![child(0, 8, -0.2, 0)], 1);
    grow(&mut nodes, vec![child(1, 9, -0.4, 0)], 1);
    let (kept, parents) = rerank(&nodes, 3).unwrap();
    assert_eq!(kept, [0, 1, 2]);
    assert_eq!(parents, [None, Some(0), Some(1)]);
}

#[test]
fn a_chain_too_long_for_the_head_is_refused_as_draft_len_and_a_tree_as_its_own_flags() {
    use sharpdraft_draft::eagle3::tree::{TreeShape, MAX_TREE_DEPTH};
    let err = TreeShape::chain(66).validate(100).unwrap_err().to_string();
    assert!(err.contains("--draft-len") && err.contains("66"), "{err}");
    assert!(!err.contains("--tree-depth"), "{err}");
    TreeShape::chain(MAX_TREE_DEPTH + 1).validate(100).unwrap();
    let tree = TreeShape {
        depth: MAX_TREE_DEPTH + 1,
        top_k: 2,
        total_tokens: 10,
    };
    let err = tree.validate(100).unwrap_err().to_string();
    assert!(err.contains("--tree-depth"), "{err}");
}
