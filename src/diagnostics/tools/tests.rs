//! Unit tests of the diagnostic tools over a small pack written to a temporary folder.

use std::collections::BTreeSet;
use std::fs;

use serde_json::json;

use super::*;
use crate::diagnostics::source::{PackSource, SourceError};
use crate::timefmt::parse_rfc3339;

const PG_LOG: &str = r#"{"ts":"2026-03-14T08:00:00Z","host":"db-1","pid":100,"sqlstate":"57014","severity":"ERROR","message":"canceling statement due to statement timeout"}
{"ts":"2026-03-14T09:10:00Z","host":"db-1","pid":201,"sqlstate":"40P01","severity":"ERROR","message":"deadlock detected","detail":"Process 201 waits for ShareLock on transaction 9; blocked by process 202."}
{"ts":"2026-03-14T09:10:30Z","host":"db-2","pid":300,"sqlstate":"00000","severity":"LOG","message":"checkpoint starting: time"}
{"ts":"2026-03-14T09:11:00Z","host":"db-1","pid":202,"sqlstate":"40P01","severity":"ERROR","message":"Deadlock Detected"}
"#;

const LOCK_WAITS: &str = r#"{"ts":"2026-03-14T09:09:58Z","waiting_pid":201,"blocking_pid":202,"relation":"orders","lock_mode":"ShareLock","waiting_query":"UPDATE orders SET status='paid' WHERE id=7","blocking_query":"UPDATE inventory SET qty=qty-1 WHERE sku='A'","blocking_xact_age_s":3,"waiting_s":2}
{"ts":"2026-03-14T09:09:59Z","waiting_pid":202,"blocking_pid":201,"relation":"inventory","lock_mode":"ShareLock","waiting_query":"UPDATE inventory SET qty=qty-1 WHERE sku='A'","blocking_query":"UPDATE orders SET status='paid' WHERE id=7","blocking_xact_age_s":4,"waiting_s":1}
"#;

const TRANSACTIONS: &str = r#"{"ts":"2026-03-14T09:09:55Z","pid":201,"service":"order-service","xact_id":9,"statements":[{"ts":"2026-03-14T09:09:55Z","sql":"UPDATE inventory SET qty=qty-1 WHERE sku='A'","relation":"inventory","lock_mode":"RowExclusiveLock"}]}
{"ts":"2026-03-14T09:09:56Z","pid":202,"service":"order-service","xact_id":10,"statements":[]}
{"ts":"2026-03-14T09:09:57Z","pid":203,"service":"billing","xact_id":11,"statements":[]}
"#;

const SLOW_QUERIES: &str = r#"{"ts":"2026-03-14T09:05:00Z","service":"order-service","query":"SELECT 1","duration_ms":120,"rows":1,"lock_wait_ms":0}
{"ts":"2026-03-14T09:10:00Z","service":"order-service","query":"UPDATE orders","duration_ms":5000.5,"rows":1,"lock_wait_ms":4900}
{"ts":"2026-03-14T09:11:00Z","service":"billing","query":"SELECT * FROM invoices","duration_ms":30000,"rows":90000,"lock_wait_ms":0}
"#;

const POOL_METRICS: &str = r#"{"ts":"2026-03-14T09:10:00Z","service":"order-service","active":20,"idle":0,"max":20,"waiting":35,"acquire_timeouts":12}
{"ts":"2026-03-14T09:10:00Z","service":"billing","active":2,"idle":8,"max":10,"waiting":0,"acquire_timeouts":0}
"#;

const APP_LOG: &str = r#"{"ts":"2026-03-14T09:10:05Z","service":"order-service","level":"ERROR","message":"PSQLException: ERROR: deadlock detected","trace_id":"t-1"}
{"ts":"2026-03-14T09:10:01Z","service":"order-service","level":"INFO","message":"order 7 accepted"}
{"ts":"2026-03-14T09:10:09Z","service":"billing","level":"error","message":"invoice job failed: timeout"}
"#;

