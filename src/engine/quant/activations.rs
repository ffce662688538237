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
        let job = |mine: std::ops::Range<usize>| {
            wide(|| {
                for row in mine {
                    // SAFETY: each chunk takes its own rows of every buffer.
                    unsafe {
                        quantize_row(
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

#[inline(always)]
fn quantize_row(
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
        let (scale, halves) = quantize_group(values, q, unsigned);
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
