//! Incident routes: the Alertmanager webhook (`POST /api/alerts`, authenticated by its own
//! bearer token rather than a user's, each call audited), incidents for every signed-in
//! user (`GET /api/incidents`, `GET /api/incidents/{id}`), and the owner's diagnostic tasks
//! with their reports (`GET /api/diagnostics/{id}`, 404 for another user's). Parses
//! Alertmanager's version 4 payload (its RFC 3339 times through `crate::timefmt`).

use std::collections::BTreeMap;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::Caller;
use super::error::ApiError;
use super::json::{ApiPath, ApiQuery};
use super::{blocking, AppState};
use crate::policy::Capability;
use crate::runs::now_secs;
use crate::store::{
    secret_hash, secret_matches_hash, AlertStatus, AlertUpdate, Audit, AuditEntry, AuditOutcome,
    IncidentStatus, Incidents, MAX_INCIDENTS_PER_READ,
};
use crate::timefmt::parse_rfc3339;

/// The audit actor of webhook calls.
pub const ALERTMANAGER_ACTOR: &str = "alertmanager";
/// The only Alertmanager webhook payload version understood.
const PAYLOAD_VERSION: &str = "4";
/// Most alerts one webhook call may carry.
pub const MAX_ALERTS_PER_CALL: usize = 1000;
/// Incidents listed when the request names no `limit`.
const DEFAULT_INCIDENT_LIMIT: u32 = 50;

/// The alert webhook's credential: only the SHA-256 of the token is kept. Off (every call
/// answered 404) when the server has no `--alert-token`.
#[derive(Clone, Default)]
pub struct AlertWebhook {
    token_hash: Option<String>,
}

impl AlertWebhook {
    /// A webhook accepting `Authorization: Bearer <token>`.
    pub fn with_token(token: &str) -> Self {
        Self {
            token_hash: Some(secret_hash(token)),
        }
    }

    pub fn is_enabled(&self) -> bool {
        self.token_hash.is_some()
    }

    /// Whether `presented` is the token (compared as hashes, in constant time).
    fn accepts(&self, presented: &str) -> bool {
        self.token_hash
            .as_deref()
            .is_some_and(|hash| secret_matches_hash(hash, presented))
    }
}

impl std::fmt::Debug for AlertWebhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = if self.is_enabled() { "on" } else { "off" };
        write!(f, "AlertWebhook({state})")
    }
}

/// The webhook: reachable without a user, checked against the webhook token instead.
pub(super) fn webhook_routes() -> Router<AppState> {
    Router::new().route("/api/alerts", post(receive_alerts))
}

/// Routes for signed-in users.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/incidents", get(list))
        .route("/api/incidents/{id}", get(read))
}

