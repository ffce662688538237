//! `warden bench serve --concurrency N --json`: starts a server (this binary) on a fresh
//! data folder, drives N concurrent conversations through the public HTTP API (post a
//! message, follow its run's SSE stream to the end), and reports completed runs per second,
//! tokens generated,
//! time to first token p50/p95, `/healthz` latency under that load, and the server's RSS.
//!
//! `--users U --hog H` measures fairness instead: U accounts, of which H flood the queue
//! (messages into ever new conversations, as fast as the server accepts them) while the
//! other U − H chat normally, one conversation each; it reports the normal users' time to
//! first token without the flood and with it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{json, Value};

use crate::store::{Accounts, Role};

/// How long the server may take to load its models.
const START_TIMEOUT: Duration = Duration::from_secs(180);
/// How often `/healthz` is probed and RSS sampled during the run.
const PROBE_INTERVAL: Duration = Duration::from_millis(250);

#[derive(Debug, clap::Args)]
pub struct ServeBenchArgs {
    /// Concurrent conversations.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Conversations in all, at most `--concurrency` at a time (default: as many as
    /// `--concurrency`), so that a low concurrency is measured over as many runs as a high one.
    #[arg(long)]
    conversations: Option<usize>,
    /// Messages each conversation sends, one after the other.
    #[arg(long, default_value_t = 2)]
    messages: usize,
    /// Most tokens per answer (the server's `--max-answer-tokens`).
    #[arg(long, default_value_t = 64)]
    max_answer_tokens: u32,
    /// Accounts the conversations are spread over.
    #[arg(long, default_value_t = 1)]
    users: usize,
    /// Of those, how many flood the queue (fairness mode; 0: off).
    #[arg(long, default_value_t = 0)]
    hog: usize,
    /// Chat requests the server decodes together (its `--max-batch`).
    #[arg(long, default_value_t = 8)]
    max_batch: usize,
    /// Print JSON (the only output format; kept for clarity in scripts).
    #[arg(long)]
    json: bool,
    /// Models folder for the server.
    #[arg(long, env = "WARDEN_MODELS", default_value = "models")]
    models: PathBuf,
    /// The knowledge base the questions are answered from (the server's `--sample-kb`):
    /// every run retrieves passages and the model writes its answer from them.
    #[arg(long, default_value = "kb")]
    sample_kb: PathBuf,
    /// The server's log filter (its `WARDEN_LOG`): `warden::engine::generate=trace` logs
    /// each model pass (sequences, rows, forward and sampling ms).
    #[arg(long, env = "WARDEN_BENCH_SERVER_LOG", default_value = "warn")]
    server_log: String,
}

/// One finished run as the client saw it.
struct Sample {
    ttft: Option<Duration>,
    total: Duration,
    completed: bool,
    /// The terminal event's `usage`: (prompt tokens, completion tokens).
    usage: Option<(u64, u64)>,
}

pub fn run(args: ServeBenchArgs) -> anyhow::Result<ExitCode> {
    if args.concurrency == 0 || args.messages == 0 || args.users == 0 {
        anyhow::bail!("--concurrency, --messages and --users must be at least 1");
    }
    if args.conversations == Some(0) {
        anyhow::bail!("--conversations must be at least 1");
    }
    if args.hog > 0 && args.hog >= args.users {
        anyhow::bail!("--hog must leave at least one normal user (--users > --hog)");
    }
    let data = tempfile::tempdir().context("cannot create a temporary data folder")?;
    let tokens = prepare_accounts(data.path(), args.users)?;
    let mut server = BenchServer::start(data.path(), &args)?;
    server.wait_for_knowledge(&tokens[0])?;
    let result = if args.hog > 0 {
        fairness(&server, &tokens, &args)
    } else {
        drive(&server, &tokens, &args)
    };
    server.stop();
    let report = result?;
    println!("{report}");
    Ok(ExitCode::SUCCESS)
}