const NGINX_ACCESS: &str = r#"{"ts":"2026-03-14T09:10:00Z","upstream":"10.0.5.21:8080","status":200,"method":"GET","path":"/orders/1","request_time_s":0.1,"upstream_response_time_s":0.09}
{"ts":"2026-03-14T09:10:01Z","upstream":"10.0.5.21:8080","status":504,"method":"POST","path":"/orders","request_time_s":60.0,"upstream_response_time_s":60.0}
{"ts":"2026-03-14T09:10:02Z","upstream":"10.0.5.21:8080","status":502,"method":"POST","path":"/orders","request_time_s":0.2,"upstream_response_time_s":null}
{"ts":"2026-03-14T09:10:03Z","upstream":"10.0.5.30:8080","status":200,"method":"GET","path":"/catalog","request_time_s":0.05,"upstream_response_time_s":0.04}
{"ts":"2026-03-14T07:00:00Z","upstream":"10.0.5.30:8080","status":200,"method":"GET","path":"/catalog","request_time_s":0.07,"upstream_response_time_s":0.06}
"#;

const NGINX_ERROR: &str = "2026/03/14 09:10:01 [error] 2211#2211: *8812 upstream timed out (110: Connection timed out) while reading response header from upstream, client: 10.0.3.7, server: api.example.internal, request: \"POST /orders HTTP/1.1\", upstream: \"http://10.0.5.21:8080/orders\", host: \"api.example.internal\"
2026/03/14 09:10:02 [error] 2211#2211: *8813 connect() failed (111: Connection refused) while connecting to upstream, client: 10.0.3.8, server: api.example.internal, request: \"GET /catalog HTTP/1.1\", upstream: \"http://10.0.5.30:8080/catalog\", host: \"api.example.internal\"
2026/03/14 09:10:03 [warn] 2211#2211: an upstream response is buffered to a temporary file
";

const CHANGES: &str = r#"{"ts":"2026-03-14T08:55:00Z","id":"chg-1","kind":"deploy","service":"order-service","summary":"order-service 2.4.0","details":"reorders inventory and orders updates"}
{"ts":"2026-03-14T08:30:00Z","id":"chg-2","kind":"config","service":"billing","summary":"pool max 10","details":""}
"#;

const HOST_METRICS: &str = r#"{"ts":"2026-03-14T09:10:00Z","host":"db-1","disks":[{"mount":"/","used_pct":41.0,"free_bytes":1000}],"mem_used_pct":60.0,"oom_kills":0,"load1":3.1}
{"ts":"2026-03-14T09:10:00Z","host":"db-2","disks":[],"mem_used_pct":30.0,"oom_kills":0,"load1":0.2}
"#;
const DB_STATS: &str = r#"{"ts":"2026-03-14T09:10:00Z","host":"db-1","database":"orders","backends":40,"server_backends":97,"max_connections":100,"reserved_connections":3,"connections_used_pct":100.0,"deadlocks":2,"xact_commit":900,"xact_rollback":12,"temp_bytes":0,"stats_reset":""}
{"ts":"2026-03-14T09:11:00Z","host":"db-2","database":"billing","backends":3,"server_backends":5,"max_connections":100,"reserved_connections":3,"connections_used_pct":5.2,"deadlocks":0,"xact_commit":50,"xact_rollback":0,"temp_bytes":0,"stats_reset":""}
"#;

fn write_pack(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    fs::create_dir(dir.path().join("sources")).expect("sources dir");
    for (name, text) in files {
        fs::write(dir.path().join("sources").join(name), text).expect("source file");
    }
    dir
}

fn full_pack() -> tempfile::TempDir {
    write_pack(&[
        ("pg_log.jsonl", PG_LOG),
        ("lock_waits.jsonl", LOCK_WAITS),
        ("transactions.jsonl", TRANSACTIONS),
        ("slow_queries.jsonl", SLOW_QUERIES),
        ("pool_metrics.jsonl", POOL_METRICS),
        ("app_log.jsonl", APP_LOG),
        ("nginx_access.jsonl", NGINX_ACCESS),
        ("nginx_error.log", NGINX_ERROR),
        ("changes.jsonl", CHANGES),
        ("host_metrics.jsonl", HOST_METRICS),
        ("db_stats.jsonl", DB_STATS),
    ])
}

fn run(source: &PackSource, tool: &str, args: Value) -> ToolOutput {
    run_tool(source, tool, &args).unwrap_or_else(|err| panic!("{tool} {args}: {err}"))
}

/// The values of one field of the items, as JSON.
fn column(output: &ToolOutput, field: &str) -> Vec<Value> {
    output
        .items
        .iter()
        .map(|item| item.fields.get(field).cloned().unwrap_or(Value::Null))
        .collect()
}

fn invalid(source: &PackSource, tool: &str, args: Value) -> String {
    match run_tool(source, tool, &args) {
        Err(ToolError::InvalidArguments(message)) => message,
        other => panic!("{tool} {args}: expected invalid arguments, got {other:?}"),
    }
}

