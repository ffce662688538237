//! Memory items through the store: compare-and-set versions (a stale or racing write never
//! lands), the trust rule of `confirmed_facts`, sources from this conversation only, size
//! bounds, the user's confirm and delete bumping the version, and degraded compactions.

use std::sync::{Arc, Barrier};

use super::*;
use crate::store::{Accounts, Conversations, Role};

struct Fixture {
    _dir: tempfile::TempDir,
    store: Arc<Store>,
    owner: i64,
    conversation: String,
    user_message: String,
    assistant_message: String,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(&dir.path().join("w.db")).unwrap());
    let owner = store
        .create_user("alice", Role::Viewer, "password1", 1)
        .unwrap()
        .id;
    let conversation = store.create_conversation(owner, "c", 1).unwrap().id;
    let turn = store
        .add_user_message_with_run(owner, &conversation, "my server is db-7", 2)
        .unwrap();
    let (_, messages) = store.conversation(owner, &conversation).unwrap();
    let user_message = messages[0].id.clone();
    let assistant_message = store
        .complete_turn(&turn.run_id, "Noted: db-7.", 3)
        .unwrap();
    Fixture {
        _dir: dir,
        store,
        owner,
        conversation,
        user_message,
        assistant_message,
    }
}

fn item(kind: MemoryKind, trust: Trust, source: &str, text: &str) -> NewMemoryItem {
    NewMemoryItem {
        kind,
        text: text.into(),
        source_message_id: source.into(),
        citation_id: None,
        trust,
    }
}

#[test]
fn a_write_names_the_version_it_was_built_on_and_a_stale_one_never_lands() {
    let f = fixture();
    let empty = f.store.memory(f.owner, &f.conversation).unwrap();
    assert_eq!((empty.version, empty.items.len()), (0, 0));
    let first = [item(
        MemoryKind::ResourceRefs,
        Trust::UserStated,
        &f.user_message,
        "server db-7",
    )];
    let written = f
        .store
        .write_memory(&f.conversation, 0, &f.assistant_message, &first, 10)
        .unwrap();
    assert_eq!(written, MemoryWrite::Written { version: 1 });
    // A compaction that started from version 0 arrives late: refused, nothing changes.
    let late = [item(
        MemoryKind::UserGoals,
        Trust::UserStated,
        &f.user_message,
        "old goal",
    )];
    let stale = f
        .store
        .write_memory(&f.conversation, 0, &f.user_message, &late, 11)
        .unwrap();
    assert_eq!(stale, MemoryWrite::Stale { current: 1 });
    let memory = f.store.memory(f.owner, &f.conversation).unwrap();
    assert_eq!(memory.version, 1);
    assert_eq!(
        memory.through_message_id.as_deref(),
        Some(f.assistant_message.as_str())
    );
    assert_eq!(memory.items.len(), 1);
    assert_eq!(memory.items[0].text, "server db-7");
}

#[test]
fn concurrent_compactions_on_one_version_have_exactly_one_winner() {
    let f = fixture();
    let writers = 8;
    let barrier = Arc::new(Barrier::new(writers));
    let handles: Vec<_> = (0..writers)
        .map(|n| {
            let (store, barrier) = (f.store.clone(), barrier.clone());
            let (conversation, source) = (f.conversation.clone(), f.user_message.clone());
            std::thread::spawn(move || {
                let items = [item(
                    MemoryKind::UserGoals,
                    Trust::UserStated,
                    &source,
                    &format!("goal {n}"),
                )];
                barrier.wait();
                store
                    .write_memory(&conversation, 0, &source, &items, 20)
                    .unwrap()
            })
        })
        .collect();
    let results: Vec<MemoryWrite> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let winners = results
        .iter()
        .filter(|r| matches!(r, MemoryWrite::Written { .. }))
        .count();
    assert_eq!(winners, 1, "{results:?}");
    let memory = f.store.memory(f.owner, &f.conversation).unwrap();
    assert_eq!((memory.version, memory.items.len()), (1, 1));
}

#[test]
fn confirmed_facts_need_confirmation_or_a_tool_and_sources_must_be_this_conversations() {
    let f = fixture();
    let unconfirmed = [item(
        MemoryKind::ConfirmedFacts,
        Trust::UserStated,
        &f.user_message,
        "x",
    )];
    assert!(matches!(
        f.store
            .write_memory(&f.conversation, 0, &f.user_message, &unconfirmed, 5),
        Err(StoreError::Invalid(_))
    ));
    let proposed = [item(
        MemoryKind::ConfirmedFacts,
        Trust::AssistantProposed,
        &f.assistant_message,
        "x",
    )];
    assert!(f
        .store
        .write_memory(&f.conversation, 0, &f.user_message, &proposed, 5)
        .is_err());
    let verified = [item(
        MemoryKind::ConfirmedFacts,
        Trust::ToolVerified,
        &f.assistant_message,
        "x",
    )];
    assert!(f
        .store
        .write_memory(&f.conversation, 0, &f.user_message, &verified, 5)
        .is_ok());
    // A message of another conversation cannot be a source.
    let other = f.store.create_conversation(f.owner, "other", 6).unwrap().id;
    let foreign = [item(
        MemoryKind::UserGoals,
        Trust::UserStated,
        &f.user_message,
        "x",
    )];
    assert!(matches!(
        f.store
            .write_memory(&other, 0, &f.user_message, &foreign, 7),
        Err(StoreError::Invalid(_))
    ));
    // Sizes are bounded.
    let long = [item(
        MemoryKind::UserGoals,
        Trust::UserStated,
        &f.user_message,
        &"x".repeat(MAX_MEMORY_ITEM_CHARS + 1),
    )];
    assert!(f
        .store
        .write_memory(&f.conversation, 1, &f.user_message, &long, 8)
        .is_err());
    let many: Vec<_> = (0..=MAX_MEMORY_ITEMS)
        .map(|n| {
            item(
                MemoryKind::OpenTasks,
                Trust::UserStated,
                &f.user_message,
                &format!("t{n}"),
            )
        })
        .collect();
    assert!(f
        .store
        .write_memory(&f.conversation, 1, &f.user_message, &many, 8)
        .is_err());
}

