//! The faithfulness gate: whether a sentence of a knowledge answer is supported by the
//! passages it cites, decided in code. Both are compared as content terms the way the
//! search index reads them (English stemmed, Chinese segmented into dictionary words, stop
//! and question words dropped); numbers, commands
//! in backticks, paths and flags must appear verbatim (after normalisation) in a cited
//! passage. A sentence with too few content terms to state a fact passes. Also splits a
//! streamed answer into whole sentences, so nothing is shown before it is checked, and
//! scores passage lines against a question for the extractive answer. Pure functions.

use std::collections::HashSet;
use std::sync::OnceLock;

use crate::retrieval::cjk;

/// Share of a sentence's content terms a passage must hold for the sentence to be
/// supported by it.
pub const SUPPORT_SHARE: f64 = 0.5;
/// Content terms below which a sentence states no fact of its own ("Here is how:").
const FACT_TERMS: usize = 3;
/// Words of a bare answer at most (a name, a package, a standard).
const BARE_WORDS: usize = 3;

/// English words that carry no fact.
const STOP_WORDS: &[&str] = &[
    "a",
    "about",
    "after",
    "again",
    "all",
    "also",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "both",
    "but",
    "by",
    "can",
    "could",
    "did",
    "do",
    "does",
    "doing",
    "done",
    "each",
    "either",
    "else",
    "every",
    "first",
    "for",
    "from",
    "further",
    "get",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "him",
    "his",
    "how",
    "however",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "just",
    "let",
    "may",
    "me",
    "might",
    "more",
    "most",
    "must",
    "my",
    "need",
    "no",
    "nor",
    "not",
    "now",
    "of",
    "on",
    "once",
    "one",
    "only",
    "or",
    "other",
    "our",
    "out",
    "over",
    "own",
    "per",
    "please",
    "same",
    "she",
    "should",
    "so",
    "some",
    "such",
    "than",
    "that",
    "the",
    "their",
    "them",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "upon",
    "us",
    "use",
    "used",
    "using",
    "very",
    "via",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "whether",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "will",
    "with",
    "would",
    "you",
    "your",
    "yours",
    "according",
    "passage",
    "passages",
    "document",
    "documents",
    "knowledge",
    "base",
    "step",
    "steps",
    "answer",
    "question",
];

/// Chinese words that carry no fact: function characters on their own and question words.
const CJK_STOP_WORDS: &[&str] = &[
    "的",
    "了",
    "是",
    "在",
    "和",
    "与",
    "或",
    "及",
    "就",
    "都",
    "而",
    "也",
    "把",
    "被",
    "对",
    "从",
    "到",
    "为",
    "以",
    "这",
    "那",
    "有",
    "个",
    "之",
    "其",
    "中",
    "等",
    "并",
    "可",
    "要",
    "会",
    "先",
    "再",
    "吗",
    "呢",
    "吧",
    "啊",
    "什么",
    "怎么",
    "怎样",
    "如何",
    "哪些",
    "哪个",
    "哪",
    "为什么",
    "多少",
    "是否",
    "应该",
    "需要",
    "可以",
    "一个",
    "这个",
    "那个",
    "时候",
    "我们",
    "你",
    "我",
    "他",
    "它",
    "请问",
    "首先",
    "然后",
];

/// The content terms of a text, as the search index reads words (English stemmed, Chinese
/// segmented by its dictionary), stop words and question words left out.
pub fn content_terms(text: &str) -> HashSet<String> {
    let mut analyzer = cjk::text_analyzer();
    let stop = stop_terms();
    cjk::analyze(&mut analyzer, text)
        .into_iter()
        .filter(|term| !stop.contains(term) && !CJK_STOP_WORDS.contains(&term.as_str()))
        .filter(|term| {
            term.chars().count() > 1 || term.chars().all(|c| c.is_ascii_digit() || is_cjk(c))
        })
        .collect()
}

/// The English stop words as the analyzer stems them, computed once.
fn stop_terms() -> &'static HashSet<String> {
    static STOP: OnceLock<HashSet<String>> = OnceLock::new();
    STOP.get_or_init(|| {
        let mut analyzer = cjk::text_analyzer();
        STOP_WORDS
            .iter()
            .flat_map(|word| cjk::analyze(&mut analyzer, word))
            .collect()
    })
}

