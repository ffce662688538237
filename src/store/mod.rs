//! All SQL lives here. One SQLite file in WAL mode is the source of truth for everything
//! Warden stores; migrations are versioned and applied at open; writes go through one
//! connection behind a mutex with `BEGIN IMMEDIATE`. Each area is a trait implemented for
//! `Store` (knowledge-base catalogue, accounts, conversations, runs and events, audit), and
//! every method that depends on time takes `now` in seconds since the epoch. Secrets are
//! stored only as SHA-256 hashes, passwords only as argon2id hashes. Never touches HTTP or
//! SSE.

mod access;
mod accounts;
mod actions;
mod approvals;
mod audit;
mod compactions;
mod conversations;
mod diagnostics;
mod incidents;
mod kb_catalog;
mod ledger;
mod maintenance;
mod memory;
mod migrations;
mod originals;
mod passwords;
mod routes;
mod runs;
mod secrets;
mod text_enum;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};

pub use access::{
    parse_readers, validate_group_name, AccessControl, Group, Principal, Reader,
    MAX_GROUP_NAME_CHARS, MAX_READERS,
};
pub use accounts::{
    Accounts, ApiToken, NewApiToken, NewSession, Role, User, UserUpdate,
    BOOTSTRAP_TOKEN_LIFETIME_SECS, LAST_SEEN_RESOLUTION_SECS, MAX_GROUPS_PER_USER,
    MAX_TOKEN_LABEL_CHARS,
};
pub use actions::{
    decision_response, parameters_hash, ActionDecision, Actions, DecidedAction, Decision,
    NewPendingAction, PendingAction, PendingActionKind, PendingActionStatus,
    MAX_IDEMPOTENCY_KEY_CHARS,
};
pub use approvals::{ApprovalDecision, AwaitingRecovery, RecoveryApprovals};
pub use audit::{
    escape_untrusted, Audit, AuditEntry, AuditFilter, AuditOutcome, AuditPage, AuditRow,
    MAX_AUDIT_ROWS_PER_READ, SYSTEM_ACTOR,
};
pub use compactions::{
    compaction_job_id, CompactionJob, CompactionJobs, CompactionStatus, MAX_COMPACTION_ATTEMPTS,
};
pub use conversations::{
    new_message_id, CompletedTurn, Conversation, ConversationCursor, ConversationPage,
    Conversations, Message, MessageRole, NewTurn, MAX_CONVERSATIONS_PER_PAGE,
};
pub use diagnostics::{
    is_diagnostic_task_id, DiagnosticStatus, DiagnosticTask, DiagnosticTasks, NewDiagnosticTask,
    TaskUpdate, MAX_DIAGNOSTIC_TASKS_PER_READ,
};
pub use incidents::{
    is_incident_id, AlertStatus, AlertUpdate, Incident, IncidentStatus, Incidents, NewIncident,
    MAX_INCIDENTS_PER_READ,
};
pub use kb_catalog::{
    CatalogChunk, CatalogDocument, ChunkRecord, DocumentChange, KbCatalog, KnowledgeBaseRecord,
};
pub use ledger::{ClaimOutcome, LedgerState, SideEffect, ToolClaim, ToolLedger};
pub use maintenance::HealthCounts;
pub use memory::{
    ConversationMemory, Memory, MemoryItem, MemoryKind, MemoryStatus, MemoryWrite, NewMemoryItem,
    Trust, MAX_MEMORY_CHARS, MAX_MEMORY_ITEMS, MAX_MEMORY_ITEM_CHARS,
};
pub use originals::MessageOriginals;
pub use passwords::{MAX_PASSWORD_CHARS, MAX_USER_NAME_CHARS, MIN_PASSWORD_CHARS};
pub use routes::{RouteRecord, RouteRecords};
pub use runs::{Event, NewEvent, Run, RunKind, RunStatus, Runs, MAX_EVENTS_PER_READ};
pub use secrets::{secret_hash, secret_matches_hash};

