//! Knowledge answers grounded in passages. Retrieval runs first with the user's words;
//! when a passage is relevant (the retriever's own score and the question's terms both
//! say so), one streamed, grammar-constrained model call writes the answer from the
//! numbered passages — or, in the same call, says the passages do not hold it, or asks
//! for one more search while a query rewrite is left. Every sentence passes the
//! faithfulness gate before anyone sees it; an answer the gate rejects, cut off or
//! without a fact is replaced by an extractive answer (the passage lines that best match
//! the question, quoted and cited), and with nothing relevant the answer abstains and
//! cites nothing. The model never spends a step on a thought.

use serde_json::{json, Value};

use super::answer_stream::{cited_numbers, FieldStream, Publisher};
use super::faithfulness::{self, Sentences, Verdict};
use super::policy::ExecutionPolicy;
use super::tool_runner::{CallOutcome, ToolRunner};
use super::tools::Passage;
use super::{localized, Language, TurnCore};
use crate::engine::{ChatMessage, ResponseFormat, Role};
use crate::llm::call::{self as llm, CallError};
use crate::runs::{CitationPublic, OutcomeKind, RunEvent, TurnOutcome, TurnStop};

/// Share of the question's content terms that a passage (its text, title and headings)
/// must hold, besides the retriever's own relevance, for the passage to be relevant.
pub const RELEVANT_COVERAGE: f64 = 0.25;
/// Share of the question's content terms that the relevant passages together must hold
/// for the question to be answerable from them; below it the answer abstains. Both
/// thresholds were calibrated on every 4th case of tests/data/answers/ops-*.jsonl.
pub const ANSWERABLE_COVERAGE: f64 = 0.4;
/// What the model writes as its whole answer when the passages do not answer the question.
const NOT_FOUND: &str = "NOT_FOUND";
/// Passages shown to the model at most.
pub const MAX_PASSAGES: usize = 4;
/// Characters of a passage the model sees: the lines around its best match for the
/// question (a passage is a chunk of up to ~1,000 characters).
const EXCERPT_CHARS: usize = 600;
/// Longest answer the model may write, in characters.
const ANSWER_CHARS: usize = 600;
/// Tokens one answer call may generate.
const ANSWER_TOKENS: usize = 320;
/// Lines an extractive answer quotes, and the words each may keep.
const EXTRACT_LINES: usize = 2;
/// Share of the question's content terms a line must hold to be quoted (more than half: a
/// line holding half of a short question is only about its subject): a question no line
/// matches this well is not answered by quoting, it abstains.
const EXTRACT_MIN_SCORE: f64 = 0.55;
const EXTRACT_WORDS: usize = 32;
const EXTRACT_CJK_CHARS: usize = 90;

/// The instructions of an answer call, with one worked example (a fixed prefix: the
/// engine reuses its cache from call to call). A second example answering NOT_FOUND made
/// the default model abstain on answerable Chinese questions (false abstention 0.09 → 0.14).
const INSTRUCTIONS: [&str; 2] = [
    "You are Warden, an assistant for operations engineers. Answer the question from the \
     numbered passages only. Reply with the specific fact that answers the question: the \
     exact command, setting, number, name or step the passages give, copied as written, in \
     one to three short sentences. Do not describe the passages or point to other \
     documents. End each sentence with the number of the passage it comes from, like [1]. \
     If the passages do not answer the question, the answer is just NOT_FOUND.\n\n\
     Example.\nPassages:\n[1] Port conflicts\nIf the service cannot bind, find the owner of \
     the port with `ss -ltnp | grep :8080` and stop it. The service retries every 5 s.\n\n\
     Question: How do I see which process holds port 8080?\n\
     Reply: {\"answer\":\"Run `ss -ltnp | grep :8080` to find the process that holds the port [1].\",\"citations\":[1]}",
    "你是 Warden，运维工程师的助手。只根据编号的资料回答问题。直接给出回答问题的具体内容：资料中的\
     命令、配置、数字、名称或步骤要照原文写出，用一到三句简短的中文。不要描述资料本身，也不要让人去看\
     别的文档。每句话末尾标出所依据资料的编号，如 [1]。如果资料没有回答这个问题，answer 只写 NOT_FOUND。\n\n\
     示例。\n资料：\n[1] 端口冲突\n服务无法绑定端口时，用 `ss -ltnp | grep :8080` 找到占用端口的进程并停止它。\
     服务每 5 秒重试一次。\n\n问题：怎么查看哪个进程占用了 8080 端口？\n\
     回复：{\"answer\":\"用 `ss -ltnp | grep :8080` 找到占用端口的进程 [1]。\",\"citations\":[1]}",
];
const NOT_IN_KB: [&str; 2] = [
    "The knowledge bases you can read do not hold an answer to this question.",
    "你可以读取的知识库中没有这个问题的答案。",
];
const QUOTED: [&str; 2] = [
    "Quoted from the knowledge base (the model's answer could not be verified against it):",
    "以下摘自知识库（模型的回答未能通过资料核对）：",
];

