//! Warden's own decoder for the Llama family (Llama, Mistral, SmolLM2, Qwen2, Qwen3) read
//! from GGUF: grouped-query attention without copying K/V per head, a growable in-place
//! KV cache that can be truncated for prompt-prefix reuse, and logits computed for the
//! last position only.

use std::sync::Arc;

use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{DType, Device, Module, Tensor};
use candle_nn::Embedding;
use candle_transformers::quantized_nn::RmsNorm;

use super::CausalLm;
use crate::engine::error::Result;
use crate::engine::gguf::GgufFile;
use crate::engine::kv_cache::KvCache;

use super::hyper::{read_hyper, Hyper};

struct Attention {
    q: Projection,
    k: Projection,
    v: Projection,
    o: Projection,
    q_bias: Option<Tensor>,
    k_bias: Option<Tensor>,
    v_bias: Option<Tensor>,
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    cache: KvCache,
}

struct Block {
    attention_norm: RmsNorm,
    attention: Attention,
    ffn_norm: RmsNorm,
    gate: Projection,
    up: Projection,
    down: Projection,
}

/// Rows from which a projection dequantizes its weights and runs a float matrix product:
/// for prefill that beats quantizing every activation row for the integer dot products.
const DEQUANTIZED_MIN_ROWS: usize = 16;

/// A quantized linear layer that picks the faster kernel for the batch size.
struct Projection {
    quantized: QMatMul,
    weights: Arc<QTensor>,
}

impl Projection {
    fn new(weights: QTensor) -> candle_core::Result<Self> {
        let weights = Arc::new(weights);
        Ok(Self {
            quantized: QMatMul::from_arc(weights.clone())?,
            weights,
        })
    }

    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let rows = x.elem_count() / x.dim(candle_core::D::Minus1)?;
        if rows < DEQUANTIZED_MIN_ROWS || !matches!(self.quantized, QMatMul::QTensor(_)) {
            return self.quantized.forward(x);
        }
        let weights = self.weights.dequantize(x.device())?;
        x.broadcast_matmul(&weights.t()?)
    }
}

pub struct Decoder {
    hyper: Hyper,
    embeddings: Embedding,
    blocks: Vec<Block>,
    output_norm: RmsNorm,
    output: QMatMul,
    cos: Tensor,
    sin: Tensor,
    device: Device,
}

impl Decoder {
    pub fn load(mut gguf: GgufFile, device: &Device, max_context: usize) -> Result<Self> {
        let hyper = read_hyper(&gguf, max_context)?;
        let token_embd = gguf.tensor("token_embd.weight", device)?;
        let embeddings = Embedding::new(token_embd.dequantize(device)?, hyper.hidden);
        let output = if gguf.has_tensor("output.weight") {
            QMatMul::from_qtensor(gguf.tensor("output.weight", device)?)?
        } else {
            QMatMul::from_qtensor(token_embd)?
        };
        let output_norm =
            RmsNorm::from_qtensor(gguf.tensor("output_norm.weight", device)?, hyper.rms_eps)?;
        let mut blocks = Vec::with_capacity(hyper.layers);
        for layer in 0..hyper.layers {
            blocks.push(load_block(&mut gguf, layer, &hyper, device)?);
        }
        let (cos, sin) = rotary_tables(&hyper, device)?;
        Ok(Self {
            hyper,
            embeddings,
            blocks,
            output_norm,
            output,
            cos,
            sin,
            device: device.clone(),
        })
    }
}

impl CausalLm for Decoder {
    fn forward(&mut self, tokens: &[u32], position: usize) -> candle_core::Result<Tensor> {
        let seq = tokens.len();
        if seq == 0 {
            candle_core::bail!("forward called with no tokens");
        }
        let input = Tensor::new(tokens, &self.device)?.unsqueeze(0)?;
        let mut hidden = self.embeddings.forward(&input)?;
        let mask = causal_mask(seq, position, &self.device)?;
        let cos = self.cos.narrow(0, position, seq)?;
        let sin = self.sin.narrow(0, position, seq)?;
        for block in &mut self.blocks {
            let residual = hidden.clone();
            let normed = block.attention_norm.forward(&hidden)?;
            let attended =
                block
                    .attention
                    .forward(&normed, &self.hyper, &cos, &sin, mask.as_ref())?;
            let hidden_mid = (attended + residual)?;
            let normed = block.ffn_norm.forward(&hidden_mid)?;
            let gated = (candle_nn::ops::silu(&block.gate.forward(&normed)?)?
                * block.up.forward(&normed)?)?;
            hidden = (block.down.forward(&gated)? + hidden_mid)?;
        }
        let last = hidden.narrow(1, seq - 1, 1)?;
        let logits = self.output.forward(&self.output_norm.forward(&last)?)?;
        logits.flatten_all()?.to_dtype(DType::F32)
    }

