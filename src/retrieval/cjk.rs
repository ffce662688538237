//! The `warden_text` analyzer: one tantivy analyzer for mixed English and CJK text, used
//! both to index chunks and to turn a user's query into terms. It owns the choice of word
//! boundaries (jieba for Han text, bigrams for kana and Hangul, Unicode words elsewhere)
//! and the normalisation chain (lowercase, length cap, English stop words, English stems).
//! It never touches an index.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::OnceLock;

use jieba_rs::Jieba;
use tantivy::tokenizer::{
    Language, LowerCaser, RemoveLongFilter, Stemmer, StopWordFilter, TextAnalyzer, Token,
    TokenStream, Tokenizer, TokenizerManager,
};

/// The name the analyzer is registered under in a tantivy index.
pub const ANALYZER_NAME: &str = "warden_text";

/// Tokens longer than this many bytes (base64 blobs, hashes, minified code) are dropped.
pub const MAX_TOKEN_BYTES: usize = 40;

/// The analyzer chain: mixed-script words, lowercased, long tokens dropped, English stop
/// words removed, English words stemmed. CJK words pass through the English filters
/// unchanged.
pub fn text_analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(MixedScriptTokenizer::default())
        .filter(LowerCaser)
        .filter(RemoveLongFilter::limit(MAX_TOKEN_BYTES))
        .filter(english_stop_words())
        .filter(Stemmer::new(Language::English))
        .build()
}

/// Registers the analyzer under [`ANALYZER_NAME`].
pub fn register(manager: &TokenizerManager) {
    manager.register(ANALYZER_NAME, text_analyzer());
}

/// The terms the analyzer makes of `text`, in order (repeats kept).
pub fn analyze(analyzer: &mut TextAnalyzer, text: &str) -> Vec<String> {
    let mut terms = Vec::new();
    let mut stream = analyzer.token_stream(text);
    while let Some(token) = stream.next() {
        terms.push(token.text.clone());
    }
    terms
}

/// The base tokenizer: splits text into script runs and each run into words. Offsets are
/// byte offsets into the original text; positions count up by one per token.
#[derive(Clone, Default)]
pub struct MixedScriptTokenizer {
    token: Token,
}

impl Tokenizer for MixedScriptTokenizer {
    type TokenStream<'a> = MixedScriptTokenStream<'a>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> MixedScriptTokenStream<'a> {
        self.token.reset();
        MixedScriptTokenStream {
            text,
            cursor: 0,
            pending: VecDeque::new(),
            token: &mut self.token,
        }
    }
}

/// The stream of [`MixedScriptTokenizer`]: scans forward from `cursor`, one run at a time;
/// a CJK run is segmented at once and its words wait in `pending`.
pub struct MixedScriptTokenStream<'a> {
    text: &'a str,
    cursor: usize,
    pending: VecDeque<(usize, usize)>,
    token: &'a mut Token,
}

impl TokenStream for MixedScriptTokenStream<'_> {
    fn advance(&mut self) -> bool {
        loop {
            if let Some((start, end)) = self.pending.pop_front() {
                let text = self.text;
                self.emit(start, end, &text[start..end]);
                return true;
            }
            let Some((start, first)) = next_token_start(self.text, self.cursor) else {
                self.cursor = self.text.len();
                return false;
            };
            match script_of(first) {
                Script::Han => {
                    let end = run_end(self.text, start, |c| script_of(c) == Script::Han);
                    self.pending
                        .extend(segment_han(&self.text[start..end], start));
                    self.cursor = end;
                }
                Script::KanaOrHangul => {
                    let end = run_end(self.text, start, |c| script_of(c) == Script::KanaOrHangul);
                    self.pending
                        .extend(character_bigrams(self.text, start, end));
                    self.cursor = end;
                }
                Script::Word => {
                    let end = word_end(self.text, start);
                    self.cursor = end;
                    let word = normalize_apostrophes(&self.text[start..end]);
                    if !word.is_empty() {
                        self.emit(start, end, &word);
                        return true;
                    }
                }
                Script::Other => self.cursor = start + first.len_utf8(),
            }
        }
    }

    fn token(&self) -> &Token {
        self.token
    }

    fn token_mut(&mut self) -> &mut Token {
        self.token
    }
}

impl MixedScriptTokenStream<'_> {
    fn emit(&mut self, start: usize, end: usize, text: &str) {
        self.token.offset_from = start;
        self.token.offset_to = end;
        self.token.position = self.token.position.wrapping_add(1);
        self.token.text.clear();
        self.token.text.push_str(text);
    }
}

