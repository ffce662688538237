//! The shape and numerics of a Llama-family decoder, read from a GGUF file's `{arch}.*`
//! metadata and checked for consistency; shared by the CPU and the candle decoders.

use crate::engine::error::Result;
use crate::engine::gguf::GgufFile;

/// Shape and numerics read from `{arch}.*` metadata.
pub struct Hyper {
    pub layers: usize,
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub rms_eps: f64,
    pub rope_base: f32,
    /// NEOX rotary layout (pairs i and i + d/2) rather than interleaved pairs.
    pub rope_neox: bool,
    pub context_length: usize,
}

pub fn read_hyper(gguf: &GgufFile, max_context: usize) -> Result<Hyper> {
    let arch = gguf.architecture()?;
    let key = |k: &str| format!("{arch}.{k}");
    let heads = gguf.usize(&key("attention.head_count"))?;
    let hidden = gguf.usize(&key("embedding_length"))?;
    let kv_heads = gguf
        .optional_u64(&key("attention.head_count_kv"))
        .map(|v| v as usize)
        .unwrap_or(heads);
    if heads == 0 || kv_heads == 0 || heads % kv_heads != 0 || hidden % heads != 0 {
        return Err(gguf.bad(format!(
            "inconsistent attention shape: {heads} heads, {kv_heads} kv heads, width {hidden}"
        )));
    }
    let head_dim = gguf
        .optional_u64(&key("attention.key_length"))
        .map(|v| v as usize)
        .unwrap_or(hidden / heads);
    let context_length = gguf
        .optional_u64(&key("context_length"))
        .map(|v| v as usize)
        .unwrap_or(4096)
        .min(max_context);
    Ok(Hyper {
        layers: gguf.usize(&key("block_count"))?,
        hidden,
        heads,
        kv_heads,
        head_dim,
        rms_eps: gguf
            .optional_f32(&key("attention.layer_norm_rms_epsilon"))
            .unwrap_or(1e-5) as f64,
        rope_base: gguf
            .optional_f32(&key("rope.freq_base"))
            .unwrap_or(10_000.0),
        rope_neox: matches!(arch.as_str(), "qwen2" | "qwen3"),
        context_length,
    })
}
