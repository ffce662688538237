//! Cutting text that is too long for one chunk, and finding the tail of a chunk to
//! repeat at the start of the next. Cuts fall at the coarsest boundary that works:
//! lines (code, tables) or sentences (prose), then lines, words (every CJK character is a
//! word), and characters as the last resort. Pieces are always contiguous byte ranges of
//! the original text, trimmed of surrounding whitespace.

use std::ops::Range;

use crate::retrieval::TokenCounter;

/// How a text is cut first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Grain {
    /// Code and tables: whole lines.
    Lines,
    /// Prose: whole sentences.
    Sentences,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Boundary {
    Sentence,
    Line,
    Word,
    Char,
}

impl Grain {
    /// The boundaries to try, coarsest first.
    fn boundaries(self) -> &'static [Boundary] {
        match self {
            Grain::Lines => &[Boundary::Line, Boundary::Word, Boundary::Char],
            Grain::Sentences => &[
                Boundary::Sentence,
                Boundary::Line,
                Boundary::Word,
                Boundary::Char,
            ],
        }
    }
}

/// Cuts `text` into units for the chunker to pack: trimmed, ordered, non-empty ranges
/// of at most `max_tokens` tokens each (a single character may count more; it is kept
/// whole). Every line (code) or sentence (prose) that fits is a unit of its own; longer
/// ones are cut at finer boundaries into runs as long as fit.
pub(super) fn split_units(
    text: &str,
    grain: Grain,
    max_tokens: usize,
    counter: &dyn TokenCounter,
) -> Vec<Range<usize>> {
    let splitter = Splitter {
        text,
        grain,
        max_tokens,
        counter,
    };
    let (&first, finer) = grain
        .boundaries()
        .split_first()
        .expect("every grain has boundaries");
    let mut units = Vec::new();
    for segment in segments(text, 0..text.len(), first) {
        if splitter.fits(std::slice::from_ref(&segment), 0, 1) {
            splitter.push_trimmed(segment, &mut units);
        } else {
            splitter.split(segment, finer, &mut units);
        }
    }
    units
}

/// Where the longest tail of `text` within `budget` tokens starts: whole sentences (or
/// lines) when the last one fits, else whole words. `None` when not even the last word
/// fits, or when the tail would be all of `text`.
pub(super) fn tail_start(
    text: &str,
    grain: Grain,
    budget: usize,
    counter: &dyn TokenCounter,
) -> Option<usize> {
    if budget == 0 {
        return None;
    }
    let boundaries = grain.boundaries();
    let start = tail_within(
        text,
        0..text.len(),
        grain,
        &boundaries[..boundaries.len() - 1],
        budget,
        counter,
    )?;
    (start > trim(text, 0..text.len(), grain).start).then_some(start)
}

fn tail_within(
    text: &str,
    range: Range<usize>,
    grain: Grain,
    boundaries: &[Boundary],
    budget: usize,
    counter: &dyn TokenCounter,
) -> Option<usize> {
    let (&boundary, finer) = boundaries.split_first()?;
    let segments = segments(text, range.clone(), boundary);
    let mut best = None;
    for segment in segments.iter().rev() {
        let candidate = trim(text, segment.start..range.end, grain);
        if candidate.is_empty() {
            continue;
        }
        if counter.count(&text[candidate.clone()]) > budget {
            break;
        }
        best = Some(candidate.start);
    }
    best.or_else(|| {
        let last = segments
            .iter()
            .rev()
            .find(|s| !trim(text, (*s).clone(), grain).is_empty())?;
        tail_within(text, last.clone(), grain, finer, budget, counter)
    })
}

struct Splitter<'a> {
    text: &'a str,
    grain: Grain,
    max_tokens: usize,
    counter: &'a dyn TokenCounter,
}

