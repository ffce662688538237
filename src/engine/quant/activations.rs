//! Activation rows quantized for the integer dot products: per 32-value group a signed
//! byte each, the group's scale and the scale times the sum of its bytes (what a weight
//! minimum multiplies). Each row is quantized on its own, so a row's bytes never depend
//! on which other rows share the batch.

use super::formats::GROUP;

#[derive(Default)]
pub struct QuantizedRows {
    pub rows: usize,
    /// Groups per row, padded to even (zeros).
    pub groups: usize,
    /// `rows · groups · 32` bytes.
    pub q: Vec<i8>,
    /// The same bytes plus 128, as unsigned bytes: what `vpdpbusd` takes.
    pub unsigned: Vec<u8>,
    /// `rows · groups` scales.
    pub scales: Vec<f32>,
    /// `rows · groups`: scale · Σ q.
    pub sums: Vec<f32>,
    /// Per row and pair of groups, the two scales spread over 16 lanes (8 each): what the
    /// 512-bit kernel multiplies a pair's lane sums by.
    pub pair_scales: Vec<f32>,
}

impl QuantizedRows {
    /// Quantizes `rows` rows of `cols` values (`x.len() == rows · cols`), reusing buffers.
    pub fn quantize(&mut self, x: &[f32], rows: usize, cols: usize, groups: usize) {
        debug_assert_eq!(x.len(), rows * cols);
        self.rows = rows;
        self.groups = groups;
        self.q.clear();
        self.q.resize(rows * groups * GROUP, 0);
        self.unsigned.clear();
        self.unsigned.resize(rows * groups * GROUP, 128);
        self.scales.clear();
        self.scales.resize(rows * groups, 0.0);
        self.sums.clear();
        self.sums.resize(rows * groups, 0.0);
        self.pair_scales.clear();
        self.pair_scales.resize(rows * groups * 8, 0.0);
        for row in 0..rows {
            let values = &x[row * cols..(row + 1) * cols];
            for (g, chunk) in values.chunks(GROUP).enumerate() {
                let at = row * groups + g;
                let out = &mut self.q[at * GROUP..(at + 1) * GROUP];
                let (scale, sum) = quantize_group(chunk, out);
                for (u, &q) in self.unsigned[at * GROUP..(at + 1) * GROUP]
                    .iter_mut()
                    .zip(out.iter())
                {
                    *u = (q as u8) ^ 0x80;
                }
                self.scales[at] = scale;
                self.sums[at] = scale * sum as f32;
                let lanes = &mut self.pair_scales[row * groups * 8 + g * 8..][..8];
                lanes.fill(scale);
            }
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

    pub fn row_pair_scales(&self, row: usize) -> &[f32] {
        &self.pair_scales[row * self.groups * 8..(row + 1) * self.groups * 8]
    }
}

/// Symmetric 8-bit quantization of up to 32 values; returns (scale, Σ q).
fn quantize_group(values: &[f32], out: &mut [i8]) -> (f32, i32) {
    let max = values.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    if max == 0.0 || !max.is_finite() {
        out.fill(0);
        return (0.0, 0);
    }
    let scale = max / 127.0;
    let inverse = 1.0 / scale;
    let mut sum = 0i32;
    for (o, &v) in out.iter_mut().zip(values) {
        let q = (v * inverse).round().clamp(-127.0, 127.0) as i8;
        *o = q;
        sum += q as i32;
    }
    (scale, sum)
}
