//! `ApiError`: every way an HTTP request can fail, and the one exhaustive mapping of each to
//! a status code and OpenAI's error shape `{"error":{"message","type","code","param"}}`.
//! Internal details are logged here and never sent to the client.

use axum::http::header::RETRY_AFTER;
use axum::http::{HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::engine::EngineError;
use crate::retrieval::roots::PolicyError;
use crate::retrieval::safe_open::RootError;
use crate::retrieval::RetrievalError;
use crate::store::StoreError;

/// Seconds a client should wait before retrying when a model's queue is full.
const BUSY_RETRY_AFTER_SECONDS: u64 = 1;

/// What the client is told when something failed on our side.
const INTERNAL_ERROR_MESSAGE: &str = "internal server error; see the server log";

#[derive(Debug)]
pub enum ApiError {
    /// The body is not JSON, has the wrong content type, or does not fit the request type.
    BadJson(String),
    /// A well-formed request asks for something invalid or unsupported.
    InvalidRequest {
        message: String,
        param: Option<String>,
    },
    /// The body is larger than `HttpLimits::max_body_bytes`.
    PayloadTooLarge,
    /// The request names a model that is not loaded (or is of the wrong kind).
    ModelNotFound {
        message: String,
    },
    /// No route has this path.
    RouteNotFound {
        method: Method,
        path: String,
    },
    /// The route exists but not for this method.
    MethodNotAllowed {
        method: Method,
        path: String,
    },
    Engine(EngineError),
    /// Knowledge-base and retrieval failures.
    Retrieval(RetrievalError),
    /// A named object (knowledge base, …) does not exist.
    NotFound(String),
    /// A capability is not available on this server right now.
    Unavailable(String),
    /// The server holds as much of this kind of work as it may (connections, bodies from
    /// unknown callers): 503 with `Retry-After`.
    Busy(String),
    /// The request body did not arrive in time: 408.
    RequestTimeout(String),
    /// A failure on our side with no better category (detail is logged, not sent).
    Internal(String),
    /// No valid session cookie or API token.
    Unauthorized,
    /// A login with a wrong name or password (which of the two is not said).
    InvalidCredentials,
    /// Authenticated, but the role may not do this, or a cross-site/CSRF check failed.
    Forbidden(String),
    /// Too many attempts (logins); retry after this many seconds.
    TooManyRequests {
        retry_after_secs: u64,
    },
    /// A per-user allowance is used up (concurrent `/v1` requests); retry after this many
    /// seconds.
    QuotaExceeded {
        message: String,
        retry_after_secs: u64,
    },
    /// The request's `Host` is not one this server answers to (DNS rebinding): 421.
    HostNotAllowed(String),
    /// The request conflicts with the object's state (a duplicate, an ended run, …).
    Conflict(String),
    /// A cancel for a knowledge base that is not being synced.
    NoSyncInProgress(String),
    /// A capability this server's configuration leaves off (the alert webhook without
    /// `--alert-token`): 404, with a message saying how to turn it on.
    Disabled(String),
    /// The alert webhook was called without its token, or with a wrong one.
    BadWebhookToken,
    /// Stored data: not found, conflicts and invalid values map to 4xx, the rest to 500.
    Store(StoreError),
}

impl ApiError {
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::InvalidRequest {
            message: message.into(),
            param: Some(param.into()),
        }
    }

    /// The stable `code` the client sees for this error.
    pub fn code(&self) -> &'static str {
        self.parts().code
    }

    /// The status code and JSON body for this error. Logs the detail of internal errors.
    pub fn render(&self) -> (StatusCode, Value) {
        let parts = self.parts();
        if parts.status.is_server_error() && parts.retry_after.is_none() {
            match self {
                ApiError::Engine(err) => tracing::error!("request failed inside the engine: {err}"),
                ApiError::Retrieval(err) => tracing::error!("knowledge-base request failed: {err}"),
                other => tracing::error!("request failed: {other:?}"),
            }
        }
        (parts.status, parts.body())
    }

    fn parts(&self) -> ErrorParts {
        match self {
            ApiError::BadJson(message) => {
                ErrorParts::client(StatusCode::BAD_REQUEST, "invalid_json", message, None)
            }
            ApiError::InvalidRequest { message, param } => ErrorParts::client(
                StatusCode::BAD_REQUEST,
                "invalid_value",
                message,
                param.clone(),
            ),
            ApiError::PayloadTooLarge => ErrorParts::client(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                "request body is larger than this server accepts",
                None,
            ),
            ApiError::ModelNotFound { message } => ErrorParts::client(
                StatusCode::NOT_FOUND,
                "model_not_found",
                message,
                Some("model".to_owned()),
            ),
            ApiError::RouteNotFound { method, path } => ErrorParts::client(
                StatusCode::NOT_FOUND,
                "not_found",
                &format!("no route for {method} {path}"),
                None,
            ),
            ApiError::MethodNotAllowed { method, path } => ErrorParts::client(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                &format!("{path} does not accept {method}"),
                None,
            ),
            ApiError::Engine(err) => engine_error_parts(err),
            ApiError::Retrieval(err) => retrieval_error_parts(err),
            ApiError::NotFound(what) => ErrorParts::client(
                StatusCode::NOT_FOUND,
                "not_found",
                &format!("{what} not found"),
                None,
            ),
            ApiError::Unavailable(message) => ErrorParts {
                status: StatusCode::SERVICE_UNAVAILABLE,
                kind: "server_error",
                code: "unavailable",
                message: message.clone(),
                param: None,
                retry_after: None,
            },
            ApiError::Busy(message) => ErrorParts {
                status: StatusCode::SERVICE_UNAVAILABLE,
                kind: "server_error",
                code: "server_busy",
                message: message.clone(),
                param: None,
                retry_after: Some(BUSY_RETRY_AFTER_SECONDS),
            },
            ApiError::RequestTimeout(message) => ErrorParts::client(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                message,
                None,
            ),
            ApiError::Internal(_) => ErrorParts::internal(),
            ApiError::Unauthorized => ErrorParts::client(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "sign in, or send `Authorization: Bearer <API token>`",
                None,
            ),
            ApiError::InvalidCredentials => ErrorParts::client(
                StatusCode::UNAUTHORIZED,
                "invalid_credentials",
                "wrong user name or password",
                None,
            ),
            ApiError::Forbidden(message) => {
                ErrorParts::client(StatusCode::FORBIDDEN, "forbidden", message, None)
            }
            ApiError::TooManyRequests { retry_after_secs } => ErrorParts {
                retry_after: Some(*retry_after_secs),
                ..ErrorParts::client(
                    StatusCode::TOO_MANY_REQUESTS,
                    "too_many_requests",
                    &format!("too many attempts; retry in {retry_after_secs} s"),
                    None,
                )
            },
            ApiError::QuotaExceeded {
                message,
                retry_after_secs,
            } => quota_exceeded(message, *retry_after_secs),
            ApiError::HostNotAllowed(message) => ErrorParts::client(
                StatusCode::MISDIRECTED_REQUEST,
                "host_not_allowed",
                message,
                None,
            ),
            ApiError::Conflict(message) => {
                ErrorParts::client(StatusCode::CONFLICT, "conflict", message, None)
            }
            ApiError::NoSyncInProgress(name) => ErrorParts::client(
                StatusCode::CONFLICT,
                "no_sync_in_progress",
                &format!("knowledge base `{name}` is not being synced"),
                None,
            ),
            ApiError::Disabled(message) => {
                ErrorParts::client(StatusCode::NOT_FOUND, "disabled", message, None)
            }
            ApiError::BadWebhookToken => ErrorParts::client(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "missing or wrong webhook token: send `Authorization: Bearer <alert token>`",
                None,
            ),
            ApiError::Store(err) => store_error_parts(err),
        }
    }
}

