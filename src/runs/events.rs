//! The closed set of public run events: their wire names and JSON data. Everything a
//! client can see of a run goes through `RunEvent`, so nothing private (prompts, hidden
//! reasoning, checkpoints, secrets) can reach an event stream by accident.

use serde::Serialize;
use serde_json::{json, Value};

/// The event type names that end a run's stream.
pub const TERMINAL_EVENT_TYPES: [&str; 3] = ["run.completed", "run.failed", "run.cancelled"];

/// Token counts of the generation that answered a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RunUsage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
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
    /// More text of the assistant's answer.
    MessageDelta {
        text: String,
    },
    Completed {
        message_id: String,
        finish_reason: String,
        usage: RunUsage,
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
            RunEvent::MessageDelta { .. } => "message.delta",
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
            RunEvent::MessageDelta { text } => json!({ "text": text }),
            RunEvent::Completed {
                message_id,
                finish_reason,
                usage,
            } => json!({
                "message_id": message_id,
                "finish_reason": finish_reason,
                "usage": usage,
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
                message_id: "msg_1".into(),
                finish_reason: "stop".into(),
                usage: RunUsage {
                    prompt_tokens: 3,
                    completion_tokens: 4,
                },
            },
            RunEvent::Failed {
                reason: "boom".into(),
            },
            RunEvent::Cancelled,
        ];
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
