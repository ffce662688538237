//! Login rate limiting that slows guessing without letting a stranger lock out the real
//! user. Three counts, each of attempts that did not succeed:
//! - per name *and* address: `MAX_PAIR_FAILURES` within `WINDOW`, then that address is
//!   refused for that name until the window ends;
//! - per address: `MAX_ADDRESS_FAILURES` within `WINDOW` (one address spraying many names),
//!   then that address is refused;
//! - per name: after `FREE_NAME_FAILURES` within `NAME_WINDOW` from all addresses together,
//!   an attempt from an address that has failed before waits a backoff that doubles with
//!   *that address's* failures for the name (1 s after one typo, at most `MAX_NAME_BACKOFF`).
//!   An address with no failures is never delayed by the name's count, and one typo never
//!   costs more than a second, so the real user signs in while someone else guesses.
//!
//! Password checks (argon2: memory-hard) run in two lanes, so a flood cannot starve the real
//! user: attempts from addresses without failures in the window take the clean lane
//! (`CLEAN_CHECKS` at once), the rest the suspect lane (`SUSPECT_CHECKS`). A flood from many
//! addresses gets one clean attempt per address and window; after that it only fills its
//! own lane. An attempt waits in line for its lane at most `CHECK_QUEUE_WAIT`.
//!
//! An attempt is counted when it starts (atomically with the check, so parallel attempts
//! cannot slip through: the second is already a suspect) and given back when it succeeds or
//! when it was refused because its lane stayed full. In memory (a restart forgets), bounded
//! (expired counts are pruned).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failed attempts allowed per name and address within `WINDOW`.
pub const MAX_PAIR_FAILURES: u32 = 5;
/// Failed attempts allowed per address (all names) within `WINDOW`.
pub const MAX_ADDRESS_FAILURES: u32 = 30;
/// The window the pair and address counts are kept for.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Failed attempts for one name (all addresses) before the backoff starts.
pub const FREE_NAME_FAILURES: u32 = 10;
/// The window a name's failures are kept for.
pub const NAME_WINDOW: Duration = Duration::from_secs(15 * 60);
/// The longest backoff a name's failures impose.
pub const MAX_NAME_BACKOFF: Duration = Duration::from_secs(300);
/// Password checks that may run at once for addresses without failures in the window.
pub const CLEAN_CHECKS: usize = 3;
/// Password checks that may run at once for addresses that have failed.
pub const SUSPECT_CHECKS: usize = 1;
/// How long an attempt waits in line for a password check before it is refused as busy.
pub const CHECK_QUEUE_WAIT: Duration = Duration::from_secs(5);
/// Entries kept before expired ones are pruned.
const PRUNE_ABOVE: usize = 10_000;
/// Expired entries are looked for at most this often.
const PRUNE_EVERY: Duration = Duration::from_secs(10);

/// Who is trying: the (lower-cased) name and the client address, when known.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LoginKey {
    pub name: String,
    pub address: Option<IpAddr>,
}

