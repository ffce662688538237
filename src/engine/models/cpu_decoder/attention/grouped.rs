//! Attention of several query heads that share one KV head, on AVX-512: one pass over the
//! keys and one over the values serve up to four queries at once, where one query at a
//! time reads them again for each. Each query's sums take the steps `SequenceCache::attend`
//! takes, in the same order and with the same fused multiply-adds, so the bits are the
//! same. Keys and values are widened from f16 as they are loaded (exact, as the other
//! path's widening is).

use std::arch::x86_64::*;

use half::f16;

use std::sync::Arc;

use super::{softmax, Page, SequenceCache, PAGE, TILE};

/// Queries whose scores share one pass over the keys (16 registers of sums).
const QUERIES: usize = 4;

/// # Safety
/// AVX-512 F must be available (it has the f16 conversions used here); `head_dim` must
/// be 64 or 128, every query `head_dim` floats and every output as long.
#[target_feature(enable = "avx512f")]
pub unsafe fn attend(
    cache: &SequenceCache,
    layer: usize,
    queries: &[&[f32]],
    position: usize,
    kv_head: usize,
    scores: &mut Vec<f32>,
    outs: &mut [&mut [f32]],
) {
    unsafe {
        let head_dim = cache.head_dim;
        let scale = 1.0 / (head_dim as f32).sqrt();
        let seen = position + 1;
        let tiles = seen.div_ceil(TILE);
        let span = tiles * TILE;
        let pages = &cache.pages(layer)[..seen.div_ceil(PAGE)];
        let mut start = 0;
        while start < queries.len() {
            let group = (queries.len() - start).min(QUERIES);
            let qs = &queries[start..start + group];
            scores.clear();
            scores.resize(group * span, 0.0);
            let s = scores.as_mut_ptr();
            match group {
                4 => score::<4>(qs, pages, kv_head, head_dim, tiles, s),
                3 => score::<3>(qs, pages, kv_head, head_dim, tiles, s),
                2 => score::<2>(qs, pages, kv_head, head_dim, tiles, s),
                _ => score::<1>(qs, pages, kv_head, head_dim, tiles, s),
            }
            let mut inverses = [0.0f32; QUERIES];
            for (q, inverse) in inverses.iter_mut().enumerate().take(group) {
                *inverse = softmax(&mut scores[q * span..q * span + seen], scale);
            }
            // Four queries' sums of 64 values, or two of 128, stay in registers.
            let per = if head_dim == 64 { 4 } else { 2 };
            let mut first = 0;
            while first < group {
                let n = (group - first).min(per);
                let w = scores.as_ptr().add(first * span);
                let inv = &inverses[first..first + n];
                let out = &mut outs[start + first..start + first + n];
                let values = (pages, kv_head, seen);
                match (head_dim, n) {
                    (64, 4) => weigh::<4, 4>(w, span, inv, values, out),
                    (64, 3) => weigh::<4, 3>(w, span, inv, values, out),
                    (64, 2) => weigh::<4, 2>(w, span, inv, values, out),
                    (64, _) => weigh::<4, 1>(w, span, inv, values, out),
                    (_, 2) => weigh::<8, 2>(w, span, inv, values, out),
                    _ => weigh::<8, 1>(w, span, inv, values, out),
                }
                first += n;
            }
            start += group;
        }
    }
}

/// Scores of `G` queries over `tiles` key tiles, page by page, into `scores` (`G` rows,
/// `tiles · 16` apart).
#[inline(always)]
unsafe fn score<const G: usize>(
    qs: &[&[f32]],
    pages: &[Arc<Page>],
    kv_head: usize,
    head_dim: usize,
    tiles: usize,
    scores: *mut f32,
) {
    const PER_PAGE: usize = PAGE / TILE;
    unsafe {
        for (index, page) in pages.iter().enumerate() {
            let keys = page.keys(kv_head, head_dim).as_ptr();
            let first = index * PER_PAGE;
            let here = (tiles - first).min(PER_PAGE);
            if here == PER_PAGE {
                tile_block::<G, PER_PAGE>(qs, keys, head_dim, first, tiles * TILE, scores);
            } else {
                for t in 0..here {
                    let at = keys.add(t * TILE * head_dim);
                    tile_block::<G, 1>(qs, at, head_dim, first + t, tiles * TILE, scores);
                }
            }
        }
    }
}

/// Scores of `G` queries over the `N` tiles from `base` (tile `tile` of the sequence).
#[inline(always)]
unsafe fn tile_block<const G: usize, const N: usize>(
    qs: &[&[f32]],
    base: *const f16,
    head_dim: usize,
    tile: usize,
    span: usize,
    scores: *mut f32,
) {
    unsafe {
        let mut q = [std::ptr::null::<f32>(); G];
        for g in 0..G {
            q[g] = qs[g].as_ptr();
        }
        let mut acc = [[_mm512_setzero_ps(); N]; G];
        for d in 0..head_dim {
            let mut k = [_mm512_setzero_ps(); N];
            for t in 0..N {
                k[t] = widen(base.add((t * head_dim + d) * TILE));
            }
            for g in 0..G {
                let qd = _mm512_set1_ps(*q[g].add(d));
                for t in 0..N {
                    acc[g][t] = _mm512_fmadd_ps(qd, k[t], acc[g][t]);
                }
            }
        }
        for g in 0..G {
            for t in 0..N {
                _mm512_storeu_ps(scores.add(g * span + (tile + t) * TILE), acc[g][t]);
            }
        }
    }
}

/// `outs[g] = Σ_p weights[g][p] · inverses[g] · values[p]` over the first `seen`
/// positions of KV head `kv_head` in `pages`, for heads of `16 · V` values.
#[inline(always)]
unsafe fn weigh<const V: usize, const G: usize>(
    weights: *const f32,
    span: usize,
    inverses: &[f32],
    (pages, kv_head, seen): (&[Arc<Page>], usize, usize),
    outs: &mut [&mut [f32]],
) {
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); V]; G];
        for (index, page) in pages.iter().enumerate() {
            let values = page.values(kv_head, 16 * V).as_ptr();
            let first = index * PAGE;
            for p in first..seen.min(first + PAGE) {
                let row = values.add((p - first) * 16 * V);
                let mut v = [_mm512_setzero_ps(); V];
                for i in 0..V {
                    v[i] = widen(row.add(16 * i));
                }
                for g in 0..G {
                    let weight = _mm512_set1_ps(*weights.add(g * span + p) * inverses[g]);
                    for i in 0..V {
                        acc[g][i] = _mm512_fmadd_ps(weight, v[i], acc[g][i]);
                    }
                }
            }
        }
        for g in 0..G {
            for i in 0..V {
                _mm512_storeu_ps(outs[g].as_mut_ptr().add(16 * i), acc[g][i]);
            }
        }
    }
}

/// Sixteen f16 values from `at`, widened to f32.
#[inline(always)]
unsafe fn widen(at: *const f16) -> __m512 {
    unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(at.cast())) }
}
