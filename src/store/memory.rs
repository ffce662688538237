//! Structured memory of a conversation: items of six kinds, each with the message it came
//! from, an optional citation and a trust level, and one state row with the version that
//! a compaction must name to replace them (compare-and-set) and the newest message they
//! cover. The rules live here, not in callers: `confirmed_facts` holds only user-confirmed
//! or tool-verified items (also a CHECK in the schema), every source message belongs to the
//! conversation, sizes are bounded, a stale write never lands, items the user confirmed
//! survive a compaction, and every change by the user bumps the version so that a
//! compaction started before it cannot undo it. Raw messages are never touched.

use rusqlite::{params, Connection, OptionalExtension, Row, Transaction};

use super::text_enum::text_enum;
use super::{secrets, Result, Store, StoreError};

/// Longest item text, in characters.
pub const MAX_MEMORY_ITEM_CHARS: usize = 300;
/// Most items one conversation's memory holds.
pub const MAX_MEMORY_ITEMS: usize = 40;
/// Most characters all items of a conversation hold together.
pub const MAX_MEMORY_CHARS: usize = 6_000;

/// The six kinds of memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryKind {
    UserGoals,
    ConfirmedFacts,
    Preferences,
    Decisions,
    OpenTasks,
    ResourceRefs,
}

text_enum!(MemoryKind, "memory kind", {
    UserGoals => "user_goals",
    ConfirmedFacts => "confirmed_facts",
    Preferences => "preferences",
    Decisions => "decisions",
    OpenTasks => "open_tasks",
    ResourceRefs => "resource_refs",
});

/// How far an item can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trust {
    /// The user said it.
    UserStated,
    /// The user confirmed it (only through the confirm call).
    UserConfirmed,
    /// A tool result (a cited passage) backs it.
    ToolVerified,
    /// The assistant suggested it.
    AssistantProposed,
}

text_enum!(Trust, "trust level", {
    UserStated => "user_stated",
    UserConfirmed => "user_confirmed",
    ToolVerified => "tool_verified",
    AssistantProposed => "assistant_proposed",
});

/// Whether the last compaction produced memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryStatus {
    Ok,
    /// The model's output was invalid; nothing was written.
    Degraded,
}

text_enum!(MemoryStatus, "memory status", {
    Ok => "ok",
    Degraded => "degraded",
});

/// A stored item.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct MemoryItem {
    pub id: String,
    pub kind: MemoryKind,
    pub text: String,
    pub source_message_id: String,
    pub citation_id: Option<String>,
    pub trust: Trust,
    pub created_at: i64,
    pub updated_at: i64,
}

/// An item to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewMemoryItem {
    pub kind: MemoryKind,
    pub text: String,
    pub source_message_id: String,
    pub citation_id: Option<String>,
    pub trust: Trust,
}

/// A conversation's memory: its version (0 before anything was written), what it covers,
/// how the last compaction went, and the items, oldest first.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ConversationMemory {
    pub version: i64,
    pub through_message_id: Option<String>,
    pub status: MemoryStatus,
    pub degraded_reason: Option<String>,
    pub items: Vec<MemoryItem>,
}

/// How a compare-and-set write went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryWrite {
    /// Written; the memory's new version.
    Written { version: i64 },
    /// The memory changed since the version the write was built on: nothing written.
    Stale { current: i64 },
}

