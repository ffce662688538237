//! Conversations and their messages, owner-scoped: every method that takes an owner answers
//! `NotFound` for another owner's conversation exactly as for one that does not exist.
//! A user message and the run that answers it are inserted in one transaction (the run is
//! persisted before any work starts), and a turn can hold at most one assistant message
//! (`UNIQUE (conversation_id, turn, role)`), so completing a turn twice is harmless.

use rusqlite::{params, Connection, OptionalExtension, Row};

use super::runs::{self, NewEvent, RunStatus};
use super::secrets;
use super::text_enum::text_enum;
use super::{Result, Store, StoreError};

/// A conversation's header.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Conversation {
    pub id: String,
    pub owner_id: i64,
    pub title: String,
    pub created_at: i64,
    pub updated_at: i64,
}

/// Most conversations one page of the list holds.
pub const MAX_CONVERSATIONS_PER_PAGE: u32 = 200;

/// Where a page of conversations ends: the last one's `updated_at` and id. Written as
/// `UPDATED_AT.ID` on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversationCursor {
    pub updated_at: i64,
    pub id: String,
}

impl ConversationCursor {
    /// Reads the wire form; `None` when it is not one.
    pub fn parse(text: &str) -> Option<Self> {
        let (at, id) = text.split_once('.')?;
        let valid_id = !id.is_empty()
            && id.len() <= 64
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid_id {
            return None;
        }
        Some(Self {
            updated_at: at.parse().ok()?,
            id: id.to_owned(),
        })
    }
}

impl std::fmt::Display for ConversationCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.updated_at, self.id)
    }
}

/// One page of conversations and the cursor of the next (older) page, if any.
#[derive(Debug, Clone, PartialEq)]
pub struct ConversationPage {
    pub conversations: Vec<Conversation>,
    pub next_before: Option<ConversationCursor>,
}

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MessageRole {
    User,
    Assistant,
    System,
}

text_enum!(MessageRole, "message role", {
    User => "user",
    Assistant => "assistant",
    System => "system",
});

/// One message. `turn` counts user messages from 1; the assistant's answer shares its turn.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Message {
    pub id: String,
    pub conversation_id: String,
    pub turn: i64,
    pub role: MessageRole,
    pub content: String,
    pub run_id: Option<String>,
    pub created_at: i64,
}

/// What `add_user_message_with_run` created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTurn {
    pub turn: i64,
    pub message_id: String,
    /// A `queued` run that will write the assistant's answer for this turn.
    pub run_id: String,
}

/// The result of completing a turn with its terminal event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletedTurn {
    pub message_id: String,
    /// The terminal event's seq, or `None` when the turn was already complete and nothing
    /// was appended.
    pub event_seq: Option<i64>,
}

/// Conversations and messages on the store.
pub trait Conversations {
    fn create_conversation(&self, owner: i64, title: &str, now: i64) -> Result<Conversation>;
    /// One page of the owner's conversations, most recently updated first: at most `limit`
    /// (1..=`MAX_CONVERSATIONS_PER_PAGE`), after `before` when paging back.
    fn conversations(
        &self,
        owner: i64,
        limit: u32,
        before: Option<&ConversationCursor>,
    ) -> Result<ConversationPage>;
    /// One conversation with its messages in order (by turn; user before assistant).
    fn conversation(&self, owner: i64, id: &str) -> Result<(Conversation, Vec<Message>)>;
    /// In one transaction: the user message for the next turn and a `queued` run for it.
    fn add_user_message_with_run(
        &self,
        owner: i64,
        conversation_id: &str,
        content: &str,
        now: i64,
    ) -> Result<NewTurn>;
    /// Saves the assistant's answer for the run's turn and marks the run `completed`, in one
    /// transaction; returns the message id. Idempotent: when the turn already has an
    /// answer, returns that message's id and changes nothing. `Conflict` if the run ended
    /// otherwise (failed or cancelled) without an answer.
    fn complete_turn(&self, run_id: &str, assistant_content: &str, now: i64) -> Result<String>;
    /// `complete_turn`, appending the run's terminal event in the same transaction. The
    /// caller picks the message id (from `new_message_id`) so the event can name it; when
    /// the turn was already answered, the existing message's id is returned instead.
    /// `worker` must hold the run's lease (`Conflict` otherwise), unless the turn is
    /// already answered. `citations` are the answer's cited passages as (n, JSON).
    #[allow(clippy::too_many_arguments)]
    fn complete_turn_with_event(
        &self,
        run_id: &str,
        worker: &str,
        message_id: &str,
        assistant_content: &str,
        citations: &[(i64, String)],
        event: &NewEvent<'_>,
        now: i64,
    ) -> Result<CompletedTurn>;
    /// The cited passages of the owner's conversation's messages, by message id, in order
    /// of their numbers (JSON texts as stored).
    fn conversation_citations(
        &self,
        owner: i64,
        conversation_id: &str,
    ) -> Result<Vec<(String, i64, String)>>;
    /// What calls of `tool` returned to the runs that wrote the owner's conversation's
    /// answers, as the tool ledger recorded it: `(message id, result JSON text)` for each
    /// call that succeeded, in order of turn and step.
    fn conversation_tool_results(
        &self,
        owner: i64,
        conversation_id: &str,
        tool: &str,
    ) -> Result<Vec<(String, String)>>;
}

