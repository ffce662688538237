//! Diagnostic playbooks: Markdown files whose TOML front matter (between `+++` lines)
//! declares candidate hypotheses — the alert patterns that suggest each one, the
//! component it blames, and the tests that check it: a read-only tool with arguments, the
//! causal role the test looks for, and fact rules saying which typed facts support,
//! refute or set aside the hypothesis. The body is the human runbook. Loaded once and
//! validated whole: a playbook with an unknown tool, fact kind or bad pattern is an error,
//! not a silent gap.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::facts::{is_fact_kind, CausalRole};
use super::live::prometheus::METRIC_FIELDS;
use super::tools::tool_specs;

/// Largest playbook file read.
const MAX_PLAYBOOK_BYTES: u64 = 256 * 1024;

/// Placeholders a test's string arguments may use; resolved when the step runs.
pub const PLACEHOLDERS: [&str; 6] = [
    "$service",
    "$component",
    "$blocking_pids",
    "$window_start",
    "$window_end",
    "$lookback_start",
];

#[derive(Debug, thiserror::Error)]
pub enum PlaybookError {
    #[error("cannot read playbook {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("playbook {path}: {message}")]
    Invalid { path: String, message: String },
}

/// What the blamed component is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ComponentFrom {
    /// The alert's service.
    Service,
    /// The `upstream` of the facts that support the hypothesis.
    Upstream,
    /// The `host` of the facts that support the hypothesis.
    Host,
}

/// Where a test's evidence comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceDomain {
    Knowledge,
    Runtime,
    Log,
    Change,
}

/// What a matching fact does to the hypothesis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    Supports,
    Refutes,
    /// The phenomenon is there but outside this incident's causal chain.
    Inactivates,
}

/// Which records a rule looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowRule {
    /// Only facts inside the incident window (the default: an old line is a decoy).
    #[default]
    In,
    /// Inside the window or the two hours before it (precursors: a failed start).
    Recent,
    /// Any fact, wherever it falls.
    Any,
}

/// One fact rule of a test.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleDef {
    pub fact: String,
    pub effect: Effect,
    #[serde(default)]
    pub window: WindowRule,
    /// attribute → value (or list of accepted values), compared case-insensitively.
    #[serde(default)]
    pub equals: BTreeMap<String, Value>,
    /// attribute → lowest accepted number (inclusive).
    #[serde(default)]
    pub min: BTreeMap<String, f64>,
    /// attribute → highest accepted number (exclusive).
    #[serde(default)]
    pub below: BTreeMap<String, f64>,
    /// attribute → regular expression the text must match.
    #[serde(default)]
    pub matches: BTreeMap<String, String>,
    /// The fact's `service`/`host`/`upstream` must be the hypothesis' component.
    #[serde(default)]
    pub same_component: bool,
    /// For trigger facts: the trigger kind, or `from_change` to map the change's kind.
    #[serde(default)]
    pub trigger: Option<String>,
}

/// One test of a hypothesis: a tool call and what its facts mean.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestDef {
    /// Unique across all playbooks.
    pub id: String,
    pub tool: String,
    #[serde(default)]
    pub arguments: serde_json::Map<String, Value>,
    pub intent: CausalRole,
    pub domain: SourceDomain,
    /// The component the test looks at (for people: "database", "gateway", …).
    #[serde(default)]
    pub target: Option<String>,
    /// `refutes`: when the tool answered and no fact met a `supports` rule, the
    /// hypothesis is refuted (absence of the thing it must show).
    #[serde(default)]
    pub absent: Option<Effect>,
    #[serde(default, rename = "rule")]
    pub rules: Vec<RuleDef>,
}

/// A candidate root cause.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HypothesisDef {
    /// The mechanism id reported as the root cause.
    pub id: String,
    pub title: String,
    pub component: ComponentFrom,
    /// Patterns over the alert's name, summary and labels that make it a candidate.
    pub symptoms: Vec<String>,
    /// A one-line recovery note for people.
    #[serde(default)]
    pub recovery: Option<String>,
    #[serde(rename = "test")]
    pub tests: Vec<TestDef>,
}

/// A metric a playbook's tests read from a live Prometheus: the record field it fills and
/// the PromQL that reads it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricDef {
    /// One of the connector's fields (`disk_used_pct`, `pool_active`, …).
    pub field: String,
    pub promql: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FrontMatter {
    #[serde(rename = "hypothesis")]
    hypotheses: Vec<HypothesisDef>,
    #[serde(default, rename = "metric")]
    metrics: Vec<MetricDef>,
}

