//! The diagnostic graph's typed state: everything a node reads or writes — the alert and
//! window, knowledge refs, the plan, evidence, facts, hypotheses, the decision, validation,
//! recovery, policy, failures and budgets. It is the checkpoint: the driver saves it after
//! every node, so a restarted task continues from the next node with nothing recomputed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::facts::{CausalRole, Fact, Window};
use super::playbooks::SourceDomain;

/// The graph's version, recorded on every task and in every execution key.
pub const GRAPH_VERSION: &str = "warden-diagnostic-v1";

/// The graph's nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Node {
    KnowledgeInvestigator,
    Planner,
    StrategyRouter,
    Executor,
    FactAdapter,
    SufficiencyGate,
    Replanner,
    HypothesisAdjudicator,
    Decision,
    DeterministicValidator,
    ManualReview,
    RecoveryPlanner,
    ValidatorRouter,
    LlmValidator,
    PolicyGate,
    Report,
    Done,
}

impl Node {
    pub fn as_str(self) -> &'static str {
        match self {
            Node::KnowledgeInvestigator => "knowledge_investigator",
            Node::Planner => "planner",
            Node::StrategyRouter => "strategy_router",
            Node::Executor => "executor",
            Node::FactAdapter => "fact_adapter",
            Node::SufficiencyGate => "sufficiency_gate",
            Node::Replanner => "replanner",
            Node::HypothesisAdjudicator => "hypothesis_adjudicator",
            Node::Decision => "decision",
            Node::DeterministicValidator => "deterministic_validator",
            Node::ManualReview => "manual_review",
            Node::RecoveryPlanner => "recovery_planner",
            Node::ValidatorRouter => "validator_router",
            Node::LlmValidator => "llm_validator",
            Node::PolicyGate => "policy_gate",
            Node::Report => "report",
            Node::Done => "done",
        }
    }
}

/// The alert under investigation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlertInfo {
    pub name: String,
    pub service: String,
    pub severity: String,
    pub summary: String,
    pub labels: BTreeMap<String, String>,
}

impl AlertInfo {
    /// The text symptom patterns are matched against.
    pub fn text(&self) -> String {
        let labels: Vec<String> = self
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        format!("{} {} {}", self.name, self.summary, labels.join(" "))
    }
}

/// A knowledge hit: guidance for planning, never evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KnowledgeRef {
    pub kb: String,
    pub title: String,
    pub path: String,
    pub score: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    Pending,
    Done,
    Failed,
    Skipped,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepOrigin {
    Planner,
    Replanner,
}

/// One plan step: a playbook test bound to this incident.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanStep {
    pub id: String,
    pub order: u32,
    /// The playbook test this step runs.
    pub test: String,
    pub tool: String,
    /// Arguments as planned (placeholders resolved when the step runs).
    pub arguments: Value,
    pub tests_hypotheses: Vec<String>,
    pub causal_intent: CausalRole,
    pub source_domain: SourceDomain,
    pub target_component: String,
    pub origin: StepOrigin,
    pub status: StepStatus,
}

/// One record a diagnostic tool returned, citable by id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EvidenceItem {
    pub id: String,
    pub task_id: String,
    pub step: String,
    pub tool: String,
    pub source: String,
    pub ts: Option<i64>,
    pub raw: String,
    /// The parsed record (kept for the Fact Adapter; not in the report).
    pub fields: Value,
    pub summary: String,
    pub role: CausalRole,
    pub in_window: bool,
    pub supports: Vec<String>,
    pub refutes: Vec<String>,
    pub inactivates: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ObservationStatus {
    Ok,
    Unavailable,
    Error,
}

/// What one completed diagnostic tool call showed and what it changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Observation {
    pub step: String,
    pub tool: String,
    pub status: ObservationStatus,
    pub evidence_ids: Vec<String>,
    /// Filled by the Fact Adapter.
    pub evaluation: String,
    #[serde(default)]
    pub facts: Vec<Fact>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Disposition {
    Supported,
    Refuted,
    CausallyInactive,
    Unresolved,
}

/// A fact that moved a hypothesis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    pub step: String,
    pub source: String,
    pub role: CausalRole,
    pub summary: String,
    pub evidence_ids: Vec<String>,
    /// For trigger findings: (kind, change id).
    pub trigger: Option<(String, Option<String>)>,
}

/// A hypothesis as the evidence leaves it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HypothesisState {
    pub id: String,
    pub title: String,
    pub disposition: Disposition,
    pub reason: String,
    pub supporting: Vec<Finding>,
    pub refuting: Vec<Finding>,
    pub inactivating: Vec<Finding>,
    pub component: Option<String>,
    /// Supporting and refuting evidence at once.
    pub conflict: bool,
    /// Its tests not yet run or planned.
    pub untested: Vec<String>,
    /// Blocks a decision: unresolved with some support or with tests still to run.
    pub open: bool,
}

/// The adjudicator's ruling on hypotheses with conflicting evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Adjudication {
    pub contested: Vec<String>,
    /// The one it favoured; the others are set aside. `None`: all set aside.
    pub pick: Option<String>,
}

