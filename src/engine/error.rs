//! The engine's error type: everything that can go wrong loading a model or running one.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A model file is missing, truncated, malformed or of an unsupported kind.
    #[error("model file {path}: {reason}")]
    BadModelFile { path: PathBuf, reason: String },
    #[error("unsupported model architecture `{0}` (supported: llama, qwen2, qwen3, phi3, gemma3)")]
    UnsupportedArchitecture(String),
    /// The request is invalid for this model (too long, bad schema, bad parameter).
    #[error("{0}")]
    InvalidRequest(String),
    /// The prompt (plus reserved output) does not fit the context window.
    #[error("prompt has {prompt} tokens, model context is {context}")]
    ContextOverflow { prompt: usize, context: usize },
    /// The model's request queue is full; retry later.
    #[error("model `{0}` is busy: request queue full")]
    QueueFull(String),
    /// The worker thread is gone (it crashed or the engine shut down).
    #[error("model `{0}` is not running")]
    WorkerGone(String),
    #[error("inference failed: {0}")]
    Inference(String),
    /// The upstream engine serving the model failed (the message names the kind, never
    /// the endpoint's address).
    #[error("the upstream engine of model `{model}` failed: {message}")]
    Upstream { model: String, message: String },
    /// Every endpoint of an upstream model is failing (circuits open); retry later.
    #[error("every upstream endpoint of model `{0}` is failing; retry later")]
    UpstreamUnavailable(String),
}

impl From<candle_core::Error> for EngineError {
    fn from(err: candle_core::Error) -> Self {
        EngineError::Inference(err.to_string())
    }
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;
