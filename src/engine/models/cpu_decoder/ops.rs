//! Row-wise float operations of the CPU decoder: RMS norm, rotary embedding, SiLU gating.
//! Each works on one row in a fixed order, so a row's result never depends on the rows
//! beside it.

use crate::engine::fast_math::exp;

/// `x · w / √(mean(x²) + ε)`, in place.
pub fn rms_norm(x: &mut [f32], weight: &[f32], eps: f32) {
    let mut partial = [0.0f32; 16];
    let chunks = x.len() / 16;
    for c in 0..chunks {
        for i in 0..16 {
            let v = x[c * 16 + i];
            partial[i] += v * v;
        }
    }
    let mut sum: f32 = partial.iter().sum();
    for v in &x[chunks * 16..] {
        sum += v * v;
    }
    let inverse = 1.0 / (sum / x.len() as f32 + eps).sqrt();
    for (v, w) in x.iter_mut().zip(weight) {
        *v = *v * inverse * w;
    }
}

/// Rotary position embedding of one head in place: interleaved pairs (2i, 2i+1), or the
/// NEOX layout (i, i + d/2).
pub fn rope(head: &mut [f32], cos: &[f32], sin: &[f32], neox: bool) {
    let half = head.len() / 2;
    for i in 0..half {
        let (a, b) = if neox {
            (i, i + half)
        } else {
            (2 * i, 2 * i + 1)
        };
        let (x0, x1) = (head[a], head[b]);
        head[a] = x0 * cos[i] - x1 * sin[i];
        head[b] = x0 * sin[i] + x1 * cos[i];
    }
}

/// `gate ← silu(gate) · up`.
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    for (g, u) in gate.iter_mut().zip(up) {
        let x = *g;
        *g = x / (1.0 + exp(-x)) * u;
    }
}

/// `x ← x + y`.
pub fn add(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rms_norm_and_rope_match_their_definitions() {
        let mut x: Vec<f32> = (0..40).map(|i| i as f32 - 20.0).collect();
        let w = vec![2.0f32; 40];
        let mean: f32 = x.iter().map(|v| v * v).sum::<f32>() / 40.0;
        let want: Vec<f32> = x.iter().map(|v| v / (mean + 1e-5).sqrt() * 2.0).collect();
        rms_norm(&mut x, &w, 1e-5);
        for (a, b) in x.iter().zip(&want) {
            assert!((a - b).abs() < 1e-5);
        }
        let mut head = vec![1.0f32, 2.0, 3.0, 4.0];
        rope(&mut head, &[0.0, 1.0], &[1.0, 0.0], false);
        assert_eq!(head, vec![-2.0, 1.0, 3.0, 4.0]);
        let mut head = vec![1.0f32, 2.0, 3.0, 4.0];
        rope(&mut head, &[0.0, 1.0], &[1.0, 0.0], true);
        assert_eq!(head, vec![-3.0, 2.0, 1.0, 4.0]);
    }
}
