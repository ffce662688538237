//! `warden kb add|list|sync|remove|search|readers`: knowledge-base administration from the
//! terminal, with a progress bar for long syncs. The host's command line may add any
//! folder (no `--kb-roots`) but never Warden's data or models folder, and reads every
//! knowledge base; `kb search --as USER` shows what that user would find (their readable
//! knowledge bases only).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Subcommand;
use indicatif::{ProgressBar, ProgressStyle};

use super::DataFlags;
use crate::config::{ModelFlags, Needs, RetrievalFlags};
use crate::retrieval::{AddedBy, Library, Progress, RetrievalConfig, SearchMode, SyncReport};
use crate::store::{escape_untrusted, AccessControl, Accounts, KbCatalog, Reader, Store};

#[derive(Debug, Subcommand)]
pub enum KbCommand {
    /// Add a folder as a knowledge base and ingest it.
    Add {
        path: PathBuf,
        #[arg(long)]
        name: String,
        /// Who may read it besides admins, e.g. `role:operator,group:ops,user:alice`
        /// (`role:viewer` is everyone); none: admins only.
        #[arg(long, default_value = "")]
        readers: String,
        #[command(flatten)]
        data: DataFlags,
        #[command(flatten)]
        models: ModelFlags,
    },
    /// List knowledge bases.
    List {
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        data: DataFlags,
        #[command(flatten)]
        models: ModelFlags,
    },
    /// Re-read a knowledge base's folder: new and changed files are indexed, deleted ones dropped.
    Sync {
        name: String,
        #[command(flatten)]
        data: DataFlags,
        #[command(flatten)]
        models: ModelFlags,
    },
    /// Remove a knowledge base and its index entries (the folder is not touched).
    Remove {
        name: String,
        #[command(flatten)]
        data: DataFlags,
        #[command(flatten)]
        models: ModelFlags,
    },
    /// Show or replace who may read a knowledge base besides admins.
    Readers {
        name: String,
        /// The new readers, comma-separated (`--set ""`: admins only).
        #[arg(long)]
        set: Option<String>,
        #[command(flatten)]
        data: DataFlags,
    },
    /// Search a knowledge base.
    Search {
        name: String,
        query: String,
        /// Search as this user: a knowledge base they may not read is refused like a
        /// missing one.
        #[arg(long = "as", value_name = "USER")]
        as_user: Option<String>,
        #[arg(long, value_enum, default_value = "hybrid")]
        mode: SearchMode,
        #[arg(long, default_value_t = 5)]
        limit: usize,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        data: DataFlags,
        #[command(flatten)]
        models: ModelFlags,
        #[command(flatten)]
        retrieval: RetrievalFlags,
    },
}

