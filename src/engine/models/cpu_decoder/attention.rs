//! One sequence's keys and values (per layer, in pages of 64 positions that sequences with
//! a common prompt prefix share until one writes into them; growable and truncatable for
//! prompt-prefix reuse) and causal attention for one query row over them. A row
//! attends to exactly its own prefix in a fixed order, so it gives the same result in a
//! prefill chunk, in a decode step or beside other sequences in a batch.
//!
//! Keys and values are held as f16, as llama.cpp holds them by default: a decode step of a
//! batch reads every sequence's whole cache, so this halves what it reads from memory (and
//! what a long context holds). Widening an f16 to f32 is exact, so every path reads the
//! same numbers and gives the same bits.

#[cfg(target_arch = "x86_64")]
mod grouped;

use std::sync::Arc;

use half::f16;
use half::slice::HalfFloatSliceExt;

use crate::engine::fast_math::exp;

/// Keys and values of one sequence: per layer, pages of `PAGE` positions. A page is
/// shared (reference-counted) between sequences whose prompts begin alike, and copied
/// only when one of them writes into it, so a common system prompt is held once and a
/// batched decode step reads its keys and values from memory once.
pub struct SequenceCache {
    layers: Vec<Vec<Arc<Page>>>,
    len: usize,
    kv_heads: usize,
    head_dim: usize,
}

/// `PAGE` positions of one layer, every KV head.
#[derive(Clone)]
pub(super) struct Page {
    /// Per KV head, `PAGE / TILE` tiles, each `head_dim × TILE` (dimension-major): a
    /// query's scores over a tile are contiguous multiply-adds, and a pass over the
    /// positions reads each head's keys as one stream.
    keys: Vec<f16>,
    /// Per KV head, `PAGE × head_dim`, position-major: each head's values one stream.
    values: Vec<f16>,
}

/// Scratch of one attention thread: scores, and a head's keys and values widened to f32
/// where no kernel reads f16 directly.
#[derive(Default)]
pub struct Scratch {
    scores: Vec<f32>,
    keys: Vec<f32>,
    values: Vec<f32>,
}

/// Positions per key tile: one 512-bit register, or two 256-bit ones.
const TILE: usize = 16;
/// Tiles whose scores are summed together in registers (eight independent 8-lane sums:
/// enough to hide the multiply-add latency).
const TILES_AT_ONCE: usize = 4;
/// Positions per page: the tiles summed together, so a page's tiles go as one block.
const PAGE: usize = TILE * TILES_AT_ONCE;

impl Page {
    fn new(kv_heads: usize, head_dim: usize) -> Self {
        Self {
            keys: vec![f16::ZERO; kv_heads * PAGE * head_dim],
            values: vec![f16::ZERO; kv_heads * PAGE * head_dim],
        }
    }

    /// KV head `head`'s tiled keys in this page (`head_dim` values each of them).
    pub(super) fn keys(&self, head: usize, head_dim: usize) -> &[f16] {
        &self.keys[head * PAGE * head_dim..(head + 1) * PAGE * head_dim]
    }

    /// KV head `head`'s values in this page, position-major.
    pub(super) fn values(&self, head: usize, head_dim: usize) -> &[f16] {
        &self.values[head * PAGE * head_dim..(head + 1) * PAGE * head_dim]
    }
}

