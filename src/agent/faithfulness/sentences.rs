//! Sentences of a streamed answer: where one ends (so nothing is shown before it is
//! checked), and the `[n]` citation markers it carries.

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
