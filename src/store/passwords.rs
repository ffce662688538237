//! User-name and password rules, and argon2id password hashing. Hashing and verifying are
//! slow on purpose (tens of milliseconds), so callers do them outside the database lock.
//! Verifying for an unknown user spends the same work against a dummy hash, so the time a
//! login takes does not tell whether the name exists.

use std::sync::OnceLock;

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;

use super::secrets;
use super::{Result, StoreError};

/// Fewest characters in a password.
pub const MIN_PASSWORD_CHARS: usize = 8;
/// Most characters in a password: longer ones are refused rather than hashed.
pub const MAX_PASSWORD_CHARS: usize = 1024;
/// Most characters in a user name (names use only `A-Z a-z 0-9 _ . -`).
pub const MAX_USER_NAME_CHARS: usize = 64;

/// Random bytes in a password salt: 128 bits.
const SALT_BYTES: usize = 16;

pub(super) fn validate_user_name(name: &str) -> Result<()> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
    if name.is_empty() || name.len() > MAX_USER_NAME_CHARS || !name.chars().all(allowed) {
        return Err(StoreError::Invalid(format!(
            "a user name is 1 to {MAX_USER_NAME_CHARS} characters of A-Z, a-z, 0-9, `_`, `.` and `-`"
        )));
    }
    Ok(())
}

pub(super) fn validate_password(password: &str) -> Result<()> {
    let chars = password.chars().count();
    if !(MIN_PASSWORD_CHARS..=MAX_PASSWORD_CHARS).contains(&chars) {
        return Err(StoreError::Invalid(format!(
            "a password is {MIN_PASSWORD_CHARS} to {MAX_PASSWORD_CHARS} characters"
        )));
    }
    Ok(())
}

/// The argon2id PHC string (`$argon2id$v=19$m=…`) for `password` with a fresh random salt.
pub(super) fn hash_password(password: &str) -> Result<String> {
    hash_with_salt(password, &secrets::random_bytes(SALT_BYTES)?)
}

/// Whether `password` matches the PHC string `stored`. With `None` (unknown user) the same
/// work is spent against a dummy hash and the answer is `false`.
pub(super) fn verify_password(stored: Option<&str>, password: &str) -> bool {
    let (hash, known) = match stored {
        Some(hash) => (hash, true),
        None => (dummy_hash(), false),
    };
    let Ok(parsed) = PasswordHash::new(hash) else {
        tracing::warn!("a stored password hash is not a valid PHC string");
        return false;
    };
    let matches = Argon2::default()
        .verify_password(password.as_bytes(), &parsed)
        .is_ok();
    matches && known
}

fn hash_with_salt(password: &str, salt: &[u8]) -> Result<String> {
    let salt = SaltString::encode_b64(salt).map_err(|e| StoreError::Crypto(e.to_string()))?;
    let hash = Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map_err(|e| StoreError::Crypto(format!("password hashing: {e}")))?;
    Ok(hash.to_string())
}

/// A hash with the same parameters as real ones, computed once, that no password is
/// checked against for real.
fn dummy_hash() -> &'static str {
    static DUMMY: OnceLock<String> = OnceLock::new();
    DUMMY.get_or_init(|| {
        hash_with_salt("warden-dummy-password", &[0x5a; SALT_BYTES]).unwrap_or_else(|err| {
            tracing::warn!("could not compute the dummy password hash: {err}");
            String::new()
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_names_follow_the_rule() {
        for good in ["a", "alice", "ops.team-1", "A_B", &"x".repeat(64)] {
            assert!(validate_user_name(good).is_ok(), "{good}");
        }
        for bad in ["", "al ice", "ali/ce", "émile", "a@b", &"x".repeat(65)] {
            assert!(
                matches!(validate_user_name(bad), Err(StoreError::Invalid(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn passwords_have_a_length_range_in_characters() {
        assert!(validate_password("1234567").is_err());
        assert!(validate_password("12345678").is_ok());
        assert!(validate_password("密码密码密码密码").is_ok());
        assert!(validate_password(&"p".repeat(MAX_PASSWORD_CHARS + 1)).is_err());
    }

    #[test]
    fn hashes_are_salted_argon2id_and_verify() {
        let first = hash_password("correct horse").unwrap();
        let second = hash_password("correct horse").unwrap();
        assert!(first.starts_with("$argon2id$v=19$"), "{first}");
        assert_ne!(first, second);
        assert!(!first.contains("correct horse"));
        assert!(verify_password(Some(&first), "correct horse"));
        assert!(!verify_password(Some(&first), "correct horsE"));
        assert!(!verify_password(Some("not a hash"), "correct horse"));
        assert!(!verify_password(None, "warden-dummy-password"));
        assert!(dummy_hash().starts_with("$argon2id$"));
    }
}
