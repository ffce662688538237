//! `GET /metrics`: the Prometheus text exposition, for Prometheus with the dedicated
//! `--metrics-token` or for an administrator's API token. Anyone else gets 401 or 403. The
//! store's counts are read on a blocking thread; the response is never cached.

use axum::extract::State;
use axum::http::header::{AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use super::auth::authenticate;
use super::error::ApiError;
use super::{blocking, AppState};
use crate::store::Role;

pub(super) async fn metrics(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    if !presents_metrics_token(&state, &headers) {
        let caller = authenticate(&state, &headers).await?;
        if caller.user.role != Role::Admin {
            return Err(ApiError::Forbidden(
                "metrics are for administrators and the metrics token".to_owned(),
            ));
        }
    }
    let store = state.store.clone();
    let mut snapshot = blocking(move || Ok(store.metrics_snapshot()?)).await?;
    snapshot.model_queues = state.engine.queue_depths();
    let text = state.metrics.render(&snapshot);
    Ok((
        [
            (CONTENT_TYPE, crate::metrics::CONTENT_TYPE),
            (CACHE_CONTROL, "no-store"),
        ],
        text,
    )
        .into_response())
}

/// Whether the request's bearer token is the metrics token (compared as digests, so the
/// time taken says nothing about the token).
fn presents_metrics_token(state: &AppState, headers: &HeaderMap) -> bool {
    let Some(expected) = state.metrics_token.as_deref() else {
        return false;
    };
    let presented = headers
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::trim)
        .unwrap_or("");
    !presented.is_empty() && Sha256::digest(presented) == Sha256::digest(expected)
}
