//! Accepting TCP connections: a cap on open connections with a reserve that only answers
//! health checks, a deadline for each request's headers (idle keep-alive connections
//! included), and graceful shutdown.
//!
//! A client that opens sockets and sends nothing, or sends its headers a byte at a time,
//! holds one slot for at most the header deadline, and less when others need it: once the
//! cap is reached, a new connection takes the slot of the connection that has waited
//! longest for a request (`idle_connections`). Only when every slot is working on a request
//! do new connections go to the reserve, where `/healthz` still answers and everything else
//! gets 503; beyond the reserve they are closed at once.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tower::ServiceExt;

use super::idle_connections::{IdleConnections, TrackedConnection};
use crate::metrics::Metrics;

/// How long a new connection waits for the slot of an evicted idle one.
const EVICTION_WAIT: Duration = Duration::from_millis(500);

/// How many connections the server holds, and for how long a client may take to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Open connections served in full.
    pub max_connections: usize,
    /// Further connections that only answer `/healthz` (503 for anything else).
    pub health_reserve: usize,
    /// A request's headers must arrive within this long of the server starting to wait for
    /// them (on a new connection, or after the previous response on a kept-alive one).
    pub header_timeout: Duration,
    /// A request's body must arrive within this long of its headers.
    pub body_timeout: Duration,
    /// Bodies from callers not yet known (sign-in, bootstrap, the alert webhook) read at once.
    pub max_anonymous_bodies: usize,
}

impl ConnectionLimits {
    /// The defaults of `warden serve`.
    pub const DEFAULT: Self = Self {
        max_connections: 512,
        health_reserve: 16,
        header_timeout: Duration::from_secs(10),
        body_timeout: Duration::from_secs(30),
        max_anonymous_bodies: 32,
    };
}

/// Serves `app` on `listener` within `limits` until `shutdown` completes, then stops
/// accepting, lets every connection finish its request in flight, and returns.
/// `health_only` answers the connections in the reserve.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    health_only: Router,
    limits: ConnectionLimits,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let full = Arc::new(Semaphore::new(limits.max_connections));
    let reserve = Arc::new(Semaphore::new(limits.health_reserve));
    // Connections watch `stop` to begin their graceful shutdown; they each hold a clone of
    // `open` so the server knows when the last one ended.
    let (stop, stopping) = watch::channel(());
    let (open, _) = watch::channel(());
    let idle = Arc::new(IdleConnections::default());
    let mut next_id: u64 = 0;
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    pause_after_accept_error(&err).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let (service, slot) = match take_slot(&full, &idle).await {
            Some(permit) => (app.clone(), permit),
            None => match reserve.clone().try_acquire_owned() {
                Ok(permit) => (health_only.clone(), permit),
                Err(_) => {
                    metrics.connection_refused();
                    drop(stream);
                    continue;
                }
            },
        };
        next_id += 1;
        let connection = Connection {
            stream,
            peer,
            service,
            tracked: TrackedConnection::new(next_id, idle.clone()),
            header_timeout: limits.header_timeout,
            stopping: stopping.clone(),
            open: open.subscribe(),
            gauge: metrics.connection_opened(),
        };
        tokio::spawn(async move {
            connection.serve().await;
            drop(slot);
        });
    }
    drop(listener);
    drop(stop);
    open.closed().await;
    Ok(())
}

/// A full slot: a free one, or the slot of the connection that has waited longest for a
/// request, closed for it. `None` when every slot is working on a request.
async fn take_slot(full: &Arc<Semaphore>, idle: &IdleConnections) -> Option<OwnedSemaphorePermit> {
    if let Ok(permit) = full.clone().try_acquire_owned() {
        return Some(permit);
    }
    if !idle.evict_oldest() {
        return None;
    }
    tokio::time::timeout(EVICTION_WAIT, full.clone().acquire_owned())
        .await
        .ok()?
        .ok()
}

/// One accepted connection and what it needs to serve itself.
struct Connection {
    stream: TcpStream,
    peer: SocketAddr,
    service: Router,
    tracked: Arc<TrackedConnection>,
    header_timeout: Duration,
    stopping: watch::Receiver<()>,
    open: watch::Receiver<()>,
    gauge: crate::metrics::OpenConnection,
}

impl Connection {
    async fn serve(self) {
        // Streamed tokens are small writes; Nagle's algorithm would hold them back.
        if let Err(err) = self.stream.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY: {err}");
        }
        let peer = self.peer;
        let app = self.service;
        let tracked = self.tracked.clone();
        let service = tower::service_fn(move |request: Request<hyper::body::Incoming>| {
            let working = tracked.working();
            let mut request = request.map(Body::new);
            // The peer address feeds the login rate limiter (`ConnectInfo`, as axum's own
            // `into_make_service_with_connect_info` provides it).
            request.extensions_mut().insert(ConnectInfo(peer));
            let app = app.clone();
            async move {
                let response = app.oneshot(request).await?;
                // The guard lives in the body, so the connection counts as working until
                // the response (an event stream included) has been sent or dropped.
                Ok::<_, std::convert::Infallible>(response.map(|body| {
                    Body::new(http_body_util::BodyExt::map_frame(body, move |frame| {
                        let _working = &working;
                        frame
                    }))
                }))
            }
        });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(self.header_timeout)
            .keep_alive(true);
        let connection =
            builder.serve_connection(TokioIo::new(self.stream), TowerToHyperService::new(service));
        let mut connection = std::pin::pin!(connection);
        let mut stopping = self.stopping;
        let mut asked_to_stop = false;
        loop {
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(err) = result {
                        tracing::trace!(%peer, "connection ended: {err}");
                    }
                    break;
                }
                () = self.tracked.evicted() => {
                    tracing::debug!(%peer, "closed a connection waiting for a request: a new one needed its slot");
                    break;
                }
                _ = stopping.changed(), if !asked_to_stop => {
                    // The sender is dropped at shutdown: finish the request in flight, then close.
                    asked_to_stop = true;
                    connection.as_mut().graceful_shutdown();
                }
            }
        }
        drop(self.open);
        drop(self.gauge);
    }
}

/// After a failed `accept`: a connection-level error (the peer reset before we took it)
/// needs no pause; running out of file descriptors does, or the loop would spin.
async fn pause_after_accept_error(err: &std::io::Error) {
    use std::io::ErrorKind;
    if matches!(
        err.kind(),
        ErrorKind::ConnectionRefused | ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!("cannot accept a connection: {err}");
    tokio::time::sleep(Duration::from_millis(100)).await;
}
