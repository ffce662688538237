//! Markdown as blocks, with a line-based reader of the CommonMark/GFM block structure:
//! ATX and setext headings, fenced code, pipe tables, list items and paragraphs. Inline
//! markup is kept as written, so a cited passage reads exactly like its source lines.
//! Not handled (read as paragraphs): indented code, block quotes, HTML blocks.

use super::text::{line_range, source_lines};
use crate::retrieval::{Block, BlockKind};

/// The blocks of a Markdown text; front matter (`---` or `+++` at line 1) is skipped,
/// as are HTML comments that stand alone.
pub(super) fn parse_markdown(text: &str) -> Vec<Block> {
    let lines = source_lines(text);
    let mut reader = Reader {
        lines: &lines,
        blocks: Vec::new(),
    };
    let mut index = front_matter_end(&lines);
    while index < lines.len() {
        index = reader.read_block(index);
    }
    reader.blocks
}

struct Reader<'a> {
    lines: &'a [&'a str],
    blocks: Vec<Block>,
}

impl Reader<'_> {
    /// Reads the block starting at line `first` and returns the index of the line after it.
    fn read_block(&mut self, first: usize) -> usize {
        let line = self.lines[first];
        if line.trim().is_empty() || is_thematic_break(line) {
            return first + 1;
        }
        if let Some(fence) = fence_open(line) {
            return self.read_fenced_code(first, fence);
        }
        if let Some((level, title)) = atx_heading(line) {
            self.push_heading(level, title.to_string(), first, first);
            return first + 1;
        }
        if let Some(leading_pipe) = self.table_starts_at(first) {
            return self.read_table(first, leading_pipe);
        }
        if is_list_item(line) {
            return self.read_list_item(first);
        }
        if line.trim_start().starts_with("<!--") {
            return self.skip_comment(first);
        }
        self.read_paragraph(first)
    }

    fn read_fenced_code(&mut self, first: usize, (marker, length): (char, usize)) -> usize {
        let close =
            (first + 1..self.lines.len()).find(|&i| is_fence_close(self.lines[i], marker, length));
        // An unclosed fence runs to the last non-blank line of the document.
        let last = close.unwrap_or_else(|| {
            (first..self.lines.len())
                .rev()
                .find(|&i| !self.lines[i].trim().is_empty())
                .unwrap_or(first)
        });
        self.push(BlockKind::Code, first, last);
        last + 1
    }

    /// `Some(true)` for rows that start with `|`; `Some(false)` for a GFM table whose
    /// rows have no leading pipe (recognised by its delimiter row).
    fn table_starts_at(&self, first: usize) -> Option<bool> {
        let line = self.lines[first];
        if line.trim_start().starts_with('|') {
            return Some(true);
        }
        let delimiter_follows = self
            .lines
            .get(first + 1)
            .is_some_and(|next| is_delimiter_row(next));
        (line.contains('|') && delimiter_follows).then_some(false)
    }

    fn read_table(&mut self, first: usize, leading_pipe: bool) -> usize {
        let is_row = |line: &str| {
            if leading_pipe {
                line.trim_start().starts_with('|')
            } else {
                !line.trim().is_empty() && line.contains('|')
            }
        };
        let end = (first + 1..self.lines.len())
            .find(|&i| !is_row(self.lines[i]))
            .unwrap_or(self.lines.len());
        self.push(BlockKind::Table, first, end - 1);
        end
    }

    /// A list item runs to the next blank line or the next line that starts a block
    /// (including a nested item, which becomes an item of its own).
    fn read_list_item(&mut self, first: usize) -> usize {
        let end = (first + 1..self.lines.len())
            .find(|&i| self.ends_list_item(i))
            .unwrap_or(self.lines.len());
        self.push(BlockKind::ListItem, first, end - 1);
        end
    }

    fn ends_list_item(&self, index: usize) -> bool {
        let line = self.lines[index];
        line.trim().is_empty()
            || is_list_item(line)
            || atx_heading(line).is_some()
            || fence_open(line).is_some()
            || is_thematic_break(line)
            || line.trim_start().starts_with('|')
    }

    fn skip_comment(&mut self, first: usize) -> usize {
        let close = (first..self.lines.len()).find(|&i| self.lines[i].contains("-->"));
        close.map_or(self.lines.len(), |last| last + 1)
    }

    /// A paragraph runs to a blank line or a line that interrupts it; a `===` or `---`
    /// line right under it makes it a setext heading.
    fn read_paragraph(&mut self, first: usize) -> usize {
        let mut index = first + 1;
        while index < self.lines.len() {
            let line = self.lines[index];
            if let Some(level) = setext_level(line) {
                let title = self.lines[first..index]
                    .iter()
                    .map(|l| l.trim())
                    .collect::<Vec<_>>()
                    .join(" ");
                self.push_heading(level, title, first, index);
                return index + 1;
            }
            if self.interrupts_paragraph(index) {
                break;
            }
            index += 1;
        }
        self.push(BlockKind::Paragraph, first, index - 1);
        index
    }

    fn interrupts_paragraph(&self, index: usize) -> bool {
        let line = self.lines[index];
        line.trim().is_empty()
            || atx_heading(line).is_some()
            || fence_open(line).is_some()
            || is_thematic_break(line)
            || is_bullet_item(line)
            || ordered_item_number(line) == Some(1)
            || self.table_starts_at(index).is_some()
    }

    fn push(&mut self, kind: BlockKind, first: usize, last: usize) {
        let text = self.lines[first..=last].join("\n");
        self.blocks.push(Block {
            kind,
            text,
            location: line_range(first, last),
        });
    }

    fn push_heading(&mut self, level: u8, title: String, first: usize, last: usize) {
        if !title.is_empty() {
            self.blocks.push(Block {
                kind: BlockKind::Heading(level),
                text: title,
                location: line_range(first, last),
            });
        }
    }
}

