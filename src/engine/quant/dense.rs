//! Float weights for block types the integer kernels do not run (F32, F16, BF16, Q5_x,
//! Q2_K, Q3_K, Q5_K): dequantized once at load, multiplied row by row in a fixed order.

use std::ops::Range;

use super::kernels::Output;

pub struct DenseMatrix {
    pub values: Vec<f32>,
    pub rows: usize,
    pub cols: usize,
}

impl DenseMatrix {
    pub fn new(values: Vec<f32>, rows: usize, cols: usize) -> Self {
        Self { values, rows, cols }
    }

    pub fn matmul_columns(&self, x: &[f32], rows: usize, cols: Range<usize>, out: Output) {
        for r in 0..rows {
            let input = &x[r * self.cols..(r + 1) * self.cols];
            for j in cols.clone() {
                let weights = &self.values[j * self.cols..(j + 1) * self.cols];
                // SAFETY: the caller owns these columns of `out` (see `Matmul::forward`).
                unsafe { out.write(r, j, dot(input, weights)) };
            }
        }
    }
}

/// A float dot product with 16 independent partial sums (vectorizes; fixed order). It
/// uses fused multiply-adds: the build targets x86-64-v3, and other targets have them.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut partial = [0.0f32; 16];
    let chunks = a.len() / 16;
    for c in 0..chunks {
        let (x, y) = (&a[c * 16..c * 16 + 16], &b[c * 16..c * 16 + 16]);
        for i in 0..16 {
            partial[i] = x[i].mul_add(y[i], partial[i]);
        }
    }
    let mut total: f32 = partial.iter().sum();
    for i in chunks * 16..a.len() {
        total += a[i] * b[i];
    }
    total
}
