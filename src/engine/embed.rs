//! Sentence embeddings with BERT-family models (default all-MiniLM-L6-v2) from a folder of
//! safetensors + tokenizer.json + config.json, pooled and normalised as the model's
//! sentence-transformers files say, batched, truncated at the model's maximum length.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use serde::Deserialize;
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

use super::error::{EngineError, Result};
use super::types::Embeddings;

/// Sentences per forward pass.
pub const BATCH_SIZE: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Pooling {
    Mean,
    Cls,
}

pub struct Embedder {
    model: BertModel,
    tokenizer: Tokenizer,
    pooling: Pooling,
    normalize: bool,
    pub dimensions: usize,
    pub max_tokens: usize,
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
    pub fn load(dir: &Path, device: &Device) -> Result<Self> {
        let config: Config = read_json(&dir.join("config.json"))?;
        let weights_path = dir.join("model.safetensors");
        let weights = std::fs::read(&weights_path)
            .map_err(|e| bad(&weights_path, format!("cannot read: {e}")))?;
        let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, device)
            .map_err(|e| bad(&weights_path, format!("not valid safetensors: {e}")))?;
        let model = BertModel::load(vb, &config)
            .map_err(|e| bad(&weights_path, format!("not a BERT model: {e}")))?;
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
            model,
            tokenizer,
            pooling,
            normalize,
            dimensions: config.hidden_size,
            max_tokens,
            device: device.clone(),
        })
    }

    /// One vector per input, in input order. Inputs are batched by similar length.
    pub fn embed(&self, inputs: &[String], cancel: &dyn Fn() -> bool) -> Result<Embeddings> {
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

    fn embed_batch(&self, texts: &[&str]) -> Result<(Vec<Vec<f32>>, usize)> {
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
        let ids = Tensor::from_vec(ids, (rows, width), &self.device)?;
        let mask = Tensor::from_vec(mask, (rows, width), &self.device)?;
        let type_ids = ids.zeros_like()?;
        let hidden = self.model.forward(&ids, &type_ids, Some(&mask))?;
        let pooled = match self.pooling {
            Pooling::Cls => hidden.narrow(1, 0, 1)?.squeeze(1)?,
            Pooling::Mean => {
                let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
                let summed = hidden.broadcast_mul(&mask)?.sum(1)?;
                let counts = mask.sum(1)?.clamp(1e-9, f64::MAX)?;
                summed.broadcast_div(&counts)?
            }
        };
        let pooled = if self.normalize {
            let norms = pooled
                .sqr()?
                .sum_keepdim(1)?
                .sqrt()?
                .clamp(1e-12, f64::MAX)?;
            pooled.broadcast_div(&norms)?
        } else {
            pooled
        };
        Ok((pooled.to_vec2::<f32>()?, tokens))
    }
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

    /// Matches sentence-transformers (CPU torch) on the same files: cosine ≥ 0.999 for
    /// every sentence, including one past the 256-token limit (truncation).
    #[test]
    fn matches_sentence_transformers() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let dir = root.join("models/all-MiniLM-L6-v2");
        assert!(
            dir.join("model.safetensors").is_file(),
            "{} is missing: run models/fetch",
            dir.display()
        );
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
        let embedder = Embedder::load(&dir, &Device::Cpu).unwrap();
        let ours = embedder.embed(&sentences, &|| false).unwrap();
        for (i, expected) in fixture["vectors"].as_array().unwrap().iter().enumerate() {
            let expected: Vec<f32> = expected
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap() as f32)
                .collect();
            let got = &ours.vectors[i];
            let dot: f32 = got.iter().zip(&expected).map(|(a, b)| a * b).sum();
            let norms = got.iter().map(|a| a * a).sum::<f32>().sqrt()
                * expected.iter().map(|b| b * b).sum::<f32>().sqrt();
            let cosine = dot / norms;
            assert!(cosine >= 0.999, "sentence {i}: cosine {cosine}");
        }
    }
}
