//! A BERT encoder on Warden's own 8-bit kernels for CPUs: the weights of every linear
//! layer quantized once at load with a scale per 32 (the three attention projections fused
//! into one product), sentences packed end to end with no padding, attention per sentence
//! and head on the thread pool, GELU and layer norms in vectorizable loops. A sentence's
//! vector is the same bits whatever else shares its batch.

use std::collections::HashMap;

use candle_core::{DType, Tensor};
use candle_transformers::models::bert::{Config, HiddenAct, PositionEmbeddingType};

use crate::engine::error::{EngineError, Result};
use crate::engine::fast_math::{exp, gelu};
use crate::engine::quant::{pool, Linear, Matmul, QuantError};

pub struct BertCpu {
    hidden: usize,
    heads: usize,
    head_dim: usize,
    eps: f32,
    activation: HiddenAct,
    max_positions: usize,
    vocab: usize,
    word: Vec<f32>,
    positions: Vec<f32>,
    /// Token type 0's embedding (sentence embedding never uses another).
    token_type: Vec<f32>,
    embed_norm: LayerNorm,
    layers: Vec<Layer>,
    matmul: Matmul,
    scratch: Scratch,
}

struct LayerNorm {
    weight: Vec<f32>,
    bias: Vec<f32>,
}

struct Layer {
    /// Query, key and value stacked: `3 · hidden` outputs.
    qkv: Linear,
    qkv_bias: Vec<f32>,
    attention_out: Linear,
    attention_out_bias: Vec<f32>,
    attention_norm: LayerNorm,
    up: Linear,
    up_bias: Vec<f32>,
    down: Linear,
    down_bias: Vec<f32>,
    output_norm: LayerNorm,
}

#[derive(Default)]
struct Scratch {
    qkv: Vec<f32>,
    context: Vec<f32>,
    projected: Vec<f32>,
    up: Vec<f32>,
}

/// Reads named float tensors, with or without a `bert.` prefix.
struct Weights<'a>(&'a HashMap<String, Tensor>);

impl Weights<'_> {
    fn get(&self, name: &str, len: usize) -> Result<Vec<f32>> {
        let tensor = self
            .0
            .get(name)
            .or_else(|| self.0.get(&format!("bert.{name}")))
            .ok_or_else(|| EngineError::Inference(format!("tensor {name} is missing")))?;
        let values = tensor
            .to_dtype(DType::F32)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        if values.len() != len {
            return Err(EngineError::Inference(format!(
                "tensor {name} has {} values, not {len}",
                values.len()
            )));
        }
        Ok(values)
    }

    fn norm(&self, prefix: &str, hidden: usize) -> Result<LayerNorm> {
        Ok(LayerNorm {
            weight: self.get(&format!("{prefix}.weight"), hidden)?,
            bias: self.get(&format!("{prefix}.bias"), hidden)?,
        })
    }
}

fn quant(err: QuantError) -> EngineError {
    EngineError::Inference(err.to_string())
}

impl BertCpu {
    /// Whether this encoder computes what `config` describes.
    pub fn supports(config: &Config) -> bool {
        config.position_embedding_type == PositionEmbeddingType::Absolute
            && config.num_attention_heads > 0
            && config.hidden_size % config.num_attention_heads == 0
            && config.type_vocab_size > 0
    }

