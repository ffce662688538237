//! `warden bench inference|embed|serve|upstream --json`: throughput figures of the loaded models, one JSON
//! object per run. The same prompt file feeds `tests/bench/compare.py`'s llama.cpp run.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Subcommand;
use serde_json::json;

use crate::config::{ModelFlags, Needs};
use crate::engine::{
    ChatMessage, ChatModelHandle, ChatRequest, GenerationEvent, GenerationSummary, Role,
    SamplingParams,
};

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Prefill and decode speed of the chat model.
    Inference {
        /// Print JSON (the only output format; kept for clarity in scripts).
        #[arg(long)]
        json: bool,
        /// Prompt text (≈500 tokens by default).
        #[arg(long, default_value = "tests/bench/prompt.txt")]
        prompt_file: PathBuf,
        /// Tokens to decode.
        #[arg(long, default_value_t = 128)]
        decode_tokens: usize,
        /// Also decode this many requests at once (each its own question after the shared
        /// prompt; at most `--max-batch`) and report their combined decode speed:
        /// continuous batching's gain. 1: off.
        #[arg(long, default_value_t = 1)]
        batch: usize,
        #[command(flatten)]
        models: ModelFlags,
    },
    /// Concurrent conversations against a server started for the run: runs/s, TTFT, RSS.
    Serve(super::bench_serve::ServeBenchArgs),
    /// The upstream path's cost: the same streamed request straight to an upstream engine
    /// and through a Warden using it (time to first token, decode rate).
    Upstream(super::bench_upstream::UpstreamBenchArgs),
    /// Context envelope build time and tokens per part for 10, 100 and 300 turns.
    Context(super::bench_context::ContextBenchArgs),
    /// Sentences per second of the embedding model.
    Embed {
        #[arg(long)]
        json: bool,
        #[arg(long, default_value_t = 256)]
        sentences: usize,
        #[command(flatten)]
        models: ModelFlags,
    },
}

pub fn run(command: BenchCommand) -> anyhow::Result<ExitCode> {
    let report = match command {
        BenchCommand::Inference {
            prompt_file,
            decode_tokens,
            batch,
            models,
            ..
        } => inference(&prompt_file, decode_tokens, batch, &models)?,
        BenchCommand::Embed {
            sentences, models, ..
        } => embed(sentences, &models)?,
        BenchCommand::Serve(args) => return super::bench_serve::run(args),
        BenchCommand::Upstream(args) => return super::bench_upstream::run(args),
        BenchCommand::Context(args) => return super::bench_context::run(args),
    };
    println!("{report}");
    Ok(ExitCode::SUCCESS)
}

fn inference(
    prompt_file: &PathBuf,
    decode_tokens: usize,
    batch: usize,
    flags: &ModelFlags,
) -> anyhow::Result<serde_json::Value> {
    if batch == 0 || batch > flags.max_batch {
        anyhow::bail!(
            "--batch must be between 1 and --max-batch ({}): more would wait in the queue, not decode together",
            flags.max_batch
        );
    }
    let prompt = std::fs::read_to_string(prompt_file)
        .map_err(|e| anyhow::anyhow!("cannot read prompt file {}: {e}", prompt_file.display()))?;
    let engine = super::load_engine(flags, Needs::Chat)?;
    let Some(model) = engine.chat_model(None) else {
        anyhow::bail!("no chat model loaded")
    };
    // Warm-up with a different conversation, so the measured prompt is not in the cache.
    timed(
        model,
        vec![
            ChatMessage::new(Role::System, "warm-up"),
            ChatMessage::new(Role::User, "hello"),
        ],
        8,
    )?;
    let first = vec![ChatMessage::new(Role::User, prompt.trim())];
    let (summary, ttft_ms, answer) = timed(model, first.clone(), decode_tokens)?;
    let prefilled = summary.prompt_tokens - summary.cached_prompt_tokens;
    // A follow-up that extends the conversation reuses the cached prefix.
    let mut follow_up = first;
    follow_up.push(ChatMessage::new(Role::Assistant, answer));
    follow_up.push(ChatMessage::new(
        Role::User,
        "Summarise that in one sentence.",
    ));
    let (again, follow_up_ttft_ms, _) = timed(model, follow_up, 1)?;
    let mut report = json!({
        "benchmark": "inference",
        "model": model.info().id,
        "threads": crate::engine::inference_threads(),
        "prompt_tokens": summary.prompt_tokens,
        "prefill_tokens": prefilled,
        "prefill_tokens_per_s": per_second(prefilled, summary.prefill_ms),
        "ttft_ms": ttft_ms,
        "decode_tokens": summary.completion_tokens,
        "decode_tokens_per_s": per_second(summary.completion_tokens, summary.decode_ms),
        "follow_up_prompt_tokens": again.prompt_tokens,
        "follow_up_cached_tokens": again.cached_prompt_tokens,
        "follow_up_ttft_ms": follow_up_ttft_ms,
    });
    if batch > 1 {
        report["batch"] = batched(model, prompt.trim(), decode_tokens, batch)?;
    }
    Ok(report)
}

