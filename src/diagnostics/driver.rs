//! Drives a task's graph on its `diagnostic` run: before each node it derives the node's
//! execution key (hash of task, graph version, node, logical iteration and the input
//! state's fingerprint); model and tool calls go through the run's ledger protocol
//! (`runs::ledger_call`) under those keys, so a restarted task reuses every completed call
//! instead of repeating it; after
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
use crate::agent::tools::{canonical_json, tool_call_key};
use crate::engine::ChatMessage;
use crate::knowledge::KnowledgeSearch;
use crate::llm::call::{generate_json, CallError};
use crate::llm::model::ChatModel;
use crate::runs::ledger_call::{call_through_ledger, LedgerCall, LedgerOutcome};
use crate::runs::{RunEvent, TurnSink, TurnStop};
use crate::store::{secret_hash, SideEffect, Store};

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
    /// The knowledge bases the task's owner may read (`None`: all, for an admin): guidance
    /// comes only from these, so a report never names a document its owner cannot open.
    pub readable: Option<&'a [String]>,
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
        let call = LedgerCall {
            store: self.context.store,
            run_id: &self.run_id,
            key: &ledger_key,
            step: 0,
            tool: &tool,
            side_effect: SideEffect::Read,
            call_id: None,
        };
        let call_timeout = self.context.models.call_timeout;
        let recorded = call_through_ledger(
            &mut *self.sink,
            &call,
            |sink| {
                let deadline = Instant::now() + call_timeout;
                let result = generate_json(
                    model.as_ref(),
                    sink,
                    messages,
                    schema,
                    max_tokens,
                    MODEL_SEED,
                    deadline,
                );
                match result {
                    Ok((value, _)) => Ok(Ok(value.to_string())),
                    Err(CallError::Stopped(stop)) => Err(stop),
                    Err(err) => {
                        tracing::warn!(role = %call.tool, "diagnostic model call failed: {err}");
                        let failure = match err {
                            CallError::Deadline => ModelFailure::Timeout,
                            CallError::Unparsable(_) => ModelFailure::BadJson,
                            other => ModelFailure::Unavailable(other.to_string()),
                        };
                        Ok(Err(failure_text(&failure).to_owned()))
                    }
                }
            },
            &|_| (String::new(), String::new()),
        )
        .map_err(IoError::Stopped)?;
        match recorded {
            LedgerOutcome::Settled(Ok(text)) => {
                serde_json::from_str(&text).map_err(|_| IoError::Failed(ModelFailure::BadJson))
            }
            LedgerOutcome::Settled(Err(failure)) => Err(IoError::Failed(failure_of(&failure))),
            LedgerOutcome::Uncertain => Err(IoError::Failed(ModelFailure::Unavailable(
                "an earlier attempt's outcome is unknown".to_owned(),
            ))),
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

/// How a model failure is settled in the ledger.
fn failure_text(failure: &ModelFailure) -> &'static str {
    match failure {
        ModelFailure::Timeout => "timeout",
        ModelFailure::BadJson => "bad_json",
        ModelFailure::Unavailable(_) => "unavailable",
    }
}