/// Alertmanager's webhook body (version 4); fields Warden does not use are ignored.
#[derive(Deserialize)]
struct AlertmanagerPayload {
    version: String,
    #[serde(default)]
    receiver: String,
    alerts: Vec<AlertmanagerAlert>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AlertmanagerAlert {
    status: AlertStatus,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    starts_at: Option<String>,
    ends_at: Option<String>,
    #[serde(default)]
    fingerprint: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    status: Option<String>,
    limit: Option<u32>,
}

/// Largest Alertmanager payload taken: a group of a few hundred alerts fits.
pub const MAX_ALERT_BODY_BYTES: usize = 256 * 1024;

/// The webhook. The token is checked from the headers before a byte of the body is read:
/// a caller without it costs the server no memory, however large a body it announces.
async fn receive_alerts(
    State(state): State<AppState>,
    request: Request,
) -> Result<Response, ApiError> {
    let (parts, body) = request.into_parts();
    let headers = parts.headers;
    if !state.alerts.is_enabled() {
        let detail = json!({ "reason": "the webhook is off" });
        super::refusal_audit::audit_anonymous_refusal(
            &state,
            ALERTMANAGER_ACTOR,
            "alert.receive",
            detail,
        )
        .await;
        return Err(ApiError::Disabled(
            "the alert webhook is off: start Warden with --alert-token (or WARDEN_ALERT_TOKEN)"
                .to_owned(),
        ));
    }
    if !bearer(&headers).is_some_and(|token| state.alerts.accepts(token)) {
        let detail = json!({ "reason": "missing or wrong webhook token" });
        super::refusal_audit::audit_anonymous_refusal(
            &state,
            ALERTMANAGER_ACTOR,
            "alert.receive",
            detail,
        )
        .await;
        return Err(ApiError::BadWebhookToken);
    }
    let address = state.network.client_address(&parts.extensions, &headers);
    let received = record_alerts(&state, &headers, address, body).await;
    let (outcome, detail) = match &received {
        Ok((receiver, incidents)) => (
            AuditOutcome::Success,
            json!({ "receiver": receiver, "incidents": incidents }),
        ),
        Err(err) => (AuditOutcome::Failure, json!({ "error": err.code() })),
    };
    audit(
        &state,
        ALERTMANAGER_ACTOR,
        "alert.receive",
        None,
        outcome,
        Some(detail),
    )
    .await;
    let (_, incidents) = received?;
    Ok(Json(json!({ "incidents": incidents })).into_response())
}

/// Parses the payload and records each alert; the receiver's name and `[{id, created}]`.
async fn record_alerts(
    state: &AppState,
    headers: &HeaderMap,
    address: Option<std::net::IpAddr>,
    body: Body,
) -> Result<(String, Vec<Value>), ApiError> {
    super::anonymous_bodies::refuse_announced_oversize(headers, MAX_ALERT_BODY_BYTES)?;
    let body = {
        let _slot = state
            .anonymous_bodies
            .slot(super::anonymous_bodies::Lane::Webhook, address)?;
        super::anonymous_bodies::read(body, MAX_ALERT_BODY_BYTES).await?
    };

    let payload: AlertmanagerPayload =
        serde_json::from_slice(&body).map_err(|e| ApiError::BadJson(e.to_string()))?;
    let updates = alert_updates(&payload)?;
    let store = state.store.clone();
    let incidents = blocking(move || {
        let now = now_secs();
        let mut incidents = Vec::with_capacity(updates.len());
        for update in &updates {
            let (incident, created) = store.upsert_alert(update, now)?;
            incidents.push(json!({ "id": incident.id, "created": created }));
        }
        Ok(incidents)
    })
    .await?;
    Ok((payload.receiver, incidents))
}

/// The payload's alerts as store updates; 400 for anything Warden cannot take.
fn alert_updates(payload: &AlertmanagerPayload) -> Result<Vec<AlertUpdate>, ApiError> {
    if payload.version != PAYLOAD_VERSION {
        return Err(ApiError::invalid(
            "version",
            format!(
                "unsupported Alertmanager payload version `{}` (expected \"{PAYLOAD_VERSION}\")",
                payload.version
            ),
        ));
    }
    if payload.alerts.len() > MAX_ALERTS_PER_CALL {
        return Err(ApiError::invalid(
            "alerts",
            format!("at most {MAX_ALERTS_PER_CALL} alerts per call"),
        ));
    }
    payload
        .alerts
        .iter()
        .enumerate()
        .map(|(index, alert)| {
            if alert.fingerprint.trim().is_empty() {
                return Err(ApiError::invalid(
                    "alerts",
                    format!("alert {index} has no fingerprint"),
                ));
            }
            Ok(AlertUpdate {
                fingerprint: alert.fingerprint.clone(),
                status: alert.status,
                labels: alert.labels.clone(),
                annotations: alert.annotations.clone(),
                starts_at: alert_time(alert.starts_at.as_deref(), index, "startsAt")?,
                ends_at: alert_time(alert.ends_at.as_deref(), index, "endsAt")?,
            })
        })
        .collect()
}

/// An alert's time in seconds since the epoch; `None` when absent, empty or before 1970
/// (Alertmanager writes Go's zero time, year 1, for "no end").
fn alert_time(text: Option<&str>, index: usize, field: &str) -> Result<Option<i64>, ApiError> {
    let Some(text) = text.filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    let seconds = parse_rfc3339(text).ok_or_else(|| {
        ApiError::invalid(
            "alerts",
            format!("alert {index}: `{field}` is not an RFC 3339 time"),
        )
    })?;
    Ok((seconds >= 0).then_some(seconds))
}

async fn list(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Response, ApiError> {
    caller.require(Capability::Chat)?;
    let status = match query.status.as_deref() {
        None | Some("") => None,
        Some(text) => Some(
            text.parse::<IncidentStatus>()
                .map_err(|e| ApiError::invalid("status", e.to_string()))?,
        ),
    };
    let limit = query.limit.unwrap_or(DEFAULT_INCIDENT_LIMIT);
    if limit == 0 || limit > MAX_INCIDENTS_PER_READ {
        return Err(ApiError::invalid(
            "limit",
            format!("limit must be 1 to {MAX_INCIDENTS_PER_READ}"),
        ));
    }
    let store = state.store.clone();
    let incidents = blocking(move || Ok(store.incidents(status, limit)?)).await?;
    Ok(Json(json!({ "incidents": incidents })).into_response())
}

async fn read(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    caller.require(Capability::Chat)?;
    let store = state.store.clone();
    let incident = blocking(move || Ok(store.incident(&id)?)).await?;
    Ok(Json(incident).into_response())
}

/// Appends an audit row with optional JSON detail; a failure to write is logged.
pub(super) async fn audit(
    state: &AppState,
    actor: &str,
    action: &'static str,
    target: Option<&str>,
    outcome: AuditOutcome,
    detail: Option<Value>,
) {
    let store = state.store.clone();
    let actor = actor.to_owned();
    let target = target.map(str::to_owned);
    let recorded = blocking(move || {
        let entry = AuditEntry {
            actor: &actor,
            action,
            target: target.as_deref(),
            outcome,
            detail: detail.as_ref(),
        };
        Ok(store.record(&entry, now_secs())?)
    })
    .await;
    if let Err(err) = recorded {
        tracing::error!("cannot write an audit row: {err:?}");
    }
}

/// The token of an `Authorization: Bearer …` header.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|token| !token.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_zero_time_means_no_time() {
        assert_eq!(
            alert_time(Some("0001-01-01T00:00:00Z"), 0, "endsAt").unwrap(),
            None
        );
        assert_eq!(alert_time(None, 0, "endsAt").unwrap(), None);
        assert_eq!(alert_time(Some(""), 0, "endsAt").unwrap(), None);
        assert_eq!(
            alert_time(Some("1970-01-01T00:01:00Z"), 0, "startsAt").unwrap(),
            Some(60)
        );
        assert!(alert_time(Some("soon"), 0, "startsAt").is_err());
    }

    #[test]
    fn the_webhook_token_is_kept_as_a_hash() {
        let webhook = AlertWebhook::with_token("s3cret-token-for-alerts");
        assert!(webhook.is_enabled());
        assert!(webhook.accepts("s3cret-token-for-alerts"));
        assert!(!webhook.accepts("s3cret-token-for-alert"));
        assert!(!format!("{webhook:?}").contains("s3cret"));
        assert!(!AlertWebhook::default().accepts(""));
        assert!(!AlertWebhook::default().is_enabled());
    }
}
