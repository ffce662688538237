//! `warden serve`: loads the models, binds the address, serves HTTP until Ctrl-C/SIGTERM.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use super::app::{AppSettings, Runners};
use super::DataFlags;
use crate::agent::policy::PolicyConfig;
use crate::config::{
    AlertFlags, ConnectionFlags, KbRootFlags, ModelFlags, QuotaFlags, RetrievalFlags, ServeConfig,
};
use crate::diagnostics::live::config::Registry;
use crate::engine::Engine;
use crate::http::{
    self, AllowedHosts, AppState, LoginLimiter, NetworkPolicy, SessionConfig, UserSlots,
};
use crate::metrics::Metrics;
use crate::retrieval::{AddedBy, Library, RetrievalConfig, RetrievalError};
use crate::runs::{EventBus, RunService};
use crate::store::{AccessControl, Accounts, Reader, Role, Store};

/// The knowledge base the sample folder becomes.
const SAMPLE_KB: &str = "sample";

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on. Binds loopback by default; choose 0.0.0.0 deliberately.
    #[arg(long, env = "WARDEN_ADDR", default_value = "127.0.0.1:8080")]
    addr: SocketAddr,
    #[command(flatten)]
    data: DataFlags,
    #[command(flatten)]
    models: ModelFlags,
    #[command(flatten)]
    retrieval: RetrievalFlags,
    #[command(flatten)]
    alerts: AlertFlags,
    #[command(flatten)]
    kb_roots: KbRootFlags,
    #[command(flatten)]
    quotas: QuotaFlags,
    #[command(flatten)]
    connections: ConnectionFlags,
    /// Folder loaded as the `sample` knowledge base on first start (when none exist yet).
    #[arg(long, env = "WARDEN_SAMPLE_KB", default_value = "kb")]
    sample_kb: PathBuf,
    /// Keep every knowledge base in sync with its folder, checking every N seconds (0: off).
    #[arg(long, env = "WARDEN_WATCH_SECONDS", default_value_t = 0)]
    watch: u64,
    /// Threads answering chat runs (each holds one run while the model works on it).
    #[arg(long, env = "WARDEN_RUN_WORKERS", default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    run_workers: u16,
    /// Most tokens in one chat answer.
    #[arg(long, env = "WARDEN_MAX_ANSWER_TOKENS", default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..=32768))]
    max_answer_tokens: u32,
    /// Browser sessions end after this many minutes without use.
    #[arg(long, env = "WARDEN_SESSION_IDLE_MINUTES", default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=10080))]
    session_idle_minutes: u32,
    /// Browser sessions end this many hours after sign-in, however busy.
    #[arg(long, env = "WARDEN_SESSION_HOURS", default_value_t = 12, value_parser = clap::value_parser!(u32).range(1..=720))]
    session_hours: u32,
    /// Mark cookies `Secure` (set this when users reach Warden over HTTPS via a proxy).
    #[arg(long, env = "WARDEN_SECURE_COOKIES")]
    secure_cookies: bool,
    /// Seconds a run's event stream may stay silent before it carries a `: keep-alive`
    /// comment (set it below the idle timeout of any proxy in front of Warden).
    #[arg(long, env = "WARDEN_SSE_HEARTBEAT_SECONDS", default_value_t = crate::config::DEFAULT_HEARTBEAT.as_secs(), value_parser = clap::value_parser!(u64).range(1..=300))]
    sse_heartbeat_seconds: u64,
    /// URL users reach Warden at (`https://warden.example.org`); repeat or separate with
    /// commas for several. Requests naming another host are refused (IP addresses and
    /// `localhost` always work), so a rebinding web page cannot drive the server.
    #[arg(long, env = "WARDEN_PUBLIC_ORIGIN", value_delimiter = ',')]
    public_origin: Vec<String>,
    /// The reverse proxy's address: only connections from it have `X-Forwarded-For`
    /// believed (its last entry), for login limiting and logs.
    #[arg(long, env = "WARDEN_TRUSTED_PROXY")]
    trusted_proxy: Option<std::net::IpAddr>,
    /// Bearer token Prometheus presents to scrape `/metrics` (admins' API tokens work too).
    #[arg(long, env = "WARDEN_METRICS_TOKEN", hide_env_values = true)]
    metrics_token: Option<String>,
    /// Scenario pack folder the diagnostic tools read for tasks without their own source.
    #[arg(
        long,
        env = "WARDEN_DIAGNOSTICS_SOURCE",
        conflicts_with = "diagnostics_config"
    )]
    diagnostics_source: Option<PathBuf>,
    /// Source registry (TOML, `[[diagnostics.sources]]`): the live, read-only systems
    /// diagnostic tasks read (unset, with no pack: every diagnostic tool answers
    /// "unavailable").
    #[arg(long, env = "WARDEN_DIAGNOSTICS_CONFIG")]
    diagnostics_config: Option<PathBuf>,
    /// Let the person who requested a recovery approve it alone. Off by default: the
    /// requester's confirmation submits it, and another operator or admin approves it.
    #[arg(long, env = "WARDEN_ALLOW_SELF_APPROVAL")]
    allow_self_approval: bool,
    /// TOML file of the chat agent's budgets and thresholds (README: "The chat agent").
    #[arg(long, env = "WARDEN_AGENT_POLICY")]
    agent_policy: Option<PathBuf>,
}

