//! The diagnostic run handler: finds the task a `diagnostic` run works on, opens its data
//! source (the task's scenario pack, the server's configured pack, the live systems the
//! source registry names for the incident's service, or none — every tool then answers
//! "unavailable"), builds or restores the graph state, drives the graph and stores the
//! report on the task. Runs on a run worker thread.

use std::path::PathBuf;
use std::sync::Arc;

use super::driver::{drive, state_from_checkpoint, DriverContext, Models};
use super::facts::Window;
use super::faults::FailingSource;
use super::graph::GraphConfig;
use super::live::config::Registry;
use super::pack::ScenarioPack;
use super::playbooks::Playbooks;
use super::report;
use super::source::SourceError;
use super::source::{DiagnosticSource, SourceKind, SourceRecords};
use super::state::{AlertInfo, DiagnosticState, GRAPH_VERSION};
use crate::knowledge::KnowledgeSearch;
use crate::llm::model::ChatModel;
use crate::runs::{
    now_secs, DiagnosticHandler, DiagnosticInput, DiagnosticOutcome, TurnSink, TurnStop,
};
use crate::store::{
    AccessControl, DiagnosticStatus, DiagnosticTask, DiagnosticTasks, Incidents, Store, StoreError,
    TaskUpdate,
};

/// One model call's time limit.
pub const MODEL_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(90);

/// How far around an alert's start a task without a scenario looks.
const DEFAULT_WINDOW_SECS: i64 = 30 * 60;

/// Runs diagnostic tasks.
pub struct DiagnosticRunner {
    pub store: Arc<Store>,
    pub books: Arc<Playbooks>,
    pub config: GraphConfig,
    pub models: Models,
    pub knowledge: Option<Arc<dyn KnowledgeSearch>>,
    /// The scenario pack tasks without their own source read.
    pub default_source: Option<PathBuf>,
    /// The live systems tasks without a pack read (`[[diagnostics.sources]]`).
    pub live: Option<Arc<Registry>>,
    /// Fault injection for `warden eval diagnostics --fault tool_error`.
    pub failing_tools: bool,
}

/// A source with nothing connected: every tool answers "unavailable".
struct NoSource;

impl DiagnosticSource for NoSource {
    fn records(
        &self,
        _source: SourceKind,
        _start: Option<i64>,
        _end: Option<i64>,
    ) -> Result<SourceRecords, SourceError> {
        Ok(SourceRecords::Unavailable)
    }
}

fn stop_from(err: StoreError) -> TurnStop {
    match err {
        StoreError::Conflict(_) => TurnStop::Abandoned,
        other => TurnStop::Failed(format!("the diagnostic task could not be saved: {other}")),
    }
}

impl DiagnosticRunner {
    /// A runner on one chat model (planner and validator alike) with default budgets.
    pub fn new(
        store: Arc<Store>,
        model: Arc<dyn ChatModel>,
        model_name: &str,
        knowledge: Option<Arc<dyn KnowledgeSearch>>,
        books: Arc<Playbooks>,
        default_source: Option<PathBuf>,
    ) -> Self {
        Self {
            store,
            books,
            config: GraphConfig::default(),
            models: Models {
                planner: model.clone(),
                validator: model,
                name: model_name.to_owned(),
                call_timeout: MODEL_CALL_TIMEOUT,
            },
            knowledge,
            default_source,
            live: None,
            failing_tools: false,
        }
    }

    fn initial_state(
        &self,
        task: &DiagnosticTask,
        run_id: &str,
        pack: Option<&ScenarioPack>,
    ) -> Result<DiagnosticState, TurnStop> {
        let incident = self
            .store
            .incident(&task.incident_id)
            .map_err(|err| match err {
                StoreError::NotFound(_) => {
                    TurnStop::Failed(format!("incident `{}` no longer exists", task.incident_id))
                }
                other => stop_from(other),
            })?;
        // A pack made for this task gives the alert and window; the server's default pack
        // is only the data the tools read (and the time it covers).
        let own_pack = pack.filter(|_| task.source.is_some());
        let (alert, window) = match own_pack {
            Some(pack) => {
                let s = &pack.scenario;
                (
                    AlertInfo {
                        name: s.alert.name.clone(),
                        service: s.alert.service.clone(),
                        severity: s.alert.severity.clone(),
                        summary: s.alert.summary.clone(),
                        labels: s.alert.labels.clone(),
                    },
                    Window {
                        start: s.window.start,
                        end: s.window.end,
                    },
                )
            }
            None => {
                let start = incident.starts_at.unwrap_or(incident.created_at);
                let snapshot = pack.map(|p| Window {
                    start: p.scenario.window.start,
                    end: p.scenario.window.end,
                });
                let summary = incident
                    .annotations
                    .get("summary")
                    .or_else(|| incident.annotations.get("description"))
                    .cloned()
                    .unwrap_or_else(|| incident.title.clone());
                (
                    AlertInfo {
                        name: incident
                            .labels
                            .get("alertname")
                            .cloned()
                            .unwrap_or_else(|| incident.title.clone()),
                        service: incident.service.clone(),
                        severity: incident.severity.clone(),
                        summary,
                        labels: incident.labels.clone(),
                    },
                    snapshot.unwrap_or(Window {
                        start: start - DEFAULT_WINDOW_SECS,
                        end: incident
                            .ends_at
                            .unwrap_or_else(|| now_secs().max(start + DEFAULT_WINDOW_SECS)),
                    }),
                )
            }
        };
        let started_ms = now_secs() * 1000;
        Ok(DiagnosticState::new(
            &task.id,
            &task.incident_id,
            run_id,
            alert,
            window,
            started_ms,
        ))
    }

