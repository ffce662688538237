//! Numerics of the repacked kernels against candle's dequantized weights, per block type
//! and per kernel this CPU runs; row-by-row invariance across batch sizes and threads.

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;

const TYPES: [GgmlDType; 5] = [
    GgmlDType::Q4_0,
    GgmlDType::Q4_1,
    GgmlDType::Q8_0,
    GgmlDType::Q4K,
    GgmlDType::Q6K,
];

fn random(rng: &mut StdRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

fn quantized(values: &[f32], rows: usize, cols: usize, dtype: GgmlDType) -> QTensor {
    let t = Tensor::from_vec(values.to_vec(), (rows, cols), &Device::Cpu).unwrap();
    QTensor::quantize(&t, dtype).unwrap()
}

/// `x · Wᵀ` in f64 over candle's own dequantization of the same blocks.
fn reference(q: &QTensor, x: &[f32], rows: usize) -> Vec<f64> {
    let w = q
        .dequantize(&Device::Cpu)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    let (n, k) = q.shape().dims2().unwrap();
    let mut out = vec![0.0f64; rows * n];
    for r in 0..rows {
        for j in 0..n {
            out[r * n + j] = (0..k)
                .map(|i| x[r * k + i] as f64 * w[j * k + i] as f64)
                .sum();
        }
    }
    out
}

#[test]
fn unpacked_weights_equal_candles_dequantization() {
    let mut rng = StdRng::seed_from_u64(7);
    for dtype in TYPES {
        let (rows, cols) = (3, 512);
        let q = quantized(&random(&mut rng, rows * cols), rows, cols, dtype);
        let expected = q
            .dequantize(&Device::Cpu)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let kind = BlockType::from_ggml(dtype).unwrap();
        let u = formats::unpack(kind, &q.data().unwrap(), rows, cols).unwrap();
        let subs = u.subs();
        for (i, &want) in expected.iter().enumerate() {
            let (g, within) = (i / 32, i % 32);
            let scale = u.scales[g * subs + within / (32 / subs)];
            let min = u.mins.get(g).copied().unwrap_or(0.0);
            let got = scale * (u.q[i] as i32 - u.offset) as f32 + min;
            assert!(
                (got - want).abs() <= 1e-6 * want.abs().max(1.0),
                "{dtype:?} weight {i}: {got} vs {want}"
            );
        }
    }
}

#[test]
fn every_kernel_matches_the_dequantized_product() {
    let mut rng = StdRng::seed_from_u64(11);
    for dtype in TYPES {
        // 32-weight types also get an odd group count (the padded tail).
        let shapes: &[(usize, usize)] = match dtype {
            GgmlDType::Q4K | GgmlDType::Q6K => &[(37, 256), (70, 768)],
            _ => &[(37, 96), (70, 576)],
        };
        for &(n, k) in shapes {
            let weights = random(&mut rng, n * k);
            let q = quantized(&weights, n, k, dtype);
            let linear = Linear::from_qtensor(&q).unwrap();
            let rows = 6;
            let x = random(&mut rng, rows * k);
            let expected = reference(&q, &x, rows);
            let scale = expected.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            for isa in Isa::available() {
                let mut matmul = Matmul::with_isa(2, isa);
                let mut out = Vec::new();
                matmul.forward(&linear, &x, rows, &mut out).unwrap();
                for (i, (&got, &want)) in out.iter().zip(&expected).enumerate() {
                    // Activations are quantized to 8 bits: about 1% of the output's scale.
                    assert!(
                        (got as f64 - want).abs() <= 0.02 * scale,
                        "{dtype:?} {n}×{k} {isa:?} output {i}: {got} vs {want}"
                    );
                }
            }
        }
    }
}

#[test]
fn simd_kernels_give_the_portable_kernels_bits() {
    let mut rng = StdRng::seed_from_u64(13);
    for dtype in TYPES {
        let (n, k) = (33, 512);
        let q = quantized(&random(&mut rng, n * k), n, k, dtype);
        let linear = Linear::from_qtensor(&q).unwrap();
        // An eight-row tile, a four-row one and a single row.
        let rows = 13;
        let x = random(&mut rng, rows * k);
        let mut portable = Vec::new();
        Matmul::with_isa(1, Isa::Portable)
            .forward(&linear, &x, rows, &mut portable)
            .unwrap();
        for isa in Isa::available() {
            let mut out = Vec::new();
            Matmul::with_isa(1, isa)
                .forward(&linear, &x, rows, &mut out)
                .unwrap();
            for (i, (&a, &b)) in out.iter().zip(&portable).enumerate() {
                // Same integers, the same float steps in the same order.
                assert_eq!(
                    a.to_bits(),
                    b.to_bits(),
                    "{dtype:?} {isa:?} output {i}: {a} vs {b}"
                );
            }
        }
    }
}

#[test]
fn a_row_gives_the_same_bits_alone_in_a_batch_and_on_any_thread_count() {
    let mut rng = StdRng::seed_from_u64(17);
    for dtype in TYPES {
        let (n, k) = (300, 512);
        let q = quantized(&random(&mut rng, n * k), n, k, dtype);
        let linear = Linear::from_qtensor(&q).unwrap();
        let rows = 13;
        let x = random(&mut rng, rows * k);
        for isa in Isa::available() {
            let mut batched = Vec::new();
            Matmul::with_isa(3, isa)
                .forward(&linear, &x, rows, &mut batched)
                .unwrap();
            let mut single = Matmul::with_isa(1, isa);
            for r in 0..rows {
                let mut alone = Vec::new();
                single
                    .forward(&linear, &x[r * k..(r + 1) * k], 1, &mut alone)
                    .unwrap();
                assert_eq!(
                    alone.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    batched[r * n..(r + 1) * n]
                        .iter()
                        .map(|v| v.to_bits())
                        .collect::<Vec<_>>(),
                    "{dtype:?} {isa:?} row {r}"
                );
            }
        }
    }
}

#[test]
fn dense_fallback_and_bad_shapes() {
    let mut rng = StdRng::seed_from_u64(19);
    let (n, k) = (9, 64);
    let weights = random(&mut rng, n * k);
    let q = quantized(&weights, n, k, GgmlDType::F16);
    let linear = Linear::from_qtensor(&q).unwrap();
    assert!(matches!(linear, Linear::Dense(_)));
    let x = random(&mut rng, 2 * k);
    let expected = reference(&q, &x, 2);
    let mut out = Vec::new();
    let mut matmul = Matmul::new(2);
    matmul.forward(&linear, &x, 2, &mut out).unwrap();
    for (&got, &want) in out.iter().zip(&expected) {
        assert!((got as f64 - want).abs() < 1e-4);
    }
    assert!(matches!(
        matmul.forward(&linear, &x[1..], 2, &mut out),
        Err(QuantError::Shape(_))
    ));
    assert!(matches!(
        formats::unpack(BlockType::Q4_1, &[0u8; 19], 1, 32),
        Err(QuantError::Shape(_))
    ));
}

/// Odd shapes on purpose: a partial last group (cols % 32), a partial last block
/// (rows % 16) and row counts that leave partial register tiles.
const BLOCKED_SHAPES: [(usize, usize); 3] = [(37, 100), (64, 384), (16, 32)];

#[test]
fn blocked_weights_round_trip_within_half_a_step() {
    let mut rng = StdRng::seed_from_u64(11);
    for (rows, cols) in BLOCKED_SHAPES {
        let values = random(&mut rng, rows * cols);
        let w = Linear::quantize_for_batches(&values, rows, cols).unwrap();
        let mut row = vec![0.0; cols];
        for r in 0..rows {
            w.row(r, &mut row);
            for (c, (&got, &want)) in row.iter().zip(&values[r * cols..]).enumerate() {
                let group =
                    &values[r * cols + c / 32 * 32..r * cols + (c / 32 * 32 + 32).min(cols)];
                let step = group.iter().fold(0.0f32, |m, v| m.max(v.abs())) / 127.0;
                assert!(
                    (got - want).abs() <= 0.5001 * step,
                    "({r}, {c}): {got} vs {want}"
                );
            }
        }
    }
    assert!(Linear::quantize_for_batches(&[1.0; 5], 2, 3).is_err());
}

#[test]
fn blocked_products_match_f64_and_give_the_same_bits_on_every_kernel() {
    let mut rng = StdRng::seed_from_u64(12);
    for (n, k) in BLOCKED_SHAPES {
        let values = random(&mut rng, n * k);
        let w = Linear::quantize_for_batches(&values, n, k).unwrap();
        let rows = 13;
        let x = random(&mut rng, rows * k);
        // f64 over the dequantized weights and the 8-bit activations the kernels see.
        let mut wf = vec![0.0f32; k];
        let mut scratch = QuantizedRows::default();
        scratch.quantize_with(None, &x, rows, k, k.div_ceil(32), true);
        let mut expected = vec![0.0f64; rows * n];
        for j in 0..n {
            w.row(j, &mut wf);
            for r in 0..rows {
                expected[r * n + j] = (0..k)
                    .map(|i| {
                        let xq = scratch.row_q(r)[i] as f64 * scratch.row_scales(r)[i / 32] as f64;
                        xq * wf[i] as f64
                    })
                    .sum();
            }
        }
        let mut first: Option<Vec<f32>> = None;
        for isa in Isa::available() {
            for threads in [1, 3] {
                let mut mm = Matmul::with_isa(threads, isa);
                let mut out = Vec::new();
                mm.forward(&w, &x, rows, &mut out).unwrap();
                for (i, (&got, &want)) in out.iter().zip(&expected).enumerate() {
                    assert!(
                        (got as f64 - want).abs() <= 1e-4 * want.abs().max(1.0),
                        "{isa:?} ({n}x{k}) output {i}: {got} vs {want}"
                    );
                }
                match &first {
                    None => first = Some(out),
                    Some(bits) => assert!(
                        bits.iter()
                            .zip(&out)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{isa:?} on {threads} threads differs from the first kernel"
                    ),
                }
            }
        }
        // A row alone gives the bits it gave in the batch of 13.
        let mut mm = Matmul::new(1);
        let mut alone = Vec::new();
        mm.forward(&w, &x[5 * k..6 * k], 1, &mut alone).unwrap();
        let batch = first.unwrap();
        assert!(alone
            .iter()
            .zip(&batch[5 * n..6 * n])
            .all(|(a, b)| a.to_bits() == b.to_bits()));
    }
}

#[test]
fn shared_input_products_give_each_layers_own_bits() {
    let mut rng = StdRng::seed_from_u64(23);
    let k = 256;
    let layers: Vec<Linear> = [
        (48, GgmlDType::Q4K),
        (20, GgmlDType::Q6K),
        (33, GgmlDType::Q8_0),
    ]
    .into_iter()
    .map(|(n, dtype)| {
        Linear::from_qtensor(&quantized(&random(&mut rng, n * k), n, k, dtype)).unwrap()
    })
    .collect();
    let dense =
        Linear::from_qtensor(&quantized(&random(&mut rng, 9 * k), 9, k, GgmlDType::F16)).unwrap();
    for rows in [1, 6] {
        let x = random(&mut rng, rows * k);
        for isa in Isa::available() {
            let mut matmul = Matmul::with_isa(2, isa);
            let alone: Vec<Vec<f32>> = layers
                .iter()
                .chain([&dense])
                .map(|w| {
                    let mut out = Vec::new();
                    matmul.forward(w, &x, rows, &mut out).unwrap();
                    out
                })
                .collect();
            let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
            matmul
                .forward_shared(
                    [&layers[0], &layers[1], &layers[2]],
                    &x,
                    rows,
                    [&mut a, &mut b, &mut c],
                )
                .unwrap();
            let mut d = Vec::new();
            // A dense layer among them falls back to one product each.
            matmul
                .forward_shared([&layers[0], &dense], &x, rows, [&mut a, &mut d])
                .unwrap();
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            for (got, want) in [&a, &b, &c, &d].into_iter().zip([0, 1, 2, 3]) {
                assert_eq!(
                    bits(got),
                    bits(&alone[want]),
                    "{isa:?} rows {rows} layer {want}"
                );
            }
        }
    }
}
