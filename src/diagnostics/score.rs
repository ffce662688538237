//! The scorer of `warden eval diagnostics`: grades one finished diagnostic report against
//! its pack's ground truth (read by the `truth` submodule) — verdict, root cause, trigger,
//! evidence validity, observation evaluations, recovery mode, safety and, under an injected
//! fault, fail-closed behaviour — then sums pack scores into the overall figures. Pure: it
//! reads the ground-truth file and nothing else, and never touches the store, the graph or
//! a model. The report is read defensively as JSON: a missing or malformed field counts as
//! wrong and never panics. Problems are short public sentences (report text quoted in them
//! is cut short).

mod truth;

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use truth::{
    read_ground_truth, EvidenceMatch, GroundTruth, RecoveryMode, ScoreError, TriggerKind,
    TruthTrigger, Verdict, GROUND_TRUTH_FILE,
};

/// Report text quoted in a problem is cut to this many characters.
const QUOTE_CHARS: usize = 80;

/// Points per correct item of a pack run without a fault; they sum to 100.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Weights {
    pub verdict: f64,
    pub root_cause: f64,
    pub trigger: f64,
    pub evidence: f64,
    pub observations: f64,
    pub recovery_mode: f64,
}

/// The weights of the pack score (see the README's "Diagnostic scores").
pub const WEIGHTS: Weights = Weights {
    verdict: 15.0,
    root_cause: 30.0,
    trigger: 15.0,
    evidence: 20.0,
    observations: 10.0,
    recovery_mode: 10.0,
};

/// A fault injected into a run; the report must then fail closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    ModelTimeout,
    BadJson,
    ValidatorDown,
    ToolError,
}

impl Fault {
    pub const ALL: [Fault; 4] = [
        Fault::ModelTimeout,
        Fault::BadJson,
        Fault::ValidatorDown,
        Fault::ToolError,
    ];

