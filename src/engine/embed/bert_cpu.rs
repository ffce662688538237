//! A BERT encoder on Warden's own 8-bit kernels for CPUs: the weights of every linear
//! layer quantized once at load with a scale per 32 (the three attention projections fused
//! into one product), sentences packed end to end with no padding, attention per sentence
//! and head on the thread pool, GELU and layer norms in vectorizable loops. A sentence's
//! vector is the same bits whatever else shares its batch.

use std::collections::HashMap;

use candle_core::{DType, Tensor};
use candle_transformers::models::bert::{Config, HiddenAct, PositionEmbeddingType};

use crate::engine::error::{EngineError, Result};
use crate::engine::fast_math::{exp, gelu, wide};
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
            self.matmul.pool(),
            x,
            &s.projected,
            &layer.attention_out_bias,
            &layer.attention_norm,
            eps,
        )?;
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
                    wide(|| activate(row, up_bias, activation));
                }
            })
            .map_err(|_| EngineError::Inference("an encoder thread failed".into()))?;
        self.matmul
            .forward(&layer.down, &s.up, rows, &mut s.projected)
            .map_err(quant)?;
        residual_norm(
            self.matmul.pool(),
            x,
            &s.projected,
            &layer.down_bias,
            &layer.output_norm,
            eps,
        )?;
        Ok(())
    }
}

/// `row ← act(row + bias)`, one loop per activation so each vectorizes.
#[inline(always)]
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

/// `x ← norm(x + out + bias)`, row by row (`bias.len()` wide), rows shared over the pool.
fn residual_norm(
    pool: &pool::ThreadPool,
    x: &mut [f32],
    out: &[f32],
    bias: &[f32],
    norm: &LayerNorm,
    eps: f32,
) -> Result<()> {
    let h = bias.len();
    let rows = x.len() / h;
    let x = pool::SharedRows::new(x);
    pool.run(&|share, shares| {
        wide(|| {
            for r in pool::share_range(rows, share, shares) {
                // SAFETY: each share takes its own rows.
                let row = unsafe { x.slice(r * h, h) };
                for ((a, b), c) in row.iter_mut().zip(&out[r * h..(r + 1) * h]).zip(bias) {
                    *a += b + c;
                }
                layer_norm(row, norm, eps);
            }
        })
    })
    .map_err(|_| EngineError::Inference("an encoder thread failed".into()))
}

fn add_bias(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_exact_mut(bias.len()) {
        for (v, b) in row.iter_mut().zip(bias) {
            *v += b;
        }
    }
}

/// `(x − mean) / √(var + ε) · w + b` over one row, sums in 16 fixed lanes.
#[inline(always)]
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
    pool.run(&|share, shares| {
        let mut scratch = HeadScratch::default();
        // Interleaved, not contiguous: a batch is sorted by length.
        wide(|| {
            for task in (share..tasks).step_by(shares) {
                let unit = Head {
                    qkv,
                    span: spans[task / heads].clone(),
                    head: task % heads,
                    heads,
                    head_dim,
                };
                // SAFETY: each (span, head) task writes only its own rows' head columns.
                unsafe { attend(&unit, &mut scratch, &out) };
            }
        })
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

/// Positions whose scores are summed together in registers, for two queries at once
/// (independent sums hide the multiply-add latency); a sentence's last positions go in a
/// block as narrow as 16.
const POSITIONS: usize = 48;
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
    scores.resize(2 * stride, 0.0);
    acc.resize(2 * head_dim, 0.0);
    // Queries in pairs (an odd last one paired with itself); each query's every score and
    // sum takes the same steps in the same order as it would alone.
    let mut i = span.start;
    while i < span.end {
        let last = (i + 1).min(span.end - 1);
        let queries = [column(i, 0), column(last, 0)];
        let mut block = 0;
        while block < stride {
            block += match stride - block {
                rest if rest >= POSITIONS => {
                    position_block::<POSITIONS>(queries, scale, keys, stride, block, scores)
                }
                32 => position_block::<32>(queries, scale, keys, stride, block, scores),
                _ => position_block::<NARROW>(queries, scale, keys, stride, block, scores),
            };
        }
        let mut sums = [0.0f32; 2];
        for (q, sum) in sums.iter_mut().enumerate() {
            let live = &mut scores[q * stride..q * stride + len];
            let mut maxes = [f32::NEG_INFINITY; 16];
            for (t, &s) in live.iter().enumerate() {
                maxes[t % 16] = maxes[t % 16].max(s);
            }
            let max = maxes.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            live.iter_mut().for_each(|s| *s = exp(*s - max));
            *sum = lane_sum(live, |v| v);
        }
        let values = span.clone().map(|j| column(j, 2));
        let weights = (&scores[..len], &scores[stride..stride + len]);
        // Every dimension of the head in registers at once: independent sums, each over
        // the positions in order.
        match head_dim {
            32 => weighted::<32>(values, weights, acc),
            64 => weighted::<64>(values, weights, acc),
            _ => {
                acc.fill(0.0);
                for ((v, &p0), &p1) in values.zip(weights.0).zip(weights.1) {
                    let (a0, a1) = acc.split_at_mut(head_dim);
                    for ((a0, a1), &x) in a0.iter_mut().zip(a1.iter_mut()).zip(v) {
                        *a0 += p0 * x;
                        *a1 += p1 * x;
                    }
                }
            }
        }
        for (q, row) in (i..=last).enumerate() {
            // SAFETY: the caller's contract.
            let out = unsafe { out.slice(row * h + head * head_dim, head_dim) };
            let inv = 1.0 / sums[q];
            for (o, a) in out.iter_mut().zip(&acc[q * head_dim..(q + 1) * head_dim]) {
                *o = a * inv;
            }
        }
        i = last + 1;
    }
}

/// Scores of positions `block..block + W` for two queries (rows of `scores`, `stride`
/// apart); returns `W`.
#[inline(always)]
fn position_block<const W: usize>(
    queries: [&[f32]; 2],
    scale: f32,
    keys: &[f32],
    stride: usize,
    block: usize,
    scores: &mut [f32],
) -> usize {
    let mut sums = [[0.0f32; W]; 2];
    for (d, (&a, &b)) in queries[0].iter().zip(queries[1]).enumerate() {
        let (a, b) = (a * scale, b * scale);
        let k = &keys[d * stride + block..d * stride + block + W];
        for t in 0..W {
            sums[0][t] += a * k[t];
            sums[1][t] += b * k[t];
        }
    }
    scores[block..block + W].copy_from_slice(&sums[0]);
    scores[stride + block..stride + block + W].copy_from_slice(&sums[1]);
    W
}

/// `acc = [Σ_j p_j · v_j, Σ_j p'_j · v_j]` for a head of `D` dimensions and two queries'
/// weights.
#[inline(always)]
fn weighted<'a, const D: usize>(
    values: impl Iterator<Item = &'a [f32]>,
    weights: (&[f32], &[f32]),
    acc: &mut [f32],
) {
    let mut sums = [[0.0f32; D]; 2];
    for ((v, &p0), &p1) in values.zip(weights.0).zip(weights.1) {
        let v = &v[..D];
        for t in 0..D {
            sums[0][t] += p0 * v[t];
            sums[1][t] += p1 * v[t];
        }
    }
    acc[..D].copy_from_slice(&sums[0]);
    acc[D..2 * D].copy_from_slice(&sums[1]);
}