/// A fresh id for an assistant message (`msg_` + random hex).
pub fn new_message_id() -> Result<String> {
    secrets::new_id("msg")
}

impl Conversations for Store {
    fn create_conversation(&self, owner: i64, title: &str, now: i64) -> Result<Conversation> {
        let conversation = Conversation {
            id: secrets::new_id("conv")?,
            owner_id: owner,
            title: title.to_owned(),
            created_at: now,
            updated_at: now,
        };
        self.write(|t| {
            t.execute(
                "INSERT INTO conversations (id, owner_id, title, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?4)",
                params![conversation.id, owner, title, now],
            )?;
            Ok(())
        })?;
        Ok(conversation)
    }

    fn conversations(
        &self,
        owner: i64,
        limit: u32,
        before: Option<&ConversationCursor>,
    ) -> Result<ConversationPage> {
        if limit == 0 || limit > MAX_CONVERSATIONS_PER_PAGE {
            return Err(StoreError::Invalid(format!(
                "limit must be between 1 and {MAX_CONVERSATIONS_PER_PAGE}"
            )));
        }
        let (before_at, before_id) = match before {
            Some(cursor) => (cursor.updated_at, cursor.id.as_str()),
            None => (i64::MAX, "\u{10FFFF}"),
        };
        self.read(|c| {
            // One row more than asked says whether an older page exists.
            let mut statement = c.prepare(&format!(
                "SELECT {CONVERSATION_COLUMNS} FROM conversations
                 WHERE owner_id = ?1 AND (updated_at < ?2 OR (updated_at = ?2 AND id < ?3))
                 ORDER BY updated_at DESC, id DESC LIMIT ?4"
            ))?;
            let rows = statement.query_map(
                params![owner, before_at, before_id, i64::from(limit) + 1],
                conversation_from_row,
            )?;
            let mut conversations: Vec<Conversation> = rows.collect::<rusqlite::Result<_>>()?;
            let next_before = if conversations.len() > limit as usize {
                conversations.truncate(limit as usize);
                conversations.last().map(|last| ConversationCursor {
                    updated_at: last.updated_at,
                    id: last.id.clone(),
                })
            } else {
                None
            };
            Ok(ConversationPage {
                conversations,
                next_before,
            })
        })
    }

    fn conversation(&self, owner: i64, id: &str) -> Result<(Conversation, Vec<Message>)> {
        self.read(|c| {
            let conversation = owned_conversation(c, owner, id)?;
            let mut statement = c.prepare(
                "SELECT id, conversation_id, turn, role, content, run_id, created_at
                 FROM messages WHERE conversation_id = ?1
                 ORDER BY turn, CASE role WHEN 'system' THEN 0 WHEN 'user' THEN 1 ELSE 2 END",
            )?;
            let rows = statement.query_map([id], message_from_row)?;
            let messages = rows.collect::<rusqlite::Result<_>>()?;
            Ok((conversation, messages))
        })
    }

    fn add_user_message_with_run(
        &self,
        owner: i64,
        conversation_id: &str,
        content: &str,
        now: i64,
    ) -> Result<NewTurn> {
        self.add_user_turn(owner, conversation_id, content, None, now)
    }

    fn complete_turn(&self, run_id: &str, assistant_content: &str, now: i64) -> Result<String> {
        let message_id = secrets::new_id("msg")?;
        let answer = Answer {
            message_id: &message_id,
            content: assistant_content,
            citations: &[],
            event: None,
            holder: None,
        };
        self.write(|t| complete_turn_in(t, run_id, &answer, now))
            .map(|done| done.message_id)
    }

