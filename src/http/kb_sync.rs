//! Syncing a knowledge base over HTTP. `POST /api/kb/{name}/sync` streams the sync as
//! server-sent events: `progress`, then one of `completed` (the report), `cancelled` or
//! `failed`. One sync per knowledge base at a time (a second gets 409 `sync_in_progress`);
//! a folder that is no longer the one added is refused before streaming (409
//! `root_changed`). `POST /api/kb/{name}/sync/cancel` stops a running sync, and so does a
//! client that leaves the stream; batches already committed stay. Admins see the full
//! report; other callers get no paths: skipped and failed files by count and kind. The
//! audit row is written when the sync ends and records its outcome.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::Stream;
use serde_json::{json, Value};

use super::auth::Caller;
use super::error::ApiError;
use super::json::ApiPath;
use super::kb::library;
use super::kb_access::readable_kb;
use super::{blocking, AppState};
use crate::policy::Capability;
use crate::retrieval::{Progress, RetrievalError, SyncCanceller, SyncReport};
use crate::runs::now_secs;
use crate::store::{Audit, AuditEntry, AuditOutcome, Role, Store};

/// Progress events buffered per sync stream; when a client reads slowly, intermediate
/// progress is dropped (the final event never is).
const PROGRESS_BUFFER: usize = 64;
/// How often an idle stream is written to, so that a client that left is noticed (and its
/// sync cancelled) within about this long.
const KEEP_ALIVE: Duration = Duration::from_secs(1);

/// Starts a sync and streams its progress.
pub(super) async fn sync(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> Result<Response, ApiError> {
    caller.require(Capability::SyncKnowledge)?;
    let library = library(&state)?;
    readable_kb(&state, &caller, &name).await?;
    let ticket = library.begin_sync(&name)?;
    let checked = {
        let (library, name) = (library.clone(), name.clone());
        blocking(move || Ok(library.check_root(&name))).await?
    };
    if let Err(err) = checked {
        let detail = json!({ "result": "refused", "reason": err.to_string() });
        record(&state.store, &caller, &name, AuditOutcome::Failure, detail).await;
        return Err(err.into());
    }
    let full_report = caller.user.role == Role::Admin;
    let canceller = ticket.canceller();
    let (sender, receiver) = tokio::sync::mpsc::channel::<Event>(PROGRESS_BUFFER);
    let store = state.store.clone();
    let actor = caller.user.name.clone();
    let metrics = state.metrics.clone();
    tokio::task::spawn_blocking(move || {
        let started = std::time::Instant::now();
        let result = library.run_sync(&ticket, &mut |progress: Progress| {
            if let Ok(event) = progress_event(&progress, full_report) {
                let _ = sender.try_send(event);
            }
        });
        // Free the knowledge base before anyone hears that the sync ended.
        drop(ticket);
        let (outcome, detail) = audit_of(&result);
        let result_name = detail["result"].as_str().unwrap_or("failed");
        metrics.kb_sync(&name, result_name, started.elapsed());
        write_audit(&store, &actor, &name, outcome, &detail);
        if let Ok(event) = final_event(&name, result, full_report) {
            let _ = sender.blocking_send(event);
        }
    });
    Ok(Sse::new(events(receiver, canceller))
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response())
}

/// Asks the running sync of a knowledge base to stop: 202, or 409 `no_sync_in_progress`.
pub(super) async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> Result<Response, ApiError> {
    caller.require(Capability::SyncKnowledge)?;
    let library = library(&state)?;
    readable_kb(&state, &caller, &name).await?;
    if !library.cancel_sync(&name) {
        return Err(ApiError::NoSyncInProgress(name));
    }
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "kb": name, "cancelling": true })),
    )
        .into_response())
}

/// A `progress` event.
fn progress_event(progress: &Progress, full_report: bool) -> Result<Event, axum::Error> {
    Event::default()
        .event("progress")
        .json_data(progress_data(progress, full_report))
}

/// Progress as JSON; without the file's path for callers who see no listing.
fn progress_data(progress: &Progress, full_report: bool) -> Value {
    let mut data = serde_json::to_value(progress).unwrap_or(Value::Null);
    if !full_report {
        if let Some(fields) = data.as_object_mut() {
            fields.remove("path");
        }
    }
    data
}

/// The event that ends the stream.
fn final_event(
    name: &str,
    result: Result<SyncReport, RetrievalError>,
    full_report: bool,
) -> Result<Event, axum::Error> {
    match result {
        Ok(report) => Event::default()
            .event("completed")
            .json_data(report_for(&report, full_report)),
        Err(RetrievalError::Cancelled) => Event::default().event("cancelled").json_data(json!({
            "kb": name,
            "message": "the sync was cancelled: batches already committed stay; the next sync does the rest",
        })),
        Err(err) => {
            let (_, mut body) = ApiError::from(err).render();
            if !full_report {
                if let Some(message) = body["error"]["message"].as_str() {
                    body["error"]["message"] = crate::public_text::without_paths(message).into();
                }
            }
            Event::default().event("failed").json_data(body)
        }
    }
}

