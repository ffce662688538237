//! The authorization matrix over every route × {admin, operator, viewer, another user, a
//! disabled user, anonymous}: other users' objects answer 404 (never 403 with details),
//! anonymous callers 401, roles without a permission 403, and cross-site browser writes
//! 403 — on the real server.

use serde_json::{json, Value};

use crate::util::{add_user, create_token, into_status_and_json, run, Server, ADMIN};

const PASSWORD: &str = "matrix-password-1";

/// Who calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    Admin,
    Operator,
    Viewer,
    Other,
    Disabled,
    Anonymous,
}

const EVERYONE: [Who; 6] = [
    Who::Admin,
    Who::Operator,
    Who::Viewer,
    Who::Other,
    Who::Disabled,
    Who::Anonymous,
];

struct Callers {
    tokens: Vec<(Who, String)>,
}

impl Callers {
    fn token(&self, who: Who) -> Option<&str> {
        self.tokens
            .iter()
            .find(|(w, _)| *w == who)
            .map(|(_, t)| t.as_str())
    }
}

fn call(
    server: &Server,
    callers: &Callers,
    who: Who,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = ureq::request(method, &server.url(path));
    if let Some(token) = callers.token(who) {
        request = request.set("Authorization", &format!("Bearer {token}"));
    }
    // Streams (SSE) are only opened: the status is what matters here.
    if path.ends_with("/events") {
        return match request.call() {
            Ok(response) => (response.status(), Value::Null),
            Err(ureq::Error::Status(status, _)) => (status, Value::Null),
            Err(err) => panic!("{method} {path}: {err}"),
        };
    }
    let result = match body {
        Some(body) => request.send_json(body),
        None => request.call(),
    };
    into_status_and_json(result)
}

