//! The closed set of public run events: their wire names and JSON data. Everything a
//! client can see of a run goes through `RunEvent`, so nothing private (prompts, hidden
//! reasoning, checkpoints, secrets) can reach an event stream by accident.

use serde::Serialize;
use serde_json::{json, Value};

/// Every public event type, in the order a run usually emits them. The UI, the CLI bench
/// and replay know exactly these.
pub const EVENT_TYPES: [&str; 18] = [
    "run.started",
    "run.resumed",
    "context.prepared",
    "route.decided",
    "tool.started",
    "tool.completed",
    "citation",
    "card",
    "confirmation.required",
    "clarification.needed",
    "message.delta",
    "run.completed",
    "run.failed",
    "run.cancelled",
    "run.degraded",
    "diagnostic.node",
    "answer.unsupported",
    "answer.basis",
];

/// The event type names that end a run's stream.
pub const TERMINAL_EVENT_TYPES: [&str; 3] = ["run.completed", "run.failed", "run.cancelled"];

/// Token counts of the generation that answered a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RunUsage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
}

/// What a turn's context envelope holds, in the chat model's tokens per part: what the
/// run timeline shows of it (never the text itself).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ContextTokens {
    pub system: usize,
    pub tools: usize,
    pub memory: usize,
    /// The earlier turns sent.
    pub history: usize,
    pub question: usize,
    pub reserved_output: usize,
    pub window: usize,
    pub turns_sent: usize,
    /// Earlier turns not sent (beyond six, or past the history's budget).
    pub turns_left_out: usize,
    /// Tokens of every earlier message memory does not cover, sent or not.
    pub uncovered_history: usize,
    /// Tokens tool results (passages, observations) may take in each reasoning step: what
    /// the window leaves, at most the agent's observation budget.
    pub observation_budget: usize,
}

impl ContextTokens {
    /// Everything the call would take of the window.
    pub fn total(&self) -> usize {
        self.system + self.tools + self.memory + self.history + self.question + self.reserved_output
    }
}

/// How the agent routed the message: public, auditable fields only (no reasoning).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoutePublic {
    pub intent: String,
    pub mode: String,
    pub confidence: f64,
    pub source: String,
    pub incident_id: Option<String>,
    pub diagnostic_task_id: Option<String>,
    pub needs_clarification: bool,
    pub blocked_reason: Option<String>,
    pub flags: Vec<String>,
}

/// A cited passage, numbered as the answer cites it.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct CitationPublic {
    pub n: usize,
    /// The catalogue chunk, for `GET /api/kb/passages/{chunk_id}`.
    #[serde(default)]
    pub chunk_id: u64,
    pub kb: String,
    pub path: String,
    pub title: Option<String>,
    pub heading_path: Vec<String>,
    /// Lines, pages or paragraphs, as the knowledge base reports them.
    pub location: Option<Value>,
    /// The passage's text (what the citation opens).
    pub text: String,
}

/// An action that waits for a person: what exactly will happen if they confirm.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConfirmationPublic {
    pub action_id: String,
    pub kind: String,
    pub target: String,
    pub reason: String,
    pub parameters: Value,
    pub parameters_hash: String,
    pub expires_at: i64,
}

