//! `warden eval answers KB_DIR QUESTIONS.jsonl [--json] [--limit N]`: answer quality of the
//! chat agent on knowledge questions. KB_DIR is ingested into a fresh data folder as a
//! knowledge base every user may read; each question is posted as a viewer's chat message
//! and answered by the run workers and the agent exactly as on the server; the stored
//! events and message are then scored. Case format (one JSON object a line, other keys
//! ignored): `{"id", "question", "answers": [gold strings], "answerable": bool}`. Scoring
//! is documented in tests/data/answers/README.md and the README's "Knowledge answers".

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use serde::Deserialize;
use serde_json::{json, Value};

use std::io::Write;

use super::eval_conversations::{chat_runners, wait_for_end};
use crate::agent::tools::passage;
use crate::agent::{faithfulness, grounded, Language};
use crate::engine::Engine;
use crate::knowledge::{KnowledgeSearch, LibrarySearch};
use crate::retrieval::{AddedBy, RetrievalConfig};
use crate::store::{AccessControl, Accounts, Conversations, Reader, Role, Runs};

/// An answer longer than this many words is not credited for containing a gold string (a
/// list of candidates is no answer).
const MAX_ANSWER_WORDS: usize = 80;

#[derive(Debug, Deserialize)]
pub struct Case {
    pub id: String,
    pub question: String,
    #[serde(default)]
    pub answers: Vec<String>,
    pub answerable: bool,
}

pub struct Options {
    pub kb: PathBuf,
    pub file: PathBuf,
    pub limit: Option<usize>,
    pub stride: usize,
    /// Where to write one JSON line per case: the top passages and the exact answer
    /// prompt, for the side-by-side with other engines (tests/bench/answers_side_by_side.py).
    pub transcript: Option<PathBuf>,
}

/// What one case's run showed.
#[derive(Debug, Default)]
struct Observed {
    /// The case's run, for its events and log lines.
    run_id: String,
    answer: String,
    cited_texts: Vec<String>,
    /// The cited passages as the gate reads them (title, headings, text).
    cited_sources: Vec<String>,
    /// `passages`, `extractive` or `abstained` (from the `answer.basis` event).
    basis: String,
    gate_rejected: bool,
    status: String,
    first_token_ms: Option<f64>,
    total_ms: f64,
}

pub fn read_cases(file: &std::path::Path) -> anyhow::Result<Vec<Case>> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let mut cases = Vec::new();
    for (number, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let case: Case = serde_json::from_str(line)
            .with_context(|| format!("{} line {}: not a valid case", file.display(), number + 1))?;
        if case.answerable && case.answers.is_empty() {
            anyhow::bail!(
                "{} line {}: an answerable case needs gold answers",
                file.display(),
                number + 1
            );
        }
        cases.push(case);
    }
    Ok(cases)
}

pub fn run(options: &Options, engine: &Engine) -> anyhow::Result<Value> {
    let mut cases: Vec<Case> = read_cases(&options.file)?
        .into_iter()
        .step_by(options.stride.max(1))
        .collect();
    if let Some(limit) = options.limit {
        cases.truncate(limit);
    }
    if !options.kb.is_dir() {
        anyhow::bail!("{} is not a folder", options.kb.display());
    }
    let chat = engine
        .chat_model(None)
        .context("no chat model loaded")?
        .clone();
    let embedder = engine
        .embed_model(None)
        .context("no embedding model loaded")?
        .clone();
    let data = tempfile::tempdir()?;
    let store = crate::knowledge::open_store(data.path())?;
    let library = Arc::new(crate::knowledge::open_library_on(
        store.clone(),
        data.path(),
        embedder,
        RetrievalConfig::default(),
    )?);
    library
        .add("eval", &options.kb, AddedBy::Host)
        .with_context(|| format!("cannot add {}", options.kb.display()))?;
    store.set_kb_readers("eval", &[Reader::Role(Role::Viewer)])?;
    let ingest = Instant::now();
    library.sync("eval", &mut |_| {})?;
    eprintln!(
        "eval: ingested {} in {:.1} s",
        options.kb.display(),
        ingest.elapsed().as_secs_f64()
    );
    let now = crate::runs::now_secs();
    let user = store.create_user("evaluator", Role::Viewer, "evaluation-password-1", now)?;
    let search = LibrarySearch(library.clone());
    // The agent's skills come from the sample folder, as on a server.
    let runners = chat_runners(store.clone(), library, &chat, Path::new("kb"))?;
    let mut transcript = match &options.transcript {
        Some(path) => Some(std::io::BufWriter::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?,
        )),
        None => None,
    };
    let mut report = Report::default();
    for case in &cases {
        let observed = ask(&store, &runners.workers, user.id, &case.question)
            .with_context(|| format!("case {}", case.id))?;
        report.score(case, &observed);
        if let Some(out) = transcript.as_mut() {
            let line = transcript_line(case, &observed, &search)?;
            writeln!(out, "{line}").context("cannot write the transcript")?;
        }
        eprintln!(
            "eval: {} {} {} ({:.0} ms)",
            case.id, observed.status, observed.basis, observed.total_ms
        );
    }
    runners.stop();
    if let Some(mut out) = transcript {
        out.flush().context("cannot write the transcript")?;
    }
    Ok(report.json(chat.info().id.as_str()))
}

