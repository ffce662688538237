//! The run worker pool: threads that claim queued runs from the store under a lease and
//! execute them, plus a reclaimer that puts runs whose lease expired back in the queue.
//! At start every `running` run is reclaimed at once: the data folder is locked by one
//! server, so a run still marked running belongs to a process that died.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::executor::{self, RunContext};
use super::{
    now_secs, Cancellations, DiagnosticHandler, EventBus, EventLog, RunConfig, TurnHandler,
};
use crate::metrics::Metrics;
use crate::store::{Runs, Store, StoreError};

/// How long an idle worker sleeps before looking at the queue again without a wake-up.
const IDLE_POLL: Duration = Duration::from_secs(1);

/// Handle to the worker threads. Cheap to clone; `stop` ends them after their current run.
#[derive(Clone)]
pub struct RunWorkers {
    wake: flume::Sender<()>,
    stop: Arc<AtomicBool>,
    cancellations: Cancellations,
}

impl RunWorkers {
    /// Recovers interrupted runs, then starts `config.workers` worker threads (each turn
    /// is answered by `handler`) and the reclaimer. Returns the ids of the runs recovered.
    pub fn start(
        store: Arc<Store>,
        handler: Arc<dyn TurnHandler>,
        diagnostic: Arc<dyn DiagnosticHandler>,
        bus: EventBus,
        config: RunConfig,
        metrics: Arc<Metrics>,
    ) -> Result<(Self, Vec<String>), StoreError> {
        let recovered = store.reclaim_expired(i64::MAX)?;
        let workers = config.workers.max(1);
        let (wake, woken) = flume::bounded(workers);
        let stop = Arc::new(AtomicBool::new(false));
        let cancellations = Cancellations::default();
        let context = Arc::new(RunContext {
            log: EventLog::new(store, bus),
            handler,
            diagnostic,
            config,
            cancellations: cancellations.clone(),
            metrics,
        });
        for index in 0..workers {
            let worker_id = format!("pid{}-w{index}", std::process::id());
            spawn_named(format!("run-worker-{index}"), {
                let context = context.clone();
                let woken = woken.clone();
                let stop = stop.clone();
                move || work(&context, &worker_id, &woken, &stop)
            });
        }
        let handle = Self {
            wake,
            stop,
            cancellations,
        };
        spawn_named("run-reclaimer".into(), {
            let handle = handle.clone();
            let context = context.clone();
            move || reclaim(&context, &handle)
        });
        if !recovered.is_empty() {
            handle.wake();
        }
        Ok((handle, recovered))
    }

    /// Wakes one idle worker (if none is idle, the next one to finish finds the run).
    pub fn wake(&self) {
        let _ = self.wake.try_send(());
    }

    /// The runs cancelled while being answered.
    pub(super) fn cancellations(&self) -> &Cancellations {
        &self.cancellations
    }

    /// Stops the workers after their current run.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn spawn_named(name: String, body: impl FnOnce() + Send + 'static) {
    if let Err(err) = std::thread::Builder::new().name(name.clone()).spawn(body) {
        tracing::error!("cannot start thread {name}: {err}");
    }
}

/// One worker: claim, execute, repeat; sleep when the queue is empty.
fn work(context: &RunContext, worker_id: &str, woken: &flume::Receiver<()>, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        match context
            .log
            .store()
            .claim_next(worker_id, now_secs(), context.config.lease_secs)
        {
            Ok(Some(run)) => {
                let run_id = run.id.clone();
                let outcome = catch_unwind(AssertUnwindSafe(|| {
                    executor::execute(context, worker_id, run)
                }));
                if outcome.is_err() {
                    tracing::error!(run = %run_id, "run worker panicked; failing the run");
                    executor::fail(context, &run_id, "internal error while answering");
                }
            }
            Ok(None) => {
                let _ = woken.recv_timeout(IDLE_POLL);
            }
            Err(err) => {
                tracing::error!("cannot claim a run: {err}");
                std::thread::sleep(IDLE_POLL);
            }
        }
    }
}

/// Puts runs whose lease expired (a stuck or dead worker) back in the queue.
fn reclaim(context: &RunContext, workers: &RunWorkers) {
    while !workers.stop.load(Ordering::Relaxed) {
        std::thread::sleep(context.config.reclaim_interval);
        match context.log.store().reclaim_expired(now_secs()) {
            Ok(ids) if !ids.is_empty() => {
                tracing::warn!(runs = ?ids, "reclaimed runs whose lease expired");
                workers.wake();
            }
            Ok(_) => {}
            Err(err) => tracing::error!("cannot reclaim expired runs: {err}"),
        }
    }
}
