//! The source registry: a TOML file whose `[[diagnostics.sources]]` tables name the live
//! systems (PostgreSQL, Prometheus, log files) a diagnosis may read — their kind, address, where their credentials come from
//! (an environment variable or a file, never the config itself) and which services they
//! serve — and the folders log files may be read from. Parsing checks everything a
//! connector relies on, so a bad entry stops the server with its name and the reason.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::log_files::{LogFileConnector, LogFormat};
use super::postgres::{PgConnector, PgSettings};
use super::prometheus::{PrometheusConnector, METRIC_FIELDS};
use super::{Connector, LiveSource};

/// A registry file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {}: {message}", path.display())]
    Read { path: PathBuf, message: String },
    #[error("{}: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    diagnostics: Option<DiagnosticsSection>,
    /// Read by `warden eval diagnostics --live`, ignored elsewhere.
    #[serde(default)]
    live_eval: Option<toml::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DiagnosticsSection {
    /// Folders log files may be read from; a log source outside them is refused.
    #[serde(default)]
    allowed_roots: Vec<PathBuf>,
    #[serde(default)]
    sources: Vec<SourceEntry>,
}

/// One `[[diagnostics.sources]]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceEntry {
    pub name: String,
    /// `postgres`, `prometheus` or `log_file`.
    pub kind: String,
    /// PostgreSQL: a libpq key=value connection string without the password.
    pub dsn: Option<String>,
    /// Prometheus: its base URL (`http://prometheus.internal:9090`).
    pub url: Option<String>,
    /// Prometheus: PromQL replacing the playbooks' query for a field, by the field it
    /// fills (a site whose metric names differ).
    #[serde(default)]
    pub queries: BTreeMap<String, String>,
    /// The environment variable holding the password (Prometheus: a bearer token).
    pub password_env: Option<String>,
    /// A file holding the password (first line).
    pub password_file: Option<PathBuf>,
    /// PostgreSQL: read the server log through `pg_read_file` (needs that grant).
    #[serde(default)]
    pub read_server_log: bool,
    /// PostgreSQL: the host name its records carry (default: the entry's name).
    pub host: Option<String>,
    /// log_file: the file.
    pub path: Option<PathBuf>,
    /// log_file: `app_jsonl`, `nginx_error`, `nginx_access_jsonl`, `changes_jsonl`,
    /// `pg_jsonlog`, `journald_json`.
    pub format: Option<String>,
    /// log_file: the service lines without their own `service` are filed under.
    pub service: Option<String>,
    /// Services (or alert labels' `service`) this source is read for; empty: every one.
    #[serde(default)]
    pub services: Vec<String>,
    /// Alert labels an incident must carry, each with this value, for this source to be
    /// read for it (`{ env = "prod", cluster = "eu-1" }`); empty: no condition.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// Whether `entry` is registered for `service` (None: any).
fn serves(entry: &SourceEntry, service: Option<&str>) -> bool {
    entry.services.is_empty() || service.is_none_or(|s| entry.services.iter().any(|x| x == s))
}

/// A parsed registry: the entries and the connectors built from them.
pub struct Registry {
    pub entries: Vec<SourceEntry>,
    pub allowed_roots: Vec<PathBuf>,
    pub live_eval: Option<toml::Value>,
    /// The playbooks' PromQL by record field.
    pub metric_queries: BTreeMap<String, String>,
}

