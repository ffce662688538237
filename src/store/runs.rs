//! Runs and their event logs. A run is claimed by one worker at a time under a lease (an
//! expired lease lets another worker claim it and resume from the last checkpoint); its
//! public events get a gapless per-run `seq` (1, 2, 3…) assigned inside the write
//! transaction. Once a run has ended its event log is closed: appending to it is a
//! `Conflict`, so a run's terminal event stays its last one.

use rusqlite::{params, Connection, OptionalExtension, Row};

use super::text_enum::text_enum;
use super::{Result, Store, StoreError};

/// Most events one `events_after` call returns.
pub const MAX_EVENTS_PER_READ: u32 = 1000;

/// Where a run is in its life. `completed`, `failed` and `cancelled` are terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Queued,
    Running,
    Completed,
    Failed,
    Cancelled,
}

text_enum!(RunStatus, "run status", {
    Queued => "queued",
    Running => "running",
    Completed => "completed",
    Failed => "failed",
    Cancelled => "cancelled",
});

impl RunStatus {
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

/// A run as stored. `checkpoint` is private resume state (JSON), never a public event.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub id: String,
    pub owner_id: i64,
    pub conversation_id: String,
    pub turn: i64,
    pub status: RunStatus,
    pub failure_reason: Option<String>,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<i64>,
    pub checkpoint: Option<String>,
    /// How many times a worker has claimed the run (1 on the first claim).
    pub attempts: i64,
    pub created_at: i64,
    pub updated_at: i64,
}

/// An event to append: a type such as `token` or `run.completed` and its JSON data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewEvent<'a> {
    pub event_type: &'a str,
    pub data: &'a str,
}

/// A stored event.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Event {
    pub seq: i64,
    #[serde(rename = "type")]
    pub event_type: String,
    /// JSON text, as appended.
    pub data: String,
    pub created_at: i64,
}

/// Runs, leases, checkpoints and event logs on the store. Runs are created by
/// `Conversations::add_user_message_with_run`.
pub trait Runs {
    /// The run if `owner` owns it; `NotFound` alike for missing and not owned.
    fn run(&self, owner: i64, id: &str) -> Result<Run>;
    /// Atomically takes the oldest run that is queued, or running under an expired lease,
    /// and gives `worker` a lease on it until `now + lease_secs`. A conversation's turns are
    /// answered in order: a run waits while an earlier turn's run has not ended.
    fn claim_next(&self, worker: &str, now: i64, lease_secs: i64) -> Result<Option<Run>>;
    /// Extends `worker`'s lease; `false` when the lease is lost (another worker claimed the
    /// run, it was reclaimed, or it ended). An expired lease nobody took is still held.
    fn renew_lease(&self, run_id: &str, worker: &str, now: i64, lease_secs: i64) -> Result<bool>;
    /// Saves resume state while `worker` holds the lease; `false` when it does not.
    fn checkpoint(
        &self,
        run_id: &str,
        worker: &str,
        checkpoint_json: &str,
        now: i64,
    ) -> Result<bool>;
    /// Ends the run with a terminal status (`failed` needs a reason) and clears its lease;
    /// `false` when it had already ended (the first ending wins). This closes the event
    /// log: use `finish_with_event` for a run whose stream needs its terminal event.
    fn finish(
        &self,
        run_id: &str,
        status: RunStatus,
        reason: Option<&str>,
        now: i64,
    ) -> Result<bool>;
    /// `finish` and the terminal event in one transaction; the event's seq, or `None` when
    /// the run had already ended and nothing was appended.
    fn finish_with_event(
        &self,
        run_id: &str,
        status: RunStatus,
        reason: Option<&str>,
        event: &NewEvent<'_>,
        now: i64,
    ) -> Result<Option<i64>>;
    /// Puts every running run whose lease has expired back to `queued`; returns their ids.
    fn reclaim_expired(&self, now: i64) -> Result<Vec<String>>;
    /// Appends an event with the run's next seq and returns it. `Conflict` once the run
    /// has ended.
    fn append_event(&self, run_id: &str, event: &NewEvent<'_>, now: i64) -> Result<i64>;
    /// `append_event` for the worker holding the run's lease: `Conflict` unless the run is
    /// running under `worker`'s lease, so a worker that lost its run cannot write to it.
    fn append_event_as(
        &self,
        run_id: &str,
        worker: &str,
        event: &NewEvent<'_>,
        now: i64,
    ) -> Result<i64>;
    /// The owner's run's events with `seq > after_seq`, in order, at most
    /// `min(limit, MAX_EVENTS_PER_READ)`.
    fn events_after(
        &self,
        owner: i64,
        run_id: &str,
        after_seq: i64,
        limit: u32,
    ) -> Result<Vec<Event>>;
}

impl Runs for Store {
    fn run(&self, owner: i64, id: &str) -> Result<Run> {
        self.read(|c| {
            c.query_row(
                &format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1 AND owner_id = ?2"),
                params![id, owner],
                run_from_row,
            )
            .optional()?
            .ok_or_else(|| run_not_found(id))
        })
    }

