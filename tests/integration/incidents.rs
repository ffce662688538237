//! Incidents end to end on the real server: the Alertmanager webhook creates an incident,
//! deduplicates a repeated alert and resolves it; a missing or wrong webhook token is
//! refused; a viewer reads incidents; `warden incident add` (run beside the server) opens
//! one that the API then serves, and `warden incident list --json` lists them.

use std::time::Duration;

use serde_json::{json, Value};

use crate::util::{add_user, create_token, into_status_and_json, run, stderr, stdout, Server};

const ALERT_TOKEN: &str = "integration-alert-token-42";

fn post_alerts(server: &Server, authorization: Option<&str>, body: &Value) -> (u16, Value) {
    let mut request = ureq::post(&server.url("/api/alerts")).timeout(Duration::from_secs(30));
    if let Some(value) = authorization {
        request = request.set("Authorization", value);
    }
    into_status_and_json(request.send_json(body.clone()))
}

fn get_as(server: &Server, token: &str, path: &str) -> (u16, Value) {
    let request = ureq::get(&server.url(path))
        .timeout(Duration::from_secs(30))
        .set("Authorization", &format!("Bearer {token}"));
    into_status_and_json(request.call())
}

/// An Alertmanager (version 4) notification carrying one alert.
fn notification(status: &str, ends_at: &str) -> Value {
    json!({
        "version": "4",
        "groupKey": "{}:{alertname=\"NginxDown\"}",
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "warden",
        "groupLabels": {"alertname": "NginxDown"},
        "commonLabels": {"alertname": "NginxDown", "service": "nginx", "severity": "critical"},
        "commonAnnotations": {"summary": "Nginx is down on web1"},
        "externalURL": "http://alertmanager.local:9093",
        "alerts": [{
            "status": status,
            "labels": {"alertname": "NginxDown", "service": "nginx", "severity": "critical",
                       "instance": "web1:80"},
            "annotations": {"summary": "Nginx is down on web1"},
            "startsAt": "2025-01-02T03:04:05.678Z",
            "endsAt": ends_at,
            "generatorURL": "http://prometheus.local/graph",
            "fingerprint": "c0ffee0123456789",
        }],
    })
}

#[test]
fn alerts_become_incidents_that_every_user_can_read() {
    let server = Server::start(&["--alert-token", ALERT_TOKEN]);
    let firing = notification("firing", "0001-01-01T00:00:00Z");
    let good = format!("Bearer {ALERT_TOKEN}");

    for wrong in [
        None,
        Some("Bearer not-the-token-at-all"),
        Some(good.trim_start_matches("Bearer ")),
    ] {
        let (status, body) = post_alerts(&server, wrong, &firing);
        assert_eq!(status, 401, "{wrong:?}: {body}");
    }
    // A user's API token is not the webhook's.
    let admin = format!("Bearer {}", server.token);
    assert_eq!(post_alerts(&server, Some(&admin), &firing).0, 401);

    let (status, body) = post_alerts(&server, Some(&good), &firing);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["incidents"][0]["created"], true);
    let id = body["incidents"][0]["id"]
        .as_str()
        .expect("incident id")
        .to_owned();
    assert!(id.starts_with("incident_"), "{id}");

    let (status, body) = post_alerts(&server, Some(&good), &firing);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["incidents"], json!([{"id": id, "created": false}]));

    add_user(server.data(), "vera", "viewer", "viewer-password-1");
    let viewer = create_token(server.data(), "vera");
    let (status, incident) = get_as(&server, &viewer, &format!("/api/incidents/{id}"));
    assert_eq!(status, 200, "{incident}");
    assert_eq!(
        (
            &incident["status"],
            &incident["title"],
            &incident["service"],
            &incident["severity"]
        ),
        (
            &json!("firing"),
            &json!("Nginx is down on web1"),
            &json!("nginx"),
            &json!("critical")
        )
    );
    assert_eq!(incident["starts_at"], 1_735_787_045);
    assert_eq!(incident["ends_at"], Value::Null);

    let (status, body) = post_alerts(
        &server,
        Some(&good),
        &notification("resolved", "2025-01-02T04:00:00Z"),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["incidents"][0]["created"], false);
    let (_, incident) = get_as(&server, &viewer, &format!("/api/incidents/{id}"));
    assert_eq!(
        (&incident["status"], &incident["ends_at"]),
        (&json!("resolved"), &json!(1_735_790_400))
    );
    let (status, list) = get_as(&server, &viewer, "/api/incidents?status=resolved");
    assert_eq!(status, 200);
    assert_eq!(list["incidents"].as_array().map(Vec::len), Some(1));

    let (status, body) = post_alerts(
        &server,
        Some(&good),
        &json!({"version": "4", "alerts": "none"}),
    );
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("invalid_json"))
    );
    let (status, _) = get_as(&server, &viewer, "/api/incidents/incident_missing");
    assert_eq!(status, 404);

    // Webhook calls are audited, refused ones included: the refusals (all for a missing or
    // wrong token) as one row a minute, so a flood cannot fill the audit log.
    let (status, audit) = get_as(&server, &server.token, "/api/audit?limit=100");
    assert_eq!(status, 200, "{audit}");
    let outcomes: Vec<&str> = audit["entries"]
        .as_array()
        .expect("audit entries")
        .iter()
        .filter(|row| row["action"] == "alert.receive")
        .filter_map(|row| row["outcome"].as_str())
        .collect();
    assert_eq!(
        outcomes.iter().filter(|o| **o == "denied").count(),
        1,
        "{outcomes:?}"
    );
    assert_eq!(
        outcomes.iter().filter(|o| **o == "success").count(),
        3,
        "{outcomes:?}"
    );
    assert_eq!(
        outcomes.iter().filter(|o| **o == "failure").count(),
        1,
        "{outcomes:?}"
    );
}