/// The whole report for admins; counts per kind, without paths, for everyone else.
fn report_for(report: &SyncReport, full_report: bool) -> Value {
    let value = if full_report {
        serde_json::to_value(report)
    } else {
        serde_json::to_value(report.summary())
    };
    value.unwrap_or(Value::Null)
}

/// The audit outcome and detail of a finished sync.
fn audit_of(result: &Result<SyncReport, RetrievalError>) -> (AuditOutcome, Value) {
    match result {
        Ok(report) => (
            AuditOutcome::Success,
            json!({
                "result": "completed",
                "added": report.added,
                "updated": report.updated,
                "unchanged": report.unchanged,
                "deleted": report.deleted,
                "skipped": report.skipped.len(),
                "failed": report.failed.len(),
                "chunks": report.chunks_indexed,
            }),
        ),
        Err(RetrievalError::Cancelled) => (AuditOutcome::Failure, json!({ "result": "cancelled" })),
        Err(err) => (
            AuditOutcome::Failure,
            json!({ "result": "failed", "reason": err.to_string() }),
        ),
    }
}

async fn record(
    store: &Arc<Store>,
    caller: &Caller,
    name: &str,
    outcome: AuditOutcome,
    detail: Value,
) {
    let (store, actor, name) = (store.clone(), caller.user.name.clone(), name.to_string());
    let written = tokio::task::spawn_blocking(move || {
        write_audit(&store, &actor, &name, outcome, &detail);
    })
    .await;
    if let Err(err) = written {
        tracing::error!("cannot write an audit row: {err}");
    }
}

fn write_audit(store: &Store, actor: &str, name: &str, outcome: AuditOutcome, detail: &Value) {
    let entry = AuditEntry {
        actor,
        action: "kb.sync",
        target: Some(name),
        outcome,
        detail: Some(detail),
    };
    if let Err(err) = store.record(&entry, now_secs()) {
        tracing::error!("cannot write an audit row: {err}");
    }
}

/// The stream of events; dropping it (the client left) cancels the sync.
fn events(
    mut receiver: tokio::sync::mpsc::Receiver<Event>,
    canceller: SyncCanceller,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let guard = CancelOnDrop(canceller);
    futures_util::stream::poll_fn(move |cx| {
        let _ = &guard;
        receiver.poll_recv(cx).map(|event| event.map(Ok))
    })
}

/// Cancels a sync when the stream that reports it is dropped. After the sync ended, it
/// changes nothing.
struct CancelOnDrop(SyncCanceller);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retrieval::source::{SkipKind, Skipped};

    #[test]
    fn only_admins_see_paths() {
        let report = SyncReport {
            kb: "ops".into(),
            skipped: vec![Skipped {
                path: "private/pipe".into(),
                kind: SkipKind::Fifo,
                reason: "named pipe (FIFO): not read".into(),
            }],
            ..SyncReport::default()
        };
        let full = report_for(&report, true).to_string();
        assert!(full.contains("private/pipe"), "{full}");
        let summary = report_for(&report, false);
        assert_eq!(summary["skipped"]["by_kind"]["fifo"], 1, "{summary}");
        assert!(!summary.to_string().contains("private"), "{summary}");
        let progress = Progress::Indexed {
            files_done: 1,
            files_total: 2,
            chunks: 3,
            path: "private/a.md".into(),
        };
        assert_eq!(progress_data(&progress, true)["path"], "private/a.md");
        let operator = progress_data(&progress, false);
        assert_eq!(operator["files_done"], 1);
        assert!(operator.get("path").is_none(), "{operator}");
    }

    #[test]
    fn the_audit_detail_records_the_outcome() {
        let (outcome, detail) = audit_of(&Ok(SyncReport {
            added: 3,
            ..SyncReport::default()
        }));
        assert_eq!(outcome, AuditOutcome::Success);
        assert_eq!(detail["result"], "completed");
        assert_eq!(detail["added"], 3);
        let (outcome, detail) = audit_of(&Err(RetrievalError::Cancelled));
        assert_eq!(
            (outcome, detail["result"].as_str()),
            (AuditOutcome::Failure, Some("cancelled"))
        );
        let (_, detail) = audit_of(&Err(RetrievalError::InvalidQuery("x".into())));
        assert_eq!(detail["result"], "failed");
    }
}