/// The index of the first line after YAML (`---`) or TOML (`+++`) front matter; 0 when
/// there is none or it is never closed.
fn front_matter_end(lines: &[&str]) -> usize {
    let Some(opening) = lines.first().map(|l| l.trim_end()) else {
        return 0;
    };
    if opening != "---" && opening != "+++" {
        return 0;
    }
    let closes =
        |line: &str| line.trim_end() == opening || (opening == "---" && line.trim_end() == "...");
    lines
        .iter()
        .skip(1)
        .position(|line| closes(line))
        .map_or(0, |offset| offset + 2)
}

/// The line without up to three leading spaces; `None` when indented further (which
/// CommonMark reads as code, never as a heading or a rule).
fn strip_indent(line: &str) -> Option<&str> {
    let spaces = line.len() - line.trim_start_matches(' ').len();
    (spaces <= 3 && !line.starts_with('\t')).then(|| &line[spaces..])
}

fn atx_heading(line: &str) -> Option<(u8, &str)> {
    let line = strip_indent(line)?;
    let hashes = line.len() - line.trim_start_matches('#').len();
    let rest = &line[hashes..];
    if !(1..=6).contains(&hashes) || !(rest.is_empty() || rest.starts_with([' ', '\t'])) {
        return None;
    }
    let title = rest.trim();
    let without_closing = title.trim_end_matches('#');
    let title = if without_closing.is_empty() || without_closing.ends_with([' ', '\t']) {
        without_closing.trim_end()
    } else {
        title
    };
    Some((hashes as u8, title))
}

fn setext_level(line: &str) -> Option<u8> {
    let underline = strip_indent(line)?.trim_end();
    if underline.is_empty() {
        None
    } else if underline.bytes().all(|b| b == b'=') {
        Some(1)
    } else if underline.bytes().all(|b| b == b'-') {
        Some(2)
    } else {
        None
    }
}

fn is_thematic_break(line: &str) -> bool {
    let Some(line) = strip_indent(line) else {
        return false;
    };
    let marks: Vec<char> = line.chars().filter(|c| !c.is_whitespace()).collect();
    marks.len() >= 3 && matches!(marks[0], '-' | '*' | '_') && marks.iter().all(|&c| c == marks[0])
}

/// An opening code fence at any indentation (fences inside list items are indented):
/// the fence character and its length.
fn fence_open(line: &str) -> Option<(char, usize)> {
    let trimmed = line.trim_start();
    let marker = trimmed.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let length = trimmed.len() - trimmed.trim_start_matches(marker).len();
    let info = &trimmed[length..];
    (length >= 3 && !(marker == '`' && info.contains('`'))).then_some((marker, length))
}

fn is_fence_close(line: &str, marker: char, length: usize) -> bool {
    let trimmed = line.trim();
    let run = trimmed.len() - trimmed.trim_start_matches(marker).len();
    run >= length && run == trimmed.len()
}

fn is_list_item(line: &str) -> bool {
    is_bullet_item(line) || ordered_item_number(line).is_some()
}

fn is_bullet_item(line: &str) -> bool {
    let trimmed = line.trim_start();
    let mut chars = trimmed.chars();
    matches!(chars.next(), Some('-' | '*' | '+')) && matches!(chars.next(), Some(' ' | '\t'))
}