    fn claim_next(&self, worker: &str, now: i64, lease_secs: i64) -> Result<Option<Run>> {
        check_lease_secs(lease_secs)?;
        self.write(|t| {
            let claimable: Option<String> = t
                .query_row(
                    "SELECT id FROM runs
                     WHERE (status = 'queued' OR (status = 'running' AND lease_expires_at <= ?1))
                       AND NOT EXISTS (
                           SELECT 1 FROM runs AS earlier
                           WHERE earlier.conversation_id = runs.conversation_id
                             AND earlier.turn < runs.turn
                             AND earlier.status IN ('queued', 'running'))
                     ORDER BY created_at, rowid LIMIT 1",
                    [now],
                    |r| r.get(0),
                )
                .optional()?;
            let Some(id) = claimable else {
                return Ok(None);
            };
            t.execute(
                "UPDATE runs SET status = 'running', lease_owner = ?2, lease_expires_at = ?3,
                     attempts = attempts + 1, updated_at = ?4
                 WHERE id = ?1",
                params![id, worker, now.saturating_add(lease_secs), now],
            )?;
            Ok(Some(t.query_row(
                &format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1"),
                [&id],
                run_from_row,
            )?))
        })
    }

    fn renew_lease(&self, run_id: &str, worker: &str, now: i64, lease_secs: i64) -> Result<bool> {
        check_lease_secs(lease_secs)?;
        self.write(|t| {
            let changed = t.execute(
                "UPDATE runs SET lease_expires_at = ?3, updated_at = ?4
                 WHERE id = ?1 AND status = 'running' AND lease_owner = ?2",
                params![run_id, worker, now.saturating_add(lease_secs), now],
            )?;
            Ok(changed == 1)
        })
    }

    fn checkpoint(
        &self,
        run_id: &str,
        worker: &str,
        checkpoint_json: &str,
        now: i64,
    ) -> Result<bool> {
        validate_json(checkpoint_json, "checkpoint")?;
        self.write(|t| {
            let changed = t.execute(
                "UPDATE runs SET checkpoint = ?3, updated_at = ?4
                 WHERE id = ?1 AND status = 'running' AND lease_owner = ?2",
                params![run_id, worker, checkpoint_json, now],
            )?;
            Ok(changed == 1)
        })
    }

    fn finish(
        &self,
        run_id: &str,
        status: RunStatus,
        reason: Option<&str>,
        now: i64,
    ) -> Result<bool> {
        check_ending(status, reason)?;
        self.write(|t| finish_in(t, run_id, status, reason, now))
    }

