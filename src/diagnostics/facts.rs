//! The Fact Adapter's vocabulary and per-tool adapters: a diagnostic tool's records become
//! typed facts (a SQLSTATE error, a wait cycle, a saturated pool, a recent change…), each
//! naming the evidence items it rests on and whether it falls inside the incident window.
//! Derived facts (a wait cycle, opposite lock order, resource growth) are computed here in
//! code, never asked of a model. Each fact kind may fill only some causal roles: a step
//! that tags a fact with a role it cannot play is overreach and the fact gives no support.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// Changes this long before the window may have triggered the incident.
pub const CHANGE_LOOKBACK_SECS: i64 = 2 * 3600;

/// The part a piece of evidence plays in the causal chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CausalRole {
    Trigger,
    Mechanism,
    Impact,
    Context,
}

impl CausalRole {
    pub fn as_str(self) -> &'static str {
        match self {
            CausalRole::Trigger => "trigger",
            CausalRole::Mechanism => "mechanism",
            CausalRole::Impact => "impact",
            CausalRole::Context => "context",
        }
    }
}

/// Fact kinds and the causal roles each may fill (context is always allowed).
const FACT_KINDS: [(&str, &[CausalRole]); 17] = [
    (
        "pg_error",
        &[
            CausalRole::Impact,
            CausalRole::Mechanism,
            CausalRole::Trigger,
        ],
    ),
    ("lock_wait", &[CausalRole::Mechanism, CausalRole::Impact]),
    ("wait_cycle", &[CausalRole::Mechanism]),
    ("long_blocker", &[CausalRole::Mechanism]),
    ("transaction", &[CausalRole::Trigger]),
    ("opposite_lock_order", &[CausalRole::Trigger]),
    ("slow_query", &[CausalRole::Mechanism, CausalRole::Impact]),
    ("pool_saturated", &[CausalRole::Mechanism]),
    ("pool_healthy", &[]),
    (
        "app_log",
        &[
            CausalRole::Impact,
            CausalRole::Mechanism,
            CausalRole::Trigger,
        ],
    ),
    ("upstream_summary", &[CausalRole::Impact]),
    ("nginx_error", &[CausalRole::Mechanism, CausalRole::Impact]),
    ("change", &[CausalRole::Trigger]),
    ("disk_usage", &[CausalRole::Mechanism, CausalRole::Impact]),
    ("memory_usage", &[CausalRole::Mechanism]),
    ("resource_growth", &[CausalRole::Trigger]),
    (
        "db_connections",
        &[CausalRole::Mechanism, CausalRole::Impact],
    ),
];

pub fn is_fact_kind(kind: &str) -> bool {
    FACT_KINDS.iter().any(|(k, _)| *k == kind)
}

/// Whether a fact of `kind` may play `role`.
pub fn role_allowed(kind: &str, role: CausalRole) -> bool {
    role == CausalRole::Context
        || FACT_KINDS
            .iter()
            .any(|(k, roles)| *k == kind && roles.contains(&role))
}

/// A typed fact read off one observation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fact {
    pub kind: String,
    pub attrs: Map<String, Value>,
    pub evidence_ids: Vec<String>,
    pub in_window: bool,
    /// Inside the window or the lookback before it (a precursor, like a failed start).
    #[serde(default)]
    pub recent: bool,
    /// A short public sentence.
    pub summary: String,
}

/// The incident window, in unix seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    pub start: i64,
    pub end: i64,
}

impl Window {
    pub fn contains(&self, ts: i64) -> bool {
        ts >= self.start && ts <= self.end
    }

    /// Inside the window or the change lookback before it.
    pub fn recent(&self, ts: i64) -> bool {
        ts >= self.start - CHANGE_LOOKBACK_SECS && ts <= self.end
    }
}

/// One record of an observation with its evidence id.
pub struct Item<'a> {
    pub evidence_id: &'a str,
    pub ts: Option<i64>,
    pub fields: &'a Value,
}

