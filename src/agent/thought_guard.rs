//! Keeps a ReAct step's hidden thought out of what the user sees. A small model often
//! writes its `thought.summary` and then copies it into the answer or question of the same
//! step; that copy would put hidden reasoning in a public event. The guard withholds every
//! verbatim occurrence of the summary from the public text, while it streams (text that
//! could be the start of the summary waits until it is known not to be) and in the final
//! answer, the same way in both so the stream stays a prefix of the stored answer. A
//! summary that is only a short phrase, or that quotes what is public anyway (the user's
//! words, a passage, a tool result), is not withheld.

/// Summaries shorter than this are words, not reasoning; they are not withheld.
pub const MIN_WITHHELD_CHARS: usize = 16;

/// The phrase to withhold for a summary, if any.
pub fn withheld_phrase(summary: &str, public_sources: &[impl AsRef<str>]) -> Option<String> {
    let phrase = summary.trim();
    if phrase.chars().count() < MIN_WITHHELD_CHARS
        || public_sources.iter().any(|s| s.as_ref().contains(phrase))
    {
        return None;
    }
    Some(phrase.to_owned())
}

/// The text with every occurrence of `phrase` removed, left to right.
pub fn without(text: &str, phrase: Option<&str>) -> String {
    match phrase {
        Some(phrase) => text.replace(phrase, ""),
        None => text.to_owned(),
    }
}

/// Whether a text says anything once its `[n]` markers and punctuation are set aside.
pub fn has_words(text: &str) -> bool {
    let mut rest = text;
    let mut words = String::new();
    while let Some(open) = rest.find('[') {
        words.push_str(&rest[..open]);
        rest = match rest[open..].find(']') {
            Some(close) => &rest[open + close + 1..],
            None => {
                words.push_str(&rest[open..]);
                ""
            }
        };
    }
    words.push_str(rest);
    words.chars().any(char::is_alphanumeric)
}

/// Withholds the summary from text as it streams.
#[derive(Debug, Default)]
pub struct StreamGuard {
    /// `None` until the summary is known; then the phrase to withhold, if any.
    phrase: Option<Option<String>>,
    held: String,
}

impl StreamGuard {
    /// The summary is complete: from now on text is released.
    pub fn arm(&mut self, phrase: Option<String>) {
        if self.phrase.is_none() {
            self.phrase = Some(phrase);
        }
    }

    pub fn is_armed(&self) -> bool {
        self.phrase.is_some()
    }

    /// Takes newly decoded public text; returns what may be shown now.
    pub fn push(&mut self, text: &str) -> String {
        self.held.push_str(text);
        let Some(phrase) = &self.phrase else {
            return String::new();
        };
        let Some(phrase) = phrase.as_deref() else {
            return std::mem::take(&mut self.held);
        };
        let mut out = String::new();
        while let Some(at) = self.held.find(phrase) {
            out.push_str(&self.held[..at]);
            self.held.drain(..at + phrase.len());
        }
        // The earliest place where the rest could still become the phrase stays held.
        let keep_from = self
            .held
            .char_indices()
            .map(|(i, _)| i)
            .find(|&i| phrase.starts_with(&self.held[i..]))
            .unwrap_or(self.held.len());
        out.push_str(&self.held[..keep_from]);
        self.held.drain(..keep_from);
        out
    }

    /// The field ended: what is still held is shown unless it is the phrase.
    pub fn finish(&mut self, phrase: Option<String>) -> String {
        self.arm(phrase);
        let mut out = self.push("");
        out.push_str(&std::mem::take(&mut self.held));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUMMARY: &str = "The server returns 502 when upstream";

    fn streamed(pieces: &[&str], phrase: Option<&str>) -> String {
        let mut guard = StreamGuard::default();
        guard.arm(phrase.map(str::to_owned));
        let mut out: String = pieces.iter().map(|p| guard.push(p)).collect();
        out.push_str(&guard.finish(None));
        out
    }

    #[test]
    fn a_copied_summary_never_streams_and_the_stream_matches_the_answer() {
        let answer = format!("{SUMMARY} is down. {SUMMARY}! Check the pool [1].");
        let chars: Vec<String> = answer.chars().map(String::from).collect();
        let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
        let out = streamed(&pieces, Some(SUMMARY));
        assert_eq!(out, without(&answer, Some(SUMMARY)));
        assert_eq!(out, " is down. ! Check the pool [1].");
        assert!(!out.contains(SUMMARY));
    }

    #[test]
    fn text_that_only_starts_like_the_summary_is_released() {
        let answer = "The server returns 200 now";
        let out = streamed(&["The server ", "returns 2", "00 now"], Some(SUMMARY));
        assert_eq!(out, answer);
    }

    #[test]
    fn nothing_is_released_before_the_summary_is_known() {
        let mut guard = StreamGuard::default();
        assert_eq!(guard.push(SUMMARY), "");
        assert_eq!(guard.push(" and more"), "");
        assert_eq!(guard.finish(Some(SUMMARY.into())), " and more");
    }

    #[test]
    fn short_or_public_summaries_are_not_withheld() {
        assert_eq!(withheld_phrase("answer it", &[] as &[&str]), None);
        assert_eq!(
            withheld_phrase(
                SUMMARY,
                &["the log says: The server returns 502 when upstream"]
            ),
            None
        );
        assert_eq!(
            withheld_phrase(&format!(" {SUMMARY} "), &["what is a 502?"]),
            Some(SUMMARY.to_owned())
        );
        assert_eq!(streamed(&["abc", "def"], None), "abcdef");
    }

    #[test]
    fn markers_and_punctuation_alone_say_nothing() {
        assert!(!has_words(" [1][2]. !"));
        assert!(!has_words(""));
        assert!(has_words("see [1]"));
        assert!(has_words("死锁 [1]"));
        assert!(has_words("[unclosed"));
    }
}