fn time(text: &str) -> i64 {
    parse_rfc3339(text).expect("test time")
}

#[test]
fn the_specs_are_eleven_closed_bounded_schemas() {
    let specs = tool_specs();
    assert_eq!(specs.len(), 11);
    let names: BTreeSet<_> = specs.iter().map(|spec| spec.name).collect();
    assert_eq!(names.len(), 11);
    let sources: BTreeSet<_> = specs.iter().map(|spec| spec.source).collect();
    assert_eq!(sources.len(), 11, "one tool per source");
    for spec in specs {
        assert!(!spec.description.is_empty());
        let schema = spec.parameters();
        assert_eq!(schema["type"], "object", "{}", spec.name);
        assert_eq!(schema["additionalProperties"], false, "{}", spec.name);
        let properties = schema["properties"].as_object().expect("properties");
        let mut listed: Vec<_> = properties.keys().map(String::as_str).collect();
        listed.sort_unstable();
        let mut expected = spec.argument_names();
        expected.sort_unstable();
        assert_eq!(listed, expected, "{}", spec.name);
        for name in ["start", "end", "limit"] {
            assert!(properties.contains_key(name), "{}: {name}", spec.name);
        }
        assert_eq!(properties["limit"]["maximum"], 200);
        assert_eq!(tool_spec(spec.name), Some(spec));
    }
    let own = |tool: &str| {
        let spec = tool_spec(tool).expect("tool");
        let mut names = spec.argument_names();
        names.retain(|name| !["start", "end", "limit"].contains(name));
        names
    };
    assert_eq!(
        own("pg_error_log"),
        ["host", "sqlstate", "severity", "contains"]
    );
    assert_eq!(own("pg_lock_waits"), ["relation"]);
    assert_eq!(own("pg_transactions"), ["service", "pids"]);
    assert_eq!(own("pg_slow_queries"), ["service", "min_duration_ms"]);
    assert_eq!(own("pool_metrics"), ["service"]);
    assert_eq!(own("app_log"), ["service", "level", "contains"]);
    assert_eq!(own("nginx_access_summary"), ["upstream"]);
    assert_eq!(own("nginx_error_log"), ["level", "contains", "upstream"]);
    assert_eq!(own("recent_changes"), ["service", "kind"]);
    assert_eq!(own("host_metrics"), ["host"]);
    assert_eq!(own("pg_database_stats"), ["host"]);
    let pids = &tool_spec("pg_transactions").expect("tool").parameters()["properties"]["pids"];
    assert_eq!(pids["maxItems"], 20);
}

#[test]
fn pg_error_log_filters_by_host_sqlstate_severity_and_text() {
    let dir = full_pack();
    let source = PackSource::new(dir.path());
    let all = run(&source, "pg_error_log", json!({}));
    assert_eq!(
        (all.status, all.matched, all.truncated),
        (ToolStatus::Ok, 4, false)
    );
    assert_eq!(all.source, "pg_log");
    assert_eq!(all.tool, "pg_error_log");
    let deadlocks = run(
        &source,
        "pg_error_log",
        json!({"host": "db-1", "sqlstate": "40p01", "severity": "error", "contains": "DEADLOCK"}),
    );
    assert_eq!(column(&deadlocks, "pid"), [json!(201), json!(202)]);
    assert_eq!(deadlocks.items[0].ts, Some(time("2026-03-14T09:10:00Z")));
    assert_eq!(deadlocks.items[0].raw, PG_LOG.lines().nth(1).expect("line"));
    let none = run(&source, "pg_error_log", json!({"host": "DB-1"}));
    assert_eq!(none.matched, 0, "host is an exact match");
}

#[test]
fn lock_waits_transactions_and_slow_queries_filter() {
    let dir = full_pack();
    let source = PackSource::new(dir.path());
    let waits = run(&source, "pg_lock_waits", json!({"relation": "orders"}));
    assert_eq!(column(&waits, "blocking_pid"), [json!(202)]);

    let transactions = run(&source, "pg_transactions", json!({"pids": [202, 203]}));
    assert_eq!(column(&transactions, "pid"), [json!(202), json!(203)]);
    let by_service = run(
        &source,
        "pg_transactions",
        json!({"service": "order-service", "pids": [201, 203]}),
    );
    assert_eq!(column(&by_service, "pid"), [json!(201)]);

    let slow = run(&source, "pg_slow_queries", json!({"min_duration_ms": 5000}));
    assert_eq!(column(&slow, "duration_ms"), [json!(5000.5), json!(30000)]);
    let slow_orders = run(
        &source,
        "pg_slow_queries",
        json!({"service": "order-service", "min_duration_ms": 0}),
    );
    assert_eq!(slow_orders.matched, 2);
}

