//! Warden's CPU decoder for the Llama family (Llama, Mistral, SmolLM2, Qwen2, Qwen3): GGUF
//! weights repacked for Warden's integer kernels, one paged KV cache per sequence slot
//! (pages shared between slots whose prompts begin alike), and a forward pass over rows
//! from several sequences at once (continuous batching). Every operation is row by row in
//! a fixed order, so a token's logits are the same bits whether its prompt ran in one
//! chunk or many, came from the prefix cache, or shared a step with other sequences.

mod attention;
mod ops;
#[cfg(test)]
mod tests;

use candle_core::{Device, Tensor};

use self::attention::{Scratch, SequenceCache};
use super::hyper::{read_hyper, Hyper};
use super::CausalLm;
use crate::engine::error::{EngineError, Result};
use crate::engine::fast_math::wide;
use crate::engine::gguf::GgufFile;
use crate::engine::quant::{pool, Linear, Matmul};

struct Layer {
    attention_norm: Vec<f32>,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    q_bias: Option<Vec<f32>>,
    k_bias: Option<Vec<f32>>,
    v_bias: Option<Vec<f32>>,
    q_norm: Option<Vec<f32>>,
    k_norm: Option<Vec<f32>>,
    ffn_norm: Vec<f32>,
    gate: Linear,
    up: Linear,
    down: Linear,
}

/// One sequence's part of a batched step: `tokens` placed at `position..` of slot `slot`.
pub struct Step<'a> {
    pub slot: usize,
    pub tokens: &'a [u32],
    pub position: usize,
}

pub struct CpuDecoder {
    hyper: Hyper,
    embeddings: Linear,
    /// `None`: the output projection is the embedding matrix (tied weights).
    output: Option<Linear>,
    output_norm: Vec<f32>,
    layers: Vec<Layer>,
    /// `context_length × head_dim / 2` each.
    cos: Vec<f32>,
    sin: Vec<f32>,
    matmul: Matmul,
    slots: Vec<SequenceCache>,
    buffers: Buffers,
}

/// Scratch reused across steps (rows × width each).
#[derive(Default)]
struct Buffers {
    hidden: Vec<f32>,
    normed: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    attended: Vec<f32>,
    projected: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    last: Vec<f32>,
    logits: Vec<f32>,
    /// Keys rounded to f16 on their way into a cache.
    rounded: Vec<half::f16>,
}

impl CpuDecoder {
    pub fn load(mut gguf: GgufFile, max_context: usize, threads: usize) -> Result<Self> {
        let hyper = read_hyper(&gguf, max_context)?;
        let path = gguf.path().to_path_buf();
        let bad = |reason: String| EngineError::BadModelFile {
            path: path.clone(),
            reason,
        };
        let linear = |gguf: &mut GgufFile, name: &str| -> Result<Linear> {
            let tensor = gguf.tensor(name, &Device::Cpu)?;
            Linear::from_qtensor(&tensor).map_err(|e| bad(format!("{name}: {e}")))
        };
        let embeddings = linear(&mut gguf, "token_embd.weight")?;
        let output = if gguf.has_tensor("output.weight") {
            Some(linear(&mut gguf, "output.weight")?)
        } else {
            None
        };
        let output_norm = vector(&mut gguf, "output_norm.weight")?;
        let mut layers = Vec::with_capacity(hyper.layers);
        for layer in 0..hyper.layers {
            let name = |suffix: &str| format!("blk.{layer}.{suffix}");
            let optional = |gguf: &mut GgufFile, suffix: &str| -> Result<Option<Vec<f32>>> {
                if gguf.has_tensor(&name(suffix)) {
                    Ok(Some(vector(gguf, &name(suffix))?))
                } else {
                    Ok(None)
                }
            };
            layers.push(Layer {
                attention_norm: vector(&mut gguf, &name("attn_norm.weight"))?,
                q: linear(&mut gguf, &name("attn_q.weight"))?,
                k: linear(&mut gguf, &name("attn_k.weight"))?,
                v: linear(&mut gguf, &name("attn_v.weight"))?,
                o: linear(&mut gguf, &name("attn_output.weight"))?,
                q_bias: optional(&mut gguf, "attn_q.bias")?,
                k_bias: optional(&mut gguf, "attn_k.bias")?,
                v_bias: optional(&mut gguf, "attn_v.bias")?,
                q_norm: optional(&mut gguf, "attn_q_norm.weight")?,
                k_norm: optional(&mut gguf, "attn_k_norm.weight")?,
                ffn_norm: vector(&mut gguf, &name("ffn_norm.weight"))?,
                gate: linear(&mut gguf, &name("ffn_gate.weight"))?,
                up: linear(&mut gguf, &name("ffn_up.weight"))?,
                down: linear(&mut gguf, &name("ffn_down.weight"))?,
            });
        }
        check_shapes(&hyper, &embeddings, output.as_ref(), &layers).map_err(bad)?;
        let (cos, sin) = rotary_tables(&hyper);
        let matmul = Matmul::new(threads);
        let weight_bytes: usize = [&embeddings]
            .into_iter()
            .chain(output.as_ref())
            .chain(
                layers
                    .iter()
                    .flat_map(|l| [&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down]),
            )
            .map(Linear::bytes)
            .sum();
        tracing::info!(
            kernel = matmul.isa().name(),
            threads = matmul.pool().threads(),
            weight_mib = weight_bytes / (1 << 20),
            "CPU decoder loaded"
        );
        let slots = vec![SequenceCache::new(
            hyper.layers,
            hyper.kv_heads,
            hyper.head_dim,
        )];
        Ok(Self {
            hyper,
            embeddings,
            output,
            output_norm,
            layers,
            cos,
            sin,
            matmul,
            slots,
            buffers: Buffers::default(),
        })
    }