    fn complete_turn_with_event(
        &self,
        run_id: &str,
        worker: &str,
        message_id: &str,
        assistant_content: &str,
        citations: &[(i64, String)],
        event: &NewEvent<'_>,
        now: i64,
    ) -> Result<CompletedTurn> {
        event.validate()?;
        for (_, citation) in citations {
            runs::validate_json(citation, "citation")?;
        }
        let answer = Answer {
            message_id,
            content: assistant_content,
            citations,
            event: Some(event),
            holder: Some(worker),
        };
        self.write(|t| complete_turn_in(t, run_id, &answer, now))
    }

    fn conversation_citations(
        &self,
        owner: i64,
        conversation_id: &str,
    ) -> Result<Vec<(String, i64, String)>> {
        self.read(|c| {
            owned_conversation(c, owner, conversation_id)?;
            let mut statement = c.prepare(
                "SELECT mc.message_id, mc.n, mc.citation FROM message_citations AS mc
                 JOIN messages AS m ON m.id = mc.message_id
                 WHERE m.conversation_id = ?1 ORDER BY m.turn, mc.n",
            )?;
            let rows = statement
                .query_map([conversation_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    fn conversation_tool_results(
        &self,
        owner: i64,
        conversation_id: &str,
        tool: &str,
    ) -> Result<Vec<(String, String)>> {
        self.read(|c| {
            owned_conversation(c, owner, conversation_id)?;
            let mut statement = c.prepare(
                "SELECT m.id, l.result FROM messages AS m
                 JOIN tool_ledger AS l ON l.run_id = m.run_id
                 WHERE m.conversation_id = ?1 AND m.role = 'assistant' AND l.tool = ?2
                   AND l.state = 'succeeded' AND l.result IS NOT NULL
                 ORDER BY m.turn, l.step",
            )?;
            let rows = statement.query_map(params![conversation_id, tool], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }
}

const CONVERSATION_COLUMNS: &str = "id, owner_id, title, created_at, updated_at";

/// The conversation if `owner` owns it; `NotFound` alike for missing and not owned.
pub(super) fn owned_conversation(c: &Connection, owner: i64, id: &str) -> Result<Conversation> {
    c.query_row(
        &format!(
            "SELECT {CONVERSATION_COLUMNS} FROM conversations WHERE id = ?1 AND owner_id = ?2"
        ),
        params![id, owner],
        conversation_from_row,
    )
    .optional()?
    .ok_or_else(|| StoreError::NotFound(format!("conversation `{id}`")))
}

/// An assistant answer to save: the terminal event to append with it, and the worker that
/// must hold the run's lease, when those apply.
struct Answer<'a> {
    message_id: &'a str,
    content: &'a str,
    citations: &'a [(i64, String)],
    event: Option<&'a NewEvent<'a>>,
    holder: Option<&'a str>,
}

fn complete_turn_in(
    t: &Connection,
    run_id: &str,
    answer: &Answer<'_>,
    now: i64,
) -> Result<CompletedTurn> {
    let (conversation_id, turn, status) = t
        .query_row(
            "SELECT conversation_id, turn, status FROM runs WHERE id = ?1",
            [run_id],
            |r| {
                Ok((
                    r.get::<_, Option<String>>(0)?,
                    r.get::<_, Option<i64>>(1)?,
                    r.get::<_, RunStatus>(2)?,
                ))
            },
        )
        .optional()?
        .ok_or_else(|| StoreError::NotFound(format!("run `{run_id}`")))?;
    let (Some(conversation_id), Some(turn)) = (conversation_id, turn) else {
        return Err(StoreError::Invalid(format!(
            "run `{run_id}` is not a chat turn"
        )));
    };
    let answered: Option<String> = t
        .query_row(
            "SELECT id FROM messages WHERE conversation_id = ?1 AND turn = ?2 AND role = 'assistant'",
            params![conversation_id, turn],
            |r| r.get(0),
        )
        .optional()?;
    if let Some(existing) = answered {
        return Ok(CompletedTurn {
            message_id: existing,
            event_seq: None,
        });
    }
    if status.is_terminal() {
        return Err(StoreError::Conflict(format!(
            "run `{run_id}` is already {status}"
        )));
    }
    if let Some(worker) = answer.holder {
        runs::check_lease_holder(t, run_id, worker)?;
    }
    let message = MessageInsert {
        id: answer.message_id,
        conversation_id: &conversation_id,
        turn,
        role: MessageRole::Assistant,
        content: answer.content,
        run_id,
    };
    insert_message(t, &message, now)?;
    for (n, citation) in answer.citations {
        t.execute(
            "INSERT INTO message_citations (message_id, n, citation) VALUES (?1, ?2, ?3)",
            params![answer.message_id, n, citation],
        )?;
    }
    runs::set_terminal_status(t, run_id, RunStatus::Completed, None, now)?;
    let event_seq = answer
        .event
        .map(|event| runs::insert_event(t, run_id, event, now))
        .transpose()?;
    Ok(CompletedTurn {
        message_id: answer.message_id.to_owned(),
        event_seq,
    })
}

/// A message to insert, with the run that it starts or that wrote it.
struct MessageInsert<'a> {
    id: &'a str,
    conversation_id: &'a str,
    turn: i64,
    role: MessageRole,
    content: &'a str,
    run_id: &'a str,
}

/// Inserts the message and moves the conversation's `updated_at` forward.
fn insert_message(t: &Connection, message: &MessageInsert<'_>, now: i64) -> Result<()> {
    t.execute(
        "INSERT INTO messages (id, conversation_id, turn, role, content, run_id, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            message.id,
            message.conversation_id,
            message.turn,
            message.role,
            message.content,
            message.run_id,
            now
        ],
    )?;
    t.execute(
        "UPDATE conversations SET updated_at = MAX(updated_at, ?2) WHERE id = ?1",
        params![message.conversation_id, now],
    )?;
    Ok(())
}

fn conversation_from_row(row: &Row<'_>) -> rusqlite::Result<Conversation> {
    Ok(Conversation {
        id: row.get(0)?,
        owner_id: row.get(1)?,
        title: row.get(2)?,
        created_at: row.get(3)?,
        updated_at: row.get(4)?,
    })
}

impl Store {
    /// The user message for the next turn and its `queued` run, in one transaction, with
    /// the message's `original` text kept beside it when its author asked
    /// (`message_originals`).
    pub(super) fn add_user_turn(
        &self,
        owner: i64,
        conversation_id: &str,
        content: &str,
        original: Option<&str>,
        now: i64,
    ) -> Result<NewTurn> {
        let message_id = secrets::new_id("msg")?;
        let run_id = secrets::new_id("run")?;
        let limit = self.queued_runs_limit();
        self.write(|t| {
            owned_conversation(t, owner, conversation_id)?;
            if let Some(limit) = limit {
                let queued: i64 = t.query_row(
                    "SELECT COUNT(*) FROM runs WHERE owner_id = ?1 AND status = 'queued'",
                    [owner],
                    |r| r.get(0),
                )?;
                if queued >= i64::from(limit) {
                    return Err(StoreError::QuotaExceeded(format!(
                        "you have {queued} messages waiting for an answer (the most is {limit}); \
                         wait for them or cancel some"
                    )));
                }
            }
            let turn: i64 = t.query_row(
                "SELECT COALESCE(MAX(turn), 0) + 1 FROM messages WHERE conversation_id = ?1",
                [conversation_id],
                |r| r.get(0),
            )?;
            runs::insert_queued_run(t, &run_id, owner, conversation_id, turn, now)?;
            let message = MessageInsert {
                id: &message_id,
                conversation_id,
                turn,
                role: MessageRole::User,
                content,
                run_id: &run_id,
            };
            insert_message(t, &message, now)?;
            if let Some(original) = original {
                t.execute(
                    "INSERT INTO message_originals (message_id, content, created_at)
                     VALUES (?1, ?2, ?3)",
                    params![message_id, original, now],
                )?;
            }
            Ok(NewTurn {
                turn,
                message_id,
                run_id,
            })
        })
    }
}

fn message_from_row(row: &Row<'_>) -> rusqlite::Result<Message> {
    Ok(Message {
        id: row.get(0)?,
        conversation_id: row.get(1)?,
        turn: row.get(2)?,
        role: row.get(3)?,
        content: row.get(4)?,
        run_id: row.get(5)?,
        created_at: row.get(6)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Accounts, Role, Runs};

    const ALICE: i64 = 1;
    const BOB: i64 = 2;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("w.db")).unwrap();
        for name in ["alice", "bob"] {
            store
                .create_user(name, Role::Operator, "password1", 0)
                .unwrap();
        }
        assert_eq!(store.user_by_name("bob").unwrap().id, BOB);
        (dir, store)
    }

    #[test]
    fn a_message_and_its_queued_run_are_stored_together() {
        let (_dir, store) = store();
        let conversation = store.create_conversation(ALICE, "Disk full", 10).unwrap();
        assert!(conversation.id.starts_with("conv_"));
        let first = store
            .add_user_message_with_run(ALICE, &conversation.id, "df says 100%", 11)
            .unwrap();
        assert_eq!(first.turn, 1);
        assert!(first.message_id.starts_with("msg_") && first.run_id.starts_with("run_"));
        let run = store.run(ALICE, &first.run_id).unwrap();
        assert_eq!(
            (run.status, run.turn, run.attempts),
            (RunStatus::Queued, Some(1), 0)
        );
        assert_eq!(run.kind, crate::store::RunKind::ChatTurn);
        assert_eq!(
            run.conversation_id.as_deref(),
            Some(conversation.id.as_str())
        );

        let answer = store
            .complete_turn(&first.run_id, "Check /var/log.", 12)
            .unwrap();
        let second = store
            .add_user_message_with_run(ALICE, &conversation.id, "thanks", 13)
            .unwrap();
        assert_eq!(second.turn, 2);

        let (header, messages) = store.conversation(ALICE, &conversation.id).unwrap();
        assert_eq!(
            (header.title.as_str(), header.updated_at),
            ("Disk full", 13)
        );
        let summary: Vec<_> = messages
            .iter()
            .map(|m| (m.turn, m.role, m.content.as_str(), m.run_id.as_deref()))
            .collect();
        assert_eq!(
            summary,
            [
                (
                    1,
                    MessageRole::User,
                    "df says 100%",
                    Some(first.run_id.as_str())
                ),
                (
                    1,
                    MessageRole::Assistant,
                    "Check /var/log.",
                    Some(first.run_id.as_str())
                ),
                (2, MessageRole::User, "thanks", Some(second.run_id.as_str())),
            ]
        );
        assert_eq!(messages[1].id, answer);
    }

    #[test]
    fn another_owner_sees_nothing() {
        let (_dir, store) = store();
        let mine = store.create_conversation(ALICE, "mine", 1).unwrap();
        let turn = store
            .add_user_message_with_run(ALICE, &mine.id, "hello", 2)
            .unwrap();
        store
            .append_event(
                &turn.run_id,
                &NewEvent {
                    event_type: "token",
                    data: "{}",
                },
                3,
            )
            .unwrap();
        let missing = |result: Result<()>| matches!(result, Err(StoreError::NotFound(_)));

        assert!(store
            .conversations(BOB, 50, None)
            .unwrap()
            .conversations
            .is_empty());
        assert!(missing(store.conversation(BOB, &mine.id).map(|_| ())));
        assert!(missing(
            store
                .add_user_message_with_run(BOB, &mine.id, "hi", 4)
                .map(|_| ())
        ));
        assert!(missing(store.run(BOB, &turn.run_id).map(|_| ())));
        assert!(missing(
            store.events_after(BOB, &turn.run_id, 0, 10).map(|_| ())
        ));
        // The message for another owner's object is the one for an object that does not exist.
        let theirs = store.conversation(BOB, &mine.id).unwrap_err().to_string();
        let nobody = store
            .conversation(BOB, "conv_nope")
            .unwrap_err()
            .to_string();
        assert_eq!(
            theirs.replace(&mine.id, "ID"),
            nobody.replace("conv_nope", "ID")
        );

        assert_eq!(
            store.conversations(ALICE, 50, None).unwrap().conversations,
            vec![Conversation {
                updated_at: 2,
                ..mine.clone()
            }]
        );
        assert_eq!(
            store
                .events_after(ALICE, &turn.run_id, 0, 10)
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn conversations_list_most_recent_first() {
        let (_dir, store) = store();
        let old = store.create_conversation(ALICE, "old", 1).unwrap();
        let new = store.create_conversation(ALICE, "new", 2).unwrap();
        let ids = |s: &Store| {
            s.conversations(ALICE, 50, None)
                .unwrap()
                .conversations
                .into_iter()
                .map(|c| c.id)
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(&store), [new.id.clone(), old.id.clone()]);
        store
            .add_user_message_with_run(ALICE, &old.id, "bump", 3)
            .unwrap();
        assert_eq!(ids(&store), [old.id, new.id]);
    }

    #[test]
    fn conversations_page_back_by_cursor_without_gaps_or_repeats() {
        let (_dir, store) = store();
        // Five conversations, two sharing an update time: the id breaks the tie.
        let mut expected: Vec<String> = [1, 2, 2, 3, 4]
            .into_iter()
            .map(|at| store.create_conversation(ALICE, "c", at).unwrap())
            .map(|c| (c.updated_at, c.id))
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .map(|(_, id)| id)
            .collect();
        expected[2..4].sort_by(|a, b| b.cmp(a));
        let mut seen = Vec::new();
        let mut before: Option<ConversationCursor> = None;
        loop {
            let page = store.conversations(ALICE, 2, before.as_ref()).unwrap();
            assert!(page.conversations.len() <= 2);
            seen.extend(page.conversations.into_iter().map(|c| c.id));
            match page.next_before {
                Some(cursor) => {
                    let wire = cursor.to_string();
                    before = Some(ConversationCursor::parse(&wire).unwrap());
                }
                None => break,
            }
        }
        assert_eq!(seen, expected);
        assert!(store.conversations(ALICE, 0, None).is_err());
        assert!(store
            .conversations(ALICE, MAX_CONVERSATIONS_PER_PAGE + 1, None)
            .is_err());
        for bad in ["", "12", "x.conv_a", "12.", "12.a b", "12.a'--"] {
            assert_eq!(ConversationCursor::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_turn_gets_one_answer_however_often_it_is_completed() {
        let (_dir, store) = store();
        let conversation = store.create_conversation(ALICE, "t", 1).unwrap();
        let turn = store
            .add_user_message_with_run(ALICE, &conversation.id, "q", 2)
            .unwrap();
        let done = NewEvent {
            event_type: "run.completed",
            data: r#"{"ok":true}"#,
        };
        let claimed = store.claim_next("w1", 2, 30).unwrap().unwrap();
        assert_eq!(claimed.id, turn.run_id);
        // Only the worker holding the lease may answer.
        assert!(matches!(
            store.complete_turn_with_event(&turn.run_id, "w2", "msg_x", "stale", &[], &done, 3),
            Err(StoreError::Conflict(_))
        ));
        let first = store
            .complete_turn_with_event(&turn.run_id, "w1", "msg_a", "answer", &[], &done, 3)
            .unwrap();
        assert_eq!(first.event_seq, Some(1));
        // A resumed worker finishing the same turn again gets the same message back.
        let again = store
            .complete_turn_with_event(&turn.run_id, "w2", "msg_b", "answer 2", &[], &done, 4)
            .unwrap();
        assert_eq!(
            again,
            CompletedTurn {
                message_id: first.message_id.clone(),
                event_seq: None
            }
        );
        assert_eq!(
            store.complete_turn(&turn.run_id, "answer 3", 5).unwrap(),
            first.message_id
        );

        let (_, messages) = store.conversation(ALICE, &conversation.id).unwrap();
        let answers: Vec<_> = messages
            .iter()
            .filter(|m| m.role == MessageRole::Assistant)
            .collect();
        assert_eq!((answers.len(), answers[0].content.as_str()), (1, "answer"));
        let run = store.run(ALICE, &turn.run_id).unwrap();
        assert_eq!((run.status, run.lease_owner), (RunStatus::Completed, None));
        let events = store.events_after(ALICE, &turn.run_id, 0, 10).unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].event_type, "run.completed");

        // The schema itself refuses a second assistant message for the turn.
        let duplicate = store.write(|t| {
            t.execute(
                "INSERT INTO messages (id, conversation_id, turn, role, content, created_at)
                 VALUES ('msg_dup', ?1, 1, 'assistant', 'x', 6)",
                [&conversation.id],
            )?;
            Ok(())
        });
        assert!(duplicate.is_err());
    }

    #[test]
    fn a_cancelled_run_gets_no_answer() {
        let (_dir, store) = store();
        let conversation = store.create_conversation(ALICE, "t", 1).unwrap();
        let turn = store
            .add_user_message_with_run(ALICE, &conversation.id, "q", 2)
            .unwrap();
        assert!(store
            .finish(&turn.run_id, RunStatus::Cancelled, None, 3)
            .unwrap());
        assert!(matches!(
            store.complete_turn(&turn.run_id, "late", 4),
            Err(StoreError::Conflict(_))
        ));
        assert!(matches!(
            store.complete_turn("run_nope", "x", 4),
            Err(StoreError::NotFound(_))
        ));
        let (_, messages) = store.conversation(ALICE, &conversation.id).unwrap();
        assert_eq!(messages.len(), 1);
    }
}