#[test]
fn pool_app_changes_and_host_tools_filter() {
    let dir = full_pack();
    let source = PackSource::new(dir.path());
    let pool = run(&source, "pool_metrics", json!({"service": "order-service"}));
    assert_eq!(column(&pool, "waiting"), [json!(35)]);

    let app = run(&source, "app_log", json!({}));
    assert_eq!(
        column(&app, "message")[0],
        json!("order 7 accepted"),
        "items are sorted by time"
    );
    let errors = run(&source, "app_log", json!({"level": "ERROR"}));
    assert_eq!(errors.matched, 2, "level ignores case");
    let deadlock = run(
        &source,
        "app_log",
        json!({"service": "order-service", "contains": "Deadlock"}),
    );
    assert_eq!(column(&deadlock, "trace_id"), [json!("t-1")]);

    let changes = run(&source, "recent_changes", json!({}));
    assert_eq!(column(&changes, "id"), [json!("chg-2"), json!("chg-1")]);
    let deploys = run(
        &source,
        "recent_changes",
        json!({"kind": "deploy", "service": "order-service"}),
    );
    assert_eq!(column(&deploys, "id"), [json!("chg-1")]);

    let host = run(&source, "host_metrics", json!({"host": "db-2"}));
    assert_eq!(column(&host, "load1"), [json!(0.2)]);
}

#[test]
fn nginx_error_log_filters_parsed_lines() {
    let dir = full_pack();
    let source = PackSource::new(dir.path());
    let all = run(&source, "nginx_error_log", json!({}));
    assert_eq!(all.matched, 3);
    assert_eq!(all.items[0].raw, NGINX_ERROR.lines().next().expect("line"));
    assert_eq!(all.items[0].fields["ts"], "2026-03-14T09:10:01Z");
    let errors = run(&source, "nginx_error_log", json!({"level": "error"}));
    assert_eq!(errors.matched, 2);
    let refused = run(
        &source,
        "nginx_error_log",
        json!({"contains": "connection REFUSED"}),
    );
    assert_eq!(column(&refused, "connection"), [json!(8813)]);
    for upstream in ["http://10.0.5.21:8080/orders", "10.0.5.21:8080"] {
        let timed_out = run(&source, "nginx_error_log", json!({"upstream": upstream}));
        assert_eq!(
            column(&timed_out, "connection"),
            [json!(8812)],
            "{upstream}"
        );
    }
    assert!(
        invalid(&source, "nginx_error_log", json!({"level": "fatal"}))
            .contains("`level` must be one of debug, info")
    );
}

#[test]
fn nginx_access_summary_aggregates_per_upstream() {
    let dir = full_pack();
    let source = PackSource::new(dir.path());
    let summary = run(
        &source,
        "nginx_access_summary",
        json!({"start": "2026-03-14T09:00:00Z"}),
    );
    assert_eq!((summary.matched, summary.truncated), (2, false));
    assert_eq!(summary.source, "nginx_access");
    let orders = &summary.items[0];
    assert_eq!(orders.ts, None);
    assert_eq!(orders.raw, orders.fields.to_string());
    assert_eq!(
        orders.fields,
        json!({
            "upstream": "10.0.5.21:8080", "requests": 3,
            "status": {"200": 1, "502": 1, "504": 1}, "errors_5xx": 2,
            "p50_s": 0.2, "p95_s": 60.0, "p99_s": 60.0, "upstream_p95_s": 60.0,
            "first_ts": "2026-03-14T09:10:00Z", "last_ts": "2026-03-14T09:10:02Z"
        })
    );
    assert_eq!(
        summary.items[1].fields["requests"], 1,
        "the 07:00 record is before start"
    );

    let everything = run(
        &source,
        "nginx_access_summary",
        json!({"upstream": "10.0.5.30:8080"}),
    );
    assert_eq!(everything.items.len(), 1);
    assert_eq!(everything.items[0].fields["requests"], 2);
    assert_eq!(everything.items[0].fields["p50_s"], 0.05);
    assert_eq!(
        everything.items[0].fields["first_ts"],
        "2026-03-14T07:00:00Z"
    );

    let limited = run(&source, "nginx_access_summary", json!({"limit": 1}));
    assert_eq!(
        (limited.items.len(), limited.matched, limited.truncated),
        (1, 2, true)
    );
}

