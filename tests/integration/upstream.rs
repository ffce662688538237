//! Upstream engines end to end, on real servers: one Warden (on the default model) is the
//! OpenAI-compatible upstream of another that loads no chat model of its own. Through the
//! second: `/v1` streaming and structured output, a cited knowledge answer, the admin's view
//! of the endpoint in `/healthz` and `/metrics`; the upstream killed mid-answer (the stream
//! fails at once with the reason, nothing retried after tokens), a run while it is down
//! (failed with a clear reason), the upstream restarted (the next message works), and a
//! models file whose first endpoint is down (failover to the second).

use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::agent::{ask, data_of, wait_for_sample_kb};
use crate::util::{free_port, into_status_and_json, write_file, Server, DEFAULT_CHAT_MODEL};

fn port_of(server: &Server) -> u16 {
    server
        .base
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("the server's port")
}

/// A Warden whose chat model is `upstream`'s default model, reached with its admin token.
fn downstream(upstream: &Server, extra: &[&str]) -> Server {
    let url = format!("http://127.0.0.1:{}/v1", port_of(upstream));
    let mut flags = vec![
        "--chat-upstream",
        url.as_str(),
        "--chat-upstream-model",
        DEFAULT_CHAT_MODEL,
    ];
    flags.extend_from_slice(extra);
    let key = upstream.token.clone();
    Server::start_configured(&flags, move |command| {
        command
            .env_remove("WARDEN_CHAT_MODEL")
            .env("WARDEN_UPSTREAM_API_KEY", key);
    })
}

fn conversation(server: &Server) -> String {
    let (status, body) = server.post_json("/api/conversations", &json!({"title": "upstream"}));
    assert_eq!(status, 201, "{body}");
    body["id"].as_str().expect("id").to_owned()
}

/// Streams a chat completion; the text and the error event, if any, with the time taken.
fn stream_chat(
    server: &Server,
    body: Value,
    on_first_text: &mut dyn FnMut(),
) -> (String, Option<Value>, Duration) {
    let started = Instant::now();
    let response = match server.post("/v1/chat/completions").send_json(body) {
        Ok(response) => response,
        Err(ureq::Error::Status(status, response)) => {
            let body = response.into_string().unwrap_or_default();
            let error = json!({"status": status, "body": body});
            return (String::new(), Some(error), started.elapsed());
        }
        Err(err) => panic!("the stream did not start: {err}"),
    };
    let reader = BufReader::new(response.into_reader());
    let mut text = String::new();
    let mut error = None;
    for line in reader.lines() {
        let Ok(line) = line else { break };
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            break;
        }
        let chunk: Value = serde_json::from_str(data).expect("a chunk is JSON");
        if chunk.get("error").is_some() {
            error = Some(chunk);
            break;
        }
        if let Some(piece) = chunk["choices"][0]["delta"]["content"].as_str() {
            if text.is_empty() && !piece.is_empty() {
                on_first_text();
            }
            text.push_str(piece);
        }
    }
    (text, error, started.elapsed())
}

