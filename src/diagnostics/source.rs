//! The source layer of incident diagnostics: the ten kinds of data a diagnosis may read
//! (`SourceKind`, named by their file stems), the `DiagnosticSource` trait that answers
//! "records of this source in this time range", and `PackSource`, its implementation over a
//! scenario pack's `sources/` folder (JSON Lines with an RFC 3339 `ts` on every record,
//! plus nginx's plain-text error log). The live connectors (`live/`) implement the same trait.
//! Never interprets the records beyond their time: filtering and shaping are the tools'.

use std::fmt;
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::nginx_error;
use crate::timefmt::parse_rfc3339;

/// Largest source file a pack may hold.
pub const MAX_SOURCE_FILE_BYTES: u64 = 32 * 1024 * 1024;
/// Longest line of a source file.
pub const MAX_SOURCE_LINE_BYTES: usize = 64 * 1024;

/// Something that holds diagnostic data: a scenario pack today, live systems later.
pub trait DiagnosticSource: Send + Sync {
    /// Records of one source whose ts is in [start, end] (None = unbounded), in file order.
    fn records(
        &self,
        source: SourceKind,
        start: Option<i64>,
        end: Option<i64>,
    ) -> Result<SourceRecords, SourceError>;
}

/// A kind of diagnostic data; `as_str()` is its file stem and its name everywhere else
/// (evidence items, ground truth).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    PgLog,
    LockWaits,
    Transactions,
    SlowQueries,
    PoolMetrics,
    AppLog,
    NginxAccess,
    NginxError,
    Changes,
    HostMetrics,
    DbStats,
}

impl SourceKind {
    /// Every kind, in a fixed order.
    pub const ALL: [SourceKind; 11] = [
        SourceKind::PgLog,
        SourceKind::LockWaits,
        SourceKind::Transactions,
        SourceKind::SlowQueries,
        SourceKind::PoolMetrics,
        SourceKind::AppLog,
        SourceKind::NginxAccess,
        SourceKind::NginxError,
        SourceKind::Changes,
        SourceKind::HostMetrics,
        SourceKind::DbStats,
    ];

    /// The file stem: `pg_log`, `lock_waits`, …
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::PgLog => "pg_log",
            SourceKind::LockWaits => "lock_waits",
            SourceKind::Transactions => "transactions",
            SourceKind::SlowQueries => "slow_queries",
            SourceKind::PoolMetrics => "pool_metrics",
            SourceKind::AppLog => "app_log",
            SourceKind::NginxAccess => "nginx_access",
            SourceKind::NginxError => "nginx_error",
            SourceKind::Changes => "changes",
            SourceKind::HostMetrics => "host_metrics",
            SourceKind::DbStats => "db_stats",
        }
    }

    /// The file name in a pack's `sources/` folder: `<stem>.jsonl`, or `nginx_error.log`.
    pub fn file_name(self) -> String {
        match self {
            SourceKind::NginxError => "nginx_error.log".to_owned(),
            other => format!("{}.jsonl", other.as_str()),
        }
    }

    /// The kind whose file stem is `name`.
    pub fn from_name(name: &str) -> Option<SourceKind> {
        SourceKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == name)
    }

    fn index(self) -> usize {
        SourceKind::ALL
            .iter()
            .position(|&kind| kind == self)
            .unwrap_or_default()
    }
}

impl fmt::Display for SourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SourceKind {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        SourceKind::from_name(name).ok_or_else(|| format!("unknown source `{name}`"))
    }
}

/// What a source holds for a request.
#[derive(Debug, Clone, PartialEq)]
pub enum SourceRecords {
    /// This source is not available here (a pack without its file, a connector not set up).
    Unavailable,
    /// The records in the range, in source order.
    Records(Vec<SourceRecord>),
}

/// One record of a source.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceRecord {
    /// Seconds since the epoch.
    pub ts: i64,
    /// The record exactly as the source holds it (one JSON line, one log line).
    pub raw: String,
    /// The parsed record, a JSON object.
    pub fields: Value,
}

/// A source that exists but cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    #[error("cannot read {}: {message}", path.display())]
    Read { path: PathBuf, message: String },
    #[error("{} is larger than {limit} bytes", path.display())]
    TooLarge { path: PathBuf, limit: u64 },
    #[error("{} line {line}: longer than {limit} bytes", path.display())]
    LineTooLong {
        path: PathBuf,
        line: usize,
        limit: usize,
    },
    #[error("{} line {line}: {message}", path.display())]
    Malformed {
        path: PathBuf,
        line: usize,
        message: String,
    },
    /// Every live connector that holds this source failed.
    #[error("the live source cannot be read: {message}")]
    Connector { message: String },
}

/// A file's records once read: `None` when the file is absent.
type Loaded = Result<Option<Arc<[SourceRecord]>>, SourceError>;

