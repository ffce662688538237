//! One protocol for every call a run makes through the tool ledger — the chat agent's
//! tools, the diagnostic graph's tools and its model calls — so they resume alike: claim
//! under the run's lease; on a fresh claim announce `tool.started`, run, settle, announce
//! `tool.completed`; on a resumed run take the settled result (or failure) instead of
//! calling again, and announce its completion only when the kill fell before that event.
//! A side-effecting call whose earlier attempt never settled comes back `Uncertain` and is
//! never run again. A lost lease abandons the run; any other ledger failure fails it.

use super::{now_secs, RunEvent, TurnSink, TurnStop};
use crate::store::{ClaimOutcome, SideEffect, Store, StoreError, ToolClaim, ToolLedger};

/// One call to make through the ledger.
pub struct LedgerCall<'a> {
    pub store: &'a Store,
    pub run_id: &'a str,
    /// The call's ledger key (the same on every attempt of the same logical call).
    pub key: &'a str,
    pub step: i64,
    pub tool: &'a str,
    pub side_effect: SideEffect,
    /// The public event id of a call the user sees; `None` for calls announced by no
    /// event (a diagnostic model call).
    pub call_id: Option<&'a str>,
}

/// What a call came to: its settled result text, or its failure text, or unknown.
#[derive(Debug, Clone, PartialEq)]
pub enum LedgerOutcome {
    Settled(Result<String, String>),
    /// A side-effecting call's earlier outcome is unknown: a person must look.
    Uncertain,
}

/// How a call is shown in its `tool.completed` event: status and a short public summary.
pub type Describe<'a> = &'a dyn Fn(&LedgerOutcome) -> (String, String);

/// Makes `call` once per logical call. `run` does the work and returns the text to settle
/// (`Ok` result JSON or `Err` failure); it may stop the run instead, leaving the claim
/// unsettled (a read is retried on resume).
pub fn call_through_ledger(
    sink: &mut dyn TurnSink,
    call: &LedgerCall<'_>,
    run: impl FnOnce(&mut dyn TurnSink) -> Result<Result<String, String>, TurnStop>,
    describe: Describe<'_>,
) -> Result<LedgerOutcome, TurnStop> {
    let claim = ToolClaim {
        key: call.key,
        run_id: call.run_id,
        step: call.step,
        tool: call.tool,
        side_effect: call.side_effect,
        worker: sink.worker_id(),
    };
    let claimed = call
        .store
        .claim_tool_call(&claim, now_secs())
        .map_err(ledger_stop)?;
    let earlier = match claimed {
        ClaimOutcome::Run => None,
        ClaimOutcome::Reuse(text) => Some(LedgerOutcome::Settled(Ok(text))),
        ClaimOutcome::FailedBefore(error) => Some(LedgerOutcome::Settled(Err(error))),
        ClaimOutcome::Uncertain => Some(LedgerOutcome::Uncertain),
    };
    if let Some(outcome) = earlier {
        if let Some(call_id) = call.call_id {
            let announced = call
                .store
                .completion_announced(call.run_id, call_id)
                .map_err(ledger_stop)?;
            if !announced {
                announce_completion(sink, call, call_id, &outcome, describe)?;
            }
        }
        return Ok(outcome);
    }
    if let Some(call_id) = call.call_id {
        sink.emit(RunEvent::ToolStarted {
            call_id: call_id.to_owned(),
            name: call.tool.to_owned(),
        })?;
    }
    let result = run(&mut *sink)?;
    let settled = match &result {
        Ok(text) => Ok(text.as_str()),
        Err(error) => Err(error.as_str()),
    };
    call.store
        .settle_tool_call(call.key, sink.worker_id(), settled, now_secs())
        .map_err(ledger_stop)?;
    let outcome = LedgerOutcome::Settled(result);
    if let Some(call_id) = call.call_id {
        announce_completion(sink, call, call_id, &outcome, describe)?;
    }
    Ok(outcome)
}

fn announce_completion(
    sink: &mut dyn TurnSink,
    call: &LedgerCall<'_>,
    call_id: &str,
    outcome: &LedgerOutcome,
    describe: Describe<'_>,
) -> Result<(), TurnStop> {
    let (status, summary) = describe(outcome);
    sink.emit(RunEvent::ToolCompleted {
        call_id: call_id.to_owned(),
        name: call.tool.to_owned(),
        status,
        summary,
    })
}