/// How a character takes part in tokenization.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Script {
    /// Han ideographs: segmented by jieba's Chinese dictionary.
    Han,
    /// Kana and Hangul: jieba's dictionary has no words for them (it emits one character
    /// at a time), so they are indexed as overlapping character bigrams.
    KanaOrHangul,
    /// Letters and digits of every other script: whitespace/punctuation-delimited words.
    Word,
    /// Whitespace, punctuation (ASCII and full-width), symbols: never part of a token.
    Other,
}

fn script_of(c: char) -> Script {
    match c as u32 {
        0x3400..=0x4DBF
        | 0x4E00..=0x9FFF
        | 0xF900..=0xFAFF
        | 0x20000..=0x323AF
        | 0x3005
        | 0x3007 => Script::Han,
        0x3040..=0x309F | 0x30A0..=0x30FA | 0x30FC..=0x30FF | 0x31F0..=0x31FF | 0xFF66..=0xFF9F => {
            Script::KanaOrHangul
        }
        0x1100..=0x11FF | 0x3130..=0x318F | 0xA960..=0xA97F | 0xAC00..=0xD7AF | 0xD7B0..=0xD7FF => {
            Script::KanaOrHangul
        }
        _ if c.is_alphanumeric() => Script::Word,
        _ => Script::Other,
    }
}

/// Combining marks continue the word they follow (decomposed accents, Indic vowel signs).
fn is_combining_mark(c: char) -> bool {
    matches!(c as u32, 0x0300..=0x036F | 0x1AB0..=0x1AFF | 0x1DC0..=0x1DFF | 0x20D0..=0x20FF | 0xFE20..=0xFE2F)
        || (matches!(c as u32, 0x0900..=0x0DFF)
            && !c.is_alphanumeric()
            && !matches!(c, '\u{0964}' | '\u{0965}'))
}

fn is_apostrophe(c: char) -> bool {
    matches!(c, '\'' | '\u{2019}')
}

/// The first character at or after `from` that starts a token.
fn next_token_start(text: &str, from: usize) -> Option<(usize, char)> {
    text[from..]
        .char_indices()
        .map(|(i, c)| (from + i, c))
        .find(|&(_, c)| script_of(c) != Script::Other)
}

/// The end of the run starting at `start` whose characters satisfy `in_run`.
fn run_end(text: &str, start: usize, in_run: impl Fn(char) -> bool) -> usize {
    text[start..]
        .char_indices()
        .find(|&(_, c)| !in_run(c))
        .map_or(text.len(), |(i, _)| start + i)
}

/// The end of the word starting at `start`. A word is letters and digits of non-CJK
/// scripts plus combining marks; an apostrophe between two letters (`don't`) and a `.` or
/// `,` between two digits (`3.5`, `1,000`) stay inside it. Everything else ends it,
/// including `-` and `_`, so `IL-6` and `max_connections` are two words each.
fn word_end(text: &str, start: usize) -> usize {
    let mut previous: Option<char> = None;
    let mut chars = text[start..].char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let next = chars.peek().map(|&(_, n)| n);
        let inside = match c {
            _ if script_of(c) == Script::Word => true,
            _ if is_combining_mark(c) => previous.is_some(),
            _ if is_apostrophe(c) => is_word_letter(previous) && is_word_letter(next),
            '.' | ',' => is_digit(previous) && is_digit(next),
            _ => false,
        };
        if !inside {
            return start + i;
        }
        previous = Some(c);
    }
    text.len()
}

fn is_word_letter(c: Option<char>) -> bool {
    c.is_some_and(|c| c.is_alphabetic() && script_of(c) == Script::Word)
}

fn is_digit(c: Option<char>) -> bool {
    c.is_some_and(|c| c.is_numeric())
}

/// Drops a possessive `'s` and removes the other apostrophes: `John's` → `John`,
/// `don't` → `dont`, `O'Neill` → `ONeill`, so every spelling meets the same term.
fn normalize_apostrophes(word: &str) -> Cow<'_, str> {
    if !word.contains(is_apostrophe) {
        return Cow::Borrowed(word);
    }
    let trimmed = ["'s", "'S", "\u{2019}s", "\u{2019}S"]
        .iter()
        .find_map(|suffix| word.strip_suffix(suffix))
        .unwrap_or(word);
    Cow::Owned(trimmed.chars().filter(|&c| !is_apostrophe(c)).collect())
}

/// The dictionary segmenter, loaded once (about 0.1 s) on first use.
fn jieba() -> &'static Jieba {
    static JIEBA: OnceLock<Jieba> = OnceLock::new();
    JIEBA.get_or_init(Jieba::new)
}

