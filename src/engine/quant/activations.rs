//! Activation rows quantized for the integer dot products: per 32-value group a signed
//! byte each, the group's scale, the scale times the sum of its bytes (what a weight
//! minimum multiplies) and the integer sums of its two halves (what a weight offset
//! multiplies). Each row is quantized on its own, so a row's bytes never depend
//! on which other rows share the batch.

use super::formats::GROUP;
use super::pool::{SharedRows, ThreadPool};
use crate::engine::fast_math::wide;

#[derive(Default)]
pub struct QuantizedRows {
    pub rows: usize,
    /// Groups per row (the weights' count; groups past the values are zeros).
    pub groups: usize,
    /// `rows · groups · 32` bytes.
    pub q: Vec<i8>,
    /// The same bytes plus 128, as unsigned bytes: what `vpdpbusd` takes against signed
    /// weights (the blocked GEMM). Filled only when asked for.
    pub unsigned: Vec<u8>,
    /// `rows · groups` scales.
    pub scales: Vec<f32>,
    /// `rows · groups`: scale · Σ q.
    pub sums: Vec<f32>,
    /// `rows · groups · 2`: Σ q over each half (16 values) of a group.
    pub half_sums: Vec<i32>,
}

impl QuantizedRows {
    /// Quantizes `rows` rows of `cols` values (`x.len() == rows · cols`), reusing buffers,
    /// and fills `unsigned` too if `unsigned`; rows are shared among the pool's threads
    /// when there are many.
    pub fn quantize_with(
        &mut self,
        pool: Option<&ThreadPool>,
        x: &[f32],
        rows: usize,
        cols: usize,
        groups: usize,
        unsigned: bool,
    ) {
        debug_assert_eq!(x.len(), rows * cols);
        self.rows = rows;
        self.groups = groups;
        // Every byte is rewritten below (padding groups too), so old contents may stay.
        self.q.resize(rows * groups * GROUP, 0);
        self.unsigned
            .resize(if unsigned { rows * groups * GROUP } else { 0 }, 128);
        self.scales.resize(rows * groups, 0.0);
        self.sums.resize(rows * groups, 0.0);
        self.half_sums.resize(rows * groups * 2, 0);
        let width = groups * GROUP;
        let q = SharedRows::new(&mut self.q);
        let offset = SharedRows::new(&mut self.unsigned);
        let scales = SharedRows::new(&mut self.scales);
        let sums = SharedRows::new(&mut self.sums);
        let half_sums = SharedRows::new(&mut self.half_sums);
        let simd = GroupQuantizer::detect();
        let job = |mine: std::ops::Range<usize>| {
            wide(|| {
                for row in mine {
                    // SAFETY: each chunk takes its own rows of every buffer.
                    unsafe {
                        quantize_row(
                            simd,
                            &x[row * cols..(row + 1) * cols],
                            q.slice(row * width, width),
                            unsigned.then(|| offset.slice(row * width, width)),
                            scales.slice(row * groups, groups),
                            sums.slice(row * groups, groups),
                            half_sums.slice(row * groups * 2, groups * 2),
                        )
                    };
                }
            })
        };
        match pool {
            Some(pool) if rows >= 2 * pool.threads() && rows * cols >= PARALLEL_MIN_VALUES => {
                if pool.run_units(rows, pool.chunk(rows, 4), &job).is_err() {
                    // A panicking chunk left rows unwritten: redo them all here.
                    job(0..rows);
                }
            }
            _ => job(0..rows),
        }
    }

    pub fn row_q(&self, row: usize) -> &[i8] {
        &self.q[row * self.groups * GROUP..(row + 1) * self.groups * GROUP]
    }

    pub fn row_unsigned(&self, row: usize) -> &[u8] {
        &self.unsigned[row * self.groups * GROUP..(row + 1) * self.groups * GROUP]
    }

    pub fn row_scales(&self, row: usize) -> &[f32] {
        &self.scales[row * self.groups..(row + 1) * self.groups]
    }

    pub fn row_sums(&self, row: usize) -> &[f32] {
        &self.sums[row * self.groups..(row + 1) * self.groups]
    }

    pub fn row_half_sums(&self, row: usize) -> &[i32] {
        &self.half_sums[row * self.groups * 2..(row + 1) * self.groups * 2]
    }
}

/// Values under which quantizing stays on the calling thread.
const PARALLEL_MIN_VALUES: usize = 16 * 1024;