/// What the model chose in an answer call.
#[derive(Debug, Clone, PartialEq)]
enum Choice {
    /// Its checked sentences, as published.
    Answered,
    NotFound,
    Search(String),
    /// Nothing usable: the reason, for the `answer.unsupported` event.
    Rejected(String),
}

/// Answers a knowledge question: retrieval, one answer call (two after a search), the gate.
pub(crate) fn run(
    core: &mut TurnCore<'_>,
    runner: &mut ToolRunner<'_>,
    policy: &ExecutionPolicy,
) -> Result<TurnOutcome, TurnStop> {
    let mut answer = Grounded {
        runner,
        policy,
        passages: Vec::new(),
        published: String::new(),
        published_facts: 0,
        model_calls: 0,
        rewrites: 0,
    };
    let query: String = core.question.chars().take(300).collect();
    answer.retrieve(core, 0, &query)?;
    let mut step = 1;
    loop {
        if answer.passages.is_empty() || !answerable(&core.question, &answer.passages) {
            return answer.abstain(core);
        }
        if answer.model_calls >= policy.max_model_calls
            || std::time::Instant::now() >= policy.deadline
        {
            return answer.extractive(core, "the answer's model budget ran out");
        }
        match answer.answer_call(core, step)? {
            Choice::Answered => return answer.finish(core),
            Choice::NotFound => return answer.abstain(core),
            Choice::Search(query) => {
                answer.rewrites += 1;
                answer.retrieve(core, step, &query)?;
            }
            Choice::Rejected(reason) => return answer.extractive(core, &reason),
        }
        step += 1;
    }
}

struct Grounded<'r, 'a> {
    runner: &'r mut ToolRunner<'a>,
    policy: &'r ExecutionPolicy,
    /// The relevant passages, numbered from 1 in this order.
    passages: Vec<Passage>,
    /// The checked answer text published so far.
    published: String,
    /// Sentences stating a fact among them.
    published_facts: usize,
    model_calls: u32,
    rewrites: u32,
}

impl Grounded<'_, '_> {
    /// Searches and keeps the relevant passages not yet held.
    fn retrieve(
        &mut self,
        core: &mut TurnCore<'_>,
        step: i64,
        query: &str,
    ) -> Result<(), TurnStop> {
        let outcome = self.runner.run(
            core.sink,
            step,
            0,
            super::tools::KNOWLEDGE_TOOL,
            &json!({"query": query, "limit": MAX_PASSAGES}),
        )?;
        match outcome {
            CallOutcome::Ok { data, .. } => {
                let found: Vec<Passage> =
                    serde_json::from_value(data["passages"].clone()).unwrap_or_default();
                for passage in found {
                    let held = self
                        .passages
                        .iter()
                        .any(|p| p.path == passage.path && p.text == passage.text);
                    let coverage =
                        faithfulness::line_score(&core.question, &passage_text(&passage));
                    tracing::debug!(run = %core.input.run_id, path = %passage.path, retriever = passage.relevant, coverage, "passage");
                    if !held
                        && self.passages.len() < MAX_PASSAGES
                        && is_relevant(&core.question, &passage)
                    {
                        self.passages.push(passage);
                    }
                }
                Ok(())
            }
            CallOutcome::Uncertain => Err(TurnStop::Failed(
                "a tool call's outcome is unknown; a person must check it".into(),
            )),
            other => {
                tracing::warn!(run = %core.input.run_id, "retrieval gave no passages: {}", other.observation("knowledge_retrieval"));
                Ok(())
            }
        }
    }

