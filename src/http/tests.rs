//! Router tests driven with `oneshot`, no socket. The engine here has no loaded model (one
//! model fails to load), which covers routing, body limits, JSON errors and validation:
//! everything that must answer before a model is involved.

use std::sync::{Arc, OnceLock};

use axum::body::{to_bytes, Body};
use axum::http::{Method, Request, StatusCode};
use serde_json::{json, Value};
use tower::ServiceExt;

use super::{router, AppState, HttpLimits, LoginLimiter, SessionConfig, UserSlots};
use crate::engine::{Engine, EngineConfig, ModelKind, ModelSpec};
use crate::runs::{EventBus, RunService};
use crate::store::{Accounts, Audit, Role, Store};

const LIMITS: HttpLimits = HttpLimits {
    max_body_bytes: 64 * 1024,
    max_tokens_cap: 256,
    max_embedding_inputs: 4,
    max_v1_requests_per_user: 4,
    heartbeat: crate::config::DEFAULT_HEARTBEAT,
    connections: crate::http::ConnectionLimits::DEFAULT,
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
            upstream: Default::default(),
            models: vec![broken],
            threads: 1,
            queue_depth: 1,
            max_batch: 1,
            embed_precision: crate::engine::EmbedPrecision::Auto,
            max_context: 512,
            output_limits: Default::default(),
        };
        Arc::new(Engine::load(&config))
    });
    engine.clone()
}

/// The user every request is made as (by API token), in a store shared by the tests.
const PASSWORD: &str = "correct horse 1";

struct Fixture {
    store: Arc<Store>,
    token: String,
    _dir: tempfile::TempDir,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Arc::new(Store::open(&dir.path().join("w.db")).expect("store opens"));
        store
            .create_user("tester", Role::Operator, PASSWORD, 1)
            .expect("user");
        store
            .create_user("viewer", Role::Viewer, PASSWORD, 1)
            .expect("user");
        let token = store.create_token("tester", "t", 1).expect("token").secret;
        Fixture {
            store,
            token,
            _dir: dir,
        }
    })
}

fn state() -> AppState {
    let store = fixture().store.clone();
    AppState {
        engine: engine(),
        library: None,
        runs: RunService::new(store.clone(), EventBus::default(), None),
        store,
        sessions: SessionConfig::default(),
        login_limiter: Arc::new(LoginLimiter::default()),
        limits: LIMITS,
        v1_slots: Arc::new(UserSlots::new(LIMITS.max_v1_requests_per_user)),
        alerts: Default::default(),
        network: Default::default(),
        metrics: Default::default(),
        metrics_token: None,
        refusals: std::sync::Arc::default(),
        anonymous_bodies: std::sync::Arc::new(crate::http::anonymous_bodies::AnonymousBodies::new(
            crate::http::ConnectionLimits::DEFAULT.max_anonymous_bodies,
        )),
        shutdown: tokio::sync::watch::channel(false).1,
        diagnostic_sources: None,
    }
}

async fn send(
    method: Method,
    path: &str,
    content_type: Option<&str>,
    body: Body,
) -> (StatusCode, Value) {
    let token = format!("Bearer {}", fixture().token);
    let mut headers = vec![("authorization", token.as_str())];
    if let Some(content_type) = content_type {
        headers.push(("content-type", content_type));
    }
    let response = send_to(&router(state()), method, path, &headers, body).await;
    let (status, value, _) = response;
    (status, value)
}

