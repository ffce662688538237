//! Reading a server-sent event stream line by line with bounded memory: a line longer than
//! `MAX_LINE_BYTES` is an error (a stream that never sends a newline cannot grow a buffer
//! without end), and only `data:` fields are yielded.

use std::io::{BufRead, BufReader, Read};

/// The longest line a stream may send.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// What the stream gave next.
#[derive(Debug, PartialEq, Eq)]
pub enum SseLine {
    /// A `data:` field's value.
    Data(String),
    /// The stream ended.
    End,
}

/// Why a stream could not be read.
#[derive(Debug)]
pub enum SseError {
    Io(std::io::Error),
    LineTooLong,
}

/// The `data:` fields of an event stream.
pub struct SseReader<R> {
    reader: BufReader<R>,
    line: Vec<u8>,
}

impl<R: Read> SseReader<R> {
    pub fn new(reader: R) -> Self {
        Self {
            reader: BufReader::with_capacity(16 * 1024, reader),
            line: Vec::new(),
        }
    }

    /// The next `data:` value, skipping comments, other fields and blank lines.
    pub fn next_data(&mut self) -> Result<SseLine, SseError> {
        loop {
            self.line.clear();
            let read = (&mut self.reader)
                .take(MAX_LINE_BYTES as u64 + 1)
                .read_until(b'\n', &mut self.line)
                .map_err(SseError::Io)?;
            if read == 0 {
                return Ok(SseLine::End);
            }
            if self.line.len() > MAX_LINE_BYTES {
                return Err(SseError::LineTooLong);
            }
            let text = String::from_utf8_lossy(&self.line);
            let text = text.trim_end_matches(['\n', '\r']);
            if let Some(value) = text.strip_prefix("data:") {
                return Ok(SseLine::Data(
                    value.strip_prefix(' ').unwrap_or(value).to_owned(),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_fields_are_read_and_the_rest_skipped() {
        let stream = ": keep-alive\r\nevent: message\ndata: {\"a\":1}\n\ndata:[DONE]\n";
        let mut reader = SseReader::new(stream.as_bytes());
        assert_eq!(
            reader.next_data().unwrap(),
            SseLine::Data("{\"a\":1}".into())
        );
        assert_eq!(reader.next_data().unwrap(), SseLine::Data("[DONE]".into()));
        assert_eq!(reader.next_data().unwrap(), SseLine::End);
    }

    #[test]
    fn a_line_without_end_is_refused_at_the_cap() {
        let endless = std::io::repeat(b'x').take(MAX_LINE_BYTES as u64 * 3);
        let mut reader = SseReader::new(endless);
        assert!(matches!(reader.next_data(), Err(SseError::LineTooLong)));
    }
}