/// All playbooks, validated, with compiled patterns.
#[derive(Debug, Clone, Default)]
pub struct Playbooks {
    hypotheses: Vec<HypothesisDef>,
    /// PromQL by record field, from every playbook's `[[metric]]`.
    metrics: BTreeMap<String, String>,
    symptoms: Vec<Vec<Regex>>,
    patterns: BTreeMap<String, Regex>,
}

impl Playbooks {
    /// Reads every `*.md` playbook of `dir` (sorted by name). A missing folder gives no
    /// playbooks; a bad playbook is an error.
    pub fn load(dir: &Path) -> Result<Self, PlaybookError> {
        let mut paths: Vec<_> = match std::fs::read_dir(dir) {
            Ok(entries) => entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "md"))
                .collect(),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(source) => {
                return Err(PlaybookError::Io {
                    path: dir.display().to_string(),
                    source,
                })
            }
        };
        paths.sort();
        let mut texts = Vec::new();
        for path in paths {
            let shown = path.display().to_string();
            let size = std::fs::metadata(&path)
                .map_err(|source| PlaybookError::Io {
                    path: shown.clone(),
                    source,
                })?
                .len();
            if size > MAX_PLAYBOOK_BYTES {
                return Err(invalid(&shown, "the file is larger than 256 KiB"));
            }
            let text = std::fs::read_to_string(&path).map_err(|source| PlaybookError::Io {
                path: shown.clone(),
                source,
            })?;
            texts.push((shown, text));
        }
        Self::parse(&texts)
    }

    /// Parses (path, text) pairs: each text is a playbook file.
    pub fn parse(files: &[(String, String)]) -> Result<Self, PlaybookError> {
        let mut playbooks = Self::default();
        let mut test_ids = HashSet::new();
        for (path, text) in files {
            let front = front_matter(text).ok_or_else(|| {
                invalid(path, "no TOML front matter between `+++` lines at the top")
            })?;
            let parsed: FrontMatter =
                toml::from_str(front).map_err(|err| invalid(path, &err.to_string()))?;
            for hypothesis in parsed.hypotheses {
                playbooks.add(path, hypothesis, &mut test_ids)?;
            }
            for metric in parsed.metrics {
                playbooks.add_metric(path, metric)?;
            }
        }
        Ok(playbooks)
    }

    fn add(
        &mut self,
        path: &str,
        hypothesis: HypothesisDef,
        test_ids: &mut HashSet<String>,
    ) -> Result<(), PlaybookError> {
        if self.hypotheses.iter().any(|h| h.id == hypothesis.id) {
            return Err(invalid(
                path,
                &format!("hypothesis `{}` is defined twice", hypothesis.id),
            ));
        }
        if hypothesis.tests.is_empty() {
            return Err(invalid(
                path,
                &format!("hypothesis `{}` has no test", hypothesis.id),
            ));
        }
        let mut symptoms = Vec::new();
        for pattern in &hypothesis.symptoms {
            symptoms.push(compile(path, pattern)?);
        }
        let tools: HashSet<&str> = tool_specs().iter().map(|s| s.name).collect();
        for test in &hypothesis.tests {
            let at = format!("test `{}` of `{}`", test.id, hypothesis.id);
            if !test_ids.insert(test.id.clone()) {
                return Err(invalid(path, &format!("{at}: the test id is used twice")));
            }
            if !tools.contains(test.tool.as_str()) {
                return Err(invalid(
                    path,
                    &format!("{at}: unknown tool `{}`", test.tool),
                ));
            }
            let spec = tool_specs().iter().find(|spec| spec.name == test.tool);
            let names = spec.map(|spec| spec.argument_names()).unwrap_or_default();
            if let Some(unknown) = test.arguments.keys().find(|k| !names.contains(&k.as_str())) {
                return Err(invalid(
                    path,
                    &format!("{at}: `{}` takes no argument `{unknown}`", test.tool),
                ));
            }
            if !test.arguments.contains_key("start") || !test.arguments.contains_key("end") {
                return Err(invalid(
                    path,
                    &format!("{at}: give the test a time range (start and end, e.g. $lookback_start and $window_end)"),
                ));
            }
            for value in test.arguments.values() {
                if let Some(text) = value.as_str() {
                    if text.starts_with('$') && !PLACEHOLDERS.contains(&text) {
                        return Err(invalid(path, &format!("{at}: unknown placeholder {text}")));
                    }
                }
            }
            if test.absent == Some(Effect::Supports) {
                return Err(invalid(path, &format!("{at}: absence cannot support")));
            }
            for rule in &test.rules {
                if !is_fact_kind(&rule.fact) {
                    return Err(invalid(
                        path,
                        &format!("{at}: unknown fact `{}`", rule.fact),
                    ));
                }
                for pattern in rule.matches.values() {
                    let regex = compile(path, pattern)?;
                    self.patterns.insert(pattern.clone(), regex);
                }
                if let Some(trigger) = &rule.trigger {
                    if trigger != "from_change" && !TRIGGER_KINDS.contains(&trigger.as_str()) {
                        return Err(invalid(path, &format!("{at}: unknown trigger `{trigger}`")));
                    }
                }
            }
        }
        self.hypotheses.push(hypothesis);
        self.symptoms.push(symptoms);
        Ok(())
    }

    /// A field two playbooks query differently is an error: which one runs would depend
    /// on the file order.
    fn add_metric(&mut self, path: &str, metric: MetricDef) -> Result<(), PlaybookError> {
        if !METRIC_FIELDS.contains(&metric.field.as_str()) {
            return Err(invalid(
                path,
                &format!(
                    "unknown metric field `{}` (use {})",
                    metric.field,
                    METRIC_FIELDS.join(", ")
                ),
            ));
        }
        if metric.promql.trim().is_empty() {
            return Err(invalid(
                path,
                &format!("metric `{}` has no promql", metric.field),
            ));
        }
        match self.metrics.get(&metric.field) {
            Some(known) if *known != metric.promql => Err(invalid(
                path,
                &format!(
                    "metric `{}` is queried differently by another playbook",
                    metric.field
                ),
            )),
            _ => {
                self.metrics.insert(metric.field, metric.promql);
                Ok(())
            }
        }
    }

    /// The PromQL the playbooks declare, by the record field each fills.
    pub fn metric_queries(&self) -> &BTreeMap<String, String> {
        &self.metrics
    }

    pub fn hypotheses(&self) -> &[HypothesisDef] {
        &self.hypotheses
    }

    pub fn hypothesis(&self, id: &str) -> Option<&HypothesisDef> {
        self.hypotheses.iter().find(|h| h.id == id)
    }

    /// The test with this id and its hypothesis.
    pub fn test(&self, id: &str) -> Option<(&HypothesisDef, &TestDef)> {
        self.hypotheses
            .iter()
            .find_map(|h| h.tests.iter().find(|t| t.id == id).map(|t| (h, t)))
    }

    /// The hypotheses whose symptom patterns match `alert_text`; every hypothesis when
    /// none matches (an unfamiliar alert is investigated broadly, not skipped).
    pub fn candidates(&self, alert_text: &str) -> Vec<&HypothesisDef> {
        let matched: Vec<_> = self
            .hypotheses
            .iter()
            .zip(&self.symptoms)
            .filter(|(_, patterns)| patterns.iter().any(|p| p.is_match(alert_text)))
            .map(|(h, _)| h)
            .collect();
        if matched.is_empty() {
            self.hypotheses.iter().collect()
        } else {
            matched
        }
    }

    /// The compiled form of a rule's pattern (always present for loaded playbooks).
    pub fn pattern(&self, pattern: &str) -> Option<&Regex> {
        self.patterns.get(pattern)
    }
}

