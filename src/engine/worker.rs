//! Model worker threads: one named thread per loaded model, fed by a bounded queue. The
//! model is loaded on its own thread; a chat model's thread decodes up to `--max-batch`
//! requests together (continuous batching). Model calls run under `catch_unwind` so a
//! panic in inference fails the requests it touched, not the server.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::chat_template::ChatTemplate;
use super::embed::Embedder;
use super::error::{EngineError, Result};
use super::generate::{ChatRuntime, Emit, Sequence};
use super::gguf::GgufFile;
use super::handle::{ChatJob, ChatModelHandle, EmbedJob, EmbedModelHandle};
use super::tokenizer::TextTokenizer;
use super::types::{GenerationEvent, GenerationSummary, ModelInfo, ModelKind};
use super::{device, models, EngineConfig, ModelSpec, OutputLimits};
use crate::metrics::{GenerationReport, Metrics};

/// Loads a chat model on a new thread and returns its handle once it is ready.
pub fn spawn_chat(
    spec: &ModelSpec,
    config: &EngineConfig,
    metrics: Arc<Metrics>,
) -> Result<ChatModelHandle> {
    let (queue, jobs) = flume::bounded::<ChatJob>(config.queue_depth);
    let (ready, ready_rx) = flume::bounded(1);
    let spec = spec.clone();
    let max_context = config.max_context;
    let max_batch = config.max_batch;
    let limits = config.output_limits.clone();
    std::thread::Builder::new()
        .name(format!("chat-{}", spec.id))
        .spawn(move || match load_chat(&spec, max_context, limits) {
            Ok((runtime, info, tokenizer)) => {
                let _ = ready.send(Ok((info, tokenizer)));
                serve_chat(runtime, jobs, &spec.id, &metrics, max_batch);
            }
            Err(err) => {
                let _ = ready.send(Err(err));
            }
        })
        .map_err(|e| EngineError::Inference(format!("cannot start model thread: {e}")))?;
    let (info, tokenizer) = ready_rx
        .recv()
        .map_err(|_| EngineError::WorkerGone(String::new()))??;
    Ok(ChatModelHandle::new(info, queue, tokenizer))
}

fn load_chat(
    spec: &ModelSpec,
    max_context: usize,
    limits: OutputLimits,
) -> Result<(ChatRuntime, ModelInfo, Arc<TextTokenizer>)> {
    let gguf = GgufFile::open(&spec.path)?;
    let (tokenizer, template) = tokenizer_and_template(&gguf, &spec.path)?;
    let (model, architecture) = models::load(gguf, &device::select(), max_context)?;
    let runtime = ChatRuntime::new(model, tokenizer.clone(), template, limits)?;
    let info = ModelInfo {
        id: spec.id.clone(),
        kind: ModelKind::Chat,
        architecture,
        context_length: runtime.context_length(),
        path: spec.path.display().to_string(),
        dimensions: None,
        precision: None,
    };
    Ok((runtime, info, tokenizer))
}

/// A GGUF's tokenizer and chat template (with its BOS and EOS texts).
pub(super) fn tokenizer_and_template(
    gguf: &GgufFile,
    path: &std::path::Path,
) -> Result<(Arc<TextTokenizer>, ChatTemplate)> {
    let tokenizer = Arc::new(TextTokenizer::load(gguf)?);
    let token_text = |id: Option<u64>| {
        id.map(|id| {
            String::from_utf8_lossy(tokenizer.token_bytes(id as u32))
                .trim_start_matches('\u{FFFD}')
                .to_string()
        })
        .unwrap_or_default()
    };
    let bos = token_text(gguf.optional_u64("tokenizer.ggml.bos_token_id"));
    let eos = token_text(gguf.optional_u64("tokenizer.ggml.eos_token_id"));
    let template = ChatTemplate::new(gguf.optional_string("tokenizer.chat_template"), bos, eos)
        .map_err(|e| EngineError::BadModelFile {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    Ok((tokenizer, template))
}

/// A request being decoded, with where its events go.
struct Active {
    job: ChatJob,
    sequence: Sequence,
    first_text: Option<Instant>,
}

/// The continuous-batching loop: requests join at step boundaries while a sequence slot is
/// free, every step decodes all of them together and prefills the prompts of those that
/// joined, and finished or cancelled ones leave.
fn serve_chat(
    mut runtime: ChatRuntime,
    jobs: flume::Receiver<ChatJob>,
    model: &str,
    metrics: &Metrics,
    max_batch: usize,
) {
    runtime.set_slots(max_batch);
    let mut active: Vec<Active> = Vec::new();
    loop {
        while runtime.has_free_slot() {
            let job = if active.is_empty() {
                match jobs.recv() {
                    Ok(job) => job,
                    Err(_) => return,
                }
            } else {
                match jobs.try_recv() {
                    Ok(job) => job,
                    Err(_) => break,
                }
            };
            if job.cancel.load(Ordering::Relaxed) {
                continue;
            }
            metrics.model_busy(model, 1);
            let started = catch_unwind(AssertUnwindSafe(|| runtime.start(&job.request)));
            match started {
                Ok(Ok(sequence)) => active.push(Active {
                    job,
                    sequence,
                    first_text: None,
                }),
                Ok(Err(err)) => {
                    metrics.model_busy(model, -1);
                    let _ = job.events.send(Err(err));
                }
                Err(_) => {
                    metrics.model_busy(model, -1);
                    let _ = job.events.send(Err(panicked()));
                    fail_all(&mut runtime, &mut active, model, metrics);
                }
            }
        }
        let stepped = catch_unwind(AssertUnwindSafe(|| step(&mut runtime, &mut active)));
        match stepped {
            Ok(Ok(())) => {}
            Ok(Err(err)) => {
                let message = err.to_string();
                for a in active.drain(..) {
                    metrics.model_busy(model, -1);
                    let _ = a
                        .job
                        .events
                        .send(Err(EngineError::Inference(message.clone())));
                }
                runtime.reset();
            }
            Err(_) => fail_all(&mut runtime, &mut active, model, metrics),
        }
        let mut index = 0;
        while index < active.len() {
            if !active[index].sequence.finished() {
                index += 1;
                continue;
            }
            let Active {
                job,
                sequence,
                mut first_text,
            } = active.swap_remove(index);
            let result = catch_unwind(AssertUnwindSafe(|| {
                let mut emit = emitter(&job, &mut first_text);
                runtime.finish(sequence, &mut emit)
            }))
            .unwrap_or_else(|_| Err(panicked()));
            metrics.model_busy(model, -1);
            if let Ok(summary) = &result {
                metrics.generation(model, &report(summary, job.submitted, first_text));
            }
            let _ = match result {
                Ok(summary) => job.events.send(Ok(GenerationEvent::Done(summary))),
                Err(err) => job.events.send(Err(err)),
            };
        }
    }
}

/// One decode step of every active sequence.
fn step(runtime: &mut ChatRuntime, active: &mut [Active]) -> Result<()> {
    let mut parts: Vec<(&mut Sequence, Box<Emit>, &AtomicBool)> = active
        .iter_mut()
        .map(|a| {
            let Active {
                job,
                sequence,
                first_text,
            } = a;
            let emit: Box<Emit> = Box::new(emitter(job, first_text));
            (sequence, emit, &*job.cancel)
        })
        .collect();
    let mut batch: Vec<(&mut Sequence, &mut Emit, &AtomicBool)> = parts
        .iter_mut()
        .map(|(s, e, c)| (&mut **s, &mut **e, *c))
        .collect();
    runtime.step(&mut batch)
}

/// Sends a job's events; a gone receiver cancels the job. Notes when text first flows.
fn emitter<'a>(
    job: &'a ChatJob,
    first_text: &'a mut Option<Instant>,
) -> impl FnMut(GenerationEvent) -> bool + 'a {
    move |event: GenerationEvent| {
        if first_text.is_none() && matches!(&event, GenerationEvent::Delta(_)) {
            *first_text = Some(Instant::now());
        }
        let sent = job.events.send(Ok(event)).is_ok();
        if !sent {
            job.cancel.store(true, Ordering::Relaxed);
        }
        sent
    }
}

