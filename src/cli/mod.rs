//! The command line: `serve`, `ask`, `models`, `bench`, `kb`, `eval`, `user`, `token`,
//! `incident`, `diagnose`, `audit`, `doctor`, `backup`. Parses flags with clap, turns them
//! into validated configuration, and runs the command.

mod accounts;
mod app;
mod ask;
mod bench;
mod bench_context;
mod bench_serve;
mod bench_upstream;
mod diagnose;
mod eval;
mod eval_answers;
mod eval_conversations;
mod eval_diagnostics;
mod eval_live;
mod groups;
mod incidents;
mod kb;
mod maintenance;
mod models;
mod serve;
mod sources;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::ModelFlags;

#[derive(Debug, Parser)]
#[command(
    name = "warden",
    version = crate::build_info::LONG_VERSION,
    about = "Self-hosted AI assistant for air-gapped networks"
)]
struct Cli {
    /// How log lines on stderr look: `text` for people, `json` (one object a line, with
    /// the request's or run's trace id in its span fields) for a log pipeline.
    #[arg(long, global = true, env = "WARDEN_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the HTTP server (OpenAI-compatible API).
    Serve(serve::ServeArgs),
    /// Ask the chat model one question and stream the answer.
    Ask(ask::AskArgs),
    /// List or verify model files.
    Models {
        #[command(subcommand)]
        command: models::ModelsCommand,
    },
    /// Benchmarks; print one JSON object per run.
    Bench {
        #[command(subcommand)]
        command: bench::BenchCommand,
    },
    /// Knowledge bases: add folders, sync, search.
    Kb {
        #[command(subcommand)]
        command: kb::KbCommand,
    },
    /// Quality evaluations; print one JSON object per run.
    Eval {
        #[command(subcommand)]
        command: eval::EvalCommand,
    },
    /// Users: add, list, disable, groups.
    User {
        #[command(subcommand)]
        command: accounts::UserCommand,
    },
    /// Groups of users (knowledge-base readers name them as `group:NAME`).
    Group {
        #[command(subcommand)]
        command: groups::GroupCommand,
    },
    /// API tokens: create, list, revoke.
    Token {
        #[command(subcommand)]
        command: accounts::TokenCommand,
    },
    /// Diagnose an incident or a scenario pack with the diagnostic graph; prints the report.
    Diagnose(diagnose::DiagnoseArgs),
    /// Live diagnostic sources: check their health, read what they answer.
    Sources {
        #[command(subcommand)]
        command: sources::SourcesCommand,
    },
    /// Incidents: open one by hand, list them.
    Incident {
        #[command(subcommand)]
        command: incidents::IncidentCommand,
    },
    /// The audit log.
    Audit {
        #[command(subcommand)]
        command: maintenance::AuditCommand,
    },
    /// Check the data folder's database (integrity, schema, counts).
    Doctor(maintenance::DoctorArgs),
    /// Write a consistent copy of the database, safe while the server runs.
    Backup(maintenance::BackupArgs),
}

/// Flags every command that touches stored data takes.
#[derive(Debug, Clone, clap::Args)]
pub struct DataFlags {
    /// Folder for Warden's data (database, indexes).
    #[arg(long, env = "WARDEN_DATA", default_value = "data")]
    pub data: PathBuf,
}

pub fn run() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    // Everything Warden creates (database, indexes, backups, logs) is its own user's alone,
    // from the first file on, whatever umask it was started with.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Ask(args) => ask::run(args),
        Command::Models { command } => models::run(command),
        Command::Bench { command } => bench::run(command),
        Command::Kb { command } => kb::run(command),
        Command::Eval { command } => eval::run(command),
        Command::User { command } => accounts::run_user(command),
        Command::Group { command } => groups::run(command),
        Command::Token { command } => accounts::run_token(command),
        Command::Incident { command } => incidents::run(command),
        Command::Sources { command } => sources::run(command),
        Command::Diagnose(args) => diagnose::run(args),
        Command::Audit { command } => maintenance::run_audit(command),
        Command::Doctor(args) => maintenance::run_doctor(args),
        Command::Backup(args) => maintenance::run_backup(args),
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("WARDEN_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
}

/// Loads the engine for `flags`, failing when a needed model did not load.
fn load_engine(
    flags: &ModelFlags,
    needs: crate::config::Needs,
) -> anyhow::Result<crate::engine::Engine> {
    let config = crate::config::engine_config(flags, needs)?;
    let engine = crate::engine::Engine::load(&config);
    if let Some(failure) = engine.failures().first() {
        anyhow::bail!("model `{}` did not load: {}", failure.id, failure.error);
    }
    Ok(engine)
}
