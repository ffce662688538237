//! The Prometheus connector: `/api/v1/query_range` over the incident's time range, with the
//! PromQL the playbooks declare (`[[metric]]`), or the registry entry's `queries` in their
//! place — never a query from a model or a user. node_exporter's series become `host_metrics`
//! samples (disks, memory, OOM kills, load per host) and HikariCP's become `pool_metrics`
//! samples per service, in the pack's record shapes.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::{answer, Connector, Health};
use crate::diagnostics::source::{SourceKind, SourceRecord};
use crate::timefmt::format_rfc3339;

/// Most points one query returns per series.
const MAX_POINTS: i64 = 120;
const MIN_STEP_SECS: i64 = 15;
const TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read from Prometheus; a larger one is refused, not buffered.
pub const MAX_RESPONSE_BYTES: u64 = 4 * 1024 * 1024;
/// How far back a request without a start looks.
const DEFAULT_RANGE_SECS: i64 = 3600;

/// The record fields a PromQL query may fill. The queries themselves come from the
/// playbooks' `[[metric]]` tables (what each playbook needs to see), replaced per field by
/// a registry entry's `queries` for a site whose metric names differ.
pub const METRIC_FIELDS: [&str; 10] = [
    "disk_used_pct",
    "disk_free_bytes",
    "mem_used_pct",
    "oom_kills",
    "load1",
    "pool_active",
    "pool_idle",
    "pool_max",
    "pool_waiting",
    "pool_timeouts",
];

pub struct PrometheusConnector {
    /// No redirects: an answer from another host is never read.
    agent: ureq::Agent,
    name: String,
    url: String,
    token: Option<String>,
    queries: BTreeMap<String, String>,
    kinds: [SourceKind; 2],
}

/// One series' points: its labels and (time, value) pairs.
struct Series {
    labels: Map<String, Value>,
    points: Vec<(i64, f64)>,
}

impl PrometheusConnector {
    /// `queries`: PromQL by the field of [`METRIC_FIELDS`] it fills; a field without one
    /// is not read.
    pub fn new(
        name: &str,
        url: &str,
        token: Option<String>,
        queries: BTreeMap<String, String>,
    ) -> PrometheusConnector {
        PrometheusConnector {
            agent: ureq::AgentBuilder::new().redirects(0).build(),
            name: name.to_owned(),
            url: url.trim_end_matches('/').to_owned(),
            token,
            queries,
            kinds: [SourceKind::HostMetrics, SourceKind::PoolMetrics],
        }
    }

    fn get(&self, path: &str, query: &[(&str, &str)]) -> Result<Value, String> {
        let mut request = self
            .agent
            .get(&format!("{}{path}", self.url))
            .timeout(TIMEOUT);
        for (key, value) in query {
            request = request.query(key, value);
        }
        if let Some(token) = &self.token {
            request = request.set("Authorization", &format!("Bearer {token}"));
        }
        let response = request.call().map_err(|err| match err {
            ureq::Error::Status(code, _) => format!("{path}: HTTP {code}"),
            other => format!("{path}: {other}"),
        })?;
        if (300..400).contains(&response.status()) {
            return Err(format!(
                "{path}: answered with a redirect (HTTP {}), which is not followed",
                response.status()
            ));
        }
        let mut body = Vec::new();
        std::io::Read::read_to_end(
            &mut std::io::Read::take(response.into_reader(), MAX_RESPONSE_BYTES + 1),
            &mut body,
        )
        .map_err(|err| format!("{path}: {err}"))?;
        if body.len() as u64 > MAX_RESPONSE_BYTES {
            return Err(format!(
                "{path}: the answer is over {} MiB; narrow the query",
                MAX_RESPONSE_BYTES >> 20
            ));
        }
        serde_json::from_slice(&body).map_err(|err| format!("{path}: not JSON: {err}"))
    }