/// After a panic the caches may be inconsistent: every running request fails.
fn fail_all(runtime: &mut ChatRuntime, active: &mut Vec<Active>, model: &str, metrics: &Metrics) {
    runtime.reset();
    for a in active.drain(..) {
        metrics.model_busy(model, -1);
        let _ = a.job.events.send(Err(panicked()));
    }
}

fn panicked() -> EngineError {
    EngineError::Inference("the model thread panicked; the request was dropped".into())
}

/// What a finished generation tells the metrics.
fn report(
    summary: &GenerationSummary,
    submitted: Instant,
    first_text: Option<Instant>,
) -> GenerationReport {
    let decode_secs = summary.decode_ms / 1000.0;
    GenerationReport {
        prompt_tokens: summary.prompt_tokens as u64,
        generated_tokens: summary.completion_tokens as u64,
        time_to_first_token: first_text.map(|at| at.saturating_duration_since(submitted)),
        decode_tokens_per_sec: (summary.completion_tokens > 0 && decode_secs > 0.0)
            .then(|| summary.completion_tokens as f64 / decode_secs),
    }
}

/// Loads an embedding model on a new thread and returns its handle once it is ready.
pub fn spawn_embed(
    spec: &ModelSpec,
    config: &EngineConfig,
    metrics: Arc<Metrics>,
) -> Result<EmbedModelHandle> {
    let (queue, jobs) = flume::bounded::<EmbedJob>(config.queue_depth);
    let (ready, ready_rx) = flume::bounded(1);
    let spec = spec.clone();
    let precision = config.embed_precision;
    std::thread::Builder::new()
        .name(format!("embed-{}", spec.id))
        .spawn(move || {
            match Embedder::load(&spec.path, &device::select(), precision, device::threads()) {
                Ok(embedder) => {
                    let info = ModelInfo {
                        id: spec.id.clone(),
                        kind: ModelKind::Embedding,
                        architecture: "bert".into(),
                        context_length: embedder.max_tokens,
                        path: spec.path.display().to_string(),
                        dimensions: Some(embedder.dimensions),
                        precision: Some(embedder.precision.into()),
                    };
                    let _ = ready.send(Ok(info));
                    serve_embed(embedder, jobs, &spec.id, &metrics);
                }
                Err(err) => {
                    let _ = ready.send(Err(err));
                }
            }
        })
        .map_err(|e| EngineError::Inference(format!("cannot start model thread: {e}")))?;
    let info = ready_rx
        .recv()
        .map_err(|_| EngineError::WorkerGone(String::new()))??;
    Ok(EmbedModelHandle::new(info, queue))
}

fn serve_embed(
    mut embedder: Embedder,
    jobs: flume::Receiver<EmbedJob>,
    model: &str,
    metrics: &Metrics,
) {
    for job in jobs.iter() {
        if job.cancel.load(Ordering::Relaxed) {
            continue;
        }
        metrics.model_busy(model, 1);
        let cancelled = || job.cancel.load(Ordering::Relaxed);
        let result = catch_unwind(AssertUnwindSafe(|| embedder.embed(&job.inputs, &cancelled)))
            .unwrap_or_else(|_| {
                Err(EngineError::Inference(
                    "the embedding thread panicked".into(),
                ))
            });
        metrics.model_busy(model, -1);
        let _ = job.reply.send(result);
    }
}