/// How a group is quantized: with AVX-512's conversions where the CPU has them (the
/// portable loops' narrowing to bytes compiles to one store per byte), else portably.
/// Both give the same bytes, scales and sums.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum GroupQuantizer {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl GroupQuantizer {
    fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
        {
            return Self::Avx512;
        }
        Self::Portable
    }
}

#[inline(always)]
fn quantize_row(
    quantizer: GroupQuantizer,
    values: &[f32],
    q: &mut [i8],
    mut unsigned: Option<&mut [u8]>,
    scales: &mut [f32],
    sums: &mut [f32],
    half_sums: &mut [i32],
) {
    // Groups past the values (padding) quantize an empty slice: zeros.
    let groups = q
        .chunks_exact_mut(GROUP)
        .zip(values.chunks(GROUP).chain(std::iter::repeat(&[][..])));
    for (g, (q, values)) in groups.enumerate() {
        let unsigned = unsigned
            .as_deref_mut()
            .map(|u| &mut u[g * GROUP..(g + 1) * GROUP]);
        let (scale, halves) = match quantizer {
            GroupQuantizer::Portable => quantize_group(values, q, unsigned),
            // SAFETY: `detect` found AVX-512 F and BW.
            #[cfg(target_arch = "x86_64")]
            GroupQuantizer::Avx512 => unsafe { quantize_group_avx512(values, q, unsigned) },
        };
        scales[g] = scale;
        sums[g] = scale * (halves[0] + halves[1]) as f32;
        half_sums[2 * g..2 * g + 2].copy_from_slice(&halves);
    }
}

/// Symmetric 8-bit quantization of up to 32 values into 32 bytes (zero-padded), signed
/// and, if asked, offset by 128; returns the scale and Σ q over each half. Written as fixed-width
/// loops so each compiles to a few vector instructions.
#[inline(always)]
fn quantize_group(values: &[f32], q: &mut [i8], unsigned: Option<&mut [u8]>) -> (f32, [i32; 2]) {
    let q = &mut q[..GROUP];
    let mut padded = [0.0f32; GROUP];
    let values: &[f32; GROUP] = match values.try_into() {
        Ok(whole) => whole,
        Err(_) => {
            padded[..values.len()].copy_from_slice(values);
            &padded
        }
    };
    let mut lanes = [0.0f32; 16];
    for chunk in values.chunks_exact(16) {
        for i in 0..16 {
            lanes[i] = lanes[i].max(chunk[i].abs());
        }
    }
    let max = lanes.iter().fold(0.0f32, |m, &v| m.max(v));
    if max == 0.0 || !max.is_finite() {
        q.fill(0);
        if let Some(unsigned) = unsigned {
            unsigned.fill(128);
        }
        return (0.0, [0, 0]);
    }
    let scale = max / 127.0;
    let inverse = 1.0 / scale;
    // Saturating casts do not vectorize; an unchecked one does, on a value made finite
    // and in range first (`max`/`min` return the non-NaN operand).
    let mut ints = [0i32; GROUP];
    for (i, &v) in ints.iter_mut().zip(values) {
        let r = (v * inverse).round_ties_even().max(-127.0).min(127.0);
        // SAFETY: `r` is finite and within ±127.
        *i = unsafe { r.to_int_unchecked::<i32>() };
    }
    for (q, &i) in q.iter_mut().zip(&ints) {
        *q = i as i8;
    }
    if let Some(unsigned) = unsigned {
        for (u, &i) in unsigned.iter_mut().zip(&ints) {
            *u = (i + 128) as u8;
        }
    }
    let half = |part: &[i32]| part.iter().sum::<i32>();
    (scale, [half(&ints[..GROUP / 2]), half(&ints[GROUP / 2..])])
}

