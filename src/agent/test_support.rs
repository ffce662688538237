//! Doubles for control-plane tests of the agent: a chat model that answers with scripted
//! texts and records its requests, and a turn sink that records the events.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::engine::{ChatRequest, EngineError, FinishReason, GenerationEvent, GenerationSummary};
use crate::llm::model::{ChatModel, ModelStream, StreamItem};
use crate::runs::{RunEvent, TurnSink, TurnStop};

/// Answers each request with the next scripted text; records the requests.
#[derive(Default)]
pub struct ScriptedModel {
    outputs: Mutex<VecDeque<String>>,
    pub requests: Mutex<Vec<ChatRequest>>,
}

impl ScriptedModel {
    pub fn new(outputs: &[Value]) -> Arc<Self> {
        Arc::new(Self {
            outputs: Mutex::new(outputs.iter().map(|v| v.to_string()).collect()),
            requests: Mutex::default(),
        })
    }

    pub fn calls(&self) -> usize {
        self.requests.lock().unwrap().len()
    }
}

struct Scripted(Option<String>, bool);

impl ModelStream for Scripted {
    fn next_timeout(&mut self, _wait: Duration) -> StreamItem {
        if let Some(text) = self.0.take() {
            return StreamItem::Event(GenerationEvent::Delta(text));
        }
        if self.1 {
            self.1 = false;
            return StreamItem::Event(GenerationEvent::Done(GenerationSummary {
                prompt_tokens: 10,
                cached_prompt_tokens: 0,
                completion_tokens: 5,
                finish_reason: FinishReason::Stop,
                tool_calls: Vec::new(),
                prefill_ms: 0.0,
                decode_ms: 0.0,
            }));
        }
        StreamItem::Ended
    }
}

impl ChatModel for ScriptedModel {
    fn submit(&self, request: ChatRequest) -> Result<Box<dyn ModelStream>, EngineError> {
        self.requests.lock().unwrap().push(request);
        let next = self
            .outputs
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| "not json".into());
        Ok(Box::new(Scripted(Some(next), true)))
    }

    fn context_length(&self) -> usize {
        8192
    }

    /// About four characters a token, as English text runs.
    fn count_tokens(&self, text: &str) -> usize {
        text.chars().count().div_ceil(4)
    }
}

#[derive(Default)]
pub struct RecordingSink(pub Vec<RunEvent>);

impl TurnSink for RecordingSink {
    fn emit(&mut self, event: RunEvent) -> Result<(), TurnStop> {
        self.0.push(event);
        Ok(())
    }
    fn keep_alive(&mut self) -> Result<(), TurnStop> {
        Ok(())
    }
    fn checkpoint(&mut self, _state: &Value) -> Result<(), TurnStop> {
        Ok(())
    }
    fn worker_id(&self) -> &str {
        "w1"
    }
    fn delta_interval(&self) -> Duration {
        Duration::from_millis(1)
    }
}
