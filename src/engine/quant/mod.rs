//! Warden's own quantized matrix products for CPU inference: GGUF weights repacked once
//! at load (`formats` reads GGML blocks, `packed` lays them out), activations quantized
//! per row (`activations`), SIMD kernels chosen at run time (`kernels`) and a low-overhead
//! thread pool (`pool`). `Linear` is what a model layer holds; unsupported block types
//! fall back to dequantized float weights with the same row-by-row contract. Float
//! weights meant for large batches (the encoder) are quantized to 8 bits in the blocked
//! layout (`blocked`) that the batched kernels (`gemm`) read.

mod activations;
mod blocked;
mod dense;
mod formats;
mod gemm;
mod kernels;
mod packed;
pub mod pool;
#[cfg(test)]
mod tests;

use candle_core::quantized::QTensor;
use candle_core::Device;

pub use activations::QuantizedRows;
pub use kernels::Isa;
pub use pool::ThreadPool;

use blocked::BlockedMatrix;
use formats::BlockType;
use packed::PackedMatrix;

#[derive(Debug, thiserror::Error)]
pub enum QuantError {
    #[error("bad quantized tensor: {0}")]
    Shape(String),
    #[error("reading a tensor: {0}")]
    Tensor(#[from] candle_core::Error),
    #[error("a matmul thread failed")]
    Worker,
}

/// Multiply-accumulates under which a product runs on the calling thread alone.
const PARALLEL_MIN_WORK: usize = 64 * 1024;
/// Chunks of a product's output blocks per thread: enough for a held-up thread's share
/// to move to the others, few enough that claiming them costs nothing measurable.
const CHUNKS_PER_THREAD: usize = 8;

/// A linear layer `y = x · Wᵀ` with `rows` outputs and `cols` inputs.
pub enum Linear {
    Quantized(PackedMatrix),
    Blocked(BlockedMatrix),
    Dense(dense::DenseMatrix),
}

impl Linear {
    /// Repacks a GGUF tensor of shape `(rows, cols)`.
    pub fn from_qtensor(tensor: &QTensor) -> Result<Self, QuantError> {
        let (rows, cols) = tensor.shape().dims2()?;
        match BlockType::from_ggml(tensor.dtype()) {
            Some(kind) => {
                let data = tensor.data()?;
                let unpacked = formats::unpack(kind, &data, rows, cols)?;
                Ok(Self::Quantized(PackedMatrix::pack(&unpacked)))
            }
            None => {
                let values = tensor
                    .dequantize(&Device::Cpu)?
                    .flatten_all()?
                    .to_vec1::<f32>()?;
                Ok(Self::Dense(dense::DenseMatrix::new(values, rows, cols)))
            }
        }
    }

    /// Quantizes float weights (`rows × cols`, row-major) to 8 bits per weight with a
    /// scale per 32, for products over many rows at once.
    pub fn quantize_for_batches(
        values: &[f32],
        rows: usize,
        cols: usize,
    ) -> Result<Self, QuantError> {
        if values.len() != rows * cols {
            return Err(QuantError::Shape(format!(
                "{} values are not {rows} rows of {cols}",
                values.len()
            )));
        }
        Ok(Self::Blocked(BlockedMatrix::quantize(values, rows, cols)))
    }

    pub fn rows(&self) -> usize {
        match self {
            Self::Quantized(m) => m.rows,
            Self::Blocked(m) => m.rows,
            Self::Dense(m) => m.rows,
        }
    }

    pub fn cols(&self) -> usize {
        match self {
            Self::Quantized(m) => m.cols,
            Self::Blocked(m) => m.cols,
            Self::Dense(m) => m.cols,
        }
    }

    /// Bytes of weights held.
    pub fn bytes(&self) -> usize {
        match self {
            Self::Quantized(m) => m.bytes(),
            Self::Blocked(m) => m.bytes(),
            Self::Dense(m) => m.values.len() * 4,
        }
    }
}

/// Runs products of a model's layers: the kernel chosen for this CPU, the thread pool and
/// the scratch buffer for quantized activations.
pub struct Matmul {
    isa: Isa,
    pool: ThreadPool,
    scratch: QuantizedRows,
}

impl Matmul {
    pub fn new(threads: usize) -> Self {
        Self::with_isa(threads, Isa::detect())
    }

    pub fn with_isa(threads: usize, isa: Isa) -> Self {
        Self {
            isa,
            pool: ThreadPool::new(threads),
            scratch: QuantizedRows::default(),
        }
    }

    pub fn isa(&self) -> Isa {
        self.isa
    }

    pub fn pool(&self) -> &ThreadPool {
        &self.pool
    }