    fn can_search(&self) -> bool {
        self.rewrites < self.policy.max_query_rewrites
            && self.runner.calls_left() > 0
            && self.model_calls + 1 < self.policy.max_model_calls
    }

    /// One streamed answer call; sentences are published only once the gate passes them.
    fn answer_call(&mut self, core: &mut TurnCore<'_>, step: i64) -> Result<Choice, TurnStop> {
        self.model_calls += 1;
        let schema = answer_schema(self.passages.len(), self.can_search());
        let texts: Vec<String> = self.passages.iter().map(passage_text).collect();
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        let mut field = FieldStream::new("answer");
        let mut sentences = Sentences::default();
        let mut publisher = Publisher::new(
            core.input.already_streamed.clone(),
            std::mem::take(&mut self.published),
            core.sink.delta_interval(),
        );
        let messages = self.messages(core);
        let mut rejected: Option<String> = None;
        let mut facts = Facts::default();
        let question = core.question.clone();
        // A small model can loop on its last sentence: a sentence said before ends the
        // answer, which stands on what was shown.
        let mut said: Vec<String> = Vec::new();
        let mut repeated = false;
        // Checked sentences wait until they make an answer (a fact that tells more than the
        // question): a lead-in or a restatement alone is never shown.
        let mut held = String::new();
        let result = {
            let mut on_text = |piece: &str,
                               sink: &mut dyn crate::runs::TurnSink|
             -> Result<bool, TurnStop> {
                for sentence in sentences.push(&field.push(piece)) {
                    let body = faithfulness::normalise(&faithfulness::without_markers(&sentence));
                    if !body.is_empty() && said.contains(&body) {
                        repeated = true;
                        return Ok(false);
                    }
                    said.push(body);
                    match gate(&question, &sentence, &texts, &mut facts) {
                        Ok(shown) => {
                            held.push_str(&shown);
                            if facts.answer() {
                                publisher.publish(&std::mem::take(&mut held), sink)?;
                            }
                        }
                        Err(reason) => {
                            rejected = Some(reason);
                            return Ok(false);
                        }
                    }
                }
                Ok(true)
            };
            llm::generate(
                core.model,
                core.sink,
                llm::Call {
                    messages,
                    max_tokens: ANSWER_TOKENS,
                    seed: core.seed.wrapping_add(step as u64),
                    deadline: self.policy.deadline,
                    format: ResponseFormat::JsonSchema(schema),
                    assistant_prefix: None,
                    on_text: Some(&mut on_text),
                },
            )
        };
        let closed = field.is_done();
        let tail = sentences.rest();
        let outcome = match result {
            Ok((text, summary)) => {
                core.usage.prompt_tokens += summary.prompt_tokens;
                core.usage.completion_tokens += summary.completion_tokens;
                tracing::debug!(run = %core.input.run_id, prompt_tokens = summary.prompt_tokens, completion_tokens = summary.completion_tokens, prefill_ms = summary.prefill_ms, decode_ms = summary.decode_ms, "answer call");
                Ok(serde_json::from_str::<Value>(text.trim()).unwrap_or(Value::Null))
            }
            Err(CallError::Stopped(stop)) => return Err(stop),
            Err(CallError::Halted) => Err(rejected
                .clone()
                .unwrap_or_else(|| "the answer was stopped".into())),
            Err(err) => Err(format!("the answer call failed: {err}")),
        };
        if let (Err(reason), false) = (&outcome, repeated) {
            tracing::debug!(run = %core.input.run_id, reason, "answer rejected");
        }
        let choice = match outcome {
            _ if repeated && facts.answer() => {
                publisher.publish(&held, core.sink)?;
                Choice::Answered
            }
            _ if repeated => Choice::Rejected(facts.why_not("the answer repeated itself")),
            Err(reason) => Choice::Rejected(reason),
            Ok(value) if value.get("search").is_some() => {
                Choice::Search(value["search"].as_str().unwrap_or_default().to_owned())
            }
            Ok(value) if value["answer"].as_str().is_some_and(says_not_found) => Choice::NotFound,
            Ok(_) if !closed => Choice::Rejected("the answer was cut off".into()),
            Ok(_) => match gate(&question, &tail, &texts, &mut facts) {
                Err(reason) => Choice::Rejected(reason),
                Ok(shown) => {
                    held.push_str(&shown);
                    if facts.answer() {
                        publisher.publish(&held, core.sink)?;
                        Choice::Answered
                    } else {
                        Choice::Rejected(facts.why_not("the answer stated no fact"))
                    }
                }
            },
        };
        self.published = publisher.finish(core.sink)?;
        if facts.answer() {
            self.published_facts += facts.stated;
        }
        Ok(choice)
    }