pub trait Memory {
    /// The owner's conversation's memory; `NotFound` alike for missing and not owned.
    fn memory(&self, owner: i64, conversation_id: &str) -> Result<ConversationMemory>;
    /// Replaces the items a compaction produced (user-confirmed items stay) and marks
    /// them as covering up to `through_message_id`, if the version is still
    /// `expected_version`.
    fn write_memory(
        &self,
        conversation_id: &str,
        expected_version: i64,
        through_message_id: &str,
        items: &[NewMemoryItem],
        now: i64,
    ) -> Result<MemoryWrite>;
    /// Records that a compaction built on `expected_version` was degraded (its output
    /// invalid): the items stay as they were.
    fn mark_memory_degraded(
        &self,
        conversation_id: &str,
        expected_version: i64,
        reason: &str,
        now: i64,
    ) -> Result<MemoryWrite>;
    /// Removes one item of the owner's conversation.
    fn delete_memory_item(
        &self,
        owner: i64,
        conversation_id: &str,
        item_id: &str,
        now: i64,
    ) -> Result<()>;
    /// Turns a `user_stated` item of the owner's into `user_confirmed`.
    fn confirm_memory_item(
        &self,
        owner: i64,
        conversation_id: &str,
        item_id: &str,
        now: i64,
    ) -> Result<MemoryItem>;
}

impl Memory for Store {
    fn memory(&self, owner: i64, conversation_id: &str) -> Result<ConversationMemory> {
        self.read(|c| {
            owned(c, owner, conversation_id)?;
            read_memory(c, conversation_id)
        })
    }

    fn write_memory(
        &self,
        conversation_id: &str,
        expected_version: i64,
        through_message_id: &str,
        items: &[NewMemoryItem],
        now: i64,
    ) -> Result<MemoryWrite> {
        check_items(items)?;
        self.write(|t| {
            let current = version(t, conversation_id)?;
            if current != expected_version {
                return Ok(MemoryWrite::Stale { current });
            }
            check_message(t, conversation_id, through_message_id)?;
            for item in items {
                check_message(t, conversation_id, &item.source_message_id)?;
            }
            let kept: i64 = t.query_row(
                "SELECT COUNT(*) FROM memory_items
                 WHERE conversation_id = ?1 AND trust = 'user_confirmed'",
                [conversation_id],
                |r| r.get(0),
            )?;
            if kept as usize + items.len() > MAX_MEMORY_ITEMS {
                return Err(StoreError::Invalid(format!(
                    "a conversation's memory holds at most {MAX_MEMORY_ITEMS} items"
                )));
            }
            // An item written again unchanged keeps its id and age; the rest is replaced.
            let mut unchanged = Vec::new();
            for item in items {
                let same: Option<String> = t
                    .query_row(
                        "SELECT id FROM memory_items
                         WHERE conversation_id = ?1 AND trust != 'user_confirmed' AND kind = ?2
                           AND text = ?3 AND source_message_id = ?4 AND trust = ?5
                           AND citation_id IS ?6",
                        params![
                            conversation_id,
                            item.kind,
                            item.text,
                            item.source_message_id,
                            item.trust,
                            item.citation_id
                        ],
                        |r| r.get(0),
                    )
                    .optional()?;
                let same = same.filter(|id| !unchanged.iter().flatten().any(|u| u == id));
                unchanged.push(same);
            }
            let kept_ids: Vec<&str> = unchanged.iter().flatten().map(String::as_str).collect();
            let mut stale_rows = t.prepare(
                "SELECT id FROM memory_items WHERE conversation_id = ?1 AND trust != 'user_confirmed'",
            )?;
            let stale: Vec<String> = stale_rows
                .query_map([conversation_id], |r| r.get(0))?
                .collect::<rusqlite::Result<Vec<String>>>()?
                .into_iter()
                .filter(|id| !kept_ids.contains(&id.as_str()))
                .collect();
            drop(stale_rows);
            for id in &stale {
                t.execute("DELETE FROM memory_items WHERE id = ?1", [id])?;
            }
            for (item, same) in items.iter().zip(&unchanged) {
                if same.is_none() {
                    insert_item(t, conversation_id, item, now)?;
                }
            }
            let version = current + 1;
            t.execute(
                "INSERT INTO conversation_memory
                     (conversation_id, version, through_message_id, status, degraded_reason, updated_at)
                 VALUES (?1, ?2, ?3, 'ok', NULL, ?4)
                 ON CONFLICT (conversation_id) DO UPDATE SET version = ?2,
                     through_message_id = ?3, status = 'ok', degraded_reason = NULL, updated_at = ?4",
                params![conversation_id, version, through_message_id, now],
            )?;
            Ok(MemoryWrite::Written { version })
        })
    }

