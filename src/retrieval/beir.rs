//! BEIR-format evaluation: reading `corpus.jsonl`, `queries.jsonl` and `qrels/SPLIT.tsv`,
//! and the ranking metrics (nDCG@k, recall@k, MRR@k) as pure functions.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;

use serde::Deserialize;

use super::{Block, BlockKind, Document, Location};

#[derive(Debug, thiserror::Error)]
pub enum BeirError {
    #[error("{path}: {reason}")]
    Bad { path: String, reason: String },
}

/// A loaded dataset split.
pub struct BeirSet {
    /// (document id, document) in file order.
    pub corpus: Vec<(String, Document)>,
    /// (query id, text) for queries that have relevance judgements in the split.
    pub queries: Vec<(String, String)>,
    /// query id → document id → relevance grade.
    pub qrels: HashMap<String, HashMap<String, u32>>,
}

#[derive(Deserialize)]
struct CorpusLine {
    #[serde(rename = "_id")]
    id: String,
    #[serde(default)]
    title: String,
    text: String,
}

#[derive(Deserialize)]
struct QueryLine {
    #[serde(rename = "_id")]
    id: String,
    text: String,
}

pub fn load(dir: &Path, split: &str) -> Result<BeirSet, BeirError> {
    let qrels = read_qrels(&dir.join("qrels").join(format!("{split}.tsv")))?;
    let corpus = read_jsonl::<CorpusLine>(&dir.join("corpus.jsonl"))?
        .into_iter()
        .map(|line| {
            let block = Block {
                kind: BlockKind::Paragraph,
                text: line.text,
                location: Location::Lines { start: 1, end: 1 },
            };
            let title = (!line.title.trim().is_empty()).then_some(line.title);
            (
                line.id,
                Document {
                    title,
                    blocks: vec![block],
                },
            )
        })
        .collect();
    let queries = read_jsonl::<QueryLine>(&dir.join("queries.jsonl"))?
        .into_iter()
        .filter(|q| qrels.contains_key(&q.id))
        .map(|q| (q.id, q.text))
        .collect();
    Ok(BeirSet {
        corpus,
        queries,
        qrels,
    })
}

fn read_jsonl<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Vec<T>, BeirError> {
    let bad = |reason: String| BeirError::Bad {
        path: path.display().to_string(),
        reason,
    };
    let file = std::fs::File::open(path).map_err(|e| bad(e.to_string()))?;
    let mut items = Vec::new();
    for (number, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| bad(e.to_string()))?;
        if line.trim().is_empty() {
            continue;
        }
        items.push(
            serde_json::from_str(&line).map_err(|e| bad(format!("line {}: {e}", number + 1)))?,
        );
    }
    Ok(items)
}

fn read_qrels(path: &Path) -> Result<HashMap<String, HashMap<String, u32>>, BeirError> {
    let bad = |reason: String| BeirError::Bad {
        path: path.display().to_string(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let mut qrels: HashMap<String, HashMap<String, u32>> = HashMap::new();
    for (number, line) in text.lines().enumerate() {
        let fields: Vec<&str> = line.split('\t').collect();
        if fields.len() < 3 || (number == 0 && fields[0] == "query-id") {
            continue;
        }
        let grade: u32 = fields[2]
            .trim()
            .parse()
            .map_err(|_| bad(format!("line {}: bad score", number + 1)))?;
        if grade > 0 {
            qrels
                .entry(fields[0].to_string())
                .or_default()
                .insert(fields[1].to_string(), grade);
        }
    }
    Ok(qrels)
}

/// nDCG@k with graded relevance (gain = grade, log2 discount), as BEIR computes it.
pub fn ndcg_at(ranked: &[String], relevant: &HashMap<String, u32>, k: usize) -> f64 {
    let dcg: f64 = ranked
        .iter()
        .take(k)
        .enumerate()
        .map(|(i, id)| relevant.get(id).copied().unwrap_or(0) as f64 / (i as f64 + 2.0).log2())
        .sum();
    let mut ideal: Vec<u32> = relevant.values().copied().collect();
    ideal.sort_unstable_by(|a, b| b.cmp(a));
    let idcg: f64 = ideal
        .iter()
        .take(k)
        .enumerate()
        .map(|(i, &g)| g as f64 / (i as f64 + 2.0).log2())
        .sum();
    if idcg == 0.0 {
        0.0
    } else {
        dcg / idcg
    }
}

pub fn recall_at(ranked: &[String], relevant: &HashMap<String, u32>, k: usize) -> f64 {
    if relevant.is_empty() {
        return 0.0;
    }
    ranked
        .iter()
        .take(k)
        .filter(|id| relevant.contains_key(*id))
        .count() as f64
        / relevant.len() as f64
}

pub fn mrr_at(ranked: &[String], relevant: &HashMap<String, u32>, k: usize) -> f64 {
    ranked
        .iter()
        .take(k)
        .position(|id| relevant.contains_key(id))
        .map(|i| 1.0 / (i as f64 + 1.0))
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relevant(pairs: &[(&str, u32)]) -> HashMap<String, u32> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    fn ranked(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn metrics_match_hand_computed_values() {
        let rel = relevant(&[("a", 1), ("b", 1)]);
        assert!((ndcg_at(&ranked(&["a", "b", "c"]), &rel, 10) - 1.0).abs() < 1e-12);
        // Relevant at ranks 2 and 3: (1/log2(3) + 1/log2(4)) / (1 + 1/log2(3)).
        let expected = (1.0 / 3f64.log2() + 0.5) / (1.0 + 1.0 / 3f64.log2());
        assert!((ndcg_at(&ranked(&["x", "a", "b"]), &rel, 10) - expected).abs() < 1e-12);
        assert_eq!(recall_at(&ranked(&["x", "a"]), &rel, 100), 0.5);
        assert_eq!(mrr_at(&ranked(&["x", "y", "b"]), &rel, 10), 1.0 / 3.0);
        assert_eq!(mrr_at(&ranked(&["x"]), &rel, 10), 0.0);
    }
}
