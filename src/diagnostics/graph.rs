//! The diagnostic graph: each node is a transition over the typed state that returns the
//! next node, and every edge is code —
//! Knowledge Investigator → Planner → Strategy Router → Executor (or the fast path straight
//! to the gate) → Fact Adapter → Sufficiency Gate → {Strategy Router | Replanner (≤ 1) |
//! Hypothesis Adjudicator | Decision} → Deterministic Validator → {Replanner | Manual
//! Review | Recovery Planner} → Validator Router → optional LLM Validator → Policy Gate →
//! Report; Manual Review also ends in Policy Gate → Report. Model, tool and knowledge calls
//! go through `GraphIo`, so the edges are unit-tested with a scripted double and the
//! driver adds the ledger, events and checkpoints.

use serde_json::{json, Value};

use super::assess::{self, GateLimits};
use super::decide;
use super::facts::{adapt, Item};
use super::planner;
use super::playbooks::Playbooks;
use super::state::{
    DiagnosticState, Disposition, EvidenceItem, GateRoute, KnowledgeRef, Node, Observation,
    ObservationStatus, StepOrigin, StepStatus, Verdict,
};
use super::tools::{ToolOutput, ToolStatus};
use crate::engine::ChatMessage;
use crate::runs::TurnStop;

/// Why a model call gave nothing usable.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelFailure {
    Timeout,
    BadJson,
    /// The model (or validator) could not be reached or failed.
    Unavailable(String),
}

impl ModelFailure {
    /// The failure class recorded on the task.
    pub fn class(&self, validator: bool) -> &'static str {
        match (self, validator) {
            (ModelFailure::Timeout, _) => "model_timeout",
            (ModelFailure::BadJson, _) => "bad_json",
            (ModelFailure::Unavailable(_), true) => "validator_down",
            (ModelFailure::Unavailable(_), false) => "model_error",
        }
    }
}

/// A model or tool call's outcome, or the run being stopped.
pub enum IoError<E> {
    Failed(E),
    Stopped(TurnStop),
}

/// What the graph's nodes may do outside the state. Calls are keyed so a restarted task
/// reuses what an earlier attempt already got.
pub trait GraphIo {
    /// A grammar-constrained call to the planning model.
    fn model_json(
        &mut self,
        key: &str,
        messages: Vec<ChatMessage>,
        schema: &Value,
        max_tokens: usize,
    ) -> Result<Value, IoError<ModelFailure>>;
    /// A grammar-constrained call to the validator model.
    fn validator_json(
        &mut self,
        key: &str,
        messages: Vec<ChatMessage>,
        schema: &Value,
        max_tokens: usize,
    ) -> Result<Value, IoError<ModelFailure>>;
    /// A read-only diagnostic tool call for plan step `step`.
    fn tool(&mut self, step: &str, tool: &str, args: &Value)
        -> Result<ToolOutput, IoError<String>>;
    /// Knowledge hits for `query` (guidance only).
    fn knowledge(&mut self, key: &str, query: &str) -> Result<Vec<KnowledgeRef>, TurnStop>;
    /// The model's name, for failure records.
    fn model_name(&self) -> String;
}

/// The graph's budgets and switches.
#[derive(Debug, Clone)]
pub struct GraphConfig {
    pub max_replans: u32,
    pub max_steps: u32,
    pub max_model_calls: u32,
    pub max_adjudications: u32,
    /// After this, no new investigation step starts.
    pub soft_deadline_ms: i64,
    /// After this, the graph closes in manual review.
    pub hard_deadline_ms: i64,
    /// Whether a root cause goes through the LLM validator.
    pub llm_validator: bool,
    pub plan_max_tokens: usize,
}

impl Default for GraphConfig {
    fn default() -> Self {
        Self {
            max_replans: 1,
            max_steps: 40,
            max_model_calls: 6,
            max_adjudications: 1,
            soft_deadline_ms: 240_000,
            hard_deadline_ms: 600_000,
            llm_validator: true,
            plan_max_tokens: 200,
        }
    }
}