#[test]
fn the_users_changes_bump_the_version_and_confirmed_items_survive_compaction() {
    let f = fixture();
    let items = [
        item(
            MemoryKind::Preferences,
            Trust::UserStated,
            &f.user_message,
            "answers in Chinese",
        ),
        item(
            MemoryKind::Decisions,
            Trust::AssistantProposed,
            &f.assistant_message,
            "restart nginx",
        ),
    ];
    f.store
        .write_memory(&f.conversation, 0, &f.assistant_message, &items, 10)
        .unwrap();
    let memory = f.store.memory(f.owner, &f.conversation).unwrap();
    let (stated, proposed) = (&memory.items[0], &memory.items[1]);
    // Only what the user stated can be confirmed, and only by its owner.
    assert!(matches!(
        f.store
            .confirm_memory_item(f.owner, &f.conversation, &proposed.id, 11),
        Err(StoreError::Conflict(_))
    ));
    let bob = f
        .store
        .create_user("bob", Role::Viewer, "password1", 1)
        .unwrap()
        .id;
    assert!(matches!(
        f.store
            .confirm_memory_item(bob, &f.conversation, &stated.id, 11),
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        f.store.memory(bob, &f.conversation),
        Err(StoreError::NotFound(_))
    ));
    let confirmed = f
        .store
        .confirm_memory_item(f.owner, &f.conversation, &stated.id, 12)
        .unwrap();
    assert_eq!(confirmed.trust, Trust::UserConfirmed);
    assert_eq!(f.store.memory(f.owner, &f.conversation).unwrap().version, 2);
    // A compaction built on version 1 (before the confirmation) is stale.
    assert_eq!(
        f.store
            .write_memory(&f.conversation, 1, &f.assistant_message, &[], 13)
            .unwrap(),
        MemoryWrite::Stale { current: 2 }
    );
    // One built on version 2 replaces everything but the confirmed item.
    f.store
        .write_memory(&f.conversation, 2, &f.assistant_message, &[], 14)
        .unwrap();
    let memory = f.store.memory(f.owner, &f.conversation).unwrap();
    assert_eq!(memory.items.len(), 1);
    assert_eq!(memory.items[0].id, stated.id);
    f.store
        .delete_memory_item(f.owner, &f.conversation, &stated.id, 15)
        .unwrap();
    let memory = f.store.memory(f.owner, &f.conversation).unwrap();
    assert!(memory.items.is_empty());
    assert_eq!(memory.version, 4);
    assert!(matches!(
        f.store
            .delete_memory_item(f.owner, &f.conversation, &stated.id, 16),
        Err(StoreError::NotFound(_))
    ));
    // The raw messages are untouched.
    let (_, messages) = f.store.conversation(f.owner, &f.conversation).unwrap();
    assert_eq!(messages.len(), 2);
}

#[test]
fn a_degraded_compaction_keeps_the_items_and_says_so() {
    let f = fixture();
    let items = [item(
        MemoryKind::UserGoals,
        Trust::UserStated,
        &f.user_message,
        "fix db-7",
    )];
    f.store
        .write_memory(&f.conversation, 0, &f.user_message, &items, 10)
        .unwrap();
    assert_eq!(
        f.store
            .mark_memory_degraded(&f.conversation, 1, "the output was not valid", 11)
            .unwrap(),
        MemoryWrite::Written { version: 2 }
    );
    let memory = f.store.memory(f.owner, &f.conversation).unwrap();
    assert_eq!(memory.status, MemoryStatus::Degraded);
    assert_eq!(memory.items.len(), 1);
    assert_eq!(
        memory.through_message_id.as_deref(),
        Some(f.user_message.as_str())
    );
}

#[test]
fn an_item_written_again_unchanged_keeps_its_id_and_age() {
    let f = fixture();
    let kept = item(
        MemoryKind::ResourceRefs,
        Trust::UserStated,
        &f.user_message,
        "server db-7",
    );
    let gone = item(
        MemoryKind::Decisions,
        Trust::AssistantProposed,
        &f.assistant_message,
        "use db-7",
    );
    f.store
        .write_memory(
            &f.conversation,
            0,
            &f.user_message,
            &[kept.clone(), gone],
            10,
        )
        .unwrap();
    let before = f.store.memory(f.owner, &f.conversation).unwrap();
    let new = item(
        MemoryKind::OpenTasks,
        Trust::UserStated,
        &f.user_message,
        "check db-7 backups",
    );
    f.store
        .write_memory(&f.conversation, 1, &f.assistant_message, &[kept, new], 20)
        .unwrap();
    let after = f.store.memory(f.owner, &f.conversation).unwrap();
    let texts: Vec<&str> = after.items.iter().map(|i| i.text.as_str()).collect();
    assert_eq!(texts, ["server db-7", "check db-7 backups"]);
    assert_eq!(after.items[0].id, before.items[0].id);
    assert_eq!(after.items[0].created_at, 10);
    assert_eq!(after.items[1].created_at, 20);
}
