//! Which keys each new row sees. Rows are the `T` tokens of one forward pass, keys the `L = past + T`
//! positions in the cache after it. Worked example, past = 3, T = 2, causal:
//! row 0 (position 3) sees keys 0..=3, row 1 (position 4) sees keys 0..=4.

use crate::error::{ModelError, Result};
use std::sync::OnceLock;
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
    /// before and either `j > past + i - selection.recent`, `j < selection.sink` or `selection.retrieved`
    /// marks j.
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
        if selection.sink > 0 {
            chosen = chosen.logical_or(&key_index.lt(selection.sink));
        }
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
/// each row, the first `sink` keys of the context (attention sinks: StreamingLLM keeps the first 4),
/// and any `retrieved`.
pub struct KeySelection {
    /// Every row sees its last `recent` keys (itself included).
    pub recent: i64,
    /// Every row sees the first `sink` keys of the context too (0: none).
    pub sink: i64,
    /// `[K]` bool over cache indices `0..K`: keys every row also sees. `None`: none beyond `recent`.
    pub retrieved: Option<Tensor>,
    /// Whether the keys this hides stay hidden for good, so a drafter may drop them from its cache (a
    /// user's sliding window). Retrieval's windows do not: the keys it retrieves later lie anywhere.
    pub bounds_cache: bool,
    /// Layers that see every key whatever the selection (a window on every layer but these: only a
    /// drafter that keeps a window per layer, DFlash, can leave one out).
    pub full_layers: Vec<usize>,
}

/// What a drafter's cache may keep under a sliding window: the last `recent` positions and the first
/// `sink`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowBound {
    pub recent: i64,
    pub sink: i64,
}

impl WindowBound {
    /// The last `recent` positions, no sink.
    pub fn recent(recent: i64) -> Self {
        Self { recent, sink: 0 }
    }
}

impl KeySelection {
    /// A plain sliding window of `recent` keys; the drafter's cache keeps only what it shows.
    pub fn window(recent: i64) -> Self {
        Self {
            recent,
            sink: 0,
            retrieved: None,
            bounds_cache: true,
            full_layers: Vec::new(),
        }
    }

    /// This window with the first `sink` keys of the context visible to every row as well.
    pub fn with_sink(self, sink: i64) -> Self {
        Self { sink, ..self }
    }

    /// This window on every layer but `layers`, which see every key.
    pub fn leaving_full(self, layers: Vec<usize>) -> Self {
        Self {
            full_layers: layers,
            ..self
        }
    }

    /// The last `recent` keys for now, over a cache that keeps every key (retrieval widens it later).
    pub fn recent_only(recent: i64) -> Self {
        Self {
            bounds_cache: false,
            ..Self::window(recent)
        }
    }

    /// What a drafter's cache may be bounded to under `selection` (`None`: keep every key).
    pub fn cache_bound(selection: Option<&Self>) -> Option<WindowBound> {
        selection
            .filter(|s| s.bounds_cache && s.retrieved.is_none() && s.full_layers.is_empty())
            .map(|s| WindowBound {
                recent: s.recent,
                sink: s.sink,
            })
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
            sink: self.sink,
            retrieved: self.retrieved.as_ref().map(Tensor::shallow_clone),
            bounds_cache: self.bounds_cache,
            full_layers: self.full_layers.clone(),
        }
    }
}

/// A pass's materialised mask `[T, L]` (`true` = visible), shared by the pass's layers, with the
/// additive bias their f32 scores take built once, on first use, for all of them. The bias covers only
/// the columns from the first one some row cannot see: a verification's rows all see the whole
/// context, so its bias is `[T, T]`, not `[T, L]` (built over every column in every layer, it cost a
/// few percent of a 4-row verification over 4096 keys: `perf` under `mask_scores`).
pub struct Visibility {
    mask: Tensor,
    hidden: OnceLock<HiddenColumns>,
    rows: OnceLock<Vec<RowKeys>>,
}

