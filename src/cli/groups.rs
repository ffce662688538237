//! `warden group add|list|remove`: groups of users, which knowledge bases can name as
//! readers (`group:NAME`). Removing a group also removes every reader entry naming it.
//! Works on the data folder's database while the server runs; changes are audited.

use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;

use super::accounts::{audit, open};
use super::DataFlags;
use crate::runs::now_secs;
use crate::store::AccessControl;

#[derive(Debug, Subcommand)]
pub enum GroupCommand {
    /// Create a group.
    Add {
        name: String,
        #[command(flatten)]
        data: DataFlags,
    },
    /// List groups and their members.
    List {
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        data: DataFlags,
    },
    /// Remove a group, its memberships and the knowledge-base access it granted.
    Remove {
        name: String,
        #[command(flatten)]
        data: DataFlags,
    },
}

pub fn run(command: GroupCommand) -> anyhow::Result<ExitCode> {
    match command {
        GroupCommand::Add { name, data } => {
            let store = open(&data)?;
            store
                .create_group(&name, now_secs())
                .with_context(|| format!("cannot add group `{name}`"))?;
            audit(&store, "group.create", &name)?;
            println!("added group {name}");
        }
        GroupCommand::List { json, data } => {
            let groups = open(&data)?.groups()?;
            if json {
                println!("{}", serde_json::to_string_pretty(&groups)?);
            } else {
                for group in groups {
                    println!("{:<24} {}", group.name, group.members.join(","));
                }
            }
        }
        GroupCommand::Remove { name, data } => {
            let store = open(&data)?;
            store
                .remove_group(&name)
                .with_context(|| format!("cannot remove group `{name}`"))?;
            audit(&store, "group.remove", &name)?;
            println!("removed group {name}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
