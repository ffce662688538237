//! Running Warden beside Prometheus, a log pipeline and a reverse proxy, on the real
//! models: `/metrics` parsed by Prometheus's own Python parser, JSON logs with trace ids
//! that also reach the run record, the audit rows and `X-Trace-Id`, no secrets or prompts
//! in the logs, host names refused unless allowed, a login limiter that a stranger behind
//! the trusted proxy cannot turn against the real user, `/healthz` telling strangers
//! nothing, a private data folder, and audit rows that cannot forge lines.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::util::{
    add_user, create_token, free_port, into_status_and_json, repo, run, stdout, Server, ADMIN,
    ADMIN_PASSWORD,
};

const METRICS_TOKEN: &str = "prometheus-scrape-token-1";
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
/// A prompt no log line may hold.
const PROMPT: &str = "Say hello to zebracorn-7781.";

/// Families of a Prometheus text exposition, parsed by the Python client.
fn parse_exposition(text: &str) -> Value {
    let python = repo().join(".venv/bin/python");
    assert!(
        python.is_file(),
        "no .venv: run tests/run (it prepares the Python venv)"
    );
    let mut child = Command::new(python)
        .arg(repo().join("tests/e2e/parse_metrics.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the parser");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write the exposition");
    let output = child.wait_with_output().expect("parser output");
    assert!(
        output.status.success(),
        "prometheus_client refused the exposition: {}\n{text}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("parser JSON")
}

fn get_with(server: &Server, path: &str, headers: &[(&str, &str)]) -> ureq::Response {
    let mut request = ureq::get(&server.url(path)).timeout(Duration::from_secs(120));
    for (name, value) in headers {
        request = request.set(name, value);
    }
    match request.call() {
        Ok(response) | Err(ureq::Error::Status(_, response)) => response,
        Err(err) => panic!("GET {path}: {err}"),
    }
}

fn login_via_proxy(server: &Server, client: &str, name: &str, password: &str) -> u16 {
    let result = ureq::post(&server.url("/api/login"))
        .timeout(Duration::from_secs(60))
        .set("X-Forwarded-For", &format!("203.0.113.250, {client}"))
        .send_json(json!({"name": name, "password": password}));
    into_status_and_json(result).0
}

/// Waits for a run to end; returns its record.
fn wait_for_run(server: &Server, run_id: &str) -> Value {
    let started = Instant::now();
    loop {
        let run: Value = server
            .get(&format!("/api/runs/{run_id}"))
            .call()
            .expect("run")
            .into_json()
            .expect("JSON");
        if ["completed", "failed", "cancelled"].contains(&run["status"].as_str().unwrap_or("")) {
            return run;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "run never ended: {run}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[cfg(unix)]
fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .expect("metadata")
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn warden_runs_beside_prometheus_a_log_pipeline_and_a_proxy() {
    let data = tempfile::tempdir().expect("temp dir");
    add_user(data.path(), ADMIN, "admin", ADMIN_PASSWORD);
    add_user(data.path(), "vera", "viewer", "vera-password-1");
    let token = create_token(data.path(), ADMIN);
    let viewer = create_token(data.path(), "vera");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let open = std::fs::Permissions::from_mode(0o755);
        std::fs::set_permissions(data.path(), open).expect("chmod");
    }
    let server = Server::start_logging(
        data.path(),
        &token,
        free_port(),
        &[
            "--log-format",
            "json",
            "--metrics-token",
            METRICS_TOKEN,
            "--public-origin",
            "https://warden.example.org",
            "--trusted-proxy",
            "127.0.0.1",
        ],
        "info",
    );
    #[cfg(unix)]
    assert_eq!(
        mode(data.path()),
        0o700,
        "the data folder was not made private"
    );

    // A /v1 request carrying a traceparent answers with its trace id.
    let response = ureq::post(&server.url("/v1/chat/completions"))
        .timeout(Duration::from_secs(120))
        .set("Authorization", &format!("Bearer {token}"))
        .set("traceparent", TRACEPARENT)
        .send_json(json!({"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 4}))
        .expect("chat completion");
    assert_eq!(response.header("x-trace-id"), Some(TRACE));
    // Without one, a fresh id.
    let fresh = get_with(&server, "/healthz", &[]);
    let fresh_id = fresh.header("x-trace-id").expect("a trace id").to_owned();
    assert!(fresh_id.len() == 32 && fresh_id != TRACE, "{fresh_id}");
    // Strangers learn the status only.
    let health: Value = fresh.into_json().expect("JSON");
    assert_eq!(health, json!({"status": "ok"}));

    // A chat message's run carries the request's trace id, and so does its audit row.
    let (_, conversation) = server.post_json("/api/conversations", &json!({}));
    let id = conversation["id"].as_str().expect("id");
    let posted: Value = server
        .post(&format!("/api/conversations/{id}/messages"))
        .set("traceparent", TRACEPARENT)
        .send_json(json!({"content": PROMPT}))
        .expect("message")
        .into_json()
        .expect("JSON");
    let run = wait_for_run(&server, posted["run_id"].as_str().expect("run id"));
    assert_eq!(run["trace_id"], TRACE, "{run}");

    // Hosts: a name not listed is refused, the public origin and addresses are answered.
    let rebinding = get_with(&server, "/healthz", &[("Host", "attacker.example")]);
    assert_eq!(rebinding.status(), 421);
    let body: Value = rebinding.into_json().expect("JSON error");
    assert_eq!(body["error"]["code"], "host_not_allowed");
    let public = get_with(&server, "/healthz", &[("Host", "warden.example.org")]);
    assert_eq!(public.status(), 200);

    // A viewer refused an admin route is audited.
    let refused = get_with(
        &server,
        "/api/audit",
        &[("Authorization", &format!("Bearer {viewer}"))],
    );
    assert_eq!(refused.status(), 403);

    // Logins behind the trusted proxy: a stranger guessing the admin's password is slowed,
    // the admin from their own address still signs in.
    let mut limited = 0;
    for _ in 0..12 {
        match login_via_proxy(&server, "198.51.100.7", ADMIN, "wrong-guess-123") {
            401 => {}
            429 => limited += 1,
            other => panic!("a wrong password answered {other}"),
        }
    }
    assert!(limited > 0, "the stranger was never limited");
    assert_eq!(
        login_via_proxy(&server, "192.0.2.10", ADMIN, ADMIN_PASSWORD),
        200
    );

    // Audit: trace ids on rows written for requests and runs; refusals recorded.
    let audit: Value = server
        .get("/api/audit?limit=200")
        .call()
        .expect("audit")
        .into_json()
        .expect("JSON");
    let rows = audit["entries"].as_array().expect("entries");
    assert!(
        rows.iter()
            .any(|r| r["action"] == "run.finish" && r["trace_id"] == TRACE),
        "{audit}"
    );
    assert!(
        rows.iter().any(|r| r["action"] == "auth.forbidden"
            && r["actor"] == "vera"
            && r["target"] == "GET /api/audit"),
        "{audit}"
    );

    // Metrics: refused without the right credentials, parsed by prometheus_client.
    assert_eq!(get_with(&server, "/metrics", &[]).status(), 401);
    let as_viewer = format!("Bearer {viewer}");
    assert_eq!(
        get_with(&server, "/metrics", &[("Authorization", &as_viewer)]).status(),
        403
    );
    let as_admin = format!("Bearer {token}");
    assert_eq!(
        get_with(&server, "/metrics", &[("Authorization", &as_admin)]).status(),
        200
    );
    let scrape = get_with(
        &server,
        "/metrics",
        &[("Authorization", &format!("Bearer {METRICS_TOKEN}"))],
    );
    assert_eq!(scrape.status(), 200);
    assert!(scrape
        .header("content-type")
        .is_some_and(|c| c.starts_with("text/plain; version=0.0.4")));
    let families = parse_exposition(&scrape.into_string().expect("text"));
    let sample = |family: &str, name: &str, label: (&str, &str)| -> Option<f64> {
        families[family]["samples"]
            .as_array()?
            .iter()
            .find(|s| s[0] == name && s[1][label.0] == label.1)
            .and_then(|s| s[2].as_f64())
    };
    for family in [
        "warden_http_requests",
        "warden_http_request_duration_seconds",
        "warden_model_queue_depth",
        "warden_model_requests_in_flight",
        "warden_model_prompt_tokens",
        "warden_model_generated_tokens",
        "warden_model_time_to_first_token_seconds",
        "warden_model_decode_tokens_per_second",
        "warden_runs",
        "warden_run_duration_seconds",
        "warden_runs_resumed",
        "warden_sse_connections",
        "warden_kb_documents",
        "warden_kb_chunks",
        "warden_logins",
        "warden_build_info",
    ] {
        assert!(families.get(family).is_some(), "no {family} in {families}");
    }
    let generated: f64 = families["warden_model_generated_tokens"]["samples"]
        .as_array()
        .expect("samples")
        .iter()
        .filter_map(|s| s[2].as_f64())
        .sum();
    assert!(
        generated >= 1.0,
        "{}",
        families["warden_model_generated_tokens"]
    );
    assert!(
        sample(
            "warden_logins",
            "warden_logins_total",
            ("outcome", "limited")
        )
        .is_some_and(|n| n >= 1.0),
        "{}",
        families["warden_logins"]
    );
    assert!(
        sample(
            "warden_http_requests",
            "warden_http_requests_total",
            ("route", "/v1/chat/completions")
        )
        .is_some_and(|n| n >= 1.0),
        "{}",
        families["warden_http_requests"]
    );

    // Logs: one JSON object a line; the request's trace id in its lines; no prompt,
    // password or token anywhere.
    let logs = server.stderr_text();
    assert!(!logs.is_empty(), "nothing logged at info");
    for line in logs.lines().filter(|l| !l.trim().is_empty()) {
        let parsed: Value = serde_json::from_str(line)
            .unwrap_or_else(|err| panic!("a log line is not JSON ({err}): {line}"));
        assert!(parsed["level"].is_string(), "{line}");
    }
    assert!(
        logs.contains(TRACE),
        "no log line carries the request's trace id:\n{logs}"
    );
    for secret in [
        PROMPT,
        ADMIN_PASSWORD,
        "wrong-guess-123",
        METRICS_TOKEN,
        &token,
        &viewer,
    ] {
        assert!(!logs.contains(secret), "the log holds `{secret}`:\n{logs}");
    }
}

#[test]
fn version_names_the_commit_and_audit_rows_cannot_forge_lines() {
    let output = run(&["--version"]);
    assert!(output.status.success());
    let version = stdout(&output);
    assert!(
        version.starts_with(&format!("warden {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );

    let data = tempfile::tempdir().expect("temp dir");
    add_user(data.path(), ADMIN, "admin", ADMIN_PASSWORD);
    let token = create_token(data.path(), ADMIN);
    let server = Server::start_in(data.path(), &token, free_port(), &[]);
    let forged = "mallory\n1700000000 admin            user.create              bob";
    let result = ureq::post(&server.url("/api/login"))
        .send_json(json!({"name": forged, "password": "guess-guess-1"}));
    assert_eq!(into_status_and_json(result).0, 401);
    drop(server);
    let output = run(&[
        "audit",
        "tail",
        "--data",
        data.path().to_str().expect("path"),
    ]);
    assert!(output.status.success());
    let text = stdout(&output);
    assert!(text.contains("mallory\\u{000a}1700000000"), "{text}");
    for line in text.lines() {
        assert!(
            line.split_whitespace()
                .next()
                .is_some_and(|at| at.parse::<i64>().is_ok()),
            "a forged line in the audit tail: {line}\n{text}"
        );
    }
}