fn is_cjk(c: char) -> bool {
    ('\u{4e00}'..='\u{9fff}').contains(&c) || ('\u{3400}'..='\u{4dbf}').contains(&c)
}

/// Text compared verbatim: lower case, whitespace collapsed, typographic quotes plain.
pub fn normalise(text: &str) -> String {
    let lowered: String = text
        .chars()
        .map(|c| match c {
            '‘' | '’' => '\'',
            '“' | '”' => '"',
            '`' => ' ',
            other => other.to_ascii_lowercase(),
        })
        .collect();
    lowered.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What must appear verbatim in a cited passage: code spans, numbers, paths and flags.
pub fn exact_terms(sentence: &str) -> Vec<String> {
    let mut exact = Vec::new();
    for (i, span) in sentence.split('`').enumerate() {
        // A trailing backslash is Markdown escaping, not part of a one-line command.
        let span = span.trim().trim_end_matches('\\').trim_end();
        if i % 2 == 1 && !span.is_empty() {
            exact.push(normalise(span));
        }
    }
    let plain: String = sentence
        .split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 0)
        .map(|(_, s)| s)
        .collect::<Vec<_>>()
        .join(" ");
    let tokens: Vec<&str> = plain
        .split(|c: char| c.is_whitespace() || "，。；：、（）()[]{}\"'“”,;!?！？".contains(c))
        .map(|token| token.trim_end_matches(['.', ':']))
        .filter(|token| !token.is_empty())
        .collect();
    for (i, token) in tokens.iter().enumerate() {
        let numeric = token.chars().any(|c| c.is_ascii_digit());
        let pathlike = token.len() > 1
            && (token.contains('/') || token.starts_with('-') || token.contains('_'));
        // A lone digit is a list number or a count too loose to hold the model to, unless a
        // unit makes it a quantity ("5 seconds").
        if token.len() == 1 && numeric {
            let next = tokens.get(i + 1).copied().unwrap_or_default();
            if let Some(unit) = unit_stem(next) {
                exact.push(format!("{token} {unit}"));
            } else if let Some(unit) = CJK_UNITS.iter().find(|unit| next.starts_with(**unit)) {
                exact.push(format!("{token}{unit}"));
            }
            continue;
        }
        if (numeric || pathlike) && token.chars().any(|c| c.is_ascii_alphanumeric()) {
            exact.push(normalise(token));
        }
    }
    exact
}

/// Chinese units and counters after a number ("7 天", "8 个字符"): a digit before one is a
/// quantity the passage must hold.
const CJK_UNITS: &[&str] = &[
    "秒", "分钟", "小时", "天", "周", "个月", "月", "年", "个", "次", "字节", "字符", "倍", "核",
    "台", "条", "版",
];

/// Whether `normalised` (a text after [`normalise`]) holds the exact term `term`; a term
/// with Chinese in it is compared without spaces ("7 天" and "7天" are the same quantity).
fn holds_exact(normalised: &str, term: &str) -> bool {
    if normalised.contains(term) {
        return true;
    }
    if !term.chars().any(is_cjk) {
        return false;
    }
    let squeeze = |text: &str| text.split_whitespace().collect::<String>();
    squeeze(normalised).contains(&squeeze(term))
}

/// The stem of a unit word ("seconds" → "second"), or `None` for any other word.
fn unit_stem(word: &str) -> Option<&'static str> {
    const UNITS: &[&str] = &[
        "second",
        "minute",
        "hour",
        "day",
        "week",
        "month",
        "year",
        "byte",
        "percent",
        "time",
        "retry",
        "retries",
        "replica",
        "connection",
        "thread",
        "worker",
        "core",
    ];
    let word = word.to_ascii_lowercase();
    UNITS
        .iter()
        .find(|unit| word.starts_with(**unit) && word.len() <= unit.len() + 2)
        .copied()
}

