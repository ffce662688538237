//! The closing nodes, all in code: Decision builds the candidate root cause from the one
//! supported hypothesis (component, mechanism, trigger, causal chain, confidence,
//! evidence ids); the Deterministic Validator checks it against the task's own evidence;
//! the Recovery Planner applies the one recovery rule (an identified change → propose
//! reverting it; any other proven cause → manual review); Manual Review closes without a
//! root cause; the Policy Gate fails closed and never permits execution.

use std::collections::BTreeSet;

use super::assess::{decision_ready, independent_sources, CHAIN};
use super::facts::CausalRole;
use super::playbooks::{Playbooks, TRIGGER_KINDS};
use super::state::{
    ChainLink, DiagnosticState, Disposition, Finding, Policy, PolicyCheck, Proposal, Recovery,
    RecoveryMode, RootCause, StepStatus, Trigger, Verdict,
};

/// Most evidence ids one chain link cites.
const MAX_LINK_EVIDENCE: usize = 8;
/// Most evidence ids a root cause cites.
const MAX_ROOT_EVIDENCE: usize = 64;

/// A link's evidence: the lead finding's first, then one per source in turn, so every
/// source that showed the role is cited.
fn spread_ids(lead: Option<&Finding>, findings: &[&Finding]) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    let push = |id: &String, ids: &mut Vec<String>| {
        if !ids.contains(id) && ids.len() < MAX_LINK_EVIDENCE {
            ids.push(id.clone());
        }
    };
    if let Some(id) = lead.and_then(|f| f.evidence_ids.first()) {
        push(id, &mut ids);
    }
    let mut sources: Vec<&str> = Vec::new();
    for f in findings {
        if !sources.contains(&f.source.as_str()) {
            sources.push(&f.source);
            if let Some(id) = f.evidence_ids.first() {
                push(id, &mut ids);
            }
        }
    }
    for f in findings {
        for id in &f.evidence_ids {
            push(id, &mut ids);
        }
    }
    ids
}

/// Decision: the candidate root cause, or insufficient evidence with the reason.
pub fn decide(state: &mut DiagnosticState) {
    for step in &mut state.plan {
        if step.status == StepStatus::Pending {
            step.status = StepStatus::Skipped;
        }
    }
    match decision_ready(state) {
        Ok(h) => {
            let mut chain = Vec::new();
            for role in CHAIN {
                let findings: Vec<_> = h.supporting.iter().filter(|f| f.role == role).collect();
                // A trigger that names a change comes first: it is the identified cause.
                let lead = findings
                    .iter()
                    .find(|f| f.trigger.as_ref().is_some_and(|t| t.1.is_some()))
                    .or(findings.first());
                chain.push(ChainLink {
                    role,
                    summary: lead.map(|f| f.summary.clone()).unwrap_or_default(),
                    evidence_ids: spread_ids(lead.copied(), &findings),
                });
            }
            // Of several identified changes, the latest one.
            let latest = |f: &&Finding| {
                f.evidence_ids
                    .iter()
                    .filter_map(|id| state.evidence_item(id).and_then(|e| e.ts))
                    .max()
                    .unwrap_or(i64::MIN)
            };
            let trigger_finding = h
                .supporting
                .iter()
                .filter(|f| f.role == CausalRole::Trigger)
                .filter(|f| f.trigger.as_ref().is_some_and(|t| t.1.is_some()))
                .max_by_key(latest)
                .or_else(|| {
                    h.supporting
                        .iter()
                        .find(|f| f.role == CausalRole::Trigger && f.trigger.is_some())
                });
            let trigger = trigger_finding
                .and_then(|f| f.trigger.clone())
                .map(|(kind, reference)| Trigger { kind, reference })
                .unwrap_or(Trigger {
                    kind: String::new(),
                    reference: None,
                });
            // Everything that supports the cause inside its rules' windows is cited.
            let mut evidence_ids: Vec<String> = Vec::new();
            let chain_ids = chain.iter().flat_map(|l| l.evidence_ids.iter());
            for id in chain_ids.chain(h.supporting.iter().flat_map(|f| f.evidence_ids.iter())) {
                if !evidence_ids.contains(id) && evidence_ids.len() < MAX_ROOT_EVIDENCE {
                    evidence_ids.push(id.clone());
                }
            }
            let untestable = state
                .hypotheses
                .iter()
                .filter(|o| o.id != h.id && o.disposition == Disposition::Unresolved)
                .count();
            let confidence = (0.5 + 0.1 * independent_sources(h).min(4) as f64
                - 0.05 * untestable.min(4) as f64)
                .clamp(0.3, 0.95);
            state.root_cause = Some(RootCause {
                component: h.component.clone().unwrap_or_default(),
                mechanism: h.id.clone(),
                trigger,
                causal_chain: chain,
                confidence: (confidence * 100.0).round() / 100.0,
                evidence_ids,
            });
            state.verdict = Some(Verdict::RootCause);
        }
        Err(reason) => {
            state.root_cause = None;
            state.verdict = Some(Verdict::InsufficientEvidence);
            state.manual_review_reason = Some(format!("insufficient evidence: {reason}"));
        }
    }
}

