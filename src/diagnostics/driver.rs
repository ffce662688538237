//! Drives a task's graph on its `diagnostic` run: before each node it derives the node's
//! execution key (hash of task, graph version, node, logical iteration and the input
//! state's fingerprint); model and tool calls are claimed in the tool ledger under those
//! keys, so a restarted task reuses every completed call instead of repeating it; after
//! each node the state is checkpointed on the run and a public `diagnostic.node` event is
//! appended (node, iteration, a short summary — never prompts or model text).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::graph::{self, GraphConfig, GraphIo, IoError, ModelFailure};
use super::playbooks::Playbooks;
use super::source::DiagnosticSource;
use super::state::{DiagnosticState, KnowledgeRef, Node, NodeRecord, GRAPH_VERSION};
use super::tools::{run_tool, ToolOutput};
use crate::agent::backends::{ChatModel, KnowledgeSearch};
use crate::agent::llm::{generate_json, CallError};
use crate::agent::tools::{canonical_json, tool_call_key};
use crate::engine::ChatMessage;
use crate::runs::{now_secs, RunEvent, TurnSink, TurnStop};
use crate::store::{secret_hash, ClaimOutcome, SideEffect, Store, ToolClaim, ToolLedger};

/// Sampling seed of every diagnostic model call (greedy decoding: reruns agree).
const MODEL_SEED: u64 = 7;

/// The model side of the graph.
#[derive(Clone)]
pub struct Models {
    pub planner: Arc<dyn ChatModel>,
    pub validator: Arc<dyn ChatModel>,
    pub name: String,
    /// One model call's time limit.
    pub call_timeout: Duration,
}

/// Everything the driver needs besides the state.
pub struct DriverContext<'a> {
    pub store: &'a Store,
    pub books: &'a Playbooks,
    pub config: &'a GraphConfig,
    pub models: &'a Models,
    pub knowledge: Option<&'a dyn KnowledgeSearch>,
    pub source: &'a dyn DiagnosticSource,
}

