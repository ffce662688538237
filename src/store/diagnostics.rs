//! Diagnostic tasks: an owner's investigation of one incident, run by the diagnostic graph
//! on a `diagnostic` run, with the graph's structured report. Owner-scoped: another user's
//! task answers `NotFound` exactly like one that does not exist. Tasks are normally created
//! by confirming a `diagnostic_start` action (see `Actions::decide_action`); `add_diagnostic_task`
//! is for tests and evaluation setups. Ids are `diagnostic_` then
//! `[A-Za-z0-9][A-Za-z0-9-]{0,63}`.

use rusqlite::{params, Connection, OptionalExtension, Row};

use super::incidents::{has_id_shape, to_json_text};
use super::secrets;
use super::text_enum::text_enum;
use super::{Result, Store, StoreError};
use crate::diagnostics::report::Report;

/// Most tasks one `diagnostic_tasks` call returns.
pub const MAX_DIAGNOSTIC_TASKS_PER_READ: u32 = 1000;

/// Where a diagnostic task is. A task created by a confirmation waits for the graph's
/// driver (`waiting_for_graph`) until it claims the task's run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiagnosticStatus {
    WaitingForGraph,
    Queued,
    Running,
    Completed,
    Failed,
    Cancelled,
}

text_enum!(DiagnosticStatus, "diagnostic task status", {
    WaitingForGraph => "waiting_for_graph",
    Queued => "queued",
    Running => "running",
    Completed => "completed",
    Failed => "failed",
    Cancelled => "cancelled",
});

/// A diagnostic task to add directly (tests, evaluation setups).
#[derive(Debug, Clone, PartialEq)]
pub struct NewDiagnosticTask {
    /// An explicit `diagnostic_…` id, or `None` for a generated one.
    pub id: Option<String>,
    pub incident_id: String,
    pub owner_id: i64,
    pub status: DiagnosticStatus,
    pub report: Option<Report>,
}

/// A diagnostic task as stored.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DiagnosticTask {
    pub id: String,
    pub incident_id: String,
    pub owner_id: i64,
    /// The `diagnostic` run that works on it, once there is one.
    pub run_id: Option<String>,
    pub status: DiagnosticStatus,
    /// The graph's structured result.
    pub report: Option<Report>,
    /// Where the task's diagnostic tools read: a scenario pack folder, or `None` for the
    /// server's configured source.
    pub source: Option<String>,
    pub graph_version: Option<String>,
    pub thread_id: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// Diagnostic tasks on the store.
pub trait DiagnosticTasks {
    /// Adds a task without a run. `Invalid` when the incident or owner does not exist or
    /// the id has the wrong shape; `Conflict` when the id is taken.
    fn add_diagnostic_task(&self, new: &NewDiagnosticTask, now: i64) -> Result<DiagnosticTask>;
    /// The task if `owner` owns it; `NotFound` alike for missing and not owned.
    fn diagnostic_task(&self, owner: i64, id: &str) -> Result<DiagnosticTask>;
    /// The owner's tasks, newest first, at most `min(limit, MAX_DIAGNOSTIC_TASKS_PER_READ)`.
    fn diagnostic_tasks(&self, owner: i64, limit: u32) -> Result<Vec<DiagnosticTask>>;
    /// Starts a task on `incident_id` for `owner`: the task (`queued`) and its queued
    /// `diagnostic` run in one transaction. `Invalid` when the incident or owner is missing.
    fn start_diagnostic_task(
        &self,
        owner: i64,
        incident_id: &str,
        source: Option<&str>,
        graph_version: &str,
        now: i64,
    ) -> Result<DiagnosticTask>;
    /// The task a `diagnostic` run works on (for the run's worker; not owner-scoped).
    fn diagnostic_task_of_run(&self, run_id: &str) -> Result<DiagnosticTask>;
    /// Records the graph's progress on the task: status, version, thread and report. A task
    /// that already ended (completed, failed, cancelled) is left as it is.
    fn update_diagnostic_task(&self, update: &TaskUpdate<'_>, now: i64) -> Result<()>;
}

/// What the graph's driver records on a task.
pub struct TaskUpdate<'a> {
    pub id: &'a str,
    pub status: DiagnosticStatus,
    pub graph_version: &'a str,
    pub thread_id: &'a str,
    pub report: Option<&'a Report>,
}

