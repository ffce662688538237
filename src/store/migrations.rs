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
