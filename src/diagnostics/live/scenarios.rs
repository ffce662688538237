//! Real incidents produced on a PostgreSQL server Warden may write to for the purpose
//! (`[live_eval] admin_dsn`), for `warden eval diagnostics --live CONFIG`: each scenario
//! sets up its own database, causes the incident with real sessions (a deadlock between
//! two, a lock wait behind an idle transaction, connections exhausted by a leaking
//! client, or nothing wrong at all), writes what its application would log, and hands
//! over what must stay held while the diagnosis reads the live system. The diagnosis
//! itself reads only through the registry's read-only connectors.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::Duration;

use postgres::{Client, NoTls};
use serde::Deserialize;
use serde_json::json;

use crate::diagnostics::score::GroundTruth;
use crate::timefmt::format_rfc3339;

/// `[live_eval]` of the registry file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LiveEvalConfig {
    /// A role that may create databases and tables (used only to cause incidents).
    pub admin_dsn: String,
    /// Folder the scenarios' applications write their logs to (`<service>.jsonl`) and
    /// their change log (`changes.jsonl`); the registry's log_file sources read them.
    pub log_dir: PathBuf,
}

/// One real incident.
pub struct Scenario {
    pub id: &'static str,
    pub service: &'static str,
    pub database: &'static str,
    pub alert_name: &'static str,
    pub summary: &'static str,
    provoke: fn(&Lab) -> Result<Held, String>,
    truth: fn(&Lab) -> serde_json::Value,
}

/// What a scenario keeps alive while it is diagnosed (sessions holding locks,
/// connections, waiting threads); dropped after, which ends the incident.
pub struct Held {
    clients: Vec<Client>,
    threads: Vec<JoinHandle<()>>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.clients.clear();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// A scenario's handles on the server and its logs.
pub struct Lab {
    admin_dsn: String,
    database: String,
    service: String,
    log_dir: PathBuf,
    /// The change this scenario recorded, if any.
    change_id: String,
}

impl Lab {
    fn connect(&self, application: &str) -> Result<Client, String> {
        let mut config: postgres::Config = self
            .admin_dsn
            .parse()
            .map_err(|e| format!("admin_dsn: {e}"))?;
        config
            .dbname(&self.database)
            .application_name(application)
            .connect_timeout(Duration::from_secs(5));
        config.connect(NoTls).map_err(|e| format!("connect: {e}"))
    }

    fn app_log(&self, level: &str, message: &str) -> Result<(), String> {
        append(
            &self.log_dir.join(format!("{}.jsonl", self.service)),
            &json!({"ts": now(), "service": self.service, "level": level, "message": message}),
        )
    }

    fn change(&self, kind: &str, summary: &str) -> Result<(), String> {
        append(
            &self.log_dir.join("changes.jsonl"),
            &json!({"ts": now(), "id": self.change_id, "kind": kind, "service": self.service,
                    "summary": summary, "details": "recorded by the live scenario"}),
        )
    }
}

fn now() -> String {
    format_rfc3339(crate::runs::now_secs())
}

fn append(path: &Path, line: &serde_json::Value) -> Result<(), String> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    writeln!(file, "{line}").map_err(|e| format!("{}: {e}", path.display()))
}

fn exec(client: &mut Client, sql: &str) -> Result<(), String> {
    client.batch_execute(sql).map_err(|e| {
        format!(
            "{sql}: {}",
            e.as_db_error()
                .map(|d| d.message().to_owned())
                .unwrap_or(e.to_string())
        )
    })
}

