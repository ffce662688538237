//! Scenario packs: a folder holding `scenario.json` (the alert, the time window, the list of
//! sources) and `sources/` (one file per source). Loading checks the scenario strictly (exact
//! fields, RFC 3339 times, a window that does not run backwards, known source names, each
//! listed file present and each present file listed) so a broken pack fails at load with a
//! message naming the problem. The ground truth beside it is the scorer's; never read here.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::source::{PackSource, SourceKind};
use crate::timefmt::{format_rfc3339, parse_rfc3339};

/// The scenario file of a pack.
pub const SCENARIO_FILE: &str = "scenario.json";
/// Largest `scenario.json` read.
const MAX_SCENARIO_BYTES: u64 = 1024 * 1024;
/// The languages a scenario may be written in.
pub const LANGS: [&str; 2] = ["en", "zh"];

/// A loaded scenario pack.
#[derive(Debug, Clone, PartialEq)]
pub struct ScenarioPack {
    dir: PathBuf,
    pub scenario: Scenario,
}

/// `scenario.json`, times in seconds since the epoch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scenario {
    pub id: String,
    pub title: String,
    /// `en` or `zh`.
    pub lang: String,
    pub alert: Alert,
    pub window: Window,
    /// File stems of the sources present (`pg_log`, `nginx_error`, …).
    pub sources: Vec<String>,
}

/// The alert that opened the incident.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alert {
    pub name: String,
    pub service: String,
    pub severity: String,
    pub summary: String,
    pub labels: BTreeMap<String, String>,
    pub starts_at: i64,
}

/// The incident's time window, bounds included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Window {
    pub start: i64,
    pub end: i64,
}

/// Why a pack does not load. `path` is the file (or folder) at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PackError {
    #[error("{}: not found (a scenario pack needs a scenario.json)", path.display())]
    MissingScenario { path: PathBuf },
    #[error("cannot read {}: {message}", path.display())]
    Read { path: PathBuf, message: String },
    #[error("{}: bad JSON: {message}", path.display())]
    Json { path: PathBuf, message: String },
    #[error("{}: `{field}` is not an RFC 3339 time: {value:?}", path.display())]
    BadTime {
        path: PathBuf,
        field: &'static str,
        value: String,
    },
    #[error("{}: the window ends ({end}) before it starts ({start})", path.display())]
    WindowReversed {
        path: PathBuf,
        start: String,
        end: String,
    },
    #[error("{}: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
    #[error("{}: unknown source {name:?} in `sources` (known: {known})", path.display())]
    UnknownSource {
        path: PathBuf,
        name: String,
        known: String,
    },
    #[error("{}: source {name:?} is listed but its file is missing", path.display())]
    MissingSource { path: PathBuf, name: String },
    #[error("{}: present but {name:?} is not listed in scenario.json `sources`", path.display())]
    UnlistedSource { path: PathBuf, name: String },
}

impl ScenarioPack {
    /// Loads and checks the pack in `dir`.
    pub fn load(dir: &Path) -> Result<ScenarioPack, PackError> {
        let path = dir.join(SCENARIO_FILE);
        let text = read_scenario(&path)?;
        let raw: RawScenario = serde_json::from_str(&text).map_err(|err| PackError::Json {
            path: path.clone(),
            message: err.to_string(),
        })?;
        let scenario = raw.check(&path)?;
        check_source_files(dir, &path, &scenario.sources)?;
        Ok(ScenarioPack {
            dir: dir.to_owned(),
            scenario,
        })
    }

    /// The pack's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The pack's sources, read lazily.
    pub fn source(&self) -> PackSource {
        PackSource::new(&self.dir)
    }
}

fn read_scenario(path: &Path) -> Result<String, PackError> {
    let read_error = |err: std::io::Error| PackError::Read {
        path: path.to_owned(),
        message: err.to_string(),
    };
    let file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == ErrorKind::NotFound => {
            return Err(PackError::MissingScenario {
                path: path.to_owned(),
            })
        }
        Err(err) => return Err(read_error(err)),
    };
    let mut text = String::new();
    file.take(MAX_SCENARIO_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(read_error)?;
    if text.len() as u64 > MAX_SCENARIO_BYTES {
        return Err(PackError::Invalid {
            path: path.to_owned(),
            message: format!("larger than {MAX_SCENARIO_BYTES} bytes"),
        });
    }
    Ok(text)
}