    /// Sequence slots with their own caches.
    pub fn set_slots(&mut self, slots: usize) {
        let h = &self.hyper;
        let (layers, kv_heads, head_dim) = (h.layers, h.kv_heads, h.head_dim);
        self.slots.resize_with(slots.max(1), || {
            SequenceCache::new(layers, kv_heads, head_dim)
        });
    }

    pub fn truncate_slot(&mut self, slot: usize, len: usize) {
        if let Some(cache) = self.slots.get_mut(slot) {
            cache.truncate(len);
        }
    }

    /// Runs every step's tokens in one pass; returns the logits after each step's last token.
    pub fn forward_steps(&mut self, steps: &[Step]) -> Result<Vec<Vec<f32>>> {
        let h = &self.hyper;
        let mut row_slot = Vec::new();
        let mut row_position = Vec::new();
        for (index, step) in steps.iter().enumerate() {
            let cache = self
                .slots
                .get(step.slot)
                .ok_or_else(|| EngineError::Inference(format!("no sequence slot {}", step.slot)))?;
            if step.tokens.is_empty() || cache.len() != step.position {
                return Err(EngineError::Inference(format!(
                    "step {index}: {} tokens at {} over a cache of {}",
                    step.tokens.len(),
                    step.position,
                    cache.len()
                )));
            }
            if steps[..index].iter().any(|s| s.slot == step.slot) {
                return Err(EngineError::Inference(format!(
                    "slot {} twice in one step",
                    step.slot
                )));
            }
            if step.position + step.tokens.len() > h.context_length {
                return Err(EngineError::ContextOverflow {
                    prompt: step.position + step.tokens.len(),
                    context: h.context_length,
                });
            }
            for i in 0..step.tokens.len() {
                row_slot.push(step.slot);
                row_position.push(step.position + i);
            }
        }
        for step in steps {
            self.slots[step.slot].reserve(step.position + step.tokens.len());
        }
        let rows = row_slot.len();
        let (width, vocab) = (h.hidden, self.embeddings.rows());
        let b = &mut self.buffers;
        b.hidden.resize(rows * width, 0.0);
        for (row, &token) in steps.iter().flat_map(|s| s.tokens).enumerate() {
            if token as usize >= vocab {
                return Err(EngineError::Inference(format!(
                    "token {token} outside the vocabulary"
                )));
            }
            self.embeddings.row(
                token as usize,
                &mut b.hidden[row * width..(row + 1) * width],
            );
        }
        for layer in 0..self.layers.len() {
            self.layer(layer, rows, &row_slot, &row_position)?;
        }
        for step in steps {
            self.slots[step.slot].advance(step.tokens.len());
        }
        // Logits of each step's last row only.
        let b = &mut self.buffers;
        b.last.clear();
        let mut end = 0;
        for step in steps {
            end += step.tokens.len();
            b.last
                .extend_from_slice(&b.hidden[(end - 1) * width..end * width]);
        }
        let eps = self.hyper.rms_eps as f32;
        for row in b.last.chunks_exact_mut(width) {
            ops::rms_norm(row, &self.output_norm, eps);
        }
        let output = self.output.as_ref().unwrap_or(&self.embeddings);
        self.matmul
            .forward(output, &b.last, steps.len(), &mut b.logits)
            .map_err(|e| EngineError::Inference(e.to_string()))?;
        Ok(b.logits.chunks_exact(vocab).map(<[f32]>::to_vec).collect())
    }

