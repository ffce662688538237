//! Tests of pending actions: creation checks, owner scoping, the parameters hash, and every
//! rule of `decide_action` (permission, idempotent replay, in-flight and reused keys, hash
//! binding, expiry, one decision per action, what each confirmation creates).

use serde_json::json;

use super::*;
use crate::store::{
    Accounts, ApprovalDecision, Conversations, DiagnosticTasks, IncidentStatus, Incidents,
    NewDiagnosticTask, NewIncident, RecoveryApprovals, Role, RunKind, RunStatus, Runs,
};

const INCIDENT: &str = "incident_db-down";
const TASK: &str = "diagnostic_db-1";
const EXPIRES: i64 = 1_000;

struct Fixture {
    _dir: tempfile::TempDir,
    store: Store,
    ann: i64,
    bob: i64,
    /// A run of ann's, which proposes the actions.
    run: String,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("w.db")).unwrap();
    let ann = store
        .create_user("ann", Role::Viewer, "password1", 0)
        .unwrap()
        .id;
    let bob = store
        .create_user("bob", Role::Operator, "password1", 0)
        .unwrap()
        .id;
    let incident = NewIncident {
        id: Some(INCIDENT.into()),
        title: "db down".into(),
        service: "db".into(),
        severity: "critical".into(),
        status: IncidentStatus::Firing,
    };
    store.add_incident(&incident, 0).unwrap();
    let task = NewDiagnosticTask {
        id: Some(TASK.into()),
        incident_id: INCIDENT.into(),
        owner_id: ann,
        status: DiagnosticStatus::Completed,
        report: Some(crate::diagnostics::report::proposing(
            TASK,
            INCIDENT,
            "free space on /var",
        )),
    };
    store.add_diagnostic_task(&task, 0).unwrap();
    let conversation = store.create_conversation(ann, "c", 0).unwrap();
    let run = store
        .add_user_message_with_run(ann, &conversation.id, "investigate", 0)
        .unwrap()
        .run_id;
    Fixture {
        _dir: dir,
        store,
        ann,
        bob,
        run,
    }
}

impl Fixture {
    fn propose(&self, kind: PendingActionKind, parameters: &Value) -> PendingAction {
        let new = NewPendingAction {
            kind,
            target: "db",
            reason: "the database is down",
            parameters,
            run_id: &self.run,
            owner_id: self.ann,
            expires_at: EXPIRES,
        };
        self.store.create_pending_action(&new, 10).unwrap()
    }

    fn diagnostic_start(&self) -> PendingAction {
        self.propose(
            PendingActionKind::DiagnosticStart,
            &json!({ "incident_id": INCIDENT }),
        )
    }

    fn recovery_request(&self) -> PendingAction {
        self.propose(
            PendingActionKind::RecoveryRequest,
            &json!({ "diagnostic_task_id": TASK, "step": "restart" }),
        )
    }

    fn count(&self, table: &str) -> i64 {
        self.store
            .read(|c| Ok(c.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))?))
            .unwrap()
    }
}

/// ann's confirmation of `action` with `key`, allowed to approve recoveries.
fn confirm<'a>(f: &Fixture, action: &'a PendingAction, key: &'a str) -> ActionDecision<'a> {
    ActionDecision {
        owner_id: f.ann,
        actor_can_recover: true,
        actor_can_start_diagnostic: true,
        action_id: &action.id,
        decision: Decision::Confirm,
        idempotency_key: key,
        parameters_hash: &action.parameters_hash,
    }
}

