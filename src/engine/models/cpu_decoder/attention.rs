//! One sequence's keys and values (per layer, position-major, growable and truncatable
//! for prompt-prefix reuse) and causal attention for one query row over them. A row
//! attends to exactly its own prefix in a fixed order, so it gives the same result in a
//! prefill chunk, in a decode step or beside other sequences in a batch.

use crate::engine::fast_math::exp;

/// Keys and values of one sequence.
pub struct SequenceCache {
    layers: Vec<LayerCache>,
    len: usize,
    /// Positions each layer's buffers hold room for.
    capacity: usize,
    kv_heads: usize,
    head_dim: usize,
}

struct LayerCache {
    /// Transposed, `kv_heads × head_dim × (capacity + ROW_PAD)`: a query's scores over many positions
    /// are then contiguous multiply-adds instead of one short dot product per position.
    keys: Vec<f32>,
    /// `capacity × kv_heads · head_dim`, position-major.
    values: Vec<f32>,
}

/// Positions added when a cache must grow (then doubling).
const FIRST_CAPACITY: usize = 256;
/// Floats between transposed key rows beyond the capacity: a power-of-two stride would
/// put every row of a head in the same L1 cache sets.
const ROW_PAD: usize = 16;
/// Positions whose scores are summed together in registers (eight independent 8-lane
/// sums: enough to hide the multiply-add latency).
const POSITION_BLOCK: usize = 64;

