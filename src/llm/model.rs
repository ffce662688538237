//! The chat model as the agent and the diagnostic graph see it: a trait, so their control
//! planes are unit-testable with a scripted model and can later take remote backends. The
//! engine's model thread is the real implementation.

use std::time::Duration;

use crate::engine::{ChatModelHandle, ChatRequest, EngineError, GenerationEvent, GenerationStream};

/// What a model stream yields when polled.
#[derive(Debug)]
pub enum StreamItem {
    Event(GenerationEvent),
    /// Nothing arrived within the wait; the generation goes on.
    Idle,
    /// The generation ended without `Done` (the worker died).
    Ended,
    Error(EngineError),
}

/// One generation in progress. Dropping it cancels the generation.
pub trait ModelStream: Send {
    fn next_timeout(&mut self, wait: Duration) -> StreamItem;
}

/// A chat model the agent and the diagnostic graph can call.
pub trait ChatModel: Send + Sync {
    /// Queues a generation; `QueueFull` when the model is busy.
    fn submit(&self, request: ChatRequest) -> Result<Box<dyn ModelStream>, EngineError>;
    /// The model's context window in tokens, as loaded.
    fn context_length(&self) -> usize;
    /// How many of the model's tokens `text` is.
    fn count_tokens(&self, text: &str) -> usize;
    /// Requests waiting for the model (background work yields while there are any).
    fn queued(&self) -> usize {
        0
    }
}

/// The engine's chat model thread.
pub struct EngineChatModel(pub ChatModelHandle);

impl ChatModel for EngineChatModel {
    fn submit(&self, request: ChatRequest) -> Result<Box<dyn ModelStream>, EngineError> {
        Ok(Box::new(EngineStream(self.0.submit(request)?)))
    }

    fn context_length(&self) -> usize {
        self.0.info().context_length
    }

    fn count_tokens(&self, text: &str) -> usize {
        self.0.count_tokens(text)
    }

    fn queued(&self) -> usize {
        self.0.queued() as usize
    }
}

struct EngineStream(GenerationStream);

impl ModelStream for EngineStream {
    fn next_timeout(&mut self, wait: Duration) -> StreamItem {
        match self.0.next_timeout(wait) {
            Err(()) => StreamItem::Idle,
            Ok(None) => StreamItem::Ended,
            Ok(Some(Ok(event))) => StreamItem::Event(event),
            Ok(Some(Err(err))) => StreamItem::Error(err),
        }
    }
}