/// `quantize_group` with AVX-512: the same maximum (NaN ignored, as `f32::max` does), the
/// same scale and reciprocal, the same rounding (to nearest, ties to even) and clamp
/// (NaN to −127, as `max` then `min` give), and exact integer sums.
///
/// # Safety
/// AVX-512 F and BW must be available.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn quantize_group_avx512(
    values: &[f32],
    q: &mut [i8],
    unsigned: Option<&mut [u8]>,
) -> (f32, [i32; 2]) {
    use std::arch::x86_64::*;
    let q = &mut q[..GROUP];
    let n = values.len().min(GROUP);
    let (low_n, high_n) = (n.min(16), n.saturating_sub(16));
    let mask = |k: usize| if k >= 16 { u16::MAX } else { (1u16 << k) - 1 };
    unsafe {
        // Masked loads read only the values there are; the rest are zeros.
        let lo = _mm512_maskz_loadu_ps(mask(low_n), values.as_ptr());
        let hi = _mm512_maskz_loadu_ps(mask(high_n), values.as_ptr().add(low_n));
        // `max_ps` returns its second operand when the first is NaN: the lanes stay.
        let lanes = _mm512_max_ps(_mm512_abs_ps(lo), _mm512_setzero_ps());
        let lanes = _mm512_max_ps(_mm512_abs_ps(hi), lanes);
        let max = _mm512_reduce_max_ps(lanes);
        if max == 0.0 || !max.is_finite() {
            q.fill(0);
            if let Some(unsigned) = unsigned {
                unsigned[..GROUP].fill(128);
            }
            return (0.0, [0, 0]);
        }
        let scale = max / 127.0;
        let inverse = _mm512_set1_ps(1.0 / scale);
        let (floor, ceiling) = (_mm512_set1_ps(-127.0), _mm512_set1_ps(127.0));
        let ints = |v: __m512| {
            let r = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                _mm512_mul_ps(v, inverse),
            );
            // A NaN becomes −127 here, as `.max(-127.0).min(127.0)` makes it.
            _mm512_cvttps_epi32(_mm512_min_ps(_mm512_max_ps(r, floor), ceiling))
        };
        let (lo, hi) = (ints(lo), ints(hi));
        let bytes = q.as_mut_ptr();
        _mm_storeu_si128(bytes.cast(), _mm512_cvtepi32_epi8(lo));
        _mm_storeu_si128(bytes.add(16).cast(), _mm512_cvtepi32_epi8(hi));
        if let Some(unsigned) = unsigned {
            let offset = _mm512_set1_epi32(128);
            let out = unsigned[..GROUP].as_mut_ptr();
            _mm_storeu_si128(
                out.cast(),
                _mm512_cvtepi32_epi8(_mm512_add_epi32(lo, offset)),
            );
            _mm_storeu_si128(
                out.add(16).cast(),
                _mm512_cvtepi32_epi8(_mm512_add_epi32(hi, offset)),
            );
        }
        (
            scale,
            [_mm512_reduce_add_epi32(lo), _mm512_reduce_add_epi32(hi)],
        )
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    /// Every quantizer this CPU runs gives the portable one's bytes, scales and sums: on
    /// random groups, short (padded) ones, exact ties, zeros, NaNs and infinities.
    #[test]
    fn every_group_quantizer_gives_the_portable_bytes() {
        let mut rng = StdRng::seed_from_u64(11);
        let mut groups: Vec<Vec<f32>> = (0..200)
            .map(|i| {
                let n = if i % 5 == 0 {
                    rng.random_range(1..GROUP)
                } else {
                    GROUP
                };
                let spread = 10f32.powi(rng.random_range(-4..4));
                (0..n).map(|_| rng.random_range(-spread..spread)).collect()
            })
            .collect();
        // 127 / 254 · k lands on exact halves: ties go to even.
        groups.push((0..GROUP).map(|k| k as f32 * 0.5 - 8.0).collect());
        groups.push(vec![0.0; GROUP]);
        groups.push(vec![-0.0; 7]);
        let mut with_nan: Vec<f32> = (0..GROUP).map(|k| k as f32).collect();
        with_nan[3] = f32::NAN;
        with_nan[20] = -f32::NAN;
        groups.push(with_nan);
        let mut with_inf = vec![1.0f32; GROUP];
        with_inf[9] = f32::NEG_INFINITY;
        groups.push(with_inf);
        let quantizers = [GroupQuantizer::Portable, GroupQuantizer::detect()];
        for values in &groups {
            let results: Vec<_> = quantizers
                .iter()
                .map(|&quantizer| {
                    let (mut q, mut u) = (vec![5i8; GROUP], vec![5u8; GROUP]);
                    let (scale, halves) = match quantizer {
                        GroupQuantizer::Portable => quantize_group(values, &mut q, Some(&mut u)),
                        // SAFETY: `detect` chose it.
                        #[cfg(target_arch = "x86_64")]
                        GroupQuantizer::Avx512 => unsafe {
                            quantize_group_avx512(values, &mut q, Some(&mut u))
                        },
                    };
                    (q, u, scale.to_bits(), halves)
                })
                .collect();
            assert_eq!(results[0], results[1], "{quantizers:?} on {values:?}");
        }
    }
}
