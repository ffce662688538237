//! Evidence assessment in code: the playbooks' fact rules applied to the facts of every
//! observed step give each hypothesis its disposition (an observation changes only the
//! hypotheses its step declared), and the Sufficiency Gate computes whether the evidence
//! closes — one supported hypothesis, competitors closed, at least two independent
//! sources, trigger → mechanism → impact complete — and where the graph goes next.

use std::collections::BTreeSet;

use serde_json::Value;

use super::facts::{role_allowed, trigger_kind_of_change, CausalRole, Fact};
use super::playbooks::{ComponentFrom, Effect, HypothesisDef, Playbooks, RuleDef, WindowRule};
use super::state::{
    DiagnosticState, Disposition, Finding, GateResult, GateRoute, HypothesisState, StepStatus,
};

/// The causal roles a root cause must show.
pub const CHAIN: [CausalRole; 3] = [
    CausalRole::Trigger,
    CausalRole::Mechanism,
    CausalRole::Impact,
];

/// Budgets the gate respects.
#[derive(Debug, Clone, Copy)]
pub struct GateLimits {
    pub max_replans: u32,
    pub max_steps: u32,
    pub max_adjudications: u32,
    pub model_calls_left: bool,
    pub soft_deadline_passed: bool,
}

/// Recomputes every candidate hypothesis from the observations so far.
pub fn assess(state: &mut DiagnosticState, playbooks: &Playbooks) {
    let mut hypotheses = Vec::new();
    for id in &state.candidates {
        let Some(def) = playbooks.hypothesis(id) else {
            continue;
        };
        hypotheses.push(assess_one(state, playbooks, def));
    }
    for item in &mut state.evidence {
        item.supports.clear();
        item.refutes.clear();
        item.inactivates.clear();
        item.role = CausalRole::Context;
    }
    for h in &hypotheses {
        for (findings, effect) in [
            (&h.supporting, Effect::Supports),
            (&h.refuting, Effect::Refutes),
            (&h.inactivating, Effect::Inactivates),
        ] {
            for finding in findings {
                for id in &finding.evidence_ids {
                    if let Some(item) = state.evidence.iter_mut().find(|e| &e.id == id) {
                        let list = match effect {
                            Effect::Supports => {
                                item.role = finding.role;
                                &mut item.supports
                            }
                            Effect::Refutes => &mut item.refutes,
                            Effect::Inactivates => &mut item.inactivates,
                        };
                        if !list.contains(&h.id) {
                            list.push(h.id.clone());
                        }
                    }
                }
            }
        }
    }
    state.hypotheses = hypotheses;
}