/// Seconds a client whose queue allowance is used up is told to wait: about one short
/// answer.
const QUEUE_RETRY_AFTER_SECS: u64 = 10;

/// 429 `quota_exceeded` with `Retry-After`.
fn quota_exceeded(message: &str, retry_after_secs: u64) -> ErrorParts {
    ErrorParts {
        retry_after: Some(retry_after_secs),
        ..ErrorParts::client(
            StatusCode::TOO_MANY_REQUESTS,
            "quota_exceeded",
            message,
            None,
        )
    }
}

/// The one place that decides how each store error looks to a client.
fn store_error_parts(err: &StoreError) -> ErrorParts {
    match err {
        StoreError::NotFound(what) => ErrorParts::client(
            StatusCode::NOT_FOUND,
            "not_found",
            &format!("{what} not found"),
            None,
        ),
        StoreError::Conflict(message) => {
            ErrorParts::client(StatusCode::CONFLICT, "conflict", message, None)
        }
        StoreError::Invalid(message) => {
            ErrorParts::client(StatusCode::BAD_REQUEST, "invalid_value", message, None)
        }
        StoreError::Forbidden(message) => {
            ErrorParts::client(StatusCode::FORBIDDEN, "forbidden", message, None)
        }
        StoreError::Mismatch(message) => {
            ErrorParts::client(StatusCode::UNPROCESSABLE_ENTITY, "mismatch", message, None)
        }
        StoreError::QuotaExceeded(message) => quota_exceeded(message, QUEUE_RETRY_AFTER_SECS),
        StoreError::Open { .. }
        | StoreError::Migration { .. }
        | StoreError::TooNew { .. }
        | StoreError::Sql(_)
        | StoreError::Corrupt(_)
        | StoreError::Crypto(_) => ErrorParts::internal(),
    }
}

