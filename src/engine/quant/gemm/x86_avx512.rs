//! AVX-512 VNNI batched kernel: a tile of up to 2 blocks (32 outputs) × 6 activation rows
//! holds 12 integer sums and 12 float totals in registers. Per group of 32 inputs, 8 steps
//! each load one register of weights per block and broadcast 4 activation bytes per row
//! into `vpdpbusd`, the sums starting at minus the weights' offsets; then each exact sum
//! is scaled into its total.

use std::arch::x86_64::*;
use std::ops::Range;

use super::{TILE_BLOCKS, TILE_ROWS};
use crate::engine::quant::activations::QuantizedRows;
use crate::engine::quant::blocked::{BlockedMatrix, BLOCK, BLOCK_GROUP_BYTES};
use crate::engine::quant::formats::GROUP;
use crate::engine::quant::kernels::{lane_mask, Output};

/// # Safety
/// AVX-512 F and VNNI must be available; see `gemm::matmul_blocks` for `out`.
pub unsafe fn matmul_blocks(
    w: &BlockedMatrix,
    a: &QuantizedRows,
    blocks: Range<usize>,
    out: Output,
) {
    let mut block = blocks.start;
    while block < blocks.end {
        let nb = (blocks.end - block).min(TILE_BLOCKS);
        let mut row = 0;
        while row < a.rows {
            let mr = (a.rows - row).min(TILE_ROWS);
            // SAFETY: forwarded from the caller; the tile lies inside `a` and `blocks`.
            unsafe {
                match (nb, mr) {
                    (2, 6) => tile::<2, 6>(w, a, row, block, out),
                    (2, 5) => tile::<2, 5>(w, a, row, block, out),
                    (2, 4) => tile::<2, 4>(w, a, row, block, out),
                    (2, 3) => tile::<2, 3>(w, a, row, block, out),
                    (2, 2) => tile::<2, 2>(w, a, row, block, out),
                    (2, _) => tile::<2, 1>(w, a, row, block, out),
                    (_, 6) => tile::<1, 6>(w, a, row, block, out),
                    (_, 5) => tile::<1, 5>(w, a, row, block, out),
                    (_, 4) => tile::<1, 4>(w, a, row, block, out),
                    (_, 3) => tile::<1, 3>(w, a, row, block, out),
                    (_, 2) => tile::<1, 2>(w, a, row, block, out),
                    _ => tile::<1, 1>(w, a, row, block, out),
                }
            }
            row += mr;
        }
        block += nb;
    }
}

const _: () = assert!(TILE_BLOCKS == 2 && TILE_ROWS == 6 && BLOCK == 16);

#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile<const NB: usize, const MR: usize>(
    w: &BlockedMatrix,
    a: &QuantizedRows,
    row: usize,
    block: usize,
    out: Output,
) {
    unsafe {
        let groups = w.groups;
        let mut totals = [[_mm512_setzero_ps(); MR]; NB];
        let mut x = [std::ptr::null::<u8>(); MR];
        let mut x_scales = [std::ptr::null::<f32>(); MR];
        for r in 0..MR {
            x[r] = a.row_unsigned(row + r).as_ptr();
            x_scales[r] = a.row_scales(row + r).as_ptr();
        }
        for g in 0..groups {
            // The sums start at minus the offsets, so they come out exact.
            let mut sums = [[_mm512_setzero_si512(); MR]; NB];
            let mut wq = [std::ptr::null::<i8>(); NB];
            for b in 0..NB {
                let at = ((block + b) * groups + g) * BLOCK;
                let offsets = _mm512_loadu_si512(w.offsets.as_ptr().add(at) as *const __m512i);
                sums[b] = [_mm512_sub_epi32(_mm512_setzero_si512(), offsets); MR];
                wq[b] =
                    w.q.as_ptr()
                        .add(((block + b) * groups + g) * BLOCK_GROUP_BYTES);
            }
            for step in 0..GROUP / 4 {
                let mut weights = [_mm512_setzero_si512(); NB];
                for b in 0..NB {
                    weights[b] = _mm512_loadu_si512(wq[b].add(step * 64) as *const __m512i);
                }
                for r in 0..MR {
                    let bytes = (x[r].add(g * GROUP + step * 4) as *const i32).read_unaligned();
                    let xb = _mm512_set1_epi32(bytes);
                    for b in 0..NB {
                        sums[b][r] = _mm512_dpbusd_epi32(sums[b][r], xb, weights[b]);
                    }
                }
            }
            for b in 0..NB {
                let at = ((block + b) * groups + g) * BLOCK;
                let w_scales = _mm512_loadu_ps(w.scales.as_ptr().add(at));
                for r in 0..MR {
                    let scale = _mm512_mul_ps(w_scales, _mm512_set1_ps(*x_scales[r].add(g)));
                    let exact = _mm512_cvtepi32_ps(sums[b][r]);
                    totals[b][r] = _mm512_fmadd_ps(exact, scale, totals[b][r]);
                }
            }
        }
        for b in 0..NB {
            let first = (block + b) * BLOCK;
            let mask = lane_mask(w.rows.saturating_sub(first));
            for r in 0..MR {
                let dst = out.ptr.add((row + r) * out.stride + first);
                _mm512_mask_storeu_ps(dst, mask, totals[b][r]);
            }
        }
    }
}
