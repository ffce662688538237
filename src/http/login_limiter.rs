//! Login rate limiting: after `MAX_FAILURES` failed logins within `WINDOW` for one user
//! name or one client address, further attempts for it are refused until the window ends.
//! In memory (a restart forgets), bounded (old windows are pruned).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failed attempts allowed per key and window.
pub const MAX_FAILURES: u32 = 5;
/// The window failures are counted in.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Keys kept before old windows are pruned.
const PRUNE_ABOVE: usize = 10_000;

#[derive(Default)]
pub struct LoginLimiter {
    windows: Mutex<HashMap<String, (Instant, u32)>>,
}

impl LoginLimiter {
    /// `Err(seconds to wait)` when any key is locked out.
    pub fn check(&self, keys: &[String], now: Instant) -> Result<(), u64> {
        let windows = self.lock();
        for key in keys {
            if let Some((started, failures)) = windows.get(key) {
                let elapsed = now.saturating_duration_since(*started);
                if *failures >= MAX_FAILURES && elapsed < WINDOW {
                    return Err((WINDOW - elapsed).as_secs().max(1));
                }
            }
        }
        Ok(())
    }

    /// Counts a failed attempt against every key.
    pub fn failed(&self, keys: &[String], now: Instant) {
        let mut windows = self.lock();
        if windows.len() > PRUNE_ABOVE {
            windows.retain(|_, (started, _)| now.saturating_duration_since(*started) < WINDOW);
        }
        for key in keys {
            let entry = windows.entry(key.clone()).or_insert((now, 0));
            if now.saturating_duration_since(entry.0) >= WINDOW {
                *entry = (now, 0);
            }
            entry.1 += 1;
        }
    }

    /// A successful login clears the user name's failures (not the address's).
    pub fn succeeded(&self, user_key: &str) {
        self.lock().remove(user_key);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, u32)>> {
        self.windows
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locks_out_after_the_limit_until_the_window_ends() {
        let limiter = LoginLimiter::default();
        let keys = vec!["user:alice".to_owned(), "ip:10.0.0.1".to_owned()];
        let start = Instant::now();
        for _ in 0..MAX_FAILURES {
            assert!(limiter.check(&keys, start).is_ok());
            limiter.failed(&keys, start);
        }
        let wait = limiter
            .check(&keys, start + Duration::from_secs(10))
            .unwrap_err();
        assert_eq!(wait, 50);
        // Another name from the same address is locked out too; another address is not.
        assert!(limiter
            .check(&["user:bob".into(), "ip:10.0.0.1".into()], start)
            .is_err());
        assert!(limiter
            .check(&["user:bob".into(), "ip:10.0.0.2".into()], start)
            .is_ok());
        assert!(limiter.check(&keys, start + WINDOW).is_ok());
    }
}
