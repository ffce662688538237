//! `warden sources check CONFIG` and `warden sources read CONFIG --kind KIND`: what a source
//! registry's live systems answer, outside any diagnosis — each source's health (a
//! PostgreSQL source must refuse a write), and the records one source kind holds for a
//! time range, exactly as the diagnostic tools would read them (masked).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use serde_json::json;

use crate::diagnostics::live::config::Registry;
use crate::diagnostics::playbooks::Playbooks;
use crate::diagnostics::source::{DiagnosticSource, SourceKind, SourceRecords};

#[derive(Debug, clap::Subcommand)]
pub enum SourcesCommand {
    /// Check every source's health; exit 1 when one is not healthy.
    Check {
        /// The source registry (TOML, `[[diagnostics.sources]]`).
        config: PathBuf,
        /// The playbooks whose `[[metric]]` PromQL Prometheus sources run.
        #[arg(long, default_value = "kb/playbooks")]
        playbooks: PathBuf,
    },
    /// Print the records of one source kind over the last minutes, as JSON.
    Read {
        config: PathBuf,
        /// The playbooks whose `[[metric]]` PromQL Prometheus sources run.
        #[arg(long, default_value = "kb/playbooks")]
        playbooks: PathBuf,
        /// pg_log, lock_waits, transactions, slow_queries, pool_metrics, app_log,
        /// nginx_access, nginx_error, changes or host_metrics.
        #[arg(long)]
        kind: String,
        /// How far back to read.
        #[arg(long, default_value_t = 30)]
        minutes: u32,
        /// Only the sources registered for this service (default: every source).
        #[arg(long)]
        service: Option<String>,
    },
}

/// The registry in `config`, its Prometheus sources running the PromQL of the playbooks in
/// `playbooks`.
pub fn load_registry(config: &Path, playbooks: &Path) -> anyhow::Result<Registry> {
    let books = Playbooks::load(playbooks)
        .with_context(|| format!("cannot load the playbooks in {}", playbooks.display()))?;
    Registry::load(config, books.metric_queries()).map_err(|err| anyhow::anyhow!("{err}"))
}

pub fn run(command: SourcesCommand) -> anyhow::Result<ExitCode> {
    match command {
        SourcesCommand::Check { config, playbooks } => {
            let registry = load_registry(&config, &playbooks)?;
            let health = registry
                .connect(None)
                .map_err(|err| anyhow::anyhow!("{err}"))?
                .health();
            let healthy = health.iter().all(|h| h.ok);
            println!(
                "{}",
                serde_json::to_string_pretty(&json!({ "sources": health }))?
            );
            Ok(if healthy {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        SourcesCommand::Read {
            config,
            playbooks,
            kind,
            minutes,
            service,
        } => {
            let kind: SourceKind = kind.parse().map_err(|_| {
                anyhow::anyhow!(
                    "unknown kind `{kind}`: use one of {}",
                    SourceKind::ALL.map(SourceKind::as_str).join(", ")
                )
            })?;
            let registry = load_registry(&config, &playbooks)?;
            let live = registry
                .connect(service.as_deref())
                .map_err(|err| anyhow::anyhow!("{err}"))?;
            let end = crate::runs::now_secs();
            let start = end - i64::from(minutes) * 60;
            let records = match live
                .records(kind, Some(start), Some(end))
                .map_err(|err| anyhow::anyhow!("{err}"))?
            {
                SourceRecords::Unavailable => {
                    anyhow::bail!("no registered source answers {kind}")
                }
                SourceRecords::Records(records) => records,
            };
            let fields: Vec<&serde_json::Value> = records.iter().map(|r| &r.fields).collect();
            println!(
                "{}",
                serde_json::to_string_pretty(&json!({ "kind": kind, "records": fields }))?
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}
