//! Host and pool metrics from a real Prometheus (Debian's package, started here by
//! `tests/live/prom-up`) scraping Debian's node exporter and an application's /metrics:
//! `warden sources check` finds it healthy and `warden sources read` returns this machine's
//! disks and memory and the application's saturated pool, in the pack's record shapes.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util::{free_port, repo, run, stderr, stdout};

/// What the application exposes: a HikariCP pool at its limit with requests waiting.
const APP_METRICS: &str = "\
# TYPE hikaricp_connections_active gauge
hikaricp_connections_active{application=\"orders-service\",pool=\"main\"} 10
# TYPE hikaricp_connections_idle gauge
hikaricp_connections_idle{application=\"orders-service\",pool=\"main\"} 0
# TYPE hikaricp_connections_max gauge
hikaricp_connections_max{application=\"orders-service\",pool=\"main\"} 10
# TYPE hikaricp_connections_pending gauge
hikaricp_connections_pending{application=\"orders-service\",pool=\"main\"} 3
# TYPE hikaricp_connections_timeout_total counter
hikaricp_connections_timeout_total{application=\"orders-service\",pool=\"main\"} 42
";

/// The throwaway Prometheus and node exporter; stopped when the test ends.
struct Prometheus {
    dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        for pid in ["prometheus.pid", "node.pid"] {
            if let Ok(pid) = std::fs::read_to_string(self.dir.path().join(pid)) {
                let _ = Command::new("kill").arg(pid.trim()).output();
            }
        }
    }
}

/// Serves APP_METRICS to every request, on a thread, until the test process ends.
fn serve_app_metrics() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address").to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let response = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{APP_METRICS}",
                APP_METRICS.len()
            );
            let _ = stream.write_all(response.as_bytes());
        }
    });
    address
}

fn sources(args: &[&str]) -> Value {
    let output = run(args);
    assert!(output.status.success(), "{args:?}: {}", stderr(&output));
    serde_json::from_str(&stdout(&output))
        .unwrap_or_else(|err| panic!("no JSON ({err}): {}", stdout(&output)))
}

#[test]
fn prometheus_host_and_pool_metrics_are_read_as_records() {
    let app = serve_app_metrics();
    let dir = tempfile::tempdir().expect("tempdir");
    let output = Command::new(repo().join("tests/live/prom-up"))
        .args([
            dir.path().to_str().unwrap_or_default(),
            &free_port().to_string(),
            &free_port().to_string(),
            &app,
        ])
        .output()
        .expect("tests/live/prom-up runs");
    let _prometheus = Prometheus { dir };
    assert!(
        output.status.success(),
        "Prometheus did not start (tests/run installs it): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let config = String::from_utf8_lossy(&output.stdout).trim().to_owned();

    let health = sources(&["sources", "check", &config]);
    assert_eq!(health["sources"][0]["ok"], true, "{health}");
    assert!(health["sources"][0]["detail"]
        .as_str()
        .is_some_and(|d| d.starts_with("connected; Prometheus")));

    // Wait for a few scrapes of both targets.
    let read =
        |kind: &str| sources(&["sources", "read", &config, "--kind", kind, "--minutes", "5"]);
    let started = Instant::now();
    let (hosts, pools) = loop {
        let hosts = read("host_metrics");
        let pools = read("pool_metrics");
        let full = |v: &Value| v["records"].as_array().is_some_and(|r| !r.is_empty());
        if full(&hosts) && full(&pools) {
            break (hosts, pools);
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no samples: {hosts} {pools}"
        );
        std::thread::sleep(Duration::from_secs(1));
    };
    let host = &hosts["records"][0];
    assert_eq!(host["host"], "127.0.0.1", "{host}");
    let disks = host["disks"].as_array().cloned().unwrap_or_default();
    assert!(!disks.is_empty(), "{host}");
    for disk in &disks {
        let used = disk["used_pct"].as_f64().unwrap_or(-1.0);
        assert!((0.0..=100.0).contains(&used), "{disk}");
        assert!(
            disk["mount"].as_str().is_some_and(|m| m.starts_with('/')),
            "{disk}"
        );
    }
    let memory = host["mem_used_pct"].as_f64().unwrap_or(0.0);
    assert!(memory > 0.0 && memory < 100.0, "{host}");
    let pool = pools["records"]
        .as_array()
        .and_then(|r| r.last())
        .cloned()
        .unwrap_or_default();
    assert_eq!(pool["service"], "orders-service", "{pool}");
    assert_eq!(
        (pool["active"].clone(), pool["max"].clone()),
        (10.into(), 10.into()),
        "{pool}"
    );
    assert_eq!(pool["waiting"], 3, "{pool}");
    assert_eq!(pool["acquire_timeouts"], 42, "{pool}");
}
