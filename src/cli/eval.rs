//! `warden eval retrieval --beir DIR`: indexes a BEIR dataset in a temporary data folder and
//! prints one JSON object with ranking quality and speed.

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::Subcommand;
use serde_json::json;

use crate::config::{ModelFlags, Needs, RetrievalFlags};
use crate::retrieval::{beir, EmbedError, Embedder, InlineDocument, SearchMode};

/// Documents retrieved per query (recall is measured at 100).
const RANKED_DOCUMENTS: usize = 100;

#[derive(Debug, Subcommand)]
pub enum EvalCommand {
    /// Retrieval quality on a BEIR-format dataset (corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv,
    /// each plain or gzip-compressed as NAME.gz).
    Retrieval {
        #[arg(long)]
        beir: PathBuf,
        #[arg(long, default_value = "test")]
        split: String,
        #[arg(long, value_enum, default_value = "hybrid")]
        mode: SearchMode,
        /// Split the corpus into this many knowledge bases (documents dealt round robin).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
        kbs: u16,
        /// With --kbs: also time every query limited to the first N knowledge bases (a
        /// caller who may read N of them), against the same query unfiltered.
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
        readable: Option<u16>,
        /// Print JSON (the only output format; kept for clarity in scripts).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        models: ModelFlags,
        #[command(flatten)]
        retrieval: RetrievalFlags,
    },
    /// The chat agent on a conversation case set (JSON lines; see tests/data/CONVERSATIONS.md):
    /// routing, modes, tools, confirmations, citations and hard safety gates. Exit 1 when a
    /// hard gate is violated.
    Conversations {
        file: PathBuf,
        /// Print JSON (the only output format; kept for clarity in scripts).
        #[arg(long)]
        json: bool,
        /// Run only the first N cases (after --stride).
        #[arg(long)]
        limit: Option<usize>,
        /// Run every Nth case (a representative slice of a large set).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
        stride: u16,
        /// The sample knowledge base every case starts with.
        #[arg(long, default_value = "kb")]
        sample_kb: PathBuf,
        #[command(flatten)]
        models: ModelFlags,
    },
    /// Answer quality of knowledge questions (JSON lines `{"id", "question", "answers",
    /// "answerable"}`; see tests/data/answers/README.md): KB_DIR is ingested into a fresh
    /// data folder and every question is answered through the server's chat path.
    Answers {
        /// A folder of Markdown, text, HTML, PDF or DOCX files.
        kb_dir: PathBuf,
        questions: PathBuf,
        /// Print JSON (the only output format; kept for clarity in scripts).
        #[arg(long)]
        json: bool,
        /// Run only the first N cases (after --stride).
        #[arg(long)]
        limit: Option<usize>,
        /// Run every Nth case (a representative slice of a large set).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
        stride: u16,
        /// Also write one JSON line per case (top passages, the answer prompt, Warden's
        /// answer) for tests/bench/answers_side_by_side.py.
        #[arg(long)]
        transcript: Option<PathBuf>,
        #[command(flatten)]
        models: ModelFlags,
    },
    /// The incident diagnostic graph on scenario packs (see README "Scenario packs"): root
    /// cause, trigger, evidence, recovery mode and safety per pack, 0–100 scores. Exit 1 on
    /// any safety violation.
    Diagnostics(super::eval_diagnostics::EvalDiagnosticsArgs),
}

/// For BM25-only runs: vectors are never searched, so documents are not embedded.
struct UnusedVectors(usize);

impl Embedder for UnusedVectors {
    fn embed(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut unit = vec![0.0; self.0];
        if let Some(first) = unit.first_mut() {
            *first = 1.0;
        }
        Ok(vec![unit; texts.len()])
    }

    fn dimensions(&self) -> usize {
        self.0
    }
}

