//! Router tests, with `oneshot`, of the incident, diagnostic and pending-action routes: the
//! Alertmanager webhook (its token, payload checks, deduplication, audit rows), incidents
//! for every role, owner-scoped diagnostics and actions, and confirm/reject with
//! idempotency keys, the parameters hash, roles and CSRF. Each test has its own database.

use std::sync::{Arc, OnceLock};

use axum::body::{to_bytes, Body};
use axum::http::{HeaderMap, Method, Request, StatusCode};
use serde_json::{json, Value};
use tower::ServiceExt;

use super::{router, AlertWebhook, AppState, HttpLimits, LoginLimiter, SessionConfig, UserSlots};
use crate::config::AlertFlags;
use crate::engine::{Engine, EngineConfig};
use crate::runs::{now_secs, EventBus, RunService};
use crate::store::{
    Accounts, Actions, Audit, AuditOutcome, Conversations, DiagnosticStatus, DiagnosticTasks,
    IncidentStatus, Incidents, NewDiagnosticTask, NewIncident, NewPendingAction, PendingAction,
    PendingActionKind, Role, Store,
};

const ALERT_TOKEN: &str = "alert-token-0123456789";
const PASSWORD: &str = "correct horse 1";
const INCIDENT: &str = "incident_db-down";
const TASK: &str = "diagnostic_db-1";

/// An engine without models: these routes never reach one.
fn engine() -> Arc<Engine> {
    static ENGINE: OnceLock<Arc<Engine>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let config = EngineConfig {
                models: Vec::new(),
                threads: 1,
                queue_depth: 1,
                max_batch: 1,
                embed_precision: crate::engine::EmbedPrecision::Auto,
                max_context: 512,
                output_limits: Default::default(),
            };
            Arc::new(Engine::load(&config))
        })
        .clone()
}

/// One database with an operator and a viewer (API tokens for both), an incident, and a
/// diagnostic task of the viewer's.
struct Fixture {
    _dir: tempfile::TempDir,
    store: Arc<Store>,
    operator: (i64, String),
    viewer: (i64, String),
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Arc::new(Store::open(&dir.path().join("w.db")).expect("store opens"));
    let user = |name: &str, role| {
        let id = store.create_user(name, role, PASSWORD, 1).expect("user").id;
        let token = store.create_token(name, "t", 1).expect("token").secret;
        (id, token)
    };
    let operator = user("oper", Role::Operator);
    let viewer = user("vera", Role::Viewer);
    let incident = NewIncident {
        id: Some(INCIDENT.into()),
        title: "db down".into(),
        service: "db".into(),
        severity: "critical".into(),
        status: IncidentStatus::Firing,
    };
    store.add_incident(&incident, 1).expect("incident");
    let task = NewDiagnosticTask {
        id: Some(TASK.into()),
        incident_id: INCIDENT.into(),
        owner_id: viewer.0,
        status: DiagnosticStatus::Completed,
        report: Some(json!({"root_cause": "disk full"})),
    };
    store.add_diagnostic_task(&task, 1).expect("task");
    Fixture {
        _dir: dir,
        store,
        operator,
        viewer,
    }
}

impl Fixture {
    fn app(&self, alerts: AlertWebhook) -> axum::Router {
        router(AppState {
            engine: engine(),
            library: None,
            runs: RunService::new(self.store.clone(), EventBus::default(), None),
            store: self.store.clone(),
            sessions: SessionConfig::default(),
            login_limiter: Arc::new(LoginLimiter::default()),
            v1_slots: Arc::new(UserSlots::new(4)),
            limits: HttpLimits {
                max_body_bytes: 4 << 20,
                max_tokens_cap: 256,
                max_embedding_inputs: 4,
                max_v1_requests_per_user: 4,
                heartbeat: crate::config::DEFAULT_HEARTBEAT,
                connections: crate::http::ConnectionLimits::DEFAULT,
            },
            alerts,
            network: Default::default(),
            metrics: Default::default(),
            metrics_token: None,
            refusals: std::sync::Arc::default(),
            anonymous_bodies: std::sync::Arc::new(tokio::sync::Semaphore::new(
                crate::http::ConnectionLimits::DEFAULT.max_anonymous_bodies,
            )),
            shutdown: tokio::sync::watch::channel(false).1,
        })
    }

