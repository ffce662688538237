//! The ground truth of a scenario pack (`ground_truth.json`): its types, their reader and
//! the checks serde cannot make. Read only by the scorer, never by the diagnostic graph.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The file of a scenario pack that holds its ground truth.
pub const GROUND_TRUTH_FILE: &str = "ground_truth.json";

/// Largest ground-truth file read (a real one is well under a kilobyte).
const MAX_GROUND_TRUTH_BYTES: u64 = 1 << 20;

/// The data-source names (file stems) evidence and ground truth may name.
const SOURCE_NAMES: &[&str] = &[
    "pg_log",
    "lock_waits",
    "transactions",
    "slow_queries",
    "pool_metrics",
    "app_log",
    "nginx_access",
    "nginx_error",
    "changes",
    "host_metrics",
];

/// Why a pack's ground truth could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ScoreError {
    #[error("ground truth {} is missing", path.display())]
    Missing { path: PathBuf },
    #[error("cannot read ground truth {}: {reason}", path.display())]
    Read { path: PathBuf, reason: String },
    #[error("ground truth {} is not valid JSON of the expected shape: {reason}", path.display())]
    Parse { path: PathBuf, reason: String },
    #[error("ground truth {}: {reason}", path.display())]
    Invalid { path: PathBuf, reason: String },
}

pub use crate::diagnostics::state::{RecoveryMode, Verdict};

/// What set the failure off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TriggerKind {
    LockOrder,
    LongTransaction,
    Deploy,
    ConfigChange,
    ExternalDependency,
    JobFailure,
    ResourceGrowth,
    TrafficSpike,
}

impl TriggerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TriggerKind::LockOrder => "lock_order",
            TriggerKind::LongTransaction => "long_transaction",
            TriggerKind::Deploy => "deploy",
            TriggerKind::ConfigChange => "config_change",
            TriggerKind::ExternalDependency => "external_dependency",
            TriggerKind::JobFailure => "job_failure",
            TriggerKind::ResourceGrowth => "resource_growth",
            TriggerKind::TrafficSpike => "traffic_spike",
        }
    }
}

/// A pack's `ground_truth.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroundTruth {
    pub verdict: Verdict,
    #[serde(default)]
    pub component: Option<String>,
    #[serde(default)]
    pub mechanism: Option<String>,
    #[serde(default)]
    pub trigger: Option<TruthTrigger>,
    #[serde(default)]
    pub required_evidence: Vec<EvidenceMatch>,
    #[serde(default)]
    pub decoys: Vec<EvidenceMatch>,
    pub recovery_mode: RecoveryMode,
}

/// The trigger of the ground truth; `ref_` (JSON `ref`) names a change id when one caused it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TruthTrigger {
    pub kind: TriggerKind,
    #[serde(rename = "ref", default)]
    pub ref_: Option<String>,
}

/// An evidence record recognised by its source and a substring of its raw text (JSON `match`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceMatch {
    pub source: String,
    #[serde(rename = "match")]
    pub match_: String,
}

impl GroundTruth {
    /// Checks what serde cannot: a root cause names its component, mechanism, trigger and
    /// required evidence; insufficient evidence asks for manual review; sources are known.
    fn validate(&self) -> Result<(), String> {
        if self.verdict == Verdict::RootCause {
            for (name, value) in [
                ("component", &self.component),
                ("mechanism", &self.mechanism),
            ] {
                if value.as_deref().is_none_or(|v| v.trim().is_empty()) {
                    return Err(format!("a root_cause verdict needs a {name}"));
                }
            }
            if self.trigger.is_none() {
                return Err("a root_cause verdict needs a trigger".into());
            }
            if self.required_evidence.is_empty() {
                return Err("a root_cause verdict needs required_evidence".into());
            }
        } else if self.recovery_mode != RecoveryMode::ManualReview {
            return Err(
                "an insufficient_evidence verdict needs recovery_mode manual_review".into(),
            );
        }
        for item in self.required_evidence.iter().chain(&self.decoys) {
            if !SOURCE_NAMES.contains(&item.source.as_str()) {
                return Err(format!("unknown evidence source {:?}", item.source));
            }
            if item.match_.is_empty() {
                return Err(format!("an empty match for source {:?}", item.source));
            }
        }
        Ok(())
    }
}

