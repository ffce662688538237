//! The ten read-only diagnostic tools: their specs (name, description, source, JSON Schema
//! of the arguments) and `run_tool`, which validates a call's arguments, reads the tool's
//! source through a `DiagnosticSource`, filters the records and shapes them into a
//! `ToolOutput` (the most recent `limit` items, raw text cut to a bounded length). Never
//! panics on any input: bad arguments are `ToolError::InvalidArguments` with a message a
//! model can act on.

mod access_summary;
mod parameters;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::source::{DiagnosticSource, SourceKind, SourceRecord, SourceRecords};
use parameters::{ArgValue, Arguments, Kind, Parameter, Test};

pub use parameters::{DEFAULT_LIMIT, MAX_LIMIT};

/// Longest `raw` text of an item, in characters.
pub const MAX_RAW_CHARS: usize = 2000;
/// Most pids `pg_transactions` takes.
pub const MAX_PIDS: usize = 20;

/// What one tool call found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolOutput {
    pub tool: String,
    /// The source's file stem, e.g. `pg_log`.
    pub source: String,
    pub status: ToolStatus,
    /// Sorted by ts ascending; when more than `limit` match, the most recent `limit` are
    /// kept and `truncated` is set. (`nginx_access_summary`: one item per upstream, by name.)
    pub items: Vec<ToolItem>,
    pub truncated: bool,
    /// How many records (summary: upstreams) matched before the limit.
    pub matched: usize,
}

/// Whether the tool's source could be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolStatus {
    Ok,
    Unavailable,
}

/// One record (or, for `nginx_access_summary`, one aggregate).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolItem {
    /// Seconds since the epoch; `None` for aggregates.
    pub ts: Option<i64>,
    /// The record exactly as in the source, cut to `MAX_RAW_CHARS` characters; for
    /// aggregates the compact JSON of `fields`.
    pub raw: String,
    /// The parsed record (a JSON object).
    pub fields: Value,
}

/// A tool call that produced no output.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    #[error("cannot read the source: {0}")]
    Source(String),
}

/// What a model and the planner know of a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolSpec {
    pub name: &'static str,
    pub description: &'static str,
    pub source: SourceKind,
    /// The tool's own arguments, besides `start`, `end` and `limit`.
    own: &'static [Parameter],
}

impl ToolSpec {
    /// The JSON Schema of the tool's arguments (a closed object, every property bounded).
    pub fn parameters(&self) -> Value {
        parameters::schema(self.own)
    }

    /// Names of all the arguments the tool accepts.
    pub fn argument_names(&self) -> Vec<&'static str> {
        parameters::COMMON
            .iter()
            .chain(self.own)
            .map(|parameter| parameter.name)
            .collect()
    }
}

/// The ten tools.
pub fn tool_specs() -> &'static [ToolSpec] {
    &TOOL_SPECS
}

/// The tool called `name`.
pub fn tool_spec(name: &str) -> Option<&'static ToolSpec> {
    TOOL_SPECS.iter().find(|spec| spec.name == name)
}

/// Runs a tool against `source`.
pub fn run_tool(
    source: &dyn DiagnosticSource,
    tool: &str,
    args: &Value,
) -> Result<ToolOutput, ToolError> {
    let spec = tool_spec(tool).ok_or_else(|| {
        let known: Vec<_> = TOOL_SPECS.iter().map(|spec| spec.name).collect();
        ToolError::InvalidArguments(format!(
            "unknown tool {:?} (known: {})",
            tool.chars().take(64).collect::<String>(),
            known.join(", ")
        ))
    })?;
    let arguments =
        parameters::validate(spec.name, spec.own, args).map_err(ToolError::InvalidArguments)?;
    let records = match source
        .records(spec.source, arguments.start, arguments.end)
        .map_err(|err| ToolError::Source(err.to_string()))?
    {
        SourceRecords::Unavailable => return Ok(output(spec, ToolStatus::Unavailable, vec![], 0)),
        SourceRecords::Records(records) => records,
    };
    let mut matching: Vec<SourceRecord> = records
        .into_iter()
        .filter(|record| passes(record, &arguments))
        .collect();
    if spec.source == SourceKind::NginxAccess {
        return Ok(summary_output(spec, &matching, arguments.limit));
    }
    matching.sort_by_key(|record| record.ts);
    let matched = matching.len();
    let kept = matching.split_off(matched.saturating_sub(arguments.limit));
    let items = kept
        .into_iter()
        .map(|record| ToolItem {
            ts: Some(record.ts),
            raw: cut_chars(&record.raw, MAX_RAW_CHARS),
            fields: record.fields,
        })
        .collect();
    Ok(output(spec, ToolStatus::Ok, items, matched))
}

