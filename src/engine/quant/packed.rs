//! Weights repacked once at load into the layout the kernels read: output rows in blocks
//! of 16 and, within a block and 32-weight group, 4 consecutive weights of each of the 16
//! rows side by side, so one 512-bit `vpdpbusd` (or two 256-bit steps) advances 16
//! outputs by 4 inputs and the sums of 16 outputs stay apart in one register. Weights stay
//! unsigned (`q`, the format's offset subtracted in the integer sums) at their own width:
//! 4-bit pairs in one byte, Q6_K's 6 bits as such a nibble plus 2 bits in a second plane,
//! or bytes. Scales and minimums are f16, as GGUF stores them: exact for Q4_0, Q4_1 and
//! Q8_0; for the K-quants the scale times the sub-block's 6- or 8-bit factor is rounded to
//! f16 (relative error at most 2⁻¹¹, far below the 8-bit activations'). Decode reads
//! every weight once per token, so these bytes are its speed.

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
    /// nibbles of a chunk and step `2·chunk + 1` its high ones. Six bits: those nibbles
    /// (of the low 4 bits), then `[quad 2][row 16][4]` whose bits `2·(step % 4)` and up
    /// hold the high 2 bits of step `4·quad + step % 4`.
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
        packed.q = vec![0; blocks * groups * packed.group_bytes()];
        for row in 0..blocks * BLOCK {
            let (block, lane) = (row / BLOCK, row % BLOCK);
            for g in 0..groups {
                let at = block * groups + g;
                for i in 0..GROUP {
                    // Padding rows hold the offset: their weights are zero.
                    let q = if row < u.rows {
                        u.q[row * u.cols + g * GROUP + i]
                    } else {
                        u.offset as u8
                    };
                    packed.set(at, lane, i, q);
                }
                if row >= u.rows {
                    continue;
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

    /// Stores weight `q` of input `i` of a group's row `lane` (its bits still zero).
    fn set(&mut self, block_group: usize, lane: usize, i: usize, q: u8) {
        let (index, high) = self.position(block_group, lane, i);
        match self.packing {
            Packing::Byte => self.q[index] = q,
            Packing::Nibble | Packing::Six => {
                self.q[index] |= (q & 0x0F) << if high { 4 } else { 0 };
            }
        }
        if self.packing == Packing::Six {
            let (index, shift) = self.high_bits(block_group, lane, i);
            self.q[index] |= (q >> 4) << shift;
        }
    }

    /// Where the high 2 bits of a six-bit weight lie: (byte index, shift).
    fn high_bits(&self, block_group: usize, lane: usize, i: usize) -> (usize, u32) {
        let step = i / 4;
        let base = block_group * self.group_bytes() + GROUP * BLOCK / 2;
        (
            base + (step / 4) * BLOCK * 4 + lane * 4 + i % 4,
            2 * (step % 4) as u32,
        )
    }

    pub fn subs(&self) -> usize {
        match self.packing {
            Packing::Nibble | Packing::Byte => 1,
            Packing::Six => 2,
        }
    }

    /// Bytes of `q` per block and group.
    pub fn group_bytes(&self) -> usize {
        match self.packing {
            Packing::Nibble => GROUP * BLOCK / 2,
            Packing::Six => GROUP * BLOCK * 3 / 4,
            Packing::Byte => GROUP * BLOCK,
        }
    }

    /// Where input `i` of a group's row `lane` lies in `q`: (byte index, high nibble).
    fn position(&self, block_group: usize, lane: usize, i: usize) -> (usize, bool) {
        let base = block_group * self.group_bytes();
        match self.packing {
            Packing::Byte => (base + (i / 4) * BLOCK * 4 + lane * 4 + i % 4, false),
            Packing::Nibble | Packing::Six => {
                (base + (i / 8) * BLOCK * 4 + lane * 4 + i % 4, i % 8 >= 4)
            }
        }
    }

    /// The weight at (`row`, `col`) as stored, before the offset.
    pub fn weight_int(&self, row: usize, col: usize) -> i32 {
        let at = (row / BLOCK) * self.groups + col / GROUP;
        let (index, high) = self.position(at, row % BLOCK, col % GROUP);
        let byte = self.q[index];
        let low = match (self.packing, high) {
            (Packing::Byte, _) => return byte as i32,
            (_, false) => byte & 0x0F,
            (_, true) => byte >> 4,
        };
        if self.packing == Packing::Six {
            let (index, shift) = self.high_bits(at, row % BLOCK, col % GROUP);
            return (low | (((self.q[index] >> shift) & 3) << 4)) as i32;
        }
        low as i32
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