impl SequenceCache {
    pub fn new(layers: usize, kv_heads: usize, head_dim: usize) -> Self {
        Self {
            layers: (0..layers).map(|_| Vec::new()).collect(),
            len: 0,
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
        let (kv_heads, head_dim) = (self.kv_heads, self.head_dim);
        let pages = len.div_ceil(PAGE);
        for layer in &mut self.layers {
            while layer.len() < pages {
                layer.push(Arc::new(Page::new(kv_heads, head_dim)));
            }
        }
    }

    /// Makes this cache hold the first `len` positions of `other` (same model): what a
    /// new sequence sharing a prompt prefix with another one reuses instead of
    /// recomputing. The pages are shared, not copied; whichever cache writes into a
    /// shared page later copies it first.
    pub fn copy_prefix(&mut self, other: &SequenceCache, len: usize) {
        let len = len.min(other.len);
        let pages = len.div_ceil(PAGE);
        for (to, from) in self.layers.iter_mut().zip(&other.layers) {
            to.clear();
            to.extend(from[..pages].iter().cloned());
        }
        self.len = len;
    }

    /// This layer's pages (the last one may be partly written).
    pub(super) fn pages(&self, layer: usize) -> &[Arc<Page>] {
        &self.layers[layer]
    }

    /// Writes one layer's keys and values for positions `len..len + rows` (`rows ×
    /// kv_width` each), rounded to f16 (to nearest, ties to even, on every CPU); `reserve`
    /// must have made room. A page another cache shares is copied before it is written.
    /// `rounded` is scratch for the keys before they are spread over the tiles.
    pub fn write(&mut self, layer: usize, keys: &[f32], values: &[f32], rounded: &mut Vec<f16>) {
        let (head_dim, width) = (self.head_dim, self.kv_heads * self.head_dim);
        let head_floats = PAGE * head_dim;
        let len = self.len;
        let pages = &mut self.layers[layer];
        rounded.clear();
        rounded.resize(keys.len(), f16::ZERO);
        rounded.convert_from_f32_slice(keys);
        let rows = rounded.chunks_exact(width).zip(values.chunks_exact(width));
        for (i, (key_row, value_row)) in rows.enumerate() {
            let position = len + i;
            let page = Arc::make_mut(&mut pages[position / PAGE]);
            let within = position % PAGE;
            let tile = (within / TILE) * TILE * head_dim + within % TILE;
            for (head, dims) in key_row.chunks_exact(head_dim).enumerate() {
                let base = head * head_floats + tile;
                for (d, &k) in dims.iter().enumerate() {
                    page.keys[base + d * TILE] = k;
                }
            }
            for (head, dims) in value_row.chunks_exact(head_dim).enumerate() {
                let at = head * head_floats + within * head_dim;
                page.values[at..at + head_dim].convert_from_f32_slice(dims);
            }
        }
    }

    /// KV head `kv_head`'s keys (whole tiles) and values for the first `seen` positions
    /// of `layer`, widened to f32 into `keys` and `values` as one run each.
    fn widen(
        &self,
        layer: usize,
        kv_head: usize,
        seen: usize,
        keys: &mut Vec<f32>,
        values: &mut Vec<f32>,
    ) {
        let head_dim = self.head_dim;
        keys.resize(seen.div_ceil(TILE) * TILE * head_dim, 0.0);
        values.resize(seen * head_dim, 0.0);
        for (index, page) in self.layers[layer][..seen.div_ceil(PAGE)].iter().enumerate() {
            let first = index * PAGE;
            let here = (seen - first).min(PAGE);
            let tiles = here.div_ceil(TILE) * TILE * head_dim;
            page.keys(kv_head, head_dim)[..tiles]
                .convert_to_f32_slice(&mut keys[first * head_dim..][..tiles]);
            page.values(kv_head, head_dim)[..here * head_dim]
                .convert_to_f32_slice(&mut values[first * head_dim..][..here * head_dim]);
        }
    }

    /// Counts `rows` new positions once every layer has them written.
    pub fn advance(&mut self, rows: usize) {
        self.len += rows;
    }

    /// Attention of one query head at absolute position `position` over positions
    /// `0..=position`, its KV head being `kv_head`. Writes `head_dim` floats to `out`: the
    /// one-query path that `attend_group` must match.
    #[cfg(test)]
    pub fn attend(
        &self,
        layer: usize,
        query: &[f32],
        position: usize,
        kv_head: usize,
        scratch: &mut Scratch,
        out: &mut [f32],
    ) {
        self.attend_each(layer, &[query], position, kv_head, scratch, &mut [out]);
    }

    /// Attention of the query heads `queries`, all of KV head `kv_head`, at `position`:
    /// `outs[i]` gets exactly what `attend` writes for `queries[i]`. With AVX-512 the keys
    /// and values are read once for up to four of them; elsewhere they are widened once.
    pub fn attend_group(
        &self,
        layer: usize,
        queries: &[&[f32]],
        position: usize,
        kv_head: usize,
        scratch: &mut Scratch,
        outs: &mut [&mut [f32]],
    ) {
        #[cfg(target_arch = "x86_64")]
        if matches!(self.head_dim, 64 | 128) && std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: AVX-512 F was detected and the head size is one the kernel takes.
            unsafe {
                grouped::attend(
                    self,
                    layer,
                    queries,
                    position,
                    kv_head,
                    &mut scratch.scores,
                    outs,
                )
            };
            return;
        }
        self.attend_each(layer, queries, position, kv_head, scratch, outs);
    }

    /// The portable path: the KV head's keys and values widened once, then each query.
    fn attend_each(
        &self,
        layer: usize,
        queries: &[&[f32]],
        position: usize,
        kv_head: usize,
        scratch: &mut Scratch,
        outs: &mut [&mut [f32]],
    ) {
        let Scratch {
            scores,
            keys,
            values,
        } = scratch;
        self.widen(layer, kv_head, position + 1, keys, values);
        for (query, out) in queries.iter().zip(outs.iter_mut()) {
            attend_widened(query, position, keys, values, scores, out);
        }
    }
}

