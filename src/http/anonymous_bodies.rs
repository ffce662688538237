//! The bound on bodies from callers not yet known: sign-in, bootstrap and the alert webhook
//! read a body before they can tell who sent it, so only so many of them are read at once
//! and the rest get 503 with `Retry-After`. A slot is held only while the body arrives, not
//! while the request waits for a password check. With the body deadline this caps the
//! memory and time unauthenticated clients can hold, however many sockets they open.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::SemaphorePermit;

use super::error::ApiError;
use super::AppState;

/// One of the server's slots for reading an anonymous body, or 503.
pub fn slot(state: &AppState) -> Result<SemaphorePermit<'_>, ApiError> {
    state.anonymous_bodies.try_acquire().map_err(|_| {
        ApiError::Busy(
            "too many sign-in and webhook requests are being read; retry shortly".to_owned(),
        )
    })
}

/// Reads `body` (at most `limit` bytes) into memory; too large is 413, too slow 408.
pub async fn read(body: Body, limit: usize) -> Result<axum::body::Bytes, ApiError> {
    axum::body::to_bytes(body, limit).await.map_err(|err| {
        let over_limit = std::error::Error::source(&err)
            .is_some_and(|source| source.is::<http_body_util::LengthLimitError>());
        if over_limit {
            ApiError::PayloadTooLarge
        } else if super::body_deadline::is_body_timeout(&err) {
            ApiError::RequestTimeout(format!("cannot read the body: {err}"))
        } else {
            ApiError::BadJson(format!("cannot read the body: {err}"))
        }
    })
}

/// Middleware for sign-in and bootstrap: reads the body (at most `MAX_LOGIN_BODY_BYTES`)
/// while holding a slot, then hands the request on with the body in memory.
pub async fn buffer_login_body(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = {
        let _slot = match slot(&state) {
            Ok(slot) => slot,
            Err(err) => return err.into_response(),
        };
        match read(body, super::session::MAX_LOGIN_BODY_BYTES).await {
            Ok(bytes) => bytes,
            Err(err) => return err.into_response(),
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}