/// Reads and validates `<pack_dir>/ground_truth.json`.
pub fn read_ground_truth(pack_dir: &Path) -> Result<GroundTruth, ScoreError> {
    let path = pack_dir.join(GROUND_TRUTH_FILE);
    let file = std::fs::File::open(&path).map_err(|err| match err.kind() {
        std::io::ErrorKind::NotFound => ScoreError::Missing { path: path.clone() },
        _ => ScoreError::Read {
            path: path.clone(),
            reason: err.to_string(),
        },
    })?;
    let mut text = String::new();
    file.take(MAX_GROUND_TRUTH_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|err| ScoreError::Read {
            path: path.clone(),
            reason: err.to_string(),
        })?;
    if text.len() as u64 > MAX_GROUND_TRUTH_BYTES {
        return Err(ScoreError::Read {
            path,
            reason: format!("larger than {MAX_GROUND_TRUTH_BYTES} bytes"),
        });
    }
    let truth: GroundTruth = serde_json::from_str(&text).map_err(|err| ScoreError::Parse {
        path: path.clone(),
        reason: err.to_string(),
    })?;
    truth
        .validate()
        .map_err(|reason| ScoreError::Invalid { path, reason })?;
    Ok(truth)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn truth() -> GroundTruth {
        serde_json::from_value(json!({
            "verdict": "root_cause",
            "component": "order-service",
            "mechanism": "opposite_order_transaction_deadlock",
            "trigger": {"kind": "deploy", "ref": "chg-42"},
            "required_evidence": [{"source": "pg_log", "match": "40P01"}],
            "decoys": [{"source": "app_log", "match": "disk full"}],
            "recovery_mode": "proposal_only"
        }))
        .unwrap()
    }

    fn insufficient_truth() -> GroundTruth {
        serde_json::from_value(json!({
            "verdict": "insufficient_evidence",
            "component": null, "mechanism": null, "trigger": null,
            "required_evidence": [],
            "decoys": [],
            "recovery_mode": "manual_review"
        }))
        .unwrap()
    }

    fn write_truth(text: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(GROUND_TRUTH_FILE), text).unwrap();
        dir
    }

    #[test]
    fn read_ground_truth_reads_a_valid_file() {
        let dir = write_truth(&serde_json::to_string(&truth()).unwrap());
        assert_eq!(read_ground_truth(dir.path()).unwrap(), truth());
        let dir = write_truth(&serde_json::to_string(&insufficient_truth()).unwrap());
        assert_eq!(read_ground_truth(dir.path()).unwrap(), insufficient_truth());
    }

    #[test]
    fn read_ground_truth_reports_a_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let err = read_ground_truth(dir.path()).unwrap_err();
        assert!(matches!(err, ScoreError::Missing { .. }), "{err}");
        assert!(
            err.to_string().contains("ground_truth.json is missing"),
            "{err}"
        );
    }

    #[test]
    fn read_ground_truth_reports_bad_json() {
        let dir = write_truth("{\"verdict\": ");
        let err = read_ground_truth(dir.path()).unwrap_err();
        assert!(matches!(err, ScoreError::Parse { .. }), "{err}");
        let dir = write_truth(r#"{"verdict": "maybe", "recovery_mode": "manual_review"}"#);
        assert!(matches!(
            read_ground_truth(dir.path()),
            Err(ScoreError::Parse { .. })
        ));
        let dir = write_truth(
            r#"{"verdict": "insufficient_evidence", "recovery_mode": "manual_review", "extra": 1}"#,
        );
        assert!(matches!(
            read_ground_truth(dir.path()),
            Err(ScoreError::Parse { .. })
        ));
    }

    #[test]
    fn read_ground_truth_rejects_incomplete_truth() {
        let cases = [
            (
                json!({"verdict": "root_cause", "mechanism": "m", "trigger": {"kind": "deploy", "ref": null},
                    "required_evidence": [{"source": "pg_log", "match": "x"}],
                    "recovery_mode": "no_action"}),
                "needs a component",
            ),
            (
                json!({"verdict": "root_cause", "component": "c", "mechanism": "m",
                    "trigger": {"kind": "deploy", "ref": null}, "required_evidence": [],
                    "recovery_mode": "no_action"}),
                "needs required_evidence",
            ),
            (
                json!({"verdict": "insufficient_evidence", "recovery_mode": "no_action"}),
                "manual_review",
            ),
            (
                json!({"verdict": "insufficient_evidence", "recovery_mode": "manual_review",
                    "decoys": [{"source": "syslog", "match": "x"}]}),
                "unknown evidence source",
            ),
        ];
        for (value, needle) in cases {
            let dir = write_truth(&value.to_string());
            let err = read_ground_truth(dir.path()).unwrap_err();
            assert!(matches!(err, ScoreError::Invalid { .. }), "{err}");
            assert!(err.to_string().contains(needle), "{err} lacks {needle}");
        }
    }
}