    fn range(&self, field: &str, start: i64, end: i64) -> Result<Vec<Series>, String> {
        let Some(query) = self.queries.get(field) else {
            return Ok(Vec::new());
        };
        let step = ((end - start) / MAX_POINTS).max(MIN_STEP_SECS);
        let body = self.get(
            "/api/v1/query_range",
            &[
                ("query", query),
                ("start", &start.to_string()),
                ("end", &end.to_string()),
                ("step", &step.to_string()),
            ],
        )?;
        if body["status"] != "success" {
            return Err(format!(
                "query `{field}` failed: {}",
                body["error"].as_str().unwrap_or("unknown error")
            ));
        }
        Ok(body["data"]["result"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|series| Series {
                labels: series["metric"].as_object().cloned().unwrap_or_default(),
                points: series["values"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|point| {
                        let ts = point.get(0)?.as_f64()? as i64;
                        let value: f64 = point.get(1)?.as_str()?.parse().ok()?;
                        value.is_finite().then_some((ts, value))
                    })
                    .collect(),
            })
            .collect())
    }

    fn host_metrics(&self, start: i64, end: i64) -> Result<Vec<(i64, Value)>, String> {
        // (host, ts) → the sample being built.
        let mut samples: BTreeMap<(String, i64), Value> = BTreeMap::new();
        let mut disks: BTreeMap<(String, i64, String), (f64, f64)> = BTreeMap::new();
        for (field, index) in [("disk_used_pct", 0), ("disk_free_bytes", 1)] {
            for series in self.range(field, start, end)? {
                let host = host_of(&series.labels);
                let mount = label(&series.labels, "mountpoint");
                for (ts, value) in series.points {
                    let entry = disks.entry((host.clone(), ts, mount.clone())).or_default();
                    if index == 0 {
                        entry.0 = round(value);
                    } else {
                        entry.1 = value;
                    }
                }
            }
        }
        for ((host, ts, mount), (used, free)) in disks {
            let sample = samples
                .entry((host.clone(), ts))
                .or_insert_with(|| empty_sample(&host, ts));
            if let Some(list) = sample["disks"].as_array_mut() {
                list.push(json!({"mount": mount, "used_pct": used, "free_bytes": free}));
            }
        }
        for field in ["mem_used_pct", "oom_kills", "load1"] {
            for series in self.range(field, start, end)? {
                let host = host_of(&series.labels);
                for (ts, value) in series.points {
                    samples
                        .entry((host.clone(), ts))
                        .or_insert_with(|| empty_sample(&host, ts))[field] = json!(round(value));
                }
            }
        }
        Ok(samples.into_iter().map(|((_, ts), v)| (ts, v)).collect())
    }

    fn pool_metrics(&self, start: i64, end: i64) -> Result<Vec<(i64, Value)>, String> {
        let mut samples: BTreeMap<(String, i64), Value> = BTreeMap::new();
        for (field, key) in [
            ("pool_active", "active"),
            ("pool_idle", "idle"),
            ("pool_max", "max"),
            ("pool_waiting", "waiting"),
            ("pool_timeouts", "acquire_timeouts"),
        ] {
            for series in self.range(field, start, end)? {
                let service = label(&series.labels, "application");
                for (ts, value) in series.points {
                    samples.entry((service.clone(), ts)).or_insert_with(|| {
                        json!({"ts": format_rfc3339(ts), "service": service, "active": 0,
                                   "idle": 0, "max": 0, "waiting": 0, "acquire_timeouts": 0})
                    })[key] = json!(value.round() as i64);
                }
            }
        }
        Ok(samples.into_iter().map(|((_, ts), v)| (ts, v)).collect())
    }
}

fn label(labels: &Map<String, Value>, key: &str) -> String {
    labels
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

/// A node's name: its `nodename`/`host` label, else its scrape `instance` without the port.
fn host_of(labels: &Map<String, Value>) -> String {
    for key in ["nodename", "host", "hostname"] {
        let value = label(labels, key);
        if !value.is_empty() {
            return value;
        }
    }
    let instance = label(labels, "instance");
    match instance.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host.to_owned(),
        _ => instance,
    }
}