    fn mark_memory_degraded(
        &self,
        conversation_id: &str,
        expected_version: i64,
        reason: &str,
        now: i64,
    ) -> Result<MemoryWrite> {
        let reason: String = reason.chars().take(MAX_MEMORY_ITEM_CHARS).collect();
        self.write(|t| {
            let current = version(t, conversation_id)?;
            if current != expected_version {
                return Ok(MemoryWrite::Stale { current });
            }
            let version = current + 1;
            t.execute(
                "INSERT INTO conversation_memory
                     (conversation_id, version, through_message_id, status, degraded_reason, updated_at)
                 VALUES (?1, ?2, NULL, 'degraded', ?3, ?4)
                 ON CONFLICT (conversation_id) DO UPDATE SET version = ?2,
                     status = 'degraded', degraded_reason = ?3, updated_at = ?4",
                params![conversation_id, version, reason, now],
            )?;
            Ok(MemoryWrite::Written { version })
        })
    }

    fn delete_memory_item(
        &self,
        owner: i64,
        conversation_id: &str,
        item_id: &str,
        now: i64,
    ) -> Result<()> {
        self.write(|t| {
            owned(t, owner, conversation_id)?;
            let deleted = t.execute(
                "DELETE FROM memory_items WHERE id = ?1 AND conversation_id = ?2",
                params![item_id, conversation_id],
            )?;
            if deleted == 0 {
                return Err(item_not_found(item_id));
            }
            bump_version(t, conversation_id, now)
        })
    }

    fn confirm_memory_item(
        &self,
        owner: i64,
        conversation_id: &str,
        item_id: &str,
        now: i64,
    ) -> Result<MemoryItem> {
        self.write(|t| {
            owned(t, owner, conversation_id)?;
            let item = t
                .query_row(
                    &format!(
                        "SELECT {ITEM_COLUMNS} FROM memory_items WHERE id = ?1 AND conversation_id = ?2"
                    ),
                    params![item_id, conversation_id],
                    item_from_row,
                )
                .optional()?
                .ok_or_else(|| item_not_found(item_id))?;
            if item.trust != Trust::UserStated {
                return Err(StoreError::Conflict(format!(
                    "only an item the user stated can be confirmed; this one is {}",
                    item.trust
                )));
            }
            t.execute(
                "UPDATE memory_items SET trust = 'user_confirmed', updated_at = ?2 WHERE id = ?1",
                params![item_id, now],
            )?;
            bump_version(t, conversation_id, now)?;
            Ok(MemoryItem {
                trust: Trust::UserConfirmed,
                updated_at: now,
                ..item
            })
        })
    }
}

const ITEM_COLUMNS: &str =
    "id, kind, text, source_message_id, citation_id, trust, created_at, updated_at";

fn item_from_row(row: &Row<'_>) -> rusqlite::Result<MemoryItem> {
    Ok(MemoryItem {
        id: row.get(0)?,
        kind: row.get(1)?,
        text: row.get(2)?,
        source_message_id: row.get(3)?,
        citation_id: row.get(4)?,
        trust: row.get(5)?,
        created_at: row.get(6)?,
        updated_at: row.get(7)?,
    })
}

