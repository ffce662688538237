//! Float weights quantized once at load to signed bytes with a scale per 32-weight group
//! (GGML Q8_0's precision), laid out for batched products: output rows in blocks of 16,
//! and within a block and group the bytes of 4 consecutive inputs for each of the 16 rows
//! side by side, so one 512-bit `vpdpbusd` advances 16 outputs by 4 inputs. Used where
//! many rows share a weight (an encoder embedding a batch of sentences), not for decode.

use super::formats::GROUP;

/// Output rows per block: one 512-bit register of 32-bit sums.
pub const BLOCK: usize = 16;
/// Bytes of one block's group: 32 inputs × 16 rows.
pub const BLOCK_GROUP_BYTES: usize = GROUP * BLOCK;

pub struct BlockedMatrix {
    /// Output rows.
    pub rows: usize,
    /// Inputs per row.
    pub cols: usize,
    /// Groups per row: `cols / 32`, rounded up (the tail zero-padded).
    pub groups: usize,
    /// Blocks of 16 output rows (the last one zero-padded).
    pub blocks: usize,
    /// `blocks × groups × 512` bytes: `[block][group][input / 4][row % 16][input % 4]`.
    pub q: Vec<i8>,
    /// `blocks × groups × 16` scales.
    pub scales: Vec<f32>,
    /// `blocks × groups × 16`: `128 · Σ q` over the group, what feeding activations as
    /// unsigned bytes (`a + 128`) adds to a row's integer sum.
    pub offsets: Vec<i32>,
}

impl BlockedMatrix {
    /// Quantizes `values` (`rows × cols`, row-major) group by group.
    pub fn quantize(values: &[f32], rows: usize, cols: usize) -> Self {
        debug_assert_eq!(values.len(), rows * cols);
        let groups = cols.div_ceil(GROUP);
        let blocks = rows.div_ceil(BLOCK);
        let mut m = Self {
            rows,
            cols,
            groups,
            blocks,
            q: vec![0; blocks * groups * BLOCK_GROUP_BYTES],
            scales: vec![0.0; blocks * groups * BLOCK],
            offsets: vec![0; blocks * groups * BLOCK],
        };
        let mut group_q = [0i8; GROUP];
        for row in 0..rows {
            let (block, lane) = (row / BLOCK, row % BLOCK);
            for g in 0..groups {
                let start = g * GROUP;
                let chunk = &values[row * cols + start..row * cols + (start + GROUP).min(cols)];
                let scale = quantize_group(chunk, &mut group_q);
                let at = (block * groups + g) * BLOCK + lane;
                m.scales[at] = scale;
                m.offsets[at] = 128 * group_q.iter().map(|&q| q as i32).sum::<i32>();
                let base = (block * groups + g) * BLOCK_GROUP_BYTES;
                for (i, &q) in group_q.iter().enumerate() {
                    m.q[base + (i / 4) * BLOCK * 4 + lane * 4 + i % 4] = q;
                }
            }
        }
        m
    }

    /// The integer weight at (`row`, `col`) as the kernels see it.
    pub fn weight_int(&self, row: usize, col: usize) -> i32 {
        let (block, lane, g, i) = (row / BLOCK, row % BLOCK, col / GROUP, col % GROUP);
        let base = (block * self.groups + g) * BLOCK_GROUP_BYTES;
        self.q[base + (i / 4) * BLOCK * 4 + lane * 4 + i % 4] as i32
    }

    /// The scale of (`row`, group `g`).
    pub fn scale(&self, row: usize, g: usize) -> f32 {
        self.scales[((row / BLOCK) * self.groups + g) * BLOCK + row % BLOCK]
    }

    /// Row `row` as floats (`cols` values).
    pub fn dequantize_row(&self, row: usize, out: &mut [f32]) {
        for (col, value) in out.iter_mut().enumerate().take(self.cols) {
            *value = self.scale(row, col / GROUP) * self.weight_int(row, col) as f32;
        }
    }

    /// Memory held, in bytes.
    pub fn bytes(&self) -> usize {
        self.q.len() + 4 * (self.scales.len() + self.offsets.len())
    }
}

/// Symmetric 8-bit quantization of up to 32 values into `out` (zero-padded); the scale.
fn quantize_group(values: &[f32], out: &mut [i8; GROUP]) -> f32 {
    out.fill(0);
    let max = values.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    if max == 0.0 || !max.is_finite() {
        return 0.0;
    }
    let scale = max / 127.0;
    for (o, &v) in out.iter_mut().zip(values) {
        *o = (v / scale).round().clamp(-127.0, 127.0) as i8;
    }
    scale
}
