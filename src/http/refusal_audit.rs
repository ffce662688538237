//! Audit rows for refusals anyone can cause without credentials (a webhook post with a
//! wrong token, a failed sign-in) are aggregated: the first refusal of a kind in a window is
//! written at once; the rest in that window are only counted, and their number is written
//! (`"refused_since_last_row"`) with the next row of that kind. A flood writes one row per
//! kind and minute instead of one per request; every refusal is still in `/metrics`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::AppState;
use crate::store::AuditOutcome;

/// One row per kind of refusal within this window.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Kinds tracked at once; beyond it (a flood of distinct names) they share one entry.
const MAX_KINDS: usize = 1024;
/// The kind that kinds beyond `MAX_KINDS` share.
const OVERFLOW: &str = "\u{0}overflow";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Write a row, saying how many refusals of this kind went unwritten before it.
    Write { refused_since_last_row: u64 },
    /// Count it only.
    Count,
}

struct Kind {
    written_at: Instant,
    unwritten: u64,
}

#[derive(Default)]
pub struct RefusalAudit {
    kinds: Mutex<HashMap<String, Kind>>,
}

impl RefusalAudit {
    /// Whether the refusal of `kind` at `now` gets its own audit row.
    pub fn refused(&self, kind: &str, now: Instant) -> Decision {
        let mut kinds = self
            .kinds
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if kinds.len() >= MAX_KINDS && !kinds.contains_key(kind) {
            kinds.retain(|_, k| now.saturating_duration_since(k.written_at) < WINDOW);
        }
        let key = if kinds.len() >= MAX_KINDS && !kinds.contains_key(kind) {
            OVERFLOW
        } else {
            kind
        };
        match kinds.get_mut(key) {
            Some(entry) if now.saturating_duration_since(entry.written_at) < WINDOW => {
                entry.unwritten += 1;
                Decision::Count
            }
            Some(entry) => {
                let refused_since_last_row = entry.unwritten;
                *entry = Kind {
                    written_at: now,
                    unwritten: 0,
                };
                Decision::Write {
                    refused_since_last_row,
                }
            }
            None => {
                kinds.insert(
                    key.to_owned(),
                    Kind {
                        written_at: now,
                        unwritten: 0,
                    },
                );
                Decision::Write {
                    refused_since_last_row: 0,
                }
            }
        }
    }
}

/// A refusal anyone can cause without credentials: audited as `Denied`, at most one row per
/// actor, action and reason a minute (`refusal_audit`), always counted in `/metrics`.
pub(super) async fn audit_anonymous_refusal(
    state: &AppState,
    actor: &str,
    action: &'static str,
    mut detail: Value,
) {
    state.metrics.refusal(action);
    let kind = format!("{action}\u{0}{actor}\u{0}{detail}");
    let decision = state.refusals.refused(&kind, std::time::Instant::now());
    let Decision::Write {
        refused_since_last_row,
    } = decision
    else {
        return;
    };
    if refused_since_last_row > 0 {
        if let Some(fields) = detail.as_object_mut() {
            fields.insert(
                "refused_since_last_row".to_owned(),
                refused_since_last_row.into(),
            );
        }
    }
    super::incidents::audit(
        state,
        actor,
        action,
        None,
        AuditOutcome::Denied,
        Some(detail),
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_writes_one_row_a_window_and_counts_the_rest() {
        let audit = RefusalAudit::default();
        let start = Instant::now();
        let written = (0..1000)
            .filter(|n| {
                let at = start + Duration::from_millis(*n);
                matches!(audit.refused("alert.receive", at), Decision::Write { .. })
            })
            .count();
        assert_eq!(written, 1);
        // Another kind is not held back by the first.
        assert!(matches!(
            audit.refused("auth.login:alice", start),
            Decision::Write { .. }
        ));
        assert_eq!(
            audit.refused("alert.receive", start + WINDOW),
            Decision::Write {
                refused_since_last_row: 999
            }
        );
    }

    #[test]
    fn distinct_kinds_beyond_the_bound_share_one_entry() {
        let audit = RefusalAudit::default();
        let now = Instant::now();
        let written = (0..MAX_KINDS * 3)
            .filter(|n| {
                matches!(
                    audit.refused(&format!("auth.login:user{n}"), now),
                    Decision::Write { .. }
                )
            })
            .count();
        assert_eq!(
            written,
            MAX_KINDS + 1,
            "one row per kind up to the bound, then one for all the rest"
        );
        assert!(audit.kinds.lock().unwrap().len() <= MAX_KINDS + 1);
    }
}