/// The one place that decides how each retrieval error looks to a client.
fn retrieval_error_parts(err: &RetrievalError) -> ErrorParts {
    match err {
        RetrievalError::Source(_) | RetrievalError::InvalidQuery(_) => ErrorParts::client(
            StatusCode::BAD_REQUEST,
            "invalid_value",
            &err.to_string(),
            None,
        ),
        RetrievalError::Store(StoreError::NotFound(what)) => ErrorParts::client(
            StatusCode::NOT_FOUND,
            "not_found",
            &format!("{what} not found"),
            None,
        ),
        RetrievalError::Store(StoreError::Conflict(message)) => {
            ErrorParts::client(StatusCode::CONFLICT, "conflict", message, None)
        }
        RetrievalError::SyncInProgress(_) => ErrorParts::client(
            StatusCode::CONFLICT,
            "sync_in_progress",
            &err.to_string(),
            None,
        ),
        RetrievalError::Root(RootError::Symlink { .. } | RootError::Replaced { .. }) => {
            ErrorParts::client(StatusCode::CONFLICT, "root_changed", &err.to_string(), None)
        }
        RetrievalError::Root(RootError::Unreadable { .. }) => ErrorParts::client(
            StatusCode::CONFLICT,
            "root_unavailable",
            &err.to_string(),
            None,
        ),
        RetrievalError::Policy(PolicyError::NotAbsolute) => ErrorParts::client(
            StatusCode::BAD_REQUEST,
            "invalid_value",
            &err.to_string(),
            Some("path".to_owned()),
        ),
        RetrievalError::Policy(PolicyError::BadAllowedRoot { .. }) => ErrorParts::internal(),
        RetrievalError::Policy(_) => ErrorParts::client(
            StatusCode::FORBIDDEN,
            "path_not_allowed",
            &err.to_string(),
            Some("path".to_owned()),
        ),
        RetrievalError::Cancelled => ErrorParts::client(
            StatusCode::CONFLICT,
            "cancelled",
            "the operation was cancelled",
            None,
        ),
        RetrievalError::Embed(_) => ErrorParts {
            status: StatusCode::SERVICE_UNAVAILABLE,
            kind: "server_error",
            code: "server_busy",
            message: "the embedding model is busy or unavailable; retry later".to_owned(),
            param: None,
            retry_after: Some(BUSY_RETRY_AFTER_SECONDS),
        },
        RetrievalError::Io { .. }
        | RetrievalError::Store(_)
        | RetrievalError::Bm25(_)
        | RetrievalError::Vector(_) => ErrorParts::internal(),
    }
}