/// The facts a `tool`'s records show.
pub fn adapt(tool: &str, items: &[Item<'_>], window: Window) -> Vec<Fact> {
    let mut facts = adapt_tool(tool, items, window);
    for fact in &mut facts {
        fact.recent = fact.in_window
            || (!fact.evidence_ids.is_empty()
                && fact.evidence_ids.iter().all(|id| {
                    items
                        .iter()
                        .find(|i| i.evidence_id == id)
                        .and_then(|i| i.ts)
                        .is_some_and(|ts| window.recent(ts))
                }));
    }
    facts
}

fn adapt_tool(tool: &str, items: &[Item<'_>], window: Window) -> Vec<Fact> {
    match tool {
        "pg_error_log" => items
            .iter()
            .flat_map(|i| {
                let error = pg_error(i, window);
                let mut facts = deadlock::from_report(&error);
                facts.insert(0, error);
                facts
            })
            .collect(),
        "pg_lock_waits" => locks::lock_waits(items, window),
        "pg_transactions" => locks::transactions(items, window),
        "pg_slow_queries" => items.iter().map(|i| slow_query(i, window)).collect(),
        "pool_metrics" => pool(items, window),
        "app_log" => items.iter().map(|i| app_log(i, window)).collect(),
        "nginx_access_summary" => upstream_summaries(items, window),
        "nginx_error_log" => items.iter().map(|i| nginx_error(i, window)).collect(),
        "recent_changes" => items.iter().map(|i| change(i, window)).collect(),
        "host_metrics" => host(items, window),
        "pg_database_stats" => db_connections(items, window),
        _ => Vec::new(),
    }
}

fn text(fields: &Value, key: &str) -> String {
    match fields.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn number(fields: &Value, key: &str) -> f64 {
    fields.get(key).and_then(Value::as_f64).unwrap_or(0.0)
}

fn in_window(item: &Item<'_>, window: Window) -> bool {
    item.ts.is_some_and(|ts| window.contains(ts))
}

fn fact(kind: &str, attrs: Value, ids: Vec<String>, in_window: bool, summary: String) -> Fact {
    Fact {
        kind: kind.to_owned(),
        attrs: match attrs {
            Value::Object(map) => map,
            _ => Map::new(),
        },
        evidence_ids: ids,
        in_window,
        recent: in_window,
        summary,
    }
}

fn short(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let cut: String = text.chars().take(max).collect();
        format!("{cut}…")
    }
}

fn pg_error(item: &Item<'_>, window: Window) -> Fact {
    let f = item.fields;
    let message = text(f, "message");
    let full: Vec<String> = ["message", "detail", "statement"]
        .iter()
        .map(|k| text(f, k))
        .filter(|part| !part.is_empty())
        .collect();
    fact(
        "pg_error",
        json!({
            "sqlstate": text(f, "sqlstate"),
            "severity": text(f, "severity"),
            "message": full.join(" "),
            "host": text(f, "host"),
            "pid": number(f, "pid"),
        }),
        vec![item.evidence_id.to_owned()],
        in_window(item, window),
        format!("PostgreSQL {} {}", text(f, "sqlstate"), short(&message, 80)),
    )
}

fn slow_query(item: &Item<'_>, window: Window) -> Fact {
    let f = item.fields;
    let duration = number(f, "duration_ms");
    let lock_wait = number(f, "lock_wait_ms");
    let share = if duration > 0.0 {
        lock_wait / duration
    } else {
        0.0
    };
    fact(
        "slow_query",
        json!({
            "service": text(f, "service"),
            "query": text(f, "query"),
            "duration_ms": duration,
            "rows": number(f, "rows"),
            "lock_wait_ms": lock_wait,
            "lock_share": (share * 1000.0).round() / 1000.0,
        }),
        vec![item.evidence_id.to_owned()],
        in_window(item, window),
        format!(
            "query took {duration} ms ({lock_wait} ms waiting for locks): {}",
            short(&text(f, "query"), 60)
        ),
    )
}

fn pool(items: &[Item<'_>], window: Window) -> Vec<Fact> {
    let mut by_service: BTreeMap<String, Vec<&Item<'_>>> = BTreeMap::new();
    for item in items.iter().filter(|i| in_window(i, window)) {
        by_service
            .entry(text(item.fields, "service"))
            .or_default()
            .push(item);
    }
    let mut facts = Vec::new();
    for (service, samples) in by_service {
        let saturated: Vec<&&Item<'_>> = samples
            .iter()
            .filter(|s| {
                let f = s.fields;
                number(f, "max") > 0.0
                    && number(f, "active") >= number(f, "max")
                    && number(f, "waiting") > 0.0
            })
            .collect();
        let timeouts: Vec<f64> = samples
            .iter()
            .map(|s| number(s.fields, "acquire_timeouts"))
            .collect();
        let rise = timeouts.iter().copied().fold(0.0, f64::max)
            - timeouts.iter().copied().fold(f64::INFINITY, f64::min);
        if saturated.is_empty() {
            let ids = samples
                .iter()
                .take(3)
                .map(|s| s.evidence_id.to_owned())
                .collect();
            facts.push(fact(
                "pool_healthy",
                json!({ "service": service, "samples": samples.len() }),
                ids,
                true,
                format!(
                    "{service} pool never saturated in {} samples",
                    samples.len()
                ),
            ));
        } else {
            let waiting = saturated
                .iter()
                .map(|s| number(s.fields, "waiting"))
                .fold(0.0, f64::max);
            let max = number(saturated[0].fields, "max");
            facts.push(fact(
                "pool_saturated",
                json!({
                    "service": service,
                    "saturated_samples": saturated.len(),
                    "max_waiting": waiting,
                    "max": max,
                    "acquire_timeouts_rise": rise.max(0.0),
                }),
                saturated
                    .iter()
                    .take(4)
                    .map(|s| s.evidence_id.to_owned())
                    .collect(),
                true,
                format!(
                    "{service} pool at its limit of {max} in {} samples, up to {waiting} waiting",
                    saturated.len()
                ),
            ));
        }
    }
    facts
}

fn app_log(item: &Item<'_>, window: Window) -> Fact {
    let f = item.fields;
    let message = text(f, "message");
    let duration = match f.get("duration_ms").and_then(Value::as_f64) {
        Some(ms) => ms,
        None => durations::longest_ms(&message).unwrap_or(0.0),
    };
    fact(
        "app_log",
        json!({
            "service": text(f, "service"),
            "level": text(f, "level"),
            "message": message,
            "duration_ms": duration,
        }),
        vec![item.evidence_id.to_owned()],
        in_window(item, window),
        format!(
            "{} {}: {}",
            text(f, "service"),
            text(f, "level"),
            short(&message, 80)
        ),
    )
}

/// One fact per upstream, each with its share of all the gateway's 5xx in the summary: the
/// upstream that holds the bulk of the errors is the one the alert is about, a few errors
/// of another upstream are background.
fn upstream_summaries(items: &[Item<'_>], window: Window) -> Vec<Fact> {
    let total: f64 = items.iter().map(|i| number(i.fields, "errors_5xx")).sum();
    items
        .iter()
        .map(|item| {
            let mut fact = upstream_summary(item, window);
            let own = number(item.fields, "errors_5xx");
            let share = if total > 0.0 { own / total } else { 0.0 };
            fact.attrs.insert(
                "share_5xx".to_owned(),
                json!((share * 1000.0).round() / 1000.0),
            );
            fact
        })
        .collect()
}

fn upstream_summary(item: &Item<'_>, window: Window) -> Fact {
    let f = item.fields;
    let status = f.get("status").cloned().unwrap_or(Value::Null);
    let count = |code: &str| status.get(code).and_then(Value::as_f64).unwrap_or(0.0);
    let time = |key: &str| match f.get(key) {
        Some(Value::String(text)) => crate::timefmt::parse_rfc3339(text),
        Some(other) => other.as_i64(),
        None => None,
    };
    let first = time("first_ts");
    let last = time("last_ts");
    let overlaps = match (first, last) {
        (Some(first), Some(last)) => first <= window.end && last >= window.start,
        _ => false,
    };
    let upstream = text(f, "upstream");
    fact(
        "upstream_summary",
        json!({
            "upstream": upstream,
            "requests": number(f, "requests"),
            "errors_5xx": number(f, "errors_5xx"),
            "s502": count("502"),
            "s503": count("503"),
            "s504": count("504"),
            "p95_s": number(f, "p95_s"),
            "upstream_p95_s": number(f, "upstream_p95_s"),
        }),
        vec![item.evidence_id.to_owned()],
        overlaps,
        format!(
            "upstream {upstream}: {} requests, {} 502, {} 504, p95 {} s",
            number(f, "requests"),
            count("502"),
            count("504"),
            number(f, "p95_s")
        ),
    )
}

fn nginx_error(item: &Item<'_>, window: Window) -> Fact {
    let f = item.fields;
    let message = text(f, "message");
    let lower = message.to_lowercase();
    let kind = if lower.contains("upstream timed out") {
        "upstream_timeout"
    } else if lower.contains("connection refused") {
        "connect_refused"
    } else if lower.contains("no live upstreams") {
        "no_live_upstreams"
    } else {
        "other"
    };
    fact(
        "nginx_error",
        json!({
            "level": text(f, "level"),
            "kind": kind,
            "upstream": text(f, "upstream"),
            "request": text(f, "request"),
            "message": message,
        }),
        vec![item.evidence_id.to_owned()],
        in_window(item, window),
        format!("nginx {}: {}", text(f, "level"), short(&message, 80)),
    )
}

/// The trigger kind a change of `kind` stands for.
pub fn trigger_kind_of_change(kind: &str) -> &'static str {
    match kind {
        "deploy" | "migration" => "deploy",
        _ => "config_change",
    }
}

fn change(item: &Item<'_>, window: Window) -> Fact {
    let f = item.fields;
    let recent = item
        .ts
        .is_some_and(|ts| ts >= window.start - CHANGE_LOOKBACK_SECS && ts <= window.end);
    let kind = text(f, "kind");
    fact(
        "change",
        json!({
            "id": text(f, "id"),
            "kind": kind,
            "service": text(f, "service"),
            "summary": text(f, "summary"),
        }),
        vec![item.evidence_id.to_owned()],
        recent,
        format!(
            "{} {} on {}: {}",
            kind,
            text(f, "id"),
            text(f, "service"),
            short(&text(f, "summary"), 70)
        ),
    )
}

/// Per database host, the in-window sample with the most connection slots in use, citing
/// every sample near that peak.
fn db_connections(items: &[Item<'_>], window: Window) -> Vec<Fact> {
    let mut by_host: BTreeMap<String, Vec<&Item<'_>>> = BTreeMap::new();
    for item in items.iter().filter(|i| in_window(i, window)) {
        by_host
            .entry(text(item.fields, "host"))
            .or_default()
            .push(item);
    }
    let used = |item: &Item<'_>| number(item.fields, "connections_used_pct");
    let mut facts = Vec::new();
    for (host, samples) in by_host {
        let Some(peak) = samples.iter().max_by(|a, b| used(a).total_cmp(&used(b))) else {
            continue;
        };
        let peak_used = used(peak);
        let mut ids: Vec<String> = samples
            .iter()
            .filter(|s| used(s) >= peak_used - 1.0)
            .map(|s| s.evidence_id.to_owned())
            .collect();
        ids.truncate(12);
        let backends = number(peak.fields, "server_backends");
        let max = number(peak.fields, "max_connections");
        facts.push(fact(
            "db_connections",
            json!({
                "host": host,
                "database": text(peak.fields, "database"),
                "used_pct": peak_used,
                "backends": backends,
                "max_connections": max,
            }),
            ids,
            true,
            format!("{host}: {backends} client connections of max_connections {max} ({peak_used}% of the usable slots)"),
        ));
    }
    facts
}

fn host(items: &[Item<'_>], window: Window) -> Vec<Fact> {
    // Every sample the tool returned (the lookback included) per host: growth is measured
    // over all of them, levels only over the window's.
    let mut by_host: BTreeMap<String, Vec<&Item<'_>>> = BTreeMap::new();
    for item in items.iter().filter(|i| i.ts.is_some()) {
        by_host
            .entry(text(item.fields, "host"))
            .or_default()
            .push(item);
    }
    let mut facts = Vec::new();
    for (host, mut history) in by_host {
        history.sort_by_key(|s| s.ts);
        let samples: Vec<&Item<'_>> = history
            .iter()
            .copied()
            .filter(|i| in_window(i, window))
            .collect();
        if samples.is_empty() {
            continue;
        }
        let disk_peak = |s: &Item<'_>| -> (f64, String, f64) {
            s.fields
                .get("disks")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|d| {
                    (
                        number(d, "used_pct"),
                        text(d, "mount"),
                        number(d, "free_bytes"),
                    )
                })
                .fold((0.0, String::new(), 0.0), |best, d| {
                    if d.0 > best.0 {
                        d
                    } else {
                        best
                    }
                })
        };
        if let Some(peak) = samples
            .iter()
            .max_by(|a, b| disk_peak(a).0.total_cmp(&disk_peak(b).0))
        {
            let (used, mount, free) = disk_peak(peak);
            // Every sample near the peak is evidence, not only the single highest one.
            let mut ids: Vec<String> = samples
                .iter()
                .filter(|s| disk_peak(s).0 >= (used - 1.0).max(90.0))
                .map(|s| s.evidence_id.to_owned())
                .collect();
            ids.truncate(12);
            if ids.is_empty() {
                ids.push(peak.evidence_id.to_owned());
            }
            facts.push(fact(
                "disk_usage",
                json!({ "host": host, "mount": mount, "used_pct": used, "free_bytes": free }),
                ids,
                true,
                format!("{host} {mount} at {used}% used, {free} bytes free"),
            ));
        }
        let mem_peak = samples.iter().max_by(|a, b| {
            number(a.fields, "mem_used_pct").total_cmp(&number(b.fields, "mem_used_pct"))
        });
        let oom_samples: Vec<&&Item<'_>> = samples
            .iter()
            .filter(|s| number(s.fields, "oom_kills") > 0.0)
            .collect();
        if let Some(peak) = mem_peak {
            let oom: f64 = oom_samples
                .iter()
                .map(|s| number(s.fields, "oom_kills"))
                .sum();
            let mut ids = vec![peak.evidence_id.to_owned()];
            ids.extend(
                oom_samples
                    .iter()
                    .take(3)
                    .map(|s| s.evidence_id.to_owned())
                    .filter(|id| *id != peak.evidence_id),
            );
            let used = number(peak.fields, "mem_used_pct");
            facts.push(fact(
                "memory_usage",
                json!({ "host": host, "mem_used_pct": used, "oom_kills": oom }),
                ids,
                true,
                format!("{host} memory peaked at {used}% with {oom} OOM kills"),
            ));
        }
        if let (Some(first), Some(last)) = (history.first(), history.last()) {
            let growths = [
                ("disk", disk_peak(first).0, disk_peak(last).0),
                (
                    "memory",
                    number(first.fields, "mem_used_pct"),
                    number(last.fields, "mem_used_pct"),
                ),
            ];
            for (metric, from, to) in growths {
                if history.len() >= 3 && to > from {
                    facts.push(fact(
                        "resource_growth",
                        json!({ "host": host, "metric": metric, "from_pct": from, "to_pct": to,
                                "rise_pct": ((to - from) * 10.0).round() / 10.0 }),
                        vec![first.evidence_id.to_owned(), last.evidence_id.to_owned()],
                        true,
                        format!(
                            "{host} {metric} use grew from {from}% to {to}% up to the window's end"
                        ),
                    ));
                }
            }
        }
    }
    facts
}

mod deadlock;
mod durations;
mod locks;

#[cfg(test)]
mod tests;
