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
use crate::engine::{ChatMessage, ResponseFormat};
use crate::llm::call::{self as llm, CallError};
use crate::runs::{CitationPublic, OutcomeKind, RunEvent, TurnOutcome, TurnStop};

mod passages;
mod prompt;

pub(crate) use passages::citation;
pub use passages::{answerable, is_relevant, passage_text, ANSWERABLE_COVERAGE, RELEVANT_COVERAGE};
use passages::{answering_alone, best_lines};
pub use prompt::{answer_messages, answer_schema, AnswerPrompt};

/// What the model writes as its whole answer when the passages do not answer the question.
const NOT_FOUND: &str = "NOT_FOUND";
/// Passages shown to the model at most.
pub const MAX_PASSAGES: usize = 4;
/// Tokens one answer call may generate.
const ANSWER_TOKENS: usize = 320;

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
        unmentioned: Vec::new(),
        published: String::new(),
        published_facts: 0,
        model_calls: 0,
        rewrites: 0,
        wider: None,
    };
    let query: String = core.question.chars().take(300).collect();
    answer.retrieve(core, 0, &query)?;
    let mut step = 1;
    let mut first_rejection: Option<String> = None;
    loop {
        if !answer.unmentioned.is_empty()
            || answer.passages.is_empty()
            || !answerable(&core.question, &answer.passages)
        {
            return answer.abstain(core);
        }
        if answer.model_calls >= policy.max_model_calls
            || std::time::Instant::now() >= policy.deadline
        {
            answer.widen();
            return answer.extractive(core, "the answer's model budget ran out");
        }
        match answer.answer_call(core, step)? {
            Choice::Answered => return answer.finish(core),
            // The one passage asked of does not answer: the rejected answer's fallback stands.
            Choice::NotFound if answer.wider.is_some() => {
                answer.widen();
                let reason = first_rejection.unwrap_or_default();
                return answer.extractive(core, &reason);
            }
            Choice::NotFound => return answer.abstain(core),
            Choice::Search(query) => {
                answer.rewrites += 1;
                answer.retrieve(core, step, &query)?;
            }
            Choice::Rejected(reason) => {
                if !answer.narrow(&core.question) {
                    answer.widen();
                    return answer.extractive(core, first_rejection.as_ref().unwrap_or(&reason));
                }
                // The rejected answer was never shown; the timeline still says why it failed.
                core.sink.emit(RunEvent::AnswerUnsupported {
                    reason: format!(
                        "{reason}; asked again of the one passage that names the subject"
                    ),
                })?;
                first_rejection = Some(reason);
            }
        }
        step += 1;
    }
}

struct Grounded<'r, 'a> {
    runner: &'r mut ToolRunner<'a>,
    policy: &'r ExecutionPolicy,
    /// The relevant passages, numbered from 1 in this order.
    passages: Vec<Passage>,
    /// The names the question asks about that no readable knowledge base mentions (a tool,
    /// a product, a setting): the knowledge bases cannot answer what they never name.
    unmentioned: Vec<String>,
    /// The checked answer text published so far.
    published: String,
    /// Sentences stating a fact among them.
    published_facts: usize,
    model_calls: u32,
    rewrites: u32,
    /// All relevant passages while the answer is asked again of the one that best holds
    /// what the question names (see [`Grounded::narrow`]).
    wider: Option<Vec<Passage>>,
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
                // Only the search with the user's own words says what the question names.
                if step == 0 {
                    self.unmentioned =
                        serde_json::from_value(data["unmentioned"].clone()).unwrap_or_default();
                }
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

    /// After a rejected answer that showed nothing, asks again of the single passage that
    /// holds what the question names and most of its terms: a small model given several
    /// passages often answers from the wrong one, or loops, where given the right one alone
    /// it quotes it. Only once, within the model budget, and only when it narrows anything
    /// to a passage that could answer alone.
    /// Returns whether the answer will be asked again.
    fn narrow(&mut self, question: &str) -> bool {
        if self.wider.is_some()
            || self.passages.len() < 2
            || !self.published.is_empty()
            || self.published_facts > 0
            || self.model_calls >= self.policy.max_model_calls
            || std::time::Instant::now() >= self.policy.deadline
        {
            return false;
        }
        let Some(index) = answering_alone(question, &self.passages) else {
            return false;
        };
        let chosen = self.passages[index].clone();
        self.wider = Some(std::mem::replace(&mut self.passages, vec![chosen]));
        true
    }

    /// Back to all relevant passages after a narrowed answer failed too.
    fn widen(&mut self) {
        if let Some(wider) = self.wider.take() {
            self.passages = wider;
        }
    }

    fn can_search(&self) -> bool {
        self.wider.is_none()
            && self.rewrites < self.policy.max_query_rewrites
            && self.runner.calls_left() > 0
            && self.model_calls + 1 < self.policy.max_model_calls
    }

    /// One streamed answer call; sentences are published only once the gate passes them.
    fn answer_call(&mut self, core: &mut TurnCore<'_>, step: i64) -> Result<Choice, TurnStop> {
        self.model_calls += 1;
        let schema = answer_schema(self.passages.len(), self.can_search());
        let texts: Vec<String> = self.passages.iter().map(passage_text).collect();
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        let on_subject: Vec<bool> = texts
            .iter()
            .map(|text| faithfulness::on_subject(&core.question, text))
            .collect();
        let passages = Cited {
            texts: &texts,
            on_subject: &on_subject,
        };
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
                    match gate(&question, &sentence, &passages, &mut facts) {
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
            Ok(_) => match gate(&question, &tail, &passages, &mut facts) {
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
        tracing::debug!(run = %core.input.run_id, ?choice, "answer call");
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

    /// Nothing the user may read holds the answer: say so (naming what the question asks
    /// about that they never mention), cite nothing.
    fn abstain(&mut self, core: &mut TurnCore<'_>) -> Result<TurnOutcome, TurnStop> {
        core.sink.emit(RunEvent::AnswerBasis {
            basis: "abstained".into(),
        })?;
        let text = if self.unmentioned.is_empty() {
            localized(core.language, NOT_IN_KB).to_owned()
        } else {
            let names = self
                .unmentioned
                .iter()
                .map(|name| format!("`{name}`"))
                .collect::<Vec<_>>();
            let not_held = localized(core.language, NOT_IN_KB).trim_end_matches(['.', '。']);
            match core.language {
                Language::Chinese => format!("{not_held}：它们都没有提到 {}。", names.join("、")),
                Language::English => {
                    format!("{not_held}: none of them mentions {}.", names.join(", "))
                }
            }
        };
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

/// The passages an answer call's sentences may rest on.
struct Cited<'a> {
    /// Passage n's text (with its title and headings) at index n-1.
    texts: &'a [&'a str],
    /// Whether passage n is on the question's subject (see [`faithfulness::on_subject`]).
    on_subject: &'a [bool],
}

/// Checks one sentence: the text to show (its markers corrected to the passages that
/// support it), or why it may not be shown. A fact must rest on a passage on the
/// question's subject. Counts the sentences that state a fact.
fn gate(
    question: &str,
    sentence: &str,
    cited: &Cited<'_>,
    facts: &mut Facts,
) -> Result<String, String> {
    let passages = cited.texts;
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
            let supporting: Vec<usize> = supporting
                .into_iter()
                .filter(|n| cited.on_subject.get(n - 1).copied().unwrap_or(false))
                .collect();
            if supporting.is_empty() {
                return Err(
                    "a sentence of the answer rests only on passages that do not name what the question asks about"
                        .into(),
                );
            }
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

#[cfg(test)]
mod tests;
