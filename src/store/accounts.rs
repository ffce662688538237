//! Accounts: users with a role and an argon2id password hash, API tokens, browser sessions
//! (idle and absolute timeouts, a CSRF token each) and the one-time bootstrap token that
//! creates the first admin. Every secret is returned to the caller once and stored only as
//! its SHA-256; disabling a user ends their sessions and revokes their tokens in the same
//! transaction, and so does a password reset end their sessions. A user's changes (role,
//! disabled, group memberships) are applied together by `update_user`, in one transaction.

use rusqlite::{params, Connection, OptionalExtension, Row};

use super::passwords;
use super::secrets::{self, secret_hash, SECRET_BYTES};
use super::text_enum::text_enum;
use super::{Result, Store, StoreError};

/// How long a bootstrap token stays valid.
pub const BOOTSTRAP_TOKEN_LIFETIME_SECS: i64 = 24 * 60 * 60;

/// A session's `last_seen` moves only when it is at least this old, so a busy session does
/// not write on every request; idle timeouts are this many seconds coarse.
pub const LAST_SEEN_RESOLUTION_SECS: i64 = 10;

/// The prefix of every API token secret.
const TOKEN_SECRET_PREFIX: &str = "wdn_";

/// Longest API token label.
pub const MAX_TOKEN_LABEL_CHARS: usize = 100;
/// Most groups one user may belong to through `update_user`.
pub const MAX_GROUPS_PER_USER: usize = 100;

/// What a user may do; the HTTP layer maps roles to permissions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Admin,
    Operator,
    Viewer,
}

text_enum!(Role, "role", { Admin => "admin", Operator => "operator", Viewer => "viewer" });

/// A user, without their password hash.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct User {
    pub id: i64,
    pub name: String,
    pub role: Role,
    pub disabled: bool,
    pub created_at: i64,
}

/// An API token's metadata (never its secret).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ApiToken {
    pub id: String,
    pub user_id: i64,
    pub label: String,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
}

/// A token just created: `secret` (`wdn_` + 64 hex) is shown once and never stored.
#[derive(Clone, PartialEq)]
pub struct NewApiToken {
    pub id: String,
    pub secret: String,
}

/// Changes to one user, applied together by `Accounts::update_user`; `None` leaves that
/// part as it is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UserUpdate {
    pub role: Option<Role>,
    /// `true` disables (sessions end, tokens are revoked); `false` enables again (revoked
    /// tokens stay revoked).
    pub disabled: Option<bool>,
    /// The user's groups from now on (replacing the old ones); every group must exist.
    pub groups: Option<Vec<String>>,
}

/// A session just created: `id` goes in the cookie, `csrf_token` to the page; both are
/// stored only hashed. `expires_at` is the absolute limit (for the cookie's lifetime).
#[derive(Clone, PartialEq)]
pub struct NewSession {
    pub id: String,
    pub csrf_token: String,
    pub expires_at: i64,
}