/// The one place that decides how each engine error looks to a client.
fn engine_error_parts(err: &EngineError) -> ErrorParts {
    match err {
        EngineError::InvalidRequest(message) => {
            ErrorParts::client(StatusCode::BAD_REQUEST, "invalid_value", message, None)
        }
        EngineError::ContextOverflow { .. } => ErrorParts::client(
            StatusCode::BAD_REQUEST,
            "context_length_exceeded",
            &err.to_string(),
            Some("messages".to_owned()),
        ),
        EngineError::QueueFull(_) => ErrorParts {
            status: StatusCode::SERVICE_UNAVAILABLE,
            kind: "server_error",
            code: "server_busy",
            message: format!("{err}; retry later"),
            param: None,
            retry_after: Some(BUSY_RETRY_AFTER_SECONDS),
        },
        EngineError::Upstream { .. } => ErrorParts {
            status: StatusCode::BAD_GATEWAY,
            kind: "server_error",
            code: "upstream_error",
            message: err.to_string(),
            param: None,
            retry_after: None,
        },
        EngineError::UpstreamUnavailable(_) => ErrorParts {
            status: StatusCode::SERVICE_UNAVAILABLE,
            kind: "server_error",
            code: "upstream_unavailable",
            message: err.to_string(),
            param: None,
            retry_after: Some(BUSY_RETRY_AFTER_SECONDS),
        },
        EngineError::WorkerGone(_)
        | EngineError::Inference(_)
        | EngineError::BadModelFile { .. }
        | EngineError::UnsupportedArchitecture(_) => ErrorParts {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            kind: "server_error",
            code: "internal_error",
            message: INTERNAL_ERROR_MESSAGE.to_owned(),
            param: None,
            retry_after: None,
        },
    }
}

/// An error as the client sees it.
struct ErrorParts {
    status: StatusCode,
    /// OpenAI's `type`.
    kind: &'static str,
    code: &'static str,
    message: String,
    param: Option<String>,
    /// Seconds for a `Retry-After` header, when the client should retry later.
    retry_after: Option<u64>,
}

impl ErrorParts {
    /// A 500 whose detail stays in the log.
    fn internal() -> Self {
        ErrorParts {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            kind: "server_error",
            code: "internal_error",
            message: INTERNAL_ERROR_MESSAGE.to_owned(),
            param: None,
            retry_after: None,
        }
    }

    /// A 4xx error caused by the request.
    fn client(
        status: StatusCode,
        code: &'static str,
        message: &str,
        param: Option<String>,
    ) -> Self {
        ErrorParts {
            status,
            kind: "invalid_request_error",
            code,
            message: message.to_owned(),
            param,
            retry_after: None,
        }
    }

    fn body(&self) -> Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "code": self.code,
                "param": self.param,
            }
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let retry_after = self.parts().retry_after;
        let (status, body) = self.render();
        let mut response = (status, Json(body)).into_response();
        if let Some(seconds) = retry_after {
            response
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

impl From<RetrievalError> for ApiError {
    fn from(err: RetrievalError) -> Self {
        ApiError::Retrieval(err)
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        ApiError::Store(err)
    }
}

impl From<EngineError> for ApiError {
    fn from(err: EngineError) -> Self {
        ApiError::Engine(err)
    }
}

/// Fallback handler for paths no route matches.
pub(super) async fn route_not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::RouteNotFound {
        method,
        path: uri.path().to_owned(),
    }
}

/// What a connection in the health-check reserve answers to anything but `/healthz`.
pub(super) async fn connections_full() -> ApiError {
    ApiError::Busy("the server holds as many connections as it may; retry shortly".to_owned())
}

