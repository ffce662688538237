//! Tests of the accounts store: users, passwords, tokens, sessions and bootstrap.

use super::*;
use crate::store::secret_matches_hash;

const PASSWORD: &str = "correct horse battery";

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("w.db")).unwrap();
    (dir, store)
}

/// Every byte the database keeps on disk: the main file and the write-ahead log.
fn database_bytes(store: &Store) -> Vec<u8> {
    let mut bytes = std::fs::read(store.path()).unwrap();
    let wal = store.path().with_extension("db-wal");
    bytes.extend(std::fs::read(wal).unwrap_or_default());
    bytes
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[test]
fn creates_users_and_refuses_duplicates_and_bad_input() {
    let (_dir, store) = store();
    let alice = store
        .create_user("alice", Role::Operator, PASSWORD, 5)
        .unwrap();
    assert_eq!(
        (
            alice.name.as_str(),
            alice.role,
            alice.disabled,
            alice.created_at
        ),
        ("alice", Role::Operator, false, 5)
    );
    assert!(matches!(
        store.create_user("alice", Role::Viewer, PASSWORD, 6),
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.create_user("bad name", Role::Viewer, PASSWORD, 6),
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        store.create_user("bob", Role::Viewer, "short", 6),
        Err(StoreError::Invalid(_))
    ));
    store
        .create_user("admin", Role::Admin, PASSWORD, 7)
        .unwrap();
    let names: Vec<String> = store.users().unwrap().into_iter().map(|u| u.name).collect();
    assert_eq!(names, ["admin", "alice"]);
    assert_eq!(store.user_count().unwrap(), 2);
    assert_eq!(store.user_by_name("alice").unwrap(), alice);
    assert!(matches!(
        store.user_by_name("nobody"),
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(serde_json::to_value(Role::Operator).unwrap(), "operator");
}

#[test]
fn verifies_passwords_and_refuses_wrong_unknown_and_disabled() {
    let (_dir, store) = store();
    let alice = store
        .create_user("alice", Role::Viewer, PASSWORD, 1)
        .unwrap();
    assert_eq!(
        store.verify_password("alice", PASSWORD).unwrap(),
        Some(alice)
    );
    assert_eq!(
        store.verify_password("alice", "wrong password").unwrap(),
        None
    );
    assert_eq!(store.verify_password("nobody", PASSWORD).unwrap(), None);
    store.disable_user("alice", 2).unwrap();
    assert_eq!(store.verify_password("alice", PASSWORD).unwrap(), None);
    let stored: String = store
        .read(|c| Ok(c.query_row("SELECT password_hash FROM users", [], |r| r.get(0))?))
        .unwrap();
    assert!(stored.starts_with("$argon2id$"));
}

#[test]
fn unknown_users_cost_about_as_much_as_known_ones() {
    let (_dir, store) = store();
    store
        .create_user("alice", Role::Viewer, PASSWORD, 1)
        .unwrap();
    store.verify_password("warm-up", PASSWORD).unwrap();
    // The fastest of a few tries, so other work on the machine does not skew it.
    let time = |name: &str| {
        (0..3)
            .map(|_| {
                let start = std::time::Instant::now();
                store.verify_password(name, "wrong password").unwrap();
                start.elapsed()
            })
            .min()
            .unwrap()
    };
    let known = time("alice");
    let unknown = time("nobody");
    // Both run one argon2 verification; without the dummy hash `unknown` would be
    // microseconds against `known`'s milliseconds.
    assert!(unknown * 20 > known, "known {known:?}, unknown {unknown:?}");
}

#[test]
fn tokens_authenticate_are_hashed_at_rest_and_revoke() {
    let (_dir, store) = store();
    let alice = store
        .create_user("alice", Role::Operator, PASSWORD, 1)
        .unwrap();
    let token = store.create_token("alice", "ci", 2).unwrap();
    assert!(token.secret.starts_with("wdn_") && token.secret.len() == 4 + 64);
    assert!(token.id.starts_with("tok_"));
    assert!(!format!("{token:?}").contains(&token.secret));
    assert_eq!(store.user_by_token(&token.secret).unwrap(), Some(alice));
    assert_eq!(store.user_by_token("wdn_0000").unwrap(), None);
    assert_eq!(store.user_by_token(&token.secret[4..]).unwrap(), None);

    let bytes = database_bytes(&store);
    assert!(!contains(&bytes, &token.secret));
    assert!(!contains(&bytes, &token.secret[4..]));
    assert!(contains(&bytes, &secret_hash(&token.secret)));

    let listed = store.tokens("alice").unwrap();
    assert_eq!(
        (listed.len(), listed[0].label.as_str(), listed[0].revoked_at),
        (1, "ci", None)
    );
    store.revoke_token(&token.id, 3).unwrap();
    store.revoke_token(&token.id, 4).unwrap();
    assert_eq!(store.tokens("alice").unwrap()[0].revoked_at, Some(3));
    assert_eq!(store.user_by_token(&token.secret).unwrap(), None);
    assert!(matches!(
        store.revoke_token("tok_nope", 5),
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store.create_token("nobody", "x", 5),
        Err(StoreError::NotFound(_))
    ));
}

#[test]
fn sessions_time_out_when_idle_and_absolutely() {
    let (_dir, store) = store();
    let alice = store
        .create_user("alice", Role::Viewer, PASSWORD, 0)
        .unwrap();
    let session = store.create_session(alice.id, 1000, 100, 250).unwrap();
    assert_eq!(session.expires_at, 1250);
    assert!(session.id.len() >= 32 && session.csrf_token.len() >= 32);
    assert_ne!(session.id, session.csrf_token);

    let (user, csrf_hash) = store.session_user(&session.id, 1099).unwrap().unwrap();
    assert_eq!(user, alice);
    assert!(secret_matches_hash(&csrf_hash, &session.csrf_token));
    assert!(!secret_matches_hash(&csrf_hash, &session.id));
    // Use at 1099 moved the idle deadline to 1199; use at 1198 moves it to 1298, but
    // the absolute limit (1250) ends the session first.
    assert!(store.session_user(&session.id, 1198).unwrap().is_some());
    assert!(store.session_user(&session.id, 1249).unwrap().is_some());
    assert!(store.session_user(&session.id, 1250).unwrap().is_none());
    // An expired session is gone, even if asked about at an earlier time.
    assert!(store.session_user(&session.id, 1100).unwrap().is_none());

    let idle = store.create_session(alice.id, 2000, 100, 10_000).unwrap();
    assert!(store.session_user(&idle.id, 2099).unwrap().is_some());
    assert!(store.session_user(&idle.id, 2199).unwrap().is_none());
    assert!(store.session_user("unknown", 2000).unwrap().is_none());

    let logout = store.create_session(alice.id, 3000, 100, 1000).unwrap();
    store.delete_session(&logout.id).unwrap();
    assert!(store.session_user(&logout.id, 3001).unwrap().is_none());
    assert!(!contains(&database_bytes(&store), &logout.csrf_token));
}

#[test]
fn expired_sessions_are_purged() {
    let (_dir, store) = store();
    let alice = store
        .create_user("alice", Role::Viewer, PASSWORD, 0)
        .unwrap();
    store.create_session(alice.id, 0, 100, 1000).unwrap();
    let live = store.create_session(alice.id, 50, 100, 1000).unwrap();
    assert_eq!(store.delete_expired_sessions(120).unwrap(), 1);
    assert!(store.session_user(&live.id, 120).unwrap().is_some());
}

#[test]
fn disabling_a_user_ends_sessions_and_revokes_tokens() {
    let (_dir, store) = store();
    let alice = store
        .create_user("alice", Role::Operator, PASSWORD, 0)
        .unwrap();
    let bob = store
        .create_user("bob", Role::Operator, PASSWORD, 0)
        .unwrap();
    let session = store.create_session(alice.id, 10, 100, 1000).unwrap();
    let token = store.create_token("alice", "cli", 10).unwrap();
    let bobs = store.create_session(bob.id, 10, 100, 1000).unwrap();

    let disabled = store.disable_user("alice", 20).unwrap();
    assert!(disabled.disabled);
    assert!(store.session_user(&session.id, 21).unwrap().is_none());
    assert_eq!(store.user_by_token(&token.secret).unwrap(), None);
    assert_eq!(store.tokens("alice").unwrap()[0].revoked_at, Some(20));
    assert!(store.session_user(&bobs.id, 21).unwrap().is_some());
    assert!(matches!(
        store.create_session(alice.id, 30, 100, 1000),
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store.create_token("alice", "again", 30),
        Err(StoreError::Conflict(_))
    ));
    assert!(store.disable_user("alice", 40).unwrap().disabled);
    assert!(matches!(
        store.disable_user("nobody", 40),
        Err(StoreError::NotFound(_))
    ));
}

#[test]
fn bootstrap_creates_the_first_admin_once() {
    let (_dir, store) = store();
    let first = store.bootstrap_token(100).unwrap().unwrap();
    let secret = store.bootstrap_token(200).unwrap().unwrap();
    assert_ne!(first, secret);
    assert!(!contains(&database_bytes(&store), &secret));
    // A replaced secret no longer works, nor does an expired one.
    assert!(matches!(
        store.consume_bootstrap(&first, "root", PASSWORD, 201),
        Err(StoreError::NotFound(_))
    ));
    let expiry = 200 + BOOTSTRAP_TOKEN_LIFETIME_SECS;
    assert!(matches!(
        store.consume_bootstrap(&secret, "root", PASSWORD, expiry),
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store.consume_bootstrap(&secret, "bad name", PASSWORD, 201),
        Err(StoreError::Invalid(_))
    ));
    assert_eq!(store.user_count().unwrap(), 0);

    let admin = store
        .consume_bootstrap(&secret, "root", PASSWORD, 201)
        .unwrap();
    assert_eq!((admin.name.as_str(), admin.role), ("root", Role::Admin));
    assert!(matches!(
        store.consume_bootstrap(&secret, "root2", PASSWORD, 202),
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(store.bootstrap_token(203).unwrap(), None);
    assert!(store.verify_password("root", PASSWORD).unwrap().is_some());
}

#[test]
fn updates_role_disabled_and_groups_together_or_not_at_all() {
    use crate::store::AccessControl;
    let (_dir, store) = store();
    let alice = store
        .create_user("alice", Role::Viewer, PASSWORD, 0)
        .unwrap();
    store.create_group("ops", 1).unwrap();
    store.create_group("hr", 1).unwrap();
    let session = store.create_session(alice.id, 10, 100, 1000).unwrap();
    let token = store.create_token("alice", "laptop", 10).unwrap();

    let update = UserUpdate {
        role: Some(Role::Operator),
        groups: Some(vec!["ops".into(), "hr".into()]),
        ..UserUpdate::default()
    };
    let updated = store.update_user("alice", &update, 20).unwrap();
    assert_eq!((updated.role, updated.disabled), (Role::Operator, false));
    assert_eq!(store.groups_of(alice.id).unwrap(), ["hr", "ops"]);
    assert!(store.session_user(&session.id, 21).unwrap().is_some());

    // An unknown group refuses the whole update: the role stays as it was.
    let bad = UserUpdate {
        role: Some(Role::Admin),
        groups: Some(vec!["ops".into(), "nobody".into()]),
        ..UserUpdate::default()
    };
    assert!(matches!(
        store.update_user("alice", &bad, 30),
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(store.user_by_name("alice").unwrap().role, Role::Operator);
    assert_eq!(store.groups_of(alice.id).unwrap(), ["hr", "ops"]);

    let disable = UserUpdate {
        disabled: Some(true),
        groups: Some(vec![]),
        ..UserUpdate::default()
    };
    assert!(store.update_user("alice", &disable, 40).unwrap().disabled);
    assert!(store.groups_of(alice.id).unwrap().is_empty());
    assert!(store.session_user(&session.id, 41).unwrap().is_none());
    assert_eq!(store.user_by_token(&token.secret).unwrap(), None);

    let enable = UserUpdate {
        disabled: Some(false),
        ..UserUpdate::default()
    };
    assert!(!store.update_user("alice", &enable, 50).unwrap().disabled);
    assert!(store.verify_password("alice", PASSWORD).unwrap().is_some());
    // Tokens revoked by disabling stay revoked.
    assert_eq!(store.user_by_token(&token.secret).unwrap(), None);
    let too_many = UserUpdate {
        groups: Some((0..=MAX_GROUPS_PER_USER).map(|i| format!("g{i}")).collect()),
        ..UserUpdate::default()
    };
    assert!(matches!(
        store.update_user("alice", &too_many, 60),
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        store.update_user("nobody", &enable, 60),
        Err(StoreError::NotFound(_))
    ));
}

#[test]
fn a_password_reset_ends_sessions_and_keeps_tokens() {
    let (_dir, store) = store();
    let alice = store
        .create_user("alice", Role::Viewer, PASSWORD, 0)
        .unwrap();
    let session = store.create_session(alice.id, 10, 100, 1000).unwrap();
    let token = store.create_token("alice", "laptop", 10).unwrap();
    assert!(matches!(
        store.reset_password("alice", "short"),
        Err(StoreError::Invalid(_))
    ));
    assert!(store.session_user(&session.id, 11).unwrap().is_some());
    store
        .reset_password("alice", "a new long password")
        .unwrap();
    assert!(store.session_user(&session.id, 12).unwrap().is_none());
    assert!(store.verify_password("alice", PASSWORD).unwrap().is_none());
    assert!(store
        .verify_password("alice", "a new long password")
        .unwrap()
        .is_some());
    assert!(store.user_by_token(&token.secret).unwrap().is_some());
    assert!(matches!(
        store.reset_password("nobody", "a new long password"),
        Err(StoreError::NotFound(_))
    ));
}

#[test]
fn tokens_are_found_by_id_and_labels_are_checked() {
    let (_dir, store) = store();
    let alice = store
        .create_user("alice", Role::Viewer, PASSWORD, 0)
        .unwrap();
    let token = store.create_token("alice", "laptop", 10).unwrap();
    let found = store.token(&token.id).unwrap();
    assert_eq!(
        (found.user_id, found.label.as_str(), found.revoked_at),
        (alice.id, "laptop", None)
    );
    assert!(matches!(
        store.token("tok_none"),
        Err(StoreError::NotFound(_))
    ));
    let long = "x".repeat(MAX_TOKEN_LABEL_CHARS + 1);
    for bad in ["", "   ", "a\nb", long.as_str()] {
        assert!(
            matches!(
                store.create_token("alice", bad, 10),
                Err(StoreError::Invalid(_))
            ),
            "{bad:?}"
        );
    }
    assert!(store.create_token("alice", "笔记本 <b>", 10).is_ok());
}
