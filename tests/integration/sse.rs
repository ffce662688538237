//! A minimal Server-Sent Events reader for the tests: frames with `id`, `event`, `data`.

use std::io::{BufRead, BufReader, Read};

/// One SSE frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub id: i64,
    pub event: String,
    pub data: String,
}

impl Frame {
    pub fn is_terminal(&self) -> bool {
        matches!(
            self.event.as_str(),
            "run.completed" | "run.failed" | "run.cancelled"
        )
    }
}

/// Reads frames from an SSE body; comment lines (heartbeats) are skipped.
pub struct FrameReader<R> {
    lines: BufReader<R>,
}

impl<R: Read> FrameReader<R> {
    pub fn new(body: R) -> Self {
        Self {
            lines: BufReader::new(body),
        }
    }

    /// The next frame, or `None` at the end of the stream.
    pub fn next_frame(&mut self) -> Option<Frame> {
        let (mut id, mut event, mut data) = (None, String::new(), String::new());
        loop {
            let mut line = String::new();
            let read = self.lines.read_line(&mut line).ok()?;
            if read == 0 {
                return None;
            }
            let line = line.trim_end_matches(['\r', '\n']);
            if line.is_empty() {
                if let Some(id) = id {
                    return Some(Frame { id, event, data });
                }
                continue;
            }
            if let Some(value) = line.strip_prefix("id: ") {
                id = value.parse().ok();
            } else if let Some(value) = line.strip_prefix("event: ") {
                event = value.to_owned();
            } else if let Some(value) = line.strip_prefix("data: ") {
                data.push_str(value);
            }
        }
    }
}

/// The text of a run's `message.delta` frames, joined.
pub fn streamed_text(frames: &[Frame]) -> String {
    frames
        .iter()
        .filter(|f| f.event == "message.delta")
        .map(|f| {
            let value: serde_json::Value = serde_json::from_str(&f.data).expect("delta json");
            value["text"].as_str().unwrap_or_default().to_owned()
        })
        .collect()
}
