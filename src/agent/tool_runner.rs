//! Runs the tool calls of one run: catalog check, argument validation, the repeated-call
//! guard, the tool budget and deadline, the call itself through the run's ledger protocol
//! (`runs::ledger_call`: claim under the lease, reuse on resume, `uncertain` for side
//! effects whose outcome is unknown, the public `tool.started` / `tool.completed` events —
//! name, status, short summary, never arguments) and the full result in the audit log.

use std::collections::HashSet;
use std::time::Instant;

use serde_json::{json, Value};

use super::tools::{canonical_json, tool_call_key, validate, Catalog, ToolContext, ToolResult};
use crate::runs::ledger_call::{call_through_ledger, LedgerCall, LedgerOutcome};
use crate::runs::{now_secs, TurnSink, TurnStop};
use crate::store::{Audit, AuditEntry, AuditOutcome, SideEffect};

/// Most characters of a tool result kept in one audit row.
const MAX_AUDITED_RESULT_CHARS: usize = 16_000;

/// What one tool call came to.
#[derive(Debug, Clone, PartialEq)]
pub enum CallOutcome {
    Ok {
        data: Value,
        summary: String,
    },
    /// The tool ran and reported an error (not found, invalid arguments…): an observation.
    Error {
        code: String,
        message: String,
    },
    /// The call was not made (unknown tool, repeated call, budget, deadline).
    Refused(String),
    /// A side-effecting call whose earlier outcome is unknown: a person must look.
    Uncertain,
}

impl CallOutcome {
    /// A compact observation for the model: status, key fields, error.
    pub fn observation(&self, tool: &str) -> String {
        match self {
            CallOutcome::Ok { summary, .. } => format!("{tool}: ok ({summary})"),
            CallOutcome::Error { code, message } => format!("{tool}: error {code}: {message}"),
            CallOutcome::Refused(why) => format!("{tool}: refused: {why}"),
            CallOutcome::Uncertain => format!("{tool}: outcome unknown"),
        }
    }
}

pub struct ToolRunner<'a> {
    pub context: ToolContext<'a>,
    pub catalog: &'a Catalog,
    pub actor: &'a str,
    pub max_calls: u32,
    pub deadline: Instant,
    calls: u32,
    seen: HashSet<String>,
    /// Tools called with an outcome (for the postcondition and the eval).
    pub called: Vec<String>,
}

impl<'a> ToolRunner<'a> {
    pub fn new(
        context: ToolContext<'a>,
        catalog: &'a Catalog,
        actor: &'a str,
        max_calls: u32,
        deadline: Instant,
    ) -> Self {
        Self {
            context,
            catalog,
            actor,
            max_calls,
            deadline,
            calls: 0,
            seen: HashSet::new(),
            called: Vec::new(),
        }
    }

    pub fn calls_left(&self) -> u32 {
        self.max_calls.saturating_sub(self.calls)
    }

