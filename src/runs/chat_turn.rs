//! Executes one chat turn: builds the prompt from the conversation, streams the model's
//! answer into `message.delta` events (coalesced, stored before they are signalled), keeps
//! the lease alive, and ends the run — `completed` with the assistant message, `failed`
//! with a reason, or quietly when the run was cancelled or taken over. A resumed run
//! continues the text its earlier attempts already streamed, so followers never see a
//! restart and the turn still gets exactly one assistant message. Hidden reasoning
//! (`<think>` spans) never reaches an event or the saved answer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::events::{self, RunEvent, RunUsage};
use super::reasoning_filter::ReasoningFilter;
use super::{now_ms, now_secs, Cancellations, EventBus, RunConfig};
use crate::engine::{
    ChatMessage, ChatModelHandle, ChatRequest, EngineError, GenerationEvent, GenerationStream,
    GenerationSummary, Role, SamplingParams,
};
use crate::store::{
    new_message_id, Audit, AuditEntry, AuditOutcome, Conversations, MessageRole, NewEvent, Run,
    RunStatus, Runs, Store, StoreError, MAX_EVENTS_PER_READ, SYSTEM_ACTOR,
};

/// Most earlier messages of the conversation put in the prompt.
const MAX_HISTORY_MESSAGES: usize = 16;
/// Most characters of earlier messages put in the prompt (the newest are kept).
const MAX_HISTORY_CHARS: usize = 12_000;
/// How long to wait between tries when the model's queue is full.
const QUEUE_FULL_BACKOFF: Duration = Duration::from_millis(200);

/// What every turn needs.
pub(super) struct TurnContext {
    pub store: Arc<Store>,
    pub chat: ChatModelHandle,
    pub bus: EventBus,
    pub config: RunConfig,
    pub cancellations: Cancellations,
}

/// Why a turn stopped before completing.
enum Stop {
    /// The run ended elsewhere (cancelled) or another worker holds it now: do nothing more.
    Abandoned,
    /// The turn failed; the run ends `failed` with this public reason.
    Failed(String),
}

impl From<StoreError> for Stop {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::Conflict(_) => Stop::Abandoned,
            other => {
                tracing::error!("run store error: {other}");
                Stop::Failed("the answer could not be saved".to_owned())
            }
        }
    }
}

/// Runs a claimed run to its end.
pub(super) fn execute(context: &TurnContext, worker_id: &str, run: Run) {
    let mut turn = Turn {
        context,
        worker_id,
        run_id: run.id.clone(),
        last_renewal: Instant::now(),
    };
    match turn.answer(&run) {
        Ok(()) | Err(Stop::Abandoned) => {}
        Err(Stop::Failed(reason)) => fail(context, &run.id, &reason),
    }
    context.cancellations.forget(&run.id);
}

/// Ends the run `failed` with `reason` and its terminal event (unless it already ended).
pub(super) fn fail(context: &TurnContext, run_id: &str, reason: &str) {
    let event = RunEvent::Failed {
        reason: reason.to_owned(),
    };
    let data = event.data(now_ms());
    let new_event = NewEvent {
        event_type: event.event_type(),
        data: &data,
    };
    match context.store.finish_with_event(
        run_id,
        RunStatus::Failed,
        Some(reason),
        &new_event,
        now_secs(),
    ) {
        Ok(Some(seq)) => {
            context.bus.publish(run_id, seq, true);
            audit_finish(context, run_id, AuditOutcome::Failure, "failed");
        }
        Ok(None) => {}
        Err(err) => tracing::error!(run = %run_id, "cannot mark the run failed: {err}"),
    }
}

fn audit_finish(context: &TurnContext, run_id: &str, outcome: AuditOutcome, status: &str) {
    let detail = serde_json::json!({ "status": status });
    let entry = AuditEntry {
        actor: SYSTEM_ACTOR,
        action: "run.finish",
        target: Some(run_id),
        outcome,
        detail: Some(&detail),
    };
    if let Err(err) = context.store.record(&entry, now_secs()) {
        tracing::error!(run = %run_id, "cannot audit the end of the run: {err}");
    }
}

struct Turn<'a> {
    context: &'a TurnContext,
    worker_id: &'a str,
    run_id: String,
    last_renewal: Instant,
}

