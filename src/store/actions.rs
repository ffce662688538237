//! Pending actions: things the agent may only propose and a person must set going (start a
//! diagnostic, request a recovery). An action's exact parameters are bound by their hash,
//! which a confirmation must repeat; every decision carries an idempotency key, recorded
//! with the response in the same transaction, so a retried request gets the same answer and
//! never decides twice. All the rules live in `decide_action`, not in its callers:
//!
//! - the action must be the deciding user's (`NotFound` otherwise, exactly as if missing);
//! - confirming a `recovery_request` needs `actor_can_recover`, a `diagnostic_start`
//!   `actor_can_start_diagnostic` (both from `crate::policy`; `Forbidden`, HTTP 403);
//!   rejecting needs neither;
//! - approving a recovery needs the task's report to propose one (`recovery.proposal`);
//!   otherwise the action ends `failed`, with no approval recorded;
//! - while a second approver is required (the default), the requester's confirmation of a
//!   recovery request records no approval: the action becomes `awaiting_approval`, and
//!   another operator or admin approves or rejects it (`approvals`);
//! - a key already used for the same action, decision and parameters hash returns the
//!   stored response (a replay); a key still in flight is a `Conflict` (409); a key used
//!   for another action, decision or hash is a `Mismatch` (422);
//! - the supplied parameters hash must equal the action's (`Mismatch`, 422);
//! - a pending action past `expires_at` becomes `expired` (committed) and the decision is a
//!   `Conflict`; an action already decided refuses another decision (`Conflict`).
//!
//! Confirming a `diagnostic_start` (parameters `{"incident_id"}`) creates a diagnostic task
//! waiting for the graph with a queued `diagnostic` run and marks the action `executed`;
//! confirming a `recovery_request` (parameters `{"diagnostic_task_id"}`) submits it for a
//! second person's approval (`awaiting_approval`), or, with no second approver required,
//! records a recovery approval and marks it `confirmed`: nothing is executed either way.
//! Rejecting marks it `rejected`.

use rusqlite::{params, Connection, OptionalExtension, Row};
use serde_json::{json, Value};

use super::diagnostics::{
    check_active_diagnostics, insert_diagnostic_task, is_diagnostic_task_id,
    new_diagnostic_task_id, owned_task, DiagnosticStatus, TaskInsert,
};
use super::incidents::{is_incident_id, json_column, to_json_text};
use super::runs::insert_queued_diagnostic_run;
use super::secrets;
use super::text_enum::text_enum;
use super::{Result, Store, StoreError};
use crate::diagnostics::report::Report;

/// Longest idempotency key, in characters.
pub const MAX_IDEMPOTENCY_KEY_CHARS: usize = 200;
/// Longest action target, in characters.
pub const MAX_ACTION_TARGET_CHARS: usize = 200;
/// Longest action reason, in characters.
pub const MAX_ACTION_REASON_CHARS: usize = 2000;

/// What an action would do once confirmed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PendingActionKind {
    DiagnosticStart,
    RecoveryRequest,
}

text_enum!(PendingActionKind, "pending action kind", {
    DiagnosticStart => "diagnostic_start",
    RecoveryRequest => "recovery_request",
});

/// Where an action stands. Only `pending` may be decided; the others are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PendingActionStatus {
    Pending,
    /// Its requester confirmed a recovery request; another person must approve it.
    AwaitingApproval,
    /// Approved and on record (a recovery request); nothing was executed.
    Confirmed,
    Rejected,
    Expired,
    /// Confirmed and carried out (a diagnostic task was started).
    Executed,
    /// Confirmed, but what it needed no longer exists; `result` says why.
    Failed,
}

text_enum!(PendingActionStatus, "pending action status", {
    Pending => "pending",
    AwaitingApproval => "awaiting_approval",
    Confirmed => "confirmed",
    Rejected => "rejected",
    Expired => "expired",
    Executed => "executed",
    Failed => "failed",
});

/// An action for the agent to propose.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NewPendingAction<'a> {
    pub kind: PendingActionKind,
    pub target: &'a str,
    pub reason: &'a str,
    pub parameters: &'a Value,
    pub run_id: &'a str,
    pub owner_id: i64,
    pub expires_at: i64,
}

