//! `GET /api/audit`: audit rows newest first, admin only, filtered by `actor`, `action`
//! (an action or a dotted prefix: `user` matches `user.create`), `since` and `until`
//! (seconds since the epoch, both inclusive), and paged back with `before` (a row id; each
//! page says the `next_before` of the older page, or null on the last one).

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;

use super::auth::Caller;
use super::error::ApiError;
use super::json::ApiQuery;
use super::{blocking, AppState};
use crate::policy::Capability;
use crate::store::{Audit, AuditFilter, MAX_AUDIT_ROWS_PER_READ};

/// Longest `actor` or `action` filter.
const MAX_FILTER_CHARS: usize = 200;

pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/api/audit", get(tail))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TailQuery {
    limit: Option<u32>,
    before: Option<i64>,
    actor: Option<String>,
    action: Option<String>,
    since: Option<i64>,
    until: Option<i64>,
}

async fn tail(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<TailQuery>,
) -> Result<Response, ApiError> {
    caller.require(Capability::ReadAudit)?;
    let limit = query.limit.unwrap_or(100);
    if limit == 0 || limit > MAX_AUDIT_ROWS_PER_READ {
        return Err(ApiError::invalid(
            "limit",
            format!("limit must be between 1 and {MAX_AUDIT_ROWS_PER_READ}"),
        ));
    }
    let actor = text_filter("actor", query.actor)?;
    let action = text_filter("action", query.action)?;
    if let (Some(since), Some(until)) = (query.since, query.until) {
        if since > until {
            return Err(ApiError::invalid("since", "since must not be after until"));
        }
    }
    let store = state.store.clone();
    let page = blocking(move || {
        let filter = AuditFilter {
            actor: actor.as_deref(),
            action: action.as_deref(),
            since: query.since,
            until: query.until,
            before_id: query.before,
        };
        Ok(store.audit_page(&filter, limit)?)
    })
    .await?;
    Ok(Json(page).into_response())
}

/// An optional text filter: blank means none; longer than `MAX_FILTER_CHARS` is refused.
fn text_filter(param: &str, value: Option<String>) -> Result<Option<String>, ApiError> {
    let Some(value) = value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    if value.chars().count() > MAX_FILTER_CHARS {
        return Err(ApiError::invalid(
            param,
            format!("{param} is at most {MAX_FILTER_CHARS} characters"),
        ));
    }
    Ok(Some(value))
}
