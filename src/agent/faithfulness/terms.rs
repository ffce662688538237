//! The words the gate compares: a text's content terms as the search index reads them
//! (English stemmed, Chinese segmented, stop and question words dropped), the terms that
//! must appear verbatim (code, numbers, paths, flags, quantities with their unit), and the
//! verbs of doing that tell nothing of their own.

use std::collections::HashSet;
use std::sync::OnceLock;

use crate::retrieval::cjk;

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

pub(super) fn is_cjk(c: char) -> bool {
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
pub(super) fn holds_exact(normalised: &str, term: &str) -> bool {
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
pub(super) fn action_terms() -> &'static HashSet<String> {
    static TERMS: OnceLock<HashSet<String>> = OnceLock::new();
    TERMS.get_or_init(|| {
        let mut analyzer = cjk::text_analyzer();
        ACTION_WORDS
            .iter()
            .flat_map(|word| cjk::analyze(&mut analyzer, word))
            .collect()
    })
}

/// Whether a question asks for a quantity: it leads with "how many", "how long" …, or asks
/// 几天, 多少, 多久 … with no other question word. "How can I see how much disk the journal
/// uses?" and "怎么查看占用了多少磁盘？" ask for a way, not a number.
pub(super) fn asks_for_a_number(question: &str) -> bool {
    const ENGLISH: &[&str] = &["how many", "how much", "how long", "how large", "how big"];
    const CHINESE: &[&str] = &["多少", "多久", "多长", "多大"];
    const OTHER_CHINESE: &[&str] = &["怎么", "怎样", "如何", "哪", "什么", "为何"];
    let lower = question.trim_start().to_lowercase();
    if ENGLISH.iter().any(|phrase| lower.starts_with(phrase)) {
        return true;
    }
    // 几 asks "how many" (几天, 几个), except in 几乎 ("almost").
    let asks = CHINESE.iter().any(|phrase| question.contains(phrase))
        || question.replace("几乎", "").contains('几');
    asks && !OTHER_CHINESE.iter().any(|word| question.contains(word))
}

/// Whether a text states a quantity: a digit, an English number word, or a Chinese numeral.
pub(super) fn holds_a_number(text: &str) -> bool {
    const WORDS: &[&str] = &[
        "zero",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "fifteen",
        "twenty",
        "thirty",
        "forty",
        "fifty",
        "sixty",
        "hundred",
        "thousand",
        "million",
        "billion",
        "dozen",
        "half",
        "once",
        "twice",
        "single",
        "unlimited",
        // A vague quantity is still one: "older than a few minutes".
        "few",
        "several",
        "couple",
    ];
    const NUMERALS: &str = "零一二两三四五六七八九十百千万亿半";
    text.chars()
        .any(|c| c.is_ascii_digit() || NUMERALS.contains(c))
        || text
            .split(|c: char| !c.is_ascii_alphabetic())
            .any(|word| WORDS.contains(&word.to_ascii_lowercase().as_str()))
}
