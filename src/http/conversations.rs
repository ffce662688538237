//! Conversation routes, all owner-scoped (another user's conversation answers 404 exactly
//! like one that does not exist): create, list, read with messages, and post a message,
//! which masks secrets in it and persists it with a queued run in one transaction before
//! any work starts; with `keep_original`, the text as typed is kept for its author alone
//! (`GET …/messages/{message_id}/original`).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::auth::Caller;
use super::error::ApiError;
use super::json::{ApiJson, ApiPath, ApiQuery};
use super::session::{audit, audit_with_detail};
use super::{blocking, AppState};
use crate::policy::Capability;
use crate::runs::now_secs;
use crate::store::{
    AuditOutcome, Conversation, ConversationCursor, Conversations, Message, MessageOriginals,
    MAX_CONVERSATIONS_PER_PAGE,
};

/// Longest conversation title, in characters.
pub const MAX_TITLE_CHARS: usize = 200;
/// Longest message, in characters.
pub const MAX_MESSAGE_CHARS: usize = 32_000;
/// Conversations one page holds when the request does not say.
const DEFAULT_PAGE: u32 = 50;
/// The title of a conversation created without one.
const DEFAULT_TITLE: &str = "New chat";

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/conversations", get(list).post(create))
        .route("/api/conversations/{id}", get(read))
        .route("/api/conversations/{id}/messages", post(post_message))
        .route(
            "/api/conversations/{id}/messages/{message_id}/original",
            get(read_original),
        )
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct CreateRequest {
    title: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MessageRequest {
    content: String,
    /// Keep the text as typed beside its masked copy, readable by its author alone (only
    /// when something was masked).
    #[serde(default)]
    keep_original: bool,
}

async fn create(
    State(state): State<AppState>,
    caller: Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    caller.require(Capability::Chat)?;
    let body = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge
        } else {
            ApiError::BadJson(rejection.body_text())
        }
    })?;
    // The body is optional: no body (or `{}`) creates an untitled conversation.
    let request: CreateRequest = if body.iter().all(u8::is_ascii_whitespace) {
        CreateRequest::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| ApiError::BadJson(e.to_string()))?
    };
    let title = match request.title.as_deref().map(str::trim) {
        None | Some("") => DEFAULT_TITLE.to_owned(),
        Some(title) if title.chars().count() > MAX_TITLE_CHARS => {
            return Err(ApiError::invalid(
                "title",
                format!("title is longer than {MAX_TITLE_CHARS} characters"),
            ))
        }
        Some(title) => title.to_owned(),
    };
    let store = state.store.clone();
    let owner = caller.user.id;
    let conversation =
        blocking(move || Ok(store.create_conversation(owner, &title, now_secs())?)).await?;
    Ok((StatusCode::CREATED, Json(conversation_json(&conversation))).into_response())
}

/// `?limit=N&before=CURSOR`: one page, most recently updated first; each page names the
/// `next_before` cursor of the older page, or null on the last one.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    limit: Option<u32>,
    before: Option<String>,
}

