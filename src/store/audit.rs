//! The audit log: who did what to what, when, and how it went. Rows are append-only: the
//! trait has no way to change one, and SQLite triggers abort any UPDATE or DELETE of the
//! `audit` table, so even a bug elsewhere in the store cannot rewrite history.

use rusqlite::{params, Row};

use super::text_enum::text_enum;
use super::{Result, Store, StoreError};
use crate::trace::current_trace_id;

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
    /// The trace id of the request or run the row was written for.
    pub trace_id: Option<String>,
}

/// Which audit rows to read: every field that is set must match.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AuditFilter<'a> {
    /// Exactly this actor.
    pub actor: Option<&'a str>,
    /// This action, or every action under it: `user` matches `user.create` and `user`.
    pub action: Option<&'a str>,
    /// At or after this time (seconds since the epoch).
    pub since: Option<i64>,
    /// At or before this time (seconds since the epoch).
    pub until: Option<i64>,
    /// Only rows older than this row (to page back).
    pub before_id: Option<i64>,
}

/// One page of audit rows, newest first, and the `before_id` of the next (older) page when
/// there is one.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AuditPage {
    pub entries: Vec<AuditRow>,
    pub next_before: Option<i64>,
}

/// The append-only audit log on the store.
pub trait Audit {
    /// Appends a row at time `now`; returns its id.
    fn record(&self, entry: &AuditEntry<'_>, now: i64) -> Result<i64>;
    /// Rows newest first: the latest `limit` (at most `MAX_AUDIT_ROWS_PER_READ`), or with
    /// `before_id` the ones older than that row (to page back).
    fn audit_tail(&self, limit: u32, before_id: Option<i64>) -> Result<Vec<AuditRow>>;
    /// The newest `limit` rows (at most `MAX_AUDIT_ROWS_PER_READ`) that match `filter`.
    fn audit_page(&self, filter: &AuditFilter<'_>, limit: u32) -> Result<AuditPage>;
}

impl Audit for Store {
    fn record(&self, entry: &AuditEntry<'_>, now: i64) -> Result<i64> {
        if entry.actor.is_empty() || entry.action.is_empty() {
            return Err(StoreError::Invalid(
                "an audit row needs an actor and an action".into(),
            ));
        }
        let detail = entry.detail.map(serde_json::Value::to_string);
        // Names and targets are often typed by users: no control or layout character is
        // stored as itself, so nothing can forge a line in `warden audit tail`.
        let actor = escape_untrusted(entry.actor);
        let action = escape_untrusted(entry.action);
        let target = entry.target.map(escape_untrusted);
        let trace_id = current_trace_id();
        self.write(|t| {
            t.execute(
                "INSERT INTO audit (at, actor, action, target, outcome, detail, trace_id)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![now, actor, action, target, entry.outcome, detail, trace_id],
            )?;
            Ok(t.last_insert_rowid())
        })
    }

    fn audit_tail(&self, limit: u32, before_id: Option<i64>) -> Result<Vec<AuditRow>> {
        let filter = AuditFilter {
            before_id,
            ..AuditFilter::default()
        };
        Ok(self.audit_page(&filter, limit)?.entries)
    }

    fn audit_page(&self, filter: &AuditFilter<'_>, limit: u32) -> Result<AuditPage> {
        let limit = limit.min(MAX_AUDIT_ROWS_PER_READ) as usize;
        let mut entries = self.read(|c| {
            let mut statement = c.prepare(
                "SELECT id, at, actor, action, target, outcome, detail, trace_id FROM audit
                 WHERE id < ?1
                   AND (?2 IS NULL OR actor = ?2)
                   AND (?3 IS NULL OR action = ?3 OR substr(action, 1, length(?3) + 1) = ?3 || '.')
                   AND (?4 IS NULL OR at >= ?4)
                   AND (?5 IS NULL OR at <= ?5)
                 ORDER BY id DESC LIMIT ?6",
            )?;
            let before = filter.before_id.unwrap_or(i64::MAX);
            // Actors are stored escaped; a filter names them as typed.
            let actor = filter.actor.map(escape_untrusted);
            let rows = statement.query_map(
                params![
                    before,
                    actor,
                    filter.action,
                    filter.since,
                    filter.until,
                    limit as i64 + 1
                ],
                |r| Ok((row_without_detail(r)?, r.get::<_, Option<String>>(6)?)),
            )?;
            let mut page = Vec::new();
            for row in rows {
                let (mut row, detail) = row?;
                row.detail = detail
                    .map(|text| serde_json::from_str(&text))
                    .transpose()
                    .map_err(|e| StoreError::Corrupt(format!("audit row {}: {e}", row.id)))?;
                page.push(row);
            }
            Ok(page)
        })?;
        let more = entries.len() > limit;
        entries.truncate(limit);
        let next_before = if more {
            entries.last().map(|row| row.id)
        } else {
            None
        };
        Ok(AuditPage {
            entries,
            next_before,
        })
    }
}

/// `text` with every control character (newlines, escapes, NUL) and every invisible
/// layout character (bidirectional overrides, zero-width marks) written as `\u{XXXX}`,
/// and backslashes doubled so that an escape can never be typed in as itself.
pub fn escape_untrusted(text: &str) -> std::borrow::Cow<'_, str> {
    let needs = |c: char| c == '\\' || c.is_control() || is_invisible_layout(c);
    if !text.chars().any(needs) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            c if c.is_control() || is_invisible_layout(c) => {
                escaped.push_str(&format!("\\u{{{:04x}}}", u32::from(c)));
            }
            c => escaped.push(c),
        }
    }
    std::borrow::Cow::Owned(escaped)
}

