//! The worker pool with scripted handlers: a run carries the trace id of the request that
//! created it into its handler, and a failure reason reaches its owner without the file
//! paths the handler's error named.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{
    DiagnosticHandler, DiagnosticInput, DiagnosticOutcome, EventBus, RunConfig, RunWorkers,
    TurnHandler, TurnInput, TurnOutcome, TurnSink, TurnStop,
};
use crate::metrics::{Metrics, Snapshot};
use crate::store::{Accounts, Conversations, Role, Run, Runs, Store};
use crate::trace::{current_trace_id, with_trace_id, TraceId};

/// Fails every turn with an error that names an internal path, noting the trace id it ran
/// under.
struct FailingHandler {
    seen_trace: Mutex<Option<String>>,
}

impl TurnHandler for FailingHandler {
    fn handle(&self, _: &TurnInput, _: &mut dyn TurnSink) -> Result<TurnOutcome, TurnStop> {
        *self.seen_trace.lock().unwrap() = current_trace_id();
        Err(TurnStop::Failed(
            "cannot open /var/lib/warden/models/secret.gguf: permission denied".into(),
        ))
    }
}

struct NoDiagnostics;

impl DiagnosticHandler for NoDiagnostics {
    fn handle(
        &self,
        _: &DiagnosticInput,
        _: &mut dyn TurnSink,
    ) -> Result<DiagnosticOutcome, TurnStop> {
        Err(TurnStop::Failed("no diagnostics here".into()))
    }
}

fn wait_until_ended(store: &Store, owner: i64, id: &str) -> Run {
    let started = Instant::now();
    loop {
        let run = store.run(owner, id).unwrap();
        if run.status.is_terminal() {
            return run;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the run never ended"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_failed_run_keeps_its_trace_and_tells_its_owner_no_paths() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(&dir.path().join("w.db")).unwrap());
    let alice = store
        .create_user("alice", Role::Viewer, "password1", 1)
        .unwrap();
    let conversation = store.create_conversation(alice.id, "c", 1).unwrap();
    let trace = TraceId::generate();
    let turn = with_trace_id(Some(trace.clone()), || {
        store
            .add_user_message_with_run(alice.id, &conversation.id, "hi", 2)
            .unwrap()
    });
    let handler = Arc::new(FailingHandler {
        seen_trace: Mutex::new(None),
    });
    let metrics = Arc::new(Metrics::new());
    let (workers, _) = RunWorkers::start(
        store.clone(),
        handler.clone(),
        Arc::new(NoDiagnostics),
        EventBus::default(),
        RunConfig {
            workers: 1,
            ..RunConfig::default()
        },
        metrics.clone(),
    )
    .unwrap();
    workers.wake();
    let run = wait_until_ended(&store, alice.id, &turn.run_id);
    workers.stop();

    assert_eq!(run.trace_id.as_deref(), Some(trace.as_str()));
    assert_eq!(
        handler.seen_trace.lock().unwrap().as_deref(),
        Some(trace.as_str())
    );
    let reason = "cannot open [path]: permission denied";
    assert_eq!(run.failure_reason.as_deref(), Some(reason));
    let events = store.events_after(alice.id, &turn.run_id, 0, 100).unwrap();
    let failed = events
        .iter()
        .find(|e| e.event_type == "run.failed")
        .expect("a run.failed event");
    assert!(failed.data.contains(reason), "{}", failed.data);
    assert!(events.iter().all(|e| !e.data.contains("/var/lib")));
    let text = metrics.render(&Snapshot::default());
    assert!(
        text.contains("warden_run_duration_seconds_count{kind=\"chat_turn\",status=\"failed\"} 1"),
        "{text}"
    );
}