/// A node's execution key.
pub fn execution_key(task: &str, node: Node, iteration: u32, fingerprint: &str) -> String {
    secret_hash(&format!(
        "{task}\u{1f}{GRAPH_VERSION}\u{1f}{}\u{1f}{iteration}\u{1f}{fingerprint}",
        node.as_str()
    ))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The checkpoint of a state.
pub fn checkpoint_of(state: &DiagnosticState) -> Value {
    json!({ "diagnostic": state })
}

/// The state saved in a checkpoint, if it holds one.
pub fn state_from_checkpoint(checkpoint: &Value) -> Option<DiagnosticState> {
    serde_json::from_value(checkpoint.get("diagnostic")?.clone()).ok()
}

/// Runs the graph from `state.next` to the end.
pub fn drive(
    context: &DriverContext<'_>,
    state: &mut DiagnosticState,
    sink: &mut dyn TurnSink,
) -> Result<(), TurnStop> {
    while state.next != Node::Done {
        sink.keep_alive()?;
        let node = state.next;
        let iteration = state.iteration_of(node);
        let fingerprint = secret_hash(&canonical_json(
            &serde_json::to_value(&*state).unwrap_or(Value::Null),
        ));
        let key = execution_key(&state.task_id, node, iteration, &fingerprint);
        let (next, summary) = {
            let mut io = LiveIo {
                context,
                sink: &mut *sink,
                run_id: state.run_id.clone(),
            };
            graph::step(
                node,
                state,
                &mut io,
                context.books,
                context.config,
                &key,
                now_ms(),
            )?
        };
        state.nodes.push(NodeRecord {
            node,
            iteration,
            execution_key: key,
        });
        state.next = next;
        sink.checkpoint(&checkpoint_of(state))?;
        sink.emit(RunEvent::DiagnosticNode {
            task_id: state.task_id.clone(),
            node: node.as_str().to_owned(),
            iteration,
            next: next.as_str().to_owned(),
            summary,
            detail: public_detail(node, state),
        })?;
    }
    Ok(())
}

/// What the UI shows after a node: structured public facts, never model text.
fn public_detail(node: Node, state: &DiagnosticState) -> Value {
    match node {
        Node::Planner | Node::Replanner => json!({ "plan": state.plan }),
        Node::FactAdapter | Node::HypothesisAdjudicator | Node::KnowledgeInvestigator => {
            json!({ "hypotheses": state.hypotheses.iter().map(|h| json!({
                "id": h.id, "title": h.title, "disposition": h.disposition, "reason": h.reason,
            })).collect::<Vec<_>>() })
        }
        Node::Decision => json!({ "verdict": state.verdict, "rootCause": state.root_cause }),
        Node::RecoveryPlanner | Node::ManualReview => json!({ "recovery": state.recovery }),
        Node::PolicyGate => json!({ "policy": state.policy }),
        _ => json!({}),
    }
}

struct LiveIo<'a, 'b> {
    context: &'a DriverContext<'a>,
    sink: &'b mut dyn TurnSink,
    run_id: String,
}

impl LiveIo<'_, '_> {
    fn claim(&mut self, key: &str, step: i64, tool: &str) -> Result<ClaimOutcome, TurnStop> {
        let claim = ToolClaim {
            key,
            run_id: &self.run_id,
            step,
            tool,
            side_effect: SideEffect::Read,
            worker: self.sink.worker_id(),
        };
        self.context
            .store
            .claim_tool_call(&claim, now_secs())
            .map_err(ledger_stop)
    }

    fn settle(&mut self, key: &str, outcome: Result<&str, &str>) -> Result<(), TurnStop> {
        self.context
            .store
            .settle_tool_call(key, self.sink.worker_id(), outcome, now_secs())
            .map_err(ledger_stop)
    }

    fn model_call(
        &mut self,
        role: &str,
        key: &str,
        model: Arc<dyn ChatModel>,
        messages: Vec<ChatMessage>,
        schema: &Value,
        max_tokens: usize,
    ) -> Result<Value, IoError<ModelFailure>> {
        let ledger_key = secret_hash(&format!(
            "{}\u{1f}model\u{1f}{role}\u{1f}{key}",
            self.run_id
        ));
        let tool = format!("model.{role}");
        match self
            .claim(&ledger_key, 0, &tool)
            .map_err(IoError::Stopped)?
        {
            ClaimOutcome::Reuse(text) => {
                return serde_json::from_str(&text)
                    .map_err(|_| IoError::Failed(ModelFailure::BadJson))
            }
            ClaimOutcome::Run => {}
            ClaimOutcome::FailedBefore(_) | ClaimOutcome::Uncertain => {
                return Err(IoError::Failed(ModelFailure::Unavailable(
                    "an earlier attempt failed".to_owned(),
                )))
            }
        }
        let deadline = Instant::now() + self.context.models.call_timeout;
        let result = generate_json(
            model.as_ref(),
            self.sink,
            messages,
            schema,
            max_tokens,
            MODEL_SEED,
            deadline,
        );
        match result {
            Ok((value, _)) => {
                self.settle(&ledger_key, Ok(&value.to_string()))
                    .map_err(IoError::Stopped)?;
                Ok(value)
            }
            Err(CallError::Stopped(stop)) => Err(IoError::Stopped(stop)),
            Err(err) => {
                let failure = match err {
                    CallError::Deadline => ModelFailure::Timeout,
                    CallError::Unparsable(_) => ModelFailure::BadJson,
                    other => ModelFailure::Unavailable(other.to_string()),
                };
                self.settle(&ledger_key, Err(failure_text(&failure)))
                    .map_err(IoError::Stopped)?;
                Err(IoError::Failed(failure))
            }
        }
    }
}

/// What a tool's `tool.completed` says of its output.
fn output_summary(output: &ToolOutput) -> String {
    match output.status {
        super::tools::ToolStatus::Ok => format!("{} records", output.items.len()),
        super::tools::ToolStatus::Unavailable => "source unavailable".to_owned(),
    }
}

/// What a tool failure may say in public: its class, never paths or source text.
fn public_tool_error(err: &super::tools::ToolError) -> &'static str {
    match err {
        super::tools::ToolError::InvalidArguments(_) => "invalid arguments",
        super::tools::ToolError::Source(_) => "the data source could not be read",
    }
}

/// A lost lease abandons the run; any other ledger failure fails it.
fn ledger_stop(err: crate::store::StoreError) -> TurnStop {
    match err {
        crate::store::StoreError::Conflict(_) => TurnStop::Abandoned,
        other => TurnStop::Failed(format!("the tool ledger failed: {other}")),
    }
}

fn failure_text(failure: &ModelFailure) -> &'static str {
    match failure {
        ModelFailure::Timeout => "timeout",
        ModelFailure::BadJson => "bad_json",
        ModelFailure::Unavailable(_) => "unavailable",
    }
}

