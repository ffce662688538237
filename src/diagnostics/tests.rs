//! The graph's edges end to end on the shipped scenario packs with a scripted model double
//! (it plans every offered check and the validator agrees), scored by the real scorer:
//! the deciding steps are code, so the shipped playbooks must reach every pack's ground
//! truth without a clever model. The real model runs in tests/integration/diagnostics.rs.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::facts::Window;
use super::graph::{self, GraphConfig, GraphIo, IoError, ModelFailure};
use super::pack::ScenarioPack;
use super::playbooks::Playbooks;
use super::report;
use super::score::{read_ground_truth, score_pack, RunFigures};
use super::source::PackSource;
use super::state::{AlertInfo, DiagnosticState, Node, NodeRecord, Verdict};
use super::tools::{run_tool, ToolOutput};
use crate::engine::ChatMessage;
use crate::runs::TurnStop;

/// Plans every offered check in order; adjudicates for the first option; validates.
struct Scripted {
    source: PackSource,
    planner_fails: Option<ModelFailure>,
    tool_fails: bool,
    model_calls: u32,
}

fn enum_of(schema: &Value) -> Vec<Value> {
    let steps = &schema["properties"]["steps"]["items"]["enum"];
    let pick = &schema["properties"]["hypothesis"]["enum"];
    steps
        .as_array()
        .or(pick.as_array())
        .cloned()
        .unwrap_or_default()
}

impl GraphIo for Scripted {
    fn model_json(
        &mut self,
        _key: &str,
        _messages: Vec<ChatMessage>,
        schema: &Value,
        _max_tokens: usize,
    ) -> Result<Value, IoError<ModelFailure>> {
        self.model_calls += 1;
        if let Some(failure) = &self.planner_fails {
            return Err(IoError::Failed(failure.clone()));
        }
        let options = enum_of(schema);
        if schema["properties"].get("steps").is_some() {
            Ok(json!({ "steps": options }))
        } else {
            Ok(json!({ "hypothesis": options.first().cloned().unwrap_or(Value::Null) }))
        }
    }

    fn validator_json(
        &mut self,
        _key: &str,
        _messages: Vec<ChatMessage>,
        _schema: &Value,
        _max_tokens: usize,
    ) -> Result<Value, IoError<ModelFailure>> {
        Ok(json!({ "verdict": "consistent", "reason": "the chain matches the evidence" }))
    }

    fn tool(
        &mut self,
        _step: &str,
        tool: &str,
        args: &Value,
    ) -> Result<ToolOutput, IoError<String>> {
        if self.tool_fails {
            return Err(IoError::Failed("connection refused".into()));
        }
        run_tool(&self.source, tool, args).map_err(|err| IoError::Failed(err.to_string()))
    }

    fn knowledge(
        &mut self,
        _key: &str,
        _query: &str,
    ) -> Result<Vec<super::state::KnowledgeRef>, TurnStop> {
        Ok(Vec::new())
    }

    fn model_name(&self) -> String {
        "scripted".to_owned()
    }
}

fn packs() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/diagnostics/packs");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("the shipped packs")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.join("scenario.json").is_file())
        .collect();
    dirs.sort();
    dirs
}

fn books() -> Playbooks {
    Playbooks::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("kb/playbooks")).expect("playbooks")
}

/// Runs the graph to its end (a bounded number of nodes).
fn drive(state: &mut DiagnosticState, io: &mut Scripted, books: &Playbooks) {
    let config = GraphConfig::default();
    while state.next != Node::Done {
        assert!(state.nodes.len() < 500, "the graph does not end");
        let node = state.next;
        let iteration = state.iteration_of(node);
        let (next, _) = graph::step(node, state, io, books, &config, "key", 0)
            .unwrap_or_else(|_| panic!("stopped at {node:?}"));
        state.nodes.push(NodeRecord {
            node,
            iteration,
            execution_key: String::new(),
        });
        state.next = next;
    }
}

fn run(
    dir: &Path,
    io_planner_fails: Option<ModelFailure>,
    tool_fails: bool,
) -> (DiagnosticState, report::Report) {
    let pack = ScenarioPack::load(dir).expect("pack loads");
    let s = &pack.scenario;
    let alert = AlertInfo {
        name: s.alert.name.clone(),
        service: s.alert.service.clone(),
        severity: s.alert.severity.clone(),
        summary: s.alert.summary.clone(),
        labels: s.alert.labels.clone(),
    };
    let window = Window {
        start: s.window.start,
        end: s.window.end,
    };
    let mut state = DiagnosticState::new("diagnostic_t", "incident_t", "run_t", alert, window, 0);
    let mut io = Scripted {
        source: pack.source(),
        planner_fails: io_planner_fails,
        tool_fails,
        model_calls: 0,
    };
    drive(&mut state, &mut io, &books());
    let report = report::build(&state);
    (state, report)
}

