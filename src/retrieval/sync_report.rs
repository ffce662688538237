//! What a sync tells its caller: progress while it runs, and the report at the end (files
//! added, updated, unchanged, deleted, and each skipped or failed file with its kind and
//! reason). `SyncReport::summary` is the report without any path, for users who may sync
//! a knowledge base but not see its folder's listing: skipped and failed files by count and
//! kind only.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::Serialize;

use super::extract::ExtractError;
use super::source::Skipped;

/// Progress of a sync, for progress bars and streamed events.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "stage", rename_all = "snake_case")]
pub enum Progress {
    Scanned {
        files: usize,
        skipped: usize,
        unchanged: usize,
        to_index: usize,
        to_delete: usize,
    },
    Indexed {
        files_done: usize,
        files_total: usize,
        chunks: usize,
        path: String,
    },
    Committed {
        generation: u64,
        files_done: usize,
        files_total: usize,
        chunks: usize,
    },
}

/// Why a file that was listed could not be ingested, as a closed set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailKind {
    /// It could not be opened or read.
    Unreadable,
    /// It grew past the size limit after it was listed.
    TooLarge,
    Unsupported,
    Malformed,
    TooManyPages,
    /// A zip bomb, or compressed PDF streams over the inflate budget.
    DecompressionBomb,
    /// Extraction and chunking took longer than the per-file time budget.
    TimedOut,
    /// No text (a scanned PDF, an empty file).
    NoText,
    /// More text or chunks than one file may give.
    TooMuchText,
    /// Left for the next sync: this sync had indexed as many chunks as one sync may.
    SyncBudgetSpent,
}

/// A document that could not be ingested.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Failed {
    pub path: String,
    pub kind: FailKind,
    pub error: String,
}

/// What a sync did.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct SyncReport {
    pub kb: String,
    pub added: usize,
    pub updated: usize,
    pub unchanged: usize,
    pub deleted: usize,
    pub chunks_indexed: usize,
    pub skipped: Vec<Skipped>,
    pub failed: Vec<Failed>,
    pub seconds: f64,
    pub chunks_per_second: f64,
}

/// A report without paths: skipped and failed files as counts per kind.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SyncSummary {
    pub kb: String,
    pub added: usize,
    pub updated: usize,
    pub unchanged: usize,
    pub deleted: usize,
    pub chunks_indexed: usize,
    pub skipped: KindCounts,
    pub failed: KindCounts,
    pub seconds: f64,
    pub chunks_per_second: f64,
}

/// How many files, in all and per kind.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KindCounts {
    pub total: usize,
    pub by_kind: BTreeMap<String, usize>,
}

impl SyncReport {
    pub(super) fn finish_timing(&mut self, started: Instant) {
        self.seconds = started.elapsed().as_secs_f64();
        self.chunks_per_second = if self.seconds > 0.0 {
            self.chunks_indexed as f64 / self.seconds
        } else {
            0.0
        };
    }

    /// The report with every path left out.
    pub fn summary(&self) -> SyncSummary {
        SyncSummary {
            kb: self.kb.clone(),
            added: self.added,
            updated: self.updated,
            unchanged: self.unchanged,
            deleted: self.deleted,
            chunks_indexed: self.chunks_indexed,
            skipped: KindCounts::of(self.skipped.iter().map(|s| s.kind)),
            failed: KindCounts::of(self.failed.iter().map(|f| f.kind)),
            seconds: self.seconds,
            chunks_per_second: self.chunks_per_second,
        }
    }
}

impl KindCounts {
    fn of<K: Serialize>(kinds: impl Iterator<Item = K>) -> KindCounts {
        let mut by_kind = BTreeMap::new();
        let mut total = 0;
        for kind in kinds {
            let name = serde_json::to_value(&kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_else(|| "other".to_string());
            *by_kind.entry(name).or_insert(0) += 1;
            total += 1;
        }
        KindCounts { total, by_kind }
    }
}

impl From<&ExtractError> for FailKind {
    fn from(error: &ExtractError) -> FailKind {
        match error {
            ExtractError::Unsupported { .. } => FailKind::Unsupported,
            ExtractError::TooLarge { .. } => FailKind::TooLarge,
            ExtractError::TooManyPages { .. } => FailKind::TooManyPages,
            ExtractError::Malformed { .. } => FailKind::Malformed,
            ExtractError::ZipBomb { .. } | ExtractError::InflateBudget { .. } => {
                FailKind::DecompressionBomb
            }
            ExtractError::TimedOut { .. } => FailKind::TimedOut,
            ExtractError::Empty => FailKind::NoText,
            ExtractError::TooMuchText { .. } | ExtractError::TooManyChunks { .. } => {
                FailKind::TooMuchText
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retrieval::source::SkipKind;

    #[test]
    fn the_summary_counts_kinds_and_names_no_path() {
        let skipped = |path: &str, kind| Skipped {
            path: path.into(),
            kind,
            reason: format!("{path} reason"),
        };
        let report = SyncReport {
            kb: "ops".into(),
            added: 2,
            skipped: vec![
                skipped("secret/pipe", SkipKind::Fifo),
                skipped("photos/a.jpg", SkipKind::Unsupported),
                skipped("photos/b.jpg", SkipKind::Unsupported),
            ],
            failed: vec![Failed {
                path: "hr/salaries.pdf".into(),
                kind: FailKind::DecompressionBomb,
                error: "bomb".into(),
            }],
            ..SyncReport::default()
        };
        let summary = serde_json::to_value(report.summary()).unwrap();
        assert_eq!(summary["added"], 2);
        assert_eq!(
            summary["skipped"],
            serde_json::json!({"total": 3, "by_kind": {"fifo": 1, "unsupported": 2}})
        );
        assert_eq!(
            summary["failed"],
            serde_json::json!({"total": 1, "by_kind": {"decompression_bomb": 1}})
        );
        let text = summary.to_string();
        for leak in ["secret", "photos", "salaries", "reason"] {
            assert!(!text.contains(leak), "{leak} in {text}");
        }
    }
}