/// A settled model failure, the same on the first run and on a resumed one.
fn failure_of(text: &str) -> ModelFailure {
    match text {
        "timeout" => ModelFailure::Timeout,
        "bad_json" => ModelFailure::BadJson,
        _ => ModelFailure::Unavailable("the model call failed".to_owned()),
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
        let call = LedgerCall {
            store: self.context.store,
            run_id: &self.run_id,
            key: &key,
            step: index,
            tool,
            side_effect: SideEffect::Read,
            call_id: Some(&call_id),
        };
        let source = self.context.source;
        let recorded = call_through_ledger(
            &mut *self.sink,
            &call,
            |_| {
                Ok(match run_tool(source, tool, args) {
                    Ok(output) => {
                        Ok(serde_json::to_string(&output).unwrap_or_else(|_| "null".into()))
                    }
                    Err(err) => {
                        tracing::warn!(tool, "diagnostic tool failed: {err}");
                        // Settled as its public class: never paths or source text.
                        Err(public_tool_error(&err).to_owned())
                    }
                })
            },
            &|recorded| match recorded {
                LedgerOutcome::Settled(Ok(text)) => match serde_json::from_str(text) {
                    Ok(output) => ("ok".to_owned(), output_summary(&output)),
                    Err(_) => ("error".to_owned(), "unreadable result".to_owned()),
                },
                LedgerOutcome::Settled(Err(error)) => ("error".to_owned(), error.clone()),
                LedgerOutcome::Uncertain => ("error".to_owned(), "outcome unknown".to_owned()),
            },
        )
        .map_err(IoError::Stopped)?;
        match recorded {
            LedgerOutcome::Settled(Ok(text)) => serde_json::from_str(&text)
                .map_err(|_| IoError::Failed("the stored result is unreadable".to_owned())),
            LedgerOutcome::Settled(Err(error)) => Err(IoError::Failed(error)),
            LedgerOutcome::Uncertain => Err(IoError::Failed(
                "an earlier attempt's outcome is unknown".into(),
            )),
        }
    }

    fn knowledge(&mut self, _key: &str, query: &str) -> Result<Vec<KnowledgeRef>, TurnStop> {
        let Some(search) = self.context.knowledge else {
            return Ok(Vec::new());
        };
        match search.search(query, self.context.readable, 4) {
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

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::*;
    use crate::diagnostics::faults::{Fault, FaultyModel};
    use crate::retrieval::{Citation, SearchHit};
    use crate::store::{AccessControl, Accounts, KbCatalog, Reader, Role};

    /// Two knowledge bases, one of them restricted; a search returns a hit from each that
    /// its scope allows.
    struct TwoBases;

    impl KnowledgeSearch for TwoBases {
        fn search(
            &self,
            _query: &str,
            readable: Option<&[String]>,
            _limit: usize,
        ) -> Result<Vec<SearchHit>, String> {
            Ok(["runbooks", "hr-private"]
                .into_iter()
                .filter(|kb| readable.is_none_or(|names| names.iter().any(|n| n == kb)))
                .map(|kb| SearchHit {
                    chunk_id: 1,
                    score: 0.5,
                    text: String::new(),
                    citation: Citation {
                        kb: kb.to_owned(),
                        path: format!("{kb}/doc.md"),
                        title: Some(format!("{kb} title")),
                        heading_path: Vec::new(),
                        location: None,
                    },
                    bm25: None,
                    vector: None,
                })
                .collect())
        }

        /// Its passages are empty, so it mentions no name.
        fn unmentioned_names(
            &self,
            query: &str,
            _readable: Option<&[String]>,
        ) -> Result<Vec<String>, String> {
            Ok(crate::retrieval::words::name_candidates(query))
        }
    }

    fn kbs_found(store: &Store, owner: i64) -> Vec<String> {
        let books = Playbooks::load(Path::new("kb/playbooks")).unwrap();
        let model: Arc<dyn ChatModel> = Arc::new(FaultyModel {
            fault: Fault::ValidatorDown,
            context_length: 4096,
        });
        let models = Models {
            planner: model.clone(),
            validator: model,
            name: "none".into(),
            call_timeout: Duration::from_secs(1),
        };
        let readable = store.search_scope(owner);
        let context = DriverContext {
            store,
            books: &books,
            config: &GraphConfig::default(),
            models: &models,
            knowledge: Some(&TwoBases),
            readable: readable.as_deref(),
            source: &crate::diagnostics::faults::FailingSource,
        };
        let mut sink = crate::agent::test_support::RecordingSink::default();
        let mut io = LiveIo {
            context: &context,
            sink: &mut sink,
            run_id: "run_1".into(),
        };
        io.knowledge("k", "disk full")
            .unwrap()
            .into_iter()
            .map(|r| r.kb)
            .collect()
    }

    #[test]
    fn guidance_comes_only_from_knowledge_bases_the_tasks_owner_may_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("w.db")).unwrap();
        let operator = store
            .create_user("oper", Role::Operator, "password1", 0)
            .unwrap()
            .id;
        let admin = store
            .create_user("ada", Role::Admin, "password1", 0)
            .unwrap()
            .id;
        for kb in ["runbooks", "hr-private"] {
            store.create_kb(kb, &format!("/srv/{kb}"), 0).unwrap();
        }
        store
            .set_kb_readers("runbooks", &[Reader::Role(Role::Viewer)])
            .unwrap();
        store.create_group("hr", 0).unwrap();
        store
            .set_kb_readers("hr-private", &[Reader::Group("hr".into())])
            .unwrap();
        assert_eq!(kbs_found(&store, operator), ["runbooks"]);
        assert_eq!(kbs_found(&store, admin), ["runbooks", "hr-private"]);
        // An owner whose access cannot be resolved gets no guidance (fails closed).
        assert!(kbs_found(&store, 999).is_empty());
    }
}
