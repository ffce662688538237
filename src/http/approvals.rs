//! The recovery approval queue, for approvers (`Capability::ApproveRecovery`): list the
//! recovery requests awaiting a second person's approval with what each would approve, and
//! approve or reject one, repeating its `parameters_hash`. An approver cannot approve their
//! own request while `--allow-self-approval` is off (the default). Every decision is
//! audited (`recovery.approve`, `recovery.reject`); the rules live in
//! `RecoveryApprovals::decide_recovery_approval`.

use axum::extract::State;
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
    decision_response, ApprovalDecision, AuditOutcome, AwaitingRecovery, Decision,
    RecoveryApprovals,
};

/// Most requests one listing shows.
const MAX_LISTED: usize = 200;

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/approvals", get(list))
        .route("/api/approvals/{id}/approve", post(approve))
        .route("/api/approvals/{id}/reject", post(reject))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ApprovalRequest {
    parameters_hash: String,
}

async fn list(State(state): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    caller.require(Capability::ApproveRecovery)?;
    let store = state.store.clone();
    let waiting = blocking(move || Ok(store.recoveries_awaiting_approval(MAX_LISTED)?)).await?;
    let me = caller.user.id;
    let items: Vec<_> = waiting.iter().map(|w| item_json(w, me)).collect();
    Ok(Json(json!({ "approvals": items })).into_response())
}

async fn approve(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(request): ApiJson<ApprovalRequest>,
) -> Result<Response, ApiError> {
    decide(state, caller, id, request, Decision::Confirm).await
}

async fn reject(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(request): ApiJson<ApprovalRequest>,
) -> Result<Response, ApiError> {
    decide(state, caller, id, request, Decision::Reject).await
}

async fn decide(
    state: AppState,
    caller: Caller,
    id: String,
    request: ApprovalRequest,
    decision: Decision,
) -> Result<Response, ApiError> {
    caller.require(Capability::ApproveRecovery)?;
    let store = state.store.clone();
    let approver_id = caller.user.id;
    let approver_can_approve = allows(caller.user.role, Capability::ApproveRecovery, Channel::Http);
    let action_id = id.clone();
    let decided = blocking(move || {
        let decision = ApprovalDecision {
            approver_id,
            approver_can_approve,
            action_id: &action_id,
            decision,
            parameters_hash: &request.parameters_hash,
        };
        Ok(store.decide_recovery_approval(&decision, now_secs())?)
    })
    .await;
    let (outcome, detail) = match &decided {
        Ok(action) => (AuditOutcome::Success, json!({ "status": action.status })),
        Err(err) => failed_decision_audit(err),
    };
    let audit_action = match decision {
        Decision::Confirm => "recovery.approve",
        Decision::Reject => "recovery.reject",
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
    match decided {
        Ok(action) => Ok(Json(decision_response(&action)).into_response()),
        // The refusal is audited above, as this decision.
        Err(err) => Ok(audited_error(err)),
    }
}

/// One waiting request as an approver sees it; `own` marks the approver's own requests.
fn item_json(waiting: &AwaitingRecovery, me: i64) -> serde_json::Value {
    let action = &waiting.action;
    json!({
        "id": action.id,
        "target": action.target,
        "reason": action.reason,
        "parameters": action.parameters,
        "parameters_hash": action.parameters_hash,
        "requester": waiting.requester,
        "own": action.owner_id == me,
        "diagnostic_task_id": waiting.diagnostic_task_id,
        "incident_id": waiting.incident_id,
        "root_cause": waiting.root_cause,
        "proposal": waiting.proposal,
        "expires_at": action.expires_at,
        "created_at": action.created_at,
    })
}
