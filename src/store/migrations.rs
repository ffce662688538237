//! Versioned schema migrations, applied in order at open and recorded in `user_version`.
//! Never edit a released migration: add a new one.

use rusqlite::Connection;

use super::{Result, StoreError};

/// Each entry upgrades the schema from version `index` to `index + 1`.
const MIGRATIONS: &[&str] = &[
    // 1: knowledge-base catalogue.
    r#"
    CREATE TABLE knowledge_bases (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        root TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        synced_at INTEGER
    );
    CREATE TABLE kb_documents (
        id INTEGER PRIMARY KEY,
        kb_id INTEGER NOT NULL REFERENCES knowledge_bases(id) ON DELETE CASCADE,
        path TEXT NOT NULL,
        content_hash TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        title TEXT,
        UNIQUE (kb_id, path)
    );
    CREATE TABLE kb_chunks (
        id INTEGER PRIMARY KEY,
        document_id INTEGER NOT NULL REFERENCES kb_documents(id) ON DELETE CASCADE,
        ordinal INTEGER NOT NULL,
        text TEXT NOT NULL,
        heading_path TEXT NOT NULL,
        location TEXT NOT NULL,
        tokens INTEGER NOT NULL,
        embedding BLOB NOT NULL
    );
    CREATE INDEX kb_chunks_document ON kb_chunks(document_id);
    -- One row: the index generation the catalogue reflects, and the next chunk id to hand
    -- out (ids are reserved before indexing, so an interrupted sync never reuses one).
    CREATE TABLE kb_state (
        singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
        generation INTEGER NOT NULL,
        next_chunk_id INTEGER NOT NULL
    );
    INSERT INTO kb_state (singleton, generation, next_chunk_id) VALUES (1, 0, 1);
    "#,
    // 2: accounts, conversations, runs and their events, audit.
    r#"
    CREATE TABLE users (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        role TEXT NOT NULL CHECK (role IN ('admin', 'operator', 'viewer')),
        password_hash TEXT NOT NULL,
        disabled INTEGER NOT NULL DEFAULT 0 CHECK (disabled IN (0, 1)),
        created_at INTEGER NOT NULL
    );
    -- Secrets are stored only as SHA-256 hex; the secret itself is shown once.
    CREATE TABLE api_tokens (
        id TEXT PRIMARY KEY,
        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        label TEXT NOT NULL,
        secret_hash TEXT NOT NULL UNIQUE,
        created_at INTEGER NOT NULL,
        revoked_at INTEGER
    );
    CREATE INDEX api_tokens_user ON api_tokens(user_id);
    CREATE TABLE sessions (
        id_hash TEXT PRIMARY KEY,
        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        csrf_hash TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        last_seen INTEGER NOT NULL,
        idle_secs INTEGER NOT NULL,
        expires_at INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX sessions_user ON sessions(user_id);
    -- At most one bootstrap token, and only while there are no users.
    CREATE TABLE bootstrap_token (
        singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
        secret_hash TEXT NOT NULL,
        expires_at INTEGER NOT NULL
    );
    CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        owner_id INTEGER NOT NULL REFERENCES users(id),
        title TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    );
    CREATE INDEX conversations_owner ON conversations(owner_id, updated_at);
    CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        owner_id INTEGER NOT NULL REFERENCES users(id),
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        turn INTEGER NOT NULL,
        status TEXT NOT NULL
            CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled')),
        failure_reason TEXT,
        lease_owner TEXT,
        lease_expires_at INTEGER,
        checkpoint TEXT CHECK (checkpoint IS NULL OR json_valid(checkpoint)),
        attempts INTEGER NOT NULL DEFAULT 0,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    );
    CREATE INDEX runs_status ON runs(status, created_at);
    CREATE INDEX runs_conversation ON runs(conversation_id, turn);
    -- One assistant message per turn, whatever happens to the run that writes it.
    CREATE TABLE messages (
        id TEXT PRIMARY KEY,
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        turn INTEGER NOT NULL CHECK (turn >= 1),
        role TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'system')),
        content TEXT NOT NULL,
        run_id TEXT REFERENCES runs(id),
        created_at INTEGER NOT NULL,
        UNIQUE (conversation_id, turn, role)
    );
    CREATE INDEX messages_run ON messages(run_id);
    -- Per-run gapless sequence, assigned inside the write transaction.
    CREATE TABLE run_events (
        run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        seq INTEGER NOT NULL CHECK (seq >= 1),
        type TEXT NOT NULL,
        data TEXT NOT NULL CHECK (json_valid(data)),
        created_at INTEGER NOT NULL,
        PRIMARY KEY (run_id, seq)
    ) WITHOUT ROWID;
    CREATE TABLE audit (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at INTEGER NOT NULL,
        actor TEXT NOT NULL,
        action TEXT NOT NULL,
        target TEXT,
        outcome TEXT NOT NULL CHECK (outcome IN ('success', 'failure', 'denied')),
        detail TEXT CHECK (detail IS NULL OR json_valid(detail))
    );
    CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
    BEGIN
        SELECT RAISE(ABORT, 'audit rows are append-only');
    END;
    CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
    BEGIN
        SELECT RAISE(ABORT, 'audit rows are append-only');
    END;
    "#,
    // 3: the chat agent. Runs get a kind and may exist without a conversation (diagnostic
    // tasks); route records, pending actions and their confirmations, recovery approvals,
    // the tool ledger, incidents (from alerts or by hand) and diagnostic tasks. Applied with
    // foreign keys off (see `apply`), so rebuilding `runs` keeps its events and messages.
    r#"
    CREATE TABLE runs_v3 (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL DEFAULT 'chat_turn' CHECK (kind IN ('chat_turn', 'diagnostic')),
        owner_id INTEGER NOT NULL REFERENCES users(id),
        conversation_id TEXT REFERENCES conversations(id) ON DELETE CASCADE,
        turn INTEGER,
        status TEXT NOT NULL
            CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled')),
        failure_reason TEXT,
        lease_owner TEXT,
        lease_expires_at INTEGER,
        checkpoint TEXT CHECK (checkpoint IS NULL OR json_valid(checkpoint)),
        attempts INTEGER NOT NULL DEFAULT 0,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        CHECK (kind <> 'chat_turn' OR (conversation_id IS NOT NULL AND turn IS NOT NULL))
    );
    INSERT INTO runs_v3 (id, kind, owner_id, conversation_id, turn, status, failure_reason,
                         lease_owner, lease_expires_at, checkpoint, attempts, created_at,
                         updated_at)
        SELECT id, 'chat_turn', owner_id, conversation_id, turn, status, failure_reason,
               lease_owner, lease_expires_at, checkpoint, attempts, created_at, updated_at
        FROM runs;
    DROP TABLE runs;
    ALTER TABLE runs_v3 RENAME TO runs;
    CREATE INDEX runs_status ON runs(status, created_at);
    CREATE INDEX runs_conversation ON runs(conversation_id, turn);

    -- How the agent routed a run's message: public, auditable fields only.
    CREATE TABLE route_records (
        run_id TEXT PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
        intent TEXT NOT NULL,
        confidence REAL NOT NULL CHECK (confidence >= 0 AND confidence <= 1),
        source TEXT NOT NULL CHECK (source IN ('rule', 'classifier', 'fallback')),
        mode TEXT NOT NULL,
        incident_id TEXT,
        diagnostic_task_id TEXT,
        needs_clarification INTEGER NOT NULL CHECK (needs_clarification IN (0, 1)),
        blocked_reason TEXT,
        flags TEXT NOT NULL CHECK (json_valid(flags)),
        created_at INTEGER NOT NULL
    ) WITHOUT ROWID;

    -- Citations an assistant message carries, numbered as the answer cites them.
    CREATE TABLE message_citations (
        message_id TEXT NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
        n INTEGER NOT NULL CHECK (n >= 1),
        citation TEXT NOT NULL CHECK (json_valid(citation)),
        PRIMARY KEY (message_id, n)
    ) WITHOUT ROWID;

    CREATE TABLE incidents (
        id TEXT PRIMARY KEY,
        fingerprint TEXT UNIQUE,
        title TEXT NOT NULL,
        service TEXT NOT NULL,
        severity TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('firing', 'resolved', 'open', 'closed')),
        labels TEXT NOT NULL CHECK (json_valid(labels)),
        annotations TEXT NOT NULL CHECK (json_valid(annotations)),
        starts_at INTEGER,
        ends_at INTEGER,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    );
    CREATE INDEX incidents_updated ON incidents(updated_at);

    -- A diagnostic task belongs to its owner; `report` holds the graph's structured result.
    CREATE TABLE diagnostic_tasks (
        id TEXT PRIMARY KEY,
        incident_id TEXT NOT NULL REFERENCES incidents(id),
        owner_id INTEGER NOT NULL REFERENCES users(id),
        run_id TEXT REFERENCES runs(id),
        status TEXT NOT NULL CHECK (status IN ('waiting_for_graph', 'queued', 'running',
                                                'completed', 'failed', 'cancelled')),
        report TEXT CHECK (report IS NULL OR json_valid(report)),
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    );
    CREATE INDEX diagnostic_tasks_owner ON diagnostic_tasks(owner_id, created_at);

    -- Something only a person may set going: its exact parameters are bound by their hash.
    CREATE TABLE pending_actions (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL CHECK (kind IN ('diagnostic_start', 'recovery_request')),
        target TEXT NOT NULL,
        reason TEXT NOT NULL,
        parameters TEXT NOT NULL CHECK (json_valid(parameters)),
        parameters_hash TEXT NOT NULL,
        run_id TEXT NOT NULL REFERENCES runs(id),
        owner_id INTEGER NOT NULL REFERENCES users(id),
        status TEXT NOT NULL CHECK (status IN ('pending', 'confirmed', 'rejected', 'expired',
                                                'executed', 'failed')),
        result TEXT CHECK (result IS NULL OR json_valid(result)),
        expires_at INTEGER NOT NULL,
        decided_by INTEGER REFERENCES users(id),
        decided_at INTEGER,
        created_at INTEGER NOT NULL
    );
    CREATE INDEX pending_actions_owner ON pending_actions(owner_id, created_at);
    -- Idempotency keys of confirm/reject requests: a key is bound to one action, decision
    -- and parameters hash; `response` is replayed for a repeated request.
    CREATE TABLE action_requests (
        owner_id INTEGER NOT NULL REFERENCES users(id),
        idempotency_key TEXT NOT NULL,
        action_id TEXT NOT NULL REFERENCES pending_actions(id),
        decision TEXT NOT NULL CHECK (decision IN ('confirm', 'reject')),
        parameters_hash TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('in_flight', 'done')),
        response TEXT CHECK (response IS NULL OR json_valid(response)),
        created_at INTEGER NOT NULL,
        PRIMARY KEY (owner_id, idempotency_key)
    ) WITHOUT ROWID;
    -- A confirmed recovery request: an approval on record; nothing is executed.
    CREATE TABLE recovery_approvals (
        id TEXT PRIMARY KEY,
        action_id TEXT NOT NULL UNIQUE REFERENCES pending_actions(id),
        diagnostic_task_id TEXT NOT NULL,
        approved_by INTEGER NOT NULL REFERENCES users(id),
        parameters_hash TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );

    -- Every tool call of a run, keyed by hash(run, logical step, tool, canonical arguments):
    -- a resumed run reuses a stored result instead of calling again.
    CREATE TABLE tool_ledger (
        tool_call_key TEXT PRIMARY KEY,
        run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        step INTEGER NOT NULL,
        tool TEXT NOT NULL,
        side_effect TEXT NOT NULL CHECK (side_effect IN ('read', 'write', 'dangerous')),
        state TEXT NOT NULL CHECK (state IN ('claimed', 'succeeded', 'failed', 'uncertain')),
        claimed_by TEXT NOT NULL,
        result TEXT CHECK (result IS NULL OR json_valid(result)),
        error TEXT,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX tool_ledger_run ON tool_ledger(run_id, step);
    "#,
    // 4: a diagnostic task records where its tools read (a scenario pack folder, or none)
    // and the graph version and thread that ran it.
    r#"
    ALTER TABLE diagnostic_tasks ADD COLUMN source TEXT;
    ALTER TABLE diagnostic_tasks ADD COLUMN graph_version TEXT;
    ALTER TABLE diagnostic_tasks ADD COLUMN thread_id TEXT;
    CREATE INDEX diagnostic_tasks_run ON diagnostic_tasks(run_id);
    "#,
    // 5: access control. Groups of users; who may read each knowledge base (readers are
    // `role:R` (R or a higher role), `group:G` or `user:U`; admins read everything); and
    // the device and inode the root folder had when it was added (a sync refuses a root
    // swapped for another directory).
    r#"
    CREATE TABLE groups (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        created_at INTEGER NOT NULL
    );
    CREATE TABLE user_groups (
        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        group_id INTEGER NOT NULL REFERENCES groups(id) ON DELETE CASCADE,
        PRIMARY KEY (user_id, group_id)
    ) WITHOUT ROWID;
    CREATE INDEX user_groups_group ON user_groups(group_id);
    CREATE TABLE kb_readers (
        kb_id INTEGER NOT NULL REFERENCES knowledge_bases(id) ON DELETE CASCADE,
        reader TEXT NOT NULL CHECK (reader GLOB 'role:?*' OR reader GLOB 'group:?*' OR reader GLOB 'user:?*'),
        PRIMARY KEY (kb_id, reader)
    ) WITHOUT ROWID;
    -- Knowledge bases from before access control stay readable by every user.
    INSERT INTO kb_readers (kb_id, reader) SELECT id, 'role:viewer' FROM knowledge_bases;
    ALTER TABLE knowledge_bases ADD COLUMN root_dev INTEGER;
    ALTER TABLE knowledge_bases ADD COLUMN root_ino INTEGER;
    "#,
    // 6: fair scheduling. When each owner last had a run claimed, as a counter value:
    // queued runs are claimed from the owner served least recently (round-robin across
    // users), oldest first within one owner.
    r#"
    CREATE TABLE run_claims (
        owner_id INTEGER PRIMARY KEY REFERENCES users(id) ON DELETE CASCADE,
        last_claim INTEGER NOT NULL
    );
    CREATE INDEX runs_owner_status ON runs(owner_id, status);
    "#,
    // 7: trace ids. The request that created a run, and the request or run an audit row
    // was written for, carry its W3C trace id (null for older rows and for actions taken
    // outside any request).
    r#"
    ALTER TABLE runs ADD COLUMN trace_id TEXT;
    ALTER TABLE audit ADD COLUMN trace_id TEXT;
    "#,
    // 8: structured memory. One state row per conversation with memory: the version a
    // compaction must name to replace the items (compare-and-set), the newest message the
    // items cover (raw messages are never deleted), and whether the last compaction was
    // degraded. Items are of six kinds, each with its source message and trust.
    r#"
    CREATE TABLE conversation_memory (
        conversation_id TEXT PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE,
        version INTEGER NOT NULL CHECK (version >= 0),
        through_message_id TEXT REFERENCES messages(id),
        status TEXT NOT NULL CHECK (status IN ('ok', 'degraded')),
        degraded_reason TEXT,
        updated_at INTEGER NOT NULL
    );
    CREATE TABLE memory_items (
        id TEXT PRIMARY KEY,
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        kind TEXT NOT NULL CHECK (kind IN ('user_goals', 'confirmed_facts', 'preferences',
                                           'decisions', 'open_tasks', 'resource_refs')),
        text TEXT NOT NULL,
        source_message_id TEXT NOT NULL REFERENCES messages(id),
        citation_id TEXT,
        trust TEXT NOT NULL CHECK (trust IN ('user_stated', 'user_confirmed', 'tool_verified',
                                             'assistant_proposed')),
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        CHECK (kind != 'confirmed_facts' OR trust IN ('user_confirmed', 'tool_verified'))
    );
    CREATE INDEX memory_items_conversation ON memory_items(conversation_id, created_at);
    "#,
    // 9: background compaction jobs. One row per conversation under a stable id: queued
    // when its context fills up, claimed under a lease (a job whose holder died is claimed
    // again), retried at most three times, then failed until scheduled anew.
    r#"
    CREATE TABLE compaction_jobs (
        id TEXT PRIMARY KEY,
        conversation_id TEXT NOT NULL UNIQUE REFERENCES conversations(id) ON DELETE CASCADE,
        owner_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        status TEXT NOT NULL CHECK (status IN ('queued', 'running', 'done', 'failed')),
        attempts INTEGER NOT NULL CHECK (attempts >= 0),
        holder TEXT,
        lease_until INTEGER,
        not_before INTEGER NOT NULL,
        last_error TEXT,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    );
    CREATE INDEX compaction_jobs_queue ON compaction_jobs(status, not_before);
    "#,
    // 10: a recovery request its requester confirmed waits for a second person's approval
    // (`awaiting_approval`; the table is rebuilt to widen its status check), and the
    // original text of masked messages whose authors asked to keep it.
    r#"
    CREATE TABLE pending_actions_v10 (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL CHECK (kind IN ('diagnostic_start', 'recovery_request')),
        target TEXT NOT NULL,
        reason TEXT NOT NULL,
        parameters TEXT NOT NULL CHECK (json_valid(parameters)),
        parameters_hash TEXT NOT NULL,
        run_id TEXT NOT NULL REFERENCES runs(id),
        owner_id INTEGER NOT NULL REFERENCES users(id),
        status TEXT NOT NULL CHECK (status IN ('pending', 'awaiting_approval', 'confirmed',
                                                'rejected', 'expired', 'executed', 'failed')),
        result TEXT CHECK (result IS NULL OR json_valid(result)),
        expires_at INTEGER NOT NULL,
        decided_by INTEGER REFERENCES users(id),
        decided_at INTEGER,
        created_at INTEGER NOT NULL
    );
    INSERT INTO pending_actions_v10 SELECT id, kind, target, reason, parameters,
        parameters_hash, run_id, owner_id, status, result, expires_at, decided_by, decided_at,
        created_at FROM pending_actions;
    DROP TABLE pending_actions;
    ALTER TABLE pending_actions_v10 RENAME TO pending_actions;
    CREATE INDEX pending_actions_owner ON pending_actions(owner_id, created_at);
    CREATE INDEX pending_actions_status ON pending_actions(status, created_at);

    -- The unmasked text of a message whose secrets were masked, kept only when its author
    -- asked: read by the conversation's owner alone, never by the model, memory or audit.
    CREATE TABLE message_originals (
        message_id TEXT PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE,
        content TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );
    "#,
];

