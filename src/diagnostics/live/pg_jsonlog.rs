//! PostgreSQL's `jsonlog` server log (`log_destination = 'jsonlog'`, PostgreSQL 15+): one
//! JSON object a line, read into the pack's `pg_log` record shape (`ts`, `host`, `pid`,
//! `sqlstate`, `severity`, `message`, `detail`, `statement`, plus `application_name`).

use serde_json::{json, Value};

use crate::timefmt::parse_rfc3339;

/// `2026-12-06 22:30:01.123 UTC` or `… +08` as unix seconds.
pub fn parse_log_time(text: &str) -> Option<i64> {
    let mut parts = text.split_whitespace();
    let (date, time, zone) = (parts.next()?, parts.next()?, parts.next().unwrap_or("UTC"));
    let offset = match zone {
        "UTC" | "GMT" | "Z" => "Z".to_owned(),
        z if z.starts_with(['+', '-']) && z.len() == 3 => format!("{z}:00"),
        z if z.starts_with(['+', '-']) && z.len() == 5 => format!("{}:{}", &z[..3], &z[3..]),
        _ => return None,
    };
    parse_rfc3339(&format!("{date}T{time}{offset}"))
}

/// One jsonlog line as a `pg_log` record and its time; None for a line that is not one.
pub fn record(line: &str, host: &str) -> Option<(i64, Value)> {
    let entry: Value = serde_json::from_str(line).ok()?;
    let ts = parse_log_time(entry.get("timestamp")?.as_str()?)?;
    let text = |key: &str| entry.get(key).and_then(Value::as_str).unwrap_or("");
    let mut fields = json!({
        "ts": crate::timefmt::format_rfc3339(ts),
        "host": host,
        "pid": entry.get("pid").and_then(Value::as_i64).unwrap_or(0),
        "sqlstate": text("state_code"),
        "severity": text("error_severity"),
        "message": text("message"),
    });
    for (from, to) in [
        ("detail", "detail"),
        ("statement", "statement"),
        ("application_name", "application_name"),
        ("dbname", "dbname"),
    ] {
        if !text(from).is_empty() {
            fields[to] = json!(text(from));
        }
    }
    Some((ts, fields))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonlog_lines_become_pg_log_records() {
        let line = r#"{"timestamp":"2026-12-06 22:30:01.123 UTC","user":"app","dbname":"shop","pid":4242,"error_severity":"ERROR","state_code":"40P01","message":"deadlock detected","detail":"Process 4242 waits for ShareLock on transaction 77; blocked by process 4243.","statement":"UPDATE a SET n = 1 WHERE id = 1","application_name":"orders-service","backend_type":"client backend"}"#;
        let (ts, fields) = record(line, "db-1").expect("a record");
        assert_eq!(ts, parse_rfc3339("2026-12-06T22:30:01Z").expect("time"));
        assert_eq!(fields["sqlstate"], "40P01");
        assert_eq!(fields["pid"], 4242);
        assert_eq!(fields["host"], "db-1");
        assert_eq!(fields["application_name"], "orders-service");
        assert!(fields["detail"]
            .as_str()
            .is_some_and(|d| d.contains("blocked by")));
        assert_eq!(
            parse_log_time("2026-12-06 06:30:01.123 +08"),
            parse_rfc3339("2026-12-05T22:30:01Z")
        );
        assert_eq!(record("not json", "db-1"), None);
        assert_eq!(record(r#"{"timestamp":"yesterday"}"#, "db-1"), None);
    }
}