/// `batch` requests submitted together, each the shared prompt plus its own question:
/// their decode tokens per second together (the tokens of all over the mean decode time).
fn batched(
    model: &ChatModelHandle,
    prompt: &str,
    tokens: usize,
    batch: usize,
) -> anyhow::Result<serde_json::Value> {
    let started = Instant::now();
    let summaries = std::thread::scope(|scope| {
        let runs: Vec<_> = (0..batch)
            .map(|i| {
                let messages = vec![
                    ChatMessage::new(Role::System, prompt),
                    ChatMessage::new(Role::User, format!("Question {i}: what comes next?")),
                ];
                scope.spawn(move || timed(model, messages, tokens))
            })
            .collect();
        runs.into_iter()
            .map(|run| match run.join() {
                Ok(result) => result.map(|(summary, _, _)| summary),
                Err(_) => Err(anyhow::anyhow!("a batched request's thread panicked")),
            })
            .collect::<anyhow::Result<Vec<_>>>()
    })?;
    let wall_ms = started.elapsed().as_secs_f64() * 1e3;
    let completion: usize = summaries.iter().map(|s| s.completion_tokens).sum();
    let decode_ms = summaries.iter().map(|s| s.decode_ms).sum::<f64>() / batch as f64;
    Ok(json!({
        "requests": batch,
        "wall_ms": wall_ms,
        "decode_tokens": completion,
        "decode_tokens_per_s": per_second(completion, decode_ms),
        "tokens_per_s_overall": per_second(completion, wall_ms),
    }))
}

/// Runs one greedy generation of exactly `tokens` tokens; returns summary, TTFT, text.
fn timed(
    model: &ChatModelHandle,
    messages: Vec<ChatMessage>,
    tokens: usize,
) -> anyhow::Result<(GenerationSummary, f64, String)> {
    let request = ChatRequest {
        messages,
        sampling: SamplingParams::greedy(),
        max_tokens: Some(tokens),
        ignore_eos: true,
        ..ChatRequest::default()
    };
    let started = Instant::now();
    let mut stream = model.submit(request)?;
    let mut ttft_ms = None;
    let mut text = String::new();
    while let Some(event) = stream.next_blocking() {
        match event? {
            GenerationEvent::Delta(delta) => {
                ttft_ms.get_or_insert_with(|| started.elapsed().as_secs_f64() * 1e3);
                text.push_str(&delta);
            }
            GenerationEvent::Done(summary) => {
                let ttft = ttft_ms.unwrap_or(summary.prefill_ms);
                return Ok((summary, ttft, text));
            }
        }
    }
    anyhow::bail!("the generation ended without a summary")
}

fn embed(count: usize, flags: &ModelFlags) -> anyhow::Result<serde_json::Value> {
    if count == 0 {
        anyhow::bail!("--sentences must be ≥ 1");
    }
    let engine = super::load_engine(flags, Needs::Embedding)?;
    let Some(model) = engine.embed_model(None) else {
        anyhow::bail!("no embedding model loaded")
    };
    let sentences: Vec<String> = (0..count).map(bench_sentence).collect();
    model.embed_blocking(sentences[..crate::engine::EMBED_BATCH_SIZE.min(count)].to_vec())?;
    let started = Instant::now();
    let result = model.embed_blocking(sentences.clone())?;
    let seconds = started.elapsed().as_secs_f64();
    let precision = model.info().precision.clone();
    let mut report = json!({
        "benchmark": "embed",
        "model": model.info().id,
        "precision": precision,
        "threads": crate::engine::inference_threads(),
        "batch": crate::engine::EMBED_BATCH_SIZE,
        "sentences": count,
        "tokens": result.prompt_tokens,
        "sentences_per_s": count as f64 / seconds,
    });
    if precision.as_deref() != Some("f32") {
        // The same sentences in full precision, for the cosine of each pair.
        drop(engine);
        let full = ModelFlags {
            embed_precision: crate::engine::EmbedPrecision::F32,
            ..flags.clone()
        };
        let engine = super::load_engine(&full, Needs::Embedding)?;
        let Some(reference) = engine.embed_model(None) else {
            anyhow::bail!("no embedding model loaded")
        };
        let expected = reference.embed_blocking(sentences)?;
        let cosines: Vec<f64> = result
            .vectors
            .iter()
            .zip(&expected.vectors)
            .map(|(a, b)| cosine(a, b))
            .collect();
        let min = cosines.iter().copied().fold(f64::INFINITY, f64::min);
        let mean = cosines.iter().sum::<f64>() / cosines.len().max(1) as f64;
        report["cosine_vs_f32"] = json!({"min": min, "mean": mean});
    }
    Ok(report)
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let norm = |v: &[f32]| v.iter().map(|x| *x as f64 * *x as f64).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b)).max(1e-30)
}

/// Varied, realistic ops sentences of different lengths.
fn bench_sentence(i: usize) -> String {
    const SUBJECTS: [&str; 8] = [
        "The primary database",
        "Nginx on the edge proxy",
        "The connection pool of the billing service",
        "A slow query on the orders table",
        "The disk on the log volume",
        "The last deploy of the API gateway",
        "Replication between the two data centres",
        "The nightly batch job",
    ];
    const PREDICATES: [&str; 8] = [
        "reported deadlocks between two transactions updating the same rows",
        "returned 502 errors after the upstream timed out",
        "was exhausted because connections were not returned after errors",
        "took more than thirty seconds because an index was missing",
        "filled up and writes started to fail with no space left on device",
        "introduced a configuration change that doubled the error rate",
        "lagged by several minutes during the peak hour",
        "held a lock that blocked the checkout flow",
    ];
    let repeat = 1 + i % 3;
    let base = format!(
        "{} {} (case {i}).",
        SUBJECTS[i % 8],
        PREDICATES[(i / 8) % 8]
    );
    vec![base; repeat].join(" ")
}

fn per_second(count: usize, millis: f64) -> f64 {
    if millis <= 0.0 {
        return 0.0;
    }
    count as f64 * 1e3 / millis
}
