//! Sentence embeddings with BERT-family models (default all-MiniLM-L6-v2) from a folder of
//! safetensors + tokenizer.json + config.json, pooled and normalised as the model's
//! sentence-transformers files say, batched, truncated at the model's maximum length.
//! Two encoders compute them: candle's BERT in full precision (any device), and on CPUs
//! Warden's own 8-bit encoder (`bert_cpu`), the default where the CPU has VNNI.

mod bert_cpu;

use std::path::{Path, PathBuf};
use std::str::FromStr;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use serde::Deserialize;
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

use super::error::{EngineError, Result};
use super::quant::Isa;
use super::types::Embeddings;
use bert_cpu::BertCpu;

/// Sentences per forward pass.
pub const BATCH_SIZE: usize = 32;

/// Which encoder computes embeddings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmbedPrecision {
    /// `int8` on a CPU with AVX2 or AVX-512 VNNI, `f32` otherwise (no SIMD kernel).
    Auto,
    /// candle's BERT in full precision (cosine ≥ 0.999 against sentence-transformers).
    F32,
    /// Warden's CPU encoder: 8-bit weights and activations with a scale per 32 values.
    Int8,
}

impl FromStr for EmbedPrecision {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "f32" => Ok(Self::F32),
            "int8" => Ok(Self::Int8),
            other => Err(format!(
                "unknown embedding precision {other:?} (auto, f32, int8)"
            )),
        }
    }
}

enum Encoder {
    Candle(BertModel),
    Cpu(Box<BertCpu>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Pooling {
    Mean,
    Cls,
}

pub struct Embedder {
    encoder: Encoder,
    tokenizer: Tokenizer,
    pooling: Pooling,
    normalize: bool,
    pub dimensions: usize,
    pub max_tokens: usize,
    /// The precision in use: `f32` or `int8`.
    pub precision: &'static str,
    device: Device,
}

#[derive(Deserialize)]
struct PoolingConfig {
    #[serde(default)]
    pooling_mode_cls_token: bool,
}

#[derive(Deserialize)]
struct SentenceBertConfig {
    max_seq_length: Option<usize>,
}

#[derive(Deserialize)]
struct ModuleEntry {
    #[serde(rename = "type")]
    kind: String,
}

impl Embedder {
    pub fn load(
        dir: &Path,
        device: &Device,
        precision: EmbedPrecision,
        threads: usize,
    ) -> Result<Self> {
        let config: Config = read_json(&dir.join("config.json"))?;
        let weights_path = dir.join("model.safetensors");
        let weights = std::fs::read(&weights_path)
            .map_err(|e| bad(&weights_path, format!("cannot read: {e}")))?;
        let int8 = match precision {
            EmbedPrecision::Auto => {
                device.is_cpu() && Isa::detect() != Isa::Portable && BertCpu::supports(&config)
            }
            EmbedPrecision::F32 => false,
            EmbedPrecision::Int8 if BertCpu::supports(&config) => true,
            EmbedPrecision::Int8 => {
                return Err(bad(
                    &dir.join("config.json"),
                    "the int8 encoder supports absolute position embeddings only".into(),
                ))
            }
        };
        let encoder = if int8 {
            let tensors = candle_core::safetensors::load_buffer(&weights, &Device::Cpu)
                .map_err(|e| bad(&weights_path, format!("not valid safetensors: {e}")))?;
            let model = BertCpu::load(&tensors, &config, threads)
                .map_err(|e| bad(&weights_path, format!("not a BERT model: {e}")))?;
            Encoder::Cpu(Box::new(model))
        } else {
            let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, device)
                .map_err(|e| bad(&weights_path, format!("not valid safetensors: {e}")))?;
            let model = BertModel::load(vb, &config)
                .map_err(|e| bad(&weights_path, format!("not a BERT model: {e}")))?;
            Encoder::Candle(model)
        };
        let pooling = match read_optional_json::<PoolingConfig>(&dir.join("1_Pooling/config.json"))?
        {
            Some(p) if p.pooling_mode_cls_token => Pooling::Cls,
            _ => Pooling::Mean,
        };
        let normalize = read_optional_json::<Vec<ModuleEntry>>(&dir.join("modules.json"))?
            .map(|modules| modules.iter().any(|m| m.kind.ends_with("Normalize")))
            .unwrap_or(true);
        let max_tokens =
            read_optional_json::<SentenceBertConfig>(&dir.join("sentence_bert_config.json"))?
                .and_then(|c| c.max_seq_length)
                .unwrap_or(config.max_position_embeddings)
                .min(config.max_position_embeddings);
        let tokenizer = load_tokenizer(&dir.join("tokenizer.json"), max_tokens)?;
        Ok(Self {
            encoder,
            tokenizer,
            pooling,
            normalize,
            dimensions: config.hidden_size,
            max_tokens,
            precision: if int8 { "int8" } else { "f32" },
            device: device.clone(),
        })
    }

    /// One vector per input, in input order. Inputs are batched by similar length.
    pub fn embed(&mut self, inputs: &[String], cancel: &dyn Fn() -> bool) -> Result<Embeddings> {
        let mut order: Vec<usize> = (0..inputs.len()).collect();
        order.sort_by_key(|&i| inputs[i].len());
        let mut vectors = vec![Vec::new(); inputs.len()];
        let mut prompt_tokens = 0;
        for batch in order.chunks(BATCH_SIZE) {
            if cancel() {
                return Err(EngineError::Inference("cancelled".into()));
            }
            let texts: Vec<&str> = batch.iter().map(|&i| inputs[i].as_str()).collect();
            let (batch_vectors, tokens) = self.embed_batch(&texts)?;
            prompt_tokens += tokens;
            for (&i, vector) in batch.iter().zip(batch_vectors) {
                vectors[i] = vector;
            }
        }
        Ok(Embeddings {
            vectors,
            prompt_tokens,
        })
    }

    fn embed_batch(&mut self, texts: &[&str]) -> Result<(Vec<Vec<f32>>, usize)> {
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| EngineError::InvalidRequest(format!("cannot tokenize input: {e}")))?;
        let rows = encodings.len();
        let width = encodings.first().map(|e| e.len()).unwrap_or(0);
        let ids: Vec<u32> = encodings
            .iter()
            .flat_map(|e| e.get_ids().to_vec())
            .collect();
        let mask: Vec<u32> = encodings
            .iter()
            .flat_map(|e| e.get_attention_mask().to_vec())
            .collect();
        let tokens = mask.iter().filter(|&&m| m == 1).count();
        let (pooling, normalize) = (self.pooling, self.normalize);
        let vectors = match &mut self.encoder {
            Encoder::Cpu(model) => {
                // Padding is at the end: each sentence is its masked-in prefix.
                let sequences: Vec<&[u32]> = ids
                    .chunks_exact(width.max(1))
                    .zip(mask.chunks_exact(width.max(1)))
                    .map(|(ids, mask)| &ids[..mask.iter().filter(|&&m| m == 1).count()])
                    .collect();
                let hidden = model.forward(&sequences)?;
                pool_packed(&hidden, &sequences, self.dimensions, pooling, normalize)
            }
            Encoder::Candle(model) => {
                let ids = Tensor::from_vec(ids, (rows, width), &self.device)?;
                let mask = Tensor::from_vec(mask, (rows, width), &self.device)?;
                candle_pooled(model, &ids, &mask, pooling, normalize)?
            }
        };
        Ok((vectors, tokens))
    }
}

