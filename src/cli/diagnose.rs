//! `warden diagnose`: runs one diagnostic task to its end on the default models — on a
//! scenario pack (`--scenario DIR`, in a throwaway data folder unless `--data` is given) or
//! on an incident already in a data folder (`--incident ID`, reading `--source` or no
//! source) — printing the graph's progress, then the report. Also the session that
//! `warden eval diagnostics` runs its packs in.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::Value;

use super::app::{AppSettings, Runners};
use crate::config::{ModelFlags, Needs};
use crate::diagnostics::faults::Fault;
use crate::diagnostics::live::config::Registry;
use crate::diagnostics::pack::ScenarioPack;
use crate::diagnostics::GRAPH_VERSION;
use crate::engine::Engine;
use crate::retrieval::{AddedBy, RetrievalConfig};
use crate::runs::{now_secs, EventBus};
use crate::store::{
    escape_untrusted, AccessControl, Accounts, DiagnosticStatus, DiagnosticTask, DiagnosticTasks,
    IncidentStatus, Incidents, NewIncident, Reader, Role, Runs, Store, MAX_EVENTS_PER_READ,
};

/// The longest one task may take before the command gives up on it.
const TASK_TIMEOUT: Duration = Duration::from_secs(900);

#[derive(Debug, clap::Args)]
pub struct DiagnoseArgs {
    /// A scenario pack folder: its alert becomes an incident and its sources are read.
    #[arg(long, conflicts_with = "incident")]
    scenario: Option<PathBuf>,
    /// An incident in the data folder (needs --data).
    #[arg(long, requires = "data")]
    incident: Option<String>,
    /// With --incident: a scenario pack whose sources the tools read (none: unavailable).
    #[arg(long)]
    source: Option<PathBuf>,
    /// The data folder (not while a server uses it); a throwaway one when unset.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Playbooks folder.
    #[arg(long, default_value = "kb/playbooks")]
    playbooks: PathBuf,
    /// Sample knowledge base searched for guidance (with a throwaway data folder).
    #[arg(long, default_value = "kb")]
    sample_kb: PathBuf,
    /// Print the whole report as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    models: ModelFlags,
}

/// A store, the models and the run workers that execute diagnostic runs.
pub struct Session {
    pub store: Arc<Store>,
    pub owner: i64,
    runners: Runners,
    _data: Option<tempfile::TempDir>,
}

/// How a session is set up.
pub struct SessionOptions<'a> {
    pub data: Option<&'a Path>,
    pub playbooks: &'a Path,
    pub sample_kb: Option<&'a Path>,
    pub fault: Option<Fault>,
    /// Live systems read by tasks without a pack.
    pub registry: Option<Arc<Registry>>,
}

impl Session {
    pub fn start(engine: &Engine, options: &SessionOptions<'_>) -> anyhow::Result<Self> {
        let chat = engine
            .chat_model(None)
            .context("no chat model loaded")?
            .clone();
        let embedder = engine
            .embed_model(None)
            .context("no embedding model loaded")?
            .clone();
        let temp = match options.data {
            Some(_) => None,
            None => Some(tempfile::tempdir()?),
        };
        let data_dir = options
            .data
            .map(Path::to_path_buf)
            .or_else(|| temp.as_ref().map(|t| t.path().to_path_buf()))
            .context("no data folder")?;
        crate::knowledge::ensure_data_dir(&data_dir)
            .with_context(|| format!("cannot create {}", data_dir.display()))?;
        let (store, library) =
            crate::knowledge::open_library(&data_dir, embedder, RetrievalConfig::default())?;
        if let (Some(kb), true) = (options.sample_kb, temp.is_some()) {
            library
                .add("sample", kb, AddedBy::Host)
                .with_context(|| format!("cannot add {}", kb.display()))?;
            // Every user reads the sample, as on a server's first start (the graph's
            // guidance comes only from what the task's owner may read).
            store.set_kb_readers("sample", &[Reader::Role(Role::Viewer)])?;
            library.sync("sample", &mut |_| {})?;
        }
        let settings = AppSettings {
            playbooks_dir: options.playbooks.to_path_buf(),
            fault: options.fault,
            diagnostics_registry: options.registry.clone(),
            ..AppSettings::new(options.sample_kb.unwrap_or(Path::new("kb")))
        };
        let runners = Runners::start(
            store.clone(),
            &chat,
            Some(Arc::new(library)),
            &settings,
            EventBus::default(),
            Arc::new(crate::metrics::Metrics::new()),
        )?;
        let owner = match store.user_by_name("diagnostician") {
            Ok(user) => user.id,
            Err(_) => {
                let password = crate::store::secret_hash(&format!("{:?}", Instant::now()));
                store
                    .create_user("diagnostician", Role::Operator, &password, now_secs())?
                    .id
            }
        };
        Ok(Self {
            store,
            owner,
            runners,
            _data: temp,
        })
    }

