//! The knowledge-base admin and search API: `GET/POST /api/kb`, `DELETE /api/kb/{name}`,
//! `PUT /api/kb/{name}/readers`, `GET /api/kb/search`, `GET /api/kb/passages/{chunk_id}`;
//! syncing (`POST /api/kb/{name}/sync` and `…/sync/cancel`) is in `kb_sync`. Callers see
//! only the knowledge bases they may read (`kb_access`); searches are filtered inside
//! retrieval. Every library call runs on a blocking thread, never on the async workers.

use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::auth::Caller;
use super::error::ApiError;
use super::json::{ApiJson, ApiPath, ApiQuery};
use super::kb_access::{public_kb, Readable};
use super::session::audit;
use super::{blocking, kb_sync, AppState};
use crate::policy::Capability;
use crate::retrieval::{AddedBy, Library, SearchMode};
use crate::store::{AccessControl, AuditOutcome, KbCatalog, Reader, MAX_READERS};

/// Largest `limit` a search may ask for.
const MAX_SEARCH_LIMIT: usize = 100;

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/kb", get(list).post(add))
        .route("/api/kb/search", get(search))
        .route("/api/kb/{name}", axum::routing::delete(remove))
        .route("/api/kb/{name}/readers", put(set_readers))
        .route("/api/kb/{name}/sync", post(kb_sync::sync))
        .route("/api/kb/{name}/sync/cancel", post(kb_sync::cancel))
        .route("/api/kb/passages/{chunk_id}", get(passage))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AddRequest {
    name: String,
    path: PathBuf,
    /// Who may read it besides admins; none: admins only.
    #[serde(default)]
    readers: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadersRequest {
    readers: Vec<String>,
}

/// Chunks shown either side of a passage.
const PASSAGE_CONTEXT: u32 = 2;

fn parse_readers(readers: &[String]) -> Result<Vec<Reader>, ApiError> {
    if readers.len() > MAX_READERS {
        return Err(ApiError::invalid(
            "readers",
            format!("a knowledge base lists at most {MAX_READERS} readers"),
        ));
    }
    readers
        .iter()
        .map(|r| r.parse::<Reader>())
        .collect::<Result<_, _>>()
        .map_err(|e| ApiError::invalid("readers", e.to_string()))
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
    caller.require(Capability::ReadKnowledge)?;
    let library = library(&state)?;
    let readable = Readable::of(&state, &caller).await?;
    let kbs = blocking(move || Ok(library.list()?)).await?;
    let visible: Vec<serde_json::Value> = kbs
        .iter()
        .filter(|kb| readable.allows(&kb.name))
        .map(|kb| public_kb(kb, &caller))
        .collect();
    Ok(Json(json!({ "knowledge_bases": visible })).into_response())
}

/// Registers a folder; the client then syncs it (and watches the progress).
async fn add(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<AddRequest>,
) -> Result<Response, ApiError> {
    caller.require(Capability::ManageKnowledge)?;
    let library = library(&state)?;
    let readers = parse_readers(&request.readers)?;
    let store = state.store.clone();
    let record = blocking(move || {
        // Only folders inside --kb-roots, never Warden's own (403 otherwise).
        let record = library.add(&request.name, &request.path, AddedBy::Remote)?;
        // Readers naming a missing group or user undo the add: all or nothing.
        match store.set_kb_readers(&record.name, &readers) {
            Ok(record) => Ok(record),
            Err(err) => {
                if let Err(undo) = library.remove(&record.name) {
                    tracing::error!(kb = %record.name, "cannot undo an add: {undo}");
                }
                Err(err.into())
            }
        }
    })
    .await?;
    audit(
        &state,
        &caller.user.name,
        "kb.add",
        Some(&record.name),
        AuditOutcome::Success,
    )
    .await;
    Ok((StatusCode::CREATED, Json(public_kb(&record, &caller))).into_response())
}

/// Replaces who may read a knowledge base (admins only).
async fn set_readers(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiJson(request): ApiJson<ReadersRequest>,
) -> Result<Response, ApiError> {
    caller.require(Capability::ManageKnowledge)?;
    let readers = parse_readers(&request.readers)?;
    let store = state.store.clone();
    let kb = name.clone();
    let record = blocking(move || Ok(store.set_kb_readers(&kb, &readers)?)).await?;
    audit(
        &state,
        &caller.user.name,
        "kb.readers",
        Some(&name),
        AuditOutcome::Success,
    )
    .await;
    Ok(Json(json!({ "knowledge_base": public_kb(&record, &caller) })).into_response())
}

/// A cited passage in its document: the chunk and its neighbours (readers only).
async fn passage(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(chunk_id): ApiPath<u64>,
) -> Result<Response, ApiError> {
    caller.require(Capability::ReadKnowledge)?;
    let readable = Readable::of(&state, &caller).await?;
    let store = state.store.clone();
    let chunks = blocking(move || Ok(store.chunks_around(chunk_id, PASSAGE_CONTEXT)?)).await?;
    let missing = || ApiError::NotFound(format!("passage {chunk_id}"));
    let target = chunks
        .iter()
        .position(|c| c.id == chunk_id)
        .ok_or_else(missing)?;
    let chunk = &chunks[target];
    if !readable.allows(&chunk.kb) {
        return Err(missing());
    }
    let neighbour = |c: &crate::store::CatalogChunk| json!({"chunk_id": c.id, "text": c.text});
    let heading_path: Vec<String> = serde_json::from_str(&chunk.heading_path).unwrap_or_default();
    let location: serde_json::Value = serde_json::from_str(&chunk.location).unwrap_or_default();
    Ok(Json(json!({
        "passage": {
            "chunk_id": chunk.id,
            "kb": chunk.kb,
            "path": chunk.path,
            "title": chunk.title,
            "heading_path": heading_path,
            "location": location,
            "text": chunk.text,
        },
        "before": chunks[..target].iter().map(neighbour).collect::<Vec<_>>(),
        "after": chunks[target + 1..].iter().map(neighbour).collect::<Vec<_>>(),
    }))
    .into_response())
}

async fn remove(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> Result<Response, ApiError> {
    caller.require(Capability::ManageKnowledge)?;
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
    caller.require(Capability::ReadKnowledge)?;
    let library = library(&state)?;
    let limit = params.limit.unwrap_or(10);
    if limit == 0 || limit > MAX_SEARCH_LIMIT {
        return Err(ApiError::invalid(
            "limit",
            format!("limit must be between 1 and {MAX_SEARCH_LIMIT}"),
        ));
    }
    let requested: Option<Vec<String>> = params.kb.map(|k| {
        k.split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    });
    let mode = params.mode.unwrap_or(SearchMode::Hybrid);
    let readable = Readable::of(&state, &caller).await?;
    let hits = blocking(move || {
        let kbs = readable.scope(requested, &library.list()?)?;
        Ok(library.search(&params.q, kbs.as_deref(), mode, limit)?)
    })
    .await?;
    Ok(Json(json!({ "hits": hits })).into_response())
}