    fn messages(&self, core: &TurnCore<'_>) -> Vec<ChatMessage> {
        answer_messages(&AnswerPrompt {
            language: core.language,
            question: &core.question,
            history: &core.history,
            memory: core.memory.as_deref(),
            passages: &self.passages,
        })
    }

    /// The checked answer, with its citations.
    fn finish(&mut self, core: &mut TurnCore<'_>) -> Result<TurnOutcome, TurnStop> {
        let numbers = cited_numbers(&self.published, self.passages.len());
        let citations = self.cite(core, &numbers)?;
        core.sink.emit(RunEvent::AnswerBasis {
            basis: "passages".into(),
        })?;
        // The stored answer is exactly what streamed (a sentence is published with the space
        // after it; trimming one side only would store the answer twice).
        let streamed = std::mem::take(&mut self.published);
        Ok(core.done(
            OutcomeKind::Answered,
            streamed.clone(),
            citations,
            &streamed,
        ))
    }

    /// The passage lines that best match the question, quoted with their citations.
    fn extractive(
        &mut self,
        core: &mut TurnCore<'_>,
        reason: &str,
    ) -> Result<TurnOutcome, TurnStop> {
        core.sink.emit(RunEvent::AnswerUnsupported {
            reason: reason.to_owned(),
        })?;
        let lines = best_lines(&core.question, &self.passages);
        if lines.is_empty() {
            // No line answers the question: the supported sentences already shown are the
            // answer, or, with none, the knowledge bases do not hold it.
            return if self.published_facts > 0 {
                self.finish(core)
            } else {
                self.abstain(core)
            };
        }
        let mut text = localized(core.language, QUOTED).to_owned();
        let mut numbers = Vec::new();
        for (n, line) in &lines {
            text.push_str(&format!("\n\n> {line} [{n}]"));
            if !numbers.contains(n) {
                numbers.push(*n);
            }
        }
        let citations = self.cite(core, &numbers)?;
        core.sink.emit(RunEvent::AnswerBasis {
            basis: "extractive".into(),
        })?;
        let streamed = std::mem::take(&mut self.published);
        Ok(core.done(OutcomeKind::Answered, text, citations, &streamed))
    }

    /// Nothing the user may read holds the answer: say so, cite nothing.
    fn abstain(&mut self, core: &mut TurnCore<'_>) -> Result<TurnOutcome, TurnStop> {
        core.sink.emit(RunEvent::AnswerBasis {
            basis: "abstained".into(),
        })?;
        let text = localized(core.language, NOT_IN_KB).to_owned();
        let streamed = std::mem::take(&mut self.published);
        Ok(core.done(OutcomeKind::Answered, text, Vec::new(), &streamed))
    }

    fn cite(
        &self,
        core: &mut TurnCore<'_>,
        numbers: &[usize],
    ) -> Result<Vec<CitationPublic>, TurnStop> {
        let mut citations = Vec::new();
        for &n in numbers {
            let citation = citation(n, &self.passages[n - 1]);
            core.sink.emit(RunEvent::Citation(citation.clone()))?;
            citations.push(citation);
        }
        Ok(citations)
    }
}