/// `QuotaExceeded` when `owner` already has `limit` diagnostics in progress.
pub(super) fn check_active_diagnostics(
    t: &rusqlite::Connection,
    owner: i64,
    limit: Option<u32>,
) -> Result<()> {
    let Some(limit) = limit else {
        return Ok(());
    };
    let active: i64 = t.query_row(
        "SELECT COUNT(*) FROM diagnostic_tasks
         WHERE owner_id = ?1 AND status IN ('waiting_for_graph', 'queued', 'running')",
        [owner],
        |r| r.get(0),
    )?;
    if active >= i64::from(limit) {
        return Err(StoreError::QuotaExceeded(format!(
            "you have {active} diagnostics in progress (the most is {limit}); wait for one \
             to end or cancel it"
        )));
    }
    Ok(())
}

/// Whether `text` is a diagnostic task id: `diagnostic_` and `[A-Za-z0-9][A-Za-z0-9-]{0,63}`.
pub fn is_diagnostic_task_id(text: &str) -> bool {
    has_id_shape(text, "diagnostic")
}

/// A fresh diagnostic task id (`diagnostic_` + random hex).
pub(super) fn new_diagnostic_task_id() -> Result<String> {
    secrets::new_id("diagnostic")
}

impl DiagnosticTasks for Store {
    fn start_diagnostic_task(
        &self,
        owner: i64,
        incident_id: &str,
        source: Option<&str>,
        graph_version: &str,
        now: i64,
    ) -> Result<DiagnosticTask> {
        let id = new_diagnostic_task_id()?;
        let run_id = secrets::new_id("run")?;
        let limit = self.active_diagnostics_limit();
        self.write(|t| {
            if !exists(t, "SELECT 1 FROM users WHERE id = ?1", &owner)? {
                return Err(StoreError::Invalid(format!("user {owner} does not exist")));
            }
            check_active_diagnostics(t, owner, limit)?;
            super::runs::insert_queued_diagnostic_run(t, &run_id, owner, now)?;
            let task = TaskInsert {
                id: &id,
                incident_id,
                owner,
                run_id: Some(&run_id),
                status: DiagnosticStatus::Queued,
                report: None,
            };
            insert_diagnostic_task(t, &task, now)?;
            t.execute(
                "UPDATE diagnostic_tasks SET source = ?2, graph_version = ?3 WHERE id = ?1",
                params![id, source, graph_version],
            )?;
            owned_task(t, owner, &id)
        })
    }

    fn diagnostic_task_of_run(&self, run_id: &str) -> Result<DiagnosticTask> {
        self.read(|c| {
            c.query_row(
                &format!("SELECT {TASK_COLUMNS} FROM diagnostic_tasks WHERE run_id = ?1"),
                [run_id],
                task_from_row,
            )
            .optional()?
            .ok_or_else(|| StoreError::NotFound(format!("the diagnostic task of run `{run_id}`")))
        })
    }

    fn update_diagnostic_task(&self, update: &TaskUpdate<'_>, now: i64) -> Result<()> {
        let report = update.report.map(to_json_text).transpose()?;
        self.write(|t| {
            let changed = t.execute(
                "UPDATE diagnostic_tasks SET status = ?2, graph_version = ?3, thread_id = ?4,
                     report = COALESCE(?5, report), updated_at = ?6
                 WHERE id = ?1 AND status NOT IN ('completed', 'failed', 'cancelled')",
                params![
                    update.id,
                    update.status,
                    update.graph_version,
                    update.thread_id,
                    report,
                    now
                ],
            )?;
            // An ended task stays as it ended (a resumed run that finds its graph done
            // changes nothing).
            let known = exists(
                t,
                "SELECT 1 FROM diagnostic_tasks WHERE id = ?1",
                &update.id,
            )?;
            if changed == 1 || known {
                Ok(())
            } else {
                Err(StoreError::NotFound(format!(
                    "diagnostic task `{}`",
                    update.id
                )))
            }
        })
    }