/// One public event of a run.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEvent {
    /// A worker began the run (attempt 1).
    Started {
        attempt: i64,
    },
    /// A worker took over an interrupted run and continues its answer.
    Resumed {
        attempt: i64,
        resumed_chars: usize,
    },
    /// The turn's context envelope, in tokens per part.
    ContextPrepared(ContextTokens),
    /// The context was near the window, so older turns were compacted into memory before
    /// the call: how many messages memory newly covers, how many items it holds, its
    /// version, and why it was degraded if it was.
    MemoryCompacted {
        covered_messages: usize,
        items: usize,
        version: i64,
        degraded: Option<String>,
    },
    /// The route and execution mode the agent chose.
    RouteDecided(RoutePublic),
    /// A tool call began (its name only: arguments may hold secrets).
    ToolStarted {
        call_id: String,
        name: String,
    },
    /// A tool call ended: `ok`, `error` or `refused`, with a short public summary.
    ToolCompleted {
        call_id: String,
        name: String,
        status: String,
        summary: String,
    },
    Citation(CitationPublic),
    /// Structured facts (an incident, a diagnostic report, a list): the primary result.
    Card {
        kind: String,
        data: Value,
    },
    ConfirmationRequired(ConfirmationPublic),
    ClarificationNeeded {
        question: String,
    },
    /// Part of the run fell back (e.g. the explanation of a direct read failed); the facts
    /// it already produced stand.
    Degraded {
        reason: String,
    },
    /// The faithfulness gate held back what the model wrote (a sentence its cited
    /// passages do not support, or an answer cut off or without facts); the reason, never
    /// the rejected text.
    AnswerUnsupported {
        reason: String,
    },
    /// What a knowledge answer rests on: `passages` (the model's sentences, each checked
    /// against the passages it cites), `extractive` (the passage lines that best match the
    /// question, quoted) or `abstained` (nothing the user may read holds the answer).
    AnswerBasis {
        basis: String,
    },
    /// More text of the assistant's answer.
    MessageDelta {
        text: String,
    },
    /// A diagnostic graph node finished: public progress, never model text.
    DiagnosticNode {
        task_id: String,
        node: String,
        iteration: u32,
        next: String,
        summary: String,
        detail: Value,
    },
    /// The run ended well. Chat turns name their assistant message; diagnostic runs have
    /// none (`null`) and end with outcome `diagnosed`.
    Completed {
        message_id: Option<String>,
        finish_reason: String,
        usage: RunUsage,
        /// answered | pending_action | clarification | refused
        outcome: String,
    },
    Failed {
        reason: String,
    },
    Cancelled,
}

impl RunEvent {
    /// The SSE `event:` name.
    pub fn event_type(&self) -> &'static str {
        match self {
            RunEvent::Started { .. } => "run.started",
            RunEvent::Resumed { .. } => "run.resumed",
            RunEvent::ContextPrepared(_) => "context.prepared",
            RunEvent::MemoryCompacted { .. } => "memory.compacted",
            RunEvent::RouteDecided(_) => "route.decided",
            RunEvent::ToolStarted { .. } => "tool.started",
            RunEvent::ToolCompleted { .. } => "tool.completed",
            RunEvent::Citation(_) => "citation",
            RunEvent::Card { .. } => "card",
            RunEvent::ConfirmationRequired(_) => "confirmation.required",
            RunEvent::ClarificationNeeded { .. } => "clarification.needed",
            RunEvent::Degraded { .. } => "run.degraded",
            RunEvent::MessageDelta { .. } => "message.delta",
            RunEvent::AnswerUnsupported { .. } => "answer.unsupported",
            RunEvent::AnswerBasis { .. } => "answer.basis",
            RunEvent::DiagnosticNode { .. } => "diagnostic.node",
            RunEvent::Completed { .. } => "run.completed",
            RunEvent::Failed { .. } => "run.failed",
            RunEvent::Cancelled => "run.cancelled",
        }
    }

    /// The event's JSON data, stamped with `at` (unix milliseconds).
    pub fn data(&self, at_ms: i64) -> String {
        let mut data = match self {
            RunEvent::Started { attempt } => json!({ "attempt": attempt }),
            RunEvent::Resumed {
                attempt,
                resumed_chars,
            } => json!({ "attempt": attempt, "resumed_chars": resumed_chars }),
            RunEvent::ContextPrepared(tokens) => json!(tokens),
            RunEvent::MemoryCompacted {
                covered_messages,
                items,
                version,
                degraded,
            } => json!({
                "covered_messages": covered_messages, "items": items, "version": version,
                "degraded": degraded,
            }),
            RunEvent::RouteDecided(route) => json!(route),
            RunEvent::ToolStarted { call_id, name } => json!({ "call_id": call_id, "name": name }),
            RunEvent::ToolCompleted {
                call_id,
                name,
                status,
                summary,
            } => json!({ "call_id": call_id, "name": name, "status": status, "summary": summary }),
            RunEvent::Citation(citation) => json!(citation),
            RunEvent::Card { kind, data } => json!({ "kind": kind, "data": data }),
            RunEvent::ConfirmationRequired(confirmation) => json!(confirmation),
            RunEvent::ClarificationNeeded { question } => json!({ "question": question }),
            RunEvent::Degraded { reason } => json!({ "reason": reason }),
            RunEvent::MessageDelta { text } => json!({ "text": text }),
            RunEvent::AnswerUnsupported { reason } => json!({ "reason": reason }),
            RunEvent::AnswerBasis { basis } => json!({ "basis": basis }),
            RunEvent::DiagnosticNode {
                task_id,
                node,
                iteration,
                next,
                summary,
                detail,
            } => json!({
                "task_id": task_id, "node": node, "iteration": iteration, "next": next,
                "summary": summary, "detail": detail,
            }),
            RunEvent::Completed {
                message_id,
                finish_reason,
                usage,
                outcome,
            } => json!({
                "message_id": message_id,
                "finish_reason": finish_reason,
                "usage": usage,
                "outcome": outcome,
            }),
            RunEvent::Failed { reason } => json!({ "reason": reason }),
            RunEvent::Cancelled => json!({}),
        };
        if let Value::Object(fields) = &mut data {
            fields.insert("at".to_owned(), json!(at_ms));
        }
        data.to_string()
    }
}

