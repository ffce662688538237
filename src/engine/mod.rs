//! The inference engine: loads chat (GGUF) and embedding (BERT safetensors) models, owns
//! each on a dedicated worker thread behind a bounded queue, and answers through handles.
//! Never touches axum or SQLite; nothing here runs on the async runtime.

mod chat_template;
mod constrained;
mod device;
mod embed;
mod embed_tokens;
mod error;
mod fast_math;
mod generate;
mod gguf;
mod handle;
mod kv_cache;
mod models;
mod quant;
mod sampling;
mod schema_bounds;
mod text_stream;
mod tokenizer;
mod types;
mod worker;

use std::path::PathBuf;
use std::sync::Arc;

use crate::metrics::Metrics;

pub use constrained::{bounded_schema, OutputLimits, MAX_FRACTION_DIGITS, MAX_TOOL_CALLS};
pub use embed::{EmbedPrecision, BATCH_SIZE as EMBED_BATCH_SIZE};
pub use embed_tokens::EmbeddingTokenizer;
pub use error::{EngineError, Result};
pub use handle::{
    ChatJob as RemoteJob, ChatModelHandle, EmbedModelHandle, GenerationStream, RemoteChat,
};
pub use types::*;

/// CPU threads inference uses.
pub fn inference_threads() -> usize {
    device::threads()
}

/// One model to load.
#[derive(Debug, Clone)]
pub struct ModelSpec {
    pub id: String,
    pub kind: ModelKind,
    /// A GGUF file for chat models, a folder for embedding models.
    pub path: PathBuf,
}

/// Engine settings, validated by `config`.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub models: Vec<ModelSpec>,
    /// Chat models served by upstream engines; the first is the default chat model.
    pub upstream: crate::upstream::UpstreamConfig,
    /// CPU threads for inference (candle's thread pool).
    pub threads: usize,
    /// Requests that may wait per model before new ones get `QueueFull`.
    pub queue_depth: usize,
    /// Upper bound on the context window, whatever the model allows (memory cap).
    pub max_context: usize,
    /// Requests a chat model decodes together (continuous batching); each holds its own
    /// KV cache of up to `max_context` positions.
    pub max_batch: usize,
    /// Which encoder embedding models use.
    pub embed_precision: EmbedPrecision,
    /// Bounds on what output schemas leave open (constrained decoding).
    pub output_limits: OutputLimits,
}

/// Checks that a model file opens and its tokenizer and template load, without loading
/// weights (cheap: used by `warden models verify`).
pub fn check_model_file(kind: ModelKind, path: &std::path::Path) -> Result<()> {
    match kind {
        ModelKind::Chat => {
            let gguf = gguf::GgufFile::open(path)?;
            let architecture = gguf.architecture()?;
            if !models::SUPPORTED.contains(&architecture.as_str()) {
                return Err(EngineError::UnsupportedArchitecture(architecture));
            }
            tokenizer::TextTokenizer::load(&gguf).map(|_| ())
        }
        ModelKind::Embedding => embed::check_files(path),
    }
}

/// Token ids of `text` under a chat model's tokenizer, without loading its weights. With
/// `chat`, the text is first rendered as a user message through the chat template.
pub fn tokenize_with_model(
    path: &std::path::Path,
    text: &str,
    parse_special: bool,
    chat: bool,
) -> Result<Vec<u32>> {
    let gguf = gguf::GgufFile::open(path)?;
    let tokenizer = tokenizer::TextTokenizer::load(&gguf)?;
    if !chat {
        return tokenizer.encode(text, parse_special);
    }
    let template = chat_template::ChatTemplate::new(
        gguf.optional_string("tokenizer.chat_template"),
        String::new(),
        String::new(),
    )?;
    let mut ids = Vec::new();
    for piece in template.render(&[ChatMessage::new(Role::User, text)], &[])? {
        match piece {
            chat_template::PromptPiece::Template(t) => ids.extend(tokenizer.encode(&t, true)?),
            chat_template::PromptPiece::Content(t) => ids.extend(tokenizer.encode(&t, false)?),
        }
    }
    Ok(ids)
}

/// A small real tokenizer (`tests/data/spm_vocab.gguf`) for handles built in tests.
#[cfg(test)]
pub(crate) fn test_tokenizer() -> Arc<tokenizer::TextTokenizer> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/spm_vocab.gguf");
    let gguf = gguf::GgufFile::open(&path).expect("tests/data/spm_vocab.gguf opens");
    Arc::new(tokenizer::TextTokenizer::load(&gguf).expect("the test vocabulary loads"))
}

