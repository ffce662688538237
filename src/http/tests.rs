//! Router tests driven with `oneshot`, no socket. The engine here has no loaded model (one
//! model fails to load), which covers routing, body limits, JSON errors and validation:
//! everything that must answer before a model is involved.

use std::sync::{Arc, OnceLock};

use axum::body::{to_bytes, Body};
use axum::http::{Method, Request, StatusCode};
use serde_json::{json, Value};
use tower::ServiceExt;

use super::{router, AppState, HttpLimits};
use crate::engine::{Engine, EngineConfig, ModelKind, ModelSpec};

const LIMITS: HttpLimits = HttpLimits {
    max_body_bytes: 64 * 1024,
    max_tokens_cap: 256,
    max_embedding_inputs: 4,
};

/// One engine for all tests: loading sets process-wide thread settings.
fn engine() -> Arc<Engine> {
    static ENGINE: OnceLock<Arc<Engine>> = OnceLock::new();
    let engine = ENGINE.get_or_init(|| {
        let broken = ModelSpec {
            id: "broken".into(),
            kind: ModelKind::Chat,
            path: "/nonexistent/warden-test/broken.gguf".into(),
        };
        let config = EngineConfig {
            models: vec![broken],
            threads: 1,
            queue_depth: 1,
            max_context: 512,
        };
        Arc::new(Engine::load(&config))
    });
    engine.clone()
}

async fn send(
    method: Method,
    path: &str,
    content_type: Option<&str>,
    body: Body,
) -> (StatusCode, Value) {
    let state = AppState {
        engine: engine(),
        library: None,
        limits: LIMITS,
    };
    let mut request = Request::builder().method(method).uri(path);
    if let Some(content_type) = content_type {
        request = request.header("content-type", content_type);
    }
    let request = request.body(body).expect("test request builds");
    let response = router(state)
        .oneshot(request)
        .await
        .expect("the router is infallible");
    let status = response.status();
    let bytes = to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body reads");
    let value = serde_json::from_slice(&bytes).unwrap_or_else(|_| panic!("not JSON: {bytes:?}"));
    (status, value)
}

async fn get(path: &str) -> (StatusCode, Value) {
    send(Method::GET, path, None, Body::empty()).await
}

async fn post_json(path: &str, body: Value) -> (StatusCode, Value) {
    send(
        Method::POST,
        path,
        Some("application/json"),
        Body::from(body.to_string()),
    )
    .await
}

/// Asserts OpenAI's error shape and returns the error's `code`.
fn error_code(body: &Value) -> String {
    let error = &body["error"];
    for field in ["message", "type", "code", "param"] {
        assert!(
            error.get(field).is_some(),
            "error without `{field}`: {body}"
        );
    }
    error["code"].as_str().unwrap_or_default().to_owned()
}

fn chat(extra: Value) -> Value {
    let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    body
}

#[tokio::test]
async fn healthz_lists_models_and_failures() {
    let (status, body) = get("/healthz").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["status"], "ok");
    assert_eq!(body["models"], json!([]));
    let failed = &body["failed_models"][0];
    assert_eq!(failed["id"], "broken");
    assert!(
        failed["path"]
            .as_str()
            .is_some_and(|p| p.ends_with("broken.gguf")),
        "{body}"
    );
    assert!(
        failed["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{body}"
    );
}

#[tokio::test]
async fn models_list_and_unknown_model() {
    let (status, body) = get("/v1/models").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, json!({"object": "list", "data": []}));
    let (status, body) = get("/v1/models/nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error_code(&body), "model_not_found");
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_json() {
    let (status, body) = get("/v1/nothing-here").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error_code(&body), "not_found");
    let (status, body) = send(Method::DELETE, "/healthz", None, Body::empty()).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(error_code(&body), "method_not_allowed");
}

#[tokio::test]
async fn malformed_bodies_are_400_json() {
    let path = "/v1/chat/completions";
    let (status, body) = send(
        Method::POST,
        path,
        Some("application/json"),
        Body::from("{not json"),
    )
    .await;
    assert_eq!(
        (status, error_code(&body).as_str()),
        (StatusCode::BAD_REQUEST, "invalid_json")
    );
    let (status, body) = send(Method::POST, path, Some("text/plain"), Body::from("{}")).await;
    assert_eq!(
        (status, error_code(&body).as_str()),
        (StatusCode::BAD_REQUEST, "invalid_json")
    );
    let (status, body) = post_json(path, json!({"model": "m"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("messages")),
        "{body}"
    );
}

#[tokio::test]
async fn oversized_bodies_are_413_json() {
    let content = "x".repeat(LIMITS.max_body_bytes + 1);
    let (status, body) = post_json(
        "/v1/chat/completions",
        chat(json!({"messages": [{"role": "user", "content": content}]})),
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(error_code(&body), "payload_too_large");
}

#[tokio::test]
async fn chat_validation_runs_before_model_selection() {
    let cases = [
        (json!({"n": 2}), "n"),
        (
            json!({"max_tokens": LIMITS.max_tokens_cap + 1}),
            "max_tokens",
        ),
        (json!({"temperature": 3}), "temperature"),
        (json!({"messages": []}), "messages"),
    ];
    for (extra, param) in cases {
        let (status, body) = post_json("/v1/chat/completions", chat(extra.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{extra}: {body}");
        assert_eq!(body["error"]["param"], param, "{extra}: {body}");
    }
}

#[tokio::test]
async fn valid_chat_without_a_loaded_model_is_404() {
    let (status, body) = post_json("/v1/chat/completions", chat(json!({"model": "nope"}))).await;
    assert_eq!(
        (status, error_code(&body).as_str()),
        (StatusCode::NOT_FOUND, "model_not_found")
    );
    let (status, body) = post_json("/v1/chat/completions", chat(json!({"model": null}))).await;
    assert_eq!(
        (status, error_code(&body).as_str()),
        (StatusCode::NOT_FOUND, "model_not_found")
    );
}

#[tokio::test]
async fn embedding_validation_and_missing_model() {
    let (status, body) = post_json("/v1/embeddings", json!({"input": [1, 2, 3]})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("token arrays")),
        "{body}"
    );
    let (status, _) = post_json(
        "/v1/embeddings",
        json!({"input": ["a", "b", "c", "d", "e"]}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, body) = post_json("/v1/embeddings", json!({"input": "hello"})).await;
    assert_eq!(
        (status, error_code(&body).as_str()),
        (StatusCode::NOT_FOUND, "model_not_found")
    );
}
