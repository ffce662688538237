//! Cheap, cloneable handles to the model worker threads: the only way the rest of the
//! program reaches a loaded model. Submitting never blocks; a full queue is an error.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::error::{EngineError, Result};
use super::tokenizer::TextTokenizer;
use super::types::{ChatRequest, Embeddings, GenerationEvent, ModelInfo};

/// A queued chat job: the request, where to send its events, and its cancel flag.
pub struct ChatJob {
    pub request: ChatRequest,
    /// When the job entered the queue (time to first token counts from here).
    pub submitted: std::time::Instant,
    pub events: flume::Sender<Result<GenerationEvent>>,
    pub cancel: Arc<AtomicBool>,
}

/// A queued embedding job.
pub(crate) struct EmbedJob {
    pub inputs: Vec<String>,
    pub reply: flume::Sender<Result<Embeddings>>,
    pub cancel: Arc<AtomicBool>,
}

/// A chat model served elsewhere (an upstream engine): it takes jobs exactly as a local
/// worker does and answers through the job's event channel.
pub trait RemoteChat: Send + Sync {
    /// Queues `job`; `QueueFull` when the model's queue is full.
    fn submit(&self, job: ChatJob) -> Result<()>;
    fn queued(&self) -> u64;
    fn count_tokens(&self, text: &str) -> usize;
    fn context_length(&self) -> usize;
    /// Each endpoint's health, for the admin view of `/healthz`.
    fn endpoint_health(&self) -> Vec<crate::upstream::EndpointHealth>;
}

/// Where a chat model runs.
#[derive(Clone)]
enum Backend {
    /// A worker thread of this process, with the model's own tokenizer (shared, read-only)
    /// to count tokens without the thread.
    Local {
        queue: flume::Sender<ChatJob>,
        tokenizer: Arc<TextTokenizer>,
    },
    Remote(Arc<dyn RemoteChat>),
}

/// Handle to a chat model: a local worker thread or an upstream engine.
#[derive(Clone)]
pub struct ChatModelHandle {
    info: Arc<ModelInfo>,
    backend: Backend,
}

impl ChatModelHandle {
    pub(crate) fn new(
        info: ModelInfo,
        queue: flume::Sender<ChatJob>,
        tokenizer: Arc<TextTokenizer>,
    ) -> Self {
        Self {
            info: Arc::new(info),
            backend: Backend::Local { queue, tokenizer },
        }
    }

    /// A model served by an upstream engine.
    pub fn remote(info: ModelInfo, remote: Arc<dyn RemoteChat>) -> Self {
        Self {
            info: Arc::new(info),
            backend: Backend::Remote(remote),
        }
    }

    /// How many of the model's tokens `text` is (as message content: special-token text
    /// is counted as the plain text it is).
    pub fn count_tokens(&self, text: &str) -> usize {
        match &self.backend {
            Backend::Local { tokenizer, .. } => match tokenizer.encode(text, false) {
                Ok(ids) => ids.len(),
                // Never undercount: a byte is at most one token.
                Err(_) => text.len(),
            },
            Backend::Remote(remote) => remote.count_tokens(text),
        }
    }

    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// Requests waiting in the queue.
    pub fn queued(&self) -> u64 {
        match &self.backend {
            Backend::Local { queue, .. } => queue.len() as u64,
            Backend::Remote(remote) => remote.queued(),
        }
    }

    /// Whether the model is served by an upstream engine.
    pub fn is_remote(&self) -> bool {
        matches!(self.backend, Backend::Remote(_))
    }

    /// The upstream endpoints' health (empty for a local model).
    pub fn endpoint_health(&self) -> Vec<crate::upstream::EndpointHealth> {
        match &self.backend {
            Backend::Local { .. } => Vec::new(),
            Backend::Remote(remote) => remote.endpoint_health(),
        }
    }