    fn update(
        &self,
        task: &DiagnosticTask,
        status: DiagnosticStatus,
        report: Option<&report::Report>,
    ) -> Result<(), TurnStop> {
        let thread = report::thread_id(&task.id);
        let update = TaskUpdate {
            id: &task.id,
            status,
            graph_version: GRAPH_VERSION,
            thread_id: &thread,
            report,
        };
        self.store
            .update_diagnostic_task(&update, now_secs())
            .map_err(stop_from)
    }
}

impl DiagnosticHandler for DiagnosticRunner {
    fn handle(
        &self,
        input: &DiagnosticInput,
        sink: &mut dyn TurnSink,
    ) -> Result<DiagnosticOutcome, TurnStop> {
        let task = match self.store.diagnostic_task_of_run(&input.run_id) {
            Ok(task) => task,
            Err(StoreError::NotFound(_)) => {
                return Ok(DiagnosticOutcome::Failed(
                    "the run has no diagnostic task".to_owned(),
                ))
            }
            Err(other) => return Err(stop_from(other)),
        };
        let source_dir: Option<PathBuf> = task
            .source
            .as_deref()
            .map(PathBuf::from)
            .or_else(|| self.default_source.clone());
        let pack = match source_dir.as_deref().map(ScenarioPack::load).transpose() {
            Ok(pack) => pack,
            Err(err) => {
                tracing::error!(task = %task.id, "diagnostic data source: {err}");
                self.update(&task, DiagnosticStatus::Failed, None)?;
                return Ok(DiagnosticOutcome::Failed(
                    "the diagnostic data source cannot be read (see the server log)".to_owned(),
                ));
            }
        };
        let restored = input.checkpoint.as_ref().and_then(state_from_checkpoint);
        let mut state = match restored {
            Some(state) if state.task_id == task.id => state,
            _ => self.initial_state(&task, &input.run_id, pack.as_ref())?,
        };
        self.update(&task, DiagnosticStatus::Running, None)?;
        let pack_source = pack.as_ref().map(ScenarioPack::source);
        // Live systems are picked by the alert's service and labels: a database
        // registered for other services or environments is never read for this incident.
        let live_source = match (&pack_source, &self.live) {
            (None, Some(registry)) => {
                match registry.connect_for(&state.alert.service, &state.alert.labels) {
                    Ok(live) => Some(live),
                    Err(err) => {
                        tracing::error!(task = %task.id, "diagnostic live sources: {err}");
                        self.update(&task, DiagnosticStatus::Failed, None)?;
                        return Ok(DiagnosticOutcome::Failed(
                            "the live diagnostic sources cannot be opened (see the server log)"
                                .to_owned(),
                        ));
                    }
                }
            }
            _ => None,
        };
        let source: &dyn DiagnosticSource = match (&pack_source, &live_source, self.failing_tools) {
            (_, _, true) => &FailingSource,
            (Some(source), _, false) => source,
            (None, Some(live), false) => live,
            (None, None, false) => &NoSource,
        };
        let readable = self.store.search_scope(task.owner_id);
        let context = DriverContext {
            store: &self.store,
            books: &self.books,
            config: &self.config,
            models: &self.models,
            knowledge: self.knowledge.as_deref(),
            readable: readable.as_deref(),
            source,
        };
        match drive(&context, &mut state, sink) {
            Ok(()) => {}
            Err(TurnStop::Failed(reason)) => {
                self.update(&task, DiagnosticStatus::Failed, None)?;
                return Ok(DiagnosticOutcome::Failed(reason));
            }
            Err(stop) => return Err(stop),
        }
        let report = report::build(&state);
        self.update(&task, DiagnosticStatus::Completed, Some(&report))?;
        Ok(DiagnosticOutcome::Done)
    }
}
