//! The tool ledger: every tool call of a run, keyed by `tool_call_key = hash(run, logical
//! step, tool, canonical arguments)`. A claim is made under the run's lease; a resumed run
//! reuses a stored result instead of calling again; a read-only call whose earlier attempt
//! never settled may be retried, but a side-effecting one becomes `uncertain` and goes to
//! a human — it is never re-executed blindly.

use rusqlite::{params, OptionalExtension};

use super::runs::check_lease_holder;
use super::text_enum::text_enum;
use super::{Result, Store, StoreError};

/// What a tool may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SideEffect {
    Read,
    Write,
    Dangerous,
}

text_enum!(SideEffect, "side effect", {
    Read => "read",
    Write => "write",
    Dangerous => "dangerous",
});

/// Where a ledger entry stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LedgerState {
    Claimed,
    Succeeded,
    Failed,
    Uncertain,
}

text_enum!(LedgerState, "ledger state", {
    Claimed => "claimed",
    Succeeded => "succeeded",
    Failed => "failed",
    Uncertain => "uncertain",
});

/// A call to claim.
pub struct ToolClaim<'a> {
    pub key: &'a str,
    pub run_id: &'a str,
    pub step: i64,
    pub tool: &'a str,
    pub side_effect: SideEffect,
    pub worker: &'a str,
}

/// What claiming found.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimOutcome {
    /// Call the tool now, then settle the entry.
    Run,
    /// An earlier attempt succeeded: reuse its result (JSON text).
    Reuse(String),
    /// An earlier attempt of a side-effecting call failed: do not call again.
    FailedBefore(String),
    /// A side-effecting call's earlier outcome is unknown: a person must look.
    Uncertain,
}

pub trait ToolLedger {
    /// Claims the call for `worker`, which must hold the run's lease (`Conflict`
    /// otherwise).
    fn claim_tool_call(&self, claim: &ToolClaim<'_>, now: i64) -> Result<ClaimOutcome>;
    /// Records the call's outcome: `Succeeded` with its result JSON, or `Failed` with an
    /// error.
    fn settle_tool_call(
        &self,
        key: &str,
        worker: &str,
        outcome: std::result::Result<&str, &str>,
        now: i64,
    ) -> Result<()>;
    /// The run's ledger as (step, tool, state), in order.
    fn tool_calls_of_run(&self, run_id: &str) -> Result<Vec<(i64, String, LedgerState)>>;
    /// Whether the run's events hold the `tool.completed` of call `call_id`. A kill can
    /// fall between a call's settlement and that event, so a resumed run that reuses a
    /// settled result asks before announcing it.
    fn completion_announced(&self, run_id: &str, call_id: &str) -> Result<bool>;
}

impl ToolLedger for Store {
    fn claim_tool_call(&self, claim: &ToolClaim<'_>, now: i64) -> Result<ClaimOutcome> {
        self.write(|t| {
            check_lease_holder(t, claim.run_id, claim.worker)?;
            let existing: Option<(LedgerState, SideEffect, Option<String>, Option<String>)> = t
                .query_row(
                    "SELECT state, side_effect, result, error FROM tool_ledger
                     WHERE tool_call_key = ?1",
                    [claim.key],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                )
                .optional()?;
            let retry = |t: &rusqlite::Transaction| -> Result<ClaimOutcome> {
                t.execute(
                    "UPDATE tool_ledger SET state = 'claimed', claimed_by = ?2, error = NULL,
                         updated_at = ?3 WHERE tool_call_key = ?1",
                    params![claim.key, claim.worker, now],
                )?;
                Ok(ClaimOutcome::Run)
            };
            match existing {
                None => {
                    t.execute(
                        "INSERT INTO tool_ledger (tool_call_key, run_id, step, tool, side_effect,
                             state, claimed_by, created_at, updated_at)
                         VALUES (?1, ?2, ?3, ?4, ?5, 'claimed', ?6, ?7, ?7)",
                        params![
                            claim.key,
                            claim.run_id,
                            claim.step,
                            claim.tool,
                            claim.side_effect,
                            claim.worker,
                            now
                        ],
                    )?;
                    Ok(ClaimOutcome::Run)
                }
                Some((LedgerState::Succeeded, _, result, _)) => {
                    Ok(ClaimOutcome::Reuse(result.unwrap_or_else(|| "null".into())))
                }
                Some((_, SideEffect::Read, _, _)) => retry(t),
                Some((LedgerState::Failed, _, _, error)) => {
                    Ok(ClaimOutcome::FailedBefore(error.unwrap_or_default()))
                }
                Some((LedgerState::Claimed | LedgerState::Uncertain, _, _, _)) => {
                    t.execute(
                        "UPDATE tool_ledger SET state = 'uncertain', updated_at = ?2
                         WHERE tool_call_key = ?1",
                        params![claim.key, now],
                    )?;
                    Ok(ClaimOutcome::Uncertain)
                }
            }
        })
    }

    fn settle_tool_call(
        &self,
        key: &str,
        worker: &str,
        outcome: std::result::Result<&str, &str>,
        now: i64,
    ) -> Result<()> {
        if let Ok(result) = outcome {
            super::runs::validate_json(result, "tool result")?;
        }
        let (state, result, error) = match outcome {
            Ok(result) => (LedgerState::Succeeded, Some(result), None),
            Err(error) => (LedgerState::Failed, None, Some(error)),
        };
        self.write(|t| {
            let changed = t.execute(
                "UPDATE tool_ledger SET state = ?3, result = ?4, error = ?5, updated_at = ?6
                 WHERE tool_call_key = ?1 AND claimed_by = ?2 AND state = 'claimed'",
                params![key, worker, state, result, error, now],
            )?;
            if changed == 1 {
                Ok(())
            } else {
                Err(StoreError::Conflict(format!(
                    "tool call `{key}` is not claimed by this worker"
                )))
            }
        })
    }

    fn tool_calls_of_run(&self, run_id: &str) -> Result<Vec<(i64, String, LedgerState)>> {
        self.read(|c| {
            let mut statement = c.prepare(
                "SELECT step, tool, state FROM tool_ledger WHERE run_id = ?1
                 ORDER BY step, created_at",
            )?;
            let rows = statement.query_map([run_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    fn completion_announced(&self, run_id: &str, call_id: &str) -> Result<bool> {
        self.read(|c| {
            Ok(c.query_row(
                "SELECT EXISTS (SELECT 1 FROM run_events WHERE run_id = ?1
                     AND type = 'tool.completed' AND json_extract(data, '$.call_id') = ?2)",
                params![run_id, call_id],
                |r| r.get(0),
            )?)
        })
    }
}