/// Runs `node` on the state; returns the next node and a short public summary.
pub fn step(
    node: Node,
    state: &mut DiagnosticState,
    io: &mut dyn GraphIo,
    books: &Playbooks,
    config: &GraphConfig,
    key: &str,
    now_ms: i64,
) -> Result<(Node, String), TurnStop> {
    let elapsed = now_ms - state.started_at_ms;
    state.budgets.elapsed_ms = elapsed.max(0);
    let investigating = matches!(
        node,
        Node::Planner
            | Node::StrategyRouter
            | Node::Executor
            | Node::FactAdapter
            | Node::SufficiencyGate
            | Node::Replanner
            | Node::HypothesisAdjudicator
    );
    if investigating && elapsed > config.hard_deadline_ms {
        state.fail(node.as_str(), "deadline", "");
        state.manual_review_reason = Some("the hard deadline passed".to_owned());
        return Ok((
            Node::ManualReview,
            "hard deadline passed: closing".to_owned(),
        ));
    }
    match node {
        Node::KnowledgeInvestigator => knowledge_investigator(state, io, books, key),
        Node::Planner => planner_node(state, io, books, config, key),
        Node::StrategyRouter => Ok(strategy_router(state, config, elapsed)),
        Node::Executor => executor(state, io),
        Node::FactAdapter => Ok(fact_adapter(state, books)),
        Node::SufficiencyGate => Ok(sufficiency_gate(state, config, elapsed)),
        Node::Replanner => Ok(replanner(state, books)),
        Node::HypothesisAdjudicator => adjudicator(state, io, books, key),
        Node::Decision => {
            decide::decide(state);
            let summary = match &state.root_cause {
                Some(root) => format!("candidate: {} in {}", root.mechanism, root.component),
                None => "no root cause: insufficient evidence".to_owned(),
            };
            Ok((Node::DeterministicValidator, summary))
        }
        Node::DeterministicValidator => Ok(deterministic_validator(state, books, config)),
        Node::ManualReview => {
            state.recovery = Some(decide::manual_review(state));
            Ok((Node::PolicyGate, "manual review".to_owned()))
        }
        Node::RecoveryPlanner => {
            let recovery = decide::plan_recovery(state, books);
            let summary = format!("recovery mode {}", recovery.mode.as_str());
            state.recovery = Some(recovery);
            Ok((Node::ValidatorRouter, summary))
        }
        Node::ValidatorRouter => Ok(validator_router(state, config)),
        Node::LlmValidator => llm_validator(state, io, key),
        Node::PolicyGate => {
            let policy = decide::policy_gate(state);
            let summary = format!(
                "execution not permitted; recovery mode {}",
                policy.recovery_mode.as_str()
            );
            state.policy = Some(policy);
            Ok((Node::Report, summary))
        }
        Node::Report => {
            state.summary = decide::summary(state);
            Ok((Node::Done, "report written".to_owned()))
        }
        Node::Done => Ok((Node::Done, String::new())),
    }
}

fn knowledge_investigator(
    state: &mut DiagnosticState,
    io: &mut dyn GraphIo,
    books: &Playbooks,
    key: &str,
) -> Result<(Node, String), TurnStop> {
    state.candidates = books
        .candidates(&state.alert.text())
        .iter()
        .map(|h| h.id.clone())
        .collect();
    let query = format!("{} {}", state.alert.name, state.alert.summary);
    state.knowledge = io.knowledge(key, &query)?;
    assess::assess(state, books);
    Ok((
        Node::Planner,
        format!(
            "{} candidate causes; {} runbooks for guidance",
            state.candidates.len(),
            state.knowledge.len()
        ),
    ))
}