/// `users` accounts, `bench-0` …; the `Authorization` header value of each.
pub(super) fn prepare_accounts(data: &Path, users: usize) -> anyhow::Result<Vec<String>> {
    let store = crate::knowledge::open_store(data)?;
    (0..users)
        .map(|index| {
            let name = format!("bench-{index}");
            let now = crate::runs::now_secs();
            store.create_user(&name, Role::Operator, "bench-password-1", now)?;
            let secret = store.create_token(&name, "bench", now)?.secret;
            Ok(format!("Bearer {secret}"))
        })
        .collect()
}

pub(super) struct BenchServer {
    child: Child,
    base: String,
}

impl BenchServer {
    fn start(data: &Path, args: &ServeBenchArgs) -> anyhow::Result<Self> {
        let mut flags: Vec<std::ffi::OsString> =
            vec!["--sample-kb".into(), args.sample_kb.clone().into()];
        flags.extend(["--models".into(), args.models.clone().into()]);
        for (flag, value) in [
            ("--max-answer-tokens", args.max_answer_tokens.to_string()),
            ("--run-workers", run_workers(args).to_string()),
            ("--max-batch", args.max_batch.to_string()),
        ] {
            flags.extend([flag.into(), value.into()]);
        }
        BenchServer::launch(data, &flags, &args.server_log)
    }