/// Where the Sufficiency Gate sends the graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GateRoute {
    NextStep,
    Replan,
    Adjudicate,
    Decide,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GateResult {
    pub route: GateRoute,
    pub ready: bool,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Trigger {
    pub kind: String,
    #[serde(rename = "ref")]
    pub reference: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChainLink {
    pub role: CausalRole,
    pub summary: String,
    pub evidence_ids: Vec<String>,
}

/// The candidate root cause the Decision node builds from the supported hypothesis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RootCause {
    pub component: String,
    pub mechanism: String,
    pub trigger: Trigger,
    pub causal_chain: Vec<ChainLink>,
    pub confidence: f64,
    pub evidence_ids: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    RootCause,
    InsufficientEvidence,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::RootCause => "root_cause",
            Verdict::InsufficientEvidence => "insufficient_evidence",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecoveryMode {
    NoAction,
    ProposalOnly,
    ManualReview,
}

impl RecoveryMode {
    pub fn as_str(self) -> &'static str {
        match self {
            RecoveryMode::NoAction => "no_action",
            RecoveryMode::ProposalOnly => "proposal_only",
            RecoveryMode::ManualReview => "manual_review",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Proposal {
    pub action: String,
    pub change_ref: String,
    pub summary: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Recovery {
    pub mode: RecoveryMode,
    pub proposal: Option<Proposal>,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeterministicCheck {
    /// passed | failed | skipped
    pub status: String,
    pub problems: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LlmCheck {
    /// valid | invalid | skipped | unavailable
    pub status: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Validation {
    pub deterministic: DeterministicCheck,
    pub llm: LlmCheck,
    /// deterministic | llm_validated | deterministic_grounded_fallback
    pub validation_origin: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Policy {
    /// Always false: nothing in Warden executes a recovery.
    pub execution_permitted: bool,
    /// A person must approve (a proposal) or review (anything else) before any recovery;
    /// false only when nothing is to be done.
    #[serde(default = "yes")]
    pub human_approval_required: bool,
    /// Always false, for the same reason.
    #[serde(default)]
    pub recovery_executed: bool,
    pub recovery_mode: RecoveryMode,
    pub reason: String,
    /// Each rule the gate applied and whether the recovery passed it.
    #[serde(default)]
    pub checks: Vec<PolicyCheck>,
}

fn yes() -> bool {
    true
}

/// One rule of the Policy Gate and its outcome for this task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyCheck {
    pub rule: String,
    pub passed: bool,
    pub detail: String,
}

/// A failure the graph met and closed on: where, what class, which model. Never a
/// prompt, key or raw output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    pub stage: String,
    pub class: String,
    pub model: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Budgets {
    pub replans: u32,
    pub model_calls: u32,
    pub tool_calls: u32,
    pub steps: u32,
    pub adjudications: u32,
    pub repairs: u32,
    pub elapsed_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeRecord {
    pub node: Node,
    pub iteration: u32,
    pub execution_key: String,
}

/// The whole state of one diagnostic task's graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiagnosticState {
    pub task_id: String,
    pub incident_id: String,
    pub run_id: String,
    pub alert: AlertInfo,
    pub window: Window,
    /// Unix milliseconds when the graph started (deadlines count from here).
    pub started_at_ms: i64,
    pub next: Node,
    pub nodes: Vec<NodeRecord>,
    pub candidates: Vec<String>,
    pub knowledge: Vec<KnowledgeRef>,
    pub plan: Vec<PlanStep>,
    /// The step the Strategy Router picked for the Executor.
    pub current_step: Option<String>,
    pub evidence: Vec<EvidenceItem>,
    pub observations: Vec<Observation>,
    pub hypotheses: Vec<HypothesisState>,
    pub gate: Option<GateResult>,
    pub adjudication: Option<Adjudication>,
    pub verdict: Option<Verdict>,
    pub root_cause: Option<RootCause>,
    pub validation: Validation,
    pub recovery: Option<Recovery>,
    pub policy: Option<Policy>,
    pub failures: Vec<Failure>,
    pub budgets: Budgets,
    /// Why the graph went to manual review, when it did.
    pub manual_review_reason: Option<String>,
    pub summary: String,
}

impl DiagnosticState {
    pub fn new(
        task_id: &str,
        incident_id: &str,
        run_id: &str,
        alert: AlertInfo,
        window: Window,
        started_at_ms: i64,
    ) -> Self {
        Self {
            task_id: task_id.to_owned(),
            incident_id: incident_id.to_owned(),
            run_id: run_id.to_owned(),
            alert,
            window,
            started_at_ms,
            next: Node::KnowledgeInvestigator,
            nodes: Vec::new(),
            candidates: Vec::new(),
            knowledge: Vec::new(),
            plan: Vec::new(),
            current_step: None,
            evidence: Vec::new(),
            observations: Vec::new(),
            hypotheses: Vec::new(),
            gate: None,
            adjudication: None,
            verdict: None,
            root_cause: None,
            validation: Validation {
                deterministic: DeterministicCheck {
                    status: "skipped".into(),
                    problems: Vec::new(),
                },
                llm: LlmCheck {
                    status: "skipped".into(),
                    reason: String::new(),
                },
                validation_origin: "deterministic".into(),
            },
            recovery: None,
            policy: None,
            failures: Vec::new(),
            budgets: Budgets::default(),
            manual_review_reason: None,
            summary: String::new(),
        }
    }

    /// Records a failure once per (stage, class).
    pub fn fail(&mut self, stage: &str, class: &str, model: &str) {
        let failure = Failure {
            stage: stage.to_owned(),
            class: class.to_owned(),
            model: model.to_owned(),
        };
        if !self.failures.contains(&failure) {
            self.failures.push(failure);
        }
    }

    /// How many times `node` has run before.
    pub fn iteration_of(&self, node: Node) -> u32 {
        self.nodes.iter().filter(|r| r.node == node).count() as u32
    }

    pub fn step(&self, id: &str) -> Option<&PlanStep> {
        self.plan.iter().find(|s| s.id == id)
    }

    pub fn evidence_item(&self, id: &str) -> Option<&EvidenceItem> {
        self.evidence.iter().find(|e| e.id == id)
    }

    pub fn hypothesis(&self, id: &str) -> Option<&HypothesisState> {
        self.hypotheses.iter().find(|h| h.id == id)
    }
}
