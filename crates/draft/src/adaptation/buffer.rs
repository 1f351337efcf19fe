//! The free labels of verification: for every verified row, its token, the target's features there (for
//! drafters that read them) and the target's top-k distribution for the next token, grouped in segments
//! of consecutive committed tokens (one per request), at most `capacity` rows in all.

use super::LearnFrom;
use crate::training::{Divergence, TrainWindow};
use tch::{Device, Kind, Tensor};

/// Consecutive verified rows of one request.
struct Segment {
    tokens: Vec<i64>,
    /// `[T, F]` f32 target features, when the drafter reads them.
    features: Option<Tensor>,
    /// `[T, K]` target ids and probabilities (renormalised over the k) for the token after each row.
    top_ids: Tensor,
    top_probs: Tensor,
    /// Whether the draft was wrong about the token after each row.
    wrong: Vec<bool>,
}

impl Segment {
    fn rows(&self) -> usize {
        self.tokens.len()
    }

    fn bytes(&self) -> usize {
        let tensor = |t: &Tensor| t.numel() * t.kind().elt_size_in_bytes();
        self.tokens.len() * 8
            + self.wrong.len()
            + self.features.as_ref().map_or(0, tensor)
            + tensor(&self.top_ids)
            + tensor(&self.top_probs)
    }

    /// Drops the oldest `n` rows.
    fn drop_front(&mut self, n: usize) {
        let keep = (self.rows() - n) as i64;
        self.tokens.drain(..n);
        self.wrong.drain(..n);
        let tail = |t: &Tensor| t.narrow(0, n as i64, keep).contiguous();
        self.features = self.features.as_ref().map(tail);
        self.top_ids = tail(&self.top_ids);
        self.top_probs = tail(&self.top_probs);
    }
}

pub struct VerifiedBuffer {
    capacity: usize,
    top_k: i64,
    segments: Vec<Segment>,
    peak_bytes: usize,
}

impl VerifiedBuffer {
    pub fn new(capacity: usize, top_k: i64) -> Self {
        Self {
            capacity,
            top_k,
            segments: Vec::new(),
            peak_bytes: 0,
        }
    }

    /// Forgets every row.
    pub fn clear(&mut self) {
        self.segments.clear();
    }

    /// Appends one cycle's verified rows (a new segment when `new_request`: not consecutive with the
    /// rows before): `tokens` `[R]`, the target's `logits` `[R, vocab]` and
    /// `features` `[R, F]` at those rows, and whether the draft was wrong after each. The oldest rows
    /// go once more than `capacity` are held.
    pub fn push(
        &mut self,
        new_request: bool,
        tokens: &[i64],
        logits: &Tensor,
        features: Option<&Tensor>,
        wrong: &[bool],
    ) {
        let _guard = tch::no_grad_guard();
        let k = self.top_k.min(logits.size()[1]);
        let (top_probs, top_ids) = logits
            .to_kind(Kind::Float)
            .softmax(-1, Kind::Float)
            .topk(k, -1, true, true);
        let top_probs = &top_probs / top_probs.sum_dim_intlist(&[1i64][..], true, Kind::Float);
        let features = features.map(|f| f.to_kind(Kind::Float));
        match self.segments.last_mut().filter(|_| !new_request) {
            Some(segment) => {
                segment.tokens.extend_from_slice(tokens);
                segment.wrong.extend_from_slice(wrong);
                segment.features = match (&segment.features, &features) {
                    (Some(old), Some(new)) => Some(Tensor::cat(&[old, new], 0)),
                    _ => None,
                };
                segment.top_ids = Tensor::cat(&[&segment.top_ids, &top_ids], 0);
                segment.top_probs = Tensor::cat(&[&segment.top_probs, &top_probs], 0);
            }
            None => self.segments.push(Segment {
                tokens: tokens.to_vec(),
                features,
                top_ids,
                top_probs,
                wrong: wrong.to_vec(),
            }),
        }
        // Oldest first: whole segments, then the front of the oldest one left.
        while self.rows() > self.capacity {
            let excess = self.rows() - self.capacity;
            if self.segments[0].rows() <= excess {
                self.segments.remove(0);
            } else {
                self.segments[0].drop_front(excess);
            }
        }
        self.peak_bytes = self.peak_bytes.max(self.bytes());
    }

    pub fn rows(&self) -> usize {
        self.segments.iter().map(Segment::rows).sum()
    }

    /// Rows where the draft was wrong.
    pub fn wrong_rows(&self) -> usize {
        self.segments
            .iter()
            .map(|s| s.wrong.iter().filter(|w| **w).count())
            .sum()
    }

    pub fn bytes(&self) -> usize {
        self.segments.iter().map(Segment::bytes).sum()
    }

    /// The most bytes held at once.
    pub fn peak_bytes(&self) -> usize {
        self.peak_bytes
    }

    /// One training window per segment of at least `min_rows` rows, on `device`; rows weighted by
    /// `learn_from`.
    pub fn windows(
        &self,
        min_rows: usize,
        learn_from: LearnFrom,
        divergence: Divergence,
        device: Device,
    ) -> Vec<TrainWindow> {
        self.segments
            .iter()
            .filter(|s| s.rows() >= min_rows)
            .map(|s| TrainWindow {
                tokens: s.tokens.clone(),
                features: s.features.as_ref().map(|f| f.to_device(device)),
                top_ids: s.top_ids.to_device(device),
                top_probs: s.top_probs.to_device(device),
                row_weights: match learn_from {
                    LearnFrom::All => None,
                    LearnFrom::Rejected => Some(
                        Tensor::from_slice(
                            &s.wrong
                                .iter()
                                .map(|&w| f32::from(u8::from(w)))
                                .collect::<Vec<_>>(),
                        )
                        .to_device(device),
                    ),
                },
                divergence,
            })
            .collect()
    }
}
