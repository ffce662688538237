//! Route records: how the agent routed each run's message — intent, confidence, source,
//! resource ids, clarification, blocked reason, flags and mode. Public, auditable fields
//! only; written once per run (a resumed run reuses its route instead of routing again).

use rusqlite::{params, OptionalExtension};

use super::{Result, Store};

/// A stored route.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RouteRecord {
    pub intent: String,
    pub confidence: f64,
    pub source: String,
    pub mode: String,
    pub incident_id: Option<String>,
    pub diagnostic_task_id: Option<String>,
    pub needs_clarification: bool,
    pub blocked_reason: Option<String>,
    pub flags: Vec<String>,
}

pub trait RouteRecords {
    /// Stores the run's route; the first one written stays (returns it).
    fn save_route(&self, run_id: &str, route: &RouteRecord, now: i64) -> Result<RouteRecord>;
    fn route_of(&self, run_id: &str) -> Result<Option<RouteRecord>>;
}

impl RouteRecords for Store {
    fn save_route(&self, run_id: &str, route: &RouteRecord, now: i64) -> Result<RouteRecord> {
        let flags = serde_json::to_string(&route.flags).unwrap_or_else(|_| "[]".into());
        self.write(|t| {
            t.execute(
                "INSERT OR IGNORE INTO route_records (run_id, intent, confidence, source, mode,
                     incident_id, diagnostic_task_id, needs_clarification, blocked_reason, flags,
                     created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                params![
                    run_id,
                    route.intent,
                    route.confidence.clamp(0.0, 1.0),
                    route.source,
                    route.mode,
                    route.incident_id,
                    route.diagnostic_task_id,
                    route.needs_clarification,
                    route.blocked_reason,
                    flags,
                    now
                ],
            )?;
            Ok(())
        })?;
        Ok(self.route_of(run_id)?.unwrap_or_else(|| route.clone()))
    }

    fn route_of(&self, run_id: &str) -> Result<Option<RouteRecord>> {
        self.read(|c| {
            Ok(c.query_row(
                "SELECT intent, confidence, source, mode, incident_id, diagnostic_task_id,
                        needs_clarification, blocked_reason, flags
                 FROM route_records WHERE run_id = ?1",
                [run_id],
                |r| {
                    let flags: String = r.get(8)?;
                    Ok(RouteRecord {
                        intent: r.get(0)?,
                        confidence: r.get(1)?,
                        source: r.get(2)?,
                        mode: r.get(3)?,
                        incident_id: r.get(4)?,
                        diagnostic_task_id: r.get(5)?,
                        needs_clarification: r.get(6)?,
                        blocked_reason: r.get(7)?,
                        flags: serde_json::from_str(&flags).unwrap_or_default(),
                    })
                },
            )
            .optional()?)
        })
    }
}
