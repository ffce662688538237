//! The bound on bodies from callers not yet known: sign-in, bootstrap and the alert webhook
//! read a body before they can tell who sent it, so only so many of them are read at once
//! and the rest get 503 with `Retry-After`. With the body deadline this caps the memory and
//! time unauthenticated clients can hold, however many sockets they open.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;

use super::error::ApiError;

/// Middleware: holds one of `slots` while the request (and so its body) is handled.
pub async fn limit_anonymous_bodies(
    State(slots): State<Arc<Semaphore>>,
    request: Request,
    next: Next,
) -> Response {
    let Ok(_slot) = slots.try_acquire() else {
        return ApiError::Busy(
            "too many sign-in and webhook requests are being read; retry shortly".to_owned(),
        )
        .into_response();
    };
    next.run(request).await
}
