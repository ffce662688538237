//! The capability tools: `create_diagnostic` and `request_recovery_approval`. They never
//! act: each only creates a pending action with its exact parameters (bound by their hash)
//! for a person to confirm or reject. The target must exist and be visible to the caller.

use std::time::Duration;

use serde_json::{json, Value};

use super::{Tool, ToolContext, ToolInfo, ToolResult};
use crate::policy::Capability;
use crate::store::{
    Actions, DiagnosticTasks, Incidents, NewPendingAction, PendingAction, PendingActionKind,
    SideEffect, StoreError,
};

/// Most characters of the user's request kept as an action's reason.
const MAX_REASON_CHARS: usize = 200;

fn reason_of(context: &ToolContext<'_>) -> String {
    let text: String = context
        .request_text
        .chars()
        .take(MAX_REASON_CHARS)
        .collect();
    format!("requested in chat: {text}")
}

fn pending(
    context: &ToolContext<'_>,
    kind: PendingActionKind,
    target: &str,
    parameters: &Value,
) -> ToolResult {
    let reason = reason_of(context);
    let action = NewPendingAction {
        kind,
        target,
        reason: &reason,
        parameters,
        run_id: context.run_id,
        owner_id: context.owner_id,
        expires_at: context.now_secs + context.action_ttl_secs,
    };
    match context
        .store
        .create_pending_action(&action, context.now_secs)
    {
        Ok(created) => ToolResult::Ok {
            summary: format!("pending action {} awaits confirmation", created.id),
            data: action_json(&created),
        },
        Err(err) => {
            tracing::error!("cannot create a pending action: {err}");
            ToolResult::error("unavailable", "the pending action could not be saved")
        }
    }
}

/// A pending action as the confirmation card shows it.
pub fn action_json(action: &PendingAction) -> Value {
    json!({
        "action_id": action.id,
        "kind": action.kind,
        "target": action.target,
        "reason": action.reason,
        "parameters": action.parameters,
        "parameters_hash": action.parameters_hash,
        "expires_at": action.expires_at,
    })
}

pub struct CreateDiagnostic(ToolInfo);

impl CreateDiagnostic {
    pub fn new() -> Self {
        Self(ToolInfo {
            name: "create_diagnostic",
            description: "Ask to start a diagnostic task for an incident. Creates a pending \
                action that a person must confirm; starts nothing by itself. Arguments: \
                incident_id. Errors: not_found.",
            parameters: json!({
                "type": "object",
                "properties": {"incident_id": {"type": "string", "maxLength": 80}},
                "required": ["incident_id"],
                "additionalProperties": false
            }),
            side_effect: SideEffect::Write,
            capability: Capability::StartDiagnostic,
            timeout: Duration::from_secs(5),
        })
    }
}

impl Tool for CreateDiagnostic {
    fn info(&self) -> &ToolInfo {
        &self.0
    }

    fn call(&self, context: &ToolContext<'_>, arguments: &Value) -> ToolResult {
        let id = arguments["incident_id"].as_str().unwrap_or_default();
        match context.store.incident(id) {
            Ok(incident) => pending(
                context,
                PendingActionKind::DiagnosticStart,
                &incident.id,
                &json!({"incident_id": incident.id}),
            ),
            Err(StoreError::NotFound(_)) => {
                ToolResult::error("not_found", format!("incident `{id}` was not found"))
            }
            Err(err) => {
                tracing::error!("cannot read incident: {err}");
                ToolResult::error("unavailable", "the incident could not be read")
            }
        }
    }
}

pub struct RequestRecoveryApproval(ToolInfo);

impl RequestRecoveryApproval {
    pub fn new() -> Self {
        Self(ToolInfo {
            name: "request_recovery_approval",
            description: "Ask for approval of the recovery a diagnostic task's report \
                proposes. Creates a pending action that an operator or admin must confirm; \
                executes nothing. Arguments: diagnostic_task_id. Errors: not_found.",
            parameters: json!({
                "type": "object",
                "properties": {"diagnostic_task_id": {"type": "string", "maxLength": 80}},
                "required": ["diagnostic_task_id"],
                "additionalProperties": false
            }),
            side_effect: SideEffect::Write,
            capability: Capability::RequestRecovery,
            timeout: Duration::from_secs(5),
        })
    }
}

impl Tool for RequestRecoveryApproval {
    fn info(&self) -> &ToolInfo {
        &self.0
    }

    fn call(&self, context: &ToolContext<'_>, arguments: &Value) -> ToolResult {
        let id = arguments["diagnostic_task_id"].as_str().unwrap_or_default();
        match context.store.diagnostic_task(context.owner_id, id) {
            Ok(task) => pending(
                context,
                PendingActionKind::RecoveryRequest,
                &task.id,
                &json!({"diagnostic_task_id": task.id, "incident_id": task.incident_id}),
            ),
            Err(StoreError::NotFound(_)) => {
                ToolResult::error("not_found", format!("diagnostic task `{id}` was not found"))
            }
            Err(err) => {
                tracing::error!("cannot read diagnostic task: {err}");
                ToolResult::error("unavailable", "the diagnostic task could not be read")
            }
        }
    }
}
