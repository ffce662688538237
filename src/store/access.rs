//! Access control: groups and their members, the readers of each knowledge base, and the
//! one rule that decides whether a user may read a knowledge base. Readers are written
//! `role:R` (users with role R or a higher one), `group:G` or `user:U`; admins read every
//! knowledge base; a knowledge base with no readers is readable by admins only.

use std::str::FromStr;

use rusqlite::{params, OptionalExtension};

use super::kb_catalog::KbCatalog;
use super::{Accounts, KnowledgeBaseRecord, Result, Role, Store, StoreError};

/// Longest group name.
pub const MAX_GROUP_NAME_CHARS: usize = 64;
/// Most readers one knowledge base may list.
pub const MAX_READERS: usize = 100;

/// Who may read a knowledge base.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reader {
    Role(Role),
    Group(String),
    User(String),
}

impl FromStr for Reader {
    type Err = StoreError;

    fn from_str(text: &str) -> Result<Self> {
        let text = text.trim();
        let invalid = || {
            StoreError::Invalid(format!(
                "reader `{text}` must be role:NAME, group:NAME or user:NAME"
            ))
        };
        let (kind, name) = text.split_once(':').ok_or_else(invalid)?;
        match kind {
            "role" => Ok(Reader::Role(name.parse()?)),
            "group" => {
                validate_group_name(name)?;
                Ok(Reader::Group(name.to_owned()))
            }
            "user" if !name.is_empty() && name.chars().count() <= super::MAX_USER_NAME_CHARS => {
                Ok(Reader::User(name.to_owned()))
            }
            _ => Err(invalid()),
        }
    }
}

impl std::fmt::Display for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reader::Role(role) => write!(f, "role:{role}"),
            Reader::Group(name) => write!(f, "group:{name}"),
            Reader::User(name) => write!(f, "user:{name}"),
        }
    }
}

/// Parses a comma-separated list of readers (`role:operator,group:ops`); empty means none.
pub fn parse_readers(list: &str) -> Result<Vec<Reader>> {
    list.split(',')
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .map(str::parse)
        .collect()
}

/// Group names: letters, digits, `.`, `_` and `-`.
pub fn validate_group_name(name: &str) -> Result<()> {
    let valid = !name.is_empty()
        && name.chars().count() <= MAX_GROUP_NAME_CHARS
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if valid {
        Ok(())
    } else {
        Err(StoreError::Invalid(format!(
            "group name `{name}` must be 1–{MAX_GROUP_NAME_CHARS} letters, digits, `.`, `_` or `-`"
        )))
    }
}

/// A user as access control sees them.
#[derive(Debug, Clone, PartialEq)]
pub struct Principal {
    pub name: String,
    pub role: Role,
    pub groups: Vec<String>,
}

fn rank(role: Role) -> u8 {
    match role {
        Role::Viewer => 0,
        Role::Operator => 1,
        Role::Admin => 2,
    }
}

impl Principal {
    /// Whether this user may read a knowledge base with these readers.
    pub fn may_read(&self, readers: &[String]) -> bool {
        self.role == Role::Admin
            || readers
                .iter()
                .filter_map(|r| r.parse::<Reader>().ok())
                .any(|reader| match reader {
                    Reader::Role(role) => rank(self.role) >= rank(role),
                    Reader::Group(group) => self.groups.contains(&group),
                    Reader::User(name) => name == self.name,
                })
    }
}

/// A group and its members' names.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Group {
    pub name: String,
    pub members: Vec<String>,
    pub created_at: i64,
}

pub trait AccessControl {
    fn create_group(&self, name: &str, now: i64) -> Result<Group>;
    fn groups(&self) -> Result<Vec<Group>>;
    /// Removes the group, its memberships and every `group:NAME` reader, in one
    /// transaction (a group made later under the same name grants nothing).
    fn remove_group(&self, name: &str) -> Result<()>;
    /// Adding a member twice, or removing a non-member, changes nothing and succeeds.
    fn add_to_group(&self, user: &str, group: &str) -> Result<()>;
    fn remove_from_group(&self, user: &str, group: &str) -> Result<()>;
    /// The user's groups, sorted.
    fn groups_of(&self, user_id: i64) -> Result<Vec<String>>;
    fn principal(&self, user_id: i64) -> Result<Principal>;
    /// Replaces a knowledge base's readers; every named group and user must exist.
    fn set_kb_readers(&self, kb: &str, readers: &[Reader]) -> Result<KnowledgeBaseRecord>;
    /// The names of the knowledge bases this user may read, sorted.
    fn readable_kbs(&self, principal: &Principal) -> Result<Vec<String>>;
    /// What a search on `user_id`'s behalf may read: `None` (every knowledge base) for an
    /// admin, else the readable names. Nothing when access cannot be determined (fails
    /// closed): the chat agent and the diagnostic graph both scope their searches by it.
    fn search_scope(&self, user_id: i64) -> Option<Vec<String>> {
        let scope = self.principal(user_id).and_then(|principal| {
            if principal.role == Role::Admin {
                Ok(None)
            } else {
                self.readable_kbs(&principal).map(Some)
            }
        });
        scope.unwrap_or_else(|err| {
            tracing::error!(user_id, "cannot resolve knowledge access: {err}");
            Some(Vec::new())
        })
    }
}

