//! AVX2 batched kernel: a tile of one block (16 outputs, two 256-bit halves) × 4 activation
//! rows. AVX2 has no `vpdpbusd`, and `vpmaddubsw` on unsigned activation bytes would
//! saturate, so each step multiplies the weights' magnitudes by the signed activation
//! bytes carrying the weights' signs (|w| · sgn(w)·a, both within ±127, so the pair sums
//! fit 16 bits) and widens the pairs with `vpmaddwd`. The integer sum is exactly the one
//! the other kernels compute, and the float steps are theirs, so the bits are the same.

use std::arch::x86_64::*;
use std::ops::Range;

use crate::engine::quant::activations::QuantizedRows;
use crate::engine::quant::blocked::{BlockedMatrix, BLOCK, BLOCK_GROUP_BYTES};
use crate::engine::quant::formats::GROUP;
use crate::engine::quant::kernels::Output;

/// Activation rows per register tile: 8 sums, 2 weights and their 2 magnitudes, and
/// temporaries fit the 16 registers.
const ROWS: usize = 4;

/// # Safety
/// AVX2 must be available; see `gemm::matmul_blocks` for `out`.
pub unsafe fn matmul_blocks(
    w: &BlockedMatrix,
    a: &QuantizedRows,
    blocks: Range<usize>,
    out: Output,
) {
    for block in blocks {
        let mut row = 0;
        while row < a.rows {
            let mr = (a.rows - row).min(ROWS);
            // SAFETY: forwarded from the caller; the tile lies inside `a` and `blocks`.
            unsafe {
                match mr {
                    4 => tile::<4>(w, a, row, block, out),
                    3 => tile::<3>(w, a, row, block, out),
                    2 => tile::<2>(w, a, row, block, out),
                    _ => tile::<1>(w, a, row, block, out),
                }
            }
            row += mr;
        }
    }
}

const _: () = assert!(BLOCK == 16 && GROUP == 32);

#[target_feature(enable = "avx2,fma")]
unsafe fn tile<const MR: usize>(
    w: &BlockedMatrix,
    a: &QuantizedRows,
    row: usize,
    block: usize,
    out: Output,
) {
    unsafe {
        let groups = w.groups;
        let ones = _mm256_set1_epi16(1);
        let mut totals = [[_mm256_setzero_ps(); 2]; MR];
        let mut x = [std::ptr::null::<i8>(); MR];
        let mut x_scales = [std::ptr::null::<f32>(); MR];
        for r in 0..MR {
            x[r] = a.row_q(row + r).as_ptr();
            x_scales[r] = a.row_scales(row + r).as_ptr();
        }
        for g in 0..groups {
            let mut sums = [[_mm256_setzero_si256(); 2]; MR];
            let wq = w.q.as_ptr().add((block * groups + g) * BLOCK_GROUP_BYTES);
            for step in 0..GROUP / 4 {
                let mut weights = [_mm256_setzero_si256(); 2];
                let mut magnitudes = [_mm256_setzero_si256(); 2];
                for h in 0..2 {
                    weights[h] = _mm256_loadu_si256(wq.add(step * 64 + h * 32) as *const __m256i);
                    magnitudes[h] = _mm256_abs_epi8(weights[h]);
                }
                for r in 0..MR {
                    let bytes = (x[r].add(g * GROUP + step * 4) as *const i32).read_unaligned();
                    let xb = _mm256_set1_epi32(bytes);
                    for h in 0..2 {
                        let signed = _mm256_sign_epi8(xb, weights[h]);
                        let pairs = _mm256_maddubs_epi16(magnitudes[h], signed);
                        sums[r][h] = _mm256_add_epi32(sums[r][h], _mm256_madd_epi16(pairs, ones));
                    }
                }
            }
            let at = (block * groups + g) * BLOCK;
            for h in 0..2 {
                let w_scales = _mm256_loadu_ps(w.scales.as_ptr().add(at + h * 8));
                for r in 0..MR {
                    let scale = _mm256_mul_ps(w_scales, _mm256_set1_ps(*x_scales[r].add(g)));
                    let exact = _mm256_cvtepi32_ps(sums[r][h]);
                    totals[r][h] = _mm256_fmadd_ps(exact, scale, totals[r][h]);
                }
            }
        }
        let first = block * BLOCK;
        let valid = w.rows.saturating_sub(first).min(BLOCK);
        for (r, halves) in totals.iter().enumerate() {
            let dst = out.ptr.add((row + r) * out.stride + first);
            if valid == BLOCK {
                _mm256_storeu_ps(dst, halves[0]);
                _mm256_storeu_ps(dst.add(8), halves[1]);
            } else {
                let mut lanes = [0.0f32; BLOCK];
                _mm256_storeu_ps(lanes.as_mut_ptr(), halves[0]);
                _mm256_storeu_ps(lanes.as_mut_ptr().add(8), halves[1]);
                std::ptr::copy_nonoverlapping(lanes.as_ptr(), dst, valid);
            }
        }
    }
}
