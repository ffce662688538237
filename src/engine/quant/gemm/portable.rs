//! The reference batched kernel in plain Rust: per output, per group, the exact integer
//! sum of unsigned activation bytes times signed weights, less the group's offset, then
//! one fused multiply-add by the two scales, groups in order.

use crate::engine::quant::activations::QuantizedRows;
use crate::engine::quant::blocked::{BlockedMatrix, BLOCK, BLOCK_GROUP_BYTES};
use crate::engine::quant::formats::GROUP;
use crate::engine::quant::kernels::Output;
use std::ops::Range;

pub fn matmul_blocks(w: &BlockedMatrix, a: &QuantizedRows, blocks: Range<usize>, out: Output) {
    let groups = w.groups;
    for r in 0..a.rows {
        let x = a.row_unsigned(r);
        let x_scales = a.row_scales(r);
        for block in blocks.clone() {
            for lane in 0..BLOCK {
                let j = block * BLOCK + lane;
                if j >= w.rows {
                    break;
                }
                let mut total = 0.0f32;
                for g in 0..groups {
                    let base = (block * groups + g) * BLOCK_GROUP_BYTES;
                    let mut sum = 0i32;
                    for i in 0..GROUP {
                        let q = w.q[base + (i / 4) * BLOCK * 4 + lane * 4 + i % 4] as i32;
                        sum += x[g * GROUP + i] as i32 * q;
                    }
                    let at = (block * groups + g) * BLOCK + lane;
                    let scale = w.scales[at] * x_scales[g];
                    total = ((sum - w.offsets[at]) as f32).mul_add(scale, total);
                }
                // SAFETY: `r < a.rows`, `j < w.rows` and the caller owns these columns.
                unsafe { out.write(r, j, total) };
            }
        }
    }
}
