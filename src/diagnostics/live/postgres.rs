//! The PostgreSQL connector: fixed, read-only queries against the system views —
//! `pg_stat_activity` with `pg_locks` and `pg_blocking_pids()` (lock waits, open
//! transactions, statements running now), `pg_stat_database` with the connection settings
//! (connection use, counters) and `pg_stat_statements` when installed — and, when `read_server_log` is set and the role
//! was granted `pg_read_file`, the server's jsonlog (errors, deadlock reports, slow
//! statements, settings changed by a reload). Each session is opened with
//! `default_transaction_read_only`, a statement timeout and a lock timeout; the role needs
//! only `pg_monitor`. No query text comes from a model or a user, and nothing is written:
//! `health()` proves it by attempting a write, which must be refused.

use std::collections::BTreeMap;
use std::time::Duration;

use postgres::error::SqlState;
use postgres::{Client, NoTls, SimpleQueryMessage};
use serde_json::{json, Value};

use super::{answer, pg_jsonlog, Connector, Health};
use crate::diagnostics::source::{SourceKind, SourceRecord};
use crate::timefmt::parse_rfc3339;

/// How much of the server log's end one request reads.
const LOG_TAIL_BYTES: i64 = 4 * 1024 * 1024;
/// Statements shorter than this are not "slow" in a sample of what runs now.
const RUNNING_SLOW_MS: i64 = 500;

/// Where and how to connect.
pub struct PgSettings {
    pub name: String,
    /// libpq key=value (or URL) connection string, without the password.
    pub dsn: String,
    pub password: Option<String>,
    pub read_server_log: bool,
    /// The host name records carry.
    pub host: String,
}

pub struct PgConnector {
    settings: PgSettings,
    kinds: Vec<SourceKind>,
}

const LOCK_WAITS: &str = "\
SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'),
       w.pid, b.pid,
       coalesce((SELECT l.relation::regclass::text FROM pg_locks l
                  WHERE l.pid = w.pid AND l.locktype = 'relation' AND l.relation >= 16384
                  ORDER BY l.granted, l.mode LIMIT 1), ''),
       coalesce((SELECT l.mode FROM pg_locks l WHERE l.pid = w.pid AND NOT l.granted LIMIT 1), ''),
       coalesce(w.query, ''), coalesce(b.query, ''),
       coalesce(extract(epoch FROM now() - b.xact_start), 0)::bigint,
       coalesce(extract(epoch FROM now() - w.query_start), 0)::bigint,
       coalesce(b.state, ''), coalesce(w.application_name, ''), coalesce(b.application_name, '')
  FROM pg_stat_activity w
  CROSS JOIN LATERAL unnest(pg_blocking_pids(w.pid)) AS blocker(pid)
  JOIN pg_stat_activity b ON b.pid = blocker.pid
 WHERE w.wait_event_type = 'Lock' AND w.datname = current_database()";

