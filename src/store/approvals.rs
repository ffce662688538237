//! Recovery approvals by a second person. A recovery request its requester confirmed
//! waits as `awaiting_approval`; an approver (the caller checks the role in
//! `crate::policy`) reads the queue with what each request would approve — the incident,
//! the report's root cause and proposal — and approves or rejects it, repeating the
//! parameters hash they were shown. The rules, all in `decide_recovery_approval`:
//!
//! - only an action awaiting approval can be decided (`NotFound` for any other id, a
//!   `Conflict` once decided or expired);
//! - the approver needs `approver_can_approve` (`Forbidden`), and, while a second approver
//!   is required, must not be the requester (`Forbidden`);
//! - the parameters hash must equal the action's (`Mismatch`);
//! - approving re-checks that the task still exists and its report proposes a recovery
//!   (else the action ends `failed`) and records the approval in the approver's name;
//!   nothing is executed.

use rusqlite::{params, Connection, OptionalExtension};

use super::actions::{
    action_from_row, approve_recovery, expired, Decision, PendingAction, PendingActionStatus,
    ACTION_COLUMNS,
};
use super::diagnostics::owned_task;
use super::secrets;
use super::{Result, Store, StoreError};
use crate::diagnostics::report::Report;
use crate::diagnostics::state::{Proposal, RootCause};

/// A recovery request waiting for approval, with what approving it would approve.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AwaitingRecovery {
    pub action: PendingAction,
    /// The name of the user who requested it.
    pub requester: String,
    pub diagnostic_task_id: String,
    pub incident_id: String,
    /// The report's root cause, as the report states it.
    pub root_cause: Option<RootCause>,
    /// The report's recovery proposal.
    pub proposal: Option<Proposal>,
}

/// An approver's answer to a recovery request awaiting approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApprovalDecision<'a> {
    pub approver_id: i64,
    /// Whether the approver's role may approve recoveries (`crate::policy`).
    pub approver_can_approve: bool,
    pub action_id: &'a str,
    pub decision: Decision,
    /// The hash of the parameters the approver saw; must equal the action's.
    pub parameters_hash: &'a str,
}

pub trait RecoveryApprovals {
    /// Recovery requests awaiting approval, oldest first, at most `limit`.
    fn recoveries_awaiting_approval(&self, limit: usize) -> Result<Vec<AwaitingRecovery>>;
    /// Approves or rejects one, in one write transaction, under the rules in this module's
    /// doc; the action as it stands after.
    fn decide_recovery_approval(
        &self,
        decision: &ApprovalDecision<'_>,
        now: i64,
    ) -> Result<PendingAction>;
}

impl RecoveryApprovals for Store {
    fn recoveries_awaiting_approval(&self, limit: usize) -> Result<Vec<AwaitingRecovery>> {
        self.read(|c| {
            let mut statement = c.prepare(&format!(
                "SELECT {ACTION_COLUMNS} FROM pending_actions
                 WHERE status = 'awaiting_approval' ORDER BY created_at, id LIMIT ?1"
            ))?;
            let actions = statement
                .query_map([limit as i64], action_from_row)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            actions
                .into_iter()
                .map(|action| awaiting(c, action))
                .collect()
        })
    }

    fn decide_recovery_approval(
        &self,
        decision: &ApprovalDecision<'_>,
        now: i64,
    ) -> Result<PendingAction> {
        let approval_id = secrets::new_id("approval")?;
        let second_approver_required = self.second_approver_required();
        let (action, refusal) = self.write(|t| {
            let action = awaiting_action(t, decision.action_id)?;
            if !decision.approver_can_approve {
                return Err(StoreError::Forbidden(
                    "approving a recovery needs the operator or admin role".into(),
                ));
            }
            if second_approver_required && decision.approver_id == action.owner_id {
                return Err(StoreError::Forbidden(
                    "a recovery must be approved by someone other than the person who \
                     requested it"
                        .into(),
                ));
            }
            if decision.parameters_hash != action.parameters_hash {
                return Err(StoreError::Mismatch(format!(
                    "the parameters hash does not match action `{}`'s parameters; read the \
                     request again and approve what it will do",
                    action.id
                )));
            }
            if action.expires_at <= now {
                t.execute(
                    "UPDATE pending_actions SET status = 'expired' WHERE id = ?1",
                    [&action.id],
                )?;
                return Ok((action, Some(expired(decision.action_id))));
            }
            let (status, result) = match decision.decision {
                Decision::Reject => (PendingActionStatus::Rejected, None),
                Decision::Confirm => {
                    approve_recovery(t, &action, &approval_id, decision.approver_id, now)?
                }
            };
            let result_text = result
                .map(|value| serde_json::to_string(&value))
                .transpose()
                .map_err(|err| StoreError::Invalid(err.to_string()))?;
            t.execute(
                "UPDATE pending_actions SET status = ?2, result = ?3, decided_by = ?4,
                     decided_at = ?5 WHERE id = ?1",
                params![action.id, status, result_text, decision.approver_id, now],
            )?;
            Ok((action_by_id(t, &action.id)?, None))
        })?;
        match refusal {
            Some(err) => Err(err),
            None => Ok(action),
        }
    }
}

/// The action if it is a recovery request awaiting approval: `NotFound` for any other id
/// (approvers see only the approval queue), `Conflict` once it was decided.
fn awaiting_action(c: &Connection, id: &str) -> Result<PendingAction> {
    let action = action_by_id(c, id)?;
    match action.status {
        PendingActionStatus::AwaitingApproval => Ok(action),
        PendingActionStatus::Pending => Err(StoreError::NotFound(format!("approval `{id}`"))),
        PendingActionStatus::Expired => Err(expired(id)),
        decided => Err(StoreError::Conflict(format!(
            "action `{id}` was already decided ({decided})"
        ))),
    }
}

fn action_by_id(c: &Connection, id: &str) -> Result<PendingAction> {
    c.query_row(
        &format!(
            "SELECT {ACTION_COLUMNS} FROM pending_actions
             WHERE id = ?1 AND kind = 'recovery_request'"
        ),
        [id],
        action_from_row,
    )
    .optional()?
    .ok_or_else(|| StoreError::NotFound(format!("approval `{id}`")))
}

fn awaiting(c: &Connection, action: PendingAction) -> Result<AwaitingRecovery> {
    let requester: String = c.query_row(
        "SELECT name FROM users WHERE id = ?1",
        [action.owner_id],
        |r| r.get(0),
    )?;
    let task_id = action.parameters["diagnostic_task_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let (incident_id, root_cause, proposal) = match owned_task(c, action.owner_id, &task_id) {
        Ok(task) => (
            task.incident_id.clone(),
            task.report.as_ref().and_then(|r| r.root_cause.clone()),
            task.report.as_ref().and_then(Report::proposal).cloned(),
        ),
        Err(StoreError::NotFound(_)) => (String::new(), None, None),
        Err(other) => return Err(other),
    };
    Ok(AwaitingRecovery {
        action,
        requester,
        diagnostic_task_id: task_id,
        incident_id,
        root_cause,
        proposal,
    })
}
