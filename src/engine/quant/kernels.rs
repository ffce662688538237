//! The integer dot-product kernels and the one choice among them, made at run time from
//! what the CPU has: AVX-512 with VNNI, AVX2 with FMA, or portable Rust. Every kernel
//! computes each output from its own activation row and weight row in a fixed order, so a
//! row's result is the same however many rows share the call and however they are split
//! over threads.

mod portable;
#[cfg(target_arch = "x86_64")]
mod x86_avx2;
#[cfg(target_arch = "x86_64")]
mod x86_avx512;

use std::ops::Range;

use super::activations::QuantizedRows;
use super::packed::PackedMatrix;

/// Activation rows a kernel processes against one weight row at a time.
pub const ROW_TILE: usize = 4;
/// Weight rows visited per pass over a tile of activation rows (keeps them in L1/L2).
pub const COLUMN_CHUNK: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    Avx512Vnni,
    Avx2,
    Portable,
}

impl Isa {
    /// The fastest kernel this CPU runs.
    pub fn detect() -> Self {
        Self::available()[0]
    }

    /// Every kernel this CPU runs, fastest first (the portable one always).
    pub fn available() -> Vec<Self> {
        let mut isas = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512vnni")
                && is_x86_feature_detected!("f16c")
            {
                isas.push(Self::Avx512Vnni);
            }
            if is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
            {
                isas.push(Self::Avx2);
            }
        }
        isas.push(Self::Portable);
        isas
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Avx512Vnni => "avx512-vnni",
            Self::Avx2 => "avx2",
            Self::Portable => "portable",
        }
    }
}

/// Where a kernel writes: `rows × stride` floats, of which each call owns some columns.
#[derive(Clone, Copy)]
pub struct Output {
    pub ptr: *mut f32,
    pub stride: usize,
}

// SAFETY: callers hand each thread a disjoint set of columns of one live buffer.
unsafe impl Send for Output {}
unsafe impl Sync for Output {}

impl Output {
    /// # Safety
    /// `row < rows` and `col < stride` of the buffer, and no other thread writes it.
    #[inline(always)]
    pub unsafe fn write(self, row: usize, col: usize, value: f32) {
        unsafe { *self.ptr.add(row * self.stride + col) = value };
    }
}

/// Computes `out[r][j] = Σ_k a[r][k] · w[j][k]` for every activation row and `j` in `cols`.
///
/// # Safety
/// `out` must hold `a.rows × w.rows` floats that only this call writes in `cols`, and
/// `isa` must be one of `Isa::available()`.
pub unsafe fn matmul_columns(
    isa: Isa,
    w: &PackedMatrix,
    a: &QuantizedRows,
    cols: Range<usize>,
    out: Output,
) {
    debug_assert_eq!(w.groups, a.groups);
    for chunk_start in cols.clone().step_by(COLUMN_CHUNK) {
        let chunk = chunk_start..(chunk_start + COLUMN_CHUNK).min(cols.end);
        let mut row = 0;
        while row < a.rows {
            let tile = (a.rows - row).min(ROW_TILE);
            // SAFETY: forwarded from the caller.
            unsafe { tile_dispatch(isa, w, a, row, tile, chunk.clone(), out) };
            row += tile;
        }
    }
}

/// Rows `row..row + tile` (at most `ROW_TILE`) against weight rows `cols`.
#[inline(always)]
unsafe fn tile_dispatch(
    isa: Isa,
    w: &PackedMatrix,
    a: &QuantizedRows,
    row: usize,
    tile: usize,
    cols: Range<usize>,
    out: Output,
) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => unsafe { x86_avx512::tile(w, a, row, tile, cols, out) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86_avx2::tile(w, a, row, tile, cols, out) },
        _ => {
            for j in cols {
                portable::tile(w, a, row, tile, j, out);
            }
        }
    }
}
