//! A conversation's structured memory, owner only: read it (with its background
//! compaction job: status, attempts, last error), remove an item, or confirm an
//! item the user stated (`user_stated` → `user_confirmed`). Another user's conversation
//! answers 404 as a missing one does. Every change is audited; an item's text never goes
//! into the audit row.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde_json::json;

use super::auth::Caller;
use super::error::ApiError;
use super::json::ApiPath;
use super::session::audit;
use super::{blocking, AppState};
use crate::policy::Capability;
use crate::runs::now_secs;
use crate::store::{AuditOutcome, CompactionJob, CompactionJobs, ConversationMemory, Memory};

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/conversations/{id}/memory", get(read))
        .route("/api/conversations/{id}/memory/{item}", delete(remove))
        .route(
            "/api/conversations/{id}/memory/{item}/confirm",
            post(confirm),
        )
}

async fn read(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    caller.require(Capability::Chat)?;
    let (store, owner) = (state.store.clone(), caller.user.id);
    let (memory, job) = blocking(move || {
        let memory = store.memory(owner, &id)?;
        Ok((memory, store.compaction_job(&id)?))
    })
    .await?;
    Ok(Json(memory_json(&memory, job.as_ref())).into_response())
}

async fn remove(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((id, item)): ApiPath<(String, String)>,
) -> Result<Response, ApiError> {
    caller.require(Capability::Chat)?;
    let (store, owner, target) = (state.store.clone(), caller.user.id, item.clone());
    blocking(move || Ok(store.delete_memory_item(owner, &id, &item, now_secs())?)).await?;
    audit(
        &state,
        &caller.user.name,
        "memory.delete",
        Some(&target),
        AuditOutcome::Success,
    )
    .await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn confirm(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((id, item)): ApiPath<(String, String)>,
) -> Result<Response, ApiError> {
    caller.require(Capability::Chat)?;
    let (store, owner, target) = (state.store.clone(), caller.user.id, item.clone());
    let confirmed =
        blocking(move || Ok(store.confirm_memory_item(owner, &id, &item, now_secs())?)).await?;
    audit(
        &state,
        &caller.user.name,
        "memory.confirm",
        Some(&target),
        AuditOutcome::Success,
    )
    .await;
    Ok(Json(json!({ "item": confirmed })).into_response())
}

/// The memory as the API shows it, with its background compaction job if it had one.
fn memory_json(memory: &ConversationMemory, job: Option<&CompactionJob>) -> serde_json::Value {
    json!({
        "version": memory.version,
        "through_message_id": memory.through_message_id,
        "status": memory.status,
        "degraded_reason": memory.degraded_reason,
        "items": memory.items,
        "compaction": job,
    })
}
