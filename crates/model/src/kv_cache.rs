//! A preallocated KV cache, one `[kv_heads, capacity, head_dim]` key and value buffer per layer.
//!
//! Invariant: positions `0..len` hold the keys and values of the committed tokens, in order; a forward
//! pass writes its `T` new rows at `len..len + T` and then advances `len`. Speculation never copies the
//! cache: rejected rows are dropped by moving `len` back (`truncate`), and an accepted tree path is packed
//! in place (`compact`).
//!
//! A drafter with a sliding window of `W` keys bounds its cache ([`KvCache::bound_to_window`]): between
//! cycles ([`KvCache::slide`]) it keeps only the last W positions once it holds 2 W, so buffer row `j`
//! holds position `first_position() + j`, and its memory stays about 3 W rows however long the context
//! (a long prefill grows it for that pass, the next slide shrinks it back). A window with `S` attention
//! sinks keeps the first S positions too, in rows `0..S`, the last W after them: row `j >= S` holds
//! position `j + dropped`. Positions, `len` and every argument here stay logical; masks built over all
//! `len + T` positions are cut to the held keys with [`KvCache::held_columns`].

use crate::error::{ModelError, Result};
use crate::mask::WindowBound;
use tch::{Device, Kind, Tensor};

pub struct KvCache {
    /// `[kv_heads, buffer rows, head_dim]` per layer; row j holds position j below the sink, else
    /// `evicted + j`.
    keys: Vec<Tensor>,
    values: Vec<Tensor>,
    len: i64,
    /// The most positions this cache may reach (the context it was sized for).
    capacity: i64,
    /// How many positions after the sink are no longer held (`sink..sink + evicted`, dropped by a window
    /// bound).
    evicted: i64,
    /// The window of the drafter's attention (and its sink), when the cache is bounded to it.
    window: Option<WindowBound>,
}

impl KvCache {
    pub fn new(
        layers: usize,
        kv_heads: i64,
        head_dim: i64,
        capacity: i64,
        kind: Kind,
        device: Device,
    ) -> Self {
        let buffer = || Tensor::zeros([kv_heads, capacity, head_dim], (kind, device));
        Self {
            keys: (0..layers).map(|_| buffer()).collect(),
            values: (0..layers).map(|_| buffer()).collect(),
            len: 0,
            capacity,
            evicted: 0,
            window: None,
        }
    }

    /// A new cache of `capacity` positions holding what this one holds: the rows copied, so writing to
    /// either never shows in the other (every arm of a request decodes from its own copy of the one
    /// prefill). A cache bounded to a window is not copied (the target's never is).
    pub fn copy_with_capacity(&self, capacity: i64) -> Result<KvCache> {
        if self.window.is_some() || self.evicted > 0 {
            return Err(ModelError::Cache(
                "a cache bounded to a window is not copied".to_string(),
            ));
        }
        if capacity < self.len {
            return Err(ModelError::Cache(format!(
                "a copy of {} positions into {capacity}",
                self.len
            )));
        }
        let copy = |buffers: &[Tensor]| -> Vec<Tensor> {
            buffers
                .iter()
                .map(|b| {
                    let (heads, dim) = (b.size()[0], b.size()[2]);
                    let out = Tensor::zeros([heads, capacity, dim], (b.kind(), b.device()));
                    out.narrow(1, 0, self.len).copy_(&b.narrow(1, 0, self.len));
                    out
                })
                .collect()
        };
        Ok(KvCache {
            keys: copy(&self.keys),
            values: copy(&self.values),
            len: self.len,
            capacity,
            evicted: 0,
            window: None,
        })
    }

    pub fn len(&self) -> i64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> i64 {
        self.capacity
    }

    pub fn num_layers(&self) -> usize {
        self.keys.len()
    }

    /// The first position held after the sink (0 unless a window bound dropped older ones).
    pub fn first_position(&self) -> i64 {
        if self.evicted > 0 {
            self.sink() + self.evicted
        } else {
            0
        }
    }

    /// The attention sinks the cache keeps before the window (0 unbounded or without sinks).
    fn sink(&self) -> i64 {
        self.window.map_or(0, |w| w.sink)
    }

    /// Positions held in the buffers.
    fn held(&self) -> i64 {
        self.len - self.evicted
    }

    fn buffer_rows(&self) -> i64 {
        self.keys.first().map_or(0, |k| k.size()[1])
    }

