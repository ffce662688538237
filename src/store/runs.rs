//! Runs and their event logs. A run is claimed by one worker at a time under a lease (an
//! expired lease lets another worker claim it and resume from the last checkpoint); its
//! public events get a gapless per-run `seq` (1, 2, 3…) assigned inside the write
//! transaction. Once a run has ended its event log is closed: appending to it is a
//! `Conflict`, so a run's terminal event stays its last one.

use rusqlite::{params, Connection, OptionalExtension, Row};

use super::text_enum::text_enum;
use super::{Result, Store, StoreError};
use crate::trace::current_trace_id;

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

/// What a run does: answer a chat turn, or run a diagnostic task (no conversation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunKind {
    ChatTurn,
    Diagnostic,
}

text_enum!(RunKind, "run kind", {
    ChatTurn => "chat_turn",
    Diagnostic => "diagnostic",
});

/// A run as stored. `checkpoint` is private resume state (JSON), never a public event.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub id: String,
    pub kind: RunKind,
    pub owner_id: i64,
    /// Set for chat turns; a diagnostic run has no conversation.
    pub conversation_id: Option<String>,
    pub turn: Option<i64>,
    pub status: RunStatus,
    pub failure_reason: Option<String>,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<i64>,
    pub checkpoint: Option<String>,
    /// How many times a worker has claimed the run (1 on the first claim).
    pub attempts: i64,
    pub created_at: i64,
    pub updated_at: i64,
    /// The trace id of the request that created the run.
    pub trace_id: Option<String>,
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
    /// Atomically takes a run (chat turn or diagnostic) that is queued, or running under an
    /// expired lease, and gives `worker` a lease on it until `now + lease_secs`. Fair across
    /// owners: the run comes from the owner whose last claim is oldest (round-robin), and
    /// is that owner's oldest claimable run, so one user's long queue delays another's run
    /// by at most one run per worker. A conversation's turns are answered in order: a run
    /// waits while an earlier turn's run has not ended.
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
    /// How many runs of any owner are queued or running.
    fn active_runs(&self) -> Result<u64>;
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
    fn active_runs(&self) -> Result<u64> {
        self.read(|c| {
            let active: i64 = c.query_row(
                "SELECT COUNT(*) FROM runs WHERE status IN ('queued', 'running')",
                [],
                |r| r.get(0),
            )?;
            Ok(active as u64)
        })
    }

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
        let running_limit = self.running_runs_limit().map_or(i64::MAX, i64::from);
        self.write(|t| {
            // Round-robin across owners: the owner served least recently goes first, and
            // within one owner the oldest run. An owner whose runs already hold
            // `running_limit` workers (live leases) waits.
            let claimable: Option<(String, i64)> = t
                .query_row(
                    "SELECT runs.id, runs.owner_id FROM runs
                     LEFT JOIN run_claims ON run_claims.owner_id = runs.owner_id
                     WHERE (runs.status = 'queued'
                            OR (runs.status = 'running' AND runs.lease_expires_at <= ?1))
                       AND NOT EXISTS (
                           SELECT 1 FROM runs AS earlier
                           WHERE earlier.conversation_id = runs.conversation_id
                             AND earlier.turn < runs.turn
                             AND earlier.status IN ('queued', 'running'))
                       AND (SELECT COUNT(*) FROM runs AS working
                            WHERE working.owner_id = runs.owner_id
                              AND working.status = 'running'
                              AND working.lease_expires_at > ?1) < ?2
                     ORDER BY COALESCE(run_claims.last_claim, 0), runs.created_at, runs.rowid
                     LIMIT 1",
                    params![now, running_limit],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            let Some((id, owner)) = claimable else {
                return Ok(None);
            };
            t.execute(
                "INSERT INTO run_claims (owner_id, last_claim)
                 VALUES (?1, (SELECT COALESCE(MAX(last_claim), 0) + 1 FROM run_claims))
                 ON CONFLICT (owner_id) DO UPDATE SET last_claim = excluded.last_claim",
                [owner],
            )?;
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

/// Inserts a `queued` diagnostic run, which has no conversation (inside the caller's
/// transaction).
pub(super) fn insert_queued_diagnostic_run(
    t: &Connection,
    id: &str,
    owner: i64,
    now: i64,
) -> Result<()> {
    t.execute(
        "INSERT INTO runs (id, kind, owner_id, status, created_at, updated_at, trace_id)
         VALUES (?1, 'diagnostic', ?2, 'queued', ?3, ?3, ?4)",
        params![id, owner, now, current_trace_id()],
    )?;
    Ok(())
}

/// Inserts a `queued` chat-turn run (inside the caller's transaction).
pub(super) fn insert_queued_run(
    t: &Connection,
    id: &str,
    owner: i64,
    conversation_id: &str,
    turn: i64,
    now: i64,
) -> Result<()> {
    t.execute(
        "INSERT INTO runs (id, owner_id, conversation_id, turn, status, created_at, updated_at,
                           trace_id)
         VALUES (?1, ?2, ?3, ?4, 'queued', ?5, ?5, ?6)",
        params![id, owner, conversation_id, turn, now, current_trace_id()],
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
    // A diagnostic task ends with its run when the run fails or is cancelled before the
    // graph stored a report (retries exhausted, a crash, a cancel).
    let task_status = match status {
        RunStatus::Failed => Some("failed"),
        RunStatus::Cancelled => Some("cancelled"),
        _ => None,
    };
    if let Some(task_status) = task_status {
        t.execute(
            "UPDATE diagnostic_tasks SET status = ?2, updated_at = ?3
             WHERE run_id = ?1 AND status NOT IN ('completed', 'failed', 'cancelled')",
            params![run_id, task_status, now],
        )?;
    }
    Ok(())
}

const RUN_COLUMNS: &str = "id, owner_id, conversation_id, turn, status, failure_reason, \
     lease_owner, lease_expires_at, checkpoint, attempts, created_at, updated_at, kind, trace_id";

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
        kind: row.get(12)?,
        trace_id: row.get(13)?,
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

pub(super) fn validate_json(text: &str, what: &str) -> Result<()> {
    serde_json::from_str::<serde::de::IgnoredAny>(text)
        .map(|_| ())
        .map_err(|e| StoreError::Invalid(format!("{what} is not valid JSON: {e}")))
}

fn run_not_found(id: &str) -> StoreError {
    StoreError::NotFound(format!("run `{id}`"))
}

#[cfg(test)]
mod tests;
