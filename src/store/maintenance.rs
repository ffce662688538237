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

    /// Writes a consistent, compacted copy of the database to `path` (`VACUUM INTO`); safe
    /// while other connections write. `path` must not exist. The copy is owner-only.
    pub fn backup_to(&self, path: &Path) -> Result<()> {
        let target = path
            .to_str()
            .ok_or_else(|| StoreError::Invalid("the backup path is not valid UTF-8".into()))?;
        self.read(|c| {
            c.execute("VACUUM INTO ?1", [target])?;
            Ok(())
        })?;
        super::owner_only(path);
        Ok(())
    }
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
        assert_eq!(copy.conversations(alice.id).unwrap().len(), 1);
        // An existing file is never overwritten.
        assert!(store.backup_to(&copy_path).is_err());
    }
}
