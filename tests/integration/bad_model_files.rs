//! Malformed model files are rejected with a clear message naming the file: no panic, no
//! huge allocation, and a server with one bad model keeps serving the other.

use std::path::Path;

use crate::util::{chat_model_path, run, stderr, write_file, Server};

/// Asserts that `warden ask` on `model` fails cleanly, naming the file and `expected`.
fn rejected(model: &Path, expected: &str) {
    let model = model.to_str().expect("utf-8 path");
    let output = run(&["ask", "hi", "--max-tokens", "4", "--chat-model", model]);
    let err = stderr(&output);
    assert_eq!(
        output.status.code(),
        Some(1),
        "expected a clean failure (exit 1), got {:?}: {err}",
        output.status
    );
    assert!(!err.contains("panicked"), "panicked: {err}");
    assert!(err.contains(model), "message does not name the file: {err}");
    assert!(err.contains(expected), "message lacks `{expected}`: {err}");
}

/// A GGUF v3 header with the given counts, then the given tail.
fn gguf_header(tensors: u64, metadata: u64, tail: &[u8]) -> Vec<u8> {
    let mut bytes = b"GGUF".to_vec();
    bytes.extend(3u32.to_le_bytes());
    bytes.extend(tensors.to_le_bytes());
    bytes.extend(metadata.to_le_bytes());
    bytes.extend_from_slice(tail);
    bytes
}

fn gguf_string(s: &str) -> Vec<u8> {
    let mut bytes = (s.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(s.as_bytes());
    bytes
}

#[test]
fn truncated_gguf_is_rejected() {
    let dir = tempfile::tempdir().expect("temp dir");
    let full = std::fs::read(chat_model_path()).expect("read model");
    let path = write_file(dir.path(), "truncated.gguf", &full[..full.len() / 3]);
    rejected(&path, "truncated");
}

#[test]
fn wrong_magic_is_rejected() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = write_file(
        dir.path(),
        "magic.gguf",
        b"NOPE this is not a model file at all, only text",
    );
    rejected(&path, "not a valid GGUF file");
}

#[test]
fn absurd_tensor_count_is_rejected_without_allocating() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = write_file(dir.path(), "count.gguf", &gguf_header(1 << 60, 0, &[]));
    rejected(&path, "not a valid GGUF file");
}

#[test]
fn absurd_tensor_size_is_rejected() {
    let dir = tempfile::tempdir().expect("temp dir");
    // One metadata entry (general.architecture = llama), one F32 tensor of 2^31 x 2^31.
    let mut tail = gguf_string("general.architecture");
    tail.extend(8u32.to_le_bytes());
    tail.extend(gguf_string("llama"));
    tail.extend(gguf_string("token_embd.weight"));
    tail.extend(2u32.to_le_bytes());
    tail.extend((1u64 << 31).to_le_bytes());
    tail.extend((1u64 << 31).to_le_bytes());
    tail.extend(0u32.to_le_bytes());
    tail.extend(0u64.to_le_bytes());
    let path = write_file(dir.path(), "huge.gguf", &gguf_header(1, 1, &tail));
    rejected(&path, "token_embd.weight");
}

#[test]
fn unparsable_tokenizer_json_is_rejected() {
    let dir = tempfile::tempdir().expect("temp dir");
    let model = dir.path().join("smol.gguf");
    std::os::unix::fs::symlink(chat_model_path(), &model).expect("symlink model");
    let tokenizer = write_file(dir.path(), "smol.tokenizer.json", b"{ this is not json");
    let output = run(&[
        "ask",
        "hi",
        "--max-tokens",
        "4",
        "--chat-model",
        model.to_str().expect("path"),
    ]);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{err}");
    assert!(
        err.contains(tokenizer.to_str().expect("path")) && err.contains("does not parse"),
        "{err}"
    );
}

#[test]
fn server_with_a_bad_chat_model_keeps_serving_embeddings() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bad = write_file(dir.path(), "bad.gguf", b"GGUF garbage");
    let server = Server::start(&["--chat-model", bad.to_str().expect("path")]);
    // Only an administrator is told which models failed and why.
    let health: serde_json::Value = server
        .get("/healthz")
        .call()
        .expect("healthz")
        .into_json()
        .expect("json");
    let failed = health["failed_models"].as_array().expect("failed_models");
    assert_eq!(failed.len(), 1, "{health}");
    assert!(
        failed[0]["error"]
            .as_str()
            .unwrap_or("")
            .contains("bad.gguf"),
        "{health}"
    );
    let (status, body) = server.post_json(
        "/v1/embeddings",
        &serde_json::json!({"model": "all-minilm-l6-v2", "input": "still here"}),
    );
    assert_eq!(status, 200, "{body}");
    let (status, body) = server.post_json(
        "/v1/chat/completions",
        &serde_json::json!({"model": "bad", "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(status, 404, "{body}");
    assert!(body["error"]["message"].is_string(), "{body}");
}