    fn truncate_cache(&mut self, len: usize) -> bool {
        for block in &mut self.blocks {
            block.attention.cache.truncate(len);
        }
        true
    }

    fn context_length(&self) -> usize {
        self.hyper.context_length
    }
}

impl Attention {
    fn forward(
        &mut self,
        x: &Tensor,
        h: &Hyper,
        cos: &Tensor,
        sin: &Tensor,
        mask: Option<&Tensor>,
    ) -> candle_core::Result<Tensor> {
        let (batch, seq, _) = x.dims3()?;
        let project =
            |w: &Projection, bias: &Option<Tensor>, heads: usize| -> candle_core::Result<Tensor> {
                let y = w.forward(x)?;
                let y = match bias {
                    Some(b) => y.broadcast_add(b)?,
                    None => y,
                };
                y.reshape((batch, seq, heads, h.head_dim))?.transpose(1, 2)
            };
        let mut q = project(&self.q, &self.q_bias, h.heads)?;
        let mut k = project(&self.k, &self.k_bias, h.kv_heads)?;
        let v = project(&self.v, &self.v_bias, h.kv_heads)?;
        if let Some(norm) = &self.q_norm {
            q = norm.forward(&q.contiguous()?)?;
        }
        if let Some(norm) = &self.k_norm {
            k = norm.forward(&k.contiguous()?)?;
        }
        let rope = |t: Tensor| -> candle_core::Result<Tensor> {
            let t = t.contiguous()?;
            if h.rope_neox {
                candle_nn::rotary_emb::rope(&t, cos, sin)
            } else {
                candle_nn::rotary_emb::rope_i(&t, cos, sin)
            }
        };
        let q = rope(q)?;
        let k = rope(k)?;
        let (k, v) = self.cache.append(&k, &v)?;
        let total = k.dim(2)?;
        // Grouped-query attention: fold each KV head's query heads into its rows, so
        // K and V are used as they are instead of being repeated per query head.
        let group = h.heads / h.kv_heads;
        let q = q.reshape((batch, h.kv_heads, group * seq, h.head_dim))?;
        let scores = (q.matmul(&k.t()?)? * (1.0 / (h.head_dim as f64).sqrt()))?;
        let scores = match mask {
            Some(mask) => scores
                .reshape((batch, h.kv_heads, group, seq, total))?
                .broadcast_add(mask)?
                .reshape((batch, h.kv_heads, group * seq, total))?,
            None => scores,
        };
        let weights = candle_nn::ops::softmax_last_dim(&scores)?;
        let out = weights.matmul(&v)?;
        let out = out
            .reshape((batch, h.heads, seq, h.head_dim))?
            .transpose(1, 2)?;
        self.o
            .forward(&out.reshape((batch, seq, h.heads * h.head_dim))?)
    }
}