    /// Bounds the cache to a sliding window of `window.recent` keys after `window.sink` sinks (`None`:
    /// every position is kept). Only for a drafter whose every attention row sees at most those keys:
    /// [`Self::slide`] drops the rest. Slides at once.
    pub fn bound_to_window(&mut self, window: Option<WindowBound>) -> Result<()> {
        if let Some(w) = window.filter(|w| w.recent < 1 || w.sink < 0) {
            return Err(ModelError::Cache(format!(
                "a window of {} keys after {} sinks: a bounded cache needs at least 1 key and no negative sink",
                w.recent, w.sink
            )));
        }
        if window.is_none() && self.evicted > 0 {
            return Err(ModelError::Cache(format!(
                "positions 0..{} were dropped by a window: the cache cannot be unbounded before it is emptied",
                self.evicted
            )));
        }
        if self.evicted > 0 && window.map(|w| w.sink) != self.window.map(|w| w.sink) {
            return Err(ModelError::Cache(format!(
                "positions after the sink were dropped by a window: its sink cannot change ({:?} to {:?}) before the cache is emptied",
                self.window.map(|w| w.sink),
                window.map(|w| w.sink)
            )));
        }
        self.window = window;
        self.slide();
        Ok(())
    }

    /// Between cycles (every held position committed): under a window bound of W after S sinks, once
    /// the cache holds S + 2 W positions it keeps the first S and the last W (moved to just after the
    /// sinks: amortised, one row per token), and a buffer grown past S + 4 W (a long prefill) is given
    /// back down to S + 3 W rows. Rows written after this sit at `len` or later and see keys after `len
    /// - W` only, besides the sinks.
    pub fn slide(&mut self) {
        let Some(WindowBound { recent: w, sink }) = self.window else {
            return;
        };
        let held = self.held();
        if held > sink + 2 * w {
            for buffer in self.keys.iter_mut().chain(self.values.iter_mut()) {
                // Source and destination do not overlap: held - w > sink + w.
                let kept = buffer.narrow(1, held - w, w).copy();
                buffer.narrow(1, sink, w).copy_(&kept);
            }
            self.evicted = self.len - w - sink;
        }
        if self.buffer_rows() > sink + 4 * w {
            self.resize_buffers(sink + 3 * w);
        }
    }

    /// Reallocates every buffer to `rows` rows (at least the held ones), keeping the held rows.
    fn resize_buffers(&mut self, rows: i64) {
        let held = self.held();
        let rows = rows.max(held);
        for buffer in self.keys.iter_mut().chain(self.values.iter_mut()) {
            let (heads, _, dim) = buffer
                .size3()
                .expect("cache buffers are [kv_heads, rows, head_dim]");
            let grown = Tensor::zeros([heads, rows, dim], (buffer.kind(), buffer.device()));
            grown.narrow(1, 0, held).copy_(&buffer.narrow(1, 0, held));
            *buffer = grown;
        }
    }

    /// Cuts a `[T, len + T]` visibility mask over every position to the keys held, `[T, len - first +
    /// T]` (the dropped keys are outside every row's window). `None` (every key visible) stays `None`.
    pub fn held_columns(&self, visible: Option<Tensor>) -> Option<Tensor> {
        match visible {
            Some(mask) if self.evicted > 0 => {
                let (keys, sink) = (mask.size()[1], self.sink());
                let recent = mask.narrow(1, sink + self.evicted, keys - sink - self.evicted);
                Some(match sink {
                    0 => recent,
                    _ => Tensor::cat(&[mask.narrow(1, 0, sink), recent], 1),
                })
            }
            other => other,
        }
    }

    /// Bytes held by the buffers (allocated once, whatever `len` is; a bounded cache's change size).
    pub fn bytes_allocated(&self) -> usize {
        self.keys
            .iter()
            .chain(&self.values)
            .map(|t| t.numel() * t.kind().elt_size_in_bytes())
            .sum()
    }

    /// Fails unless `rows` more positions fit.
    pub fn reserve(&self, rows: i64) -> Result<()> {
        if self.len + rows > self.capacity {
            return Err(ModelError::Cache(format!(
                "{} held + {rows} new positions exceed the {} this cache was allocated for (sized from the prompt, the new tokens and the largest draft; a drafter wrote more rows than it declared)",
                self.len, self.capacity
            )));
        }
        Ok(())
    }