    /// Queues a generation. Returns at once: `QueueFull` when the queue is full.
    /// Dropping the returned stream cancels the generation.
    pub fn submit(&self, request: ChatRequest) -> Result<GenerationStream> {
        // Deltas are small; the bound keeps a slow reader from growing memory without limit
        // (the worker then waits, which is the backpressure we want).
        let (events, receiver) = flume::bounded(256);
        let cancel = Arc::new(AtomicBool::new(false));
        let job = ChatJob {
            request,
            submitted: std::time::Instant::now(),
            events,
            cancel: cancel.clone(),
        };
        match &self.backend {
            Backend::Local { queue, .. } => queue.try_send(job).map_err(|err| match err {
                flume::TrySendError::Full(_) => EngineError::QueueFull(self.info.id.clone()),
                flume::TrySendError::Disconnected(_) => {
                    EngineError::WorkerGone(self.info.id.clone())
                }
            })?,
            Backend::Remote(remote) => remote.submit(job)?,
        }
        Ok(GenerationStream {
            receiver,
            cancel: CancelOnDrop(cancel),
        })
    }
}

/// The events of one generation. Dropping it cancels the generation.
pub struct GenerationStream {
    receiver: flume::Receiver<Result<GenerationEvent>>,
    cancel: CancelOnDrop,
}

impl GenerationStream {
    /// The next event, or `None` after `Done` (or if the worker died).
    pub async fn next(&mut self) -> Option<Result<GenerationEvent>> {
        self.receiver.recv_async().await.ok()
    }

    /// Blocking variant for the CLI and benchmarks.
    pub fn next_blocking(&mut self) -> Option<Result<GenerationEvent>> {
        self.receiver.recv().ok()
    }

    /// Blocking variant that gives up after `timeout`: `Err(())` when nothing arrived in
    /// time (the generation goes on), `Ok(None)` after `Done`.
    pub fn next_timeout(
        &mut self,
        timeout: std::time::Duration,
    ) -> std::result::Result<Option<Result<GenerationEvent>>, ()> {
        match self.receiver.recv_timeout(timeout) {
            Ok(event) => Ok(Some(event)),
            Err(flume::RecvTimeoutError::Timeout) => Err(()),
            Err(flume::RecvTimeoutError::Disconnected) => Ok(None),
        }
    }

    /// Asks the worker to stop this generation soon.
    pub fn cancel(&self) {
        self.cancel.0.store(true, Ordering::Relaxed);
    }
}

struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Handle to an embedding model's worker thread.
#[derive(Clone)]
pub struct EmbedModelHandle {
    info: Arc<ModelInfo>,
    queue: flume::Sender<EmbedJob>,
}

impl EmbedModelHandle {
    pub(crate) fn new(info: ModelInfo, queue: flume::Sender<EmbedJob>) -> Self {
        Self {
            info: Arc::new(info),
            queue,
        }
    }

    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// Requests waiting in the queue.
    pub fn queued(&self) -> u64 {
        self.queue.len() as u64
    }

    /// Embeds `inputs` (one vector each, in order). `QueueFull` when the queue is full.
    pub async fn embed(&self, inputs: Vec<String>) -> Result<Embeddings> {
        let (receiver, _cancel) = self.enqueue(inputs)?;
        receiver
            .recv_async()
            .await
            .map_err(|_| EngineError::WorkerGone(self.info.id.clone()))?
    }

    /// Blocking variant for the CLI, benchmarks and ingestion threads.
    pub fn embed_blocking(&self, inputs: Vec<String>) -> Result<Embeddings> {
        let (receiver, _cancel) = self.enqueue(inputs)?;
        receiver
            .recv()
            .map_err(|_| EngineError::WorkerGone(self.info.id.clone()))?
    }

    fn enqueue(
        &self,
        inputs: Vec<String>,
    ) -> Result<(flume::Receiver<Result<Embeddings>>, CancelOnDrop)> {
        let (reply, receiver) = flume::bounded(1);
        let cancel = Arc::new(AtomicBool::new(false));
        let job = EmbedJob {
            inputs,
            reply,
            cancel: cancel.clone(),
        };
        self.queue.try_send(job).map_err(|err| match err {
            flume::TrySendError::Full(_) => EngineError::QueueFull(self.info.id.clone()),
            flume::TrySendError::Disconnected(_) => EngineError::WorkerGone(self.info.id.clone()),
        })?;
        Ok((receiver, CancelOnDrop(cancel)))
    }
}
