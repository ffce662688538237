//! Batched products against `BlockedMatrix` weights: the encoder's matmuls, where a batch
//! of sentences puts hundreds of activation rows on each weight. The AVX-512 VNNI kernel
//! keeps a tile of 2 blocks × 6 rows of sums in registers, the AVX2 one 1 block × 4 rows;
//! the portable one computes the same integer sums and the same float steps in the same
//! order, so all give the same bits, and a row's result never depends on which rows share
//! the call.

mod portable;
#[cfg(target_arch = "x86_64")]
mod x86_avx2;
#[cfg(target_arch = "x86_64")]
mod x86_avx512;

use std::ops::Range;

use super::activations::QuantizedRows;
use super::blocked::BlockedMatrix;
use super::kernels::{Isa, Output};

/// Activation rows per register tile.
pub const TILE_ROWS: usize = 6;
/// Blocks of 16 outputs per register tile.
pub const TILE_BLOCKS: usize = 2;

/// Computes `out[r][j] = Σ_k a[r][k] · w[j][k]` for every activation row and every output
/// `j` in the blocks `blocks`.
///
/// # Safety
/// `out` must hold `a.rows × w.rows` floats that only this call writes in those blocks'
/// columns, `a` must be quantized with `w.groups` groups, and `isa` must be one of
/// `Isa::available()`.
pub unsafe fn matmul_blocks(
    isa: Isa,
    w: &BlockedMatrix,
    a: &QuantizedRows,
    blocks: Range<usize>,
    out: Output,
) {
    debug_assert_eq!(w.groups, a.groups);
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => unsafe { x86_avx512::matmul_blocks(w, a, blocks, out) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86_avx2::matmul_blocks(w, a, blocks, out) },
        _ => portable::matmul_blocks(w, a, blocks, out),
    }
}
