//! Log files as a live source: a file under the registry's allowed roots, tailed (its last
//! few MiB) on each request and filtered to the requested time range. Each format maps
//! onto one pack source: application JSON lines and journald's JSON export → `app_log`,
//! nginx's error log → `nginx_error`, JSON access lines → `nginx_access`, a change log →
//! `changes`, PostgreSQL's jsonlog → `pg_log`. Lines that do not parse are skipped (a live
//! log is not a test input); every string is masked.
//!
//! The file is reached the way knowledge-base folders are (`safe_open`): its allowed root
//! is pinned by device and inode when the registry loads, and every read opens the file
//! relative to that root, one component at a time, never following a symlink, and reads it
//! only when the opened handle is a regular file. A FIFO, socket or device placed under the
//! root is refused at once (it is opened non-blocking), and a file swapped for a symlink
//! after the registry loaded is never followed out of the root.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::{answer, pg_jsonlog, Connector, Health};
use crate::diagnostics::nginx_error;
use crate::diagnostics::source::{SourceKind, SourceRecord};
use crate::retrieval::safe_open::{FileIdentity, RootDir};
use crate::timefmt::{format_rfc3339, parse_rfc3339};

/// How much of a file's end is read per request.
pub const MAX_TAIL_BYTES: u64 = 8 * 1024 * 1024;

/// What a log file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    AppJsonl,
    JournaldJson,
    NginxError,
    NginxAccessJsonl,
    ChangesJsonl,
    PgJsonlog,
}

impl LogFormat {
    pub const NAMES: [&'static str; 6] = [
        "app_jsonl",
        "journald_json",
        "nginx_error",
        "nginx_access_jsonl",
        "changes_jsonl",
        "pg_jsonlog",
    ];

    pub fn parse(name: &str) -> Option<LogFormat> {
        Some(match name {
            "app_jsonl" => LogFormat::AppJsonl,
            "journald_json" => LogFormat::JournaldJson,
            "nginx_error" => LogFormat::NginxError,
            "nginx_access_jsonl" => LogFormat::NginxAccessJsonl,
            "changes_jsonl" => LogFormat::ChangesJsonl,
            "pg_jsonlog" => LogFormat::PgJsonlog,
            _ => return None,
        })
    }

    fn kind(self) -> SourceKind {
        match self {
            LogFormat::AppJsonl | LogFormat::JournaldJson => SourceKind::AppLog,
            LogFormat::NginxError => SourceKind::NginxError,
            LogFormat::NginxAccessJsonl => SourceKind::NginxAccess,
            LogFormat::ChangesJsonl => SourceKind::Changes,
            LogFormat::PgJsonlog => SourceKind::PgLog,
        }
    }
}

/// One log file.
pub struct LogFileConnector {
    name: String,
    /// The file's path as resolved when the registry loaded (for messages).
    path: PathBuf,
    /// The allowed root the file lies under, and its identity when the registry loaded.
    root: PathBuf,
    root_identity: FileIdentity,
    /// The file's path below `root`, names separated by `/`.
    relative: String,
    format: LogFormat,
    service: Option<String>,
    kinds: [SourceKind; 1],
}

impl LogFileConnector {
    /// The file at `path`, which must lie under one of `roots` (symbolic links resolved).
    pub fn open(
        name: &str,
        path: &Path,
        format: LogFormat,
        service: Option<String>,
        roots: &[PathBuf],
    ) -> Result<LogFileConnector, String> {
        let (Some(parent), Some(file_name)) = (path.parent(), path.file_name()) else {
            return Err(format!("{} is not a file path", path.display()));
        };
        let parent =
            std::fs::canonicalize(parent).map_err(|err| format!("{}: {err}", parent.display()))?;
        let resolved = match std::fs::canonicalize(path) {
            Ok(real) => real,
            Err(_) => parent.join(file_name),
        };
        let outside = || {
            format!(
                "{} is outside the allowed roots (`allowed_roots`)",
                path.display()
            )
        };
        let root = roots
            .iter()
            .filter(|root| resolved.starts_with(root))
            .max_by_key(|root| root.components().count())
            .ok_or_else(outside)?;
        let relative = resolved
            .strip_prefix(root)
            .ok()
            .and_then(Path::to_str)
            .filter(|relative| !relative.is_empty())
            .ok_or_else(outside)?
            .to_owned();
        let root_identity = RootDir::open(root)
            .map_err(|err| format!("allowed root: {err}"))?
            .identity();
        Ok(LogFileConnector {
            name: name.to_owned(),
            path: resolved.clone(),
            root: root.clone(),
            root_identity,
            relative,
            format,
            service,
            kinds: [format.kind()],
        })
    }

