//! The conversation history a model call sees: the last complete turns (a user message
//! and its answer are never separated), newest kept first, within a character budget
//! counted in characters, not bytes.

use crate::engine::{ChatMessage, Role};
use crate::store::{Message, MessageRole};

/// Most earlier turns put in a prompt.
pub const MAX_HISTORY_TURNS: usize = 6;

/// The newest complete turns of `history` (oldest first) that fit `max_chars`.
pub fn recent_turns(history: &[Message], max_turns: usize, max_chars: usize) -> Vec<ChatMessage> {
    let mut turns: Vec<Vec<&Message>> = Vec::new();
    for message in history {
        match turns.last_mut() {
            Some(turn) if turn.first().is_some_and(|m| m.turn == message.turn) => {
                turn.push(message)
            }
            _ => turns.push(vec![message]),
        }
    }
    let mut kept: Vec<Vec<&Message>> = Vec::new();
    let mut chars = 0;
    for turn in turns.into_iter().rev() {
        if kept.len() >= max_turns {
            break;
        }
        let size: usize = turn.iter().map(|m| m.content.chars().count()).sum();
        if chars + size > max_chars {
            break;
        }
        chars += size;
        kept.push(turn);
    }
    kept.into_iter()
        .rev()
        .flatten()
        .map(|m| {
            let role = match m.role {
                MessageRole::User => Role::User,
                MessageRole::Assistant => Role::Assistant,
                MessageRole::System => Role::System,
            };
            ChatMessage::new(role, m.content.clone())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(turn: i64, role: MessageRole, content: &str) -> Message {
        Message {
            id: format!("m{turn}{role:?}"),
            conversation_id: "c".into(),
            turn,
            role,
            content: content.into(),
            run_id: None,
            created_at: 0,
        }
    }

    #[test]
    fn whole_turns_are_kept_newest_first_counting_characters() {
        let history = vec![
            message(1, MessageRole::User, "old question"),
            message(1, MessageRole::Assistant, "old answer"),
            message(2, MessageRole::User, "问题二"),
            message(2, MessageRole::Assistant, "答案二"),
            message(3, MessageRole::User, "unanswered"),
        ];
        let all = recent_turns(&history, 6, 10_000);
        assert_eq!(all.len(), 5);
        // 6 CJK characters are 18 bytes: counted as 6, so turn 2 fits a 16-char budget.
        let cut = recent_turns(&history, 6, 16);
        let texts: Vec<&str> = cut.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(texts, ["问题二", "答案二", "unanswered"]);
        let two = recent_turns(&history, 2, 10_000);
        assert_eq!(two.len(), 3);
        assert_eq!(two[0].content, "问题二");
    }
}