/// The Deterministic Validator's findings on the candidate (empty = valid).
pub fn validate(state: &DiagnosticState, books: &Playbooks) -> Vec<String> {
    let Some(root) = &state.root_cause else {
        return vec!["no root cause was decided".to_owned()];
    };
    let mut problems = Vec::new();
    let cited: BTreeSet<&String> = root
        .evidence_ids
        .iter()
        .chain(root.causal_chain.iter().flat_map(|l| l.evidence_ids.iter()))
        .collect();
    for id in &cited {
        match state.evidence_item(id) {
            None => problems.push(format!("evidence `{id}` is not this task's")),
            Some(item) if item.task_id != state.task_id => {
                problems.push(format!("evidence `{id}` belongs to another task"))
            }
            Some(item) if item.ts.is_some_and(|ts| !state.window.recent(ts)) => {
                problems.push(format!("evidence `{id}` lies outside the incident window"))
            }
            Some(_) => {}
        }
    }
    let supported: Vec<&str> = state
        .hypotheses
        .iter()
        .filter(|h| h.disposition == Disposition::Supported)
        .map(|h| h.id.as_str())
        .collect();
    if supported != [root.mechanism.as_str()] {
        problems.push("the root cause is not the one uniquely supported hypothesis".to_owned());
    }
    if books.hypothesis(&root.mechanism).is_none() {
        problems.push(format!("`{}` is not a known mechanism", root.mechanism));
    }
    for role in CHAIN {
        if !root
            .causal_chain
            .iter()
            .any(|l| l.role == role && !l.evidence_ids.is_empty())
        {
            problems.push(format!(
                "the causal chain has no {} evidence",
                role.as_str()
            ));
        }
    }
    if let Some(open) = state
        .hypotheses
        .iter()
        .find(|h| h.id != root.mechanism && h.open)
    {
        problems.push(format!("competitor `{}` is still open", open.id));
    }
    if root.component.trim().is_empty() {
        problems.push("no component is named".to_owned());
    }
    if !TRIGGER_KINDS.contains(&root.trigger.kind.as_str()) {
        problems.push("the trigger has no known kind".to_owned());
    }
    if let Some(change) = &root.trigger.reference {
        let observed = state.evidence.iter().any(|e| {
            e.source == "changes"
                && e.fields.get("id").and_then(|v| v.as_str()) == Some(change.as_str())
        });
        if !observed {
            problems.push(format!("the trigger change `{change}` was never observed"));
        }
    }
    if !(0.0..=1.0).contains(&root.confidence) {
        problems.push("confidence is outside 0–1".to_owned());
    }
    problems
}

/// Whether the validator's problems are gaps another replan could close.
pub fn repairable(problems: &[String]) -> bool {
    !problems.is_empty()
        && problems
            .iter()
            .all(|p| p.starts_with("the causal chain has no") || p.starts_with("competitor"))
}

/// The Recovery Planner: the recovery rule applied to a validated root cause.
pub fn plan_recovery(state: &DiagnosticState, books: &Playbooks) -> Recovery {
    let Some(root) = &state.root_cause else {
        return manual("no root cause is asserted");
    };
    let note = books
        .hypothesis(&root.mechanism)
        .and_then(|h| h.recovery.clone())
        .unwrap_or_default();
    match &root.trigger.reference {
        Some(change) => {
            let what = state
                .evidence
                .iter()
                .find(|e| {
                    e.source == "changes"
                        && e.fields.get("id").and_then(|v| v.as_str()) == Some(change.as_str())
                })
                .map(|e| e.summary.clone())
                .unwrap_or_default();
            Recovery {
                mode: RecoveryMode::ProposalOnly,
                proposal: Some(Proposal {
                    action: "revert_change".to_owned(),
                    change_ref: change.clone(),
                    summary: format!("Revert {change} ({what}). {note}")
                        .trim()
                        .to_owned(),
                }),
                reason: format!(
                    "the trigger is an identified change ({change}): reverting it is proposed; \
                     a person decides"
                ),
            }
        }
        None => manual(&format!(
            "the root cause is proven but its trigger ({}) is not a change to revert; {note}",
            root.trigger.kind
        )),
    }
}

fn manual(reason: &str) -> Recovery {
    Recovery {
        mode: RecoveryMode::ManualReview,
        proposal: None,
        reason: reason.trim().trim_end_matches(';').to_owned(),
    }
}

/// Manual Review: no recovery proposed; the reason says why.
pub fn manual_review(state: &DiagnosticState) -> Recovery {
    let reason = if !state.failures.is_empty() {
        let classes: Vec<String> = state
            .failures
            .iter()
            .map(|f| format!("{} at {}", f.class, f.stage))
            .collect();
        format!("failed closed after {}", classes.join(", "))
    } else {
        state
            .manual_review_reason
            .clone()
            .unwrap_or_else(|| "the conclusion did not pass validation".to_owned())
    };
    manual(&reason)
}