fn planner_node(
    state: &mut DiagnosticState,
    io: &mut dyn GraphIo,
    books: &Playbooks,
    config: &GraphConfig,
    key: &str,
) -> Result<(Node, String), TurnStop> {
    let allowed: Vec<String> = planner::candidate_tests(state, books)
        .iter()
        .map(|(_, t)| t.id.clone())
        .collect();
    if allowed.is_empty() {
        state.manual_review_reason = Some("no playbook covers this alert".to_owned());
        return Ok((Node::ManualReview, "nothing to plan".to_owned()));
    }
    let schema = planner::plan_schema(&allowed);
    let mut problem: Option<String> = None;
    for attempt in 0..2 {
        if state.budgets.model_calls >= config.max_model_calls {
            state.fail("planner", "model_budget", &io.model_name());
            break;
        }
        if attempt == 1 {
            state.budgets.repairs += 1;
        }
        state.budgets.model_calls += 1;
        let messages = planner::plan_messages(state, books, problem.as_deref());
        let call_key = format!("{key}:{attempt}");
        match io.model_json(&call_key, messages, &schema, config.plan_max_tokens) {
            Ok(output) => match planner::validate_plan(&output, &allowed) {
                Ok(ids) => {
                    planner::add_steps(state, books, &ids, StepOrigin::Planner);
                    assess::assess(state, books);
                    return Ok((
                        Node::StrategyRouter,
                        format!("plan of {} checks", state.plan.len()),
                    ));
                }
                Err(why) => problem = Some(why),
            },
            Err(IoError::Stopped(stop)) => return Err(stop),
            Err(IoError::Failed(ModelFailure::BadJson)) => {
                problem = Some("the answer was not valid JSON".to_owned());
                if attempt == 1 {
                    state.fail("planner", "bad_json", &io.model_name());
                }
            }
            Err(IoError::Failed(failure)) => {
                state.fail("planner", failure.class(false), &io.model_name());
                break;
            }
        }
    }
    if state.failures.is_empty() {
        state.fail("planner", "repair_exhausted", &io.model_name());
    }
    state.manual_review_reason = Some(format!(
        "no valid plan{}",
        problem.map(|p| format!(": {p}")).unwrap_or_default()
    ));
    Ok((
        Node::ManualReview,
        "planning failed: manual review".to_owned(),
    ))
}

fn strategy_router(
    state: &mut DiagnosticState,
    config: &GraphConfig,
    elapsed: i64,
) -> (Node, String) {
    let room = state.budgets.steps < config.max_steps && elapsed <= config.soft_deadline_ms;
    match assess::next_useful_step(state) {
        Some(step) if room => {
            let summary = format!("next: {} ({})", step.tool, step.causal_intent.as_str());
            state.current_step = Some(step.id.clone());
            (Node::Executor, summary)
        }
        _ => {
            state.current_step = None;
            (
                Node::SufficiencyGate,
                "fast path: nothing left to run".to_owned(),
            )
        }
    }
}

fn executor(state: &mut DiagnosticState, io: &mut dyn GraphIo) -> Result<(Node, String), TurnStop> {
    let Some(step) = state
        .current_step
        .as_ref()
        .and_then(|id| state.step(id))
        .cloned()
    else {
        return Ok((Node::SufficiencyGate, "no step to run".to_owned()));
    };
    let Some(args) = super::arguments::resolve(state, &step) else {
        return Ok((
            Node::SufficiencyGate,
            format!("{} is not ready to run", step.id),
        ));
    };
    state.budgets.tool_calls += 1;
    state.budgets.steps += 1;
    let (status, ids, summary) = match io.tool(&step.id, &step.tool, &args) {
        Ok(output) => {
            let mut ids = Vec::new();
            for item in &output.items {
                let id = format!("ev-{}", state.evidence.len() + 1);
                state.evidence.push(EvidenceItem {
                    id: id.clone(),
                    task_id: state.task_id.clone(),
                    step: step.id.clone(),
                    tool: step.tool.clone(),
                    source: output.source.clone(),
                    ts: item.ts,
                    raw: item.raw.clone(),
                    fields: item.fields.clone(),
                    summary: String::new(),
                    role: super::facts::CausalRole::Context,
                    in_window: item.ts.is_some_and(|ts| state.window.contains(ts)),
                    supports: Vec::new(),
                    refutes: Vec::new(),
                    inactivates: Vec::new(),
                });
                ids.push(id);
            }
            let status = match output.status {
                ToolStatus::Ok => ObservationStatus::Ok,
                ToolStatus::Unavailable => ObservationStatus::Unavailable,
            };
            let summary = match status {
                ObservationStatus::Unavailable => format!("{}: source unavailable", step.tool),
                _ => format!("{}: {} records", step.tool, ids.len()),
            };
            (status, ids, summary)
        }
        Err(IoError::Stopped(stop)) => return Err(stop),
        Err(IoError::Failed(message)) => {
            state.fail("executor", "tool_error", "");
            (
                ObservationStatus::Error,
                Vec::new(),
                format!("{}: failed ({message})", step.tool),
            )
        }
    };
    if let Some(planned) = state.plan.iter_mut().find(|s| s.id == step.id) {
        planned.status = if status == ObservationStatus::Error {
            StepStatus::Failed
        } else {
            StepStatus::Done
        };
    }
    state.observations.push(Observation {
        step: step.id.clone(),
        tool: step.tool.clone(),
        status,
        evidence_ids: ids,
        evaluation: String::new(),
        facts: Vec::new(),
    });
    Ok((Node::FactAdapter, summary))
}