    /// Opens the file through its pinned root; refuses anything but a regular file.
    fn open_file(&self) -> Result<File, String> {
        RootDir::open_pinned(&self.root, self.root_identity)
            .map_err(|err| err.to_string())?
            .open_file(&self.relative)
            .map_err(|refusal| format!("{}: {refusal}", self.path.display()))
    }

    fn tail(&self) -> Result<String, String> {
        let mut file = self.open_file()?;
        let size = file
            .metadata()
            .map_err(|err| format!("{}: {err}", self.path.display()))?
            .len();
        let from = size.saturating_sub(MAX_TAIL_BYTES);
        file.seek(SeekFrom::Start(from))
            .map_err(|err| format!("{}: {err}", self.path.display()))?;
        let mut bytes = Vec::new();
        file.take(MAX_TAIL_BYTES)
            .read_to_end(&mut bytes)
            .map_err(|err| format!("{}: {err}", self.path.display()))?;
        let mut text = String::from_utf8_lossy(&bytes).into_owned();
        if from > 0 {
            // The first line was cut by the tail: drop it.
            text = text
                .split_once('\n')
                .map(|(_, rest)| rest.to_owned())
                .unwrap_or_default();
        }
        Ok(text)
    }

    fn record(&self, line: &str) -> Option<(i64, Value)> {
        match self.format {
            LogFormat::PgJsonlog => pg_jsonlog::record(line, &self.name),
            LogFormat::NginxError => {
                let parsed = nginx_error::parse_line(line).ok()?;
                let mut fields = parsed.fields();
                fields["ts"] = json!(format_rfc3339(parsed.ts));
                Some((parsed.ts, fields))
            }
            LogFormat::JournaldJson => journald(line, self.service.as_deref()),
            LogFormat::AppJsonl => app_line(line, self.service.as_deref()),
            LogFormat::NginxAccessJsonl | LogFormat::ChangesJsonl => {
                let fields: Value = serde_json::from_str(line).ok()?;
                let ts = parse_rfc3339(fields.get("ts")?.as_str()?)?;
                fields.is_object().then_some((ts, fields))
            }
        }
    }
}

/// An application's JSON line: `ts`/`time`/`timestamp`/`@timestamp`, `message`/`msg`,
/// `level`/`severity`, `service` (or the configured one).
fn app_line(line: &str, service: Option<&str>) -> Option<(i64, Value)> {
    let entry: Value = serde_json::from_str(line).ok()?;
    let pick = |keys: &[&str]| -> Option<String> {
        keys.iter()
            .find_map(|k| entry.get(*k).and_then(Value::as_str))
            .map(str::to_owned)
    };
    let ts = parse_rfc3339(&pick(&["ts", "time", "timestamp", "@timestamp"])?)?;
    let mut fields = json!({
        "ts": format_rfc3339(ts),
        "service": pick(&["service", "app", "logger_name"])
            .or_else(|| service.map(str::to_owned))
            .unwrap_or_default(),
        "level": pick(&["level", "severity", "lvl"]).unwrap_or_default().to_uppercase(),
        "message": pick(&["message", "msg"])?,
    });
    if let Some(trace) = pick(&["trace_id", "traceId"]) {
        fields["trace_id"] = json!(trace);
    }
    Some((ts, fields))
}

/// A `journalctl -o json` line.
fn journald(line: &str, service: Option<&str>) -> Option<(i64, Value)> {
    let entry: Value = serde_json::from_str(line).ok()?;
    let text = |key: &str| entry.get(key).and_then(Value::as_str);
    let micros: i64 = text("__REALTIME_TIMESTAMP")?.parse().ok()?;
    let ts = micros / 1_000_000;
    let unit = text("_SYSTEMD_UNIT")
        .or_else(|| text("SYSLOG_IDENTIFIER"))
        .map(|u| u.trim_end_matches(".service").to_owned());
    let level = match text("PRIORITY").and_then(|p| p.parse::<u8>().ok()) {
        Some(0..=3) => "ERROR",
        Some(4) => "WARN",
        Some(7) => "DEBUG",
        _ => "INFO",
    };
    Some((
        ts,
        json!({
            "ts": format_rfc3339(ts),
            "service": service.map(str::to_owned).or(unit).unwrap_or_default(),
            "level": level,
            "message": text("MESSAGE")?,
        }),
    ))
}

