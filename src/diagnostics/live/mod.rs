//! Live, read-only connectors behind the same `DiagnosticSource` interface as scenario
//! packs, so the graph cannot tell a real system from a recorded one: PostgreSQL's views
//! and server log (`postgres`), Prometheus' host and pool metrics (`prometheus`), log
//! files under allowed roots (`log_files`), and the
//! source registry that builds them from `[[diagnostics.sources]]` (`config`). Every
//! string a connector returns is masked as chat messages are, before the graph sees it.

pub mod config;
pub mod log_files;
pub mod pg_jsonlog;
pub mod postgres;
pub mod prometheus;
pub mod scenarios;

use std::collections::BTreeSet;

use serde::Serialize;
use serde_json::Value;

use super::source::{DiagnosticSource, SourceError, SourceKind, SourceRecord, SourceRecords};
use crate::agent::safety::mask_for_storage;

/// Most records one connector returns for one request.
pub const MAX_LIVE_RECORDS: usize = 2_000;

/// One live system a diagnosis may read.
pub trait Connector: Send + Sync {
    /// The registry name (`[[diagnostics.sources]] name`).
    fn name(&self) -> &str;
    /// The source kinds this connector answers.
    fn provides(&self) -> &[SourceKind];
    /// Records of `kind` whose time is in [start, end], oldest first.
    fn records(
        &self,
        kind: SourceKind,
        start: Option<i64>,
        end: Option<i64>,
    ) -> Result<Vec<SourceRecord>, String>;
    /// Whether the system answers, and what the connector verified about it.
    fn health(&self) -> Health;
}

/// A connector's health, for the admin screen and `warden sources check`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Health {
    pub name: String,
    pub kind: String,
    pub ok: bool,
    /// What was checked, in a sentence ("connected; a write was refused").
    pub detail: String,
    /// The source kinds it answers.
    pub provides: Vec<SourceKind>,
}

/// Every configured connector, answering each source kind from those that provide it.
pub struct LiveSource {
    connectors: Vec<Box<dyn Connector>>,
}

impl LiveSource {
    pub fn new(connectors: Vec<Box<dyn Connector>>) -> Self {
        Self { connectors }
    }

    pub fn health(&self) -> Vec<Health> {
        self.connectors.iter().map(|c| c.health()).collect()
    }

    /// The source kinds some connector answers.
    pub fn kinds(&self) -> BTreeSet<SourceKind> {
        self.connectors
            .iter()
            .flat_map(|c| c.provides().iter().copied())
            .collect()
    }
}

impl DiagnosticSource for LiveSource {
    fn records(
        &self,
        source: SourceKind,
        start: Option<i64>,
        end: Option<i64>,
    ) -> Result<SourceRecords, SourceError> {
        let providers: Vec<&dyn Connector> = self
            .connectors
            .iter()
            .filter(|c| c.provides().contains(&source))
            .map(|c| c.as_ref())
            .collect();
        if providers.is_empty() {
            return Ok(SourceRecords::Unavailable);
        }
        let mut records = Vec::new();
        let mut failures = Vec::new();
        for connector in &providers {
            match connector.records(source, start, end) {
                Ok(mut found) => records.append(&mut found),
                Err(message) => {
                    tracing::warn!(source = connector.name(), kind = %source, "{message}");
                    failures.push(format!("{}: {message}", connector.name()));
                }
            }
        }
        // One system down among several still answers with what the others hold; all down
        // is an error the graph records (and fails closed on), never an empty answer.
        if failures.len() == providers.len() {
            return Err(SourceError::Connector {
                message: failures.join("; "),
            });
        }
        records.sort_by_key(|r| r.ts);
        Ok(SourceRecords::Records(records))
    }
}

/// `fields` with every string masked as a chat message is; the record's raw text is its
/// masked JSON, so no secret or personal datum reaches evidence, events or reports.
pub fn masked_record(ts: i64, fields: Value) -> SourceRecord {
    let fields = mask_value(fields);
    SourceRecord {
        ts,
        raw: fields.to_string(),
        fields,
    }
}

fn mask_value(value: Value) -> Value {
    match value {
        Value::String(text) => Value::String(mask_for_storage(&text).0),
        Value::Array(items) => Value::Array(items.into_iter().map(mask_value).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(key, value)| {
                    // Times stay as they are: masking must not turn a timestamp into a
                    // "phone number".
                    if key == "ts" {
                        (key, value)
                    } else {
                        (key, mask_value(value))
                    }
                })
                .collect(),
        ),
        other => other,
    }
}

/// Found records as a connector answers them: those in [start, end], masked, oldest
/// first, at most `MAX_LIVE_RECORDS` (the newest).
pub fn answer(found: Vec<(i64, Value)>, start: Option<i64>, end: Option<i64>) -> Vec<SourceRecord> {
    let mut records: Vec<SourceRecord> = found
        .into_iter()
        .filter(|(ts, _)| in_range(*ts, start, end))
        .map(|(ts, fields)| masked_record(ts, fields))
        .collect();
    records.sort_by_key(|r| r.ts);
    let excess = records.len().saturating_sub(MAX_LIVE_RECORDS);
    records.drain(..excess);
    records
}

/// Whether `ts` is in [start, end].
pub fn in_range(ts: i64, start: Option<i64>, end: Option<i64>) -> bool {
    start.is_none_or(|s| ts >= s) && end.is_none_or(|e| ts <= e)
}

#[cfg(test)]
mod tests;
