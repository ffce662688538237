//! Read-only incident tools: `get_incident`, `list_incidents` (incidents are visible to
//! every signed-in user) and `get_diagnostic_report` (the caller's own tasks only; another
//! user's answers exactly like a missing one).

use std::time::Duration;

use serde_json::{json, Value};

use super::{Tool, ToolContext, ToolInfo, ToolResult};
use crate::policy::Capability;
use crate::store::{DiagnosticTasks, Incidents, SideEffect, StoreError};

/// Most incidents one list returns.
const MAX_LISTED: u64 = 20;

fn not_found(what: &str, id: &str) -> ToolResult {
    ToolResult::error("not_found", format!("{what} `{id}` was not found"))
}

fn store_failure(err: StoreError) -> ToolResult {
    match err {
        StoreError::NotFound(_) => ToolResult::error("not_found", "not found"),
        other => {
            tracing::error!("tool store error: {other}");
            ToolResult::error("unavailable", "the data could not be read")
        }
    }
}

pub struct GetIncident(ToolInfo);

impl GetIncident {
    pub fn new() -> Self {
        Self(ToolInfo {
            name: "get_incident",
            description: "Read one incident. Arguments: incident_id (incident_<id>). Returns \
                its title, service, severity, status and times. Errors: not_found.",
            parameters: json!({
                "type": "object",
                "properties": {"incident_id": {"type": "string", "maxLength": 80}},
                "required": ["incident_id"],
                "additionalProperties": false
            }),
            side_effect: SideEffect::Read,
            capability: Capability::ReadIncidents,
            timeout: Duration::from_secs(5),
        })
    }
}

impl Tool for GetIncident {
    fn info(&self) -> &ToolInfo {
        &self.0
    }

    fn call(&self, context: &ToolContext<'_>, arguments: &Value) -> ToolResult {
        let id = arguments["incident_id"].as_str().unwrap_or_default();
        match context.store.incident(id) {
            Ok(incident) => ToolResult::Ok {
                summary: format!("{} ({})", incident.id, incident.status),
                data: json!(incident),
            },
            Err(StoreError::NotFound(_)) => not_found("incident", id),
            Err(err) => store_failure(err),
        }
    }
}

pub struct ListIncidents(ToolInfo);

impl ListIncidents {
    pub fn new() -> Self {
        Self(ToolInfo {
            name: "list_incidents",
            description: "List recent incidents, newest first. Arguments: status (firing, \
                resolved, open or closed; optional), limit (1-20). Returns incidents.",
            parameters: json!({
                "type": "object",
                "properties": {
                    "status": {"enum": ["firing", "resolved", "open", "closed"]},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LISTED}
                },
                "additionalProperties": false
            }),
            side_effect: SideEffect::Read,
            capability: Capability::ReadIncidents,
            timeout: Duration::from_secs(5),
        })
    }
}

impl Tool for ListIncidents {
    fn info(&self) -> &ToolInfo {
        &self.0
    }

    fn call(&self, context: &ToolContext<'_>, arguments: &Value) -> ToolResult {
        let status = arguments["status"].as_str().and_then(|s| s.parse().ok());
        let limit = arguments["limit"]
            .as_u64()
            .unwrap_or(MAX_LISTED)
            .clamp(1, MAX_LISTED);
        match context.store.incidents(status, limit as u32) {
            Ok(incidents) => ToolResult::Ok {
                summary: format!("{} incidents", incidents.len()),
                data: json!({ "incidents": incidents }),
            },
            Err(err) => store_failure(err),
        }
    }
}

pub struct GetDiagnosticReport(ToolInfo);

impl GetDiagnosticReport {
    pub fn new() -> Self {
        Self(ToolInfo {
            name: "get_diagnostic_report",
            description: "Read one of your diagnostic tasks and its report. Arguments: \
                diagnostic_task_id (diagnostic_<id>). Returns status and the report's \
                component, mechanism and safety fields. Errors: not_found.",
            parameters: json!({
                "type": "object",
                "properties": {"diagnostic_task_id": {"type": "string", "maxLength": 80}},
                "required": ["diagnostic_task_id"],
                "additionalProperties": false
            }),
            side_effect: SideEffect::Read,
            capability: Capability::ReadIncidents,
            timeout: Duration::from_secs(5),
        })
    }
}

impl Tool for GetDiagnosticReport {
    fn info(&self) -> &ToolInfo {
        &self.0
    }

    fn call(&self, context: &ToolContext<'_>, arguments: &Value) -> ToolResult {
        let id = arguments["diagnostic_task_id"].as_str().unwrap_or_default();
        match context.store.diagnostic_task(context.owner_id, id) {
            Ok(mut task) => {
                // Guidance from knowledge bases the caller cannot read is not shown.
                if let Some(report) = task.report.as_mut() {
                    report.scope_knowledge(context.readable_kbs);
                }
                ToolResult::Ok {
                    summary: format!("{} ({})", task.id, status_text(&task.status)),
                    data: json!(task),
                }
            }
            Err(StoreError::NotFound(_)) => not_found("diagnostic task", id),
            Err(err) => store_failure(err),
        }
    }
}

fn status_text(status: &impl serde::Serialize) -> String {
    serde_json::to_value(status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}