fn assess_one(
    state: &DiagnosticState,
    playbooks: &Playbooks,
    def: &HypothesisDef,
) -> HypothesisState {
    let mut supporting = Vec::new();
    let mut refuting = Vec::new();
    let mut inactivating = Vec::new();
    let mut component = match def.component {
        ComponentFrom::Service => Some(state.alert.service.clone()),
        _ => None,
    };
    // Two passes: rules that need the component run once supporting facts named it.
    for pass_needs_component in [false, true] {
        for step in state.plan.iter().filter(|s| s.status == StepStatus::Done) {
            if !step.tests_hypotheses.contains(&def.id) {
                continue;
            }
            let Some(test) = def.tests.iter().find(|t| t.id == step.test) else {
                continue;
            };
            let Some(observation) = state.observations.iter().find(|o| o.step == step.id) else {
                continue;
            };
            let source = observation_source(state, &step.id);
            let mut supported_here = false;
            for fact in &observation.facts {
                for rule in test
                    .rules
                    .iter()
                    .filter(|r| r.same_component == pass_needs_component)
                {
                    if !rule_matches(rule, fact, component.as_deref(), playbooks) {
                        continue;
                    }
                    let role = if role_allowed(&fact.kind, step.causal_intent) {
                        step.causal_intent
                    } else {
                        CausalRole::Context
                    };
                    let finding = Finding {
                        step: step.id.clone(),
                        source: source.clone(),
                        role,
                        summary: fact.summary.clone(),
                        evidence_ids: fact.evidence_ids.clone(),
                        trigger: trigger_of(rule, fact),
                    };
                    match rule.effect {
                        // A role the fact cannot play gives no support (overreach).
                        Effect::Supports if role == CausalRole::Context => {}
                        Effect::Supports => {
                            supported_here = true;
                            if component.is_none() {
                                component = component_of(def.component, fact);
                            }
                            push_unique(&mut supporting, finding);
                        }
                        Effect::Refutes => push_unique(&mut refuting, finding),
                        Effect::Inactivates => push_unique(&mut inactivating, finding),
                    }
                }
            }
            let has_supports_rule = test.rules.iter().any(|r| r.effect == Effect::Supports);
            if pass_needs_component
                && test.absent == Some(Effect::Refutes)
                && observation.status == super::state::ObservationStatus::Ok
                && has_supports_rule
                && !supported_here
                && ![&supporting, &refuting, &inactivating]
                    .iter()
                    .any(|list| list.iter().any(|f: &Finding| f.step == step.id))
            {
                push_unique(
                    &mut refuting,
                    Finding {
                        step: step.id.clone(),
                        source: source.clone(),
                        role: step.causal_intent,
                        summary: format!("{} found nothing this cause must show", step.tool),
                        evidence_ids: Vec::new(),
                        trigger: None,
                    },
                );
            }
        }
    }
    let untested: Vec<String> = def
        .tests
        .iter()
        .filter(|t| !state.plan.iter().any(|s| s.test == t.id))
        .map(|t| t.id.clone())
        .collect();
    let pending = state.plan.iter().any(|s| {
        s.status == StepStatus::Pending
            && s.tests_hypotheses.contains(&def.id)
            && super::arguments::resolve(state, s).is_some()
    });
    let roles: BTreeSet<CausalRole> = supporting.iter().map(|f| f.role).collect();
    let sources: BTreeSet<&str> = supporting.iter().map(|f| f.source.as_str()).collect();
    let conflict = !supporting.is_empty() && !refuting.is_empty();
    let (disposition, reason) = if conflict {
        (
            Disposition::Unresolved,
            "supporting and refuting evidence conflict".to_owned(),
        )
    } else if !refuting.is_empty() {
        (
            Disposition::Refuted,
            format!("refuted: {}", refuting[0].summary),
        )
    } else if !inactivating.is_empty() && supporting.is_empty() {
        (
            Disposition::CausallyInactive,
            format!("present but not causal: {}", inactivating[0].summary),
        )
    } else if roles.contains(&CausalRole::Mechanism)
        && roles.contains(&CausalRole::Impact)
        && sources.len() >= 2
    {
        (
            Disposition::Supported,
            format!(
                "mechanism and impact shown by {} independent sources",
                sources.len()
            ),
        )
    } else if supporting.is_empty() {
        (Disposition::Unresolved, "no evidence for it yet".to_owned())
    } else {
        (
            Disposition::Unresolved,
            format!(
                "partial support: {}",
                roles
                    .iter()
                    .map(|r| r.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
    };
    let (disposition, reason, conflict) = match &state.adjudication {
        Some(ruling) if ruling.contested.contains(&def.id) => {
            if ruling.pick.as_deref() == Some(def.id.as_str()) {
                if roles.contains(&CausalRole::Mechanism)
                    && roles.contains(&CausalRole::Impact)
                    && sources.len() >= 2
                {
                    (
                        Disposition::Supported,
                        "favoured by the adjudicator".to_owned(),
                        false,
                    )
                } else {
                    (
                        Disposition::Unresolved,
                        "favoured but not shown".to_owned(),
                        false,
                    )
                }
            } else {
                (
                    Disposition::Unresolved,
                    "set aside by the adjudicator".to_owned(),
                    false,
                )
            }
        }
        _ => (disposition, reason, conflict),
    };
    let set_aside = reason == "set aside by the adjudicator";
    // Impact is shared by every cause of one incident: only support for this hypothesis'
    // own mechanism (or a test still to run) keeps an unresolved competitor open.
    let open = !set_aside
        && disposition == Disposition::Unresolved
        && (roles.contains(&CausalRole::Mechanism) || pending || !untested.is_empty());
    HypothesisState {
        id: def.id.clone(),
        title: def.title.clone(),
        disposition,
        reason,
        supporting,
        refuting,
        inactivating,
        component,
        conflict,
        untested,
        open,
    }
}

fn push_unique(list: &mut Vec<Finding>, finding: Finding) {
    if !list.iter().any(|f| {
        f.evidence_ids == finding.evidence_ids
            && f.step == finding.step
            && f.summary == finding.summary
    }) {
        list.push(finding);
    }
}

fn observation_source(state: &DiagnosticState, step: &str) -> String {
    state
        .evidence
        .iter()
        .find(|e| e.step == step)
        .map(|e| e.source.clone())
        .unwrap_or_else(|| {
            state
                .step(step)
                .and_then(|s| super::tools::tool_spec(&s.tool))
                .map(|spec| spec.source.as_str().to_owned())
                .unwrap_or_default()
        })
}

fn component_of(from: ComponentFrom, fact: &Fact) -> Option<String> {
    let key = match from {
        ComponentFrom::Service => "service",
        ComponentFrom::Upstream => "upstream",
        ComponentFrom::Host => "host",
    };
    // A peer address (nginx's `upstream: "http://10.0.0.5:8080/…"`) names no component.
    fact.attrs
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty() && !s.contains("://"))
        .map(str::to_owned)
}

fn trigger_of(rule: &RuleDef, fact: &Fact) -> Option<(String, Option<String>)> {
    match rule.trigger.as_deref()? {
        "from_change" => {
            let kind = fact.attrs.get("kind").and_then(Value::as_str).unwrap_or("");
            let id = fact
                .attrs
                .get("id")
                .and_then(Value::as_str)
                .map(str::to_owned);
            Some((trigger_kind_of_change(kind).to_owned(), id))
        }
        kind => Some((kind.to_owned(), None)),
    }
}

/// Whether `fact` meets every condition of `rule`.
pub fn rule_matches(
    rule: &RuleDef,
    fact: &Fact,
    component: Option<&str>,
    playbooks: &Playbooks,
) -> bool {
    if rule.fact != fact.kind {
        return false;
    }
    match rule.window {
        WindowRule::In if !fact.in_window => return false,
        WindowRule::Recent if !fact.recent => return false,
        _ => {}
    }
    let attr = |key: &str| fact.attrs.get(key);
    for (key, expected) in &rule.equals {
        let Some(actual) = attr(key) else {
            return false;
        };
        let accepted: Vec<&Value> = match expected {
            Value::Array(options) => options.iter().collect(),
            one => vec![one],
        };
        if !accepted.iter().any(|e| same_value(e, actual)) {
            return false;
        }
    }
    for (key, min) in &rule.min {
        if attr(key).and_then(Value::as_f64).is_none_or(|v| v < *min) {
            return false;
        }
    }
    for (key, below) in &rule.below {
        if attr(key)
            .and_then(Value::as_f64)
            .is_none_or(|v| v >= *below)
        {
            return false;
        }
    }
    for (key, pattern) in &rule.matches {
        let text = attr(key).and_then(Value::as_str).unwrap_or("");
        if !playbooks
            .pattern(pattern)
            .is_some_and(|re| re.is_match(text))
        {
            return false;
        }
    }
    if rule.same_component {
        let Some(component) = component else {
            return false;
        };
        let named = ["service", "host", "upstream"]
            .iter()
            .filter_map(|k| attr(k).and_then(Value::as_str))
            .any(|v| v.eq_ignore_ascii_case(component));
        if !named {
            return false;
        }
    }
    true
}

fn same_value(expected: &Value, actual: &Value) -> bool {
    match (expected, actual) {
        (Value::String(e), Value::String(a)) => e.eq_ignore_ascii_case(a),
        (Value::Number(e), Value::Number(a)) => e.as_f64() == a.as_f64(),
        (Value::String(e), Value::Number(a)) => e.parse::<f64>().ok() == a.as_f64(),
        (e, a) => e == a,
    }
}

/// The roles the supported findings of `h` cover.
pub fn roles_of(h: &HypothesisState) -> BTreeSet<CausalRole> {
    h.supporting.iter().map(|f| f.role).collect()
}

/// Independent sources among `h`'s support.
pub fn independent_sources(h: &HypothesisState) -> usize {
    h.supporting
        .iter()
        .map(|f| f.source.as_str())
        .collect::<BTreeSet<_>>()
        .len()
}

/// Whether the evidence closes on exactly one root cause; the reason when not.
pub fn decision_ready(state: &DiagnosticState) -> Result<&HypothesisState, String> {
    let supported: Vec<&HypothesisState> = state
        .hypotheses
        .iter()
        .filter(|h| h.disposition == Disposition::Supported)
        .collect();
    let [only] = supported.as_slice() else {
        return Err(if supported.is_empty() {
            "no hypothesis is supported".to_owned()
        } else {
            format!("{} hypotheses are supported at once", supported.len())
        });
    };
    let open: Vec<&str> = state
        .hypotheses
        .iter()
        .filter(|h| h.id != only.id && h.open)
        .map(|h| h.id.as_str())
        .collect();
    if !open.is_empty() {
        return Err(format!("competitors still open: {}", open.join(", ")));
    }
    let roles = roles_of(only);
    let missing: Vec<&str> = CHAIN
        .iter()
        .filter(|r| !roles.contains(r))
        .map(|r| r.as_str())
        .collect();
    if !missing.is_empty() {
        return Err(format!("the causal chain lacks {}", missing.join(", ")));
    }
    if independent_sources(only) < 2 {
        return Err("fewer than two independent sources".to_owned());
    }
    Ok(only)
}

/// The Sufficiency Gate: where to go after an observation.
pub fn gate(state: &DiagnosticState, limits: GateLimits) -> GateResult {
    let ready = decision_ready(state);
    if let Ok(h) = &ready {
        return GateResult {
            route: GateRoute::Decide,
            ready: true,
            reason: format!("evidence closes on {}", h.id),
        };
    }
    let why = ready.err().unwrap_or_default();
    let conflicted = state.hypotheses.iter().any(|h| h.conflict)
        || state
            .hypotheses
            .iter()
            .filter(|h| h.disposition == Disposition::Supported)
            .count()
            > 1;
    if conflicted
        && limits.model_calls_left
        && state.budgets.adjudications < limits.max_adjudications
    {
        return GateResult {
            route: GateRoute::Adjudicate,
            ready: false,
            reason: format!("{why}; conflicting evidence goes to the adjudicator"),
        };
    }
    let room = state.budgets.steps < limits.max_steps && !limits.soft_deadline_passed;
    if room && next_useful_step(state).is_some() {
        return GateResult {
            route: GateRoute::NextStep,
            ready: false,
            reason: why,
        };
    }
    let replannable = state.hypotheses.iter().any(|h| {
        h.disposition != Disposition::Refuted
            && h.disposition != Disposition::CausallyInactive
            && !h.untested.is_empty()
    });
    if room && replannable && state.budgets.replans < limits.max_replans {
        return GateResult {
            route: GateRoute::Replan,
            ready: false,
            reason: format!("{why}; the plan is exhausted with a gap left"),
        };
    }
    GateResult {
        route: GateRoute::Decide,
        ready: false,
        reason: why,
    }
}

/// The first pending step that still tests an open or supported hypothesis.
pub fn next_useful_step(state: &DiagnosticState) -> Option<&super::state::PlanStep> {
    let mut steps: Vec<&super::state::PlanStep> = state
        .plan
        .iter()
        .filter(|s| s.status == StepStatus::Pending)
        .collect();
    steps.sort_by_key(|s| s.order);
    steps.into_iter().find(|s| {
        super::arguments::resolve(state, s).is_some()
            && s.tests_hypotheses.iter().any(|id| {
                state.hypothesis(id).is_none_or(|h| {
                    matches!(
                        h.disposition,
                        Disposition::Unresolved | Disposition::Supported
                    )
                })
            })
    })
}
