//! The seam between runs and what a chat turn does. Runs own leases, the event log,
//! cancellation, checkpoints and completion; a `TurnHandler` (the agent) decides what the
//! turn does, reaching the run only through a `TurnSink`, and returns a closed
//! `TurnOutcome` that the run worker turns into the stored answer and terminal event.

use std::time::Duration;

use serde_json::Value;

use super::events::{CitationPublic, RunEvent, RunUsage};
use crate::store::{Message, Role};

/// Everything a handler needs to answer one turn; loaded by the run worker.
#[derive(Debug, Clone)]
pub struct TurnInput {
    pub run_id: String,
    pub owner_id: i64,
    pub owner_name: String,
    pub owner_role: Role,
    pub conversation_id: String,
    pub turn: i64,
    /// 1 on the first claim; more when the run was interrupted and resumed.
    pub attempt: i64,
    /// This turn's user message, as typed.
    pub question: String,
    /// The conversation's earlier messages (turns before this one), oldest first.
    pub history: Vec<Message>,
    /// Answer text earlier attempts already streamed: followers have seen it, so a
    /// resumed answer must continue it.
    pub already_streamed: String,
    /// The private resume state the handler saved last (see `TurnSink::checkpoint`).
    pub checkpoint: Option<Value>,
}

/// Why a handler stopped early, as the sink reports it.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnStop {
    /// The run was cancelled or another worker holds it now: do nothing more.
    Abandoned,
    /// The turn failed; the run ends `failed` with this public reason.
    Failed(String),
}

/// What a handler may do to its run. Every method is cheap enough to call often.
pub trait TurnSink {
    /// Stores the public event, then wakes the run's followers.
    fn emit(&mut self, event: RunEvent) -> Result<(), TurnStop>;
    /// Renews the lease when due; `Abandoned` once the run was cancelled or taken over.
    fn keep_alive(&mut self) -> Result<(), TurnStop>;
    /// Saves private resume state (never a public event).
    fn checkpoint(&mut self, state: &Value) -> Result<(), TurnStop>;
    /// The worker holding the run's lease (ledger claims are made in its name).
    fn worker_id(&self) -> &str;
    /// How often streamed text is flushed as one `message.delta`.
    fn delta_interval(&self) -> Duration;
}

/// How a turn ended, when it did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutcomeKind {
    Answered,
    PendingAction,
    Clarification,
    Refused,
}

impl OutcomeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeKind::Answered => "answered",
            OutcomeKind::PendingAction => "pending_action",
            OutcomeKind::Clarification => "clarification",
            OutcomeKind::Refused => "refused",
        }
    }
}

/// The assistant message a finished turn stores.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnAnswer {
    /// The whole answer text, including what earlier attempts streamed.
    pub text: String,
    /// Text not yet streamed as `message.delta` (the worker streams it before completing).
    pub unstreamed: String,
    pub citations: Vec<CitationPublic>,
    pub finish_reason: String,
    pub usage: RunUsage,
}

/// The closed set of ways a turn ends.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnOutcome {
    Done(OutcomeKind, TurnAnswer),
    Failed(String),
}

/// Decides what a turn does. Runs on a run worker thread (blocking work is fine).
pub trait TurnHandler: Send + Sync {
    fn handle(&self, input: &TurnInput, sink: &mut dyn TurnSink) -> Result<TurnOutcome, TurnStop>;
}

/// What a diagnostic run's handler gets: the run and its saved resume state.
#[derive(Debug, Clone)]
pub struct DiagnosticInput {
    pub run_id: String,
    pub owner_id: i64,
    /// 1 on the first claim; more when the run was interrupted and resumed.
    pub attempt: i64,
    pub checkpoint: Option<Value>,
}

/// How a diagnostic run ended, when it did not fail: the handler has stored its report.
#[derive(Debug, Clone, PartialEq)]
pub enum DiagnosticOutcome {
    Done,
    Failed(String),
}

/// Runs a diagnostic task's graph on its run. Runs on a run worker thread.
pub trait DiagnosticHandler: Send + Sync {
    fn handle(
        &self,
        input: &DiagnosticInput,
        sink: &mut dyn TurnSink,
    ) -> Result<DiagnosticOutcome, TurnStop>;
}
