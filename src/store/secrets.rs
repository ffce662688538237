//! Random identifiers and secrets, and the hashes under which secrets are stored. Every
//! random byte comes from the operating system's generator; a secret is handed to the
//! caller once and only its SHA-256 is ever written to the database.

use rand::rngs::OsRng;
use rand::TryRngCore;
use sha2::{Digest, Sha256};

use super::{Result, StoreError};

/// Random bytes in a secret (API token, session id, CSRF token, bootstrap token): 256 bits.
pub(super) const SECRET_BYTES: usize = 32;

/// Random bytes in an object id such as `conv_…`: 96 bits, so ids neither collide nor can
/// be guessed (access is still checked by owner; the id is not a credential).
const ID_BYTES: usize = 12;

/// SHA-256 of a secret as lowercase hex: the form in which secrets are stored and compared.
pub fn secret_hash(secret: &str) -> String {
    to_hex(&Sha256::digest(secret.as_bytes()))
}

/// Whether `presented` is the secret whose hash is `stored_hash`, compared in constant time
/// (for CSRF tokens checked against the hash `Accounts::session_user` returns).
pub fn secret_matches_hash(stored_hash: &str, presented: &str) -> bool {
    constant_time_eq(stored_hash.as_bytes(), secret_hash(presented).as_bytes())
}

/// `count` random bytes from the operating system.
pub(super) fn random_bytes(count: usize) -> Result<Vec<u8>> {
    let mut bytes = vec![0u8; count];
    OsRng
        .try_fill_bytes(&mut bytes)
        .map_err(|e| StoreError::Crypto(format!("random generator: {e}")))?;
    Ok(bytes)
}

/// `count` random bytes from the operating system, as lowercase hex.
pub(super) fn random_hex(count: usize) -> Result<String> {
    Ok(to_hex(&random_bytes(count)?))
}

/// A new object id: `prefix` + `_` + 96 random bits in hex, e.g. `run_3f9a…`.
pub(super) fn new_id(prefix: &str) -> Result<String> {
    Ok(format!("{prefix}_{}", random_hex(ID_BYTES)?))
}

/// Equality whose running time does not depend on where the inputs first differ.
pub(super) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_prefixed_random_hex() {
        let a = new_id("run").unwrap();
        let b = new_id("run").unwrap();
        assert_ne!(a, b);
        assert!(a.starts_with("run_"));
        assert_eq!(a.len(), "run_".len() + 2 * ID_BYTES);
        assert!(a[4..]
            .bytes()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    }

    #[test]
    fn hashes_match_only_their_secret() {
        let secret = random_hex(SECRET_BYTES).unwrap();
        assert_eq!(secret.len(), 64);
        let hash = secret_hash(&secret);
        assert_eq!(hash.len(), 64);
        assert_ne!(hash, secret);
        assert!(secret_matches_hash(&hash, &secret));
        assert!(!secret_matches_hash(&hash, "wrong"));
        assert!(!secret_matches_hash("short", &secret));
        assert_eq!(
            secret_hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