#[test]
fn time_ranges_are_inclusive_and_reach_outside_the_window() {
    let dir = full_pack();
    let source = PackSource::new(dir.path());
    let ranged = run(
        &source,
        "pg_error_log",
        json!({"start": "2026-03-14T09:10:00Z", "end": "2026-03-14T10:10:30+01:00"}),
    );
    assert_eq!(column(&ranged, "pid"), [json!(201), json!(300)]);
    let early = run(
        &source,
        "pg_error_log",
        json!({"end": "2026-03-14T08:30:00Z"}),
    );
    assert_eq!(
        column(&early, "pid"),
        [json!(100)],
        "old records are returned when asked for"
    );
    let late = run(
        &source,
        "pg_error_log",
        json!({"start": "2026-03-14T09:10:59.999Z"}),
    );
    assert_eq!(column(&late, "pid"), [json!(202)], "fractions are dropped");
}

#[test]
fn an_absent_source_is_unavailable() {
    let dir = write_pack(&[("app_log.jsonl", APP_LOG)]);
    let source = PackSource::new(dir.path());
    for spec in tool_specs() {
        let output = run(&source, spec.name, json!({}));
        if spec.source == SourceKind::AppLog {
            assert_eq!(output.status, ToolStatus::Ok);
            continue;
        }
        assert_eq!(output.status, ToolStatus::Unavailable, "{}", spec.name);
        assert_eq!(
            (output.items.len(), output.matched, output.truncated),
            (0, 0, false)
        );
        assert_eq!(output.source, spec.source.as_str());
    }
    let serialized = serde_json::to_value(run(&source, "pg_lock_waits", json!({}))).expect("json");
    assert_eq!(serialized["status"], "unavailable");
}

#[test]
fn the_limit_keeps_the_most_recent_records() {
    let lines: String = (0..250)
        .map(|i| {
            format!(
                "{{\"ts\":\"2026-03-14T09:{:02}:{:02}Z\",\"service\":\"s\",\"level\":\"INFO\",\"message\":\"m{i}\"}}\n",
                i / 60,
                i % 60
            )
        })
        .collect();
    let dir = write_pack(&[("app_log.jsonl", &lines)]);
    let source = PackSource::new(dir.path());
    let default = run(&source, "app_log", json!({}));
    assert_eq!(
        (default.items.len(), default.matched, default.truncated),
        (50, 250, true)
    );
    assert_eq!(column(&default, "message")[0], "m200");
    assert_eq!(column(&default, "message")[49], "m249");
    let three = run(&source, "app_log", json!({"limit": 3, "contains": "m1"}));
    assert_eq!(three.matched, 111, "m1, m10–m19, m100–m199");
    assert_eq!(column(&three, "message"), ["m197", "m198", "m199"]);
    let most = run(&source, "app_log", json!({"limit": 200}));
    assert_eq!((most.items.len(), most.truncated), (200, true));
    let exact = run(&source, "app_log", json!({"limit": 3, "contains": "m24"}));
    assert_eq!(
        (exact.items.len(), exact.matched, exact.truncated),
        (3, 11, true)
    );
    let fits = run(&source, "app_log", json!({"limit": 200, "contains": "m24"}));
    assert_eq!(
        (fits.items.len(), fits.matched, fits.truncated),
        (11, 11, false)
    );
}

#[test]
fn raw_text_is_cut_on_a_character_boundary() {
    let message = "数据库连接池耗尽".repeat(400);
    let line = format!(
        "{{\"ts\":\"2026-03-14T09:10:00Z\",\"service\":\"订单服务\",\"level\":\"ERROR\",\"message\":\"{message}\"}}\n"
    );
    let dir = write_pack(&[("app_log.jsonl", &line)]);
    let source = PackSource::new(dir.path());
    let output = run(
        &source,
        "app_log",
        json!({"service": "订单服务", "contains": "连接池"}),
    );
    let raw = &output.items[0].raw;
    assert_eq!(raw.chars().count(), MAX_RAW_CHARS);
    assert!(line.starts_with(raw.as_str()));
    assert!(raw.ends_with(|c: char| "数据库连接池耗尽".contains(c)));
    assert_eq!(
        output.items[0].fields["message"], message,
        "fields keep the whole record"
    );
    assert_eq!(cut_chars("短文本", MAX_RAW_CHARS), "短文本");
    assert_eq!(cut_chars("数据库", 2), "数据");
}

