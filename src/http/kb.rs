//! The knowledge-base admin and search API: `GET/POST /api/kb`, `POST /api/kb/{name}/sync`
//! (progress as server-sent events), `DELETE /api/kb/{name}`, `GET /api/kb/search`.
//! Every library call runs on a blocking thread, never on the async workers.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::Stream;
use serde::Deserialize;
use serde_json::json;

use super::auth::{Caller, Permission};
use super::error::ApiError;
use super::json::{ApiJson, ApiPath, ApiQuery};
use super::session::audit;
use super::{blocking, AppState};
use crate::retrieval::{Library, Progress, SearchMode};
use crate::store::AuditOutcome;

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
        .route("/api/kb/{name}/sync", post(sync))
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

fn library(state: &AppState) -> Result<Arc<Library>, ApiError> {
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
    let record = blocking(move || Ok(library.add(&request.name, &request.path)?)).await?;
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

/// Starts a sync and streams its progress: `progress` events, then one `completed` (with
/// the report) or `failed`. The sync runs to the end even if the client goes away.
async fn sync(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> Result<Response, ApiError> {
    caller.require(Permission::SyncKnowledge)?;
    let library = library(&state)?;
    {
        // Fail fast (404) before opening a stream for a name that does not exist.
        let library = library.clone();
        let wanted = name.clone();
        let exists =
            blocking(move || Ok(library.list()?.into_iter().any(|kb| kb.name == wanted))).await?;
        if !exists {
            return Err(ApiError::NotFound(format!("knowledge base `{name}`")));
        }
    }
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
