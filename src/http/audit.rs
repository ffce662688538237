//! `GET /api/audit`: the newest audit rows, admin only, paged back with `before`.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::auth::{Caller, Permission};
use super::error::ApiError;
use super::json::ApiQuery;
use super::{blocking, AppState};
use crate::store::{Audit, MAX_AUDIT_ROWS_PER_READ};

pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/api/audit", get(tail))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TailQuery {
    limit: Option<u32>,
    before: Option<i64>,
}

async fn tail(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<TailQuery>,
) -> Result<Response, ApiError> {
    caller.require(Permission::ReadAudit)?;
    let limit = query.limit.unwrap_or(100);
    if limit == 0 || limit > MAX_AUDIT_ROWS_PER_READ {
        return Err(ApiError::invalid(
            "limit",
            format!("limit must be between 1 and {MAX_AUDIT_ROWS_PER_READ}"),
        ));
    }
    let store = state.store.clone();
    let rows = blocking(move || Ok(store.audit_tail(limit, query.before)?)).await?;
    Ok(Json(json!({ "entries": rows })).into_response())
}
