//! Warden's own quantized matrix products for CPU inference: GGUF weights repacked once
//! at load (`formats` reads GGML blocks, `packed` lays them out), activations quantized
//! per row (`activations`), SIMD kernels chosen at run time (`kernels`) and a low-overhead
//! thread pool (`pool`). `Linear` is what a model layer holds; unsupported block types
//! fall back to dequantized float weights with the same row-by-row contract.

mod activations;
mod dense;
mod formats;
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

/// A linear layer `y = x · Wᵀ` with `rows` outputs and `cols` inputs.
pub enum Linear {
    Quantized(PackedMatrix),
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

    pub fn rows(&self) -> usize {
        match self {
            Self::Quantized(m) => m.rows,
            Self::Dense(m) => m.rows,
        }
    }

    pub fn cols(&self) -> usize {
        match self {
            Self::Quantized(m) => m.cols,
            Self::Dense(m) => m.cols,
        }
    }

    /// Bytes of weights held.
    pub fn bytes(&self) -> usize {
        match self {
            Self::Quantized(m) => m.bytes(),
            Self::Dense(m) => m.values.len() * 4,
        }
    }

    fn groups(&self) -> usize {
        match self {
            Self::Quantized(m) => m.groups,
            Self::Dense(_) => 0,
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
        let (n, k) = (w.rows(), w.cols());
        if x.len() != rows * k {
            return Err(QuantError::Shape(format!(
                "input of {} values is not {rows} rows of {k}",
                x.len()
            )));
        }
        out.clear();
        out.resize(rows * n, 0.0);
        if let Linear::Quantized(_) = w {
            self.scratch.quantize(x, rows, k, w.groups());
        }
        let output = kernels::Output {
            ptr: out.as_mut_ptr(),
            stride: n,
        };
        let (isa, scratch) = (self.isa, &self.scratch);
        let job = |share: usize, shares: usize| {
            let cols = pool::share_range(n, share, shares);
            match w {
                // SAFETY: `out` holds rows × n floats and each share writes its own columns;
                // `isa` came from `Isa::available()`.
                Linear::Quantized(m) => unsafe {
                    kernels::matmul_columns(isa, m, scratch, cols, output)
                },
                Linear::Dense(m) => m.matmul_columns(x, rows, cols, output),
            }
        };
        if rows * n * k < PARALLEL_MIN_WORK {
            job(0, 1);
            return Ok(());
        }
        self.pool.run(&job).map_err(|_| QuantError::Worker)
    }
}

impl Linear {
    /// Row `row` of the weights as floats (`cols` values): an embedding lookup.
    pub fn row(&self, row: usize, out: &mut [f32]) {
        match self {
            Self::Quantized(m) => m.dequantize_row(row, out),
            Self::Dense(m) => out.copy_from_slice(&m.values[row * m.cols..(row + 1) * m.cols]),
        }
    }
}
