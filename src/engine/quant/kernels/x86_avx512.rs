//! AVX-512 VNNI kernel: the 16 outputs of a block in one register. Per group, 8 steps each
//! take one register of weights (unsigned bytes, the low or high nibbles of one, or those
//! with Q6_K's two high bits from their own plane) and,
//! per activation row, broadcast 4 signed activation bytes into `vpdpbusd`; the sums start
//! at the weights' offset times the activations' sum, so they come out exact. Each row
//! spreads a group's steps over independent sums (four alone, two in a tile) so the
//! multiply-adds do not wait on each other, then scales them into its total. Eight rows
//! (one sum each) share a block's unpacked weights where a batch has them.

use std::arch::x86_64::*;

use super::{lane_mask, Output, Variant, ROW_TILE, WIDE_TILE};
use crate::engine::quant::activations::QuantizedRows;
use crate::engine::quant::formats::GROUP;
use crate::engine::quant::packed::{PackedMatrix, BLOCK, STEPS};

/// # Safety
/// AVX-512 F/BW and VNNI must be available; see `matmul_blocks`.
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
        match (variant, tile) {
            (Variant::Nibble, WIDE_TILE) => run::<8, 1, 4, 1, false>(w, a, row, block, out),
            (Variant::Nibble, ROW_TILE) => run::<4, 2, 4, 1, false>(w, a, row, block, out),
            (Variant::Nibble, _) => single::<4, 1, false>(w, a, row, tile, block, out),
            (Variant::NibbleMins, WIDE_TILE) => run::<8, 1, 4, 1, true>(w, a, row, block, out),
            (Variant::NibbleMins, ROW_TILE) => run::<4, 2, 4, 1, true>(w, a, row, block, out),
            (Variant::NibbleMins, _) => single::<4, 1, true>(w, a, row, tile, block, out),
            (Variant::Byte, WIDE_TILE) => run::<8, 1, 8, 1, false>(w, a, row, block, out),
            (Variant::Byte, ROW_TILE) => run::<4, 2, 8, 1, false>(w, a, row, block, out),
            (Variant::Byte, _) => single::<8, 1, false>(w, a, row, tile, block, out),
            // Two sums per row (one per half group) would not fit eight rows in registers.
            (Variant::SixHalves, WIDE_TILE) => {
                run::<4, 2, 6, 2, false>(w, a, row, block, out);
                run::<4, 2, 6, 2, false>(w, a, row + ROW_TILE, block, out);
            }
            (Variant::SixHalves, ROW_TILE) => run::<4, 2, 6, 2, false>(w, a, row, block, out),
            (Variant::SixHalves, _) => single::<6, 2, false>(w, a, row, tile, block, out),
        }
    }
}

const _: () = assert!(ROW_TILE == 4 && WIDE_TILE == 2 * ROW_TILE && BLOCK == 16 && STEPS == 8);

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c")]
unsafe fn single<const BITS: u32, const SUBS: usize, const MINS: bool>(
    w: &PackedMatrix,
    a: &QuantizedRows,
    row: usize,
    tile: usize,
    block: usize,
    out: Output,
) {
    for r in row..row + tile {
        unsafe { run::<1, 4, BITS, SUBS, MINS>(w, a, r, block, out) };
    }
}

/// `R` rows against one block of `BITS`-bit weights, `K` integer sums per row and group
/// (`K / SUBS` per half).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c")]
unsafe fn run<
    const R: usize,
    const K: usize,
    const BITS: u32,
    const SUBS: usize,
    const MINS: bool,