#[test]
fn the_parameters_hash_is_sha256_of_canonical_json() {
    let parameters = json!({"b": {"d": "\"q", "c": 1}, "a": [true, null, "xé", 1.5]});
    // {"a":[true,null,"xé",1.5],"b":{"c":1,"d":"\"q"}}
    assert_eq!(
        parameters_hash(&parameters),
        "aa2677f624c115f25950c87d956e676e3fb2fa0a13f8a09add385d9d877dbd8f"
    );
    let reordered: Value =
        serde_json::from_str(r#"{ "a" : [true,null,"xé",1.5], "b":{"c":1,"d":"\"q"}}"#).unwrap();
    assert_eq!(parameters_hash(&reordered), parameters_hash(&parameters));
    assert_ne!(
        parameters_hash(&json!({"a": 1})),
        parameters_hash(&json!({"a": "1"}))
    );
}

#[test]
fn actions_are_created_pending_and_read_by_their_owner_only() {
    let f = fixture();
    let action = f.diagnostic_start();
    assert!(action.id.starts_with("act_"), "{}", action.id);
    assert_eq!(
        (
            action.status,
            action.kind,
            action.decided_at,
            action.result.clone()
        ),
        (
            PendingActionStatus::Pending,
            PendingActionKind::DiagnosticStart,
            None,
            None
        )
    );
    assert_eq!(action.parameters_hash, parameters_hash(&action.parameters));
    assert_eq!(f.store.pending_action(f.ann, &action.id).unwrap(), action);
    let foreign = f.store.pending_action(f.bob, &action.id).unwrap_err();
    let missing = f.store.pending_action(f.ann, "act_missing").unwrap_err();
    assert!(matches!(foreign, StoreError::NotFound(_)));
    assert!(matches!(missing, StoreError::NotFound(_)));

    let second = f.recovery_request();
    let of_run = f.store.pending_actions_of_run(f.ann, &f.run).unwrap();
    assert_eq!(of_run, [action, second]);
    assert!(f
        .store
        .pending_actions_of_run(f.bob, &f.run)
        .unwrap()
        .is_empty());
}

/// A proposal to vary field by field in `creation_checks_run_owner_parameters_and_expiry`.
struct Proposal<'a> {
    kind: PendingActionKind,
    target: &'a str,
    parameters: Value,
    run_id: &'a str,
    owner_id: i64,
    expires_at: i64,
}

impl Fixture {
    fn proposal(&self) -> Proposal<'_> {
        Proposal {
            kind: PendingActionKind::DiagnosticStart,
            target: "db",
            parameters: json!({ "incident_id": INCIDENT }),
            run_id: &self.run,
            owner_id: self.ann,
            expires_at: EXPIRES,
        }
    }

    fn try_propose(&self, proposal: Proposal<'_>) -> Result<PendingAction> {
        let new = NewPendingAction {
            kind: proposal.kind,
            target: proposal.target,
            reason: "r",
            parameters: &proposal.parameters,
            run_id: proposal.run_id,
            owner_id: proposal.owner_id,
            expires_at: proposal.expires_at,
        };
        self.store.create_pending_action(&new, 10)
    }
}

#[test]
fn creation_checks_run_owner_parameters_and_expiry() {
    let f = fixture();
    assert!(f.try_propose(f.proposal()).is_ok());
    // Another user's run is not found, like a missing one.
    let bobs = Proposal {
        owner_id: f.bob,
        ..f.proposal()
    };
    assert!(matches!(f.try_propose(bobs), Err(StoreError::NotFound(_))));
    let no_run = Proposal {
        run_id: "run_missing",
        ..f.proposal()
    };
    assert!(matches!(
        f.try_propose(no_run),
        Err(StoreError::NotFound(_))
    ));
    for parameters in [
        json!([INCIDENT]),
        json!({}),
        json!({ "incident_id": "incident_missing" }),
        json!({ "incident_id": "incident_a_b" }),
        json!({ "incident_id": 7 }),
    ] {
        let text = parameters.to_string();
        let bad = Proposal {
            parameters,
            ..f.proposal()
        };
        assert!(
            matches!(f.try_propose(bad), Err(StoreError::Invalid(_))),
            "{text}"
        );
    }
    let recovery = |task: &str| Proposal {
        kind: PendingActionKind::RecoveryRequest,
        parameters: json!({ "diagnostic_task_id": task }),
        ..f.proposal()
    };
    assert!(f.try_propose(recovery(TASK)).is_ok());
    assert!(matches!(
        f.try_propose(recovery("diagnostic_other")),
        Err(StoreError::Invalid(_))
    ));
    // A diagnostic task of another user's is not named as existing.
    let bobs_task = NewDiagnosticTask {
        id: Some("diagnostic_bobs".into()),
        incident_id: INCIDENT.into(),
        owner_id: f.bob,
        status: DiagnosticStatus::Completed,
        report: None,
    };
    f.store.add_diagnostic_task(&bobs_task, 1).unwrap();
    assert!(matches!(
        f.try_propose(recovery("diagnostic_bobs")),
        Err(StoreError::Invalid(_))
    ));
    let expired = Proposal {
        expires_at: 10,
        ..f.proposal()
    };
    assert!(matches!(
        f.try_propose(expired),
        Err(StoreError::Invalid(_))
    ));
    let untargeted = Proposal {
        target: " ",
        ..f.proposal()
    };
    assert!(matches!(
        f.try_propose(untargeted),
        Err(StoreError::Invalid(_))
    ));
}