    /// Makes one call at logical `step`, call number `index` within the step.
    pub fn run(
        &mut self,
        sink: &mut dyn TurnSink,
        step: i64,
        index: usize,
        name: &str,
        arguments: &Value,
    ) -> Result<CallOutcome, TurnStop> {
        let Some(tool) = self.catalog.get(name).cloned() else {
            return Ok(CallOutcome::Refused(format!(
                "`{name}` is not an available tool"
            )));
        };
        let fingerprint = format!("{name}\u{1f}{}", canonical_json(arguments));
        if self.seen.contains(&fingerprint) {
            return Ok(CallOutcome::Refused(
                "the same call was already made".into(),
            ));
        }
        if self.calls >= self.max_calls {
            return Ok(CallOutcome::Refused("the tool-call budget is spent".into()));
        }
        if Instant::now() >= self.deadline {
            return Ok(CallOutcome::Refused("the run's deadline passed".into()));
        }
        if let Err(problem) = validate(arguments, &tool.info().parameters) {
            self.calls += 1;
            return Ok(CallOutcome::Error {
                code: "invalid_arguments".into(),
                message: problem,
            });
        }
        self.seen.insert(fingerprint);
        self.calls += 1;
        let call_id = format!("call_{step}_{index}");
        let (store, run_id) = (self.context.store, self.context.run_id);
        let key = tool_call_key(run_id, step, name, arguments);
        let call = LedgerCall {
            store,
            run_id,
            key: &key,
            step,
            tool: name,
            side_effect: tool.info().side_effect,
            call_id: Some(&call_id),
        };
        let limit = (Instant::now() + tool.info().timeout).min(self.deadline);
        let context = &mut self.context;
        let recorded = call_through_ledger(
            sink,
            &call,
            |_| {
                context.call_deadline = limit;
                let mut result = tool.call(context, arguments);
                let late = Instant::now() > context.call_deadline;
                if late && tool.info().side_effect == SideEffect::Read && result.is_ok() {
                    // A read that overran its timeout is not used: the limit holds for
                    // every tool, whether or not it watches the clock itself.
                    result = ToolResult::error(
                        "timeout",
                        format!(
                            "`{name}` took longer than its {} s limit",
                            tool.info().timeout.as_secs()
                        ),
                    );
                }
                Ok(match result {
                    ToolResult::Ok { data, summary } => {
                        Ok(json!({"data": data, "summary": summary}).to_string())
                    }
                    ToolResult::Err { code, message } => Err(format!("{code}: {message}")),
                })
            },
            &|recorded| {
                let (status, summary) = status_of(&outcome_of(recorded));
                (status.to_owned(), summary)
            },
        )?;
        let outcome = outcome_of(&recorded);
        let (status, _) = status_of(&outcome);
        if matches!(outcome, CallOutcome::Ok { .. } | CallOutcome::Error { .. }) {
            self.called.push(name.to_owned());
        }
        self.audit(name, status, &outcome);
        Ok(outcome)
    }

    /// The full result, for admins only (the audit log).
    fn audit(&self, tool: &str, status: &str, outcome: &CallOutcome) {
        let result = match outcome {
            CallOutcome::Ok { data, .. } => data.to_string(),
            CallOutcome::Error { code, message } => format!("{code}: {message}"),
            CallOutcome::Refused(why) => why.clone(),
            CallOutcome::Uncertain => String::new(),
        };
        let result: String = result.chars().take(MAX_AUDITED_RESULT_CHARS).collect();
        let detail =
            json!({"run": self.context.run_id, "tool": tool, "status": status, "result": result});
        let entry = AuditEntry {
            actor: self.actor,
            action: "tool.call",
            target: Some(self.context.run_id),
            outcome: if status == "ok" {
                AuditOutcome::Success
            } else {
                AuditOutcome::Failure
            },
            detail: Some(&detail),
        };
        if let Err(err) = self.context.store.record(&entry, now_secs()) {
            tracing::error!("cannot audit a tool call: {err}");
        }
    }
}

/// A settled ledger entry as the agent's outcome: the stored `{data, summary}` or the
/// stored `code: message`.
fn outcome_of(recorded: &LedgerOutcome) -> CallOutcome {
    match recorded {
        LedgerOutcome::Settled(Ok(stored)) => {
            let value: Value = serde_json::from_str(stored).unwrap_or(Value::Null);
            CallOutcome::Ok {
                summary: value["summary"].as_str().unwrap_or_default().to_owned(),
                data: value["data"].clone(),
            }
        }
        LedgerOutcome::Settled(Err(error)) => {
            let (code, message) = error.split_once(": ").unwrap_or(("failed", error));
            CallOutcome::Error {
                code: code.to_owned(),
                message: message.to_owned(),
            }
        }
        LedgerOutcome::Uncertain => CallOutcome::Uncertain,
    }
}

/// The status and public summary a `tool.completed` event shows for an outcome.
fn status_of(outcome: &CallOutcome) -> (&'static str, String) {
    match outcome {
        CallOutcome::Ok { summary, .. } => ("ok", summary.clone()),
        CallOutcome::Error { code, .. } => ("error", code.clone()),
        CallOutcome::Refused(why) => ("refused", why.clone()),
        CallOutcome::Uncertain => ("uncertain", "outcome unknown; a person must check".into()),
    }
}