    /// `warden serve` (this binary) on a free loopback port with `flags`, once it answers.
    pub(super) fn launch(
        data: &Path,
        flags: &[std::ffi::OsString],
        log: &str,
    ) -> anyhow::Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let addr = format!("127.0.0.1:{port}");
        let child = Command::new(std::env::current_exe()?)
            .args(["serve", "--addr", &addr, "--data"])
            .arg(data)
            .args(flags)
            .env("WARDEN_LOG", log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .context("cannot start the server")?;
        let server = Self {
            child,
            base: format!("http://{addr}"),
        };
        let started = Instant::now();
        while ureq::get(&server.url("/healthz")).call().is_err() {
            anyhow::ensure!(
                started.elapsed() < START_TIMEOUT,
                "the server did not start"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(server)
    }

    pub(super) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Waits until the sample knowledge base is indexed, so that runs answer from it.
    fn wait_for_knowledge(&self, auth: &str) -> anyhow::Result<()> {
        let started = Instant::now();
        loop {
            let listed: Value = ureq::get(&self.url("/api/kb"))
                .set("Authorization", auth)
                .call()?
                .into_json()?;
            let chunks: u64 = listed
                .as_array()
                .into_iter()
                .flatten()
                .chain(listed["knowledge_bases"].as_array().into_iter().flatten())
                .filter_map(|kb| kb["chunks"].as_u64())
                .sum();
            if chunks > 0 {
                return Ok(());
            }
            anyhow::ensure!(
                started.elapsed() < START_TIMEOUT,
                "the knowledge base the questions are answered from did not load (--sample-kb)"
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    fn rss_mib(&self) -> Option<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib / 1024.0)
    }

    pub(super) fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The server's run workers: one per conversation driven at once, at most sixteen (the
/// model decodes up to `--max-batch` of their requests together).
fn run_workers(args: &ServeBenchArgs) -> usize {
    let at_once = if args.hog > 0 {
        args.users - args.hog
    } else {
        args.concurrency
    };
    at_once.clamp(1, 16)
}

fn drive(server: &BenchServer, tokens: &[String], args: &ServeBenchArgs) -> anyhow::Result<Value> {
    let rss_idle = server.rss_mib();
    let done = AtomicBool::new(false);
    let health: Mutex<Vec<Duration>> = Mutex::new(Vec::new());
    let rss_peak: Mutex<f64> = Mutex::new(rss_idle.unwrap_or(0.0));
    let samples: Mutex<Vec<Sample>> = Mutex::new(Vec::new());
    let errors: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let conversations = args.conversations.unwrap_or(args.concurrency);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let started = Instant::now();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                let asked = Instant::now();
                if ureq::get(&server.url("/healthz")).call().is_ok() {
                    lock(&health).push(asked.elapsed());
                }
                if let Some(rss) = server.rss_mib() {
                    let mut peak = lock(&rss_peak);
                    *peak = peak.max(rss);
                }
                std::thread::sleep(PROBE_INTERVAL);
            }
        });
        // Each of `concurrency` clients takes the next conversation when its last one ends.
        let chats: Vec<_> = (0..args.concurrency)
            .map(|_| {
                let (samples, errors, next) = (&samples, &errors, &next);
                scope.spawn(move || loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    if index >= conversations {
                        break;
                    }
                    let auth = &tokens[index % tokens.len()];
                    if let Err(err) = chat(server, auth, index, args.messages, samples) {
                        lock(errors).push(format!("{err:#}"));
                        break;
                    }
                })
            })
            .collect();
        for chat in chats {
            let _ = chat.join();
        }
        done.store(true, Ordering::Relaxed);
    });
    let wall = started.elapsed();
    let errors = errors.into_inner().unwrap_or_default();
    anyhow::ensure!(
        errors.is_empty(),
        "conversations failed: {}",
        errors.join("; ")
    );
    let samples = samples.into_inner().unwrap_or_default();
    let completed = samples.iter().filter(|s| s.completed).count();
    let mut ttfts: Vec<f64> = samples.iter().filter_map(|s| s.ttft).map(ms).collect();
    let mut totals: Vec<f64> = samples.iter().map(|s| ms(s.total)).collect();
    let usages: Vec<(u64, u64)> = samples.iter().filter_map(|s| s.usage).collect();
    let mean = |pick: fn(&(u64, u64)) -> u64| {
        (!usages.is_empty())
            .then(|| usages.iter().map(pick).sum::<u64>() as f64 / usages.len() as f64)
    };
    let completion_tokens: u64 = usages.iter().map(|u| u.1).sum();
    anyhow::ensure!(
        completion_tokens > 0,
        "no run generated a token: the benchmark measured nothing (did the model answer?)"
    );
    let mut health: Vec<f64> = health
        .into_inner()
        .unwrap_or_default()
        .into_iter()
        .map(ms)
        .collect();
    Ok(json!({
        "bench": "serve",
        "concurrency": args.concurrency,
        "conversations": conversations,
        "max_batch": args.max_batch,
        "users": args.users,
        "messages_per_conversation": args.messages,
        "max_answer_tokens": args.max_answer_tokens,
        "runs": samples.len(),
        "runs_completed": completed,
        "wall_s": wall.as_secs_f64(),
        "completed_runs_per_s": completed as f64 / wall.as_secs_f64(),
        "ttft_ms_p50": percentile(&mut ttfts, 0.50),
        "ttft_ms_p95": percentile(&mut ttfts, 0.95),
        "run_ms_p50": percentile(&mut totals, 0.50),
        "run_ms_p95": percentile(&mut totals, 0.95),
        "prompt_tokens_mean": mean(|u| u.0),
        "completion_tokens_mean": mean(|u| u.1),
        "completion_tokens_per_s": completion_tokens as f64 / wall.as_secs_f64(),
        "healthz_ms_p95": percentile(&mut health, 0.95),
        "healthz_ms_max": health.iter().cloned().fold(0.0, f64::max),
        "rss_mib_idle": rss_idle,
        "rss_mib_peak": *lock(&rss_peak),
    }))
}