    fn layer(
        &mut self,
        index: usize,
        rows: usize,
        row_slot: &[usize],
        row_position: &[usize],
    ) -> Result<()> {
        let h = &self.hyper;
        let eps = h.rms_eps as f32;
        let (width, head_dim, kv_width) = (h.hidden, h.head_dim, h.kv_heads * h.head_dim);
        let q_width = h.heads * head_dim;
        let layer = &self.layers[index];
        let b = &mut self.buffers;
        let matmul = &mut self.matmul;
        let failed = |e: crate::engine::quant::QuantError| EngineError::Inference(e.to_string());

        b.normed.resize(b.hidden.len(), 0.0);
        {
            let (hidden, normed) = (&b.hidden, pool::SharedRows::new(&mut b.normed));
            each_row(matmul.pool(), rows, |row| {
                // SAFETY: each row is one chunk's alone.
                let out = unsafe { normed.slice(row * width, width) };
                out.copy_from_slice(&hidden[row * width..(row + 1) * width]);
                ops::rms_norm(out, &layer.attention_norm, eps);
            })?;
        }
        matmul
            .forward_shared(
                [&layer.q, &layer.k, &layer.v],
                &b.normed,
                rows,
                [&mut b.q, &mut b.k, &mut b.v],
            )
            .map_err(failed)?;
        {
            let half = head_dim / 2;
            let (cos, sin, neox) = (&self.cos, &self.sin, h.rope_neox);
            let (q, k, v) = (
                pool::SharedRows::new(&mut b.q),
                pool::SharedRows::new(&mut b.k),
                pool::SharedRows::new(&mut b.v),
            );
            each_row(matmul.pool(), rows, |row| {
                // SAFETY: each row is one chunk's alone.
                let (q, k, v) = unsafe {
                    (
                        q.slice(row * q_width, q_width),
                        k.slice(row * kv_width, kv_width),
                        v.slice(row * kv_width, kv_width),
                    )
                };
                for (values, bias) in [
                    (&mut *q, &layer.q_bias),
                    (&mut *k, &layer.k_bias),
                    (v, &layer.v_bias),
                ] {
                    if let Some(bias) = bias {
                        ops::add(values, bias);
                    }
                }
                let position = row_position[row];
                let (cos, sin) = (
                    &cos[position * half..(position + 1) * half],
                    &sin[position * half..(position + 1) * half],
                );
                for (values, norm) in [(q, &layer.q_norm), (k, &layer.k_norm)] {
                    for head in values.chunks_exact_mut(head_dim) {
                        if let Some(norm) = norm {
                            ops::rms_norm(head, norm, eps);
                        }
                        ops::rope(head, cos, sin, neox);
                    }
                }
            })?;
        }
        // Keys and values join each sequence's cache before anyone attends.
        let mut start = 0;
        while start < rows {
            let slot = row_slot[start];
            let end = start + row_slot[start..].iter().take_while(|&&s| s == slot).count();
            self.slots[slot].write(
                index,
                &b.k[start * kv_width..end * kv_width],
                &b.v[start * kv_width..end * kv_width],
                &mut b.rounded,
            );
            start = end;
        }
        b.attended.clear();
        b.attended.resize(rows * q_width, 0.0);
        let out = pool::SharedRows::new(&mut b.attended);
        let group = h.heads / h.kv_heads;
        let (q, slots) = (&b.q, &self.slots);
        // A unit is one row's query heads of one KV head, so its keys and values come from
        // memory once (a query's result is the same either way). Even for a lone decode
        // row, whose few units leave a thread idle part of the time, this beats a unit per
        // query head, each reading its KV head again.
        let units = rows * h.kv_heads;
        let job = |scratch: &mut Scratch, mine: std::ops::Range<usize>| {
            let mut queries = Vec::with_capacity(group);
            let mut targets = Vec::with_capacity(group);
            wide(|| {
                for unit in mine {
                    let (row, kv_head) = (unit / h.kv_heads, unit % h.kv_heads);
                    queries.clear();
                    targets.clear();
                    for head in kv_head * group..(kv_head + 1) * group {
                        let at = row * q_width + head * head_dim;
                        queries.push(&q[at..at + head_dim]);
                        // SAFETY: (row, head) owns these head_dim floats of `attended`.
                        targets.push(unsafe { out.slice(at, head_dim) });
                    }
                    slots[row_slot[row]].attend_group(
                        index,
                        &queries,
                        row_position[row],
                        kv_head,
                        scratch,
                        &mut targets,
                    );
                }
            })
        };
        // Small chunks, claimed as threads come free: later rows of a prompt attend to
        // longer prefixes, and a held-up thread's units move to the other.
        let pool = matmul.pool();
        pool.run_units_with(units, pool.chunk(units, 16), &job)
            .map_err(|_| EngineError::Inference("an attention thread failed".into()))?;
        matmul
            .forward(&layer.o, &b.attended, rows, &mut b.projected)
            .map_err(failed)?;
        {
            let (hidden, normed) = (
                pool::SharedRows::new(&mut b.hidden),
                pool::SharedRows::new(&mut b.normed),
            );
            let projected = &b.projected;
            each_row(matmul.pool(), rows, |row| {
                // SAFETY: each row is one chunk's alone.
                let (hidden, out) = unsafe {
                    (
                        hidden.slice(row * width, width),
                        normed.slice(row * width, width),
                    )
                };
                ops::add(hidden, &projected[row * width..(row + 1) * width]);
                out.copy_from_slice(hidden);
                ops::rms_norm(out, &layer.ffn_norm, eps);
            })?;
        }
        matmul
            .forward_shared(
                [&layer.gate, &layer.up],
                &b.normed,
                rows,
                [&mut b.gate, &mut b.up],
            )
            .map_err(failed)?;
        {
            let ffn = layer.gate.rows();
            let (gate, up) = (pool::SharedRows::new(&mut b.gate), &b.up);
            each_row(matmul.pool(), rows, |row| {
                // SAFETY: each row is one chunk's alone.
                let g = unsafe { gate.slice(row * ffn, ffn) };
                ops::silu_mul(g, &up[row * ffn..(row + 1) * ffn]);
            })?;
        }
        matmul
            .forward(&layer.down, &b.gate, rows, &mut b.projected)
            .map_err(failed)?;
        let (hidden, projected) = (pool::SharedRows::new(&mut b.hidden), &b.projected);
        each_row(matmul.pool(), rows, |row| {
            // SAFETY: each row is one chunk's alone.
            let hidden = unsafe { hidden.slice(row * width, width) };
            ops::add(hidden, &projected[row * width..(row + 1) * width]);
        })
    }
}

