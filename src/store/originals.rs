//! Original texts of masked messages, kept only when their author asked. The chat entry
//! point masks secrets before a message is stored; `messages.content` — all the model,
//! memory, compaction and the audit log ever read — holds the masked text. With "keep my
//! original" the unmasked text is stored beside it in `message_originals`, readable by the
//! conversation's owner alone (another user's, admins included, is `NotFound`) and deleted
//! with the message.

use rusqlite::OptionalExtension;

use super::conversations::{owned_conversation, NewTurn};
use super::{Result, Store, StoreError};

pub trait MessageOriginals {
    /// `add_user_message_with_run` for a message whose masked `content` differs from what
    /// its author typed: `original` is kept beside it in the same transaction.
    fn add_user_message_keeping_original(
        &self,
        owner: i64,
        conversation_id: &str,
        content: &str,
        original: &str,
        now: i64,
    ) -> Result<NewTurn>;
    /// Ids of the owner's conversation's messages with a kept original.
    fn kept_originals(&self, owner: i64, conversation_id: &str) -> Result<Vec<String>>;
    /// The kept original of one message of the owner's conversation (`NotFound` when none).
    fn message_original(
        &self,
        owner: i64,
        conversation_id: &str,
        message_id: &str,
    ) -> Result<String>;
}

impl MessageOriginals for Store {
    fn add_user_message_keeping_original(
        &self,
        owner: i64,
        conversation_id: &str,
        content: &str,
        original: &str,
        now: i64,
    ) -> Result<NewTurn> {
        self.add_user_turn(owner, conversation_id, content, Some(original), now)
    }

    fn kept_originals(&self, owner: i64, conversation_id: &str) -> Result<Vec<String>> {
        self.read(|c| {
            owned_conversation(c, owner, conversation_id)?;
            let mut statement = c.prepare(
                "SELECT o.message_id FROM message_originals AS o
                 JOIN messages AS m ON m.id = o.message_id
                 WHERE m.conversation_id = ?1 ORDER BY m.turn",
            )?;
            let ids = statement
                .query_map([conversation_id], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            Ok(ids)
        })
    }

    fn message_original(
        &self,
        owner: i64,
        conversation_id: &str,
        message_id: &str,
    ) -> Result<String> {
        self.read(|c| {
            owned_conversation(c, owner, conversation_id)?;
            c.query_row(
                "SELECT o.content FROM message_originals AS o
                 JOIN messages AS m ON m.id = o.message_id
                 WHERE o.message_id = ?1 AND m.conversation_id = ?2",
                [message_id, conversation_id],
                |r| r.get(0),
            )
            .optional()?
            .ok_or_else(|| StoreError::NotFound(format!("original of message `{message_id}`")))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Accounts, Conversations, Role};

    #[test]
    fn an_original_is_kept_beside_the_masked_message_for_its_owner_only() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("w.db")).unwrap();
        let ann = store
            .create_user("ann", Role::Viewer, "password1", 0)
            .unwrap()
            .id;
        let bob = store
            .create_user("bob", Role::Admin, "password1", 0)
            .unwrap()
            .id;
        let conversation = store.create_conversation(ann, "c", 0).unwrap();
        let kept = store
            .add_user_message_keeping_original(
                ann,
                &conversation.id,
                "the password is [MASKED]",
                "the password is hunter2-Secret",
                1,
            )
            .unwrap();
        let (_, messages) = store.conversation(ann, &conversation.id).unwrap();
        assert_eq!(messages[0].content, "the password is [MASKED]");
        assert_eq!(
            store.kept_originals(ann, &conversation.id).unwrap(),
            [kept.message_id.clone()]
        );
        assert_eq!(
            store
                .message_original(ann, &conversation.id, &kept.message_id)
                .unwrap(),
            "the password is hunter2-Secret"
        );
        // Another user, an admin too, cannot read it or learn it exists.
        assert!(matches!(
            store.message_original(bob, &conversation.id, &kept.message_id),
            Err(StoreError::NotFound(_))
        ));
        assert!(matches!(
            store.kept_originals(bob, &conversation.id),
            Err(StoreError::NotFound(_))
        ));
        // A message sent without asking keeps nothing.
        let plain = store
            .add_user_message_with_run(ann, &conversation.id, "hello", 2)
            .unwrap();
        assert!(matches!(
            store.message_original(ann, &conversation.id, &plain.message_id),
            Err(StoreError::NotFound(_))
        ));
    }
}
