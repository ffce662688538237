//! What the router tests of incidents, diagnostics and pending actions share: a database
//! with an operator, a viewer, an incident and a diagnostic task; the app over it with a
//! chosen alert webhook; `send` through `oneshot`; and Alertmanager payloads.

use std::sync::{Arc, OnceLock};

pub(super) use axum::body::{to_bytes, Body};
pub(super) use axum::http::{HeaderMap, Method, Request, StatusCode};
pub(super) use serde_json::{json, Value};
pub(super) use tower::ServiceExt;

pub(super) use super::AlertWebhook;
use super::{router, AppState, HttpLimits, LoginLimiter, SessionConfig, UserSlots};
use crate::engine::{Engine, EngineConfig};
pub(super) use crate::runs::now_secs;
use crate::runs::{EventBus, RunService};
pub(super) use crate::store::{
    Accounts, Actions, Audit, AuditOutcome, Conversations, DiagnosticStatus, DiagnosticTasks,
    IncidentStatus, Incidents, NewDiagnosticTask, NewIncident, NewPendingAction, PendingAction,
    PendingActionKind, RecoveryApprovals, Role, Store,
};

pub(super) const ALERT_TOKEN: &str = "alert-token-0123456789";
pub(super) const PASSWORD: &str = "correct horse 1";
pub(super) const INCIDENT: &str = "incident_db-down";
pub(super) const TASK: &str = "diagnostic_db-1";

/// An engine without models: these routes never reach one.
fn engine() -> Arc<Engine> {
    static ENGINE: OnceLock<Arc<Engine>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let config = EngineConfig {
                upstream: Default::default(),
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

/// One database with an operator, a viewer and an admin (API tokens for each), an incident,
/// and a
/// diagnostic task of the viewer's.
pub(super) struct Fixture {
    _dir: tempfile::TempDir,
    pub(super) store: Arc<Store>,
    pub(super) operator: (i64, String),
    pub(super) viewer: (i64, String),
    pub(super) admin: (i64, String),
}

pub(super) fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Arc::new(Store::open(&dir.path().join("w.db")).expect("store opens"));
    let user = |name: &str, role| {
        let id = store.create_user(name, role, PASSWORD, 1).expect("user").id;
        let token = store.create_token(name, "t", 1).expect("token").secret;
        (id, token)
    };
    let operator = user("oper", Role::Operator);
    let viewer = user("vera", Role::Viewer);
    let admin = user("ada", Role::Admin);
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
        report: Some(crate::diagnostics::report::example(TASK, INCIDENT)),
    };
    store.add_diagnostic_task(&task, 1).expect("task");
    Fixture {
        _dir: dir,
        store,
        operator,
        viewer,
        admin,
    }
}

impl Fixture {
    pub(super) fn app(&self, alerts: AlertWebhook) -> axum::Router {
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
            anonymous_bodies: std::sync::Arc::new(
                crate::http::anonymous_bodies::AnonymousBodies::new(
                    crate::http::ConnectionLimits::DEFAULT.max_anonymous_bodies,
                ),
            ),
            shutdown: tokio::sync::watch::channel(false).1,
            diagnostic_sources: None,
        })
    }

    /// A pending action of `owner`'s, proposed by a run of theirs.
    pub(super) fn propose(
        &self,
        owner: i64,
        kind: PendingActionKind,
        parameters: Value,
    ) -> PendingAction {
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

    /// Rows in `table`.
    pub(super) fn count(&self, table: &str) -> i64 {
        self.store
            .read(|c| Ok(c.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))?))
            .expect("count")
    }

    pub(super) fn audit_outcomes(&self, action: &str) -> Vec<AuditOutcome> {
        let mut rows = self.store.audit_tail(100, None).expect("audit");
        rows.reverse();
        rows.into_iter()
            .filter(|row| row.action == action)
            .map(|row| row.outcome)
            .collect()
    }
}

/// Sends one request; returns status, JSON body (`Null` when empty) and headers.
pub(super) async fn send(
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

pub(super) fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

pub(super) fn alert(fingerprint: &str, status: &str, ends_at: &str) -> Value {
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

pub(super) fn notification(alerts: Vec<Value>) -> Value {
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
