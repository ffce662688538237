//! The diagnostic report: the stored, immutable artifact of a finished task, built from
//! the graph's state. The scorer, the chat's diagnostic_status answer, the CLI, the
//! recovery approvals and the UI read only this, as the typed [`Report`] — one schema,
//! checked by serde wherever a report is read back, so a report missing a safety field
//! cannot be read at all. It holds public facts — plan, evidence, hypotheses, decision,
//! validation, recovery, policy, failure classes — never prompts or model output beyond
//! the validator's short stated reason.

use serde::{Deserialize, Serialize};

use super::facts::{CausalRole, Window};
use super::state::{
    AlertInfo, Budgets, DiagnosticState, Disposition, Failure, Finding, KnowledgeRef, NodeRecord,
    ObservationStatus, PlanStep, Policy, Recovery, RecoveryMode, RootCause, Validation, Verdict,
    GRAPH_VERSION,
};

/// A finished task's report. The flat safety fields come first: every reader (chat cards,
/// the UI, the scorer) checks them before anything else. They have no defaults — a stored
/// report without them does not parse, and a reader fails closed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub component: Option<String>,
    pub mechanism: Option<String>,
    pub recovery_mode: RecoveryMode,
    pub execution_permitted: bool,
    pub human_approval_required: bool,
    pub validator_status: String,
    #[serde(default)]
    pub validation_origin: String,
    pub evidence_ids: Vec<String>,
    pub recovery_executed: bool,
    pub task_id: String,
    pub incident_id: String,
    pub graph_version: String,
    pub thread_id: String,
    pub alert: AlertInfo,
    pub window: Window,
    pub verdict: Verdict,
    /// The Decision node's candidate; `None` (null) when it found none.
    pub root_cause: Option<RootCause>,
    pub hypotheses: Vec<HypothesisReport>,
    pub plan: Vec<PlanStep>,
    pub observations: Vec<ObservationReport>,
    pub evidence: Vec<EvidenceReport>,
    /// Guidance the graph read; [`scope_knowledge`] drops what a reader may not open.
    #[serde(default)]
    pub knowledge: Vec<KnowledgeRef>,
    pub recovery: Recovery,
    pub validation: Validation,
    pub policy: Policy,
    #[serde(default)]
    pub failures: Vec<Failure>,
    #[serde(default)]
    pub budgets: Budgets,
    #[serde(default)]
    pub summary: String,
    #[serde(default)]
    pub nodes: Vec<NodeRecord>,
}

/// A hypothesis as the evidence left it, with the ids of what moved it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HypothesisReport {
    pub id: String,
    pub title: String,
    pub disposition: Disposition,
    pub reason: String,
    #[serde(default)]
    pub component: Option<String>,
    pub supporting_evidence: Vec<String>,
    #[serde(default)]
    pub refuting_evidence: Vec<String>,
    #[serde(default)]
    pub inactivating_evidence: Vec<String>,
    #[serde(default)]
    pub findings: Vec<FindingReport>,
}

/// A fact that moved a hypothesis: which step showed it, in what causal role.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FindingReport {
    pub step: String,
    pub role: CausalRole,
    pub summary: String,
    pub evidence_ids: Vec<String>,
}

/// What one diagnostic tool call returned and how the Fact Adapter read it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservationReport {
    pub step: String,
    pub tool: String,
    pub status: ObservationStatus,
    pub evidence_ids: Vec<String>,
    pub evaluation: String,
}

/// One citable record a tool returned (its parsed fields stay in the graph's state).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EvidenceReport {
    pub id: String,
    pub task_id: String,
    pub step: String,
    pub tool: String,
    pub source: String,
    pub ts: Option<i64>,
    pub raw: String,
    pub summary: String,
    pub role: CausalRole,
    pub in_window: bool,
    #[serde(default)]
    pub supports: Vec<String>,
    #[serde(default)]
    pub refutes: Vec<String>,
    #[serde(default)]
    pub inactivates: Vec<String>,
}

impl Report {
    /// The evidence item `id`, if the report holds it.
    pub fn evidence_item(&self, id: &str) -> Option<&EvidenceReport> {
        self.evidence.iter().find(|e| e.id == id)
    }