/// The keys one row of a pass sees, in order: the first `n` (a causal row), or these columns (`[n]`
/// i64: a row of a tree, its ancestors' columns among the prompt's).
pub enum RowKeys {
    First(i64),
    Columns(Tensor),
}

/// The columns some row cannot see: from `from` on, with `bias` `[T, L - from]` (0 where visible,
/// minus infinity where hidden); `bias` is `None` when every row sees every key (`from` = L).
struct HiddenColumns {
    from: i64,
    bias: Option<Tensor>,
}

impl Visibility {
    /// `mask` `[T, L]` bool, `true` = visible.
    pub fn new(mask: Tensor) -> Self {
        Self {
            mask,
            hidden: OnceLock::new(),
            rows: OnceLock::new(),
        }
    }

    /// The keys each row sees (built once for all the pass's layers; one read from the device).
    pub fn row_keys(&self) -> &[RowKeys] {
        self.rows.get_or_init(|| {
            let mask = self.mask.to_device(tch::Device::Cpu).to_kind(Kind::Bool);
            let (rows, length) = (mask.size()[0], mask.size()[1]);
            let visible: Vec<bool> = Vec::try_from(mask.contiguous().view([-1]))
                .expect("a [T, L] bool mask reads as bools");
            (0..rows as usize)
                .map(|r| {
                    let row = &visible[r * length as usize..(r + 1) * length as usize];
                    let count = row.iter().filter(|&&v| v).count();
                    if row[..count].iter().all(|&v| v) {
                        RowKeys::First(count as i64)
                    } else {
                        let columns: Vec<i64> = (0..length).filter(|&c| row[c as usize]).collect();
                        RowKeys::Columns(Tensor::from_slice(&columns).to_device(self.mask.device()))
                    }
                })
                .collect()
        })
    }

    /// The `[T, L]` boolean mask.
    pub fn mask(&self) -> &Tensor {
        &self.mask
    }

    fn hidden(&self) -> &HiddenColumns {
        self.hidden.get_or_init(|| {
            let (rows, length) = (self.mask.size()[0], self.mask.size()[1]);
            let device = self.mask.device();
            // [T, L]
            let hidden = self.mask.logical_not();
            // The first column some row cannot see, or L through a hidden sentinel column past the
            // end: one read from the device.
            let columns = Tensor::cat(
                &[
                    hidden.any_dim(0, false),
                    Tensor::ones([1], (Kind::Bool, device)),
                ],
                0,
            ); // [L + 1]
            let from = columns
                .to_kind(Kind::Uint8)
                .argmax(0, false)
                .int64_value(&[]);
            let bias = (from < length).then(|| {
                Tensor::zeros([rows, length - from], (Kind::Float, device))
                    .masked_fill(&hidden.narrow(1, from, length - from), f64::NEG_INFINITY)
            });
            HiddenColumns { from, bias }
        })
    }

    /// The same visibility over keys `start..start + len` (one part of an attention split over the
    /// keys), its bias cut from this one's.
    pub fn keys(&self, start: i64, len: i64) -> Visibility {
        let whole = self.hidden();
        let from = whole.from.clamp(start, start + len);
        let bias = whole
            .bias
            .as_ref()
            .filter(|_| from < start + len)
            .map(|bias| bias.narrow(1, from - whole.from, start + len - from));
        let part = Visibility::new(self.mask.narrow(1, start, len));
        let _ = part.hidden.set(HiddenColumns {
            from: from - start,
            bias,
        });
        part
    }

