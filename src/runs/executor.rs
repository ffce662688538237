//! Executes one claimed run: loads the turn's input, hands it to the `TurnHandler` with a
//! sink that stores events before signalling them and keeps the lease alive, then ends the
//! run from the handler's closed outcome — `completed` with the assistant message, its
//! citations and `run.completed` in one transaction, or `failed` with a public reason, or
//! nothing when the run was cancelled or taken over. A resumed run's handler sees the text
//! earlier attempts streamed, so followers never see a restart and the turn still gets
//! exactly one assistant message.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::event_log::EventLog;
use super::events::{self, RunEvent};
use super::turn::{
    DiagnosticHandler, DiagnosticInput, DiagnosticOutcome, OutcomeKind, TurnAnswer, TurnHandler,
    TurnInput, TurnOutcome, TurnSink, TurnStop,
};
use super::{now_secs, Cancellations, RunConfig};
use crate::metrics::Metrics;
use crate::store::{
    new_message_id, Accounts, Audit, AuditEntry, AuditOutcome, Conversations, MessageRole, Run,
    RunKind, RunStatus, Runs, Store, StoreError, MAX_EVENTS_PER_READ, SYSTEM_ACTOR,
};
use crate::trace::{with_trace_id, TraceId};

/// What every run needs.
pub(super) struct RunContext {
    pub log: EventLog,
    pub handler: Arc<dyn TurnHandler>,
    pub diagnostic: Arc<dyn DiagnosticHandler>,
    pub config: RunConfig,
    pub cancellations: Cancellations,
    pub metrics: Arc<Metrics>,
}

impl RunContext {
    fn store(&self) -> &Arc<Store> {
        self.log.store()
    }
}

fn stop_from(err: StoreError) -> TurnStop {
    match err {
        StoreError::Conflict(_) => TurnStop::Abandoned,
        other => {
            tracing::error!("run store error: {other}");
            TurnStop::Failed("the answer could not be saved".to_owned())
        }
    }
}

/// Runs a claimed run to its end, in a span and with the trace id of the request that
/// created it (so its log lines and audit rows carry it).
pub(super) fn execute(context: &RunContext, worker_id: &str, run: Run) {
    let trace = run.trace_id.as_deref().and_then(TraceId::parse);
    let span = tracing::info_span!(
        "run",
        run_id = %run.id,
        trace_id = trace.as_ref().map(TraceId::as_str).unwrap_or("")
    );
    let _entered = span.enter();
    with_trace_id(trace, || execute_traced(context, worker_id, run));
}

fn execute_traced(context: &RunContext, worker_id: &str, run: Run) {
    let started = Instant::now();
    if run.attempts > 1 {
        context.metrics.run_resumed();
    }
    let (kind, owner, run_id) = (run.kind, run.owner_id, run.id.clone());
    run_to_end(context, worker_id, run);
    let status = context
        .store()
        .run(owner, &run_id)
        .map(|ended| ended.status.as_str())
        .unwrap_or("unknown");
    let elapsed = started.elapsed();
    let elapsed_ms = elapsed.as_secs_f64() * 1000.0;
    tracing::info!(kind = kind.as_str(), status, elapsed_ms, "run ended");
    context.metrics.run_finished(kind.as_str(), status, elapsed);
}

fn run_to_end(context: &RunContext, worker_id: &str, run: Run) {
    let mut sink = RunSink {
        context,
        worker_id,
        run_id: run.id.clone(),
        last_renewal: Instant::now(),
    };
    let outcome = match run.kind {
        RunKind::ChatTurn => run_turn(context, &mut sink, &run),
        RunKind::Diagnostic => run_diagnostic(context, &mut sink, &run),
    };
    match outcome {
        Ok(()) | Err(TurnStop::Abandoned) => {}
        Err(TurnStop::Failed(reason)) => fail(context, &run.id, &reason),
    }
    context.cancellations.forget(&run.id);
}