/// Users, passwords, API tokens, sessions and bootstrap on the store.
pub trait Accounts {
    /// Validates the name and password, hashes the password and adds an enabled user;
    /// `Conflict` if the name is taken, `Invalid` if a rule is broken.
    fn create_user(&self, name: &str, role: Role, password: &str, now: i64) -> Result<User>;
    /// All users, by name.
    fn users(&self) -> Result<Vec<User>>;
    fn user_by_name(&self, name: &str) -> Result<User>;
    /// The user with this id (disabled ones too).
    fn user_by_id(&self, id: i64) -> Result<User>;
    fn user_count(&self) -> Result<u64>;
    /// Disables the user, deletes their sessions and revokes their tokens, in one
    /// transaction. Disabling a disabled user changes nothing and succeeds.
    fn disable_user(&self, name: &str, now: i64) -> Result<User>;
    /// Applies role, disabled and group changes in one transaction: either all or none.
    /// `NotFound` for an unknown user or group, `Invalid` for too many groups.
    fn update_user(&self, name: &str, update: &UserUpdate, now: i64) -> Result<User>;
    /// Replaces the user's password (same rules as `create_user`) and ends their sessions;
    /// their API tokens keep working.
    fn reset_password(&self, name: &str, password: &str) -> Result<User>;
    /// The user if the name exists, is enabled and the password matches. Takes about the
    /// same time whichever of those fails.
    fn verify_password(&self, name: &str, password: &str) -> Result<Option<User>>;
    /// A new API token for an enabled user; `Conflict` if the user is disabled.
    fn create_token(&self, user_name: &str, label: &str, now: i64) -> Result<NewApiToken>;
    /// The user's tokens, newest first, revoked ones included.
    fn tokens(&self, user_name: &str) -> Result<Vec<ApiToken>>;
    /// One token's metadata by id; `NotFound` for an unknown id.
    fn token(&self, token_id: &str) -> Result<ApiToken>;
    /// The enabled user holding this unrevoked token secret.
    fn user_by_token(&self, secret: &str) -> Result<Option<User>>;
    /// Revokes a token by id; revoking twice succeeds. `NotFound` for an unknown id.
    fn revoke_token(&self, token_id: &str, now: i64) -> Result<()>;
    /// A new session for an enabled user, ending after `idle_secs` without use or
    /// `absolute_secs` after creation, whichever comes first.
    fn create_session(
        &self,
        user_id: i64,
        now: i64,
        idle_secs: i64,
        absolute_secs: i64,
    ) -> Result<NewSession>;
    /// The session's user and the SHA-256 hex of its CSRF token (compare with
    /// `secret_matches_hash`), or `None` when the session is unknown, timed out or its
    /// user disabled. Records use (`last_seen`); deletes a session found expired.
    fn session_user(&self, session_id: &str, now: i64) -> Result<Option<(User, String)>>;
    /// Ends a session (logout); an unknown id is not an error.
    fn delete_session(&self, session_id: &str) -> Result<()>;
    /// Deletes every timed-out session; returns how many.
    fn delete_expired_sessions(&self, now: i64) -> Result<u64>;
    /// While there are no users, a fresh one-time secret that `consume_bootstrap` accepts
    /// until `now + BOOTSTRAP_TOKEN_LIFETIME_SECS`; it replaces any earlier one (whose
    /// secret nobody can print again). `None` once a user exists.
    fn bootstrap_token(&self, now: i64) -> Result<Option<String>>;
    /// Creates the first admin with the bootstrap secret and deletes the token.
    /// `NotFound` for a wrong, used or expired secret.
    fn consume_bootstrap(&self, secret: &str, name: &str, password: &str, now: i64)
        -> Result<User>;
}

impl Accounts for Store {
    fn create_user(&self, name: &str, role: Role, password: &str, now: i64) -> Result<User> {
        passwords::validate_user_name(name)?;
        passwords::validate_password(password)?;
        let hash = passwords::hash_password(password)?;
        self.write(|t| insert_user(t, name, role, &hash, now))
    }

