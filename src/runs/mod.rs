//! Run lifecycle: the worker threads that claim queued runs under a lease and answer them
//! with the chat model, crash recovery (reclaiming expired leases and resuming from the
//! event log), cancellation, and the closed set of public events with the bus that wakes
//! their followers. Reaches models only through `engine` handles and data only through
//! `store` traits; never touches axum.

mod bus;
mod chat_turn;
pub mod events;
mod reasoning_filter;
mod worker;

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use bus::{EventBus, Subscription};
pub use events::{RunEvent, RunUsage};
pub use worker::RunWorkers;

use crate::store::{NewEvent, Run, RunStatus, Runs, Store, StoreError};

/// How runs are executed.
#[derive(Debug, Clone, PartialEq)]
pub struct RunConfig {
    /// Worker threads claiming runs (each waits on the chat model's queue while generating).
    pub workers: usize,
    /// A claimed run is renewed well before this many seconds pass; a crashed worker's
    /// runs are reclaimed once it has passed.
    pub lease_secs: i64,
    /// A run interrupted this many times is failed instead of resumed again.
    pub max_attempts: i64,
    /// Most tokens one answer may have.
    pub max_answer_tokens: usize,
    /// Streamed text is stored as one `message.delta` event at most this often.
    pub delta_interval: Duration,
    /// How often expired leases are looked for while serving.
    pub reclaim_interval: Duration,
    /// The system prompt every conversation starts with.
    pub system_prompt: String,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            workers: 2,
            lease_secs: 30,
            max_attempts: 3,
            max_answer_tokens: 512,
            delta_interval: Duration::from_millis(50),
            reclaim_interval: Duration::from_secs(5),
            system_prompt: "You are Warden, a concise and careful assistant for operations \
                            engineers. Answer in the user's language."
                .to_owned(),
        }
    }
}

/// Runs cancelled while a worker may be answering them: the worker stops at its next
/// check (every `delta_interval`) instead of at its next write. Cheap to clone.
#[derive(Clone, Default)]
pub struct Cancellations(Arc<Mutex<HashSet<String>>>);

impl Cancellations {
    fn insert(&self, run_id: &str) {
        self.lock().insert(run_id.to_owned());
    }

    fn contains(&self, run_id: &str) -> bool {
        self.lock().contains(run_id)
    }

    fn forget(&self, run_id: &str) {
        self.lock().remove(run_id);
    }

    fn lock(&self) -> MutexGuard<'_, HashSet<String>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// What the HTTP layer needs of runs: waking the workers, cancelling, following events.
#[derive(Clone)]
pub struct RunService {
    store: Arc<Store>,
    bus: EventBus,
    workers: Option<RunWorkers>,
}

impl RunService {
    pub fn new(store: Arc<Store>, bus: EventBus, workers: Option<RunWorkers>) -> Self {
        Self {
            store,
            bus,
            workers,
        }
    }

    pub fn bus(&self) -> &EventBus {
        &self.bus
    }

    /// Whether queued runs will be answered (a chat model is loaded).
    pub fn can_answer(&self) -> bool {
        self.workers.is_some()
    }

    /// Tells idle workers that a run was queued. Without workers (no chat model) the run
    /// waits until a server with one starts.
    pub fn wake_workers(&self) {
        if let Some(workers) = &self.workers {
            workers.wake();
        }
    }

    /// Cancels the owner's run: a queued or running run ends `cancelled` with its terminal
    /// event (a worker still generating notices and stops). An ended run is left as it is.
    /// Blocking (SQLite): call it off the async runtime.
    pub fn cancel(&self, owner: i64, run_id: &str) -> Result<Run, StoreError> {
        let run = self.store.run(owner, run_id)?;
        if run.status.is_terminal() {
            return Ok(run);
        }
        let event = RunEvent::Cancelled;
        let data = event.data(now_ms());
        let appended = self.store.finish_with_event(
            run_id,
            RunStatus::Cancelled,
            None,
            &NewEvent {
                event_type: event.event_type(),
                data: &data,
            },
            now_secs(),
        )?;
        if let Some(seq) = appended {
            self.bus.publish(run_id, seq, true);
            // Only a claimed run has a worker to stop (and to forget the mark afterwards);
            // a queued one is never claimed once cancelled.
            if let (Some(workers), RunStatus::Running) = (&self.workers, run.status) {
                workers.cancellations().insert(run_id);
            }
        }
        self.store.run(owner, run_id)
    }
}

/// Seconds since the Unix epoch.
pub fn now_secs() -> i64 {
    now_ms() / 1000
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