#[test]
fn confirming_a_diagnostic_start_creates_a_task_with_a_queued_diagnostic_run() {
    let f = fixture();
    let action = f.diagnostic_start();
    let decided = f
        .store
        .decide_action(&confirm(&f, &action, "k1"), 20)
        .unwrap();
    assert!(!decided.replayed);
    assert_eq!(decided.action.status, PendingActionStatus::Executed);
    assert_eq!(decided.action.decided_at, Some(20));
    let result = decided.action.result.clone().unwrap();
    assert_eq!(result["status"], "queued");
    let task_id = result["diagnostic_task_id"].as_str().unwrap();
    let run_id = result["run_id"].as_str().unwrap();
    assert!(is_diagnostic_task_id(task_id), "{task_id}");

    let task = f.store.diagnostic_task(f.ann, task_id).unwrap();
    assert_eq!(
        (
            task.incident_id.as_str(),
            task.status,
            task.run_id.as_deref()
        ),
        (INCIDENT, DiagnosticStatus::Queued, Some(run_id))
    );
    let run = f.store.run(f.ann, run_id).unwrap();
    assert_eq!(
        (run.kind, run.status, run.conversation_id),
        (RunKind::Diagnostic, RunStatus::Queued, None)
    );
    assert_eq!(
        decided.response,
        json!({
            "action": {
                "id": action.id,
                "kind": "diagnostic_start",
                "target": "db",
                "status": "executed",
                "result": result,
                "decided_at": 20,
            }
        })
    );
}

