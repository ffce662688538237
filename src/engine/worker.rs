//! Model worker threads: one named thread per loaded model, fed by a bounded queue. The
//! model is loaded on its own thread; each job runs under `catch_unwind` so a panic in
//! inference fails that request, not the server.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::chat_template::ChatTemplate;
use super::embed::Embedder;
use super::error::{EngineError, Result};
use super::generate::ChatRuntime;
use super::gguf::GgufFile;
use super::handle::{ChatJob, ChatModelHandle, EmbedJob, EmbedModelHandle};
use super::tokenizer::TextTokenizer;
use super::types::{GenerationEvent, ModelInfo, ModelKind};
use super::{device, models, EngineConfig, ModelSpec, OutputLimits};

/// Loads a chat model on a new thread and returns its handle once it is ready.
pub fn spawn_chat(spec: &ModelSpec, config: &EngineConfig) -> Result<ChatModelHandle> {
    let (queue, jobs) = flume::bounded::<ChatJob>(config.queue_depth);
    let (ready, ready_rx) = flume::bounded(1);
    let spec = spec.clone();
    let max_context = config.max_context;
    let limits = config.output_limits.clone();
    std::thread::Builder::new()
        .name(format!("chat-{}", spec.id))
        .spawn(move || match load_chat(&spec, max_context, limits) {
            Ok((runtime, info)) => {
                let _ = ready.send(Ok(info));
                serve_chat(runtime, jobs);
            }
            Err(err) => {
                let _ = ready.send(Err(err));
            }
        })
        .map_err(|e| EngineError::Inference(format!("cannot start model thread: {e}")))?;
    let info = ready_rx
        .recv()
        .map_err(|_| EngineError::WorkerGone(String::new()))??;
    Ok(ChatModelHandle::new(info, queue))
}

fn load_chat(
    spec: &ModelSpec,
    max_context: usize,
    limits: OutputLimits,
) -> Result<(ChatRuntime, ModelInfo)> {
    let gguf = GgufFile::open(&spec.path)?;
    let tokenizer = Arc::new(TextTokenizer::load(&gguf)?);
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
            path: spec.path.clone(),
            reason: e.to_string(),
        })?;
    let (model, architecture) = models::load(gguf, &device::select(), max_context)?;
    let runtime = ChatRuntime::new(model, tokenizer, template, limits)?;
    let info = ModelInfo {
        id: spec.id.clone(),
        kind: ModelKind::Chat,
        architecture,
        context_length: runtime.context_length(),
        path: spec.path.display().to_string(),
        dimensions: None,
    };
    Ok((runtime, info))
}

fn serve_chat(mut runtime: ChatRuntime, jobs: flume::Receiver<ChatJob>) {
    for job in jobs.iter() {
        if job.cancel.load(Ordering::Relaxed) {
            continue;
        }
        let events = job.events.clone();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let mut emit = |event: GenerationEvent| {
                let sent = events.send(Ok(event)).is_ok();
                if !sent {
                    job.cancel.store(true, Ordering::Relaxed);
                }
                sent
            };
            runtime.generate(&job.request, &job.cancel, &mut emit)
        }));
        let result = match outcome {
            Ok(result) => result,
            Err(_) => {
                runtime.reset();
                Err(EngineError::Inference(
                    "the model thread panicked; the request was dropped".into(),
                ))
            }
        };
        let _ = match result {
            Ok(summary) => job.events.send(Ok(GenerationEvent::Done(summary))),
            Err(err) => job.events.send(Err(err)),
        };
    }
}

/// Loads an embedding model on a new thread and returns its handle once it is ready.
pub fn spawn_embed(spec: &ModelSpec, config: &EngineConfig) -> Result<EmbedModelHandle> {
    let (queue, jobs) = flume::bounded::<EmbedJob>(config.queue_depth);
    let (ready, ready_rx) = flume::bounded(1);
    let spec = spec.clone();
    std::thread::Builder::new()
        .name(format!("embed-{}", spec.id))
        .spawn(
            move || match Embedder::load(&spec.path, &device::select()) {
                Ok(embedder) => {
                    let info = ModelInfo {
                        id: spec.id.clone(),
                        kind: ModelKind::Embedding,
                        architecture: "bert".into(),
                        context_length: embedder.max_tokens,
                        path: spec.path.display().to_string(),
                        dimensions: Some(embedder.dimensions),
                    };
                    let _ = ready.send(Ok(info));
                    serve_embed(embedder, jobs);
                }
                Err(err) => {
                    let _ = ready.send(Err(err));
                }
            },
        )
        .map_err(|e| EngineError::Inference(format!("cannot start model thread: {e}")))?;
    let info = ready_rx
        .recv()
        .map_err(|_| EngineError::WorkerGone(String::new()))??;
    Ok(EmbedModelHandle::new(info, queue))
}

fn serve_embed(embedder: Embedder, jobs: flume::Receiver<EmbedJob>) {
    for job in jobs.iter() {
        if job.cancel.load(Ordering::Relaxed) {
            continue;
        }
        let cancelled = || job.cancel.load(Ordering::Relaxed);
        let result = catch_unwind(AssertUnwindSafe(|| embedder.embed(&job.inputs, &cancelled)))
            .unwrap_or_else(|_| {
                Err(EngineError::Inference(
                    "the embedding thread panicked".into(),
                ))
            });
        let _ = job.reply.send(result);
    }
}