fn output(spec: &ToolSpec, status: ToolStatus, items: Vec<ToolItem>, matched: usize) -> ToolOutput {
    ToolOutput {
        tool: spec.name.to_owned(),
        source: spec.source.as_str().to_owned(),
        status,
        truncated: matched > items.len(),
        items,
        matched,
    }
}

/// `nginx_access_summary`: one item per upstream, the first `limit` by name.
fn summary_output(spec: &ToolSpec, records: &[SourceRecord], limit: usize) -> ToolOutput {
    let groups = access_summary::summarize(records);
    let matched = groups.len();
    let items = groups
        .into_iter()
        .take(limit)
        .map(|fields| ToolItem {
            ts: None,
            raw: cut_chars(&fields.to_string(), MAX_RAW_CHARS),
            fields,
        })
        .collect();
    output(spec, ToolStatus::Ok, items, matched)
}

/// Whether a record passes every filter of the call.
fn passes(record: &SourceRecord, arguments: &Arguments) -> bool {
    arguments
        .filters
        .iter()
        .all(|(test, value)| test_passes(*test, value, &record.fields))
}

fn test_passes(test: Test, value: &ArgValue, fields: &Value) -> bool {
    let text_field = |name: &str| fields.get(name).and_then(Value::as_str);
    match (test, value) {
        (Test::Range, _) => true,
        (Test::Equals(field), ArgValue::Text(wanted)) => text_field(field) == Some(wanted),
        (Test::EqualsIgnoringCase(field), ArgValue::Text(wanted)) => {
            text_field(field).is_some_and(|text| text.to_lowercase() == wanted.to_lowercase())
        }
        (Test::Contains(field), ArgValue::Text(wanted)) => text_field(field)
            .is_some_and(|text| text.to_lowercase().contains(&wanted.to_lowercase())),
        (Test::Upstream(field), ArgValue::Text(wanted)) => {
            text_field(field).is_some_and(|text| text == wanted || url_authority(text) == wanted)
        }
        (Test::OneOf(field), ArgValue::IntegerList(wanted)) => fields
            .get(field)
            .and_then(Value::as_i64)
            .is_some_and(|n| wanted.contains(&n)),
        (Test::AtLeast(field), ArgValue::Integer(minimum)) => fields
            .get(field)
            .and_then(Value::as_f64)
            .is_some_and(|n| n >= *minimum as f64),
        // The parameter table pairs each test with one kind of value; anything else
        // cannot select a record.
        _ => false,
    }
}

/// `10.0.5.21:8080` of `http://10.0.5.21:8080/orders`; the text itself when it is no URL.
fn url_authority(text: &str) -> &str {
    let Some((_, rest)) = text.split_once("://") else {
        return text;
    };
    rest.split('/').next().unwrap_or(rest)
}

/// The first `max` characters of `text`.
fn cut_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((index, _)) => text[..index].to_owned(),
        None => text.to_owned(),
    }
}

const SERVICE: Parameter = Parameter {
    name: "service",
    description: "Only records of this service (exact name, e.g. order-service).",
    kind: Kind::Text { max_chars: 128 },
    test: Test::Equals("service"),
};

const HOST: Parameter = Parameter {
    name: "host",
    description: "Only records of this host (exact name).",
    kind: Kind::Text { max_chars: 128 },
    test: Test::Equals("host"),
};

const CONTAINS: Parameter = Parameter {
    name: "contains",
    description: "Only records whose message contains this text (case-insensitive).",
    kind: Kind::Text { max_chars: 200 },
    test: Test::Contains("message"),
};

const NGINX_LEVELS: [&str; 8] = super::nginx_error::LEVELS;

const CHANGE_KINDS: [&str; 4] = ["deploy", "config", "migration", "scale"];