/// Every scenario, in the order they run.
pub fn all() -> Vec<Scenario> {
    vec![
        Scenario {
            id: "live-quiet",
            service: "search-live",
            database: "warden_live_quiet",
            alert_name: "SearchLatencyHigh",
            summary: "search-live p95 latency 1.3s (threshold 1s) for 5 minutes",
            provoke: quiet,
            truth: |_| {
                json!({"verdict": "insufficient_evidence", "component": null, "mechanism": null,
                               "trigger": null, "recovery_mode": "manual_review"})
            },
        },
        Scenario {
            id: "live-deadlock",
            service: "orders-live",
            database: "warden_live_deadlock",
            alert_name: "OrdersErrorRateHigh",
            summary: "orders-live 5xx error rate 4% (threshold 1%)",
            provoke: deadlock,
            truth: |_| {
                json!({"verdict": "root_cause", "component": "orders-live",
                               "mechanism": "opposite_order_transaction_deadlock",
                               "trigger": {"kind": "lock_order", "ref": null},
                               "required_evidence": [{"source": "pg_log", "match": "deadlock detected"}],
                               "recovery_mode": "manual_review"})
            },
        },
        Scenario {
            id: "live-lock-wait",
            service: "billing-live",
            database: "warden_live_lockwait",
            alert_name: "BillingRequestTimeouts",
            summary: "billing-live request timeouts 6% (threshold 1%)",
            provoke: lock_wait,
            truth: |_| {
                json!({"verdict": "root_cause", "component": "billing-live",
                               "mechanism": "lock_wait_from_long_transaction",
                               "trigger": {"kind": "long_transaction", "ref": null},
                               "required_evidence": [{"source": "lock_waits", "match": "idle in transaction"}],
                               "recovery_mode": "manual_review"})
            },
        },
        Scenario {
            id: "live-slow-query",
            service: "claims-live",
            database: "warden_live_slowquery",
            alert_name: "ClaimsLatencyHigh",
            summary: "claims-live p95 latency 2.4s on GET /policies/{id}/claims (threshold 1s)",
            provoke: slow_query,
            truth: |lab| {
                json!({"verdict": "root_cause", "component": "claims-live",
                                 "mechanism": "slow_query_regression",
                                 "trigger": {"kind": "deploy", "ref": lab.change_id},
                                 "required_evidence": [{"source": "slow_queries", "match": "claim_items"}],
                                 "recovery_mode": "proposal_only"})
            },
        },
        Scenario {
            id: "live-connection-limit",
            service: "reports-live",
            database: "warden_live_connections",
            alert_name: "ReportsErrorRateHigh",
            summary: "reports-live errors: database connection failures",
            provoke: connection_limit,
            truth: |lab| {
                json!({"verdict": "root_cause", "component": "reports-live",
                                 "mechanism": "db_connection_limit_exceeded",
                                 "trigger": {"kind": "deploy", "ref": lab.change_id},
                                 "required_evidence": [{"source": "pg_log", "match": "53300"}],
                                 "recovery_mode": "proposal_only"})
            },
        },
    ]
}

impl Scenario {
    /// Creates the scenario's database (dropping an old one) and its lab.
    pub fn prepare(&self, config: &LiveEvalConfig, run: &str) -> Result<Lab, String> {
        let mut admin: postgres::Config = config
            .admin_dsn
            .parse()
            .map_err(|e| format!("admin_dsn: {e}"))?;
        admin.connect_timeout(Duration::from_secs(5));
        let mut client = admin
            .connect(NoTls)
            .map_err(|e| format!("admin connect: {e}"))?;
        exec(
            &mut client,
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.database),
        )?;
        exec(&mut client, &format!("CREATE DATABASE {}", self.database))?;
        std::fs::create_dir_all(&config.log_dir)
            .map_err(|e| format!("{}: {e}", config.log_dir.display()))?;
        Ok(Lab {
            admin_dsn: config.admin_dsn.clone(),
            database: self.database.to_owned(),
            service: self.service.to_owned(),
            log_dir: config.log_dir.clone(),
            change_id: format!("chg-{}-{run}", self.id),
        })
    }

    pub fn provoke(&self, lab: &Lab) -> Result<Held, String> {
        (self.provoke)(lab)
    }

    pub fn truth(&self, lab: &Lab) -> Result<GroundTruth, String> {
        serde_json::from_value((self.truth)(lab)).map_err(|e| format!("truth: {e}"))
    }
}

fn quiet(lab: &Lab) -> Result<Held, String> {
    let mut client = lab.connect(lab.service.as_str())?;
    exec(&mut client, "CREATE TABLE docs (id int PRIMARY KEY, body text); INSERT INTO docs SELECT g, 'doc ' || g FROM generate_series(1, 1000) g")?;
    for _ in 0..5 {
        exec(
            &mut client,
            "SELECT count(*) FROM docs WHERE body LIKE 'doc 1%'",
        )?;
    }
    lab.app_log("INFO", "search served 1200 requests, p95 1.3s, 0 errors")?;
    Ok(Held {
        clients: Vec::new(),
        threads: Vec::new(),
    })
}

fn deadlock(lab: &Lab) -> Result<Held, String> {
    let mut setup = lab.connect("migrations")?;
    exec(&mut setup, "CREATE TABLE accounts (id int PRIMARY KEY, balance int); CREATE TABLE ledger (id int PRIMARY KEY, n int); INSERT INTO accounts VALUES (1, 100); INSERT INTO ledger VALUES (1, 0)")?;
    for _ in 0..2 {
        let mut first = lab.connect(lab.service.as_str())?;
        let mut second = lab.connect(lab.service.as_str())?;
        exec(
            &mut first,
            "BEGIN; UPDATE accounts SET balance = balance - 1 WHERE id = 1",
        )?;
        exec(
            &mut second,
            "BEGIN; UPDATE ledger SET n = n + 1 WHERE id = 1",
        )?;
        let other = std::thread::spawn(move || {
            let outcome = exec(
                &mut second,
                "UPDATE accounts SET balance = balance + 1 WHERE id = 1; COMMIT",
            );
            (second, outcome)
        });
        std::thread::sleep(Duration::from_millis(200));
        let mine = exec(
            &mut first,
            "UPDATE ledger SET n = n - 1 WHERE id = 1; COMMIT",
        );
        let (_, theirs) = other
            .join()
            .map_err(|_| "a session thread panicked".to_owned())?;
        for outcome in [mine, theirs] {
            if let Err(err) = outcome {
                lab.app_log("ERROR", &format!("transfer failed: {err}"))?;
            }
        }
        let _ = exec(&mut first, "ROLLBACK");
    }
    Ok(Held {
        clients: Vec::new(),
        threads: Vec::new(),
    })
}