    /// Scores `[Hkv, G T, L]` (f32, fresh: changed in place) with the keys this hides at minus
    /// infinity, the bias added over the query heads of each group.
    pub fn hide(&self, scores: Tensor, rows: i64) -> Tensor {
        let HiddenColumns { from, bias } = self.hidden();
        if let Some(bias) = bias {
            let (kv_heads, length) = (scores.size()[0], scores.size()[2]);
            let _ = scores
                .view([kv_heads, -1, rows, length])
                .narrow(3, *from, length - from)
                .g_add_(bias);
        }
        scores
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scores `[Hkv, G T, L]` of 2 key heads, groups of 3, `rows` rows.
    fn scores(rows: i64, length: i64) -> Tensor {
        Tensor::randn([2, 3 * rows, length], (Kind::Float, Device::Cpu))
    }

    /// The scores with every key `mask` `[T, L]` hides at minus infinity, over the whole width.
    fn hidden_everywhere(scores: &Tensor, mask: &Tensor, rows: i64) -> Tensor {
        let (kv_heads, length) = (scores.size()[0], scores.size()[2]);
        scores
            .view([kv_heads, -1, rows, length])
            .masked_fill(&mask.logical_not(), f64::NEG_INFINITY)
            .view([kv_heads, -1, length])
    }

    fn same(a: &Tensor, b: &Tensor) -> bool {
        // -inf == -inf, and a finite score must be the same to the bit.
        a.eq_tensor(b).all().int64_value(&[]) == 1
    }

    #[test]
    fn a_verifications_bias_covers_only_the_columns_of_its_block() {
        let (past, rows) = (100, 4);
        let chain = [None, Some(0), Some(1), Some(2)];
        let AttentionMask::Rows(mask) = AttentionMask::tree(past, &chain, Device::Cpu).unwrap()
        else {
            panic!("a tree mask is explicit rows");
        };
        let visibility = Visibility::new(mask.shallow_clone());
        let hidden = visibility.hidden();
        // Row 0 (the root, at position 100) sees keys 0..=100: key 101 is the first it cannot see.
        assert_eq!(hidden.from, past + 1);
        assert_eq!(hidden.bias.as_ref().unwrap().size(), [rows, rows - 1]);
        let s = scores(rows, past + rows);
        let expected = hidden_everywhere(&s, &mask, rows);
        assert!(same(&visibility.hide(s, rows), &expected));
    }

    #[test]
    fn a_mask_that_hides_nothing_leaves_the_scores_as_they_are() {
        let mask = Tensor::ones([3, 50], (Kind::Bool, Device::Cpu));
        let visibility = Visibility::new(mask);
        assert!(visibility.hidden().bias.is_none());
        let s = scores(3, 50);
        assert!(same(&visibility.hide(s.copy(), 3), &s));
    }

    #[test]
    fn a_window_that_hides_the_first_keys_is_biased_over_every_column() {
        let (past, rows) = (40, 2);
        let windowed = AttentionMask::Causal
            .windowed(past, rows, 8, Device::Cpu)
            .unwrap();
        let AttentionMask::Rows(mask) = windowed else {
            panic!("a windowed mask is explicit rows");
        };
        let visibility = Visibility::new(mask.shallow_clone());
        assert_eq!(visibility.hidden().from, 0);
        let s = scores(rows, past + rows);
        let expected = hidden_everywhere(&s, &mask, rows);
        assert!(same(&visibility.hide(s, rows), &expected));
    }

    #[test]
    fn a_part_of_the_keys_hides_what_the_whole_hides_there() {
        let (past, rows) = (60, 3);
        let visible = AttentionMask::Causal
            .materialize(past, rows, Device::Cpu)
            .unwrap()
            .unwrap();
        // A stripe of the context hidden from every row as well, so the hidden columns start early.
        let _ = visible.narrow(1, 20, 5).fill_(0);
        let whole = Visibility::new(visible.shallow_clone());
        let s = scores(rows, past + rows);
        let expected = hidden_everywhere(&s, &visible, rows);
        // Parts before the hidden columns, across their start, inside them, and across the block.
        for (start, len) in [(0, 20), (10, 20), (21, 30), (50, 13), (0, 63)] {
            let part = whole.keys(start, len);
            let got = part.hide(s.narrow(2, start, len).copy(), rows);
            assert!(
                same(&got, &expected.narrow(2, start, len)),
                "keys {start}..{}",
                start + len
            );
        }
    }
}
