//! Router tests, with `oneshot`, of diagnostics and pending actions: owner-scoped
//! diagnostics, confirm/reject with idempotency keys, the parameters hash, roles and CSRF,
//! and the policy table deciding alike on every channel. Each test has its own database
//! (`route_fixture`).

use super::route_fixture::*;

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

/// The same table decides recovery on every channel, for every role: asking for one from
/// chat, confirming one's own request, and the approval queue (listing and approving).
#[tokio::test]
async fn the_policy_table_decides_recovery_on_every_channel() {
    use crate::agent::tools::{Catalog, Registry};
    use crate::policy::{allows, Capability, Channel};
    let f = fixture();
    let app = f.app(AlertWebhook::default());
    let users = [
        (Role::Viewer, &f.viewer),
        (Role::Operator, &f.operator),
        (Role::Admin, &f.admin),
    ];
    let status_for = |allowed: bool| {
        if allowed {
            StatusCode::OK
        } else {
            StatusCode::FORBIDDEN
        }
    };
    for (index, (role, (owner, token))) in users.iter().enumerate() {
        let auth = bearer(token);
        let catalog = Catalog::compile(
            &Registry::default(),
            &["request_recovery_approval"],
            &[],
            *role,
        )
        .expect("catalogue");
        assert_eq!(
            catalog.get("request_recovery_approval").is_some(),
            allows(*role, Capability::RequestRecovery, Channel::ChatTool),
            "{role:?} asking in chat"
        );
        // Confirming one's own request (it then waits for a second person).
        let task = format!("diagnostic_matrix{index}");
        f.store
            .add_diagnostic_task(
                &NewDiagnosticTask {
                    id: Some(task.clone()),
                    incident_id: INCIDENT.into(),
                    owner_id: *owner,
                    status: DiagnosticStatus::Completed,
                    report: Some(crate::diagnostics::report::proposing(
                        &task,
                        INCIDENT,
                        "restart the pooler",
                    )),
                },
                1,
            )
            .expect("task");
        let action = f.propose(
            *owner,
            PendingActionKind::RecoveryRequest,
            json!({ "diagnostic_task_id": task }),
        );
        let (status, body, _) = send(
            &app,
            Method::POST,
            &format!("/api/actions/{}/confirm", action.id),
            &[("authorization", auth.as_str()), ("idempotency-key", "m1")],
            Some(json!({"parameters_hash": action.parameters_hash})),
        )
        .await;
        let may_confirm = allows(*role, Capability::ApproveRecovery, Channel::Confirm);
        assert_eq!(
            status,
            status_for(may_confirm),
            "{role:?} confirming: {body}"
        );
        // The approval queue.
        let (status, body, _) = send(
            &app,
            Method::GET,
            "/api/approvals",
            &[("authorization", auth.as_str())],
            None,
        )
        .await;
        let may_approve = allows(*role, Capability::ApproveRecovery, Channel::Http);
        assert_eq!(status, status_for(may_approve), "{role:?} listing: {body}");
    }
    // Each approver approves the other's request; the viewer approves nothing.
    let waiting = |owner: i64| {
        f.store
            .recoveries_awaiting_approval(100)
            .expect("queue")
            .into_iter()
            .find(|w| w.action.owner_id == owner)
            .expect("a request awaiting approval")
            .action
    };
    let (operator_request, admin_request) = (waiting(f.operator.0), waiting(f.admin.0));
    for (role, token, request) in [
        (Role::Viewer, &f.viewer.1, &operator_request),
        (Role::Admin, &f.admin.1, &operator_request),
        (Role::Operator, &f.operator.1, &admin_request),
    ] {
        let (status, body, _) = send(
            &app,
            Method::POST,
            &format!("/api/approvals/{}/approve", request.id),
            &[("authorization", bearer(token).as_str())],
            Some(json!({"parameters_hash": request.parameters_hash})),
        )
        .await;
        let allowed = allows(role, Capability::ApproveRecovery, Channel::Http);
        assert_eq!(status, status_for(allowed), "{role:?} approving: {body}");
    }
    assert_eq!(f.count("recovery_approvals"), 2);
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
            &body["report"]["taskId"]
        ),
        (&json!(INCIDENT), &json!("completed"), &json!(TASK))
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

    // An operator's own recovery request is only submitted by its confirmation; another
    // approver approves it from the queue, and nothing runs.
    let operator_task = NewDiagnosticTask {
        id: Some("diagnostic_oper".into()),
        incident_id: INCIDENT.into(),
        owner_id: f.operator.0,
        status: DiagnosticStatus::Completed,
        report: Some(crate::diagnostics::report::proposing(
            "diagnostic_oper",
            INCIDENT,
            "restart the pooler",
        )),
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
        Some(body.clone()),
    )
    .await;
    assert_eq!(
        (status, &confirmed["action"]["status"]),
        (StatusCode::OK, &json!("awaiting_approval"))
    );
    assert_eq!(f.count("recovery_approvals"), 0);
    // Viewers have no approval queue; the operator sees their own request, marked so.
    let (status, _, _) = send(
        &app,
        Method::GET,
        "/api/approvals",
        &[("authorization", viewer.as_str())],
        None,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, queue, _) = send(
        &app,
        Method::GET,
        "/api/approvals",
        &[("authorization", operator.as_str())],
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (
            &queue["approvals"][0]["id"],
            &queue["approvals"][0]["own"],
            &queue["approvals"][0]["proposal"]["action"]
        ),
        (
            &json!(action.id),
            &json!(true),
            &json!("restart the pooler")
        )
    );
    let approve = format!("/api/approvals/{}/approve", action.id);
    let (status, err, _) = send(
        &app,
        Method::POST,
        &approve,
        &[("authorization", operator.as_str())],
        Some(body.clone()),
    )
    .await;
    assert_eq!(
        (status, &err["error"]["code"]),
        (StatusCode::FORBIDDEN, &json!("forbidden"))
    );
    assert_eq!(f.audit_outcomes("recovery.approve"), [AuditOutcome::Denied]);
    let admin = bearer(&f.admin.1);
    let (status, approved, _) = send(
        &app,
        Method::POST,
        &approve,
        &[("authorization", admin.as_str())],
        Some(body),
    )
    .await;
    assert_eq!(
        (status, &approved["action"]["status"]),
        (StatusCode::OK, &json!("confirmed"))
    );
    assert!(approved["action"]["result"]["approval_id"].is_string());
    assert_eq!(f.count("recovery_approvals"), 1);
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