    fn add_diagnostic_task(&self, new: &NewDiagnosticTask, now: i64) -> Result<DiagnosticTask> {
        let id = match &new.id {
            Some(id) if is_diagnostic_task_id(id) => id.clone(),
            Some(id) => {
                return Err(StoreError::Invalid(format!(
                    "`{id}` is not a diagnostic task id (diagnostic_ then letters, digits \
                     and dashes)"
                )))
            }
            None => new_diagnostic_task_id()?,
        };
        let report = new.report.as_ref().map(to_json_text).transpose()?;
        self.write(|t| {
            if exists(t, "SELECT 1 FROM diagnostic_tasks WHERE id = ?1", &id)? {
                return Err(StoreError::Conflict(format!(
                    "diagnostic task `{id}` already exists"
                )));
            }
            if !exists(t, "SELECT 1 FROM users WHERE id = ?1", &new.owner_id)? {
                return Err(StoreError::Invalid(format!(
                    "user {} does not exist",
                    new.owner_id
                )));
            }
            let task = TaskInsert {
                id: &id,
                incident_id: &new.incident_id,
                owner: new.owner_id,
                run_id: None,
                status: new.status,
                report: report.as_deref(),
            };
            insert_diagnostic_task(t, &task, now)?;
            owned_task(t, new.owner_id, &id)
        })
    }

    fn diagnostic_task(&self, owner: i64, id: &str) -> Result<DiagnosticTask> {
        self.read(|c| owned_task(c, owner, id))
    }

    fn diagnostic_tasks(&self, owner: i64, limit: u32) -> Result<Vec<DiagnosticTask>> {
        let limit = limit.min(MAX_DIAGNOSTIC_TASKS_PER_READ);
        self.read(|c| {
            let mut statement = c.prepare(&format!(
                "SELECT {TASK_COLUMNS} FROM diagnostic_tasks WHERE owner_id = ?1
                 ORDER BY created_at DESC, rowid DESC LIMIT ?2"
            ))?;
            let rows = statement.query_map(params![owner, limit], task_from_row)?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }
}

/// A task row to insert.
pub(super) struct TaskInsert<'a> {
    pub id: &'a str,
    pub incident_id: &'a str,
    pub owner: i64,
    pub run_id: Option<&'a str>,
    pub status: DiagnosticStatus,
    /// JSON text.
    pub report: Option<&'a str>,
}

/// Inserts a task inside the caller's transaction; `Invalid` when the incident does not
/// exist.
pub(super) fn insert_diagnostic_task(
    t: &Connection,
    task: &TaskInsert<'_>,
    now: i64,
) -> Result<()> {
    if !exists(
        t,
        "SELECT 1 FROM incidents WHERE id = ?1",
        &task.incident_id,
    )? {
        return Err(StoreError::Invalid(format!(
            "incident `{}` does not exist",
            task.incident_id
        )));
    }
    t.execute(
        "INSERT INTO diagnostic_tasks (id, incident_id, owner_id, run_id, status, report,
             created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)",
        params![
            task.id,
            task.incident_id,
            task.owner,
            task.run_id,
            task.status,
            task.report,
            now
        ],
    )?;
    Ok(())
}

/// The task if `owner` owns it; `NotFound` alike for missing and not owned.
pub(super) fn owned_task(c: &Connection, owner: i64, id: &str) -> Result<DiagnosticTask> {
    c.query_row(
        &format!("SELECT {TASK_COLUMNS} FROM diagnostic_tasks WHERE id = ?1 AND owner_id = ?2"),
        params![id, owner],
        task_from_row,
    )
    .optional()?
    .ok_or_else(|| StoreError::NotFound(format!("diagnostic task `{id}`")))
}

fn exists(c: &Connection, sql: &str, key: &dyn rusqlite::ToSql) -> Result<bool> {
    Ok(c.query_row(sql, [key], |_| Ok(())).optional()?.is_some())
}

const TASK_COLUMNS: &str = "id, incident_id, owner_id, run_id, status, report, created_at, \
     updated_at, source, graph_version, thread_id";

