//! The context envelope: what a chat turn's model calls see, prepared from parts with
//! their own identities and token counts, in the chat model's real tokens against its real
//! context window — the system prompt, the allowed tools, structured memory, the newest
//! complete earlier turns (at most `MAX_HISTORY_TURNS`, never cut inside a turn, as many
//! as the history's budget holds), the question, and the tokens reserved for the answer.
//! It also says how full the window would be with every message memory does not cover yet
//! (`Pressure`): at 60% a compaction should be scheduled, at 85% it should run before the
//! call, and when the fixed parts alone pass 95% the turn is refused with a clear reason —
//! never truncated silently. Pure: the caller counts tokens with its model.

use serde::Serialize;

use crate::engine::{ChatMessage, Role};
pub use crate::runs::ContextTokens;
use crate::store::{Message, MessageRole};

/// Most earlier turns in a prompt.
pub const MAX_HISTORY_TURNS: usize = 6;
/// Tokens a chat template adds around one message (role markers, separators): the
/// templates Warden loads add 3–5.
pub const MESSAGE_OVERHEAD_TOKENS: usize = 5;
/// The share of the window at which a background compaction is due.
pub const SCHEDULE_AT: f64 = 0.60;
/// The share at which compaction must run before the call.
pub const COMPACT_AT: f64 = 0.85;
/// The share the prompt and the reserved answer may never pass.
pub const REFUSE_AT: f64 = 0.95;

/// What the envelope is built from.
pub struct EnvelopeInput<'a> {
    pub system_prompt: &'a str,
    /// The allowed tools' descriptions (part of the system message).
    pub tools: &'a str,
    /// Memory, already framed as data (see `memory::prompt_part`).
    pub memory: Option<&'a str>,
    /// Earlier messages memory does not cover, oldest first.
    pub history: &'a [Message],
    pub question: &'a str,
    /// Tokens kept free for the model's answer.
    pub reserved_output: usize,
    /// The most tokens earlier turns may take (the history part's own budget).
    pub history_budget: usize,
    /// The model's context window, as loaded.
    pub window: usize,
}

/// How full the window would be with everything memory does not cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pressure {
    Comfortable,
    /// At least `SCHEDULE_AT`: compact in the background.
    ScheduleCompaction,
    /// At least `COMPACT_AT`: compact before the call.
    CompactNow,
    /// The system prompt, tools, memory, question and answer alone pass `REFUSE_AT`.
    Overflow,
}

/// The prepared history and what it costs.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    /// The earlier turns to send, oldest first.
    pub history: Vec<ChatMessage>,
    pub tokens: ContextTokens,
    pub pressure: Pressure,
}

/// Token counts of stored messages, kept once counted: messages never change, so a turn
/// counts only the messages added since the last one (bounded; forgotten all at once when
/// full).
#[derive(Default)]
pub struct MessageTokens {
    counts: std::sync::Mutex<std::collections::HashMap<String, usize>>,
}

/// Messages whose counts are kept before the cache starts afresh.
const MAX_COUNTED_MESSAGES: usize = 100_000;

impl MessageTokens {
    /// The tokens of `message`'s content, counted with `count` the first time.
    pub fn of(&self, message: &Message, count: &dyn Fn(&str) -> usize) -> usize {
        let mut counts = self
            .counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(&known) = counts.get(&message.id) {
            return known;
        }
        if counts.len() >= MAX_COUNTED_MESSAGES {
            counts.clear();
        }
        let counted = count(&message.content);
        counts.insert(message.id.clone(), counted);
        counted
    }
}

/// Prepares the envelope, counting text with `count` and stored messages through `known`.
pub fn prepare(
    input: &EnvelopeInput<'_>,
    count: &dyn Fn(&str) -> usize,
    known: &MessageTokens,
) -> Envelope {
    let message = |text: &str| count(text) + MESSAGE_OVERHEAD_TOKENS;
    let mut tokens = ContextTokens {
        system: message(input.system_prompt),
        tools: if input.tools.is_empty() {
            0
        } else {
            count(input.tools)
        },
        memory: input.memory.map_or(0, count),
        question: message(input.question),
        reserved_output: input.reserved_output,
        window: input.window,
        ..ContextTokens::default()
    };
    let fixed = tokens.total();
    let limit = (input.window as f64 * REFUSE_AT) as usize;
    let turns = group_turns(input.history);
    let costs: Vec<usize> = turns
        .iter()
        .map(|turn| {
            turn.iter()
                .map(|m| known.of(m, count) + MESSAGE_OVERHEAD_TOKENS)
                .sum()
        })
        .collect();
    tokens.uncovered_history = costs.iter().sum();
    // The newest whole turns that fit the history's budget and what the fixed parts leave.
    let budget = limit.saturating_sub(fixed).min(input.history_budget);
    let mut kept = 0;
    for cost in costs.iter().rev().take(MAX_HISTORY_TURNS) {
        if tokens.history + cost > budget {
            break;
        }
        tokens.history += cost;
        kept += 1;
    }
    tokens.turns_sent = kept;
    tokens.turns_left_out = turns.len() - kept;
    let history = turns[turns.len() - kept..]
        .iter()
        .flatten()
        .map(|m| ChatMessage::new(role_of(m.role), m.content.clone()))
        .collect();
    let share = |used: usize| used as f64 / input.window.max(1) as f64;
    let pressure = if fixed > limit {
        Pressure::Overflow
    } else if share(fixed + tokens.uncovered_history) >= COMPACT_AT {
        Pressure::CompactNow
    } else if share(fixed + tokens.uncovered_history) >= SCHEDULE_AT {
        Pressure::ScheduleCompaction
    } else {
        Pressure::Comfortable
    };
    Envelope {
        history,
        tokens,
        pressure,
    }
}

