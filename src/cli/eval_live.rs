//! `warden eval diagnostics --live CONFIG`: the real-system scenarios. Checks every
//! registered source's health (a PostgreSQL source must refuse a write), then, scenario by
//! scenario, causes the incident on the `[live_eval]` server, diagnoses it through the
//! registry's read-only connectors on the default models, ends the incident and scores the
//! report as a pack's would be. Prints `{fault: null, overall, packs, sources}`; exit 1 on a
//! safety violation or a source that accepted a write.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use serde_json::{json, Value};

use super::eval_diagnostics::{print_score, start_session, EvalDiagnosticsArgs};
use super::sources::load_registry;
use crate::diagnostics::live::scenarios::{self, LiveEvalConfig};
use crate::diagnostics::score::{overall, score_pack, PackScore, RunFigures};
use crate::diagnostics::state::Disposition;

pub fn run(args: &EvalDiagnosticsArgs, config: &Path) -> anyhow::Result<ExitCode> {
    let registry = Arc::new(load_registry(config, &args.playbooks)?);
    let live: LiveEvalConfig = registry
        .live_eval
        .clone()
        .context("the config has no [live_eval] table (admin_dsn, log_dir)")?
        .try_into()
        .context("[live_eval]")?;
    let session = start_session(args, None, Some(registry.clone()))?;
    let run = crate::runs::now_secs().to_string();
    let mut scores: Vec<PackScore> = Vec::new();
    for scenario in scenarios::all() {
        let started = Instant::now();
        let lab = scenario
            .prepare(&live, &run)
            .map_err(|err| anyhow::anyhow!("scenario {}: {err}", scenario.id))?;
        let held = scenario
            .provoke(&lab)
            .map_err(|err| anyhow::anyhow!("scenario {}: {err}", scenario.id))?;
        let incident = session.incident(scenario.alert_name, scenario.summary, scenario.service)?;
        let task = session
            .diagnose(&incident, None, &mut |_| {})
            .with_context(|| format!("scenario {}", scenario.id));
        drop(held);
        let task = task?;
        let truth = scenario
            .truth(&lab)
            .map_err(|err| anyhow::anyhow!("scenario {}: {err}", scenario.id))?;
        let report = task.report.as_ref();
        let score = score_pack(
            scenario.id,
            &task.id,
            &truth,
            report,
            None,
            RunFigures {
                seconds: started.elapsed().as_secs_f64(),
            },
        );
        print_score(&score);
        // What the conclusion rests on, finding by finding, read from the live systems.
        let supported = report
            .into_iter()
            .flat_map(|r| &r.hypotheses)
            .filter(|h| h.disposition == Disposition::Supported);
        let mut shown: Vec<String> = Vec::new();
        for finding in supported.flat_map(|h| &h.findings) {
            let line = format!(
                "{} {}: {}",
                finding.role.as_str(),
                finding.step,
                finding.summary
            );
            if !shown.contains(&line) {
                eprintln!("eval:   {line}");
                shown.push(line);
            }
        }
        if let Some(report) = report.filter(|_| score.score < 100.0) {
            let steps: Vec<String> = report
                .plan
                .iter()
                .map(|s| format!("{}:{:?}", s.test, s.status))
                .collect();
            eprintln!("eval:   plan {}", steps.join(" "));
            // Why, in the report's own words: each cause and the reason for its disposition.
            for h in &report.hypotheses {
                eprintln!("eval:   {} {:?}: {}", h.id, h.disposition, h.reason);
            }
        }
        scores.push(score);
    }
    // After the scenarios, when their databases exist: every source must answer, and a
    // PostgreSQL source must refuse a write.
    let health = registry
        .connect(None)
        .map_err(|err| anyhow::anyhow!("{err}"))?
        .health();
    for source in &health {
        eprintln!(
            "eval: source {} ({}): {} — {}",
            source.name,
            source.kind,
            if source.ok { "ok" } else { "NOT OK" },
            source.detail
        );
    }
    let unsafe_source = health.iter().any(|h| h.detail.contains("NOT refused"));
    let summary = overall(&scores);
    let failed = summary.safety_violations > 0 || unsafe_source;
    let out = json!({
        "fault": Value::Null,
        "overall": summary,
        "packs": scores,
        "sources": health,
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