    fn finish_with_event(
        &self,
        run_id: &str,
        status: RunStatus,
        reason: Option<&str>,
        event: &NewEvent<'_>,
        now: i64,
    ) -> Result<Option<i64>> {
        check_ending(status, reason)?;
        event.validate()?;
        self.write(|t| {
            if !finish_in(t, run_id, status, reason, now)? {
                return Ok(None);
            }
            insert_event(t, run_id, event, now).map(Some)
        })
    }

    fn reclaim_expired(&self, now: i64) -> Result<Vec<String>> {
        self.write(|t| {
            let mut statement = t.prepare(
                "UPDATE runs SET status = 'queued', lease_owner = NULL, lease_expires_at = NULL,
                     updated_at = ?1
                 WHERE status = 'running' AND lease_expires_at <= ?1
                 RETURNING id",
            )?;
            let rows = statement.query_map([now], |r| r.get::<_, String>(0))?;
            let mut ids: Vec<String> = rows.collect::<rusqlite::Result<_>>()?;
            ids.sort();
            Ok(ids)
        })
    }

    fn append_event(&self, run_id: &str, event: &NewEvent<'_>, now: i64) -> Result<i64> {
        event.validate()?;
        self.write(|t| {
            let status = run_status(t, run_id)?;
            if status.is_terminal() {
                return Err(StoreError::Conflict(format!(
                    "run `{run_id}` has ended ({status}); its event log is closed"
                )));
            }
            insert_event(t, run_id, event, now)
        })
    }

    fn append_event_as(
        &self,
        run_id: &str,
        worker: &str,
        event: &NewEvent<'_>,
        now: i64,
    ) -> Result<i64> {
        event.validate()?;
        self.write(|t| {
            check_lease_holder(t, run_id, worker)?;
            insert_event(t, run_id, event, now)
        })
    }

