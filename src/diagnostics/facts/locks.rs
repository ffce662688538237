//! Lock facts: wait cycles (per lock-wait sample) and long-running blockers from the
//! waits-for graph, and transactions with the order they lock relations in (opposite lock
//! order between two transactions is a deadlock's trigger).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use super::{fact, in_window, number, text, Fact, Item, Window};

pub(super) fn lock_waits(items: &[Item<'_>], window: Window) -> Vec<Fact> {
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
            // A live sample says what the blocker is doing: idle in a transaction it
            // left open, it does no work while others wait for its locks.
            let idle = waits
                .iter()
                .any(|e| text(e.fields, "blocking_state").starts_with("idle in transaction"));
            facts.push(fact(
                "long_blocker",
                json!({
                    "pid": pid,
                    "waiters": waiters.len(),
                    "blocking_xact_age_s": age,
                    "waiting_s": waiting,
                    "blocking_query": text(waits[0].fields, "blocking_query"),
                    "blocker_idle_in_transaction": idle,
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

pub(super) fn transactions(items: &[Item<'_>], window: Window) -> Vec<Fact> {
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