/// An action as stored.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PendingAction {
    pub id: String,
    pub kind: PendingActionKind,
    pub target: String,
    pub reason: String,
    pub parameters: Value,
    /// `parameters_hash(&parameters)`: what a confirmation must repeat.
    pub parameters_hash: String,
    pub run_id: String,
    pub owner_id: i64,
    pub status: PendingActionStatus,
    pub result: Option<Value>,
    pub expires_at: i64,
    pub created_at: i64,
    pub decided_at: Option<i64>,
}

/// A person's answer to a pending action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Confirm,
    Reject,
}

text_enum!(Decision, "decision", { Confirm => "confirm", Reject => "reject" });

/// One confirm or reject request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActionDecision<'a> {
    /// The deciding user, who must own the action.
    pub owner_id: i64,
    /// Whether the deciding user's role may approve a recovery (operator or admin).
    pub actor_can_recover: bool,
    /// Whether the person deciding may start diagnostics (`crate::policy`, confirm channel).
    pub actor_can_start_diagnostic: bool,
    pub action_id: &'a str,
    pub decision: Decision,
    /// The client's key for this request: a retry with the same key gets the same answer.
    pub idempotency_key: &'a str,
    /// The hash of the parameters the person saw; must equal the action's.
    pub parameters_hash: &'a str,
}

/// What a decision did.
#[derive(Debug, Clone, PartialEq)]
pub struct DecidedAction {
    /// The action as it stands now.
    pub action: PendingAction,
    /// The response to send: `{"action": {id, kind, target, status, result, decided_at}}`
    /// as of the decision (a replay gets the stored one, unchanged).
    pub response: Value,
    /// `true` when the idempotency key had already been used and nothing was decided now.
    pub replayed: bool,
}

/// Pending actions and their decisions on the store.
pub trait Actions {
    /// Stores a `pending` action (`act_…`). `NotFound` unless `run_id` is the owner's run;
    /// `Invalid` for an empty target, an expiry not after `now`, or parameters that are not
    /// an object naming an existing incident (`incident_id`, diagnostic start) or one of the
    /// owner's diagnostic tasks (`diagnostic_task_id`, recovery request).
    fn create_pending_action(
        &self,
        action: &NewPendingAction<'_>,
        now: i64,
    ) -> Result<PendingAction>;
    /// The action if `owner` owns it; `NotFound` alike for missing and not owned. A pending
    /// action past its expiry still reads `pending` until someone decides it.
    fn pending_action(&self, owner: i64, id: &str) -> Result<PendingAction>;
    /// The owner's actions proposed by `run_id`, oldest first (none for another's run).
    fn pending_actions_of_run(&self, owner: i64, run_id: &str) -> Result<Vec<PendingAction>>;
    /// Confirms or rejects, in one write transaction, under the rules in this module's doc.
    fn decide_action(&self, decision: &ActionDecision<'_>, now: i64) -> Result<DecidedAction>;
}

/// SHA-256 (lowercase hex) of `parameters` as canonical JSON: object keys sorted by code
/// point at every level, no whitespace, strings and numbers as serde_json writes them.
pub fn parameters_hash(parameters: &Value) -> String {
    let mut canonical = String::new();
    write_canonical(parameters, &mut canonical);
    secrets::secret_hash(&canonical)
}

impl Actions for Store {
    fn create_pending_action(
        &self,
        action: &NewPendingAction<'_>,
        now: i64,
    ) -> Result<PendingAction> {
        let target = action.target.trim();
        if target.is_empty() || target.chars().count() > MAX_ACTION_TARGET_CHARS {
            return Err(StoreError::Invalid(format!(
                "an action's target must be 1 to {MAX_ACTION_TARGET_CHARS} characters"
            )));
        }
        if action.reason.chars().count() > MAX_ACTION_REASON_CHARS {
            return Err(StoreError::Invalid(format!(
                "an action's reason must be at most {MAX_ACTION_REASON_CHARS} characters"
            )));
        }
        if action.expires_at <= now {
            return Err(StoreError::Invalid(
                "an action must expire after it is created".into(),
            ));
        }
        let id = secrets::new_id("act")?;
        let hash = parameters_hash(action.parameters);
        let parameters = to_json_text(action.parameters)?;
        self.write(|t| {
            let run_owned = t
                .query_row(
                    "SELECT 1 FROM runs WHERE id = ?1 AND owner_id = ?2",
                    params![action.run_id, action.owner_id],
                    |_| Ok(()),
                )
                .optional()?;
            if run_owned.is_none() {
                return Err(StoreError::NotFound(format!("run `{}`", action.run_id)));
            }
            check_parameters(t, action.kind, action.parameters, action.owner_id)?;
            t.execute(
                "INSERT INTO pending_actions (id, kind, target, reason, parameters,
                     parameters_hash, run_id, owner_id, status, expires_at, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'pending', ?9, ?10)",
                params![
                    id,
                    action.kind,
                    target,
                    action.reason,
                    parameters,
                    hash,
                    action.run_id,
                    action.owner_id,
                    action.expires_at,
                    now
                ],
            )?;
            owned_action(t, action.owner_id, &id)
        })
    }