#[test]
fn bad_arguments_are_invalid_with_a_clear_message() {
    let dir = full_pack();
    let source = PackSource::new(dir.path());
    for (tool, args, expected) in [
        (
            "pg_error_log",
            json!({"owner_id": 1}),
            "unknown argument `owner_id` for pg_error_log",
        ),
        (
            "pg_lock_waits",
            json!({"service": "x"}),
            "unknown argument `service` for pg_lock_waits",
        ),
        (
            "app_log",
            json!({"service": 7}),
            "`service` must be a string",
        ),
        (
            "app_log",
            json!({"limit": 0}),
            "`limit` must be between 1 and 200",
        ),
        (
            "app_log",
            json!({"limit": 201}),
            "`limit` must be between 1 and 200",
        ),
        (
            "app_log",
            json!({"limit": "10"}),
            "`limit` must be an integer",
        ),
        (
            "app_log",
            json!({"start": "14 March 2026"}),
            "`start` is not an RFC 3339 time",
        ),
        (
            "app_log",
            json!({"end": "2026-03-14T09:00:00+0100"}),
            "`end` is not an RFC 3339 time",
        ),
        (
            "pg_transactions",
            json!({"pids": (1..=21).collect::<Vec<_>>()}),
            "`pids` must hold 1 to 20 integers",
        ),
        (
            "pg_slow_queries",
            json!({"min_duration_ms": -1}),
            "`min_duration_ms` must be between 0",
        ),
        (
            "recent_changes",
            json!({"kind": "rollback"}),
            "`kind` must be one of deploy, config, migration, scale",
        ),
        ("pg_error_log", json!("deadlock"), "must be a JSON object"),
        ("kubectl_exec", json!({}), "unknown tool \"kubectl_exec\""),
    ] {
        let message = invalid(&source, tool, args.clone());
        assert!(message.contains(expected), "{tool} {args}: {message}");
    }
}

#[test]
fn odd_input_never_panics() {
    let dir = full_pack();
    let source = PackSource::new(dir.path());
    let odd_values = [
        Value::Null,
        json!(true),
        json!(-1),
        json!(0),
        json!(1e300),
        json!(u64::MAX),
        json!(i64::MIN),
        json!(""),
        json!("\u{0}"),
        json!("9999-12-31T23:59:60Z"),
        json!("0000-01-01T00:00:00-23:59"),
        json!("é".repeat(5000)),
        json!([]),
        json!([null, "x"]),
        json!({"nested": {"deep": [1]}}),
    ];
    for spec in tool_specs() {
        for name in spec.argument_names().into_iter().chain(["unknown"]) {
            for value in &odd_values {
                let mut args = serde_json::Map::new();
                args.insert(name.to_owned(), value.clone());
                let _ = run_tool(&source, spec.name, &Value::Object(args));
            }
        }
        for args in [json!(null), json!([]), json!(1), json!("x")] {
            assert!(run_tool(&source, spec.name, &args).is_err());
        }
    }
    assert!(run_tool(&source, &"工具".repeat(1000), &json!({})).is_err());
}

#[test]
fn a_broken_source_is_a_source_error() {
    let dir = write_pack(&[(
        "changes.jsonl",
        "{\"ts\":\"2026-03-14T09:00:00Z\"}\n{oops\n",
    )]);
    let source = PackSource::new(dir.path());
    match run_tool(&source, "recent_changes", &json!({})) {
        Err(ToolError::Source(message)) => {
            assert!(message.contains("changes.jsonl line 2"), "{message}");
        }
        other => panic!("expected a source error, got {other:?}"),
    }
    // The error names the file; SourceError stays available to callers that match on it.
    let error = source
        .records(SourceKind::Changes, None, None)
        .expect_err("broken");
    assert!(matches!(error, SourceError::Malformed { line: 2, .. }));
}

#[test]
fn outputs_round_trip_through_json() {
    let dir = full_pack();
    let source = PackSource::new(dir.path());
    for spec in tool_specs() {
        let output = run(&source, spec.name, json!({"limit": 2}));
        let text = serde_json::to_string(&output).expect("serialize");
        let back: ToolOutput = serde_json::from_str(&text).expect("deserialize");
        assert_eq!(back, output, "{}", spec.name);
        assert!(text.contains("\"status\":\"ok\""), "{text}");
    }
}