const TRANSACTIONS: &str = "\
SELECT to_char(a.xact_start AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'),
       a.pid, coalesce(a.application_name, ''), coalesce(a.backend_xid::text, ''),
       coalesce(a.state, ''),
       to_char(coalesce(a.query_start, a.xact_start) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'),
       coalesce(a.query, ''),
       coalesce((SELECT string_agg(l.relation::regclass::text || '=' || l.mode, ',' ORDER BY l.relation)
                   FROM pg_locks l
                  WHERE l.pid = a.pid AND l.granted AND l.locktype = 'relation'
                    AND l.relation >= 16384 AND l.mode <> 'AccessShareLock'), '')
  FROM pg_stat_activity a
 WHERE a.xact_start IS NOT NULL AND a.pid <> pg_backend_pid()
   AND a.backend_type = 'client backend' AND a.datname = current_database()";

const RUNNING: &str = "\
SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'),
       coalesce(application_name, ''), coalesce(query, ''),
       (extract(epoch FROM now() - query_start) * 1000)::bigint,
       coalesce(wait_event_type, '')
  FROM pg_stat_activity
 WHERE state = 'active' AND pid <> pg_backend_pid() AND backend_type = 'client backend'
   AND query_start IS NOT NULL AND datname = current_database()";

/// Connection use against the usable slots (max_connections less the reserved ones) and
/// the database's cumulative counters from `pg_stat_database`.
const DATABASE_STATS: &str = "\
SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'),
       d.datname, d.numbackends,
       (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'),
       current_setting('max_connections')::int,
       current_setting('superuser_reserved_connections')::int
         + coalesce(current_setting('reserved_connections', true)::int, 0),
       d.deadlocks, d.xact_commit, d.xact_rollback, d.temp_bytes,
       coalesce(to_char(d.stats_reset AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), '')
  FROM pg_stat_database d
 WHERE d.datname = current_database()";

/// Whether this database has pg_stat_statements installed.
const HAS_STATEMENTS: &str =
    "SELECT count(*) FROM pg_extension WHERE extname = 'pg_stat_statements'";

/// This database's slowest statements by mean time since the statistics were reset
/// (PostgreSQL 13+ column names).
const TOP_STATEMENTS: &str = "\
SELECT left(s.query, 500), s.calls, round(s.mean_exec_time)::bigint,
       round(s.rows::numeric / s.calls, 1),
       ((s.shared_blks_hit + s.shared_blks_read) / s.calls)::bigint
  FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
 WHERE d.datname = current_database() AND s.calls > 0
 ORDER BY s.mean_exec_time DESC
 LIMIT 5";

const SERVER_LOG: &str = "\
SELECT pg_read_file(f, greatest((pg_stat_file(f)).size - 4194304, 0), 4194304)
  FROM (SELECT pg_current_logfile('jsonlog') AS f) AS current
 WHERE f IS NOT NULL";

impl PgConnector {
    pub fn new(settings: PgSettings) -> PgConnector {
        let mut kinds = vec![
            SourceKind::LockWaits,
            SourceKind::Transactions,
            SourceKind::SlowQueries,
            SourceKind::DbStats,
        ];
        if settings.read_server_log {
            kinds.extend([SourceKind::PgLog, SourceKind::Changes]);
        }
        PgConnector { settings, kinds }
    }

    fn connect(&self) -> Result<Client, String> {
        let mut config: postgres::Config = self
            .settings
            .dsn
            .parse()
            .map_err(|err| format!("bad dsn: {err}"))?;
        if let Some(password) = &self.settings.password {
            config.password(password);
        }
        config
            .application_name("warden-diagnostics")
            .connect_timeout(Duration::from_secs(5))
            .options(
                "-c default_transaction_read_only=on -c statement_timeout=5000 \
                 -c lock_timeout=1000 -c idle_in_transaction_session_timeout=10000",
            );
        config
            .connect(NoTls)
            .map_err(|err| format!("cannot connect: {}", describe(&err)))
    }

    /// The database the dsn names.
    fn database(&self) -> Option<String> {
        let config: postgres::Config = self.settings.dsn.parse().ok()?;
        config.get_dbname().map(str::to_owned)
    }

    fn rows(&self, sql: &str) -> Result<Vec<Vec<String>>, String> {
        Self::rows_on(&mut self.connect()?, sql)
    }

    /// The rows `sql` returns on an open session, as text.
    fn rows_on(client: &mut Client, sql: &str) -> Result<Vec<Vec<String>>, String> {
        let messages = client
            .simple_query(sql)
            .map_err(|err| format!("query failed: {}", describe(&err)))?;
        Ok(messages
            .into_iter()
            .filter_map(|message| match message {
                SimpleQueryMessage::Row(row) => Some(
                    (0..row.len())
                        .map(|i| row.get(i).unwrap_or("").to_owned())
                        .collect(),
                ),
                _ => None,
            })
            .collect())
    }

    fn lock_waits(&self) -> Result<Vec<(i64, Value)>, String> {
        Ok(self
            .rows(LOCK_WAITS)?
            .into_iter()
            .filter_map(|r| {
                let ts = parse_rfc3339(&r[0])?;
                Some((
                    ts,
                    json!({
                        "ts": r[0], "waiting_pid": int(&r[1]), "blocking_pid": int(&r[2]),
                        "relation": r[3], "lock_mode": r[4], "waiting_query": r[5],
                        "blocking_query": r[6], "blocking_xact_age_s": int(&r[7]),
                        "waiting_s": int(&r[8]), "blocking_state": r[9],
                        "waiting_service": r[10], "blocking_service": r[11],
                    }),
                ))
            })
            .collect())
    }

    fn transactions(&self) -> Result<Vec<(i64, Value)>, String> {
        Ok(self
            .rows(TRANSACTIONS)?
            .into_iter()
            .filter_map(|r| {
                let ts = parse_rfc3339(&r[0])?;
                // What the transaction holds, one statement entry per locked relation (the
                // views keep only the last statement's text).
                let statements: Vec<Value> = r[7]
                    .split(',')
                    .filter_map(|held| held.split_once('='))
                    .map(|(relation, mode)| {
                        json!({"ts": r[5], "sql": r[6], "relation": relation, "lock_mode": mode})
                    })
                    .collect();
                let statements = if statements.is_empty() {
                    vec![json!({"ts": r[5], "sql": r[6], "relation": "", "lock_mode": ""})]
                } else {
                    statements
                };
                Some((
                    ts,
                    json!({
                        "ts": r[0], "pid": int(&r[1]), "service": r[2], "xact_id": r[3],
                        "state": r[4], "statements": statements,
                    }),
                ))
            })
            .collect())
    }

    /// Statements running for over half a second now, and slow statements the server
    /// logged (`log_min_duration_statement`), with the lock wait it logged for them
    /// (`log_lock_waits`: "acquired … after N ms").
    fn slow_queries(&self) -> Result<Vec<(i64, Value)>, String> {
        let mut out: Vec<(i64, Value)> = self
            .rows(RUNNING)?
            .into_iter()
            .filter(|r| int(&r[3]) >= RUNNING_SLOW_MS)
            .filter_map(|r| {
                let ts = parse_rfc3339(&r[0])?;
                let duration = int(&r[3]);
                let waiting = if r[4] == "Lock" { duration } else { 0 };
                Some((
                    ts,
                    json!({"ts": r[0], "service": r[1], "query": r[2], "duration_ms": duration,
                           "rows": 0, "lock_wait_ms": waiting, "running": true}),
                ))
            })
            .collect();
        if self.settings.read_server_log {
            out.extend(slow_from_log(&self.server_log()?));
        }
        Ok(out)
    }

    /// One sample of the server's connection use and this database's counters, with its
    /// slowest statements when pg_stat_statements is installed (cumulative since the
    /// statistics were reset, so context for people rather than evidence of the window).
    fn database_stats(&self) -> Result<Vec<(i64, Value)>, String> {
        // One session for the sample and its statements: the server may be short of
        // connection slots, which is when this sample matters.
        let mut client = self.connect()?;
        let rows = Self::rows_on(&mut client, DATABASE_STATS)?;
        let Some(r) = rows.first() else {
            return Ok(Vec::new());
        };
        let Some(ts) = parse_rfc3339(&r[0]) else {
            return Ok(Vec::new());
        };
        let (backends, max, reserved) = (int(&r[3]), int(&r[4]), int(&r[5]));
        let usable = (max - reserved).max(1);
        let used_pct = (backends as f64 * 1000.0 / usable as f64).round() / 10.0;
        let mut sample = json!({
            "ts": r[0], "host": self.settings.host, "database": r[1],
            "backends": int(&r[2]), "server_backends": backends, "max_connections": max,
            "reserved_connections": reserved, "connections_used_pct": used_pct,
            "deadlocks": int(&r[6]), "xact_commit": int(&r[7]), "xact_rollback": int(&r[8]),
            "temp_bytes": int(&r[9]), "stats_reset": r[10],
        });
        match Self::top_statements(&mut client) {
            Ok(Some(statements)) => sample["top_statements"] = json!(statements),
            Ok(None) => {}
            Err(err) => sample["top_statements_error"] = json!(err),
        }
        Ok(vec![(ts, sample)])
    }

    /// `None` when pg_stat_statements is not installed in this database.
    fn top_statements(client: &mut Client) -> Result<Option<Vec<Value>>, String> {
        let installed = Self::rows_on(client, HAS_STATEMENTS)?;
        if installed.first().is_none_or(|r| int(&r[0]) == 0) {
            return Ok(None);
        }
        let statements = Self::rows_on(client, TOP_STATEMENTS)?
            .into_iter()
            .map(|r| {
                json!({"query": r[0], "calls": int(&r[1]), "mean_ms": int(&r[2]),
                       "rows_per_call": r[3].parse::<f64>().unwrap_or(0.0),
                       "blocks_per_call": int(&r[4])})
            })
            .collect();
        Ok(Some(statements))
    }

    fn server_log(&self) -> Result<Vec<(i64, Value)>, String> {
        let rows = self.rows(SERVER_LOG)?;
        let Some(text) = rows.first().and_then(|r| r.first()) else {
            return Err("the server writes no jsonlog (log_destination = 'jsonlog')".to_owned());
        };
        let mut lines: Vec<&str> = text.lines().collect();
        if text.len() as i64 >= LOG_TAIL_BYTES && !lines.is_empty() {
            lines.remove(0);
        }
        // The server log holds every database's lines: keep this database's and the
        // server's own (checkpoints, reloads), so that each registered database is read
        // for its own incidents only.
        let database = self.database();
        Ok(lines
            .into_iter()
            .filter_map(|line| pg_jsonlog::record(line, &self.settings.host))
            .filter(|(_, fields)| {
                fields
                    .get("dbname")
                    .and_then(Value::as_str)
                    .is_none_or(|db| Some(db) == database.as_deref())
            })
            .collect())
    }

    /// Settings changed by a reload ("parameter \"max_connections\" changed to \"50\"")
    /// as changes on the database host.
    fn setting_changes(&self) -> Result<Vec<(i64, Value)>, String> {
        Ok(self
            .server_log()?
            .into_iter()
            .filter_map(|(ts, fields)| {
                let message = fields["message"].as_str()?;
                let rest = message.strip_prefix("parameter \"")?;
                let (name, _) = rest.split_once('"')?;
                message.contains("changed to").then(|| {
                    (
                        ts,
                        json!({
                            "ts": fields["ts"], "id": format!("pg-setting-{name}-{ts}"),
                            "kind": "config", "service": self.settings.host,
                            "summary": message, "details": "PostgreSQL configuration reload",
                        }),
                    )
                })
            })
            .collect())
    }

    /// Connects, reads one view, and attempts a write that must be refused.
    fn probe(&self) -> Result<String, String> {
        let mut client = self.connect()?;
        client
            .simple_query("SELECT count(*) FROM pg_stat_activity")
            .map_err(|err| format!("cannot read pg_stat_activity: {}", describe(&err)))?;
        match client.simple_query("CREATE TEMPORARY TABLE warden_write_probe (x int)") {
            Ok(_) => Err("a write was NOT refused: the session is not read-only".to_owned()),
            Err(err) if err.code() == Some(&SqlState::READ_ONLY_SQL_TRANSACTION) => {
                Ok("connected; reads pg_stat_activity; a write was refused (read-only)".to_owned())
            }
            Err(err) => Ok(format!(
                "connected; reads pg_stat_activity; a write was refused ({})",
                describe(&err)
            )),
        }
    }
}

fn int(text: &str) -> i64 {
    text.trim().parse::<f64>().map(|v| v as i64).unwrap_or(0)
}

/// The server's message for a database error, the error itself otherwise.
fn describe(err: &postgres::Error) -> String {
    match err.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => err.to_string(),
    }
}

/// Slow statements in the server log, each with the lock wait its backend logged just
/// before it.
fn slow_from_log(log: &[(i64, Value)]) -> Vec<(i64, Value)> {
    let mut waited: BTreeMap<i64, f64> = BTreeMap::new();
    let mut out = Vec::new();
    for (ts, fields) in log {
        let message = fields["message"].as_str().unwrap_or("");
        let pid = fields["pid"].as_i64().unwrap_or(0);
        if let Some(ms) = message
            .split_once(" after ")
            .filter(|(head, _)| head.contains("acquired"))
            .and_then(|(_, tail)| tail.trim_end_matches(" ms").trim().parse::<f64>().ok())
        {
            waited.insert(pid, ms);
            continue;
        }
        let Some(rest) = message.strip_prefix("duration: ") else {
            continue;
        };
        let Some((ms, statement)) = rest.split_once(" ms") else {
            continue;
        };
        let Ok(duration) = ms.trim().parse::<f64>() else {
            continue;
        };
        let query = statement
            .trim_start_matches(|c: char| c == ' ' || c == ':')
            .trim_start_matches("statement:")
            .trim_start_matches("execute ")
            .trim();
        let query = fields["statement"].as_str().unwrap_or(query);
        out.push((
            *ts,
            json!({
                "ts": fields["ts"], "service": fields["application_name"].as_str().unwrap_or(""),
                "query": query, "duration_ms": duration, "rows": 0,
                "lock_wait_ms": waited.remove(&pid).unwrap_or(0.0).min(duration),
            }),
        ));
    }
    out
}

impl Connector for PgConnector {
    fn name(&self) -> &str {
        &self.settings.name
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
        let found = match kind {
            SourceKind::LockWaits => self.lock_waits()?,
            SourceKind::Transactions => self.transactions()?,
            SourceKind::SlowQueries => self.slow_queries()?,
            SourceKind::DbStats => self.database_stats()?,
            SourceKind::PgLog if self.settings.read_server_log => self.server_log()?,
            SourceKind::Changes if self.settings.read_server_log => self.setting_changes()?,
            _ => Vec::new(),
        };
        Ok(answer(found, start, end))
    }

    fn health(&self) -> Health {
        let (ok, detail) = match self.probe() {
            Ok(detail) => (!detail.contains("NOT refused"), detail),
            Err(err) => (false, err),
        };
        Health {
            name: self.settings.name.clone(),
            kind: "postgres".to_owned(),
            ok,
            detail,
            provides: self.kinds.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_statements_in_the_log_carry_the_lock_wait_logged_before_them() {
        let line = |ts: i64, pid: i64, message: &str| {
            (
                ts,
                json!({"ts": "t", "pid": pid, "message": message, "application_name": "orders"}),
            )
        };
        let log = vec![
            line(
                1,
                7,
                "process 7 acquired ShareLock on transaction 9 after 4012.5 ms",
            ),
            line(
                2,
                8,
                "duration: 3358.441 ms  statement: SELECT * FROM claims WHERE id = 1",
            ),
            line(
                3,
                7,
                "duration: 4100.000 ms  statement: UPDATE seats SET held = true",
            ),
            line(4, 8, "connection received: host=10.0.0.1"),
        ];
        let slow = slow_from_log(&log);
        assert_eq!(slow.len(), 2);
        assert_eq!(slow[0].1["duration_ms"], 3358.441);
        assert_eq!(slow[0].1["lock_wait_ms"], 0.0);
        assert_eq!(slow[0].1["query"], "SELECT * FROM claims WHERE id = 1");
        assert_eq!(slow[1].1["lock_wait_ms"], 4012.5);
        assert_eq!(slow[1].1["service"], "orders");
    }
}