fn read_memory(c: &Connection, conversation_id: &str) -> Result<ConversationMemory> {
    let state = c
        .query_row(
            "SELECT version, through_message_id, status, degraded_reason
             FROM conversation_memory WHERE conversation_id = ?1",
            [conversation_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .optional()?;
    let (version, through_message_id, status, degraded_reason) =
        state.unwrap_or((0, None, MemoryStatus::Ok, None));
    let mut statement = c.prepare(&format!(
        "SELECT {ITEM_COLUMNS} FROM memory_items WHERE conversation_id = ?1
         ORDER BY created_at, rowid"
    ))?;
    let items = statement
        .query_map([conversation_id], item_from_row)?
        .collect::<rusqlite::Result<_>>()?;
    Ok(ConversationMemory {
        version,
        through_message_id,
        status,
        degraded_reason,
        items,
    })
}

fn owned(c: &Connection, owner: i64, conversation_id: &str) -> Result<()> {
    c.query_row(
        "SELECT 1 FROM conversations WHERE id = ?1 AND owner_id = ?2",
        params![conversation_id, owner],
        |_| Ok(()),
    )
    .optional()?
    .ok_or_else(|| StoreError::NotFound(format!("conversation `{conversation_id}`")))
}

fn version(c: &Connection, conversation_id: &str) -> Result<i64> {
    let exists: bool = c.query_row(
        "SELECT EXISTS (SELECT 1 FROM conversations WHERE id = ?1)",
        [conversation_id],
        |r| r.get(0),
    )?;
    if !exists {
        return Err(StoreError::NotFound(format!(
            "conversation `{conversation_id}`"
        )));
    }
    Ok(c.query_row(
        "SELECT version FROM conversation_memory WHERE conversation_id = ?1",
        [conversation_id],
        |r| r.get(0),
    )
    .optional()?
    .unwrap_or(0))
}

fn bump_version(t: &Transaction<'_>, conversation_id: &str, now: i64) -> Result<()> {
    t.execute(
        "INSERT INTO conversation_memory (conversation_id, version, status, updated_at)
         VALUES (?1, 1, 'ok', ?2)
         ON CONFLICT (conversation_id) DO UPDATE SET version = version + 1, updated_at = ?2",
        params![conversation_id, now],
    )?;
    Ok(())
}

fn check_message(c: &Connection, conversation_id: &str, message_id: &str) -> Result<()> {
    c.query_row(
        "SELECT 1 FROM messages WHERE id = ?1 AND conversation_id = ?2",
        params![message_id, conversation_id],
        |_| Ok(()),
    )
    .optional()?
    .ok_or_else(|| {
        StoreError::Invalid(format!(
            "message `{message_id}` is not part of this conversation"
        ))
    })
}

/// The rules every written item follows, whoever produced it.
fn check_items(items: &[NewMemoryItem]) -> Result<()> {
    if items.len() > MAX_MEMORY_ITEMS {
        return Err(StoreError::Invalid(format!(
            "a conversation's memory holds at most {MAX_MEMORY_ITEMS} items"
        )));
    }
    let mut total = 0;
    for item in items {
        let chars = item.text.chars().count();
        if item.text.trim().is_empty() || chars > MAX_MEMORY_ITEM_CHARS {
            return Err(StoreError::Invalid(format!(
                "a memory item holds 1 to {MAX_MEMORY_ITEM_CHARS} characters"
            )));
        }
        if item.kind == MemoryKind::ConfirmedFacts
            && !matches!(item.trust, Trust::UserConfirmed | Trust::ToolVerified)
        {
            return Err(StoreError::Invalid(
                "confirmed_facts accepts only user-confirmed or tool-verified items".into(),
            ));
        }
        total += chars;
    }
    if total > MAX_MEMORY_CHARS {
        return Err(StoreError::Invalid(format!(
            "a conversation's memory holds at most {MAX_MEMORY_CHARS} characters"
        )));
    }
    Ok(())
}

fn insert_item(
    t: &Transaction<'_>,
    conversation_id: &str,
    item: &NewMemoryItem,
    now: i64,
) -> Result<()> {
    t.execute(
        "INSERT INTO memory_items (id, conversation_id, kind, text, source_message_id,
                                   citation_id, trust, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8)",
        params![
            secrets::new_id("mem")?,
            conversation_id,
            item.kind,
            item.text,
            item.source_message_id,
            item.citation_id,
            item.trust,
            now
        ],
    )?;
    Ok(())
}

fn item_not_found(item_id: &str) -> StoreError {
    StoreError::NotFound(format!("memory item `{item_id}`"))
}

#[cfg(test)]
mod tests;