impl LoginKey {
    pub fn new(name: &str, address: Option<IpAddr>) -> Self {
        Self {
            name: name.to_lowercase(),
            address,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Window {
    started: Instant,
    count: u32,
    /// When the latest attempt counted in it started.
    last: Instant,
    /// Attempts counted whose password check has not ended yet.
    pending: u32,
}

impl Window {
    fn current(&mut self, now: Instant, length: Duration) -> &mut Self {
        if now.saturating_duration_since(self.started) >= length {
            *self = Window {
                started: now,
                count: 0,
                last: now,
                pending: 0,
            };
        }
        self
    }

    fn count_one(&mut self, now: Instant) {
        self.count += 1;
        self.pending += 1;
        self.last = now;
    }

    /// Failures known to be failures: counted attempts whose check has ended.
    fn failures(&self) -> u32 {
        self.count.saturating_sub(self.pending)
    }

    fn expired(&self, now: Instant, length: Duration) -> bool {
        now.saturating_duration_since(self.started) >= length
    }

    /// Seconds until the window ends (at least 1).
    fn retry_after(&self, now: Instant, length: Duration) -> u64 {
        let left = length.saturating_sub(now.saturating_duration_since(self.started));
        left.as_secs().max(1)
    }
}

#[derive(Debug, Clone, Copy)]
struct NameRecord {
    window: Window,
    last_failure: Instant,
}

#[derive(Default)]
struct Counts {
    pairs: HashMap<LoginKey, Window>,
    addresses: HashMap<Option<IpAddr>, Window>,
    names: HashMap<String, NameRecord>,
    pruned_at: Option<Instant>,
}

/// Which password-check lane an attempt waits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// The address has no failures in the window.
    Clean,
    /// The address has failed (for this name or another) in the window.
    Suspect,
}

pub struct LoginLimiter {
    counts: Mutex<Counts>,
    clean_checks: tokio::sync::Semaphore,
    suspect_checks: tokio::sync::Semaphore,
}

impl Default for LoginLimiter {
    fn default() -> Self {
        Self {
            counts: Mutex::default(),
            clean_checks: tokio::sync::Semaphore::new(CLEAN_CHECKS),
            suspect_checks: tokio::sync::Semaphore::new(SUSPECT_CHECKS),
        }
    }
}

impl LoginLimiter {
    /// Starts an attempt: `Err(seconds to wait)` when it is refused, otherwise it is
    /// counted (as a failure until `succeeded` or `not_checked` gives it back) and its
    /// password check goes to the returned lane.
    pub fn attempt(&self, key: &LoginKey, now: Instant) -> Result<Lane, u64> {
        let mut counts = self.lock();
        prune(&mut counts, now);
        // Look before inserting anything: a refused attempt leaves no new entry behind.
        let live = |window: Option<&Window>, length| {
            window
                .filter(|w| !w.expired(now, length))
                .copied()
                .unwrap_or(Window {
                    started: now,
                    count: 0,
                    last: now,
                    pending: 0,
                })
        };
        let pair = live(counts.pairs.get(key), WINDOW);
        if pair.count >= MAX_PAIR_FAILURES {
            return Err(pair.retry_after(now, WINDOW));
        }
        let address = live(counts.addresses.get(&key.address), WINDOW);
        if address.count >= MAX_ADDRESS_FAILURES {
            return Err(address.retry_after(now, WINDOW));
        }
        // The name's backoff holds back only addresses that have failed before, each by
        // its own failures.
        let address_has_failed = address.count > 0 || pair.count > 0;
        if let Some(record) = counts.names.get(&key.name) {
            let failures = live(Some(&record.window), NAME_WINDOW).count;
            if address_has_failed && failures >= FREE_NAME_FAILURES {
                let wait = backoff(pair.count);
                let last = if pair.count > 0 {
                    pair.last
                } else {
                    address.last
                };
                let since = now.saturating_duration_since(last);
                if since < wait {
                    return Err((wait - since).as_secs().max(1));
                }
            }
        }
        let start = Window {
            started: now,
            count: 0,
            last: now,
            pending: 0,
        };
        counts
            .pairs
            .entry(key.clone())
            .or_insert(start)
            .current(now, WINDOW)
            .count_one(now);
        counts
            .addresses
            .entry(key.address)
            .or_insert(start)
            .current(now, WINDOW)
            .count_one(now);
        let record = counts.names.entry(key.name.clone()).or_insert(NameRecord {
            window: start,
            last_failure: now,
        });
        record.window.current(now, NAME_WINDOW).count += 1;
        record.last_failure = now;
        // The lane goes by failures already known: parallel sign-ins from one clean address
        // (an office behind one NAT) all take the clean lane.
        Ok(if address.failures() > 0 || pair.failures() > 0 {
            Lane::Suspect
        } else {
            Lane::Clean
        })
    }

    /// A successful sign-in: its attempt is given back and the name and address pair
    /// starts afresh.
    pub fn succeeded(&self, key: &LoginKey) {
        let mut counts = self.lock();
        give_back(&mut counts, key);
        check_ended(&mut counts, key);
        counts.pairs.remove(key);
    }

    /// An attempt refused before its password was checked (its lane stayed full): it
    /// does not count as a failure.
    pub fn not_checked(&self, key: &LoginKey) {
        let mut counts = self.lock();
        give_back(&mut counts, key);
        check_ended(&mut counts, key);
    }

    /// An attempt whose password was wrong: it stays counted, now as a known failure.
    pub fn failed(&self, key: &LoginKey) {
        check_ended(&mut self.lock(), key);
    }

    /// A permit to run one password check in `lane`, waiting in line at most
    /// `CHECK_QUEUE_WAIT`; `None` when the lane stayed full.
    pub async fn password_check(&self, lane: Lane) -> Option<tokio::sync::SemaphorePermit<'_>> {
        let checks = match lane {
            Lane::Clean => &self.clean_checks,
            Lane::Suspect => &self.suspect_checks,
        };
        tokio::time::timeout(CHECK_QUEUE_WAIT, checks.acquire())
            .await
            .ok()?
            .ok()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The wait an address with `failures` for a name under attack has before its next try:
/// 1 s after none or one (it failed for other names), doubling with each further one.
fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    Duration::from_secs(1u64 << doublings).min(MAX_NAME_BACKOFF)
}

fn give_back(counts: &mut Counts, key: &LoginKey) {
    if let Some(pair) = counts.pairs.get_mut(key) {
        pair.count = pair.count.saturating_sub(1);
    }
    if let Some(address) = counts.addresses.get_mut(&key.address) {
        address.count = address.count.saturating_sub(1);
    }
    if let Some(record) = counts.names.get_mut(&key.name) {
        record.window.count = record.window.count.saturating_sub(1);
    }
}

fn check_ended(counts: &mut Counts, key: &LoginKey) {
    if let Some(pair) = counts.pairs.get_mut(key) {
        pair.pending = pair.pending.saturating_sub(1);
    }
    if let Some(address) = counts.addresses.get_mut(&key.address) {
        address.pending = address.pending.saturating_sub(1);
    }
}

fn prune(counts: &mut Counts, now: Instant) {
    let size = counts.pairs.len() + counts.addresses.len() + counts.names.len();
    // A scan at most every `PRUNE_EVERY`, not on every attempt of a busy server.
    let due = counts
        .pruned_at
        .is_none_or(|at| now.saturating_duration_since(at) >= PRUNE_EVERY);
    if size <= PRUNE_ABOVE || !due {
        return;
    }
    counts.pruned_at = Some(now);
    counts.pairs.retain(|_, w| !w.expired(now, WINDOW));
    counts.addresses.retain(|_, w| !w.expired(now, WINDOW));
    counts
        .names
        .retain(|_, r| !r.window.expired(now, NAME_WINDOW));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str, address: &str) -> LoginKey {
        LoginKey::new(name, Some(address.parse().unwrap()))
    }

    #[test]
    fn one_address_is_refused_for_a_name_after_the_limit_until_the_window_ends() {
        let limiter = LoginLimiter::default();
        let guesser = key("alice", "10.0.0.1");
        let start = Instant::now();
        // Attempts are counted when they start: parallel ones cannot slip through.
        for _ in 0..MAX_PAIR_FAILURES {
            assert!(limiter.attempt(&guesser, start).is_ok());
        }
        let later = start + Duration::from_secs(10);
        assert_eq!(limiter.attempt(&guesser, later), Err(50));
        // The same address may still try another name; another address the same name.
        assert!(limiter.attempt(&key("bob", "10.0.0.1"), later).is_ok());
        assert!(limiter.attempt(&key("alice", "10.0.0.2"), later).is_ok());
        assert!(limiter.attempt(&guesser, start + WINDOW).is_ok());
    }

    #[test]
    fn a_stranger_guessing_cannot_lock_out_the_real_user() {
        let limiter = LoginLimiter::default();
        let start = Instant::now();
        // Many addresses guess Alice's password, far past every limit.
        let mut refused = 0;
        for n in 0..200u32 {
            let guesser = key("Alice", &format!("10.1.{}.{}", n / 250, n % 250));
            for _ in 0..MAX_PAIR_FAILURES + 1 {
                if limiter
                    .attempt(&guesser, start + Duration::from_millis(u64::from(n)))
                    .is_err()
                {
                    refused += 1;
                }
            }
        }
        assert!(refused > 0, "the guessing was never slowed");
        // Alice, from an address that has not failed, signs in at once.
        let alice = key("alice", "192.168.7.7");
        let now = start + Duration::from_secs(1);
        assert_eq!(limiter.attempt(&alice, now), Ok(Lane::Clean));
        limiter.succeeded(&alice);
        assert_eq!(limiter.attempt(&alice, now), Ok(Lane::Clean));
    }

    #[test]
    fn a_name_under_attack_slows_each_address_by_its_own_failures() {
        let limiter = LoginLimiter::default();
        let start = Instant::now();
        for n in 0..200u32 {
            let guesser = key("carol", &format!("10.2.{}.{}", n / 250, n % 250));
            assert_eq!(limiter.attempt(&guesser, start), Ok(Lane::Clean));
        }
        // Carol mistypes once from her own address: her next try waits a second, not the
        // name's whole backoff (before: 296 s).
        let carol = key("carol", "192.168.7.7");
        assert_eq!(limiter.attempt(&carol, start), Ok(Lane::Clean));
        limiter.failed(&carol);
        let half_a_second = start + Duration::from_millis(500);
        assert_eq!(limiter.attempt(&carol, half_a_second), Err(1));
        assert_eq!(
            limiter.attempt(&carol, start + Duration::from_secs(1)),
            Ok(Lane::Suspect)
        );
        // A guessing address waits longer with each of its own failures.
        let guesser = key("carol", "10.2.0.1");
        let mut at = start;
        limiter.failed(&guesser);
        for failures in 1..4u32 {
            at += backoff(failures);
            assert!(limiter
                .attempt(&guesser, at - Duration::from_millis(1))
                .is_err());
            assert_eq!(limiter.attempt(&guesser, at), Ok(Lane::Suspect));
            limiter.failed(&guesser);
        }
        // The backoff is bounded and doubles.
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(3), Duration::from_secs(4));
        assert_eq!(backoff(u32::MAX), MAX_NAME_BACKOFF);
    }

