//! The Fact Adapter's vocabulary and per-tool adapters: a diagnostic tool's records become
//! typed facts (a SQLSTATE error, a wait cycle, a saturated pool, a recent change…), each
//! naming the evidence items it rests on and whether it falls inside the incident window.
//! Derived facts (a wait cycle, opposite lock order, resource growth) are computed here in
//! code, never asked of a model. Each fact kind may fill only some causal roles: a step
//! that tags a fact with a role it cannot play is overreach and the fact gives no support.

use std::collections::{BTreeMap, BTreeSet};

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
const FACT_KINDS: [(&str, &[CausalRole]); 16] = [
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
        "pg_error_log" => items.iter().map(|i| pg_error(i, window)).collect(),
        "pg_lock_waits" => lock_waits(items, window),
        "pg_transactions" => transactions(items, window),
        "pg_slow_queries" => items.iter().map(|i| slow_query(i, window)).collect(),
        "pool_metrics" => pool(items, window),
        "app_log" => items.iter().map(|i| app_log(i, window)).collect(),
        "nginx_access_summary" => items.iter().map(|i| upstream_summary(i, window)).collect(),
        "nginx_error_log" => items.iter().map(|i| nginx_error(i, window)).collect(),
        "recent_changes" => items.iter().map(|i| change(i, window)).collect(),
        "host_metrics" => host(items, window),
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

fn lock_waits(items: &[Item<'_>], window: Window) -> Vec<Fact> {
    let mut facts: Vec<Fact> = items
        .iter()
        .map(|i| {
            let f = i.fields;
            fact(
                "lock_wait",
                json!({
                    "waiting_pid": number(f, "waiting_pid"),
                    "blocking_pid": number(f, "blocking_pid"),
                    "relation": text(f, "relation"),
                    "waiting_s": number(f, "waiting_s"),
                    "blocking_xact_age_s": number(f, "blocking_xact_age_s"),
                }),
                vec![i.evidence_id.to_owned()],
                in_window(i, window),
                format!(
                    "pid {} waits {}s on {} held by pid {}",
                    number(f, "waiting_pid"),
                    number(f, "waiting_s"),
                    text(f, "relation"),
                    number(f, "blocking_pid")
                ),
            )
        })
        .collect();
    // Cycles and blockers are computed separately inside and outside the window, so an
    // old cycle never joins a current one.
    for inside in [true, false] {
        let edges: Vec<&Item<'_>> = items
            .iter()
            .filter(|i| in_window(i, window) == inside)
            .collect();
        // A wait cycle is a fact of one sample: edges seen at the same time. Pooled
        // backends reuse pids, so edges from different samples never join a cycle.
        let mut samples: BTreeMap<Option<i64>, Vec<&Item<'_>>> = BTreeMap::new();
        for edge in &edges {
            samples.entry(edge.ts).or_default().push(edge);
        }
        let mut in_cycle: BTreeSet<i64> = BTreeSet::new();
        for sample in samples.values() {
            let mut graph: BTreeMap<i64, BTreeSet<i64>> = BTreeMap::new();
            for edge in sample {
                let from = number(edge.fields, "waiting_pid") as i64;
                let to = number(edge.fields, "blocking_pid") as i64;
                graph.entry(from).or_default().insert(to);
            }
            for cycle in find_cycles(&graph) {
                let members: BTreeSet<i64> = cycle.iter().copied().collect();
                let ids: Vec<String> = sample
                    .iter()
                    .filter(|e| {
                        members.contains(&(number(e.fields, "waiting_pid") as i64))
                            && members.contains(&(number(e.fields, "blocking_pid") as i64))
                    })
                    .map(|e| e.evidence_id.to_owned())
                    .collect();
                let pids: Vec<String> = cycle.iter().map(i64::to_string).collect();
                facts.push(fact(
                    "wait_cycle",
                    json!({ "length": cycle.len(), "pids": pids.join(",") }),
                    ids,
                    inside,
                    format!(
                        "wait cycle of {} sessions: pids {}",
                        cycle.len(),
                        pids.join(" → ")
                    ),
                ));
                in_cycle.extend(members);
            }
        }
        let mut blockers: BTreeMap<i64, Vec<&Item<'_>>> = BTreeMap::new();
        for edge in &edges {
            let to = number(edge.fields, "blocking_pid") as i64;
            if !in_cycle.contains(&to) {
                blockers.entry(to).or_default().push(edge);
            }
        }
        for (pid, waits) in blockers {
            let age = waits
                .iter()
                .map(|e| number(e.fields, "blocking_xact_age_s"))
                .fold(0.0, f64::max);
            let waiting = waits
                .iter()
                .map(|e| number(e.fields, "waiting_s"))
                .fold(0.0, f64::max);
            let waiters: BTreeSet<i64> = waits
                .iter()
                .map(|e| number(e.fields, "waiting_pid") as i64)
                .collect();
            facts.push(fact(
                "long_blocker",
                json!({
                    "pid": pid,
                    "waiters": waiters.len(),
                    "blocking_xact_age_s": age,
                    "waiting_s": waiting,
                    "blocking_query": text(waits[0].fields, "blocking_query"),
                }),
                waits.iter().map(|e| e.evidence_id.to_owned()).collect(),
                inside,
                format!(
                    "pid {pid} blocks {} sessions; its transaction is {age}s old",
                    waiters.len()
                ),
            ));
        }
    }
    facts
}

/// Simple cycles of a small waits-for graph, each reported once (smallest pid first).
fn find_cycles(graph: &BTreeMap<i64, BTreeSet<i64>>) -> Vec<Vec<i64>> {
    let mut found: BTreeSet<Vec<i64>> = BTreeSet::new();
    // A bounded search: a dense graph from a bad source cannot make it run away.
    let mut budget: u32 = 100_000;
    for &start in graph.keys() {
        let mut stack = vec![(start, vec![start])];
        while let Some((node, path)) = stack.pop() {
            budget = budget.saturating_sub(1);
            if budget == 0 {
                return found.into_iter().collect();
            }
            if path.len() > 8 {
                continue;
            }
            for &next in graph.get(&node).into_iter().flatten() {
                if next == start {
                    let min_at = path
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, p)| **p)
                        .map(|(i, _)| i)
                        .unwrap_or(0);
                    let mut cycle = path[min_at..].to_vec();
                    cycle.extend_from_slice(&path[..min_at]);
                    found.insert(cycle);
                } else if !path.contains(&next) && next > start {
                    let mut longer = path.clone();
                    longer.push(next);
                    stack.push((next, longer));
                }
            }
        }
    }
    found.into_iter().collect()
}

