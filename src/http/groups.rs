//! Groups, for admins only: `GET /api/groups` (each with its members), `POST /api/groups`
//! and `DELETE /api/groups/{name}` (which also drops every `group:NAME` knowledge-base
//! reader, in the store's one transaction). Memberships change through
//! `PATCH /api/users/{name}`. Every change writes an audit row.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::auth::Caller;
use super::error::ApiError;
use super::json::{ApiJson, ApiPath};
use super::session::audit;
use super::{blocking, AppState};
use crate::policy::Capability;
use crate::runs::now_secs;
use crate::store::{AccessControl, AuditOutcome};

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/groups", get(list).post(create))
        .route("/api/groups/{name}", delete(remove))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateGroup {
    name: String,
}

async fn list(State(state): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    caller.require(Capability::ManageUsers)?;
    let store = state.store.clone();
    let groups = blocking(move || Ok(store.groups()?)).await?;
    Ok(Json(json!({ "groups": groups })).into_response())
}

async fn create(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<CreateGroup>,
) -> Result<Response, ApiError> {
    caller.require(Capability::ManageUsers)?;
    let store = state.store.clone();
    let group = blocking(move || Ok(store.create_group(&request.name, now_secs())?)).await?;
    audit(
        &state,
        &caller.user.name,
        "group.create",
        Some(&group.name),
        AuditOutcome::Success,
    )
    .await;
    Ok((StatusCode::CREATED, Json(json!({ "group": group }))).into_response())
}

async fn remove(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> Result<Response, ApiError> {
    caller.require(Capability::ManageUsers)?;
    let store = state.store.clone();
    let removed = name.clone();
    blocking(move || Ok(store.remove_group(&removed)?)).await?;
    audit(
        &state,
        &caller.user.name,
        "group.remove",
        Some(&name),
        AuditOutcome::Success,
    )
    .await;
    Ok(StatusCode::NO_CONTENT.into_response())
}