/// Runs `f(row)` for every row of `0..rows`, the rows shared among the pool's threads in
/// chunks (the row-wise steps between matmuls would otherwise leave the other threads
/// waiting); each row is computed on its own, so no split changes its bits.
fn each_row(pool: &pool::ThreadPool, rows: usize, f: impl Fn(usize) + Sync) -> Result<()> {
    let job = |mine: std::ops::Range<usize>| {
        wide(|| {
            for row in mine {
                f(row);
            }
        })
    };
    pool.run_units(rows, pool.chunk(rows, 2), &job)
        .map_err(|_| EngineError::Inference("a row-wise step's thread failed".into()))
}

impl CausalLm for CpuDecoder {
    fn forward(&mut self, tokens: &[u32], position: usize) -> candle_core::Result<Tensor> {
        let logits = self
            .forward_steps(&[Step {
                slot: 0,
                tokens,
                position,
            }])
            .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        let logits = logits.into_iter().next().unwrap_or_default();
        let len = logits.len();
        Tensor::from_vec(logits, len, &Device::Cpu)
    }

    fn truncate_cache(&mut self, len: usize) -> bool {
        self.truncate_slot(0, len);
        true
    }

    fn context_length(&self) -> usize {
        self.hyper.context_length
    }

    fn slots(&self) -> usize {
        self.slots.len()
    }

    fn set_slots(&mut self, slots: usize) -> usize {
        CpuDecoder::set_slots(self, slots);
        self.slots.len()
    }

    fn forward_batch(
        &mut self,
        steps: &[(usize, &[u32], usize)],
    ) -> candle_core::Result<Vec<Vec<f32>>> {
        let steps: Vec<Step> = steps
            .iter()
            .map(|&(slot, tokens, position)| Step {
                slot,
                tokens,
                position,
            })
            .collect();
        self.forward_steps(&steps)
            .map_err(|e| candle_core::Error::Msg(e.to_string()))
    }