/// Characters that change how a line is shown without being seen: bidirectional embeddings,
/// overrides and isolates, zero-width marks and joiners, line and paragraph separators.
fn is_invisible_layout(c: char) -> bool {
    matches!(
        c,
        '\u{061c}'
            | '\u{200b}'..='\u{200f}'
            | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{2069}'
            | '\u{feff}'
    )
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
        trace_id: row.get(7)?,
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
    fn typed_names_and_targets_are_stored_without_control_characters() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("w.db")).unwrap();
        let forged = AuditEntry {
            actor: "mallory\n1700000000 admin            user.create",
            action: "auth.login",
            target: Some("x\u{1b}[2J\u{202e}\\u{000a}"),
            outcome: AuditOutcome::Denied,
            detail: None,
        };
        store.record(&forged, 1).unwrap();
        let row = &store.audit_tail(1, None).unwrap()[0];
        assert_eq!(
            row.actor,
            "mallory\\u{000a}1700000000 admin            user.create"
        );
        assert_eq!(
            row.target.as_deref(),
            Some("x\\u{001b}[2J\\u{202e}\\\\u{000a}")
        );
        assert!(!row.actor.chars().any(char::is_control));
        assert_eq!(escape_untrusted("alice"), "alice");
        assert_eq!(escape_untrusted("张三"), "张三");
    }

    #[test]
    fn filters_by_actor_action_and_time_and_pages_within_the_filter() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("w.db")).unwrap();
        let row = |actor, action, at| {
            let entry = AuditEntry {
                actor,
                action,
                target: None,
                outcome: AuditOutcome::Success,
                detail: None,
            };
            store.record(&entry, at).unwrap()
        };
        let a1 = row("alice", "user.create", 100);
        let b1 = row("bob", "user.create", 110);
        let a2 = row("alice", "userx.other", 120);
        let a3 = row("alice", "user.disable", 130);
        let a4 = row("alice", "user", 140);
        let ids = |filter: AuditFilter<'_>, limit| {
            let page = store.audit_page(&filter, limit).unwrap();
            let ids: Vec<i64> = page.entries.iter().map(|r| r.id).collect();
            (ids, page.next_before)
        };
        let alice = AuditFilter {
            actor: Some("alice"),
            ..AuditFilter::default()
        };
        assert_eq!(ids(alice, 10), (vec![a4, a3, a2, a1], None));
        let users = AuditFilter {
            action: Some("user"),
            ..alice
        };
        assert_eq!(ids(users, 2), (vec![a4, a3], Some(a3)));
        let older = AuditFilter {
            before_id: Some(a3),
            ..users
        };
        assert_eq!(ids(older, 2), (vec![a1], None));
        let window = AuditFilter {
            since: Some(110),
            until: Some(130),
            ..AuditFilter::default()
        };
        assert_eq!(ids(window, 10).0.len(), 3);
        let exact = AuditFilter {
            action: Some("user.create"),
            since: Some(101),
            ..AuditFilter::default()
        };
        assert_eq!(ids(exact, 10).0.len(), 1);
        assert_eq!(
            ids(AuditFilter::default(), 5),
            (vec![a4, a3, a2, b1, a1], None)
        );
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