fn transactions(items: &[Item<'_>], window: Window) -> Vec<Fact> {
    struct Tx<'a> {
        item: &'a Item<'a>,
        order: Vec<String>,
    }
    let mut txs = Vec::new();
    let mut facts = Vec::new();
    for item in items {
        let f = item.fields;
        let statements = f
            .get("statements")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let times: Vec<i64> = statements
            .iter()
            .filter_map(|s| s.get("ts").and_then(Value::as_str))
            .filter_map(crate::timefmt::parse_rfc3339)
            .collect();
        let first = times.iter().copied().min();
        let last = times
            .iter()
            .copied()
            .chain(item.ts)
            .max()
            .unwrap_or_default();
        let duration = first.map(|first| last - first).unwrap_or(0);
        let mut order: Vec<String> = Vec::new();
        for statement in &statements {
            let relation = text(statement, "relation");
            let mode = text(statement, "lock_mode");
            if !relation.is_empty() && !mode.is_empty() && !order.contains(&relation) {
                order.push(relation);
            }
        }
        facts.push(fact(
            "transaction",
            json!({
                "pid": number(f, "pid"),
                "service": text(f, "service"),
                "duration_s": duration,
                "statements": statements.len(),
                "lock_order": order.join(" → "),
            }),
            vec![item.evidence_id.to_owned()],
            in_window(item, window),
            format!(
                "pid {} ({}) transaction open {duration}s, locks {}",
                number(f, "pid"),
                text(f, "service"),
                if order.is_empty() {
                    "nothing".to_owned()
                } else {
                    order.join(" → ")
                }
            ),
        ));
        txs.push(Tx { item, order });
    }
    for (i, a) in txs.iter().enumerate() {
        for b in &txs[i + 1..] {
            if let Some((r1, r2)) = opposite_pair(&a.order, &b.order) {
                let inside = in_window(a.item, window) && in_window(b.item, window);
                let pids = format!(
                    "{},{}",
                    number(a.item.fields, "pid"),
                    number(b.item.fields, "pid")
                );
                facts.push(fact(
                    "opposite_lock_order",
                    json!({ "pids": pids, "relations": format!("{r1},{r2}") }),
                    vec![a.item.evidence_id.to_owned(), b.item.evidence_id.to_owned()],
                    inside,
                    format!("pids {pids} lock {r1} and {r2} in opposite order",),
                ));
            }
        }
    }
    facts
}