/// Messages grouped by turn, in order (a turn is never split).
fn group_turns(history: &[Message]) -> Vec<Vec<&Message>> {
    let mut turns: Vec<Vec<&Message>> = Vec::new();
    for message in history {
        match turns.last_mut() {
            Some(turn) if turn.first().is_some_and(|m| m.turn == message.turn) => {
                turn.push(message)
            }
            _ => turns.push(vec![message]),
        }
    }
    turns
}

fn role_of(role: MessageRole) -> Role {
    match role {
        MessageRole::User => Role::User,
        MessageRole::Assistant => Role::Assistant,
        MessageRole::System => Role::System,
    }
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

    /// One token a word.
    fn words(text: &str) -> usize {
        text.split_whitespace().count()
    }

    fn conversation(turns: i64, words_each: usize) -> Vec<Message> {
        let text = vec!["w"; words_each].join(" ");
        (1..=turns)
            .flat_map(|t| {
                [
                    message(t, MessageRole::User, &text),
                    message(t, MessageRole::Assistant, &text),
                ]
            })
            .collect()
    }

    fn input<'a>(history: &'a [Message], window: usize) -> EnvelopeInput<'a> {
        EnvelopeInput {
            system_prompt: "you are warden",
            tools: "search: finds passages",
            memory: None,
            history,
            question: "what now",
            reserved_output: 100,
            history_budget: usize::MAX,
            window,
        }
    }

    #[test]
    fn whole_turns_newest_first_at_most_six_with_every_part_counted() {
        let history = conversation(10, 10);
        let envelope = prepare(&input(&history, 10_000), &words, &MessageTokens::default());
        assert_eq!(envelope.history.len(), 12, "six turns of two messages");
        assert_eq!(envelope.tokens.turns_sent, 6);
        assert_eq!(envelope.tokens.turns_left_out, 4);
        assert_eq!(envelope.tokens.system, 3 + MESSAGE_OVERHEAD_TOKENS);
        assert_eq!(envelope.tokens.tools, 3);
        assert_eq!(envelope.tokens.question, 2 + MESSAGE_OVERHEAD_TOKENS);
        assert_eq!(envelope.tokens.history, 12 * (10 + MESSAGE_OVERHEAD_TOKENS));
        assert_eq!(
            envelope.tokens.uncovered_history,
            20 * (10 + MESSAGE_OVERHEAD_TOKENS)
        );
        assert_eq!(envelope.pressure, Pressure::Comfortable);
        // An unanswered earlier turn (its run failed) is a turn of one message.
        let mut gapped = conversation(2, 3);
        gapped.insert(2, message(2, MessageRole::User, "retry"));
        gapped.retain(|m| !(m.turn == 2 && m.content != "retry"));
        let envelope = prepare(&input(&gapped, 10_000), &words, &MessageTokens::default());
        let texts: Vec<&str> = envelope
            .history
            .iter()
            .map(|m| m.content.as_str())
            .collect();
        assert_eq!(texts, ["w w w", "w w w", "retry"]);
    }

    #[test]
    fn a_turn_that_does_not_fit_is_left_out_whole_never_cut() {
        let mut history = conversation(3, 10);
        history.push(message(4, MessageRole::User, &vec!["big"; 500].join(" ")));
        history.push(message(4, MessageRole::Assistant, "ok"));
        let envelope = prepare(&input(&history, 600), &words, &MessageTokens::default());
        // The newest turn alone is over the history budget: nothing older is sent past it.
        assert_eq!(envelope.tokens.turns_sent, 0);
        assert!(envelope.history.is_empty());
        assert!(envelope.tokens.total() as f64 <= 600.0 * REFUSE_AT);
        // The history part's own budget holds too.
        let history = conversation(10, 10);
        let mut budgeted = input(&history, 10_000);
        budgeted.history_budget = 2 * 2 * (10 + MESSAGE_OVERHEAD_TOKENS);
        assert_eq!(
            prepare(&budgeted, &words, &MessageTokens::default())
                .tokens
                .turns_sent,
            2
        );
    }

    #[test]
    fn a_message_is_counted_once() {
        let history = conversation(3, 4);
        let calls = std::cell::Cell::new(0);
        let counting = |text: &str| {
            calls.set(calls.get() + 1);
            words(text)
        };
        let known = MessageTokens::default();
        let first = prepare(&input(&history, 10_000), &counting, &known);
        let after_first = calls.get();
        let second = prepare(&input(&history, 10_000), &counting, &known);
        assert_eq!(first, second);
        // Only the system prompt, tools and question are counted again.
        assert_eq!(calls.get() - after_first, after_first - history.len());
    }

    #[test]
    fn pressure_follows_the_thresholds_over_what_memory_does_not_cover() {
        let fixed = |e: &Envelope| e.tokens.total() - e.tokens.history;
        let window = 1_000;
        let cases = [
            (0, Pressure::Comfortable),
            (40, Pressure::ScheduleCompaction),
            (60, Pressure::CompactNow),
        ];
        for (turns, expected) in cases {
            let history = conversation(turns, 3);
            let envelope = prepare(&input(&history, window), &words, &MessageTokens::default());
            let share =
                (fixed(&envelope) + envelope.tokens.uncovered_history) as f64 / window as f64;
            assert_eq!(envelope.pressure, expected, "{turns} turns: {share:.2}");
        }
        // The fixed parts alone past 95%: refused, whatever the history.
        let history = conversation(1, 3);
        let mut tight = input(&history, 1_000);
        tight.reserved_output = 950;
        assert_eq!(
            prepare(&tight, &words, &MessageTokens::default()).pressure,
            Pressure::Overflow
        );
    }
}
