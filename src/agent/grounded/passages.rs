//! Which retrieved passages count and what is quoted from them: relevance and
//! answerability by the question's terms, the excerpt the model sees, the lines an
//! extractive answer quotes, and a passage as a public citation.

use super::faithfulness::{self, Sentences};
use super::Passage;
use crate::runs::CitationPublic;

/// Share of the question's content terms that a passage (its text, title and headings)
/// must hold, besides the retriever's own relevance, for the passage to be relevant.
pub const RELEVANT_COVERAGE: f64 = 0.25;

/// Share of the question's content terms that the relevant passages together must hold
/// for the question to be answerable from them; below it the answer abstains. Both
/// thresholds were calibrated on every 4th case of tests/data/answers/ops-*.jsonl.
pub const ANSWERABLE_COVERAGE: f64 = 0.4;

/// Lines an extractive answer quotes, and the words each may keep.
pub(super) const EXTRACT_LINES: usize = 2;

/// Share of the question's content terms a line must hold to be quoted (more than half: a
/// line holding half of a short question is only about its subject): a question no line
/// matches this well is not answered by quoting, it abstains.
pub(super) const EXTRACT_MIN_SCORE: f64 = 0.55;

pub(super) const EXTRACT_WORDS: usize = 32;

pub(super) const EXTRACT_CJK_CHARS: usize = 90;

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

/// The passage that could answer the question alone and holds the most of its terms (the
/// first of equals), if any: it names everything the question names and holds enough of it.
pub(super) fn answering_alone(question: &str, passages: &[Passage]) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (index, passage) in passages.iter().enumerate() {
        let text = passage_text(passage);
        if !faithfulness::holds_what_is_named(question, &text)
            || !answerable(question, std::slice::from_ref(passage))
        {
            continue;
        }
        let score = faithfulness::line_score(question, &text);
        if best.map_or(true, |(_, top)| score > top) {
            best = Some((index, score));
        }
    }
    best.map(|(index, _)| index)
}

/// Whether a retrieved passage is relevant: the retriever found it close enough, and it
/// holds enough of the question's terms.
pub fn is_relevant(question: &str, passage: &Passage) -> bool {
    passage.relevant
        && faithfulness::line_score(question, &passage_text(passage)) >= RELEVANT_COVERAGE
}

/// The part of `text` the model sees: whole when short, else the run of lines around the
/// line that best matches the question, up to `budget` characters.
pub(super) fn excerpt(question: &str, text: &str, budget: usize) -> String {
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
/// with its passage number; only lines holding more than half of the question's terms and
/// everything it names (see [`faithfulness::holds_what_is_named`]).
pub(super) fn best_lines(question: &str, passages: &[Passage]) -> Vec<(usize, String)> {
    let mut scored: Vec<(f64, usize, String)> = Vec::new();
    for (i, passage) in passages.iter().enumerate() {
        let mut split = Sentences::default();
        let mut lines = split.push(&passage.text);
        lines.push(split.rest());
        for line in lines {
            let line = clean_line(&line);
            let score = faithfulness::line_score(question, &line);
            if score >= EXTRACT_MIN_SCORE
                && faithfulness::content_terms(&line).len() >= 2
                && faithfulness::holds_what_is_named(question, &line)
                && faithfulness::gives_what_is_asked(question, &line)
            {
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
pub(super) fn clean_line(line: &str) -> String {
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