/// Ends the run `failed` with `reason` and its terminal event (unless it already ended).
pub(super) fn fail(context: &RunContext, run_id: &str, reason: &str) {
    // The run's owner reads the reason: internal paths stay in the log only.
    let public = crate::public_text::without_paths(reason);
    if public != reason {
        tracing::warn!(run = %run_id, "run failed: {reason}");
    }
    let event = RunEvent::Failed {
        reason: public.clone(),
    };
    match context
        .log
        .finish(run_id, RunStatus::Failed, Some(&public), &event)
    {
        Ok(true) => audit_finish(context, run_id, AuditOutcome::Failure, "failed"),
        Ok(false) => {}
        Err(err) => tracing::error!(run = %run_id, "cannot mark the run failed: {err}"),
    }
}

fn audit_finish(context: &RunContext, run_id: &str, outcome: AuditOutcome, status: &str) {
    let detail = serde_json::json!({ "status": status });
    let entry = AuditEntry {
        actor: SYSTEM_ACTOR,
        action: "run.finish",
        target: Some(run_id),
        outcome,
        detail: Some(&detail),
    };
    if let Err(err) = context.store().record(&entry, now_secs()) {
        tracing::error!(run = %run_id, "cannot audit the end of the run: {err}");
    }
}

fn run_turn(context: &RunContext, sink: &mut RunSink<'_>, run: &Run) -> Result<(), TurnStop> {
    if run.attempts > context.config.max_attempts {
        return Err(TurnStop::Failed(format!(
            "the run was interrupted {} times; giving up",
            run.attempts - 1
        )));
    }
    let input = load_input(context, run)?;
    let opening = if input.already_streamed.is_empty() && run.attempts <= 1 {
        RunEvent::Started {
            attempt: run.attempts,
        }
    } else {
        RunEvent::Resumed {
            attempt: run.attempts,
            resumed_chars: input.already_streamed.chars().count(),
        }
    };
    sink.emit(opening)?;
    match context.handler.handle(&input, sink)? {
        TurnOutcome::Done(kind, answer) => sink.complete(kind, answer),
        TurnOutcome::Failed(reason) => Err(TurnStop::Failed(reason)),
    }
}

/// A diagnostic run: the handler runs the task's graph and stores its report; the run then
/// ends `completed` with outcome `diagnosed` (no assistant message).
fn run_diagnostic(context: &RunContext, sink: &mut RunSink<'_>, run: &Run) -> Result<(), TurnStop> {
    if run.attempts > context.config.max_attempts {
        return Err(TurnStop::Failed(format!(
            "the run was interrupted {} times; giving up",
            run.attempts - 1
        )));
    }
    let opening = if run.attempts <= 1 {
        RunEvent::Started {
            attempt: run.attempts,
        }
    } else {
        RunEvent::Resumed {
            attempt: run.attempts,
            resumed_chars: 0,
        }
    };
    sink.emit(opening)?;
    let input = DiagnosticInput {
        run_id: run.id.clone(),
        owner_id: run.owner_id,
        attempt: run.attempts,
        checkpoint: run
            .checkpoint
            .as_deref()
            .and_then(|text| serde_json::from_str::<Value>(text).ok()),
    };
    match context.diagnostic.handle(&input, sink)? {
        DiagnosticOutcome::Failed(reason) => Err(TurnStop::Failed(reason)),
        DiagnosticOutcome::Done => {
            let event = RunEvent::Completed {
                message_id: None,
                finish_reason: "stop".to_owned(),
                usage: events::RunUsage {
                    prompt_tokens: 0,
                    completion_tokens: 0,
                },
                outcome: "diagnosed".to_owned(),
            };
            match context
                .log
                .finish(&run.id, RunStatus::Completed, None, &event)
            {
                Ok(true) => {
                    audit_finish(context, &run.id, AuditOutcome::Success, "completed");
                    Ok(())
                }
                Ok(false) => Err(TurnStop::Abandoned),
                Err(err) => Err(stop_from(err)),
            }
        }
    }
}

