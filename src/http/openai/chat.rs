//! The `POST /v1/chat/completions` handler: validate, pick the model, submit, then either
//! collect the whole answer or stream it.

use axum::extract::State;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::chat_request::validate_chat_request;
use super::chat_response::{chat_completion, CompletionHeader};
use super::chat_stream::{ChatStream, StreamOptions};
use super::chat_wire::ChatCompletionRequest;
use super::select_chat_model;
use crate::engine::{EngineError, GenerationEvent, GenerationStream, GenerationSummary};
use crate::http::error::ApiError;
use crate::http::json::ApiJson;
use crate::http::AppState;

pub(super) async fn chat_completions(
    State(state): State<AppState>,
    ApiJson(wire): ApiJson<ChatCompletionRequest>,
) -> Result<Response, ApiError> {
    let valid = validate_chat_request(wire, &state.limits)?;
    let model = select_chat_model(&state.engine, valid.model.as_deref())?;
    let header = CompletionHeader::new(model.info().id.clone());
    let events = model.submit(valid.request)?;
    if valid.stream {
        let options = StreamOptions {
            include_usage: valid.include_usage,
        };
        stream_response(events, header, options).await
    } else {
        let (text, summary) = collect(events, &header.model).await?;
        Ok(Json(chat_completion(header, text, summary)).into_response())
    }
}

/// Waits for the first event so that an early failure (a prompt too long for the context,
/// say) still gets its proper status code, then streams the rest.
async fn stream_response(
    mut events: GenerationStream,
    header: CompletionHeader,
    options: StreamOptions,
) -> Result<Response, ApiError> {
    let first = match events.next().await {
        Some(Ok(event)) => event,
        Some(Err(err)) => return Err(err.into()),
        None => return Err(EngineError::WorkerGone(header.model).into()),
    };
    let body = ChatStream::new(events, header, options, first).into_body();
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(response)
}

/// The whole text of a generation and its summary.
async fn collect(
    mut events: GenerationStream,
    model: &str,
) -> Result<(String, GenerationSummary), ApiError> {
    let mut text = String::new();
    loop {
        match events.next().await {
            Some(Ok(GenerationEvent::Delta(delta))) => text.push_str(&delta),
            Some(Ok(GenerationEvent::Done(summary))) => return Ok((text, summary)),
            Some(Err(err)) => return Err(err.into()),
            None => return Err(EngineError::WorkerGone(model.to_owned()).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::FinishReason;
    use crate::http::openai::chat_response::tests::summary;
    use crate::http::openai::test_support::scripted_generation;

    #[tokio::test]
    async fn collect_joins_deltas_until_done() {
        let (events, sender, _cancel) = scripted_generation();
        for delta in ["Hel", "lo"] {
            sender
                .send(Ok(GenerationEvent::Delta(delta.into())))
                .expect("the stream is alive");
        }
        sender
            .send(Ok(GenerationEvent::Done(summary(
                FinishReason::Stop,
                vec![],
            ))))
            .expect("alive");
        let (text, done) = collect(events, "m").await.expect("the generation succeeds");
        assert_eq!(text, "Hello");
        assert_eq!(done.finish_reason, FinishReason::Stop);
    }

    #[tokio::test]
    async fn collect_reports_engine_errors_and_vanished_workers() {
        let (events, sender, _cancel) = scripted_generation();
        sender
            .send(Err(EngineError::ContextOverflow {
                prompt: 9,
                context: 4,
            }))
            .expect("alive");
        let overflow = collect(events, "m").await;
        assert!(matches!(
            overflow,
            Err(ApiError::Engine(EngineError::ContextOverflow { .. }))
        ));
        let (events, sender, _cancel) = scripted_generation();
        drop(sender);
        let gone = collect(events, "m").await;
        assert!(matches!(
            gone,
            Err(ApiError::Engine(EngineError::WorkerGone(_)))
        ));
    }
}