pub fn run(command: EvalCommand) -> anyhow::Result<ExitCode> {
    let command = match command {
        EvalCommand::Diagnostics(args) => return super::eval_diagnostics::run(args),
        other => other,
    };
    if let EvalCommand::Answers {
        kb_dir,
        questions,
        limit,
        stride,
        transcript,
        models,
        ..
    } = command
    {
        let engine = super::load_engine(&models, Needs::Both)?;
        let options = super::eval_answers::Options {
            kb: kb_dir,
            file: questions,
            limit,
            stride: usize::from(stride),
            transcript,
        };
        let report = super::eval_answers::run(&options, &engine)?;
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    if let EvalCommand::Conversations {
        file,
        limit,
        stride,
        sample_kb,
        models,
        ..
    } = command
    {
        let engine = super::load_engine(&models, Needs::Both)?;
        let options = super::eval_conversations::Options {
            file,
            sample_kb,
            limit,
            stride: usize::from(stride),
        };
        let (report, violated) = super::eval_conversations::run(&options, &engine)?;
        return Ok(super::eval_conversations::exit(&report, violated));
    }
    let EvalCommand::Retrieval {
        beir: dir,
        split,
        mode,
        kbs,
        readable,
        models,
        retrieval,
        ..
    } = command
    else {
        anyhow::bail!("unknown evaluation");
    };
    let kbs = usize::from(kbs);
    let readable = readable.map(usize::from);
    if readable.is_some_and(|r| r > kbs) {
        anyhow::bail!("--readable cannot exceed --kbs");
    }
    let set = beir::load(&dir, &split)?;
    if set.queries.is_empty() {
        anyhow::bail!("{} has no judged queries in split `{split}`", dir.display());
    }
    let engine = super::load_engine(&models, Needs::Embedding)?;
    let Some(embedder) = engine.embed_model(None) else {
        anyhow::bail!("no embedding model loaded")
    };
    let data = tempfile::tempdir()?;
    let counter = crate::knowledge::token_counter(embedder)?;
    let (_store, library) = if mode == SearchMode::Bm25 {
        let dimensions = embedder.info().dimensions.unwrap_or(384);
        crate::knowledge::open_library_with(
            data.path(),
            Arc::new(UnusedVectors(dimensions)),
            counter,
            retrieval.config()?,
        )?
    } else {
        crate::knowledge::open_library(data.path(), embedder.clone(), retrieval.config()?)?
    };
    let docs = set.corpus.len();
    let names: Vec<String> = if kbs == 1 {
        vec!["eval".to_owned()]
    } else {
        (1..=kbs).map(|i| format!("eval-{i}")).collect()
    };
    let mut shares: Vec<Vec<InlineDocument>> = (0..kbs).map(|_| Vec::new()).collect();
    for (i, (path, document)) in set.corpus.into_iter().enumerate() {
        shares[i % kbs].push(InlineDocument { path, document });
    }
    let started = Instant::now();
    let mut chunks_indexed = 0;
    for (name, documents) in names.iter().zip(shares) {
        chunks_indexed += library
            .ingest_inline(name, &dir, documents, &mut |_| {})?
            .chunks_indexed;
    }
    let index_seconds = started.elapsed().as_secs_f64();
    let allowed: Option<Vec<String>> = readable.map(|r| names[..r].to_vec());
    let mut filtered_latencies = Vec::new();

    let (mut ndcg, mut recall, mut mrr) = (0.0, 0.0, 0.0);
    let mut latencies = Vec::with_capacity(set.queries.len());
    for (id, text) in &set.queries {
        let started = Instant::now();
        let hits = library.search(text, None, mode, RANKED_DOCUMENTS * 2)?;
        latencies.push(started.elapsed().as_secs_f64() * 1e3);
        if let Some(allowed) = &allowed {
            let started = Instant::now();
            library.search(text, Some(allowed), mode, RANKED_DOCUMENTS * 2)?;
            filtered_latencies.push(started.elapsed().as_secs_f64() * 1e3);
        }
        let mut seen = HashSet::new();
        let ranked: Vec<String> = hits
            .into_iter()
            .map(|h| h.citation.path)
            .filter(|p| seen.insert(p.clone()))
            .take(RANKED_DOCUMENTS)
            .collect();
        let relevant = &set.qrels[id];
        ndcg += beir::ndcg_at(&ranked, relevant, 10);
        recall += beir::recall_at(&ranked, relevant, 100);
        mrr += beir::mrr_at(&ranked, relevant, 10);
    }
    let queries = set.queries.len() as f64;
    let percentile = |values: &mut Vec<f64>, p: f64| {
        values.sort_by(f64::total_cmp);
        values
            .get(((values.len() as f64 - 1.0) * p).round() as usize)
            .copied()
            .unwrap_or(0.0)
    };
    let (p50, p95) = (
        percentile(&mut latencies, 0.5),
        percentile(&mut latencies, 0.95),
    );
    let access_filter = readable.map(|readable| {
        let (f50, f95) = (
            percentile(&mut filtered_latencies, 0.5),
            percentile(&mut filtered_latencies, 0.95),
        );
        json!({
            "kbs": kbs,
            "readable": readable,
            "query_p50_ms": f50,
            "query_p95_ms": f95,
            "p95_ratio_to_unfiltered": f95 / p95.max(1e-9),
        })
    });
    println!(
        "{}",
        json!({
            "benchmark": "retrieval",
            "dataset": dir.display().to_string(),
            "split": split,
            "mode": mode,
            "rrf_k": retrieval.rrf_k,
            "bm25_weight": retrieval.bm25_weight,
            "vector_weight": retrieval.vector_weight,
            "ndcg_at_10": ndcg / queries,
            "recall_at_100": recall / queries,
            "mrr_at_10": mrr / queries,
            "queries": set.queries.len(),
            "docs": docs,
            "kbs": kbs,
            "chunks": chunks_indexed,
            "index_seconds": index_seconds,
            "chunks_per_s": chunks_indexed as f64 / index_seconds.max(1e-9),
            "query_p50_ms": p50,
            "query_p95_ms": p95,
            "access_filter": access_filter,
        })
    );
    Ok(ExitCode::SUCCESS)
}