/// The file a server holds locked while it uses a data folder.
const LOCK_FILE: &str = "warden.lock";

pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let config = ServeConfig::new(
        args.addr,
        args.data.data.clone(),
        &args.models,
        &args.quotas,
    )?;
    let alerts = args.alerts.webhook()?;
    let connections = args.connections.limits();
    crate::knowledge::ensure_data_dir(&config.data_dir)
        .with_context(|| format!("cannot create data folder {}", config.data_dir.display()))?;
    let _lock = lock_data_folder(&config.data_dir)?;
    match crate::knowledge::make_data_private(&config.data_dir) {
        Ok(0) => {}
        Ok(changed) => tracing::info!(changed, "made the data folder private to its owner"),
        Err(err) => tracing::warn!("cannot make the data folder private: {err}"),
    }
    let store = crate::knowledge::open_store(&config.data_dir)?;
    store.set_queued_runs_limit(Some(config.max_queued_runs_per_user));
    store.set_running_runs_limit(Some(
        args.quotas
            .max_running_runs_per_user
            .unwrap_or(u32::from(args.run_workers).div_ceil(2)),
    ));
    store.set_active_diagnostics_limit(Some(args.quotas.max_diagnostics_per_user));
    store.set_second_approver_required(!args.allow_self_approval);
    let network = NetworkPolicy {
        allowed_hosts: AllowedHosts::from_origins(&args.public_origin)
            .map_err(|message| anyhow::anyhow!(message))?,
        trusted_proxy: args.trusted_proxy,
    };
    let metrics_token = match args.metrics_token.as_deref().map(str::trim) {
        Some(token) if token.len() < 16 => {
            anyhow::bail!("--metrics-token must be at least 16 characters")
        }
        other => other.map(Arc::<str>::from),
    };
    let metrics = Arc::new(Metrics::new());
    let engine = Engine::load_observed(&config.engine, metrics.clone());
    for model in engine.models() {
        tracing::info!(model = %model.id, kind = ?model.kind, arch = %model.architecture, "model loaded");
    }
    for failure in engine.failures() {
        tracing::error!(model = %failure.id, path = %failure.path, "model unavailable: {}", failure.error);
    }
    let retrieval = RetrievalConfig {
        roots: args.kb_roots.policy(&args.models.models)?,
        ..args.retrieval.config()?
    };
    let library = open_library(&engine, store.clone(), &config.data_dir, retrieval);
    if let Some(library) = &library {
        load_sample_on_first_start(
            library.clone(),
            store.clone(),
            &args.sample_kb,
            metrics.clone(),
        );
        if args.watch > 0 {
            watch_folders(
                library.clone(),
                Duration::from_secs(args.watch),
                metrics.clone(),
            );
        }
    }
    let registry = args
        .diagnostics_config
        .as_deref()
        .map(|path| {
            super::sources::load_registry(path, &args.sample_kb.join("playbooks")).map(Arc::new)
        })
        .transpose()?;
    let runs = start_runs(
        &engine,
        store.clone(),
        library.clone(),
        &args,
        registry.clone(),
        metrics.clone(),
    )?;
    let (stop_sender, stop_receiver) = tokio::sync::watch::channel(false);
    forget_expired_sessions(store.clone());
    let bootstrap = store
        .bootstrap_token(crate::runs::now_secs())
        .context("cannot prepare the first-admin bootstrap token")?;
    let state = AppState {
        engine: Arc::new(engine),
        library,
        store,
        runs,
        sessions: SessionConfig {
            idle_secs: i64::from(args.session_idle_minutes) * 60,
            absolute_secs: i64::from(args.session_hours) * 3600,
            secure_cookies: args.secure_cookies,
        },
        login_limiter: Arc::new(LoginLimiter::default()),
        limits: crate::http::HttpLimits {
            heartbeat: Duration::from_secs(args.sse_heartbeat_seconds),
            connections,
            ..config.http
        },
        v1_slots: Arc::new(UserSlots::new(config.http.max_v1_requests_per_user)),
        alerts,
        network,
        metrics,
        metrics_token,
        refusals: Arc::default(),
        anonymous_bodies: Arc::new(crate::http::AnonymousBodies::new(
            connections.max_anonymous_bodies,
        )),
        shutdown: stop_receiver,
        diagnostic_sources: registry,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .worker_threads(2)
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(config.addr)
            .await
            .with_context(|| format!("cannot listen on {}", config.addr))?;
        let local = listener
            .local_addr()
            .context("cannot read the bound address")?;
        println!("Warden listening on http://{local}");
        if let Some(token) = bootstrap {
            println!(
                "No users yet. Open http://{local}/#bootstrap={token} within 24 hours to create \
                 the first administrator (or run `warden user add NAME --role admin --password-stdin`)."
            );
        }
        let shutdown = async move {
            shutdown_signal().await;
            // Event streams end now; runs in progress resume at the next start.
            let _ = stop_sender.send(true);
        };
        http::serve(listener, state, shutdown)
            .await
            .context("HTTP server failed")
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Holds `data_dir/warden.lock` for the life of the server: one server per data folder,
/// so at start every run still marked running belongs to a dead process.
fn lock_data_folder(data_dir: &Path) -> anyhow::Result<std::fs::File> {
    let path = data_dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => anyhow::bail!(
            "another Warden server is using the data folder {}; stop it or choose another --data",
            data_dir.display()
        ),
        Err(std::fs::TryLockError::Error(err)) => {
            Err(err).with_context(|| format!("cannot lock {}", path.display()))
        }
    }
}

