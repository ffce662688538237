//! Causal language models loaded from GGUF, chosen by `general.architecture` and the
//! device: the Llama family on the CPU runs on `cpu_decoder`, on a GPU on the candle-based
//! `decoder`. All of them answer the same small trait so generation does not care which
//! one it drives.

#[cfg(test)]
mod architecture_tests;
mod cpu_decoder;
mod decoder;
mod hyper;
#[cfg(test)]
mod reference;
mod stock;

use candle_core::{Device, Tensor};

use super::error::{EngineError, Result};
use super::gguf::GgufFile;

/// A decoder-only language model with its own KV cache.
pub trait CausalLm: Send {
    /// Runs `tokens` placed at `position..` (the cache must hold exactly `position` tokens)
    /// and returns the logits of the last token as a `(vocab,)` tensor.
    fn forward(&mut self, tokens: &[u32], position: usize) -> candle_core::Result<Tensor>;
    /// Keeps the first `len` cached positions. Returns false when this model cannot drop
    /// positions (the caller then starts over from position 0).
    fn truncate_cache(&mut self, len: usize) -> bool;
    /// Context window in tokens.
    fn context_length(&self) -> usize;
}

/// Architectures Warden can run, as named in `general.architecture`.
pub const SUPPORTED: &[&str] = &["llama", "mistral", "qwen2", "qwen3", "phi3", "gemma3"];

/// Loads the model of an opened GGUF file.
pub fn load(
    gguf: GgufFile,
    device: &Device,
    max_context: usize,
) -> Result<(Box<dyn CausalLm>, String)> {
    let architecture = gguf.architecture()?;
    let path = gguf.path().to_path_buf();
    let model: Box<dyn CausalLm> = match architecture.as_str() {
        "llama" | "mistral" | "qwen2" | "qwen3" if device.is_cpu() => Box::new(
            cpu_decoder::CpuDecoder::load(gguf, max_context, super::inference_threads())?,
        ),
        "llama" | "mistral" | "qwen2" | "qwen3" => {
            Box::new(decoder::Decoder::load(gguf, device, max_context)?)
        }
        "phi3" | "gemma3" => stock::load(&architecture, gguf, device, max_context)?,
        other => {
            return Err(EngineError::UnsupportedArchitecture(format!(
                "{other}` in `{}",
                path.display()
            )))
        }
    };
    Ok((model, architecture))
}