    fn copy_prefix(&mut self, from: usize, to: usize, len: usize) -> bool {
        if from == to || from >= self.slots.len() || to >= self.slots.len() {
            return false;
        }
        let source = std::mem::replace(
            &mut self.slots[from],
            SequenceCache::new(0, self.hyper.kv_heads, self.hyper.head_dim),
        );
        self.slots[to].copy_prefix(&source, len);
        self.slots[from] = source;
        true
    }

    fn truncate_slot(&mut self, slot: usize, len: usize) -> bool {
        if slot >= self.slots.len() {
            return false;
        }
        CpuDecoder::truncate_slot(self, slot, len);
        true
    }

    fn pool(&self) -> Option<&pool::ThreadPool> {
        Some(self.matmul.pool())
    }
}

/// A small float tensor (norm weights, biases).
fn vector(gguf: &mut GgufFile, name: &str) -> Result<Vec<f32>> {
    let tensor = gguf.tensor(name, &Device::Cpu)?;
    let path = gguf.path().to_path_buf();
    tensor
        .dequantize(&Device::Cpu)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<f32>())
        .map_err(|e| EngineError::BadModelFile {
            path,
            reason: format!("{name}: {e}"),
        })
}

fn check_shapes(
    h: &Hyper,
    embeddings: &Linear,
    output: Option<&Linear>,
    layers: &[Layer],
) -> std::result::Result<(), String> {
    let expect = |what: &str, l: &Linear, rows: usize, cols: usize| {
        if l.rows() == rows && l.cols() == cols {
            Ok(())
        } else {
            Err(format!(
                "{what} is {}×{}, expected {rows}×{cols}",
                l.rows(),
                l.cols()
            ))
        }
    };
    let (width, q_width, kv_width) = (h.hidden, h.heads * h.head_dim, h.kv_heads * h.head_dim);
    if embeddings.cols() != width {
        return Err(format!(
            "token_embd has width {}, expected {width}",
            embeddings.cols()
        ));
    }
    if let Some(output) = output {
        expect("output", output, embeddings.rows(), width)?;
    }
    for (i, l) in layers.iter().enumerate() {
        let name = |s: &str| format!("blk.{i}.{s}");
        expect(&name("attn_q"), &l.q, q_width, width)?;
        expect(&name("attn_k"), &l.k, kv_width, width)?;
        expect(&name("attn_v"), &l.v, kv_width, width)?;
        expect(&name("attn_output"), &l.o, width, q_width)?;
        let ffn = l.gate.rows();
        expect(&name("ffn_up"), &l.up, ffn, width)?;
        expect(&name("ffn_gate"), &l.gate, ffn, width)?;
        expect(&name("ffn_down"), &l.down, width, ffn)?;
        let vectors = [(&l.attention_norm, width), (&l.ffn_norm, width)];
        if vectors.iter().any(|(v, n)| v.len() != *n)
            || l.q_norm.as_ref().is_some_and(|v| v.len() != h.head_dim)
            || l.k_norm.as_ref().is_some_and(|v| v.len() != h.head_dim)
            || l.q_bias.as_ref().is_some_and(|v| v.len() != q_width)
            || l.k_bias.as_ref().is_some_and(|v| v.len() != kv_width)
            || l.v_bias.as_ref().is_some_and(|v| v.len() != kv_width)
        {
            return Err(format!("blk.{i}: a norm or bias has the wrong length"));
        }
    }
    if h.head_dim % 2 != 0 {
        return Err(format!("odd head size {}", h.head_dim));
    }
    Ok(())
}

/// cos and sin of every position's rotation angles, as candle's decoder computes them.
fn rotary_tables(h: &Hyper) -> (Vec<f32>, Vec<f32>) {
    let inverse: Vec<f32> = (0..h.head_dim)
        .step_by(2)
        .map(|i| 1.0 / h.rope_base.powf(i as f32 / h.head_dim as f32))
        .collect();
    let mut cos = Vec::with_capacity(h.context_length * inverse.len());
    let mut sin = Vec::with_capacity(h.context_length * inverse.len());
    for position in 0..h.context_length {
        for f in &inverse {
            let angle = position as f32 * f;
            cos.push(angle.cos());
            sin.push(angle.sin());
        }
    }
    (cos, sin)
}