/// Each listed source names a known kind once and has its file; each source file present
/// is listed.
fn check_source_files(dir: &Path, path: &Path, listed: &[String]) -> Result<(), PackError> {
    let mut kinds = BTreeSet::new();
    for name in listed {
        let kind = SourceKind::from_name(name).ok_or_else(|| PackError::UnknownSource {
            path: path.to_owned(),
            name: name.clone(),
            known: SourceKind::ALL.map(SourceKind::as_str).join(", "),
        })?;
        if !kinds.insert(kind) {
            return Err(PackError::Invalid {
                path: path.to_owned(),
                message: format!("source {name:?} is listed twice"),
            });
        }
    }
    let sources = PackSource::new(dir);
    for kind in SourceKind::ALL {
        let file = sources.path(kind);
        match (kinds.contains(&kind), file.is_file()) {
            (true, false) => {
                return Err(PackError::MissingSource {
                    path: file,
                    name: kind.as_str().to_owned(),
                })
            }
            (false, true) => {
                return Err(PackError::UnlistedSource {
                    path: file,
                    name: kind.as_str().to_owned(),
                })
            }
            _ => {}
        }
    }
    Ok(())
}

/// `scenario.json` as written, times as text.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    id: String,
    title: String,
    lang: String,
    alert: RawAlert,
    window: RawWindow,
    sources: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAlert {
    name: String,
    service: String,
    severity: String,
    summary: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    starts_at: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWindow {
    start: String,
    end: String,
}

impl RawScenario {
    fn check(self, path: &Path) -> Result<Scenario, PackError> {
        let invalid = |message: String| PackError::Invalid {
            path: path.to_owned(),
            message,
        };
        if self.id.trim().is_empty() {
            return Err(invalid("`id` is empty".to_owned()));
        }
        if !LANGS.contains(&self.lang.as_str()) {
            return Err(invalid(format!(
                "`lang` is {:?}; expected \"en\" or \"zh\"",
                self.lang
            )));
        }
        let time = |field: &'static str, value: &str| {
            parse_rfc3339(value).ok_or_else(|| PackError::BadTime {
                path: path.to_owned(),
                field,
                value: value.to_owned(),
            })
        };
        let starts_at = time("alert.starts_at", &self.alert.starts_at)?;
        let window = Window {
            start: time("window.start", &self.window.start)?,
            end: time("window.end", &self.window.end)?,
        };
        if window.end < window.start {
            return Err(PackError::WindowReversed {
                path: path.to_owned(),
                start: format_rfc3339(window.start),
                end: format_rfc3339(window.end),
            });
        }
        Ok(Scenario {
            id: self.id,
            title: self.title,
            lang: self.lang,
            alert: Alert {
                name: self.alert.name,
                service: self.alert.service,
                severity: self.alert.severity,
                summary: self.alert.summary,
                labels: self.alert.labels,
                starts_at,
            },
            window,
            sources: self.sources,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use serde_json::{json, Value};

    use super::*;
    use crate::diagnostics::source::{DiagnosticSource, SourceRecords};

    fn scenario() -> Value {
        json!({
            "id": "pg-deadlock-01", "title": "Orders deadlock", "lang": "en",
            "alert": {"name": "OrderErrors", "service": "order-service", "severity": "critical",
                      "summary": "5xx on /orders", "labels": {"team": "orders"},
                      "starts_at": "2026-03-14T09:12:00Z"},
            "window": {"start": "2026-03-14T09:00:00Z", "end": "2026-03-14T09:30:00+00:00"},
            "sources": ["app_log"]
        })
    }

    fn write_pack(scenario: &Value, files: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(SCENARIO_FILE), scenario.to_string()).unwrap();
        fs::create_dir(dir.path().join("sources")).unwrap();
        for name in files {
            fs::write(
                dir.path().join("sources").join(name),
                "{\"ts\":\"2026-03-14T09:10:00Z\",\"service\":\"order-service\",\"level\":\"ERROR\",\"message\":\"boom\"}\n",
            )
            .unwrap();
        }
        dir
    }

    fn load_error(scenario: &Value, files: &[&str]) -> String {
        let dir = write_pack(scenario, files);
        ScenarioPack::load(dir.path()).unwrap_err().to_string()
    }

    #[test]
    fn a_good_pack_loads_with_times_in_seconds() {
        let dir = write_pack(&scenario(), &["app_log.jsonl"]);
        fs::write(dir.path().join("sources/README.md"), "notes").unwrap();
        let pack = ScenarioPack::load(dir.path()).unwrap();
        let scenario = &pack.scenario;
        assert_eq!(scenario.id, "pg-deadlock-01");
        assert_eq!(
            scenario.alert.starts_at,
            parse_rfc3339("2026-03-14T09:12:00Z").unwrap()
        );
        assert_eq!(scenario.window.end - scenario.window.start, 1800);
        assert_eq!(scenario.alert.labels["team"], "orders");
        assert_eq!(scenario.sources, ["app_log"]);
        assert_eq!(pack.dir(), dir.path());
        let SourceRecords::Records(records) = pack
            .source()
            .records(SourceKind::AppLog, None, None)
            .unwrap()
        else {
            panic!("app_log unavailable")
        };
        assert_eq!(records.len(), 1);
    }

    #[test]
    fn a_missing_scenario_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let error = ScenarioPack::load(dir.path()).unwrap_err();
        assert!(matches!(error, PackError::MissingScenario { .. }));
        assert!(
            error.to_string().contains("scenario.json: not found"),
            "{error}"
        );
        let error = ScenarioPack::load(&dir.path().join("nowhere")).unwrap_err();
        assert!(matches!(error, PackError::MissingScenario { .. }));
    }

    #[test]
    fn bad_scenarios_are_refused_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(SCENARIO_FILE), "{ not json").unwrap();
        let error = ScenarioPack::load(dir.path()).unwrap_err().to_string();
        assert!(error.contains("bad JSON"), "{error}");

        let mut bad_time = scenario();
        bad_time["window"]["start"] = json!("2026-03-14 09:00");
        let error = load_error(&bad_time, &["app_log.jsonl"]);
        assert!(
            error.contains("`window.start` is not an RFC 3339 time"),
            "{error}"
        );

        let mut bad_alert_time = scenario();
        bad_alert_time["alert"]["starts_at"] = json!("2026-02-30T00:00:00Z");
        let error = load_error(&bad_alert_time, &["app_log.jsonl"]);
        assert!(error.contains("`alert.starts_at`"), "{error}");

        let mut reversed = scenario();
        reversed["window"]["end"] = json!("2026-03-14T08:59:59Z");
        let error = load_error(&reversed, &["app_log.jsonl"]);
        assert!(
            error.contains(
                "the window ends (2026-03-14T08:59:59Z) before it starts (2026-03-14T09:00:00Z)"
            ),
            "{error}"
        );

        let mut lang = scenario();
        lang["lang"] = json!("fr");
        assert!(load_error(&lang, &["app_log.jsonl"]).contains("`lang` is \"fr\""));

        let mut extra = scenario();
        extra["alert"]["startsAt"] = json!("2026-03-14T09:12:00Z");
        let error = load_error(&extra, &["app_log.jsonl"]);
        assert!(error.contains("unknown field `startsAt`"), "{error}");

        let mut missing_field = scenario();
        missing_field.as_object_mut().unwrap().remove("window");
        let error = load_error(&missing_field, &["app_log.jsonl"]);
        assert!(error.contains("missing field `window`"), "{error}");
    }

    #[test]
    fn source_lists_must_match_the_files() {
        let error = load_error(&scenario(), &[]);
        assert!(
            error.contains("app_log.jsonl: source \"app_log\" is listed but its file is missing"),
            "{error}"
        );

        let mut unknown = scenario();
        unknown["sources"] = json!(["app_log", "kafka_lag"]);
        let error = load_error(&unknown, &["app_log.jsonl"]);
        assert!(error.contains("unknown source \"kafka_lag\""), "{error}");
        assert!(error.contains("known: pg_log, lock_waits"), "{error}");

        let mut twice = scenario();
        twice["sources"] = json!(["app_log", "app_log"]);
        assert!(load_error(&twice, &["app_log.jsonl"]).contains("listed twice"));

        let error = load_error(&scenario(), &["app_log.jsonl", "pg_log.jsonl"]);
        assert!(
            error.contains("pg_log.jsonl: present but \"pg_log\" is not listed"),
            "{error}"
        );
    }
}