/// What an answer call's prompt is made of.
pub struct AnswerPrompt<'a> {
    pub language: Language,
    /// The masked question.
    pub question: &'a str,
    pub history: &'a [ChatMessage],
    /// Structured memory, framed as data.
    pub memory: Option<&'a str>,
    pub passages: &'a [Passage],
}

/// The messages of an answer call: the instructions (and memory), the earlier turns, then
/// the numbered passages (each an excerpt around its best match) and the question.
pub fn answer_messages(prompt: &AnswerPrompt<'_>) -> Vec<ChatMessage> {
    let mut system = localized(prompt.language, INSTRUCTIONS).to_owned();
    if let Some(memory) = prompt.memory {
        system.push_str("\n\n");
        system.push_str(memory);
    }
    let mut messages = vec![ChatMessage::new(Role::System, system)];
    messages.extend(prompt.history.iter().cloned());
    let mut text = String::from(match prompt.language {
        Language::English => "Passages:\n",
        Language::Chinese => "资料：\n",
    });
    for (i, passage) in prompt.passages.iter().enumerate() {
        let excerpt = excerpt(prompt.question, &passage.text, EXCERPT_CHARS);
        text.push_str(&format!("[{}] {}\n\n", i + 1, excerpt.trim()));
    }
    text.push_str(match prompt.language {
        Language::English => "Question: ",
        Language::Chinese => "问题：",
    });
    text.push_str(prompt.question);
    messages.push(ChatMessage::new(Role::User, text));
    messages
}

/// What the checked sentences of an answer state.
#[derive(Debug, Default)]
struct Facts {
    /// Sentences stating a fact the passages support.
    stated: usize,
    /// Whether one of them tells more than the question (see [`faithfulness::adds_to`]).
    adds: bool,
}

impl Facts {
    /// Whether the sentences make an answer.
    fn answer(&self) -> bool {
        self.stated > 0 && self.adds
    }

    fn why_not(&self, otherwise: &str) -> String {
        if self.stated > 0 && !self.adds {
            "the answer only restated the question".into()
        } else {
            otherwise.into()
        }
    }
}

/// Checks one sentence: the text to show (its markers corrected to the passages that
/// support it), or why it may not be shown. Counts the sentences that state a fact.
fn gate(
    question: &str,
    sentence: &str,
    passages: &[&str],
    facts: &mut Facts,
) -> Result<String, String> {
    // "Not found" is the model's choice, read from the whole output: never shown as text.
    if sentence.trim().is_empty() || says_not_found(sentence) {
        return Ok(String::new());
    }
    if faithfulness::about_the_passages(&faithfulness::without_markers(sentence)) {
        return Err("the answer described the passages instead of answering".into());
    }
    match faithfulness::check(sentence, passages) {
        Verdict::NoFact => Ok(faithfulness::without_markers(sentence)),
        Verdict::Unsupported => {
            Err("a sentence of the answer is not supported by the passages it cites".into())
        }
        Verdict::Supported(supporting) => {
            facts.stated += 1;
            facts.adds |= faithfulness::adds_to(question, sentence);
            let cited = cited_numbers(sentence, passages.len());
            if !cited.is_empty() && cited.iter().all(|n| supporting.contains(n)) {
                Ok(sentence.to_owned())
            } else {
                Ok(faithfulness::with_markers(sentence, &supporting[..1]))
            }
        }
    }
}

/// Whether an answer (or a sentence of it) is the model saying the passages do not hold it.
fn says_not_found(text: &str) -> bool {
    faithfulness::without_markers(text)
        .trim()
        .trim_end_matches(['.', '。'])
        .trim()
        == NOT_FOUND
}