/// Two relations `a` locks in one order and `b` in the other.
fn opposite_pair(a: &[String], b: &[String]) -> Option<(String, String)> {
    for (i, r1) in a.iter().enumerate() {
        for r2 in &a[i + 1..] {
            let p1 = b.iter().position(|r| r == r1);
            let p2 = b.iter().position(|r| r == r2);
            if let (Some(p1), Some(p2)) = (p1, p2) {
                if p2 < p1 {
                    return Some((r1.clone(), r2.clone()));
                }
            }
        }
    }
    None
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
    fact(
        "app_log",
        json!({
            "service": text(f, "service"),
            "level": text(f, "level"),
            "message": message,
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

fn host(items: &[Item<'_>], window: Window) -> Vec<Fact> {
    let mut by_host: BTreeMap<String, Vec<&Item<'_>>> = BTreeMap::new();
    for item in items.iter().filter(|i| in_window(i, window)) {
        by_host
            .entry(text(item.fields, "host"))
            .or_default()
            .push(item);
    }
    let mut facts = Vec::new();
    for (host, mut samples) in by_host {
        samples.sort_by_key(|s| s.ts);
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
        if let (Some(first), Some(last)) = (samples.first(), samples.last()) {
            let growths = [
                ("disk", disk_peak(first).0, disk_peak(last).0),
                (
                    "memory",
                    number(first.fields, "mem_used_pct"),
                    number(last.fields, "mem_used_pct"),
                ),
            ];
            for (metric, from, to) in growths {
                if samples.len() >= 3 && to > from {
                    facts.push(fact(
                        "resource_growth",
                        json!({ "host": host, "metric": metric, "from_pct": from, "to_pct": to,
                                "rise_pct": ((to - from) * 10.0).round() / 10.0 }),
                        vec![first.evidence_id.to_owned(), last.evidence_id.to_owned()],
                        true,
                        format!("{host} {metric} use grew from {from}% to {to}% in the window"),
                    ));
                }
            }
        }
    }
    facts
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Window = Window {
        start: 1000,
        end: 2000,
    };

    fn items(records: &[(i64, Value)]) -> Vec<(String, Option<i64>, Value)> {
        records
            .iter()
            .enumerate()
            .map(|(n, (ts, v))| (format!("ev-{}", n + 1), Some(*ts), v.clone()))
            .collect()
    }

    fn run(tool: &str, records: &[(i64, Value)]) -> Vec<Fact> {
        let owned = items(records);
        let view: Vec<Item<'_>> = owned
            .iter()
            .map(|(id, ts, f)| Item {
                evidence_id: id,
                ts: *ts,
                fields: f,
            })
            .collect();
        adapt(tool, &view, WINDOW)
    }

    #[test]
    fn a_two_session_wait_cycle_is_found_and_an_old_one_kept_apart() {
        let edge = |w: i64, b: i64| {
            json!({"waiting_pid": w, "blocking_pid": b, "relation": "orders",
                   "waiting_s": 1, "blocking_xact_age_s": 2})
        };
        let facts = run(
            "pg_lock_waits",
            &[
                (1500, edge(11, 12)),
                (1500, edge(12, 11)),
                (10, edge(5, 6)),
                (10, edge(6, 5)),
                // Pids reused in another sample never close a cycle with these.
                (1600, edge(21, 22)),
                (1700, edge(22, 21)),
            ],
        );
        let cycles: Vec<&Fact> = facts.iter().filter(|f| f.kind == "wait_cycle").collect();
        assert_eq!(cycles.len(), 2);
        let current = cycles.iter().find(|f| f.in_window).expect("current cycle");
        assert_eq!(current.attrs["length"], 2);
        assert_eq!(current.evidence_ids, vec!["ev-1", "ev-2"]);
        let blocked_by = |pid: i64| {
            facts
                .iter()
                .any(|f| f.kind == "long_blocker" && f.attrs["pid"] == pid)
        };
        assert!(
            !blocked_by(11) && !blocked_by(12),
            "cycle members are not blockers"
        );
        assert!(
            blocked_by(21) && blocked_by(22),
            "waits across samples are plain waits"
        );
    }

    #[test]
    fn a_long_blocker_without_a_cycle_is_a_blocker() {
        let edge = |w: i64| {
            json!({"waiting_pid": w, "blocking_pid": 7, "relation": "accounts",
                   "waiting_s": 30, "blocking_xact_age_s": 1900})
        };
        let facts = run(
            "pg_lock_waits",
            &[(1500, edge(1)), (1510, edge(2)), (1520, edge(3))],
        );
        let blocker = facts
            .iter()
            .find(|f| f.kind == "long_blocker")
            .expect("blocker");
        assert_eq!(blocker.attrs["waiters"], 3);
        assert_eq!(blocker.attrs["blocking_xact_age_s"], 1900.0);
    }

    #[test]
    fn opposite_lock_order_between_two_transactions() {
        let tx = |pid: i64, first: &str, second: &str| {
            json!({"pid": pid, "service": "order-service", "xact_id": pid, "statements": [
                {"ts": "1970-01-01T00:25:00Z", "sql": "update", "relation": first, "lock_mode": "RowExclusiveLock"},
                {"ts": "1970-01-01T00:25:01Z", "sql": "update", "relation": second, "lock_mode": "RowExclusiveLock"}]})
        };
        let facts = run(
            "pg_transactions",
            &[
                (1501, tx(1, "orders", "inventory")),
                (1502, tx(2, "inventory", "orders")),
            ],
        );
        let opposite = facts
            .iter()
            .find(|f| f.kind == "opposite_lock_order")
            .expect("opposite order");
        assert!(opposite.in_window);
        assert_eq!(opposite.attrs["relations"], "orders,inventory");
    }

    #[test]
    fn pools_are_saturated_or_healthy_per_service() {
        let sample = |service: &str, active: i64, waiting: i64, timeouts: i64| {
            json!({"service": service, "active": active, "idle": 0, "max": 20,
                   "waiting": waiting, "acquire_timeouts": timeouts})
        };
        let facts = run(
            "pool_metrics",
            &[
                (1100, sample("a", 20, 5, 1)),
                (1200, sample("a", 20, 9, 7)),
                (1100, sample("b", 3, 0, 0)),
                (10, sample("b", 20, 9, 0)),
            ],
        );
        let saturated = facts
            .iter()
            .find(|f| f.kind == "pool_saturated")
            .expect("a");
        assert_eq!(saturated.attrs["acquire_timeouts_rise"], 6.0);
        assert!(facts
            .iter()
            .any(|f| f.kind == "pool_healthy" && f.attrs["service"] == "b"));
    }

    #[test]
    fn changes_count_as_recent_within_the_lookback() {
        let change =
            |id: &str| json!({"id": id, "kind": "migration", "service": "s", "summary": "x"});
        let facts = run(
            "recent_changes",
            &[(1000 - 3600, change("c1")), (1000 - 3 * 3600, change("c2"))],
        );
        assert!(facts[0].in_window);
        assert!(!facts[1].in_window);
        assert_eq!(trigger_kind_of_change("migration"), "deploy");
        assert_eq!(trigger_kind_of_change("scale"), "config_change");
    }

    #[test]
    fn host_samples_give_peaks_and_growth() {
        let sample = |used: f64, mem: f64, oom: i64| {
            json!({"host": "db-01", "disks": [{"mount": "/data", "used_pct": used, "free_bytes": 10}],
                   "mem_used_pct": mem, "oom_kills": oom, "load1": 1.0})
        };
        let facts = run(
            "host_metrics",
            &[
                (1100, sample(80.0, 50.0, 0)),
                (1200, sample(90.0, 60.0, 0)),
                (1300, sample(99.5, 97.0, 2)),
            ],
        );
        let disk = facts.iter().find(|f| f.kind == "disk_usage").expect("disk");
        assert_eq!(disk.attrs["used_pct"], 99.5);
        let memory = facts
            .iter()
            .find(|f| f.kind == "memory_usage")
            .expect("memory");
        assert_eq!(memory.attrs["oom_kills"], 2.0);
        assert!(facts
            .iter()
            .any(|f| f.kind == "resource_growth" && f.attrs["metric"] == "disk"));
    }

    #[test]
    fn roles_are_bounded_per_fact_kind() {
        assert!(role_allowed("change", CausalRole::Trigger));
        assert!(!role_allowed("change", CausalRole::Mechanism));
        assert!(role_allowed("pool_healthy", CausalRole::Context));
        assert!(!role_allowed("pool_healthy", CausalRole::Mechanism));
    }
}