    /// `out[r · w.rows() + j] = Σ_k x[r · w.cols() + k] · w[j][k]` for `rows` input rows.
    pub fn forward(
        &mut self,
        w: &Linear,
        x: &[f32],
        rows: usize,
        out: &mut Vec<f32>,
    ) -> Result<(), QuantError> {
        if matches!(w, Linear::Quantized(_)) {
            return self.forward_shared([w], x, rows, [out]);
        }
        let (n, k) = (w.rows(), w.cols());
        if x.len() != rows * k {
            return Err(QuantError::Shape(format!(
                "input of {} values is not {rows} rows of {k}",
                x.len()
            )));
        }
        // Every kernel writes every output: old contents may stay.
        out.resize(rows * n, 0.0);
        if let Linear::Blocked(m) = w {
            self.scratch
                .quantize_with(Some(&self.pool), x, rows, k, m.groups, true);
        }
        let output = kernels::Output {
            ptr: out.as_mut_ptr(),
            stride: n,
        };
        let (isa, scratch) = (self.isa, &self.scratch);
        // Units: pairs of blocks (the blocked kernel's tile width), or output columns.
        let units = match w {
            Linear::Blocked(m) => m.blocks.div_ceil(2),
            _ => n,
        };
        let job = |mine: std::ops::Range<usize>| {
            match w {
                // `forward_shared` runs these.
                Linear::Quantized(_) => {}
                // SAFETY: `out` holds rows × n floats and each chunk writes the columns of
                // its own blocks; `isa` came from `Isa::available()`.
                Linear::Blocked(m) => unsafe {
                    let blocks = 2 * mine.start..(2 * mine.end).min(m.blocks);
                    gemm::matmul_blocks(isa, m, scratch, blocks, output)
                },
                Linear::Dense(m) => m.matmul_columns(x, rows, mine, output),
            }
        };
        if rows * n * k < PARALLEL_MIN_WORK {
            job(0..units);
            return Ok(());
        }
        let chunk = self.pool.chunk(units, CHUNKS_PER_THREAD);
        self.pool
            .run_units(units, chunk, &job)
            .map_err(|_| QuantError::Worker)
    }

    /// `forward` of several layers that read the same input (a block's query, key and
    /// value projections): the input is quantized once and the layers' blocks are shared
    /// over the threads in one job, not one job each. `forward` runs a single quantized
    /// layer through it; layers of another kind fall back to one `forward` each.
    pub fn forward_shared<const N: usize>(
        &mut self,
        ws: [&Linear; N],
        x: &[f32],
        rows: usize,
        outs: [&mut Vec<f32>; N],
    ) -> Result<(), QuantError> {
        let Some(k) = ws.first().map(|w| w.cols()) else {
            return Ok(());
        };
        let packed = ws.map(|w| match w {
            Linear::Quantized(m) if m.cols == k => Some(m),
            _ => None,
        });
        if packed.iter().any(Option::is_none) {
            for (w, out) in ws.into_iter().zip(outs) {
                self.forward(w, x, rows, out)?;
            }
            return Ok(());
        }
        if x.len() != rows * k {
            return Err(QuantError::Shape(format!(
                "input of {} values is not {rows} rows of {k}",
                x.len()
            )));
        }
        let packed = packed.iter().flatten();
        let groups = packed.clone().next().map_or(0, |m| m.groups);
        self.scratch
            .quantize_with(Some(&self.pool), x, rows, k, groups, false);
        let mut outs = outs;
        let outputs: [kernels::Output; N] = std::array::from_fn(|i| {
            let n = ws[i].rows();
            // Every kernel writes every output: old contents may stay.
            outs[i].resize(rows * n, 0.0);
            kernels::Output {
                ptr: outs[i].as_mut_ptr(),
                stride: n,
            }
        });
        let total: usize = packed.clone().map(|m| m.blocks).sum();
        let (isa, scratch) = (self.isa, &self.scratch);
        let job = |mine: std::ops::Range<usize>| {
            let mut first = 0;
            for (m, &output) in packed.clone().zip(&outputs) {
                let end = first + m.blocks;
                let blocks =
                    mine.start.clamp(first, end) - first..mine.end.clamp(first, end) - first;
                if !blocks.is_empty() {
                    // SAFETY: each output holds rows × m.rows floats and each chunk writes
                    // the columns of its own blocks; `isa` came from `Isa::available()`.
                    unsafe { kernels::matmul_blocks(isa, m, scratch, blocks, output) };
                }
                first += m.blocks;
            }
        };
        let work: usize = packed.clone().map(|m| rows * m.rows * k).sum();
        if work < PARALLEL_MIN_WORK {
            job(0..total);
            return Ok(());
        }
        let chunk = self.pool.chunk(total, CHUNKS_PER_THREAD);
        self.pool
            .run_units(total, chunk, &job)
            .map_err(|_| QuantError::Worker)
    }
}

impl Linear {
    /// Row `row` of the weights as floats (`cols` values): an embedding lookup.
    pub fn row(&self, row: usize, out: &mut [f32]) {
        match self {
            Self::Quantized(m) => m.dequantize_row(row, out),
            Self::Blocked(m) => m.dequantize_row(row, out),
            Self::Dense(m) => out.copy_from_slice(&m.values[row * m.cols..(row + 1) * m.cols]),
        }
    }
}