    pub fn load(
        tensors: &HashMap<String, Tensor>,
        config: &Config,
        threads: usize,
    ) -> Result<Self> {
        let w = Weights(tensors);
        let (h, inner) = (config.hidden_size, config.intermediate_size);
        let linear = |name: &str, rows: usize, cols: usize| -> Result<Linear> {
            Linear::quantize_for_batches(&w.get(name, rows * cols)?, rows, cols).map_err(quant)
        };
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for i in 0..config.num_hidden_layers {
            let p = format!("encoder.layer.{i}");
            let mut qkv = Vec::with_capacity(3 * h * h);
            let mut qkv_bias = Vec::with_capacity(3 * h);
            for part in ["query", "key", "value"] {
                qkv.extend(w.get(&format!("{p}.attention.self.{part}.weight"), h * h)?);
                qkv_bias.extend(w.get(&format!("{p}.attention.self.{part}.bias"), h)?);
            }
            layers.push(Layer {
                qkv: Linear::quantize_for_batches(&qkv, 3 * h, h).map_err(quant)?,
                qkv_bias,
                attention_out: linear(&format!("{p}.attention.output.dense.weight"), h, h)?,
                attention_out_bias: w.get(&format!("{p}.attention.output.dense.bias"), h)?,
                attention_norm: w.norm(&format!("{p}.attention.output.LayerNorm"), h)?,
                up: linear(&format!("{p}.intermediate.dense.weight"), inner, h)?,
                up_bias: w.get(&format!("{p}.intermediate.dense.bias"), inner)?,
                down: linear(&format!("{p}.output.dense.weight"), h, inner)?,
                down_bias: w.get(&format!("{p}.output.dense.bias"), h)?,
                output_norm: w.norm(&format!("{p}.output.LayerNorm"), h)?,
            });
        }
        let token_types = w.get(
            "embeddings.token_type_embeddings.weight",
            config.type_vocab_size * h,
        )?;
        Ok(Self {
            hidden: h,
            heads: config.num_attention_heads,
            head_dim: h / config.num_attention_heads,
            eps: config.layer_norm_eps as f32,
            activation: config.hidden_act,
            max_positions: config.max_position_embeddings,
            vocab: config.vocab_size,
            word: w.get("embeddings.word_embeddings.weight", config.vocab_size * h)?,
            positions: w.get(
                "embeddings.position_embeddings.weight",
                config.max_position_embeddings * h,
            )?,
            token_type: token_types[..h].to_vec(),
            embed_norm: w.norm("embeddings.LayerNorm", h)?,
            layers,
            matmul: Matmul::new(threads),
            scratch: Scratch::default(),
        })
    }

    /// The last hidden states of `sequences` (token ids each), packed end to end:
    /// `Σ len × hidden` floats.
    pub fn forward(&mut self, sequences: &[&[u32]]) -> Result<Vec<f32>> {
        let h = self.hidden;
        let total: usize = sequences.iter().map(|s| s.len()).sum();
        let mut x = vec![0.0f32; total * h];
        let mut spans = Vec::with_capacity(sequences.len());
        let mut at = 0;
        for ids in sequences {
            if ids.len() > self.max_positions {
                return Err(EngineError::InvalidRequest(format!(
                    "{} tokens exceed the model's {} positions",
                    ids.len(),
                    self.max_positions
                )));
            }
            for (p, &id) in ids.iter().enumerate() {
                let id = id as usize;
                if id >= self.vocab {
                    return Err(EngineError::Inference(format!(
                        "token id {id} is out of range"
                    )));
                }
                let row = &mut x[(at + p) * h..(at + p + 1) * h];
                let (word, position) = (&self.word[id * h..], &self.positions[p * h..]);
                for i in 0..h {
                    row[i] = word[i] + position[i] + self.token_type[i];
                }
                layer_norm(row, &self.embed_norm, self.eps);
            }
            spans.push(at..at + ids.len());
            at += ids.len();
        }
        for layer in 0..self.layers.len() {
            self.layer(layer, &mut x, total, &spans)?;
        }
        Ok(x)
    }

    fn layer(
        &mut self,
        index: usize,
        x: &mut [f32],
        rows: usize,
        spans: &[std::ops::Range<usize>],
    ) -> Result<()> {
        let (h, eps, activation) = (self.hidden, self.eps, self.activation);
        let layer = &self.layers[index];
        let s = &mut self.scratch;
        self.matmul
            .forward(&layer.qkv, x, rows, &mut s.qkv)
            .map_err(quant)?;
        add_bias(&mut s.qkv, &layer.qkv_bias);
        // Attention writes every row's heads: old contents may stay.
        s.context.resize(rows * h, 0.0);
        attention(
            self.matmul.pool(),
            &s.qkv,
            &mut s.context,
            spans,
            self.heads,
            self.head_dim,
        )?;
        self.matmul
            .forward(&layer.attention_out, &s.context, rows, &mut s.projected)
            .map_err(quant)?;
        residual_norm(
            x,
            &s.projected,
            &layer.attention_out_bias,
            &layer.attention_norm,
            eps,
        );
        self.matmul
            .forward(&layer.up, x, rows, &mut s.up)
            .map_err(quant)?;
        let inner = layer.up_bias.len();
        let up_bias = &layer.up_bias;
        let up = pool::SharedRows::new(&mut s.up);
        self.matmul
            .pool()
            .run(&|share, shares| {
                for r in pool::share_range(rows, share, shares) {
                    // SAFETY: each share takes its own rows.
                    let row = unsafe { up.slice(r * inner, inner) };
                    activate(row, up_bias, activation);
                }
            })
            .map_err(|_| EngineError::Inference("an encoder thread failed".into()))?;
        self.matmul
            .forward(&layer.down, &s.up, rows, &mut s.projected)
            .map_err(quant)?;
        residual_norm(x, &s.projected, &layer.down_bias, &layer.output_norm, eps);
        Ok(())
    }
}

