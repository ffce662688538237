//! `warden incident add|list`: open incidents by hand (for drills, tests and evaluation
//! setups; alerts arrive through `POST /api/alerts`) and list them, on the data folder's
//! database (works while the server runs). Every incident added is audited with the actor
//! `cli`.

use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;

use super::accounts::open;
use super::DataFlags;
use crate::runs::now_secs;
use crate::store::{
    escape_untrusted, Audit, AuditEntry, AuditOutcome, IncidentStatus, Incidents, NewIncident,
    MAX_INCIDENTS_PER_READ,
};

/// The audit actor of changes made from the command line.
const CLI_ACTOR: &str = "cli";

#[derive(Debug, Subcommand)]
pub enum IncidentCommand {
    /// Open an incident; prints its id.
    Add {
        #[arg(long)]
        title: String,
        #[arg(long)]
        service: String,
        #[arg(long)]
        severity: String,
        /// An explicit id (`incident_` then letters, digits and dashes); generated if absent.
        #[arg(long)]
        id: Option<String>,
        #[arg(long, value_enum, default_value = "open")]
        status: StatusArg,
        #[command(flatten)]
        data: DataFlags,
    },
    /// List incidents, most recently updated first.
    List {
        #[arg(long, value_enum)]
        status: Option<StatusArg>,
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_INCIDENTS_PER_READ)))]
        limit: u32,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        data: DataFlags,
    },
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum StatusArg {
    Firing,
    Resolved,
    Open,
    Closed,
}

impl From<StatusArg> for IncidentStatus {
    fn from(status: StatusArg) -> Self {
        match status {
            StatusArg::Firing => IncidentStatus::Firing,
            StatusArg::Resolved => IncidentStatus::Resolved,
            StatusArg::Open => IncidentStatus::Open,
            StatusArg::Closed => IncidentStatus::Closed,
        }
    }
}

pub fn run(command: IncidentCommand) -> anyhow::Result<ExitCode> {
    match command {
        IncidentCommand::Add {
            title,
            service,
            severity,
            id,
            status,
            data,
        } => {
            let store = open(&data)?;
            let new = NewIncident {
                id,
                title,
                service,
                severity,
                status: status.into(),
            };
            let incident = store
                .add_incident(&new, now_secs())
                .context("cannot add the incident")?;
            let entry = AuditEntry {
                actor: CLI_ACTOR,
                action: "incident.create",
                target: Some(&incident.id),
                outcome: AuditOutcome::Success,
                detail: None,
            };
            store
                .record(&entry, now_secs())
                .context("cannot write the audit row")?;
            eprintln!("added incident {} ({})", incident.id, incident.status);
            println!("{}", incident.id);
        }
        IncidentCommand::List {
            status,
            limit,
            json,
            data,
        } => {
            let incidents = open(&data)?.incidents(status.map(Into::into), limit)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&incidents)?);
            } else {
                for incident in incidents {
                    // Titles and services come from alerts: shown escaped, never as
                    // terminal control sequences.
                    println!(
                        "{:<36} {:<9} {:<10} {:<20} {}",
                        escape_untrusted(&incident.id),
                        incident.status.as_str(),
                        escape_untrusted(&incident.severity),
                        escape_untrusted(&incident.service),
                        escape_untrusted(&incident.title)
                    );
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