/// The turn's question, the conversation before it, its owner and what was streamed.
fn load_input(context: &RunContext, run: &Run) -> Result<TurnInput, TurnStop> {
    let (Some(conversation_id), Some(turn)) = (&run.conversation_id, run.turn) else {
        return Err(TurnStop::Failed("the run is not a chat turn".to_owned()));
    };
    let store = context.store();
    let (_, messages) = store
        .conversation(run.owner_id, conversation_id)
        .map_err(stop_from)?;
    let question = messages
        .iter()
        .find(|m| m.turn == turn && m.role == MessageRole::User)
        .map(|m| m.content.clone())
        .ok_or_else(|| TurnStop::Failed("the question of this turn is missing".to_owned()))?;
    let owner = store.user_by_id(run.owner_id).map_err(stop_from)?;
    let history = messages.into_iter().filter(|m| m.turn < turn).collect();
    let checkpoint = run
        .checkpoint
        .as_deref()
        .and_then(|text| serde_json::from_str::<Value>(text).ok());
    Ok(TurnInput {
        run_id: run.id.clone(),
        owner_id: run.owner_id,
        owner_name: owner.name,
        owner_role: owner.role,
        conversation_id: conversation_id.clone(),
        turn,
        attempt: run.attempts,
        question,
        history,
        already_streamed: streamed_so_far(store, run)?,
        checkpoint,
    })
}

/// The answer text earlier attempts of this run already streamed (followers have seen
/// exactly this text).
fn streamed_so_far(store: &Store, run: &Run) -> Result<String, TurnStop> {
    let mut stored = Vec::new();
    let mut after = 0;
    loop {
        let page = store
            .events_after(run.owner_id, &run.id, after, MAX_EVENTS_PER_READ)
            .map_err(stop_from)?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        stored.extend(page);
    }
    Ok(events::streamed_text(
        stored
            .iter()
            .map(|e| (e.event_type.as_str(), e.data.as_str())),
    ))
}

/// The run as its handler sees it.
struct RunSink<'a> {
    context: &'a RunContext,
    worker_id: &'a str,
    run_id: String,
    last_renewal: Instant,
}

impl TurnSink for RunSink<'_> {
    fn emit(&mut self, event: RunEvent) -> Result<(), TurnStop> {
        self.context
            .log
            .append_as(&self.run_id, self.worker_id, &event)
            .map(|_| ())
            .map_err(stop_from)
    }

    fn keep_alive(&mut self) -> Result<(), TurnStop> {
        if self.context.cancellations.contains(&self.run_id) {
            return Err(TurnStop::Abandoned);
        }
        let lease_secs = self.context.config.lease_secs;
        if self.last_renewal.elapsed() < Duration::from_secs((lease_secs / 3).max(1) as u64) {
            return Ok(());
        }
        let held = self
            .context
            .store()
            .renew_lease(&self.run_id, self.worker_id, now_secs(), lease_secs)
            .map_err(stop_from)?;
        self.last_renewal = Instant::now();
        if held {
            Ok(())
        } else {
            tracing::warn!(run = %self.run_id, "lease lost; leaving the run to its new owner");
            Err(TurnStop::Abandoned)
        }
    }

    fn checkpoint(&mut self, state: &Value) -> Result<(), TurnStop> {
        let held = self
            .context
            .store()
            .checkpoint(&self.run_id, self.worker_id, &state.to_string(), now_secs())
            .map_err(stop_from)?;
        if held {
            Ok(())
        } else {
            Err(TurnStop::Abandoned)
        }
    }

    fn worker_id(&self) -> &str {
        self.worker_id
    }

    fn delta_interval(&self) -> Duration {
        self.context.config.delta_interval
    }
}

impl RunSink<'_> {
    /// Streams what is left of the answer, then saves it with `run.completed`.
    fn complete(&mut self, kind: OutcomeKind, answer: TurnAnswer) -> Result<(), TurnStop> {
        if !answer.unstreamed.is_empty() {
            self.emit(RunEvent::MessageDelta {
                text: answer.unstreamed.clone(),
            })?;
        }
        let message_id = new_message_id().map_err(stop_from)?;
        let citations: Vec<(i64, String)> = answer
            .citations
            .iter()
            .map(|c| (c.n as i64, serde_json::json!(c).to_string()))
            .collect();
        let event = RunEvent::Completed {
            message_id: Some(message_id.clone()),
            finish_reason: answer.finish_reason.clone(),
            usage: answer.usage,
            outcome: kind.as_str().to_owned(),
        };
        let done = self
            .context
            .log
            .complete_turn(
                &self.run_id,
                self.worker_id,
                &message_id,
                &answer.text,
                &citations,
                &event,
            )
            .map_err(stop_from)?;
        if done.event_seq.is_some() {
            audit_finish(
                self.context,
                &self.run_id,
                AuditOutcome::Success,
                "completed",
            );
        }
        Ok(())
    }
}