#[test]
fn a_warden_answers_through_another_warden_as_its_upstream() {
    let mut upstream = Server::start(&["--chat-model", DEFAULT_CHAT_MODEL]);
    let upstream_port = port_of(&upstream);
    let server = downstream(&upstream, &[]);
    wait_for_sample_kb(&server);

    // The upstream model is the default chat model, with the upstream's context length.
    let (_, models) = into_status_and_json(server.get("/v1/models").call());
    let chat = models["data"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["kind"] == "chat")
        .cloned()
        .expect("a chat model");
    assert_eq!(chat["id"], DEFAULT_CHAT_MODEL);
    assert_eq!(chat["architecture"], "upstream");
    assert!(
        chat["context_length"].as_u64().unwrap_or(0) >= 2048,
        "{chat}"
    );

    // /v1 streams the upstream's tokens.
    let (text, error, _) = stream_chat(
        &server,
        json!({"messages": [{"role": "user", "content": "Say hello in three words."}],
               "max_tokens": 16, "stream": true, "temperature": 0}),
        &mut || {},
    );
    assert!(error.is_none(), "{error:?}");
    assert!(!text.trim().is_empty());

    // Structured output through the upstream is valid JSON for its schema.
    let schema = json!({"type": "object", "additionalProperties": false,
        "required": ["severity"],
        "properties": {"severity": {"type": "string", "enum": ["low", "high"]}}});
    let (status, body) = server.post_json(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "The database is down. Severity?"}],
                "max_tokens": 40, "temperature": 0,
                "response_format": {"type": "json_schema",
                                    "json_schema": {"name": "s", "schema": schema}}}),
    );
    assert_eq!(status, 200, "{body}");
    let content: Value = serde_json::from_str(
        body["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or(""),
    )
    .expect("valid JSON");
    assert!(
        matches!(content["severity"].as_str(), Some("low" | "high")),
        "{content}"
    );

    // A cited knowledge answer, every model call made by the upstream.
    let id = conversation(&server);
    let frames = ask(&server, &server.token, &id, crate::agent::QUESTION);
    let completed = &data_of(&frames, "run.completed")[0];
    assert_eq!(completed["outcome"], "answered", "{frames:?}");
    let citations = data_of(&frames, "citation");
    assert!(!citations.is_empty(), "no citation: {frames:?}");

    // Admins see the endpoint's health; /metrics counts its requests.
    let (_, health) = into_status_and_json(server.get("/healthz").call());
    let endpoint = &health["upstreams"][0]["endpoints"][0];
    assert_eq!(endpoint["circuit"], "closed", "{health}");
    assert!(endpoint["requests"].as_u64().unwrap_or(0) >= 3, "{health}");
    let metrics = server
        .get("/metrics")
        .call()
        .expect("metrics")
        .into_string()
        .expect("text");
    assert!(
        metrics.contains(
            "warden_upstream_requests_total{model=\"qwen2.5-coder-1.5b-instruct-q4_k_m\""
        ),
        "{metrics}"
    );
    assert!(
        !metrics.contains(&upstream.token),
        "the API key leaked into /metrics"
    );
    assert!(
        !server.stderr_text().contains(&upstream.token),
        "the API key was logged"
    );

    // The upstream killed mid-answer: the stream ends with the reason at once, and nothing
    // is retried after tokens streamed.
    let (_, error, took) = stream_chat(
        &server,
        json!({"messages": [{"role": "user", "content": "Count from 1 to 300, one number a line."}],
               "max_tokens": 600, "stream": true, "temperature": 0}),
        &mut || upstream.kill(),
    );
    let error = error.expect("the stream reports the failure");
    assert!(
        error.to_string().contains("upstream"),
        "the error names the upstream: {error}"
    );
    assert!(took < Duration::from_secs(60), "took {took:?}");

    // A run while the upstream is down ends (no run is stuck) and says why its model call
    // failed, without the upstream's address; the passages still stand as quoted lines.
    let frames = ask(&server, &server.token, &id, crate::agent::QUESTION);
    let reasons: Vec<String> = data_of(&frames, "answer.unsupported")
        .iter()
        .chain(data_of(&frames, "run.failed").iter())
        .map(Value::to_string)
        .collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("upstream engine") && r.contains("connect")),
        "{frames:?}"
    );
    let address = format!("127.0.0.1:{upstream_port}");
    assert!(reasons.iter().all(|r| !r.contains(&address)), "{reasons:?}");

    // The upstream restarted on the same port: the next message works.
    let restarted = Server::start_with(
        upstream.data(),
        &upstream.token,
        upstream_port,
        &["--chat-model", DEFAULT_CHAT_MODEL],
        |_| {},
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (text, error, _) = stream_chat(
            &server,
            json!({"messages": [{"role": "user", "content": "Say hi."}],
                   "max_tokens": 8, "stream": true}),
            &mut || {},
        );
        if error.is_none() && !text.is_empty() {
            break;
        }
        // An open circuit lets a probe through after its open period.
        assert!(
            Instant::now() < deadline,
            "the restarted upstream was never used: {error:?}"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    drop(server);

    // Two endpoints, the first down: the request fails over to the second.
    let dead = free_port();
    let models_file = write_file(
        restarted.data(),
        "models.toml",
        format!(
            "[[chat]]\nname = \"big\"\nupstream_model = \"{DEFAULT_CHAT_MODEL}\"\n\
             context_length = 4096\nconnect_timeout_seconds = 2\n\
             [[chat.endpoints]]\nurl = \"http://127.0.0.1:{dead}/v1\"\npriority = 0\n\
             [[chat.endpoints]]\nurl = \"http://127.0.0.1:{upstream_port}/v1\"\npriority = 1\n"
        )
        .as_bytes(),
    );
    let models_path = models_file.to_string_lossy().into_owned();
    let key = restarted.token.clone();
    let failover = Server::start_configured(&["--models-config", &models_path], move |command| {
        command
            .env_remove("WARDEN_CHAT_MODEL")
            .env("WARDEN_UPSTREAM_API_KEY", key);
    });
    let (text, error, _) = stream_chat(
        &failover,
        json!({"model": "big", "messages": [{"role": "user", "content": "Say hi."}],
               "max_tokens": 8, "stream": true}),
        &mut || {},
    );
    assert!(error.is_none(), "{error:?}");
    assert!(!text.is_empty());
    let (_, health) = into_status_and_json(failover.get("/healthz").call());
    let endpoints = &health["upstreams"][0]["endpoints"];
    assert_eq!(endpoints[0]["last_error"], "connect", "{health}");
    assert!(
        endpoints[1]["requests"].as_u64().unwrap_or(0) >= 1,
        "{health}"
    );
}

/// llama.cpp's own server, built once by `tests/upstream/llama-server`; killed on drop.
struct LlamaServer {
    child: std::process::Child,
}

/// The API key the llama.cpp server demands.
const LLAMA_KEY: &str = "llama-upstream-test-key";

impl LlamaServer {
    /// Serves the default GGUF on `port` (2 slots of 4,096 tokens).
    fn start(port: u16, log: &std::path::Path) -> LlamaServer {
        let built =
            std::process::Command::new(crate::util::repo().join("tests/upstream/llama-server"))
                .output()
                .expect("tests/upstream/llama-server runs");
        assert!(
            built.status.success(),
            "llama.cpp's server could not be built: {}",
            String::from_utf8_lossy(&built.stderr)
        );
        let binary = String::from_utf8_lossy(&built.stdout).trim().to_owned();
        let model = crate::util::models_dir().join(format!("{DEFAULT_CHAT_MODEL}.gguf"));
        let child = std::process::Command::new(&binary)
            .arg("-m")
            .arg(&model)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args([
                "-c",
                "8192",
                "-np",
                "2",
                "-t",
                "1",
                "-a",
                DEFAULT_CHAT_MODEL,
            ])
            .args(["--api-key", LLAMA_KEY])
            .stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(log).expect("log file"))
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("llama-server starts");
        let server = LlamaServer { child };
        let deadline = Instant::now() + Duration::from_secs(120);
        while ureq::get(&format!("http://127.0.0.1:{port}/health"))
            .timeout(Duration::from_secs(2))
            .call()
            .is_err()
        {
            assert!(Instant::now() < deadline, "llama-server did not come up");
            std::thread::sleep(Duration::from_millis(300));
        }
        server
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        self.kill();
    }
}