    fn pending_action(&self, owner: i64, id: &str) -> Result<PendingAction> {
        self.read(|c| owned_action(c, owner, id))
    }

    fn pending_actions_of_run(&self, owner: i64, run_id: &str) -> Result<Vec<PendingAction>> {
        self.read(|c| {
            let mut statement = c.prepare(&format!(
                "SELECT {ACTION_COLUMNS} FROM pending_actions WHERE run_id = ?1 AND owner_id = ?2
                 ORDER BY created_at, rowid"
            ))?;
            let rows = statement.query_map(params![run_id, owner], action_from_row)?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    fn decide_action(&self, decision: &ActionDecision<'_>, now: i64) -> Result<DecidedAction> {
        check_idempotency_key(decision.idempotency_key)?;
        // Drawn before the transaction: the random generator may fail, SQL may not wait on it.
        let fresh = FreshIds {
            task: new_diagnostic_task_id()?,
            run: secrets::new_id("run")?,
            approval: secrets::new_id("approval")?,
            active_diagnostics_limit: self.active_diagnostics_limit(),
            second_approver_required: self.second_approver_required(),
        };
        match self.write(|t| decide_in(t, decision, &fresh, now))? {
            Outcome::Decided(decided) => Ok(decided),
            // Refused after a change that must stay (the action's expiry).
            Outcome::Refused(err) => Err(err),
        }
    }
}

/// Ids for what a confirmation may create, and the owner's allowance for it.
struct FreshIds {
    task: String,
    run: String,
    approval: String,
    active_diagnostics_limit: Option<u32>,
    second_approver_required: bool,
}

/// How a decision's transaction ends: committed either way.
enum Outcome {
    Decided(DecidedAction),
    Refused(StoreError),
}

/// An idempotency key's recorded request.
struct RecordedRequest {
    action_id: String,
    decision: Decision,
    parameters_hash: String,
    /// `false` while the request is `in_flight`.
    done: bool,
    response: Option<Value>,
}

fn decide_in(
    t: &Connection,
    decision: &ActionDecision<'_>,
    fresh: &FreshIds,
    now: i64,
) -> Result<Outcome> {
    let action = owned_action(t, decision.owner_id, decision.action_id)?;
    if decision.decision == Decision::Confirm
        && action.kind == PendingActionKind::RecoveryRequest
        && !decision.actor_can_recover
    {
        return Err(StoreError::Forbidden(
            "confirming a recovery request needs the operator or admin role".into(),
        ));
    }
    if decision.decision == Decision::Confirm
        && action.kind == PendingActionKind::DiagnosticStart
        && !decision.actor_can_start_diagnostic
    {
        return Err(StoreError::Forbidden(
            "starting a diagnostic needs the operator or admin role".into(),
        ));
    }
    if let Some(request) = recorded_request(t, decision.owner_id, decision.idempotency_key)? {
        return replay(request, decision, action);
    }
    if decision.parameters_hash != action.parameters_hash {
        return Err(StoreError::Mismatch(format!(
            "the parameters hash does not match action `{}`'s parameters; read the action \
             again and confirm what it will do",
            action.id
        )));
    }
    if action.status == PendingActionStatus::Pending && action.expires_at <= now {
        t.execute(
            "UPDATE pending_actions SET status = 'expired' WHERE id = ?1",
            [&action.id],
        )?;
        return Ok(Outcome::Refused(expired(&action.id)));
    }
    match action.status {
        PendingActionStatus::Pending => {}
        PendingActionStatus::Expired => return Err(expired(&action.id)),
        decided => {
            return Err(StoreError::Conflict(format!(
                "action `{}` was already decided ({decided})",
                action.id
            )))
        }
    }
    t.execute(
        "INSERT INTO action_requests (owner_id, idempotency_key, action_id, decision,
             parameters_hash, state, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, 'in_flight', ?6)",
        params![
            decision.owner_id,
            decision.idempotency_key,
            action.id,
            decision.decision,
            decision.parameters_hash,
            now
        ],
    )?;
    let (status, result) = match (decision.decision, action.kind) {
        (Decision::Reject, _) => (PendingActionStatus::Rejected, None),
        (Decision::Confirm, PendingActionKind::DiagnosticStart) => {
            start_diagnostic(t, &action, fresh, now)?
        }
        (Decision::Confirm, PendingActionKind::RecoveryRequest) => {
            if fresh.second_approver_required {
                submit_recovery(t, &action)?
            } else {
                approve_recovery(t, &action, &fresh.approval, action.owner_id, now)?
            }
        }
    };
    let result_text = result.as_ref().map(to_json_text).transpose()?;
    t.execute(
        "UPDATE pending_actions SET status = ?2, result = ?3, decided_by = ?4, decided_at = ?5
         WHERE id = ?1",
        params![action.id, status, result_text, decision.owner_id, now],
    )?;
    let action = owned_action(t, decision.owner_id, &action.id)?;
    let response = decision_response(&action);
    t.execute(
        "UPDATE action_requests SET state = 'done', response = ?3
         WHERE owner_id = ?1 AND idempotency_key = ?2",
        params![
            decision.owner_id,
            decision.idempotency_key,
            to_json_text(&response)?
        ],
    )?;
    Ok(Outcome::Decided(DecidedAction {
        action,
        response,
        replayed: false,
    }))
}

/// The answer to a request whose idempotency key was used before.
fn replay(
    request: RecordedRequest,
    decision: &ActionDecision<'_>,
    action: PendingAction,
) -> Result<Outcome> {
    if request.action_id != action.id
        || request.decision != decision.decision
        || request.parameters_hash != decision.parameters_hash
    {
        return Err(StoreError::Mismatch(
            "this idempotency key was already used for a different request; use a new key".into(),
        ));
    }
    match (request.done, request.response) {
        (true, Some(response)) => Ok(Outcome::Decided(DecidedAction {
            action,
            response,
            replayed: true,
        })),
        (false, _) => Err(StoreError::Conflict(
            "a request with this idempotency key is still in progress; retry later".into(),
        )),
        (true, None) => Err(StoreError::Corrupt(format!(
            "the request for action `{}` is done but has no response",
            action.id
        ))),
    }
}

/// Creates the diagnostic task and its queued run; `failed` when the incident is gone.
fn start_diagnostic(
    t: &Connection,
    action: &PendingAction,
    fresh: &FreshIds,
    now: i64,
) -> Result<(PendingActionStatus, Option<Value>)> {
    let incident_id = string_parameter(&action.parameters, "incident_id").unwrap_or_default();
    let incident_exists = t
        .query_row(
            "SELECT 1 FROM incidents WHERE id = ?1",
            [incident_id],
            |_| Ok(()),
        )
        .optional()?
        .is_some();
    if !incident_exists {
        let error = format!("incident `{incident_id}` does not exist");
        return Ok((PendingActionStatus::Failed, Some(json!({ "error": error }))));
    }
    // Over the allowance the confirmation is refused and the action stays pending.
    check_active_diagnostics(t, action.owner_id, fresh.active_diagnostics_limit)?;
    insert_queued_diagnostic_run(t, &fresh.run, action.owner_id, now)?;
    let status = DiagnosticStatus::Queued;
    let task = TaskInsert {
        id: &fresh.task,
        incident_id,
        owner: action.owner_id,
        run_id: Some(&fresh.run),
        status,
        report: None,
    };
    insert_diagnostic_task(t, &task, now)?;
    let result = json!({
        "diagnostic_task_id": fresh.task,
        "run_id": fresh.run,
        "status": status,
    });
    Ok((PendingActionStatus::Executed, Some(result)))
}

/// Why a recovery request cannot be approved: its diagnostic task is gone, or its report
/// proposes no recovery (an approval is bound to a report that proposes one). `None` when
/// it can.
fn unapprovable(t: &Connection, action: &PendingAction) -> Result<Option<Value>> {
    let task_id = string_parameter(&action.parameters, "diagnostic_task_id").unwrap_or_default();
    let task = match owned_task(t, action.owner_id, task_id) {
        Ok(task) => task,
        Err(StoreError::NotFound(what)) => {
            let error = format!("{what} does not exist");
            return Ok(Some(json!({ "error": error })));
        }
        Err(other) => return Err(other),
    };
    if task.report.as_ref().and_then(Report::proposal).is_none() {
        let error = format!(
            "diagnostic task `{task_id}` has no report proposing a recovery; nothing to approve"
        );
        return Ok(Some(json!({ "error": error })));
    }
    Ok(None)
}

/// The requester's confirmation under the second-approver rule: the request waits for
/// another person (`failed` when there is nothing to approve).
fn submit_recovery(
    t: &Connection,
    action: &PendingAction,
) -> Result<(PendingActionStatus, Option<Value>)> {
    if let Some(failure) = unapprovable(t, action)? {
        return Ok((PendingActionStatus::Failed, Some(failure)));
    }
    let result = json!({ "awaiting_approval": true });
    Ok((PendingActionStatus::AwaitingApproval, Some(result)))
}

/// Records `approver`'s approval; executes nothing. `failed` when the diagnostic task is
/// gone or its report proposes no recovery.
pub(super) fn approve_recovery(
    t: &Connection,
    action: &PendingAction,
    approval_id: &str,
    approver: i64,
    now: i64,
) -> Result<(PendingActionStatus, Option<Value>)> {
    if let Some(failure) = unapprovable(t, action)? {
        return Ok((PendingActionStatus::Failed, Some(failure)));
    }
    let task_id = string_parameter(&action.parameters, "diagnostic_task_id").unwrap_or_default();
    t.execute(
        "INSERT INTO recovery_approvals (id, action_id, diagnostic_task_id, approved_by,
             parameters_hash, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            approval_id,
            action.id,
            task_id,
            approver,
            action.parameters_hash,
            now
        ],
    )?;
    let result = json!({ "approval_id": approval_id });
    Ok((PendingActionStatus::Confirmed, Some(result)))
}

/// The response a decision answers with, and replays: `{"action": {id, kind, target,
/// status, result, decided_at}}`.
pub fn decision_response(action: &PendingAction) -> Value {
    json!({
        "action": {
            "id": action.id,
            "kind": action.kind,
            "target": action.target,
            "status": action.status,
            "result": action.result,
            "decided_at": action.decided_at,
        }
    })
}

/// `Invalid` unless the parameters fit the kind: an object naming an existing incident
/// (diagnostic start) or one of the owner's diagnostic tasks (recovery request).
fn check_parameters(
    c: &Connection,
    kind: PendingActionKind,
    parameters: &Value,
    owner: i64,
) -> Result<()> {
    if !parameters.is_object() {
        return Err(StoreError::Invalid(
            "an action's parameters must be a JSON object".into(),
        ));
    }
    match kind {
        PendingActionKind::DiagnosticStart => {
            let id = string_parameter(parameters, "incident_id")
                .filter(|id| is_incident_id(id))
                .ok_or_else(|| missing_parameter(kind, "incident_id"))?;
            let exists = c
                .query_row("SELECT 1 FROM incidents WHERE id = ?1", [id], |_| Ok(()))
                .optional()?
                .is_some();
            if !exists {
                return Err(StoreError::Invalid(format!(
                    "incident `{id}` does not exist"
                )));
            }
        }
        PendingActionKind::RecoveryRequest => {
            let id = string_parameter(parameters, "diagnostic_task_id")
                .filter(|id| is_diagnostic_task_id(id))
                .ok_or_else(|| missing_parameter(kind, "diagnostic_task_id"))?;
            owned_task(c, owner, id).map_err(|err| match err {
                StoreError::NotFound(what) => StoreError::Invalid(format!("{what} not found")),
                other => other,
            })?;
        }
    }
    Ok(())
}

fn string_parameter<'a>(parameters: &'a Value, key: &str) -> Option<&'a str> {
    parameters.get(key).and_then(Value::as_str)
}

