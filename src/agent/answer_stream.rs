//! Streams one string field of a ReAct step (its `answer`, its thought's `summary`) while
//! the step's JSON is still being generated: finds `"field":"` in the compact JSON and
//! decodes the string's characters (escapes included) as they arrive, so the user sees the
//! answer as it is written; sends that text as paced `message.delta` events. Also reads
//! `[n]` citation markers out of a finished answer.

use std::time::{Duration, Instant};

use crate::runs::{RunEvent, TurnSink, TurnStop};

/// Incremental decoder of one JSON string field.
#[derive(Debug)]
pub struct FieldStream {
    /// `"field":"`, the text that opens the field's value in compact JSON.
    marker: String,
    raw: String,
    /// Byte offset in `raw` where the field's characters begin, once found.
    start: Option<usize>,
    /// Bytes of `raw` already decoded.
    consumed: usize,
    done: bool,
}

impl FieldStream {
    pub fn new(field: &str) -> Self {
        FieldStream {
            marker: format!("\"{field}\":\""),
            raw: String::new(),
            start: None,
            consumed: 0,
            done: false,
        }
    }

    /// Whether the field's closing quote has been read.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Adds generated JSON text; returns newly decoded characters of the field.
    pub fn push(&mut self, piece: &str) -> String {
        self.raw.push_str(piece);
        if self.done {
            return String::new();
        }
        if self.start.is_none() {
            if let Some(at) = self.raw.find(&self.marker) {
                self.start = Some(at + self.marker.len());
                self.consumed = at + self.marker.len();
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

/// Sends answer text as `message.delta` events, at most one per interval, skipping the
/// text an earlier attempt of the same run already streamed.
pub struct Publisher {
    already: String,
    streamed: String,
    pending: String,
    last_flush: Option<Instant>,
    interval: Duration,
}

impl Publisher {
    /// `streamed`: what earlier steps of this attempt already published.
    pub fn new(already: String, streamed: String, interval: Duration) -> Self {
        Publisher {
            already,
            streamed,
            pending: String::new(),
            last_flush: None,
            interval,
        }
    }

    pub fn publish(&mut self, text: &str, sink: &mut dyn TurnSink) -> Result<(), TurnStop> {
        if text.is_empty() {
            return Ok(());
        }
        self.streamed.push_str(text);
        let fresh_from = self.already.chars().count();
        let total = self.streamed.chars().count();
        if total <= fresh_from || !self.streamed.starts_with(&self.already) {
            return Ok(());
        }
        // Characters of this text that lie past what was already streamed.
        let before = total - text.chars().count();
        let fresh: String = text
            .chars()
            .skip(fresh_from.saturating_sub(before))
            .collect();
        self.pending.push_str(&fresh);
        if self
            .last_flush
            .is_none_or(|at| at.elapsed() >= self.interval)
        {
            sink.emit(RunEvent::MessageDelta {
                text: std::mem::take(&mut self.pending),
            })?;
            self.last_flush = Some(Instant::now());
        }
        Ok(())
    }

    /// Sends what is pending; returns everything published so far.
    pub fn finish(mut self, sink: &mut dyn TurnSink) -> Result<String, TurnStop> {
        if !self.pending.is_empty() {
            sink.emit(RunEvent::MessageDelta {
                text: std::mem::take(&mut self.pending),
            })?;
        }
        Ok(self.streamed)
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
        let mut stream = FieldStream::new("answer");
        let mut seen = String::new();
        for piece in json.as_bytes().chunks(3) {
            // Split on byte boundaries that are character boundaries only.
            seen.push_str(&stream.push(std::str::from_utf8(piece).unwrap_or("")));
        }
        let mut whole = FieldStream::new("answer");
        assert_eq!(whole.push(json), "Line 1\nA \"quoted\" 死锁 é [1].");
        assert!(whole.is_done());
        assert!(seen.starts_with("Line 1\nA \"quoted\""), "{seen}");
        let mut summary = FieldStream::new("summary");
        assert_eq!(summary.push(json), "say \"answer\":\"x\"");
    }

    #[test]
    fn citations_are_read_in_order_without_duplicates() {
        assert_eq!(cited_numbers("a [2] b [1][2] c [9] [x]", 3), [2, 1]);
        assert!(cited_numbers("no citations", 3).is_empty());
    }
}
