//! Tests of runs: claiming and leases, reclaiming, endings, gapless event logs, owner scoping.

use std::collections::HashSet;
use std::sync::Arc;

use super::*;
use crate::store::{Accounts, Conversations, Role};

const OWNER: i64 = 1;
const LEASE: i64 = 30;

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("w.db")).unwrap();
    store
        .create_user("alice", Role::Operator, "password1", 0)
        .unwrap();
    (dir, store)
}

/// Queues `count` runs, one per turn of one conversation, created at times 1, 2, ….
/// `count` queued runs, each in its own conversation (so none waits for another).
fn queue_runs(store: &Store, count: i64) -> Vec<String> {
    (1..=count)
        .map(|now| {
            let conversation = store.create_conversation(OWNER, "c", 0).unwrap();
            store
                .add_user_message_with_run(OWNER, &conversation.id, "q", now)
                .unwrap()
                .run_id
        })
        .collect()
}

fn event(data: &str) -> NewEvent<'_> {
    NewEvent {
        event_type: "token",
        data,
    }
}

#[test]
fn claims_go_round_robin_across_owners_and_oldest_first_within_one() {
    let (_dir, store) = store();
    let bob = store
        .create_user("bob", Role::Viewer, "password1", 0)
        .unwrap();
    // Alice floods the queue first; Bob's two runs come later.
    let alice_runs = queue_runs(&store, 4);
    let bob_runs: Vec<String> = (10..12)
        .map(|now| {
            let conversation = store.create_conversation(bob.id, "c", 0).unwrap();
            store
                .add_user_message_with_run(bob.id, &conversation.id, "q", now)
                .unwrap()
                .run_id
        })
        .collect();
    let claimed: Vec<String> = (0..6)
        .map(|n| store.claim_next("w", 20 + n, LEASE).unwrap().unwrap().id)
        .collect();
    assert_eq!(
        claimed,
        vec![
            alice_runs[0].clone(),
            bob_runs[0].clone(),
            alice_runs[1].clone(),
            bob_runs[1].clone(),
            alice_runs[2].clone(),
            alice_runs[3].clone(),
        ]
    );
    assert!(store.claim_next("w", 30, LEASE).unwrap().is_none());
}

#[test]
fn queued_runs_per_owner_are_limited_when_a_limit_is_set() {
    let (_dir, store) = store();
    store.set_queued_runs_limit(Some(2));
    queue_runs(&store, 2);
    let conversation = store.create_conversation(OWNER, "c", 0).unwrap();
    let refused = store.add_user_message_with_run(OWNER, &conversation.id, "q", 5);
    assert!(
        matches!(refused, Err(StoreError::QuotaExceeded(_))),
        "{refused:?}"
    );
    // Nothing of the refused message was stored.
    let (_, messages) = store.conversation(OWNER, &conversation.id).unwrap();
    assert!(messages.is_empty());
    // A claimed (running) run no longer counts as queued.
    store.claim_next("w", 6, LEASE).unwrap().unwrap();
    store
        .add_user_message_with_run(OWNER, &conversation.id, "q", 7)
        .unwrap();
}

#[test]
fn one_owner_holds_at_most_the_running_limit_of_workers() {
    let (_dir, store) = store();
    store.set_running_runs_limit(Some(1));
    let bob = store
        .create_user("bob", Role::Viewer, "password1", 0)
        .unwrap();
    let alice_runs = queue_runs(&store, 3);
    let first = store.claim_next("w1", 10, LEASE).unwrap().unwrap();
    assert_eq!(first.id, alice_runs[0]);
    // Alice's other runs wait while her first holds a worker: the second worker idles…
    assert!(store.claim_next("w2", 11, LEASE).unwrap().is_none());
    // …or takes Bob's message at once.
    let conversation = store.create_conversation(bob.id, "c", 0).unwrap();
    let bob_run = store
        .add_user_message_with_run(bob.id, &conversation.id, "q", 12)
        .unwrap()
        .run_id;
    assert_eq!(
        store.claim_next("w2", 13, LEASE).unwrap().unwrap().id,
        bob_run
    );
    // A lease that ran out (a dead worker) no longer holds Alice's slot.
    let resumed = store.claim_next("w3", 10 + LEASE, LEASE).unwrap().unwrap();
    assert_eq!(resumed.id, alice_runs[0]);
    assert!(store.claim_next("w4", 11 + LEASE, LEASE).unwrap().is_none());
}

