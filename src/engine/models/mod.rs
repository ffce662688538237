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
pub(super) mod reference;
mod stock;

use candle_core::{Device, Tensor};

use super::error::{EngineError, Result};
use super::gguf::GgufFile;
use super::quant::ThreadPool;

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
    /// Sequences this model can hold caches for at once (decoded together in a step).
    fn slots(&self) -> usize {
        1
    }
    /// Makes room for `slots` sequence caches, at most what the model supports; returns
    /// how many it holds.
    fn set_slots(&mut self, _slots: usize) -> usize {
        1
    }
    /// Runs one step of several sequences: `(slot, tokens, position)` each, slots distinct.
    /// Returns each step's last-token logits. A model with one slot runs one step.
    fn forward_batch(
        &mut self,
        steps: &[(usize, &[u32], usize)],
    ) -> candle_core::Result<Vec<Vec<f32>>> {
        match steps {
            [(0, tokens, position)] => {
                Ok(vec![self.forward(tokens, *position)?.to_vec1::<f32>()?])
            }
            _ => candle_core::bail!("this model decodes one sequence at a time"),
        }
    }
    /// Makes slot `to` hold the first `len` cached positions of slot `from`; false when
    /// this model cannot.
    fn copy_prefix(&mut self, _from: usize, _to: usize, _len: usize) -> bool {
        false
    }
    /// Keeps the first `len` positions of slot `slot`'s cache (see `truncate_cache`).
    fn truncate_slot(&mut self, slot: usize, len: usize) -> bool {
        slot == 0 && self.truncate_cache(len)
    }
    /// The model's CPU threads, idle between steps: generation lends them the per-sequence
    /// work after a step (token masks). `None` where the model has none.
    fn pool(&self) -> Option<&ThreadPool> {
        None
    }
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
