//! The background compaction worker: one thread that claims due compaction jobs from the
//! store under a lease, hands each to a `Compact` (the agent's compactor), renews the lease
//! while the model works, and ends the attempt — done, or queued again with a growing
//! delay until the attempts run out. At start every job still marked running is released
//! (its holder died with the last process), so a job interrupted by a crash or a kill -9
//! finishes after the restart. Scheduling is the store's (`schedule_compaction`); the
//! agent wakes the worker after it. Background work yields: a claimed job waits while
//! chat runs or model requests are waiting (up to `MAX_YIELD`) before it takes the model.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{now_secs, RunEvent, TurnSink, TurnStop};
use crate::store::{CompactionJob, CompactionJobs, Store};

/// How long an idle worker waits before looking at the queue again without a wake-up.
const IDLE_POLL: Duration = Duration::from_secs(2);
/// A claimed job's lease, renewed every third of it while the model works.
const LEASE_SECS: i64 = 60;
/// Longest a claimed job waits for interactive work to finish before it runs anyway.
const MAX_YIELD: Duration = Duration::from_secs(120);
/// How often a waiting job looks again.
const YIELD_POLL: Duration = Duration::from_millis(500);
/// Seconds before a failed attempt's retry, times the attempts made.
const RETRY_AFTER_SECS: i64 = 5;

/// What compacts one conversation (the agent's compactor).
pub trait Compact: Send + Sync {
    /// Whether interactive work (chat runs, queued model requests) is waiting: a job
    /// waits for it, up to `MAX_YIELD`, before it takes the model.
    fn busy(&self) -> bool;
    /// Compacts the owner's conversation as far as it is due; `sink` keeps the job's lease
    /// alive. An error is public text (no paths, no model output).
    fn compact_conversation(
        &self,
        owner: i64,
        conversation_id: &str,
        sink: &mut dyn TurnSink,
    ) -> Result<(), String>;
}

/// Handle to the compaction worker. Cheap to clone.
#[derive(Clone)]
pub struct CompactionWorker {
    wake: flume::Sender<()>,
    stop: Arc<AtomicBool>,
}

impl CompactionWorker {
    /// Releases the jobs a dead process held and starts the worker thread.
    pub fn start(store: Arc<Store>, compact: Arc<dyn Compact>) -> Self {
        match store.release_compactions() {
            Ok(0) => {}
            Ok(released) => tracing::warn!(
                jobs = released,
                "resuming compactions interrupted by a restart"
            ),
            Err(err) => tracing::error!("cannot release interrupted compactions: {err}"),
        }
        let (wake, woken) = flume::bounded(1);
        let stop = Arc::new(AtomicBool::new(false));
        let holder = format!("pid{}-compactor", std::process::id());
        let thread_stop = stop.clone();
        let spawned = std::thread::Builder::new()
            .name("compactor".into())
            .spawn(move || work(&store, compact.as_ref(), &holder, &woken, &thread_stop));
        if let Err(err) = spawned {
            tracing::error!("cannot start the compaction worker: {err}");
        }
        let worker = Self { wake, stop };
        worker.wake();
        worker
    }

    /// Wakes the worker to look at the queue now.
    pub fn wake(&self) {
        let _ = self.wake.try_send(());
    }

    /// Stops the worker after its current job.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.wake();
    }
}

fn work(
    store: &Store,
    compact: &dyn Compact,
    holder: &str,
    woken: &flume::Receiver<()>,
    stop: &AtomicBool,
) {
    while !stop.load(Ordering::Relaxed) {
        match store.claim_compaction(holder, now_secs(), LEASE_SECS) {
            Ok(Some(job)) => run_job(store, compact, holder, &job, stop),
            Ok(None) => {
                let _ = woken.recv_timeout(IDLE_POLL);
            }
            Err(err) => {
                tracing::error!("cannot claim a compaction: {err}");
                std::thread::sleep(IDLE_POLL);
            }
        }
    }
}