>(
    w: &PackedMatrix,
    a: &QuantizedRows,
    row: usize,
    block: usize,
    out: Output,
) {
    unsafe {
        let groups = w.groups;
        let group_bytes = w.group_bytes();
        let (low, high) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(0x30));
        let per_sub = K / SUBS;
        let mut xq = [std::ptr::null::<i32>(); R];
        let mut x_scales = [std::ptr::null::<f32>(); R];
        let mut x_sums = [std::ptr::null::<f32>(); R];
        let mut x_halves = [std::ptr::null::<i32>(); R];
        for r in 0..R {
            xq[r] = a.row_q(row + r).as_ptr() as *const i32;
            x_scales[r] = a.row_scales(row + r).as_ptr();
            x_sums[r] = a.row_sums(row + r).as_ptr();
            x_halves[r] = a.row_half_sums(row + r).as_ptr();
        }
        let mut totals = [_mm512_setzero_ps(); R];
        for g in 0..groups {
            let at = block * groups + g;
            let wq = w.q.as_ptr().add(at * group_bytes);
            let mut sums = [[_mm512_setzero_si512(); K]; R];
            if w.offset != 0 {
                for r in 0..R {
                    let h = x_halves[r].add(2 * g);
                    if SUBS == 1 {
                        sums[r][0] = _mm512_set1_epi32(-w.offset * (*h + *h.add(1)));
                    } else {
                        sums[r][0] = _mm512_set1_epi32(-w.offset * *h);
                        sums[r][per_sub] = _mm512_set1_epi32(-w.offset * *h.add(1));
                    }
                }
            }
            for step in 0..STEPS {
                let weights = if BITS == 8 {
                    _mm512_loadu_si512(wq.add(step * 64) as *const __m512i)
                } else {
                    let x = _mm512_loadu_si512(wq.add((step / 2) * 64) as *const __m512i);
                    let low_bits = if step % 2 == 0 {
                        _mm512_and_si512(x, low)
                    } else {
                        _mm512_and_si512(_mm512_srli_epi16(x, 4), low)
                    };
                    if BITS == 6 {
                        // This step's 2 high bits, moved to bits 4 and 5 of each byte.
                        let plane = wq.add(GROUP * BLOCK / 2 + (step / 4) * 64);
                        let h = _mm512_loadu_si512(plane as *const __m512i);
                        let h = match step % 4 {
                            0 => _mm512_slli_epi16(h, 4),
                            1 => _mm512_slli_epi16(h, 2),
                            2 => h,
                            _ => _mm512_srli_epi16(h, 2),
                        };
                        _mm512_or_si512(low_bits, _mm512_and_si512(h, high))
                    } else {
                        low_bits
                    }
                };
                let k = (step * SUBS / STEPS) * per_sub + step % per_sub;
                for r in 0..R {
                    let x = _mm512_set1_epi32(xq[r].add(g * GROUP / 4 + step).read_unaligned());
                    sums[r][k] = _mm512_dpbusd_epi32(sums[r][k], weights, x);
                }
            }
            let ws = w.scales.as_ptr().add(at * SUBS * BLOCK) as *const __m256i;
            let scale0 = _mm512_cvtph_ps(_mm256_loadu_si256(ws));
            let scale1 = if SUBS == 2 {
                _mm512_cvtph_ps(_mm256_loadu_si256(ws.add(1)))
            } else {
                scale0
            };
            let mins = if MINS {
                _mm512_cvtph_ps(_mm256_loadu_si256(
                    w.mins.as_ptr().add(at * BLOCK) as *const __m256i
                ))
            } else {
                scale0
            };
            for r in 0..R {
                let mut half = [_mm512_setzero_si512(); 2];
                for s in 0..SUBS {
                    half[s] = sums[r][s * per_sub];
                    for i in 1..per_sub {
                        half[s] = _mm512_add_epi32(half[s], sums[r][s * per_sub + i]);
                    }
                }
                let x_scale = _mm512_set1_ps(*x_scales[r].add(g));
                if SUBS == 1 {
                    let s = _mm512_mul_ps(scale0, x_scale);
                    totals[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(half[0]), s, totals[r]);
                } else {
                    let t = _mm512_mul_ps(_mm512_cvtepi32_ps(half[0]), scale0);
                    let t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(half[1]), scale1, t);
                    totals[r] = _mm512_fmadd_ps(t, x_scale, totals[r]);
                }
                if MINS {
                    let sum = _mm512_set1_ps(*x_sums[r].add(g));
                    totals[r] = _mm512_fmadd_ps(mins, sum, totals[r]);
                }
            }
        }
        let first = block * BLOCK;
        let mask = lane_mask(w.rows - first);
        for r in 0..R {
            let dst = out.ptr.add((row + r) * out.stride + first);
            _mm512_mask_storeu_ps(dst, mask, totals[r]);
        }
    }
}