/// `row ← act(row + bias)`, one loop per activation so each vectorizes.
fn activate(row: &mut [f32], bias: &[f32], activation: HiddenAct) {
    let pairs = row.iter_mut().zip(bias);
    match activation {
        HiddenAct::Gelu => pairs.for_each(|(v, b)| *v = gelu(*v + b)),
        HiddenAct::GeluApproximate => pairs.for_each(|(v, b)| {
            let x = *v + b;
            let y = 0.797_884_6 * (x + 0.044_715 * x * x * x);
            *v = 0.5 * x * (2.0 - 2.0 / (exp(2.0 * y) + 1.0));
        }),
        HiddenAct::Relu => pairs.for_each(|(v, b)| *v = (*v + b).max(0.0)),
    }
}

/// `x ← norm(x + out + bias)`, row by row (`bias.len()` wide).
fn residual_norm(x: &mut [f32], out: &[f32], bias: &[f32], norm: &LayerNorm, eps: f32) {
    let h = bias.len();
    for (row, out) in x.chunks_exact_mut(h).zip(out.chunks_exact(h)) {
        for ((a, b), c) in row.iter_mut().zip(out).zip(bias) {
            *a += b + c;
        }
        layer_norm(row, norm, eps);
    }
}

fn add_bias(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_exact_mut(bias.len()) {
        for (v, b) in row.iter_mut().zip(bias) {
            *v += b;
        }
    }
}

/// `(x − mean) / √(var + ε) · w + b` over one row, sums in 16 fixed lanes.
fn layer_norm(x: &mut [f32], norm: &LayerNorm, eps: f32) {
    let n = x.len() as f32;
    let mean = lane_sum(x, |v| v) / n;
    let var = lane_sum(x, |v| (v - mean) * (v - mean)) / n;
    let inv = 1.0 / (var + eps).sqrt();
    for ((v, w), b) in x.iter_mut().zip(&norm.weight).zip(&norm.bias) {
        *v = (*v - mean) * inv * w + b;
    }
}

#[inline(always)]
fn lane_sum(x: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut lanes = [0.0f32; 16];
    let chunks = x.chunks_exact(16);
    let tail = chunks.remainder();
    for chunk in chunks {
        for i in 0..16 {
            lanes[i] += f(chunk[i]);
        }
    }
    for (i, &v) in tail.iter().enumerate() {
        lanes[i] += f(v);
    }
    lanes.iter().sum()
}

/// Bidirectional attention within each span: `qkv` rows are `[q | k | v]` (3 · hidden),
/// `context` rows get the heads' weighted values side by side.
fn attention(
    pool: &pool::ThreadPool,
    qkv: &[f32],
    context: &mut [f32],
    spans: &[std::ops::Range<usize>],
    heads: usize,
    head_dim: usize,
) -> Result<()> {
    let out = pool::SharedRows::new(context);
    let tasks = spans.len() * heads;
    #[cfg(target_arch = "x86_64")]
    let wide = std::arch::is_x86_feature_detected!("avx512f");
    pool.run(&|share, shares| {
        let mut scratch = HeadScratch::default();
        // Interleaved, not contiguous: a batch is sorted by length.
        for task in (share..tasks).step_by(shares) {
            let unit = Head {
                qkv,
                span: spans[task / heads].clone(),
                head: task % heads,
                heads,
                head_dim,
            };
            #[cfg(target_arch = "x86_64")]
            if wide {
                // SAFETY: AVX-512 F is available; `out` as below.
                unsafe { attend_avx512(&unit, &mut scratch, &out) };
                continue;
            }
            // SAFETY: each (span, head) task writes only its own rows' head columns.
            unsafe { attend(&unit, &mut scratch, &out) };
        }
    })
    .map_err(|_| EngineError::Inference("an encoder thread failed".into()))
}

/// One head of one sentence.
struct Head<'a> {
    qkv: &'a [f32],
    span: std::ops::Range<usize>,
    head: usize,
    heads: usize,
    head_dim: usize,
}

#[derive(Default)]
struct HeadScratch {
    scores: Vec<f32>,
    keys: Vec<f32>,
    acc: Vec<f32>,
}

