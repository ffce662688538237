//! Pending-action routes, owner-scoped (another user's action answers 404 like a missing
//! one): read an action, and confirm or reject it. A decision must carry an
//! `Idempotency-Key` header (a retry with the same key gets the same answer, marked
//! `Idempotent-Replayed: true`) and the action's `parameters_hash`, so a person confirms
//! exactly the parameters they were shown. Confirming a recovery request needs the operator
//! or admin role. Every decision is audited (`action.confirm`, `action.reject`); the rules
//! themselves live in `Actions::decide_action`.

use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::auth::{audited_error, failed_decision_audit, Caller};
use super::error::ApiError;
use super::incidents::audit;
use super::json::{ApiJson, ApiPath};
use super::{blocking, AppState};
use crate::policy::{allows, Capability, Channel};
use crate::runs::now_secs;
use crate::store::{
    ActionDecision, Actions, AuditOutcome, Decision, PendingAction, MAX_IDEMPOTENCY_KEY_CHARS,
};

/// The request header naming a decision's idempotency key.
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";
/// The response header marking a replayed answer.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/actions/{id}", get(read))
        .route("/api/actions/{id}/confirm", post(confirm))
        .route("/api/actions/{id}/reject", post(reject))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DecisionRequest {
    parameters_hash: String,
}

async fn read(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    caller.require(Capability::Chat)?;
    let store = state.store.clone();
    let owner = caller.user.id;
    let action = blocking(move || Ok(store.pending_action(owner, &id)?)).await?;
    Ok(Json(action_json(&action)).into_response())
}

async fn confirm(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    headers: HeaderMap,
    ApiJson(request): ApiJson<DecisionRequest>,
) -> Result<Response, ApiError> {
    decide(state, caller, id, &headers, request, Decision::Confirm).await
}

async fn reject(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    headers: HeaderMap,
    ApiJson(request): ApiJson<DecisionRequest>,
) -> Result<Response, ApiError> {
    decide(state, caller, id, &headers, request, Decision::Reject).await
}

async fn decide(
    state: AppState,
    caller: Caller,
    id: String,
    headers: &HeaderMap,
    request: DecisionRequest,
    decision: Decision,
) -> Result<Response, ApiError> {
    caller.require(Capability::Chat)?;
    let key = idempotency_key(headers)?;
    let store = state.store.clone();
    let owner = caller.user.id;
    // What confirming may do is the policy table's answer for the confirm channel.
    let role = caller.user.role;
    let actor_can_recover = allows(role, Capability::ApproveRecovery, Channel::Confirm);
    let actor_can_start_diagnostic = allows(role, Capability::StartDiagnostic, Channel::Confirm);
    let action_id = id.clone();
    let decided = blocking(move || {
        let decision = ActionDecision {
            owner_id: owner,
            actor_can_recover,
            actor_can_start_diagnostic,
            action_id: &action_id,
            decision,
            idempotency_key: &key,
            parameters_hash: &request.parameters_hash,
        };
        Ok(store.decide_action(&decision, now_secs())?)
    })
    .await;
    let (outcome, detail) = match &decided {
        Ok(decided) => (
            AuditOutcome::Success,
            json!({ "status": decided.action.status, "replayed": decided.replayed }),
        ),
        Err(err) => failed_decision_audit(err),
    };
    let audit_action = match decision {
        Decision::Confirm => "action.confirm",
        Decision::Reject => "action.reject",
    };
    audit(
        &state,
        &caller.user.name,
        audit_action,
        Some(&id),
        outcome,
        Some(detail),
    )
    .await;
    let decided = match decided {
        Ok(decided) => decided,
        // The refusal is audited above, as this action.
        Err(err) => return Ok(audited_error(err)),
    };
    let mut response = Json(decided.response).into_response();
    if decided.replayed {
        response.headers_mut().insert(
            HeaderName::from_static(REPLAYED_HEADER),
            HeaderValue::from_static("true"),
        );
    }
    Ok(response)
}

/// The request's idempotency key: 400 when missing, empty, longer than
/// `MAX_IDEMPOTENCY_KEY_CHARS` or not visible ASCII.
fn idempotency_key(headers: &HeaderMap) -> Result<String, ApiError> {
    let bad = || {
        ApiError::invalid(
            IDEMPOTENCY_KEY_HEADER,
            format!(
                "send an Idempotency-Key header of 1 to {MAX_IDEMPOTENCY_KEY_CHARS} visible \
                 ASCII characters (a new one for each decision, the same one for its retries)"
            ),
        )
    };
    let key = headers
        .get(IDEMPOTENCY_KEY_HEADER)
        .and_then(|value| value.to_str().ok())
        .ok_or_else(bad)?;
    let visible = key.bytes().all(|b| b.is_ascii_graphic());
    if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY_CHARS || !visible {
        return Err(bad());
    }
    Ok(key.to_owned())
}

/// An action as its owner sees it (no owner id).
fn action_json(action: &PendingAction) -> serde_json::Value {
    json!({
        "id": action.id,
        "kind": action.kind,
        "target": action.target,
        "reason": action.reason,
        "parameters": action.parameters,
        "parameters_hash": action.parameters_hash,
        "run_id": action.run_id,
        "status": action.status,
        "result": action.result,
        "expires_at": action.expires_at,
        "created_at": action.created_at,
        "decided_at": action.decided_at,
    })
}