/// Least confidence a root cause needs for its recovery to be proposed.
pub const MIN_PROPOSAL_CONFIDENCE: f64 = 0.5;

/// The Policy Gate: execution is never permitted here. A proposal stands only if every rule
/// passes — no failure recorded, the conclusion validated, the proposal reverting exactly the
/// root cause's observed trigger change, that change made on the component blamed, and
/// enough confidence; any rule that fails turns it into a manual review (with the grounded
/// fallback as validation origin after a failure).
pub fn policy_gate(state: &mut DiagnosticState) -> Policy {
    let mut recovery = state
        .recovery
        .clone()
        .unwrap_or_else(|| manual_review(state));
    if !state.failures.is_empty() {
        state.validation.validation_origin = "deterministic_grounded_fallback".to_owned();
    }
    let checks = if recovery.mode == RecoveryMode::ProposalOnly {
        proposal_checks(state, &recovery)
    } else {
        Vec::new()
    };
    if let Some(failed) = checks.iter().find(|c| !c.passed) {
        recovery = if state.failures.is_empty() {
            manual(&format!("the proposal was withheld: {}", failed.detail))
        } else {
            manual_review(state)
        };
    }
    let reason = match recovery.mode {
        RecoveryMode::ProposalOnly => {
            "a recovery is proposed, not executed: a person must request and approve it"
        }
        RecoveryMode::NoAction => "the incident has recovered; nothing to do",
        RecoveryMode::ManualReview => "a person must review before any recovery",
    };
    let policy = Policy {
        execution_permitted: false,
        human_approval_required: recovery.mode != RecoveryMode::NoAction,
        recovery_executed: false,
        recovery_mode: recovery.mode,
        reason: reason.to_owned(),
        checks,
    };
    state.recovery = Some(recovery);
    policy
}

/// The rules a proposal must pass, each with its outcome.
fn proposal_checks(state: &DiagnosticState, recovery: &Recovery) -> Vec<PolicyCheck> {
    let check = |rule: &str, passed: bool, detail: String| PolicyCheck {
        rule: rule.to_owned(),
        passed,
        detail,
    };
    let root = state.root_cause.as_ref();
    let proposed = recovery.proposal.as_ref().map(|p| p.change_ref.as_str());
    let trigger = root.and_then(|r| r.trigger.reference.as_deref());
    let change = state
        .evidence
        .iter()
        .find(|e| e.source == "changes" && e.fields.get("id").and_then(|v| v.as_str()) == proposed);
    let changed = change
        .and_then(|e| e.fields.get("service"))
        .and_then(|v| v.as_str())
        .unwrap_or("");
    let component = root.map(|r| r.component.as_str()).unwrap_or("");
    let confidence = root.map(|r| r.confidence).unwrap_or(0.0);
    let validated = state.validation.deterministic.status == "passed"
        && state.validation.llm.status != "inconsistent";
    vec![
        check(
            "no_failures",
            state.failures.is_empty(),
            format!("{} failure(s) recorded", state.failures.len()),
        ),
        check(
            "validated",
            validated,
            format!(
                "deterministic validation {}, model validation {}",
                state.validation.deterministic.status, state.validation.llm.status
            ),
        ),
        check(
            "reverts_the_trigger",
            proposed.is_some() && proposed == trigger && change.is_some(),
            format!(
                "the proposal reverts {}; the root cause's trigger change is {}",
                proposed.unwrap_or("nothing"),
                trigger.unwrap_or("none")
            ),
        ),
        check(
            "change_on_component",
            !component.is_empty() && changed.eq_ignore_ascii_case(component),
            format!("the change was made on `{changed}`; the root cause blames `{component}`"),
        ),
        check(
            "confidence",
            confidence >= MIN_PROPOSAL_CONFIDENCE,
            format!("confidence {confidence} (at least {MIN_PROPOSAL_CONFIDENCE} to propose)"),
        ),
    ]
}

/// A plain summary of the outcome (the report's language view; facts stand without it).
pub fn summary(state: &DiagnosticState) -> String {
    let mode = state
        .policy
        .as_ref()
        .map(|p| p.recovery_mode.as_str())
        .unwrap_or("manual_review");
    match &state.root_cause {
        Some(root) => {
            let chain: Vec<String> = root
                .causal_chain
                .iter()
                .map(|l| format!("{}: {}", l.role.as_str(), l.summary))
                .collect();
            format!(
                "Root cause: {} in {} (trigger {}{}). {}. Recovery: {mode}.",
                root.mechanism,
                root.component,
                root.trigger.kind,
                root.trigger
                    .reference
                    .as_ref()
                    .map(|r| format!(" {r}"))
                    .unwrap_or_default(),
                chain.join("; "),
            )
        }
        None => format!(
            "No root cause asserted: {}. Recovery: {mode}.",
            state
                .recovery
                .as_ref()
                .map(|r| r.reason.clone())
                .unwrap_or_else(|| "insufficient evidence".to_owned())
        ),
    }
}
