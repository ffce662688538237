//! Background compaction jobs: at most one per conversation, under a stable id
//! (`cmp_` + the conversation id). Scheduling a job that is already queued or running does
//! nothing; a finished or failed one is queued again. A job is claimed under a lease and
//! counts an attempt per claim, so a job whose holder died (a crash, a kill -9) is claimed
//! again once its lease expires — or at once at start, as runs are — and a job that used up
//! `MAX_COMPACTION_ATTEMPTS` fails instead of being claimed again.

use rusqlite::{params, OptionalExtension};

use super::text_enum::text_enum;
use super::{Result, Store, StoreError};

/// Claims (attempts) a job gets before it fails.
pub const MAX_COMPACTION_ATTEMPTS: i64 = 3;

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CompactionStatus {
    Queued,
    Running,
    Done,
    Failed,
}

text_enum!(CompactionStatus, "compaction status", {
    Queued => "queued",
    Running => "running",
    Done => "done",
    Failed => "failed",
});

/// A stored job.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CompactionJob {
    pub id: String,
    pub conversation_id: String,
    #[serde(skip)]
    pub owner_id: i64,
    pub status: CompactionStatus,
    pub attempts: i64,
    /// Why the last attempt failed (public text).
    pub last_error: Option<String>,
    pub updated_at: i64,
}

/// The stable id of a conversation's job.
pub fn compaction_job_id(conversation_id: &str) -> String {
    format!("cmp_{conversation_id}")
}

pub trait CompactionJobs {
    /// Queues the conversation's job unless it is queued or running; `true` when it was
    /// queued by this call.
    fn schedule_compaction(&self, owner: i64, conversation_id: &str, now: i64) -> Result<bool>;
    /// Claims the next due job for `holder` for `lease_secs` (one more attempt); a job
    /// whose lease expired counts as due, or fails when it has no attempt left.
    fn claim_compaction(
        &self,
        holder: &str,
        now: i64,
        lease_secs: i64,
    ) -> Result<Option<CompactionJob>>;
    /// Extends `holder`'s lease; `false` once it lost the job.
    fn renew_compaction(
        &self,
        job_id: &str,
        holder: &str,
        now: i64,
        lease_secs: i64,
    ) -> Result<bool>;
    /// Ends `holder`'s attempt: done, or (with an error) queued again after `retry_after`
    /// seconds while attempts are left, else failed. `false` when it had lost the job.
    fn end_compaction(
        &self,
        job_id: &str,
        holder: &str,
        error: Option<&str>,
        retry_after: i64,
        now: i64,
    ) -> Result<bool>;
    /// Makes every running job claimable now (at start: their holders are gone).
    fn release_compactions(&self) -> Result<usize>;
    /// The conversation's job, if it ever had one.
    fn compaction_job(&self, conversation_id: &str) -> Result<Option<CompactionJob>>;
}

const JOB_COLUMNS: &str = "id, conversation_id, owner_id, status, attempts, last_error, updated_at";

fn job_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<CompactionJob> {
    Ok(CompactionJob {
        id: row.get(0)?,
        conversation_id: row.get(1)?,
        owner_id: row.get(2)?,
        status: row.get(3)?,
        attempts: row.get(4)?,
        last_error: row.get(5)?,
        updated_at: row.get(6)?,
    })
}