    fn users(&self) -> Result<Vec<User>> {
        self.read(|c| {
            let mut statement =
                c.prepare(&format!("SELECT {USER_COLUMNS} FROM users ORDER BY name"))?;
            let rows = statement.query_map([], user_from_row)?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    fn user_by_name(&self, name: &str) -> Result<User> {
        self.read(|c| user_where(c, "name = ?1", name)?.ok_or_else(|| user_not_found(name)))
    }

    fn user_by_id(&self, id: i64) -> Result<User> {
        self.read(|c| {
            user_where(c, "id = ?1", id)?.ok_or_else(|| StoreError::NotFound(format!("user {id}")))
        })
    }

    fn user_count(&self) -> Result<u64> {
        self.read(|c| {
            Ok(c.query_row("SELECT count(*) FROM users", [], |r| r.get::<_, i64>(0))? as u64)
        })
    }

    fn disable_user(&self, name: &str, now: i64) -> Result<User> {
        self.write(|t| {
            let user = user_where(t, "name = ?1", name)?.ok_or_else(|| user_not_found(name))?;
            end_access(t, user.id, now)?;
            Ok(User {
                disabled: true,
                ..user
            })
        })
    }

    fn update_user(&self, name: &str, update: &UserUpdate, now: i64) -> Result<User> {
        if let Some(groups) = &update.groups {
            if groups.len() > MAX_GROUPS_PER_USER {
                return Err(StoreError::Invalid(format!(
                    "a user belongs to at most {MAX_GROUPS_PER_USER} groups"
                )));
            }
        }
        self.write(|t| {
            let mut user = user_where(t, "name = ?1", name)?.ok_or_else(|| user_not_found(name))?;
            if let Some(groups) = &update.groups {
                replace_groups(t, user.id, groups)?;
            }
            if let Some(role) = update.role {
                t.execute(
                    "UPDATE users SET role = ?2 WHERE id = ?1",
                    params![user.id, role],
                )?;
                user.role = role;
            }
            match update.disabled {
                Some(true) if !user.disabled => {
                    end_access(t, user.id, now)?;
                    user.disabled = true;
                }
                Some(false) if user.disabled => {
                    t.execute("UPDATE users SET disabled = 0 WHERE id = ?1", [user.id])?;
                    user.disabled = false;
                }
                _ => {}
            }
            Ok(user)
        })
    }

    fn reset_password(&self, name: &str, password: &str) -> Result<User> {
        passwords::validate_password(password)?;
        let hash = passwords::hash_password(password)?;
        self.write(|t| {
            let user = user_where(t, "name = ?1", name)?.ok_or_else(|| user_not_found(name))?;
            t.execute(
                "UPDATE users SET password_hash = ?2 WHERE id = ?1",
                params![user.id, hash],
            )?;
            t.execute("DELETE FROM sessions WHERE user_id = ?1", [user.id])?;
            Ok(user)
        })
    }

    fn verify_password(&self, name: &str, password: &str) -> Result<Option<User>> {
        let found = self.read(|c| {
            Ok(c.query_row(
                &format!("SELECT {USER_COLUMNS}, password_hash FROM users WHERE name = ?1"),
                [name],
                |r| Ok((user_from_row(r)?, r.get::<_, String>(5)?)),
            )
            .optional()?)
        })?;
        // The hash is checked even for a disabled user, so timing does not reveal that.
        let matches = passwords::verify_password(found.as_ref().map(|(_, h)| h.as_str()), password);
        Ok(found
            .map(|(user, _)| user)
            .filter(|user| matches && !user.disabled))
    }

    fn create_token(&self, user_name: &str, label: &str, now: i64) -> Result<NewApiToken> {
        validate_token_label(label)?;
        let id = secrets::new_id("tok")?;
        let secret = format!(
            "{TOKEN_SECRET_PREFIX}{}",
            secrets::random_hex(SECRET_BYTES)?
        );
        self.write(|t| {
            let user = user_where(t, "name = ?1", user_name)?.ok_or_else(|| user_not_found(user_name))?;
            if user.disabled {
                return Err(StoreError::Conflict(format!("user `{user_name}` is disabled")));
            }
            t.execute(
                "INSERT INTO api_tokens (id, user_id, label, secret_hash, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![id, user.id, label, secret_hash(&secret), now],
            )?;
            Ok(())
        })?;
        Ok(NewApiToken { id, secret })
    }

    fn tokens(&self, user_name: &str) -> Result<Vec<ApiToken>> {
        self.read(|c| {
            let user =
                user_where(c, "name = ?1", user_name)?.ok_or_else(|| user_not_found(user_name))?;
            let mut statement = c.prepare(
                "SELECT id, user_id, label, created_at, revoked_at FROM api_tokens
                 WHERE user_id = ?1 ORDER BY created_at DESC, rowid DESC",
            )?;
            let rows = statement.query_map([user.id], token_from_row)?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    fn token(&self, token_id: &str) -> Result<ApiToken> {
        self.read(|c| {
            c.query_row(
                "SELECT id, user_id, label, created_at, revoked_at FROM api_tokens WHERE id = ?1",
                [token_id],
                token_from_row,
            )
            .optional()?
            .ok_or_else(|| StoreError::NotFound(format!("token `{token_id}`")))
        })
    }

    fn user_by_token(&self, secret: &str) -> Result<Option<User>> {
        if !secret.starts_with(TOKEN_SECRET_PREFIX) {
            return Ok(None);
        }
        self.read(|c| {
            let user = c
                .query_row(
                    &format!(
                        "SELECT {USER_COLUMNS_OF_U} FROM api_tokens k JOIN users u ON u.id = k.user_id
                         WHERE k.secret_hash = ?1 AND k.revoked_at IS NULL AND u.disabled = 0"
                    ),
                    [secret_hash(secret)],
                    user_from_row,
                )
                .optional()?;
            Ok(user)
        })
    }

    fn revoke_token(&self, token_id: &str, now: i64) -> Result<()> {
        self.write(|t| {
            let exists: Option<i64> = t
                .query_row("SELECT 1 FROM api_tokens WHERE id = ?1", [token_id], |r| {
                    r.get(0)
                })
                .optional()?;
            if exists.is_none() {
                return Err(StoreError::NotFound(format!("token `{token_id}`")));
            }
            t.execute(
                "UPDATE api_tokens SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL",
                params![token_id, now],
            )?;
            Ok(())
        })
    }

    fn create_session(
        &self,
        user_id: i64,
        now: i64,
        idle_secs: i64,
        absolute_secs: i64,
    ) -> Result<NewSession> {
        if idle_secs <= 0 || absolute_secs <= 0 {
            return Err(StoreError::Invalid(
                "session timeouts must be positive".into(),
            ));
        }
        let session = NewSession {
            id: secrets::random_hex(SECRET_BYTES)?,
            csrf_token: secrets::random_hex(SECRET_BYTES)?,
            expires_at: now.saturating_add(absolute_secs),
        };
        self.write(|t| {
            let user = user_where(t, "id = ?1", user_id)?
                .filter(|user| !user.disabled)
                .ok_or_else(|| StoreError::NotFound(format!("user {user_id}")))?;
            t.execute(
                "INSERT INTO sessions (id_hash, user_id, csrf_hash, created_at, last_seen, idle_secs, expires_at)
                 VALUES (?1, ?2, ?3, ?4, ?4, ?5, ?6)",
                params![
                    secret_hash(&session.id),
                    user.id,
                    secret_hash(&session.csrf_token),
                    now,
                    idle_secs,
                    session.expires_at
                ],
            )?;
            Ok(())
        })?;
        Ok(session)
    }

    fn session_user(&self, session_id: &str, now: i64) -> Result<Option<(User, String)>> {
        let id_hash = secret_hash(session_id);
        self.write(|t| {
            let found = t
                .query_row(
                    &format!(
                        "SELECT {USER_COLUMNS_OF_U}, s.csrf_hash, s.last_seen, s.idle_secs, s.expires_at
                         FROM sessions s JOIN users u ON u.id = s.user_id WHERE s.id_hash = ?1"
                    ),
                    [&id_hash],
                    |r| {
                        let user = user_from_row(r)?;
                        let csrf_hash: String = r.get(5)?;
                        let times: (i64, i64, i64) = (r.get(6)?, r.get(7)?, r.get(8)?);
                        Ok((user, csrf_hash, times))
                    },
                )
                .optional()?;
            let Some((user, csrf_hash, (last_seen, idle_secs, expires_at))) = found else {
                return Ok(None);
            };
            let timed_out = now >= last_seen.saturating_add(idle_secs) || now >= expires_at;
            if timed_out || user.disabled {
                t.execute("DELETE FROM sessions WHERE id_hash = ?1", [&id_hash])?;
                return Ok(None);
            }
            if now - last_seen >= LAST_SEEN_RESOLUTION_SECS {
                t.execute(
                    "UPDATE sessions SET last_seen = ?2 WHERE id_hash = ?1",
                    params![id_hash, now],
                )?;
            }
            Ok(Some((user, csrf_hash)))
        })
    }

    fn delete_session(&self, session_id: &str) -> Result<()> {
        self.write(|t| {
            t.execute(
                "DELETE FROM sessions WHERE id_hash = ?1",
                [secret_hash(session_id)],
            )?;
            Ok(())
        })
    }

    fn delete_expired_sessions(&self, now: i64) -> Result<u64> {
        self.write(|t| {
            let deleted = t.execute(
                "DELETE FROM sessions WHERE ?1 >= last_seen + idle_secs OR ?1 >= expires_at",
                [now],
            )?;
            Ok(deleted as u64)
        })
    }

    fn bootstrap_token(&self, now: i64) -> Result<Option<String>> {
        let secret = secrets::random_hex(SECRET_BYTES)?;
        self.write(|t| {
            if count_users(t)? > 0 {
                t.execute("DELETE FROM bootstrap_token", [])?;
                return Ok(None);
            }
            t.execute(
                "INSERT OR REPLACE INTO bootstrap_token (singleton, secret_hash, expires_at) VALUES (1, ?1, ?2)",
                params![secret_hash(&secret), now.saturating_add(BOOTSTRAP_TOKEN_LIFETIME_SECS)],
            )?;
            Ok(Some(secret))
        })
    }

    fn consume_bootstrap(
        &self,
        secret: &str,
        name: &str,
        password: &str,
        now: i64,
    ) -> Result<User> {
        passwords::validate_user_name(name)?;
        passwords::validate_password(password)?;
        let hash_of_secret = secret_hash(secret);
        // Checked before hashing the password, so a wrong secret costs no argon2 work.
        self.read(|c| bootstrap_is_valid(c, &hash_of_secret, now))?;
        let password_hash = passwords::hash_password(password)?;
        self.write(|t| {
            bootstrap_is_valid(t, &hash_of_secret, now)?;
            if count_users(t)? > 0 {
                return Err(bootstrap_not_found());
            }
            let admin = insert_user(t, name, Role::Admin, &password_hash, now)?;
            t.execute("DELETE FROM bootstrap_token", [])?;
            Ok(admin)
        })
    }
}

impl std::fmt::Debug for NewApiToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewApiToken")
            .field("id", &self.id)
            .field("secret", &"<redacted>")
            .finish()
    }
}

impl std::fmt::Debug for NewSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewSession")
            .field("id", &"<redacted>")
            .field("csrf_token", &"<redacted>")
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

const USER_COLUMNS: &str = "id, name, role, disabled, created_at";
const USER_COLUMNS_OF_U: &str = "u.id, u.name, u.role, u.disabled, u.created_at";

fn user_from_row(row: &Row<'_>) -> rusqlite::Result<User> {
    Ok(User {
        id: row.get(0)?,
        name: row.get(1)?,
        role: row.get(2)?,
        disabled: row.get(3)?,
        created_at: row.get(4)?,
    })
}

fn token_from_row(row: &Row<'_>) -> rusqlite::Result<ApiToken> {
    Ok(ApiToken {
        id: row.get(0)?,
        user_id: row.get(1)?,
        label: row.get(2)?,
        created_at: row.get(3)?,
        revoked_at: row.get(4)?,
    })
}

/// Labels are 1 to `MAX_TOKEN_LABEL_CHARS` characters, not only spaces, no control characters.
fn validate_token_label(label: &str) -> Result<()> {
    let valid = !label.trim().is_empty()
        && label.chars().count() <= MAX_TOKEN_LABEL_CHARS
        && !label.chars().any(char::is_control);
    if valid {
        Ok(())
    } else {
        Err(StoreError::Invalid(format!(
            "a token label is 1 to {MAX_TOKEN_LABEL_CHARS} characters, without control characters"
        )))
    }
}

/// Disables the user, ends their sessions and revokes their tokens (inside a transaction).
fn end_access(t: &Connection, user_id: i64, now: i64) -> Result<()> {
    t.execute("UPDATE users SET disabled = 1 WHERE id = ?1", [user_id])?;
    t.execute("DELETE FROM sessions WHERE user_id = ?1", [user_id])?;
    t.execute(
        "UPDATE api_tokens SET revoked_at = ?2 WHERE user_id = ?1 AND revoked_at IS NULL",
        params![user_id, now],
    )?;
    Ok(())
}

/// Makes `groups` the user's groups (inside a transaction); `NotFound` for a group that
/// does not exist, before anything changes.
fn replace_groups(t: &Connection, user_id: i64, groups: &[String]) -> Result<()> {
    let mut ids = Vec::with_capacity(groups.len());
    for name in groups {
        let id: i64 = t
            .query_row("SELECT id FROM groups WHERE name = ?1", [name], |r| {
                r.get(0)
            })
            .optional()?
            .ok_or_else(|| StoreError::NotFound(format!("group `{name}`")))?;
        ids.push(id);
    }
    t.execute("DELETE FROM user_groups WHERE user_id = ?1", [user_id])?;
    for id in ids {
        t.execute(
            "INSERT OR IGNORE INTO user_groups (user_id, group_id) VALUES (?1, ?2)",
            params![user_id, id],
        )?;
    }
    Ok(())
}

fn user_where(
    c: &Connection,
    condition: &str,
    value: impl rusqlite::ToSql,
) -> Result<Option<User>> {
    let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE {condition}");
    Ok(c.query_row(&sql, [value], user_from_row).optional()?)
}

fn insert_user(
    c: &Connection,
    name: &str,
    role: Role,
    password_hash: &str,
    now: i64,
) -> Result<User> {
    if user_where(c, "name = ?1", name)?.is_some() {
        return Err(StoreError::Conflict(format!(
            "user `{name}` already exists"
        )));
    }
    c.execute(
        "INSERT INTO users (name, role, password_hash, created_at) VALUES (?1, ?2, ?3, ?4)",
        params![name, role, password_hash, now],
    )?;
    Ok(User {
        id: c.last_insert_rowid(),
        name: name.to_owned(),
        role,
        disabled: false,
        created_at: now,
    })
}

fn count_users(c: &Connection) -> Result<i64> {
    Ok(c.query_row("SELECT count(*) FROM users", [], |r| r.get(0))?)
}

fn bootstrap_is_valid(c: &Connection, hash_of_secret: &str, now: i64) -> Result<()> {
    let expires_at: Option<i64> = c
        .query_row(
            "SELECT expires_at FROM bootstrap_token WHERE singleton = 1 AND secret_hash = ?1",
            [hash_of_secret],
            |r| r.get(0),
        )
        .optional()?;
    match expires_at {
        Some(expires_at) if now < expires_at => Ok(()),
        _ => Err(bootstrap_not_found()),
    }
}

fn bootstrap_not_found() -> StoreError {
    StoreError::NotFound("bootstrap token".into())
}

fn user_not_found(name: &str) -> StoreError {
    StoreError::NotFound(format!("user `{name}`"))
}

#[cfg(test)]
mod tests;