#[test]
fn only_the_lease_holder_appends_and_turns_are_claimed_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("w.db")).unwrap();
    let user = store
        .create_user("ann", Role::Operator, "password1", 1)
        .unwrap();
    let conversation = store.create_conversation(user.id, "c", 1).unwrap();
    let first = store
        .add_user_message_with_run(user.id, &conversation.id, "a", 2)
        .unwrap();
    let second = store
        .add_user_message_with_run(user.id, &conversation.id, "b", 3)
        .unwrap();
    let event = NewEvent {
        event_type: "message.delta",
        data: "{}",
    };

    let claimed = store.claim_next("w1", 4, 30).unwrap().unwrap();
    assert_eq!(claimed.id, first.run_id);
    // The second turn waits for the first, even with a free worker.
    assert_eq!(store.claim_next("w2", 4, 30).unwrap(), None);
    assert_eq!(
        store
            .append_event_as(&first.run_id, "w1", &event, 5)
            .unwrap(),
        1
    );
    assert!(matches!(
        store.append_event_as(&first.run_id, "w2", &event, 5),
        Err(StoreError::Conflict(_))
    ));
    // Reclaimed and taken by another worker: the first one can no longer write.
    store.reclaim_expired(100).unwrap();
    assert_eq!(
        store.claim_next("w2", 100, 30).unwrap().unwrap().id,
        first.run_id
    );
    assert!(matches!(
        store.append_event_as(&first.run_id, "w1", &event, 101),
        Err(StoreError::Conflict(_))
    ));
    store
        .finish(&first.run_id, RunStatus::Completed, None, 102)
        .unwrap();
    assert_eq!(
        store.claim_next("w1", 103, 30).unwrap().unwrap().id,
        second.run_id
    );
}

#[test]
fn claims_oldest_first_and_a_held_lease_excludes_other_workers() {
    let (_dir, store) = store();
    let ids = queue_runs(&store, 2);
    let first = store.claim_next("w1", 100, LEASE).unwrap().unwrap();
    assert_eq!(first.id, ids[0]);
    assert_eq!(
        (
            first.status,
            first.lease_owner.as_deref(),
            first.lease_expires_at,
            first.attempts
        ),
        (RunStatus::Running, Some("w1"), Some(130), 1)
    );
    let second = store.claim_next("w2", 101, LEASE).unwrap().unwrap();
    assert_eq!(second.id, ids[1]);
    // Both leases are live: nothing is left to claim.
    assert!(store.claim_next("w3", 129, LEASE).unwrap().is_none());
    assert!(store.renew_lease(&first.id, "w1", 129, LEASE).unwrap());
    assert!(!store.renew_lease(&first.id, "w2", 129, LEASE).unwrap());
    assert!(matches!(
        store.claim_next("w1", 0, 0),
        Err(StoreError::Invalid(_))
    ));
}