async fn list(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Response, ApiError> {
    caller.require(Capability::Chat)?;
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    if limit == 0 || limit > MAX_CONVERSATIONS_PER_PAGE {
        return Err(ApiError::invalid(
            "limit",
            format!("limit must be between 1 and {MAX_CONVERSATIONS_PER_PAGE}"),
        ));
    }
    let before = match query.before.as_deref() {
        None => None,
        Some(text) => Some(ConversationCursor::parse(text).ok_or_else(|| {
            ApiError::invalid("before", "before must be a `next_before` value from a page")
        })?),
    };
    let store = state.store.clone();
    let owner = caller.user.id;
    let page = blocking(move || Ok(store.conversations(owner, limit, before.as_ref())?)).await?;
    let items: Vec<_> = page.conversations.iter().map(conversation_json).collect();
    let next_before = page.next_before.map(|cursor| cursor.to_string());
    Ok(Json(json!({ "conversations": items, "next_before": next_before })).into_response())
}

async fn read(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    caller.require(Capability::Chat)?;
    let store = state.store.clone();
    let owner = caller.user.id;
    let (conversation, messages, citations, originals) = blocking(move || {
        let (conversation, messages) = store.conversation(owner, &id)?;
        let citations = store.conversation_citations(owner, &id)?;
        let originals = store.kept_originals(owner, &id)?;
        Ok((conversation, messages, citations, originals))
    })
    .await?;
    let mut body = conversation_json(&conversation);
    body["messages"] = messages
        .iter()
        .map(|message| {
            let mut json = message_json(message);
            let cited: Vec<serde_json::Value> = citations
                .iter()
                .filter(|(id, _, _)| *id == message.id)
                .filter_map(|(_, _, text)| serde_json::from_str(text).ok())
                .collect();
            if !cited.is_empty() {
                json["citations"] = serde_json::Value::Array(cited);
            }
            if originals.contains(&message.id) {
                json["has_original"] = json!(true);
            }
            json
        })
        .collect();
    Ok(Json(body).into_response())
}

async fn post_message(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(request): ApiJson<MessageRequest>,
) -> Result<Response, ApiError> {
    caller.require(Capability::Chat)?;
    let (content, keep_original) = (request.content, request.keep_original);
    if content.trim().is_empty() {
        return Err(ApiError::invalid("content", "the message is empty"));
    }
    if content.chars().count() > MAX_MESSAGE_CHARS {
        return Err(ApiError::invalid(
            "content",
            format!("the message is longer than {MAX_MESSAGE_CHARS} characters"),
        ));
    }
    if !state.runs.can_answer() {
        return Err(ApiError::Unavailable(
            "no chat model is loaded; see /healthz".to_owned(),
        ));
    }
    // The one entry point of chat text: secrets are masked before anything is stored, so
    // no later turn's history, memory or audit row can hold what was pasted. The text as
    // typed is kept, beside it and for its author alone, only when they asked.
    let (masked_content, masked) = crate::agent::safety::mask_for_storage(&content);
    let keep_original = keep_original && !masked.is_empty();
    let store = state.store.clone();
    let owner = caller.user.id;
    let turn = blocking(move || {
        let now = now_secs();
        Ok(if keep_original {
            store.add_user_message_keeping_original(owner, &id, &masked_content, &content, now)?
        } else {
            store.add_user_message_with_run(owner, &id, &masked_content, now)?
        })
    })
    .await?;
    if !masked.is_empty() {
        audit_with_detail(
            &state,
            &caller.user.name,
            "chat.input_masked",
            Some(&turn.run_id),
            AuditOutcome::Success,
            Some(json!({ "original_kept": keep_original })),
        )
        .await;
    }
    state.runs.wake_workers();
    audit(
        &state,
        &caller.user.name,
        "run.start",
        Some(&turn.run_id),
        AuditOutcome::Success,
    )
    .await;
    let body = json!({ "run_id": turn.run_id, "message_id": turn.message_id, "turn": turn.turn });
    Ok((StatusCode::ACCEPTED, Json(body)).into_response())
}

/// The text of one of the caller's messages as typed, when they asked to keep it.
async fn read_original(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((id, message_id)): ApiPath<(String, String)>,
) -> Result<Response, ApiError> {
    caller.require(Capability::Chat)?;
    let store = state.store.clone();
    let owner = caller.user.id;
    let reply_id = message_id.clone();
    let content = blocking(move || Ok(store.message_original(owner, &id, &message_id)?)).await?;
    let body = json!({ "message_id": reply_id, "content": content });
    let mut response = Json(body).into_response();
    response.headers_mut().insert(
        axum::http::header::CACHE_CONTROL,
        axum::http::HeaderValue::from_static("no-store"),
    );
    Ok(response)
}

fn conversation_json(conversation: &Conversation) -> serde_json::Value {
    json!({
        "id": conversation.id,
        "title": conversation.title,
        "created_at": conversation.created_at,
        "updated_at": conversation.updated_at,
    })
}

fn message_json(message: &Message) -> serde_json::Value {
    json!({
        "id": message.id,
        "turn": message.turn,
        "role": message.role,
        "content": message.content,
        "run_id": message.run_id,
        "created_at": message.created_at,
    })
}