/// A model that failed to load, with the reason; the others keep serving.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LoadFailure {
    pub id: String,
    pub path: String,
    pub error: String,
}

/// All loaded models.
pub struct Engine {
    chat: Vec<ChatModelHandle>,
    embed: Vec<EmbedModelHandle>,
    failures: Vec<LoadFailure>,
}

impl Engine {
    /// Loads every model of `config`; a model that fails is recorded, not fatal.
    pub fn load(config: &EngineConfig) -> Engine {
        Self::load_observed(config, Arc::new(Metrics::new()))
    }

    /// `load`, with the models reporting their work (requests in flight, tokens, time to
    /// first token, decode rate) to `metrics`.
    pub fn load_observed(config: &EngineConfig, metrics: Arc<Metrics>) -> Engine {
        device::configure_threads(config.threads);
        let mut engine = Engine {
            chat: Vec::new(),
            embed: Vec::new(),
            failures: Vec::new(),
        };
        for spec in &config.models {
            let loaded =
                match spec.kind {
                    ModelKind::Chat => worker::spawn_chat(spec, config, metrics.clone())
                        .map(|h| engine.chat.push(h)),
                    ModelKind::Embedding => worker::spawn_embed(spec, config, metrics.clone())
                        .map(|h| engine.embed.push(h)),
                };
            if let Err(err) = loaded {
                tracing::error!(model = %spec.id, "failed to load: {err}");
                engine.failures.push(LoadFailure {
                    id: spec.id.clone(),
                    path: spec.path.display().to_string(),
                    error: err.to_string(),
                });
            }
        }
        for (model, url) in config.upstream.endpoints() {
            tracing::info!(model = %model, endpoint = %url, "upstream endpoint configured");
        }
        match crate::upstream::start_chat_models(&config.upstream, &metrics) {
            // Upstream models come first: the first is the default chat model.
            Ok(models) => {
                for (n, model) in models.into_iter().enumerate() {
                    engine.chat.insert(n, model);
                }
            }
            Err(err) => {
                tracing::error!("upstream chat models unavailable: {err}");
                engine.failures.push(LoadFailure {
                    id: "upstream".to_owned(),
                    path: String::new(),
                    error: err,
                });
            }
        }
        engine
    }

    /// The chat model named `id`, or the first one when `id` is `None`.
    pub fn chat_model(&self, id: Option<&str>) -> Option<&ChatModelHandle> {
        match id {
            None => self.chat.first(),
            Some(id) => self.chat.iter().find(|m| m.info().id == id),
        }
    }

    /// The chat models served by upstream engines.
    pub fn remote_chat_models(&self) -> impl Iterator<Item = &ChatModelHandle> {
        self.chat.iter().filter(|m| m.is_remote())
    }

    /// The embedding model named `id`, or the first one when `id` is `None`.
    pub fn embed_model(&self, id: Option<&str>) -> Option<&EmbedModelHandle> {
        match id {
            None => self.embed.first(),
            Some(id) => self.embed.iter().find(|m| m.info().id == id),
        }
    }

    /// Every loaded model, chat models first.
    pub fn models(&self) -> Vec<ModelInfo> {
        let chat = self.chat.iter().map(|m| m.info().clone());
        chat.chain(self.embed.iter().map(|m| m.info().clone()))
            .collect()
    }

    /// `(model, requests waiting in its queue)` for every loaded model.
    pub fn queue_depths(&self) -> Vec<(String, u64)> {
        let chat = self.chat.iter().map(|m| (m.info().id.clone(), m.queued()));
        chat.chain(self.embed.iter().map(|m| (m.info().id.clone(), m.queued())))
            .collect()
    }

    pub fn failures(&self) -> &[LoadFailure] {
        &self.failures
    }
}

/// A chat model's tokenizer read from its GGUF without its weights: counts tokens for an
/// upstream engine serving that model.
pub struct GgufTokenCounter(Arc<tokenizer::TextTokenizer>);

impl GgufTokenCounter {
    pub fn load(path: &std::path::Path) -> Result<GgufTokenCounter> {
        let gguf = gguf::GgufFile::open(path)?;
        Ok(GgufTokenCounter(Arc::new(tokenizer::TextTokenizer::load(
            &gguf,
        )?)))
    }

    /// Tokens of `text` as message content; never fewer than the text has bytes / 4.
    pub fn count(&self, text: &str) -> usize {
        match self.0.encode(text, false) {
            Ok(ids) => ids.len(),
            Err(_) => text.len(),
        }
    }
}
