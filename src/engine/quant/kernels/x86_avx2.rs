//! AVX2 + FMA kernel: one 32-weight group per 256-bit register, signed activations.
//! Nibble weights (0..=15) multiply activations directly with `maddubs`; signed byte
//! weights use the sign trick (|w| · sign(a, w)) so the unsigned operand stays unsigned.

use std::arch::x86_64::*;

use super::{Output, ROW_TILE};
use crate::engine::quant::activations::QuantizedRows;
use crate::engine::quant::formats::{Packing, GROUP};
use crate::engine::quant::packed::PackedMatrix;

/// # Safety
/// AVX2 and FMA must be available; see `matmul_columns` for `out`.
pub unsafe fn tile(
    w: &PackedMatrix,
    a: &QuantizedRows,
    row: usize,
    tile: usize,
    cols: std::ops::Range<usize>,
    out: Output,
) {
    for j in cols {
        unsafe { column(w, a, row, tile, j, out) };
    }
}

#[inline(always)]
unsafe fn column(
    w: &PackedMatrix,
    a: &QuantizedRows,
    row: usize,
    tile: usize,
    j: usize,
    out: Output,
) {
    unsafe {
        match (w.packing, tile) {
            (Packing::Nibble, 4) => run::<4, true, 1>(w, a, row, j, out),
            (Packing::Nibble, _) => single::<true, 1>(w, a, row, tile, j, out),
            (Packing::Byte { subs: 1 }, 4) => run::<4, false, 1>(w, a, row, j, out),
            (Packing::Byte { subs: 1 }, _) => single::<false, 1>(w, a, row, tile, j, out),
            (Packing::Byte { .. }, 4) => run::<4, false, 2>(w, a, row, j, out),
            (Packing::Byte { .. }, _) => single::<false, 2>(w, a, row, tile, j, out),
        }
    }
}

const _: () = assert!(ROW_TILE == 4);

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn single<const NIBBLE: bool, const SUBS: usize>(
    w: &PackedMatrix,
    a: &QuantizedRows,
    row: usize,
    tile: usize,
    j: usize,
    out: Output,
) {
    for r in row..row + tile {
        unsafe { run::<1, NIBBLE, SUBS>(w, a, r, j, out) };
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn run<const R: usize, const NIBBLE: bool, const SUBS: usize>(
    w: &PackedMatrix,
    a: &QuantizedRows,
    row: usize,
    j: usize,
    out: Output,
) {
    unsafe {
        let groups = w.groups;
        let wq = w.q.as_ptr().add(j * w.row_bytes());
        let ws = w.scales.as_ptr().add(j * groups * SUBS);
        let low = _mm256_set1_epi8(0x0F);
        let ones = _mm256_set1_epi16(1);
        let mut aq = [std::ptr::null::<i8>(); R];
        let mut ad = [std::ptr::null::<f32>(); R];
        for r in 0..R {
            aq[r] = a.row_q(row + r).as_ptr();
            ad[r] = a.row_scales(row + r).as_ptr();
        }
        let mut acc = [_mm256_setzero_ps(); R];
        for g in 0..groups {
            let weights = if NIBBLE {
                let x = _mm256_loadu_si256(wq.add((g / 2) * GROUP) as *const __m256i);
                if g % 2 == 0 {
                    _mm256_and_si256(x, low)
                } else {
                    _mm256_and_si256(_mm256_srli_epi16(x, 4), low)
                }
            } else {
                _mm256_loadu_si256(wq.add(g * GROUP) as *const __m256i)
            };
            let scale = if SUBS == 1 {
                _mm256_broadcastss_ps(half_to_f32(*(ws.add(g) as *const u16)))
            } else {
                let both = _mm_cvtph_ps(_mm_cvtsi32_si128(
                    (ws.add(2 * g) as *const i32).read_unaligned(),
                ));
                // Lanes 0..4 take the first sub-block's scale, lanes 4..8 the second's.
                _mm256_permutevar8x32_ps(
                    _mm256_castps128_ps256(both),
                    _mm256_set_epi32(1, 1, 1, 1, 0, 0, 0, 0),
                )
            };
            let unsigned = if NIBBLE {
                weights
            } else {
                _mm256_sign_epi8(weights, weights)
            };
            for r in 0..R {
                let x = _mm256_loadu_si256(aq[r].add(g * GROUP) as *const __m256i);
                let signed = if NIBBLE {
                    x
                } else {
                    _mm256_sign_epi8(x, weights)
                };
                let pairs = _mm256_maddubs_epi16(unsigned, signed);
                let sums = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
                let s = _mm256_mul_ps(scale, _mm256_set1_ps(*ad[r].add(g)));
                acc[r] = _mm256_fmadd_ps(sums, s, acc[r]);
            }
        }
        if NIBBLE {
            // The minimums times the activation group sums, eight groups per step (the
            // group count is even, so a tail holds at most six).
            let mins = w.mins.as_ptr().add(j * groups) as *const u16;
            for r in 0..R {
                let sums = a.row_sums(row + r).as_ptr();
                let mut g = 0;
                while g + 8 <= groups {
                    let m = _mm256_cvtph_ps(_mm_loadu_si128(mins.add(g) as *const __m128i));
                    acc[r] = _mm256_fmadd_ps(m, _mm256_loadu_ps(sums.add(g)), acc[r]);
                    g += 8;
                }
                if g < groups {
                    let mut m = [0u16; 8];
                    let mut s = [0.0f32; 8];
                    for i in g..groups {
                        m[i - g] = *mins.add(i);
                        s[i - g] = *sums.add(i);
                    }
                    let m = _mm256_cvtph_ps(_mm_loadu_si128(m.as_ptr() as *const __m128i));
                    acc[r] = _mm256_fmadd_ps(m, _mm256_loadu_ps(s.as_ptr()), acc[r]);
                }
            }
        }
        for r in 0..R {
            out.write(row + r, j, horizontal_sum(acc[r]));
        }
    }
}

/// One f16 (as its bits) in lane 0.
#[inline(always)]
unsafe fn half_to_f32(bits: u16) -> __m128 {
    unsafe { _mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn horizontal_sum(v: __m256) -> f32 {
    let folded = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let folded = _mm_add_ps(folded, _mm_movehl_ps(folded, folded));
    let folded = _mm_add_ss(folded, _mm_shuffle_ps(folded, folded, 1));
    _mm_cvtss_f32(folded)
}