impl Splitter<'_> {
    /// Cuts `range` at the first of `boundaries` into runs as long as fit, cutting a
    /// segment that does not fit alone at the next boundaries.
    fn split(&self, range: Range<usize>, boundaries: &[Boundary], pieces: &mut Vec<Range<usize>>) {
        let Some((&boundary, finer)) = boundaries.split_first() else {
            self.push_trimmed(range, pieces);
            return;
        };
        let segments = segments(self.text, range, boundary);
        let mut first = 0;
        while first < segments.len() {
            if !self.fits(&segments, first, first + 1) {
                if finer.is_empty() {
                    self.push_trimmed(segments[first].clone(), pieces);
                } else {
                    self.split(segments[first].clone(), finer, pieces);
                }
                first += 1;
                continue;
            }
            let end = self.longest_fit(&segments, first);
            self.push_trimmed(segments[first].start..segments[end - 1].end, pieces);
            first = end;
        }
    }

    /// The largest `end` such that segments `first..end` fit together, knowing that
    /// `first..first + 1` does: doubling steps, then bisection (counts are taken as
    /// growing with the text).
    fn longest_fit(&self, segments: &[Range<usize>], first: usize) -> usize {
        let mut good = first + 1;
        let mut step = 1;
        let mut bad = None;
        while good < segments.len() {
            let probe = (good + step).min(segments.len());
            if self.fits(segments, first, probe) {
                good = probe;
                step *= 2;
            } else {
                bad = Some(probe);
                break;
            }
        }
        if let Some(mut bad) = bad {
            while bad - good > 1 {
                let middle = good + (bad - good) / 2;
                if self.fits(segments, first, middle) {
                    good = middle;
                } else {
                    bad = middle;
                }
            }
        }
        good
    }

    fn fits(&self, segments: &[Range<usize>], first: usize, end: usize) -> bool {
        let range = trim(
            self.text,
            segments[first].start..segments[end - 1].end,
            self.grain,
        );
        self.counter.count(&self.text[range]) <= self.max_tokens
    }

    fn push_trimmed(&self, range: Range<usize>, pieces: &mut Vec<Range<usize>>) {
        let range = trim(self.text, range, self.grain);
        if !range.is_empty() {
            pieces.push(range);
        }
    }
}

/// `range` without the whitespace at its ends; for `Grain::Lines`, the indentation of
/// the first line is kept (only blank lines are dropped in front).
pub(super) fn trim(text: &str, range: Range<usize>, grain: Grain) -> Range<usize> {
    let slice = &text[range.clone()];
    let leading = &slice[..slice.len() - slice.trim_start().len()];
    let skipped = match grain {
        Grain::Lines => leading.rfind('\n').map_or(0, |newline| newline + 1),
        Grain::Sentences => leading.len(),
    };
    let start = range.start + skipped;
    let end = range.end - (slice.len() - slice.trim_end().len());
    start..end.max(start)
}

/// Contiguous ranges covering `range`, cut after each boundary of the given kind.
fn segments(text: &str, range: Range<usize>, boundary: Boundary) -> Vec<Range<usize>> {
    let slice = &text[range.clone()];
    let mut cuts: Vec<usize> = match boundary {
        Boundary::Line => slice.match_indices('\n').map(|(i, _)| i + 1).collect(),
        Boundary::Sentence => sentence_ends(slice),
        Boundary::Word => word_starts(slice),
        Boundary::Char => slice.char_indices().map(|(i, _)| i).skip(1).collect(),
    };
    cuts.retain(|&cut| cut > 0 && cut < slice.len());
    let mut segments = Vec::with_capacity(cuts.len() + 1);
    let mut start = 0;
    for cut in cuts {
        segments.push(range.start + start..range.start + cut);
        start = cut;
    }
    segments.push(range.start + start..range.end);
    segments
}

/// Offsets just after each sentence end: `.`, `!` or `?` followed by whitespace (so
/// that `3.14` and `example.com` stay whole), or a CJK `。！？；` anywhere; closing
/// quotes and brackets right after the mark stay with the sentence.
fn sentence_ends(text: &str) -> Vec<usize> {
    let mut ends = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some((index, c)) = chars.next() {
        let cjk_end = matches!(c, '。' | '！' | '？' | '；');
        if !cjk_end && !matches!(c, '.' | '!' | '?') {
            continue;
        }
        let mut end = index + c.len_utf8();
        while let Some(&(next_index, next)) = chars.peek() {
            if !matches!(
                next,
                '"' | '\'' | '”' | '’' | ')' | ']' | '」' | '』' | '）' | '》'
            ) {
                break;
            }
            end = next_index + next.len_utf8();
            chars.next();
        }
        let followed_by_space = chars.peek().is_none_or(|&(_, next)| next.is_whitespace());
        if cjk_end || followed_by_space {
            ends.push(end);
        }
    }
    ends
}

