//! AVX-512 VNNI kernel: a pair of 32-weight groups per 512-bit register and one `vpdpbusd`
//! per pair and activation row. Nibble weights (0..=15) are the unsigned operand against
//! signed activations, exactly; signed byte weights meet activations as unsigned bytes
//! (a + 128), and the offset is undone per group with the packed `corrections`.

use std::arch::x86_64::*;
use std::ops::Range;

use super::{Output, ROW_TILE};
use crate::engine::quant::activations::QuantizedRows;
use crate::engine::quant::formats::{Packing, GROUP};
use crate::engine::quant::packed::PackedMatrix;

/// # Safety
/// AVX-512 F/BW and VNNI must be available; see `matmul_columns` for `out`.
pub unsafe fn tile(
    w: &PackedMatrix,
    a: &QuantizedRows,
    row: usize,
    tile: usize,
    cols: Range<usize>,
    out: Output,
) {
    unsafe {
        match (w.packing, tile) {
            (Packing::Nibble, 4) => run::<4, true, 1>(w, a, row, cols, out),
            (Packing::Nibble, _) => single::<true, 1>(w, a, row, tile, cols, out),
            (Packing::Byte { subs: 1 }, 4) => run::<4, false, 1>(w, a, row, cols, out),
            (Packing::Byte { subs: 1 }, _) => single::<false, 1>(w, a, row, tile, cols, out),
            (Packing::Byte { .. }, 4) => run::<4, false, 2>(w, a, row, cols, out),
            (Packing::Byte { .. }, _) => single::<false, 2>(w, a, row, tile, cols, out),
        }
    }
}

const _: () = assert!(ROW_TILE == 4);

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c")]
unsafe fn single<const NIBBLE: bool, const SUBS: usize>(
    w: &PackedMatrix,
    a: &QuantizedRows,
    row: usize,
    tile: usize,
    cols: Range<usize>,
    out: Output,
) {
    for r in row..row + tile {
        unsafe { run::<1, NIBBLE, SUBS>(w, a, r, cols.clone(), out) };
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c")]
unsafe fn run<const R: usize, const NIBBLE: bool, const SUBS: usize>(
    w: &PackedMatrix,
    a: &QuantizedRows,
    row: usize,
    cols: Range<usize>,
    out: Output,
) {
    unsafe {
        let groups = w.groups;
        let pairs = groups / 2;
        let row_bytes = w.row_bytes();
        let low = _mm256_set1_epi8(0x0F);
        // Lane → scale index: two scales over 8 lanes each, or four over 4 lanes each.
        let spread = if SUBS == 1 {
            _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0)
        } else {
            _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0)
        };
        let mut activations = [std::ptr::null::<u8>(); R];
        let mut pair_scales = [std::ptr::null::<f32>(); R];
        // Per row: what the tail multiplies (group sums for minimums, scales for
        // corrections).
        let mut tail_scales = [std::ptr::null::<f32>(); R];
        for r in 0..R {
            activations[r] = if NIBBLE {
                a.row_q(row + r).as_ptr() as *const u8
            } else {
                a.row_unsigned(row + r).as_ptr()
            };
            pair_scales[r] = a.row_pair_scales(row + r).as_ptr();
            tail_scales[r] = if NIBBLE {
                a.row_sums(row + r).as_ptr()
            } else {
                a.row_scales(row + r).as_ptr()
            };
        }
        let (mins, corrections) = (w.mins.as_ptr(), w.corrections.as_ptr());
        for j in cols {
            let wq = w.q.as_ptr().add(j * row_bytes);
            let ws = w.scales.as_ptr().add(j * groups * SUBS);
            let mut acc = [_mm512_setzero_ps(); R];
            for p in 0..pairs {
                let weights = if NIBBLE {
                    let x = _mm256_loadu_si256(wq.add(p * GROUP) as *const __m256i);
                    let lo = _mm256_and_si256(x, low);
                    let hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), low);
                    _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1)
                } else {
                    _mm512_loadu_si512(wq.add(p * 2 * GROUP) as *const __m512i)
                };
                let halves = if SUBS == 1 {
                    _mm_cvtsi32_si128((ws.add(2 * p) as *const i32).read_unaligned())
                } else {
                    _mm_cvtsi64_si128((ws.add(4 * p) as *const i64).read_unaligned())
                };
                let scales =
                    _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(_mm_cvtph_ps(halves)));
                for r in 0..R {
                    let x = _mm512_loadu_si512(activations[r].add(p * 2 * GROUP) as *const __m512i);
                    let dot = if NIBBLE {
                        _mm512_dpbusd_epi32(_mm512_setzero_si512(), weights, x)
                    } else {
                        _mm512_dpbusd_epi32(_mm512_setzero_si512(), x, weights)
                    };
                    let s = _mm512_mul_ps(scales, _mm512_loadu_ps(pair_scales[r].add(p * 16)));
                    acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), s, acc[r]);
                }
            }
            for r in 0..R {
                let mut extra = _mm512_setzero_ps();
                let mut g = 0;
                while g < groups {
                    let mask: __mmask16 = if groups - g >= 16 {
                        0xFFFF
                    } else {
                        (1u16 << (groups - g)) - 1
                    };
                    let tail = if NIBBLE {
                        let halves =
                            _mm256_maskz_loadu_epi16(mask, mins.add(j * groups + g) as *const i16);
                        _mm512_cvtph_ps(halves)
                    } else {
                        _mm512_maskz_loadu_ps(mask, corrections.add(j * groups + g))
                    };
                    extra = _mm512_fmadd_ps(
                        tail,
                        _mm512_maskz_loadu_ps(mask, tail_scales[r].add(g)),
                        extra,
                    );
                    g += 16;
                }
                let total = _mm512_reduce_add_ps(_mm512_add_ps(acc[r], extra));
                out.write(row + r, j, total);
            }
        }
    }
}
