//! One sequence's keys and values (per layer and KV head, growable and truncatable
//! for prompt-prefix reuse) and causal attention for one query row over them. A row
//! attends to exactly its own prefix in a fixed order, so it gives the same result in a
//! prefill chunk, in a decode step or beside other sequences in a batch.

#[cfg(target_arch = "x86_64")]
mod grouped;

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
    /// Per KV head, tiles of `TILE` positions, each `head_dim × TILE` (dimension-major): a
    /// query's scores over a tile are contiguous multiply-adds, and a pass over the
    /// positions reads each head's keys as one stream.
    keys: Vec<f32>,
    /// Per KV head, `capacity × head_dim`, position-major: each head's values one stream.
    values: Vec<f32>,
}

/// Positions added when a cache must grow (then doubling).
const FIRST_CAPACITY: usize = 256;
/// Positions per key tile: one 512-bit register, or two 256-bit ones.
const TILE: usize = 16;
/// Tiles whose scores are summed together in registers (eight independent 8-lane sums:
/// enough to hide the multiply-add latency).
const TILES_AT_ONCE: usize = 4;

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
        let (old_head, new_head) = (self.head_floats(self.capacity), self.head_floats(capacity));
        let (used, held) = (self.tiles_used(self.len), self.len * self.head_dim);
        for layer in &mut self.layers {
            let mut keys = vec![0.0f32; self.kv_heads * new_head];
            let mut values = vec![0.0f32; self.kv_heads * new_head];
            for head in 0..self.kv_heads {
                keys[head * new_head..head * new_head + used]
                    .copy_from_slice(&layer.keys[head * old_head..head * old_head + used]);
                values[head * new_head..head * new_head + held]
                    .copy_from_slice(&layer.values[head * old_head..head * old_head + held]);
            }
            layer.keys = keys;
            layer.values = values;
        }
        self.capacity = capacity;
    }

    /// Floats of one KV head's keys at `capacity` positions.
    fn head_floats(&self, capacity: usize) -> usize {
        capacity * self.head_dim
    }

    /// Floats of one KV head's keys that the first `len` positions' tiles take.
    fn tiles_used(&self, len: usize) -> usize {
        len.div_ceil(TILE) * TILE * self.head_dim
    }

    /// Makes this cache hold the first `len` positions of `other` (same model): what a
    /// new sequence sharing a prompt prefix with another one reuses instead of recomputing.
    pub fn copy_prefix(&mut self, other: &SequenceCache, len: usize) {
        let len = len.min(other.len);
        self.len = 0;
        self.reserve(len);
        let (from_head, to_head) = (
            other.head_floats(other.capacity),
            self.head_floats(self.capacity),
        );
        // Whole tiles: positions past `len` are rewritten before anyone reads them.
        let (used, held) = (self.tiles_used(len), len * self.head_dim);
        for (to, from) in self.layers.iter_mut().zip(&other.layers) {
            for head in 0..self.kv_heads {
                to.keys[head * to_head..head * to_head + used]
                    .copy_from_slice(&from.keys[head * from_head..head * from_head + used]);
                to.values[head * to_head..head * to_head + held]
                    .copy_from_slice(&from.values[head * from_head..head * from_head + held]);
            }
        }
        self.len = len;
    }

    /// Writes one layer's keys and values for positions `len..len + rows` (`rows ×
    /// kv_width` each); `reserve` must have made room.
    pub fn write(&mut self, layer: usize, keys: &[f32], values: &[f32]) {
        let (head_dim, width) = (self.head_dim, self.kv_heads * self.head_dim);
        let (len, head_floats) = (self.len, self.head_floats(self.capacity));
        let cache = &mut self.layers[layer];
        for (i, row) in keys.chunks_exact(width).enumerate() {
            let position = len + i;
            let tile = (position / TILE) * TILE * head_dim + position % TILE;
            for (head, dims) in row.chunks_exact(head_dim).enumerate() {
                let base = head * head_floats + tile;
                for (d, &k) in dims.iter().enumerate() {
                    cache.keys[base + d * TILE] = k;
                }
            }
        }
        for (i, row) in values.chunks_exact(width).enumerate() {
            for (head, dims) in row.chunks_exact(head_dim).enumerate() {
                let at = head * head_floats + (len + i) * head_dim;
                cache.values[at..at + head_dim].copy_from_slice(dims);
            }
        }
    }

    /// Counts `rows` new positions once every layer has them written.
    pub fn advance(&mut self, rows: usize) {
        self.len += rows;
    }

    /// Attention of one query head at absolute position `position` over positions
    /// `0..=position`, its KV head being `kv_head`. Writes `head_dim` floats to `out`;
    /// `scores` is scratch. Inlined, so callers may compile it for wider vectors.
    #[inline(always)]
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
        let keys = &cache.keys[kv_head * self.head_floats(self.capacity)..];
        // Up to four tiles at a time, each position's sum over the head's dimensions in
        // order: the same operations for a position whatever the tiles beside it.
        let tiles = seen.div_ceil(TILE);
        scores.resize(tiles * TILE, 0.0);
        let mut tile = 0;
        while tile < tiles {
            let at_once = (tiles - tile).min(TILES_AT_ONCE);
            let block = &keys[tile * TILE * head_dim..][..at_once * TILE * head_dim];
            let out = &mut scores[tile * TILE..(tile + at_once) * TILE];
            match at_once {
                4 => score_tiles::<4>(query, block, out),
                3 => score_tiles::<3>(query, block, out),
                2 => score_tiles::<2>(query, block, out),
                _ => score_tiles::<1>(query, block, out),
            }
            tile += at_once;
        }
        scores.truncate(seen);
        let inverse = softmax(scores, scale);
        let width = head_dim;
        let values = &cache.values[kv_head * self.head_floats(self.capacity)..];
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

    /// Attention of the query heads `queries`, all of KV head `kv_head`, at `position`:
    /// `outs[i]` gets exactly what `attend` writes for `queries[i]`. With AVX-512 the keys
    /// and values are read once for up to four of them.
    pub fn attend_group(
        &self,
        layer: usize,
        queries: &[&[f32]],
        position: usize,
        kv_head: usize,
        scores: &mut Vec<f32>,
        outs: &mut [&mut [f32]],
    ) {
        #[cfg(target_arch = "x86_64")]
        if matches!(self.head_dim, 64 | 128) && std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: AVX-512 F was detected and the head size is one the kernel takes.
            unsafe { grouped::attend(self, layer, queries, position, kv_head, scores, outs) };
            return;
        }
        for (query, out) in queries.iter().zip(outs.iter_mut()) {
            self.attend(layer, query, position, kv_head, scores, out);
        }
    }
}