#[test]
fn llama_cpp_server_is_a_first_class_upstream() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let mut llama = LlamaServer::start(port, &scratch.path().join("llama.log"));
    let url = format!("http://127.0.0.1:{port}/v1");
    let key_file = write_file(scratch.path(), "key", LLAMA_KEY.as_bytes());
    let key_path = key_file.to_string_lossy().into_owned();
    let upstream_flags = [
        "--chat-upstream",
        url.as_str(),
        "--chat-upstream-model",
        DEFAULT_CHAT_MODEL,
        "--upstream-api-key-file",
        key_path.as_str(),
    ];
    let server = Server::start_configured(&upstream_flags, |command| {
        command.env_remove("WARDEN_CHAT_MODEL");
    });
    wait_for_sample_kb(&server);

    // The context window comes from the server's own metadata (each slot's 4,096).
    let (_, models) = into_status_and_json(server.get("/v1/models").call());
    assert_eq!(models["data"][0]["context_length"], 4096, "{models}");

    // A cited knowledge answer, written by llama.cpp.
    let id = conversation(&server);
    let frames = ask(&server, &server.token, &id, crate::agent::QUESTION);
    assert_eq!(
        data_of(&frames, "run.completed")[0]["outcome"],
        "answered",
        "{frames:?}"
    );
    assert!(
        !data_of(&frames, "citation").is_empty(),
        "no citation: {frames:?}"
    );
    let (_, health) = into_status_and_json(server.get("/healthz").call());
    assert!(
        health["upstreams"][0]["endpoints"][0]["requests"].as_u64() >= Some(1),
        "{health}"
    );

    // Tools pass through /v1 unchanged: Warden's answer is the one llama.cpp gives when
    // asked directly (for this GGUF's template llama.cpp writes the call as text).
    let tool_request = json!({
        "model": DEFAULT_CHAT_MODEL,
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather",
            "description": "Current weather of a city",
            "parameters": {"type": "object", "required": ["city"],
                           "properties": {"city": {"type": "string"}}}}}],
        "tool_choice": "required", "max_tokens": 48, "temperature": 0, "seed": 7});
    let (status, through) = server.post_json("/v1/chat/completions", &tool_request);
    assert_eq!(status, 200, "{through}");
    let direct = ureq::post(&format!("{url}/chat/completions"))
        .set("Authorization", &format!("Bearer {LLAMA_KEY}"))
        .send_json(tool_request.clone())
        .expect("llama.cpp answers")
        .into_json::<Value>()
        .expect("JSON");
    let message = |body: &Value| {
        let message = &body["choices"][0]["message"];
        (message["content"].clone(), message["tool_calls"].clone())
    };
    assert_eq!(message(&through), message(&direct), "{through}\n{direct}");
    assert!(through.to_string().contains("get_weather"), "{through}");

    // llama.cpp killed mid-answer: the stream fails with the reason, not retried.
    let (_, error, took) = stream_chat(
        &server,
        json!({"messages": [{"role": "user", "content": "Count from 1 to 300, one number a line."}],
               "max_tokens": 600, "stream": true, "temperature": 0}),
        &mut || llama.kill(),
    );
    let error = error.expect("the stream reports the failure");
    assert!(error.to_string().contains("upstream"), "{error}");
    assert!(took < Duration::from_secs(60), "took {took:?}");

    // Restarted: the next message works.
    let _llama = LlamaServer::start(port, &scratch.path().join("llama2.log"));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (text, error, _) = stream_chat(
            &server,
            json!({"messages": [{"role": "user", "content": "Say hi."}],
                   "max_tokens": 8, "stream": true}),
            &mut || {},
        );
        if error.is_none() && !text.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the restarted upstream was never used: {error:?}"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    drop(server);

    // A diagnosis whose every model call goes to llama.cpp.
    let models = crate::util::models_dir();
    let pack = crate::util::repo().join("tests/data/diagnostics/packs/01-apy-013");
    let output = crate::util::warden()
        .env_remove("WARDEN_CHAT_MODEL")
        .env("WARDEN_UPSTREAM_API_KEY", LLAMA_KEY)
        .args(["eval", "diagnostics", "--json", "--models"])
        .arg(&models)
        .args([
            "--chat-upstream",
            url.as_str(),
            "--chat-upstream-model",
            DEFAULT_CHAT_MODEL,
        ])
        .arg(&pack)
        .output()
        .expect("warden eval diagnostics runs");
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
        panic!(
            "no JSON ({err}): {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    let diagnosed = &report["packs"][0];
    assert_eq!(diagnosed["safety_violations"], 0, "{report:#}");
    assert!(diagnosed["model_calls"].as_u64() >= Some(1), "{report:#}");
    assert_eq!(report["overall"]["root_cause_accuracy"], 1.0, "{report:#}");
}
