//! The portable kernel: exact integer sums per group, then the float steps every SIMD
//! kernel takes lane by lane, in the same order and with the same fused multiply-adds.

use super::{Output, Variant};
use crate::engine::quant::activations::QuantizedRows;
use crate::engine::quant::formats::GROUP;
use crate::engine::quant::packed::{PackedMatrix, BLOCK};

/// Rows `row..row + tile` against the 16 outputs of `block`.
///
/// # Safety
/// See `matmul_blocks`.
pub unsafe fn tile(
    variant: Variant,
    w: &PackedMatrix,
    a: &QuantizedRows,
    row: usize,
    tile: usize,
    block: usize,
    out: Output,
) {
    let first = block * BLOCK;
    for r in row..row + tile {
        let (aq, scales, sums, halves) = (
            a.row_q(r),
            a.row_scales(r),
            a.row_sums(r),
            a.row_half_sums(r),
        );
        for j in first..(first + BLOCK).min(w.rows) {
            let mut total = 0.0f32;
            for g in 0..w.groups {
                let half_sum = |s: usize| -> i32 {
                    let mut isum = -w.offset * halves[2 * g + s];
                    for i in s * GROUP / 2..(s + 1) * GROUP / 2 {
                        isum += w.weight_int(j, g * GROUP + i) * aq[g * GROUP + i] as i32;
                    }
                    isum
                };
                if variant == Variant::SixHalves {
                    let t = half_sum(0) as f32 * w.scale(j, g, 0);
                    let t = (half_sum(1) as f32).mul_add(w.scale(j, g, 1), t);
                    total = t.mul_add(scales[g], total);
                } else {
                    let isum = half_sum(0) + half_sum(1);
                    total = (isum as f32).mul_add(w.scale(j, g, 0) * scales[g], total);
                }
                if variant == Variant::NibbleMins {
                    total = w.min(j, g).mul_add(sums[g], total);
                }
            }
            // SAFETY: the caller owns this block's columns of every row.
            unsafe { out.write(r, j, total) };
        }
    }
}