/// The normal users chat alone, then again while the hogs flood the queue.
fn fairness(
    server: &BenchServer,
    tokens: &[String],
    args: &ServeBenchArgs,
) -> anyhow::Result<Value> {
    let (hogs, normal) = tokens.split_at(args.hog);
    let quiet = normal_users(server, normal, args)?;
    let stop = AtomicBool::new(false);
    let posted = std::sync::atomic::AtomicUsize::new(0);
    let refused = std::sync::atomic::AtomicUsize::new(0);
    let errors: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let flood = std::thread::scope(|scope| {
        for (index, auth) in hogs.iter().enumerate() {
            let (stop, posted, refused, errors) = (&stop, &posted, &refused, &errors);
            scope.spawn(move || {
                if let Err(err) = hog(server, auth, index, stop, posted, refused) {
                    lock(errors).push(format!("{err:#}"));
                }
            });
        }
        // The flood is on once the hogs have been refused for a full queue.
        let started = Instant::now();
        while refused.load(Ordering::Relaxed) == 0 && started.elapsed() < START_TIMEOUT {
            std::thread::sleep(Duration::from_millis(50));
        }
        let measured = normal_users(server, normal, args);
        stop.store(true, Ordering::Relaxed);
        measured
    })?;
    let errors = errors.into_inner().unwrap_or_default();
    anyhow::ensure!(errors.is_empty(), "the flood failed: {}", errors.join("; "));
    let summary = |samples: &[Sample]| {
        let mut ttfts: Vec<f64> = samples.iter().filter_map(|s| s.ttft).map(ms).collect();
        let mut totals: Vec<f64> = samples.iter().map(|s| ms(s.total)).collect();
        json!({
            "runs": samples.len(),
            "runs_completed": samples.iter().filter(|s| s.completed).count(),
            "ttft_ms_p50": percentile(&mut ttfts, 0.50),
            "ttft_ms_p95": percentile(&mut ttfts, 0.95),
            "run_ms_p95": percentile(&mut totals, 0.95),
        })
    };
    Ok(json!({
        "bench": "serve",
        "mode": "fairness",
        "users": args.users,
        "hog": args.hog,
        "messages_per_conversation": args.messages,
        "max_answer_tokens": args.max_answer_tokens,
        "run_workers": run_workers(args),
        "normal_without_flood": summary(&quiet),
        "normal_with_flood": summary(&flood),
        "hog_messages_accepted": posted.load(Ordering::Relaxed),
        "hog_messages_refused_429": refused.load(Ordering::Relaxed),
    }))
}

/// Each normal user runs one conversation of `args.messages` turns, all at once.
fn normal_users(
    server: &BenchServer,
    tokens: &[String],
    args: &ServeBenchArgs,
) -> anyhow::Result<Vec<Sample>> {
    let samples: Mutex<Vec<Sample>> = Mutex::new(Vec::new());
    let errors: Mutex<Vec<String>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for (index, auth) in tokens.iter().enumerate() {
            let (samples, errors) = (&samples, &errors);
            scope.spawn(move || {
                if let Err(err) = chat(server, auth, index, args.messages, samples) {
                    lock(errors).push(format!("{err:#}"));
                }
            });
        }
    });
    let errors = errors.into_inner().unwrap_or_default();
    anyhow::ensure!(
        errors.is_empty(),
        "conversations failed: {}",
        errors.join("; ")
    );
    Ok(samples.into_inner().unwrap_or_default())
}

