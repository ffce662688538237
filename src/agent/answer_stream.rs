//! Streams the `answer` string of a ReAct step while the step's JSON is still being
//! generated: finds `"answer":"` in the compact JSON and decodes the string's characters
//! (escapes included) as they arrive, so the user sees the answer as it is written.
//! Also reads `[n]` citation markers out of a finished answer.

/// Incremental decoder of one JSON string field.
#[derive(Debug, Default)]
pub struct AnswerStream {
    raw: String,
    /// Byte offset in `raw` where the answer's characters begin, once found.
    start: Option<usize>,
    /// Bytes of `raw` already decoded.
    consumed: usize,
    done: bool,
}

const MARKER: &str = "\"answer\":\"";

impl AnswerStream {
    /// Adds generated JSON text; returns newly decoded answer text.
    pub fn push(&mut self, piece: &str) -> String {
        self.raw.push_str(piece);
        if self.done {
            return String::new();
        }
        if self.start.is_none() {
            if let Some(at) = self.raw.find(MARKER) {
                self.start = Some(at + MARKER.len());
                self.consumed = at + MARKER.len();
            } else {
                return String::new();
            }
        }
        let mut out = String::new();
        let bytes = self.raw.as_bytes();
        let mut i = self.consumed;
        while i < bytes.len() {
            match bytes[i] {
                b'"' => {
                    self.done = true;
                    i += 1;
                    break;
                }
                b'\\' => {
                    let Some(&kind) = bytes.get(i + 1) else { break };
                    let (text, used) = match kind {
                        b'n' => ("\n".to_owned(), 2),
                        b't' => ("\t".to_owned(), 2),
                        b'r' => ("\r".to_owned(), 2),
                        b'b' | b'f' => (String::new(), 2),
                        b'u' => {
                            let Some(hex) = self.raw.get(i + 2..i + 6) else {
                                break;
                            };
                            let code = u32::from_str_radix(hex, 16).unwrap_or(0xfffd);
                            // Surrogate pairs are rare in answers: shown as U+FFFD.
                            (char::from_u32(code).unwrap_or('\u{fffd}').to_string(), 6)
                        }
                        other => ((other as char).to_string(), 2),
                    };
                    out.push_str(&text);
                    i += used;
                }
                _ => {
                    let rest = &self.raw[i..];
                    let Some(c) = rest.chars().next() else { break };
                    out.push(c);
                    i += c.len_utf8();
                }
            }
        }
        self.consumed = i;
        out
    }
}

/// The distinct passage numbers an answer cites as `[n]`, in order, within `1..=max`.
pub fn cited_numbers(answer: &str, max: usize) -> Vec<usize> {
    let mut found = Vec::new();
    let mut rest = answer;
    while let Some(open) = rest.find('[') {
        rest = &rest[open + 1..];
        let Some(close) = rest.find(']') else { break };
        if let Ok(n) = rest[..close].trim().parse::<usize>() {
            if (1..=max).contains(&n) && !found.contains(&n) {
                found.push(n);
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_streams_piece_by_piece_with_escapes() {
        let json = r#"{"thought":{"summary":"say \"answer\":\"x\""},"action":{"type":"RESPOND","reason":"r","answer":"Line 1\nA \"quoted\" 死锁 \u00e9 [1]."}}"#;
        let mut stream = AnswerStream::default();
        let mut seen = String::new();
        for piece in json.as_bytes().chunks(3) {
            // Split on byte boundaries that are character boundaries only.
            seen.push_str(&stream.push(std::str::from_utf8(piece).unwrap_or("")));
        }
        let mut whole = AnswerStream::default();
        assert_eq!(whole.push(json), "Line 1\nA \"quoted\" 死锁 é [1].");
        assert!(seen.starts_with("Line 1\nA \"quoted\""), "{seen}");
    }

    #[test]
    fn citations_are_read_in_order_without_duplicates() {
        assert_eq!(cited_numbers("a [2] b [1][2] c [9] [x]", 3), [2, 1]);
        assert!(cited_numbers("no citations", 3).is_empty());
    }
}
