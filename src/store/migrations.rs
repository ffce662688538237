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
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        let version = index as u32 + 1;
        let migration_err = |source| StoreError::Migration { version, source };
        let transaction = connection.transaction().map_err(migration_err)?;
        transaction.execute_batch(sql).map_err(migration_err)?;
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
        Accounts, Audit, AuditEntry, AuditOutcome, Conversations, KbCatalog, Role, Store,
    };

    /// SHA-256 of each migration's text. A released migration never changes: if this
    /// fails, undo the edit and add a new migration instead (only a migration that no
    /// release has shipped yet may be edited, together with its hash here).
    const RELEASED: &[&str] = &[
        "bdc115ac07088e5eae949517d2a25269d318be331f102b22d5c578f88f81fd53",
        "248752f5293798a16e7b0d1b4912382fb0567e9285ae9b949aff4d4679b665c0",
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
        assert_eq!(store.knowledge_base("ops").unwrap().root, "/srv/ops");
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
        assert_eq!(again.conversations(alice.id).unwrap().len(), 1);
        assert_eq!(again.audit_tail(10, None).unwrap().len(), 1);
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