/// The schema version this build creates.
pub const LATEST: u32 = MIGRATIONS.len() as u32;

pub fn apply(connection: &mut Connection) -> Result<()> {
    let current: u32 = connection.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    if current > LATEST {
        return Err(StoreError::TooNew {
            found: current,
            known: LATEST,
        });
    }
    if current == LATEST {
        return Ok(());
    }
    // SQLite's way to rebuild a table: with foreign keys off (dropping a parent table
    // would otherwise cascade into its children), checked before each commit.
    let enforced: bool = connection.query_row("PRAGMA foreign_keys", [], |row| row.get(0))?;
    connection.pragma_update(None, "foreign_keys", "OFF")?;
    let applied = apply_from(connection, current);
    if enforced {
        connection.pragma_update(None, "foreign_keys", "ON")?;
    }
    applied
}

fn apply_from(connection: &mut Connection, current: u32) -> Result<()> {
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        let version = index as u32 + 1;
        let migration_err = |source| StoreError::Migration { version, source };
        let transaction = connection.transaction().map_err(migration_err)?;
        transaction.execute_batch(sql).map_err(migration_err)?;
        let violations: i64 = transaction
            .query_row("SELECT COUNT(*) FROM pragma_foreign_key_check", [], |r| {
                r.get(0)
            })
            .map_err(migration_err)?;
        if violations > 0 {
            return Err(StoreError::Corrupt(format!(
                "migration {version} would leave {violations} broken references"
            )));
        }
        transaction
            .pragma_update(None, "user_version", version)
            .map_err(migration_err)?;
        transaction.commit().map_err(migration_err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{
        Accounts, Audit, AuditEntry, AuditOutcome, Conversations, KbCatalog, Role, Runs, Store,
    };

    /// SHA-256 of each migration's text. A released migration never changes: if this
    /// fails, undo the edit and add a new migration instead (only a migration that no
    /// release has shipped yet may be edited, together with its hash here).
    const RELEASED: &[&str] = &[
        "bdc115ac07088e5eae949517d2a25269d318be331f102b22d5c578f88f81fd53",
        "248752f5293798a16e7b0d1b4912382fb0567e9285ae9b949aff4d4679b665c0",
        "9c15f304892db06a5cb01593d3d042f236be7147e07a72ba71fa18b5ac041450",
        "34c8a57f1b4eb8ddc80a64b6d4332760308f203f4deb5dc9d6bf78cfb7796bdd",
        "173f134b4c73cdd6297d2ac8a3acba36923b4573af819918d6d6540cb93e3a18",
        "17ab856a594c5c8c187916b8d14d69b99f1b6fa548ed65bc69e0a523f032e695",
        "17ee9b5dd174b87cc8eba7a38d448bf610a6c3197e4a9d7b7a225b0ee41c9be0",
        "70a4f852d6aa40d60727c1376eee9b25c111390f068b8ac46c35533446fbccb2",
        "5e6c276b8645391c75117152ee11369a94b0d9d1bbbfc6aa86e2c1567923e5f8",
        "ae472a2edbb275028672702cc8584458cd3b4c319e3defa5d4c4963d716b9841",
    ];

    #[test]
    fn released_migrations_are_unchanged() {
        let hashes: Vec<String> = MIGRATIONS
            .iter()
            .map(|sql| crate::store::secret_hash(sql))
            .collect();
        assert_eq!(hashes, RELEASED);
    }

    #[test]
    fn a_version_1_database_upgrades_and_keeps_its_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        {
            let connection = Connection::open(&path).unwrap();
            connection.execute_batch(MIGRATIONS[0]).unwrap();
            connection.pragma_update(None, "user_version", 1).unwrap();
            connection
                .execute(
                    "INSERT INTO knowledge_bases (name, root, created_at) VALUES ('ops', '/srv/ops', 1)",
                    [],
                )
                .unwrap();
        }
        let store = Store::open(&path).unwrap();
        let version: u32 = store
            .read(|c| Ok(c.query_row("PRAGMA user_version", [], |r| r.get(0))?))
            .unwrap();
        assert_eq!(version, LATEST);
        let ops = store.knowledge_base("ops").unwrap();
        assert_eq!(ops.root, "/srv/ops");
        // Knowledge bases from before access control stay readable by everyone.
        assert_eq!(ops.readers, ["role:viewer"]);
        assert!(store.integrity_check().unwrap().is_empty());

        let alice = store
            .create_user("alice", Role::Admin, "password1", 2)
            .unwrap();
        let conversation = store.create_conversation(alice.id, "first", 3).unwrap();
        store
            .add_user_message_with_run(alice.id, &conversation.id, "hello", 4)
            .unwrap();
        let entry = AuditEntry {
            actor: "alice",
            action: "user.create",
            target: Some("alice"),
            outcome: AuditOutcome::Success,
            detail: None,
        };
        store.record(&entry, 5).unwrap();
        drop(store);
        // Reopening at the latest version applies nothing and finds everything.
        let again = Store::open(&path).unwrap();
        assert_eq!(
            again
                .conversations(alice.id, 50, None)
                .unwrap()
                .conversations
                .len(),
            1
        );
        assert_eq!(again.audit_tail(10, None).unwrap().len(), 1);
    }

    #[test]
    fn a_version_2_database_keeps_its_runs_events_and_messages_through_the_runs_rebuild() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        {
            let connection = Connection::open(&path).unwrap();
            connection
                .pragma_update(None, "foreign_keys", "ON")
                .unwrap();
            connection.execute_batch(MIGRATIONS[0]).unwrap();
            connection.execute_batch(MIGRATIONS[1]).unwrap();
            connection.pragma_update(None, "user_version", 2).unwrap();
            connection
                .execute_batch(
                    "INSERT INTO users (id, name, role, password_hash, created_at)
                         VALUES (1, 'ann', 'admin', 'x', 1);
                     INSERT INTO conversations (id, owner_id, title, created_at, updated_at)
                         VALUES ('c1', 1, 't', 1, 1);
                     INSERT INTO runs (id, owner_id, conversation_id, turn, status, created_at, updated_at)
                         VALUES ('r1', 1, 'c1', 1, 'completed', 1, 1);
                     INSERT INTO messages (id, conversation_id, turn, role, content, run_id, created_at)
                         VALUES ('m1', 'c1', 1, 'user', 'hi', 'r1', 1);
                     INSERT INTO run_events (run_id, seq, type, data, created_at)
                         VALUES ('r1', 1, 'run.started', '{}', 1), ('r1', 2, 'run.completed', '{}', 1);",
                )
                .unwrap();
        }
        let store = Store::open(&path).unwrap();
        let run = store.run(1, "r1").unwrap();
        assert_eq!(run.kind, crate::store::RunKind::ChatTurn);
        assert_eq!(run.conversation_id.as_deref(), Some("c1"));
        assert_eq!(store.events_after(1, "r1", 0, 10).unwrap().len(), 2);
        assert_eq!(store.conversation(1, "c1").unwrap().1.len(), 1);
        assert!(store.integrity_check().unwrap().is_empty());
        let foreign_keys: i64 = store
            .read(|c| Ok(c.query_row("PRAGMA foreign_keys", [], |r| r.get(0))?))
            .unwrap();
        assert_eq!(
            foreign_keys, 1,
            "foreign keys are enforced again after migrating"
        );
    }

    #[test]
    fn a_version_9_database_keeps_its_actions_and_approvals_through_the_actions_rebuild() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        {
            let connection = Connection::open(&path).unwrap();
            connection
                .pragma_update(None, "foreign_keys", "ON")
                .unwrap();
            for sql in &MIGRATIONS[..9] {
                connection.execute_batch(sql).unwrap();
            }
            connection.pragma_update(None, "user_version", 9).unwrap();
            connection
                .execute_batch(
                    "INSERT INTO users (id, name, role, password_hash, created_at)
                         VALUES (1, 'ann', 'operator', 'x', 1);
                     INSERT INTO conversations (id, owner_id, title, created_at, updated_at)
                         VALUES ('c1', 1, 't', 1, 1);
                     INSERT INTO runs (id, kind, owner_id, conversation_id, turn, status,
                                       created_at, updated_at)
                         VALUES ('r1', 'chat_turn', 1, 'c1', 1, 'completed', 1, 1);
                     INSERT INTO pending_actions (id, kind, target, reason, parameters,
                             parameters_hash, run_id, owner_id, status, result, expires_at,
                             decided_by, decided_at, created_at)
                         VALUES ('act_1', 'recovery_request', 't', 'r', '{}', 'h', 'r1', 1,
                                 'confirmed', '{\"approval_id\":\"approval_1\"}', 99, 1, 5, 2);
                     INSERT INTO recovery_approvals (id, action_id, diagnostic_task_id,
                             approved_by, parameters_hash, created_at)
                         VALUES ('approval_1', 'act_1', 'd1', 1, 'h', 5);",
                )
                .unwrap();
        }
        let store = Store::open(&path).unwrap();
        use crate::store::Actions;
        let action = store.pending_action(1, "act_1").unwrap();
        assert_eq!(
            (action.status, action.decided_at, action.expires_at),
            (crate::store::PendingActionStatus::Confirmed, Some(5), 99)
        );
        assert_eq!(store.recovery_approvals_count().unwrap(), 1);
        assert!(store.integrity_check().unwrap().is_empty());
        let broken: i64 = store
            .read(|c| {
                Ok(
                    c.query_row("SELECT COUNT(*) FROM pragma_foreign_key_check", [], |r| {
                        r.get(0)
                    })?,
                )
            })
            .unwrap();
        assert_eq!(broken, 0);
    }

    #[test]
    fn a_database_from_a_newer_warden_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        Connection::open(&path)
            .unwrap()
            .pragma_update(None, "user_version", LATEST + 1)
            .unwrap();
        assert!(matches!(Store::open(&path), Err(StoreError::TooNew { .. })));
    }
}