/// How long a statement waits for a lock held by another connection.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database {path}: {source}")]
    Open {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("database migration {version} failed: {source}")]
    Migration {
        version: u32,
        source: rusqlite::Error,
    },
    #[error("database is from a newer Warden (schema {found}, this build knows {known})")]
    TooNew { found: u32, known: u32 },
    #[error("database error: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("{0}")]
    Conflict(String),
    #[error("{0} not found")]
    NotFound(String),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The caller passed a value the store refuses (a bad user name, a short password,
    /// malformed JSON); the message is safe to show.
    #[error("{0}")]
    Invalid(String),
    /// The caller may not do this (confirming a recovery request without the operator or
    /// admin role); the message is safe to show. HTTP answers 403.
    #[error("{0}")]
    Forbidden(String),
    /// A well-formed request that does not match what it is bound to: an idempotency key
    /// reused for another request, or a confirmation whose parameters hash is not the
    /// action's; the message is safe to show. HTTP answers 422.
    #[error("{0}")]
    Mismatch(String),
    /// The caller has used up a per-user allowance (queued runs); the message is safe to
    /// show. HTTP answers 429 with `Retry-After`.
    #[error("{0}")]
    QuotaExceeded(String),
    /// The operating system's random generator or the password hasher failed.
    #[error("cryptographic operation failed: {0}")]
    Crypto(String),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// The database: one writer connection (reads may use it too; SQLite serialises them).
pub struct Store {
    path: PathBuf,
    writer: Mutex<Connection>,
    /// Most queued chat runs one owner may have (0: no limit).
    queued_runs_limit: AtomicU32,
    /// Most runs of one owner workers take up at once (0: no limit).
    running_runs_limit: AtomicU32,
    /// Most diagnostic tasks one owner may have in progress (0: no limit).
    active_diagnostics_limit: AtomicU32,
    /// Whether a recovery its requester confirmed still needs a second person's approval.
    second_approver_required: AtomicBool,
}

impl Store {
    /// Opens (creating if needed) the database and applies pending migrations.
    pub fn open(path: &Path) -> Result<Self> {
        let open_err = |source| StoreError::Open {
            path: path.to_path_buf(),
            source,
        };
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut connection = Connection::open_with_flags(path, flags).map_err(open_err)?;
        configure(&connection).map_err(open_err)?;
        owner_only(path);
        migrations::apply(&mut connection)?;
        Ok(Self {
            path: path.to_path_buf(),
            writer: Mutex::new(connection),
            queued_runs_limit: AtomicU32::new(0),
            running_runs_limit: AtomicU32::new(0),
            active_diagnostics_limit: AtomicU32::new(0),
            second_approver_required: AtomicBool::new(true),
        })
    }

    /// Whether a recovery request needs an approver other than its requester (on unless
    /// set off): the requester's confirmation then only submits it for approval.
    pub fn set_second_approver_required(&self, required: bool) {
        self.second_approver_required
            .store(required, Ordering::Relaxed);
    }

    fn second_approver_required(&self) -> bool {
        self.second_approver_required.load(Ordering::Relaxed)
    }

    /// Sets the most queued chat runs one owner may have (`None`: no limit); a message
    /// beyond it is refused with `QuotaExceeded` and nothing is stored.
    pub fn set_queued_runs_limit(&self, limit: Option<u32>) {
        self.queued_runs_limit
            .store(limit.unwrap_or(0), Ordering::Relaxed);
    }

    fn queued_runs_limit(&self) -> Option<u32> {
        limit(&self.queued_runs_limit)
    }

    /// Sets the most runs of one owner that workers take up at once (`None`: no limit);
    /// an owner's further runs wait in the queue while other owners' runs are claimed.
    pub fn set_running_runs_limit(&self, limit: Option<u32>) {
        self.running_runs_limit
            .store(limit.unwrap_or(0), Ordering::Relaxed);
    }

    fn running_runs_limit(&self) -> Option<u32> {
        limit(&self.running_runs_limit)
    }

    /// Sets the most diagnostic tasks one owner may have in progress (`None`: no limit); a
    /// start beyond it is refused with `QuotaExceeded` and nothing is stored.
    pub fn set_active_diagnostics_limit(&self, limit: Option<u32>) {
        self.active_diagnostics_limit
            .store(limit.unwrap_or(0), Ordering::Relaxed);
    }

    fn active_diagnostics_limit(&self) -> Option<u32> {
        limit(&self.active_diagnostics_limit)
    }

    /// The per-owner limits as `/metrics` shows them (0: no limit).
    pub fn owner_limits(&self) -> Vec<(String, u64)> {
        [
            ("queued_runs_per_user", &self.queued_runs_limit),
            ("running_runs_per_user", &self.running_runs_limit),
            (
                "active_diagnostics_per_user",
                &self.active_diagnostics_limit,
            ),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_owned(), u64::from(value.load(Ordering::Relaxed))))
        .collect()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `work` in one `BEGIN IMMEDIATE` transaction, committed when it returns `Ok`.
    pub fn write<T>(&self, work: impl FnOnce(&Transaction) -> Result<T>) -> Result<T> {
        let mut connection = self.connection();
        let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let value = work(&transaction)?;
        transaction.commit()?;
        Ok(value)
    }

    /// Runs read-only `work` on the connection.
    pub fn read<T>(&self, work: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let connection = self.connection();
        work(&connection)
    }

    /// `PRAGMA integrity_check`: `Ok(())` when the database is sound, else the problems.
    pub fn integrity_check(&self) -> Result<Vec<String>> {
        self.read(|c| {
            let mut statement = c.prepare("PRAGMA integrity_check")?;
            let rows = statement.query_map([], |row| row.get::<_, String>(0))?;
            let problems: Vec<String> = rows.collect::<rusqlite::Result<_>>()?;
            Ok(problems.into_iter().filter(|p| p != "ok").collect())
        })
    }

    fn connection(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves no half-written transaction (SQLite rolls
        // it back when the transaction is dropped), so the connection is still usable.
        self.writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Makes a database file readable by its owner only (it holds password hashes and
/// conversations); SQLite gives its WAL and shared-memory files the same mode.
pub(crate) fn owner_only(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Err(err) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)) {
            tracing::warn!("cannot make {} private: {err}", path.display());
        }
    }
}

fn configure(connection: &Connection) -> rusqlite::Result<()> {
    connection.busy_timeout(BUSY_TIMEOUT)?;
    connection.pragma_update(None, "journal_mode", "WAL")?;
    connection.pragma_update(None, "synchronous", "FULL")?;
    connection.pragma_update(None, "foreign_keys", "ON")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_migrates_and_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("warden.db");
        let store = Store::open(&path).unwrap();
        assert!(store.integrity_check().unwrap().is_empty());
        let mode: String = store
            .read(|c| Ok(c.query_row("PRAGMA journal_mode", [], |r| r.get(0))?))
            .unwrap();
        assert_eq!(mode, "wal");
        drop(store);
        let again = Store::open(&path).unwrap();
        let version: u32 = again
            .read(|c| Ok(c.query_row("PRAGMA user_version", [], |r| r.get(0))?))
            .unwrap();
        assert_eq!(version, migrations::LATEST);
    }

    #[test]
    fn failed_write_rolls_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("warden.db")).unwrap();
        let result: Result<()> = store.write(|t| {
            t.execute(
                "INSERT INTO knowledge_bases (name, root, created_at) VALUES ('a', '/x', 0)",
                [],
            )?;
            Err(StoreError::Conflict("stop".into()))
        });
        assert!(result.is_err());
        let count: i64 = store
            .read(|c| Ok(c.query_row("SELECT count(*) FROM knowledge_bases", [], |r| r.get(0))?))
            .unwrap();
        assert_eq!(count, 0);
    }
}

/// A limit stored as an atomic, 0 meaning none.
fn limit(value: &AtomicU32) -> Option<u32> {
    match value.load(Ordering::Relaxed) {
        0 => None,
        limit => Some(limit),
    }
}