#[test]
fn incidents_added_from_the_command_line_are_served() {
    let server = Server::start(&[]);
    let data = server.data().to_str().expect("UTF-8 temp path").to_owned();
    let added = run(&[
        "incident",
        "add",
        "--title",
        "Disk full on db1",
        "--service",
        "postgres",
        "--severity",
        "high",
        "--id",
        "incident_db1-disk",
        "--status",
        "firing",
        "--data",
        &data,
    ]);
    assert!(added.status.success(), "{}", stderr(&added));
    assert_eq!(stdout(&added).trim(), "incident_db1-disk");

    let (status, incident) = get_as(&server, &server.token, "/api/incidents/incident_db1-disk");
    assert_eq!(status, 200, "{incident}");
    assert_eq!(
        (
            &incident["title"],
            &incident["service"],
            &incident["severity"],
            &incident["status"]
        ),
        (
            &json!("Disk full on db1"),
            &json!("postgres"),
            &json!("high"),
            &json!("firing")
        )
    );

    let generated = run(&[
        "incident",
        "add",
        "--title",
        "Slow queries",
        "--service",
        "postgres",
        "--severity",
        "low",
        "--data",
        &data,
    ]);
    assert!(generated.status.success(), "{}", stderr(&generated));
    let generated_id = stdout(&generated).trim().to_owned();
    assert!(generated_id.starts_with("incident_"), "{generated_id}");

    let duplicate = run(&[
        "incident",
        "add",
        "--title",
        "again",
        "--service",
        "x",
        "--severity",
        "low",
        "--id",
        "incident_db1-disk",
        "--data",
        &data,
    ]);
    assert!(!duplicate.status.success());
    assert!(
        stderr(&duplicate).contains("already exists"),
        "{}",
        stderr(&duplicate)
    );
    let bad_id = run(&[
        "incident",
        "add",
        "--title",
        "t",
        "--service",
        "x",
        "--severity",
        "low",
        "--id",
        "incident_bad_id",
        "--data",
        &data,
    ]);
    assert!(!bad_id.status.success());

    let listed = run(&["incident", "list", "--json", "--data", &data]);
    assert!(listed.status.success(), "{}", stderr(&listed));
    let list: Value = serde_json::from_str(&stdout(&listed)).expect("JSON list");
    let ids: Vec<&str> = list
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|incident| incident["id"].as_str())
        .collect();
    assert_eq!(ids, [generated_id.as_str(), "incident_db1-disk"]);
    let text = run(&["incident", "list", "--status", "firing", "--data", &data]);
    assert!(stdout(&text).contains("incident_db1-disk") && !stdout(&text).contains(&generated_id));

    // Without --alert-token the webhook is off, and says how to turn it on.
    let (status, body) = post_alerts(
        &server,
        Some("Bearer anything-at-all-here"),
        &notification("firing", ""),
    );
    assert_eq!((status, &body["error"]["code"]), (404, &json!("disabled")));
}
