//! The aggregation behind `nginx_access_summary`: nginx access records grouped by upstream,
//! with request and status counts and nearest-rank percentiles of the request and upstream
//! response times. Records missing a value are counted but add nothing to its percentiles.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::super::source::SourceRecord;
use crate::timefmt::format_rfc3339;

/// The upstream name of records that have none.
const NO_UPSTREAM: &str = "-";

/// One summary object per upstream, sorted by upstream name: `{upstream, requests, status:
/// {"200": n, …}, errors_5xx, p50_s, p95_s, p99_s, upstream_p95_s, first_ts, last_ts}`.
/// Percentiles are `null` when no record of the upstream has the value.
pub fn summarize(records: &[SourceRecord]) -> Vec<Value> {
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    for record in records {
        let upstream = record
            .fields
            .get("upstream")
            .and_then(Value::as_str)
            .unwrap_or(NO_UPSTREAM);
        groups
            .entry(upstream.to_owned())
            .or_insert_with(|| Group::new(record.ts))
            .add(record);
    }
    groups
        .into_iter()
        .map(|(upstream, group)| group.summary(upstream))
        .collect()
}

struct Group {
    requests: u64,
    status: BTreeMap<String, u64>,
    errors_5xx: u64,
    request_times: Vec<f64>,
    upstream_times: Vec<f64>,
    first_ts: i64,
    last_ts: i64,
}

impl Group {
    fn new(ts: i64) -> Group {
        Group {
            requests: 0,
            status: BTreeMap::new(),
            errors_5xx: 0,
            request_times: Vec::new(),
            upstream_times: Vec::new(),
            first_ts: ts,
            last_ts: ts,
        }
    }

    fn add(&mut self, record: &SourceRecord) {
        self.requests += 1;
        self.first_ts = self.first_ts.min(record.ts);
        self.last_ts = self.last_ts.max(record.ts);
        let status = status_code(record.fields.get("status"));
        if status
            .as_deref()
            .and_then(|s| s.parse::<u16>().ok())
            .is_some_and(|code| (500..600).contains(&code))
        {
            self.errors_5xx += 1;
        }
        *self
            .status
            .entry(status.unwrap_or_else(|| "unknown".to_owned()))
            .or_default() += 1;
        self.request_times
            .extend(seconds(record.fields.get("request_time_s")));
        self.upstream_times
            .extend(seconds(record.fields.get("upstream_response_time_s")));
    }

    fn summary(mut self, upstream: String) -> Value {
        self.request_times.sort_by(f64::total_cmp);
        self.upstream_times.sort_by(f64::total_cmp);
        let status: Map<String, Value> = self
            .status
            .into_iter()
            .map(|(code, count)| (code, Value::from(count)))
            .collect();
        json!({
            "upstream": upstream,
            "requests": self.requests,
            "status": status,
            "errors_5xx": self.errors_5xx,
            "p50_s": percentile(&self.request_times, 50),
            "p95_s": percentile(&self.request_times, 95),
            "p99_s": percentile(&self.request_times, 99),
            "upstream_p95_s": percentile(&self.upstream_times, 95),
            "first_ts": format_rfc3339(self.first_ts),
            "last_ts": format_rfc3339(self.last_ts),
        })
    }
}

/// An HTTP status as text (`504`), from a number or a string.
fn status_code(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::Number(number) => Some(number.to_string()),
        Value::String(text) if !text.is_empty() => Some(text.clone()),
        _ => None,
    }
}

/// A duration in seconds from a number or a numeric string; `None` for `-`, null, or
/// anything not finite and non-negative.
fn seconds(value: Option<&Value>) -> Option<f64> {
    let seconds = match value? {
        Value::Number(number) => number.as_f64()?,
        Value::String(text) => text.trim().parse().ok()?,
        _ => return None,
    };
    (seconds.is_finite() && seconds >= 0.0).then_some(seconds)
}

/// The nearest-rank percentile of sorted values, rounded to 3 decimals; `null` when empty.
fn percentile(sorted: &[f64], percent: usize) -> Value {
    if sorted.is_empty() {
        return Value::Null;
    }
    let rank = (percent * sorted.len())
        .div_ceil(100)
        .clamp(1, sorted.len());
    let value = sorted[rank - 1];
    Value::from((value * 1000.0).round() / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(
        ts: i64,
        upstream: &str,
        status: Value,
        request: Value,
        upstream_time: Value,
    ) -> SourceRecord {
        let fields = json!({
            "ts": format_rfc3339(ts), "upstream": upstream, "status": status,
            "method": "GET", "path": "/orders",
            "request_time_s": request, "upstream_response_time_s": upstream_time
        });
        SourceRecord {
            ts,
            raw: fields.to_string(),
            fields,
        }
    }

    #[test]
    fn nearest_rank_percentiles() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 50), json!(50.0));
        assert_eq!(percentile(&values, 95), json!(95.0));
        assert_eq!(percentile(&values, 99), json!(99.0));
        assert_eq!(percentile(&[0.1234, 7.0], 50), json!(0.123));
        assert_eq!(percentile(&[0.1234, 7.0], 95), json!(7.0));
        assert_eq!(percentile(&[2.0], 1), json!(2.0));
        assert_eq!(percentile(&[], 50), Value::Null);
    }

    #[test]
    fn groups_count_statuses_and_times_per_upstream() {
        let mut records = vec![
            record(10, "orders", json!(200), json!(0.1), json!(0.09)),
            record(5, "orders", json!(504), json!(60.0), Value::Null),
            record(20, "orders", json!("502"), json!("0.3"), json!("-")),
            record(7, "catalog", json!(200), json!(0.02), json!(0.01)),
        ];
        records.push(SourceRecord {
            ts: 8,
            raw: "{}".to_owned(),
            fields: json!({"ts": "x"}),
        });
        let summary = summarize(&records);
        let upstreams: Vec<_> = summary.iter().map(|s| s["upstream"].clone()).collect();
        assert_eq!(upstreams, ["-", "catalog", "orders"]);
        assert_eq!(summary[0]["status"], json!({"unknown": 1}));
        assert_eq!(summary[0]["p50_s"], Value::Null);
        let orders = &summary[2];
        assert_eq!(orders["requests"], 3);
        assert_eq!(orders["status"], json!({"200": 1, "502": 1, "504": 1}));
        assert_eq!(orders["errors_5xx"], 2);
        assert_eq!(orders["p50_s"], 0.3);
        assert_eq!(orders["p95_s"], 60.0);
        assert_eq!(orders["p99_s"], 60.0);
        assert_eq!(orders["upstream_p95_s"], 0.09);
        assert_eq!(orders["first_ts"], format_rfc3339(5));
        assert_eq!(orders["last_ts"], format_rfc3339(20));
    }
}
