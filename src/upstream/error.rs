//! How an upstream request can fail, as a closed set: the kind decides whether the request
//! may be retried on another endpoint, whether it counts against the endpoint's circuit,
//! and is the `kind` label of the upstream error metric.

use serde::Serialize;

/// Why an upstream request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The connection (or its TLS handshake) could not be made.
    Connect,
    /// Nothing came back within the first-token timeout.
    FirstTokenTimeout,
    /// The stream paused longer than the idle timeout.
    IdleTimeout,
    /// The request ran past its total timeout.
    TotalTimeout,
    /// 429: the upstream is saturated.
    Overloaded,
    /// Any other 5xx.
    Status5xx,
    /// A 4xx other than 429: the request itself was refused (never retried).
    Status4xx,
    /// Not an OpenAI-compatible answer (HTML, bad JSON, an oversized line).
    BadResponse,
    /// The stream ended before its last event.
    StreamCut,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::FirstTokenTimeout => "first_token_timeout",
            ErrorKind::IdleTimeout => "idle_timeout",
            ErrorKind::TotalTimeout => "total_timeout",
            ErrorKind::Overloaded => "overloaded",
            ErrorKind::Status5xx => "status_5xx",
            ErrorKind::Status4xx => "status_4xx",
            ErrorKind::BadResponse => "bad_response",
            ErrorKind::StreamCut => "stream_cut",
        }
    }

    /// Whether another endpoint may be tried (only ever before the first token).
    pub fn retryable(self) -> bool {
        !matches!(self, ErrorKind::Status4xx)
    }

    /// Whether the failure says the endpoint is unwell (and counts for its circuit).
    pub fn counts_against_endpoint(self) -> bool {
        !matches!(self, ErrorKind::Status4xx | ErrorKind::Overloaded)
    }
}

/// A failed upstream request: its kind and a message for the log and the run's error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("upstream {endpoint}: {message}")]
pub struct UpstreamError {
    pub kind: ErrorKind,
    pub endpoint: String,
    pub message: String,
}