/// One case of the transcript: the question, the same search the answer ran (top
/// passages, unfiltered), the answer prompt built from them as the agent builds it, and
/// what Warden showed.
fn transcript_line(case: &Case, seen: &Observed, search: &LibrarySearch) -> anyhow::Result<Value> {
    let hits = search
        .search(&case.question, None, grounded::MAX_PASSAGES)
        .map_err(|e| anyhow::anyhow!("search failed: {e}"))?;
    let passages: Vec<_> = hits.iter().map(passage).collect();
    let language = Language::of(&case.question);
    let messages = grounded::answer_messages(&grounded::AnswerPrompt {
        language,
        question: &case.question,
        history: &[],
        memory: None,
        passages: &passages,
    });
    Ok(json!({
        "id": case.id,
        "question": case.question,
        "answers": case.answers,
        "answerable": case.answerable,
        "messages": messages.iter().map(|m| json!({"role": m.role, "content": m.content})).collect::<Vec<_>>(),
        "schema": grounded::answer_schema(passages.len(), false),
        "passages": passages.iter().map(grounded::passage_text).collect::<Vec<_>>(),
        "warden": {"run_id": seen.run_id, "answer": seen.answer, "basis": seen.basis, "cited": seen.cited_texts},
    }))
}

/// Posts one question in a new conversation and reads what its run stored.
fn ask(
    store: &crate::store::Store,
    workers: &crate::runs::RunWorkers,
    owner: i64,
    question: &str,
) -> anyhow::Result<Observed> {
    let now = crate::runs::now_secs();
    let conversation = store.create_conversation(owner, "eval", now)?;
    let posted_ms = now_ms();
    let started = Instant::now();
    let posted = store.add_user_message_with_run(owner, &conversation.id, question, now)?;
    workers.wake();
    let status = wait_for_end(store, owner, &posted.run_id)?;
    let mut observed = Observed {
        run_id: posted.run_id.clone(),
        status,
        total_ms: started.elapsed().as_secs_f64() * 1e3,
        ..Observed::default()
    };
    let events = store.events_after(owner, &posted.run_id, 0, crate::store::MAX_EVENTS_PER_READ)?;
    for event in &events {
        let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
        match event.event_type.as_str() {
            "message.delta" if observed.first_token_ms.is_none() => {
                observed.first_token_ms =
                    data["at"].as_i64().map(|at| (at - posted_ms).max(0) as f64);
            }
            "citation" => {
                observed
                    .cited_texts
                    .push(data["text"].as_str().unwrap_or_default().to_owned());
                // The gate reads a passage with its title and headings.
                let headings: Vec<&str> = data["heading_path"]
                    .as_array()
                    .map(|h| h.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                observed.cited_sources.push(format!(
                    "{}\n{}\n{}",
                    data["title"].as_str().unwrap_or_default(),
                    headings.join(" > "),
                    data["text"].as_str().unwrap_or_default()
                ));
            }
            "answer.basis" => {
                observed.basis = data["basis"].as_str().unwrap_or_default().to_owned()
            }
            "answer.unsupported" => observed.gate_rejected = true,
            _ => {}
        }
    }
    let (_, messages) = store.conversation(owner, &conversation.id)?;
    if let Some(last) = messages
        .iter()
        .rev()
        .find(|m| m.role.to_string() == "assistant")
    {
        observed.answer = last.content.clone();
    }
    // An answer shown whole at the end has its first token then.
    if observed.first_token_ms.is_none() && !observed.answer.is_empty() {
        observed.first_token_ms = Some(observed.total_ms);
    }
    Ok(observed)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Text as gold strings are compared: lower case, punctuation and English articles
/// removed, whitespace collapsed; Chinese characters kept without spaces between them.
pub fn normalise_answer(text: &str) -> String {
    let spaced: String = text
        .chars()
        .map(|c| {
            if c.is_alphanumeric() {
                c.to_lowercase().next().unwrap_or(c)
            } else {
                ' '
            }
        })
        .collect();
    let words: Vec<&str> = spaced
        .split_whitespace()
        .filter(|w| !matches!(*w, "a" | "an" | "the"))
        .collect();
    // Between two CJK characters no space is kept.
    let mut out = String::new();
    for word in words {
        let joins =
            out.chars().last().is_some_and(is_cjk) && word.chars().next().is_some_and(is_cjk);
        if !out.is_empty() && !joins {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

fn is_cjk(c: char) -> bool {
    ('\u{4e00}'..='\u{9fff}').contains(&c) || ('\u{3400}'..='\u{4dbf}').contains(&c)
}

/// Whether normalised `gold` occurs in normalised `text`: on whole-token boundaries where
/// the gold starts or ends with a Latin letter or digit, anywhere for Chinese.
pub fn contains_gold(text: &str, gold: &str) -> bool {
    let text = normalise_answer(text);
    let gold = normalise_answer(gold);
    if gold.is_empty() {
        return false;
    }
    let mut from = 0;
    while let Some(found) = text[from..].find(&gold) {
        let start = from + found;
        let end = start + gold.len();
        let before = text[..start].chars().last();
        let after = text[end..].chars().next();
        let boundary = |edge: Option<char>, inner: Option<char>| match (edge, inner) {
            (Some(e), Some(i)) if !is_cjk(i) => !e.is_alphanumeric() || is_cjk(e),
            _ => true,
        };
        if boundary(before, gold.chars().next()) && boundary(after, gold.chars().last()) {
            return true;
        }
        from = start + text[start..].chars().next().map_or(1, char::len_utf8);
    }
    false
}

fn words_of(text: &str) -> usize {
    let latin = text
        .split_whitespace()
        .filter(|w| w.chars().any(|c| c.is_alphanumeric() && !is_cjk(c)))
        .count();
    // Two Chinese characters read as about one word.
    latin + text.chars().filter(|c| is_cjk(*c)).count() / 2
}

#[derive(Debug, Default)]
struct Report {
    cases: usize,
    answerable: usize,
    unanswerable: usize,
    correct: usize,
    cited_correct: usize,
    abstained_correctly: usize,
    false_abstentions: usize,
    unsupported_shown: usize,
    gate_rejections: usize,
    extractive: usize,
    first_token_ms: Vec<f64>,
    total_ms: Vec<f64>,
    failures: Vec<Value>,
}

impl Report {
    fn fail(&mut self, id: &str, check: &str, expected: Value, got: Value) {
        self.failures
            .push(json!({"id": id, "check": check, "expected": expected, "got": got}));
    }

    fn score(&mut self, case: &Case, seen: &Observed) {
        self.cases += 1;
        self.total_ms.push(seen.total_ms);
        if let Some(first) = seen.first_token_ms {
            self.first_token_ms.push(first);
        }
        let abstained = seen.basis == "abstained";
        if seen.gate_rejected {
            self.gate_rejections += 1;
        }
        if seen.basis == "extractive" {
            self.extractive += 1;
        }
        // The gate re-checks what was shown as the model's answer.
        if seen.basis == "passages" && !shown_answer_supported(&seen.answer, &seen.cited_sources) {
            self.unsupported_shown += 1;
            self.fail(
                &case.id,
                "unsupported_shown",
                json!("every sentence supported"),
                json!(seen.answer),
            );
        }
        if !case.answerable {
            self.unanswerable += 1;
            if abstained && seen.cited_texts.is_empty() {
                self.abstained_correctly += 1;
            } else {
                self.fail(
                    &case.id,
                    "abstention",
                    json!("abstain, cite nothing"),
                    json!(seen.answer),
                );
            }
            return;
        }
        self.answerable += 1;
        if abstained {
            self.false_abstentions += 1;
        }
        let short = words_of(&seen.answer) <= MAX_ANSWER_WORDS;
        if short
            && case
                .answers
                .iter()
                .any(|gold| contains_gold(&seen.answer, gold))
        {
            self.correct += 1;
        } else {
            self.fail(&case.id, "answer", json!(case.answers), json!(seen.answer));
        }
        let cited = seen
            .cited_texts
            .iter()
            .any(|text| case.answers.iter().any(|gold| contains_gold(text, gold)));
        if cited {
            self.cited_correct += 1;
        } else {
            self.fail(
                &case.id,
                "citation",
                json!(case.answers),
                json!(seen.cited_texts.len()),
            );
        }
    }

    fn json(&self, model: &str) -> Value {
        let share = |n: usize, of: usize| {
            if of == 0 {
                Value::Null
            } else {
                json!(round(n as f64 / of as f64))
            }
        };
        json!({
            "model": model,
            "cases": self.cases,
            "answerable": self.answerable,
            "unanswerable": self.unanswerable,
            "answer_accuracy": share(self.correct, self.answerable),
            "citation_accuracy": share(self.cited_correct, self.answerable),
            "abstention_accuracy": share(self.abstained_correctly, self.unanswerable),
            "false_abstention_rate": share(self.false_abstentions, self.answerable),
            "unsupported_rate": share(self.unsupported_shown, self.cases),
            "gate_rejection_rate": share(self.gate_rejections, self.cases),
            "extractive_rate": share(self.extractive, self.cases),
            "latency": {
                "first_token_p50_ms": percentile(&self.first_token_ms, 0.5),
                "first_token_p95_ms": percentile(&self.first_token_ms, 0.95),
                "total_p50_ms": percentile(&self.total_ms, 0.5),
                "total_p95_ms": percentile(&self.total_ms, 0.95),
            },
            "failures": self.failures,
        })
    }
}

/// Whether every fact-stating sentence of a shown answer is supported by the cited
/// passages (the gate's own check, repeated on what the user saw).
fn shown_answer_supported(answer: &str, cited_texts: &[String]) -> bool {
    let texts: Vec<&str> = cited_texts.iter().map(String::as_str).collect();
    let mut split = faithfulness::Sentences::default();
    let mut sentences = split.push(answer);
    sentences.push(split.rest());
    sentences.iter().all(|s| {
        !matches!(
            faithfulness::check(s, &texts),
            faithfulness::Verdict::Unsupported
        )
    })
}

fn round(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

fn percentile(values: &[f64], q: f64) -> Value {
    if values.is_empty() {
        return Value::Null;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let index = ((sorted.len() - 1) as f64 * q).round() as usize;
    json!(sorted[index].round())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gold_strings_match_on_whole_tokens_after_normalising() {
        assert!(contains_gold("Run `df -hT` first [1].", "df -hT"));
        assert!(contains_gold("The pool size is 20.", "Pool size is 20!"));
        assert!(!contains_gold("Run dfx now", "df"));
        assert!(!contains_gold("set 200 connections", "20"));
        assert!(contains_gold("先用 df -h 查看磁盘使用率。", "磁盘使用率"));
        // Chinese punctuation and spaces are removed before comparing.
        assert!(contains_gold("先检查磁盘，使用率", "磁盘 使用率"));
        assert!(!contains_gold("先检查磁盘容量", "磁盘使用率"));
    }

    #[test]
    fn normalising_drops_articles_and_punctuation() {
        assert_eq!(normalise_answer("The  disk, an inode!"), "disk inode");
        assert_eq!(normalise_answer("磁盘 满了。 先 检查"), "磁盘满了先检查");
    }
}