/// Deletes timed-out browser sessions every few minutes.
fn forget_expired_sessions(store: Arc<Store>) {
    let spawned = std::thread::Builder::new()
        .name("session-sweeper".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_secs(300));
            if let Err(err) = store.delete_expired_sessions(crate::runs::now_secs()) {
                tracing::warn!("cannot delete expired sessions: {err}");
            }
        });
    if let Err(err) = spawned {
        tracing::warn!("cannot start the session sweeper: {err}");
    }
}

/// Recovers interrupted runs and starts the run workers (none without a chat model), as
/// the one app builder wires them.
fn start_runs(
    engine: &Engine,
    store: Arc<Store>,
    library: Option<Arc<Library>>,
    args: &ServeArgs,
    registry: Option<Arc<Registry>>,
    metrics: Arc<Metrics>,
) -> anyhow::Result<RunService> {
    let bus = EventBus::default();
    let Some(chat) = engine.chat_model(None) else {
        tracing::warn!("no chat model loaded: chat messages are refused until one is");
        return Ok(RunService::new(store, bus, None));
    };
    let settings = AppSettings {
        agent_policy: agent_policy(args.agent_policy.as_deref())?,
        max_answer_tokens: args.max_answer_tokens as usize,
        run_workers: usize::from(args.run_workers),
        diagnostics_source: args.diagnostics_source.clone(),
        diagnostics_registry: registry,
        ..AppSettings::new(&args.sample_kb)
    };
    let runners = Runners::start(
        store.clone(),
        chat,
        library,
        &settings,
        bus.clone(),
        metrics,
    )?;
    if !runners.recovered.is_empty() {
        tracing::warn!(
            count = runners.recovered.len(),
            "resuming runs interrupted by a restart"
        );
    }
    Ok(RunService::new(store, bus, Some(runners.workers)))
}