    /// The recovery this report proposes for approval, if any.
    pub fn proposal(&self) -> Option<&super::state::Proposal> {
        self.recovery
            .proposal
            .as_ref()
            .filter(|p| !p.action.trim().is_empty())
    }

    /// The report as a reader scoped to `readable` knowledge bases (`None`: all) may see
    /// it: guidance from a knowledge base outside the scope is dropped, so a report never
    /// names a document its reader cannot open — also when readers changed after it was
    /// written.
    pub fn scope_knowledge(&mut self, readable: Option<&[String]>) {
        if let Some(readable) = readable {
            self.knowledge
                .retain(|r| readable.iter().any(|name| *name == r.kb));
        }
    }
}

/// The policy a report carries when the graph never reached the Policy Gate: nothing may
/// run, a person reviews.
fn closed_policy() -> Policy {
    Policy {
        execution_permitted: false,
        human_approval_required: true,
        recovery_executed: false,
        recovery_mode: RecoveryMode::ManualReview,
        reason: "the graph did not finish".into(),
        checks: Vec::new(),
    }
}

/// The ids of `findings`' evidence, each once, in order.
fn finding_ids(findings: &[Finding]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for id in findings.iter().flat_map(|f| f.evidence_ids.iter()) {
        if !out.contains(id) {
            out.push(id.clone());
        }
    }
    out
}

/// The report of `state` (complete once the graph reached Report).
pub fn build(state: &DiagnosticState) -> Report {
    let verdict = match (state.verdict, &state.root_cause) {
        (Some(Verdict::RootCause), Some(_)) => Verdict::RootCause,
        _ => Verdict::InsufficientEvidence,
    };
    let root_cause = state.root_cause.clone();
    let hypotheses = state
        .hypotheses
        .iter()
        .map(|h| HypothesisReport {
            id: h.id.clone(),
            title: h.title.clone(),
            disposition: h.disposition,
            reason: h.reason.clone(),
            component: h.component.clone(),
            supporting_evidence: finding_ids(&h.supporting),
            refuting_evidence: finding_ids(&h.refuting),
            inactivating_evidence: finding_ids(&h.inactivating),
            findings: h
                .supporting
                .iter()
                .chain(&h.refuting)
                .chain(&h.inactivating)
                .map(|f| FindingReport {
                    step: f.step.clone(),
                    role: f.role,
                    summary: f.summary.clone(),
                    evidence_ids: f.evidence_ids.clone(),
                })
                .collect(),
        })
        .collect();
    let evidence = state
        .evidence
        .iter()
        .map(|e| EvidenceReport {
            id: e.id.clone(),
            task_id: e.task_id.clone(),
            step: e.step.clone(),
            tool: e.tool.clone(),
            source: e.source.clone(),
            ts: e.ts,
            raw: e.raw.clone(),
            summary: e.summary.clone(),
            role: e.role,
            in_window: e.in_window,
            supports: e.supports.clone(),
            refutes: e.refutes.clone(),
            inactivates: e.inactivates.clone(),
        })
        .collect();
    let observations = state
        .observations
        .iter()
        .map(|o| ObservationReport {
            step: o.step.clone(),
            tool: o.tool.clone(),
            status: o.status,
            evidence_ids: o.evidence_ids.clone(),
            evaluation: o.evaluation.clone(),
        })
        .collect();
    let policy = state.policy.clone().unwrap_or_else(closed_policy);
    let recovery = state.recovery.clone().unwrap_or_else(|| Recovery {
        mode: policy.recovery_mode,
        proposal: None,
        reason: String::new(),
    });
    let validator_status = if state.validation.llm.status == "skipped" {
        state.validation.deterministic.status.clone()
    } else {
        state.validation.llm.status.clone()
    };
    Report {
        component: root_cause.as_ref().map(|r| r.component.clone()),
        mechanism: root_cause.as_ref().map(|r| r.mechanism.clone()),
        recovery_mode: policy.recovery_mode,
        execution_permitted: policy.execution_permitted,
        human_approval_required: policy.human_approval_required,
        validator_status,
        validation_origin: state.validation.validation_origin.clone(),
        evidence_ids: root_cause
            .as_ref()
            .map(|r| r.evidence_ids.clone())
            .unwrap_or_default(),
        recovery_executed: policy.recovery_executed,
        task_id: state.task_id.clone(),
        incident_id: state.incident_id.clone(),
        graph_version: GRAPH_VERSION.to_owned(),
        thread_id: thread_id(&state.task_id),
        alert: state.alert.clone(),
        window: state.window,
        verdict,
        root_cause,
        hypotheses,
        plan: state.plan.clone(),
        observations,
        evidence,
        knowledge: state.knowledge.clone(),
        recovery,
        validation: state.validation.clone(),
        policy,
        failures: state.failures.clone(),
        budgets: state.budgets.clone(),
        summary: state.summary.clone(),
        nodes: state.nodes.clone(),
    }
}