/// The names a question asks about, lower-cased: proper nouns (a capitalised word inside a
/// sentence: "Argo", "Kafka"), mixed-case names ("MongoDB", "VirtualService"), acronyms of
/// three letters or more ("XFS", "TLS") and settings (`client_max_body_size`). A question
/// naming something its passages never mention is not answered by them. What a user pastes
/// about their own system (hosts, addresses, ids, numbers: words with digits, dots or
/// slashes) and two-letter abbreviations ("MB", "DB") are not names.
pub fn named_terms(question: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    // Chinese has no capitals of its own: a capitalised Latin word in it is a name.
    let cjk_question = question.chars().any(is_cjk);
    let mut sentence_start = true;
    for raw in question.split(|c: char| {
        c.is_whitespace() || "，、（）()[]{}\"“”`,;:!?！？。；：".contains(c) || is_cjk(c)
    }) {
        let starts_sentence = sentence_start;
        if !raw.is_empty() {
            sentence_start = raw.ends_with(['.', '?', '!']);
        }
        let word = raw
            .split('\'')
            .next()
            .unwrap_or_default()
            .trim_end_matches(['.', '?', '!']);
        if word.len() < 2 || !word.chars().all(|c| c.is_ascii_alphabetic() || c == '_') {
            continue;
        }
        let setting = word.contains('_') && word.chars().any(|c| c.is_ascii_alphabetic());
        let tail = &word[1..];
        let capitalised = word.starts_with(|c: char| c.is_ascii_uppercase());
        let mixed_case = capitalised
            && tail.chars().any(|c| c.is_ascii_uppercase())
            && tail.chars().any(|c| c.is_ascii_lowercase());
        let proper_noun = capitalised
            && (cjk_question || !starts_sentence)
            && tail.chars().all(|c| c.is_ascii_lowercase());
        let acronym = word.len() >= 3 && word.chars().all(|c| c.is_ascii_uppercase());
        let name = word.to_ascii_lowercase();
        if (setting || mixed_case || proper_noun || acronym) && !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// Whether `text` mentions every name `question` asks about (see [`named_terms`]).
pub fn holds_names(question: &str, text: &str) -> bool {
    let text = normalise(text);
    named_terms(question)
        .iter()
        .all(|name| text.contains(name.as_str()))
}

/// Whether an answer sentence tells more than the question it answers: a term, a command,
/// a number or a negation the question does not hold. A sentence that only restates the
/// question ("MySQL error 1205 rolls back by default") answers nothing — unless the
/// question asks yes or no, where restating it is the answer "yes".
pub fn adds_to(question: &str, sentence: &str) -> bool {
    if asks_yes_or_no(question) {
        return true;
    }
    let body = without_markers(sentence);
    let asked = content_terms(question);
    let asked_exact = normalise(question);
    let doing = action_terms();
    content_terms(&body)
        .iter()
        .any(|term| !asked.contains(term) && !doing.contains(term))
        || exact_terms(&body)
            .iter()
            .any(|term| !asked_exact.contains(term.as_str()))
        || negates(&body) && !negates(question)
}

/// Verbs of doing that any instruction has ("create", "use", "配置"): a sentence that adds
/// only these to the question ("Create a systemd timer unit that replaces the cron job")
/// restates it.
const ACTION_WORDS: &[&str] = &[
    "use",
    "using",
    "run",
    "create",
    "make",
    "write",
    "set",
    "add",
    "edit",
    "change",
    "modify",
    "configure",
    "specify",
    "define",
    "put",
    "place",
    "apply",
    "execute",
    "perform",
    "type",
    "call",
    "need",
    "want",
    "try",
    "使用",
    "运行",
    "执行",
    "创建",
    "编写",
    "设置",
    "配置",
    "编辑",
    "修改",
    "添加",
    "指定",
    "定义",
    "需要",
    "通过",
];

/// [`ACTION_WORDS`] as the analyzer reads them, computed once.
fn action_terms() -> &'static HashSet<String> {
    static TERMS: OnceLock<HashSet<String>> = OnceLock::new();
    TERMS.get_or_init(|| {
        let mut analyzer = cjk::text_analyzer();
        ACTION_WORDS
            .iter()
            .flat_map(|word| cjk::analyze(&mut analyzer, word))
            .collect()
    })
}

/// Whether a question asks yes or no ("Does …?", "Is …?", "…吗？", "是否…").
fn asks_yes_or_no(question: &str) -> bool {
    const AUXILIARIES: &[&str] = &[
        "do", "does", "did", "is", "are", "was", "were", "can", "could", "should", "will", "would",
        "has", "have", "may", "must",
    ];
    let first = question
        .split(|c: char| !c.is_ascii_alphabetic())
        .find(|word| !word.is_empty())
        .unwrap_or_default()
        .to_ascii_lowercase();
    AUXILIARIES.contains(&first.as_str())
        || [
            "吗",
            "是否",
            "是不是",
            "能不能",
            "要不要",
            "会不会",
            "有没有",
        ]
        .iter()
        .any(|marker| question.contains(marker))
}

/// Whether a text says no/not (its content terms leave negation out as a stop word).
fn negates(text: &str) -> bool {
    const NEGATIONS: &[&str] = &["no", "not", "never", "none", "cannot"];
    let lowered = text.to_lowercase();
    lowered
        .split(|c: char| !c.is_alphanumeric() && c != '\'')
        .any(|word| NEGATIONS.contains(&word) || word.ends_with("n't"))
        || ["不", "没", "无", "非"].iter().any(|n| text.contains(n))
}

/// Whether a sentence talks about the passages ("the fields are listed in the passage")
/// instead of stating what they say: it is not an answer.
pub fn about_the_passages(sentence: &str) -> bool {
    let lowered = sentence.to_lowercase();
    lowered
        .split(|c: char| !c.is_ascii_alphabetic())
        .any(|word| word == "passage" || word == "passages")
        || sentence.contains("资料")
}

/// The share of `wanted`'s content terms that `holder` holds; `None` when `wanted` has none.
fn share_held(wanted: &str, holder: &str) -> Option<f64> {
    let wanted = content_terms(wanted);
    if wanted.is_empty() {
        return None;
    }
    let held = content_terms(holder);
    Some(wanted.iter().filter(|t| held.contains(*t)).count() as f64 / wanted.len() as f64)
}

/// The share of `sentence`'s content terms found in `passage` (1.0 when it has none), or 0
/// when the passage lacks one of its `exact` terms (see [`exact_terms`]).
pub fn support(sentence: &str, exact: &[String], passage: &str) -> f64 {
    let normalised = normalise(passage);
    if !exact.iter().all(|term| holds_exact(&normalised, term)) {
        return 0.0;
    }
    share_held(sentence, passage).unwrap_or(1.0)
}

/// Whether a sentence states a fact that must be checked.
pub fn states_a_fact(sentence: &str) -> bool {
    let body = without_markers(sentence);
    content_terms(&body).len() >= FACT_TERMS || !exact_terms(sentence).is_empty() || names(&body)
}

/// Whether a sentence is a bare answer ("dirvish.", "DNSSEC"): a few Latin-script words,
/// not a lead-in to what follows, with a term of its own. Every term of it must be in the
/// passage. A short Chinese sentence ("直接回滚。") is a verdict in the model's words,
/// not a name: it stays a sentence without a fact of its own.
fn names(body: &str) -> bool {
    let trimmed = body.trim();
    trimmed.split_whitespace().count() <= BARE_WORDS
        && !trimmed.chars().any(is_cjk)
        && !trimmed.ends_with([':', '：'])
        && content_terms(trimmed)
            .iter()
            .any(|term| term.chars().any(char::is_alphabetic))
}

/// The verdict on one sentence against the passages it may rest on.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// No fact to check (a lead-in, a list number).
    NoFact,
    /// Supported by these passages (1-based numbers), best first.
    Supported(Vec<usize>),
    /// Not supported by any passage offered.
    Unsupported,
}

