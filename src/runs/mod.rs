//! Run lifecycle: the worker threads that claim queued runs under a lease and hand each
//! turn to a `TurnHandler` (the agent) through a narrow sink, crash recovery (reclaiming
//! expired leases and resuming from the event log and checkpoint), cancellation, and the
//! closed set of public events with the one place that appends them and wakes their
//! followers. Reaches data only through `store` traits; never touches axum or models.

mod bus;
mod compactions;
mod event_log;
pub mod events;
mod executor;
pub mod ledger_call;
mod reasoning_filter;
#[cfg(test)]
mod tests;
pub mod turn;
mod worker;

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use bus::{EventBus, Subscription};
pub use compactions::{Compact, CompactionWorker};
pub use event_log::EventLog;
pub use events::{
    CitationPublic, ConfirmationPublic, ContextTokens, RoutePublic, RunEvent, RunUsage,
};
pub use reasoning_filter::ReasoningFilter;
pub use turn::{
    DiagnosticHandler, DiagnosticInput, DiagnosticOutcome, OutcomeKind, TurnAnswer, TurnHandler,
    TurnInput, TurnOutcome, TurnSink, TurnStop,
};
pub use worker::RunWorkers;

use crate::store::{Run, RunStatus, Runs, Store, StoreError};

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
    /// Streamed text is stored as one `message.delta` event at most this often.
    pub delta_interval: Duration,
    /// How often expired leases are looked for while serving.
    pub reclaim_interval: Duration,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            workers: 2,
            lease_secs: 30,
            max_attempts: 3,
            delta_interval: Duration::from_millis(50),
            reclaim_interval: Duration::from_secs(5),
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
    log: EventLog,
    bus: EventBus,
    workers: Option<RunWorkers>,
}

impl RunService {
    pub fn new(store: Arc<Store>, bus: EventBus, workers: Option<RunWorkers>) -> Self {
        Self {
            log: EventLog::new(store, bus.clone()),
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
        let store = self.log.store();
        let run = store.run(owner, run_id)?;
        if run.status.is_terminal() {
            return Ok(run);
        }
        let appended = self
            .log
            .finish(run_id, RunStatus::Cancelled, None, &RunEvent::Cancelled)?;
        if appended {
            // Only a claimed run has a worker to stop (and to forget the mark afterwards);
            // a queued one is never claimed once cancelled.
            if let (Some(workers), RunStatus::Running) = (&self.workers, run.status) {
                workers.cancellations().insert(run_id);
            }
        }
        store.run(owner, run_id)
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