/// candle's forward pass over a padded batch, pooled over the mask and normalized.
fn candle_pooled(
    model: &BertModel,
    ids: &Tensor,
    mask: &Tensor,
    pooling: Pooling,
    normalize: bool,
) -> Result<Vec<Vec<f32>>> {
    let type_ids = ids.zeros_like()?;
    let hidden = model.forward(ids, &type_ids, Some(mask))?;
    let pooled = match pooling {
        Pooling::Cls => hidden.narrow(1, 0, 1)?.squeeze(1)?,
        Pooling::Mean => {
            let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
            let summed = hidden.broadcast_mul(&mask)?.sum(1)?;
            let counts = mask.sum(1)?.clamp(1e-9, f64::MAX)?;
            summed.broadcast_div(&counts)?
        }
    };
    let pooled = if normalize {
        let norms = pooled
            .sqr()?
            .sum_keepdim(1)?
            .sqrt()?
            .clamp(1e-12, f64::MAX)?;
        pooled.broadcast_div(&norms)?
    } else {
        pooled
    };
    Ok(pooled.to_vec2::<f32>()?)
}

/// Pools and normalizes sentences whose hidden states lie end to end in `hidden`.
fn pool_packed(
    hidden: &[f32],
    sequences: &[&[u32]],
    width: usize,
    pooling: Pooling,
    normalize: bool,
) -> Vec<Vec<f32>> {
    let mut at = 0;
    let mut vectors = Vec::with_capacity(sequences.len());
    for ids in sequences {
        let rows = &hidden[at * width..(at + ids.len()) * width];
        at += ids.len();
        let mut v = vec![0.0f32; width];
        match pooling {
            Pooling::Cls => v.copy_from_slice(&rows[..width.min(rows.len())]),
            Pooling::Mean => {
                for row in rows.chunks_exact(width) {
                    for (a, b) in v.iter_mut().zip(row) {
                        *a += b;
                    }
                }
                let n = ids.len().max(1) as f32;
                v.iter_mut().for_each(|a| *a /= n);
            }
        }
        if normalize {
            let norm = v.iter().map(|a| a * a).sum::<f32>().sqrt().max(1e-12);
            v.iter_mut().for_each(|a| *a /= norm);
        }
        vectors.push(v);
    }
    vectors
}

