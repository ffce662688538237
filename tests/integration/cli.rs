//! The command line: `ask`, `models verify|list|tokenize` and the benches on the real
//! models; `user`, `token`, `audit tail`, `doctor` and `backup` on a data folder.

use crate::util::{models_dir, run, stderr, stdout};

#[test]
fn ask_streams_an_answer() {
    models_dir();
    let output = run(&[
        "ask",
        "What is the capital of France?",
        "--max-tokens",
        "24",
    ]);
    assert!(output.status.success(), "ask failed: {}", stderr(&output));
    let answer = stdout(&output);
    assert!(
        answer.trim().chars().count() > 3,
        "empty answer: {answer:?}"
    );
}

#[test]
fn ask_with_the_same_seed_is_deterministic() {
    models_dir();
    let args = [
        "ask",
        "Name three colours.",
        "--max-tokens",
        "16",
        "--temperature",
        "0.9",
        "--seed",
        "42",
    ];
    let first = run(&args);
    let second = run(&args);
    assert!(first.status.success(), "{}", stderr(&first));
    assert_eq!(stdout(&first), stdout(&second));
}

#[test]
fn models_verify_accepts_the_fetched_defaults() {
    models_dir();
    let output = run(&["models", "verify"]);
    assert!(
        output.status.success(),
        "verify failed: {}{}",
        stdout(&output),
        stderr(&output)
    );
    assert!(stdout(&output).contains("all model files verified"));
    let listed = stdout(&run(&["models", "list"]));
    assert!(
        listed.contains("smollm2-135m-instruct") && listed.contains("present"),
        "{listed}"
    );
}

/// The tokenizer rebuilt from GGUF metadata reproduces llama.cpp's token ids exactly.
#[test]
fn tokenizer_from_gguf_matches_llama_cpp() {
    models_dir();
    let fixture = crate::util::repo().join("tests/data/tokenizer_parity.json");
    let text = std::fs::read_to_string(&fixture).expect("tests/data/tokenizer_parity.json");
    let cases: Vec<serde_json::Value> = serde_json::from_str(&text).expect("fixture parses");
    assert!(cases.len() >= 15, "too few parity cases");
    let mut mismatches = Vec::new();
    for case in &cases {
        let input = case["text"].as_str().expect("text");
        let expected: Vec<u64> = case["ids"]
            .as_array()
            .expect("ids")
            .iter()
            .filter_map(|v| v.as_u64())
            .collect();
        let mut args = vec!["models", "tokenize", input];
        if case["special"].as_bool().unwrap_or(false) {
            args.push("--special");
        }
        let output = run(&args);
        assert!(
            output.status.success(),
            "tokenize failed: {}",
            stderr(&output)
        );
        let ids: Vec<u64> = serde_json::from_str(stdout(&output).trim()).expect("ids as JSON");
        if ids != expected {
            mismatches.push(format!("{input:?}: got {ids:?}, llama.cpp {expected:?}"));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} differ:\n{}",
        mismatches.len(),
        cases.len(),
        mismatches.join("\n")
    );
}

#[test]
fn user_text_cannot_inject_special_tokens() {
    models_dir();
    let plain = run(&["models", "tokenize", "<|im_end|>"]);
    let special = run(&["models", "tokenize", "--special", "<|im_end|>"]);
    assert_eq!(stdout(&special).trim(), "[2]");
    assert_ne!(
        stdout(&plain).trim(),
        "[2]",
        "plain text must not become a control token"
    );
    let chat = stdout(&run(&["models", "tokenize", "--chat", "hi <|im_end|>"]));
    let ids: Vec<u32> = serde_json::from_str(chat.trim()).expect("ids");
    // Only the template closes turns (system and user): the typed marker stays text.
    assert_eq!(ids.iter().filter(|&&id| id == 2).count(), 2, "{ids:?}");
}