/// `attend` over one KV head's keys (tiled) and values widened to f32.
#[inline(always)]
fn attend_widened(
    query: &[f32],
    position: usize,
    keys: &[f32],
    values: &[f32],
    scores: &mut Vec<f32>,
    out: &mut [f32],
) {
    let head_dim = query.len();
    let scale = 1.0 / (head_dim as f32).sqrt();
    let seen = position + 1;
    scores.clear();
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

    /// The cache holds each value rounded to the nearest f16: attention over a single
    /// position returns that value exactly, on either path.
    #[test]
    fn the_cache_holds_values_rounded_to_f16() {
        let (kv_heads, head_dim) = (1, 64);
        let mut cache = SequenceCache::new(1, kv_heads, head_dim);
        cache.reserve(1);
        let values: Vec<f32> = (0..head_dim).map(|i| 0.1 + i as f32 * 1.0e-3).collect();
        cache.write(0, &vec![0.5; head_dim], &values, &mut Vec::new());
        cache.advance(1);
        let query = vec![1.0f32; head_dim];
        let mut scratch = Scratch::default();
        let mut alone = vec![0.0f32; head_dim];
        cache.attend(0, &query, 0, 0, &mut scratch, &mut alone);
        let mut grouped = vec![0.0f32; head_dim];
        cache.attend_group(0, &[&query], 0, 0, &mut scratch, &mut [&mut grouped]);
        let rounded: Vec<f32> = values.iter().map(|&v| f16::from_f32(v).to_f32()).collect();
        assert_eq!(alone, rounded);
        assert_eq!(grouped, rounded);
        assert_ne!(rounded, values, "these values are not all f16 numbers");
    }

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
                cache.write(layer, &keys, &values, &mut Vec::new());
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
                    let mut scratch = Scratch::default();
                    cache.attend_group(1, &refs, position, kv_head, &mut scratch, &mut outs);
                    for (query, got) in queries.iter().zip(&grouped) {
                        let mut alone = vec![0.0f32; head_dim];
                        cache.attend(1, query, position, kv_head, &mut scratch, &mut alone);
                        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                        assert_eq!(bits(got), bits(&alone), "d {head_dim} position {position}");
                    }
                }
            }
        }
    }

    fn random(rng: &mut StdRng, n: usize) -> Vec<f32> {
        (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
    }

    fn append(cache: &mut SequenceCache, keys: &[f32], values: &[f32]) {
        let rows = keys.len() / (cache.kv_heads * cache.head_dim);
        cache.reserve(cache.len() + rows);
        for layer in 0..cache.layers.len() {
            cache.write(layer, keys, values, &mut Vec::new());
        }
        cache.advance(rows);
    }

    /// Every query head's output at `position`, on the grouped path, as bits.
    fn outputs(cache: &SequenceCache, queries: &[Vec<f32>], position: usize) -> Vec<u32> {
        let mut scratch = Scratch::default();
        let mut bits = Vec::new();
        for layer in 0..cache.layers.len() {
            for kv_head in 0..cache.kv_heads {
                let refs: Vec<&[f32]> = queries.iter().map(Vec::as_slice).collect();
                let mut got = vec![vec![0.0f32; cache.head_dim]; queries.len()];
                let mut outs: Vec<&mut [f32]> = got.iter_mut().map(Vec::as_mut_slice).collect();
                cache.attend_group(layer, &refs, position, kv_head, &mut scratch, &mut outs);
                bits.extend(got.iter().flatten().map(|v| v.to_bits()));
            }
        }
        bits
    }

    /// A prefix taken from another cache shares its pages, yet each cache sees only its
    /// own positions: writing past the prefix (into a shared page or a new one) changes
    /// nothing the other one reads, and each gives the bits a cache written alone gives.
    #[test]
    fn shared_prefix_pages_are_copied_before_either_cache_writes_into_them() {
        let mut rng = StdRng::seed_from_u64(23);
        let (layers, kv_heads, head_dim) = (2, 2, 64);
        let width = kv_heads * head_dim;
        let (donor_len, shared, added) = (100, 70, 90);
        let (k0, v0) = (
            random(&mut rng, donor_len * width),
            random(&mut rng, donor_len * width),
        );
        let (k1, v1) = (
            random(&mut rng, added * width),
            random(&mut rng, added * width),
        );
        let queries: Vec<Vec<f32>> = (0..3).map(|_| random(&mut rng, head_dim)).collect();

        let mut donor = SequenceCache::new(layers, kv_heads, head_dim);
        append(&mut donor, &k0, &v0);
        let donor_before = outputs(&donor, &queries, donor_len - 1);

        let mut taker = SequenceCache::new(layers, kv_heads, head_dim);
        taker.copy_prefix(&donor, shared);
        assert!(
            Arc::ptr_eq(&taker.pages(0)[0], &donor.pages(0)[0]),
            "pages are shared"
        );
        assert_eq!(
            outputs(&taker, &queries, shared - 1),
            outputs(&donor, &queries, shared - 1)
        );
        append(&mut taker, &k1, &v1);
        // The donor keeps writing into its own (once shared) page too.
        append(&mut donor, &k1[..10 * width], &v1[..10 * width]);
        assert_eq!(outputs(&donor, &queries, donor_len - 1), donor_before);

        let mut alone = SequenceCache::new(layers, kv_heads, head_dim);
        append(&mut alone, &k0[..shared * width], &v0[..shared * width]);
        append(&mut alone, &k1, &v1);
        for position in [shared - 1, shared, 127, 128, shared + added - 1] {
            assert_eq!(
                outputs(&taker, &queries, position),
                outputs(&alone, &queries, position),
                "position {position}"
            );
        }
    }
}
