//! The knowledge-base admin and search API: `GET/POST /api/kb`, `DELETE /api/kb/{name}`,
//! `GET /api/kb/search`; syncing (`POST /api/kb/{name}/sync` and `…/sync/cancel`) is in
//! `kb_sync`. Every library call runs on a blocking thread, never on the async workers.

use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::auth::{Caller, Permission};
use super::error::ApiError;
use super::json::{ApiJson, ApiPath, ApiQuery};
use super::session::audit;
use super::{blocking, kb_sync, AppState};
use crate::retrieval::{AddedBy, Library, SearchMode};
use crate::store::AuditOutcome;

/// Largest `limit` a search may ask for.
const MAX_SEARCH_LIMIT: usize = 100;

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/kb", get(list).post(add))
        .route("/api/kb/search", get(search))
        .route("/api/kb/{name}", axum::routing::delete(remove))
        .route("/api/kb/{name}/sync", post(kb_sync::sync))
        .route("/api/kb/{name}/sync/cancel", post(kb_sync::cancel))
}

#[derive(Deserialize)]
struct AddRequest {
    name: String,
    path: PathBuf,
}

#[derive(Deserialize)]
struct SearchParams {
    q: String,
    /// Comma-separated knowledge-base names; all when absent.
    kb: Option<String>,
    mode: Option<SearchMode>,
    limit: Option<usize>,
}

pub(super) fn library(state: &AppState) -> Result<Arc<Library>, ApiError> {
    state.library.clone().ok_or(ApiError::Unavailable(
        "knowledge bases are unavailable: the embedding model did not load".into(),
    ))
}

async fn list(State(state): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    caller.require(Permission::ReadKnowledge)?;
    let library = library(&state)?;
    let kbs = blocking(move || Ok(library.list()?)).await?;
    Ok(Json(json!({ "knowledge_bases": kbs })).into_response())
}

/// Registers a folder; the client then syncs it (and watches the progress).
async fn add(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<AddRequest>,
) -> Result<Response, ApiError> {
    caller.require(Permission::ManageKnowledge)?;
    let library = library(&state)?;
    // Only folders inside --kb-roots, never Warden's own (403 otherwise).
    let record =
        blocking(move || Ok(library.add(&request.name, &request.path, AddedBy::Remote)?)).await?;
    audit(
        &state,
        &caller.user.name,
        "kb.add",
        Some(&record.name),
        AuditOutcome::Success,
    )
    .await;
    Ok((StatusCode::CREATED, Json(record)).into_response())
}

async fn remove(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> Result<Response, ApiError> {
    caller.require(Permission::ManageKnowledge)?;
    let library = library(&state)?;
    let removed = name.clone();
    blocking(move || Ok(library.remove(&removed)?)).await?;
    audit(
        &state,
        &caller.user.name,
        "kb.remove",
        Some(&name),
        AuditOutcome::Success,
    )
    .await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn search(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(params): ApiQuery<SearchParams>,
) -> Result<Response, ApiError> {
    caller.require(Permission::ReadKnowledge)?;
    let library = library(&state)?;
    let limit = params.limit.unwrap_or(10);
    if limit == 0 || limit > MAX_SEARCH_LIMIT {
        return Err(ApiError::invalid(
            "limit",
            format!("limit must be between 1 and {MAX_SEARCH_LIMIT}"),
        ));
    }
    let kbs: Option<Vec<String>> = params.kb.map(|k| {
        k.split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    });
    let mode = params.mode.unwrap_or(SearchMode::Hybrid);
    let hits =
        blocking(move || Ok(library.search(&params.q, kbs.as_deref(), mode, limit)?)).await?;
    Ok(Json(json!({ "hits": hits })).into_response())
}