impl Registry {
    /// Reads and checks the registry in `path`; Prometheus sources run `metric_queries`
    /// (the playbooks' PromQL by record field) unless an entry replaces one.
    pub fn load(
        path: &Path,
        metric_queries: &BTreeMap<String, String>,
    ) -> Result<Registry, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|err| ConfigError::Read {
            path: path.to_owned(),
            message: err.to_string(),
        })?;
        let mut registry = Registry::parse(path, &text)?;
        registry.metric_queries = metric_queries.clone();
        // Every entry must open now (a log file outside the allowed roots, a missing
        // credential): the server refuses to start rather than fail each diagnosis later.
        registry
            .connect(None)
            .map_err(|message| ConfigError::Invalid {
                path: path.to_owned(),
                message,
            })?;
        Ok(registry)
    }

    fn parse(path: &Path, text: &str) -> Result<Registry, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            path: path.to_owned(),
            message,
        };
        let file: File = toml::from_str(text).map_err(|err| invalid(err.to_string()))?;
        let section = file.diagnostics.unwrap_or_default();
        let mut roots = Vec::new();
        for root in &section.allowed_roots {
            let canonical = std::fs::canonicalize(root)
                .map_err(|err| invalid(format!("allowed root {}: {err}", root.display())))?;
            roots.push(canonical);
        }
        let mut names: BTreeMap<&str, ()> = BTreeMap::new();
        for entry in &section.sources {
            if entry.name.trim().is_empty() {
                return Err(invalid("a source has an empty name".to_owned()));
            }
            if names.insert(&entry.name, ()).is_some() {
                return Err(invalid(format!("two sources are named `{}`", entry.name)));
            }
            check_entry(entry)
                .map_err(|message| invalid(format!("source `{}`: {message}", entry.name)))?;
        }
        Ok(Registry {
            entries: section.sources,
            allowed_roots: roots,
            live_eval: file.live_eval,
            metric_queries: BTreeMap::new(),
        })
    }

    /// The connectors registered for `service` (None: every source), whatever their
    /// label conditions — for reading sources outside a diagnosis.
    pub fn connect(&self, service: Option<&str>) -> Result<LiveSource, String> {
        self.connect_where(|entry| serves(entry, service))
    }

    /// The connectors for a diagnosis of an incident of `service` whose alert carries
    /// `labels`: an entry is read when its `services` name the service (or are empty) and
    /// the alert has each of its `labels` with the same value.
    pub fn connect_for(
        &self,
        service: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<LiveSource, String> {
        self.connect_where(|entry| {
            serves(entry, Some(service))
                && entry
                    .labels
                    .iter()
                    .all(|(name, value)| labels.get(name) == Some(value))
        })
    }

    fn connect_where(&self, keep: impl Fn(&SourceEntry) -> bool) -> Result<LiveSource, String> {
        let mut connectors: Vec<Box<dyn Connector>> = Vec::new();
        for entry in self.entries.iter().filter(|entry| keep(entry)) {
            connectors.push(self.connect_one(entry)?);
        }
        Ok(LiveSource::new(connectors))
    }

    /// The connector of one entry.
    pub fn connect_one(&self, entry: &SourceEntry) -> Result<Box<dyn Connector>, String> {
        let named = |message: String| format!("source `{}`: {message}", entry.name);
        match entry.kind.as_str() {
            "postgres" => {
                let password = password(entry).map_err(named)?;
                Ok(Box::new(PgConnector::new(PgSettings {
                    name: entry.name.clone(),
                    dsn: entry.dsn.clone().unwrap_or_default(),
                    password,
                    read_server_log: entry.read_server_log,
                    host: entry.host.clone().unwrap_or_else(|| entry.name.clone()),
                })))
            }
            "prometheus" => {
                let mut queries = self.metric_queries.clone();
                queries.extend(entry.queries.clone());
                Ok(Box::new(PrometheusConnector::new(
                    &entry.name,
                    entry.url.as_deref().unwrap_or_default(),
                    password(entry).map_err(named)?,
                    queries,
                )))
            }
            _ => {
                let path = entry.path.clone().unwrap_or_default();
                let format = entry
                    .format
                    .as_deref()
                    .and_then(LogFormat::parse)
                    .ok_or_else(|| named("unknown log format".to_owned()))?;
                let connector = LogFileConnector::open(
                    &entry.name,
                    &path,
                    format,
                    entry.service.clone(),
                    &self.allowed_roots,
                )
                .map_err(named)?;
                Ok(Box::new(connector))
            }
        }
    }
}

fn check_entry(entry: &SourceEntry) -> Result<(), String> {
    match entry.kind.as_str() {
        "postgres" => {
            let dsn = entry.dsn.as_deref().unwrap_or("");
            if dsn.trim().is_empty() {
                return Err("a postgres source needs `dsn`".to_owned());
            }
            if dsn.to_lowercase().contains("password") {
                return Err(
                    "put the password in `password_env` or `password_file`, not in `dsn`"
                        .to_owned(),
                );
            }
            if entry.path.is_some() || entry.format.is_some() {
                return Err("`path` and `format` are for log_file sources".to_owned());
            }
            Ok(())
        }
        "prometheus" => {
            let url = entry.url.as_deref().unwrap_or("");
            if !url.starts_with("http://") {
                return Err("a prometheus source needs `url` (http://host:port)".to_owned());
            }
            if let Some(unknown) = entry
                .queries
                .keys()
                .find(|k| !METRIC_FIELDS.contains(&k.as_str()))
            {
                return Err(format!(
                    "unknown query `{unknown}` (use {})",
                    METRIC_FIELDS.join(", ")
                ));
            }
            Ok(())
        }
        "log_file" => {
            if entry.path.is_none() {
                return Err("a log_file source needs `path`".to_owned());
            }
            match entry.format.as_deref().map(LogFormat::parse) {
                Some(Some(_)) => Ok(()),
                _ => Err(format!(
                    "`format` must be one of {}",
                    LogFormat::NAMES.join(", ")
                )),
            }
        }
        other => Err(format!("unknown kind `{other}` (use postgres or log_file)")),
    }
}