/// Checks `sentence` against `passages` (text of passage n at index n-1), preferring the
/// passages it cites; a sentence supported only by a passage it does not cite is supported
/// by that one (its markers are then corrected by the caller).
pub fn check(sentence: &str, passages: &[&str]) -> Verdict {
    let body = without_markers(sentence);
    if !states_a_fact(&body) {
        return Verdict::NoFact;
    }
    let exact = exact_terms(&body);
    let mut supporting: Vec<(usize, f64)> = passages
        .iter()
        .enumerate()
        .filter_map(|(i, passage)| {
            let share = support(&body, &exact, passage);
            let needed = if names(&body) { 1.0 } else { SUPPORT_SHARE };
            (share >= needed).then_some((i + 1, share))
        })
        .collect();
    if supporting.is_empty() {
        return Verdict::Unsupported;
    }
    let cited = super::answer_stream::cited_numbers(sentence, passages.len());
    supporting.sort_by(|a, b| {
        let a_cited = cited.contains(&a.0);
        let b_cited = cited.contains(&b.0);
        b_cited.cmp(&a_cited).then(b.1.total_cmp(&a.1))
    });
    Verdict::Supported(supporting.into_iter().map(|(n, _)| n).collect())
}

/// The sentence with its `[n]` markers removed.
pub fn without_markers(sentence: &str) -> String {
    let mut out = String::new();
    let mut rest = sentence;
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find(']') {
            Some(close) if after[..close].trim().parse::<usize>().is_ok() => {
                rest = &after[close + 1..];
            }
            _ => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The sentence citing exactly `numbers`, markers placed before its closing punctuation.
pub fn with_markers(sentence: &str, numbers: &[usize]) -> String {
    let body = without_markers(sentence);
    let trimmed = body.trim_end();
    let trailing = &body[trimmed.len()..];
    let end = trimmed
        .char_indices()
        .rev()
        .take_while(|(_, c)| ".!?。！？；;:：".contains(*c))
        .last()
        .map(|(i, _)| i)
        .unwrap_or(trimmed.len());
    let markers: String = numbers.iter().map(|n| format!("[{n}]")).collect();
    let (text, punctuation) = trimmed.split_at(end);
    format!("{} {markers}{punctuation}{trailing}", text.trim_end())
}

/// Splits streamed text into whole sentences: `push` returns those completed so far; a
/// sentence ends at `. ! ?` before whitespace, at `。！？；` or at a line break, and keeps
/// the `[n]` markers that follow its punctuation.
#[derive(Debug, Default)]
pub struct Sentences {
    pending: String,
}

impl Sentences {
    pub fn push(&mut self, text: &str) -> Vec<String> {
        self.pending.push_str(text);
        let mut done = Vec::new();
        while let Some(end) = sentence_end(&self.pending) {
            let rest = self.pending.split_off(end);
            done.push(std::mem::replace(&mut self.pending, rest));
        }
        done
    }

    /// The text after the last whole sentence (a final sentence without punctuation, or a
    /// sentence cut off).
    pub fn rest(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }
}

/// Byte offset just past the first complete sentence (with trailing markers and spaces),
/// or `None` while it may still continue.
fn sentence_end(text: &str) -> Option<usize> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    for (k, &(at, c)) in chars.iter().enumerate() {
        let closes = match c {
            '。' | '！' | '？' | '；' | '\n' => true,
            '.' | '!' | '?' => match chars.get(k + 1) {
                Some((_, next)) => next.is_whitespace() || *next == '[',
                None => false,
            },
            _ => false,
        };
        if !closes {
            continue;
        }
        // Take the markers and spaces that follow; wait while they may be incomplete.
        let mut end = at + c.len_utf8();
        loop {
            let rest = &text[end..];
            let trimmed = rest.trim_start_matches([' ', '\t']);
            if trimmed.is_empty() {
                return None;
            }
            if let Some(after) = trimmed.strip_prefix('[') {
                match after.find(']') {
                    Some(close) if after[..close].trim().parse::<usize>().is_ok() => {
                        end += rest.len() - trimmed.len() + 1 + close + 1;
                        continue;
                    }
                    None if after.len() < 4 && after.chars().all(|c| c.is_ascii_digit()) => {
                        return None
                    }
                    _ => {}
                }
            }
            end += rest.len() - trimmed.len();
            return Some(end);
        }
    }
    None
}

/// How well a line answers a question: the share of the question's content terms the line
/// holds (lines of a passage are scored for the extractive answer).
pub fn line_score(question: &str, line: &str) -> f64 {
    share_held(question, line).unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DISK: &str = "When a disk is full, run `df -hT` to see usage per filesystem and \
                        `df -i` for inodes. Then find large files with `du -xh / | sort -h`.";

    #[test]
    fn a_paraphrase_of_the_passage_is_supported() {
        let verdict = check(
            "Run `df -hT` to see the usage of each filesystem [1].",
            &[DISK],
        );
        assert_eq!(verdict, Verdict::Supported(vec![1]));
    }

    #[test]
    fn invented_facts_and_commands_are_unsupported() {
        assert_eq!(
            check(
                "Restart the kubelet and clear the docker image cache [1].",
                &[DISK]
            ),
            Verdict::Unsupported
        );
        // The words match but the command is not in the passage.
        assert_eq!(
            check(
                "Run `rm -rf /var/lib` to see usage per filesystem.",
                &[DISK]
            ),
            Verdict::Unsupported
        );
        assert_eq!(
            check("Usage per filesystem above 95% is shown by df.", &[DISK]),
            Verdict::Unsupported
        );
    }

    #[test]
    fn a_quantity_must_appear_with_its_unit() {
        let steps = "Classify the error. Read-only until step 5. Set lock_timeout per session.";
        assert_eq!(
            check("The default lock_timeout is 5 seconds [1].", &[steps]),
            Verdict::Unsupported
        );
        let timeouts = "Set lock_timeout to 5 seconds for migrations.";
        assert_eq!(
            check("Set lock_timeout to 5 seconds [1].", &[timeouts]),
            Verdict::Supported(vec![1])
        );
    }

    #[test]
    fn an_answer_must_tell_more_than_the_question() {
        let question = "After MySQL error 1205, what is rolled back by default?";
        assert!(!adds_to(
            question,
            "MySQL error 1205 rolls back by default [3]."
        ));
        assert!(adds_to(
            question,
            "Only the current statement is rolled back [3]."
        ));
        assert!(adds_to(
            "Does a feature behind a flag need a redeploy?",
            "A feature behind a flag does not need a redeploy [1]."
        ));
        // Restating a yes-or-no question is the answer "yes".
        assert!(adds_to(
            "Does a deadlock abort one transaction?",
            "A deadlock aborts one transaction [1]."
        ));
        assert!(adds_to(
            "Which port does sshd listen on?",
            "sshd listens on port 22 [1]."
        ));
        assert!(adds_to(
            "功能由开关控制，需要重新发布哪个服务？",
            "功能由开关控制，不需要重新发布 [2]。"
        ));
        assert!(!adds_to(
            "Nginx 返回 504 时，默认多长时间后返回？",
            "Nginx 返回 504 时，默认多长时间后返回 [2]。"
        ));
        // A verb of doing is not an answer of its own.
        assert!(!adds_to(
            "How do I write a systemd timer unit that replaces a daily cron job?",
            "Create a systemd timer unit that replaces the daily cron job [1]."
        ));
        assert!(adds_to(
            "How do I write a systemd timer unit that replaces a daily cron job?",
            "Create a unit with OnCalendar=daily [1]."
        ));
    }

    #[test]
    fn a_sentence_about_the_passages_is_not_an_answer() {
        assert!(about_the_passages(
            "The fields of /etc/anacrontab are listed in the passage [1]."
        ));
        assert!(about_the_passages("资料 [1] 中列出了这些字段。"));
        assert!(!about_the_passages(
            "Run `df -i` to see inode use per filesystem [1]."
        ));
    }

    #[test]
    fn names_are_what_a_question_asks_about() {
        assert_eq!(
            named_terms("How do I enable the slow query profiler in MongoDB?"),
            ["mongodb"]
        );
        assert_eq!(
            named_terms("What is Nginx's default client_max_body_size?"),
            ["nginx", "client_max_body_size"]
        );
        assert_eq!(named_terms("用 Argo CD 管理的应用要怎么回滚？"), ["argo"]);
        assert_eq!(named_terms("How are quotas managed on XFS?"), ["xfs"]);
        // Sentence capitals, two-letter abbreviations and what a user pastes about their own
        // system are not.
        assert!(named_terms(
            "Disk on db-7.example.com is 95% full. What does the DB or MB have to do with it?"
        )
        .is_empty());
        assert!(holds_names(
            "Which Docker command shows disk use?",
            "Run `docker system df` to see what images take."
        ));
        assert!(!holds_names(
            "How do I roll back an app in Argo CD?",
            "Roll back with kubectl rollout undo."
        ));
    }

    #[test]
    fn a_sentence_is_credited_to_the_passage_that_supports_it() {
        let other = "Deadlocks are resolved by the database aborting one transaction.";
        let verdict = check("Use `df -i` for inodes [1].", &[other, DISK]);
        assert_eq!(verdict, Verdict::Supported(vec![2]));
        assert_eq!(
            with_markers("Use `df -i` for inodes [1].", &[2]),
            "Use `df -i` for inodes [2]."
        );
    }

    #[test]
    fn lead_ins_state_no_fact() {
        assert_eq!(check("Here is what to do:", &[DISK]), Verdict::NoFact);
        assert_eq!(check("1.", &[DISK]), Verdict::NoFact);
    }

    #[test]
    fn a_chinese_quantity_must_appear_in_the_passage() {
        let passage = "软限制超出后，用户有一段宽限期，可以用 edquota -t 设置。用户名由字母组成。";
        assert_eq!(
            check("软限制的默认宽限期是 7 天 [1]。", &[passage]),
            Verdict::Unsupported
        );
        let passage = "软限制超出后，默认宽限期为7天，可以用 edquota -t 修改。";
        assert_eq!(
            check("软限制的默认宽限期是 7 天 [1]。", &[passage]),
            Verdict::Supported(vec![1])
        );
    }

    #[test]
    fn a_code_span_is_compared_without_a_trailing_escape() {
        let passage = "Run `SHOW ENGINE INNODB STATUS` and read LATEST DETECTED DEADLOCK.";
        assert_eq!(
            check(
                "用 `SHOW ENGINE INNODB STATUS\\` 查看最近的死锁 [1]。",
                &[passage]
            ),
            Verdict::Supported(vec![1])
        );
    }

    #[test]
    fn a_bare_answer_is_a_fact_the_passage_must_hold() {
        let passage = "Backups are organised by dirvish into vaults of hard links.";
        assert_eq!(
            check("dirvish [1].", &[passage]),
            Verdict::Supported(vec![1])
        );
        assert_eq!(check("restic [1].", &[passage]), Verdict::Unsupported);
        assert_eq!(
            check("dirvish vaults restic.", &[passage]),
            Verdict::Unsupported
        );
        assert_eq!(check("直接回滚。", &[passage]), Verdict::NoFact);
    }

    #[test]
    fn chinese_is_compared_by_character_bigrams() {
        let passage = "磁盘满了时，先用 df -h 查看各文件系统的使用率，再用 du 找出大文件。";
        assert!(matches!(
            check("先用 df -h 查看文件系统使用率 [1]。", &[passage]),
            Verdict::Supported(_)
        ));
        assert_eq!(
            check("应该立即重启数据库服务器并扩容内存 [1]。", &[passage]),
            Verdict::Unsupported
        );
    }

    #[test]
    fn sentences_are_released_whole_with_their_markers() {
        let mut split = Sentences::default();
        assert!(split.push("Run df -h").is_empty());
        assert!(split.push(" first.").is_empty());
        assert!(split.push(" [1").is_empty());
        assert_eq!(
            split.push("] Then du."),
            vec!["Run df -h first. [1] ".to_owned()]
        );
        assert_eq!(
            split.push(" 3.5 GB free。next"),
            vec!["Then du. ".to_owned(), "3.5 GB free。".to_owned()]
        );
        assert_eq!(split.rest(), "next");
    }

    #[test]
    fn markers_are_replaced_before_the_closing_punctuation() {
        assert_eq!(
            with_markers("Check inodes.", &[1, 2]),
            "Check inodes [1][2]."
        );
        assert_eq!(with_markers("检查 inode。[3]", &[1]), "检查 inode [1]。");
        assert_eq!(without_markers("a [1] b [x] c[2]"), "a  b [x] c");
    }

    #[test]
    fn the_line_that_answers_scores_highest() {
        let q = "Which command shows inode usage?";
        assert!(line_score(q, "Run df -i for inode usage.") > line_score(q, "Disks fill up."));
    }
}