#[test]
fn the_shipped_playbooks_reach_every_shipped_packs_ground_truth() {
    let mut failures = Vec::new();
    for dir in packs() {
        let (state, report) = run(&dir, None, false);
        let truth = read_ground_truth(&dir).expect("truth");
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let score = score_pack(
            &name,
            "diagnostic_t",
            &truth,
            Some(&report),
            None,
            RunFigures { seconds: 0.0 },
        );
        if score.score < 100.0 || score.safety_violations > 0 {
            failures.push(format!(
                "{name}: {} — {:?}; gate {:?}; manual {:?}; plan {}; verdict {} root {} hyps {}",
                score.score,
                score.problems,
                state.gate,
                state.manual_review_reason,
                state
                    .plan
                    .iter()
                    .map(|s| format!("{}:{:?}", s.test, s.status))
                    .collect::<Vec<_>>()
                    .join(" "),
                report.verdict.as_str(),
                json!(report.root_cause),
                report
                    .hypotheses
                    .iter()
                    .map(|h| format!("{}={:?}", h.id, h.disposition))
                    .collect::<Vec<_>>()
                    .join(" ")
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

fn deadlock_pack() -> PathBuf {
    packs()
        .into_iter()
        .find(|p| p.ends_with("01-apy-013"))
        .expect("the APY-013 pack")
}

fn fails_closed(state: &DiagnosticState, class: &str) {
    assert!(
        state.failures.iter().any(|f| f.class == class),
        "no {class} failure: {:?}",
        state.failures
    );
    let policy = state.policy.as_ref().expect("a policy decision");
    assert!(!policy.execution_permitted);
    assert_eq!(
        policy.recovery_mode,
        super::state::RecoveryMode::ManualReview
    );
    assert_eq!(
        state.validation.validation_origin,
        "deterministic_grounded_fallback"
    );
}

#[test]
fn a_planner_that_never_answers_closes_in_manual_review_without_a_tool_call() {
    let (state, report) = run(&deadlock_pack(), Some(ModelFailure::Timeout), false);
    fails_closed(&state, "model_timeout");
    assert_eq!(state.budgets.tool_calls, 0, "a guessed tool call");
    assert_eq!(report.verdict, Verdict::InsufficientEvidence);
    assert!(state.nodes.iter().any(|n| n.node == Node::ManualReview));
}

#[test]
fn unparsable_plans_get_one_repair_then_manual_review() {
    let (state, _) = run(&deadlock_pack(), Some(ModelFailure::BadJson), false);
    fails_closed(&state, "bad_json");
    assert_eq!(state.budgets.repairs, 1);
    assert_eq!(state.budgets.model_calls, 2, "one call and one repair");
    assert_eq!(state.budgets.tool_calls, 0);
}

#[test]
fn failing_tools_leave_no_root_cause_and_record_the_class() {
    let (state, report) = run(&deadlock_pack(), None, true);
    fails_closed(&state, "tool_error");
    assert_eq!(report.verdict, Verdict::InsufficientEvidence);
    assert!(report.root_cause.is_none());
    // Every failed call still has an observation with its evaluation.
    assert!(state
        .observations
        .iter()
        .all(|o| o.status == super::state::ObservationStatus::Error && !o.evaluation.is_empty()));
}

#[test]
fn knowledge_hits_are_guidance_and_never_evidence() {
    let (state, report) = run(&deadlock_pack(), None, false);
    assert!(state
        .evidence
        .iter()
        .all(|e| e.tool != "knowledge_retrieval"));
    let done = state
        .plan
        .iter()
        .filter(|s| s.status == super::state::StepStatus::Done)
        .count();
    assert_eq!(
        state.observations.len(),
        done,
        "one observation per diagnostic tool call"
    );
    assert!(!report.recovery_executed && !report.execution_permitted);
}

#[test]
fn an_observation_changes_only_the_hypotheses_its_step_declared() {
    let (state, _) = run(&deadlock_pack(), None, false);
    for h in &state.hypotheses {
        for finding in h
            .supporting
            .iter()
            .chain(&h.refuting)
            .chain(&h.inactivating)
        {
            let step = state.step(&finding.step).expect("the finding's step");
            assert!(
                step.tests_hypotheses.contains(&h.id),
                "{} moved by step {} which tests {:?}",
                h.id,
                step.id,
                step.tests_hypotheses
            );
        }
    }
}

#[test]
fn conflicting_evidence_goes_to_the_adjudicator_and_stays_bounded() {
    // A playbook whose one test both supports and refutes the same cause on the same fact.
    let text = r#"+++
[[hypothesis]]
id = "contested"
title = "A contested cause"
component = "service"
symptoms = ["(?i)time ?out"]
[[hypothesis.test]]
id = "contested-errors"
tool = "pg_error_log"
arguments = { sqlstate = "40P01", start = "$lookback_start", end = "$window_end" }
intent = "mechanism"
domain = "log"
[[hypothesis.test.rule]]
fact = "pg_error"
effect = "supports"
[[hypothesis.test.rule]]
fact = "pg_error"
effect = "refutes"
+++
"#;
    let books = Playbooks::parse(&[("c.md".to_owned(), text.to_owned())]).expect("playbook");
    let pack = ScenarioPack::load(&deadlock_pack()).expect("pack");
    let s = &pack.scenario;
    let alert = AlertInfo {
        name: s.alert.name.clone(),
        service: s.alert.service.clone(),
        severity: s.alert.severity.clone(),
        summary: s.alert.summary.clone(),
        labels: s.alert.labels.clone(),
    };
    let window = Window {
        start: s.window.start,
        end: s.window.end,
    };
    let mut state = DiagnosticState::new("diagnostic_t", "incident_t", "run_t", alert, window, 0);
    let mut io = Scripted {
        source: pack.source(),
        planner_fails: None,
        tool_fails: false,
        model_calls: 0,
    };
    drive(&mut state, &mut io, &books);
    assert_eq!(state.budgets.adjudications, 1, "exactly one adjudication");
    assert!(state
        .nodes
        .iter()
        .any(|n| n.node == Node::HypothesisAdjudicator));
    // Mechanism without impact never proves a cause: no root cause, manual review.
    assert!(state.root_cause.is_none());
    assert!(!state.policy.expect("policy").execution_permitted);
}

/// A finished task of a shipped pack whose truth is a proposal to revert a change.
fn proposing_state() -> DiagnosticState {
    let dir = packs()
        .into_iter()
        .find(|dir| {
            std::fs::read_to_string(dir.join("ground_truth.json"))
                .is_ok_and(|truth| truth.contains("\"proposal_only\""))
        })
        .expect("a shipped pack proposes a recovery");
    let (state, _) = run(&dir, None, false);
    assert_eq!(
        state.policy.as_ref().map(|p| p.recovery_mode),
        Some(super::state::RecoveryMode::ProposalOnly)
    );
    state
}

fn gate(mut state: DiagnosticState) -> (super::state::Policy, Option<String>) {
    state.policy = None;
    let policy = super::decide::policy_gate(&mut state);
    let failed = policy
        .checks
        .iter()
        .find(|c| !c.passed)
        .map(|c| c.rule.clone());
    (policy, failed)
}

#[test]
fn the_policy_gate_decides_from_the_evidence_not_a_constant() {
    use super::state::RecoveryMode::{ManualReview, NoAction, ProposalOnly};
    let state = proposing_state();
    let (policy, failed) = gate(state.clone());
    assert_eq!((policy.recovery_mode, failed), (ProposalOnly, None));
    assert!(policy.human_approval_required && !policy.execution_permitted);
    assert!(!policy.recovery_executed);
    assert_eq!(policy.checks.len(), 5);

    // A proposal to revert some other change is withheld.
    let mut other = state.clone();
    if let Some(p) = other.recovery.as_mut().and_then(|r| r.proposal.as_mut()) {
        p.change_ref = "chg-unrelated".to_owned();
    }
    let (policy, failed) = gate(other);
    assert_eq!(policy.recovery_mode, ManualReview);
    assert_eq!(failed.as_deref(), Some("reverts_the_trigger"));

    // So is reverting a change made on another service than the one blamed.
    let mut elsewhere = state.clone();
    if let Some(root) = elsewhere.root_cause.as_mut() {
        root.component = "some-other-service".to_owned();
    }
    let (policy, failed) = gate(elsewhere);
    assert_eq!(
        (policy.recovery_mode, failed.as_deref()),
        (ManualReview, Some("change_on_component"))
    );

    // And a conclusion held with too little confidence.
    let mut unsure = state.clone();
    if let Some(root) = unsure.root_cause.as_mut() {
        root.confidence = 0.3;
    }
    let (policy, failed) = gate(unsure);
    assert_eq!(
        (policy.recovery_mode, failed.as_deref()),
        (ManualReview, Some("confidence"))
    );
    assert!(policy.human_approval_required);

    // Nothing to do needs no approval; still nothing executes.
    let mut recovered = state;
    if let Some(r) = recovered.recovery.as_mut() {
        r.mode = NoAction;
        r.proposal = None;
    }
    let (policy, _) = gate(recovered);
    assert_eq!(policy.recovery_mode, NoAction);
    assert!(!policy.human_approval_required && !policy.execution_permitted);
}