fn run_job(
    store: &Store,
    compact: &dyn Compact,
    holder: &str,
    job: &CompactionJob,
    stop: &AtomicBool,
) {
    let started = Instant::now();
    let mut sink = JobSink {
        store,
        job_id: &job.id,
        holder,
        stop,
        renewed: Instant::now(),
    };
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        while compact.busy() && started.elapsed() < MAX_YIELD {
            std::thread::sleep(YIELD_POLL);
            sink.keep_alive().map_err(|_| "stopped".to_string())?;
        }
        compact.compact_conversation(job.owner_id, &job.conversation_id, &mut sink)
    }))
    .unwrap_or_else(|_| Err("internal error while compacting".into()));
    if let Err(err) = &outcome {
        tracing::warn!(job = %job.id, attempt = job.attempts, "compaction failed: {err}");
    } else {
        tracing::info!(job = %job.id, attempt = job.attempts, ms = started.elapsed().as_millis() as u64, "compaction done");
    }
    let error = outcome.err();
    let retry_after = RETRY_AFTER_SECS * job.attempts;
    match store.end_compaction(&job.id, holder, error.as_deref(), retry_after, now_secs()) {
        Ok(true) => {}
        Ok(false) => tracing::warn!(job = %job.id, "compaction lease lost before it ended"),
        Err(err) => tracing::error!(job = %job.id, "cannot end a compaction: {err}"),
    }
}

/// The lease of a job as a turn sink: model calls renew it; nothing is emitted.
struct JobSink<'a> {
    store: &'a Store,
    job_id: &'a str,
    holder: &'a str,
    stop: &'a AtomicBool,
    renewed: Instant,
}

impl TurnSink for JobSink<'_> {
    fn emit(&mut self, _event: RunEvent) -> Result<(), TurnStop> {
        Ok(())
    }

    fn keep_alive(&mut self) -> Result<(), TurnStop> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(TurnStop::Abandoned);
        }
        if self.renewed.elapsed() < Duration::from_secs(LEASE_SECS as u64 / 3) {
            return Ok(());
        }
        match self
            .store
            .renew_compaction(self.job_id, self.holder, now_secs(), LEASE_SECS)
        {
            Ok(true) => {
                self.renewed = Instant::now();
                Ok(())
            }
            Ok(false) => Err(TurnStop::Abandoned),
            // A transient store error: try again at the next poll; the lease has time.
            Err(err) => {
                tracing::warn!(job = self.job_id, "cannot renew a compaction lease: {err}");
                Ok(())
            }
        }
    }

    fn checkpoint(&mut self, _state: &Value) -> Result<(), TurnStop> {
        Ok(())
    }

    fn worker_id(&self) -> &str {
        self.holder
    }

    fn delta_interval(&self) -> Duration {
        Duration::from_millis(200)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::store::{Accounts, CompactionStatus, Conversations, Role};

    /// Fails the first `failures` times, then succeeds; records what it was asked.
    struct Flaky {
        failures: Mutex<usize>,
        calls: Mutex<Vec<String>>,
    }

    impl Compact for Flaky {
        fn busy(&self) -> bool {
            false
        }

        fn compact_conversation(
            &self,
            _owner: i64,
            conversation_id: &str,
            sink: &mut dyn TurnSink,
        ) -> Result<(), String> {
            sink.keep_alive().map_err(|_| "stopped".to_string())?;
            self.calls.lock().unwrap().push(conversation_id.to_owned());
            let mut failures = self.failures.lock().unwrap();
            if *failures > 0 {
                *failures -= 1;
                return Err("model busy".into());
            }
            Ok(())
        }
    }

    #[test]
    fn a_scheduled_job_runs_and_a_failed_attempt_is_retried() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&dir.path().join("w.db")).unwrap());
        let owner = store
            .create_user("ann", Role::Viewer, "password1", 0)
            .unwrap()
            .id;
        let conversation = store.create_conversation(owner, "c", 0).unwrap().id;
        store
            .schedule_compaction(owner, &conversation, now_secs())
            .unwrap();
        let flaky = Arc::new(Flaky {
            failures: Mutex::new(1),
            calls: Mutex::default(),
        });
        let worker = CompactionWorker::start(store.clone(), flaky.clone());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let job = store.compaction_job(&conversation).unwrap().unwrap();
            if job.status == CompactionStatus::Done {
                assert_eq!(job.attempts, 2);
                break;
            }
            assert!(Instant::now() < deadline, "job did not finish: {job:?}");
            std::thread::sleep(Duration::from_millis(100));
            worker.wake();
        }
        worker.stop();
        assert_eq!(flaky.calls.lock().unwrap().len(), 2);
    }
}
