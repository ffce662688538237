//! `warden user add|list|disable|groups` and `warden token create|list|revoke`: account
//! administration on the data folder's database (works while the server runs). Every
//! change is audited with the actor `cli`.

use std::io::BufRead;
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;

use super::DataFlags;
use crate::runs::now_secs;
use crate::store::{AccessControl, Accounts, Audit, AuditEntry, AuditOutcome, Role, Store};

/// The audit actor of changes made from the command line.
const CLI_ACTOR: &str = "cli";

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Add a user; the password is read from standard input (one line).
    Add {
        name: String,
        #[arg(long, value_enum)]
        role: RoleArg,
        /// Read the password from standard input (required: it never goes on the command line).
        #[arg(long)]
        password_stdin: bool,
        /// A group the user joins (repeatable; the group must exist).
        #[arg(long = "group", value_name = "GROUP")]
        groups: Vec<String>,
        #[command(flatten)]
        data: DataFlags,
    },
    /// Show a user's groups, adding or removing some first.
    Groups {
        name: String,
        #[arg(long = "add", value_name = "GROUP")]
        add: Vec<String>,
        #[arg(long = "remove", value_name = "GROUP")]
        remove: Vec<String>,
        #[command(flatten)]
        data: DataFlags,
    },
    /// List users.
    List {
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        data: DataFlags,
    },
    /// Disable a user: their sessions end and their API tokens are revoked at once.
    Disable {
        name: String,
        #[command(flatten)]
        data: DataFlags,
    },
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create an API token for `/v1` and `/api` (`Authorization: Bearer …`); shown once.
    Create {
        #[arg(long)]
        user: String,
        #[arg(long, default_value = "cli")]
        label: String,
        #[command(flatten)]
        data: DataFlags,
    },
    /// List a user's tokens (never their secrets).
    List {
        #[arg(long)]
        user: String,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        data: DataFlags,
    },
    /// Revoke a token by id.
    Revoke {
        id: String,
        #[command(flatten)]
        data: DataFlags,
    },
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum RoleArg {
    Admin,
    Operator,
    Viewer,
}

impl From<RoleArg> for Role {
    fn from(role: RoleArg) -> Self {
        match role {
            RoleArg::Admin => Role::Admin,
            RoleArg::Operator => Role::Operator,
            RoleArg::Viewer => Role::Viewer,
        }
    }
}

pub fn run_user(command: UserCommand) -> anyhow::Result<ExitCode> {
    match command {
        UserCommand::Add {
            name,
            role,
            password_stdin,
            groups,
            data,
        } => {
            if !password_stdin {
                anyhow::bail!("give the password on standard input with --password-stdin");
            }
            let password = read_password()?;
            let store = open(&data)?;
            let known: Vec<String> = store.groups()?.into_iter().map(|g| g.name).collect();
            if let Some(missing) = groups.iter().find(|g| !known.contains(g)) {
                anyhow::bail!("cannot add user `{name}`: no group named `{missing}` (create it with `warden group add {missing}`)");
            }
            let user = store
                .create_user(&name, role.into(), &password, now_secs())
                .with_context(|| format!("cannot add user `{name}`"))?;
            audit(&store, "user.create", &user.name)?;
            for group in &groups {
                store
                    .add_to_group(&user.name, group)
                    .with_context(|| format!("cannot add `{name}` to group `{group}`"))?;
            }
            println!("added user {} ({})", user.name, user.role);
        }
        UserCommand::Groups {
            name,
            add,
            remove,
            data,
        } => {
            let store = open(&data)?;
            for group in &add {
                store
                    .add_to_group(&name, group)
                    .with_context(|| format!("cannot add `{name}` to group `{group}`"))?;
                audit(&store, "group.member_add", &format!("{group}/{name}"))?;
            }
            for group in &remove {
                store
                    .remove_from_group(&name, group)
                    .with_context(|| format!("cannot remove `{name}` from group `{group}`"))?;
                audit(&store, "group.member_remove", &format!("{group}/{name}"))?;
            }
            let user = store
                .user_by_name(&name)
                .with_context(|| format!("no user `{name}`"))?;
            println!("{}: {}", user.name, store.groups_of(user.id)?.join(","));
        }
        UserCommand::List { json, data } => {
            let store = open(&data)?;
            let mut listed = Vec::new();
            for user in store.users()? {
                let groups = store.groups_of(user.id)?;
                listed.push((user, groups));
            }
            if json {
                let users: Vec<serde_json::Value> = listed
                    .iter()
                    .map(|(user, groups)| {
                        let mut value = serde_json::to_value(user).unwrap_or_default();
                        value["groups"] = serde_json::json!(groups);
                        value
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&users)?);
            } else {
                for (user, groups) in listed {
                    let state = if user.disabled { "disabled" } else { "enabled" };
                    println!(
                        "{:<24} {:<9} {state:<9} {}",
                        user.name,
                        user.role.as_str(),
                        groups.join(",")
                    );
                }
            }
        }
        UserCommand::Disable { name, data } => {
            let store = open(&data)?;
            let user = store
                .disable_user(&name, now_secs())
                .with_context(|| format!("cannot disable user `{name}`"))?;
            audit(&store, "user.disable", &user.name)?;
            println!(
                "disabled user {}; their sessions and tokens no longer work",
                user.name
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run_token(command: TokenCommand) -> anyhow::Result<ExitCode> {
    match command {
        TokenCommand::Create { user, label, data } => {
            let store = open(&data)?;
            let token = store
                .create_token(&user, &label, now_secs())
                .with_context(|| format!("cannot create a token for `{user}`"))?;
            audit(&store, "token.create", &token.id)?;
            eprintln!(
                "token {} for {user} (shown once; store it safely):",
                token.id
            );
            println!("{}", token.secret);
        }
        TokenCommand::List { user, json, data } => {
            let tokens = open(&data)?.tokens(&user)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&tokens)?);
            } else {
                for token in tokens {
                    let state = if token.revoked_at.is_some() {
                        "revoked"
                    } else {
                        "active"
                    };
                    println!("{:<28} {:<20} {state}", token.id, token.label);
                }
            }
        }
        TokenCommand::Revoke { id, data } => {
            let store = open(&data)?;
            store
                .revoke_token(&id, now_secs())
                .with_context(|| format!("cannot revoke token `{id}`"))?;
            audit(&store, "token.revoke", &id)?;
            println!("revoked token {id}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Opens the data folder's database (creating it on first use).
pub(super) fn open(data: &DataFlags) -> anyhow::Result<std::sync::Arc<Store>> {
    crate::knowledge::open_store(&data.data)
        .with_context(|| format!("cannot open the data folder {}", data.data.display()))
}

/// The first line of standard input, without its line ending.
fn read_password() -> anyhow::Result<String> {
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .context("cannot read the password from standard input")?;
    Ok(line.trim_end_matches(['\r', '\n']).to_owned())
}

pub(super) fn audit(store: &Store, action: &str, target: &str) -> anyhow::Result<()> {
    let entry = AuditEntry {
        actor: CLI_ACTOR,
        action,
        target: Some(target),
        outcome: AuditOutcome::Success,
        detail: None,
    };
    store
        .record(&entry, now_secs())
        .context("cannot write the audit row")?;
    Ok(())
}