/// The sources of a scenario pack: `<pack>/sources/<file>`, each file read on first use
/// and kept. An absent file is `Unavailable`; a malformed one is an error naming the file
/// and line (packs are test inputs and must be right).
pub struct PackSource {
    sources_dir: PathBuf,
    loaded: [OnceLock<Loaded>; SourceKind::ALL.len()],
}

impl PackSource {
    /// The sources of the pack in `pack_dir` (its `sources/` folder).
    pub fn new(pack_dir: &Path) -> PackSource {
        PackSource {
            sources_dir: pack_dir.join("sources"),
            loaded: std::array::from_fn(|_| OnceLock::new()),
        }
    }

    /// The path of a source's file.
    pub fn path(&self, source: SourceKind) -> PathBuf {
        self.sources_dir.join(source.file_name())
    }

    fn load(&self, source: SourceKind) -> &Loaded {
        self.loaded[source.index()].get_or_init(|| read_source(&self.path(source), source))
    }
}

impl fmt::Debug for PackSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PackSource")
            .field("sources_dir", &self.sources_dir)
            .finish_non_exhaustive()
    }
}

impl DiagnosticSource for PackSource {
    fn records(
        &self,
        source: SourceKind,
        start: Option<i64>,
        end: Option<i64>,
    ) -> Result<SourceRecords, SourceError> {
        let Some(records) = self.load(source).clone()? else {
            return Ok(SourceRecords::Unavailable);
        };
        let in_range = |ts: i64| start.is_none_or(|s| ts >= s) && end.is_none_or(|e| ts <= e);
        Ok(SourceRecords::Records(
            records
                .iter()
                .filter(|record| in_range(record.ts))
                .cloned()
                .collect(),
        ))
    }
}

/// Reads and parses one source file; `Ok(None)` when it does not exist.
fn read_source(path: &Path, source: SourceKind) -> Loaded {
    let read_error = |err: std::io::Error| SourceError::Read {
        path: path.to_owned(),
        message: err.to_string(),
    };
    let file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(read_error(err)),
    };
    let mut bytes = Vec::new();
    file.take(MAX_SOURCE_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > MAX_SOURCE_FILE_BYTES {
        return Err(SourceError::TooLarge {
            path: path.to_owned(),
            limit: MAX_SOURCE_FILE_BYTES,
        });
    }
    let mut records = Vec::new();
    for (index, line) in bytes.split(|&b| b == b'\n').enumerate() {
        let line_number = index + 1;
        let malformed = |message: String| SourceError::Malformed {
            path: path.to_owned(),
            line: line_number,
            message,
        };
        if line.len() > MAX_SOURCE_LINE_BYTES {
            return Err(SourceError::LineTooLong {
                path: path.to_owned(),
                line: line_number,
                limit: MAX_SOURCE_LINE_BYTES,
            });
        }
        let line =
            std::str::from_utf8(line).map_err(|_| malformed("not valid UTF-8".to_owned()))?;
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.trim().is_empty() {
            continue;
        }
        records.push(parse_record(source, line).map_err(malformed)?);
    }
    Ok(Some(records.into()))
}