fn lock_wait(lab: &Lab) -> Result<Held, String> {
    let mut setup = lab.connect("migrations")?;
    exec(&mut setup, "CREATE TABLE invoices (id int PRIMARY KEY, status text); INSERT INTO invoices SELECT g, 'open' FROM generate_series(1, 100) g")?;
    // Someone's session opens a transaction, updates a row and goes idle.
    let mut blocker = lab.connect("psql")?;
    exec(
        &mut blocker,
        "BEGIN; UPDATE invoices SET status = 'review' WHERE id = 7",
    )?;
    // The service's requests wait on that row and time out.
    for _ in 0..2 {
        let mut victim = lab.connect(lab.service.as_str())?;
        if let Err(err) = exec(
            &mut victim,
            "SET lock_timeout = '2s'; UPDATE invoices SET status = 'paid' WHERE id = 7",
        ) {
            lab.app_log(
                "ERROR",
                &format!("POST /invoices/7/pay failed after 2000 ms: {err}"),
            )?;
        }
    }
    // One request still waits while the diagnosis looks.
    let mut waiter = lab.connect(lab.service.as_str())?;
    let thread = std::thread::spawn(move || {
        let _ = exec(
            &mut waiter,
            "SET statement_timeout = '120s'; UPDATE invoices SET status = 'paid' WHERE id = 7",
        );
    });
    // The blocker has been idle in its transaction for a while before the alert fires.
    std::thread::sleep(Duration::from_secs(22));
    lab.app_log("WARN", "POST /invoices/7/pay still waiting after 20000 ms")?;
    Ok(Held {
        clients: vec![blocker],
        threads: vec![thread],
    })
}

fn connection_limit(lab: &Lab) -> Result<Held, String> {
    lab.change("deploy", "reports-live 4.2.0: connection handling refactor")?;
    let mut leaked = Vec::new();
    let mut refusals = 0;
    for _ in 0..400 {
        match lab.connect(lab.service.as_str()) {
            Ok(client) => leaked.push(client),
            Err(err) => {
                refusals += 1;
                lab.app_log(
                    "ERROR",
                    &format!("could not obtain a database connection: {err}"),
                )?;
                if refusals >= 3 {
                    break;
                }
            }
        }
    }
    if refusals == 0 {
        return Err(
            "the server never refused a connection (max_connections above 400?)".to_owned(),
        );
    }
    // The pool reaps a few idle connections, so the monitor can get in again: it opens
    // one connection at a time, and non-superusers need a free slot beyond the
    // superuser-reserved ones (3 by default); two spare slots cover a closing one.
    leaked.truncate(leaked.len().saturating_sub(5));
    Ok(Held {
        clients: leaked,
        threads: Vec::new(),
    })
}

/// The history query of claims: a correlated lookup that an index on claim_items makes
/// cheap and a sequential scan per claim makes slow.
const CLAIMS_HISTORY: &str = "SELECT count(*), sum(t) FROM (SELECT c.id, \
    (SELECT sum(i.amount) FROM claim_items i WHERE i.claim_id = c.id) AS t \
    FROM claims c WHERE c.policy = 7) AS history";

fn slow_query(lab: &Lab) -> Result<Held, String> {
    let mut setup = lab.connect("migrations")?;
    exec(
        &mut setup,
        "CREATE TABLE claims (id int PRIMARY KEY, policy int); \
        CREATE TABLE claim_items (id serial PRIMARY KEY, claim_id int, amount int); \
        INSERT INTO claims SELECT g, g % 10 FROM generate_series(1, 2000) g; \
        INSERT INTO claim_items (claim_id, amount) \
            SELECT g % 2000 + 1, g % 97 FROM generate_series(1, 150000) g; \
        CREATE INDEX claim_items_claim_idx ON claim_items (claim_id); ANALYZE",
    )?;
    let mut app = lab.connect(lab.service.as_str())?;
    let request = |app: &mut Client| -> Result<(), String> {
        let started = std::time::Instant::now();
        exec(app, CLAIMS_HISTORY)?;
        let ms = started.elapsed().as_millis();
        let level = if ms >= 1000 { "WARN" } else { "INFO" };
        lab.app_log(
            level,
            &format!("GET /policies/7/claims status=200 duration_ms={ms}"),
        )
    };
    request(&mut app)?;
    // A release whose migration replaces the index... without making the new one.
    lab.change(
        "migration",
        "claims-live 3.4.0: migration 0042 reworks claim_items indexes",
    )?;
    exec(&mut setup, "DROP INDEX claim_items_claim_idx")?;
    for _ in 0..3 {
        request(&mut app)?;
    }
    Ok(Held {
        clients: Vec::new(),
        threads: Vec::new(),
    })
}
