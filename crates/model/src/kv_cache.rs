//! A preallocated KV cache, one `[kv_heads, capacity, head_dim]` key and value buffer per layer.
//!
//! Invariant: positions `0..len` hold the keys and values of the committed tokens, in order; a forward
//! pass writes its `T` new rows at `len..len + T` and then advances `len`. Speculation never copies the
//! cache: rejected rows are dropped by moving `len` back (`truncate`), and an accepted tree path is packed
//! in place (`compact`).

use crate::error::{ModelError, Result};
use tch::{Device, Kind, Tensor};

pub struct KvCache {
    keys: Vec<Tensor>,
    values: Vec<Tensor>,
    len: i64,
    capacity: i64,
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
        }
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

    /// Bytes held by the buffers (allocated once, whatever `len` is).
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
    /// visible keys and values, `[kv_heads, len + T, head_dim]`. `len` itself moves in [`Self::advance`].
    /// Fails, writing nothing, when the rows do not fit the capacity.
    pub fn write(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let rows = k.size()[1];
        self.reserve(rows)?;
        self.keys[layer].narrow(1, self.len, rows).f_copy_(k)?;
        self.values[layer].narrow(1, self.len, rows).f_copy_(v)?;
        Ok((
            self.keys[layer].narrow(1, 0, self.len + rows),
            self.values[layer].narrow(1, 0, self.len + rows),
        ))
    }

    /// Commits the rows written by the last forward pass.
    pub fn advance(&mut self, rows: i64) {
        self.len += rows;
    }

    /// Keeps the first `keep_len` positions.
    pub fn truncate(&mut self, keep_len: i64) -> Result<()> {
        if keep_len < 0 || keep_len > self.len {
            return Err(ModelError::Cache(format!(
                "truncate to {keep_len} outside 0..={}",
                self.len
            )));
        }
        self.len = keep_len;
        Ok(())
    }

    /// Keeps `base_len` positions plus the rows `base_len + indices[j]`, packed to `base_len + j`
    /// (the accepted path of a verified tree). Indices must be increasing, which makes the in-place copy
    /// safe: each destination is at or before its source.
    pub fn compact(&mut self, indices: &[i64], base_len: i64) -> Result<()> {
        if base_len > self.len || indices.windows(2).any(|w| w[0] >= w[1]) {
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
        let source = Tensor::from_slice(indices).to_device(device) + base_len;
        let count = indices.len() as i64;
        for buffer in self.keys.iter_mut().chain(self.values.iter_mut()) {
            let gathered = buffer.index_select(1, &source);
            buffer.narrow(1, base_len, count).copy_(&gathered);
        }
        self.len = base_len + count;
        Ok(())
    }

    /// Keys and values of one layer up to `len`, `[kv_heads, len, head_dim]` (for tests and probes).
    pub fn layer(&self, layer: usize) -> (Tensor, Tensor) {
        (
            self.keys[layer].narrow(1, 0, self.len),
            self.values[layer].narrow(1, 0, self.len),
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
