//! User administration, for admins only: `GET /api/users`, `POST /api/users`,
//! `PATCH /api/users/{name}` (role, disabled and groups, applied together) and
//! `POST /api/users/{name}/password`. An admin cannot demote or disable their own account
//! (409), so there is always an admin left who can undo a change. Every change writes an
//! audit row; passwords and their hashes never reach a response or the log.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::Caller;
use super::error::ApiError;
use super::json::{ApiJson, ApiPath};
use super::session::{audit, audit_with_detail};
use super::{blocking, AppState};
use crate::policy::Capability;
use crate::runs::now_secs;
use crate::store::{AccessControl, Accounts, AuditOutcome, Role, User, UserUpdate};

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/users", get(list).post(create))
        .route("/api/users/{name}", patch(update))
        .route("/api/users/{name}/password", post(reset_password))
}

/// `POST /api/users`. No `Debug`: it holds a password.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateUser {
    name: String,
    role: Role,
    password: String,
    #[serde(default)]
    groups: Vec<String>,
}

/// `PATCH /api/users/{name}`: only the fields given change.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PatchUser {
    role: Option<Role>,
    disabled: Option<bool>,
    groups: Option<Vec<String>>,
}

/// `POST /api/users/{name}/password`. No `Debug`: it holds a password.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewPassword {
    password: String,
}

async fn list(State(state): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    caller.require(Capability::ManageUsers)?;
    let store = state.store.clone();
    let (users, groups) = blocking(move || Ok((store.users()?, groups_by_member(&store)?))).await?;
    let users: Vec<Value> = users
        .iter()
        .map(|user| public_user(user, groups.get(&user.name).cloned().unwrap_or_default()))
        .collect();
    Ok(Json(json!({ "users": users })).into_response())
}

async fn create(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<CreateUser>,
) -> Result<Response, ApiError> {
    caller.require(Capability::ManageUsers)?;
    let store = state.store.clone();
    let CreateUser {
        name,
        role,
        password,
        groups,
    } = request;
    let (user, groups) = blocking(move || {
        // Unknown groups are refused before the user exists.
        let known = store.groups()?;
        if let Some(missing) = groups.iter().find(|g| !known.iter().any(|k| &k.name == *g)) {
            return Err(ApiError::NotFound(format!("group `{missing}`")));
        }
        let user = store.create_user(&name, role, &password, now_secs())?;
        if groups.is_empty() {
            return Ok((user, Vec::new()));
        }
        let update = UserUpdate {
            groups: Some(groups),
            ..UserUpdate::default()
        };
        let user = store.update_user(&user.name, &update, now_secs())?;
        let groups = store.groups_of(user.id)?;
        Ok((user, groups))
    })
    .await?;
    let detail = json!({ "role": user.role, "groups": groups });
    audit_with_detail(
        &state,
        &caller.user.name,
        "user.create",
        Some(&user.name),
        AuditOutcome::Success,
        Some(detail),
    )
    .await;
    let body = json!({ "user": public_user(&user, groups) });
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

async fn update(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiJson(request): ApiJson<PatchUser>,
) -> Result<Response, ApiError> {
    caller.require(Capability::ManageUsers)?;
    let store = state.store.clone();
    let target = name.clone();
    let before = blocking(move || {
        let user = store.user_by_name(&target)?;
        let groups = store.groups_of(user.id)?;
        Ok((user, groups))
    })
    .await?;
    refuse_self_lockout(&caller, &before.0, &request)?;
    let store = state.store.clone();
    let update = UserUpdate {
        role: request.role,
        disabled: request.disabled,
        groups: request.groups,
    };
    let after = blocking(move || {
        let user = store.update_user(&name, &update, now_secs())?;
        let groups = store.groups_of(user.id)?;
        Ok((user, groups))
    })
    .await?;
    audit_changes(&state, &caller, &before, &after).await;
    let (user, groups) = after;
    Ok(Json(json!({ "user": public_user(&user, groups) })).into_response())
}

async fn reset_password(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiJson(request): ApiJson<NewPassword>,
) -> Result<Response, ApiError> {
    caller.require(Capability::ManageUsers)?;
    let store = state.store.clone();
    let user = blocking(move || Ok(store.reset_password(&name, &request.password)?)).await?;
    audit(
        &state,
        &caller.user.name,
        "user.password_reset",
        Some(&user.name),
        AuditOutcome::Success,
    )
    .await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `Conflict` when an admin would demote or disable their own account.
fn refuse_self_lockout(
    caller: &Caller,
    target: &User,
    request: &PatchUser,
) -> Result<(), ApiError> {
    if target.id != caller.user.id {
        return Ok(());
    }
    if request.role.is_some_and(|role| role != Role::Admin) {
        return Err(ApiError::Conflict(
            "you cannot change your own role; another admin can".to_owned(),
        ));
    }
    if request.disabled == Some(true) {
        return Err(ApiError::Conflict(
            "you cannot disable your own account; another admin can".to_owned(),
        ));
    }
    Ok(())
}

/// One audit row per part that changed: `user.role`, `user.disable`/`user.enable`,
/// `user.groups`.
async fn audit_changes(
    state: &AppState,
    caller: &Caller,
    (before, groups_before): &(User, Vec<String>),
    (after, groups_after): &(User, Vec<String>),
) {
    let actor = caller.user.name.as_str();
    let target = Some(after.name.as_str());
    let success = AuditOutcome::Success;
    if before.role != after.role {
        let detail = json!({ "from": before.role, "to": after.role });
        audit_with_detail(state, actor, "user.role", target, success, Some(detail)).await;
    }
    if before.disabled != after.disabled {
        let action = if after.disabled {
            "user.disable"
        } else {
            "user.enable"
        };
        audit(state, actor, action, target, success).await;
    }
    if groups_before != groups_after {
        let detail = json!({ "from": groups_before, "to": groups_after });
        audit_with_detail(state, actor, "user.groups", target, success, Some(detail)).await;
    }
}

/// Each user's groups, by user name.
fn groups_by_member(
    store: &crate::store::Store,
) -> Result<BTreeMap<String, Vec<String>>, ApiError> {
    let mut by_member: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for group in store.groups()? {
        for member in group.members {
            by_member
                .entry(member)
                .or_default()
                .push(group.name.clone());
        }
    }
    Ok(by_member)
}

/// A user as the admin API shows them: never a password hash.
fn public_user(user: &User, groups: Vec<String>) -> Value {
    json!({
        "id": user.id,
        "name": user.name,
        "role": user.role,
        "disabled": user.disabled,
        "groups": groups,
        "created_at": user.created_at,
    })
}
