//! Whole-database maintenance: row counts for `warden doctor` and an online backup.

use std::path::Path;

use super::{Result, Store, StoreError};

/// What `warden doctor` reports besides the integrity check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCounts {
    pub schema_version: u32,
    pub users: u64,
    pub conversations: u64,
    /// `(status, count)` for every run status present.
    pub runs_by_status: Vec<(String, u64)>,
}

impl Store {
    pub fn health_counts(&self) -> Result<HealthCounts> {
        self.read(|c| {
            let count = |sql: &str| {
                c.query_row(sql, [], |r| r.get::<_, i64>(0))
                    .map(|n| n.max(0) as u64)
            };
            let mut statement =
                c.prepare("SELECT status, COUNT(*) FROM runs GROUP BY status ORDER BY status")?;
            let runs_by_status = statement
                .query_map([], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?.max(0) as u64))
                })?
                .collect::<rusqlite::Result<_>>()?;
            Ok(HealthCounts {
                schema_version: c.query_row("PRAGMA user_version", [], |r| r.get(0))?,
                users: count("SELECT COUNT(*) FROM users")?,
                conversations: count("SELECT COUNT(*) FROM conversations")?,
                runs_by_status,
            })
        })
    }

    /// What `/metrics` reports from the store: runs by kind and status, and documents and
    /// chunks per knowledge base.
    pub fn metrics_snapshot(&self) -> Result<crate::metrics::Snapshot> {
        self.read(|c| {
            let count = |r: &rusqlite::Row<'_>, i| r.get::<_, i64>(i).map(|n| n.max(0) as u64);
            let mut statement = c.prepare(
                "SELECT kind, status, COUNT(*) FROM runs GROUP BY kind, status ORDER BY kind, status",
            )?;
            let runs = statement
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, count(r, 2)?)))?
                .collect::<rusqlite::Result<_>>()?;
            let mut statement = c.prepare(
                "SELECT kb.name,
                        (SELECT COUNT(*) FROM kb_documents d WHERE d.kb_id = kb.id),
                        (SELECT COUNT(*) FROM kb_chunks ch JOIN kb_documents d
                            ON d.id = ch.document_id WHERE d.kb_id = kb.id)
                 FROM knowledge_bases kb ORDER BY kb.name",
            )?;
            let knowledge_bases = statement
                .query_map([], |r| Ok((r.get(0)?, count(r, 1)?, count(r, 2)?)))?
                .collect::<rusqlite::Result<_>>()?;
            let most = |sql: &str| c.query_row(sql, [], |r| count(r, 0));
            let busiest_user = vec![
                (
                    "running_runs".to_owned(),
                    most(
                        "SELECT COALESCE(MAX(n), 0) FROM (SELECT COUNT(*) AS n FROM runs
                         WHERE status = 'running' GROUP BY owner_id)",
                    )?,
                ),
                (
                    "queued_runs".to_owned(),
                    most(
                        "SELECT COALESCE(MAX(n), 0) FROM (SELECT COUNT(*) AS n FROM runs
                         WHERE status = 'queued' GROUP BY owner_id)",
                    )?,
                ),
                (
                    "active_diagnostics".to_owned(),
                    most(
                        "SELECT COALESCE(MAX(n), 0) FROM (SELECT COUNT(*) AS n
                         FROM diagnostic_tasks
                         WHERE status IN ('waiting_for_graph', 'queued', 'running')
                         GROUP BY owner_id)",
                    )?,
                ),
            ];
            Ok(crate::metrics::Snapshot {
                runs,
                knowledge_bases,
                model_queues: Vec::new(),
                owner_limits: self.owner_limits(),
                busiest_user,
            })
        })
    }

    /// Writes a consistent, compacted copy of the database to `path` (`VACUUM INTO`); safe
    /// while other connections write. `path` must not exist. The copy is owner-only.
    pub fn backup_to(&self, path: &Path) -> Result<()> {
        let target = path
            .to_str()
            .ok_or_else(|| StoreError::Invalid("the backup path is not valid UTF-8".into()))?;
        // The copy holds password hashes and conversations: it is created owner-only and
        // empty (which VACUUM INTO accepts) before a byte is written, and never replaces a
        // file that exists.
        create_private_empty(path)?;
        let copied = self.read(|c| {
            c.execute("VACUUM INTO ?1", [target])?;
            Ok(())
        });
        if copied.is_err() {
            let _ = std::fs::remove_file(path);
        }
        copied
    }
}

/// Creates `path` as an empty file only its owner can read; fails if it exists.
fn create_private_empty(path: &Path) -> Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path).map(drop).map_err(|err| {
        StoreError::Invalid(format!(
            "cannot create the backup {}: {err}",
            path.display()
        ))
    })
}

#[cfg(test)]
mod tests {
    use crate::store::{Accounts, Conversations, Role, Store};

    #[test]
    fn a_backup_holds_the_data_and_counts_add_up() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("w.db")).unwrap();
        let alice = store
            .create_user("alice", Role::Admin, "password1", 1)
            .unwrap();
        let conversation = store.create_conversation(alice.id, "c", 2).unwrap();
        store
            .add_user_message_with_run(alice.id, &conversation.id, "hi", 3)
            .unwrap();
        let counts = store.health_counts().unwrap();
        assert_eq!((counts.users, counts.conversations), (1, 1));
        assert_eq!(counts.runs_by_status, [("queued".to_owned(), 1)]);

        let copy_path = dir.path().join("copy.db");
        store.backup_to(&copy_path).unwrap();
        let copy = Store::open(&copy_path).unwrap();
        assert!(copy.integrity_check().unwrap().is_empty());
        assert_eq!(
            copy.conversations(alice.id, 50, None)
                .unwrap()
                .conversations
                .len(),
            1
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&copy_path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // An existing file is never overwritten.
        let size = std::fs::metadata(&copy_path).unwrap().len();
        assert!(store.backup_to(&copy_path).is_err());
        assert_eq!(std::fs::metadata(&copy_path).unwrap().len(), size);
    }
}