/// Additive mask `(seq, position + seq)`: token i sees cached positions and tokens ≤ i.
fn causal_mask(
    seq: usize,
    position: usize,
    device: &Device,
) -> candle_core::Result<Option<Tensor>> {
    if seq == 1 {
        return Ok(None);
    }
    let total = position + seq;
    let values: Vec<f32> = (0..seq)
        .flat_map(|i| {
            (0..total).map(move |j| {
                if j > position + i {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
        })
        .collect();
    Tensor::from_vec(values, (seq, total), device).map(Some)
}

fn rotary_tables(h: &Hyper, device: &Device) -> candle_core::Result<(Tensor, Tensor)> {
    let inv_freq: Vec<f32> = (0..h.head_dim)
        .step_by(2)
        .map(|i| 1.0 / h.rope_base.powf(i as f32 / h.head_dim as f32))
        .collect();
    let inv_freq = Tensor::new(inv_freq.as_slice(), device)?;
    let positions = Tensor::arange(0u32, h.context_length as u32, device)?.to_dtype(DType::F32)?;
    let angles = positions
        .unsqueeze(1)?
        .broadcast_mul(&inv_freq.unsqueeze(0)?)?;
    Ok((angles.cos()?, angles.sin()?))
}

fn load_block(gguf: &mut GgufFile, layer: usize, h: &Hyper, device: &Device) -> Result<Block> {
    let name = |suffix: &str| format!("blk.{layer}.{suffix}");
    let mut matmul = |suffix: &str| -> Result<Projection> {
        Ok(Projection::new(gguf.tensor(&name(suffix), device)?)?)
    };
    let (q, k, v, o) = (
        matmul("attn_q.weight")?,
        matmul("attn_k.weight")?,
        matmul("attn_v.weight")?,
        matmul("attn_output.weight")?,
    );
    let (gate, up, down) = (
        matmul("ffn_gate.weight")?,
        matmul("ffn_up.weight")?,
        matmul("ffn_down.weight")?,
    );
    let mut optional = |suffix: &str| -> Result<Option<Tensor>> {
        if gguf.has_tensor(&name(suffix)) {
            Ok(Some(
                gguf.tensor(&name(suffix), device)?.dequantize(device)?,
            ))
        } else {
            Ok(None)
        }
    };
    let (q_bias, k_bias, v_bias) = (
        optional("attn_q.bias")?,
        optional("attn_k.bias")?,
        optional("attn_v.bias")?,
    );
    let mut norm = |suffix: &str| -> Result<Option<RmsNorm>> {
        if !gguf.has_tensor(&name(suffix)) {
            return Ok(None);
        }
        Ok(Some(RmsNorm::from_qtensor(
            gguf.tensor(&name(suffix), device)?,
            h.rms_eps,
        )?))
    };
    let q_norm = norm("attn_q_norm.weight")?;
    let k_norm = norm("attn_k_norm.weight")?;
    let attention_norm =
        RmsNorm::from_qtensor(gguf.tensor(&name("attn_norm.weight"), device)?, h.rms_eps)?;
    let ffn_norm =
        RmsNorm::from_qtensor(gguf.tensor(&name("ffn_norm.weight"), device)?, h.rms_eps)?;
    let attention = Attention {
        q,
        k,
        v,
        o,
        q_bias,
        k_bias,
        v_bias,
        q_norm,
        k_norm,
        cache: KvCache::new(h.context_length),
    };
    Ok(Block {
        attention_norm,
        attention,
        ffn_norm,
        gate,
        up,
        down,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::models::reference::{
        float_logits, max_difference, model_path, top_k, LlamaCpp, TOKENS,
    };

    /// Our decoder (prefill in two parts, then one quantized decode step) matches candle's
    /// reference llama implementation run in float on the whole sequence at once.
    #[test]
    fn matches_candle_reference_llama_with_cache_reuse() {
        let device = Device::Cpu;
        let mut ours =
            Decoder::load(GgufFile::open(&model_path()).unwrap(), &device, 2048).unwrap();
        ours.forward(&TOKENS[..20], 0).unwrap();
        ours.forward(&TOKENS[20..36], 20).unwrap();
        let last = ours
            .forward(&TOKENS[36..], 36)
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let expected = float_logits(&TOKENS);
        let max_diff = max_difference(&last, &expected);
        assert!(max_diff < 1.0, "max logit difference {max_diff}");
        // Same best token and the same top five; the order of near-ties inside the five may
        // differ with the matmul kernel (AVX2 or AVX-512 accumulate in different orders).
        let (mut ours, mut theirs) = (top_k(&last, 5), top_k(&expected, 5));
        assert_eq!(ours[0], theirs[0]);
        ours.sort_unstable();
        theirs.sort_unstable();
        assert_eq!(ours, theirs);
    }

    /// Against llama.cpp on the same GGUF and prompt.
    #[test]
    fn matches_llama_cpp_logits_within_tolerance() {
        let reference = LlamaCpp::load();
        let mut ours =
            Decoder::load(GgufFile::open(&model_path()).unwrap(), &Device::Cpu, 2048).unwrap();
        let logits = ours
            .forward(&reference.prompt, 0)
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        reference.check(&logits);
    }
}