impl Connector for LogFileConnector {
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
        if kind != self.format.kind() {
            return Ok(Vec::new());
        }
        let text = self.tail()?;
        let found = text.lines().filter_map(|line| self.record(line)).collect();
        Ok(answer(found, start, end))
    }

    fn health(&self) -> Health {
        let (ok, detail) = match self.open_file().and_then(|file| {
            file.metadata()
                .map_err(|err| format!("{}: {err}", self.path.display()))
        }) {
            Ok(meta) => (true, format!("{} bytes", meta.len())),
            Err(err) => (false, err),
        };
        Health {
            name: self.name.clone(),
            kind: "log_file".to_owned(),
            ok,
            detail,
            provides: self.kinds.to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connector(dir: &Path, format: LogFormat, body: &str) -> LogFileConnector {
        let path = dir.join("log");
        std::fs::write(&path, body).expect("write");
        let root = std::fs::canonicalize(dir).expect("root");
        LogFileConnector::open("logs", &path, format, Some("orders".into()), &[root])
            .expect("opens")
    }

    #[test]
    fn application_lines_are_read_in_range_and_masked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let body = concat!(
            "{\"time\":\"2026-12-06T10:00:00Z\",\"msg\":\"old\",\"level\":\"info\"}\n",
            "not json\n",
            "{\"ts\":\"2026-12-06T10:05:00Z\",\"message\":\"login failed password=hunter2\",\"level\":\"warn\"}\n",
        );
        let logs = connector(dir.path(), LogFormat::AppJsonl, body);
        let start = parse_rfc3339("2026-12-06T10:01:00Z");
        let records = logs
            .records(SourceKind::AppLog, start, None)
            .expect("records");
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].fields["service"], "orders");
        assert_eq!(records[0].fields["level"], "WARN");
        let message = records[0].fields["message"].as_str().unwrap_or("");
        assert!(!message.contains("hunter2"), "{message}");
        assert!(!records[0].raw.contains("hunter2"));
        assert!(logs
            .records(SourceKind::PgLog, None, None)
            .expect("other kinds")
            .is_empty());
    }

    #[test]
    fn journald_and_nginx_lines_are_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let journal = connector(
            dir.path(),
            LogFormat::JournaldJson,
            "{\"__REALTIME_TIMESTAMP\":\"1796551200000000\",\"MESSAGE\":\"Out of memory: Killed process 812 (java)\",\"PRIORITY\":\"3\",\"_SYSTEMD_UNIT\":\"orders.service\"}\n",
        );
        let records = journal
            .records(SourceKind::AppLog, None, None)
            .expect("records");
        assert_eq!(records[0].fields["level"], "ERROR");
        assert_eq!(records[0].ts, 1_796_551_200);
        let dir = tempfile::tempdir().expect("tempdir");
        let nginx = connector(
            dir.path(),
            LogFormat::NginxError,
            "2026/05/06 18:00:39 [error] 2211#2211: *88692 connect() failed (111: Connection refused) while connecting to upstream, client: 10.0.3.9, server: api, request: \"GET / HTTP/1.1\", upstream: \"http://10.0.5.32:8080/\", host: \"api\"\n",
        );
        let records = nginx
            .records(SourceKind::NginxError, None, None)
            .expect("records");
        assert_eq!(records.len(), 1);
        assert!(records[0].fields["message"]
            .as_str()
            .is_some_and(|m| m.contains("Connection refused")));
    }

    #[test]
    fn a_fifo_under_the_root_is_refused_without_blocking() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("app.log");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &path,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
            0,
        )
        .expect("mkfifo");
        let root = std::fs::canonicalize(dir.path()).expect("root");
        let logs = LogFileConnector::open("logs", &path, LogFormat::AppJsonl, None, &[root])
            .expect("opens");
        // With no writer, a blocking open of the FIFO would never return.
        let error = logs
            .records(SourceKind::AppLog, None, None)
            .expect_err("a FIFO is not read");
        assert!(error.contains("named pipe (FIFO): not read"), "{error}");
        assert!(!logs.health().ok);
    }

    #[test]
    fn a_log_swapped_for_a_symlink_out_of_the_root_is_not_followed() {
        let outside = tempfile::tempdir().expect("tempdir");
        let secret = outside.path().join("secret.log");
        std::fs::write(
            &secret,
            "{\"ts\":\"2026-12-06T10:05:00Z\",\"message\":\"outside\"}\n",
        )
        .expect("write");
        let dir = tempfile::tempdir().expect("tempdir");
        let logs = connector(
            dir.path(),
            LogFormat::AppJsonl,
            "{\"ts\":\"2026-12-06T10:05:00Z\",\"message\":\"inside\"}\n",
        );
        assert_eq!(
            logs.records(SourceKind::AppLog, None, None)
                .expect("read")
                .len(),
            1
        );
        std::fs::remove_file(dir.path().join("log")).expect("remove");
        std::os::unix::fs::symlink(&secret, dir.path().join("log")).expect("symlink");
        let error = logs
            .records(SourceKind::AppLog, None, None)
            .expect_err("the symlink is not followed");
        assert!(error.contains("symlink: not read"), "{error}");
    }
}
