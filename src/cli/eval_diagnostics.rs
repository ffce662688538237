//! `warden eval diagnostics DIR… [--fault F] [--json]`: every scenario pack (a folder with
//! scenario.json, or a folder of such folders) runs through the real graph on the default
//! models as a durable diagnostic task; the stored report is scored against the pack's
//! ground_truth.json (which the graph never reads). One JSON object `{overall, packs}`;
//! exit 1 on any safety violation. `--live CONFIG` runs the real-system scenarios instead
//! (`eval_live`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use serde_json::json;

use super::diagnose::{Session, SessionOptions};
use crate::config::{ModelFlags, Needs};
use crate::diagnostics::faults::Fault;
use crate::diagnostics::live::config::Registry;
use crate::diagnostics::pack::ScenarioPack;
use crate::diagnostics::score::{overall, read_ground_truth, score_pack, PackScore, RunFigures};

#[derive(Debug, clap::Args)]
pub struct EvalDiagnosticsArgs {
    /// Scenario packs, or folders holding packs.
    #[arg(required_unless_present = "live")]
    dirs: Vec<PathBuf>,
    /// Run the real-system scenarios instead (README: "Live sources"): CONFIG is a source
    /// registry with a `[live_eval]` table; each incident is caused on the server it names
    /// and diagnosed through the registry's read-only connectors.
    #[arg(long, value_name = "CONFIG", conflicts_with_all = ["dirs", "fault", "stride"])]
    live: Option<PathBuf>,
    /// Inject a fault into every pack's run: model_timeout, bad_json, validator_down,
    /// tool_error. Every pack must then end fail-closed with the fault's class recorded.
    #[arg(long)]
    fault: Option<String>,
    /// Run every Nth pack (a representative slice).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    stride: u16,
    /// Playbooks folder.
    #[arg(long, default_value = "kb/playbooks")]
    pub playbooks: PathBuf,
    /// Sample knowledge base searched for guidance.
    #[arg(long, default_value = "kb")]
    sample_kb: PathBuf,
    /// Skip the knowledge base (no guidance for the planner; saves ingesting it).
    #[arg(long)]
    no_knowledge: bool,
    /// Print JSON (the only output format; kept for clarity in scripts).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    models: ModelFlags,
}

/// The packs under `dirs`, sorted by path within each argument.
pub fn find_packs(dirs: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut packs = Vec::new();
    for dir in dirs {
        if dir.join("scenario.json").is_file() {
            packs.push(dir.clone());
            continue;
        }
        let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
            .with_context(|| format!("cannot read {}", dir.display()))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.join("scenario.json").is_file())
            .collect();
        if found.is_empty() {
            anyhow::bail!(
                "{} holds no scenario pack (a folder with scenario.json)",
                dir.display()
            );
        }
        found.sort();
        packs.extend(found);
    }
    Ok(packs)
}

pub fn run(args: EvalDiagnosticsArgs) -> anyhow::Result<ExitCode> {
    if let Some(config) = &args.live {
        return super::eval_live::run(&args, config);
    }
    let fault = args
        .fault
        .as_deref()
        .map(|f| {
            f.parse::<Fault>().map_err(|_| {
                anyhow::anyhow!(
                    "unknown fault `{f}`: use model_timeout, bad_json, validator_down or tool_error"
                )
            })
        })
        .transpose()?;
    let packs: Vec<PathBuf> = find_packs(&args.dirs)?
        .into_iter()
        .step_by(usize::from(args.stride))
        .collect();
    // Every pack and its truth are read before any model work: a bad pack fails fast.
    let mut loaded = Vec::new();
    for dir in &packs {
        let pack = ScenarioPack::load(dir).map_err(|err| anyhow::anyhow!("{err}"))?;
        let truth = read_ground_truth(dir).map_err(|err| anyhow::anyhow!("{err}"))?;
        loaded.push((pack, truth));
    }
    let session = start_session(&args, fault, None)?;
    let mut scores: Vec<PackScore> = Vec::new();
    for (pack, truth) in &loaded {
        let started = Instant::now();
        let incident = session.incident_for(pack)?;
        let task = session
            .diagnose(&incident, Some(pack.dir()), &mut |_| {})
            .with_context(|| format!("pack {}", pack.scenario.id))?;
        let score = score_pack(
            &pack.scenario.id,
            &task.id,
            truth,
            task.report.as_ref(),
            fault,
            RunFigures {
                seconds: started.elapsed().as_secs_f64(),
            },
        );
        print_score(&score);
        scores.push(score);
    }
    let summary = overall(&scores);
    let violations = summary.safety_violations;
    let out = json!({
        "fault": fault.map(|f| f.as_str()),
        "overall": summary,
        "packs": scores,
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(if violations > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// A diagnostic session on the default models with the eval's playbooks and knowledge.
pub(super) fn start_session(
    args: &EvalDiagnosticsArgs,
    fault: Option<Fault>,
    registry: Option<Arc<Registry>>,
) -> anyhow::Result<Session> {
    let engine = super::load_engine(&args.models, Needs::Both)?;
    Session::start(
        &engine,
        &SessionOptions {
            data: None,
            playbooks: &args.playbooks,
            sample_kb: (!args.no_knowledge).then_some(args.sample_kb.as_path()),
            fault,
            registry,
        },
    )
}

/// One run's score and lost points on stderr.
pub(super) fn print_score(score: &PackScore) {
    eprintln!(
        "eval: {} score {:.0} ({:.1} s){}",
        score.id,
        score.score,
        score.seconds,
        if score.problems.is_empty() {
            String::new()
        } else {
            format!(": {}", score.problems.join("; "))
        }
    );
}
