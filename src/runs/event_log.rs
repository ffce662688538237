//! The one place a run's public events are written: each is stored with the run's next
//! seq (inside the write transaction) and only then signalled on the bus, so followers
//! always read it from the store. Terminal events end the bus entry.

use std::sync::Arc;

use super::events::RunEvent;
use super::{now_ms, now_secs, EventBus};
use crate::store::{CompletedTurn, Conversations, NewEvent, RunStatus, Runs, Store, StoreError};

/// Appends events and wakes followers. Cheap to clone.
#[derive(Clone)]
pub struct EventLog {
    store: Arc<Store>,
    bus: EventBus,
}

impl EventLog {
    pub fn new(store: Arc<Store>, bus: EventBus) -> Self {
        Self { store, bus }
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Appends a non-terminal event for the worker holding the run's lease.
    pub fn append_as(
        &self,
        run_id: &str,
        worker: &str,
        event: &RunEvent,
    ) -> Result<i64, StoreError> {
        let data = event.data(now_ms());
        let seq = self.store.append_event_as(
            run_id,
            worker,
            &NewEvent {
                event_type: event.event_type(),
                data: &data,
            },
            now_secs(),
        )?;
        self.bus.publish(run_id, seq, false);
        Ok(seq)
    }

    /// Ends the run with `status` and its terminal `event`; `false` when it had already
    /// ended (nothing appended).
    pub fn finish(
        &self,
        run_id: &str,
        status: RunStatus,
        reason: Option<&str>,
        event: &RunEvent,
    ) -> Result<bool, StoreError> {
        let data = event.data(now_ms());
        let appended = self.store.finish_with_event(
            run_id,
            status,
            reason,
            &NewEvent {
                event_type: event.event_type(),
                data: &data,
            },
            now_secs(),
        )?;
        if let Some(seq) = appended {
            self.bus.publish(run_id, seq, true);
        }
        Ok(appended.is_some())
    }

    /// Saves the turn's answer, its citations and `run.completed` in one transaction.
    pub fn complete_turn(
        &self,
        run_id: &str,
        worker: &str,
        message_id: &str,
        answer: &str,
        citations: &[(i64, String)],
        event: &RunEvent,
    ) -> Result<CompletedTurn, StoreError> {
        let data = event.data(now_ms());
        let done = self.store.complete_turn_with_event(
            run_id,
            worker,
            message_id,
            answer,
            citations,
            &NewEvent {
                event_type: event.event_type(),
                data: &data,
            },
            now_secs(),
        )?;
        if let Some(seq) = done.event_seq {
            self.bus.publish(run_id, seq, true);
        }
        Ok(done)
    }
}
