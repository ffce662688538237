//! The bound on bodies from callers not yet known: sign-in, bootstrap and the alert webhook
//! read a body before they can tell who sent it, so only so many of them are read at once
//! and the rest get 503 with `Retry-After`. A slot is held only while the body arrives, not
//! while the request waits for a password check.
//!
//! One client cannot take every slot: each client address holds at most
//! `MAX_BODIES_PER_ADDRESS` at once; a sign-in body is small, so it must arrive within
//! `SIGN_IN_BODY_TIMEOUT` (not the general body deadline); a body announced larger than
//! its route takes is refused before anything is read; and the webhook reads from a pool of
//! its own, taken only after its token was checked, so sign-in traffic and alerts never
//! starve each other. With the general body deadline this caps the memory and time
//! unauthenticated clients can hold, however many sockets they open.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::CONTENT_LENGTH;
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::{Semaphore, SemaphorePermit};

use super::error::ApiError;
use super::AppState;

/// Bodies one client address may have in flight at once, in each lane.
pub const MAX_BODIES_PER_ADDRESS: usize = 4;

/// A sign-in or bootstrap body (a name and a password) must arrive within this long.
pub const SIGN_IN_BODY_TIMEOUT: Duration = Duration::from_secs(5);

/// Which pool a body is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// Sign-in and bootstrap.
    SignIn,
    /// The alert webhook, after its token was checked.
    Webhook,
}

/// The slots for reading anonymous bodies: a pool per lane and a count per client address.
#[derive(Debug)]
pub struct AnonymousBodies {
    sign_in: Semaphore,
    webhook: Semaphore,
    per_address: Mutex<HashMap<(Lane, IpAddr), usize>>,
}

/// One slot, given back when dropped.
pub struct BodySlot<'a> {
    _permit: SemaphorePermit<'a>,
    held: Option<(Lane, IpAddr)>,
    owner: &'a AnonymousBodies,
}

impl AnonymousBodies {
    /// `slots` bodies read at once in each lane.
    pub fn new(slots: usize) -> AnonymousBodies {
        AnonymousBodies {
            sign_in: Semaphore::new(slots),
            webhook: Semaphore::new(slots),
            per_address: Mutex::default(),
        }
    }

    /// A slot in `lane` for a client at `address` (`None` when not known), or 503.
    pub fn slot(&self, lane: Lane, address: Option<IpAddr>) -> Result<BodySlot<'_>, ApiError> {
        let busy = || {
            ApiError::Busy(
                "too many sign-in and webhook requests are being read; retry shortly".to_owned(),
            )
        };
        let pool = match lane {
            Lane::SignIn => &self.sign_in,
            Lane::Webhook => &self.webhook,
        };
        let held = match address {
            Some(address) => {
                let mut counts = self.per_address.lock().unwrap_or_else(|p| p.into_inner());
                let count = counts.entry((lane, address)).or_insert(0);
                if *count >= MAX_BODIES_PER_ADDRESS {
                    return Err(busy());
                }
                *count += 1;
                Some((lane, address))
            }
            None => None,
        };
        // Built before the permit so that a refused permit gives the address's count back.
        let slot = |permit| BodySlot {
            _permit: permit,
            held,
            owner: self,
        };
        match pool.try_acquire() {
            Ok(permit) => Ok(slot(permit)),
            Err(_) => {
                self.release(held);
                Err(busy())
            }
        }
    }

    fn release(&self, held: Option<(Lane, IpAddr)>) {
        let Some(key) = held else { return };
        let mut counts = self.per_address.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = counts.get_mut(&key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.remove(&key);
            }
        }
    }
}

impl Drop for BodySlot<'_> {
    fn drop(&mut self) {
        self.owner.release(self.held.take());
    }
}

