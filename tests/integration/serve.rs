//! The server under load on the real model: health stays fast during generation, a full
//! queue answers 503 with Retry-After, a client that disconnects frees the model, and a
//! seeded request returns the same text whatever the prompt cache held.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::util::Server;

fn long_generation_body(max_tokens: u32) -> serde_json::Value {
    json!({
        "model": "smollm2-135m-instruct",
        "messages": [{"role": "user", "content": "Write a long story about a lighthouse keeper."}],
        "max_tokens": max_tokens,
        "stream": true
    })
}

/// Starts a streamed generation on a raw socket and returns the socket (still open).
fn start_stream(server: &Server, max_tokens: u32) -> TcpStream {
    let address = server.base.trim_start_matches("http://");
    let body = long_generation_body(max_tokens).to_string();
    let mut socket = TcpStream::connect(address).expect("connect");
    write!(
        socket,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        server.token,
        body.len()
    )
    .expect("send request");
    // Wait for the first bytes of the stream, so the generation is really running.
    let mut buffer = [0u8; 256];
    socket
        .set_read_timeout(Some(Duration::from_secs(120)))
        .expect("timeout");
    let read = socket.read(&mut buffer).expect("first stream bytes");
    assert!(
        read > 0 && buffer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&buffer[..read])
    );
    socket
}

#[test]
fn health_answers_fast_during_a_long_generation() {
    let server = Server::start(&[]);
    let _stream = start_stream(&server, 400);
    let mut worst = Duration::ZERO;
    for _ in 0..10 {
        let started = Instant::now();
        let response = server.get("/healthz").call().expect("healthz");
        assert_eq!(response.status(), 200);
        worst = worst.max(started.elapsed());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        worst < Duration::from_millis(100),
        "slowest /healthz took {worst:?}"
    );
}

#[test]
fn a_full_queue_answers_503_with_retry_after() {
    let server = Server::start(&["--queue-depth", "1", "--max-batch", "1"]);
    // One generation runs, one waits in the queue: the next must be refused at once.
    let _running = start_stream(&server, 400);
    let address = server.base.trim_start_matches("http://").to_string();
    let body = long_generation_body(400).to_string();
    let mut queued = TcpStream::connect(&address).expect("connect");
    write!(queued, "POST /v1/chat/completions HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", server.token, body.len())
        .expect("send");
    std::thread::sleep(Duration::from_millis(500));
    let refused = server
        .post("/v1/chat/completions")
        .send_json(long_generation_body(4));
    match refused {
        Err(ureq::Error::Status(503, response)) => {
            assert!(
                response.header("retry-after").is_some(),
                "no Retry-After header"
            );
            let body: serde_json::Value = response.into_json().expect("json error");
            assert!(body["error"]["message"].is_string(), "{body}");
        }
        other => panic!("expected 503, got {:?}", other.map(|r| r.status())),
    }
}