fn fact_adapter(state: &mut DiagnosticState, books: &Playbooks) -> (Node, String) {
    let Some(index) = state.observations.len().checked_sub(1) else {
        return (Node::SufficiencyGate, "nothing observed".to_owned());
    };
    let observation = &state.observations[index];
    let step_id = observation.step.clone();
    let facts = {
        let items: Vec<Item<'_>> = observation
            .evidence_ids
            .iter()
            .filter_map(|id| state.evidence_item(id))
            .map(|e| Item {
                evidence_id: &e.id,
                ts: e.ts,
                fields: &e.fields,
            })
            .collect();
        adapt(&observation.tool, &items, state.window)
    };
    for fact in &facts {
        if let [only] = fact.evidence_ids.as_slice() {
            if let Some(item) = state.evidence.iter_mut().find(|e| &e.id == only) {
                item.summary = fact.summary.clone();
            }
        }
    }
    for item in state
        .evidence
        .iter_mut()
        .filter(|e| e.step == step_id && e.summary.is_empty())
    {
        item.summary = item.raw.chars().take(100).collect();
    }
    state.observations[index].facts = facts;
    let before: Vec<(String, Disposition)> = state
        .hypotheses
        .iter()
        .map(|h| (h.id.clone(), h.disposition))
        .collect();
    assess::assess(state, books);
    let observation = &state.observations[index];
    let declared = state
        .step(&step_id)
        .map(|s| s.tests_hypotheses.clone())
        .unwrap_or_default();
    let mut changes = Vec::new();
    for id in &declared {
        if let Some(h) = state.hypothesis(id) {
            let was = before.iter().find(|(b, _)| b == id).map(|(_, d)| *d);
            let moved = h.supporting.iter().filter(|f| f.step == step_id).count()
                + h.refuting.iter().filter(|f| f.step == step_id).count()
                + h.inactivating.iter().filter(|f| f.step == step_id).count();
            let word = disposition_word(h.disposition);
            if was != Some(h.disposition) || moved > 0 {
                changes.push(format!("{id} → {word} ({moved} findings)"));
            } else {
                changes.push(format!("{id} unchanged ({word})"));
            }
        }
    }
    let evaluation = match observation.status {
        ObservationStatus::Unavailable => {
            format!(
                "source unavailable; {} stays untested by this step",
                declared.join(", ")
            )
        }
        ObservationStatus::Error => format!("the tool failed; {} not tested", declared.join(", ")),
        ObservationStatus::Ok => format!(
            "{} facts from {} records; {}",
            observation.facts.len(),
            observation.evidence_ids.len(),
            changes.join("; ")
        ),
    };
    state.observations[index].evaluation = evaluation.clone();
    (Node::SufficiencyGate, evaluation)
}

fn disposition_word(d: Disposition) -> &'static str {
    match d {
        Disposition::Supported => "supported",
        Disposition::Refuted => "refuted",
        Disposition::CausallyInactive => "causally_inactive",
        Disposition::Unresolved => "unresolved",
    }
}

fn limits(state: &DiagnosticState, config: &GraphConfig, elapsed: i64) -> GateLimits {
    GateLimits {
        max_replans: config.max_replans,
        max_steps: config.max_steps,
        max_adjudications: config.max_adjudications,
        model_calls_left: state.budgets.model_calls < config.max_model_calls,
        soft_deadline_passed: elapsed > config.soft_deadline_ms,
    }
}