/// Checks an embedding model folder without loading the weights.
pub fn check_files(dir: &Path) -> Result<()> {
    let _: Config = read_json(&dir.join("config.json"))?;
    let weights = dir.join("model.safetensors");
    if !weights.is_file() {
        return Err(bad(&weights, "missing".into()));
    }
    load_tokenizer(&dir.join("tokenizer.json"), 512).map(|_| ())
}

fn load_tokenizer(path: &Path, max_tokens: usize) -> Result<Tokenizer> {
    let mut tokenizer = Tokenizer::from_file(path)
        .map_err(|e| bad(path, format!("tokenizer.json does not parse: {e}")))?;
    tokenizer
        .with_truncation(Some(TruncationParams {
            max_length: max_tokens,
            ..TruncationParams::default()
        }))
        .map_err(|e| bad(path, format!("cannot set truncation: {e}")))?;
    tokenizer.with_padding(Some(PaddingParams {
        strategy: PaddingStrategy::BatchLongest,
        ..PaddingParams::default()
    }));
    Ok(tokenizer)
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path).map_err(|e| bad(path, format!("cannot read: {e}")))?;
    serde_json::from_str(&text).map_err(|e| bad(path, format!("does not parse: {e}")))
}

fn read_optional_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>> {
    if !path.exists() {
        return Ok(None);
    }
    read_json(path).map(Some)
}

fn bad(path: &Path, reason: String) -> EngineError {
    EngineError::BadModelFile {
        path: PathBuf::from(path),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model_dir() -> PathBuf {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/all-MiniLM-L6-v2");
        assert!(
            dir.join("model.safetensors").is_file(),
            "{} is missing: run models/fetch",
            dir.display()
        );
        dir
    }

    /// Cosines of our vectors against sentence-transformers' (CPU torch, same files) for
    /// the fixture's sentences, including one past the 256-token limit (truncation).
    fn cosines_against_sentence_transformers(precision: EmbedPrecision) -> Vec<f32> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let fixture: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(root.join("tests/data/embedding_reference.json")).unwrap(),
        )
        .unwrap();
        let sentences: Vec<String> = fixture["sentences"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect();
        let mut embedder = Embedder::load(&model_dir(), &Device::Cpu, precision, 2).unwrap();
        let ours = embedder.embed(&sentences, &|| false).unwrap();
        let expected = fixture["vectors"].as_array().unwrap();
        assert_eq!(expected.len(), ours.vectors.len());
        expected
            .iter()
            .zip(&ours.vectors)
            .map(|(expected, got)| {
                let expected: Vec<f32> = expected
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_f64().unwrap() as f32)
                    .collect();
                let dot: f32 = got.iter().zip(&expected).map(|(a, b)| a * b).sum();
                let norms = got.iter().map(|a| a * a).sum::<f32>().sqrt()
                    * expected.iter().map(|b| b * b).sum::<f32>().sqrt();
                dot / norms
            })
            .collect()
    }

    #[test]
    fn full_precision_matches_sentence_transformers() {
        for (i, cosine) in cosines_against_sentence_transformers(EmbedPrecision::F32)
            .into_iter()
            .enumerate()
        {
            assert!(cosine >= 0.999, "sentence {i}: cosine {cosine}");
        }
    }

    /// The 8-bit encoder stays within the bar set for a lower-precision default.
    #[test]
    fn int8_matches_sentence_transformers_closely() {
        for (i, cosine) in cosines_against_sentence_transformers(EmbedPrecision::Int8)
            .into_iter()
            .enumerate()
        {
            assert!(cosine >= 0.995, "sentence {i}: cosine {cosine}");
        }
    }

    /// An 8-bit vector depends on its sentence alone: the same bits alone or in a batch of
    /// different lengths, on one thread or two.
    #[test]
    fn int8_vectors_do_not_depend_on_the_batch() {
        let sentences: Vec<String> = (0..9)
            .map(|i| "the disk on the log volume filled up ".repeat(1 + i % 4) + &i.to_string())
            .collect();
        let mut two = Embedder::load(&model_dir(), &Device::Cpu, EmbedPrecision::Int8, 2).unwrap();
        let batch = two.embed(&sentences, &|| false).unwrap().vectors;
        let mut one = Embedder::load(&model_dir(), &Device::Cpu, EmbedPrecision::Int8, 1).unwrap();
        for (i, sentence) in sentences.iter().enumerate() {
            let alone = one
                .embed(std::slice::from_ref(sentence), &|| false)
                .unwrap()
                .vectors;
            assert!(
                alone[0]
                    .iter()
                    .zip(&batch[i])
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "sentence {i} differs alone"
            );
        }
        assert_eq!(two.precision, "int8");
    }
}
