//! Durable runs on the real model: every run survives `kill -9` of the server (completed,
//! or failed with a reason; one answer per turn; gapless events; a healthy database), and
//! SSE clients that drop and reconnect with `Last-Event-ID` see every event exactly once.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::sse::{streamed_text, Frame, FrameReader};
use crate::util::{add_user, create_token, free_port, run, stdout, Server, ADMIN};

/// How long all runs of a test may take to end.
const RUNS_TIMEOUT: Duration = Duration::from_secs(600);

pub fn create_conversation(server: &Server) -> String {
    let (status, body) = server.post_json("/api/conversations", &json!({"title": "t"}));
    assert_eq!(status, 201, "{body}");
    body["id"].as_str().expect("id").to_owned()
}

fn ask(server: &Server, conversation: &str, content: &str) -> String {
    let path = format!("/api/conversations/{conversation}/messages");
    let (status, body) = server.post_json(&path, &json!({ "content": content }));
    assert_eq!(status, 202, "{body}");
    body["run_id"].as_str().expect("run_id").to_owned()
}

pub fn get_json(server: &Server, path: &str) -> Value {
    server
        .get(path)
        .call()
        .unwrap_or_else(|e| panic!("GET {path}: {e}"))
        .into_json()
        .expect("json")
}

/// Waits until every run has ended; returns them by id.
fn wait_for_runs(server: &Server, runs: &[String]) -> HashMap<String, Value> {
    let started = Instant::now();
    loop {
        let states: HashMap<String, Value> = runs
            .iter()
            .map(|id| (id.clone(), get_json(server, &format!("/api/runs/{id}"))))
            .collect();
        let open: Vec<&String> = states
            .iter()
            .filter(|(_, run)| matches!(run["status"].as_str(), Some("queued" | "running")))
            .map(|(id, _)| id)
            .collect();
        if open.is_empty() {
            return states;
        }
        assert!(
            started.elapsed() < RUNS_TIMEOUT,
            "runs still open after {RUNS_TIMEOUT:?}: {open:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Reads a run's events from `after` until the terminal event (or `max` frames).
fn read_events(server: &Server, run_id: &str, after: i64, max: usize) -> Vec<Frame> {
    let response = server
        .get(&format!("/api/runs/{run_id}/events"))
        .set("Last-Event-ID", &after.to_string())
        .call()
        .expect("events stream");
    assert_eq!(response.status(), 200);
    let mut reader = FrameReader::new(response.into_reader());
    let mut frames = Vec::new();
    while frames.len() < max {
        let Some(frame) = reader.next_frame() else {
            break;
        };
        let terminal = frame.is_terminal();
        frames.push(frame);
        if terminal {
            break;
        }
    }
    frames
}

fn assert_gapless(frames: &[Frame], run_id: &str) {
    let ids: Vec<i64> = frames.iter().map(|f| f.id).collect();
    let expected: Vec<i64> = (1..=frames.len() as i64).collect();
    assert_eq!(ids, expected, "run {run_id}: event seqs are not 1..n");
    let terminal: Vec<&Frame> = frames.iter().filter(|f| f.is_terminal()).collect();
    assert_eq!(terminal.len(), 1, "run {run_id}: {frames:?}");
    assert!(
        frames.last().is_some_and(Frame::is_terminal),
        "run {run_id}"
    );
}

#[test]
fn runs_survive_kill_9_at_random_moments() {
    let seed: u64 = rand::rng().random();
    println!("kill schedule seed: {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let data = tempfile::tempdir().expect("temp dir");
    add_user(data.path(), ADMIN, "admin", "admin-password-1");
    let token = create_token(data.path(), ADMIN);
    let port = free_port();
    let flags = ["--max-answer-tokens", "40", "--sample-kb", "/nonexistent"];
    let mut server = Server::start_in(data.path(), &token, port, &flags);

    let conversations: Vec<String> = (0..4).map(|_| create_conversation(&server)).collect();
    // As many runs as a user may have waiting (8): together they keep a CPU's model busy
    // for over a second, so the first kill, within 0.6 s, lands while runs are in flight
    // (faster answers once let all of them end before a kill 0.8–4 s in); the later
    // kills land at any moment (running, resuming, or idle once all have ended).
    let mut runs = Vec::new();
    for index in 0..8 {
        let conversation = &conversations[index % conversations.len()];
        runs.push(ask(
            &server,
            conversation,
            // Small talk, answered by the model (a knowledge question with no knowledge
            // base abstains at once, without one).
            &format!("Hello! Message {index}: tell me about your day."),
        ));
    }
    for kill in 0..4 {
        let after = if kill == 0 { 100..600 } else { 300..3000 };
        std::thread::sleep(Duration::from_millis(rng.random_range(after)));
        server.kill();
        server = Server::start_in(data.path(), &token, port, &flags);
    }
    let states = wait_for_runs(&server, &runs);

    let mut resumed = 0;
    for (id, run) in &states {
        match run["status"].as_str() {
            Some("completed") => {}
            Some("failed") => assert!(
                run["failure_reason"]
                    .as_str()
                    .is_some_and(|r| !r.is_empty()),
                "failed without a reason: {run}"
            ),
            other => panic!("run {id} ended {other:?}: {run}"),
        }
        if run["attempts"].as_i64().unwrap_or(0) > 1 {
            resumed += 1;
        }
        let frames = read_events(&server, id, 0, usize::MAX);
        assert_gapless(&frames, id);
        let last = frames.last().expect("terminal");
        assert_eq!(
            last.event,
            format!("run.{}", run["status"].as_str().unwrap_or(""))
        );
    }
    assert!(
        resumed > 0,
        "no kill hit a running run: the test proved nothing"
    );

    for conversation in &conversations {
        let body = get_json(&server, &format!("/api/conversations/{conversation}"));
        let messages = body["messages"].as_array().expect("messages");
        let mut answers_per_turn: HashMap<i64, usize> = HashMap::new();
        for message in messages.iter().filter(|m| m["role"] == "assistant") {
            *answers_per_turn
                .entry(message["turn"].as_i64().unwrap_or(0))
                .or_default() += 1;
            // The stored answer is exactly what the stream showed, across restarts.
            let run_id = message["run_id"].as_str().expect("run id");
            let frames = read_events(&server, run_id, 0, usize::MAX);
            assert_eq!(
                message["content"].as_str(),
                Some(streamed_text(&frames).as_str())
            );
            assert_eq!(states[run_id]["status"], "completed");
        }
        assert!(
            answers_per_turn.values().all(|&n| n == 1),
            "{answers_per_turn:?}"
        );
    }
    let completed = states
        .values()
        .filter(|r| r["status"] == "completed")
        .count();
    println!(
        "{completed}/{} runs completed, {resumed} resumed after a kill",
        runs.len()
    );

    server.kill();
    let doctor = run(&[
        "doctor",
        "--json",
        "--data",
        data.path().to_str().expect("utf-8"),
    ]);
    assert!(doctor.status.success(), "{}", stdout(&doctor));
    let report: Value = serde_json::from_str(&stdout(&doctor)).expect("doctor json");
    assert_eq!(report["integrity_ok"], true, "{report}");
}

#[test]
fn sse_reconnects_with_last_event_id_miss_nothing_and_repeat_nothing() {
    let server = Server::start(&["--max-answer-tokens", "80", "--sample-kb", "/nonexistent"]);
    let mut rng = StdRng::seed_from_u64(7);
    let conversation = create_conversation(&server);
    let runs: Vec<String> = (0..6)
        .map(|i| {
            ask(
                &server,
                &conversation,
                &format!("Tell me about log rotation, part {i}."),
            )
        })
        .collect();
    let mut total_reconnects = 0;
    for run_id in &runs {
        let mut seen: Vec<Frame> = Vec::new();
        let mut reconnects = 0;
        loop {
            let after = seen.last().map_or(0, |f| f.id);
            let batch = read_events(&server, run_id, after, rng.random_range(1..8));
            let ended = batch.last().is_some_and(Frame::is_terminal);
            seen.extend(batch);
            if ended {
                break;
            }
            reconnects += 1;
            assert!(reconnects < 10_000, "run {run_id} never ended");
        }
        let full = read_events(&server, run_id, 0, usize::MAX);
        assert_eq!(
            seen, full,
            "run {run_id}: reconnected stream differs from the log"
        );
        assert_gapless(&full, run_id);
        // `?after=` works like Last-Event-ID, and a finished run's stream closes.
        let tail: Vec<Frame> = {
            let response = server
                .get(&format!(
                    "/api/runs/{run_id}/events?after={}",
                    full.len() - 1
                ))
                .call()
                .expect("events");
            let mut reader = FrameReader::new(response.into_reader());
            std::iter::from_fn(|| reader.next_frame()).collect()
        };
        assert_eq!(tail, full[full.len() - 1..].to_vec());
        total_reconnects += reconnects;
    }
    assert!(total_reconnects > 0, "no stream was ever interrupted");
}

#[test]
fn a_cancelled_run_ends_cancelled_without_an_answer_and_frees_the_model() {
    // Long enough that the story cannot end before the cancel (milliseconds after the run
    // is claimed), short enough that the answers after it stay quick.
    let server = Server::start(&["--max-answer-tokens", "120", "--sample-kb", "/nonexistent"]);
    let conversation = create_conversation(&server);
    let long = ask(
        &server,
        &conversation,
        "Hello! Please tell me a very long story about a lighthouse keeper.",
    );
    // Wait until a worker is on it (the agent routes, then the model works for seconds).
    let started = Instant::now();
    while get_json(&server, &format!("/api/runs/{long}"))["status"] != "running" {
        assert!(
            started.elapsed() < RUNS_TIMEOUT,
            "the run was never claimed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let waiting = ask(&server, &conversation, "And a short one?");
    // Stop the long answer while the model works on it. (Heartbeats on an idle stream are
    // tested on a queued diagnostic run: tests/integration/diagnostics.rs.)
    let (status, run) = server.post_json(&format!("/api/runs/{long}/cancel"), &json!({}));
    assert_eq!(status, 202, "{run}");
    assert_eq!(run["status"], "cancelled");
    let frames = read_events(&server, &long, 0, usize::MAX);
    assert_gapless(&frames, &long);
    assert_eq!(
        frames.last().map(|f| f.event.as_str()),
        Some("run.cancelled")
    );
    // Cancelling again changes nothing.
    let (status, again) = server.post_json(&format!("/api/runs/{long}/cancel"), &json!({}));
    assert_eq!((status, again["status"].as_str()), (202, Some("cancelled")));

    // The model is free at once: a short question after it completes. (It asks the time:
    // the clock reading stands even when the tiny model's wording fails, so the run's
    // outcome shows the model was free, not how well it writes.)
    let next = ask(&server, &conversation, "What time is it now?");
    let states = wait_for_runs(&server, &[waiting.clone(), next.clone()]);
    assert_eq!(states[&next]["status"], "completed", "{}", states[&next]);
    let body = get_json(&server, &format!("/api/conversations/{conversation}"));
    let answers: Vec<&Value> = body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "assistant")
        .collect();
    let answered: Vec<&str> = answers
        .iter()
        .filter_map(|m| m["run_id"].as_str())
        .collect();
    assert!(
        !answered.contains(&long.as_str()),
        "the cancelled turn got an answer: {body}"
    );
    assert!(answered.contains(&next.as_str()), "{body}");
}

/// Asserts that the run's event stream carries a `: keep-alive` comment within `limit`.
pub fn assert_heartbeat_within(request: ureq::Request, limit: Duration) {
    use std::io::BufRead;
    let response = request
        .timeout(limit + Duration::from_secs(5))
        .call()
        .expect("events stream");
    let started = Instant::now();
    let mut lines = std::io::BufReader::new(response.into_reader()).lines();
    loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("stream ended before a heartbeat"))
            .unwrap_or_else(|e| panic!("no heartbeat within {limit:?}: {e}"));
        if line.starts_with(':') {
            break;
        }
        let ended = ["run.completed", "run.failed", "run.cancelled"]
            .iter()
            .any(|end| line == format!("event: {end}"));
        assert!(!ended, "the run ended before a heartbeat: {line}");
    }
    assert!(
        started.elapsed() <= limit,
        "first heartbeat after {:?}",
        started.elapsed()
    );
}
