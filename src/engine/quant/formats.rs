//! Reading GGML's quantized blocks (Q4_0, Q4_1, Q8_0, Q4_K, Q6_K) into one integer form:
//! every group of 32 weights becomes 32 unsigned integers `q`, one or two scales and,
//! for some formats, a minimum, with `weight = scale · (q − offset) + minimum`. The
//! offset is a constant of the format (Q4_0: 8, Q8_0: 128, Q6_K: 32), so the kernels
//! subtract it in exact integers. The packer lays that form out for the kernels; nothing
//! here knows about SIMD.

use half::f16;

use super::QuantError;

/// Weights per group: the unit of a scale, and of an activation block.
pub const GROUP: usize = 32;

/// How a format's integers are stored once packed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packing {
    /// `q` in 0..=15, two per byte; one scale per group.
    Nibble,
    /// `q` in 0..=63 (Q6_K): the low 4 bits as `Nibble`, the high 2 in a plane of their
    /// own; a scale per half group.
    Six,
    /// `q` a byte; one scale per group.
    Byte,
}

/// The GGML block types the kernels run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockType {
    Q4_0,
    Q4_1,
    Q8_0,
    Q4K,
    Q6K,
}

impl BlockType {
    pub fn from_ggml(dtype: candle_core::quantized::GgmlDType) -> Option<Self> {
        use candle_core::quantized::GgmlDType as G;
        Some(match dtype {
            G::Q4_0 => Self::Q4_0,
            G::Q4_1 => Self::Q4_1,
            G::Q8_0 => Self::Q8_0,
            G::Q4K => Self::Q4K,
            G::Q6K => Self::Q6K,
            _ => return None,
        })
    }

    pub fn packing(self) -> Packing {
        match self {
            Self::Q4_0 | Self::Q4_1 | Self::Q4K => Packing::Nibble,
            Self::Q8_0 => Packing::Byte,
            Self::Q6K => Packing::Six,
        }
    }

    /// (weights, bytes) of one GGML block.
    fn block(self) -> (usize, usize) {
        match self {
            Self::Q4_0 => (32, 18),
            Self::Q4_1 => (32, 20),
            Self::Q8_0 => (32, 34),
            Self::Q4K => (256, 144),
            Self::Q6K => (256, 210),
        }
    }
}

/// A matrix in the integer form, row-major: `rows` output rows of `cols` weights.
pub struct Unpacked {
    pub packing: Packing,
    pub rows: usize,
    pub cols: usize,
    /// `rows · cols` integers.
    pub q: Vec<u8>,
    /// Subtracted from every `q`.
    pub offset: i32,
    /// `subs` scales per group.
    pub scales: Vec<f32>,
    /// One per group, or empty for formats without minimums.
    pub mins: Vec<f32>,
}

impl Unpacked {
    pub fn subs(&self) -> usize {
        match self.packing {
            Packing::Nibble | Packing::Byte => 1,
            Packing::Six => 2,
        }
    }
}

/// Decodes GGML blocks holding a `rows × cols` matrix.
pub fn unpack(
    kind: BlockType,
    data: &[u8],
    rows: usize,
    cols: usize,
) -> Result<Unpacked, QuantError> {
    let (block_weights, block_bytes) = kind.block();
    if cols % block_weights != 0 {
        return Err(QuantError::Shape(format!(
            "{kind:?} rows of {cols} weights are not whole blocks of {block_weights}"
        )));
    }
    let blocks = rows * cols / block_weights;
    if data.len() != blocks * block_bytes {
        return Err(QuantError::Shape(format!(
            "{kind:?} {rows}×{cols} needs {} bytes, found {}",
            blocks * block_bytes,
            data.len()
        )));
    }
    let packing = kind.packing();
    let groups = rows * cols / GROUP;
    let (offset, has_mins) = match kind {
        BlockType::Q4_0 => (8, false),
        BlockType::Q4_1 | BlockType::Q4K => (0, true),
        BlockType::Q8_0 => (128, false),
        BlockType::Q6K => (32, false),
    };
    let mut out = Unpacked {
        packing,
        rows,
        cols,
        q: vec![0; rows * cols],
        offset,
        scales: Vec::new(),
        mins: if has_mins {
            vec![0.0; groups]
        } else {
            Vec::new()
        },
    };
    out.scales = vec![0.0; groups * out.subs()];
    let per_block = block_weights / GROUP;
    for (b, block) in data.chunks_exact(block_bytes).enumerate() {
        let q = &mut out.q[b * block_weights..(b + 1) * block_weights];
        let g = b * per_block;
        match kind {
            BlockType::Q4_0 => {
                nibbles_low_high(&block[2..18], q);
                out.scales[g] = half(block, 0);
            }
            BlockType::Q4_1 => {
                nibbles_low_high(&block[4..20], q);
                out.scales[g] = half(block, 0);
                out.mins[g] = half(block, 2);
            }
            BlockType::Q8_0 => {
                // A signed byte plus 128 (the offset).
                for (dst, &src) in q.iter_mut().zip(&block[2..34]) {
                    *dst = src ^ 0x80;
                }
                out.scales[g] = half(block, 0);
            }
            BlockType::Q4K => {
                let (d, dmin) = (half(block, 0), half(block, 2));
                let scales = &block[4..16];
                let qs = &block[16..144];
                for chunk in 0..4 {
                    let bytes = &qs[chunk * 32..chunk * 32 + 32];
                    for (half_index, shift) in [(0, 0), (1, 4)] {
                        let sub = chunk * 2 + half_index;
                        let (sc, m) = scale_min_k4(sub, scales);
                        let dst = &mut q[sub * 32..sub * 32 + 32];
                        for (o, &byte) in dst.iter_mut().zip(bytes) {
                            *o = (byte >> shift) & 0x0F;
                        }
                        out.scales[g + sub] = d * sc as f32;
                        out.mins[g + sub] = -(dmin * m as f32);
                    }
                }
            }
            BlockType::Q6K => {
                let (ql, qh, sc) = (&block[0..128], &block[128..192], &block[192..208]);
                let d = half(block, 208);
                for half_index in 0..2 {
                    let ql = &ql[64 * half_index..];
                    let qh = &qh[32 * half_index..];
                    let base = 128 * half_index;
                    for l in 0..32 {
                        // 0..=63; the offset 32 makes it signed.
                        let six = |low: u8, high_shift: u8| {
                            (low & 0x0F) | (((qh[l] >> high_shift) & 3) << 4)
                        };
                        q[base + l] = six(ql[l], 0);
                        q[base + l + 32] = six(ql[l + 32], 2);
                        q[base + l + 64] = six(ql[l] >> 4, 4);
                        q[base + l + 96] = six(ql[l + 32] >> 4, 6);
                    }
                }
                // One scale per 16 weights: two per group of 32.
                for (i, &s) in sc.iter().enumerate() {
                    out.scales[g * 2 + i] = d * (s as i8) as f32;
                }
            }
        }
    }
    Ok(out)
}

/// GGML's 32-weight nibble layout: byte j holds weight j (low) and weight j + 16 (high).
fn nibbles_low_high(bytes: &[u8], q: &mut [u8]) {
    for (j, &byte) in bytes.iter().enumerate() {
        q[j] = byte & 0x0F;
        q[j + 16] = byte >> 4;
    }
}

fn half(block: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([block[at], block[at + 1]]).to_f32()
}

/// The 6-bit scale and minimum of sub-block `j` of a Q4_K block.
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}