/// 413 at once when the request announces a body longer than `limit`.
pub fn refuse_announced_oversize(headers: &HeaderMap, limit: usize) -> Result<(), ApiError> {
    let announced = headers
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    match announced {
        Some(length) if length > limit as u64 => Err(ApiError::PayloadTooLarge),
        _ => Ok(()),
    }
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

/// Middleware for sign-in and bootstrap: refuses an announced body over
/// `MAX_LOGIN_BODY_BYTES`, then reads the body within `SIGN_IN_BODY_TIMEOUT` while holding
/// a sign-in slot, and hands the request on with the body in memory.
pub async fn buffer_login_body(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let limit = super::session::MAX_LOGIN_BODY_BYTES;
    if let Err(err) = refuse_announced_oversize(request.headers(), limit) {
        return err.into_response();
    }
    let address = state
        .network
        .client_address(request.extensions(), request.headers());
    let (parts, body) = request.into_parts();
    let bytes = {
        let _slot = match state.anonymous_bodies.slot(Lane::SignIn, address) {
            Ok(slot) => slot,
            Err(err) => return err.into_response(),
        };
        match tokio::time::timeout(SIGN_IN_BODY_TIMEOUT, read(body, limit)).await {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(err)) => return err.into_response(),
            Err(_) => {
                return ApiError::RequestTimeout(format!(
                    "the sign-in body did not arrive within {} s",
                    SIGN_IN_BODY_TIMEOUT.as_secs()
                ))
                .into_response()
            }
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// Middleware for every route: a body announced longer than the server takes at all is
/// refused before it is read.
pub async fn refuse_oversize_bodies(
    State(limit): State<usize>,
    request: Request,
    next: Next,
) -> Response {
    match refuse_announced_oversize(request.headers(), limit) {
        Ok(()) => next.run(request).await,
        Err(err) => err.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_address_cannot_take_every_slot_and_slots_come_back() {
        let bodies = AnonymousBodies::new(6);
        let attacker: IpAddr = "10.0.0.66".parse().unwrap();
        let user: IpAddr = "10.0.0.7".parse().unwrap();
        let held: Vec<_> = (0..MAX_BODIES_PER_ADDRESS)
            .map(|_| bodies.slot(Lane::SignIn, Some(attacker)).unwrap())
            .collect();
        assert!(bodies.slot(Lane::SignIn, Some(attacker)).is_err());
        // Another address, and the webhook's own pool, still have room.
        let first = bodies.slot(Lane::SignIn, Some(user)).unwrap();
        let second = bodies.slot(Lane::SignIn, Some(user)).unwrap();
        // The pool is full now: a refused slot must not leak the address's count.
        assert!(bodies.slot(Lane::SignIn, None).is_err());
        drop(first);
        assert!(bodies.slot(Lane::SignIn, Some(user)).is_ok());
        for _ in 0..MAX_BODIES_PER_ADDRESS {
            let _ = bodies.slot(Lane::Webhook, Some(attacker)).unwrap();
        }
        drop(held);
        let again: Vec<_> = (0..MAX_BODIES_PER_ADDRESS)
            .map(|_| bodies.slot(Lane::SignIn, Some(attacker)).unwrap())
            .collect();
        assert_eq!(again.len(), MAX_BODIES_PER_ADDRESS);
        drop((again, second));
        let counts = bodies.per_address.lock().unwrap();
        assert!(counts.is_empty(), "{counts:?}");
    }

    #[test]
    fn an_announced_body_over_the_limit_is_refused_before_reading() {
        let mut headers = HeaderMap::new();
        assert!(refuse_announced_oversize(&headers, 10).is_ok());
        headers.insert(CONTENT_LENGTH, "10".parse().unwrap());
        assert!(refuse_announced_oversize(&headers, 10).is_ok());
        headers.insert(CONTENT_LENGTH, "4194304".parse().unwrap());
        assert!(matches!(
            refuse_announced_oversize(&headers, 10),
            Err(ApiError::PayloadTooLarge)
        ));
    }
}
