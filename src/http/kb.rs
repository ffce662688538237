//! The knowledge-base admin and search API: `GET/POST /api/kb`, `POST /api/kb/{name}/sync`
//! (progress as server-sent events), `DELETE /api/kb/{name}`, `PUT /api/kb/{name}/readers`,
//! `GET /api/kb/search`, `GET /api/kb/passages/{chunk_id}`. Callers see only the knowledge
//! bases they may read (`kb_access`); searches are filtered inside retrieval. Every library
//! call runs on a blocking thread, never on the async workers.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use futures_util::Stream;
use serde::Deserialize;
use serde_json::json;

use super::auth::{Caller, Permission};
use super::error::ApiError;
use super::json::{ApiJson, ApiPath, ApiQuery};
use super::kb_access::{public_kb, readable_kb, Readable};
use super::session::audit;
use super::{blocking, AppState};
use crate::retrieval::{Library, Progress, SearchMode};
use crate::store::{AccessControl, AuditOutcome, KbCatalog, Reader, MAX_READERS};

/// Progress events buffered per sync stream; when a client reads slowly, intermediate
/// progress is dropped (the final event never is).
const PROGRESS_BUFFER: usize = 64;
/// Largest `limit` a search may ask for.
const MAX_SEARCH_LIMIT: usize = 100;

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/kb", get(list).post(add))
        .route("/api/kb/search", get(search))
        .route("/api/kb/{name}", axum::routing::delete(remove))
        .route("/api/kb/{name}/readers", put(set_readers))
        .route("/api/kb/{name}/sync", post(sync))
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

fn library(state: &AppState) -> Result<Arc<Library>, ApiError> {
    state.library.clone().ok_or(ApiError::Unavailable(
        "knowledge bases are unavailable: the embedding model did not load".into(),
    ))
}

async fn list(State(state): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    caller.require(Permission::ReadKnowledge)?;
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
    caller.require(Permission::ManageKnowledge)?;
    let library = library(&state)?;
    let readers = parse_readers(&request.readers)?;
    let store = state.store.clone();
    let record = blocking(move || {
        let record = library.add(&request.name, &request.path)?;
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
    caller.require(Permission::ManageKnowledge)?;
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
    caller.require(Permission::ReadKnowledge)?;
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

/// Starts a sync and streams its progress: `progress` events, then one `completed` (with
/// the report) or `failed`. The sync runs to the end even if the client goes away.
async fn sync(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> Result<Response, ApiError> {
    caller.require(Permission::SyncKnowledge)?;
    let library = library(&state)?;
    // Fail fast (404) before opening a stream for a name that does not exist, or that
    // the caller may not read.
    readable_kb(&state, &caller, &name).await?;
    audit(
        &state,
        &caller.user.name,
        "kb.sync",
        Some(&name),
        AuditOutcome::Success,
    )
    .await;
    let (sender, receiver) = tokio::sync::mpsc::channel::<Event>(PROGRESS_BUFFER);
    tokio::task::spawn_blocking(move || {
        let never = AtomicBool::new(false);
        let result = library.sync(
            &name,
            &mut |progress: Progress| {
                let event = Event::default().event("progress").json_data(&progress);
                if let Ok(event) = event {
                    let _ = sender.try_send(event);
                }
            },
            &never,
        );
        let last = match result {
            Ok(report) => Event::default().event("completed").json_data(&report),
            Err(err) => Event::default()
                .event("failed")
                .json_data(json!({ "error": err.to_string() })),
        };
        if let Ok(event) = last {
            let _ = sender.blocking_send(event);
        }
    });
    Ok(Sse::new(events(receiver))
        .keep_alive(KeepAlive::default())
        .into_response())
}

fn events(
    mut receiver: tokio::sync::mpsc::Receiver<Event>,
) -> impl Stream<Item = Result<Event, Infallible>> {
    futures_util::stream::poll_fn(move |cx| receiver.poll_recv(cx).map(|event| event.map(Ok)))
}
