//! A draft vocabulary: the tokens a drafter drafts over, a subset of the target's vocabulary (the most
//! frequent tokens of its training data) so that its LM head reads only those rows. The target still
//! verifies over its whole vocabulary. The published form is EAGLE-3's: `d2t` `[V]` i64 offsets
//! (target id = draft id + d2t[draft id]) and `t2d` `[vocab]` bool (which target ids it holds), with
//! `draft_vocab_size` V in config.json; a checkpoint without them drafts over the whole vocabulary.

use crate::drafter::{DraftError, Result};
use crate::random_init::RawTensor;
use std::collections::BTreeMap;
use std::path::Path;
use tch::{Device, Kind, Tensor};

#[derive(Debug, Clone, PartialEq)]
pub struct DraftVocabulary {
    /// `[V]`: target id = draft id + d2t[draft id].
    d2t: Vec<i64>,
}

impl DraftVocabulary {
    /// The vocabulary of `target_ids`, increasing (draft id i is the i-th smallest).
    pub fn of_target_ids(target_ids: &[i64]) -> Self {
        Self {
            d2t: target_ids
                .iter()
                .enumerate()
                .map(|(i, &t)| t - i as i64)
                .collect(),
        }
    }

    /// The whole vocabulary of `vocab` tokens (all offsets zero).
    pub fn whole(vocab: i64) -> Self {
        Self {
            d2t: vec![0; vocab.max(0) as usize],
        }
    }

    /// Reads `d2t` from a checkpoint's side tensors for a drafter of `draft_vocab` tokens over a target
    /// of `vocab`: the whole vocabulary when `draft_vocab == vocab` and no `d2t` is given. Every id must
    /// land inside the target's vocabulary.
    pub fn read(
        side: &BTreeMap<String, Tensor>,
        draft_vocab: i64,
        vocab: i64,
        dir: &Path,
    ) -> Result<Self> {
        let error = |reason: String| DraftError::Checkpoint {
            path: dir.display().to_string(),
            reason,
        };
        let d2t = match side.get("d2t") {
            Some(d2t) if d2t.size() == [draft_vocab] => {
                Vec::<i64>::try_from(d2t.to_kind(Kind::Int64))?
            }
            Some(d2t) => {
                return Err(error(format!(
                    "tensor d2t has shape {:?}, [{draft_vocab}] expected",
                    d2t.size()
                )))
            }
            None if draft_vocab == vocab => return Ok(Self::whole(vocab)),
            None => {
                return Err(error(format!(
                    "missing tensor d2t [{draft_vocab}] (draft_vocab_size {draft_vocab} < vocab_size {vocab})"
                )))
            }
        };
        if let Some((i, _)) = (d2t.iter().enumerate())
            .find(|(i, off)| *i as i64 + **off < 0 || *i as i64 + **off >= vocab)
        {
            return Err(error(format!(
                "d2t[{i}] maps outside the target vocabulary"
            )));
        }
        Ok(Self { d2t })
    }

    /// V, the tokens drafted over.
    pub fn len(&self) -> usize {
        self.d2t.len()
    }

    pub fn is_empty(&self) -> bool {
        self.d2t.is_empty()
    }

    /// Whether it is the whole vocabulary of `vocab` tokens, in order.
    pub fn is_whole(&self, vocab: i64) -> bool {
        self.d2t.len() as i64 == vocab && self.d2t.iter().all(|&o| o == 0)
    }

    /// The target id of draft id `draft_id`.
    pub fn to_target(&self, draft_id: i64) -> i64 {
        draft_id + self.d2t[draft_id as usize]
    }

    /// The target ids `[V]` i64 on `device`, in draft-id order.
    pub fn target_ids(&self, device: Device) -> Tensor {
        let ids: Vec<i64> = (0..self.len() as i64).map(|d| self.to_target(d)).collect();
        Tensor::from_slice(&ids).to_device(device)
    }

    /// Target id -> draft id (or -1 when this vocabulary does not hold it), `[vocab]` i64 on the CPU.
    pub fn target_to_draft(&self, vocab: i64) -> Tensor {
        let mut map = vec![-1i64; vocab as usize];
        for draft_id in 0..self.len() as i64 {
            map[self.to_target(draft_id) as usize] = draft_id;
        }
        Tensor::from_slice(&map)
    }

    /// `d2t` and `t2d` (over a target of `vocab` tokens) as the published checkpoint holds them.
    pub(crate) fn tensors(&self, vocab: i64) -> Vec<RawTensor> {
        let mut holds = vec![0u8; vocab as usize];
        for draft_id in 0..self.len() as i64 {
            holds[self.to_target(draft_id) as usize] = 1;
        }
        vec![
            (
                "d2t".into(),
                safetensors::Dtype::I64,
                vec![self.d2t.len()],
                self.d2t.iter().flat_map(|v| v.to_le_bytes()).collect(),
            ),
            (
                "t2d".into(),
                safetensors::Dtype::BOOL,
                vec![holds.len()],
                holds,
            ),
        ]
    }
}
