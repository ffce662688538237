//! The integer dot-product kernels and the one choice among them, made at run time from
//! what the CPU has: AVX-512 with VNNI, AVX2 with FMA, or portable Rust. Every kernel
//! computes the same exact integer sums per group and the same float steps on them in the
//! same order, so all give the same bits, and a row's result never depends on how many
//! rows share the call or how the blocks are split over threads.

mod portable;
#[cfg(target_arch = "x86_64")]
mod x86_avx2;
#[cfg(target_arch = "x86_64")]
mod x86_avx512;

use std::ops::Range;

use super::activations::QuantizedRows;
use super::formats::Packing;
use super::packed::PackedMatrix;

/// Activation rows a kernel processes against one block of weights at a time.
pub const ROW_TILE: usize = 4;
/// Rows the AVX-512 kernel takes at once where there are that many: 32 registers hold
/// eight rows' sums, so each block's weights are unpacked once for eight rows.
pub const WIDE_TILE: usize = 8;

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

/// What a kernel does with a group's integer sums, from the weights' format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// 4-bit weights, an integer offset (Q4_0).
    Nibble,
    /// 4-bit weights and a float minimum per group (Q4_1, Q4_K).
    NibbleMins,
    /// Byte weights, one scale per group (Q8_0).
    Byte,
    /// Six-bit weights, a scale per half group (Q6_K).
    SixHalves,
}

impl Variant {
    pub fn of(w: &PackedMatrix) -> Self {
        match (w.packing, w.mins.is_empty()) {
            (Packing::Nibble, true) => Self::Nibble,
            (Packing::Nibble, false) => Self::NibbleMins,
            (Packing::Byte, _) => Self::Byte,
            (Packing::Six, _) => Self::SixHalves,
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

/// The store mask of a block of 16 outputs whose first `valid` are real rows.
pub fn lane_mask(valid: usize) -> u16 {
    if valid >= 16 {
        u16::MAX
    } else {
        (1u16 << valid) - 1
    }
}

/// Computes `out[r][j] = Σ_k a[r][k] · w[j][k]` for every activation row and every output
/// `j` in the blocks `blocks`.
///
/// # Safety
/// `out` must hold `a.rows × w.rows` floats that only this call writes in those blocks'
/// columns, `a` must be quantized with `w.groups` groups, and `isa` must be one of
/// `Isa::available()`.
pub unsafe fn matmul_blocks(
    isa: Isa,
    w: &PackedMatrix,
    a: &QuantizedRows,
    blocks: Range<usize>,
    out: Output,
) {
    debug_assert_eq!(w.groups, a.groups);
    let variant = Variant::of(w);
    for block in blocks {
        let mut row = 0;
        while row < a.rows {
            let left = a.rows - row;
            let tile = if left >= WIDE_TILE && isa == Isa::Avx512Vnni {
                WIDE_TILE
            } else if left >= ROW_TILE {
                ROW_TILE
            } else {
                1
            };
            // SAFETY: forwarded from the caller; the tile lies inside `a`.
            unsafe {
                match isa {
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx512Vnni => x86_avx512::tile(variant, w, a, row, tile, block, out),
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx2 => x86_avx2::tile(variant, w, a, row, tile, block, out),
                    _ => portable::tile(variant, w, a, row, tile, block, out),
                }
            }
            row += tile;
        }
    }
}