    #[tokio::test]
    async fn a_flood_of_suspects_leaves_the_clean_lane_free() {
        let limiter = LoginLimiter::default();
        let now = Instant::now();
        let suspect = key("dave", "10.4.0.1");
        assert_eq!(limiter.attempt(&suspect, now), Ok(Lane::Clean));
        // Parallel sign-ins from one address that has not failed yet are all clean.
        assert_eq!(
            limiter.attempt(&key("erin", "10.4.0.1"), now),
            Ok(Lane::Clean)
        );
        // Once one of them failed, the address is a suspect.
        limiter.failed(&suspect);
        assert_eq!(limiter.attempt(&suspect, now), Ok(Lane::Suspect));
        let held: Vec<_> = futures_util::future::join_all(
            (0..SUSPECT_CHECKS).map(|_| limiter.password_check(Lane::Suspect)),
        )
        .await;
        assert!(held.iter().all(Option::is_some));
        assert!(
            limiter.suspect_checks.try_acquire().is_err(),
            "the suspect lane is full"
        );
        let clean: Vec<_> = futures_util::future::join_all(
            (0..CLEAN_CHECKS).map(|_| limiter.password_check(Lane::Clean)),
        )
        .await;
        assert!(
            clean.iter().all(Option::is_some),
            "the clean lane is untouched"
        );
    }

    #[test]
    fn one_address_spraying_names_is_refused() {
        let limiter = LoginLimiter::default();
        let now = Instant::now();
        for n in 0..MAX_ADDRESS_FAILURES {
            assert!(limiter
                .attempt(&key(&format!("user{n}"), "10.3.0.1"), now)
                .is_ok());
        }
        assert!(limiter.attempt(&key("someone", "10.3.0.1"), now).is_err());
        assert!(limiter.attempt(&key("someone", "10.3.0.2"), now).is_ok());
    }

    #[test]
    fn successes_and_unchecked_attempts_are_given_back() {
        let limiter = LoginLimiter::default();
        let alice = key("alice", "10.0.0.1");
        let now = Instant::now();
        for _ in 0..MAX_PAIR_FAILURES * 2 {
            assert!(limiter.attempt(&alice, now).is_ok());
            limiter.succeeded(&alice);
        }
        for _ in 0..MAX_PAIR_FAILURES * 2 {
            assert!(limiter.attempt(&alice, now).is_ok());
            limiter.not_checked(&alice);
        }
    }
}
