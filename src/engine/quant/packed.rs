//! Weights repacked once at load into the layout the kernels read: per output row, pairs
//! of 32-weight groups (nibbles of a pair in one 32-byte run, or 64 signed bytes), their
//! scales, minimums and the correction the unsigned-activation kernels need. Group counts
//! are padded to even with zero weights, so a kernel always reads whole pairs. Scales and
//! minimums are kept as f16, as GGUF stores them: exact for Q4_0, Q4_1 and Q8_0; for the
//! K-quants the scale times the sub-block's 6- or 8-bit factor is rounded to f16
//! (relative error at most 2⁻¹¹, far below the 8-bit activations'). Decode reads every
//! weight once per token, so these bytes are its speed.

use half::f16;

use super::formats::{Packing, Unpacked, GROUP};

pub struct PackedMatrix {
    pub packing: Packing,
    /// Output rows.
    pub rows: usize,
    /// Weights per row before padding.
    pub cols: usize,
    /// Groups per row after padding (even).
    pub groups: usize,
    /// Per row: `groups / 2` pairs of 32 bytes (nibble) or `groups · 32` bytes (byte).
    pub q: Vec<u8>,
    /// Per row: `groups · subs` scales.
    pub scales: Vec<f16>,
    /// Per row: `groups` minimums (nibble packing only; empty otherwise).
    pub mins: Vec<f16>,
    /// Per row and group (byte packing only; empty otherwise): `-128 · Σ scale · q`. A
    /// kernel that feeds activations as unsigned bytes (`a + 128`) against signed weights
    /// adds `correction · activation_scale` to undo the offset.
    pub corrections: Vec<f32>,
}

impl PackedMatrix {
    pub fn pack(u: &Unpacked) -> Self {
        let groups_raw = u.cols / GROUP;
        let groups = groups_raw.next_multiple_of(2);
        let subs = match u.packing {
            Packing::Nibble => 1,
            Packing::Byte { subs } => subs,
        };
        let row_bytes = match u.packing {
            Packing::Nibble => groups * GROUP / 2,
            Packing::Byte { .. } => groups * GROUP,
        };
        let mut packed = Self {
            packing: u.packing,
            rows: u.rows,
            cols: u.cols,
            groups,
            q: vec![0; u.rows * row_bytes],
            scales: vec![f16::ZERO; u.rows * groups * subs],
            mins: if u.packing == Packing::Nibble {
                vec![f16::ZERO; u.rows * groups]
            } else {
                Vec::new()
            },
            corrections: if u.packing == Packing::Nibble {
                Vec::new()
            } else {
                vec![0.0; u.rows * groups]
            },
        };
        for row in 0..u.rows {
            let q_row = &u.q[row * u.cols..(row + 1) * u.cols];
            let out = &mut packed.q[row * row_bytes..(row + 1) * row_bytes];
            match u.packing {
                Packing::Nibble => {
                    for (pair, out) in out.chunks_exact_mut(GROUP).enumerate() {
                        let group = |g: usize, i: usize| -> u8 {
                            if g < groups_raw {
                                q_row[g * GROUP + i] as u8
                            } else {
                                0
                            }
                        };
                        for (i, byte) in out.iter_mut().enumerate() {
                            *byte = group(2 * pair, i) | (group(2 * pair + 1, i) << 4);
                        }
                    }
                }
                Packing::Byte { .. } => {
                    for (dst, &src) in out.iter_mut().zip(q_row) {
                        *dst = src as u8;
                    }
                }
            }
            for g in 0..groups_raw {
                let src = row * groups_raw + g;
                let dst = row * groups + g;
                let q_group = &q_row[g * GROUP..(g + 1) * GROUP];
                let mut correction = 0.0f32;
                for s in 0..subs {
                    let scale = f16::from_f32(u.scales[src * subs + s]);
                    packed.scales[dst * subs + s] = scale;
                    let scale = scale.to_f32();
                    let width = GROUP / subs;
                    let sum: i32 = q_group[s * width..(s + 1) * width]
                        .iter()
                        .map(|&v| v as i32)
                        .sum();
                    correction += scale * sum as f32;
                }
                if u.packing == Packing::Nibble {
                    packed.mins[dst] = f16::from_f32(u.mins[src]);
                } else {
                    packed.corrections[dst] = -128.0 * correction;
                }
            }
        }
        packed
    }

    pub fn subs(&self) -> usize {
        match self.packing {
            Packing::Nibble => 1,
            Packing::Byte { subs } => subs,
        }
    }

    /// Bytes of `q` per output row.
    pub fn row_bytes(&self) -> usize {
        match self.packing {
            Packing::Nibble => self.groups * GROUP / 2,
            Packing::Byte { .. } => self.groups * GROUP,
        }
    }

    /// The weight at (`row`, `col`) as the kernels see it (for tests and the portable path).
    pub fn weight_int(&self, row: usize, col: usize) -> i32 {
        let (g, i) = (col / GROUP, col % GROUP);
        let base = row * self.row_bytes();
        match self.packing {
            Packing::Nibble => {
                let byte = self.q[base + (g / 2) * GROUP + i];
                if g % 2 == 0 {
                    (byte & 0x0F) as i32
                } else {
                    (byte >> 4) as i32
                }
            }
            Packing::Byte { .. } => self.q[base + col] as i8 as i32,
        }
    }

    /// Row `row` as floats (`cols` values).
    pub fn dequantize_row(&self, row: usize, out: &mut [f32]) {
        let subs = self.subs();
        for (col, value) in out.iter_mut().enumerate().take(self.cols) {
            let g = row * self.groups + col / GROUP;
            let scale = self.scales[g * subs + (col % GROUP) / (GROUP / subs)].to_f32();
            let min = self.mins.get(g).map_or(0.0, |m| m.to_f32());
            *value = scale * self.weight_int(row, col) as f32 + min;
        }
    }

    /// Memory held, in bytes.
    pub fn bytes(&self) -> usize {
        self.q.len() + 2 * (self.scales.len() + self.mins.len()) + 4 * self.corrections.len()
    }
}