/// Fallback handler for a known path called with the wrong method.
pub(super) async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::MethodNotAllowed {
        method,
        path: uri.path().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn check(err: ApiError, status: u16, kind: &str, code: &str) -> Value {
        let (actual_status, body) = err.render();
        assert_eq!(actual_status.as_u16(), status, "{body}");
        assert_eq!(body["error"]["type"], kind, "{body}");
        assert_eq!(body["error"]["code"], code, "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{body}"
        );
        assert!(
            body["error"].get("param").is_some(),
            "param must always be present: {body}"
        );
        body
    }

    #[test]
    fn engine_errors_map_to_documented_statuses() {
        let invalid = EngineError::InvalidRequest("bad schema".into());
        check(
            invalid.into(),
            400,
            "invalid_request_error",
            "invalid_value",
        );
        let overflow = EngineError::ContextOverflow {
            prompt: 5000,
            context: 2048,
        };
        let body = check(
            overflow.into(),
            400,
            "invalid_request_error",
            "context_length_exceeded",
        );
        assert!(body["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("5000"));
        check(
            EngineError::QueueFull("m".into()).into(),
            503,
            "server_error",
            "server_busy",
        );
    }

    #[test]
    fn internal_errors_hide_their_detail() {
        let errors = [
            EngineError::WorkerGone("m".into()),
            EngineError::Inference("secret tensor detail".into()),
            EngineError::BadModelFile {
                path: PathBuf::from("/secret/path"),
                reason: "truncated".into(),
            },
            EngineError::UnsupportedArchitecture("mamba".into()),
        ];
        for err in errors {
            let body = check(err.into(), 500, "server_error", "internal_error");
            assert_eq!(body["error"]["message"], INTERNAL_ERROR_MESSAGE);
        }
    }

    #[test]
    fn queue_full_sets_retry_after() {
        let response = ApiError::from(EngineError::QueueFull("m".into())).into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            response.headers().get(RETRY_AFTER).map(|v| v.as_bytes()),
            Some(&b"1"[..])
        );
        let other = ApiError::from(EngineError::Inference("x".into())).into_response();
        assert!(other.headers().get(RETRY_AFTER).is_none());
    }

    #[test]
    fn request_errors_map_to_client_statuses() {
        check(
            ApiError::BadJson("expected value".into()),
            400,
            "invalid_request_error",
            "invalid_json",
        );
        let body = check(
            ApiError::invalid("n", "only n=1"),
            400,
            "invalid_request_error",
            "invalid_value",
        );
        assert_eq!(body["error"]["param"], "n");
        check(
            ApiError::PayloadTooLarge,
            413,
            "invalid_request_error",
            "payload_too_large",
        );
        let missing = ApiError::ModelNotFound {
            message: "no model `x`".into(),
        };
        check(missing, 404, "invalid_request_error", "model_not_found");
        let route = ApiError::RouteNotFound {
            method: Method::GET,
            path: "/v2/x".into(),
        };
        let body = check(route, 404, "invalid_request_error", "not_found");
        assert!(body["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("/v2/x"));
        let method = ApiError::MethodNotAllowed {
            method: Method::DELETE,
            path: "/healthz".into(),
        };
        check(method, 405, "invalid_request_error", "method_not_allowed");
    }

    #[test]
    fn store_errors_map_to_client_statuses() {
        let client = "invalid_request_error";
        check(
            StoreError::NotFound("action `a`".into()).into(),
            404,
            client,
            "not_found",
        );
        check(
            StoreError::Conflict("decided".into()).into(),
            409,
            client,
            "conflict",
        );
        check(
            StoreError::Invalid("bad".into()).into(),
            400,
            client,
            "invalid_value",
        );
        check(
            StoreError::Forbidden("role".into()).into(),
            403,
            client,
            "forbidden",
        );
        check(
            StoreError::Mismatch("hash".into()).into(),
            422,
            client,
            "mismatch",
        );
        check(
            StoreError::QuotaExceeded("8 waiting".into()).into(),
            429,
            client,
            "quota_exceeded",
        );
        let body = check(
            StoreError::Corrupt("secret detail".into()).into(),
            500,
            "server_error",
            "internal_error",
        );
        assert_eq!(body["error"]["message"], INTERNAL_ERROR_MESSAGE);
        check(ApiError::Disabled("off".into()), 404, client, "disabled");
        check(
            ApiError::NoSyncInProgress("ops".into()),
            409,
            client,
            "no_sync_in_progress",
        );
        check(ApiError::BadWebhookToken, 401, client, "unauthorized");
        assert_eq!(
            ApiError::from(StoreError::Mismatch("x".into())).code(),
            "mismatch"
        );
    }

    #[test]
    fn knowledge_base_refusals_have_stable_codes() {
        let client = "invalid_request_error";
        let path = PathBuf::from("/srv/docs");
        check(
            RetrievalError::SyncInProgress("ops".into()).into(),
            409,
            client,
            "sync_in_progress",
        );
        for root in [
            RootError::Symlink { path: path.clone() },
            RootError::Replaced { path: path.clone() },
        ] {
            check(
                RetrievalError::Root(root).into(),
                409,
                client,
                "root_changed",
            );
        }
        for policy in [
            PolicyError::NoAllowedRoots,
            PolicyError::OutsideAllowedRoots {
                path: "/etc".into(),
                roots: "/srv".into(),
            },
            PolicyError::Protected {
                path: "/var/lib/warden".into(),
                what: "data folder",
            },
        ] {
            check(
                RetrievalError::Policy(policy).into(),
                403,
                client,
                "path_not_allowed",
            );
        }
    }
}
