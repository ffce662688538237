//! The one place that assembles what answers runs — the chat agent with its compaction
//! worker, the diagnostic runner, and the run workers that drive both — for `warden
//! serve`, `warden diagnose` and every `warden eval`, so an eval scores exactly the agent
//! and graph the server runs.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;

use crate::agent::compaction::{CompactionSettings, Compactor};
use crate::agent::policy::PolicyConfig;
use crate::agent::{Agent, AgentConfig};
use crate::diagnostics::faults::Fault;
use crate::diagnostics::live::config::Registry;
use crate::diagnostics::{DiagnosticRunner, Playbooks};
use crate::engine::ChatModelHandle;
use crate::knowledge::{KnowledgeSearch, LibrarySearch};
use crate::llm::model::{ChatModel, EngineChatModel};
use crate::metrics::Metrics;
use crate::retrieval::Library;
use crate::runs::{CompactionWorker, EventBus, RunConfig, RunWorkers};
use crate::store::Store;

/// How the runners are set up; `AppSettings::new` gives the server's defaults.
pub struct AppSettings {
    /// Skill files the agent offers (`SAMPLE/skills`).
    pub skills_dir: PathBuf,
    /// Diagnostic playbooks (`SAMPLE/playbooks`).
    pub playbooks_dir: PathBuf,
    pub agent_policy: PolicyConfig,
    pub max_answer_tokens: usize,
    /// Run worker threads.
    pub run_workers: usize,
    /// Scenario pack read by diagnostic tasks that name no source.
    pub diagnostics_source: Option<PathBuf>,
    /// Live systems read by diagnostic tasks without a pack (`--diagnostics-config`).
    pub diagnostics_registry: Option<Arc<Registry>>,
    /// A fault injected into the diagnostic runner (`warden eval diagnostics --fault`).
    pub fault: Option<Fault>,
}

impl AppSettings {
    /// The server's defaults, with skills and playbooks from the sample folder.
    pub fn new(sample_kb: &Path) -> Self {
        let agent = AgentConfig::default();
        Self {
            skills_dir: sample_kb.join("skills"),
            playbooks_dir: sample_kb.join("playbooks"),
            agent_policy: agent.policy,
            max_answer_tokens: agent.max_answer_tokens,
            run_workers: 1,
            diagnostics_source: None,
            diagnostics_registry: None,
            fault: None,
        }
    }
}

/// The started runners.
pub struct Runners {
    pub workers: RunWorkers,
    pub compactions: CompactionWorker,
    /// Runs a restart interrupted, now resumed.
    pub recovered: Vec<String>,
}

impl Runners {
    /// Recovers interrupted runs and starts the workers: the agent answers chat turns
    /// (searching `library` when there is one), the diagnostic runner diagnostic tasks.
    pub fn start(
        store: Arc<Store>,
        chat: &ChatModelHandle,
        library: Option<Arc<Library>>,
        settings: &AppSettings,
        bus: EventBus,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<Self> {
        let knowledge = library.map(|l| Arc::new(LibrarySearch(l)) as Arc<dyn KnowledgeSearch>);
        let chat_model: Arc<dyn ChatModel> = Arc::new(EngineChatModel(chat.clone()));
        let agent_config = AgentConfig {
            policy: settings.agent_policy.clone(),
            skills_dir: settings.skills_dir.clone(),
            max_answer_tokens: settings.max_answer_tokens,
            ..AgentConfig::default()
        };
        let compactor = Compactor::new(
            store.clone(),
            chat_model.clone(),
            CompactionSettings::for_window(
                chat_model.context_length(),
                agent_config.history_tokens,
            ),
        );
        let compactions = CompactionWorker::start(store.clone(), Arc::new(compactor));
        let agent = Agent::new(
            store.clone(),
            chat_model.clone(),
            knowledge.clone(),
            agent_config,
        )
        .with_compactions(compactions.clone());
        let books = Playbooks::load(&settings.playbooks_dir).with_context(|| {
            format!(
                "cannot load the diagnostic playbooks in {}",
                settings.playbooks_dir.display()
            )
        })?;
        let mut diagnostics = DiagnosticRunner::new(
            store.clone(),
            chat_model,
            &chat.info().id,
            knowledge,
            Arc::new(books),
            settings.diagnostics_source.clone(),
        );
        diagnostics.live = settings.diagnostics_registry.clone();
        if let Some(fault) = settings.fault {
            diagnostics.inject(fault);
        }
        let config = RunConfig {
            workers: settings.run_workers,
            ..RunConfig::default()
        };
        let (workers, recovered) = RunWorkers::start(
            store,
            Arc::new(agent),
            Arc::new(diagnostics),
            bus,
            config,
            metrics,
        )
        .context("cannot recover interrupted runs")?;
        Ok(Self {
            workers,
            compactions,
            recovered,
        })
    }

    /// Stops the run workers and the compaction worker (each finishes what it holds).
    pub fn stop(&self) {
        self.workers.stop();
        self.compactions.stop();
    }
}
