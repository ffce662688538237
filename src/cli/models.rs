//! `warden models list|verify`: what model files are present, and whether they are intact.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Subcommand;

use crate::engine::{check_model_file, ModelKind};
use crate::model_files::{FileState, Manifest};

#[derive(Debug, Subcommand)]
pub enum ModelsCommand {
    /// List the manifest's models and other model files in the folder.
    List {
        #[arg(long, env = "WARDEN_MODELS", default_value = "models")]
        models: PathBuf,
    },
    /// Check every manifest file's sha256 and that every model file opens.
    Verify {
        #[arg(long, env = "WARDEN_MODELS", default_value = "models")]
        models: PathBuf,
    },
    /// Print the chat model's token ids for a text, as JSON (like llama-tokenize).
    Tokenize {
        text: String,
        /// Parse special-token text such as <|im_start|> as special tokens.
        #[arg(long)]
        special: bool,
        /// Render TEXT as a user message through the chat template first.
        #[arg(long)]
        chat: bool,
        #[command(flatten)]
        flags: crate::config::ModelFlags,
    },
}

pub fn run(command: ModelsCommand) -> anyhow::Result<ExitCode> {
    match command {
        ModelsCommand::List { models } => list(&models),
        ModelsCommand::Verify { models } => verify(&models),
        ModelsCommand::Tokenize {
            text,
            special,
            chat,
            flags,
        } => tokenize(&text, special, chat, &flags),
    }
}

fn list(dir: &Path) -> anyhow::Result<ExitCode> {
    let manifest = Manifest::load(dir)?;
    println!("{:<26} {:<10} {:<9} path", "model", "kind", "state");
    for model in &manifest.models {
        let states = model
            .files
            .iter()
            .map(|f| f.exists(dir))
            .collect::<Vec<_>>();
        let state = if states.iter().all(|s| *s) {
            "present"
        } else {
            "missing"
        };
        println!(
            "{:<26} {:<10} {:<9} {}",
            model.name,
            kind_name(model.kind),
            state,
            dir.join(&model.path).display()
        );
    }
    for extra in extra_gguf_files(dir, &manifest) {
        println!(
            "{:<26} {:<10} {:<9} {}",
            "-",
            "chat",
            "extra",
            extra.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn verify(dir: &Path) -> anyhow::Result<ExitCode> {
    let manifest = Manifest::load(dir)?;
    let mut failures = 0;
    for model in &manifest.models {
        for file in &model.files {
            let verdict = match file.check(dir)? {
                FileState::Ok => "ok".to_string(),
                FileState::Missing => {
                    failures += 1;
                    "MISSING (run models/fetch)".to_string()
                }
                FileState::Mismatch { actual } => {
                    failures += 1;
                    format!("SHA256 MISMATCH (got {actual})")
                }
            };
            println!("{:<26} {:<60} {verdict}", model.name, file.dest.display());
        }
        if let Err(err) = check_model_file(model.kind, &dir.join(&model.path)) {
            failures += 1;
            println!("{:<26} does not open: {err}", model.name);
        }
    }
    for extra in extra_gguf_files(dir, &manifest) {
        match check_model_file(ModelKind::Chat, &extra) {
            Ok(()) => println!("{:<26} {:<60} ok (not in manifest)", "-", extra.display()),
            Err(err) => {
                failures += 1;
                println!("{:<26} {:<60} does not open: {err}", "-", extra.display());
            }
        }
    }
    if failures > 0 {
        eprintln!("{failures} problem(s) found");
        return Ok(ExitCode::FAILURE);
    }
    println!("all model files verified");
    Ok(ExitCode::SUCCESS)
}

fn tokenize(
    text: &str,
    special: bool,
    chat: bool,
    flags: &crate::config::ModelFlags,
) -> anyhow::Result<ExitCode> {
    let config = crate::config::engine_config(flags, crate::config::Needs::Chat)?;
    let Some(spec) = config.models.first() else {
        anyhow::bail!("no chat model configured")
    };
    let ids = crate::engine::tokenize_with_model(&spec.path, text, special, chat)?;
    println!("{}", serde_json::to_string(&ids)?);
    Ok(ExitCode::SUCCESS)
}

fn kind_name(kind: ModelKind) -> &'static str {
    match kind {
        ModelKind::Chat => "chat",
        ModelKind::Embedding => "embedding",
    }
}

/// GGUF files in the folder that the manifest does not list.
fn extra_gguf_files(dir: &Path, manifest: &Manifest) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut extra: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "gguf"))
        .filter(|p| !manifest.models.iter().any(|m| dir.join(&m.path) == *p))
        .collect();
    extra.sort();
    extra
}