/// Byte ranges (offset by `base`) of the words of a Han run, in jieba's search mode: long
/// words are also offered as their dictionary sub-words (`数据库` gives `数据`, `据库`,
/// `数据库`), which lets a query's shorter word match a document's longer one.
fn segment_han(run: &str, base: usize) -> Vec<(usize, usize)> {
    jieba()
        .cut_for_search(run, true)
        .into_iter()
        .filter(|token| !token.word.trim().is_empty())
        .map(|token| (base + token.byte_start, base + token.byte_end))
        .collect()
}

/// Overlapping two-character ranges of `text[start..end]`; the run itself if it is a
/// single character.
fn character_bigrams(text: &str, start: usize, end: usize) -> Vec<(usize, usize)> {
    let boundaries: Vec<usize> = text[start..end]
        .char_indices()
        .map(|(i, _)| start + i)
        .chain([end])
        .collect();
    if boundaries.len() <= 2 {
        return vec![(start, end)];
    }
    boundaries.windows(3).map(|w| (w[0], w[2])).collect()
}

fn english_stop_words() -> StopWordFilter {
    // tantivy's `stopwords` feature (enabled in Cargo.toml) provides the English list, the
    // one Lucene's EnglishAnalyzer uses; without the feature `new` returns None.
    StopWordFilter::new(Language::English).unwrap_or_else(|| StopWordFilter::remove(Vec::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(text: &str) -> Vec<String> {
        analyze(&mut text_analyzer(), text)
    }

    fn raw_tokens(text: &str) -> Vec<(String, usize, usize, usize)> {
        let mut tokenizer = MixedScriptTokenizer::default();
        let mut stream = tokenizer.token_stream(text);
        let mut out = Vec::new();
        while let Some(t) = stream.next() {
            out.push((t.text.clone(), t.offset_from, t.offset_to, t.position));
        }
        out
    }

    fn check(text: &str, expected: &[&str]) {
        assert_eq!(terms(text), expected, "terms of {text:?}");
    }

    #[test]
    fn chinese_is_segmented_into_dictionary_words() {
        let terms = terms("数据库死锁如何排查");
        for word in ["数据库", "死锁", "排查"] {
            assert!(
                terms.iter().any(|t| t == word),
                "{word} missing from {terms:?}"
            );
        }
        assert!(!terms.iter().any(|t| t == "数据库死锁如何排查"));
    }

    #[test]
    fn english_is_lowercased_stemmed_and_stopped() {
        check(
            "Deadlocks detected in PostgreSQL",
            &["deadlock", "detect", "postgresql"],
        );
        check("The indexes are being rebuilt", &["index", "be", "rebuilt"]);
    }

    #[test]
    fn mixed_text_keeps_both_scripts() {
        let terms = terms("我们在PostgreSQL里发现了死锁，怎么办？");
        for word in ["postgresql", "发现", "死锁", "怎么办"] {
            assert!(
                terms.iter().any(|t| t == word),
                "{word} missing from {terms:?}"
            );
        }
        check("2023年", &["2023", "年"]);
    }

    #[test]
    fn punctuation_never_becomes_a_token() {
        check("。，？！：；（）【】「」、…—", &[]);
        check("foo:bar ( \" ) -- !!", &["foo", "bar"]);
        let terms = terms("【注意】数据库。");
        assert!(
            terms
                .iter()
                .all(|t| t.chars().all(|c| script_of(c) != Script::Other)),
            "{terms:?}"
        );
    }

    #[test]
    fn offsets_are_bytes_into_the_original_text() {
        let text = "Héllo 数据库，world's end";
        for (word, from, to, _) in raw_tokens(text) {
            let source = &text[from..to];
            assert_eq!(normalize_apostrophes(source), word);
        }
        let tokens = raw_tokens("ab 死锁");
        assert_eq!(
            tokens,
            [("ab".to_owned(), 0, 2, 0), ("死锁".to_owned(), 3, 9, 1)]
        );
    }

    #[test]
    fn apostrophes_and_numbers() {
        check("John's book", &["john", "book"]);
        check("don't stop", &["dont", "stop"]);
        check("it’s 3.5 or 1,000 'quoted'", &["3.5", "1,000", "quot"]);
        check("IL-6 max_connections", &["il", "6", "max", "connect"]);
    }

    #[test]
    fn kana_and_hangul_become_bigrams() {
        let tokens: Vec<String> = raw_tokens("東京タワー 한국어")
            .into_iter()
            .map(|t| t.0)
            .collect();
        assert_eq!(tokens, ["東京", "タワ", "ワー", "한국", "국어"]);
        check("の", &["の"]);
    }

    #[test]
    fn long_tokens_are_dropped() {
        let blob = "a".repeat(MAX_TOKEN_BYTES + 1);
        check(&format!("keep {blob} this"), &["keep"]);
    }

    #[test]
    fn empty_and_whitespace_text_have_no_tokens() {
        check("", &[]);
        check(" \n\t\u{3000}", &[]);
    }
}
