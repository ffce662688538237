//! The portable kernel: exact integer sums per group, then one float accumulation per
//! group. The reference every SIMD kernel is tested against.

use super::Output;
use crate::engine::quant::activations::QuantizedRows;
use crate::engine::quant::formats::{Packing, GROUP};
use crate::engine::quant::packed::PackedMatrix;

pub fn tile(w: &PackedMatrix, a: &QuantizedRows, row: usize, tile: usize, j: usize, out: Output) {
    let subs = w.subs();
    let width = GROUP / subs;
    for r in row..row + tile {
        let (aq, ascales, asums) = (a.row_q(r), a.row_scales(r), a.row_sums(r));
        let mut total = 0.0f32;
        for g in 0..w.groups {
            let mut group = 0.0f32;
            for s in 0..subs {
                let mut isum = 0i32;
                for i in s * width..(s + 1) * width {
                    isum += w.weight_int(j, g * GROUP + i) * aq[g * GROUP + i] as i32;
                }
                group += w.scales[(j * w.groups + g) * subs + s].to_f32() * isum as f32;
            }
            total += group * ascales[g];
            if w.packing == Packing::Nibble {
                total += w.mins[j * w.groups + g].to_f32() * asums[g];
            }
        }
        // SAFETY: the caller owns column `j` of every row (see `matmul_columns`).
        unsafe { out.write(r, j, total) };
    }
}