/// The same loops compiled for 512-bit vectors (lane-wise, so the same bits).
///
/// # Safety
/// AVX-512 F must be available; see `attend`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn attend_avx512(unit: &Head, scratch: &mut HeadScratch, out: &pool::SharedRows<f32>) {
    unsafe { attend(unit, scratch, out) }
}

/// Positions whose scores are summed together in registers; a sentence's last positions
/// go in blocks of `NARROW` (short sentences are common, and every block costs a pass
/// over the query).
const POSITIONS: usize = 64;
const NARROW: usize = 16;

/// # Safety
/// No other thread writes this head's columns of the span's rows in `out`.
#[inline(always)]
unsafe fn attend(unit: &Head, scratch: &mut HeadScratch, out: &pool::SharedRows<f32>) {
    let (qkv, span, head, head_dim) = (unit.qkv, unit.span.clone(), unit.head, unit.head_dim);
    let h = unit.heads * head_dim;
    let scale = 1.0 / (head_dim as f32).sqrt();
    let len = span.len();
    // Keys transposed (`head_dim × stride`, zero past `len`): a query's scores are then
    // multiply-adds along contiguous positions.
    let stride = len.next_multiple_of(NARROW);
    let (scores, keys, acc) = (&mut scratch.scores, &mut scratch.keys, &mut scratch.acc);
    keys.clear();
    keys.resize(head_dim * stride, 0.0);
    let column = |row: usize, part: usize| {
        let at = row * 3 * h + part * h + head * head_dim;
        &qkv[at..at + head_dim]
    };
    for (j, row) in span.clone().enumerate() {
        for (d, &k) in column(row, 1).iter().enumerate() {
            keys[d * stride + j] = k;
        }
    }
    scores.resize(stride, 0.0);
    acc.resize(head_dim, 0.0);
    for i in span.clone() {
        let q = column(i, 0);
        let mut block = 0;
        while block < stride {
            // Each score is the same sum over `d` in order whatever the block width.
            if stride - block >= POSITIONS {
                position_block::<POSITIONS>(q, scale, keys, stride, block, scores);
                block += POSITIONS;
            } else {
                position_block::<NARROW>(q, scale, keys, stride, block, scores);
                block += NARROW;
            }
        }
        let live = &mut scores[..len];
        let mut maxes = [f32::NEG_INFINITY; 16];
        for (t, &s) in live.iter().enumerate() {
            maxes[t % 16] = maxes[t % 16].max(s);
        }
        let max = maxes.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        live.iter_mut().for_each(|s| *s = exp(*s - max));
        let sum = lane_sum(live, |v| v);
        let values = span.clone().map(|j| column(j, 2));
        // Every dimension of the head in registers at once: independent sums, each over
        // the positions in order.
        match head_dim {
            32 => weighted::<32>(values, live, acc),
            64 => weighted::<64>(values, live, acc),
            _ => {
                acc.fill(0.0);
                for (v, &p) in values.zip(live.iter()) {
                    for (a, &x) in acc.iter_mut().zip(v) {
                        *a += p * x;
                    }
                }
            }
        }
        // SAFETY: the caller's contract.
        let row = unsafe { out.slice(i * h + head * head_dim, head_dim) };
        let inv = 1.0 / sum;
        for (o, a) in row.iter_mut().zip(acc.iter()) {
            *o = a * inv;
        }
    }
}

/// Scores of positions `block..block + W` for query `q`.
#[inline(always)]
fn position_block<const W: usize>(
    q: &[f32],
    scale: f32,
    keys: &[f32],
    stride: usize,
    block: usize,
    scores: &mut [f32],
) {
    let mut sums = [0.0f32; W];
    for (d, &qd) in q.iter().enumerate() {
        let qd = qd * scale;
        let k = &keys[d * stride + block..d * stride + block + W];
        for t in 0..W {
            sums[t] += qd * k[t];
        }
    }
    scores[block..block + W].copy_from_slice(&sums);
}

/// `acc = Σ_j p_j · v_j` for a head of `D` dimensions.
#[inline(always)]
fn weighted<'a, const D: usize>(
    values: impl Iterator<Item = &'a [f32]>,
    weights: &[f32],
    acc: &mut [f32],
) {
    let mut sums = [0.0f32; D];
    for (v, &p) in values.zip(weights) {
        let v = &v[..D];
        for t in 0..D {
            sums[t] += p * v[t];
        }
    }
    acc[..D].copy_from_slice(&sums);
}