/// `scores ← exp((s − max) · scale)` in place; returns 1 / Σ of them.
#[inline(always)]
fn softmax(scores: &mut [f32], scale: f32) -> f32 {
    let max = scores.iter().fold(f32::NEG_INFINITY, |m, &s| m.max(s));
    for s in scores.iter_mut() {
        *s = exp((*s - max) * scale);
    }
    1.0 / sum(scores)
}

/// Scores of `N` consecutive tiles (`block`: `N × head_dim × TILE` floats) into `out`.
#[inline(always)]
fn score_tiles<const N: usize>(query: &[f32], block: &[f32], out: &mut [f32]) {
    let head_dim = query.len();
    let block = &block[..N * head_dim * TILE];
    let mut acc = [[0.0f32; TILE]; N];
    for (d, &q) in query.iter().enumerate() {
        for t in 0..N {
            let at = (t * head_dim + d) * TILE;
            let k = &block[at..at + TILE];
            for i in 0..TILE {
                acc[t][i] = q.mul_add(k[i], acc[t][i]);
            }
        }
    }
    for (t, acc) in acc.iter().enumerate() {
        out[t * TILE..(t + 1) * TILE].copy_from_slice(acc);
    }
}

/// A sum with 16 independent partial sums (vectorizes; fixed order).
#[inline(always)]
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
#[inline(always)]
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

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    /// The grouped path (AVX-512 where this CPU has it) gives every query the bits the
    /// one-query path gives it, for both head sizes it takes, group sizes past four, and
    /// positions that end inside a tile.
    #[test]
    fn grouped_attention_gives_each_query_its_own_bits() {
        let mut rng = StdRng::seed_from_u64(5);
        for (head_dim, kv_heads, group) in [(64, 3, 3), (128, 2, 6), (32, 1, 2)] {
            let mut cache = SequenceCache::new(2, kv_heads, head_dim);
            let len = 150;
            cache.reserve(len);
            let width = kv_heads * head_dim;
            for layer in 0..2 {
                let mut random = |n: usize| -> Vec<f32> {
                    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
                };
                let (keys, values) = (random(len * width), random(len * width));
                cache.write(layer, &keys, &values);
            }
            cache.advance(len);
            for position in [0, 15, 16, 70, len - 1] {
                for kv_head in 0..kv_heads {
                    let queries: Vec<Vec<f32>> = (0..group)
                        .map(|_| {
                            (0..head_dim)
                                .map(|_| rng.random_range(-2.0f32..2.0))
                                .collect()
                        })
                        .collect();
                    let refs: Vec<&[f32]> = queries.iter().map(|q| q.as_slice()).collect();
                    let mut grouped = vec![vec![0.0f32; head_dim]; group];
                    let mut outs: Vec<&mut [f32]> =
                        grouped.iter_mut().map(|o| o.as_mut_slice()).collect();
                    let mut scores = Vec::new();
                    cache.attend_group(1, &refs, position, kv_head, &mut scores, &mut outs);
                    for (query, got) in queries.iter().zip(&grouped) {
                        let mut alone = vec![0.0f32; head_dim];
                        cache.attend(1, query, position, kv_head, &mut scores, &mut alone);
                        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                        assert_eq!(bits(got), bits(&alone), "d {head_dim} position {position}");
                    }
                }
            }
        }
    }
}