/// The trigger kinds a root cause may have.
pub const TRIGGER_KINDS: [&str; 8] = [
    "lock_order",
    "long_transaction",
    "deploy",
    "config_change",
    "external_dependency",
    "job_failure",
    "resource_growth",
    "traffic_spike",
];

fn compile(path: &str, pattern: &str) -> Result<Regex, PlaybookError> {
    regex::RegexBuilder::new(pattern)
        .size_limit(1 << 20)
        .build()
        .map_err(|err| invalid(path, &format!("bad pattern `{pattern}`: {err}")))
}

fn invalid(path: &str, message: &str) -> PlaybookError {
    PlaybookError::Invalid {
        path: path.to_owned(),
        message: message.to_owned(),
    }
}

/// The TOML between a leading `+++` line and the next `+++` line.
fn front_matter(text: &str) -> Option<&str> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let rest = text
        .strip_prefix("+++\n")
        .or_else(|| text.strip_prefix("+++\r\n"))?;
    let end = rest
        .match_indices("+++")
        .find(|(at, _)| *at == 0 || rest[..*at].ends_with('\n'))?
        .0;
    Some(&rest[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"+++
[[hypothesis]]
id = "disk_full"
title = "A disk filled up"
component = "host"
symptoms = ["(?i)disk", "磁盘"]

[[hypothesis.test]]
id = "disk-usage"
tool = "host_metrics"
arguments = { start = "$window_start", end = "$window_end" }
intent = "mechanism"
domain = "runtime"
absent = "refutes"

[[hypothesis.test.rule]]
fact = "disk_usage"
effect = "supports"
min = { used_pct = 98 }
+++
# Disk full
"#;

    fn one(text: &str) -> Result<Playbooks, PlaybookError> {
        Playbooks::parse(&[("p.md".to_owned(), text.to_owned())])
    }

    #[test]
    fn a_playbook_parses_and_matches_symptoms() {
        let books = one(GOOD).expect("parses");
        assert_eq!(books.hypotheses().len(), 1);
        assert_eq!(books.candidates("磁盘使用率 99%").len(), 1);
        let (h, t) = books.test("disk-usage").expect("test");
        assert_eq!(h.id, "disk_full");
        assert_eq!(t.rules[0].min["used_pct"], 98.0);
        assert_eq!(t.absent, Some(Effect::Refutes));
    }

    #[test]
    fn an_unmatched_alert_makes_every_hypothesis_a_candidate() {
        let books = one(GOOD).expect("parses");
        assert_eq!(books.candidates("something else").len(), 1);
    }

    #[test]
    fn bad_playbooks_are_errors_that_name_the_problem() {
        let cases = [
            (GOOD.replace("host_metrics", "rm_rf"), "unknown tool"),
            (
                GOOD.replace("fact = \"disk_usage\"", "fact = \"vibes\""),
                "unknown fact",
            ),
            (GOOD.replace("(?i)disk", "(unclosed"), "bad pattern"),
            (GOOD.replace("+++\n[[", "[["), "no TOML front matter"),
            (
                GOOD.replace("intent = \"mechanism\"", "intent = \"everything\""),
                "unknown variant",
            ),
            (
                GOOD.replace("absent = \"refutes\"", "absent = \"supports\""),
                "absence cannot",
            ),
            (
                GOOD.replace(
                    "arguments = { start",
                    "arguments = { host = \"$nope\", start",
                ),
                "placeholder",
            ),
            (
                GOOD.replace("arguments = { start", "arguments = { hots = \"db\", start"),
                "takes no argument",
            ),
            (
                GOOD.replace(
                    "arguments = { start = \"$window_start\", end = \"$window_end\" }",
                    "arguments = { limit = 5 }",
                ),
                "time range",
            ),
        ];
        for (text, expected) in cases {
            let err = one(&text).expect_err(expected).to_string();
            assert!(err.contains(expected), "{err}");
        }
    }

    #[test]
    fn duplicate_test_ids_are_refused() {
        let twice = GOOD.to_string();
        let err = Playbooks::parse(&[
            ("a.md".to_owned(), twice.clone()),
            (
                "b.md".to_owned(),
                twice.replace("id = \"disk_full\"", "id = \"other\""),
            ),
        ])
        .expect_err("duplicate");
        assert!(err.to_string().contains("used twice"), "{err}");
    }

    #[test]
    fn the_shipped_playbooks_load() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("kb/playbooks");
        let books = Playbooks::load(&dir).expect("shipped playbooks are valid");
        for mechanism in [
            "opposite_order_transaction_deadlock",
            "lock_wait_from_long_transaction",
            "slow_query_regression",
            "connection_pool_exhaustion",
            "db_connection_limit_exceeded",
            "upstream_slow_response",
            "upstream_connection_refused",
            "disk_full",
            "memory_exhaustion_oom",
        ] {
            assert!(books.hypothesis(mechanism).is_some(), "{mechanism}");
        }
        // Every field the Prometheus connector fills has the PromQL of some playbook.
        for field in METRIC_FIELDS {
            assert!(books.metric_queries().contains_key(field), "{field}");
        }
    }

    #[test]
    fn metric_queries_name_a_known_field_and_agree_across_playbooks() {
        let with = |metric: &str| GOOD.replacen("\n+++\n#", &format!("\n{metric}\n+++\n#"), 1);
        let books = one(&with(
            "[[metric]]\nfield = \"load1\"\npromql = \"node_load1\"",
        ))
        .unwrap();
        assert_eq!(books.metric_queries()["load1"], "node_load1");
        let err = one(&with("[[metric]]\nfield = \"cpu\"\npromql = \"x\"")).unwrap_err();
        assert!(
            err.to_string().contains("unknown metric field `cpu`"),
            "{err}"
        );
        let err = one(&with("[[metric]]\nfield = \"load1\"\npromql = \" \"")).unwrap_err();
        assert!(err.to_string().contains("has no promql"), "{err}");
        let second = GOOD
            .replace("disk_full", "disk_full_2")
            .replace("disk-usage", "disk-usage-2");
        let second = second.replacen(
            "\n+++\n#",
            "\n[[metric]]\nfield = \"load1\"\npromql = \"node_load5\"\n+++\n#",
            1,
        );
        let first = with("[[metric]]\nfield = \"load1\"\npromql = \"node_load1\"");
        let err = Playbooks::parse(&[("a.md".into(), first), ("b.md".into(), second)]).unwrap_err();
        assert!(err.to_string().contains("queried differently"), "{err}");
    }
}
