//! HTML as blocks, parsed with `tl`. Headings, paragraphs, list items, `<pre>` and
//! tables become blocks; scripts, styles and other non-content elements are dropped;
//! `<title>` becomes the document title.
//!
//! `tl` is a fast but literal parser: it never closes elements implicitly, matches
//! closing tags case-sensitively and reads `<` inside scripts as markup. So the source is
//! first prepared without changing any byte offset (tag names lower-cased, the contents
//! of raw-text elements such as `<script>` blanked except for their line breaks), and
//! blocks are cut by *flushing*: every block-level start or end tag closes the text
//! gathered so far, so an unclosed `<p>` or `<h2>` cannot swallow what follows.
//!
//! Locations are exact: `tl` text nodes borrow the source, so each block's line range
//! runs from the line of its first non-blank text to the line of its last.

use std::borrow::Cow;

use tl::{Node, NodeHandle, Parser, VDom};

use super::ExtractError;
use crate::retrieval::{Block, BlockKind, Document, Location};

/// Elements whose content is not markup; their content is blanked before parsing.
const RAW_TEXT_ELEMENTS: &[&[u8]] = &[
    b"script",
    b"style",
    b"noscript",
    b"template",
    b"textarea",
    b"xmp",
    b"iframe",
];

/// Elements whose content is never document text. Only elements whose end tag is
/// required belong here: `tl` never closes an element implicitly, so skipping one whose
/// end tag may be left out (`<select>` with bare `<option>`s) could drop the rest of
/// the page.
const SKIPPED_ELEMENTS: &[&[u8]] = &[
    b"script",
    b"style",
    b"noscript",
    b"template",
    b"textarea",
    b"xmp",
    b"iframe",
    b"svg",
    b"canvas",
    b"object",
    b"button",
];

/// Elements that start and end a block of their own (kind: paragraph).
const BLOCK_ELEMENTS: &[&[u8]] = &[
    b"address",
    b"article",
    b"aside",
    b"blockquote",
    b"body",
    b"center",
    b"dd",
    b"details",
    b"dialog",
    b"div",
    b"dl",
    b"dt",
    b"fieldset",
    b"figcaption",
    b"figure",
    b"footer",
    b"form",
    b"header",
    b"hgroup",
    b"hr",
    b"html",
    b"legend",
    b"main",
    b"nav",
    b"ol",
    b"p",
    b"section",
    b"summary",
    b"ul",
];

pub(super) fn parse_html(source: &str) -> Result<Document, ExtractError> {
    let prepared = prepare_source(source);
    let dom = tl::parse(&prepared, tl::ParserOptions::default()).map_err(|error| {
        ExtractError::Malformed {
            format: "HTML",
            reason: error.to_string(),
        }
    })?;
    let mut walker = Walker::new(&prepared);
    walker.walk(&dom);
    Ok(Document {
        title: walker.title,
        blocks: walker.blocks,
    })
}

/// What an element means to the walker.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Role {
    Block(BlockKind),
    Table,
    Row,
    Cell,
    LineBreak,
    Title,
    Skipped,
    Inline,
}

fn role_of(name: &[u8]) -> Role {
    match name {
        [b'h', level @ b'1'..=b'6'] => Role::Block(BlockKind::Heading(level - b'0')),
        b"li" => Role::Block(BlockKind::ListItem),
        b"pre" => Role::Block(BlockKind::Code),
        b"table" => Role::Table,
        b"tr" | b"caption" => Role::Row,
        b"td" | b"th" => Role::Cell,
        b"br" => Role::LineBreak,
        b"title" => Role::Title,
        _ if SKIPPED_ELEMENTS.contains(&name) => Role::Skipped,
        _ if BLOCK_ELEMENTS.contains(&name) => Role::Block(BlockKind::Paragraph),
        _ => Role::Inline,
    }
}

enum Step {
    Enter(NodeHandle),
    Leave(Role),
}

/// Stands for a `<br>` in gathered text until the text is normalised.
const LINE_BREAK: char = '\u{2028}';

/// Text gathered for one block (or one table cell) with its source byte span.
#[derive(Default)]
struct Gathered {
    text: String,
    span: Option<(usize, usize)>,
}