#[test]
fn every_route_answers_each_kind_of_caller_as_documented() {
    let server = Server::start(&["--max-answer-tokens", "8", "--sample-kb", "/nonexistent"]);
    let data = server.data().to_path_buf();
    let mut tokens = vec![(Who::Admin, server.token.clone())];
    for (who, name, role) in [
        (Who::Operator, "olga", "operator"),
        (Who::Viewer, "vic", "viewer"),
        (Who::Other, "mallory", "operator"),
        (Who::Disabled, "dave", "operator"),
    ] {
        add_user(&data, name, role, PASSWORD);
        tokens.push((who, create_token(&data, name)));
    }
    let callers = Callers { tokens };
    // The disabled user had a working token and session before being disabled.
    let dave_session = login(&server, "dave").expect("dave logs in");
    let disabled = run(&[
        "user",
        "disable",
        "dave",
        "--data",
        data.to_str().expect("utf-8"),
    ]);
    assert!(disabled.status.success());

    // Olga (operator) owns a conversation with one run.
    let (status, conversation) = call(
        &server,
        &callers,
        Who::Operator,
        "POST",
        "/api/conversations",
        Some(json!({})),
    );
    assert_eq!(status, 201, "{conversation}");
    let conversation_id = conversation["id"].as_str().expect("id").to_owned();
    let messages_path = format!("/api/conversations/{conversation_id}/messages");
    let (status, turn) = call(
        &server,
        &callers,
        Who::Operator,
        "POST",
        &messages_path,
        Some(json!({"content": "hi"})),
    );
    assert_eq!(status, 202, "{turn}");
    let run_id = turn["run_id"].as_str().expect("run id").to_owned();

    // Olga's spare token: an admin or olga may revoke it, nobody else may see it exists.
    let (status, spare) = call(
        &server,
        &callers,
        Who::Operator,
        "POST",
        "/api/tokens",
        Some(json!({"label": "spare"})),
    );
    assert_eq!(status, 201, "{spare}");
    let spare_path = format!("/api/tokens/{}", spare["id"].as_str().expect("token id"));

    let conversation_path = format!("/api/conversations/{conversation_id}");
    let run_path = format!("/api/runs/{run_id}");
    let events_path = format!("/api/runs/{run_id}/events");
    let cancel_path = format!("/api/runs/{run_id}/cancel");

    // (method, path, body, expected status for each of EVERYONE)
    // One row per route: method, path, then the expected status for admin, operator,
    // viewer, another user, a disabled user and anonymous (`EVERYONE`'s order).
    let table = format!(
        "
        GET    /api/me                               200 200 200 200 401 401
        GET    /healthz                              200 200 200 200 200 200
        GET    /metrics                              200 403 403 403 401 401
        GET    /v1/models                            200 200 200 200 401 401
        POST   /v1/embeddings                        200 200 200 200 401 401
        GET    /api/conversations                    200 200 200 200 401 401
        POST   /api/conversations                    201 201 201 201 401 401
        GET    {conversation_path}                   404 200 404 404 401 401
        GET    {conversation_path}/memory            404 200 404 404 401 401
        DELETE {conversation_path}/memory/mem_none   404 404 404 404 401 401
        POST   {conversation_path}/memory/mem_none/confirm 404 404 404 404 401 401
        POST   {messages_path}                       404 202 404 404 401 401
        GET    {run_path}                            404 200 404 404 401 401
        GET    {events_path}                         404 200 404 404 401 401
        POST   {cancel_path}                         404 202 404 404 401 401
        GET    /api/conversations/conv_doesnotexist  404 404 404 404 401 401
        GET    /api/audit?limit=5                    200 403 403 403 401 401
        GET    /api/kb                               200 200 200 200 401 401
        GET    /api/kb/search?q=disk                 200 200 200 200 401 401
        POST   /api/kb                               403 403 403 403 401 401
        POST   /api/kb/nope/sync                     404 404 403 404 401 401
        POST   /api/kb/nope/sync/cancel              404 404 403 404 401 401
        DELETE /api/kb/nope                          404 403 403 403 401 401
        PUT    /api/kb/nope/readers                  404 403 403 403 401 401
        GET    /api/kb/passages/999999               404 404 404 404 401 401
        GET    /api/diagnostics                      200 200 200 200 401 401
        GET    /api/diagnostics/sources              200 403 403 403 401 401
        POST   /api/diagnostics                      404 404 403 404 401 401
        GET    /api/diagnostics/diagnostic_none      404 404 404 404 401 401
        GET    /api/users                            200 403 403 403 401 401
        POST   /api/users                            400 403 403 403 401 401
        PATCH  /api/users/vic                        200 403 403 403 401 401
        PATCH  /api/users/admin                      409 403 403 403 401 401
        POST   /api/users/nobody/password            404 403 403 403 401 401
        GET    /api/groups                           200 403 403 403 401 401
        POST   /api/groups                           400 403 403 403 401 401
        DELETE /api/groups/nope                      404 403 403 403 401 401
        GET    /api/tokens                           200 200 200 200 401 401
        GET    /api/tokens?user=vic                  200 403 200 403 401 401
        POST   /api/tokens                           201 201 201 201 401 401
        DELETE {spare_path}                          204 204 404 404 401 401
        DELETE /api/tokens/tok_none                  404 404 404 404 401 401
        "
    );
    let body_for = |method: &str, path: &str| -> Option<Value> {
        match (method, path) {
            ("POST", "/v1/embeddings") => Some(json!({"input": "disk full"})),
            ("POST", "/api/conversations") => Some(json!({"title": "x"})),
            ("POST", "/api/kb") => Some(json!({"name": "x", "path": "/nonexistent/folder"})),
            ("PUT", "/api/kb/nope/readers") => Some(json!({"readers": ["role:viewer"]})),
            ("POST", "/api/diagnostics") => Some(json!({"incident_id": "incident_none"})),
            // A password too short: refused after the permission check.
            ("POST", "/api/users") => {
                Some(json!({"name": "newcomer", "role": "viewer", "password": "short"}))
            }
            ("PATCH", "/api/users/vic") => Some(json!({"groups": []})),
            // An admin demoting themselves.
            ("PATCH", "/api/users/admin") => Some(json!({"role": "viewer"})),
            ("POST", "/api/users/nobody/password") => Some(json!({"password": "long enough 1"})),
            ("POST", "/api/groups") => Some(json!({"name": "bad name"})),
            ("POST", "/api/tokens") => Some(json!({"label": "matrix"})),
            ("POST", p) if p == messages_path => Some(json!({"content": "hello?"})),
            _ => None,
        }
    };
    let matrix: Vec<(&str, &str, Vec<u16>)> = table
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let method = words.next()?;
            let path = words.next()?;
            let expected = words.map(|w| w.parse().expect("status")).collect();
            Some((method, path, expected))
        })
        .collect();
    assert_eq!(matrix.len(), 42);
    let mut failures = Vec::new();
    for (method, path, expected) in &matrix {
        assert_eq!(expected.len(), EVERYONE.len(), "{method} {path}");
        for (who, want) in EVERYONE.iter().zip(expected) {
            let body = body_for(method, path);
            let (got, response) = call(&server, &callers, *who, method, path, body);
            if got != *want {
                failures.push(format!(
                    "{method} {path} as {who:?}: want {want}, got {got} {response}"
                ));
            }
            if got >= 400 {
                let message = &response["error"]["message"];
                if !path.ends_with("/events") && !message.is_string() {
                    failures.push(format!(
                        "{method} {path} as {who:?}: no JSON error: {response}"
                    ));
                }
                // A 404 for another user's object says nothing about it.
                if got == 404
                    && message
                        .as_str()
                        .is_some_and(|m| m.contains("owner") || m.contains("olga"))
                {
                    failures.push(format!("{method} {path} as {who:?}: 404 leaks: {response}"));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "authorization matrix:\n{}",
        failures.join("\n")
    );

    // Another user's list never shows olga's conversation.
    let (_, listed) = call(
        &server,
        &callers,
        Who::Other,
        "GET",
        "/api/conversations",
        None,
    );
    assert!(!listed.to_string().contains(&conversation_id), "{listed}");

    // The disabled user's old session is dead too.
    let (status, _) = with_session(&server, &dave_session, "GET", "/api/me", &[]);
    assert_eq!(status, 401);

    // Browser sessions: writes need the CSRF token and a same-origin request.
    let olga = login(&server, "olga").expect("olga logs in");
    let host = server.base.trim_start_matches("http://").to_owned();
    let origin = server.base.clone();
    let csrf = olga.csrf.clone();
    let cases: Vec<(Vec<(&str, &str)>, u16)> = vec![
        (
            vec![("X-CSRF-Token", &csrf), ("Origin", "http://evil.example")],
            403,
        ),
        (
            vec![("X-CSRF-Token", &csrf), ("Sec-Fetch-Site", "cross-site")],
            403,
        ),
        (vec![("Origin", &origin)], 403),
        (vec![("X-CSRF-Token", "forged"), ("Origin", &origin)], 403),
        (
            vec![
                ("X-CSRF-Token", &csrf),
                ("Origin", &origin),
                ("Sec-Fetch-Site", "same-origin"),
            ],
            201,
        ),
    ];
    for (headers, want) in cases {
        let (got, body) = with_session(&server, &olga, "POST", "/api/conversations", &headers);
        assert_eq!(got, want, "{headers:?} (host {host}): {body}");
    }
    // A cross-site login attempt is refused as well.
    let cross = ureq::post(&server.url("/api/login"))
        .set("Origin", "http://evil.example")
        .send_json(json!({"name": "olga", "password": PASSWORD}));
    assert_eq!(into_status_and_json(cross).0, 403);

    // Audit rows recorded the logins and the admin view shows them.
    let (_, audit) = call(
        &server,
        &callers,
        Who::Admin,
        "GET",
        "/api/audit?limit=200",
        None,
    );
    let actions: Vec<&str> = audit["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|row| row["action"].as_str())
        .collect();
    for action in [
        "auth.login",
        "user.create",
        "user.disable",
        "token.create",
        "run.start",
    ] {
        assert!(
            actions.contains(&action),
            "audit lacks {action}: {actions:?}"
        );
    }
    assert!(
        !audit.to_string().contains(PASSWORD),
        "a password reached the audit log"
    );
    let _ = ADMIN;
}

/// A logged-in browser: its cookies and CSRF token.
struct Session {
    cookie: String,
    csrf: String,
}

fn login(server: &Server, name: &str) -> Option<Session> {
    let response = ureq::post(&server.url("/api/login"))
        .send_json(json!({"name": name, "password": PASSWORD}))
        .ok()?;
    let cookies: Vec<String> = response
        .all("set-cookie")
        .into_iter()
        .map(|c| c.split(';').next().unwrap_or("").to_owned())
        .collect();
    let csrf = cookies
        .iter()
        .find_map(|c| c.strip_prefix("warden_csrf="))?
        .to_owned();
    Some(Session {
        cookie: cookies.join("; "),
        csrf,
    })
}

fn with_session(
    server: &Server,
    session: &Session,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let mut request = ureq::request(method, &server.url(path)).set("Cookie", &session.cookie);
    for (name, value) in headers {
        request = request.set(name, value);
    }
    let result = if method == "GET" {
        request.call()
    } else {
        request.send_json(json!({}))
    };
    into_status_and_json(result)
}

#[test]
fn the_first_start_prints_a_one_time_bootstrap_link_that_creates_the_admin() {
    let server = Server::start_without_users(&["--sample-kb", "/nonexistent"]);
    let printed = server.stdout_text();
    let token = printed
        .split("#bootstrap=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no bootstrap link printed: {printed}"))
        .to_owned();
    let wrong = ureq::post(&server.url("/api/bootstrap"))
        .send_json(json!({"token": "wrong", "name": "root", "password": PASSWORD}));
    assert_eq!(into_status_and_json(wrong).0, 404);
    let created = ureq::post(&server.url("/api/bootstrap"))
        .send_json(json!({"token": token, "name": "root", "password": PASSWORD}))
        .expect("bootstrap");
    let cookies: Vec<String> = created
        .all("set-cookie")
        .into_iter()
        .map(|c| c.split(';').next().unwrap_or("").to_owned())
        .collect();
    let body: Value = created.into_json().expect("json");
    assert_eq!(body["user"]["role"], "admin", "{body}");
    let me: Value = ureq::get(&server.url("/api/me"))
        .set("Cookie", &cookies.join("; "))
        .call()
        .expect("me")
        .into_json()
        .expect("json");
    assert_eq!(me["user"]["name"], "root");
    // The link works once.
    let again = ureq::post(&server.url("/api/bootstrap"))
        .send_json(json!({"token": token, "name": "root2", "password": PASSWORD}));
    assert_eq!(into_status_and_json(again).0, 404);
    // And the admin can sign in with the password from now on.
    assert!(login(&server, "root").is_some());
}
