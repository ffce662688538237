//! API tokens over HTTP: `GET /api/tokens` (the caller's own; an admin may pass
//! `?user=NAME`), `POST /api/tokens` (the secret is in this one response and nowhere else;
//! only admins may create one for another user) and `DELETE /api/tokens/{id}` (one's own,
//! or any for an admin; someone else's answers 404 like a token that does not exist).
//! Every change writes an audit row; secrets never reach the log.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::Caller;
use super::error::ApiError;
use super::json::{ApiJson, ApiPath, ApiQuery};
use super::session::audit_with_detail;
use super::{blocking, AppState};
use crate::policy::Capability;
use crate::runs::now_secs;
use crate::store::{Accounts, ApiToken, AuditOutcome};

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/tokens", get(list).post(create))
        .route("/api/tokens/{id}", delete(revoke))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    user: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateToken {
    label: String,
    user: Option<String>,
}

/// The user whose tokens a request is about: the caller, or (admins only) `named`.
fn owner(caller: &Caller, named: Option<String>) -> Result<String, ApiError> {
    match named {
        Some(name) if name != caller.user.name => {
            caller.require(Capability::ManageUsers)?;
            Ok(name)
        }
        _ => Ok(caller.user.name.clone()),
    }
}

async fn list(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Response, ApiError> {
    caller.require(Capability::Chat)?;
    let user = owner(&caller, query.user)?;
    let store = state.store.clone();
    let tokens = blocking(move || Ok(store.tokens(&user)?)).await?;
    let tokens: Vec<Value> = tokens.iter().map(public_token).collect();
    Ok(Json(json!({ "tokens": tokens })).into_response())
}

async fn create(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<CreateToken>,
) -> Result<Response, ApiError> {
    caller.require(Capability::Chat)?;
    let user = owner(&caller, request.user)?;
    let store = state.store.clone();
    let label = request.label;
    let (token, label, owner_name) = blocking(move || {
        let token = store.create_token(&user, &label, now_secs())?;
        Ok((token, label, user))
    })
    .await?;
    audit_with_detail(
        &state,
        &caller.user.name,
        "token.create",
        Some(&token.id),
        AuditOutcome::Success,
        Some(json!({ "user": owner_name, "label": label })),
    )
    .await;
    let body =
        json!({ "id": token.id, "label": label, "user": owner_name, "secret": token.secret });
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

async fn revoke(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    caller.require(Capability::Chat)?;
    let store = state.store.clone();
    let token_id = id.clone();
    let caller_id = caller.user.id;
    let admin = crate::policy::allows(
        caller.user.role,
        Capability::ManageUsers,
        crate::policy::Channel::Http,
    );
    blocking(move || {
        let token = store.token(&token_id)?;
        if token.user_id != caller_id && !admin {
            // The same answer as for a token that does not exist.
            return Err(ApiError::NotFound(format!("token `{token_id}`")));
        }
        Ok(store.revoke_token(&token_id, now_secs())?)
    })
    .await?;
    audit_with_detail(
        &state,
        &caller.user.name,
        "token.revoke",
        Some(&id),
        AuditOutcome::Success,
        None,
    )
    .await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// A token's metadata; never its secret or hash.
fn public_token(token: &ApiToken) -> Value {
    json!({
        "id": token.id,
        "label": token.label,
        "created_at": token.created_at,
        "revoked_at": token.revoked_at,
    })
}