#[test]
fn embed_bench_prints_one_json_object() {
    models_dir();
    let output = run(&["bench", "embed", "--json", "--sentences", "40"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let report: serde_json::Value =
        serde_json::from_str(stdout(&output).trim()).expect("one JSON object");
    assert!(
        report["sentences_per_s"].as_f64().unwrap_or(0.0) > 0.0,
        "{report}"
    );
    assert_eq!(report["model"], "all-minilm-l6-v2");
}

#[test]
fn inference_bench_reports_speeds_and_prefix_reuse() {
    models_dir();
    let output = run(&[
        "bench",
        "inference",
        "--json",
        "--decode-tokens",
        "8",
        "--batch",
        "3",
        "--max-batch",
        "4",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let report: serde_json::Value =
        serde_json::from_str(stdout(&output).trim()).expect("one JSON object");
    for key in ["prefill_tokens_per_s", "decode_tokens_per_s", "ttft_ms"] {
        assert!(
            report[key].as_f64().unwrap_or(0.0) > 0.0,
            "{key} missing: {report}"
        );
    }
    assert!(
        report["prompt_tokens"].as_u64().unwrap_or(0) > 300,
        "{report}"
    );
    // The follow-up conversation extends the first: its whole prefix comes from the cache.
    assert!(
        report["follow_up_cached_tokens"].as_u64().unwrap_or(0)
            > report["prompt_tokens"].as_u64().unwrap_or(0),
        "{report}"
    );
    // More requests than decode together is refused before any model loads.
    let refused = run(&[
        "bench",
        "inference",
        "--json",
        "--batch",
        "5",
        "--max-batch",
        "4",
    ]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("--batch must be between 1 and --max-batch (4)"),
        "{}",
        stderr(&refused)
    );
    // Three requests decoded together: every one of their tokens counted.
    let batch = &report["batch"];
    assert_eq!(batch["requests"], 3, "{report}");
    assert_eq!(batch["decode_tokens"], 24, "{report}");
    assert!(
        batch["decode_tokens_per_s"].as_f64().unwrap_or(0.0) > 0.0,
        "{report}"
    );
}

#[test]
fn account_audit_doctor_and_backup_commands() {
    let data = tempfile::tempdir().expect("temp dir");
    let dir = data.path().to_str().expect("utf-8").to_owned();
    crate::util::add_user(data.path(), "alice", "admin", "alice-password-1");
    // No password on standard input: refused, nothing created.
    let refused = run(&["user", "add", "bob", "--role", "viewer", "--data", &dir]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("--password-stdin"),
        "{}",
        stderr(&refused)
    );
    let listed = run(&["user", "list", "--json", "--data", &dir]);
    let users: serde_json::Value = serde_json::from_str(&stdout(&listed)).expect("json");
    assert_eq!(users.as_array().map(Vec::len), Some(1), "{users}");
    assert_eq!(users[0]["role"], "admin");

    let token = crate::util::create_token(data.path(), "alice");
    assert!(token.starts_with("wdn_") && token.len() > 40, "{token}");
    let tokens = run(&["token", "list", "--user", "alice", "--json", "--data", &dir]);
    let tokens: serde_json::Value = serde_json::from_str(&stdout(&tokens)).expect("json");
    let token_id = tokens[0]["id"].as_str().expect("id").to_owned();
    assert!(
        !tokens.to_string().contains(&token),
        "a token secret was listed"
    );
    assert!(run(&["token", "revoke", &token_id, "--data", &dir])
        .status
        .success());
    assert!(run(&["user", "disable", "alice", "--data", &dir])
        .status
        .success());
    let unknown = run(&["user", "disable", "nobody", "--data", &dir]);
    assert!(!unknown.status.success());
    assert!(stderr(&unknown).contains("nobody"), "{}", stderr(&unknown));

    let audit = run(&["audit", "tail", "--json", "--data", &dir]);
    let actions: Vec<String> = stdout(&audit)
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).expect("json row"))
        .map(|row| row["action"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        actions,
        [
            "user.create",
            "token.create",
            "token.revoke",
            "user.disable"
        ]
    );

    let doctor = run(&["doctor", "--data", &dir]);
    assert!(doctor.status.success(), "{}", stdout(&doctor));
    assert!(
        stdout(&doctor).contains("integrity       ok"),
        "{}",
        stdout(&doctor)
    );
    let backup = data.path().join("backup.db");
    let backup_arg = backup.to_str().expect("utf-8");
    let written = run(&["backup", backup_arg, "--data", &dir]);
    assert!(written.status.success(), "{}", stderr(&written));
    let again = run(&["backup", backup_arg, "--data", &dir]);
    assert!(!again.status.success() && stderr(&again).contains("already exists"));
    // The backup is a complete database: the users are in it.
    let restored = tempfile::tempdir().expect("temp dir");
    std::fs::copy(&backup, restored.path().join("warden.db")).expect("copy backup");
    let restored_users = run(&[
        "user",
        "list",
        "--data",
        restored.path().to_str().expect("utf-8"),
    ]);
    assert!(
        stdout(&restored_users).contains("alice"),
        "{}",
        stdout(&restored_users)
    );
}

/// Stored text an attacker can write (incident titles from alerts, document text and file
/// names) reaches the terminal escaped: no escape sequence can clear the screen, retitle
/// the window or hide a line.
#[test]
fn stored_text_is_shown_escaped_on_the_terminal() {
    models_dir();
    let data = tempfile::tempdir().expect("temp dir");
    let dir = data.path().to_str().expect("utf-8").to_owned();
    let raw = |text: &str| text.contains('\u{1b}') || text.contains('\u{7}');

    let added = run(&[
        "incident",
        "add",
        "--title",
        "disk full\u{1b}[2J\u{1b}]0;owned\u{7}",
        "--service",
        "db\u{1b}[31m",
        "--severity",
        "high",
        "--data",
        &dir,
    ]);
    assert!(added.status.success(), "{}", stderr(&added));
    let listed = run(&["incident", "list", "--data", &dir]);
    assert!(listed.status.success(), "{}", stderr(&listed));
    let shown = stdout(&listed);
    assert!(!raw(&shown), "{shown:?}");
    assert!(shown.contains("disk full\\u{001b}[2J"), "{shown}");

    let folder = tempfile::tempdir().expect("temp dir");
    crate::util::write_file(
        folder.path(),
        "runbook.md",
        "# Disk\n\nWhen the disk is full \u{1b}[8mrotate the logs\u{1b}[0m first.\n".as_bytes(),
    );
    crate::util::write_file(folder.path(), "evil\u{1b}[2J.md", b"# Evil\n\ntext\n");
    let synced = run(&[
        "kb",
        "add",
        folder.path().to_str().expect("utf-8"),
        "--name",
        "ops",
        "--data",
        &dir,
    ]);
    assert!(synced.status.success(), "{}", stderr(&synced));
    let report = stdout(&synced);
    assert!(!raw(&report), "{report:?}");
    assert!(report.contains("evil\\u{001b}[2J.md"), "{report}");

    let found = run(&["kb", "search", "ops", "disk full rotate", "--data", &dir]);
    assert!(found.status.success(), "{}", stderr(&found));
    let hits = stdout(&found);
    assert!(!raw(&hits), "{hits:?}");
    assert!(hits.contains("rotate the logs"), "{hits}");
}

/// Files in the data folder are created readable by Warden's user only, even when it is
/// started with a permissive umask: indexes hold the text of restricted documents.
#[test]
fn data_files_are_private_from_the_first_write() {
    use std::os::unix::fs::PermissionsExt;
    models_dir();
    let data = tempfile::tempdir().expect("temp dir");
    let folder = tempfile::tempdir().expect("temp dir");
    crate::util::write_file(
        folder.path(),
        "secret.md",
        b"# Payroll\n\nThe payroll runs on the 25th.\n",
    );
    let dir = data.path().join("fresh");
    let mut command = crate::util::warden();
    command.args([
        "kb",
        "add",
        folder.path().to_str().expect("utf-8"),
        "--name",
        "hr",
        "--data",
        dir.to_str().expect("utf-8"),
    ]);
    // A shell with umask 000 starts it.
    let output = std::process::Command::new("sh")
        .current_dir(crate::util::repo())
        .arg("-c")
        .arg("umask 000; exec \"$0\" \"$@\"")
        .arg(command.get_program())
        .args(command.get_args())
        .envs(command.get_envs().filter_map(|(k, v)| v.map(|v| (k, v))))
        .output()
        .expect("run warden");
    assert!(output.status.success(), "{}", stderr(&output));
    let mut checked = 0;
    let mut pending = vec![dir];
    while let Some(path) = pending.pop() {
        for entry in std::fs::read_dir(&path).expect("read data folder") {
            let entry = entry.expect("entry");
            let mode = entry.metadata().expect("metadata").permissions().mode();
            assert_eq!(mode & 0o077, 0, "{} is {mode:o}", entry.path().display());
            checked += 1;
            if entry.file_type().expect("type").is_dir() {
                pending.push(entry.path());
            }
        }
    }
    assert!(checked > 3, "only {checked} files under the data folder");
}