fn missing_parameter(kind: PendingActionKind, key: &str) -> StoreError {
    StoreError::Invalid(format!(
        "a {kind} action needs the parameter `{key}` (an id)"
    ))
}

fn check_idempotency_key(key: &str) -> Result<()> {
    let visible_ascii = key.bytes().all(|b| b.is_ascii_graphic());
    if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY_CHARS || !visible_ascii {
        return Err(StoreError::Invalid(format!(
            "an idempotency key must be 1 to {MAX_IDEMPOTENCY_KEY_CHARS} visible ASCII characters"
        )));
    }
    Ok(())
}

pub(super) fn expired(id: &str) -> StoreError {
    StoreError::Conflict(format!("action `{id}` has expired; ask again"))
}

fn recorded_request(c: &Connection, owner: i64, key: &str) -> Result<Option<RecordedRequest>> {
    let row = c
        .query_row(
            "SELECT action_id, decision, parameters_hash, state = 'done', response
             FROM action_requests
             WHERE owner_id = ?1 AND idempotency_key = ?2",
            params![owner, key],
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, Decision>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, bool>(3)?,
                    r.get::<_, Option<String>>(4)?,
                ))
            },
        )
        .optional()?;
    let Some((action_id, decision, parameters_hash, done, response)) = row else {
        return Ok(None);
    };
    let response = response
        .map(|text| serde_json::from_str(&text))
        .transpose()
        .map_err(|e| {
            StoreError::Corrupt(format!("stored response of action `{action_id}`: {e}"))
        })?;
    Ok(Some(RecordedRequest {
        action_id,
        decision,
        parameters_hash,
        done,
        response,
    }))
}