#[test]
fn a_disconnected_client_frees_the_model() {
    let server = Server::start(&["--queue-depth", "1", "--max-batch", "1"]);
    let stream = start_stream(&server, 2000);
    drop(stream);
    // If the abandoned generation kept running, this short request would wait for 2000
    // tokens (over a minute); cancelled, it finishes in seconds.
    let started = Instant::now();
    let (status, body) = server.post_json(
        "/v1/chat/completions",
        &json!({"model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}),
    );
    assert_eq!(status, 200, "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn a_bad_agent_policy_stops_the_server_at_start_with_the_key() {
    let data = tempfile::tempdir().expect("temp dir");
    let policy = crate::util::write_file(
        data.path(),
        "policy.toml",
        b"[chat]\nmax_tool_calls = 500\n",
    );
    let output = crate::util::warden()
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--sample-kb",
            "/nonexistent",
            "--data",
        ])
        .arg(data.path().join("d"))
        .arg("--agent-policy")
        .arg(&policy)
        .output()
        .expect("run warden serve");
    assert!(!output.status.success());
    let stderr = crate::util::stderr(&output);
    assert!(
        stderr.contains("chat.max_tool_calls") && stderr.contains("policy.toml"),
        "{stderr}"
    );
}

/// A seeded, sampled json_schema request returns the same text whatever the prompt-prefix
/// cache held before it: nothing, a long shared prefix, or an unrelated conversation.
#[test]
fn a_seeded_request_gives_the_same_text_whatever_was_cached() {
    let server = Server::start(&[]);
    let system = "You are the on-call assistant for the payments platform. Answer in JSON.";
    let body = |user: &str| {
        json!({
            "model": "smollm2-135m-instruct",
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user}
            ],
            "response_format": {"type": "json_schema", "json_schema": {"name": "status", "schema": {
                "type": "object",
                "properties": {"service": {"type": "string"}, "healthy": {"type": "boolean"}},
                "required": ["service", "healthy"]
            }}},
            "temperature": 0.9,
            "seed": 42,
            "max_tokens": 48
        })
    };
    let ask = |user: &str| -> (String, u64) {
        let (status, reply) = server.post_json("/v1/chat/completions", &body(user));
        assert_eq!(status, 200, "{reply}");
        let text = reply["choices"][0]["message"]["content"]
            .as_str()
            .expect("content")
            .to_string();
        let cached = reply["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap_or(0);
        (text, cached)
    };
    let question = "Is the ledger service healthy?";
    let (alone, _) = ask(question);
    // A request sharing the system prompt leaves a long common prefix cached.
    ask("Is the card gateway healthy?");
    let (after_prefix, cached_long) = ask(question);
    // An unrelated request leaves only the first template tokens in common.
    let (status, _) = server.post_json(
        "/v1/chat/completions",
        &json!({
            "model": "smollm2-135m-instruct",
            "messages": [{"role": "user", "content": "Name three colours."}],
            "max_tokens": 8
        }),
    );
    assert_eq!(status, 200);
    let (after_other, cached_short) = ask(question);
    assert!(
        cached_long > cached_short + 10,
        "the runs should reuse different prefixes: {cached_long} vs {cached_short} cached tokens"
    );
    assert_eq!(after_prefix, alone, "with {cached_long} cached tokens");
    assert_eq!(after_other, alone, "with {cached_short} cached tokens");
    serde_json::from_str::<serde_json::Value>(&alone).expect("schema output parses");
}

/// Concurrent chats are decoded together (continuous batching), and a seeded request
/// returns the same text in a batch as alone: free text, and json_schema output whose
/// token masks are computed side by side on the model's threads when several sample in
/// one step.
#[test]
fn concurrent_requests_are_batched_and_give_the_same_text_as_alone() {
    let server = Server::start(&["--max-batch", "4"]);
    let body = |user: &str, seed: u64| {
        let mut body = json!({
            "model": "smollm2-135m-instruct",
            "messages": [{"role": "user", "content": user}],
            "temperature": 0.8,
            "seed": seed,
            "max_tokens": 32
        });
        if seed % 2 == 1 {
            body["response_format"] = json!({"type": "json_schema", "json_schema": {
                "name": "answer",
                "schema": {
                    "type": "object",
                    "properties": {"answer": {"type": "string"}, "urgent": {"type": "boolean"}},
                    "required": ["answer", "urgent"]
                }
            }});
        }
        body
    };
    let ask = |user: &str, seed: u64| -> String {
        let (status, reply) = server.post_json("/v1/chat/completions", &body(user, seed));
        assert_eq!(status, 200, "{reply}");
        reply["choices"][0]["message"]["content"]
            .as_str()
            .expect("content")
            .to_string()
    };
    let questions = [
        "Why is the disk on the log volume full?",
        "How do I restart nginx safely?",
        "What does a 502 from the gateway mean?",
        "When should I page the database on-call?",
    ];
    let alone: Vec<String> = questions
        .iter()
        .enumerate()
        .map(|(i, q)| ask(q, i as u64))
        .collect();
    let running = std::sync::atomic::AtomicBool::new(true);
    let (together, most_in_flight) = std::thread::scope(|scope| {
        let watcher = scope.spawn(|| {
            let mut most = 0u64;
            while running.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(response) = server.get("/metrics").call() {
                    let text = response.into_string().unwrap_or_default();
                    most = most.max(in_flight(&text));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            most
        });
        let handles: Vec<_> = questions
            .iter()
            .enumerate()
            .map(|(i, q)| scope.spawn(move || ask(q, i as u64)))
            .collect();
        // Every request is joined before any failure is raised, so the watcher always stops.
        let answers: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
        running.store(false, std::sync::atomic::Ordering::Relaxed);
        (answers, watcher.join().expect("watcher"))
    });
    let together: Vec<String> = together
        .into_iter()
        .map(|answer| answer.expect("request thread"))
        .collect();
    assert_eq!(together, alone);
    assert!(
        most_in_flight >= 2,
        "the model never worked on two requests at once (at most {most_in_flight})"
    );
}

/// The chat model's in-flight requests in a Prometheus text exposition.
fn in_flight(metrics: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("warden_model_requests_in_flight") && l.contains("smollm2"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .max()
        .unwrap_or(0)
}
