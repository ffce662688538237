//! Weights repacked once at load into the layout the kernels read: output rows in blocks
//! of 16 and, within a block and 32-weight group, 4 consecutive weights of each of the 16
//! rows side by side, so one 512-bit `vpdpbusd` (or two 256-bit steps) advances 16
//! outputs by 4 inputs and the sums of 16 outputs stay apart in one register. Weights stay
//! unsigned (`q`, the format's offset subtracted in the integer sums), as 4-bit pairs in
//! one byte or as bytes; scales and minimums as f16, as GGUF stores them: exact for Q4_0,
//! Q4_1 and Q8_0; for the K-quants the scale times the sub-block's 6- or 8-bit factor is
//! rounded to f16 (relative error at most 2⁻¹¹, far below the 8-bit activations'). Decode
//! reads every weight once per token, so these bytes are its speed.

use half::f16;

use super::formats::{Packing, Unpacked, GROUP};

/// Output rows per block: one 512-bit register of 32-bit sums.
pub const BLOCK: usize = 16;
/// Steps of 4 inputs per group.
pub const STEPS: usize = GROUP / 4;

pub struct PackedMatrix {
    pub packing: Packing,
    /// Output rows.
    pub rows: usize,
    /// Weights per row.
    pub cols: usize,
    /// Groups per row (`cols / 32`).
    pub groups: usize,
    /// Blocks of 16 output rows (the last one zero-padded).
    pub blocks: usize,
    /// Subtracted from every weight in the integer sums.
    pub offset: i32,
    /// Per block and group, `group_bytes()` bytes. Bytes: `[step 8][row 16][4 inputs]`.
    /// Nibbles: `[chunk 4][row 16][4]`, the byte holding input `8·chunk + i` in its low
    /// nibble and input `8·chunk + 4 + i` in its high one, so step `2·chunk` is the low
    /// nibbles of a chunk and step `2·chunk + 1` its high ones.
    pub q: Vec<u8>,
    /// Per block and group: `subs × 16` scales (sub-block major).
    pub scales: Vec<f16>,
    /// Per block and group: 16 minimums; empty for formats without.
    pub mins: Vec<f16>,
}

impl PackedMatrix {
    pub fn pack(u: &Unpacked) -> Self {
        let groups = u.cols / GROUP;
        let blocks = u.rows.div_ceil(BLOCK);
        let subs = u.subs();
        let mut packed = Self {
            packing: u.packing,
            rows: u.rows,
            cols: u.cols,
            groups,
            blocks,
            offset: u.offset,
            q: Vec::new(),
            scales: vec![f16::ZERO; blocks * groups * subs * BLOCK],
            mins: if u.mins.is_empty() {
                Vec::new()
            } else {
                vec![f16::ZERO; blocks * groups * BLOCK]
            },
        };
        // Padding rows hold the offset: their weights are zero.
        let pad = match u.packing {
            Packing::Nibble => (u.offset as u8) | ((u.offset as u8) << 4),
            Packing::Byte { .. } => u.offset as u8,
        };
        packed.q = vec![pad; blocks * groups * packed.group_bytes()];
        for row in 0..u.rows {
            let (block, lane) = (row / BLOCK, row % BLOCK);
            for g in 0..groups {
                let at = block * groups + g;
                let src = &u.q[row * u.cols + g * GROUP..][..GROUP];
                for i in 0..GROUP {
                    let (index, high) = packed.position(at, lane, i);
                    let byte = &mut packed.q[index];
                    *byte = match (u.packing, high) {
                        (Packing::Byte { .. }, _) => src[i],
                        (Packing::Nibble, false) => (*byte & 0xF0) | src[i],
                        (Packing::Nibble, true) => (*byte & 0x0F) | (src[i] << 4),
                    };
                }
                let group = row * groups + g;
                for s in 0..subs {
                    packed.scales[(at * subs + s) * BLOCK + lane] =
                        f16::from_f32(u.scales[group * subs + s]);
                }
                if !u.mins.is_empty() {
                    packed.mins[at * BLOCK + lane] = f16::from_f32(u.mins[group]);
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

    /// Bytes of `q` per block and group.
    pub fn group_bytes(&self) -> usize {
        match self.packing {
            Packing::Nibble => GROUP * BLOCK / 2,
            Packing::Byte { .. } => GROUP * BLOCK,
        }
    }

    /// Where input `i` of a group's row `lane` lies in `q`: (byte index, high nibble).
    fn position(&self, block_group: usize, lane: usize, i: usize) -> (usize, bool) {
        let base = block_group * self.group_bytes();
        match self.packing {
            Packing::Byte { .. } => (base + (i / 4) * BLOCK * 4 + lane * 4 + i % 4, false),
            Packing::Nibble => (base + (i / 8) * BLOCK * 4 + lane * 4 + i % 4, i % 8 >= 4),
        }
    }

    /// The weight at (`row`, `col`) as stored, before the offset.
    pub fn weight_int(&self, row: usize, col: usize) -> i32 {
        let at = (row / BLOCK) * self.groups + col / GROUP;
        let (index, high) = self.position(at, row % BLOCK, col % GROUP);
        let byte = self.q[index];
        match (self.packing, high) {
            (Packing::Byte { .. }, _) => byte as i32,
            (Packing::Nibble, false) => (byte & 0x0F) as i32,
            (Packing::Nibble, true) => (byte >> 4) as i32,
        }
    }

    /// The scale of (`row`, group `g`, sub-block `s`).
    pub fn scale(&self, row: usize, g: usize, s: usize) -> f32 {
        let at = (row / BLOCK) * self.groups + g;
        self.scales[(at * self.subs() + s) * BLOCK + row % BLOCK].to_f32()
    }

    /// The minimum of (`row`, group `g`): zero for formats without.
    pub fn min(&self, row: usize, g: usize) -> f32 {
        let at = (row / BLOCK) * self.groups + g;
        self.mins
            .get(at * BLOCK + row % BLOCK)
            .map_or(0.0, |m| m.to_f32())
    }

    /// Row `row` as floats (`cols` values).
    pub fn dequantize_row(&self, row: usize, out: &mut [f32]) {
        let width = GROUP / self.subs();
        for (col, value) in out.iter_mut().enumerate().take(self.cols) {
            let g = col / GROUP;
            let scale = self.scale(row, g, (col % GROUP) / width);
            let q = self.weight_int(row, col) - self.offset;
            *value = scale * q as f32 + self.min(row, g);
        }
    }

    /// Memory held, in bytes.
    pub fn bytes(&self) -> usize {
        self.q.len() + 2 * (self.scales.len() + self.mins.len())
    }
}