/// The action if `owner` owns it; `NotFound` alike for missing and not owned.
fn owned_action(c: &Connection, owner: i64, id: &str) -> Result<PendingAction> {
    c.query_row(
        &format!("SELECT {ACTION_COLUMNS} FROM pending_actions WHERE id = ?1 AND owner_id = ?2"),
        params![id, owner],
        action_from_row,
    )
    .optional()?
    .ok_or_else(|| StoreError::NotFound(format!("action `{id}`")))
}

pub(super) const ACTION_COLUMNS: &str =
    "id, kind, target, reason, parameters, parameters_hash, run_id, \
     owner_id, status, result, expires_at, created_at, decided_at";

pub(super) fn action_from_row(row: &Row<'_>) -> rusqlite::Result<PendingAction> {
    let result: Option<String> = row.get(9)?;
    let result = result
        .map(|text| serde_json::from_str(&text))
        .transpose()
        .map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(9, rusqlite::types::Type::Text, Box::new(e))
        })?;
    Ok(PendingAction {
        id: row.get(0)?,
        kind: row.get(1)?,
        target: row.get(2)?,
        reason: row.get(3)?,
        parameters: json_column(row, 4)?,
        parameters_hash: row.get(5)?,
        run_id: row.get(6)?,
        owner_id: row.get(7)?,
        status: row.get(8)?,
        result,
        expires_at: row.get(10)?,
        created_at: row.get(11)?,
        decided_at: row.get(12)?,
    })
}

/// Canonical JSON text: object keys sorted, no whitespace.
fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (index, (key, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests;

impl Store {
    /// How many recovery approvals exist (the conversation eval checks a chat turn made
    /// none).
    pub fn recovery_approvals_count(&self) -> Result<u64> {
        let count: i64 = self.read(|c| {
            Ok(
                c.query_row("SELECT COUNT(*) FROM recovery_approvals", [], |r| {
                    r.get::<_, i64>(0)
                })?,
            )
        })?;
        Ok(count.max(0) as u64)
    }
}
