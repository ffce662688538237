//! Model calls as the agent makes them: one generation polled on the run worker's thread
//! with the lease kept alive, a deadline, and cancellation by dropping the stream. Free
//! text streams through a callback; structured calls are grammar-constrained to a JSON
//! schema and parsed here (the caller validates the value in code).

use std::time::{Duration, Instant};

use serde_json::Value;

use super::model::{ChatModel, StreamItem};
use crate::engine::{
    ChatMessage, ChatRequest, EngineError, GenerationEvent, GenerationSummary, ResponseFormat,
    SamplingParams,
};
use crate::runs::{TurnSink, TurnStop};

/// How long to wait between tries when the model's queue is full.
const QUEUE_FULL_BACKOFF: Duration = Duration::from_millis(200);

/// Why a model call gave no usable result.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("the run was stopped")]
    Stopped(TurnStop),
    #[error("the run's deadline passed")]
    Deadline,
    #[error("the chat model failed: {0}")]
    Model(String),
    #[error("the model's output was not valid JSON: {0}")]
    Unparsable(String),
    /// The caller's text callback ended the generation early (it had seen enough).
    #[error("the generation was ended by its reader")]
    Halted,
}

impl From<TurnStop> for CallError {
    fn from(stop: TurnStop) -> Self {
        CallError::Stopped(stop)
    }
}

/// One model call's settings.
pub struct Call<'a> {
    pub messages: Vec<ChatMessage>,
    pub max_tokens: usize,
    pub seed: u64,
    pub deadline: Instant,
    pub format: ResponseFormat,
    /// Text the answer already starts with (a resumed run).
    pub assistant_prefix: Option<String>,
    /// Called with each piece of generated text as it arrives (and the sink, to stream it);
    /// `Ok(false)` ends the generation (the call returns `Halted`).
    pub on_text: Option<&'a mut dyn FnMut(&str, &mut dyn TurnSink) -> Result<bool, TurnStop>>,
}

/// Runs the call to its end; the whole text and the generation's summary.
pub fn generate(
    model: &dyn ChatModel,
    sink: &mut dyn TurnSink,
    mut call: Call<'_>,
) -> Result<(String, GenerationSummary), CallError> {
    let request = ChatRequest {
        messages: std::mem::take(&mut call.messages),
        response_format: call.format.clone(),
        sampling: SamplingParams {
            repetition_penalty: 1.1,
            seed: Some(call.seed),
            ..SamplingParams::greedy()
        },
        max_tokens: Some(call.max_tokens),
        assistant_prefix: call.assistant_prefix.clone(),
        ..ChatRequest::default()
    };
    let mut stream = loop {
        match model.submit(request.clone()) {
            Ok(stream) => break stream,
            Err(EngineError::QueueFull(_)) => {
                if Instant::now() >= call.deadline {
                    return Err(CallError::Deadline);
                }
                std::thread::sleep(QUEUE_FULL_BACKOFF);
                sink.keep_alive()?;
            }
            Err(err) => return Err(CallError::Model(err.to_string())),
        }
    };
    let poll = sink.delta_interval();
    let mut text = String::new();
    loop {
        if Instant::now() >= call.deadline {
            return Err(CallError::Deadline);
        }
        match stream.next_timeout(poll) {
            StreamItem::Event(GenerationEvent::Delta(piece)) => {
                text.push_str(&piece);
                if let Some(on_text) = call.on_text.as_mut() {
                    if !on_text(&piece, sink)? {
                        return Err(CallError::Halted);
                    }
                }
            }
            StreamItem::Event(GenerationEvent::Done(summary)) => return Ok((text, summary)),
            StreamItem::Idle => {}
            StreamItem::Ended => {
                return Err(CallError::Model(
                    "the chat model stopped before answering".into(),
                ))
            }
            StreamItem::Error(err) => return Err(CallError::Model(err.to_string())),
        }
        sink.keep_alive()?;
    }
}

/// A grammar-constrained call: the output parses as JSON for `schema`.
pub fn generate_json(
    model: &dyn ChatModel,
    sink: &mut dyn TurnSink,
    messages: Vec<ChatMessage>,
    schema: &Value,
    max_tokens: usize,
    seed: u64,
    deadline: Instant,
) -> Result<(Value, GenerationSummary), CallError> {
    let call = Call {
        messages,
        max_tokens,
        seed,
        deadline,
        format: ResponseFormat::JsonSchema(schema.clone()),
        assistant_prefix: None,
        on_text: None,
    };
    let (text, summary) = generate(model, sink, call)?;
    let value =
        serde_json::from_str(text.trim()).map_err(|err| CallError::Unparsable(err.to_string()))?;
    Ok((value, summary))
}