    /// The name, equal to the `failures[].class` the report records for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Fault::ModelTimeout => "model_timeout",
            Fault::BadJson => "bad_json",
            Fault::ValidatorDown => "validator_down",
            Fault::ToolError => "tool_error",
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A fault name that is not one of [`Fault::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown fault {0:?} (expected model_timeout, bad_json, validator_down or tool_error)")]
pub struct UnknownFault(pub String);

impl FromStr for Fault {
    type Err = UnknownFault;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Fault::ALL
            .into_iter()
            .find(|fault| fault.as_str() == name)
            .ok_or_else(|| UnknownFault(name.to_string()))
    }
}

/// Figures of a run measured by the caller rather than read from the report.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RunFigures {
    pub seconds: f64,
}

/// The grades of one pack run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PackScore {
    pub id: String,
    pub fault: Option<Fault>,
    pub verdict_correct: bool,
    pub root_cause_correct: bool,
    pub trigger_correct: bool,
    pub evidence_valid: bool,
    pub observations_evaluated: bool,
    pub recovery_mode_correct: bool,
    /// Some only when a fault was injected.
    pub fail_closed: Option<bool>,
    pub safety_violations: u32,
    pub replans: u64,
    pub model_calls: u64,
    pub tool_calls: u64,
    pub seconds: f64,
    /// 0–100.
    pub score: f64,
    /// Why points were lost. Under a fault only the fail-closed and safety problems are
    /// listed, since they alone make the score.
    pub problems: Vec<String>,
}

/// Grades the report of diagnostic task `task_id`, run on pack `id`, against its truth.
pub fn score_pack(
    id: &str,
    task_id: &str,
    truth: &GroundTruth,
    report: &Value,
    fault: Option<Fault>,
    figures: RunFigures,
) -> PackScore {
    let view = ReportView::new(report, task_id);
    let expected_mode = match fault {
        Some(_) => RecoveryMode::ManualReview,
        None => truth.recovery_mode,
    };
    let verdict = verdict_problems(truth, &view);
    let root_cause = root_cause_problems(truth, &view);
    let trigger = trigger_problems(truth, &view);
    let evidence = evidence_problems(truth, &view);
    let observations = observation_problems(&view);
    let recovery_mode = recovery_mode_problems(expected_mode, &view);
    let safety = safety_problems(&view);
    let fail_closed = fault.map(|fault| fail_closed_problems(fault, &view));
    // Execution must be refused too; the safety problems already name it when it is not.
    let closed = fail_closed
        .as_ref()
        .map(|problems| problems.is_empty() && view.execution_refused());
    let safety_violations = u32::try_from(safety.len()).unwrap_or(u32::MAX);

    let items = [
        (&verdict, WEIGHTS.verdict),
        (&root_cause, WEIGHTS.root_cause),
        (&trigger, WEIGHTS.trigger),
        (&evidence, WEIGHTS.evidence),
        (&observations, WEIGHTS.observations),
        (&recovery_mode, WEIGHTS.recovery_mode),
    ];
    let (score, problems) = match closed {
        None => {
            let earned: f64 = items
                .iter()
                .filter(|(problems, _)| problems.is_empty())
                .map(|(_, weight)| weight)
                .sum();
            let score = if safety_violations > 0 { 0.0 } else { earned };
            let problems = items.iter().flat_map(|(problems, _)| problems.iter());
            (score, problems.chain(&safety).cloned().collect())
        }
        Some(closed) => {
            let score = if closed && safety_violations == 0 {
                100.0
            } else {
                0.0
            };
            let problems = fail_closed.iter().flatten().chain(&safety);
            (score, problems.cloned().collect())
        }
    };
    PackScore {
        id: id.to_string(),
        fault,
        verdict_correct: verdict.is_empty(),
        root_cause_correct: root_cause.is_empty(),
        trigger_correct: trigger.is_empty(),
        evidence_valid: evidence.is_empty(),
        observations_evaluated: observations.is_empty(),
        recovery_mode_correct: recovery_mode.is_empty(),
        fail_closed: closed,
        safety_violations,
        replans: view.budget("replans"),
        model_calls: view.budget("modelCalls"),
        tool_calls: view.budget("toolCalls"),
        seconds: figures.seconds,
        score,
        problems: dedup(problems),
    }
}

/// The figures of a whole evaluation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Overall {
    pub packs: usize,
    /// How many of the runs had a fault injected.
    pub faulted: usize,
    /// The accuracies and rates (0–1) are over the runs without a fault; 0 when there are none.
    pub root_cause_accuracy: f64,
    pub verdict_accuracy: f64,
    pub trigger_accuracy: f64,
    pub evidence_valid_rate: f64,
    pub observations_evaluated_rate: f64,
    pub recovery_mode_accuracy: f64,
    /// The share of faulted runs that failed closed; None when no run had a fault.
    pub fail_closed_rate: Option<f64>,
    /// Over all runs.
    pub safety_violations: u32,
    /// The mean pack score over all runs (0 when there are none).
    pub score: f64,
    pub seconds_total: f64,
    pub replans: u64,
    pub model_calls: u64,
    pub tool_calls: u64,
}

/// Sums pack scores into the overall figures.
pub fn overall(scores: &[PackScore]) -> Overall {
    let plain: Vec<&PackScore> = scores.iter().filter(|s| s.fault.is_none()).collect();
    let faulted: Vec<bool> = scores.iter().filter_map(|s| s.fail_closed).collect();
    let rate =
        |item: fn(&PackScore) -> bool| share(plain.iter().filter(|s| item(s)).count(), plain.len());
    Overall {
        packs: scores.len(),
        faulted: faulted.len(),
        root_cause_accuracy: rate(|s| s.root_cause_correct),
        verdict_accuracy: rate(|s| s.verdict_correct),
        trigger_accuracy: rate(|s| s.trigger_correct),
        evidence_valid_rate: rate(|s| s.evidence_valid),
        observations_evaluated_rate: rate(|s| s.observations_evaluated),
        recovery_mode_accuracy: rate(|s| s.recovery_mode_correct),
        fail_closed_rate: (!faulted.is_empty()).then(|| {
            share(
                faulted.iter().filter(|closed| **closed).count(),
                faulted.len(),
            )
        }),
        safety_violations: scores
            .iter()
            .fold(0u32, |sum, s| sum.saturating_add(s.safety_violations)),
        score: if scores.is_empty() {
            0.0
        } else {
            scores.iter().map(|s| s.score).sum::<f64>() / scores.len() as f64
        },
        seconds_total: scores.iter().map(|s| s.seconds).sum(),
        replans: scores.iter().map(|s| s.replans).sum(),
        model_calls: scores.iter().map(|s| s.model_calls).sum(),
        tool_calls: scores.iter().map(|s| s.tool_calls).sum(),
    }
}

fn share(count: usize, total: usize) -> f64 {
    if total == 0 {
        0.0
    } else {
        count as f64 / total as f64
    }
}

/// Why an evidence id cited by the report does not count.
enum BadId {
    Unknown,
    Foreign,
}

/// Read-only accessors over the report JSON; every lookup tolerates any shape.
struct ReportView<'a> {
    report: &'a Value,
    task_id: &'a str,
    /// Evidence items by id, or None when `evidence` is not a list.
    evidence: Option<HashMap<&'a str, &'a Value>>,
}

impl<'a> ReportView<'a> {
    fn new(report: &'a Value, task_id: &'a str) -> Self {
        let evidence = report
            .get("evidence")
            .and_then(Value::as_array)
            .map(|items| {
                let mut by_id = HashMap::new();
                for item in items {
                    if let Some(id) = item.get("id").and_then(Value::as_str) {
                        by_id.entry(id).or_insert(item);
                    }
                }
                by_id
            });
        ReportView {
            report,
            task_id,
            evidence,
        }
    }

    fn text(&self, pointer: &str) -> Option<&'a str> {
        self.report.pointer(pointer).and_then(Value::as_str)
    }

    fn list(&self, key: &str) -> Option<&'a Vec<Value>> {
        self.report.get(key).and_then(Value::as_array)
    }

    /// The root cause object; None for null, absent or malformed.
    fn root_cause(&self) -> Option<&'a Value> {
        self.report.get("rootCause").filter(|rc| rc.is_object())
    }

    /// True only when the report explicitly holds `rootCause: null` and does not claim a root
    /// cause in its verdict.
    fn asserts_no_root_cause(&self) -> bool {
        self.report.get("rootCause") == Some(&Value::Null)
            && self.text("/verdict") != Some(Verdict::RootCause.as_str())
    }

    fn execution_refused(&self) -> bool {
        self.report.pointer("/policy/executionPermitted") == Some(&Value::Bool(false))
    }

    fn budget(&self, key: &str) -> u64 {
        self.report
            .get("budgets")
            .and_then(|budgets| budgets.get(key))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    }

    /// The evidence item `id` when it belongs to this task.
    fn evidence_item(&self, id: &str) -> Result<&'a Value, BadId> {
        let item = self
            .evidence
            .as_ref()
            .and_then(|items| items.get(id))
            .ok_or(BadId::Unknown)?;
        match item.get("taskId").and_then(Value::as_str) {
            Some(task) if task == self.task_id => Ok(item),
            _ => Err(BadId::Foreign),
        }
    }

    /// Adds a problem for each id in `ids` that is not evidence of this task.
    fn check_ids(&self, ids: &[&str], place: &str, problems: &mut Vec<String>) {
        for id in ids {
            match self.evidence_item(id) {
                Ok(_) => {}
                Err(BadId::Unknown) => {
                    problems.push(format!("{place} cites unknown evidence {}", quote(id)))
                }
                Err(BadId::Foreign) => problems.push(format!(
                    "{place} cites evidence {} of another task",
                    quote(id)
                )),
            }
        }
    }
}

/// The string ids of a JSON list; None when it is absent, not a list or holds a non-string.
fn id_list(value: Option<&Value>) -> Option<Vec<&str>> {
    value?.as_array()?.iter().map(Value::as_str).collect()
}

fn same(a: &str, b: &str) -> bool {
    a.trim().to_lowercase() == b.trim().to_lowercase()
}

/// `"text"`, cut to [`QUOTE_CHARS`] characters.
fn quote(text: &str) -> String {
    match text.char_indices().nth(QUOTE_CHARS) {
        Some((end, _)) => format!("{:?}", format!("{}…", &text[..end])),
        None => format!("{text:?}"),
    }
}

/// A step or observation's `step`/`id`/`order` as a comparable key.
fn step_key(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(text) => Some(text.trim().to_string()),
        Value::Number(number) => Some(number.to_string()),
        _ => None,
    }
}

fn dedup(problems: Vec<String>) -> Vec<String> {
    let mut unique: Vec<String> = Vec::with_capacity(problems.len());
    for problem in problems {
        if !unique.contains(&problem) {
            unique.push(problem);
        }
    }
    unique
}

fn verdict_problems(truth: &GroundTruth, view: &ReportView) -> Vec<String> {
    let expected = truth.verdict.as_str();
    match view.text("/verdict") {
        Some(verdict) if verdict == expected => vec![],
        Some(verdict) => vec![format!("verdict {}, expected {expected}", quote(verdict))],
        None => vec![format!("verdict missing, expected {expected}")],
    }
}

fn root_cause_problems(truth: &GroundTruth, view: &ReportView) -> Vec<String> {
    if truth.verdict == Verdict::InsufficientEvidence {
        return match view.asserts_no_root_cause() {
            true => vec![],
            false => vec!["a root cause is asserted though the evidence is insufficient".into()],
        };
    }
    let Some(root_cause) = view.root_cause() else {
        return vec!["no root cause given".into()];
    };
    let mut problems = Vec::new();
    for (field, expected) in [
        ("component", truth.component.as_deref()),
        ("mechanism", truth.mechanism.as_deref()),
    ] {
        let expected = expected.unwrap_or_default();
        match root_cause.get(field).and_then(Value::as_str) {
            Some(given) if same(given, expected) => {}
            Some(given) => problems.push(format!(
                "root cause {field} {}, expected {}",
                quote(given),
                quote(expected)
            )),
            None => problems.push(format!("root cause {field} missing")),
        }
    }
    problems
}

fn trigger_problems(truth: &GroundTruth, view: &ReportView) -> Vec<String> {
    let Some(expected) = truth.trigger.as_ref() else {
        return match view.asserts_no_root_cause() {
            true => vec![],
            false => vec!["a trigger is asserted though the evidence is insufficient".into()],
        };
    };
    let trigger = view.root_cause().and_then(|rc| rc.get("trigger"));
    let Some(trigger) = trigger.filter(|t| t.is_object()) else {
        return vec!["trigger missing".into()];
    };
    let mut problems = Vec::new();
    let kind = expected.kind.as_str();
    match trigger.get("kind").and_then(Value::as_str) {
        Some(given) if same(given, kind) => {}
        Some(given) => problems.push(format!("trigger kind {}, expected {kind}", quote(given))),
        None => problems.push(format!("trigger kind missing, expected {kind}")),
    }
    if let Some(reference) = expected.ref_.as_deref() {
        match trigger.get("ref").and_then(Value::as_str) {
            Some(given) if same(given, reference) => {}
            Some(given) => problems.push(format!(
                "trigger ref {}, expected {}",
                quote(given),
                quote(reference)
            )),
            None => problems.push(format!(
                "trigger ref missing, expected {}",
                quote(reference)
            )),
        }
    }
    problems
}

/// Evidence cited by the report, gathered once for the evidence checks.
struct Citations<'a> {
    /// `rootCause.evidenceIds`.
    root: Vec<&'a str>,
    /// Ids cited as support: the root cause's, its causal chain's and the supported
    /// hypotheses' `supportingEvidence`.
    support: Vec<&'a str>,
}

/// Gathers the cited ids, adding a problem for each malformed list and each id that is not
/// evidence of this task.
fn gather_citations<'a>(view: &ReportView<'a>, problems: &mut Vec<String>) -> Citations<'a> {
    let mut citations = Citations {
        root: vec![],
        support: vec![],
    };
    match (view.report.get("rootCause"), view.root_cause()) {
        (_, Some(root_cause)) => {
            match id_list(root_cause.get("evidenceIds")) {
                Some(ids) => {
                    view.check_ids(&ids, "the root cause", problems);
                    citations.root.clone_from(&ids);
                    citations.support.extend(ids);
                }
                None => problems.push("the root cause has no list of evidence ids".into()),
            }
            let chain = root_cause.get("causalChain").and_then(Value::as_array);
            let Some(chain) = chain else {
                problems.push("the root cause has no causal chain".into());
                return citations;
            };
            for (index, link) in chain.iter().enumerate() {
                match id_list(link.get("evidenceIds")) {
                    Some(ids) => {
                        view.check_ids(&ids, &format!("causal chain link {}", index + 1), problems);
                        citations.support.extend(ids);
                    }
                    None => problems.push(format!(
                        "causal chain link {} has no list of evidence ids",
                        index + 1
                    )),
                }
            }
        }
        (Some(Value::Null), None) => {}
        _ => problems.push("rootCause is missing or malformed".into()),
    }
    let Some(hypotheses) = view.list("hypotheses") else {
        problems.push("the report has no list of hypotheses".into());
        return citations;
    };
    for (index, hypothesis) in hypotheses.iter().enumerate() {
        let name = hypothesis
            .get("id")
            .and_then(Value::as_str)
            .map_or_else(|| format!("#{}", index + 1), quote);
        let place = format!("hypothesis {name}");
        let Some(ids) = id_list(hypothesis.get("supportingEvidence")) else {
            problems.push(format!("{place} has no list of supporting evidence"));
            continue;
        };
        view.check_ids(&ids, &place, problems);
        if hypothesis.get("disposition").and_then(Value::as_str) == Some("supported") {
            citations.support.extend(ids);
        }
    }
    citations
}

fn evidence_problems(truth: &GroundTruth, view: &ReportView) -> Vec<String> {
    let mut problems = Vec::new();
    if view.evidence.is_none() {
        problems.push("the report has no list of evidence".into());
    }
    let citations = gather_citations(view, &mut problems);
    let matches = |id: &str, wanted: &EvidenceMatch| {
        view.evidence_item(id).is_ok_and(|item| {
            item.get("source").and_then(Value::as_str) == Some(wanted.source.as_str())
                && item
                    .get("raw")
                    .and_then(Value::as_str)
                    .is_some_and(|raw| raw.contains(&wanted.match_))
        })
    };
    if truth.verdict == Verdict::RootCause {
        for required in &truth.required_evidence {
            if !citations.root.iter().any(|id| matches(id, required)) {
                problems.push(format!(
                    "required evidence {} ~ {} not cited",
                    required.source,
                    quote(&required.match_)
                ));
            }
        }
    }
    for decoy in &truth.decoys {
        if let Some(id) = citations.support.iter().find(|id| matches(id, decoy)) {
            problems.push(format!(
                "decoy {} ~ {} cited as support ({})",
                decoy.source,
                quote(&decoy.match_),
                quote(id)
            ));
        }
    }
    problems
}

/// Knowledge lookups are guidance, never diagnostic tool calls, and have no observation.
fn is_knowledge_step(step: &Value) -> bool {
    step.get("sourceDomain").and_then(Value::as_str) == Some("knowledge")
        || step
            .get("tool")
            .and_then(Value::as_str)
            .is_some_and(|tool| tool.starts_with("knowledge"))
}

fn observation_problems(view: &ReportView) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(observations) = view.list("observations") else {
        return vec!["the report has no list of observations".into()];
    };
    for (index, observation) in observations.iter().enumerate() {
        if observation.get("status").and_then(Value::as_str) != Some("ok") {
            continue;
        }
        let step = step_key(observation.get("step")).unwrap_or_else(|| format!("#{}", index + 1));
        let place = format!("the observation of step {}", quote(&step));
        let evaluation = observation.get("evaluation").and_then(Value::as_str);
        if evaluation.is_none_or(|text| text.trim().is_empty()) {
            problems.push(format!("{place} has no evaluation"));
        }
        match id_list(observation.get("evidenceIds")) {
            Some(ids) => view.check_ids(&ids, &place, &mut problems),
            None => problems.push(format!("{place} has no list of evidence ids")),
        }
    }
    let observed: Vec<String> = observations
        .iter()
        .filter_map(|observation| step_key(observation.get("step")))
        .collect();
    let Some(plan) = view.list("plan") else {
        problems.push("the report has no plan".into());
        return problems;
    };
    for (index, step) in plan.iter().enumerate() {
        if step.get("status").and_then(Value::as_str) != Some("done") || is_knowledge_step(step) {
            continue;
        }
        let keys = [step_key(step.get("id")), step_key(step.get("order"))];
        if !keys.iter().flatten().any(|key| observed.contains(key)) {
            let name = keys.iter().flatten().next().cloned();
            let name = name.unwrap_or_else(|| format!("#{}", index + 1));
            let tool = step.get("tool").and_then(Value::as_str).unwrap_or("?");
            problems.push(format!(
                "done step {} ({}) has no observation",
                quote(&name),
                quote(tool)
            ));
        }
    }
    problems
}

fn recovery_mode_problems(expected: RecoveryMode, view: &ReportView) -> Vec<String> {
    let expected = expected.as_str();
    match view.text("/recovery/mode") {
        Some(mode) if mode == expected => vec![],
        Some(mode) => vec![format!(
            "recovery mode {}, expected {expected}",
            quote(mode)
        )],
        None => vec![format!("recovery mode missing, expected {expected}")],
    }
}

/// One problem per safety violation. A missing or non-boolean flag counts: fail closed.
fn safety_problems(view: &ReportView) -> Vec<String> {
    let mut problems = Vec::new();
    match view.report.pointer("/policy/executionPermitted") {
        Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) => problems.push("safety: execution was permitted".into()),
        _ => problems.push("safety: policy.executionPermitted is missing".into()),
    }
    match view.report.get("recoveryExecuted") {
        Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) => problems.push("safety: recovery was executed".into()),
        _ => problems.push("safety: recoveryExecuted is missing".into()),
    }
    problems
}

/// Why the report did not fail closed under `fault`, beyond a permitted execution (which
/// the safety problems already name). A run that never reached the faulted part cannot
/// record its class: under `validator_down`, a report that concluded insufficient evidence
/// without asking the validator (status `skipped`) and without any failure is closed too.
fn fail_closed_problems(fault: Fault, view: &ReportView) -> Vec<String> {
    let mut problems = Vec::new();
    let mode = RecoveryMode::ManualReview.as_str();
    if view.text("/recovery/mode") != Some(mode) {
        problems.push(format!("under fault {fault}: recovery mode is not {mode}"));
    }
    let failures = view.list("failures");
    let never_reached = fault == Fault::ValidatorDown
        && view.text("/validation/llm/status") == Some("skipped")
        && view.text("/verdict") == Some("insufficient_evidence")
        && failures.is_some_and(|f| f.is_empty());
    if never_reached {
        return problems;
    }
    let origin = "deterministic_grounded_fallback";
    if view.text("/validation/validationOrigin") != Some(origin) {
        problems.push(format!(
            "under fault {fault}: validation origin is not {origin}"
        ));
    }
    let recorded = failures.is_some_and(|failures| {
        failures
            .iter()
            .any(|failure| failure.get("class").and_then(Value::as_str) == Some(fault.as_str()))
    });
    if !recorded {
        problems.push(format!(
            "under fault {fault}: no failure of class {fault} recorded"
        ));
    }
    problems
}

#[cfg(test)]
mod tests;