    /// An alert on `service` as a new incident.
    pub fn incident(&self, name: &str, summary: &str, service: &str) -> anyhow::Result<String> {
        let incident = self.store.add_incident(
            &NewIncident {
                id: None,
                title: format!("{name}: {summary}"),
                service: service.to_owned(),
                severity: "critical".to_owned(),
                status: IncidentStatus::Open,
            },
            now_secs(),
        )?;
        Ok(incident.id)
    }

    /// The pack's alert as a new incident.
    pub fn incident_for(&self, pack: &ScenarioPack) -> anyhow::Result<String> {
        let alert = &pack.scenario.alert;
        let incident = self.store.add_incident(
            &NewIncident {
                id: None,
                title: format!("{}: {}", alert.name, alert.summary),
                service: alert.service.clone(),
                severity: alert.severity.clone(),
                status: IncidentStatus::Open,
            },
            now_secs(),
        )?;
        Ok(incident.id)
    }

    /// Starts a task and waits for its end; `progress` sees each public node event.
    pub fn diagnose(
        &self,
        incident_id: &str,
        source: Option<&Path>,
        progress: &mut dyn FnMut(&Value),
    ) -> anyhow::Result<DiagnosticTask> {
        let source = source
            .map(|p| std::fs::canonicalize(p).with_context(|| format!("{}", p.display())))
            .transpose()?;
        let source_text = source.as_ref().map(|p| p.display().to_string());
        let task = self.store.start_diagnostic_task(
            self.owner,
            incident_id,
            source_text.as_deref(),
            GRAPH_VERSION,
            now_secs(),
        )?;
        self.runners.workers.wake();
        let run_id = task.run_id.clone().context("the task has no run")?;
        let started = Instant::now();
        let mut after = 0;
        loop {
            for event in self
                .store
                .events_after(self.owner, &run_id, after, MAX_EVENTS_PER_READ)?
            {
                after = event.seq;
                if event.event_type == "diagnostic.node" {
                    if let Ok(data) = serde_json::from_str::<Value>(&event.data) {
                        progress(&data);
                    }
                }
            }
            let current = self.store.diagnostic_task(self.owner, &task.id)?;
            let run = self.store.run(self.owner, &run_id)?;
            if run.status.is_terminal()
                && matches!(
                    current.status,
                    DiagnosticStatus::Completed | DiagnosticStatus::Failed
                )
            {
                if current.status == DiagnosticStatus::Failed {
                    anyhow::bail!(
                        "the diagnostic failed: {}",
                        run.failure_reason.unwrap_or_default()
                    );
                }
                return Ok(current);
            }
            if run.status.is_terminal() && started.elapsed() > Duration::from_secs(5) {
                anyhow::bail!("the diagnostic run ended {:?} without a report", run.status);
            }
            if started.elapsed() > TASK_TIMEOUT {
                anyhow::bail!("the diagnostic did not finish in {TASK_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.runners.stop();
    }
}

pub fn run(args: DiagnoseArgs) -> anyhow::Result<ExitCode> {
    if args.scenario.is_none() && args.incident.is_none() {
        anyhow::bail!("say what to diagnose: --scenario DIR or --incident ID (with --data)");
    }
    let pack = args
        .scenario
        .as_deref()
        .map(ScenarioPack::load)
        .transpose()
        .map_err(|err| anyhow::anyhow!("{err}"))?;
    let engine = super::load_engine(&args.models, Needs::Both)?;
    let session = Session::start(
        &engine,
        &SessionOptions {
            data: args.data.as_deref(),
            playbooks: &args.playbooks,
            sample_kb: Some(&args.sample_kb),
            fault: None,
            registry: None,
        },
    )?;
    let (incident, source) = match (&pack, &args.incident) {
        (Some(pack), _) => (session.incident_for(pack)?, Some(pack.dir().to_path_buf())),
        (None, Some(id)) => {
            session
                .store
                .incident(id)
                .with_context(|| format!("no incident `{id}` in the data folder"))?;
            (id.clone(), args.source.clone())
        }
        (None, None) => unreachable_args()?,
    };
    let task = session.diagnose(&incident, source.as_deref(), &mut |node| {
        // Summaries quote evidence (log lines, incident titles): shown escaped.
        eprintln!(
            "{:<24} {}",
            escape_untrusted(node["node"].as_str().unwrap_or("")),
            escape_untrusted(node["summary"].as_str().unwrap_or(""))
        );
    })?;
    let Some(report) = task.report else {
        anyhow::bail!("diagnostic task {} ended without a report", task.id);
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{}", escape_untrusted(&report.summary));
        println!(
            "task {} · recovery {} · execution permitted: {}",
            task.id,
            report.recovery_mode.as_str(),
            report.execution_permitted
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn unreachable_args() -> anyhow::Result<(String, Option<PathBuf>)> {
    anyhow::bail!("say what to diagnose: --scenario DIR or --incident ID (with --data)")
}