/// Whether an event of this type ends its run's stream.
pub fn is_terminal(event_type: &str) -> bool {
    TERMINAL_EVENT_TYPES.contains(&event_type)
}

/// The answer text a run has streamed so far: its `message.delta` texts, in order.
pub fn streamed_text<'a>(events: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut text = String::new();
    for (event_type, data) in events {
        if event_type != "message.delta" {
            continue;
        }
        if let Ok(value) = serde_json::from_str::<Value>(data) {
            if let Some(delta) = value.get("text").and_then(Value::as_str) {
                text.push_str(delta);
            }
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_has_its_type_and_a_timestamp() {
        let events = [
            RunEvent::Started { attempt: 1 },
            RunEvent::Resumed {
                attempt: 2,
                resumed_chars: 5,
            },
            RunEvent::MessageDelta { text: "hi".into() },
            RunEvent::Completed {
                message_id: Some("msg_1".into()),
                finish_reason: "stop".into(),
                usage: RunUsage {
                    prompt_tokens: 3,
                    completion_tokens: 4,
                },
                outcome: "answered".into(),
            },
            RunEvent::Failed {
                reason: "boom".into(),
            },
            RunEvent::Cancelled,
        ];
        for event in &events {
            assert!(EVENT_TYPES.contains(&event.event_type()), "{event:?}");
        }
        let terminal: Vec<bool> = events.iter().map(|e| is_terminal(e.event_type())).collect();
        assert_eq!(terminal, [false, false, false, true, true, true]);
        for event in &events {
            let data: Value = serde_json::from_str(&event.data(42)).unwrap();
            assert_eq!(data["at"], 42, "{event:?}");
        }
        let completed: Value = serde_json::from_str(&events[3].data(1)).unwrap();
        assert_eq!(completed["usage"]["completion_tokens"], 4);
    }

    #[test]
    fn streamed_text_joins_only_deltas() {
        let started = RunEvent::Started { attempt: 1 }.data(1);
        let a = RunEvent::MessageDelta { text: "Hel".into() }.data(2);
        let b = RunEvent::MessageDelta {
            text: "lo 世界".into(),
        }
        .data(3);
        let events = [
            ("run.started", started.as_str()),
            ("message.delta", a.as_str()),
            ("message.delta", b.as_str()),
        ];
        assert_eq!(streamed_text(events), "Hello 世界");
    }
}
