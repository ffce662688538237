//! The OpenAI-compatible API: `/v1/chat/completions`, `/v1/embeddings` and `/v1/models`.
//! Each endpoint has a wire module (what clients send), a validation step that turns it
//! into an engine request, and a handler that only awaits engine handles.

mod base64;
mod chat;
mod chat_request;
mod chat_response;
mod chat_stream;
mod chat_wire;
mod embeddings;
mod models;

use std::time::{SystemTime, UNIX_EPOCH};

use axum::routing::{get, post};
use axum::Router;
use rand::TryRngCore;

use super::error::ApiError;
use super::AppState;
use crate::engine::{ChatModelHandle, EmbedModelHandle, Engine};

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/chat/completions", post(chat::chat_completions))
        .route("/v1/embeddings", post(embeddings::embeddings))
        .route("/v1/models", get(models::list_models))
        .route("/v1/models/{*id}", get(models::get_model))
}

/// The chat model a request names; no name (or an empty one) means the default model.
fn select_chat_model(engine: &Engine, name: Option<&str>) -> Result<ChatModelHandle, ApiError> {
    if let Some(model) = engine.chat_model(name) {
        return Ok(model.clone());
    }
    let message = match name {
        None => "no chat model is loaded".to_owned(),
        Some(name) if engine.embed_model(Some(name)).is_some() => {
            format!("model `{name}` is an embedding model; use /v1/embeddings")
        }
        Some(name) => format!("model `{name}` does not exist or is not loaded"),
    };
    Err(ApiError::ModelNotFound { message })
}

/// The embedding model a request names; no name (or an empty one) means the default model.
fn select_embed_model(engine: &Engine, name: Option<&str>) -> Result<EmbedModelHandle, ApiError> {
    if let Some(model) = engine.embed_model(name) {
        return Ok(model.clone());
    }
    let message = match name {
        None => "no embedding model is loaded".to_owned(),
        Some(name) if engine.chat_model(Some(name)).is_some() => {
            format!("model `{name}` is a chat model; use /v1/chat/completions")
        }
        Some(name) => format!("model `{name}` does not exist or is not loaded"),
    };
    Err(ApiError::ModelNotFound { message })
}

/// A requested model name, with the empty string meaning "the default model".
fn requested_model(model: Option<String>) -> Option<String> {
    model.filter(|name| !name.is_empty())
}

/// Seconds since the Unix epoch, for `created` fields.
fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs())
        .unwrap_or(0)
}

/// A response id such as `chatcmpl-3f9a…`: a prefix and 96 random bits in hex.
fn new_response_id(prefix: &str) -> String {
    let mut bytes = [0u8; 12];
    if rand::rngs::OsRng.try_fill_bytes(&mut bytes).is_err() {
        // Ids only need to be unique enough to tell responses apart in logs.
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        bytes.copy_from_slice(&nanos.to_le_bytes()[..12]);
    }
    let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("{prefix}-{hex}")
}

/// A generation the test feeds by hand, through a real `GenerationStream`.
#[cfg(test)]
pub(crate) mod test_support {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    use crate::engine::{
        ChatModelHandle, ChatRequest, EngineError, GenerationEvent, GenerationStream, ModelInfo,
        ModelKind,
    };

    pub(crate) type EventSender = flume::Sender<Result<GenerationEvent, EngineError>>;

    /// The stream, the sender of its events, and the flag that dropping the stream sets.
    pub(crate) fn scripted_generation() -> (GenerationStream, EventSender, Arc<AtomicBool>) {
        let (queue, jobs) = flume::bounded(1);
        let info = ModelInfo {
            id: "m".into(),
            kind: ModelKind::Chat,
            architecture: "llama".into(),
            context_length: 512,
            path: String::new(),
            dimensions: None,
            precision: None,
        };
        let handle = ChatModelHandle::new(info, queue, crate::engine::test_tokenizer());
        let stream = handle
            .submit(ChatRequest::default())
            .expect("the queue has room");
        let job = jobs.try_recv().expect("the job is queued");
        (stream, job.events, job.cancel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_ids_have_the_prefix_and_differ() {
        let first = new_response_id("chatcmpl");
        let second = new_response_id("chatcmpl");
        assert!(
            first.starts_with("chatcmpl-") && first.len() == "chatcmpl-".len() + 24,
            "{first}"
        );
        assert_ne!(first, second);
    }

    #[test]
    fn empty_model_name_means_default() {
        assert_eq!(requested_model(Some(String::new())), None);
        assert_eq!(requested_model(None), None);
        assert_eq!(requested_model(Some("m".into())), Some("m".to_owned()));
    }
}