fn empty_sample(host: &str, ts: i64) -> Value {
    json!({"ts": format_rfc3339(ts), "host": host, "disks": [], "mem_used_pct": 0,
           "oom_kills": 0, "load1": 0})
}

fn round(value: f64) -> f64 {
    (value * 100.0).round() / 100.0
}

impl Connector for PrometheusConnector {
    fn name(&self) -> &str {
        &self.name
    }

    fn provides(&self) -> &[SourceKind] {
        &self.kinds
    }

    fn records(
        &self,
        kind: SourceKind,
        start: Option<i64>,
        end: Option<i64>,
    ) -> Result<Vec<SourceRecord>, String> {
        let end = end.unwrap_or_else(crate::runs::now_secs);
        let start = start.unwrap_or(end - DEFAULT_RANGE_SECS).min(end);
        let found = match kind {
            SourceKind::HostMetrics => self.host_metrics(start, end)?,
            SourceKind::PoolMetrics => self.pool_metrics(start, end)?,
            _ => Vec::new(),
        };
        Ok(answer(found, Some(start), Some(end)))
    }

    fn health(&self) -> Health {
        let (ok, detail) = match self.get("/api/v1/status/buildinfo", &[]) {
            Ok(body) if body["status"] == "success" => (
                true,
                format!(
                    "connected; Prometheus {}",
                    body["data"]["version"].as_str().unwrap_or("?")
                ),
            ),
            Ok(_) => (false, "the build info answer was not a success".to_owned()),
            Err(err) => (false, err),
        };
        Health {
            name: self.name.clone(),
            kind: "prometheus".to_owned(),
            ok,
            detail,
            provides: self.kinds.to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server answering each connection with `head` and then `body_bytes` of JSON.
    fn serve_once(head: &'static str, body_bytes: usize) -> String {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            if let Ok((mut stream, _)) = listener.accept() {
                let mut request = [0_u8; 4096];
                let _ = stream.read(&mut request);
                let _ = stream.write_all(head.as_bytes());
                let mut body = b"{\"data\":\"".to_vec();
                body.resize(body_bytes.max(12) - 2, b'x');
                body.extend_from_slice(b"\"}");
                let _ = stream.write_all(&body);
            }
        });
        url
    }

    #[test]
    fn oversized_answers_and_redirects_are_refused() {
        let big = (MAX_RESPONSE_BYTES + 1024) as usize;
        let url = serve_once(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n",
            big,
        );
        let connector = PrometheusConnector::new("prom", &url, None, BTreeMap::new());
        let error = connector.get("/api/v1/query_range", &[]).unwrap_err();
        assert!(error.contains("over 4 MiB"), "{error}");

        let url = serve_once(
            "HTTP/1.1 302 Found\r\nLocation: http://192.0.2.1/api\r\nContent-Length: 0\r\n\r\n",
            0,
        );
        let connector = PrometheusConnector::new("prom", &url, None, BTreeMap::new());
        let error = connector.get("/api/v1/query_range", &[]).unwrap_err();
        assert!(error.contains("redirect"), "{error}");
    }

    #[test]
    fn hosts_are_named_by_their_labels() {
        let labels = |pairs: &[(&str, &str)]| -> Map<String, Value> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), json!(v)))
                .collect()
        };
        assert_eq!(
            host_of(&labels(&[("instance", "db-1.internal:9100")])),
            "db-1.internal"
        );
        assert_eq!(host_of(&labels(&[("instance", "[::1]:9100")])), "[::1]");
        assert_eq!(
            host_of(&labels(&[
                ("instance", "10.0.0.5:9100"),
                ("nodename", "db-1")
            ])),
            "db-1"
        );
    }
}
