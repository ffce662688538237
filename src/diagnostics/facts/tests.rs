//! Unit tests of `facts`.
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
    let change = |id: &str| json!({"id": id, "kind": "migration", "service": "s", "summary": "x"});
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
fn growth_is_measured_from_the_lookback_and_levels_from_the_window() {
    let sample = |used: f64| {
        json!({"host": "db-02", "disks": [{"mount": "/pg", "used_pct": used, "free_bytes": 1}],
               "mem_used_pct": 40.0, "oom_kills": 0})
    };
    let facts = run(
        "host_metrics",
        &[
            (100, sample(90.0)),
            (500, sample(93.0)),
            (1500, sample(99.9)),
            // A host with no sample in the window gives no facts at all.
            (
                200,
                json!({"host": "old-01", "disks": [], "mem_used_pct": 99.0}),
            ),
        ],
    );
    let disk = facts.iter().find(|f| f.kind == "disk_usage").expect("disk");
    assert_eq!(disk.evidence_ids, vec!["ev-3"]);
    let growth = facts
        .iter()
        .find(|f| f.kind == "resource_growth" && f.attrs["metric"] == "disk")
        .expect("growth over the lookback");
    assert_eq!(growth.attrs["rise_pct"], 9.9);
    assert!(facts.iter().all(|f| f.attrs["host"] == "db-02"));
}

#[test]
fn each_upstream_carries_its_share_of_the_gateways_5xx() {
    let summary = |name: &str, errors: i64| {
        json!({"upstream": name, "requests": 40, "errors_5xx": errors,
               "status": {"502": errors}, "first_ts": 1100, "last_ts": 1900})
    };
    let facts = run(
        "nginx_access_summary",
        &[
            (1100, summary("checkout", 17)),
            (1100, summary("reviews", 3)),
            (1100, summary("search", 0)),
        ],
    );
    let share = |name: &str| {
        facts
            .iter()
            .find(|f| f.attrs["upstream"] == name)
            .map(|f| f.attrs["share_5xx"].clone())
    };
    assert_eq!(share("checkout"), Some(json!(0.85)));
    assert_eq!(share("reviews"), Some(json!(0.15)));
    assert_eq!(share("search"), Some(json!(0.0)));
}

#[test]
fn app_log_lines_carry_the_longest_duration_they_state() {
    let facts = run(
        "app_log",
        &[
            (
                1500,
                json!({"service": "claims", "message": "done status=200 duration_ms=3904"}),
            ),
            (
                1500,
                json!({"service": "claims", "message": "ok", "duration_ms": 12}),
            ),
            (
                1500,
                json!({"service": "claims", "message": "started on port 8080"}),
            ),
        ],
    );
    let durations: Vec<Value> = facts
        .iter()
        .map(|f| f.attrs["duration_ms"].clone())
        .collect();
    assert_eq!(durations, vec![json!(3904.0), json!(12.0), json!(0.0)]);
}

#[test]
fn roles_are_bounded_per_fact_kind() {
    assert!(role_allowed("change", CausalRole::Trigger));
    assert!(!role_allowed("change", CausalRole::Mechanism));
    assert!(role_allowed("pool_healthy", CausalRole::Context));
    assert!(!role_allowed("pool_healthy", CausalRole::Mechanism));
}

#[test]
fn connection_use_peaks_per_database_host_inside_the_window() {
    let sample = |host: &str, used: f64| {
        json!({"host": host, "database": "orders", "server_backends": 21, "max_connections": 25,
               "connections_used_pct": used})
    };
    let facts = run(
        "pg_database_stats",
        &[
            (500, sample("db-1", 100.0)),
            (1100, sample("db-1", 60.0)),
            (1500, sample("db-1", 95.5)),
            (1600, sample("db-2", 10.0)),
        ],
    );
    assert_eq!(facts.len(), 2, "{facts:?}");
    let db1 = facts
        .iter()
        .find(|f| f.attrs["host"] == "db-1")
        .expect("db-1");
    // The sample before the window is not this incident's.
    assert_eq!(db1.attrs["used_pct"], 95.5);
    assert_eq!(db1.evidence_ids, ["ev-3"]);
    assert_eq!(db1.attrs["max_connections"], 25.0);
}