/// The graph thread of a task.
pub fn thread_id(task_id: &str) -> String {
    format!("warden:{task_id}:{GRAPH_VERSION}")
}

/// A valid report of a task that found nothing (insufficient evidence, manual review), for
/// tests of the report's readers to start from.
#[cfg(test)]
pub fn example(task_id: &str, incident_id: &str) -> Report {
    use std::collections::BTreeMap;
    let alert = AlertInfo {
        name: "HighErrorRate".into(),
        service: "orders".into(),
        severity: "critical".into(),
        summary: "errors".into(),
        labels: BTreeMap::new(),
    };
    let window = Window { start: 0, end: 60 };
    build(&DiagnosticState::new(
        task_id,
        incident_id,
        "run_1",
        alert,
        window,
        0,
    ))
}

/// [`example`] proposing `action` for approval.
#[cfg(test)]
pub fn proposing(task_id: &str, incident_id: &str, action: &str) -> Report {
    let mut report = example(task_id, incident_id);
    report.recovery_mode = RecoveryMode::ProposalOnly;
    report.recovery = Recovery {
        mode: RecoveryMode::ProposalOnly,
        proposal: Some(super::state::Proposal {
            action: action.into(),
            change_ref: "chg-1".into(),
            summary: action.into(),
        }),
        reason: "a proposal reverts the trigger".into(),
    };
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knowledge_outside_the_readers_scope_is_dropped() {
        let mut report = example("diagnostic_1", "incident_1");
        report.knowledge = ["runbooks:Disk full", "hr-private:Salaries"]
            .into_iter()
            .map(|pair| {
                let (kb, title) = pair.split_once(':').unwrap_or_default();
                KnowledgeRef {
                    kb: kb.into(),
                    title: title.into(),
                    path: format!("{title}.md"),
                    score: 1.0,
                }
            })
            .collect();
        let all = report.clone();
        report.scope_knowledge(None);
        assert_eq!(report, all);
        report.scope_knowledge(Some(&["runbooks".to_owned()]));
        assert_eq!(report.knowledge.len(), 1);
        assert!(!serde_json::to_string(&report).unwrap().contains("Salaries"));
        report.scope_knowledge(Some(&[]));
        assert!(report.knowledge.is_empty());
    }

    #[test]
    fn a_report_reads_back_as_written_and_fails_closed_without_its_safety_fields() {
        let report = example("diagnostic_1", "incident_1");
        let text = serde_json::to_value(&report).unwrap();
        assert_eq!(text["executionPermitted"], false);
        assert_eq!(text["humanApprovalRequired"], true);
        assert_eq!(text["recoveryMode"], "manual_review");
        assert_eq!(text["rootCause"], serde_json::Value::Null);
        let back: Report = serde_json::from_value(text.clone()).unwrap();
        assert_eq!(back, report);
        for field in [
            "executionPermitted",
            "recoveryExecuted",
            "policy",
            "recoveryMode",
        ] {
            let mut missing = text.clone();
            missing.as_object_mut().unwrap().remove(field);
            assert!(
                serde_json::from_value::<Report>(missing).is_err(),
                "{field}"
            );
        }
        let mut wrong_type = text;
        wrong_type["executionPermitted"] = serde_json::json!("false");
        assert!(serde_json::from_value::<Report>(wrong_type).is_err());
    }
}
