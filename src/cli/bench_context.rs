//! `warden bench context --json`: what preparing a chat turn's context envelope costs —
//! build time with the chat model's real tokenizer (the first build, which counts every
//! earlier message, and p50/p95 of later builds, which count only the parts that change, as
//! in a server where earlier turns were counted already) and tokens per part — for
//! conversations of 10, 100 and 300 turns of ordinary operations chat, whole and as a
//! compaction leaves them (`compacted`: memory covers all but the newest turns). The envelope
//! is built before every model call, so it must stay cheap (the target is under 5 ms at 300
//! turns).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::{json, Value};

use crate::agent::envelope::{self, EnvelopeInput, MessageTokens};
use crate::config::{ModelFlags, Needs};
use crate::store::{MemoryItem, MemoryKind, Message, MessageRole, Trust};

#[derive(Debug, Args)]
pub struct ContextBenchArgs {
    /// Print JSON (the only output format; kept for clarity in scripts).
    #[arg(long)]
    json: bool,
    /// Builds timed per conversation length.
    #[arg(long, default_value_t = 50)]
    repeats: usize,
    #[command(flatten)]
    models: ModelFlags,
}

/// The conversation lengths measured.
const TURNS: [usize; 3] = [10, 100, 300];

pub fn run(args: ContextBenchArgs) -> anyhow::Result<ExitCode> {
    if args.repeats == 0 {
        anyhow::bail!("--repeats must be at least 1");
    }
    let engine = super::load_engine(&args.models, Needs::Chat)?;
    let Some(model) = engine.chat_model(None) else {
        anyhow::bail!("no chat model loaded")
    };
    let system = crate::agent::AgentConfig::default().system_prompt;
    let tools =
        "knowledge_search(query): passages from the knowledge bases you may read, with citations\n\
                 incident_lookup(incident_id): an incident's facts";
    let window = model.info().context_length;
    let count = |text: &str| model.count_tokens(text);
    let memory = memory_part();
    let results: Vec<Value> = TURNS
        .iter()
        .map(|&turns| {
            let history = conversation(turns);
            let input = |history, memory| EnvelopeInput {
                system_prompt: &system,
                tools,
                memory,
                history,
                question: "And what should I check next on db-7?",
                reserved_output: 512,
                history_budget: 2_048,
                window,
            };
            // After a compaction memory covers all but the newest turns the history sends.
            let kept = history.len().min(2 * envelope::MAX_HISTORY_TURNS);
            let uncovered = &history[history.len() - kept..];
            let mut row = measure(&input(&history, None), &count, args.repeats);
            row["turns"] = json!(turns);
            row["compacted"] = measure(&input(uncovered, Some(&memory)), &count, args.repeats);
            row
        })
        .collect();
    let report = json!({
        "bench": "context",
        "model": model.info().id,
        "window": model.info().context_length,
        "repeats": args.repeats,
        "conversations": results,
    });
    println!("{report}");
    Ok(ExitCode::SUCCESS)
}

/// Times building `input`'s envelope: the first build, which counts every message (as after
/// a restart), and p50/p95 of later builds, which count only what changed (as in a server
/// where earlier turns were counted already); with the tokens per part and the pressure.
fn measure(input: &EnvelopeInput<'_>, count: &dyn Fn(&str) -> usize, repeats: usize) -> Value {
    let known = MessageTokens::default();
    let started = Instant::now();
    envelope::prepare(input, count, &known);
    let cold = started.elapsed();
    let mut times: Vec<Duration> = Vec::with_capacity(repeats);
    let mut last = None;
    for _ in 0..repeats {
        let started = Instant::now();
        let built = envelope::prepare(input, count, &known);
        times.push(started.elapsed());
        last = Some(built);
    }
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let at = |q: f64| ms(times[((times.len() - 1) as f64 * q).round() as usize]);
    let built = last.map(|e| (e.tokens, e.pressure));
    json!({
        "first_build_ms": ms(cold),
        "build_ms_p50": at(0.50),
        "build_ms_p95": at(0.95),
        "tokens": built.map(|(tokens, _)| json!(tokens)),
        "pressure": built.map(|(_, pressure)| json!(pressure)),
    })
}

/// A memory part as a long conversation's compaction leaves it: 30 items, framed as data.
fn memory_part() -> String {
    let items: Vec<MemoryItem> = (0..30)
        .map(|n| MemoryItem {
            id: format!("mem_{n}"),
            kind: MemoryKind::ALL[n % MemoryKind::ALL.len()],
            text: format!(
                "The replica db-7-r{n} lags behind the primary during the nightly batch window."
            ),
            source_message_id: format!("msg_{n}_User"),
            citation_id: None,
            trust: Trust::UserStated,
            created_at: 0,
            updated_at: 0,
        })
        .collect();
    crate::agent::memory::prompt_part(&items).unwrap_or_default()
}

/// `turns` turns of a plausible incident conversation (a question and a longer answer).
fn conversation(turns: usize) -> Vec<Message> {
    let question = "The primary database db-7 shows rising lock waits since the 14:05 deploy; \
                    which sessions are blocking and what should I look at first?";
    let answer = "Start with pg_stat_activity joined to pg_locks to find the blocking pids, then \
                  check whether the deploy added a migration holding an exclusive lock. If one \
                  session blocks many, look at its query and transaction age before cancelling it; \
                  keep the incident channel updated with what you find.";
    (1..=turns as i64)
        .flat_map(|turn| {
            [
                (MessageRole::User, question),
                (MessageRole::Assistant, answer),
            ]
            .map(|(role, text)| Message {
                id: format!("msg_{turn}_{role:?}"),
                conversation_id: "conv_bench".into(),
                turn,
                role,
                content: format!("{text} (turn {turn})"),
                run_id: None,
                created_at: 0,
            })
        })
        .collect()
}
