//! Upstream engines: chat models served by OpenAI-compatible servers the admin configured
//! on the private network (vLLM, TGI, llama.cpp's server, Ollama's `/v1`, another Warden).
//! An upstream model becomes an ordinary `ChatModelHandle`, so the agent, the diagnostic
//! graph and `/v1` use it exactly as they use a local model. Only configured hosts are ever
//! contacted; nothing here runs on the async runtime (each request has threads of its own).

mod chat;
pub mod config;
mod endpoint;
mod error;
mod sse;
mod tls;
mod tokens;
mod wire;

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

pub use chat::UpstreamChat;
pub use config::{ApiKey, UpstreamConfig, UpstreamFlags};
pub use endpoint::{CircuitState, EndpointHealth};
pub use error::ErrorKind;
pub use tokens::estimate as estimate_tokens;

use crate::engine::{ChatModelHandle, ModelInfo, ModelKind};
use crate::metrics::Metrics;
use config::{TokenizerSource, UpstreamModel};
use endpoint::Endpoint;
use tokens::TokenCounter;

/// The context window assumed when neither the models file nor the upstream says.
pub const FALLBACK_CONTEXT_LENGTH: usize = 4096;
/// How long the start-up question about a model's context may take.
const METADATA_TIMEOUT: Duration = Duration::from_secs(5);

/// Starts every configured upstream chat model; the first is the default.
pub fn start_chat_models(
    config: &UpstreamConfig,
    metrics: &Arc<Metrics>,
) -> Result<Vec<ChatModelHandle>, String> {
    config
        .chat
        .iter()
        .map(|model| start_chat_model(model, config.api_key.clone(), metrics.clone()))
        .collect()
}

fn start_chat_model(
    model: &UpstreamModel,
    api_key: Option<ApiKey>,
    metrics: Arc<Metrics>,
) -> Result<ChatModelHandle, String> {
    let named = |err: String| format!("upstream model `{}`: {err}", model.name);
    let endpoints = model
        .endpoints
        .iter()
        .map(|e| Endpoint::new(e.clone(), &model.timeouts, model.breaker, &model.tls).map(Arc::new))
        .collect::<Result<Vec<_>, _>>()
        .map_err(named)?;
    let tokens = match &model.tokenizer {
        TokenizerSource::Gguf(path) => TokenCounter::gguf(path).map_err(named)?,
        TokenizerSource::TokenizerJson(path) => {
            TokenCounter::tokenizer_json(path).map_err(named)?
        }
        TokenizerSource::Estimate => TokenCounter::Estimate,
    };
    let context_length = match model.context_length {
        Some(length) => length,
        None => {
            let asked = endpoints
                .iter()
                .find_map(|e| advertised_context(e, &model.upstream_name, api_key.as_ref()));
            match asked {
                Some(length) => length,
                None => {
                    tracing::warn!(model = %model.name, "the upstream did not report a context length; assuming {FALLBACK_CONTEXT_LENGTH} tokens (set context_length in the models file)");
                    FALLBACK_CONTEXT_LENGTH
                }
            }
        }
    };
    let info = ModelInfo {
        id: model.name.clone(),
        kind: ModelKind::Chat,
        architecture: "upstream".to_owned(),
        context_length,
        path: String::new(),
        dimensions: None,
        precision: None,
    };
    let chat = UpstreamChat::start(model, endpoints, tokens, api_key, context_length, metrics)
        .map_err(named)?;
    Ok(ChatModelHandle::remote(info, Arc::new(chat)))
}

/// The context length `/v1/models` reports for `model`: vLLM's `max_model_len`, Warden's
/// `context_length`, or llama.cpp's `meta.n_ctx` (each slot's window; never its
/// `n_ctx_train`, which the server's `-c` may well cut).
fn advertised_context(endpoint: &Endpoint, model: &str, api_key: Option<&ApiKey>) -> Option<usize> {
    let mut request = endpoint
        .agent
        .get(&format!("{}/models", endpoint.config.url))
        .timeout(METADATA_TIMEOUT);
    if let Some(key) = api_key {
        request = request.set("Authorization", &format!("Bearer {}", key.expose()));
    }
    let response = request.call().ok()?;
    let mut body = String::new();
    std::io::Read::read_to_string(
        &mut std::io::Read::take(response.into_reader(), 1 << 20),
        &mut body,
    )
    .ok()?;
    let listing: Value = serde_json::from_str(&body).ok()?;
    let entries = listing.get("data")?.as_array()?;
    let entry = entries
        .iter()
        .find(|e| e.get("id").and_then(Value::as_str) == Some(model))
        .or_else(|| (entries.len() == 1).then(|| &entries[0]))?;
    let number = |v: Option<&Value>| v.and_then(Value::as_u64).map(|n| n as usize);
    number(entry.get("max_model_len"))
        .or_else(|| number(entry.get("context_length")))
        .or_else(|| number(entry.pointer("/meta/n_ctx")))
        .filter(|n| *n >= 256)
}
