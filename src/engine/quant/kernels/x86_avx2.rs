//! AVX2 + FMA kernel: the 16 outputs of a block in two 256-bit registers. Per step, 4
//! signed activation bytes are broadcast against each register of unsigned weights into
//! `maddubs`: nibble products are small enough to add up as 16-bit pairs over a whole
//! group before one widening `madd`; Q6_K's six-bit ones (the nibble and its 2 high bits
//! from their own plane) widen per step. Q8_0's bytes are
//! turned back into signed weights and use the sign trick (|w| · sign(a, w)), which keeps
//! `maddubs` from saturating and needs no offset. The float steps are the AVX-512
//! kernel's, lane by lane.

use std::arch::x86_64::*;

use super::{Output, Variant, ROW_TILE};
use crate::engine::quant::activations::QuantizedRows;
use crate::engine::quant::formats::GROUP;
use crate::engine::quant::packed::{PackedMatrix, BLOCK, STEPS};

/// # Safety
/// AVX2, FMA and F16C must be available; see `matmul_blocks`.
pub unsafe fn tile(
    variant: Variant,
    w: &PackedMatrix,
    a: &QuantizedRows,
    row: usize,
    tile: usize,
    block: usize,
    out: Output,
) {
    unsafe {
        match variant {
            Variant::Nibble => rows::<4, 1, false>(w, a, row, tile, block, out),
            Variant::NibbleMins => rows::<4, 1, true>(w, a, row, tile, block, out),
            Variant::Byte => rows::<8, 1, false>(w, a, row, tile, block, out),
            Variant::SixHalves => rows::<6, 2, false>(w, a, row, tile, block, out),
        }
    }
}

const _: () = assert!(ROW_TILE % 2 == 0 && BLOCK == 16 && STEPS == 8);