fn sufficiency_gate(
    state: &mut DiagnosticState,
    config: &GraphConfig,
    elapsed: i64,
) -> (Node, String) {
    let result = assess::gate(state, limits(state, config, elapsed));
    let next = match result.route {
        GateRoute::NextStep => Node::StrategyRouter,
        GateRoute::Replan => Node::Replanner,
        GateRoute::Adjudicate => Node::HypothesisAdjudicator,
        GateRoute::Decide => Node::Decision,
    };
    let summary = result.reason.clone();
    state.gate = Some(result);
    (next, summary)
}

fn replanner(state: &mut DiagnosticState, books: &Playbooks) -> (Node, String) {
    state.budgets.replans += 1;
    let before = state.plan.len();
    let tests = planner::replan_tests(state);
    planner::add_steps(state, books, &tests, StepOrigin::Replanner);
    assess::assess(state, books);
    let added = state.plan.len() - before;
    if added == 0 {
        (Node::Decision, "no useful step left to add".to_owned())
    } else {
        (
            Node::StrategyRouter,
            format!("{added} checks added for open gaps"),
        )
    }
}

fn adjudicator(
    state: &mut DiagnosticState,
    io: &mut dyn GraphIo,
    books: &Playbooks,
    key: &str,
) -> Result<(Node, String), TurnStop> {
    state.budgets.adjudications += 1;
    let contested: Vec<String> = state
        .hypotheses
        .iter()
        .filter(|h| h.conflict || h.disposition == Disposition::Supported)
        .map(|h| h.id.clone())
        .collect();
    let mut options = contested.clone();
    options.push("none".to_owned());
    let mut lines = String::new();
    for h in state
        .hypotheses
        .iter()
        .filter(|h| contested.contains(&h.id))
    {
        for f in &h.supporting {
            lines.push_str(&format!("- for {}: {}\n", h.id, f.summary));
        }
        for f in &h.refuting {
            lines.push_str(&format!("- against {}: {}\n", h.id, f.summary));
        }
    }
    let schema = json!({
        "type": "object",
        "properties": { "hypothesis": { "type": "string", "enum": options } },
        "required": ["hypothesis"],
        "additionalProperties": false
    });
    let messages = vec![
        ChatMessage::new(
            crate::engine::Role::System,
            "You weigh conflicting evidence of an incident. Pick the cause the evidence \
             supports best, or none. Answer with JSON only.",
        ),
        ChatMessage::new(crate::engine::Role::User, format!("Evidence:\n{lines}")),
    ];
    state.budgets.model_calls += 1;
    let pick = match io.model_json(key, messages, &schema, 40) {
        Ok(value) => value
            .get("hypothesis")
            .and_then(Value::as_str)
            .filter(|p| contested.iter().any(|c| c == p))
            .map(str::to_owned),
        Err(IoError::Stopped(stop)) => return Err(stop),
        Err(IoError::Failed(failure)) => {
            state.fail(
                "hypothesis_adjudicator",
                failure.class(false),
                &io.model_name(),
            );
            None
        }
    };
    state.adjudication = Some(super::state::Adjudication {
        contested: contested.clone(),
        pick: pick.clone(),
    });
    assess::assess(state, books);
    Ok((
        Node::SufficiencyGate,
        match pick {
            Some(p) => format!(
                "adjudicated in favour of {p} among {}",
                contested.join(", ")
            ),
            None => format!("no cause favoured among {}", contested.join(", ")),
        },
    ))
}

fn deterministic_validator(
    state: &mut DiagnosticState,
    books: &Playbooks,
    config: &GraphConfig,
) -> (Node, String) {
    if state.verdict != Some(Verdict::RootCause) {
        state.validation.deterministic.status = "skipped".to_owned();
        return (Node::ManualReview, "no root cause to validate".to_owned());
    }
    let problems = decide::validate(state, books);
    if problems.is_empty() {
        state.validation.deterministic.status = "passed".to_owned();
        state.validation.deterministic.problems.clear();
        return (
            Node::RecoveryPlanner,
            "deterministic checks passed".to_owned(),
        );
    }
    state.validation.deterministic.status = "failed".to_owned();
    state.validation.deterministic.problems = problems.clone();
    let replan = decide::repairable(&problems)
        && state.budgets.replans < config.max_replans
        && !planner::replan_tests(state).is_empty();
    state.root_cause = None;
    state.verdict = Some(Verdict::InsufficientEvidence);
    if replan {
        (
            Node::Replanner,
            format!("repairable: {}", problems.join("; ")),
        )
    } else {
        state.manual_review_reason = Some(format!("validation failed: {}", problems.join("; ")));
        (
            Node::ManualReview,
            format!("invalid: {}", problems.join("; ")),
        )
    }
}

