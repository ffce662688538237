//! Planning under constraints. The Planner asks the model to pick and order checks from
//! the candidate hypotheses' playbook tests — the output is grammar-constrained to those
//! test ids, then validated in code; a structurally invalid plan gets one bounded repair,
//! then manual review, never a guessed tool call. A chosen test becomes a plan step that
//! carries its hypothesis, causal intent, source domain and target component. The
//! Replanner closes gaps deterministically: the untried tests of hypotheses still open.

use serde_json::{json, Value};

use super::playbooks::{HypothesisDef, Playbooks};
use super::state::{DiagnosticState, Disposition, PlanStep, StepOrigin, StepStatus};
use crate::engine::{ChatMessage, Role};

/// The candidate tests a plan may choose from, in playbook order.
pub fn candidate_tests<'a>(
    state: &DiagnosticState,
    books: &'a Playbooks,
) -> Vec<(&'a HypothesisDef, &'a super::playbooks::TestDef)> {
    state
        .candidates
        .iter()
        .filter_map(|id| books.hypothesis(id))
        .flat_map(|h| h.tests.iter().map(move |t| (h, t)))
        .collect()
}

/// The constrained output: an ordered list of test ids.
pub fn plan_schema(ids: &[String]) -> Value {
    json!({
        "type": "object",
        "properties": {
            "steps": {
                "type": "array",
                "items": { "type": "string", "enum": ids },
                "minItems": 1,
                "maxItems": ids.len().clamp(1, 16),
            }
        },
        "required": ["steps"],
        "additionalProperties": false
    })
}

/// The planner's prompt: the alert, knowledge titles (guidance only) and the checks.
pub fn plan_messages(
    state: &DiagnosticState,
    books: &Playbooks,
    repair: Option<&str>,
) -> Vec<ChatMessage> {
    let mut checks = String::new();
    for (h, t) in candidate_tests(state, books) {
        checks.push_str(&format!(
            "- {}: {} looks for {} evidence of \"{}\"\n",
            t.id,
            t.tool,
            t.intent.as_str(),
            h.title
        ));
    }
    let knowledge: Vec<&str> = state.knowledge.iter().map(|k| k.title.as_str()).collect();
    let mut user = format!(
        "Alert: {} on {} ({}): {}\nRelated runbooks: {}\nChecks you may run:\n{checks}\
         List the checks to run first, most telling first.",
        state.alert.name,
        state.alert.service,
        state.alert.severity,
        state.alert.summary,
        if knowledge.is_empty() {
            "none".to_owned()
        } else {
            knowledge.join("; ")
        },
    );
    if let Some(problem) = repair {
        user.push_str(&format!(
            "\nYour previous plan was rejected ({problem}). Answer again with a valid plan."
        ));
    }
    vec![
        ChatMessage::new(
            Role::System,
            "You plan an incident investigation. You choose read-only checks from a fixed \
             list; you never decide the root cause. Answer with JSON only.",
        ),
        ChatMessage::new(Role::User, &user),
    ]
}

/// The test ids a model output names, validated: known candidate tests, no repeats.
pub fn validate_plan(output: &Value, allowed: &[String]) -> Result<Vec<String>, String> {
    let steps = output
        .get("steps")
        .and_then(Value::as_array)
        .ok_or("the plan has no `steps` list")?;
    let mut chosen: Vec<String> = Vec::new();
    for step in steps {
        let id = step.as_str().ok_or("a step is not a check id")?;
        if !allowed.iter().any(|a| a == id) {
            return Err(format!("`{id}` is not one of the offered checks"));
        }
        if !chosen.iter().any(|c| c == id) {
            chosen.push(id.to_owned());
        }
    }
    if chosen.is_empty() {
        return Err("the plan is empty".to_owned());
    }
    Ok(chosen)
}

/// Appends steps for `test_ids` to the plan.
pub fn add_steps(
    state: &mut DiagnosticState,
    books: &Playbooks,
    test_ids: &[String],
    origin: StepOrigin,
) {
    for id in test_ids {
        let Some((h, t)) = books.test(id) else {
            continue;
        };
        if state.plan.iter().any(|s| s.test == *id) {
            continue;
        }
        let n = state.plan.len() as u32 + 1;
        state.plan.push(PlanStep {
            id: format!("s{n}"),
            order: n,
            test: t.id.clone(),
            tool: t.tool.clone(),
            arguments: Value::Object(t.arguments.clone()),
            tests_hypotheses: vec![h.id.clone()],
            causal_intent: t.intent,
            source_domain: t.domain,
            target_component: t
                .target
                .clone()
                .unwrap_or_else(|| state.alert.service.clone()),
            origin,
            status: StepStatus::Pending,
        });
    }
}

/// The Replanner's gap-closing steps: untried tests of hypotheses not yet closed.
pub fn replan_tests(state: &DiagnosticState) -> Vec<String> {
    state
        .hypotheses
        .iter()
        .filter(|h| {
            !matches!(
                h.disposition,
                Disposition::Refuted | Disposition::CausallyInactive
            )
        })
        .flat_map(|h| h.untested.iter().cloned())
        .collect()
}
