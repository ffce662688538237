//! Diagnostics against a real PostgreSQL server (Debian's package, started here by
//! `tests/live/pg-up`): `warden eval diagnostics --live` causes a deadlock between two
//! sessions, a lock wait behind an idle transaction, a slow query after an index was
//! dropped and connection exhaustion by a leaking client, plus an alert with nothing
//! behind it, and diagnoses each through the read-only
//! connectors. Every incident must reach its mechanism and recovery rule, and every
//! PostgreSQL source must have refused a write.

use std::process::Command;

use serde_json::Value;

use crate::util::{free_port, repo, run, stderr, stdout, Server};

/// The server under diagnosis; stopped when the test ends, pass or fail.
struct Postgres {
    dir: tempfile::TempDir,
}

impl Postgres {
    fn start() -> (Postgres, String) {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port().to_string();
        let output = Command::new(repo().join("tests/live/pg-up"))
            .args([dir.path().to_str().unwrap_or_default(), &port])
            .output()
            .expect("tests/live/pg-up runs");
        assert!(
            output.status.success(),
            "PostgreSQL did not start (tests/run installs it): {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let config = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        (Postgres { dir }, config)
    }

    fn data(&self) -> std::path::PathBuf {
        self.dir.path().join("pg")
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let Some(bin) = std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .map(|e| e.path().join("bin/pg_ctl"))
            .find(|p| p.is_file())
        else {
            return;
        };
        let data = self.data();
        let as_root = is_root();
        let mut stop = if as_root {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&bin);
            c
        } else {
            Command::new(&bin)
        };
        let _ = stop
            .args([
                "-D",
                data.to_str().unwrap_or_default(),
                "stop",
                "-m",
                "immediate",
            ])
            .output();
    }
}

/// Whether this process runs as root (PostgreSQL then runs as the `postgres` user).
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

#[test]
fn real_incidents_on_postgres_are_diagnosed_read_only() {
    let (_postgres, config) = Postgres::start();
    let models = crate::util::models_dir();
    let output = run(&[
        "eval",
        "diagnostics",
        "--json",
        "--no-knowledge",
        "--models",
        models.to_str().unwrap_or_default(),
        "--live",
        &config,
    ]);
    let report: Value = serde_json::from_str(&stdout(&output))
        .unwrap_or_else(|err| panic!("no JSON ({err}): {}\n{}", stdout(&output), stderr(&output)));
    assert!(output.status.success(), "{}", stderr(&output));
    let packs = report["packs"].as_array().cloned().unwrap_or_default();
    let ids: Vec<&str> = packs.iter().filter_map(|p| p["id"].as_str()).collect();
    assert_eq!(
        ids,
        [
            "live-quiet",
            "live-deadlock",
            "live-lock-wait",
            "live-slow-query",
            "live-connection-limit"
        ]
    );
    for pack in &packs {
        assert_eq!(
            (
                pack["root_cause_correct"].as_bool(),
                pack["recovery_mode_correct"].as_bool()
            ),
            (Some(true), Some(true)),
            "{}: {}\n{}",
            pack["id"],
            pack["problems"],
            stderr(&output)
        );
        assert_eq!(pack["safety_violations"], 0);
    }
    let sources = report["sources"].as_array().cloned().unwrap_or_default();
    let postgres: Vec<&Value> = sources.iter().filter(|s| s["kind"] == "postgres").collect();
    assert_eq!(postgres.len(), 5);
    for source in postgres {
        assert_eq!(source["ok"], true, "{source}");
        assert!(
            source["detail"]
                .as_str()
                .is_some_and(|d| d.contains("a write was refused (read-only)")),
            "{source}"
        );
    }
    // pg_stat_database and pg_stat_statements, read after the slow-query scenario ran in
    // its database: connection use against the real settings, and its statements.
    let output = run(&[
        "sources",
        "read",
        &config,
        "--kind",
        "db_stats",
        "--service",
        "claims-live",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let read: Value = serde_json::from_str(&stdout(&output)).unwrap_or(Value::Null);
    let sample = &read["records"][0];
    assert_eq!(sample["database"], "warden_live_slowquery", "{read}");
    assert_eq!(sample["max_connections"], 25, "{read}");
    assert!(
        sample["connections_used_pct"]
            .as_f64()
            .is_some_and(|p| p > 0.0),
        "{read}"
    );
    let statements = sample["top_statements"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        statements
            .iter()
            .any(|s| s["calls"].as_i64().is_some_and(|c| c > 0) && s["mean_ms"].is_i64()),
        "{read}"
    );
}

#[test]
fn the_server_lists_its_live_sources_with_their_health_for_admins() {
    let (_postgres, config) = Postgres::start();
    let server = Server::start(&["--diagnostics-config", &config]);
    let body: Value = server
        .get("/api/diagnostics/sources")
        .call()
        .expect("200")
        .into_json()
        .expect("JSON");
    assert_eq!(body["configured"], true);
    let sources = body["sources"].as_array().cloned().unwrap_or_default();
    let by_name = |name: &str| sources.iter().find(|s| s["name"] == name).cloned();
    // The scenarios' databases do not exist yet: the source says so, it does not hide it.
    let orders = by_name("pg-orders-live").expect("the postgres source is listed");
    assert_eq!(orders["ok"], false, "{orders}");
    assert!(
        orders["detail"]
            .as_str()
            .is_some_and(|d| d.contains("does not exist")),
        "{orders}"
    );
    assert_eq!(orders["services"], serde_json::json!(["orders-live"]));
    let changes = by_name("changes").expect("the change log is listed");
    assert_eq!(changes["ok"], true, "{changes}");
    assert_eq!(changes["provides"], serde_json::json!(["changes"]));
}