static TOOL_SPECS: [ToolSpec; 11] = [
    ToolSpec {
        name: "pg_error_log",
        description: "PostgreSQL server log: errors and notices with host, pid, SQLSTATE (e.g. 40P01 deadlock detected, 55P03 lock not available, 57014 statement timeout), severity, message, detail and statement. Returns log records, oldest first.",
        source: SourceKind::PgLog,
        own: &[
            HOST,
            Parameter {
                name: "sqlstate",
                description: "Only records with this five-character SQLSTATE code, e.g. 40P01.",
                kind: Kind::Text { max_chars: 5 },
                test: Test::EqualsIgnoringCase("sqlstate"),
            },
            Parameter {
                name: "severity",
                description: "Only records of this severity (ERROR, FATAL, WARNING, LOG…; case-insensitive).",
                kind: Kind::Text { max_chars: 16 },
                test: Test::EqualsIgnoringCase("severity"),
            },
            CONTAINS,
        ],
    },
    ToolSpec {
        name: "pg_lock_waits",
        description: "PostgreSQL lock waits sampled over time: waiting and blocking pid, relation, lock mode, both queries, the blocking transaction's age and how long the waiter has waited. Returns samples, oldest first.",
        source: SourceKind::LockWaits,
        own: &[Parameter {
            name: "relation",
            description: "Only waits on this relation (exact table name).",
            kind: Kind::Text { max_chars: 128 },
            test: Test::Equals("relation"),
        }],
    },
    ToolSpec {
        name: "pg_transactions",
        description: "PostgreSQL transactions with their statements in order (time, SQL, relation, lock mode), by pid and service: shows the order in which transactions take locks. Returns transactions, oldest first.",
        source: SourceKind::Transactions,
        own: &[
            SERVICE,
            Parameter {
                name: "pids",
                description: "Only transactions of these backend pids (1 to 20 pids).",
                kind: Kind::IntegerList {
                    max_items: MAX_PIDS,
                    min: 1,
                    max: i32::MAX as i64,
                },
                test: Test::OneOf("pid"),
            },
        ],
    },
    ToolSpec {
        name: "pg_slow_queries",
        description: "Slow PostgreSQL queries: service, query, duration, rows and time spent waiting for locks. Returns queries, oldest first.",
        source: SourceKind::SlowQueries,
        own: &[
            SERVICE,
            Parameter {
                name: "min_duration_ms",
                description: "Only queries that took at least this many milliseconds.",
                kind: Kind::Integer {
                    min: 0,
                    max: 86_400_000,
                },
                test: Test::AtLeast("duration_ms"),
            },
        ],
    },
    ToolSpec {
        name: "pool_metrics",
        description: "Database connection-pool samples per service: active, idle and maximum connections, callers waiting, acquire timeouts. Returns samples, oldest first.",
        source: SourceKind::PoolMetrics,
        own: &[SERVICE],
    },
    ToolSpec {
        name: "app_log",
        description: "Application logs: service, level, message and trace id. Returns log records, oldest first.",
        source: SourceKind::AppLog,
        own: &[
            SERVICE,
            Parameter {
                name: "level",
                description: "Only records of this level (ERROR, WARN, INFO…; case-insensitive).",
                kind: Kind::Text { max_chars: 16 },
                test: Test::EqualsIgnoringCase("level"),
            },
            CONTAINS,
        ],
    },
    ToolSpec {
        name: "nginx_access_summary",
        description: "nginx access log summarized per upstream over the time range: requests, counts per HTTP status, 5xx errors, p50/p95/p99 request time and p95 upstream response time in seconds, first and last request time. Returns one item per upstream.",
        source: SourceKind::NginxAccess,
        own: &[Parameter {
            name: "upstream",
            description: "Only this upstream (exact name or host:port).",
            kind: Kind::Text { max_chars: 128 },
            test: Test::Upstream("upstream"),
        }],
    },
    ToolSpec {
        name: "nginx_error_log",
        description: "nginx error log: level, message (upstream timed out, connect() failed, no live upstreams…), client, request, upstream and host. Returns log lines, oldest first.",
        source: SourceKind::NginxError,
        own: &[
            Parameter {
                name: "level",
                description: "Only lines of this nginx level.",
                kind: Kind::Choice(&NGINX_LEVELS),
                test: Test::EqualsIgnoringCase("level"),
            },
            CONTAINS,
            Parameter {
                name: "upstream",
                description: "Only lines about this upstream (the exact upstream URL, or its host:port).",
                kind: Kind::Text { max_chars: 256 },
                test: Test::Upstream("upstream"),
            },
        ],
    },
    ToolSpec {
        name: "recent_changes",
        description: "Changes to the system: deploys, configuration changes, migrations and scaling, with id, service, summary and details. Returns changes, oldest first.",
        source: SourceKind::Changes,
        own: &[
            SERVICE,
            Parameter {
                name: "kind",
                description: "Only changes of this kind.",
                kind: Kind::Choice(&CHANGE_KINDS),
                test: Test::Equals("kind"),
            },
        ],
    },
    ToolSpec {
        name: "host_metrics",
        description: "Host samples: disk use per mount (percent used, free bytes), memory use, OOM kills and load. Returns samples, oldest first.",
        source: SourceKind::HostMetrics,
        own: &[HOST],
    },
    ToolSpec {
        name: "pg_database_stats",
        description: "PostgreSQL server samples: client connections against max_connections (percent of the usable slots in use), and the database's cumulative counters (deadlocks, rollbacks, temporary bytes) with its slowest statements when pg_stat_statements is installed. Returns samples, oldest first.",
        source: SourceKind::DbStats,
        own: &[HOST],
    },
];

#[cfg(test)]
mod tests;
