//! What every request leaves behind: one log line (method, matched route, status, time to
//! the response head; at debug level for probes and scrapes), its trace id (from a valid
//! `traceparent` header, or new) in a tracing span around the handler and that line, in
//! the `X-Trace-Id` response header, and in
//! the task-local scope that `blocking` carries onto the threads that write runs and audit
//! rows; and its count and latency in the metrics, by matched route (never the raw path,
//! which holds ids).

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, Method};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

use super::AppState;
use crate::trace::TraceId;

/// Routes whose requests are logged at debug level only.
const QUIET_ROUTES: &[&str] = &["/healthz", "/metrics", "/assets/{*file}"];

/// The response header naming the request's trace id.
pub const TRACE_HEADER: &str = "x-trace-id";

tokio::task_local! {
    /// The trace id of the request this task is answering.
    static REQUEST_TRACE: TraceId;
}

/// The trace id of the request the current task answers, if any.
pub fn request_trace_id() -> Option<TraceId> {
    REQUEST_TRACE.try_with(Clone::clone).ok()
}

/// Middleware (outermost): trace id, span, response header, metrics and a debug line.
pub async fn observe_request(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let trace = request
        .headers()
        .get("traceparent")
        .and_then(|value| value.to_str().ok())
        .and_then(TraceId::from_traceparent)
        .unwrap_or_else(TraceId::generate);
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|path| path.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    let method = method_label(request.method());
    let span = tracing::info_span!("request", trace_id = %trace, method, %route);
    let started = Instant::now();
    let mut response = REQUEST_TRACE
        .scope(trace.clone(), next.run(request).instrument(span.clone()))
        .await;
    let elapsed = started.elapsed();
    let status = response.status().as_u16();
    state.metrics.http_request(&route, method, status, elapsed);
    let elapsed_ms = elapsed.as_secs_f64() * 1000.0;
    span.in_scope(|| {
        // Probes and scrapes come every few seconds: their lines would drown the rest.
        if QUIET_ROUTES.contains(&route.as_str()) {
            tracing::debug!(status, elapsed_ms, "request");
        } else {
            tracing::info!(status, elapsed_ms, "request");
        }
    });
    if let Ok(value) = HeaderValue::from_str(trace.as_str()) {
        response.headers_mut().insert(TRACE_HEADER, value);
    }
    response
}

/// The method as a metrics label: one of the standard methods, or `other` (a client may
/// send any token as a method; each would otherwise become a series of its own).
fn method_label(method: &Method) -> &'static str {
    match method.as_str() {
        "GET" => "GET",
        "POST" => "POST",
        "PUT" => "PUT",
        "PATCH" => "PATCH",
        "DELETE" => "DELETE",
        "HEAD" => "HEAD",
        "OPTIONS" => "OPTIONS",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unusual_methods_share_one_label() {
        assert_eq!(method_label(&Method::GET), "GET");
        assert_eq!(method_label(&Method::from_bytes(b"FOO1").unwrap()), "other");
    }
}