fn task_from_row(row: &Row<'_>) -> rusqlite::Result<DiagnosticTask> {
    let report: Option<String> = row.get(5)?;
    let report = report
        .map(|text| serde_json::from_str(&text))
        .transpose()
        .map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(5, rusqlite::types::Type::Text, Box::new(e))
        })?;
    Ok(DiagnosticTask {
        id: row.get(0)?,
        incident_id: row.get(1)?,
        owner_id: row.get(2)?,
        run_id: row.get(3)?,
        status: row.get(4)?,
        report,
        created_at: row.get(6)?,
        updated_at: row.get(7)?,
        source: row.get(8)?,
        graph_version: row.get(9)?,
        thread_id: row.get(10)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Accounts, IncidentStatus, Incidents, NewIncident, Role};

    fn store() -> (tempfile::TempDir, Store, i64, i64) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("w.db")).unwrap();
        let ann = store
            .create_user("ann", Role::Operator, "password1", 0)
            .unwrap();
        let bob = store
            .create_user("bob", Role::Viewer, "password1", 0)
            .unwrap();
        let incident = NewIncident {
            id: Some("incident_db".into()),
            title: "db down".into(),
            service: "db".into(),
            severity: "critical".into(),
            status: IncidentStatus::Open,
        };
        store.add_incident(&incident, 0).unwrap();
        (dir, store, ann.id, bob.id)
    }

    fn task(id: Option<&str>, incident: &str, owner: i64) -> NewDiagnosticTask {
        NewDiagnosticTask {
            id: id.map(str::to_owned),
            incident_id: incident.into(),
            owner_id: owner,
            status: DiagnosticStatus::Completed,
            report: Some(crate::diagnostics::report::example(
                "diagnostic_db-1",
                incident,
            )),
        }
    }

    #[test]
    fn tasks_are_added_and_read_by_their_owner_only() {
        let (_dir, store, ann, bob) = store();
        let added = store
            .add_diagnostic_task(&task(Some("diagnostic_db-1"), "incident_db", ann), 5)
            .unwrap();
        assert_eq!(
            (
                added.id.as_str(),
                added.status,
                added.run_id.as_deref(),
                added.created_at
            ),
            ("diagnostic_db-1", DiagnosticStatus::Completed, None, 5)
        );
        assert_eq!(added.report.as_ref().unwrap().incident_id, "incident_db");
        assert_eq!(
            store.diagnostic_task(ann, "diagnostic_db-1").unwrap(),
            added
        );

        let missing = store.diagnostic_task(ann, "diagnostic_none").unwrap_err();
        let foreign = store.diagnostic_task(bob, "diagnostic_db-1").unwrap_err();
        assert!(matches!(missing, StoreError::NotFound(_)));
        assert_eq!(
            foreign.to_string(),
            "diagnostic task `diagnostic_db-1` not found"
        );

        let generated = store
            .add_diagnostic_task(&task(None, "incident_db", ann), 6)
            .unwrap();
        assert!(is_diagnostic_task_id(&generated.id), "{}", generated.id);
        let ids: Vec<_> = store
            .diagnostic_tasks(ann, 10)
            .unwrap()
            .into_iter()
            .map(|t| t.id)
            .collect();
        assert_eq!(ids, [generated.id.clone(), added.id.clone()]);
        assert_eq!(store.diagnostic_tasks(ann, 1).unwrap().len(), 1);
        assert!(store.diagnostic_tasks(bob, 10).unwrap().is_empty());
    }

    #[test]
    fn diagnostics_in_progress_per_owner_are_limited_when_a_limit_is_set() {
        let (_dir, store, ann, bob) = store();
        store.set_active_diagnostics_limit(Some(2));
        let start = |owner| store.start_diagnostic_task(owner, "incident_db", None, "v1", 1);
        start(ann).unwrap();
        start(ann).unwrap();
        let refused = start(ann).unwrap_err();
        assert!(matches!(refused, StoreError::QuotaExceeded(_)), "{refused}");
        assert_eq!(
            store.diagnostic_tasks(ann, 10).unwrap().len(),
            2,
            "nothing stored"
        );
        // Another owner has an allowance of their own; an ended task frees one.
        start(bob).unwrap();
        let first = &store.diagnostic_tasks(ann, 10).unwrap()[0];
        let ended = TaskUpdate {
            id: &first.id,
            status: DiagnosticStatus::Completed,
            graph_version: "v1",
            thread_id: "t",
            report: None,
        };
        store.update_diagnostic_task(&ended, 2).unwrap();
        start(ann).unwrap();
    }

    #[test]
    fn bad_tasks_are_refused() {
        let (_dir, store, ann, _bob) = store();
        store
            .add_diagnostic_task(&task(Some("diagnostic_x"), "incident_db", ann), 1)
            .unwrap();
        let err = |new: NewDiagnosticTask| store.add_diagnostic_task(&new, 2).unwrap_err();
        assert!(matches!(
            err(task(Some("diagnostic_x"), "incident_db", ann)),
            StoreError::Conflict(_)
        ));
        assert!(matches!(
            err(task(None, "incident_missing", ann)),
            StoreError::Invalid(_)
        ));
        assert!(matches!(
            err(task(None, "incident_db", 999)),
            StoreError::Invalid(_)
        ));
        for bad in ["diagnostic_a_b", "incident_a", "diagnostic_"] {
            assert!(
                matches!(
                    err(task(Some(bad), "incident_db", ann)),
                    StoreError::Invalid(_)
                ),
                "{bad}"
            );
        }
    }
}