/// The JSON schema of an answer call with `passages` numbered passages.
pub fn answer_schema(passages: usize, can_search: bool) -> Value {
    let mut choices = vec![json!({
        "type": "object",
        "properties": {
            "answer": {"type": "string", "minLength": 1, "maxLength": ANSWER_CHARS},
            "citations": {
                "type": "array",
                "items": {"enum": (1..=passages.max(1)).collect::<Vec<usize>>()},
                "minItems": 1,
                "maxItems": 3
            }
        },
        "required": ["answer", "citations"],
        "additionalProperties": false
    })];
    if can_search {
        choices.push(json!({
            "type": "object",
            "properties": {"search": {"type": "string", "minLength": 1, "maxLength": 120}},
            "required": ["search"],
            "additionalProperties": false
        }));
    }
    json!({"anyOf": choices})
}

/// A passage's text as the gate reads it: its title and headings count as its words.
pub fn passage_text(passage: &Passage) -> String {
    format!(
        "{}\n{}\n{}",
        passage.title.clone().unwrap_or_default(),
        passage.heading_path.join(" > "),
        passage.text
    )
}

/// Whether the relevant passages together can answer the question: they hold enough of its
/// terms, and every name it asks about (a product, a setting: see
/// [`faithfulness::named_terms`]).
pub fn answerable(question: &str, passages: &[Passage]) -> bool {
    let joined = passages
        .iter()
        .map(passage_text)
        .collect::<Vec<_>>()
        .join("\n");
    faithfulness::line_score(question, &joined) >= ANSWERABLE_COVERAGE
        && faithfulness::holds_names(question, &joined)
}

/// Whether a retrieved passage is relevant: the retriever found it close enough, and it
/// holds enough of the question's terms.
pub fn is_relevant(question: &str, passage: &Passage) -> bool {
    passage.relevant
        && faithfulness::line_score(question, &passage_text(passage)) >= RELEVANT_COVERAGE
}

/// The part of `text` the model sees: whole when short, else the run of lines around the
/// line that best matches the question, up to `budget` characters.
fn excerpt(question: &str, text: &str, budget: usize) -> String {
    if text.chars().count() <= budget {
        return text.to_owned();
    }
    let lines: Vec<&str> = text.lines().collect();
    let best = lines
        .iter()
        .enumerate()
        .map(|(i, line)| (faithfulness::line_score(question, line), i))
        .max_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)))
        .map_or(0, |(_, i)| i);
    let size = |range: std::ops::RangeInclusive<usize>| -> usize {
        lines[range].iter().map(|l| l.chars().count() + 1).sum()
    };
    let (mut start, mut end) = (best, best);
    // Grow by a line on each side in turn (the line before first: it often names the
    // subject) while the budget allows.
    loop {
        let mut grew = false;
        if start > 0 && size(start - 1..=end) <= budget {
            start -= 1;
            grew = true;
        }
        if end + 1 < lines.len() && size(start..=end + 1) <= budget {
            end += 1;
            grew = true;
        }
        if !grew {
            break;
        }
    }
    let kept = lines[start..=end].join("\n");
    if kept.chars().count() > budget {
        return kept.chars().take(budget).collect();
    }
    kept
}

/// The lines (sentences) of the passages that best match the question, best first, each
/// with its passage number; only lines holding at least half of the question's terms.
fn best_lines(question: &str, passages: &[Passage]) -> Vec<(usize, String)> {
    let mut scored: Vec<(f64, usize, String)> = Vec::new();
    for (i, passage) in passages.iter().enumerate() {
        let mut split = Sentences::default();
        let mut lines = split.push(&passage.text);
        lines.push(split.rest());
        for line in lines {
            let line = clean_line(&line);
            let score = faithfulness::line_score(question, &line);
            if score >= EXTRACT_MIN_SCORE && faithfulness::content_terms(&line).len() >= 2 {
                // Earlier passages rank higher on a tie.
                scored.push((score - i as f64 * 1e-3, i + 1, line));
            }
        }
    }
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    scored
        .into_iter()
        .take(EXTRACT_LINES)
        .map(|(_, n, line)| (n, line))
        .collect()
}

