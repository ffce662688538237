//! Injected faults for `warden eval diagnostics --fault …`: a model that never answers
//! (the call times out), one that answers text that is not JSON, a validator that cannot
//! be reached, and a data source whose every read fails. The graph must close fail-safe
//! under each: manual review, execution not permitted, the failure class recorded.

use std::sync::Arc;
use std::time::Duration;

use super::runner::DiagnosticRunner;
pub use super::score::Fault;
use super::source::{DiagnosticSource, SourceError, SourceKind, SourceRecords};
use crate::engine::{ChatRequest, EngineError, FinishReason, GenerationEvent, GenerationSummary};
use crate::llm::model::{ChatModel, ModelStream, StreamItem};

/// A model call's limit under the `model_timeout` fault (the model never answers).
const FAULT_CALL_TIMEOUT: Duration = Duration::from_secs(2);

impl DiagnosticRunner {
    /// Puts `fault` into the runner: its models, or its data source.
    pub fn inject(&mut self, fault: Fault) {
        let context_length = self.models.planner.context_length();
        let faulty = |fault| -> Arc<dyn ChatModel> {
            Arc::new(FaultyModel {
                fault,
                context_length,
            })
        };
        match fault {
            Fault::ModelTimeout | Fault::BadJson => {
                self.models.planner = faulty(fault);
                self.models.validator = faulty(fault);
                if fault == Fault::ModelTimeout {
                    self.models.call_timeout = FAULT_CALL_TIMEOUT;
                }
            }
            Fault::ValidatorDown => self.models.validator = faulty(fault),
            Fault::ToolError => self.failing_tools = true,
        }
    }
}

/// A model with a fault: it never answers, answers non-JSON, or cannot be reached.
pub struct FaultyModel {
    pub fault: Fault,
    pub context_length: usize,
}

impl ChatModel for FaultyModel {
    fn submit(&self, _request: ChatRequest) -> Result<Box<dyn ModelStream>, EngineError> {
        match self.fault {
            Fault::ValidatorDown | Fault::ToolError => Err(EngineError::WorkerGone(
                "validator (injected fault)".to_owned(),
            )),
            fault => Ok(Box::new(FaultyStream { fault, sent: false })),
        }
    }

    fn context_length(&self) -> usize {
        self.context_length
    }

    fn count_tokens(&self, text: &str) -> usize {
        text.chars().count().div_ceil(4)
    }
}

struct FaultyStream {
    fault: Fault,
    sent: bool,
}

impl ModelStream for FaultyStream {
    fn next_timeout(&mut self, wait: Duration) -> StreamItem {
        match self.fault {
            Fault::BadJson if !self.sent => {
                self.sent = true;
                StreamItem::Event(GenerationEvent::Delta("{\"steps\": [oops".to_owned()))
            }
            Fault::BadJson => StreamItem::Event(GenerationEvent::Done(GenerationSummary {
                prompt_tokens: 0,
                cached_prompt_tokens: 0,
                completion_tokens: 3,
                finish_reason: FinishReason::Stop,
                tool_calls: Vec::new(),
                prefill_ms: 0.0,
                decode_ms: 0.0,
            })),
            _ => {
                std::thread::sleep(wait);
                StreamItem::Idle
            }
        }
    }
}

/// A data source whose every read fails.
pub struct FailingSource;

impl DiagnosticSource for FailingSource {
    fn records(
        &self,
        source: SourceKind,
        _start: Option<i64>,
        _end: Option<i64>,
    ) -> Result<SourceRecords, SourceError> {
        Err(SourceError::Read {
            path: source.file_name().into(),
            message: "connection refused (injected fault)".to_owned(),
        })
    }
}
