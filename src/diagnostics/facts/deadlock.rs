//! PostgreSQL's deadlock report read as facts. When the server breaks a deadlock it logs
//! SQLSTATE 40P01 with a DETAIL naming every process of the cycle ("Process A waits for
//! ShareLock on transaction X; blocked by process B."). A deadlock lasts about a second
//! (`deadlock_timeout`), so a later sample of `pg_locks` rarely still shows it: the report
//! is the lasting record of the wait cycle, and of the lock order that caused it — each
//! process holds what the other waits for, so they took their locks in opposite orders.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::{json, Value};

use super::{fact, Fact};

/// "Process 4242 waits for … blocked by process 4243", also in PostgreSQL's zh_CN wording.
static EDGE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:Process|进程)\s*(\d+)[^.。;；]{0,120}?[;；][^.。]{0,40}?(?:blocked by process|由进程)\s*(\d+)")
        .expect("a valid pattern")
});

/// "Process 4242: UPDATE accounts …": the statement each process was running.
static STATEMENT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?im)^\s*(?:Process|进程)\s*(\d+)\s*[:：]\s*(.+)$").expect("a valid pattern")
});

static RELATION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:update|into|from|delete\s+from)\s+([\w.]+)").expect("a valid pattern")
});

/// The wait cycle and the lock-order inversion a 40P01 error's report shows.
pub fn from_report(error: &Fact) -> Vec<Fact> {
    let sqlstate = error.attrs.get("sqlstate").and_then(Value::as_str);
    if sqlstate != Some("40P01") {
        return Vec::new();
    }
    let text = error
        .attrs
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut waits: BTreeMap<i64, i64> = BTreeMap::new();
    for caps in EDGE.captures_iter(text) {
        if let (Some(from), Some(to)) = (
            caps.get(1).and_then(|m| m.as_str().parse().ok()),
            caps.get(2).and_then(|m| m.as_str().parse().ok()),
        ) {
            waits.insert(from, to);
        }
    }
    let Some(cycle) = cycle_of(&waits) else {
        return Vec::new();
    };
    let relations: Vec<String> = cycle
        .iter()
        .filter_map(|pid| {
            STATEMENT
                .captures_iter(text)
                .find(|c| c.get(1).is_some_and(|m| m.as_str() == pid.to_string()))
                .and_then(|c| RELATION.captures(c.get(2)?.as_str()))
                .and_then(|c| c.get(1))
                .map(|m| m.as_str().to_owned())
        })
        .collect();
    let pids: Vec<String> = cycle.iter().map(i64::to_string).collect();
    let ids = error.evidence_ids.clone();
    vec![
        fact(
            "wait_cycle",
            json!({ "length": cycle.len(), "pids": pids.join(","), "from": "deadlock_report" }),
            ids.clone(),
            error.in_window,
            format!(
                "the deadlock report shows a wait cycle of {} sessions: pids {}",
                cycle.len(),
                pids.join(" → ")
            ),
        ),
        fact(
            "opposite_lock_order",
            json!({ "pids": pids.join(","), "relations": relations.join(","),
                    "from": "deadlock_report" }),
            ids,
            error.in_window,
            format!(
                "pids {} each hold a lock the other waits for: they locked {} in opposite order",
                pids.join(" and "),
                if relations.is_empty() {
                    "the same rows".to_owned()
                } else {
                    relations.join(" and ")
                }
            ),
        ),
    ]
}

/// The cycle through the smallest pid, when following the waits returns to it.
fn cycle_of(waits: &BTreeMap<i64, i64>) -> Option<Vec<i64>> {
    let (&start, _) = waits.iter().next()?;
    let mut cycle = vec![start];
    let mut at = start;
    for _ in 0..waits.len() {
        let next = *waits.get(&at)?;
        if next == start {
            return (cycle.len() >= 2).then_some(cycle);
        }
        if cycle.contains(&next) {
            return None;
        }
        cycle.push(next);
        at = next;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(sqlstate: &str, message: &str) -> Fact {
        fact(
            "pg_error",
            json!({ "sqlstate": sqlstate, "message": message }),
            vec!["ev-1".to_owned()],
            true,
            String::new(),
        )
    }

    #[test]
    fn a_deadlock_report_gives_its_cycle_and_lock_order() {
        let report = "deadlock detected Process 4242 waits for ShareLock on transaction 77; blocked by process 4243.\nProcess 4243 waits for ShareLock on transaction 76; blocked by process 4242.\nProcess 4242: UPDATE accounts SET balance = balance - 1 WHERE id = 2\nProcess 4243: UPDATE ledger SET n = 1 WHERE id = 1";
        let facts = from_report(&error("40P01", report));
        let kinds: Vec<&str> = facts.iter().map(|f| f.kind.as_str()).collect();
        assert_eq!(kinds, ["wait_cycle", "opposite_lock_order"]);
        assert_eq!(facts[0].attrs["length"], 2);
        assert_eq!(facts[0].attrs["pids"], "4242,4243");
        assert_eq!(facts[1].attrs["relations"], "accounts,ledger");
        assert_eq!(facts[0].evidence_ids, ["ev-1"]);
    }

    #[test]
    fn the_chinese_wording_is_read_and_other_errors_give_nothing() {
        let report = "检测到死锁 进程71001等待在事务 5501上的ShareLock; 由进程71002阻塞.\n进程71002等待在事务 5500上的ShareLock; 由进程71001阻塞.";
        assert_eq!(from_report(&error("40P01", report)).len(), 2);
        assert!(from_report(&error("57014", report)).is_empty());
        // One waiting process is no cycle.
        let half = "deadlock detected Process 1 waits for ShareLock on transaction 7; blocked by process 2.";
        assert!(from_report(&error("40P01", half)).is_empty());
    }
}