/// Pairs of rows (sixteen registers hold no more), then a single one.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows<const BITS: u32, const SUBS: usize, const MINS: bool>(
    w: &PackedMatrix,
    a: &QuantizedRows,
    row: usize,
    tile: usize,
    block: usize,
    out: Output,
) {
    let mut r = row;
    while r + 2 <= row + tile {
        unsafe { run::<2, BITS, SUBS, MINS>(w, a, r, block, out) };
        r += 2;
    }
    if r < row + tile {
        unsafe { run::<1, BITS, SUBS, MINS>(w, a, r, block, out) };
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn run<const R: usize, const BITS: u32, const SUBS: usize, const MINS: bool>(
    w: &PackedMatrix,
    a: &QuantizedRows,
    row: usize,
    block: usize,
    out: Output,
) {
    unsafe {
        let groups = w.groups;
        let group_bytes = w.group_bytes();
        let ones = _mm256_set1_epi16(1);
        let flip = _mm256_set1_epi8(i8::MIN);
        // Q8_0: signed weights and the sign trick, so no offset to subtract.
        let signed = BITS == 8;
        let offset = if signed { 0 } else { w.offset };
        let mut xq = [std::ptr::null::<i32>(); R];
        for r in 0..R {
            xq[r] = a.row_q(row + r).as_ptr() as *const i32;
        }
        let mut totals = [[_mm256_setzero_ps(); 2]; R];
        for g in 0..groups {
            let at = block * groups + g;
            let wq = w.q.as_ptr().add(at * group_bytes);
            // Per row, sub-block and half of the lanes.
            let mut sums = [[[_mm256_setzero_si256(); 2]; SUBS]; R];
            if offset != 0 {
                for r in 0..R {
                    let h = a.row_half_sums(row + r).as_ptr().add(2 * g);
                    for s in 0..SUBS {
                        let start = if SUBS == 1 {
                            -offset * (*h + *h.add(1))
                        } else {
                            -offset * *h.add(s)
                        };
                        sums[r][s] = [_mm256_set1_epi32(start); 2];
                    }
                }
            }
            if BITS == 4 {
                let mut pairs = [[_mm256_setzero_si256(); 2]; R];
                for step in 0..STEPS {
                    let weights = step_weights::<BITS>(wq, step);
                    for r in 0..R {
                        let x = _mm256_set1_epi32(xq[r].add(g * GROUP / 4 + step).read_unaligned());
                        for l in 0..2 {
                            let p = _mm256_maddubs_epi16(weights[l], x);
                            pairs[r][l] = _mm256_add_epi16(pairs[r][l], p);
                        }
                    }
                }
                for r in 0..R {
                    for l in 0..2 {
                        let widened = _mm256_madd_epi16(pairs[r][l], ones);
                        sums[r][0][l] = _mm256_add_epi32(sums[r][0][l], widened);
                    }
                }
            } else {
                for step in 0..STEPS {
                    let s = step * SUBS / STEPS;
                    let mut weights = step_weights::<BITS>(wq, step);
                    let mut magnitudes = weights;
                    if signed {
                        for l in 0..2 {
                            weights[l] = _mm256_xor_si256(weights[l], flip);
                            magnitudes[l] = _mm256_abs_epi8(weights[l]);
                        }
                    }
                    for r in 0..R {
                        let x = _mm256_set1_epi32(xq[r].add(g * GROUP / 4 + step).read_unaligned());
                        for l in 0..2 {
                            let x = if signed {
                                _mm256_sign_epi8(x, weights[l])
                            } else {
                                x
                            };
                            let p = _mm256_maddubs_epi16(magnitudes[l], x);
                            let widened = _mm256_madd_epi16(p, ones);
                            sums[r][s][l] = _mm256_add_epi32(sums[r][s][l], widened);
                        }
                    }
                }
            }
            let ws = w.scales.as_ptr().add(at * SUBS * BLOCK) as *const __m128i;
            let wm = w.mins.as_ptr().wrapping_add(at * BLOCK) as *const __m128i;
            for l in 0..2 {
                let scale0 = _mm256_cvtph_ps(_mm_loadu_si128(ws.add(l)));
                let scale1 = if SUBS == 2 {
                    _mm256_cvtph_ps(_mm_loadu_si128(ws.add(2 + l)))
                } else {
                    scale0
                };
                let mins = if MINS {
                    _mm256_cvtph_ps(_mm_loadu_si128(wm.add(l)))
                } else {
                    scale0
                };
                for r in 0..R {
                    let x_scale = _mm256_set1_ps(a.row_scales(row + r)[g]);
                    let total = &mut totals[r][l];
                    if SUBS == 1 {
                        let s = _mm256_mul_ps(scale0, x_scale);
                        *total = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[r][0][l]), s, *total);
                    } else {
                        let t = _mm256_mul_ps(_mm256_cvtepi32_ps(sums[r][0][l]), scale0);
                        let t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[r][1][l]), scale1, t);
                        *total = _mm256_fmadd_ps(t, x_scale, *total);
                    }
                    if MINS {
                        let sum = _mm256_set1_ps(a.row_sums(row + r)[g]);
                        *total = _mm256_fmadd_ps(mins, sum, *total);
                    }
                }
            }
        }
        let first = block * BLOCK;
        let valid = (w.rows - first).min(BLOCK);
        for r in 0..R {
            let dst = out.ptr.add((row + r) * out.stride + first);
            if valid == BLOCK {
                _mm256_storeu_ps(dst, totals[r][0]);
                _mm256_storeu_ps(dst.add(8), totals[r][1]);
            } else {
                let mut lanes = [0.0f32; BLOCK];
                _mm256_storeu_ps(lanes.as_mut_ptr(), totals[r][0]);
                _mm256_storeu_ps(lanes.as_mut_ptr().add(8), totals[r][1]);
                std::ptr::copy_nonoverlapping(lanes.as_ptr(), dst, valid);
            }
        }
    }
}

/// Step `step`'s weights of one block and group (`wq`), as unsigned bytes in two registers.
#[inline(always)]
unsafe fn step_weights<const BITS: u32>(wq: *const u8, step: usize) -> [__m256i; 2] {
    unsafe {
        if BITS == 8 {
            let base = wq.add(step * 64) as *const __m256i;
            return [_mm256_loadu_si256(base), _mm256_loadu_si256(base.add(1))];
        }
        let (low, high) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x30));
        let base = wq.add((step / 2) * 64) as *const __m256i;
        let mut weights = [_mm256_loadu_si256(base), _mm256_loadu_si256(base.add(1))];
        for (l, v) in weights.iter_mut().enumerate() {
            *v = if step % 2 == 0 {
                _mm256_and_si256(*v, low)
            } else {
                _mm256_and_si256(_mm256_srli_epi16(*v, 4), low)
            };
            if BITS == 6 {
                // This step's 2 high bits, moved to bits 4 and 5 of each byte.
                let plane = wq.add(GROUP * BLOCK / 2 + (step / 4) * 64) as *const __m256i;
                let h = _mm256_loadu_si256(plane.add(l));
                let h = match step % 4 {
                    0 => _mm256_slli_epi16(h, 4),
                    1 => _mm256_slli_epi16(h, 2),
                    2 => h,
                    _ => _mm256_srli_epi16(h, 2),
                };
                *v = _mm256_or_si256(*v, _mm256_and_si256(h, high));
            }
        }
        weights
    }
}