    /// A pending action of `owner`'s, proposed by a run of theirs.
    fn propose(&self, owner: i64, kind: PendingActionKind, parameters: Value) -> PendingAction {
        let conversation = self.store.create_conversation(owner, "c", 1).expect("conv");
        let run = self
            .store
            .add_user_message_with_run(owner, &conversation.id, "please", 1)
            .expect("run")
            .run_id;
        let new = NewPendingAction {
            kind,
            target: "db",
            reason: "the database is down",
            parameters: &parameters,
            run_id: &run,
            owner_id: owner,
            expires_at: now_secs() + 3600,
        };
        self.store
            .create_pending_action(&new, now_secs())
            .expect("action")
    }

    fn audit_outcomes(&self, action: &str) -> Vec<AuditOutcome> {
        let mut rows = self.store.audit_tail(100, None).expect("audit");
        rows.reverse();
        rows.into_iter()
            .filter(|row| row.action == action)
            .map(|row| row.outcome)
            .collect()
    }
}

/// Sends one request; returns status, JSON body (`Null` when empty) and headers.
async fn send(
    app: &axum::Router,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> (StatusCode, Value, HeaderMap) {
    let mut request = Request::builder().method(method).uri(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let body = match body {
        Some(value) => {
            request = request.header("content-type", "application/json");
            Body::from(value.to_string())
        }
        None => Body::empty(),
    };
    let response = app
        .clone()
        .oneshot(request.body(body).expect("request builds"))
        .await
        .expect("the router is infallible");
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    let value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap_or_else(|_| panic!("not JSON: {bytes:?}"))
    };
    (status, value, headers)
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

fn alert(fingerprint: &str, status: &str, ends_at: &str) -> Value {
    json!({
        "status": status,
        "labels": {"alertname": "DiskFull", "severity": "warning", "job": "node"},
        "annotations": {"summary": "Disk almost full on db1"},
        "startsAt": "2024-03-01T12:34:56.789Z",
        "endsAt": ends_at,
        "generatorURL": "http://prometheus/graph",
        "fingerprint": fingerprint,
    })
}

fn notification(alerts: Vec<Value>) -> Value {
    json!({
        "version": "4",
        "groupKey": "{}:{alertname=\"DiskFull\"}",
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": "warden",
        "groupLabels": {"alertname": "DiskFull"},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "alerts": alerts,
    })
}

#[tokio::test]
async fn the_webhook_creates_dedupes_and_resolves_incidents() {
    let f = fixture();
    let app = f.app(AlertWebhook::with_token(ALERT_TOKEN));
    let auth = bearer(ALERT_TOKEN);
    let headers = [("authorization", auth.as_str())];
    let firing = notification(vec![
        alert("fp-a", "firing", "0001-01-01T00:00:00Z"),
        alert("fp-b", "firing", "0001-01-01T00:00:00Z"),
    ]);
    let (status, body, _) = send(
        &app,
        Method::POST,
        "/api/alerts",
        &headers,
        Some(firing.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let incidents = body["incidents"].as_array().expect("incidents").clone();
    assert_eq!(incidents.len(), 2);
    assert!(incidents.iter().all(|i| i["created"] == true));
    let id = incidents[0]["id"].as_str().expect("id").to_owned();

    let (status, body, _) = send(&app, Method::POST, "/api/alerts", &headers, Some(firing)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["incidents"][0], json!({"id": id, "created": false}));

    let resolved = notification(vec![alert("fp-a", "resolved", "2024-03-01T13:00:00Z")]);
    let (status, _, _) = send(&app, Method::POST, "/api/alerts", &headers, Some(resolved)).await;
    assert_eq!(status, StatusCode::OK);
    let incident = f.store.incident(&id).expect("incident");
    assert_eq!(
        (incident.status, incident.starts_at, incident.ends_at),
        (
            IncidentStatus::Resolved,
            Some(1_709_296_496),
            Some(1_709_298_000)
        )
    );
    assert_eq!(
        (
            incident.title.as_str(),
            incident.service.as_str(),
            incident.severity.as_str()
        ),
        ("Disk almost full on db1", "node", "warning")
    );
    assert_eq!(f.store.incidents(None, 100).expect("list").len(), 3);
    assert_eq!(
        f.audit_outcomes("alert.receive"),
        [AuditOutcome::Success; 3]
    );
}

#[tokio::test]
async fn the_webhook_needs_its_token_and_is_off_without_one() {
    let f = fixture();
    let payload = notification(vec![alert("fp-a", "firing", "")]);
    let off = f.app(AlertWebhook::default());
    let auth = bearer(ALERT_TOKEN);
    let (status, body, _) = send(
        &off,
        Method::POST,
        "/api/alerts",
        &[("authorization", auth.as_str())],
        Some(payload.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["code"], "disabled");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap_or("")
        .contains("--alert-token"));

    let app = f.app(AlertWebhook::with_token(ALERT_TOKEN));
    let user_token = bearer(&f.operator.1);
    let wrong = bearer("alert-token-0123456788");
    for headers in [
        vec![],
        vec![("authorization", wrong.as_str())],
        vec![("authorization", ALERT_TOKEN)],
        // A user's API token is not the webhook's.
        vec![("authorization", user_token.as_str())],
    ] {
        let (status, body, _) = send(
            &app,
            Method::POST,
            "/api/alerts",
            &headers,
            Some(payload.clone()),
        )
        .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{headers:?}");
        assert_eq!(body["error"]["code"], "unauthorized");
    }
    assert_eq!(f.store.incidents(None, 100).expect("list").len(), 1);
    // The webhook off, then four wrong tokens: one row per reason (refusals are aggregated).
    assert_eq!(f.audit_outcomes("alert.receive"), [AuditOutcome::Denied; 2]);
}

/// One policy table decides on every channel: the HTTP route that starts a diagnostic,
/// the chat tool that proposes one, and the confirm API that sets one going agree for
/// every role (a viewer could once start one through chat though the route said 403).
#[tokio::test]
async fn the_policy_table_decides_starting_a_diagnostic_on_every_channel() {
    use crate::agent::tools::{Catalog, Registry};
    use crate::policy::{allows, Capability, Channel};
    let f = fixture();
    let app = f.app(AlertWebhook::default());
    for (role, (owner, token)) in [(Role::Operator, &f.operator), (Role::Viewer, &f.viewer)] {
        let auth = bearer(token);
        let expect = |channel| {
            if allows(role, Capability::StartDiagnostic, channel) {
                StatusCode::ACCEPTED
            } else {
                StatusCode::FORBIDDEN
            }
        };
        // HTTP.
        let (status, body, _) = send(
            &app,
            Method::POST,
            "/api/diagnostics",
            &[("authorization", auth.as_str())],
            Some(json!({"incident_id": INCIDENT})),
        )
        .await;
        assert_eq!(status, expect(Channel::Http), "{role:?} over HTTP: {body}");
        // The chat tool is in the role's catalogue exactly when the table allows it.
        let catalog = Catalog::compile(&Registry::default(), &["create_diagnostic"], &[], role)
            .expect("catalogue");
        assert_eq!(
            catalog.get("create_diagnostic").is_some(),
            allows(role, Capability::StartDiagnostic, Channel::ChatTool),
            "{role:?} in chat"
        );
        // Confirming an action proposed in chat.
        let action = f.propose(
            *owner,
            PendingActionKind::DiagnosticStart,
            json!({"incident_id": INCIDENT}),
        );
        let (status, body, _) = send(
            &app,
            Method::POST,
            &format!("/api/actions/{}/confirm", action.id),
            &[("authorization", auth.as_str()), ("idempotency-key", "m1")],
            Some(json!({"parameters_hash": action.parameters_hash})),
        )
        .await;
        let want = match expect(Channel::Confirm) {
            StatusCode::ACCEPTED => StatusCode::OK,
            other => other,
        };
        assert_eq!(status, want, "{role:?} confirming: {body}");
    }
    // The viewer's refusals left nothing behind: no task, and the action still pending.
    assert!(f
        .store
        .diagnostic_tasks(f.viewer.0, 100)
        .expect("tasks")
        .iter()
        .all(|task| task.id == TASK));
}

/// A flood of posts without the token writes one audit row a minute, not one per post (the
/// next row says how many went unwritten: `refusal_audit`'s tests).
#[tokio::test]
async fn a_flood_of_unauthenticated_alerts_writes_one_audit_row() {
    let f = fixture();
    let app = f.app(AlertWebhook::with_token(ALERT_TOKEN));
    let wrong = bearer("alert-token-0123456788");
    let payload = notification(vec![alert("fp-flood", "firing", "")]);
    for _ in 0..200 {
        let (status, _, _) = send(
            &app,
            Method::POST,
            "/api/alerts",
            &[("authorization", wrong.as_str())],
            Some(payload.clone()),
        )
        .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    assert_eq!(f.audit_outcomes("alert.receive"), [AuditOutcome::Denied]);
}

#[tokio::test]
async fn bad_webhook_payloads_are_400s() {
    let f = fixture();
    let app = f.app(AlertWebhook::with_token(ALERT_TOKEN));
    let auth = bearer(ALERT_TOKEN);
    let headers = [("authorization", auth.as_str())];
    let mut old_version = notification(vec![alert("fp", "firing", "")]);
    old_version["version"] = json!("3");
    // Compact alerts: 1,001 full ones would pass the body cap before the count is checked.
    let compact = json!({"status": "firing", "labels": {}, "fingerprint": "fp"});
    let too_many = notification(vec![compact; 1001]);
    for (payload, code) in [
        (json!("not an object"), "invalid_json"),
        (json!({"version": "4"}), "invalid_json"),
        (
            notification(vec![alert("fp", "burning", "")]),
            "invalid_json",
        ),
        (old_version, "invalid_value"),
        (notification(vec![alert("", "firing", "")]), "invalid_value"),
        (
            notification(vec![alert("fp", "firing", "tomorrow")]),
            "invalid_value",
        ),
        (too_many, "invalid_value"),
    ] {
        let (status, body, _) = send(
            &app,
            Method::POST,
            "/api/alerts",
            &headers,
            Some(payload.clone()),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{payload}: {body}");
        assert_eq!(body["error"]["code"], code, "{payload}");
    }
    let (status, _, _) = send(&app, Method::POST, "/api/alerts", &headers, None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(f.store.incidents(None, 100).expect("list").len(), 1);
    assert_eq!(
        f.audit_outcomes("alert.receive"),
        [AuditOutcome::Failure; 8]
    );
}

#[tokio::test]
async fn every_signed_in_user_reads_incidents() {
    let f = fixture();
    let app = f.app(AlertWebhook::default());
    let viewer = bearer(&f.viewer.1);
    let headers = [("authorization", viewer.as_str())];
    let (status, body, _) = send(&app, Method::GET, "/api/incidents", &headers, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["incidents"][0]["id"], INCIDENT);
    let path = format!("/api/incidents/{INCIDENT}");
    let (status, body, _) = send(&app, Method::GET, &path, &headers, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (&body["title"], &body["status"]),
        (&json!("db down"), &json!("firing"))
    );

    let (status, body, _) = send(
        &app,
        Method::GET,
        "/api/incidents?status=closed&limit=5",
        &headers,
        None,
    )
    .await;
    assert_eq!((status, body), (StatusCode::OK, json!({"incidents": []})));
    for bad in [
        "/api/incidents?status=burning",
        "/api/incidents?limit=0",
        "/api/incidents?limit=x",
        "/api/incidents?colour=red",
    ] {
        let (status, body, _) = send(&app, Method::GET, bad, &headers, None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
    let (status, body, _) = send(
        &app,
        Method::GET,
        "/api/incidents/incident_nope",
        &headers,
        None,
    )
    .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (StatusCode::NOT_FOUND, &json!("not_found"))
    );
    let (status, _, _) = send(&app, Method::GET, "/api/incidents", &[], None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn diagnostics_are_their_owners_only() {
    let f = fixture();
    let app = f.app(AlertWebhook::default());
    let path = format!("/api/diagnostics/{TASK}");
    let viewer = bearer(&f.viewer.1);
    let (status, body, _) = send(
        &app,
        Method::GET,
        &path,
        &[("authorization", viewer.as_str())],
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (
            &body["incident_id"],
            &body["status"],
            &body["report"]["root_cause"]
        ),
        (&json!(INCIDENT), &json!("completed"), &json!("disk full"))
    );
    assert!(body.get("owner_id").is_none());
    let operator = bearer(&f.operator.1);
    let (status, other, _) = send(
        &app,
        Method::GET,
        &path,
        &[("authorization", operator.as_str())],
        None,
    )
    .await;
    let (_, missing, _) = send(
        &app,
        Method::GET,
        "/api/diagnostics/diagnostic_none",
        &[("authorization", operator.as_str())],
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        other["error"]["message"]
            .as_str()
            .map(|m| m.replace(TASK, "ID")),
        missing["error"]["message"]
            .as_str()
            .map(|m| m.replace("diagnostic_none", "ID"))
    );
}

#[tokio::test]
async fn confirming_a_diagnostic_start_is_idempotent_and_bound_to_its_parameters() {
    let f = fixture();
    let app = f.app(AlertWebhook::default());
    let action = f.propose(
        f.operator.0,
        PendingActionKind::DiagnosticStart,
        json!({"incident_id": INCIDENT}),
    );
    let owner = bearer(&f.operator.1);
    let path = format!("/api/actions/{}/confirm", action.id);
    let body = json!({"parameters_hash": action.parameters_hash});

    let (status, read, _) = send(
        &app,
        Method::GET,
        &format!("/api/actions/{}", action.id),
        &[("authorization", owner.as_str())],
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (&read["status"], &read["parameters_hash"]),
        (&json!("pending"), &json!(action.parameters_hash))
    );
    assert!(read.get("owner_id").is_none());

    let (status, err, _) = send(
        &app,
        Method::POST,
        &path,
        &[("authorization", owner.as_str())],
        Some(body.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(err["error"]["param"], "idempotency-key");
    let long_key = "k".repeat(201);
    let (status, _, _) = send(
        &app,
        Method::POST,
        &path,
        &[
            ("authorization", owner.as_str()),
            ("idempotency-key", long_key.as_str()),
        ],
        Some(body.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _, _) = send(
        &app,
        Method::POST,
        &path,
        &[("authorization", owner.as_str()), ("idempotency-key", "k0")],
        Some(json!({})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let wrong = json!({"parameters_hash": "0".repeat(64)});
    let (status, err, _) = send(
        &app,
        Method::POST,
        &path,
        &[("authorization", owner.as_str()), ("idempotency-key", "k0")],
        Some(wrong),
    )
    .await;
    assert_eq!(
        (status, &err["error"]["code"]),
        (StatusCode::UNPROCESSABLE_ENTITY, &json!("mismatch"))
    );

    let headers = [("authorization", owner.as_str()), ("idempotency-key", "k1")];
    let (status, first, first_headers) =
        send(&app, Method::POST, &path, &headers, Some(body.clone())).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(first["action"]["status"], "executed");
    assert!(first_headers.get("idempotent-replayed").is_none());
    let task_id = first["action"]["result"]["diagnostic_task_id"]
        .as_str()
        .expect("task id");
    let task = f
        .store
        .diagnostic_task(f.operator.0, task_id)
        .expect("task");
    assert_eq!(task.status, DiagnosticStatus::Queued);

    let (status, again, again_headers) =
        send(&app, Method::POST, &path, &headers, Some(body.clone())).await;
    assert_eq!((status, &again), (StatusCode::OK, &first));
    assert_eq!(
        again_headers
            .get("idempotent-replayed")
            .map(|v| v.as_bytes()),
        Some(&b"true"[..])
    );

    let (status, err, _) = send(
        &app,
        Method::POST,
        &path,
        &[("authorization", owner.as_str()), ("idempotency-key", "k2")],
        Some(body.clone()),
    )
    .await;
    assert_eq!(
        (status, &err["error"]["code"]),
        (StatusCode::CONFLICT, &json!("conflict"))
    );
    let reject = format!("/api/actions/{}/reject", action.id);
    let (status, _, _) = send(&app, Method::POST, &reject, &headers, Some(body.clone())).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);

    // Another user's action is not found, for reading and for deciding.
    let stranger = bearer(&f.viewer.1);
    let (status, _, _) = send(
        &app,
        Method::GET,
        &format!("/api/actions/{}", action.id),
        &[("authorization", stranger.as_str())],
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, _) = send(
        &app,
        Method::POST,
        &path,
        &[
            ("authorization", stranger.as_str()),
            ("idempotency-key", "k9"),
        ],
        Some(body),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let outcomes = f.audit_outcomes("action.confirm");
    assert_eq!(
        outcomes,
        [
            AuditOutcome::Failure,
            AuditOutcome::Success,
            AuditOutcome::Success,
            AuditOutcome::Failure,
            AuditOutcome::Failure
        ]
    );
    assert_eq!(f.audit_outcomes("action.reject"), [AuditOutcome::Failure]);
}

#[tokio::test]
async fn confirming_a_recovery_needs_operator_or_admin_but_anyone_may_reject() {
    let f = fixture();
    let app = f.app(AlertWebhook::default());
    let parameters = json!({"diagnostic_task_id": TASK});
    let action = f.propose(f.viewer.0, PendingActionKind::RecoveryRequest, parameters);
    let viewer = bearer(&f.viewer.1);
    let body = json!({"parameters_hash": action.parameters_hash});
    let confirm = format!("/api/actions/{}/confirm", action.id);
    let (status, err, _) = send(
        &app,
        Method::POST,
        &confirm,
        &[
            ("authorization", viewer.as_str()),
            ("idempotency-key", "k1"),
        ],
        Some(body.clone()),
    )
    .await;
    assert_eq!(
        (status, &err["error"]["code"]),
        (StatusCode::FORBIDDEN, &json!("forbidden"))
    );
    assert_eq!(f.audit_outcomes("action.confirm"), [AuditOutcome::Denied]);
    let reject = format!("/api/actions/{}/reject", action.id);
    let (status, rejected, _) = send(
        &app,
        Method::POST,
        &reject,
        &[
            ("authorization", viewer.as_str()),
            ("idempotency-key", "k1"),
        ],
        Some(body),
    )
    .await;
    assert_eq!(
        (status, &rejected["action"]["status"]),
        (StatusCode::OK, &json!("rejected"))
    );

    // An operator's own recovery request is approved, and nothing runs.
    let operator_task = NewDiagnosticTask {
        id: Some("diagnostic_oper".into()),
        incident_id: INCIDENT.into(),
        owner_id: f.operator.0,
        status: DiagnosticStatus::Completed,
        report: Some(json!({"recovery": {"mode": "proposal", "proposal": "restart the pooler"}})),
    };
    f.store
        .add_diagnostic_task(&operator_task, 1)
        .expect("task");
    let action = f.propose(
        f.operator.0,
        PendingActionKind::RecoveryRequest,
        json!({"diagnostic_task_id": "diagnostic_oper"}),
    );
    let operator = bearer(&f.operator.1);
    let confirm = format!("/api/actions/{}/confirm", action.id);
    let body = json!({"parameters_hash": action.parameters_hash});
    let (status, confirmed, _) = send(
        &app,
        Method::POST,
        &confirm,
        &[
            ("authorization", operator.as_str()),
            ("idempotency-key", "k1"),
        ],
        Some(body),
    )
    .await;
    assert_eq!(
        (status, &confirmed["action"]["status"]),
        (StatusCode::OK, &json!("confirmed"))
    );
    assert!(confirmed["action"]["result"]["approval_id"].is_string());
}

#[tokio::test]
async fn a_browser_decision_needs_its_csrf_token() {
    let f = fixture();
    let app = f.app(AlertWebhook::default());
    let action = f.propose(
        f.viewer.0,
        PendingActionKind::DiagnosticStart,
        json!({"incident_id": INCIDENT}),
    );
    let session = f
        .store
        .create_session(f.viewer.0, now_secs(), 1800, 3600)
        .expect("session");
    let cookie = format!("warden_session={}", session.id);
    let path = format!("/api/actions/{}/reject", action.id);
    let body = json!({"parameters_hash": action.parameters_hash});
    let (status, _, _) = send(
        &app,
        Method::POST,
        &path,
        &[("cookie", cookie.as_str()), ("idempotency-key", "k1")],
        Some(body.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let headers = [
        ("cookie", cookie.as_str()),
        ("idempotency-key", "k1"),
        ("x-csrf-token", session.csrf_token.as_str()),
    ];
    let (status, rejected, _) = send(&app, Method::POST, &path, &headers, Some(body)).await;
    assert_eq!(
        (status, &rejected["action"]["status"]),
        (StatusCode::OK, &json!("rejected"))
    );
}

#[test]
fn the_alert_token_flag_is_validated() {
    let flags = |token: Option<&str>| AlertFlags {
        alert_token: token.map(str::to_owned),
    };
    assert!(!flags(None).webhook().expect("off").is_enabled());
    assert!(!flags(Some("")).webhook().expect("off").is_enabled());
    assert!(flags(Some(ALERT_TOKEN)).webhook().expect("on").is_enabled());
    assert!(flags(Some("short")).webhook().is_err());
    assert!(flags(Some("has a space in the token")).webhook().is_err());
    assert!(!format!("{:?}", flags(Some(ALERT_TOKEN))).contains(ALERT_TOKEN));
}

/// A caller without the webhook's token is refused from the headers alone: the server
/// answers before reading a body that never arrives (it read up to 4 MiB first, so 250
/// half-sent bodies held 700 MiB).
#[tokio::test]
async fn the_webhook_refuses_a_wrong_token_before_reading_the_body() {
    let f = fixture();
    let app = f.app(AlertWebhook::with_token(ALERT_TOKEN));
    let never_sent = futures_util::stream::pending::<Result<axum::body::Bytes, std::io::Error>>();
    let request = Request::builder()
        .method(Method::POST)
        .uri("/api/alerts")
        .header("authorization", bearer("not-the-token"))
        .header("content-type", "application/json")
        .header("content-length", "4000000")
        .body(Body::from_stream(never_sent))
        .expect("request builds");
    let response = tokio::time::timeout(std::time::Duration::from_secs(5), app.oneshot(request))
        .await
        .expect("answered without waiting for the body")
        .expect("the router is infallible");
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
}

/// Bodies are capped per route: the webhook at 256 KiB, sign-in at 8 KiB.
#[tokio::test]
async fn webhook_and_login_bodies_are_capped_per_route() {
    let f = fixture();
    let app = f.app(AlertWebhook::with_token(ALERT_TOKEN));
    let incidents = f.store.incidents(None, 100).expect("list").len();
    let auth = bearer(ALERT_TOKEN);
    let mut big = notification(vec![alert("fp", "firing", "")]);
    big["commonAnnotations"] =
        json!({"padding": "x".repeat(super::incidents::MAX_ALERT_BODY_BYTES)});
    let (status, body, _) = send(
        &app,
        Method::POST,
        "/api/alerts",
        &[("authorization", auth.as_str())],
        Some(big),
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert_eq!(body["error"]["code"], "payload_too_large");
    let login =
        json!({"name": "alice", "password": "p".repeat(super::session::MAX_LOGIN_BODY_BYTES)});
    let (status, body, _) = send(
        &app,
        Method::POST,
        "/api/login",
        &[("origin", "http://localhost")],
        Some(login),
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert_eq!(f.store.incidents(None, 100).expect("list").len(), incidents);
}