#[test]
fn an_expired_lease_passes_to_another_worker_with_its_checkpoint() {
    let (_dir, store) = store();
    let id = queue_runs(&store, 1).remove(0);
    store.claim_next("w1", 100, LEASE).unwrap().unwrap();
    assert!(store.checkpoint(&id, "w1", r#"{"step":3}"#, 110).unwrap());
    assert!(!store.checkpoint(&id, "w2", r#"{"step":9}"#, 110).unwrap());
    assert!(matches!(
        store.checkpoint(&id, "w1", "{not json", 110),
        Err(StoreError::Invalid(_))
    ));

    let taken = store.claim_next("w2", 130, LEASE).unwrap().unwrap();
    assert_eq!(
        (taken.id.as_str(), taken.lease_owner.as_deref()),
        (id.as_str(), Some("w2"))
    );
    assert_eq!(
        (taken.checkpoint.as_deref(), taken.attempts),
        (Some(r#"{"step":3}"#), 2)
    );
    // The first worker has lost the run: it can neither renew nor checkpoint.
    assert!(!store.renew_lease(&id, "w1", 131, LEASE).unwrap());
    assert!(!store.checkpoint(&id, "w1", "{}", 131).unwrap());
    assert!(store.renew_lease(&id, "w2", 131, LEASE).unwrap());
}

#[test]
fn reclaim_requeues_only_expired_leases() {
    let (_dir, store) = store();
    let ids = queue_runs(&store, 3);
    store.claim_next("w1", 100, 10).unwrap();
    store.claim_next("w1", 100, 50).unwrap();
    assert!(store.reclaim_expired(109).unwrap().is_empty());
    assert_eq!(store.reclaim_expired(110).unwrap(), vec![ids[0].clone()]);
    let requeued = store.run(OWNER, &ids[0]).unwrap();
    assert_eq!(
        (
            requeued.status,
            requeued.lease_owner,
            requeued.lease_expires_at
        ),
        (RunStatus::Queued, None, None)
    );
    assert_eq!(
        store.run(OWNER, &ids[1]).unwrap().status,
        RunStatus::Running
    );
    // The requeued run is older than the never-claimed one, so it goes first.
    assert_eq!(store.claim_next("w2", 111, 10).unwrap().unwrap().id, ids[0]);
    assert_eq!(store.claim_next("w2", 111, 10).unwrap().unwrap().id, ids[2]);
}

#[test]
fn concurrent_workers_on_two_connections_never_share_a_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let first = Arc::new(Store::open(&path).unwrap());
    first
        .create_user("alice", Role::Operator, "password1", 0)
        .unwrap();
    let ids = queue_runs(&first, 40);
    let second = Arc::new(Store::open(&path).unwrap());
    let workers: Vec<_> = (0..4)
        .map(|n| {
            let store = Arc::clone(if n % 2 == 0 { &first } else { &second });
            std::thread::spawn(move || {
                let mut claimed = Vec::new();
                while let Some(run) = store.claim_next(&format!("w{n}"), 1000, LEASE).unwrap() {
                    claimed.push(run.id);
                }
                claimed
            })
        })
        .collect();
    let claimed: Vec<String> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    assert_eq!(claimed.len(), ids.len());
    assert_eq!(
        claimed.iter().collect::<HashSet<_>>(),
        ids.iter().collect::<HashSet<_>>()
    );
}

#[test]
fn seqs_are_gapless_under_concurrent_appends() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let first = Arc::new(Store::open(&path).unwrap());
    first
        .create_user("alice", Role::Operator, "password1", 0)
        .unwrap();
    let ids = queue_runs(&first, 2);
    let second = Arc::new(Store::open(&path).unwrap());
    let writers: Vec<_> = (0..4)
        .map(|n| {
            let store = Arc::clone(if n % 2 == 0 { &first } else { &second });
            let run_id = ids[n / 2].clone();
            std::thread::spawn(move || {
                (0..100)
                    .map(|i| {
                        store
                            .append_event(&run_id, &event(&format!("{{\"i\":{i}}}")), 5)
                            .unwrap()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut returned: Vec<i64> = writers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    returned.sort();
    let expected: Vec<i64> = (1..=200).flat_map(|seq| [seq, seq]).collect();
    assert_eq!(returned, expected);
    for run_id in &ids {
        let mut seqs = Vec::new();
        let mut after = 0;
        loop {
            let page = first.events_after(OWNER, run_id, after, 64).unwrap();
            let Some(last) = page.last() else { break };
            after = last.seq;
            seqs.extend(page.iter().map(|e| e.seq));
        }
        assert_eq!(seqs, (1..=200).collect::<Vec<_>>());
    }
}

#[test]
fn ending_a_run_closes_its_log_and_the_first_ending_wins() {
    let (_dir, store) = store();
    let ids = queue_runs(&store, 2);
    store.claim_next("w1", 10, LEASE).unwrap();
    assert_eq!(
        store.append_event(&ids[0], &event(r#""a""#), 11).unwrap(),
        1
    );
    assert!(matches!(
        store.append_event(&ids[0], &event("not json"), 11),
        Err(StoreError::Invalid(_))
    ));
    let failed = NewEvent {
        event_type: "run.failed",
        data: r#"{"reason":"model crashed"}"#,
    };
    assert!(matches!(
        store.finish_with_event(&ids[0], RunStatus::Failed, None, &failed, 12),
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        store.finish(&ids[0], RunStatus::Running, None, 12),
        Err(StoreError::Invalid(_))
    ));
    assert_eq!(
        store
            .finish_with_event(
                &ids[0],
                RunStatus::Failed,
                Some("model crashed"),
                &failed,
                12
            )
            .unwrap(),
        Some(2)
    );
    let cancelled = NewEvent {
        event_type: "run.cancelled",
        data: "{}",
    };
    assert_eq!(
        store
            .finish_with_event(&ids[0], RunStatus::Cancelled, None, &cancelled, 13)
            .unwrap(),
        None
    );
    assert!(matches!(
        store.append_event(&ids[0], &event("{}"), 14),
        Err(StoreError::Conflict(_))
    ));

    let run = store.run(OWNER, &ids[0]).unwrap();
    assert_eq!(
        (run.status, run.failure_reason.as_deref(), run.lease_owner),
        (RunStatus::Failed, Some("model crashed"), None)
    );
    let events = store.events_after(OWNER, &ids[0], 0, 100).unwrap();
    assert_eq!(events.last().unwrap().event_type, "run.failed");
    assert_eq!(events.len(), 2);
    // An ended run is never claimed again, even with its lease fields cleared.
    assert_eq!(
        store.claim_next("w2", 1000, LEASE).unwrap().unwrap().id,
        ids[1]
    );
    assert!(store.claim_next("w3", 1001, LEASE).unwrap().is_none());

    assert!(store
        .finish(&ids[1], RunStatus::Cancelled, Some("stopped by user"), 20)
        .unwrap());
    assert!(!store
        .finish(&ids[1], RunStatus::Completed, None, 21)
        .unwrap());
    assert!(!store.renew_lease(&ids[1], "w2", 21, LEASE).unwrap());
    assert!(matches!(
        store.finish("run_nope", RunStatus::Cancelled, None, 22),
        Err(StoreError::NotFound(_))
    ));
}

#[test]
fn events_after_replays_from_a_seq_within_the_limit() {
    let (_dir, store) = store();
    let id = queue_runs(&store, 1).remove(0);
    for i in 0..5 {
        store
            .append_event(&id, &event(&i.to_string()), 100 + i)
            .unwrap();
    }
    let page = store.events_after(OWNER, &id, 2, 2).unwrap();
    assert_eq!(
        page.iter()
            .map(|e| (e.seq, e.data.as_str()))
            .collect::<Vec<_>>(),
        [(3, "2"), (4, "3")]
    );
    assert_eq!(
        serde_json::to_value(&page[0]).unwrap(),
        serde_json::json!({"seq": 3, "type": "token", "data": "2", "created_at": 102})
    );
    assert!(store.events_after(OWNER, &id, 5, 10).unwrap().is_empty());
    assert_eq!(
        store.events_after(OWNER, &id, 0, u32::MAX).unwrap().len(),
        5
    );
}

#[test]
fn a_tool_calls_completion_is_found_by_its_call_id() {
    use crate::store::ToolLedger;
    let (_dir, store) = store();
    let run = queue_runs(&store, 1).remove(0);
    store.claim_next("w1", 2, LEASE).unwrap().unwrap();
    let completed = NewEvent {
        event_type: "tool.completed",
        data: r#"{"call_id":"abc123","name":"app_log","status":"ok","summary":"3 records"}"#,
    };
    let started = NewEvent {
        event_type: "tool.started",
        data: r#"{"call_id":"def456","name":"app_log"}"#,
    };
    store.append_event_as(&run, "w1", &started, 3).unwrap();
    assert!(!store.completion_announced(&run, "abc123").unwrap());
    store.append_event_as(&run, "w1", &completed, 4).unwrap();
    assert!(store.completion_announced(&run, "abc123").unwrap());
    // Only a completion counts, and only of that call in that run.
    assert!(!store.completion_announced(&run, "def456").unwrap());
    assert!(!store.completion_announced("run_other", "abc123").unwrap());
}
