//! Which keys each new row sees. Rows are the `T` tokens of one forward pass, keys the `L = past + T`
//! positions in the cache after it. Worked example, past = 3, T = 2, causal:
//! row 0 (position 3) sees keys 0..=3, row 1 (position 4) sees keys 0..=4.

use crate::error::{ModelError, Result};
use tch::{Device, Kind, Tensor};

pub enum AttentionMask {
    /// Row i sees keys `0..=past + i` (prefill, chains, PARD mask tokens).
    Causal,
    /// Every row sees every key (DFlash's bidirectional draft block).
    Full,
    /// Explicit `[T, L]` boolean mask, `true` = visible (trees, custom blocks).
    Rows(Tensor),
}

impl AttentionMask {
    /// Tree mask for `parents.len()` new rows after `past` committed keys: each row sees the whole past,
    /// itself and its ancestors. `parents[i]` is the index of row i's parent among the new rows (`None` for
    /// a child of the last committed token); parents must come before children.
    pub fn tree(past: i64, parents: &[Option<usize>], device: Device) -> Result<Self> {
        let t = parents.len();
        let mut visible = vec![false; t * t];
        for (i, parent) in parents.iter().enumerate() {
            visible[i * t + i] = true;
            if let Some(p) = *parent {
                if p >= i {
                    return Err(ModelError::tensor(
                        "tree mask",
                        format!("row {i} has parent {p}: parents must precede children"),
                    ));
                }
                for j in 0..t {
                    if visible[p * t + j] {
                        visible[i * t + j] = true;
                    }
                }
            }
        }
        let block = Tensor::from_slice(&visible).view([t as i64, t as i64]);
        let prefix = Tensor::ones([t as i64, past], (Kind::Bool, Device::Cpu));
        Ok(AttentionMask::Rows(
            Tensor::cat(&[prefix, block], 1).to_device(device),
        ))
    }

    /// The `[T, L]` boolean mask, or `None` when every row sees every key (no mask needed).
    pub fn materialize(&self, past: i64, rows: i64, device: Device) -> Result<Option<Tensor>> {
        let keys = past + rows;
        match self {
            AttentionMask::Full => Ok(None),
            AttentionMask::Causal if rows == 1 => Ok(None),
            AttentionMask::Causal => {
                let key_index = Tensor::arange(keys, (Kind::Int64, device)).unsqueeze(0); // [1, L]
                let row_position = Tensor::arange(rows, (Kind::Int64, device)).unsqueeze(1) + past; // [T, 1]
                Ok(Some(key_index.le_tensor(&row_position)))
            }
            AttentionMask::Rows(mask) => {
                if mask.size() != [rows, keys] || mask.kind() != Kind::Bool {
                    return Err(ModelError::tensor(
                        "attention mask",
                        format!(
                            "expected bool [{rows}, {keys}], got {:?} {:?}",
                            mask.kind(),
                            mask.size()
                        ),
                    ));
                }
                Ok(Some(mask.to_device(device)))
            }
        }
    }

    /// This mask with every row restricted to its last `window` keys: row i (cache index `past + i`) sees
    /// key j only where it saw it before and `j > past + i - window` (a sliding window on the drafter's
    /// attention). A window that covers every key leaves the mask as it is.
    pub fn windowed(&self, past: i64, rows: i64, window: i64, device: Device) -> Result<Self> {
        self.selected(past, rows, &KeySelection::window(window), device)
    }

    /// This mask restricted to `selection`: row i (cache index `past + i`) sees key j only where it saw it
    /// before and either `j > past + i - selection.recent` or `selection.retrieved` marks j.
    pub fn selected(
        &self,
        past: i64,
        rows: i64,
        selection: &KeySelection,
        device: Device,
    ) -> Result<Self> {
        if selection.recent < 1 {
            return Err(ModelError::tensor(
                "attention window",
                format!("{} keys: a window needs at least 1", selection.recent),
            ));
        }
        let keys = past + rows;
        let visible = match self.materialize(past, rows, device)? {
            Some(mask) => mask,
            None => Tensor::ones([rows, keys], (Kind::Bool, device)),
        };
        let key_index = Tensor::arange(keys, (Kind::Int64, device)).unsqueeze(0); // [1, L]
        let row_index = Tensor::arange(rows, (Kind::Int64, device)).unsqueeze(1) + past; // [T, 1]
        let mut chosen = key_index.gt_tensor(&(row_index - selection.recent)); // [T, L]
        if let Some(retrieved) = &selection.retrieved {
            // Marks cover the keys known when they were chosen; later keys come only through `recent`.
            let known = retrieved.size()[0].min(keys);
            let marks = Tensor::cat(
                &[
                    retrieved.narrow(0, 0, known).to_device(device),
                    Tensor::zeros([keys - known], (Kind::Bool, device)),
                ],
                0,
            );
            chosen = chosen.logical_or(&marks.unsqueeze(0));
        }
        Ok(AttentionMask::Rows(visible.logical_and(&chosen)))
    }

    /// Visible-key count `n_i` of every row: what SharpDraft's `s(n_i)` is computed from. Causal and full
    /// masks are counted without materialising them.
    pub fn visible_counts(&self, past: i64, rows: i64) -> Result<Vec<i64>> {
        match self {
            AttentionMask::Causal => Ok((1..=rows).map(|i| past + i).collect()),
            AttentionMask::Full => Ok(vec![past + rows; rows as usize]),
            // Summed where the mask lives; only the [T] counts cross to the host.
            AttentionMask::Rows(mask) => {
                let mask = self.materialize(past, rows, mask.device())?;
                crate::query_scaling::visible_counts(mask.as_ref(), rows, past + rows)
            }
        }
    }
}

/// The keys a drafter's rows may attend to, beyond what their mask allows: the last `recent` keys of
/// every row (a sliding window) and, for retrieval, the keys the target ranked highest.
#[derive(Debug)]
pub struct KeySelection {
    /// Every row sees its last `recent` keys (itself included).
    pub recent: i64,
    /// `[K]` bool over cache indices `0..K`: keys every row also sees. `None`: none beyond `recent`.
    pub retrieved: Option<Tensor>,
    /// Whether the keys this hides stay hidden for good, so a drafter may drop them from its cache (a
    /// user's sliding window). Retrieval's windows do not: the keys it retrieves later lie anywhere.
    pub bounds_cache: bool,
}

impl KeySelection {
    /// A plain sliding window of `recent` keys; the drafter's cache keeps only what it shows.
    pub fn window(recent: i64) -> Self {
        Self {
            recent,
            retrieved: None,
            bounds_cache: true,
        }
    }

    /// The last `recent` keys for now, over a cache that keeps every key (retrieval widens it later).
    pub fn recent_only(recent: i64) -> Self {
        Self {
            bounds_cache: false,
            ..Self::window(recent)
        }
    }

    /// The window a drafter's cache may be bounded to under `selection` (`None`: keep every key).
    pub fn cache_bound(selection: Option<&Self>) -> Option<i64> {
        selection
            .filter(|s| s.bounds_cache && s.retrieved.is_none())
            .map(|s| s.recent)
    }

    /// Whether every key of a row at cache index `past + rows - 1` is already inside the window, so the
    /// selection changes nothing.
    pub fn covers(&self, keys: i64) -> bool {
        self.retrieved.is_none() && keys <= self.recent
    }
}

impl Clone for KeySelection {
    fn clone(&self) -> Self {
        Self {
            recent: self.recent,
            retrieved: self.retrieved.as_ref().map(Tensor::shallow_clone),
            bounds_cache: self.bounds_cache,
        }
    }
}
