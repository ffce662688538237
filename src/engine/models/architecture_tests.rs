//! Warden's decoder against candle-transformers' reference implementations, per
//! architecture, on small random-weight GGUF files written here (no downloads): this is
//! what checks the Qwen2 biases, the Qwen3 per-head norms and the NEOX rotary layout.

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use candle_transformers::models::{quantized_llama, quantized_qwen2, quantized_qwen3};

use super::cpu_decoder::CpuDecoder;
use super::decoder::Decoder;
use super::CausalLm;
use crate::engine::gguf::GgufFile;

const VOCAB: usize = 96;
const HIDDEN: usize = 64;
const HEADS: usize = 4;
const KV_HEADS: usize = 2;
const HEAD_DIM: usize = 16;
const FFN: usize = 128;
const LAYERS: usize = 2;

fn random(shape: &[usize]) -> QTensor {
    let t = Tensor::randn(0f32, 0.3, shape, &Device::Cpu).unwrap();
    QTensor::quantize(&t, GgmlDType::F32).unwrap()
}

fn ones_ish(len: usize) -> QTensor {
    let t = (Tensor::randn(0f32, 0.1, len, &Device::Cpu).unwrap() + 1.0).unwrap();
    QTensor::quantize(&t, GgmlDType::F32).unwrap()
}

/// Writes a tiny model of `arch` and returns its path.
fn write_model(dir: &std::path::Path, arch: &str) -> std::path::PathBuf {
    let mut tensors: Vec<(String, QTensor)> = vec![
        ("token_embd.weight".into(), random(&[VOCAB, HIDDEN])),
        ("output_norm.weight".into(), ones_ish(HIDDEN)),
        ("output.weight".into(), random(&[VOCAB, HIDDEN])),
    ];
    for layer in 0..LAYERS {
        let name = |s: &str| format!("blk.{layer}.{s}");
        tensors.push((name("attn_norm.weight"), ones_ish(HIDDEN)));
        tensors.push((name("ffn_norm.weight"), ones_ish(HIDDEN)));
        tensors.push((name("attn_q.weight"), random(&[HEADS * HEAD_DIM, HIDDEN])));
        tensors.push((
            name("attn_k.weight"),
            random(&[KV_HEADS * HEAD_DIM, HIDDEN]),
        ));
        tensors.push((
            name("attn_v.weight"),
            random(&[KV_HEADS * HEAD_DIM, HIDDEN]),
        ));
        tensors.push((
            name("attn_output.weight"),
            random(&[HIDDEN, HEADS * HEAD_DIM]),
        ));
        tensors.push((name("ffn_gate.weight"), random(&[FFN, HIDDEN])));
        tensors.push((name("ffn_up.weight"), random(&[FFN, HIDDEN])));
        tensors.push((name("ffn_down.weight"), random(&[HIDDEN, FFN])));
        if arch == "qwen2" {
            tensors.push((name("attn_q.bias"), random(&[HEADS * HEAD_DIM])));
            tensors.push((name("attn_k.bias"), random(&[KV_HEADS * HEAD_DIM])));
            tensors.push((name("attn_v.bias"), random(&[KV_HEADS * HEAD_DIM])));
        }
        if arch == "qwen3" {
            tensors.push((name("attn_q_norm.weight"), ones_ish(HEAD_DIM)));
            tensors.push((name("attn_k_norm.weight"), ones_ish(HEAD_DIM)));
        }
    }
    let key = |k: &str| format!("{arch}.{k}");
    let metadata: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(arch.into())),
        ("general.dtype".into(), Value::U32(0)),
        (key("attention.head_count"), Value::U32(HEADS as u32)),
        (key("attention.head_count_kv"), Value::U32(KV_HEADS as u32)),
        (key("attention.key_length"), Value::U32(HEAD_DIM as u32)),
        (key("block_count"), Value::U32(LAYERS as u32)),
        (key("embedding_length"), Value::U32(HIDDEN as u32)),
        (key("context_length"), Value::U32(256)),
        (key("rope.dimension_count"), Value::U32(HEAD_DIM as u32)),
        (key("rope.freq_base"), Value::F32(10_000.0)),
        (key("attention.layer_norm_rms_epsilon"), Value::F32(1e-6)),
    ];
    let path = dir.join(format!("{arch}.gguf"));
    let mut file = std::fs::File::create(&path).unwrap();
    let metadata_refs: Vec<(&str, &Value)> =
        metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    gguf_file::write(&mut file, &metadata_refs, &tensor_refs).unwrap();
    path
}

/// Logits of the last token from candle's own implementation of `arch`.
fn reference_logits(path: &std::path::Path, arch: &str, tokens: &[u32]) -> Vec<f32> {
    let device = Device::Cpu;
    let mut file = std::fs::File::open(path).unwrap();
    let content = gguf_file::Content::read(&mut file).unwrap();
    let input = Tensor::new(tokens, &device).unwrap().unsqueeze(0).unwrap();
    let logits = match arch {
        "llama" => quantized_llama::ModelWeights::from_gguf(content, &mut file, &device)
            .unwrap()
            .forward(&input, 0)
            .unwrap(),
        "qwen2" => quantized_qwen2::ModelWeights::from_gguf(content, &mut file, &device)
            .unwrap()
            .forward(&input, 0)
            .unwrap(),
        _ => quantized_qwen3::ModelWeights::from_gguf(content, &mut file, &device)
            .unwrap()
            .forward(&input, 0)
            .unwrap(),
    };
    logits.flatten_all().unwrap().to_vec1::<f32>().unwrap()
}

fn check(arch: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = write_model(dir.path(), arch);
    let tokens: Vec<u32> = (0..40).map(|i| (i * 7 + 3) % VOCAB as u32).collect();
    let expected = reference_logits(&path, arch, &tokens);
    let candle_decoder = Decoder::load(GgufFile::open(&path).unwrap(), &Device::Cpu, 256).unwrap();
    let cpu_decoder = CpuDecoder::load(GgufFile::open(&path).unwrap(), 256, 2).unwrap();
    // Both run these float weights in float, as the reference does. The CPU decoder's
    // cache holds keys and values in f16 (2⁻¹¹ relative rounding), which moves logits
    // spread about ±2.5 here by up to ~0.01; a wiring mistake (a rotary layout, a bias, a
    // norm) moves them by about their spread.
    let models: [(&str, Box<dyn CausalLm>, f32); 2] = [
        ("candle decoder", Box::new(candle_decoder), 1e-3),
        ("cpu decoder", Box::new(cpu_decoder), 5e-2),
    ];
    for (name, ours, tolerance) in models {
        compare(arch, name, ours, &tokens, &expected, tolerance);
    }
}

fn compare(
    arch: &str,
    name: &str,
    mut ours: Box<dyn CausalLm>,
    tokens: &[u32],
    expected: &[f32],
    tolerance: f32,
) {
    // Prefill in two chunks, then one decode step: exercises the cache and reuse path.
    ours.forward(&tokens[..25], 0).unwrap();
    ours.forward(&tokens[25..39], 25).unwrap();
    let got = ours
        .forward(&tokens[39..], 39)
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    assert_eq!(got.len(), expected.len());
    let max_diff = got
        .iter()
        .zip(expected)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(
        max_diff < tolerance,
        "{arch} ({name}): max logit difference {max_diff}"
    );
}

#[test]
fn llama_matches_candle() {
    check("llama");
}

#[test]
fn qwen2_matches_candle() {
    check("qwen2");
}

#[test]
fn qwen3_matches_candle() {
    check("qwen3");
}