/// One line of a source file as a record.
fn parse_record(source: SourceKind, line: &str) -> Result<SourceRecord, String> {
    if source == SourceKind::NginxError {
        let parsed = nginx_error::parse_line(line).map_err(|err| err.to_string())?;
        return Ok(SourceRecord {
            ts: parsed.ts,
            raw: line.to_owned(),
            fields: parsed.fields(),
        });
    }
    let fields: Value =
        serde_json::from_str(line).map_err(|err| format!("not a JSON object: {err}"))?;
    if !fields.is_object() {
        return Err("not a JSON object".to_owned());
    }
    let ts = match fields.get("ts") {
        None => return Err("the record has no `ts`".to_owned()),
        Some(Value::String(text)) => {
            parse_rfc3339(text).ok_or_else(|| format!("`ts` is not an RFC 3339 time: {text}"))?
        }
        Some(other) => return Err(format!("`ts` must be an RFC 3339 string, not {other}")),
    };
    Ok(SourceRecord {
        ts,
        raw: line.to_owned(),
        fields,
    })
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    fn pack_with(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("sources")).unwrap();
        for (name, text) in files {
            fs::write(dir.path().join("sources").join(name), text).unwrap();
        }
        dir
    }

    fn records(source: &PackSource, kind: SourceKind) -> Result<Vec<SourceRecord>, SourceError> {
        match source.records(kind, None, None)? {
            SourceRecords::Records(records) => Ok(records),
            SourceRecords::Unavailable => panic!("{kind} unavailable"),
        }
    }

    #[test]
    fn kinds_round_trip_through_their_names() {
        for kind in SourceKind::ALL {
            assert_eq!(SourceKind::from_name(kind.as_str()), Some(kind));
            assert_eq!(kind.as_str().parse::<SourceKind>(), Ok(kind));
            assert_eq!(
                serde_json::to_value(kind).unwrap(),
                Value::String(kind.as_str().to_owned())
            );
            assert_eq!(
                kind.index(),
                SourceKind::ALL.iter().position(|&k| k == kind).unwrap()
            );
        }
        assert_eq!(SourceKind::NginxError.file_name(), "nginx_error.log");
        assert_eq!(SourceKind::PgLog.file_name(), "pg_log.jsonl");
        assert!("pg_logs".parse::<SourceKind>().is_err());
    }

    #[test]
    fn records_come_in_file_order_within_the_range() {
        let dir = pack_with(&[(
            "app_log.jsonl",
            "{\"ts\":\"2026-03-14T09:00:05Z\",\"message\":\"b\"}\r\n\n{\"ts\":\"2026-03-14T09:00:01Z\",\"message\":\"a\"}\n{\"ts\":\"2026-03-14T09:00:09.5+00:00\",\"message\":\"c\"}\n",
        )]);
        let source = PackSource::new(dir.path());
        let all = records(&source, SourceKind::AppLog).unwrap();
        let messages: Vec<_> = all.iter().map(|r| r.fields["message"].clone()).collect();
        assert_eq!(messages, ["b", "a", "c"]);
        assert_eq!(
            all[0].raw,
            "{\"ts\":\"2026-03-14T09:00:05Z\",\"message\":\"b\"}"
        );
        let start = parse_rfc3339("2026-03-14T09:00:05Z");
        let end = parse_rfc3339("2026-03-14T09:00:09Z");
        let SourceRecords::Records(ranged) =
            source.records(SourceKind::AppLog, start, end).unwrap()
        else {
            panic!("unavailable")
        };
        assert_eq!(ranged.len(), 2, "bounds are inclusive: {ranged:?}");
        assert_eq!(
            source.records(SourceKind::PgLog, None, None).unwrap(),
            SourceRecords::Unavailable
        );
    }

    #[test]
    fn malformed_files_name_the_file_and_line() {
        for (name, text, expected) in [
            (
                "pg_log.jsonl",
                "{\"ts\":\"2026-03-14T09:00:05Z\"}\nnot json\n",
                "pg_log.jsonl line 2: not a JSON object",
            ),
            ("pg_log.jsonl", "[1]\n", "line 1: not a JSON object"),
            (
                "pg_log.jsonl",
                "{\"message\":\"x\"}\n",
                "line 1: the record has no `ts`",
            ),
            (
                "pg_log.jsonl",
                "\n{\"ts\":\"yesterday\"}\n",
                "line 2: `ts` is not an RFC 3339 time",
            ),
            (
                "pg_log.jsonl",
                "{\"ts\":17}\n",
                "line 1: `ts` must be an RFC 3339 string",
            ),
            (
                "nginx_error.log",
                "2026/03/14 09:00:00 [error] 1#1: ok\ngarbage\n",
                "nginx_error.log line 2: expected a `YYYY/MM/DD",
            ),
        ] {
            let dir = pack_with(&[(name, text)]);
            let source = PackSource::new(dir.path());
            let kind = SourceKind::from_name(name.split('.').next().unwrap()).unwrap();
            let error = source.records(kind, None, None).unwrap_err().to_string();
            assert!(error.contains(expected), "{error}");
            // The error is kept: a second call answers the same.
            assert_eq!(
                source.records(kind, None, None).unwrap_err().to_string(),
                error
            );
        }
        let dir = pack_with(&[]);
        fs::write(dir.path().join("sources/app_log.jsonl"), b"\xff\xfe\n").unwrap();
        let error = PackSource::new(dir.path())
            .records(SourceKind::AppLog, None, None)
            .unwrap_err();
        assert!(
            error.to_string().contains("line 1: not valid UTF-8"),
            "{error}"
        );
    }

    #[test]
    fn overlong_lines_are_refused() {
        let long = format!(
            "{{\"ts\":\"2026-03-14T09:00:05Z\",\"message\":\"{}\"}}\n",
            "x".repeat(MAX_SOURCE_LINE_BYTES)
        );
        let dir = pack_with(&[("app_log.jsonl", &long)]);
        let error = PackSource::new(dir.path())
            .records(SourceKind::AppLog, None, None)
            .unwrap_err();
        assert!(
            matches!(error, SourceError::LineTooLong { line: 1, .. }),
            "{error}"
        );
    }

    #[test]
    fn nginx_error_lines_become_records() {
        let dir = pack_with(&[(
            "nginx_error.log",
            "2026/03/14 09:12:03 [error] 2211#2211: *8812 upstream timed out (110: Connection timed out) while reading response header from upstream, client: 10.0.3.7, server: api, request: \"POST /orders HTTP/1.1\", upstream: \"http://10.0.5.21:8080/orders\", host: \"api\"\n",
        )]);
        let source = PackSource::new(dir.path());
        let all = records(&source, SourceKind::NginxError).unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].ts, parse_rfc3339("2026-03-14T09:12:03Z").unwrap());
        assert_eq!(all[0].fields["upstream"], "http://10.0.5.21:8080/orders");
        assert!(all[0].raw.starts_with("2026/03/14 09:12:03 [error]"));
    }
}
