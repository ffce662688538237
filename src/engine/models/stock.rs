//! Architectures run through candle-transformers' own quantized models (Phi-3, Gemma 3).
//! Their caches cannot drop positions, so a prompt that does not extend the cached one
//! is prefilled again from the start.

use candle_core::{Device, Tensor};
use candle_transformers::models::{quantized_gemma3, quantized_phi3};

use super::CausalLm;
use crate::engine::error::Result;
use crate::engine::gguf::GgufFile;

enum Inner {
    Phi3(quantized_phi3::ModelWeights),
    Gemma3(quantized_gemma3::ModelWeights),
}

pub struct StockModel {
    inner: Inner,
    device: Device,
    cached: usize,
    context_length: usize,
}

pub fn load(
    architecture: &str,
    gguf: GgufFile,
    device: &Device,
    max_context: usize,
) -> Result<Box<dyn CausalLm>> {
    let key = format!("{architecture}.context_length");
    let context_length = gguf
        .optional_u64(&key)
        .map(|v| v as usize)
        .unwrap_or(4096)
        .min(max_context);
    let path = gguf.path().to_path_buf();
    let (content, mut reader) = gguf.into_parts();
    let bad = |e: candle_core::Error| crate::engine::EngineError::BadModelFile {
        path: path.clone(),
        reason: e.to_string(),
    };
    let inner = match architecture {
        "phi3" => Inner::Phi3(
            quantized_phi3::ModelWeights::from_gguf(false, content, &mut reader, device)
                .map_err(bad)?,
        ),
        _ => Inner::Gemma3(
            quantized_gemma3::ModelWeights::from_gguf(content, &mut reader, device).map_err(bad)?,
        ),
    };
    Ok(Box::new(StockModel {
        inner,
        device: device.clone(),
        cached: 0,
        context_length,
    }))
}

impl CausalLm for StockModel {
    fn forward(&mut self, tokens: &[u32], position: usize) -> candle_core::Result<Tensor> {
        let input = Tensor::new(tokens, &self.device)?.unsqueeze(0)?;
        let logits = match &mut self.inner {
            Inner::Phi3(m) => m.forward(&input, position)?,
            Inner::Gemma3(m) => m.forward(&input, position)?,
        };
        self.cached = position + tokens.len();
        logits.squeeze(0)
    }

    fn truncate_cache(&mut self, len: usize) -> bool {
        // Position 0 resets these models' caches; keeping everything needs nothing.
        len == 0 || len == self.cached
    }

    fn context_length(&self) -> usize {
        self.context_length
    }
}