impl Gathered {
    fn push(&mut self, text: &str, span: Option<(usize, usize)>) {
        self.text.push_str(text);
        if let Some((start, end)) = span {
            self.span = Some(
                self.span
                    .map_or((start, end), |(s, e)| (s.min(start), e.max(end))),
            );
        }
    }

    fn merge_span(&mut self, span: Option<(usize, usize)>) {
        self.push("", span);
    }
}

#[derive(Default)]
struct Table {
    rows: Vec<Vec<String>>,
    gathered: Gathered,
    depth: usize,
}

struct Walker<'s> {
    source: &'s str,
    line_starts: Vec<usize>,
    blocks: Vec<Block>,
    title: Option<String>,
    kinds: Vec<BlockKind>,
    code_depth: usize,
    current: Gathered,
    table: Option<Table>,
}

impl<'s> Walker<'s> {
    fn new(source: &'s str) -> Self {
        let line_starts = std::iter::once(0)
            .chain(source.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Walker {
            source,
            line_starts,
            blocks: Vec::new(),
            title: None,
            kinds: Vec::new(),
            code_depth: 0,
            current: Gathered::default(),
            table: None,
        }
    }

    /// Walks the tree in document order with an explicit stack (no recursion, so deep
    /// nesting cannot overflow the thread's stack).
    fn walk(&mut self, dom: &VDom<'s>) {
        let parser = dom.parser();
        let mut steps: Vec<Step> = dom
            .children()
            .iter()
            .rev()
            .map(|h| Step::Enter(*h))
            .collect();
        while let Some(step) = steps.pop() {
            match step {
                Step::Leave(role) => self.leave(role),
                Step::Enter(handle) => match handle.get(parser) {
                    Some(Node::Raw(bytes)) => self.text(bytes.as_bytes()),
                    Some(Node::Tag(tag)) => {
                        let role = role_of(tag.name().as_bytes());
                        let children = tag.children();
                        let children = children.top().as_slice();
                        if role == Role::Skipped {
                            continue;
                        }
                        if role == Role::Title {
                            self.title_from(children, parser);
                        }
                        self.enter(role);
                        steps.push(Step::Leave(role));
                        for child in children.iter().rev() {
                            let is_title_text = role == Role::Title
                                && matches!(child.get(parser), Some(Node::Raw(_)));
                            if !is_title_text {
                                steps.push(Step::Enter(*child));
                            }
                        }
                    }
                    Some(Node::Comment(_)) | None => {}
                },
            }
        }
        self.flush();
        self.flush_table();
    }

    /// The title is the direct text of the first `<title>`; its other children (all a
    /// document's content, when `</title>` is missing) are walked as usual.
    fn title_from(&mut self, children: &[NodeHandle], parser: &Parser<'s>) {
        let text: String = children
            .iter()
            .filter_map(|c| c.get(parser)?.as_raw())
            .map(|b| decode_entities(&b.as_utf8_str()).into_owned())
            .collect();
        let text = collapse_whitespace(&text);
        if self.title.is_none() && !text.is_empty() {
            self.title = Some(text);
        }
    }

    fn enter(&mut self, role: Role) {
        if let Some(table) = &mut self.table {
            match role {
                Role::Table => table.depth += 1,
                Role::Row if table.depth == 1 => table.rows.push(Vec::new()),
                Role::Cell if table.depth == 1 => {
                    if table.rows.is_empty() {
                        table.rows.push(Vec::new());
                    }
                    table
                        .rows
                        .last_mut()
                        .expect("a row was just ensured")
                        .push(String::new());
                }
                // Structure nested inside a cell only separates words.
                Role::Cell | Role::Row | Role::LineBreak | Role::Block(_) => {
                    push_cell_text(table, " ")
                }
                _ => {}
            }
            return;
        }
        match role {
            Role::Block(kind) => {
                self.flush();
                self.kinds.push(kind);
                if kind == BlockKind::Code {
                    self.code_depth += 1;
                }
            }
            Role::Table => {
                self.flush();
                self.table = Some(Table {
                    depth: 1,
                    ..Table::default()
                });
            }
            Role::LineBreak => self.current.push(&LINE_BREAK.to_string(), None),
            _ => {}
        }
    }

    fn leave(&mut self, role: Role) {
        if let Some(table) = &mut self.table {
            if role == Role::Table {
                table.depth -= 1;
                if table.depth == 0 {
                    self.flush_table();
                }
            }
            return;
        }
        if let Role::Block(kind) = role {
            self.flush();
            self.kinds.pop();
            if kind == BlockKind::Code {
                self.code_depth = self.code_depth.saturating_sub(1);
            }
        }
    }

    fn text(&mut self, raw: &[u8]) {
        let Ok(raw) = std::str::from_utf8(raw) else {
            return;
        };
        let span = self.span_of(raw);
        let text = decode_entities(raw);
        match &mut self.table {
            Some(table) => {
                push_cell_text(table, &text);
                table.gathered.merge_span(span);
            }
            None => self.current.push(&text, span),
        }
    }

    /// The byte span of the non-blank part of a text node, found from where it sits in
    /// the source it borrows from.
    fn span_of(&self, raw: &str) -> Option<(usize, usize)> {
        let base = self.source.as_ptr() as usize;
        let start = (raw.as_ptr() as usize).checked_sub(base)?;
        if start + raw.len() > self.source.len() || raw.trim().is_empty() {
            return None;
        }
        let leading = raw.len() - raw.trim_start().len();
        let trailing = raw.len() - raw.trim_end().len();
        Some((start + leading, start + raw.len() - trailing - 1))
    }

    fn flush(&mut self) {
        let gathered = std::mem::take(&mut self.current);
        let kind = self.kinds.last().copied().unwrap_or(BlockKind::Paragraph);
        let text = match kind {
            _ if self.code_depth > 0 => trim_blank_lines(&gathered.text.replace(LINE_BREAK, "\n")),
            BlockKind::Heading(_) => collapse_whitespace(&gathered.text.replace(LINE_BREAK, " ")),
            _ => normalise_lines(&gathered.text),
        };
        let kind = if self.code_depth > 0 {
            BlockKind::Code
        } else {
            kind
        };
        self.push_block(kind, text, gathered.span);
    }

    fn flush_table(&mut self) {
        let Some(table) = self.table.take() else {
            return;
        };
        let text = super::table_text(&table.rows);
        self.push_block(BlockKind::Table, text, table.gathered.span);
    }

    fn push_block(&mut self, kind: BlockKind, text: String, span: Option<(usize, usize)>) {
        let Some((start, end)) = span else { return };
        if text.is_empty() {
            return;
        }
        let location = Location::Lines {
            start: self.line_of(start),
            end: self.line_of(end),
        };
        self.blocks.push(Block {
            kind,
            text,
            location,
        });
    }

    /// The 1-based line holding byte `offset`.
    fn line_of(&self, offset: usize) -> u32 {
        u32::try_from(self.line_starts.partition_point(|&start| start <= offset))
            .unwrap_or(u32::MAX)
    }
}

fn push_cell_text(table: &mut Table, text: &str) {
    if table.rows.is_empty() {
        table.rows.push(Vec::new());
    }
    let row = table.rows.last_mut().expect("a row was just ensured");
    if row.is_empty() {
        row.push(String::new());
    }
    row.last_mut()
        .expect("a cell was just ensured")
        .push_str(text);
}

/// Prepares HTML for `tl` without moving any byte: lower-cases tag names and blanks the
/// content of raw-text elements (keeping line breaks, so line numbers stay right).
fn prepare_source(source: &str) -> String {
    let mut bytes = source.as_bytes().to_vec();
    let mut index = 0;
    while let Some(found) = bytes[index..].iter().position(|&b| b == b'<') {
        let open = index + found;
        if bytes[open..].starts_with(b"<!--") {
            index = find(&bytes, open + 4, b"-->").map_or(bytes.len(), |end| end + 3);
            continue;
        }
        let closing = bytes.get(open + 1) == Some(&b'/');
        let name_start = open + 1 + usize::from(closing);
        let mut name_end = name_start;
        while name_end < bytes.len() && bytes[name_end].is_ascii_alphanumeric() {
            bytes[name_end].make_ascii_lowercase();
            name_end += 1;
        }
        index = name_end.max(open + 1);
        let name = bytes[name_start..name_end].to_vec();
        if closing || !RAW_TEXT_ELEMENTS.contains(&name.as_slice()) {
            continue;
        }
        let Some(tag_end) = find(&bytes, name_end, b">") else {
            break;
        };
        let content_end = find_closing_tag(&bytes, tag_end + 1, &name).unwrap_or(bytes.len());
        for byte in &mut bytes[tag_end + 1..content_end] {
            if *byte != b'\n' {
                *byte = b' ';
            }
        }
        index = content_end;
    }
    // Only whole runs of bytes between ASCII `>` and `<` were replaced by ASCII spaces,
    // and ASCII letters were lower-cased, so the bytes are still UTF-8.
    String::from_utf8(bytes)
        .unwrap_or_else(|error| String::from_utf8_lossy(error.as_bytes()).into_owned())
}

fn find(haystack: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    haystack
        .get(from..)?
        .windows(needle.len())
        .position(|window| window == needle)
        .map(|i| from + i)
}

/// The offset of `</name` (any case, followed by a non-name byte) at or after `from`.
fn find_closing_tag(bytes: &[u8], from: usize, name: &[u8]) -> Option<usize> {
    let mut index = from;
    while let Some(open) = find(bytes, index, b"</") {
        let candidate = bytes.get(open + 2..open + 2 + name.len());
        let after = bytes.get(open + 2 + name.len()).copied().unwrap_or(b'>');
        if candidate.is_some_and(|c| c.eq_ignore_ascii_case(name)) && !after.is_ascii_alphanumeric()
        {
            return Some(open);
        }
        index = open + 2;
    }
    None
}

/// Longest character reference name looked for, so that a text full of `&` stays linear.
const MAX_REFERENCE_LENGTH: usize = 32;

/// Decodes character references: the common named ones and all numeric ones. Unknown
/// or unterminated references stay as written.
pub(super) fn decode_entities(text: &str) -> Cow<'_, str> {
    if !text.contains('&') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        let reference = rest
            .bytes()
            .skip(1)
            .take(MAX_REFERENCE_LENGTH + 1)
            .position(|b| b == b';')
            .map(|end| &rest[1..1 + end]);
        match reference.and_then(resolve_reference) {
            Some(replacement) => {
                out.push_str(&replacement);
                rest = &rest[reference.map_or(0, str::len) + 2..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

fn resolve_reference(name: &str) -> Option<String> {
    if let Some(number) = name.strip_prefix('#') {
        let code = match number.strip_prefix(['x', 'X']) {
            Some(hex) if !hex.is_empty() && hex.len() <= 8 => u32::from_str_radix(hex, 16).ok()?,
            None if !number.is_empty() && number.len() <= 10 => number.parse::<u32>().ok()?,
            _ => return None,
        };
        let character = char::from_u32(code)
            .filter(|&c| c != '\0')
            .unwrap_or('\u{FFFD}');
        return Some(character.to_string());
    }
    let replacement = match name {
        "amp" => "&",
        "lt" => "<",
        "gt" => ">",
        "quot" => "\"",
        "apos" => "'",
        "nbsp" | "ensp" | "emsp" | "thinsp" => " ",
        "shy" | "zwnj" | "zwj" => "",
        "ndash" => "–",
        "mdash" => "—",
        "lsquo" => "‘",
        "rsquo" => "’",
        "ldquo" => "“",
        "rdquo" => "”",
        "hellip" => "…",
        "middot" => "·",
        "bull" => "•",
        "copy" => "©",
        "reg" => "®",
        "trade" => "™",
        "deg" => "°",
        "times" => "×",
        "divide" => "÷",
        "plusmn" => "±",
        "laquo" => "«",
        "raquo" => "»",
        "larr" => "←",
        "rarr" => "→",
        "le" => "≤",
        "ge" => "≥",
        "ne" => "≠",
        "sect" => "§",
        "euro" => "€",
        "pound" => "£",
        "yen" => "¥",
        _ => return None,
    };
    Some(replacement.to_string())
}

/// Collapses every run of whitespace (line breaks included) to one space and trims.
fn collapse_whitespace(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Collapses whitespace within the lines made by `<br>` and drops empty lines.
fn normalise_lines(text: &str) -> String {
    text.split(LINE_BREAK)
        .map(collapse_whitespace)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Drops blank lines at both ends of preformatted text and trailing spaces of each line.
fn trim_blank_lines(text: &str) -> String {
    let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
    let first = lines
        .iter()
        .position(|l| !l.is_empty())
        .unwrap_or(lines.len());
    let last = lines
        .iter()
        .rposition(|l| !l.is_empty())
        .map_or(first, |i| i + 1);
    lines[first..last].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(html: &str) -> (Option<String>, String) {
        let document = parse_html(html).unwrap();
        let blocks = document
            .blocks
            .iter()
            .map(|block| {
                let Location::Lines { start, end } = block.location else {
                    panic!()
                };
                format!(
                    "{:?} {start}-{end}: {}",
                    block.kind,
                    block.text.replace('\n', "⏎")
                )
            })
            .collect::<Vec<_>>()
            .join("\n");
        (document.title, blocks)
    }

    fn check(html: &str, expected: &str) {
        let (_, got) = render(html);
        assert_eq!(got, expected.trim(), "\n--- got ---\n{got}\n");
    }

    #[test]
    fn scripts_styles_and_head_are_dropped_and_title_kept() {
        let html = "<!DOCTYPE html>\n<HTML><Head><title>Ops &amp; more</title>\n<style>p { color: red }</style>\n<script>if (a<b) { document.write('<p>x</p>') }</script></head>\n<body>\n<h1>Disk full</h1>\n<p>Check <b>df -h</b> &amp; clean&nbsp;up &lt;logs&gt; &#39;now&#39; &#x4E2D;&#25991;.</p>\n<noscript>enable js</noscript>\n</body></HTML>";
        let (title, blocks) = render(html);
        assert_eq!(title.as_deref(), Some("Ops & more"));
        assert_eq!(
            blocks,
            "Heading(1) 6-6: Disk full\nParagraph 7-7: Check df -h & clean up <logs> 'now' 中文."
        );
    }

    #[test]
    fn lists_pre_tables_and_line_ranges() {
        check(
            "<ul>\n  <li>one\n  two</li>\n  <li>three<ul><li>nested</li></ul></li>\n</ul>\n<pre>\n  line 1\n    line 2\n</pre>\n<table>\n<tr><th>Name</th><th>Value</th></tr>\n<tr><td><p>a</p></td><td>1 <br> 2</td></tr>\n</table>\n<div>tail<br>next</div>",
            "
ListItem 2-3: one two
ListItem 4-4: three
ListItem 4-4: nested
Code 7-8:   line 1⏎    line 2
Table 11-12: Name | Value⏎a | 1 2
Paragraph 14-14: tail⏎next
",
        );
    }

    #[test]
    fn unclosed_elements_do_not_swallow_what_follows() {
        check("<h2>Title\n<p>first\n<p>second\n<li>item", "Heading(2) 1-1: Title\nParagraph 2-2: first\nParagraph 3-3: second\nListItem 4-4: item");
    }

    #[test]
    fn comments_and_blanked_scripts_keep_line_numbers() {
        check(
            "<!-- <script> -->\n<script>\nvar a = '<p>';\n</SCRIPT>\n<p>after</p>",
            "Paragraph 5-5: after",
        );
    }

    #[test]
    fn entities_decode() {
        let cases = [
            ("a &amp; b", "a & b"),
            ("&lt;tag&gt;", "<tag>"),
            ("&quot;q&quot; &#39;s&#39;", "\"q\" 's'"),
            ("&#x1F600;&#20013;", "😀中"),
            ("&unknown; & alone &amp", "&unknown; & alone &amp"),
            (
                "&#0; &#xD800; &#99999999999;",
                "\u{FFFD} \u{FFFD} &#99999999999;",
            ),
        ];
        for (input, expected) in cases {
            assert_eq!(decode_entities(input), expected, "{input}");
        }
    }

    #[test]
    fn deep_nesting_does_not_overflow() {
        let html = "<div>".repeat(100_000) + "deep" + &"</div>".repeat(100_000);
        check(&html, "Paragraph 1-1: deep");
    }
}
