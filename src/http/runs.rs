//! Run routes, owner-scoped: read a run, cancel it, and follow its events over SSE. The
//! stream replays the stored events after `Last-Event-ID` (or `?after=`), then follows the
//! live tail, and closes after the run's terminal event. It reads the store in bounded
//! pages only as fast as the client takes them, so a slow client costs one page of memory.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::auth::Caller;
use super::error::ApiError;
use super::json::{ApiPath, ApiQuery};
use super::session::audit;
use super::{blocking, shutting_down, AppState};
use crate::policy::Capability;
use crate::runs::events::is_terminal;
use crate::runs::Subscription;
use crate::store::{AuditOutcome, Event, Run, Runs, Store};

/// Events read from the store per page.
const EVENTS_PER_PAGE: u32 = 256;
/// How long a follower waits for a signal before looking at the store anyway.
const RECHECK: Duration = Duration::from_secs(5);

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/runs/{id}", get(read))
        .route("/api/runs/{id}/cancel", post(cancel))
        .route("/api/runs/{id}/events", get(events))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    after: Option<i64>,
}

async fn read(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    caller.require(Capability::Chat)?;
    let store = state.store.clone();
    let owner = caller.user.id;
    let run = blocking(move || Ok(store.run(owner, &id)?)).await?;
    Ok(Json(run_json(&run)).into_response())
}

async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    caller.require(Capability::Chat)?;
    let runs = state.runs.clone();
    let owner = caller.user.id;
    let run = blocking(move || Ok(runs.cancel(owner, &id)?)).await?;
    audit(
        &state,
        &caller.user.name,
        "run.cancel",
        Some(&run.id),
        AuditOutcome::Success,
    )
    .await;
    Ok((StatusCode::ACCEPTED, Json(run_json(&run))).into_response())
}

async fn events(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<EventsQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    caller.require(Capability::Chat)?;
    let after = resume_point(&headers, query.after)?;
    let owner = caller.user.id;
    let store = state.store.clone();
    let run_id = id.clone();
    blocking(move || Ok(store.run(owner, &run_id)?)).await?;
    // Subscribe before the first read: an event stored after it always wakes us.
    let follower = Follower {
        store: state.store.clone(),
        subscription: state.runs.bus().subscribe(&id),
        owner,
        run_id: id,
        after,
        page: VecDeque::new(),
        finished: false,
        shutdown: state.shutdown.clone(),
        _connection: state.metrics.sse_connection(),
    };
    let stream = futures_util::stream::unfold(follower, |mut follower| async move {
        follower
            .next()
            .await
            .map(|event| (Ok::<_, Infallible>(event), follower))
    });
    // A heartbeat comment on an idle stream, so proxies keep it open.
    Ok(Sse::new(stream)
        .keep_alive(
            KeepAlive::new()
                .interval(state.limits.heartbeat)
                .text("keep-alive"),
        )
        .into_response())
}

/// Where to resume: `Last-Event-ID` (what a reconnecting EventSource sends) wins over
/// `?after=`; neither means from the start.
fn resume_point(headers: &HeaderMap, after: Option<i64>) -> Result<i64, ApiError> {
    let header = headers
        .get("last-event-id")
        .map(|value| {
            value
                .to_str()
                .ok()
                .and_then(|text| text.trim().parse::<i64>().ok())
                .ok_or_else(|| {
                    ApiError::invalid("Last-Event-ID", "Last-Event-ID must be an event seq")
                })
        })
        .transpose()?;
    let seq = header.or(after).unwrap_or(0);
    if seq < 0 {
        return Err(ApiError::invalid("after", "after must be 0 or more"));
    }
    Ok(seq)
}

/// One client's position in a run's event log.
struct Follower {
    store: std::sync::Arc<Store>,
    subscription: Subscription,
    owner: i64,
    run_id: String,
    after: i64,
    page: VecDeque<Event>,
    finished: bool,
    shutdown: tokio::sync::watch::Receiver<bool>,
    /// Counts the stream as open in the metrics while it lives.
    _connection: crate::metrics::SseConnection,
}

impl Follower {
    /// The next SSE event, waiting for the run when it has nothing new; `None` after the
    /// terminal event (or when the run ended without one, or the store failed).
    async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(event) = self.page.pop_front() {
                self.after = event.seq;
                self.finished = is_terminal(&event.event_type);
                return Some(
                    SseEvent::default()
                        .id(event.seq.to_string())
                        .event(event.event_type)
                        .data(event.data),
                );
            }
            if self.finished {
                return None;
            }
            let page = self.read_page().await?;
            if !page.is_empty() {
                self.page = page.into();
                continue;
            }
            let woken = tokio::select! {
                woken = tokio::time::timeout(RECHECK, self.subscription.changed()) => woken,
                () = shutting_down(&mut self.shutdown) => return None,
            };
            if (woken.is_err() || self.subscription.run_ended()) && self.run_ended_quietly().await {
                return None;
            }
        }
    }

    async fn read_page(&self) -> Option<Vec<Event>> {
        let store = self.store.clone();
        let (owner, run_id, after) = (self.owner, self.run_id.clone(), self.after);
        let read =
            blocking(move || Ok(store.events_after(owner, &run_id, after, EVENTS_PER_PAGE)?));
        match read.await {
            Ok(page) => Some(page),
            Err(err) => {
                tracing::warn!(run = %self.run_id, "event stream stopped: {err:?}");
                None
            }
        }
    }

    /// Whether the run ended and every event has been sent (nothing more will come).
    async fn run_ended_quietly(&self) -> bool {
        let store = self.store.clone();
        let (owner, run_id, after) = (self.owner, self.run_id.clone(), self.after);
        let checked = blocking(move || {
            let run = store.run(owner, &run_id)?;
            let more = store.events_after(owner, &run_id, after, 1)?;
            Ok(run.status.is_terminal() && more.is_empty())
        });
        checked.await.unwrap_or(true)
    }
}

/// A run as the API shows it: no lease holder, no checkpoint.
fn run_json(run: &Run) -> serde_json::Value {
    json!({
        "id": run.id,
        "kind": run.kind,
        "conversation_id": run.conversation_id,
        "turn": run.turn,
        "status": run.status,
        "failure_reason": run.failure_reason,
        "attempts": run.attempts,
        "created_at": run.created_at,
        "updated_at": run.updated_at,
        "trace_id": run.trace_id,
    })
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    #[test]
    fn last_event_id_wins_over_after() {
        let mut headers = HeaderMap::new();
        assert_eq!(resume_point(&headers, None).unwrap(), 0);
        assert_eq!(resume_point(&headers, Some(4)).unwrap(), 4);
        headers.insert("last-event-id", HeaderValue::from_static("7"));
        assert_eq!(resume_point(&headers, Some(0)).unwrap(), 7);
        headers.insert("last-event-id", HeaderValue::from_static("x"));
        assert!(resume_point(&headers, None).is_err());
        assert!(resume_point(&HeaderMap::new(), Some(-1)).is_err());
    }
}
