//! The diagnostic report: the stored, immutable artifact of a finished task, built from
//! the graph's state. The scorer, the chat's diagnostic_status answer and the UI read
//! only this. It holds public facts — plan, evidence, hypotheses, decision, validation,
//! recovery, policy, failure classes — never prompts or model output beyond the
//! validator's short stated reason.

use serde_json::{json, Value};

use super::state::{DiagnosticState, Disposition, RecoveryMode, Verdict, GRAPH_VERSION};

/// The report as a reader scoped to `readable` knowledge bases (`None`: all) may see it:
/// guidance from a knowledge base outside the scope is dropped, so a report never names a
/// document its reader cannot open — also when readers changed after it was written.
pub fn scope_knowledge(report: &mut Value, readable: Option<&[String]>) {
    let Some(readable) = readable else {
        return;
    };
    if let Some(refs) = report.get_mut("knowledge").and_then(Value::as_array_mut) {
        refs.retain(|r| {
            r["kb"]
                .as_str()
                .is_some_and(|kb| readable.iter().any(|name| name == kb))
        });
    }
}

/// The report of `state` (complete once the graph reached Report).
pub fn build(state: &DiagnosticState) -> Value {
    let verdict = match state.verdict {
        Some(Verdict::RootCause) if state.root_cause.is_some() => "root_cause",
        _ => "insufficient_evidence",
    };
    let hypotheses: Vec<Value> = state
        .hypotheses
        .iter()
        .map(|h| {
            let ids = |findings: &[super::state::Finding]| -> Vec<String> {
                let mut out: Vec<String> = Vec::new();
                for id in findings.iter().flat_map(|f| f.evidence_ids.iter()) {
                    if !out.contains(id) {
                        out.push(id.clone());
                    }
                }
                out
            };
            json!({
                "id": h.id,
                "title": h.title,
                "disposition": match h.disposition {
                    Disposition::Supported => "supported",
                    Disposition::Refuted => "refuted",
                    Disposition::CausallyInactive => "causally_inactive",
                    Disposition::Unresolved => "unresolved",
                },
                "reason": h.reason,
                "component": h.component,
                "supportingEvidence": ids(&h.supporting),
                "refutingEvidence": ids(&h.refuting),
                "inactivatingEvidence": ids(&h.inactivating),
                "findings": h.supporting.iter().chain(&h.refuting).chain(&h.inactivating)
                    .map(|f| json!({"step": f.step, "role": f.role, "summary": f.summary,
                                    "evidenceIds": f.evidence_ids}))
                    .collect::<Vec<_>>(),
            })
        })
        .collect();
    let evidence: Vec<Value> = state
        .evidence
        .iter()
        .map(|e| {
            json!({
                "id": e.id, "taskId": e.task_id, "step": e.step, "tool": e.tool,
                "source": e.source, "ts": e.ts, "raw": e.raw, "summary": e.summary,
                "role": e.role, "inWindow": e.in_window, "supports": e.supports,
                "refutes": e.refutes, "inactivates": e.inactivates,
            })
        })
        .collect();
    let observations: Vec<Value> = state
        .observations
        .iter()
        .map(|o| {
            json!({"step": o.step, "tool": o.tool, "status": o.status,
                   "evidenceIds": o.evidence_ids, "evaluation": o.evaluation})
        })
        .collect();
    let mode = state
        .policy
        .as_ref()
        .map(|p| p.recovery_mode)
        .unwrap_or(RecoveryMode::ManualReview);
    let validator_status = if state.validation.llm.status == "skipped" {
        state.validation.deterministic.status.clone()
    } else {
        state.validation.llm.status.clone()
    };
    let root = state.root_cause.as_ref();
    json!({
        // The safety fields every reader checks first (chat cards, the UI): flat.
        "component": root.map(|r| r.component.clone()),
        "mechanism": root.map(|r| r.mechanism.clone()),
        "recoveryMode": mode.as_str(),
        "executionPermitted": state.policy.as_ref().is_some_and(|p| p.execution_permitted),
        "humanApprovalRequired": state.policy.as_ref().is_none_or(|p| p.human_approval_required),
        "validatorStatus": validator_status,
        "validationOrigin": state.validation.validation_origin,
        "evidenceIds": root.map(|r| r.evidence_ids.clone()).unwrap_or_default(),
        "taskId": state.task_id,
        "incidentId": state.incident_id,
        "graphVersion": GRAPH_VERSION,
        "threadId": thread_id(&state.task_id),
        "alert": state.alert,
        "window": state.window,
        "verdict": verdict,
        "rootCause": state.root_cause,
        "hypotheses": hypotheses,
        "plan": state.plan,
        "observations": observations,
        "evidence": evidence,
        "knowledge": state.knowledge,
        "recovery": state.recovery.as_ref().map(|r| json!({
            "mode": r.mode.as_str(), "proposal": r.proposal, "reason": r.reason,
        })).unwrap_or_else(|| json!({"mode": mode.as_str(), "proposal": null, "reason": ""})),
        "validation": state.validation,
        "policy": state.policy.as_ref().map(|p| json!({
            "executionPermitted": p.execution_permitted,
            "humanApprovalRequired": p.human_approval_required,
            "recoveryMode": p.recovery_mode.as_str(),
            "reason": p.reason,
            "checks": p.checks,
        })).unwrap_or_else(|| json!({"executionPermitted": false,
                                      "humanApprovalRequired": true,
                                      "recoveryMode": "manual_review",
                                      "reason": "the graph did not finish",
                                      "checks": []})),
        "failures": state.failures,
        "budgets": state.budgets,
        "recoveryExecuted": state.policy.as_ref().is_some_and(|p| p.recovery_executed),
        "summary": state.summary,
        "nodes": state.nodes,
    })
}

/// The graph thread of a task.
pub fn thread_id(task_id: &str) -> String {
    format!("warden:{task_id}:{GRAPH_VERSION}")
}

#[cfg(test)]
mod scope_tests {
    use super::*;

    #[test]
    fn knowledge_outside_the_readers_scope_is_dropped() {
        let mut report = json!({"knowledge": [
            {"kb": "runbooks", "title": "Disk full", "path": "disk.md"},
            {"kb": "hr-private", "title": "Salaries", "path": "pay.md"},
        ], "verdict": "root_cause"});
        let all = report.clone();
        scope_knowledge(&mut report, None);
        assert_eq!(report, all);
        scope_knowledge(&mut report, Some(&["runbooks".to_owned()]));
        assert_eq!(report["knowledge"].as_array().map(Vec::len), Some(1));
        assert!(!report.to_string().contains("Salaries"));
        scope_knowledge(&mut report, Some(&[]));
        assert_eq!(report["knowledge"], json!([]));
    }
}
