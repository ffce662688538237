//! Which open connections are waiting for a request (new, kept alive, or a client sending
//! its headers slowly) rather than working on one, so that when every connection slot is
//! taken a new client can take the slot of the one that has waited longest. A connection
//! is "working" from the moment its request's headers have arrived until its response body
//! has been sent (event streams included).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// The connections waiting for a request, oldest first, each with the signal that closes it.
#[derive(Default)]
pub struct IdleConnections {
    waiting: Mutex<BTreeMap<u64, Arc<Notify>>>,
}

impl IdleConnections {
    fn waiting(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<Notify>>> {
        self.waiting
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Tells the connection that has waited longest for a request to close. False when every
    /// open connection is working.
    pub fn evict_oldest(&self) -> bool {
        let Some((_, close)) = self.waiting().pop_first() else {
            return false;
        };
        close.notify_one();
        true
    }
}

/// One connection's entry: waiting while no request is in flight.
pub struct TrackedConnection {
    id: u64,
    close: Arc<Notify>,
    in_flight: AtomicUsize,
    idle: Arc<IdleConnections>,
}

impl TrackedConnection {
    /// A new connection, waiting for its first request. `close` is notified to evict it.
    pub fn new(id: u64, idle: Arc<IdleConnections>) -> Arc<Self> {
        let close = Arc::new(Notify::new());
        idle.waiting().insert(id, close.clone());
        Arc::new(Self {
            id,
            close,
            in_flight: AtomicUsize::new(0),
            idle,
        })
    }

    /// Resolves when the connection has been chosen for eviction.
    pub async fn evicted(&self) {
        self.close.notified().await;
    }

    /// A request's headers arrived: the connection works until the returned guard is dropped.
    pub fn working(self: &Arc<Self>) -> Working {
        if self.in_flight.fetch_add(1, Ordering::AcqRel) == 0 {
            self.idle.waiting().remove(&self.id);
        }
        Working(self.clone())
    }
}

impl Drop for TrackedConnection {
    fn drop(&mut self) {
        self.idle.waiting().remove(&self.id);
    }
}

/// Held while a request is handled and its response body sent.
pub struct Working(Arc<TrackedConnection>);

impl Drop for Working {
    fn drop(&mut self) {
        let connection = &self.0;
        if connection.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            connection
                .idle
                .waiting()
                .insert(connection.id, connection.close.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_waiting_connection_is_evicted_and_working_ones_never_are() {
        let idle = Arc::new(IdleConnections::default());
        let first = TrackedConnection::new(1, idle.clone());
        let second = TrackedConnection::new(2, idle.clone());
        let busy = first.working();
        // The first is working: the second, though newer, is the one evicted.
        assert!(idle.evict_oldest());
        assert!(!idle.waiting().contains_key(&2));
        assert!(!idle.evict_oldest(), "only a working connection is left");
        drop(busy);
        assert!(
            idle.waiting().contains_key(&1),
            "it waits again after its response"
        );
        drop(first);
        drop(second);
        assert!(idle.waiting().is_empty());
    }
}
