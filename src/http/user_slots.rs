//! Per-user limits on concurrent `/v1` requests: a request takes one of its user's slots
//! before it reaches a model and gives it back when its response has been sent in full
//! (for a stream, when the stream ends or the client goes away). A user with every slot
//! taken gets 429 with `Retry-After` and a JSON error; other users are not affected.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use futures_util::StreamExt;

use super::auth::Caller;
use super::error::ApiError;
use super::AppState;

/// Seconds a user told "too many requests at once" is asked to wait.
const RETRY_AFTER_SECS: u64 = 2;

/// Slots in use per user id; users with none in use are not kept.
pub struct UserSlots {
    per_user: usize,
    taken: Mutex<HashMap<i64, usize>>,
}

/// One taken slot; dropping it gives the slot back.
pub struct Slot {
    slots: Arc<UserSlots>,
    user: i64,
}

impl UserSlots {
    /// `per_user` concurrent requests per user (at least 1).
    pub fn new(per_user: usize) -> Self {
        Self {
            per_user: per_user.max(1),
            taken: Mutex::default(),
        }
    }

    /// Takes one of `user`'s slots, or `None` when all are taken.
    pub fn take(self: &Arc<Self>, user: i64) -> Option<Slot> {
        let mut taken = self.lock();
        let count = taken.entry(user).or_insert(0);
        if *count >= self.per_user {
            return None;
        }
        *count += 1;
        Some(Slot {
            slots: self.clone(),
            user,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, usize>> {
        self.taken
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut taken = self.slots.lock();
        if let Some(count) = taken.get_mut(&self.user) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                taken.remove(&self.user);
            }
        }
    }
}

/// Middleware for the `/v1` routes (after authentication): holds a slot of the caller's
/// for as long as the response body lives.
pub async fn limit_per_user(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let user = request
        .extensions()
        .get::<Caller>()
        .map(|caller| caller.user.id)
        .ok_or(ApiError::Unauthorized)?;
    let slot = state.v1_slots.take(user).ok_or_else(|| ApiError::QuotaExceeded {
        message: format!(
            "you have {} requests to /v1 in progress, the most one user may have; retry when one ends",
            state.v1_slots.per_user
        ),
        retry_after_secs: RETRY_AFTER_SECS,
    })?;
    let response = next.run(request).await;
    Ok(response.map(|body| {
        Body::from_stream(body.into_data_stream().map(move |chunk| {
            // The slot lives as long as the body: it goes back when the body is dropped.
            let _held = &slot;
            chunk
        }))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_user_has_their_own_slots_and_dropping_gives_them_back() {
        let slots = Arc::new(UserSlots::new(2));
        let first = slots.take(1).expect("a slot");
        let second = slots.take(1).expect("a second slot");
        assert!(slots.take(1).is_none());
        // Another user is not affected.
        let other = slots.take(2).expect("another user's slot");
        drop(first);
        let third = slots.take(1).expect("a slot came back");
        drop((second, third, other));
        assert!(slots.lock().is_empty(), "users without slots are forgotten");
    }
}
