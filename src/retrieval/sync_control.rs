//! One sync per knowledge base at a time, and how a running sync is stopped: a registry of
//! the syncs in progress, each with its cancel flag. A `SyncTicket` holds its knowledge
//! base's place until it is dropped; a second `begin` for the same knowledge base is
//! refused (`SyncInProgress`) instead of waiting. Cancelling only sets the flag: the sync
//! checks it between files and batches and stops at a committed batch boundary.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::RetrievalError;

type Running = Arc<Mutex<HashMap<String, Arc<AtomicBool>>>>;

/// The syncs in progress in one library.
#[derive(Debug, Default)]
pub(super) struct SyncRegistry {
    running: Running,
}

/// The right to sync one knowledge base; releases it when dropped.
#[derive(Debug)]
pub struct SyncTicket {
    name: String,
    cancel: Arc<AtomicBool>,
    running: Running,
}

/// Cancels one sync; cheap to clone and to keep after the sync ended (then it does nothing).
#[derive(Debug, Clone)]
pub struct SyncCanceller(Arc<AtomicBool>);

impl SyncRegistry {
    /// Takes `name`'s place, or refuses when a sync of it is already running.
    pub(super) fn begin(&self, name: &str) -> Result<SyncTicket, RetrievalError> {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if running.contains_key(name) {
            return Err(RetrievalError::SyncInProgress(name.to_string()));
        }
        let cancel = Arc::new(AtomicBool::new(false));
        running.insert(name.to_string(), cancel.clone());
        Ok(SyncTicket {
            name: name.to_string(),
            cancel,
            running: self.running.clone(),
        })
    }

    /// Asks the running sync of `name` to stop; `false` when none is running.
    pub(super) fn cancel(&self, name: &str) -> bool {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        match running.get(name) {
            Some(flag) => {
                flag.store(true, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }
}

impl SyncTicket {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }

    pub fn canceller(&self) -> SyncCanceller {
        SyncCanceller(self.cancel.clone())
    }
}

impl Drop for SyncTicket {
    fn drop(&mut self) {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if running
            .get(&self.name)
            .is_some_and(|flag| Arc::ptr_eq(flag, &self.cancel))
        {
            running.remove(&self.name);
        }
    }
}

impl SyncCanceller {
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_sync_per_knowledge_base_until_the_ticket_is_dropped() {
        let registry = SyncRegistry::default();
        let ops = registry.begin("ops").unwrap();
        assert!(matches!(
            registry.begin("ops"),
            Err(RetrievalError::SyncInProgress(name)) if name == "ops"
        ));
        let other = registry.begin("hr").unwrap();
        drop(ops);
        let again = registry.begin("ops").unwrap();
        assert!(!again.is_cancelled());
        drop(other);
        drop(again);
    }

    #[test]
    fn cancel_reaches_only_the_running_sync() {
        let registry = SyncRegistry::default();
        assert!(!registry.cancel("ops"));
        let ticket = registry.begin("ops").unwrap();
        let canceller = ticket.canceller();
        assert!(registry.cancel("ops"));
        assert!(ticket.is_cancelled());
        drop(ticket);
        // A canceller kept after its sync ended touches nothing, not the next sync.
        let next = registry.begin("ops").unwrap();
        canceller.cancel();
        assert!(!next.is_cancelled());
    }
}
