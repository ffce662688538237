//! The browser UI in headless Chromium (Debian's `chromium`, driven by `playwright-core`,
//! both installed by `tests/run`) against the real server and model: sign in, stream an
//! answer, reload mid-stream, hostile Markdown stays inert, the run timeline, the Chinese
//! UI. Screenshots are kept in `target/test-artifacts/browser/`. Against the in-memory mock
//! server: the UI's edge cases, the chat agent's events (cards, citations, confirmations) and
//! the Diagnostics view (live node progress, the report, viewers, hostile evidence), and the
//! admin screens (Knowledge with sync, search and the passage viewer; Users, API tokens and
//! Audit), and a conversation's memory panel. Also runs the Markdown renderer's unit tests
//! under Node.

use std::process::Command;

use crate::util::{add_user, repo, Server};

fn node_output_report(output: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn chat_ui_streams_survives_reload_and_renders_hostile_markdown_inert() {
    let playwright = repo().join("tests/browser/node_modules/playwright-core");
    assert!(
        playwright.is_dir(),
        "{} is missing: run tests/run (it installs the browser test dependencies)",
        playwright.display()
    );
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        std::path::Path::new(&chromium).is_file(),
        "{chromium} is missing: run tests/run (it installs Debian's chromium)"
    );
    let server = Server::start(&["--max-answer-tokens", "160", "--sample-kb", "/nonexistent"]);
    add_user(server.data(), "browser", "operator", "browser-password-1");
    let artifacts = repo().join("target/test-artifacts/browser");
    let output = Command::new("node")
        .arg("tests/browser/chat.test.mjs")
        .current_dir(repo())
        .env("WARDEN_URL", &server.base)
        .env("WARDEN_USER", "browser")
        .env("WARDEN_PASSWORD", "browser-password-1")
        .env("WARDEN_ARTIFACTS", &artifacts)
        .env("CHROMIUM", &chromium)
        .output()
        .expect("cannot run node");
    let report = node_output_report(&output);
    assert!(output.status.success(), "browser test failed:\n{report}");
    assert!(
        report.contains("# pass") && report.contains("# fail 0") && !report.contains("# skipped 1"),
        "browser test ran nothing or skipped:\n{report}"
    );
}

/// The UI's edge cases (bootstrap link, 401/429 messages, expired session, Stop, a failed
/// run, dropped streams and a restart without duplicated text, dark and narrow layouts)
/// against the in-memory mock server, where each can be triggered on demand.
#[test]
fn chat_ui_edge_cases_against_the_mock_server() {
    let output = Command::new("node")
        .arg("tests/browser/mock.test.mjs")
        .current_dir(repo())
        .env(
            "WARDEN_ARTIFACTS",
            repo().join("target/test-artifacts/browser"),
        )
        .output()
        .expect("cannot run node");
    let report = node_output_report(&output);
    assert!(output.status.success(), "mock UI tests failed:\n{report}");
    assert!(
        report.contains("# fail 0") && !report.contains("# skipped 1"),
        "{report}"
    );
}

/// How the UI shows the chat agent's run events (route chips, tool calls, citations that open
/// their passage, fact and confirmation cards with confirm/reject/403/409/422, clarification
/// questions, HTML in event fields staying inert, 中文 labels) against the mock's scripted
/// scenarios.
#[test]
fn chat_ui_agent_events_against_the_mock_server() {
    let output = Command::new("node")
        .arg("tests/browser/agent.test.mjs")
        .current_dir(repo())
        .env(
            "WARDEN_ARTIFACTS",
            repo().join("target/test-artifacts/browser"),
        )
        .output()
        .expect("cannot run node");
    let report = node_output_report(&output);
    assert!(output.status.success(), "agent UI tests failed:\n{report}");
    assert!(
        report.contains("# pass ") && report.contains("# fail 0") && report.contains("# skipped 0"),
        "{report}"
    );
}

/// The Diagnostics view against the mock's diagnostic scenarios: starting a task on an
/// incident, its live node progress (a reload mid-run and dropped streams draw each step
/// once), the report (verdict, root cause, causal chain with the evidence behind each link,
/// hypotheses and the evidence that moved them, recovery proposal, policy decision), a
/// fail-closed report, viewers and refused (403) starts, hostile evidence staying inert,
/// 中文 labels and the dark narrow layout.
#[test]
fn diagnostics_ui_against_the_mock_server() {
    let output = Command::new("node")
        .arg("tests/browser/diagnostics.test.mjs")
        .current_dir(repo())
        .env(
            "WARDEN_ARTIFACTS",
            repo().join("target/test-artifacts/browser"),
        )
        .output()
        .expect("cannot run node");
    let report = node_output_report(&output);
    assert!(
        output.status.success(),
        "diagnostics UI tests failed:\n{report}"
    );
    assert!(
        report.contains("# pass ") && report.contains("# fail 0") && report.contains("# skipped 0"),
        "{report}"
    );
}

/// Runs one of the mock server's browser test files and checks that it ran and passed.
fn run_mock_browser_test(file: &str) {
    let output = Command::new("node")
        .arg(file)
        .current_dir(repo())
        .env(
            "WARDEN_ARTIFACTS",
            repo().join("target/test-artifacts/browser"),
        )
        .output()
        .expect("cannot run node");
    let report = node_output_report(&output);
    assert!(output.status.success(), "{file} failed:\n{report}");
    assert!(
        report.contains("# pass ") && report.contains("# fail 0") && report.contains("# skipped 0"),
        "{report}"
    );
}

/// The Knowledge screen and the passage viewer: the list with readers, adding a folder (a
/// path outside the allowed roots refused), a sync's live progress bar and its report with
/// skipped and failed files, cancelling, a second sync refused (409), editing readers,
/// removing after confirming, the search preview with per-retriever ranks, the passage viewer
/// from a search hit and from a chat citation, viewers and operators, hostile text inert.
#[test]
fn knowledge_admin_ui_against_the_mock_server() {
    run_mock_browser_test("tests/browser/admin-knowledge.test.mjs");
}

/// The Users, API tokens and Audit screens: accounts with roles, groups, disabling and
/// password resets (ending the user's session), groups, a token's secret shown once then
/// only metadata, revoking, the audit log's filters and paging, the Chinese UI on every
/// admin screen, and hostile names inert.
#[test]
fn users_tokens_and_audit_ui_against_the_mock_server() {
    run_mock_browser_test("tests/browser/admin.test.mjs");
}

/// The memory panel of a conversation: items by kind with trust badges, Confirm on a stated
/// item, Remove, the source link scrolling to and highlighting its message, API errors
/// (409, 404) inline, degraded and compaction notices, the empty state, the refresh when a
/// run ends, hostile text inert, 中文 labels.
#[test]
fn memory_panel_ui_against_the_mock_server() {
    run_mock_browser_test("tests/browser/memory.test.mjs");
}

#[test]
fn markdown_renderer_unit_tests_pass_under_node() {
    let output = Command::new("node")
        .args(["--test", "web/markdown.test.mjs"])
        .current_dir(repo())
        .output()
        .expect("cannot run node");
    let report = node_output_report(&output);
    assert!(output.status.success(), "markdown tests failed:\n{report}");
    assert!(report.contains("# fail 0"), "{report}");
}
