//! The event bus: wakes the streams that follow a run when a new event of it is stored.
//! It carries no event data — subscribers read the events from the store, which is the
//! source of truth — only "run R now has events up to seq S". Entries exist only while a
//! run has subscribers or has not ended.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

/// Per-run "latest seq" signals. Cheap to clone.
#[derive(Clone, Default)]
pub struct EventBus {
    runs: Arc<Mutex<HashMap<String, watch::Sender<i64>>>>,
}

/// A subscription to one run's signal; dropping it forgets the run when nobody else
/// follows it.
pub struct Subscription {
    bus: EventBus,
    run_id: String,
    receiver: Option<watch::Receiver<i64>>,
}

impl EventBus {
    /// Signals that `run_id` now has events up to `seq`. With `terminal`, the run's entry
    /// is removed: its followers wake up, read the terminal event and end.
    pub fn publish(&self, run_id: &str, seq: i64, terminal: bool) {
        let mut runs = self.lock();
        if let Some(sender) = runs.get(run_id) {
            sender.send_replace(seq);
        }
        if terminal {
            runs.remove(run_id);
        }
    }

    /// Follows `run_id`. Subscribe before reading the store, so no event can slip between
    /// the read and the wait.
    pub fn subscribe(&self, run_id: &str) -> Subscription {
        let mut runs = self.lock();
        let sender = runs
            .entry(run_id.to_owned())
            .or_insert_with(|| watch::channel(0).0);
        Subscription {
            bus: self.clone(),
            run_id: run_id.to_owned(),
            receiver: Some(sender.subscribe()),
        }
    }

    /// How many runs have an entry (for tests and diagnostics).
    pub fn tracked_runs(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, watch::Sender<i64>>> {
        self.runs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Subscription {
    /// Waits until the run has a new event or its entry was removed (it ended).
    pub async fn changed(&mut self) {
        let Some(receiver) = self.receiver.as_mut() else {
            return std::future::pending().await;
        };
        let closed = receiver.changed().await.is_err() || receiver.has_changed().is_err();
        if closed {
            // The run ended: from now on there is nothing more to wait for.
            self.receiver = None;
        }
    }

    /// Whether the run's entry was removed since this subscription began.
    pub fn run_ended(&self) -> bool {
        self.receiver.is_none()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.receiver = None;
        let mut runs = self.bus.lock();
        if runs
            .get(&self.run_id)
            .is_some_and(|sender| sender.receiver_count() == 0)
        {
            runs.remove(&self.run_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_subscriber_wakes_on_publish_and_entries_are_forgotten() {
        let bus = EventBus::default();
        let mut subscription = bus.subscribe("run_1");
        bus.publish("run_1", 1, false);
        subscription.changed().await;
        assert!(!subscription.run_ended());
        bus.publish("run_1", 2, true);
        subscription.changed().await;
        assert!(subscription.run_ended());
        drop(subscription);
        assert_eq!(bus.tracked_runs(), 0);

        // A subscriber to a run that never publishes leaves nothing behind.
        drop(bus.subscribe("run_2"));
        assert_eq!(bus.tracked_runs(), 0);
        // Publishing to a run nobody follows creates nothing.
        bus.publish("run_3", 1, false);
        assert_eq!(bus.tracked_runs(), 0);
    }
}
