//! One upstream server: its HTTP client (timeouts, no redirects, TLS to a private CA and an
//! optional client certificate), its concurrency slots, and its circuit breaker. A circuit
//! opens after `failures_to_open` consecutive failures, refuses requests for `open_for`,
//! then lets exactly one probe through (half-open): a success closes it, a failure opens it
//! again. Health is read from here for `/healthz`.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::config::{BreakerSettings, EndpointConfig, Timeouts, TlsSettings};
use super::error::ErrorKind;

/// Where a circuit stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CircuitState {
    Closed,
    Open,
    HalfOpen,
}

#[derive(Debug)]
enum Circuit {
    Closed {
        failures: u32,
    },
    Open {
        until: Instant,
    },
    /// One probe is out; everyone else is refused until it reports.
    HalfOpen,
}

/// An endpoint's health as `/healthz` shows it to admins.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct EndpointHealth {
    pub url: String,
    pub circuit: CircuitState,
    pub in_flight: usize,
    pub max_concurrent: usize,
    pub requests: u64,
    pub failures: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<ErrorKind>,
}

/// One upstream server of a model.
pub struct Endpoint {
    pub config: EndpointConfig,
    pub agent: ureq::Agent,
    breaker: BreakerSettings,
    circuit: Mutex<Circuit>,
    in_flight: AtomicUsize,
    requests: AtomicU64,
    failures: AtomicU64,
    last_error: Mutex<Option<ErrorKind>>,
}

/// A held concurrency slot of an endpoint; given back when dropped.
pub struct Slot {
    endpoint: Arc<Endpoint>,
}