#[test]
fn confirming_a_recovery_request_records_an_approval_and_executes_nothing() {
    let f = fixture();
    // Self-approval allowed (`--allow-self-approval`): the requester's confirmation is the
    // approval.
    f.store.set_second_approver_required(false);
    let action = f.recovery_request();
    let runs_before = f.count("runs");
    let decided = f
        .store
        .decide_action(&confirm(&f, &action, "k1"), 20)
        .unwrap();
    assert_eq!(decided.action.status, PendingActionStatus::Confirmed);
    let approval_id = decided.action.result.as_ref().unwrap()["approval_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (task, approver, hash): (String, i64, String) = f
        .store
        .read(|c| {
            Ok(c.query_row(
                "SELECT diagnostic_task_id, approved_by, parameters_hash FROM recovery_approvals
                 WHERE id = ?1 AND action_id = ?2",
                params![approval_id, action.id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )?)
        })
        .unwrap();
    assert_eq!(
        (task.as_str(), approver, hash),
        (TASK, f.ann, action.parameters_hash.clone())
    );
    assert_eq!(f.count("runs"), runs_before);
    assert_eq!(f.count("diagnostic_tasks"), 1);
}

#[test]
fn a_recovery_is_approved_only_for_a_report_that_proposes_one() {
    let f = fixture();
    let manual = NewDiagnosticTask {
        id: Some("diagnostic_manual".into()),
        incident_id: INCIDENT.into(),
        owner_id: f.ann,
        status: DiagnosticStatus::Completed,
        report: Some(crate::diagnostics::report::example(
            "diagnostic_manual",
            INCIDENT,
        )),
    };
    f.store.add_diagnostic_task(&manual, 1).unwrap();
    let action = f.propose(
        PendingActionKind::RecoveryRequest,
        &json!({ "diagnostic_task_id": "diagnostic_manual" }),
    );
    let decided = f
        .store
        .decide_action(&confirm(&f, &action, "k1"), 20)
        .unwrap();
    assert_eq!(decided.action.status, PendingActionStatus::Failed);
    let error = decided.action.result.as_ref().unwrap()["error"].to_string();
    assert!(error.contains("no report proposing a recovery"), "{error}");
    assert_eq!(f.count("recovery_approvals"), 0);
}

#[test]
fn confirming_a_recovery_needs_the_role_but_rejecting_does_not() {
    let f = fixture();
    let action = f.recovery_request();
    let denied = ActionDecision {
        actor_can_recover: false,
        actor_can_start_diagnostic: true,
        ..confirm(&f, &action, "k1")
    };
    assert!(matches!(
        f.store.decide_action(&denied, 20),
        Err(StoreError::Forbidden(_))
    ));
    let still = f.store.pending_action(f.ann, &action.id).unwrap();
    assert_eq!(still.status, PendingActionStatus::Pending);
    assert_eq!(f.count("action_requests"), 0);
    // The refused key was not spent: it works for the rejection.
    let reject = ActionDecision {
        decision: Decision::Reject,
        ..denied
    };
    let decided = f.store.decide_action(&reject, 21).unwrap();
    assert_eq!(
        (decided.action.status, decided.action.result),
        (PendingActionStatus::Rejected, None)
    );
    assert_eq!(f.count("recovery_approvals"), 0);
}

#[test]
fn a_diagnostic_start_needs_no_recovery_role() {
    let f = fixture();
    let action = f.diagnostic_start();
    let decision = ActionDecision {
        actor_can_recover: false,
        actor_can_start_diagnostic: true,
        ..confirm(&f, &action, "k1")
    };
    let decided = f.store.decide_action(&decision, 20).unwrap();
    assert_eq!(decided.action.status, PendingActionStatus::Executed);
}

#[test]
fn a_repeated_key_replays_the_stored_response_and_decides_nothing_again() {
    let f = fixture();
    let action = f.diagnostic_start();
    let first = f
        .store
        .decide_action(&confirm(&f, &action, "k1"), 20)
        .unwrap();
    let again = f
        .store
        .decide_action(&confirm(&f, &action, "k1"), 99)
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.response, first.response);
    assert_eq!(again.action, first.action);
    assert_eq!(f.count("diagnostic_tasks"), 2);
    assert_eq!(f.count("runs WHERE kind = 'diagnostic'"), 1);
    // Still replayed after the action's expiry: the answer was decided in time.
    let late = f
        .store
        .decide_action(&confirm(&f, &action, "k1"), EXPIRES + 5)
        .unwrap();
    assert_eq!(late.response, first.response);
}

#[test]
fn a_key_reused_for_another_request_is_a_mismatch() {
    let f = fixture();
    let action = f.diagnostic_start();
    let other = f.diagnostic_start();
    f.store
        .decide_action(&confirm(&f, &action, "k1"), 20)
        .unwrap();
    let other_action = confirm(&f, &other, "k1");
    let other_decision = ActionDecision {
        decision: Decision::Reject,
        ..confirm(&f, &action, "k1")
    };
    let other_hash = ActionDecision {
        parameters_hash: "0000",
        ..confirm(&f, &action, "k1")
    };
    for reused in [other_action, other_decision, other_hash] {
        let err = f.store.decide_action(&reused, 21).unwrap_err();
        assert!(matches!(err, StoreError::Mismatch(_)), "{reused:?}: {err}");
    }
    assert_eq!(
        f.store.pending_action(f.ann, &other.id).unwrap().status,
        PendingActionStatus::Pending
    );
    // Keys are per user: bob's "k1" is his own.
    let bobs = ActionDecision {
        owner_id: f.bob,
        ..confirm(&f, &other, "k1")
    };
    assert!(matches!(
        f.store.decide_action(&bobs, 21),
        Err(StoreError::NotFound(_))
    ));
}

#[test]
fn a_key_still_in_flight_is_a_conflict() {
    let f = fixture();
    let action = f.diagnostic_start();
    f.store
        .write(|t| {
            t.execute(
                "INSERT INTO action_requests (owner_id, idempotency_key, action_id, decision,
                     parameters_hash, state, created_at)
                 VALUES (?1, 'k1', ?2, 'confirm', ?3, 'in_flight', 15)",
                params![f.ann, action.id, action.parameters_hash],
            )?;
            Ok(())
        })
        .unwrap();
    let err = f
        .store
        .decide_action(&confirm(&f, &action, "k1"), 20)
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Conflict(ref m) if m.contains("in progress")),
        "{err}"
    );
    assert_eq!(
        f.store.pending_action(f.ann, &action.id).unwrap().status,
        PendingActionStatus::Pending
    );
}

