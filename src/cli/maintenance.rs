//! `warden audit tail`, `warden doctor` and `warden backup FILE`: reading the audit log,
//! checking a data folder's health, and copying its database while the server runs.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;
use serde_json::json;

use super::accounts::open;
use super::DataFlags;
use crate::store::{Audit, Store, MAX_AUDIT_ROWS_PER_READ};

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// The newest audit rows, oldest of them first.
    Tail {
        #[arg(long, default_value_t = 50)]
        limit: u32,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        data: DataFlags,
    },
}

#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    data: DataFlags,
}

#[derive(Debug, clap::Args)]
pub struct BackupArgs {
    /// The new backup file (must not exist yet).
    file: PathBuf,
    #[command(flatten)]
    data: DataFlags,
}

pub fn run_audit(command: AuditCommand) -> anyhow::Result<ExitCode> {
    let AuditCommand::Tail { limit, json, data } = command;
    if limit == 0 || limit > MAX_AUDIT_ROWS_PER_READ {
        anyhow::bail!("--limit must be between 1 and {MAX_AUDIT_ROWS_PER_READ}");
    }
    let mut rows = open(&data)?.audit_tail(limit, None)?;
    rows.reverse();
    for row in rows {
        if json {
            println!("{}", serde_json::to_string(&row)?);
        } else {
            // Audit rows are escaped when they are written (`Audit::record`), so they print as stored.
            println!(
                "{} {:<16} {:<16} {:<24} {}",
                row.at,
                row.actor,
                row.action,
                row.target.as_deref().unwrap_or("-"),
                row.outcome.as_str()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Checks the database: it opens at a known schema and `PRAGMA integrity_check` is ok;
/// reports row counts and runs by status. Exit 1 when a check fails.
pub fn run_doctor(args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let store = open(&args.data)?;
    let problems = store
        .integrity_check()
        .context("integrity check failed to run")?;
    let counts = store.health_counts().context("cannot count stored rows")?;
    let healthy = problems.is_empty();
    if args.json {
        let report = json!({
            "data": args.data.data.display().to_string(),
            "integrity_ok": healthy,
            "integrity_problems": problems,
            "schema_version": counts.schema_version,
            "users": counts.users,
            "conversations": counts.conversations,
            "runs_by_status": counts.runs_by_status,
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("data folder     {}", args.data.data.display());
        println!("schema version  {}", counts.schema_version);
        println!("integrity       {}", if healthy { "ok" } else { "FAILED" });
        for problem in &problems {
            println!("  {problem}");
        }
        println!("users           {}", counts.users);
        println!("conversations   {}", counts.conversations);
        for (status, count) in &counts.runs_by_status {
            println!("runs {status:<10} {count}");
        }
    }
    Ok(if healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Writes a consistent copy of the database (`VACUUM INTO`), safe while the server runs,
/// then checks the copy's integrity.
pub fn run_backup(args: BackupArgs) -> anyhow::Result<ExitCode> {
    if args.file.exists() {
        anyhow::bail!("{} already exists; choose a new file", args.file.display());
    }
    let store = open(&args.data)?;
    store
        .backup_to(&args.file)
        .with_context(|| format!("cannot write the backup {}", args.file.display()))?;
    let copy = Store::open(&args.file)
        .with_context(|| format!("the backup {} does not open", args.file.display()))?;
    let problems = copy.integrity_check()?;
    if !problems.is_empty() {
        anyhow::bail!(
            "the backup failed its integrity check: {}",
            problems.join("; ")
        );
    }
    let size = std::fs::metadata(&args.file).map(|m| m.len()).unwrap_or(0);
    println!(
        "backup written to {} ({size} bytes, integrity ok)",
        args.file.display()
    );
    Ok(ExitCode::SUCCESS)
}
