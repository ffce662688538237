//! BEIR-format evaluation: reading `corpus.jsonl`, `queries.jsonl` and `qrels/SPLIT.tsv`
//! (each either plain or gzip-compressed with a `.gz` suffix), and the ranking metrics
//! (nDCG@k, recall@k, MRR@k) as pure functions.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

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

/// Loads `dir`'s corpus, queries and the `split` judgements. Each file is read as named or,
/// when only that exists, from its gzip-compressed form (`corpus.jsonl.gz` and so on); the
/// plain file wins when both are present.
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

/// Opens `path`, or `path.gz` through a gzip decoder when `path` does not exist. Returns the
/// path actually opened, for error messages.
fn open_maybe_gzipped(path: &Path) -> Result<(PathBuf, Box<dyn BufRead>), BeirError> {
    if path.exists() {
        let file = std::fs::File::open(path).map_err(|e| BeirError::Bad {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        return Ok((path.to_path_buf(), Box::new(BufReader::new(file))));
    }
    let mut compressed = path.as_os_str().to_owned();
    compressed.push(".gz");
    let compressed = PathBuf::from(compressed);
    match std::fs::File::open(&compressed) {
        Ok(file) => {
            let decoder = flate2::read::MultiGzDecoder::new(BufReader::new(file));
            Ok((compressed, Box::new(BufReader::new(decoder))))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(BeirError::Bad {
            path: path.display().to_string(),
            reason: format!("not found (nor {})", compressed.display()),
        }),
        Err(e) => Err(BeirError::Bad {
            path: compressed.display().to_string(),
            reason: e.to_string(),
        }),
    }
}

fn read_jsonl<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Vec<T>, BeirError> {
    let (path, reader) = open_maybe_gzipped(path)?;
    let bad = |reason: String| BeirError::Bad {
        path: path.display().to_string(),
        reason,
    };
    let mut items = Vec::new();
    for (number, line) in reader.lines().enumerate() {
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
    let (path, reader) = open_maybe_gzipped(path)?;
    let bad = |reason: String| BeirError::Bad {
        path: path.display().to_string(),
        reason,
    };
    let mut qrels: HashMap<String, HashMap<String, u32>> = HashMap::new();
    for (number, line) in reader.lines().enumerate() {
        let line = line.map_err(|e| bad(e.to_string()))?;
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
    use std::io::Write;

    use super::*;

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(bytes).expect("gzip into memory");
        encoder.finish().expect("gzip into memory")
    }

    const CORPUS: &str = concat!(
        r#"{"_id": "d1", "title": "Kidneys", "text": "Renal failure.", "metadata": {}}"#,
        "\n",
        r#"{"_id": "d2", "title": "", "text": "Heart rate.", "metadata": {}}"#,
        "\n"
    );
    const QUERIES: &str = concat!(
        r#"{"_id": "q1", "text": "kidney failure", "metadata": {}}"#,
        "\n",
        r#"{"_id": "q2", "text": "unjudged", "metadata": {}}"#,
        "\n"
    );
    const QRELS: &str = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t0\n";

    fn write_dataset(dir: &Path, compressed: bool) {
        std::fs::create_dir_all(dir.join("qrels")).expect("mkdir");
        for (name, text) in [("corpus.jsonl", CORPUS), ("queries.jsonl", QUERIES)] {
            if compressed {
                std::fs::write(dir.join(format!("{name}.gz")), gzip(text.as_bytes()))
            } else {
                std::fs::write(dir.join(name), text)
            }
            .expect("write");
        }
        std::fs::write(dir.join("qrels/test.tsv.gz"), gzip(QRELS.as_bytes())).expect("write");
    }

    fn summary(set: &BeirSet) -> (Vec<String>, Vec<(String, String)>, usize) {
        let ids = set.corpus.iter().map(|(id, _)| id.clone()).collect();
        (ids, set.queries.clone(), set.qrels.len())
    }

    #[test]
    fn gzipped_and_plain_files_load_the_same_set() {
        let plain = tempfile::tempdir().expect("tempdir");
        let packed = tempfile::tempdir().expect("tempdir");
        write_dataset(plain.path(), false);
        write_dataset(packed.path(), true);
        let from_plain = load(plain.path(), "test").expect("plain set");
        let from_gz = load(packed.path(), "test").expect("gzipped set");
        let expected = (
            vec!["d1".to_string(), "d2".to_string()],
            vec![("q1".to_string(), "kidney failure".to_string())],
            1,
        );
        assert_eq!(summary(&from_gz), expected);
        assert_eq!(summary(&from_plain), expected);
        assert_eq!(from_gz.qrels["q1"], relevant(&[("d1", 1)]));
        assert_eq!(from_gz.corpus[0].1.title.as_deref(), Some("Kidneys"));
        assert_eq!(from_gz.corpus[1].1.title, None);
    }

    #[test]
    fn plain_file_wins_over_its_gzipped_form() {
        let dir = tempfile::tempdir().expect("tempdir");
        write_dataset(dir.path(), true);
        let one_doc = CORPUS.lines().next().unwrap_or_default();
        std::fs::write(dir.path().join("corpus.jsonl"), one_doc).expect("write");
        let set = load(dir.path(), "test").expect("set");
        assert_eq!(set.corpus.len(), 1);
    }

    #[test]
    fn missing_and_corrupt_files_are_errors_naming_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        write_dataset(dir.path(), true);
        let missing = load(dir.path(), "dev").err().map(|e| e.to_string());
        let missing = missing.unwrap_or_default();
        assert!(
            missing.contains("dev.tsv") && missing.contains("dev.tsv.gz"),
            "{missing}"
        );

        std::fs::write(dir.path().join("corpus.jsonl.gz"), b"not gzip at all").expect("write");
        let corrupt = load(dir.path(), "test").err().map(|e| e.to_string());
        let corrupt = corrupt.unwrap_or_default();
        assert!(corrupt.contains("corpus.jsonl.gz"), "{corrupt}");

        let truncated = gzip(CORPUS.as_bytes());
        let truncated = &truncated[..truncated.len() / 2];
        std::fs::write(dir.path().join("corpus.jsonl.gz"), truncated).expect("write");
        let cut = load(dir.path(), "test").err().map(|e| e.to_string());
        assert!(cut.unwrap_or_default().contains("corpus.jsonl.gz"));
    }

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