/// A passage line as quoted: Markdown list and heading marks dropped, shortened.
fn clean_line(line: &str) -> String {
    let trimmed = line
        .trim()
        .trim_start_matches(['#', '-', '*', '>', ' '])
        .trim();
    let cjk = trimmed
        .chars()
        .filter(|c| ('\u{4e00}'..='\u{9fff}').contains(c))
        .count();
    if cjk * 2 > trimmed.chars().count() {
        let kept: String = trimmed.chars().take(EXTRACT_CJK_CHARS).collect();
        return if kept.len() < trimmed.len() {
            format!("{kept}…")
        } else {
            kept
        };
    }
    let words: Vec<&str> = trimmed.split_whitespace().collect();
    if words.len() > EXTRACT_WORDS {
        format!("{}…", words[..EXTRACT_WORDS].join(" "))
    } else {
        words.join(" ")
    }
}

pub(crate) fn citation(n: usize, passage: &Passage) -> CitationPublic {
    CitationPublic {
        n,
        chunk_id: passage.chunk_id,
        kb: passage.kb.clone(),
        path: passage.path.clone(),
        title: passage.title.clone(),
        heading_path: passage.heading_path.clone(),
        location: passage.location.clone(),
        text: passage.text.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passage(text: &str) -> Passage {
        Passage {
            chunk_id: 1,
            kb: "sample".into(),
            path: "en/disk-full.md".into(),
            title: Some("Disk full".into()),
            heading_path: vec!["Disk full".into(), "First checks".into()],
            location: None,
            text: text.into(),
            relevant: true,
        }
    }

    #[test]
    fn the_gate_shows_supported_sentences_and_corrects_their_markers() {
        let texts = [
            "Run `df -hT` to see usage per filesystem.",
            "Deadlocks abort one transaction.",
        ];
        let question = "How do I see disk usage per filesystem?";
        let mut facts = Facts::default();
        assert_eq!(
            gate(
                question,
                "Run `df -hT` to see usage per filesystem [2]. ",
                &texts,
                &mut facts
            ),
            Ok("Run `df -hT` to see usage per filesystem [1]. ".into())
        );
        assert!(gate(
            question,
            "Reboot the kubelet node immediately [1].",
            &texts,
            &mut facts
        )
        .is_err());
        assert_eq!(facts.stated, 1);
        assert!(facts.answer());
    }

    #[test]
    fn restating_the_question_or_describing_the_passages_is_no_answer() {
        let texts = ["Deadlocks abort one transaction; the application retries it."];
        let mut facts = Facts::default();
        let shown = gate(
            "What happens to one transaction in a deadlock?",
            "In a deadlock one transaction happens [1].",
            &texts,
            &mut facts,
        );
        assert!(shown.is_ok());
        assert_eq!(facts.stated, 1);
        assert!(!facts.answer());
        assert_eq!(facts.why_not("x"), "the answer only restated the question");
        let mut facts = Facts::default();
        assert!(gate(
            "What do deadlocks abort?",
            "The passage describes what deadlocks abort [1].",
            &texts,
            &mut facts
        )
        .is_err());
    }

    #[test]
    fn relevance_needs_the_questions_terms() {
        let disk =
            passage("When a disk is full, run df -hT first and look for deleted files held open.");
        assert!(is_relevant(
            "What should I check first when a disk is full?",
            &disk
        ));
        assert!(!is_relevant(
            "What is the default Redis maxmemory eviction policy?",
            &disk
        ));
    }

    #[test]
    fn the_extractive_answer_quotes_the_best_lines() {
        let disk = passage("# Disk full\nDisks fill up over time.\nRun `lsof +L1` to find deleted files still held open.");
        let lines = best_lines("Which command finds deleted files held open?", &[disk]);
        assert_eq!(
            lines[0],
            (
                1,
                "Run `lsof +L1` to find deleted files still held open.".to_owned()
            )
        );
    }

    #[test]
    fn the_schema_offers_a_search_only_while_one_is_left() {
        assert_eq!(
            answer_schema(2, true)["anyOf"].as_array().map(Vec::len),
            Some(2)
        );
        assert_eq!(
            answer_schema(2, false)["anyOf"].as_array().map(Vec::len),
            Some(1)
        );
    }
}