fn validator_router(state: &mut DiagnosticState, config: &GraphConfig) -> (Node, String) {
    if !state.failures.is_empty() {
        state.validation.llm.status = "skipped".to_owned();
        state.validation.llm.reason = "a failure already closed the task".to_owned();
        return (
            Node::PolicyGate,
            "validator skipped: already failed closed".to_owned(),
        );
    }
    if !config.llm_validator {
        state.validation.llm.status = "skipped".to_owned();
        state.validation.llm.reason = "the LLM validator is turned off".to_owned();
        return (
            Node::PolicyGate,
            "validator off: deterministic checks stand".to_owned(),
        );
    }
    if state.budgets.model_calls >= config.max_model_calls {
        state.fail("validator_router", "model_budget", "");
        state.validation.llm.status = "unavailable".to_owned();
        return (
            Node::PolicyGate,
            "no model budget left for the validator".to_owned(),
        );
    }
    (
        Node::LlmValidator,
        "a root cause is asserted: semantic check".to_owned(),
    )
}

fn llm_validator(
    state: &mut DiagnosticState,
    io: &mut dyn GraphIo,
    key: &str,
) -> Result<(Node, String), TurnStop> {
    let Some(root) = state.root_cause.clone() else {
        return Ok((Node::PolicyGate, "nothing to validate".to_owned()));
    };
    let chain: Vec<String> = root
        .causal_chain
        .iter()
        .map(|l| format!("{}: {}", l.role.as_str(), l.summary))
        .collect();
    let schema = json!({
        "type": "object",
        "properties": {
            "verdict": { "type": "string", "enum": ["consistent", "inconsistent"] },
            "reason": { "type": "string", "maxLength": 160 }
        },
        "required": ["verdict", "reason"],
        "additionalProperties": false
    });
    let messages = vec![
        ChatMessage::new(
            crate::engine::Role::System,
            "You check whether an incident's causal chain is consistent with its evidence. \
             Answer with JSON only.",
        ),
        ChatMessage::new(
            crate::engine::Role::User,
            format!(
                "Root cause: {} in {}.\nCausal chain:\n{}\nIs the chain consistent with the evidence?",
                root.mechanism,
                root.component,
                chain.join("\n")
            ),
        ),
    ];
    state.budgets.model_calls += 1;
    match io.validator_json(key, messages, &schema, 80) {
        Ok(value) => {
            let verdict = value.get("verdict").and_then(Value::as_str).unwrap_or("");
            let reason: String = value
                .get("reason")
                .and_then(Value::as_str)
                .unwrap_or("")
                .chars()
                .take(160)
                .collect();
            state.validation.llm.reason = reason;
            state.validation.validation_origin = "llm_validated".to_owned();
            if verdict == "consistent" {
                state.validation.llm.status = "valid".to_owned();
                Ok((
                    Node::PolicyGate,
                    "validator: consistent (authorises nothing)".to_owned(),
                ))
            } else {
                state.validation.llm.status = "invalid".to_owned();
                state.recovery = Some(super::state::Recovery {
                    mode: super::state::RecoveryMode::ManualReview,
                    proposal: None,
                    reason: "the validator found the conclusion inconsistent: a person reviews"
                        .to_owned(),
                });
                Ok((
                    Node::PolicyGate,
                    "validator: inconsistent → manual review".to_owned(),
                ))
            }
        }
        Err(IoError::Stopped(stop)) => Err(stop),
        Err(IoError::Failed(failure)) => {
            state.fail("llm_validator", failure.class(true), &io.model_name());
            state.validation.llm.status = "unavailable".to_owned();
            state.validation.llm.reason = "the validator could not answer".to_owned();
            Ok((
                Node::PolicyGate,
                "validator unavailable: grounded fallback".to_owned(),
            ))
        }
    }
}
