//! The agent's seams to the world: a chat model and a knowledge search, as traits so the
//! control plane is unit-testable with a scripted model and can later take remote
//! backends. The real implementations (the engine's model thread, the retrieval library)
//! are the defaults.

use std::sync::Arc;
use std::time::Duration;

use crate::engine::{ChatModelHandle, ChatRequest, EngineError, GenerationEvent, GenerationStream};
use crate::retrieval::{Library, SearchHit, SearchMode};

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

/// A chat model the agent can call.
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

/// Hybrid search over the knowledge bases a caller may read.
pub trait KnowledgeSearch: Send + Sync {
    /// At most `limit` hits for `query` in `readable` (all knowledge bases when `None`).
    fn search(
        &self,
        query: &str,
        readable: Option<&[String]>,
        limit: usize,
    ) -> Result<Vec<SearchHit>, String>;
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

/// The retrieval library's hybrid search.
pub struct LibrarySearch(pub Arc<Library>);

impl KnowledgeSearch for LibrarySearch {
    fn search(
        &self,
        query: &str,
        readable: Option<&[String]>,
        limit: usize,
    ) -> Result<Vec<SearchHit>, String> {
        self.0
            .search(query, readable, SearchMode::Hybrid, limit)
            .map_err(|err| err.to_string())
    }
}