pub fn run(command: KbCommand) -> anyhow::Result<ExitCode> {
    match command {
        KbCommand::Add {
            path,
            name,
            readers,
            data,
            models,
        } => {
            let readers = parse_readers(&readers)?;
            let mut config = RetrievalConfig::default();
            config.roots.protect(&models.models, "models folder");
            let (store, library) = open(&data, &models, config)?;
            library.add(&name, &path, AddedBy::Host)?;
            if let Err(err) = store.set_kb_readers(&name, &readers) {
                library.remove(&name)?;
                return Err(err).context(format!("cannot add knowledge base `{name}`"));
            }
            super::accounts::audit(&store, "kb.add", &name)?;
            print_report(&sync_with_progress(&library, &name)?);
        }
        KbCommand::List { json, data, models } => {
            let (_, library) = open(&data, &models, RetrievalConfig::default())?;
            let kbs = library.list()?;
            if json {
                println!("{}", serde_json::to_string_pretty(&kbs)?);
            } else {
                println!(
                    "{:<24} {:>9} {:>8}  {:<32} root",
                    "name", "documents", "chunks", "readers"
                );
                for kb in kbs {
                    let readers = if kb.readers.is_empty() {
                        "(admins only)".to_owned()
                    } else {
                        kb.readers.join(",")
                    };
                    println!(
                        "{:<24} {:>9} {:>8}  {:<32} {}",
                        escape_untrusted(&kb.name),
                        kb.documents,
                        kb.chunks,
                        escape_untrusted(&readers),
                        escape_untrusted(&kb.root)
                    );
                }
            }
        }
        KbCommand::Readers { name, set, data } => {
            let store = super::accounts::open(&data)?;
            let record = match set {
                Some(list) => {
                    let readers = parse_readers(&list)?;
                    let record = store
                        .set_kb_readers(&name, &readers)
                        .with_context(|| format!("cannot set the readers of `{name}`"))?;
                    super::accounts::audit(&store, "kb.readers", &name)?;
                    record
                }
                None => store
                    .knowledge_base(&name)
                    .with_context(|| format!("no knowledge base `{name}`"))?,
            };
            let name = escape_untrusted(&record.name);
            if record.readers.is_empty() {
                println!("{name}: admins only");
            } else {
                println!("{name}: {}", escape_untrusted(&record.readers.join(",")));
            }
        }
        KbCommand::Sync { name, data, models } => {
            let (_, library) = open(&data, &models, RetrievalConfig::default())?;
            print_report(&sync_with_progress(&library, &name)?);
        }
        KbCommand::Remove { name, data, models } => {
            open(&data, &models, RetrievalConfig::default())?
                .1
                .remove(&name)?;
            println!("removed knowledge base `{name}`");
        }
        KbCommand::Search {
            name,
            query,
            as_user,
            mode,
            limit,
            json,
            data,
            models,
            retrieval,
        } => {
            let (store, library) = open(&data, &models, retrieval.config()?)?;
            if let Some(user) = as_user {
                let user = store
                    .user_by_name(&user)
                    .with_context(|| format!("no user `{user}`"))?;
                let principal = store.principal(user.id)?;
                let readable = store.readable_kbs(&principal)?;
                if !readable.contains(&name) {
                    anyhow::bail!("no knowledge base `{name}` that {} may read", user.name);
                }
            } else {
                store
                    .knowledge_base(&name)
                    .with_context(|| format!("no knowledge base `{name}`"))?;
            }
            let hits = library.search(&query, Some(&[name]), mode, limit.clamp(1, 100))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&hits)?);
            }
            for (i, hit) in hits.iter().enumerate().filter(|_| !json) {
                let c = &hit.citation;
                let place = c.location.map(|l| format!(" {l}")).unwrap_or_default();
                // Documents are untrusted: their paths, headings and text are shown
                // escaped, never as terminal control sequences.
                println!(
                    "{}. [{}] {}{} — {}",
                    i + 1,
                    escape_untrusted(&c.kb),
                    escape_untrusted(&c.path),
                    place,
                    escape_untrusted(&c.heading_path.join(" › "))
                );
                let preview: String = hit.text.chars().take(240).collect();
                println!("   {}\n", escape_untrusted(&preview.replace('\n', " ")));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn open(
    data: &DataFlags,
    models: &ModelFlags,
    retrieval: RetrievalConfig,
) -> anyhow::Result<(Arc<Store>, Library)> {
    let engine = super::load_engine(models, Needs::Embedding)?;
    let Some(embedder) = engine.embed_model(None) else {
        anyhow::bail!("no embedding model loaded")
    };
    Ok(crate::knowledge::open_library(
        &data.data,
        embedder.clone(),
        retrieval,
    )?)
}

fn parse_readers(list: &str) -> anyhow::Result<Vec<Reader>> {
    crate::store::parse_readers(list).context("invalid --readers")
}

fn sync_with_progress(library: &Library, name: &str) -> anyhow::Result<SyncReport> {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} {bar:30} {pos}/{len} files  {msg}  {per_sec}  ETA {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    let report = library.sync(name, &mut |progress| match progress {
        Progress::Scanned { to_index, .. } => bar.set_length(to_index as u64),
        Progress::Indexed {
            files_done, chunks, ..
        } => {
            bar.set_position(files_done as u64);
            bar.set_message(format!("{chunks} chunks"));
        }
        Progress::Committed { .. } => {}
    });
    bar.finish_and_clear();
    Ok(report?)
}

/// The sync report; file names and reasons come from the folder and are shown escaped.
fn print_report(report: &SyncReport) {
    println!(
        "{}: {} added, {} updated, {} unchanged, {} deleted; {} chunks in {:.1}s ({:.1} chunks/s)",
        escape_untrusted(&report.kb),
        report.added,
        report.updated,
        report.unchanged,
        report.deleted,
        report.chunks_indexed,
        report.seconds,
        report.chunks_per_second
    );
    for skipped in &report.skipped {
        println!(
            "  skipped {}: {}",
            escape_untrusted(&skipped.path),
            escape_untrusted(&skipped.reason)
        );
    }
    for failed in &report.failed {
        println!(
            "  failed  {}: {}",
            escape_untrusted(&failed.path),
            escape_untrusted(&failed.error)
        );
    }
}