/// The number of an ordered list item (`1.` or `1)` followed by a space).
fn ordered_item_number(line: &str) -> Option<u32> {
    let trimmed = line.trim_start();
    let digits = trimmed.len()
        - trimmed
            .trim_start_matches(|c: char| c.is_ascii_digit())
            .len();
    if !(1..=9).contains(&digits) {
        return None;
    }
    let mut rest = trimmed[digits..].chars();
    if matches!(rest.next(), Some('.' | ')')) && matches!(rest.next(), Some(' ' | '\t')) {
        trimmed[..digits].parse().ok()
    } else {
        None
    }
}

/// A GFM delimiter row such as `---|:--:` or `| --- | ---: |`.
fn is_delimiter_row(line: &str) -> bool {
    let trimmed = line.trim();
    trimmed.contains('|')
        && trimmed.contains('-')
        && trimmed
            .chars()
            .all(|c| matches!(c, '|' | ':' | '-' | ' ' | '\t'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retrieval::Location;

    /// Renders blocks as `kind start-end: text` lines for compact expectations.
    fn render(text: &str) -> String {
        parse_markdown(text)
            .iter()
            .map(|block| {
                let Location::Lines { start, end } = block.location else {
                    panic!("not lines: {:?}", block.location)
                };
                let kind = match block.kind {
                    BlockKind::Heading(level) => format!("h{level}"),
                    BlockKind::Paragraph => "p".into(),
                    BlockKind::ListItem => "li".into(),
                    BlockKind::Code => "code".into(),
                    BlockKind::Table => "table".into(),
                };
                format!("{kind} {start}-{end}: {}", block.text.replace('\n', "⏎"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn check(markdown: &str, expected: &str) {
        let got = render(markdown);
        assert_eq!(got, expected.trim(), "\n--- got ---\n{got}\n");
    }

    #[test]
    fn headings_code_tables_and_lists_keep_their_lines() {
        check(
            "# Runbook #\n\nIntro line one\nline two.\n\n## Restart\n\n```bash\nsystemctl restart x\n\n# not a heading\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n- first item\n  continued\n- second\n  - nested\n1. ordered\n",
            "
h1 1-1: Runbook
p 3-4: Intro line one⏎line two.
h2 6-6: Restart
code 8-12: ```bash⏎systemctl restart x⏎⏎# not a heading⏎```
table 14-16: | a | b |⏎|---|---|⏎| 1 | 2 |
li 18-19: - first item⏎  continued
li 20-20: - second
li 21-21:   - nested
li 22-22: 1. ordered
",
        );
    }

    #[test]
    fn setext_headings_and_thematic_breaks() {
        check(
            "Title\nover two lines\n=====\n\ntext\n\n---\n\nSection\n-------\nbody\n",
            "
h1 1-3: Title over two lines
p 5-5: text
h2 9-10: Section
p 11-11: body
",
        );
    }

    #[test]
    fn front_matter_and_comments_are_skipped() {
        check(
            "---\ntitle: x\n---\n<!-- hidden\nstill -->\nVisible 中文\n",
            "p 6-6: Visible 中文",
        );
        // An unclosed front matter is not front matter.
        check("---\ntext", "p 2-2: text");
    }

    #[test]
    fn unclosed_fence_runs_to_the_end_and_tildes_work() {
        check("~~~\ncode\n```\nmore\n\n", "code 1-4: ~~~⏎code⏎```⏎more");
        check(
            "````\n```\n````\nafter\n",
            "code 1-3: ````⏎```⏎````\np 4-4: after",
        );
    }

    #[test]
    fn paragraphs_are_interrupted_by_blocks() {
        check(
            "para\n# H\npara two\n- item\ntext\n```\nx\n```\n",
            "
p 1-1: para
h1 2-2: H
p 3-3: para two
li 4-5: - item⏎text
code 6-8: ```⏎x⏎```
",
        );
    }

    #[test]
    fn tables_without_leading_pipes_and_crlf() {
        check(
            "a | b\r\n--- | ---\r\n1 | 2\r\n\r\nafter\r\n",
            "table 1-3: a | b⏎--- | ---⏎1 | 2\np 5-5: after",
        );
    }

    #[test]
    fn heading_edge_cases() {
        check(
            "#hashtag\n\n####### seven\n\n    # indented\n\n## C# ##\n#\n",
            "p 1-1: #hashtag\np 3-3: ####### seven\np 5-5:     # indented\nh2 7-7: C#",
        );
    }
}