#[test]
fn the_parameters_hash_must_be_the_actions() {
    let f = fixture();
    let action = f.diagnostic_start();
    let wrong = parameters_hash(&json!({ "incident_id": "incident_other" }));
    for decision in [Decision::Confirm, Decision::Reject] {
        let request = ActionDecision {
            decision,
            parameters_hash: &wrong,
            ..confirm(&f, &action, "k1")
        };
        assert!(matches!(
            f.store.decide_action(&request, 20),
            Err(StoreError::Mismatch(_))
        ));
    }
    assert_eq!(f.count("action_requests"), 0);
    assert_eq!(f.count("diagnostic_tasks"), 1);
}

#[test]
fn an_expired_action_becomes_expired_and_refuses_decisions() {
    let f = fixture();
    let action = f.diagnostic_start();
    let err = f
        .store
        .decide_action(&confirm(&f, &action, "k1"), EXPIRES)
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Conflict(ref m) if m.contains("expired")),
        "{err}"
    );
    let stored = f.store.pending_action(f.ann, &action.id).unwrap();
    assert_eq!(
        (stored.status, stored.decided_at),
        (PendingActionStatus::Expired, None)
    );
    let reject = ActionDecision {
        decision: Decision::Reject,
        ..confirm(&f, &action, "k2")
    };
    assert!(matches!(
        f.store.decide_action(&reject, EXPIRES + 1),
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(f.count("diagnostic_tasks"), 1);
    assert_eq!(f.count("action_requests"), 0);
}

#[test]
fn a_decided_action_refuses_another_decision() {
    let f = fixture();
    let action = f.diagnostic_start();
    let reject = ActionDecision {
        decision: Decision::Reject,
        ..confirm(&f, &action, "k1")
    };
    let rejected = f.store.decide_action(&reject, 20).unwrap();
    assert_eq!(rejected.response["action"]["status"], "rejected");
    for (key, decision) in [("k2", Decision::Confirm), ("k3", Decision::Reject)] {
        let again = ActionDecision {
            decision,
            ..confirm(&f, &action, key)
        };
        let err = f.store.decide_action(&again, 21).unwrap_err();
        assert!(
            matches!(err, StoreError::Conflict(ref m) if m.contains("rejected")),
            "{err}"
        );
    }
    assert_eq!(f.count("diagnostic_tasks"), 1);
}

#[test]
fn only_the_owner_decides_and_keys_must_be_sane() {
    let f = fixture();
    let action = f.diagnostic_start();
    let bobs = ActionDecision {
        owner_id: f.bob,
        ..confirm(&f, &action, "k1")
    };
    assert!(matches!(
        f.store.decide_action(&bobs, 20),
        Err(StoreError::NotFound(_))
    ));
    let long = "k".repeat(MAX_IDEMPOTENCY_KEY_CHARS + 1);
    for key in ["", "has space", "tab\t", long.as_str()] {
        assert!(
            matches!(
                f.store.decide_action(&confirm(&f, &action, key), 20),
                Err(StoreError::Invalid(_))
            ),
            "{key:?}"
        );
    }
    let longest = "k".repeat(MAX_IDEMPOTENCY_KEY_CHARS);
    assert!(f
        .store
        .decide_action(&confirm(&f, &action, &longest), 20)
        .is_ok());
}

#[test]
fn a_confirmation_whose_target_vanished_fails_the_action() {
    let f = fixture();
    let action = f.diagnostic_start();
    f.store
        .write(|t| {
            t.execute("DELETE FROM diagnostic_tasks", [])?;
            t.execute("DELETE FROM incidents", [])?;
            Ok(())
        })
        .unwrap();
    let decided = f
        .store
        .decide_action(&confirm(&f, &action, "k1"), 20)
        .unwrap();
    assert_eq!(decided.action.status, PendingActionStatus::Failed);
    assert!(decided.action.result.unwrap()["error"]
        .as_str()
        .unwrap()
        .contains(INCIDENT));
    assert_eq!(f.count("runs WHERE kind = 'diagnostic'"), 0);
}

/// bob's decision on ann's recovery request in the approval queue.
fn approval<'a>(
    f: &Fixture,
    action: &'a PendingAction,
    decision: Decision,
) -> ApprovalDecision<'a> {
    ApprovalDecision {
        approver_id: f.bob,
        approver_can_approve: true,
        action_id: &action.id,
        decision,
        parameters_hash: &action.parameters_hash,
    }
}