/// Posts messages into new conversations until `stop`; a 429 (queue allowance used up)
/// is counted and retried shortly after.
fn hog(
    server: &BenchServer,
    auth: &str,
    index: usize,
    stop: &AtomicBool,
    posted: &std::sync::atomic::AtomicUsize,
    refused: &std::sync::atomic::AtomicUsize,
) -> anyhow::Result<()> {
    let mut sent = 0usize;
    let mut conversation: Option<String> = None;
    while !stop.load(Ordering::Relaxed) {
        let id = match &conversation {
            Some(id) => id.clone(),
            None => {
                let created: Value = ureq::post(&server.url("/api/conversations"))
                    .set("Authorization", auth)
                    .send_json(json!({ "title": format!("flood {index}.{sent}") }))?
                    .into_json()?;
                let id = created["id"].as_str().context("no conversation id")?;
                conversation.insert(id.to_owned()).clone()
            }
        };
        let answer = ureq::post(&server.url(&format!("/api/conversations/{id}/messages")))
            .set("Authorization", auth)
            .send_json(
                json!({ "content": format!("Flood {index}.{sent}: tell me a long story.") }),
            );
        match answer {
            Ok(_) => {
                posted.fetch_add(1, Ordering::Relaxed);
                // The next message goes to a new conversation, so none waits for another.
                conversation = None;
            }
            Err(ureq::Error::Status(429, _)) => {
                refused.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(err) => return Err(err.into()),
        }
        sent += 1;
    }
    Ok(())
}

/// One conversation: `messages` turns, each followed to its terminal event.
fn chat(
    server: &BenchServer,
    auth: &str,
    index: usize,
    messages: usize,
    samples: &Mutex<Vec<Sample>>,
) -> anyhow::Result<()> {
    let conversation: Value = ureq::post(&server.url("/api/conversations"))
        .set("Authorization", auth)
        .send_json(json!({ "title": format!("bench {index}") }))?
        .into_json()?;
    let id = conversation["id"].as_str().context("no conversation id")?;
    for turn in 0..messages {
        let asked = Instant::now();
        let posted: Value = ureq::post(&server.url(&format!("/api/conversations/{id}/messages")))
            .set("Authorization", auth)
            .send_json(json!({ "content": format!("Conversation {index}, question {turn}: how do I find what is filling a disk?") }))?
            .into_json()?;
        let run_id = posted["run_id"].as_str().context("no run id")?;
        let stream = ureq::get(&server.url(&format!("/api/runs/{run_id}/events")))
            .set("Authorization", auth)
            .call()?;
        let end = follow(BufReader::new(stream.into_reader()), asked)?;
        lock(samples).push(Sample {
            ttft: end.ttft,
            total: asked.elapsed(),
            completed: end.terminal == "run.completed",
            usage: end.usage,
        });
    }
    Ok(())
}

/// What one run's event stream showed.
struct Followed {
    /// Time to the first `message.delta`.
    ttft: Option<Duration>,
    /// The terminal event's type.
    terminal: String,
    /// The terminal event's `usage`: (prompt tokens, completion tokens).
    usage: Option<(u64, u64)>,
}

/// Reads an SSE stream to its terminal event and that event's data line.
fn follow(reader: impl BufRead, asked: Instant) -> anyhow::Result<Followed> {
    let mut ttft = None;
    let mut terminal: Option<String> = None;
    for line in reader.lines() {
        let line = line?;
        if let Some(event) = line.strip_prefix("event: ") {
            if event == "message.delta" && ttft.is_none() {
                ttft = Some(asked.elapsed());
            }
            if crate::runs::events::is_terminal(event) {
                terminal = Some(event.to_owned());
            }
            continue;
        }
        let Some(end) = &terminal else { continue };
        let usage = match line.strip_prefix("data: ") {
            Some(data) => {
                let data: Value = serde_json::from_str(data).unwrap_or(Value::Null);
                let count = |key: &str| data["usage"][key].as_u64();
                count("prompt_tokens").zip(count("completion_tokens"))
            }
            None if line.is_empty() => None,
            None => continue,
        };
        return Ok(Followed {
            ttft,
            terminal: end.clone(),
            usage,
        });
    }
    match terminal {
        Some(terminal) => Ok(Followed {
            ttft,
            terminal,
            usage: None,
        }),
        None => anyhow::bail!("the event stream ended without a terminal event"),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// The `q` quantile (nearest rank) of `values`; `None` when empty.
fn percentile(values: &mut [f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    Some(values[rank - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let mut values = vec![5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(percentile(&mut values, 0.5), Some(3.0));
        assert_eq!(percentile(&mut values, 0.95), Some(5.0));
        assert_eq!(percentile(&mut [], 0.5), None);
    }

    #[test]
    fn follow_finds_the_first_delta_and_the_end() {
        let stream = "id: 1\nevent: run.started\ndata: {}\n\n: keep-alive\n\nid: 2\nevent: message.delta\ndata: {}\n\nid: 3\nevent: run.completed\ndata: {\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":7}}\n\n";
        let end = follow(stream.as_bytes(), Instant::now()).unwrap();
        assert!(end.ttft.is_some());
        assert_eq!(end.terminal, "run.completed");
        assert_eq!(end.usage, Some((40, 7)));
        let bare = "event: run.cancelled\ndata: {}\n\n";
        assert_eq!(follow(bare.as_bytes(), Instant::now()).unwrap().usage, None);
        assert!(follow("event: run.started\n".as_bytes(), Instant::now()).is_err());
    }
}
