//! The official `openai` Python client against a real server: runs `tests/e2e` with pytest
//! from the virtual environment that `tests/run` prepares (`.venv`).

use std::process::Command;

use crate::util::{repo, Server};

#[test]
fn openai_python_client_suite_passes() {
    let python = repo().join(".venv/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: run tests/run (it creates the venv)",
        python.display()
    );
    let server = Server::start(&[]);
    let output = Command::new(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/e2e"])
        .current_dir(repo())
        .env("WARDEN_URL", server.url("/v1"))
        .env("WARDEN_API_KEY", &server.token)
        .output()
        .expect("cannot run pytest");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "pytest failed:\n{report}");
    assert!(
        report.contains("passed") && !report.contains("skipped"),
        "pytest ran no tests or skipped some:\n{report}"
    );
}