/// Offsets where a word starts: after whitespace, and at and after every CJK character.
fn word_starts(text: &str) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut previous: Option<char> = None;
    for (index, c) in text.char_indices() {
        if let Some(before) = previous {
            let starts_word =
                !c.is_whitespace() && (before.is_whitespace() || is_cjk(before) || is_cjk(c));
            if starts_word {
                starts.push(index);
            }
        }
        previous = Some(c);
    }
    starts
}

/// Characters of scripts written without spaces between words (CJK ideographs, kana,
/// hangul, and their punctuation and full-width forms).
fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x2E80..=0x9FFF | 0xAC00..=0xD7AF | 0xF900..=0xFAFF | 0xFE30..=0xFE4F | 0xFF00..=0xFFEF | 0x20000..=0x2FA1F)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Counts whitespace-separated words, and every CJK character as a word.
    pub(crate) struct WordCounter;

    impl TokenCounter for WordCounter {
        fn count(&self, text: &str) -> usize {
            let mut count = 0;
            let mut in_word = false;
            for c in text.chars() {
                if is_cjk(c) {
                    count += 1;
                    in_word = false;
                } else if c.is_whitespace() {
                    in_word = false;
                } else if !in_word {
                    count += 1;
                    in_word = true;
                }
            }
            count
        }
    }

    fn split(text: &str, grain: Grain, max: usize) -> Vec<&str> {
        split_units(text, grain, max, &WordCounter)
            .into_iter()
            .map(|r| &text[r])
            .collect()
    }

    #[test]
    fn sentences_are_units_when_they_fit() {
        let text = "One two three. Four five six! Seven eight nine? Pi is 3.14 here. End.";
        assert_eq!(
            split(text, Grain::Sentences, 6),
            vec![
                "One two three.",
                "Four five six!",
                "Seven eight nine?",
                "Pi is 3.14 here.",
                "End."
            ]
        );
    }

    #[test]
    fn long_sentences_fall_back_to_words_then_characters() {
        assert_eq!(
            split("a b c d e f g", Grain::Sentences, 3),
            vec!["a b c", "d e f", "g"]
        );
        // A single word longer than the budget is still one token to this counter.
        assert_eq!(
            split("supercalifragilistic", Grain::Sentences, 1),
            vec!["supercalifragilistic"]
        );
    }

    #[test]
    fn chinese_splits_at_marks_then_characters() {
        assert_eq!(
            split("数据库连接。检查慢查询！然后重启", Grain::Sentences, 6),
            vec!["数据库连接。", "检查慢查询！", "然后重启"]
        );
        let text = "一二三四五六七八九十";
        assert_eq!(
            split(text, Grain::Sentences, 4),
            vec!["一二三四", "五六七八", "九十"]
        );
        assert_eq!(
            split("他说：“好。”然后走了。", Grain::Sentences, 8),
            vec!["他说：“好。”", "然后走了。"]
        );
    }

    #[test]
    fn code_splits_at_lines() {
        let code = "fn a() {\n    one();\n    two();\n}\nfn b() {}\n";
        assert_eq!(
            split(code, Grain::Lines, 4),
            vec!["fn a() {", "    one();", "    two();", "}", "fn b() {}"]
        );
        assert_eq!(
            split("short\nthis line is far too long\n", Grain::Lines, 3),
            vec!["short", "this line is", "far too long"]
        );
    }

    #[test]
    fn tails_prefer_whole_sentences() {
        let text = "First sentence here. Second one. Third and last one.";
        let tail = |budget| {
            tail_start(text, Grain::Sentences, budget, &WordCounter).map(|start| &text[start..])
        };
        assert_eq!(tail(4), Some("Third and last one."));
        assert_eq!(tail(6), Some("Second one. Third and last one."));
        assert_eq!(tail(2), Some("last one."));
        assert_eq!(tail(20), None, "the tail would be the whole text");
        assert_eq!(tail(0), None);
        assert_eq!(
            tail_start("甲乙丙丁", Grain::Sentences, 2, &WordCounter).map(|s| &"甲乙丙丁"[s..]),
            Some("丙丁")
        );
    }
}
