//! Login rate limiting: at most `MAX_FAILURES` attempts that did not succeed within `WINDOW`
//! for one user name or one client address; further attempts are refused until the window
//! ends. An attempt is counted when it starts (atomically with the check, so parallel
//! attempts cannot slip through) and given back when it succeeds. At most
//! `MAX_CONCURRENT_CHECKS` password checks (argon2: memory-hard) run at once. In memory (a
//! restart forgets), bounded (old windows are pruned).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failed attempts allowed per key and window.
pub const MAX_FAILURES: u32 = 5;
/// The window failures are counted in.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Password checks allowed to run at the same time.
pub const MAX_CONCURRENT_CHECKS: usize = 4;
/// Keys kept before old windows are pruned.
const PRUNE_ABOVE: usize = 10_000;

pub struct LoginLimiter {
    windows: Mutex<HashMap<String, (Instant, u32)>>,
    checks: tokio::sync::Semaphore,
}

impl Default for LoginLimiter {
    fn default() -> Self {
        Self {
            windows: Mutex::default(),
            checks: tokio::sync::Semaphore::new(MAX_CONCURRENT_CHECKS),
        }
    }
}

impl LoginLimiter {
    /// Starts an attempt: `Err(seconds to wait)` when any key is locked out, otherwise the
    /// attempt is counted against every key.
    pub fn attempt(&self, keys: &[String], now: Instant) -> Result<(), u64> {
        let mut windows = self.lock();
        if windows.len() > PRUNE_ABOVE {
            windows.retain(|_, (started, _)| now.saturating_duration_since(*started) < WINDOW);
        }
        for key in keys {
            if let Some((started, attempts)) = windows.get(key) {
                let elapsed = now.saturating_duration_since(*started);
                if *attempts >= MAX_FAILURES && elapsed < WINDOW {
                    return Err((WINDOW - elapsed).as_secs().max(1));
                }
            }
        }
        for key in keys {
            let entry = windows.entry(key.clone()).or_insert((now, 0));
            if now.saturating_duration_since(entry.0) >= WINDOW {
                *entry = (now, 0);
            }
            entry.1 += 1;
        }
        Ok(())
    }

    /// A successful attempt is given back to every key, and the user name's count cleared.
    pub fn succeeded(&self, keys: &[String], user_key: &str) {
        let mut windows = self.lock();
        for key in keys {
            if let Some(entry) = windows.get_mut(key) {
                entry.1 = entry.1.saturating_sub(1);
            }
        }
        windows.remove(user_key);
    }

    /// A permit to run one password check, or `None` when too many run already.
    pub fn password_check(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        self.checks.try_acquire().ok()
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
        // Attempts are counted when they start: parallel ones cannot slip through.
        for _ in 0..MAX_FAILURES {
            assert!(limiter.attempt(&keys, start).is_ok());
        }
        let later = start + Duration::from_secs(10);
        assert_eq!(limiter.attempt(&keys, later), Err(50));
        // Another name from the same address is locked out too; another address is not.
        let same_address = ["user:bob".to_owned(), "ip:10.0.0.1".to_owned()];
        assert!(limiter.attempt(&same_address, start).is_err());
        let other_address = ["user:bob".to_owned(), "ip:10.0.0.2".to_owned()];
        assert!(limiter.attempt(&other_address, start).is_ok());
        assert!(limiter.attempt(&keys, start + WINDOW).is_ok());
    }

    #[test]
    fn a_success_gives_its_attempt_back() {
        let limiter = LoginLimiter::default();
        let keys = vec!["user:alice".to_owned(), "ip:10.0.0.1".to_owned()];
        let now = Instant::now();
        for _ in 0..MAX_FAILURES * 2 {
            assert!(limiter.attempt(&keys, now).is_ok());
            limiter.succeeded(&keys, "user:alice");
        }
    }

    #[test]
    fn password_checks_are_bounded() {
        let limiter = LoginLimiter::default();
        let permits: Vec<_> = (0..MAX_CONCURRENT_CHECKS)
            .map(|_| limiter.password_check().expect("a permit"))
            .collect();
        assert!(limiter.password_check().is_none());
        drop(permits);
        assert!(limiter.password_check().is_some());
    }
}
