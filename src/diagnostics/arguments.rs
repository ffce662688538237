//! A plan step's arguments bound to this incident: `$service`, `$window_start`,
//! `$window_end` and `$lookback_start` come from the alert and window; `$component` and
//! `$blocking_pids` come from facts earlier steps established. A step whose facts are not
//! there yet is not ready to run (it waits, and is skipped if they never come).

use serde_json::{json, Map, Value};

use super::facts::CHANGE_LOOKBACK_SECS;
use super::state::{DiagnosticState, PlanStep};
use crate::timefmt::format_rfc3339;

/// Most blocking pids passed on.
const MAX_BLOCKERS: usize = 20;

/// The step's arguments with placeholders resolved; `None` while one cannot be.
pub fn resolve(state: &DiagnosticState, step: &PlanStep) -> Option<Value> {
    let mut out = Map::new();
    for (name, value) in step.arguments.as_object().into_iter().flatten() {
        let resolved = match value.as_str() {
            Some("$service") => json!(state.alert.service),
            Some("$window_start") => json!(format_rfc3339(state.window.start)),
            Some("$window_end") => json!(format_rfc3339(state.window.end)),
            Some("$lookback_start") => {
                json!(format_rfc3339(state.window.start - CHANGE_LOOKBACK_SECS))
            }
            Some("$component") => {
                let component = step
                    .tests_hypotheses
                    .iter()
                    .find_map(|id| state.hypothesis(id).and_then(|h| h.component.clone()))?;
                json!(component)
            }
            Some("$blocking_pids") => {
                let pids = blocking_pids(state);
                if pids.is_empty() {
                    return None;
                }
                json!(pids)
            }
            _ => value.clone(),
        };
        out.insert(name.clone(), resolved);
    }
    Some(Value::Object(out))
}

/// Pids that block others inside the window, as the lock-wait observations showed.
fn blocking_pids(state: &DiagnosticState) -> Vec<i64> {
    let mut blockers: Vec<(f64, i64)> = Vec::new();
    for fact in state.observations.iter().flat_map(|o| o.facts.iter()) {
        if fact.kind != "long_blocker" || !fact.in_window {
            continue;
        }
        let pid = fact.attrs.get("pid").and_then(Value::as_f64).unwrap_or(0.0) as i64;
        let age = fact
            .attrs
            .get("blocking_xact_age_s")
            .and_then(Value::as_f64)
            .unwrap_or(0.0);
        if pid > 0 && !blockers.iter().any(|(_, p)| *p == pid) {
            blockers.push((age, pid));
        }
    }
    // The oldest blockers first: they are the likeliest cause.
    blockers.sort_by(|a, b| b.0.total_cmp(&a.0));
    blockers
        .into_iter()
        .take(MAX_BLOCKERS)
        .map(|(_, pid)| pid)
        .collect()
}
