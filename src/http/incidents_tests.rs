//! Router tests, with `oneshot`, of the incident routes: the Alertmanager webhook (its
//! token, body limits, payload checks, deduplication, aggregated audit rows) and incidents
//! for every role. Each test has its own database (`route_fixture`).

use super::route_fixture::*;
use crate::config::AlertFlags;

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