fn password(entry: &SourceEntry) -> Result<Option<String>, String> {
    if let Some(var) = &entry.password_env {
        return std::env::var(var)
            .map(Some)
            .map_err(|_| format!("the environment variable `{var}` is not set"));
    }
    if let Some(file) = &entry.password_file {
        let text = std::fs::read_to_string(file)
            .map_err(|err| format!("cannot read {}: {err}", file.display()))?;
        return Ok(Some(text.lines().next().unwrap_or("").to_owned()));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Registry, ConfigError> {
        Registry::parse(Path::new("sources.toml"), text)
    }

    #[test]
    fn entries_are_checked_with_their_name() {
        let cases = [
            ("[[diagnostics.sources]]\nname = \"db\"\nkind = \"postgres\"\n", "needs `dsn`"),
            (
                "[[diagnostics.sources]]\nname = \"db\"\nkind = \"postgres\"\ndsn = \"host=x password=y\"\n",
                "password_env",
            ),
            ("[[diagnostics.sources]]\nname = \"x\"\nkind = \"redis\"\n", "unknown kind"),
            (
                "[[diagnostics.sources]]\nname = \"l\"\nkind = \"log_file\"\npath = \"/x\"\nformat = \"csv\"\n",
                "`format` must be one of",
            ),
            (
                "[[diagnostics.sources]]\nname = \"a\"\nkind = \"log_file\"\npath = \"/x\"\nformat = \"app_jsonl\"\n[[diagnostics.sources]]\nname = \"a\"\nkind = \"log_file\"\npath = \"/y\"\nformat = \"app_jsonl\"\n",
                "two sources are named `a`",
            ),
            ("[diagnostics]\nsurprise = 1\n", "unknown field"),
        ];
        for (text, expected) in cases {
            let err = parse(text).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn a_log_file_outside_the_allowed_roots_is_refused() {
        let root = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("tempdir");
        let file = outside.path().join("app.jsonl");
        std::fs::write(&file, "").expect("write");
        let text = format!(
            "[diagnostics]\nallowed_roots = [{:?}]\n[[diagnostics.sources]]\nname = \"app\"\nkind = \"log_file\"\npath = {:?}\nformat = \"app_jsonl\"\n",
            root.path(),
            file
        );
        let registry = parse(&text).expect("parses");
        let err = registry.connect(None).err().unwrap_or_default();
        assert!(err.contains("outside the allowed roots"), "{err}");
    }

    #[test]
    fn sources_are_picked_by_service() {
        let root = tempfile::tempdir().expect("tempdir");
        for name in ["a.jsonl", "b.jsonl"] {
            std::fs::write(root.path().join(name), "").expect("write");
        }
        let text = format!(
            "[diagnostics]\nallowed_roots = [{root:?}]\n\
             [[diagnostics.sources]]\nname = \"a\"\nkind = \"log_file\"\npath = {:?}\nformat = \"app_jsonl\"\nservices = [\"orders\"]\n\
             [[diagnostics.sources]]\nname = \"b\"\nkind = \"log_file\"\npath = {:?}\nformat = \"changes_jsonl\"\n",
            root.path().join("a.jsonl"),
            root.path().join("b.jsonl"),
            root = root.path(),
        );
        let registry = parse(&text).expect("parses");
        let names = |service: Option<&str>| -> Vec<String> {
            registry
                .connect(service)
                .expect("connects")
                .health()
                .into_iter()
                .map(|h| h.name)
                .collect()
        };
        assert_eq!(names(Some("orders")), ["a", "b"]);
        assert_eq!(names(Some("billing")), ["b"]);
        assert_eq!(names(None), ["a", "b"]);
    }

    #[test]
    fn an_incidents_alert_labels_pick_the_sources_that_ask_for_them() {
        let root = tempfile::tempdir().expect("tempdir");
        for name in ["prod.jsonl", "staging.jsonl", "any.jsonl"] {
            std::fs::write(root.path().join(name), "").expect("write");
        }
        let entry = |name: &str, labels: &str| {
            format!(
                "[[diagnostics.sources]]\nname = \"{name}\"\nkind = \"log_file\"\npath = {:?}\nformat = \"app_jsonl\"\nlabels = {labels}\n",
                root.path().join(format!("{name}.jsonl"))
            )
        };
        let text = format!(
            "[diagnostics]\nallowed_roots = [{:?}]\n{}{}{}",
            root.path(),
            entry("prod", "{ env = \"prod\", cluster = \"eu-1\" }"),
            entry("staging", "{ env = \"staging\" }"),
            entry("any", "{}"),
        );
        let registry = parse(&text).expect("parses");
        let names = |labels: &[(&str, &str)]| -> Vec<String> {
            let labels: BTreeMap<String, String> = labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            let live = registry.connect_for("orders", &labels).expect("connects");
            live.health().into_iter().map(|h| h.name).collect()
        };
        assert_eq!(
            names(&[("env", "prod"), ("cluster", "eu-1")]),
            ["prod", "any"]
        );
        assert_eq!(names(&[("env", "prod")]), ["any"], "every label must match");
        assert_eq!(
            names(&[("env", "staging"), ("team", "x")]),
            ["staging", "any"]
        );
        assert_eq!(names(&[]), ["any"]);
    }
}