impl Turn<'_> {
    fn answer(&mut self, run: &Run) -> Result<(), Stop> {
        let config = &self.context.config;
        if run.attempts > config.max_attempts {
            return Err(Stop::Failed(format!(
                "the run was interrupted {} times; giving up",
                run.attempts - 1
            )));
        }
        let history = self.prompt_messages(run)?;
        let already_streamed = self.streamed_so_far(run)?;
        let opening = if already_streamed.is_empty() && run.attempts <= 1 {
            RunEvent::Started {
                attempt: run.attempts,
            }
        } else {
            RunEvent::Resumed {
                attempt: run.attempts,
                resumed_chars: already_streamed.chars().count(),
            }
        };
        self.emit(&opening)?;
        let request = ChatRequest {
            messages: history,
            sampling: SamplingParams {
                repetition_penalty: 1.1,
                seed: Some(seed_of(&run.id)),
                ..SamplingParams::default()
            },
            max_tokens: Some(remaining_tokens(
                config.max_answer_tokens,
                &already_streamed,
            )),
            assistant_prefix: Some(already_streamed.clone()),
            ..ChatRequest::default()
        };
        let mut stream = self.submit(request)?;
        let (generated, summary) = self.stream_answer(&mut stream)?;
        self.complete(format!("{already_streamed}{generated}"), &summary)
    }

    /// The system prompt, the conversation before this turn (newest kept within limits)
    /// and this turn's user message.
    fn prompt_messages(&self, run: &Run) -> Result<Vec<ChatMessage>, Stop> {
        let (Some(conversation_id), Some(turn)) = (&run.conversation_id, run.turn) else {
            return Err(Stop::Failed("the run is not a chat turn".to_owned()));
        };
        let (_, messages) = self
            .context
            .store
            .conversation(run.owner_id, conversation_id)?;
        let question = messages
            .iter()
            .find(|m| m.turn == turn && m.role == MessageRole::User)
            .ok_or_else(|| Stop::Failed("the question of this turn is missing".to_owned()))?;
        let mut earlier: Vec<ChatMessage> = Vec::new();
        let mut chars = 0;
        for message in messages.iter().rev().filter(|m| m.turn < turn) {
            chars += message.content.len();
            if earlier.len() >= MAX_HISTORY_MESSAGES || chars > MAX_HISTORY_CHARS {
                break;
            }
            let role = match message.role {
                MessageRole::User => Role::User,
                MessageRole::Assistant => Role::Assistant,
                MessageRole::System => Role::System,
            };
            earlier.push(ChatMessage::new(role, message.content.clone()));
        }
        earlier.reverse();
        let mut prompt = vec![ChatMessage::new(
            Role::System,
            self.context.config.system_prompt.clone(),
        )];
        prompt.extend(earlier);
        prompt.push(ChatMessage::new(Role::User, question.content.clone()));
        Ok(prompt)
    }

    /// The answer text earlier attempts of this run already streamed (the event log is the
    /// run's checkpoint: followers have seen exactly this text).
    fn streamed_so_far(&self, run: &Run) -> Result<String, Stop> {
        let mut stored = Vec::new();
        let mut after = 0;
        loop {
            let page = self.context.store.events_after(
                run.owner_id,
                &run.id,
                after,
                MAX_EVENTS_PER_READ,
            )?;
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

    /// Queues the request, waiting while the model's queue is full.
    fn submit(&mut self, request: ChatRequest) -> Result<GenerationStream, Stop> {
        loop {
            match self.context.chat.submit(request.clone()) {
                Ok(stream) => return Ok(stream),
                Err(EngineError::QueueFull(_)) => {
                    std::thread::sleep(QUEUE_FULL_BACKOFF);
                    self.keep_lease()?;
                }
                Err(err) => return Err(Stop::Failed(model_failure(&err))),
            }
        }
    }

    /// Streams the answer into coalesced delta events; returns the new text and summary.
    fn stream_answer(
        &mut self,
        stream: &mut GenerationStream,
    ) -> Result<(String, GenerationSummary), Stop> {
        let interval = self.context.config.delta_interval;
        let mut reasoning = ReasoningFilter::default();
        let mut generated = String::new();
        let mut pending = String::new();
        let mut last_flush: Option<Instant> = None;
        loop {
            let polled = stream.next_timeout(interval);
            let event = match polled {
                Err(()) => None,
                Ok(Some(Ok(event))) => Some(event),
                Ok(Some(Err(err))) => return Err(Stop::Failed(model_failure(&err))),
                Ok(None) => {
                    return Err(Stop::Failed(
                        "the chat model stopped before answering".to_owned(),
                    ))
                }
            };
            match event {
                Some(GenerationEvent::Delta(text)) => {
                    let visible = reasoning.push(&text);
                    generated.push_str(&visible);
                    pending.push_str(&visible);
                }
                Some(GenerationEvent::Done(summary)) => {
                    let rest = reasoning.finish();
                    generated.push_str(&rest);
                    pending.push_str(&rest);
                    self.flush(&mut pending)?;
                    return Ok((generated, summary));
                }
                None => {}
            }
            // The first text goes out at once (time to first token); later text in batches.
            let due = last_flush.is_none_or(|at| at.elapsed() >= interval);
            if !pending.is_empty() && due {
                self.flush(&mut pending)?;
                last_flush = Some(Instant::now());
            }
            self.keep_lease()?;
        }
    }

    fn flush(&mut self, pending: &mut String) -> Result<(), Stop> {
        if pending.is_empty() {
            return Ok(());
        }
        let text = std::mem::take(pending);
        self.emit(&RunEvent::MessageDelta { text })
    }

    /// Stores the event, then signals its followers.
    fn emit(&self, event: &RunEvent) -> Result<(), Stop> {
        let data = event.data(now_ms());
        let seq = self.context.store.append_event_as(
            &self.run_id,
            self.worker_id,
            &NewEvent {
                event_type: event.event_type(),
                data: &data,
            },
            now_secs(),
        )?;
        self.context.bus.publish(&self.run_id, seq, false);
        Ok(())
    }

    /// `Abandoned` when the run was cancelled or its lease lost; renews the lease once a
    /// third of it has passed.
    fn keep_lease(&mut self) -> Result<(), Stop> {
        if self.context.cancellations.contains(&self.run_id) {
            return Err(Stop::Abandoned);
        }
        let lease_secs = self.context.config.lease_secs;
        if self.last_renewal.elapsed() < Duration::from_secs((lease_secs / 3).max(1) as u64) {
            return Ok(());
        }
        let held =
            self.context
                .store
                .renew_lease(&self.run_id, self.worker_id, now_secs(), lease_secs)?;
        self.last_renewal = Instant::now();
        if held {
            Ok(())
        } else {
            tracing::warn!(run = %self.run_id, "lease lost; leaving the run to its new owner");
            Err(Stop::Abandoned)
        }
    }

    /// Saves the answer and the `run.completed` event in one transaction.
    fn complete(&self, answer: String, summary: &GenerationSummary) -> Result<(), Stop> {
        let message_id = new_message_id()?;
        let event = RunEvent::Completed {
            message_id: message_id.clone(),
            finish_reason: summary.finish_reason.as_str().to_owned(),
            usage: RunUsage {
                prompt_tokens: summary.prompt_tokens,
                completion_tokens: summary.completion_tokens,
            },
        };
        let data = event.data(now_ms());
        let done = self.context.store.complete_turn_with_event(
            &self.run_id,
            self.worker_id,
            &message_id,
            &answer,
            &NewEvent {
                event_type: event.event_type(),
                data: &data,
            },
            now_secs(),
        )?;
        if let Some(seq) = done.event_seq {
            self.context.bus.publish(&self.run_id, seq, true);
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

/// The public reason for a model failure (no internals beyond the engine's message).
fn model_failure(err: &EngineError) -> String {
    match err {
        EngineError::ContextOverflow { .. } => {
            format!("the conversation is too long for the model: {err}")
        }
        other => format!("the chat model failed: {other}"),
    }
}

/// Tokens left for the answer after the text already streamed (about 4 characters each).
fn remaining_tokens(max_answer_tokens: usize, already_streamed: &str) -> usize {
    let used = already_streamed.len().div_ceil(4);
    max_answer_tokens.saturating_sub(used).max(16)
}

/// A sampling seed fixed per run, so a run's answer does not depend on which attempt ran it.
fn seed_of(run_id: &str) -> u64 {
    let digest = crate::store::secret_hash(run_id);
    u64::from_str_radix(&digest[..16], 16).unwrap_or(0)
}