/// The knowledge-base library, when the embedding model loaded and the data folder opens.
fn open_library(
    engine: &Engine,
    store: Arc<Store>,
    data_dir: &Path,
    config: RetrievalConfig,
) -> Option<Arc<Library>> {
    let embedder = engine.embed_model(None)?;
    match crate::knowledge::open_library_on(store, data_dir, embedder.clone(), config) {
        Ok(library) => Some(Arc::new(library)),
        Err(err) => {
            tracing::error!("knowledge bases unavailable: {err}");
            None
        }
    }
}

/// The agent's policy numbers: the defaults, or a policy file over them.
fn agent_policy(file: Option<&Path>) -> anyhow::Result<PolicyConfig> {
    let Some(file) = file else {
        return Ok(PolicyConfig::default());
    };
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read the agent policy {}", file.display()))?;
    crate::agent::policy_file::parse(&text)
        .with_context(|| format!("invalid agent policy {}", file.display()))
}

/// On a fresh data folder, ingests the sample knowledge base in the background, readable
/// by every user.
fn load_sample_on_first_start(
    library: Arc<Library>,
    store: Arc<Store>,
    folder: &Path,
    metrics: Arc<Metrics>,
) {
    let first_start = matches!(library.list(), Ok(kbs) if kbs.is_empty());
    if !first_start || !folder.is_dir() {
        return;
    }
    let folder = folder.to_path_buf();
    let spawned = std::thread::Builder::new()
        .name("sample-kb".into())
        .spawn(move || {
            // Added by the server itself: not subject to --kb-roots.
            let result = library
                .add(SAMPLE_KB, &folder, AddedBy::Host)
                .map_err(|e| e.to_string())
                .and_then(|_| {
                    store
                        .set_kb_readers(SAMPLE_KB, &[Reader::Role(Role::Viewer)])
                        .map_err(|e| e.to_string())
                })
                .and_then(|_| {
                    measured_sync(&library, &metrics, SAMPLE_KB).map_err(|e| e.to_string())
                });
            match result {
                Ok(report) => tracing::info!(
                    chunks = report.chunks_indexed,
                    "sample knowledge base loaded from {}",
                    folder.display()
                ),
                Err(err) => tracing::warn!("sample knowledge base not loaded: {err}"),
            }
        });
    if let Err(err) = spawned {
        tracing::warn!("cannot start the sample knowledge-base thread: {err}");
    }
}

/// Re-syncs any knowledge base whose folder changed, every `interval`.
fn watch_folders(library: Arc<Library>, interval: Duration, metrics: Arc<Metrics>) {
    let spawned = std::thread::Builder::new().name("kb-watch".into()).spawn(move || {
        let mut seen: HashMap<String, u64> = HashMap::new();
        loop {
            std::thread::sleep(interval);
            let Ok(kbs) = library.list() else { continue };
            for kb in kbs {
                let Ok(fingerprint) = library.folder_fingerprint(&kb.name) else { continue };
                if seen.insert(kb.name.clone(), fingerprint) == Some(fingerprint) {
                    continue;
                }
                match measured_sync(&library, &metrics, &kb.name) {
                    Ok(report) if report.added + report.updated + report.deleted > 0 => tracing::info!(
                        kb = %kb.name, added = report.added, updated = report.updated, deleted = report.deleted, "folder changed: synced"
                    ),
                    Ok(_) => {}
                    // Someone else is syncing it; the next check catches up.
                    Err(RetrievalError::SyncInProgress(_)) => {
                        seen.remove(&kb.name);
                    }
                    Err(err) => tracing::warn!(kb = %kb.name, "watch sync failed: {err}"),
                }
            }
        }
    });
    if let Err(err) = spawned {
        tracing::warn!("cannot start the folder watcher: {err}");
    }
}

/// Syncs a knowledge base without progress reports, recording its duration and result.
fn measured_sync(
    library: &Library,
    metrics: &Metrics,
    name: &str,
) -> Result<crate::retrieval::SyncReport, RetrievalError> {
    let started = std::time::Instant::now();
    let result = library.sync(name, &mut |_| {});
    let outcome = match &result {
        Ok(_) => "completed",
        Err(RetrievalError::Cancelled) => "cancelled",
        // Nothing ran: another sync holds the knowledge base.
        Err(RetrievalError::SyncInProgress(_)) => return result,
        Err(_) => "failed",
    };
    metrics.kb_sync(name, outcome, started.elapsed());
    result
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
    tracing::info!("shutting down");
}