#[test]
fn a_requesters_confirmation_only_submits_a_recovery_and_another_person_approves_it() {
    let f = fixture();
    let action = f.recovery_request();
    // Not submitted yet: not in the queue, and not decidable from it.
    assert!(f.store.recoveries_awaiting_approval(10).unwrap().is_empty());
    assert!(matches!(
        f.store
            .decide_recovery_approval(&approval(&f, &action, Decision::Confirm), 15),
        Err(StoreError::NotFound(_))
    ));
    let submitted = f
        .store
        .decide_action(&confirm(&f, &action, "k1"), 20)
        .unwrap();
    assert_eq!(
        submitted.action.status,
        PendingActionStatus::AwaitingApproval
    );
    assert_eq!(f.count("recovery_approvals"), 0);
    let waiting = f.store.recoveries_awaiting_approval(10).unwrap();
    assert_eq!(waiting.len(), 1);
    assert_eq!(
        (
            waiting[0].requester.as_str(),
            waiting[0].incident_id.as_str(),
            waiting[0].proposal.as_ref().map(|p| p.action.as_str())
        ),
        ("ann", INCIDENT, Some("free space on /var"))
    );
    // The requester cannot approve it, even with an approver's role.
    let own = ApprovalDecision {
        approver_id: f.ann,
        ..approval(&f, &action, Decision::Confirm)
    };
    assert!(matches!(
        f.store.decide_recovery_approval(&own, 21),
        Err(StoreError::Forbidden(_))
    ));
    // An approver must repeat the parameters they were shown.
    let stale = ApprovalDecision {
        parameters_hash: "0000",
        ..approval(&f, &action, Decision::Confirm)
    };
    assert!(matches!(
        f.store.decide_recovery_approval(&stale, 21),
        Err(StoreError::Mismatch(_))
    ));
    let approved = f
        .store
        .decide_recovery_approval(&approval(&f, &action, Decision::Confirm), 22)
        .unwrap();
    assert_eq!(approved.status, PendingActionStatus::Confirmed);
    let approver: i64 = f
        .store
        .read(|c| {
            Ok(c.query_row(
                "SELECT approved_by FROM recovery_approvals WHERE action_id = ?1",
                [&action.id],
                |r| r.get(0),
            )?)
        })
        .unwrap();
    assert_eq!(approver, f.bob);
    assert!(matches!(
        f.store
            .decide_recovery_approval(&approval(&f, &action, Decision::Reject), 23),
        Err(StoreError::Conflict(_))
    ));
    assert!(f.store.recoveries_awaiting_approval(10).unwrap().is_empty());
    assert_eq!(f.count("runs"), 1);
}

#[test]
fn an_approver_needs_the_role_a_rejection_records_nothing_and_expiry_holds() {
    let f = fixture();
    let action = f.recovery_request();
    f.store
        .decide_action(&confirm(&f, &action, "k1"), 20)
        .unwrap();
    let no_role = ApprovalDecision {
        approver_can_approve: false,
        ..approval(&f, &action, Decision::Confirm)
    };
    assert!(matches!(
        f.store.decide_recovery_approval(&no_role, 21),
        Err(StoreError::Forbidden(_))
    ));
    let rejected = f
        .store
        .decide_recovery_approval(&approval(&f, &action, Decision::Reject), 22)
        .unwrap();
    assert_eq!(rejected.status, PendingActionStatus::Rejected);
    assert_eq!(f.count("recovery_approvals"), 0);
    // A submitted request past its expiry can no longer be approved.
    let late = f.recovery_request();
    f.store
        .decide_action(&confirm(&f, &late, "k2"), 30)
        .unwrap();
    assert!(matches!(
        f.store
            .decide_recovery_approval(&approval(&f, &late, Decision::Confirm), EXPIRES),
        Err(StoreError::Conflict(_))
    ));
    let after = f.store.pending_action(f.ann, &late.id).unwrap();
    assert_eq!(after.status, PendingActionStatus::Expired);
    assert_eq!(f.count("recovery_approvals"), 0);
}
