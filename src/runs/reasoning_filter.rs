//! Keeps a model's hidden reasoning out of public events: removes `<think>…</think>` spans
//! (the convention of reasoning models such as Qwen3 and DeepSeek-R1) from streamed text,
//! holding back a partial tag split across deltas until it is known. An unclosed span hides
//! everything after it.

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// A streaming filter over the answer's deltas.
#[derive(Debug, Default)]
pub struct ReasoningFilter {
    inside: bool,
    /// Text not yet released: it may be the start of a tag.
    held: String,
}

impl ReasoningFilter {
    /// Takes the next delta; returns the text that is now known to be visible.
    pub fn push(&mut self, delta: &str) -> String {
        self.held.push_str(delta);
        let mut visible = String::new();
        loop {
            let tag = if self.inside { CLOSE } else { OPEN };
            if let Some(at) = self.held.find(tag) {
                if !self.inside {
                    visible.push_str(&self.held[..at]);
                }
                self.held.drain(..at + tag.len());
                self.inside = !self.inside;
                continue;
            }
            // Keep back the longest suffix that could still grow into the tag.
            let keep = partial_tag_len(&self.held, tag);
            let release = self.held.len() - keep;
            if !self.inside {
                visible.push_str(&self.held[..release]);
            }
            self.held.drain(..release);
            return visible;
        }
    }

    /// The end of the answer: releases held text that never became a tag.
    pub fn finish(&mut self) -> String {
        let rest = std::mem::take(&mut self.held);
        if self.inside {
            String::new()
        } else {
            rest
        }
    }
}

/// Length of the longest suffix of `text` that is a proper prefix of `tag`.
fn partial_tag_len(text: &str, tag: &str) -> usize {
    (1..tag.len())
        .rev()
        .find(|&n| {
            text.len() >= n
                && text.is_char_boundary(text.len() - n)
                && tag.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filtered(deltas: &[&str]) -> String {
        let mut filter = ReasoningFilter::default();
        let mut out: String = deltas.iter().map(|d| filter.push(d)).collect();
        out.push_str(&filter.finish());
        out
    }

    #[test]
    fn hides_reasoning_even_when_tags_are_split() {
        assert_eq!(filtered(&["<think>plan</think>Answer"]), "Answer");
        assert_eq!(
            filtered(&["<thi", "nk>secret", " stuff</th", "ink>Vis", "ible"]),
            "Visible"
        );
        assert_eq!(filtered(&["a <", "b"]), "a <b");
        assert_eq!(filtered(&["x<think>never closed"]), "x");
        assert_eq!(filtered(&["<think>a</think>b<think>c</think>d"]), "bd");
        assert_eq!(filtered(&["磁盘<", "/think>满了"]), "磁盘</think>满了");
        assert_eq!(filtered(&["no tags at all"]), "no tags at all");
    }

    #[test]
    fn visible_text_is_released_as_soon_as_it_is_known() {
        let mut filter = ReasoningFilter::default();
        assert_eq!(filter.push("Hello <"), "Hello ");
        assert_eq!(filter.push("b>"), "<b>");
    }
}
