//! The HTTP layer: the axum router, the OpenAI-compatible wire types, SSE framing, and the
//! one mapping of every error to a status code and a JSON error body.
//!
//! It reaches models only through `crate::engine` handles and only ever awaits them: no
//! CPU-heavy work runs on the async runtime. It never touches tensors, SQL or the model
//! threads' internals.

mod actions;
#[cfg(test)]
mod actions_tests;
#[cfg(test)]
mod admin_tests;
pub(crate) mod anonymous_bodies;
mod approvals;
mod assets;
mod audit;
mod auth;
mod body_deadline;
mod connections;
mod conversations;
mod diagnostics;
mod error;
mod groups;
mod health;
mod host_check;
mod idle_connections;
mod incidents;
#[cfg(test)]
mod incidents_tests;
mod json;
mod kb;
mod kb_access;
mod kb_sync;
pub(crate) mod login_limiter;
mod memory;
mod metrics;
mod network;
mod observe;
mod openai;
mod refusal_audit;
#[cfg(test)]
mod route_fixture;
mod runs;
mod session;
#[cfg(test)]
mod tests;
mod tokens;
mod user_slots;
mod users;

use std::future::Future;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::get;
use axum::Router;

use crate::engine::Engine;
use crate::metrics::Metrics;
use crate::retrieval::Library;
use crate::runs::RunService;
use crate::store::Store;

pub use anonymous_bodies::AnonymousBodies;
pub use assets::CONTENT_SECURITY_POLICY;
pub use connections::ConnectionLimits;
pub use error::ApiError;
pub use host_check::AllowedHosts;
pub use incidents::AlertWebhook;
pub use login_limiter::LoginLimiter;
pub use network::NetworkPolicy;
pub use refusal_audit::RefusalAudit;
pub use session::SessionConfig;
pub use user_slots::UserSlots;

/// Everything a request handler may use. Cheap to clone: `Arc`s and a few numbers.
#[derive(Clone)]
pub struct AppState {
    pub engine: Arc<Engine>,
    /// Knowledge bases; `None` when the embedding model did not load.
    pub library: Option<Arc<Library>>,
    pub store: Arc<Store>,
    pub runs: RunService,
    pub sessions: SessionConfig,
    pub login_limiter: Arc<LoginLimiter>,
    pub limits: HttpLimits,
    /// Each user's concurrent `/v1` requests (`limits.max_v1_requests_per_user` each).
    pub v1_slots: Arc<UserSlots>,
    /// The Alertmanager webhook's token (off without `--alert-token`).
    pub alerts: AlertWebhook,
    /// Host names answered and the trusted reverse proxy.
    pub network: NetworkPolicy,
    pub metrics: Arc<Metrics>,
    /// The token Prometheus presents for `/metrics` (admins' API tokens work too).
    pub metrics_token: Option<Arc<str>>,
    /// Slots for reading bodies from callers not yet known
    /// (`limits.connections.max_anonymous_bodies`).
    pub anonymous_bodies: Arc<anonymous_bodies::AnonymousBodies>,
    /// Aggregates the audit rows of refusals anyone can cause (wrong webhook token, failed
    /// sign-in).
    pub refusals: Arc<refusal_audit::RefusalAudit>,
    /// Becomes `true` when the server shuts down: open event streams end then, so a
    /// graceful shutdown does not wait for runs to finish.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    /// The live diagnostic sources (`--diagnostics-config`), for the admin screen.
    pub diagnostic_sources: Option<Arc<crate::diagnostics::live::config::Registry>>,
}

/// Resolves once `shutdown` turns `true`; never, if nobody can signal it.
pub(crate) async fn shutting_down(shutdown: &mut tokio::sync::watch::Receiver<bool>) {
    while !*shutdown.borrow_and_update() {
        if shutdown.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Request limits the HTTP layer enforces before anything reaches a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Largest request body accepted; larger ones get 413.
    pub max_body_bytes: usize,
    /// Largest `max_tokens` / `max_completion_tokens` a chat request may ask for, and what
    /// a request that names neither gets: the server's answer cap.
    pub max_tokens_cap: usize,
    /// Most inputs one embeddings request may carry.
    pub max_embedding_inputs: usize,
    /// Most `/v1` requests one user may have in progress at once.
    pub max_v1_requests_per_user: usize,
    /// How long a run's event stream stays silent before a heartbeat comment.
    pub heartbeat: std::time::Duration,
    /// Open connections, header and body deadlines, bodies read from unknown callers.
    pub connections: ConnectionLimits,
}

/// The whole HTTP API. Tests can drive it with `tower::ServiceExt::oneshot`, no socket.
/// Every route needs a caller except health, login, bootstrap and the UI's files.
pub fn router(state: AppState) -> Router {
    let body_limit = DefaultBodyLimit::max(state.limits.max_body_bytes);
    let sign_in = session::public_routes().route_layer(middleware::from_fn_with_state(
        state.clone(),
        anonymous_bodies::buffer_login_body,
    ));
    let protected = Router::new()
        .merge(openai::routes().route_layer(middleware::from_fn_with_state(
            state.clone(),
            user_slots::limit_per_user,
        )))
        .merge(kb::routes())
        .merge(session::routes())
        .merge(conversations::routes())
        .merge(memory::routes())
        .merge(runs::routes())
        .merge(audit::routes())
        .merge(incidents::routes())
        .merge(diagnostics::routes())
        .merge(actions::routes())
        .merge(approvals::routes())
        .merge(users::routes())
        .merge(groups::routes())
        .merge(tokens::routes())
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_caller,
        ));
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/metrics", get(metrics::metrics))
        .merge(sign_in)
        .merge(incidents::webhook_routes())
        .merge(assets::routes())
        .merge(protected)
        .fallback(error::route_not_found)
        // Must come after every route: it applies to the routes that exist when it is called.
        .method_not_allowed_fallback(error::method_not_allowed)
        .layer(body_limit)
        .layer(middleware::from_fn_with_state(
            state.limits.max_body_bytes,
            anonymous_bodies::refuse_oversize_bodies,
        ))
        .layer(middleware::from_fn_with_state(
            state.limits.connections.body_timeout,
            body_deadline::limit_body_time,
        ))
        .layer(middleware::from_fn(assets::security_headers))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            host_check::require_allowed_host,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            observe::observe_request,
        ))
        .with_state(state)
}

/// Runs blocking work (SQLite, retrieval) off the async runtime's worker threads, in the
/// request's span and with its trace id as the thread's current one (so the runs and
/// audit rows it writes carry it).
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let trace = observe::request_trace_id();
    let span = tracing::Span::current();
    tokio::task::spawn_blocking(move || {
        let _entered = span.enter();
        crate::trace::with_trace_id(trace, work)
    })
    .await
    .map_err(|e| ApiError::Internal(format!("blocking task failed: {e}")))?
}

/// What connections beyond `ConnectionLimits::max_connections` get: `/healthz`, and 503
/// for everything else.
fn health_only_router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(health::healthz))
        .fallback(error::connections_full)
        .layer(middleware::from_fn(assets::security_headers))
        .with_state(state)
}

/// Serves `router(state)` on `listener` until `shutdown` completes, then stops accepting
/// and waits for in-flight requests (including streams) to finish.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    if let Ok(address) = listener.local_addr() {
        tracing::info!(%address, "HTTP server listening");
    }
    let limits = state.limits.connections;
    let metrics = state.metrics.clone();
    let health_only = health_only_router(state.clone());
    connections::serve(
        listener,
        router(state),
        health_only,
        limits,
        metrics,
        shutdown,
    )
    .await
}