impl SequenceCache {
    pub fn new(layers: usize, kv_heads: usize, head_dim: usize) -> Self {
        Self {
            layers: (0..layers)
                .map(|_| LayerCache {
                    keys: Vec::new(),
                    values: Vec::new(),
                })
                .collect(),
            len: 0,
            capacity: 0,
            kv_heads,
            head_dim,
        }
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Keeps the first `len` positions.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Room for `len` positions in every layer, keeping what is held.
    pub fn reserve(&mut self, len: usize) {
        if len <= self.capacity {
            return;
        }
        let capacity = len
            .max(FIRST_CAPACITY)
            .max(self.capacity * 2)
            .next_power_of_two();
        let width = self.kv_heads * self.head_dim;
        for layer in &mut self.layers {
            let (old_stride, new_stride) = (self.capacity + ROW_PAD, capacity + ROW_PAD);
            let mut keys = vec![0.0f32; width * new_stride];
            for lane in (0..width).filter(|_| self.len > 0) {
                keys[lane * new_stride..lane * new_stride + self.len]
                    .copy_from_slice(&layer.keys[lane * old_stride..][..self.len]);
            }
            layer.keys = keys;
            layer.values.resize(width * capacity, 0.0);
        }
        self.capacity = capacity;
    }

    /// Makes this cache hold the first `len` positions of `other` (same model): what a
    /// new sequence sharing a prompt prefix with another one reuses instead of recomputing.
    pub fn copy_prefix(&mut self, other: &SequenceCache, len: usize) {
        let len = len.min(other.len);
        self.len = 0;
        self.reserve(len);
        let width = self.kv_heads * self.head_dim;
        let (from_stride, to_stride) = (other.stride(), self.stride());
        for (to, from) in self.layers.iter_mut().zip(&other.layers) {
            for lane in 0..width {
                to.keys[lane * to_stride..lane * to_stride + len]
                    .copy_from_slice(&from.keys[lane * from_stride..][..len]);
            }
            to.values[..len * width].copy_from_slice(&from.values[..len * width]);
        }
        self.len = len;
    }

    /// Writes one layer's keys and values for positions `len..len + rows` (`rows ×
    /// kv_width` each); `reserve` must have made room.
    pub fn write(&mut self, layer: usize, keys: &[f32], values: &[f32]) {
        let width = self.kv_heads * self.head_dim;
        let (len, stride) = (self.len, self.stride());
        let cache = &mut self.layers[layer];
        for (i, row) in keys.chunks_exact(width).enumerate() {
            for (lane, &k) in row.iter().enumerate() {
                cache.keys[lane * stride + len + i] = k;
            }
        }
        cache.values[len * width..len * width + values.len()].copy_from_slice(values);
    }

    fn stride(&self) -> usize {
        self.capacity + ROW_PAD
    }

    /// Counts `rows` new positions once every layer has them written.
    pub fn advance(&mut self, rows: usize) {
        self.len += rows;
    }

    /// Attention of one query head at absolute position `position` over positions
    /// `0..=position`, its KV head being `kv_head`. Writes `head_dim` floats to `out`;
    /// `scores` is scratch.
    pub fn attend(
        &self,
        layer: usize,
        query: &[f32],
        position: usize,
        kv_head: usize,
        scores: &mut Vec<f32>,
        out: &mut [f32],
    ) {
        let cache = &self.layers[layer];
        let head_dim = self.head_dim;
        let scale = 1.0 / (head_dim as f32).sqrt();
        let seen = position + 1;
        scores.clear();
        scores.resize(seen, 0.0);
        let keys = &cache.keys[kv_head * head_dim * self.stride()..];
        // Blocks of positions with their sums in registers, over the head's dimensions in
        // order: the same operations for a position whatever the block.
        for (block, out) in scores.chunks_mut(POSITION_BLOCK).enumerate() {
            let start = block * POSITION_BLOCK;
            let mut acc = [0.0f32; POSITION_BLOCK];
            let width = out.len();
            let stride = self.stride();
            if width == POSITION_BLOCK {
                // Fixed width: the sums stay in registers.
                for (d, &q) in query.iter().enumerate() {
                    let k: &[f32; POSITION_BLOCK] = keys[d * stride + start..][..POSITION_BLOCK]
                        .try_into()
                        .unwrap_or(&[0.0; POSITION_BLOCK]);
                    for i in 0..POSITION_BLOCK {
                        acc[i] = q.mul_add(k[i], acc[i]);
                    }
                }
            } else {
                for (d, &q) in query.iter().enumerate() {
                    let k = &keys[d * stride + start..][..width];
                    for (a, &k) in acc.iter_mut().zip(k) {
                        *a = q.mul_add(k, *a);
                    }
                }
            }
            out.copy_from_slice(&acc[..width]);
        }
        let max = scores.iter().fold(f32::NEG_INFINITY, |m, &s| m.max(s));
        for s in scores.iter_mut() {
            *s = exp((*s - max) * scale);
        }
        let inverse = 1.0 / sum(scores);
        let width = self.kv_heads * head_dim;
        let values = &cache.values[kv_head * head_dim..];
        match head_dim {
            64 => weighted_sum::<64>(scores, inverse, values, width, out),
            128 => weighted_sum::<128>(scores, inverse, values, width, out),
            _ => {
                out.fill(0.0);
                for (p, &weight) in scores.iter().enumerate() {
                    let v = &values[p * width..][..head_dim];
                    let weight = weight * inverse;
                    for (o, &x) in out.iter_mut().zip(v) {
                        *o = weight.mul_add(x, *o);
                    }
                }
            }
        }
    }
}

/// A sum with 16 independent partial sums (vectorizes; fixed order).
fn sum(values: &[f32]) -> f32 {
    let mut partial = [0.0f32; 16];
    let chunks = values.len() / 16;
    for c in 0..chunks {
        for i in 0..16 {
            partial[i] += values[c * 16 + i];
        }
    }
    partial.iter().sum::<f32>() + values[chunks * 16..].iter().sum::<f32>()
}

/// `out = Σ_p weight_p · inverse · values[p]` for a common head size, with the sums in
/// registers (the same operations, in the same order, as the general loop).
fn weighted_sum<const D: usize>(
    weights: &[f32],
    inverse: f32,
    values: &[f32],
    width: usize,
    out: &mut [f32],
) {
    let mut acc = [0.0f32; D];
    for (p, &weight) in weights.iter().enumerate() {
        let v: &[f32; D] = values[p * width..][..D].try_into().unwrap_or(&[0.0; D]);
        let weight = weight * inverse;
        for i in 0..D {
            acc[i] = weight.mul_add(v[i], acc[i]);
        }
    }
    out.copy_from_slice(&acc);
}