impl GraphIo for LiveIo<'_, '_> {
    fn model_json(
        &mut self,
        key: &str,
        messages: Vec<ChatMessage>,
        schema: &Value,
        max_tokens: usize,
    ) -> Result<Value, IoError<ModelFailure>> {
        let model = self.context.models.planner.clone();
        self.model_call("planner", key, model, messages, schema, max_tokens)
    }

    fn validator_json(
        &mut self,
        key: &str,
        messages: Vec<ChatMessage>,
        schema: &Value,
        max_tokens: usize,
    ) -> Result<Value, IoError<ModelFailure>> {
        let model = self.context.models.validator.clone();
        self.model_call("validator", key, model, messages, schema, max_tokens)
    }

    fn tool(
        &mut self,
        step: &str,
        tool: &str,
        args: &Value,
    ) -> Result<ToolOutput, IoError<String>> {
        let index: i64 = step.trim_start_matches('s').parse().unwrap_or(0);
        let key = tool_call_key(&self.run_id, index, tool, args);
        let call_id: String = key.chars().take(12).collect();
        match self.claim(&key, index, tool).map_err(IoError::Stopped)? {
            ClaimOutcome::Reuse(text) => {
                let output: ToolOutput = serde_json::from_str(&text)
                    .map_err(|_| IoError::Failed("the stored result is unreadable".to_owned()))?;
                // Settled before a kill that came ahead of its `tool.completed`: announce
                // it now, once, so every completed call has its event.
                let announced = self
                    .context
                    .store
                    .completion_announced(&self.run_id, &call_id)
                    .map_err(|err| IoError::Stopped(ledger_stop(err)))?;
                if !announced {
                    self.sink
                        .emit(RunEvent::ToolCompleted {
                            call_id,
                            name: tool.to_owned(),
                            status: "ok".to_owned(),
                            summary: output_summary(&output),
                        })
                        .map_err(IoError::Stopped)?;
                }
                return Ok(output);
            }
            ClaimOutcome::Run => {}
            ClaimOutcome::FailedBefore(error) => return Err(IoError::Failed(error)),
            ClaimOutcome::Uncertain => {
                return Err(IoError::Failed(
                    "an earlier attempt's outcome is unknown".into(),
                ))
            }
        }
        self.sink
            .emit(RunEvent::ToolStarted {
                call_id: call_id.clone(),
                name: tool.to_owned(),
            })
            .map_err(IoError::Stopped)?;
        let result = run_tool(self.context.source, tool, args);
        let (status, summary) = match &result {
            Ok(output) => ("ok", output_summary(output)),
            Err(err) => {
                tracing::warn!(tool, "diagnostic tool failed: {err}");
                ("error", public_tool_error(err).to_owned())
            }
        };
        match &result {
            Ok(output) => {
                let text = serde_json::to_string(output).unwrap_or_else(|_| "null".into());
                self.settle(&key, Ok(&text)).map_err(IoError::Stopped)?;
            }
            Err(err) => {
                self.settle(&key, Err(&err.to_string()))
                    .map_err(IoError::Stopped)?;
            }
        }
        self.sink
            .emit(RunEvent::ToolCompleted {
                call_id,
                name: tool.to_owned(),
                status: status.to_owned(),
                summary,
            })
            .map_err(IoError::Stopped)?;
        result.map_err(|err| IoError::Failed(public_tool_error(&err).to_owned()))
    }

    fn knowledge(&mut self, _key: &str, query: &str) -> Result<Vec<KnowledgeRef>, TurnStop> {
        let Some(search) = self.context.knowledge else {
            return Ok(Vec::new());
        };
        match search.search(query, None, 4) {
            Ok(hits) => Ok(hits
                .into_iter()
                .map(|hit| KnowledgeRef {
                    kb: hit.citation.kb.clone(),
                    title: hit
                        .citation
                        .title
                        .clone()
                        .unwrap_or_else(|| hit.citation.path.clone()),
                    path: hit.citation.path,
                    score: (hit.score * 1000.0).round() / 1000.0,
                })
                .collect()),
            Err(err) => {
                tracing::warn!("knowledge search for a diagnostic failed: {err}");
                Ok(Vec::new())
            }
        }
    }

    fn model_name(&self) -> String {
        self.context.models.name.clone()
    }
}