/// Sends one request with exactly `headers`; returns status, JSON body and headers.
async fn send_to(
    app: &axum::Router,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Body,
) -> (StatusCode, Value, axum::http::HeaderMap) {
    let mut request = Request::builder().method(method).uri(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(body).expect("test request builds");
    let response = app
        .clone()
        .oneshot(request)
        .await
        .expect("the router is infallible");
    let status = response.status();
    let response_headers = response.headers().clone();
    let bytes = to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body reads");
    let value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap_or_else(|_| panic!("not JSON: {bytes:?}"))
    };
    (status, value, response_headers)
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
async fn healthz_tells_strangers_the_status_only_and_admins_the_failures() {
    let app = router(state());
    let (status, body, _) = send_to(&app, Method::GET, "/healthz", &[], Body::empty()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, json!({"status": "ok"}));
    // A signed-in operator sees the loaded models, not the failures.
    let (status, body) = get("/healthz").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, json!({"status": "ok", "models": []}));
    // A bad credential is the same as none.
    let bad = [("authorization", "Bearer nope")];
    let (_, body, _) = send_to(&app, Method::GET, "/healthz", &bad, Body::empty()).await;
    assert_eq!(body, json!({"status": "ok"}));
    let store = &fixture().store;
    if store.user_by_name("healthz-admin").is_err() {
        store
            .create_user("healthz-admin", Role::Admin, PASSWORD, 1)
            .expect("admin");
    }
    let secret = store
        .create_token("healthz-admin", "t", 1)
        .expect("token")
        .secret;
    let admin = format!("Bearer {secret}");
    let headers = [("authorization", admin.as_str())];
    let (status, body, _) = send_to(&app, Method::GET, "/healthz", &headers, Body::empty()).await;
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

#[tokio::test]
async fn protected_routes_need_a_caller_and_health_does_not() {
    let app = router(state());
    for (method, path) in [
        (Method::GET, "/v1/models"),
        (Method::GET, "/api/conversations"),
        (Method::GET, "/api/me"),
        (Method::GET, "/api/audit"),
        (Method::GET, "/api/kb"),
        (Method::GET, "/api/runs/run_x/events"),
    ] {
        let (status, body, _) = send_to(&app, method.clone(), path, &[], Body::empty()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path}");
        assert_eq!(error_code(&body), "unauthorized");
        let wrong = [("authorization", "Bearer wdn_wrong")];
        let (status, _, _) = send_to(&app, method.clone(), path, &wrong, Body::empty()).await;
        assert_eq!(
            status,
            StatusCode::UNAUTHORIZED,
            "{method} {path} with a wrong token"
        );
    }
    let (status, _, headers) = send_to(&app, Method::GET, "/healthz", &[], Body::empty()).await;
    assert_eq!(status, StatusCode::OK);
    let policy = headers["content-security-policy"].to_str().unwrap();
    assert!(policy.contains("script-src 'self'") && !policy.contains("unsafe-inline"));
}

#[tokio::test]
async fn a_browser_session_needs_its_csrf_token_and_same_origin_to_write() {
    let app = router(state());
    let (status, body, headers) = login(&app, "tester", PASSWORD).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["user"]["role"], "operator");
    let cookies: Vec<String> = headers
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    let session = cookies
        .iter()
        .find(|c| c.starts_with("warden_session="))
        .unwrap();
    assert!(
        session.contains("HttpOnly") && session.contains("SameSite=Strict"),
        "{session}"
    );
    let value_of = |prefix: &str| {
        let cookie = cookies.iter().find(|c| c.starts_with(prefix)).unwrap();
        cookie[prefix.len()..].split(';').next().unwrap().to_owned()
    };
    let session_id = value_of("warden_session=");
    let csrf = value_of("warden_csrf=");
    assert!(session_id.len() >= 32 && csrf.len() >= 32);
    let cookie = format!("warden_session={session_id}; warden_csrf={csrf}");

    let (status, body, _) = send_to(
        &app,
        Method::GET,
        "/api/me",
        &[("cookie", &cookie)],
        Body::empty(),
    )
    .await;
    assert_eq!(
        (status, body["user"]["name"].as_str()),
        (StatusCode::OK, Some("tester"))
    );
    // (extra headers, expected status): the CSRF token and a same-origin request are both needed.
    let cases: [(&[(&str, &str)], StatusCode); 5] = [
        (&[], StatusCode::FORBIDDEN),
        (&[("x-csrf-token", "wrong")], StatusCode::FORBIDDEN),
        (
            &[("x-csrf-token", &csrf), ("origin", "http://evil.example")],
            StatusCode::FORBIDDEN,
        ),
        (
            &[("x-csrf-token", &csrf), ("sec-fetch-site", "cross-site")],
            StatusCode::FORBIDDEN,
        ),
        (
            &[("x-csrf-token", &csrf), ("origin", "http://localhost:3000")],
            StatusCode::CREATED,
        ),
    ];
    for (extra, want) in cases {
        let mut headers = vec![("cookie", cookie.as_str()), ("host", "localhost:3000")];
        headers.extend_from_slice(extra);
        let (got, body, _) = send_to(
            &app,
            Method::POST,
            "/api/conversations",
            &headers,
            Body::empty(),
        )
        .await;
        assert_eq!(got, want, "{extra:?}: {body}");
    }

    // Logging out ends the session.
    let logout_headers = [("cookie", cookie.as_str()), ("x-csrf-token", csrf.as_str())];
    let (status, _, _) = send_to(
        &app,
        Method::POST,
        "/api/logout",
        &logout_headers,
        Body::empty(),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _, _) = send_to(
        &app,
        Method::GET,
        "/api/me",
        &[("cookie", &cookie)],
        Body::empty(),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn secure_sessions_use_host_prefixed_cookies() {
    let mut secure = state();
    secure.sessions.secure_cookies = true;
    let app = router(secure);
    let (status, body, headers) = login(&app, "tester", PASSWORD).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let cookies: Vec<String> = headers
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    let session = cookies
        .iter()
        .find(|c| c.starts_with("__Host-warden_session="))
        .expect("a __Host- session cookie");
    assert!(
        session.contains("; Secure") && session.contains("Path=/") && !session.contains("Domain"),
        "{session}"
    );
    assert!(cookies.iter().any(|c| c.starts_with("__Host-warden_csrf=")));
    let id = session["__Host-warden_session=".len()..]
        .split(';')
        .next()
        .unwrap();
    let cookie = format!("__Host-warden_session={id}");
    let (status, _, _) = send_to(
        &app,
        Method::GET,
        "/api/me",
        &[("cookie", &cookie)],
        Body::empty(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    // The unprefixed name is not read when cookies are secure.
    let plain = format!("warden_session={id}");
    let (status, _, _) = send_to(
        &app,
        Method::GET,
        "/api/me",
        &[("cookie", &plain)],
        Body::empty(),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn refused_writes_are_audited() {
    let app = router(state());
    let token = format!("Bearer {}", fixture().token);
    // An operator may not create users: 403, recorded with who and what.
    let body = json!({"name": "x", "role": "viewer", "password": "password-123"}).to_string();
    let headers = [
        ("authorization", token.as_str()),
        ("content-type", "application/json"),
    ];
    let (status, _, _) =
        send_to(&app, Method::POST, "/api/users", &headers, Body::from(body)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // A cross-site write is refused before anyone is looked up, and recorded too.
    let cross = [
        ("authorization", token.as_str()),
        ("sec-fetch-site", "cross-site"),
    ];
    let (status, _, _) = send_to(
        &app,
        Method::POST,
        "/api/conversations",
        &cross,
        Body::empty(),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // A browser session writing without its CSRF token.
    let (_, _, headers) = login(&app, "tester", PASSWORD).await;
    let session = headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|c| c.strip_prefix("warden_session="))
        .and_then(|rest| rest.split(';').next())
        .expect("a session cookie")
        .to_owned();
    let cookie = format!("warden_session={session}");
    let (status, _, _) = send_to(
        &app,
        Method::POST,
        "/api/conversations",
        &[("cookie", &cookie)],
        Body::empty(),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // An anonymous cross-site write writes no row.
    let anonymous = [("sec-fetch-site", "cross-site")];
    let (status, _, _) = send_to(
        &app,
        Method::POST,
        "/api/runs/x/cancel",
        &anonymous,
        Body::empty(),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let rows = fixture().store.audit_tail(1000, None).unwrap();
    assert!(rows
        .iter()
        .all(|r| r.target.as_deref() != Some("POST /api/runs/x/cancel")));
    assert!(rows.iter().any(|r| r.action == "auth.csrf"
        && r.actor == "tester"
        && r.target.as_deref() == Some("POST /api/conversations")));
    assert!(rows.iter().any(|r| r.action == "auth.forbidden"
        && r.actor == "tester"
        && r.target.as_deref() == Some("POST /api/users")));
    assert!(rows
        .iter()
        .any(|r| r.action == "auth.cross_site"
            && r.target.as_deref() == Some("POST /api/conversations")));
}

#[tokio::test]
async fn a_conversations_memory_is_read_confirmed_and_pruned_by_its_owner_only() {
    use crate::store::{Conversations, Memory, MemoryKind, NewMemoryItem, Trust};
    let store = fixture().store.clone();
    let tester = store.user_by_name("tester").unwrap().id;
    let conversation = store.create_conversation(tester, "memory", 1).unwrap().id;
    let turn = store
        .add_user_message_with_run(tester, &conversation, "my server is db-7", 2)
        .unwrap();
    store.complete_turn(&turn.run_id, "Noted.", 3).unwrap();
    let item = NewMemoryItem {
        kind: MemoryKind::ResourceRefs,
        text: "The user's server is db-7.".into(),
        source_message_id: turn.message_id.clone(),
        citation_id: None,
        trust: Trust::UserStated,
    };
    store
        .write_memory(&conversation, 0, &turn.message_id, &[item], 4)
        .unwrap();
    let path = format!("/api/conversations/{conversation}/memory");
    let (status, body) = get(&path).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["version"], 1);
    let item_id = body["items"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(body["items"][0]["kind"], "resource_refs");
    assert_eq!(body["items"][0]["trust"], "user_stated");
    assert_eq!(
        body["items"][0]["source_message_id"],
        turn.message_id.as_str()
    );
    let (status, body) = post_json(&format!("{path}/{item_id}/confirm"), json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["item"]["trust"], "user_confirmed");
    let (status, body) = post_json(&format!("{path}/{item_id}/confirm"), json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    // Another user sees nothing of it.
    let viewer = store.create_token("viewer", "memory", 1).unwrap().secret;
    let auth = format!("Bearer {viewer}");
    let (status, _, _) = send_to(
        &router(state()),
        Method::GET,
        &path,
        &[("authorization", &auth)],
        Body::empty(),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = send(
        Method::DELETE,
        &format!("{path}/{item_id}"),
        None,
        Body::empty(),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (_, body) = get(&path).await;
    assert_eq!(body["items"], json!([]));
    assert_eq!(body["version"], 3);
    let (status, _) = send(
        Method::DELETE,
        &format!("{path}/{item_id}"),
        None,
        Body::empty(),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn failed_logins_are_rate_limited() {
    let app = router(state());
    for _ in 0..crate::http::login_limiter::MAX_PAIR_FAILURES {
        let (status, body, _) = login(&app, "viewer", "not the password").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(error_code(&body), "invalid_credentials");
    }
    // This address is refused for this name now, even with the right password (another
    // address would not be: see the login limiter's tests).
    let (status, body, headers) = login(&app, "viewer", PASSWORD).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(headers.contains_key("retry-after"));
}

async fn login(
    app: &axum::Router,
    name: &str,
    password: &str,
) -> (StatusCode, Value, axum::http::HeaderMap) {
    let body = json!({ "name": name, "password": password }).to_string();
    let headers = [("content-type", "application/json")];
    send_to(app, Method::POST, "/api/login", &headers, Body::from(body)).await
}

#[tokio::test]
async fn the_ui_is_served_with_its_policy() {
    let app = router(state());
    let (status, _, headers) = send_to_raw(&app, "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    assert!(!headers["content-security-policy"]
        .to_str()
        .unwrap()
        .contains("unsafe-inline"));
    let (status, _, _) = send_to_raw(&app, "/assets/app.js").await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, _) = send_to_raw(&app, "/assets/../Cargo.toml").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

async fn send_to_raw(app: &axum::Router, path: &str) -> (StatusCode, usize, axum::http::HeaderMap) {
    let request = Request::builder()
        .uri(path)
        .body(Body::empty())
        .expect("request");
    let response = app.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    (status, bytes.len(), headers)
}
