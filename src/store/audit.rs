//! The audit log: who did what to what, when, and how it went. Rows are append-only: the
//! trait has no way to change one, and SQLite triggers abort any UPDATE or DELETE of the
//! `audit` table, so even a bug elsewhere in the store cannot rewrite history.

use rusqlite::{params, Row};

use super::text_enum::text_enum;
use super::{Result, Store, StoreError};

/// The actor recorded for actions Warden takes by itself.
pub const SYSTEM_ACTOR: &str = "system";

/// Most rows one `audit_tail` call returns.
pub const MAX_AUDIT_ROWS_PER_READ: u32 = 1000;

/// How an audited action went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuditOutcome {
    Success,
    /// The action was allowed but did not succeed.
    Failure,
    /// The action was refused (bad credentials, missing permission).
    Denied,
}

text_enum!(AuditOutcome, "audit outcome", {
    Success => "success",
    Failure => "failure",
    Denied => "denied",
});

/// A row to record. `actor` is a user name or `SYSTEM_ACTOR`; `action` a dotted name such
/// as `user.disable`; `detail` extra JSON that must hold no secrets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AuditEntry<'a> {
    pub actor: &'a str,
    pub action: &'a str,
    pub target: Option<&'a str>,
    pub outcome: AuditOutcome,
    pub detail: Option<&'a serde_json::Value>,
}

/// A recorded row.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AuditRow {
    pub id: i64,
    pub at: i64,
    pub actor: String,
    pub action: String,
    pub target: Option<String>,
    pub outcome: AuditOutcome,
    pub detail: Option<serde_json::Value>,
}

/// The append-only audit log on the store.
pub trait Audit {
    /// Appends a row at time `now`; returns its id.
    fn record(&self, entry: &AuditEntry<'_>, now: i64) -> Result<i64>;
    /// Rows newest first: the latest `limit` (at most `MAX_AUDIT_ROWS_PER_READ`), or with
    /// `before_id` the ones older than that row (to page back).
    fn audit_tail(&self, limit: u32, before_id: Option<i64>) -> Result<Vec<AuditRow>>;
}

impl Audit for Store {
    fn record(&self, entry: &AuditEntry<'_>, now: i64) -> Result<i64> {
        if entry.actor.is_empty() || entry.action.is_empty() {
            return Err(StoreError::Invalid(
                "an audit row needs an actor and an action".into(),
            ));
        }
        let detail = entry.detail.map(serde_json::Value::to_string);
        self.write(|t| {
            t.execute(
                "INSERT INTO audit (at, actor, action, target, outcome, detail)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    now,
                    entry.actor,
                    entry.action,
                    entry.target,
                    entry.outcome,
                    detail
                ],
            )?;
            Ok(t.last_insert_rowid())
        })
    }

    fn audit_tail(&self, limit: u32, before_id: Option<i64>) -> Result<Vec<AuditRow>> {
        let limit = limit.min(MAX_AUDIT_ROWS_PER_READ);
        self.read(|c| {
            let mut statement = c.prepare(
                "SELECT id, at, actor, action, target, outcome, detail FROM audit
                 WHERE id < ?1 ORDER BY id DESC LIMIT ?2",
            )?;
            let before = before_id.unwrap_or(i64::MAX);
            let rows = statement.query_map(params![before, limit], |r| {
                Ok((row_without_detail(r)?, r.get::<_, Option<String>>(6)?))
            })?;
            let mut tail = Vec::new();
            for row in rows {
                let (mut row, detail) = row?;
                row.detail = detail
                    .map(|text| serde_json::from_str(&text))
                    .transpose()
                    .map_err(|e| StoreError::Corrupt(format!("audit row {}: {e}", row.id)))?;
                tail.push(row);
            }
            Ok(tail)
        })
    }
}

fn row_without_detail(row: &Row<'_>) -> rusqlite::Result<AuditRow> {
    Ok(AuditRow {
        id: row.get(0)?,
        at: row.get(1)?,
        actor: row.get(2)?,
        action: row.get(3)?,
        target: row.get(4)?,
        outcome: row.get(5)?,
        detail: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry<'a>(action: &'a str, detail: Option<&'a serde_json::Value>) -> AuditEntry<'a> {
        AuditEntry {
            actor: "alice",
            action,
            target: Some("bob"),
            outcome: AuditOutcome::Success,
            detail,
        }
    }

    #[test]
    fn records_and_pages_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("w.db")).unwrap();
        let detail = serde_json::json!({"role": "viewer"});
        let first = store
            .record(&entry("user.create", Some(&detail)), 10)
            .unwrap();
        let denied = AuditEntry {
            actor: SYSTEM_ACTOR,
            action: "login",
            target: None,
            outcome: AuditOutcome::Denied,
            detail: None,
        };
        let second = store.record(&denied, 11).unwrap();
        let third = store.record(&entry("user.disable", None), 12).unwrap();
        assert!(first < second && second < third);

        let tail = store.audit_tail(2, None).unwrap();
        assert_eq!(
            tail.iter().map(|r| r.id).collect::<Vec<_>>(),
            [third, second]
        );
        assert_eq!(
            (
                tail[1].actor.as_str(),
                tail[1].target.as_deref(),
                tail[1].outcome
            ),
            (SYSTEM_ACTOR, None, AuditOutcome::Denied)
        );
        let older = store.audit_tail(10, Some(second)).unwrap();
        assert_eq!(older.len(), 1);
        assert_eq!(older[0].detail, Some(detail));
        assert_eq!((older[0].at, older[0].action.as_str()), (10, "user.create"));
        assert!(matches!(
            store.record(&entry("", None), 13),
            Err(StoreError::Invalid(_))
        ));
    }

    #[test]
    fn the_database_refuses_to_update_or_delete_audit_rows() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("w.db")).unwrap();
        let id = store.record(&entry("token.create", None), 1).unwrap();
        for sql in [
            "UPDATE audit SET outcome = 'denied'",
            "UPDATE audit SET actor = 'mallory' WHERE id = ?1",
            "DELETE FROM audit WHERE id = ?1",
            "DELETE FROM audit",
        ] {
            let result = store.write(|t| {
                let with_id = sql.contains("?1");
                if with_id {
                    t.execute(sql, [id])?
                } else {
                    t.execute(sql, [])?
                };
                Ok(())
            });
            let message = result.unwrap_err().to_string();
            assert!(message.contains("append-only"), "{sql}: {message}");
        }
        let rows = store.audit_tail(10, None).unwrap();
        assert_eq!(
            (rows.len(), rows[0].actor.as_str(), rows[0].outcome),
            (1, "alice", AuditOutcome::Success)
        );
    }
}