impl AccessControl for Store {
    fn create_group(&self, name: &str, now: i64) -> Result<Group> {
        validate_group_name(name)?;
        self.write(|t| {
            let exists: Option<i64> = t
                .query_row("SELECT id FROM groups WHERE name = ?1", [name], |r| {
                    r.get(0)
                })
                .optional()?;
            if exists.is_some() {
                return Err(StoreError::Conflict(format!(
                    "group `{name}` already exists"
                )));
            }
            t.execute(
                "INSERT INTO groups (name, created_at) VALUES (?1, ?2)",
                params![name, now],
            )?;
            Ok(())
        })?;
        Ok(Group {
            name: name.to_owned(),
            members: Vec::new(),
            created_at: now,
        })
    }

    fn groups(&self) -> Result<Vec<Group>> {
        self.read(|c| {
            let mut statement = c.prepare(
                "SELECT g.name, g.created_at, \
                 (SELECT group_concat(u.name, char(10)) FROM user_groups m JOIN users u ON u.id = m.user_id WHERE m.group_id = g.id) \
                 FROM groups g ORDER BY g.name",
            )?;
            let rows = statement.query_map([], |r| {
                let joined: Option<String> = r.get(2)?;
                let mut members: Vec<String> = joined
                    .map(|j| j.split('\n').map(str::to_owned).collect())
                    .unwrap_or_default();
                members.sort();
                Ok(Group {
                    name: r.get(0)?,
                    created_at: r.get(1)?,
                    members,
                })
            })?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    fn remove_group(&self, name: &str) -> Result<()> {
        self.write(|t| {
            let removed = t.execute("DELETE FROM groups WHERE name = ?1", [name])?;
            if removed == 0 {
                return Err(StoreError::NotFound(format!("group `{name}`")));
            }
            t.execute(
                "DELETE FROM kb_readers WHERE reader = ?1",
                [Reader::Group(name.to_owned()).to_string()],
            )?;
            Ok(())
        })
    }

    fn add_to_group(&self, user: &str, group: &str) -> Result<()> {
        let user = self.user_by_name(user)?;
        self.write(|t| {
            let group_id = group_id(t, group)?;
            t.execute(
                "INSERT OR IGNORE INTO user_groups (user_id, group_id) VALUES (?1, ?2)",
                params![user.id, group_id],
            )?;
            Ok(())
        })
    }

    fn remove_from_group(&self, user: &str, group: &str) -> Result<()> {
        let user = self.user_by_name(user)?;
        self.write(|t| {
            let group_id = group_id(t, group)?;
            t.execute(
                "DELETE FROM user_groups WHERE user_id = ?1 AND group_id = ?2",
                params![user.id, group_id],
            )?;
            Ok(())
        })
    }

    fn groups_of(&self, user_id: i64) -> Result<Vec<String>> {
        self.read(|c| {
            let mut statement = c.prepare(
                "SELECT g.name FROM user_groups m JOIN groups g ON g.id = m.group_id \
                 WHERE m.user_id = ?1 ORDER BY g.name",
            )?;
            let rows = statement.query_map([user_id], |r| r.get(0))?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    fn principal(&self, user_id: i64) -> Result<Principal> {
        let user = self.user_by_id(user_id)?;
        Ok(Principal {
            name: user.name,
            role: user.role,
            groups: self.groups_of(user_id)?,
        })
    }

    fn set_kb_readers(&self, kb: &str, readers: &[Reader]) -> Result<KnowledgeBaseRecord> {
        if readers.len() > MAX_READERS {
            return Err(StoreError::Invalid(format!(
                "a knowledge base lists at most {MAX_READERS} readers"
            )));
        }
        self.write(|t| {
            let kb_id: i64 = t
                .query_row(
                    "SELECT id FROM knowledge_bases WHERE name = ?1",
                    [kb],
                    |r| r.get(0),
                )
                .optional()?
                .ok_or_else(|| StoreError::NotFound(format!("knowledge base `{kb}`")))?;
            for reader in readers {
                match reader {
                    Reader::Group(name) => {
                        group_id(t, name)?;
                    }
                    Reader::User(name) => {
                        let found: Option<i64> = t
                            .query_row("SELECT id FROM users WHERE name = ?1", [name], |r| r.get(0))
                            .optional()?;
                        if found.is_none() {
                            return Err(StoreError::NotFound(format!("user `{name}`")));
                        }
                    }
                    Reader::Role(_) => {}
                }
            }
            t.execute("DELETE FROM kb_readers WHERE kb_id = ?1", [kb_id])?;
            for reader in readers {
                t.execute(
                    "INSERT OR IGNORE INTO kb_readers (kb_id, reader) VALUES (?1, ?2)",
                    params![kb_id, reader.to_string()],
                )?;
            }
            Ok(())
        })?;
        self.knowledge_base(kb)
    }

    fn readable_kbs(&self, principal: &Principal) -> Result<Vec<String>> {
        Ok(self
            .knowledge_bases()?
            .into_iter()
            .filter(|kb| principal.may_read(&kb.readers))
            .map(|kb| kb.name)
            .collect())
    }
}

fn group_id(t: &rusqlite::Connection, name: &str) -> Result<i64> {
    t.query_row("SELECT id FROM groups WHERE name = ?1", [name], |r| {
        r.get(0)
    })
    .optional()?
    .ok_or_else(|| StoreError::NotFound(format!("group `{name}`")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(name: &str, role: Role, groups: &[&str]) -> Principal {
        Principal {
            name: name.into(),
            role,
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        }
    }

    #[test]
    fn readers_parse_and_print_in_one_form() {
        let readers = parse_readers(" role:operator, group:ops,user:alice ,").unwrap();
        let printed: Vec<String> = readers.iter().map(Reader::to_string).collect();
        assert_eq!(printed, ["role:operator", "group:ops", "user:alice"]);
        for bad in [
            "role:root",
            "team:x",
            "group:",
            "group:a b",
            "alice",
            "user:",
        ] {
            assert!(bad.parse::<Reader>().is_err(), "{bad}");
        }
        assert!(parse_readers("").unwrap().is_empty());
    }

    #[test]
    fn roles_include_higher_roles_and_admins_read_everything() {
        let viewer = principal("vic", Role::Viewer, &["hr"]);
        let operator = principal("olga", Role::Operator, &[]);
        let admin = principal("ada", Role::Admin, &[]);
        let operators = vec!["role:operator".to_owned()];
        assert!(!viewer.may_read(&operators));
        assert!(operator.may_read(&operators));
        assert!(admin.may_read(&operators));
        assert!(admin.may_read(&[]));
        assert!(!operator.may_read(&[]));
        assert!(viewer.may_read(&["group:hr".to_owned()]));
        assert!(!operator.may_read(&["group:hr".to_owned(), "user:vic".to_owned()]));
        assert!(viewer.may_read(&["user:vic".to_owned()]));
    }

    #[test]
    fn groups_memberships_and_readers_are_stored_and_removed_together() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("w.db")).unwrap();
        let vic = store
            .create_user("vic", Role::Viewer, "password1", 0)
            .unwrap();
        store.create_kb("hr", "/srv/hr", 0).unwrap();
        store.create_group("hr-team", 1).unwrap();
        assert!(matches!(
            store.create_group("hr-team", 1),
            Err(StoreError::Conflict(_))
        ));
        store.add_to_group("vic", "hr-team").unwrap();
        store.add_to_group("vic", "hr-team").unwrap();
        assert_eq!(store.groups().unwrap()[0].members, ["vic"]);
        // New knowledge bases: admins only.
        let vic_p = store.principal(vic.id).unwrap();
        assert!(store.readable_kbs(&vic_p).unwrap().is_empty());
        let readers = parse_readers("group:hr-team").unwrap();
        let kb = store.set_kb_readers("hr", &readers).unwrap();
        assert_eq!(kb.readers, ["group:hr-team"]);
        assert_eq!(store.readable_kbs(&vic_p).unwrap(), ["hr"]);
        // Unknown groups and users are refused; nothing changes.
        for bad in ["group:nobody", "user:nobody"] {
            let readers = parse_readers(bad).unwrap();
            assert!(matches!(
                store.set_kb_readers("hr", &readers),
                Err(StoreError::NotFound(_))
            ));
        }
        assert_eq!(
            store.knowledge_base("hr").unwrap().readers,
            ["group:hr-team"]
        );
        // Removing the group removes what it granted, also for a later namesake.
        store.remove_group("hr-team").unwrap();
        assert!(store.knowledge_base("hr").unwrap().readers.is_empty());
        store.create_group("hr-team", 2).unwrap();
        let vic_p = store.principal(vic.id).unwrap();
        assert!(vic_p.groups.is_empty());
        assert!(store.readable_kbs(&vic_p).unwrap().is_empty());
    }
}