impl CompactionJobs for Store {
    fn schedule_compaction(&self, owner: i64, conversation_id: &str, now: i64) -> Result<bool> {
        let id = compaction_job_id(conversation_id);
        self.write(|t| {
            let changed = t.execute(
                "INSERT INTO compaction_jobs (id, conversation_id, owner_id, status, attempts,
                                              not_before, created_at, updated_at)
                 SELECT ?1, ?2, ?3, 'queued', 0, ?4, ?4, ?4
                 WHERE EXISTS (SELECT 1 FROM conversations WHERE id = ?2 AND owner_id = ?3)
                 ON CONFLICT (id) DO UPDATE SET status = 'queued', attempts = 0, holder = NULL,
                     lease_until = NULL, not_before = ?4, last_error = NULL, updated_at = ?4
                 WHERE compaction_jobs.status IN ('done', 'failed')",
                params![id, conversation_id, owner, now],
            )?;
            if changed == 0 {
                let exists: bool = t.query_row(
                    "SELECT EXISTS (SELECT 1 FROM compaction_jobs WHERE id = ?1)",
                    [&id],
                    |r| r.get(0),
                )?;
                if !exists {
                    return Err(StoreError::NotFound(format!(
                        "conversation `{conversation_id}`"
                    )));
                }
            }
            Ok(changed > 0)
        })
    }

    fn claim_compaction(
        &self,
        holder: &str,
        now: i64,
        lease_secs: i64,
    ) -> Result<Option<CompactionJob>> {
        if lease_secs <= 0 {
            return Err(StoreError::Invalid(
                "a lease lasts at least a second".into(),
            ));
        }
        self.write(|t| {
            // A job whose holder died with its last attempt has none left.
            t.execute(
                "UPDATE compaction_jobs SET status = 'failed', holder = NULL, lease_until = NULL,
                     last_error = COALESCE(last_error, 'interrupted'), updated_at = ?1
                 WHERE status = 'running' AND lease_until <= ?1 AND attempts >= ?2",
                params![now, MAX_COMPACTION_ATTEMPTS],
            )?;
            let due: Option<String> = t
                .query_row(
                    "SELECT id FROM compaction_jobs
                     WHERE (status = 'queued' AND not_before <= ?1)
                        OR (status = 'running' AND lease_until <= ?1)
                     ORDER BY not_before, rowid LIMIT 1",
                    [now],
                    |r| r.get(0),
                )
                .optional()?;
            let Some(id) = due else {
                return Ok(None);
            };
            t.execute(
                "UPDATE compaction_jobs SET status = 'running', attempts = attempts + 1,
                     holder = ?2, lease_until = ?3, updated_at = ?4
                 WHERE id = ?1",
                params![id, holder, now + lease_secs, now],
            )?;
            let job = t.query_row(
                &format!("SELECT {JOB_COLUMNS} FROM compaction_jobs WHERE id = ?1"),
                [&id],
                job_from_row,
            )?;
            Ok(Some(job))
        })
    }

    fn renew_compaction(
        &self,
        job_id: &str,
        holder: &str,
        now: i64,
        lease_secs: i64,
    ) -> Result<bool> {
        self.write(|t| {
            let renewed = t.execute(
                "UPDATE compaction_jobs SET lease_until = ?3, updated_at = ?4
                 WHERE id = ?1 AND holder = ?2 AND status = 'running'",
                params![job_id, holder, now + lease_secs, now],
            )?;
            Ok(renewed > 0)
        })
    }

    fn end_compaction(
        &self,
        job_id: &str,
        holder: &str,
        error: Option<&str>,
        retry_after: i64,
        now: i64,
    ) -> Result<bool> {
        let error: Option<String> = error.map(|e| e.chars().take(300).collect());
        self.write(|t| {
            let ended = t.execute(
                "UPDATE compaction_jobs SET
                     status = CASE WHEN ?3 IS NULL THEN 'done'
                                   WHEN attempts >= ?4 THEN 'failed'
                                   ELSE 'queued' END,
                     holder = NULL, lease_until = NULL, not_before = ?5,
                     last_error = ?3, updated_at = ?6
                 WHERE id = ?1 AND holder = ?2 AND status = 'running'",
                params![
                    job_id,
                    holder,
                    error,
                    MAX_COMPACTION_ATTEMPTS,
                    now + retry_after.max(0),
                    now
                ],
            )?;
            Ok(ended > 0)
        })
    }

    fn release_compactions(&self) -> Result<usize> {
        self.write(|t| {
            Ok(t.execute(
                "UPDATE compaction_jobs SET lease_until = 0 WHERE status = 'running'",
                [],
            )?)
        })
    }

    fn compaction_job(&self, conversation_id: &str) -> Result<Option<CompactionJob>> {
        self.read(|c| {
            Ok(c.query_row(
                &format!("SELECT {JOB_COLUMNS} FROM compaction_jobs WHERE conversation_id = ?1"),
                [conversation_id],
                job_from_row,
            )
            .optional()?)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Accounts, Conversations, Role};

    fn store_with_conversation() -> (tempfile::TempDir, Store, i64, String) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("w.db")).unwrap();
        let user = store
            .create_user("ada", Role::Operator, "correct horse battery", 1)
            .unwrap();
        let conversation = store.create_conversation(user.id, "c", 1).unwrap();
        (dir, store, user.id, conversation.id)
    }

    #[test]
    fn one_job_per_conversation_under_a_stable_id() {
        let (_dir, store, owner, conversation) = store_with_conversation();
        assert!(store.schedule_compaction(owner, &conversation, 10).unwrap());
        assert!(!store.schedule_compaction(owner, &conversation, 11).unwrap());
        let job = store.claim_compaction("w1", 12, 60).unwrap().unwrap();
        assert_eq!(job.id, compaction_job_id(&conversation));
        assert_eq!((job.status, job.attempts), (CompactionStatus::Running, 1));
        // Running: scheduling again does nothing, and nobody else can claim it.
        assert!(!store.schedule_compaction(owner, &conversation, 13).unwrap());
        assert!(store.claim_compaction("w2", 13, 60).unwrap().is_none());
        assert!(store.end_compaction(&job.id, "w1", None, 0, 14).unwrap());
        let done = store.compaction_job(&conversation).unwrap().unwrap();
        assert_eq!(done.status, CompactionStatus::Done);
        // Done: the next schedule queues it afresh.
        assert!(store.schedule_compaction(owner, &conversation, 15).unwrap());
    }

    #[test]
    fn only_the_owner_can_schedule() {
        let (_dir, store, owner, conversation) = store_with_conversation();
        let err = store
            .schedule_compaction(owner + 1, &conversation, 10)
            .unwrap_err();
        assert!(matches!(err, StoreError::NotFound(_)), "{err}");
        assert!(store.compaction_job(&conversation).unwrap().is_none());
    }

    #[test]
    fn a_failing_job_is_retried_three_times_then_fails() {
        let (_dir, store, owner, conversation) = store_with_conversation();
        store.schedule_compaction(owner, &conversation, 10).unwrap();
        let mut now = 10;
        for attempt in 1..=MAX_COMPACTION_ATTEMPTS {
            // Not claimable before its retry time.
            if attempt > 1 {
                assert!(store.claim_compaction("w", now - 1, 60).unwrap().is_none());
            }
            let job = store.claim_compaction("w", now, 60).unwrap().unwrap();
            assert_eq!(job.attempts, attempt);
            assert!(store
                .end_compaction(&job.id, "w", Some("model failed"), 5, now)
                .unwrap());
            now += 5;
        }
        let job = store.compaction_job(&conversation).unwrap().unwrap();
        assert_eq!(job.status, CompactionStatus::Failed);
        assert_eq!(job.last_error.as_deref(), Some("model failed"));
        assert!(store
            .claim_compaction("w", now + 100, 60)
            .unwrap()
            .is_none());
    }

    #[test]
    fn a_dead_holders_job_is_claimed_again_and_the_dead_holder_cannot_end_it() {
        let (_dir, store, owner, conversation) = store_with_conversation();
        store.schedule_compaction(owner, &conversation, 10).unwrap();
        let job = store.claim_compaction("dead", 10, 60).unwrap().unwrap();
        assert!(store.claim_compaction("w", 20, 60).unwrap().is_none());
        // At start every running job is released at once.
        assert_eq!(store.release_compactions().unwrap(), 1);
        let again = store.claim_compaction("w", 21, 60).unwrap().unwrap();
        assert_eq!((again.id.as_str(), again.attempts), (job.id.as_str(), 2));
        assert!(!store.end_compaction(&job.id, "dead", None, 0, 22).unwrap());
        assert!(!store.renew_compaction(&job.id, "dead", 22, 60).unwrap());
        assert!(store.renew_compaction(&job.id, "w", 22, 60).unwrap());
        // Its last attempt's holder dies too: it fails instead of running a fourth time.
        let third = store.claim_compaction("w3", 22 + 61, 60).unwrap().unwrap();
        assert_eq!(third.attempts, 3);
        assert!(store
            .claim_compaction("w4", 22 + 200, 60)
            .unwrap()
            .is_none());
        let failed = store.compaction_job(&conversation).unwrap().unwrap();
        assert_eq!(failed.status, CompactionStatus::Failed);
    }
}