impl Slot {
    pub fn endpoint(&self) -> &Arc<Endpoint> {
        &self.endpoint
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.endpoint.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Endpoint {
    pub fn new(
        config: EndpointConfig,
        timeouts: &Timeouts,
        breaker: BreakerSettings,
        tls: &TlsSettings,
    ) -> Result<Endpoint, String> {
        let mut builder = ureq::AgentBuilder::new()
            .timeout_connect(timeouts.connect)
            .timeout_write(timeouts.connect.max(Duration::from_secs(10)))
            // A single read may wait at most this long; the caller times each stage, a
            // little sooner, so its clock decides which timeout a stall was.
            .timeout_read(timeouts.first_token.max(timeouts.idle) + Duration::from_secs(1))
            .redirects(0)
            .max_idle_connections_per_host(config.max_concurrent)
            .user_agent(concat!("warden/", env!("CARGO_PKG_VERSION")));
        if config.url.starts_with("https://") {
            builder = builder.tls_config(Arc::new(super::tls::client_config(tls)?));
        }
        Ok(Endpoint {
            agent: builder.build(),
            config,
            breaker,
            circuit: Mutex::new(Circuit::Closed { failures: 0 }),
            in_flight: AtomicUsize::new(0),
            requests: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            last_error: Mutex::new(None),
        })
    }

    /// A slot on this endpoint if it has one free and its circuit lets a request through
    /// (in half-open, only the one probe).
    pub fn try_slot(self: &Arc<Self>, now: Instant) -> Option<Slot> {
        let mut circuit = self.circuit.lock().unwrap_or_else(|p| p.into_inner());
        let probing = match *circuit {
            Circuit::Closed { .. } => false,
            Circuit::Open { until } if now >= until => true,
            Circuit::Open { .. } | Circuit::HalfOpen => return None,
        };
        let taken = self
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.config.max_concurrent).then_some(n + 1)
            })
            .is_ok();
        if !taken {
            return None;
        }
        if probing {
            *circuit = Circuit::HalfOpen;
        }
        self.requests.fetch_add(1, Ordering::Relaxed);
        Some(Slot {
            endpoint: self.clone(),
        })
    }

    /// The request reached the model and answered (or streamed) as it should.
    pub fn succeeded(&self) {
        *self.circuit.lock().unwrap_or_else(|p| p.into_inner()) = Circuit::Closed { failures: 0 };
    }

    /// The request failed for a reason that says the endpoint is unwell.
    pub fn failed(&self, kind: ErrorKind, now: Instant) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(kind);
        let mut circuit = self.circuit.lock().unwrap_or_else(|p| p.into_inner());
        let open = Circuit::Open {
            until: now + self.breaker.open_for,
        };
        *circuit = match *circuit {
            Circuit::Closed { failures } if failures + 1 < self.breaker.failures_to_open => {
                Circuit::Closed {
                    failures: failures + 1,
                }
            }
            _ => open,
        };
    }

    /// A half-open probe that ended without telling anything (cancelled by its caller):
    /// the circuit may let the next probe through at once.
    pub fn probe_abandoned(&self, now: Instant) {
        let mut circuit = self.circuit.lock().unwrap_or_else(|p| p.into_inner());
        if matches!(*circuit, Circuit::HalfOpen) {
            *circuit = Circuit::Open { until: now };
        }
    }

    pub fn circuit_state(&self, now: Instant) -> CircuitState {
        match *self.circuit.lock().unwrap_or_else(|p| p.into_inner()) {
            Circuit::Closed { .. } => CircuitState::Closed,
            Circuit::Open { until } if now >= until => CircuitState::HalfOpen,
            Circuit::Open { .. } => CircuitState::Open,
            Circuit::HalfOpen => CircuitState::HalfOpen,
        }
    }

    pub fn health(&self, now: Instant) -> EndpointHealth {
        EndpointHealth {
            url: self.config.url.clone(),
            circuit: self.circuit_state(now),
            in_flight: self.in_flight.load(Ordering::Acquire),
            max_concurrent: self.config.max_concurrent,
            requests: self.requests.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            last_error: *self.last_error.lock().unwrap_or_else(|p| p.into_inner()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(max_concurrent: usize) -> Arc<Endpoint> {
        let config = EndpointConfig {
            url: "http://127.0.0.1:9/v1".into(),
            priority: 0,
            weight: 1,
            max_concurrent,
        };
        let breaker = BreakerSettings {
            failures_to_open: 2,
            open_for: Duration::from_secs(10),
        };
        Arc::new(
            Endpoint::new(config, &Timeouts::DEFAULT, breaker, &TlsSettings::default()).unwrap(),
        )
    }

    #[test]
    fn slots_are_bounded_and_given_back() {
        let endpoint = endpoint(2);
        let now = Instant::now();
        let a = endpoint.try_slot(now).unwrap();
        let _b = endpoint.try_slot(now).unwrap();
        assert!(endpoint.try_slot(now).is_none());
        drop(a);
        assert!(endpoint.try_slot(now).is_some());
        assert_eq!(endpoint.health(now).requests, 3);
    }

    #[test]
    fn the_circuit_opens_then_lets_one_probe_through() {
        let endpoint = endpoint(4);
        let now = Instant::now();
        endpoint.failed(ErrorKind::Connect, now);
        assert_eq!(endpoint.circuit_state(now), CircuitState::Closed);
        endpoint.failed(ErrorKind::Connect, now);
        assert_eq!(endpoint.circuit_state(now), CircuitState::Open);
        assert!(endpoint.try_slot(now).is_none());

        let later = now + Duration::from_secs(11);
        let probe = endpoint.try_slot(later).expect("one probe");
        assert!(
            endpoint.try_slot(later).is_none(),
            "only one probe at a time"
        );
        endpoint.failed(ErrorKind::Status5xx, later);
        drop(probe);
        assert_eq!(endpoint.circuit_state(later), CircuitState::Open);

        let much_later = later + Duration::from_secs(11);
        let probe = endpoint.try_slot(much_later).expect("the next probe");
        endpoint.succeeded();
        drop(probe);
        assert_eq!(endpoint.circuit_state(much_later), CircuitState::Closed);
        assert!(endpoint.try_slot(much_later).is_some());
        assert_eq!(
            endpoint.health(much_later).last_error,
            Some(ErrorKind::Status5xx)
        );
    }
}