/// A lost lease abandons the run; any other ledger failure fails it.
pub fn ledger_stop(err: StoreError) -> TurnStop {
    match err {
        StoreError::Conflict(_) => TurnStop::Abandoned,
        other => {
            tracing::error!("the tool ledger failed: {other}");
            TurnStop::Failed(format!("the tool ledger failed: {other}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::time::Duration;

    use serde_json::Value;

    use super::*;
    use crate::store::{Accounts, Conversations, NewEvent, Role, Runs};

    /// A sink that appends to the run's real event log, as the run worker's does, as
    /// worker `worker`.
    struct LogSink<'a> {
        store: &'a Store,
        run_id: String,
        worker: &'static str,
    }

    impl TurnSink for LogSink<'_> {
        fn emit(&mut self, event: RunEvent) -> Result<(), TurnStop> {
            let data = event.data(0);
            let new = NewEvent {
                event_type: event.event_type(),
                data: &data,
            };
            self.store
                .append_event_as(&self.run_id, self.worker, &new, now_secs())
                .map(|_| ())
                .map_err(ledger_stop)
        }
        fn keep_alive(&mut self) -> Result<(), TurnStop> {
            Ok(())
        }
        fn checkpoint(&mut self, _state: &Value) -> Result<(), TurnStop> {
            Ok(())
        }
        fn worker_id(&self) -> &str {
            self.worker
        }
        fn delta_interval(&self) -> Duration {
            Duration::from_millis(1)
        }
    }

    fn claimed_run(dir: &std::path::Path) -> (Store, String) {
        let store = Store::open(&dir.join("w.db")).unwrap();
        let user = store
            .create_user("alice", Role::Operator, "password1", 0)
            .unwrap();
        let conversation = store.create_conversation(user.id, "c", 0).unwrap();
        let run = store
            .add_user_message_with_run(user.id, &conversation.id, "q", 1)
            .unwrap()
            .run_id;
        store.claim_next("w1", 2, 30).unwrap().unwrap();
        (store, run)
    }

    fn completions(store: &Store, run: &str) -> usize {
        store
            .events_after(1, run, 0, 100)
            .unwrap()
            .iter()
            .filter(|e| e.event_type == "tool.completed")
            .count()
    }

    fn describe(outcome: &LedgerOutcome) -> (String, String) {
        match outcome {
            LedgerOutcome::Settled(Ok(_)) => ("ok".into(), "done".into()),
            LedgerOutcome::Settled(Err(e)) => ("error".into(), e.clone()),
            LedgerOutcome::Uncertain => ("uncertain".into(), String::new()),
        }
    }

    fn call<'a>(store: &'a Store, run: &'a str, side_effect: SideEffect) -> LedgerCall<'a> {
        LedgerCall {
            store,
            run_id: run,
            key: "key-1",
            step: 1,
            tool: "search",
            side_effect,
            call_id: Some("call_1_0"),
        }
    }

    #[test]
    fn a_resumed_call_reuses_its_result_and_is_announced_once() {
        let dir = tempfile::tempdir().unwrap();
        let (store, run) = claimed_run(dir.path());
        let mut sink = LogSink {
            store: &store,
            run_id: run.clone(),
            worker: "w1",
        };
        let runs = Cell::new(0);
        let work = |_: &mut dyn TurnSink| {
            runs.set(runs.get() + 1);
            Ok(Ok(r#"{"n":1}"#.to_owned()))
        };
        let first = call_through_ledger(
            &mut sink,
            &call(&store, &run, SideEffect::Read),
            work,
            &describe,
        );
        assert_eq!(
            first.unwrap(),
            LedgerOutcome::Settled(Ok(r#"{"n":1}"#.into()))
        );
        // The resumed run makes the same logical call: the stored result, no second run,
        // no second announcement.
        let again = call_through_ledger(
            &mut sink,
            &call(&store, &run, SideEffect::Read),
            |_| {
                runs.set(runs.get() + 1);
                Ok(Ok("{}".to_owned()))
            },
            &describe,
        );
        assert_eq!(
            again.unwrap(),
            LedgerOutcome::Settled(Ok(r#"{"n":1}"#.into()))
        );
        assert_eq!(runs.get(), 1);
        assert_eq!(completions(&store, &run), 1);
    }

    #[test]
    fn a_kill_before_the_completion_event_is_announced_on_resume_and_failures_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (store, run) = claimed_run(dir.path());
        // Settled, but the worker died before `tool.completed`.
        let claim = ToolClaim {
            key: "key-1",
            run_id: &run,
            step: 1,
            tool: "search",
            side_effect: SideEffect::Write,
            worker: "w1",
        };
        store.claim_tool_call(&claim, 3).unwrap();
        store
            .settle_tool_call("key-1", "w1", Err("not_found: gone"), 3)
            .unwrap();
        let mut sink = LogSink {
            store: &store,
            run_id: run.clone(),
            worker: "w1",
        };
        let outcome = call_through_ledger(
            &mut sink,
            &call(&store, &run, SideEffect::Write),
            |_| panic!("a settled call never runs again"),
            &describe,
        );
        assert_eq!(
            outcome.unwrap(),
            LedgerOutcome::Settled(Err("not_found: gone".into()))
        );
        assert_eq!(completions(&store, &run), 1);
    }

    #[test]
    fn an_unsettled_side_effect_is_uncertain_and_a_stopped_read_is_retried() {
        let dir = tempfile::tempdir().unwrap();
        let (store, run) = claimed_run(dir.path());
        let mut sink = LogSink {
            store: &store,
            run_id: run.clone(),
            worker: "w1",
        };
        let stopped = call_through_ledger(
            &mut sink,
            &call(&store, &run, SideEffect::Read),
            |_| Err(TurnStop::Abandoned),
            &describe,
        );
        assert!(matches!(stopped, Err(TurnStop::Abandoned)));
        let retried = call_through_ledger(
            &mut sink,
            &call(&store, &run, SideEffect::Read),
            |_| Ok(Ok("{}".to_owned())),
            &describe,
        );
        assert_eq!(retried.unwrap(), LedgerOutcome::Settled(Ok("{}".into())));
        let write = LedgerCall {
            key: "key-2",
            ..call(&store, &run, SideEffect::Write)
        };
        let _ = call_through_ledger(&mut sink, &write, |_| Err(TurnStop::Abandoned), &describe);
        let unknown = call_through_ledger(
            &mut sink,
            &write,
            |_| panic!("an unsettled side effect never runs again"),
            &describe,
        );
        assert_eq!(unknown.unwrap(), LedgerOutcome::Uncertain);
    }

    #[test]
    fn a_worker_that_lost_the_lease_abandons_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let (store, run) = claimed_run(dir.path());
        // Another worker took the run over.
        let mut stale = LogSink {
            store: &store,
            run_id: run.clone(),
            worker: "w2",
        };
        let outcome = call_through_ledger(
            &mut stale,
            &call(&store, &run, SideEffect::Read),
            |_| panic!("no claim, no call"),
            &describe,
        );
        assert!(matches!(outcome, Err(TurnStop::Abandoned)));
    }
}