    fn events_after(
        &self,
        owner: i64,
        run_id: &str,
        after_seq: i64,
        limit: u32,
    ) -> Result<Vec<Event>> {
        self.read(|c| {
            let owned: Option<i64> = c
                .query_row(
                    "SELECT 1 FROM runs WHERE id = ?1 AND owner_id = ?2",
                    params![run_id, owner],
                    |r| r.get(0),
                )
                .optional()?;
            if owned.is_none() {
                return Err(run_not_found(run_id));
            }
            let mut statement = c.prepare(
                "SELECT seq, type, data, created_at FROM run_events
                 WHERE run_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
            )?;
            let limit = limit.min(MAX_EVENTS_PER_READ);
            let rows = statement.query_map(params![run_id, after_seq, limit], |r| {
                Ok(Event {
                    seq: r.get(0)?,
                    event_type: r.get(1)?,
                    data: r.get(2)?,
                    created_at: r.get(3)?,
                })
            })?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }
}

impl NewEvent<'_> {
    /// A non-empty type and JSON data.
    pub(super) fn validate(&self) -> Result<()> {
        if self.event_type.is_empty() {
            return Err(StoreError::Invalid("an event needs a type".into()));
        }
        validate_json(self.data, "event data")
    }
}

/// Inserts a `queued` run (inside the caller's transaction).
pub(super) fn insert_queued_run(
    t: &Connection,
    id: &str,
    owner: i64,
    conversation_id: &str,
    turn: i64,
    now: i64,
) -> Result<()> {
    t.execute(
        "INSERT INTO runs (id, owner_id, conversation_id, turn, status, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, 'queued', ?5, ?5)",
        params![id, owner, conversation_id, turn, now],
    )?;
    Ok(())
}

/// Appends an event with the next seq, without checking the run's status. The write
/// transaction serialises appends, so seqs have no gaps and no duplicates.
pub(super) fn insert_event(
    t: &Connection,
    run_id: &str,
    event: &NewEvent<'_>,
    now: i64,
) -> Result<i64> {
    let seq: i64 = t.query_row(
        "SELECT COALESCE(MAX(seq), 0) + 1 FROM run_events WHERE run_id = ?1",
        [run_id],
        |r| r.get(0),
    )?;
    t.execute(
        "INSERT INTO run_events (run_id, seq, type, data, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![run_id, seq, event.event_type, event.data, now],
    )?;
    Ok(seq)
}

/// Sets a terminal status and clears the lease, whatever the current status.
pub(super) fn set_terminal_status(
    t: &Connection,
    run_id: &str,
    status: RunStatus,
    reason: Option<&str>,
    now: i64,
) -> Result<()> {
    t.execute(
        "UPDATE runs SET status = ?2, failure_reason = ?3, lease_owner = NULL,
             lease_expires_at = NULL, updated_at = ?4
         WHERE id = ?1",
        params![run_id, status, reason, now],
    )?;
    Ok(())
}

const RUN_COLUMNS: &str = "id, owner_id, conversation_id, turn, status, failure_reason, \
     lease_owner, lease_expires_at, checkpoint, attempts, created_at, updated_at";

fn run_from_row(row: &Row<'_>) -> rusqlite::Result<Run> {
    Ok(Run {
        id: row.get(0)?,
        owner_id: row.get(1)?,
        conversation_id: row.get(2)?,
        turn: row.get(3)?,
        status: row.get(4)?,
        failure_reason: row.get(5)?,
        lease_owner: row.get(6)?,
        lease_expires_at: row.get(7)?,
        checkpoint: row.get(8)?,
        attempts: row.get(9)?,
        created_at: row.get(10)?,
        updated_at: row.get(11)?,
    })
}

/// `true` if this call ended the run, `false` if it had already ended.
fn finish_in(
    t: &Connection,
    run_id: &str,
    status: RunStatus,
    reason: Option<&str>,
    now: i64,
) -> Result<bool> {
    if run_status(t, run_id)?.is_terminal() {
        return Ok(false);
    }
    set_terminal_status(t, run_id, status, reason, now)?;
    Ok(true)
}

/// `Conflict` unless the run is running under `worker`'s lease.
pub(super) fn check_lease_holder(c: &Connection, run_id: &str, worker: &str) -> Result<()> {
    let (status, holder): (RunStatus, Option<String>) = c
        .query_row(
            "SELECT status, lease_owner FROM runs WHERE id = ?1",
            [run_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?
        .ok_or_else(|| run_not_found(run_id))?;
    if status != RunStatus::Running || holder.as_deref() != Some(worker) {
        return Err(StoreError::Conflict(format!(
            "run `{run_id}` is not held by this worker ({status})"
        )));
    }
    Ok(())
}

fn run_status(c: &Connection, run_id: &str) -> Result<RunStatus> {
    c.query_row("SELECT status FROM runs WHERE id = ?1", [run_id], |r| {
        r.get(0)
    })
    .optional()?
    .ok_or_else(|| run_not_found(run_id))
}

fn check_ending(status: RunStatus, reason: Option<&str>) -> Result<()> {
    if !status.is_terminal() {
        return Err(StoreError::Invalid(format!(
            "`{status}` is not a terminal run status"
        )));
    }
    if status == RunStatus::Failed && reason.is_none_or(|r| r.trim().is_empty()) {
        return Err(StoreError::Invalid("a failed run needs a reason".into()));
    }
    Ok(())
}

fn check_lease_secs(lease_secs: i64) -> Result<()> {
    if lease_secs <= 0 {
        return Err(StoreError::Invalid(
            "a lease must last at least a second".into(),
        ));
    }
    Ok(())
}

fn validate_json(text: &str, what: &str) -> Result<()> {
    serde_json::from_str::<serde::de::IgnoredAny>(text)
        .map(|_| ())
        .map_err(|e| StoreError::Invalid(format!("{what} is not valid JSON: {e}")))
}

fn run_not_found(id: &str) -> StoreError {
    StoreError::NotFound(format!("run `{id}`"))
}

#[cfg(test)]
mod tests {
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
}