    /// Writes `k`, `v` `[kv_heads, T, head_dim]` of one layer at `len..len + T` and returns the views of all
    /// held keys and values, `[kv_heads, len - first_position() + T, head_dim]`. `len` itself moves in
    /// [`Self::advance`]. Fails, writing nothing, when the rows do not fit the capacity.
    pub fn write(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let rows = k.size()[1];
        self.reserve(rows)?;
        let (held, needed) = (self.held(), self.held() + rows);
        if needed > self.buffer_rows() {
            // Only a bounded cache starts smaller than its capacity: grow it for this pass.
            self.resize_buffers(
                needed
                    .max(2 * self.buffer_rows())
                    .min(self.capacity - self.evicted),
            );
        }
        crate::time_split::mark(
            crate::time_split::Step::CacheWrite,
            || 0,
            || {
                self.keys[layer].narrow(1, held, rows).f_copy_(k)?;
                self.values[layer].narrow(1, held, rows).f_copy_(v)
            },
        )?;
        Ok((
            self.keys[layer].narrow(1, 0, needed),
            self.values[layer].narrow(1, 0, needed),
        ))
    }

    /// Commits the rows written by the last forward pass.
    pub fn advance(&mut self, rows: i64) {
        self.len += rows;
    }

    /// Keeps the first `keep_len` positions (0 empties the cache, whatever it dropped).
    pub fn truncate(&mut self, keep_len: i64) -> Result<()> {
        if keep_len < 0 || keep_len > self.len {
            return Err(ModelError::Cache(format!(
                "truncate to {keep_len} outside 0..={}",
                self.len
            )));
        }
        if keep_len == 0 {
            self.evicted = 0;
        } else if self.evicted > 0 && keep_len < self.first_position() {
            return Err(ModelError::Cache(format!(
                "truncate to {keep_len}: positions before {} were dropped by the window bound",
                self.first_position()
            )));
        }
        self.len = keep_len;
        Ok(())
    }

    /// Keeps `base_len` positions plus the rows `base_len + indices[j]`, packed to `base_len + j`
    /// (the accepted path of a verified tree). Indices must be increasing, which makes the in-place copy
    /// safe: each destination is at or before its source.
    pub fn compact(&mut self, indices: &[i64], base_len: i64) -> Result<()> {
        if base_len > self.len
            || base_len < self.first_position()
            || indices.windows(2).any(|w| w[0] >= w[1])
        {
            return Err(ModelError::Cache(format!(
                "compact({indices:?}, base {base_len}) with len {}: indices must increase",
                self.len
            )));
        }
        if let Some(&last) = indices.last() {
            if indices[0] < 0 || base_len + last >= self.len {
                return Err(ModelError::Cache(format!(
                    "compact index {last} beyond len {} - base {base_len}",
                    self.len
                )));
            }
        }
        let device = self.keys.first().map_or(Device::Cpu, Tensor::device);
        let base_row = base_len - self.evicted;
        let source = Tensor::from_slice(indices).to_device(device) + base_row;
        let count = indices.len() as i64;
        for buffer in self.keys.iter_mut().chain(self.values.iter_mut()) {
            let gathered = buffer.index_select(1, &source);
            buffer.narrow(1, base_row, count).copy_(&gathered);
        }
        self.len = base_len + count;
        Ok(())
    }

    /// Keys and values of one layer at the held positions `first_position()..len`, `[kv_heads, len -
    /// first_position(), head_dim]` (for tests and probes).
    pub fn layer(&self, layer: usize) -> (Tensor, Tensor) {
        (
            self.keys[layer].narrow(1, 0, self.held()),
            self.values[layer].narrow(1, 0, self.held()),
        )
    }

    /// Starts a speculative extension: rows appended through the guard are rolled back when it drops,
    /// unless [`Speculation::commit`] keeps some of them.
    pub fn speculate(&mut self) -> Speculation<'_> {
        let base_len = self.len;
        Speculation {
            cache: self,
            base_len,
            committed: false,
        }
    }
}

pub struct Speculation<'a> {
    cache: &'a mut KvCache,
    base_len: i64,
    committed: bool,
}

impl Speculation<'_> {
    pub fn base_len(&self) -> i64 {
        self.base_len
    }

    /// Keeps the first `accepted` speculative rows (a chain).
    pub fn commit(mut self, accepted: i64) -> Result<()> {
        self.cache.truncate(self.base_len + accepted)?;
        self.committed = true;
        Ok(())
    }

    /// Keeps the speculative rows at `indices` (a tree path), packed after the base.
    pub fn commit_path(mut self, indices: &[i64]) -> Result<()> {
        self.cache.compact(indices, self.base_len)?;
        self.committed = true;
        Ok(())
    }
}

impl std::ops::Deref for Speculation<'_> {
    type Target = KvCache;
    fn deref(&self) -> &KvCache {
        self.cache
    }
}

impl std::ops::DerefMut for Speculation<'_> {
    fn deref_mut(&mut self) -> &mut KvCache {
        self.cache
    }
}

impl Drop for Speculation<'_> {
    fn drop(&mut self) {
        if !self.committed {
            self.cache.len = self.base_len;
        }
    }
}
