//! Diagnostic tasks over HTTP: `POST /api/diagnostics {incident_id}` starts one (operator
//! or admin; the task and its queued `diagnostic` run are created in one transaction and
//! its progress streams on the run's events), `GET /api/diagnostics` lists the caller's
//! tasks, `GET /api/diagnostics/{id}` reads one with its report (404 for another user's,
//! exactly like a missing one).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::Caller;
use super::error::ApiError;
use super::incidents::audit;
use super::json::{ApiJson, ApiPath, ApiQuery};
use super::{blocking, AppState};
use crate::diagnostics::GRAPH_VERSION;
use crate::policy::Capability;
use crate::runs::now_secs;
use crate::store::{
    is_incident_id, AccessControl, AuditOutcome, DiagnosticTask, DiagnosticTasks, Incidents,
    StoreError, MAX_DIAGNOSTIC_TASKS_PER_READ,
};

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/diagnostics", get(list).post(start))
        .route("/api/diagnostics/sources", get(sources))
        .route("/api/diagnostics/{id}", get(read))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StartRequest {
    incident_id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    limit: Option<u32>,
}

/// A task as its owner sees it; `with_report` adds the full report.
fn task_json(task: &DiagnosticTask, with_report: bool) -> Value {
    let report = task.report.as_ref();
    let mut out = json!({
        "id": task.id,
        "incident_id": task.incident_id,
        "run_id": task.run_id,
        "status": task.status,
        "graph_version": task.graph_version,
        "thread_id": task.thread_id,
        "verdict": report.map(|r| r.verdict),
        "mechanism": report.and_then(|r| r.mechanism.as_deref()),
        "recoveryMode": report.map(|r| r.recovery_mode),
        "created_at": task.created_at,
        "updated_at": task.updated_at,
    });
    if with_report {
        out["report"] = json!(task.report);
    }
    out
}

async fn start(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<StartRequest>,
) -> Result<Response, ApiError> {
    caller.require(Capability::StartDiagnostic)?;
    if !is_incident_id(&request.incident_id) {
        return Err(ApiError::invalid(
            "incident_id",
            "give an incident id: incident_ then letters, digits and dashes",
        ));
    }
    let store = state.store.clone();
    let owner = caller.user.id;
    let incident_id = request.incident_id.clone();
    let started = blocking(move || {
        match store.incident(&incident_id) {
            Err(StoreError::NotFound(_)) => {
                return Err(ApiError::Store(StoreError::NotFound(format!(
                    "incident `{incident_id}`"
                ))))
            }
            Err(other) => return Err(other.into()),
            Ok(_) => {}
        }
        Ok(store.start_diagnostic_task(owner, &incident_id, None, GRAPH_VERSION, now_secs())?)
    })
    .await;
    let (outcome, target) = match &started {
        Ok(task) => (AuditOutcome::Success, task.id.clone()),
        Err(_) => (AuditOutcome::Failure, request.incident_id.clone()),
    };
    audit(
        &state,
        &caller.user.name,
        "diagnostic.start",
        Some(&target),
        outcome,
        Some(json!({ "incident_id": request.incident_id })),
    )
    .await;
    let task = started?;
    state.runs.wake_workers();
    let run_id = task.run_id.clone().unwrap_or_default();
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({
            "diagnostic_task_id": task.id,
            "run_id": run_id,
            "status": task.status,
            "events": format!("/api/runs/{run_id}/events"),
        })),
    )
        .into_response())
}

async fn list(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Response, ApiError> {
    caller.require(Capability::Chat)?;
    let limit = query
        .limit
        .unwrap_or(50)
        .clamp(1, MAX_DIAGNOSTIC_TASKS_PER_READ);
    let store = state.store.clone();
    let owner = caller.user.id;
    let tasks = blocking(move || Ok(store.diagnostic_tasks(owner, limit)?)).await?;
    let tasks: Vec<Value> = tasks.iter().map(|t| task_json(t, false)).collect();
    Ok(Json(json!({ "tasks": tasks })).into_response())
}

async fn read(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    caller.require(Capability::Chat)?;
    let store = state.store.clone();
    let owner = caller.user.id;
    let task = blocking(move || {
        let mut task = store.diagnostic_task(owner, &id)?;
        if let Some(report) = task.report.as_mut() {
            report.scope_knowledge(store.search_scope(owner).as_deref());
        }
        Ok(task)
    })
    .await?;
    Ok(Json(task_json(&task, true)).into_response())
}

/// The live sources the server reads and each one's health, checked now (a PostgreSQL
/// source connects, reads a view and must refuse a write). Admins only.
async fn sources(State(state): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    caller.require(Capability::ReadSources)?;
    let Some(registry) = state.diagnostic_sources.clone() else {
        return Ok(Json(json!({ "configured": false, "sources": [] })).into_response());
    };
    let sources = blocking(move || {
        let entries = registry.entries.clone();
        let mut out = Vec::new();
        for entry in entries {
            let health = match registry.connect_one(&entry) {
                Ok(connector) => connector.health(),
                Err(message) => crate::diagnostics::live::Health {
                    name: entry.name.clone(),
                    kind: entry.kind.clone(),
                    ok: false,
                    detail: message,
                    provides: Vec::new(),
                },
            };
            out.push(json!({
                "name": health.name, "kind": health.kind, "ok": health.ok,
                "detail": health.detail, "provides": health.provides,
                "services": entry.services,
            }));
        }
        Ok(out)
    })
    .await?;
    Ok(Json(json!({ "configured": true, "sources": sources })).into_response())
}
