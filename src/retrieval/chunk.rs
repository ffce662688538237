//! Cuts an extracted document into chunks sized for the embedding model, following its
//! structure: headings open sections (and give each chunk its heading path), blocks of
//! one section are packed together up to the token budget, code and tables move whole
//! to the next chunk rather than being cut, and only blocks that alone exceed the budget
//! are split (code and tables at lines, prose at sentences). A chunk continuing a
//! section starts with the tail of the previous chunk; sections never share text.
//!
//! Heading text is never part of a chunk's text: the indexer adds the heading path.

mod split;

use std::ops::Range;

use split::{split_units, tail_start, trim, Grain};

use super::{Block, BlockKind, Chunk, Document, Location, TokenCounter};

/// How big chunks are and how much consecutive chunks of a section share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkConfig {
    /// Most tokens in a chunk (a single character counting more is still kept).
    pub max_tokens: usize,
    /// Tokens of the previous chunk repeated at the start of the next one in the same
    /// section; at most half of `max_tokens` is used.
    pub overlap_tokens: usize,
}

impl Default for ChunkConfig {
    fn default() -> Self {
        ChunkConfig {
            max_tokens: 220,
            overlap_tokens: 40,
        }
    }
}

/// The chunks of a document, in order, numbered from 0. Never returns empty chunks.
pub fn chunk_document(
    document: &Document,
    config: &ChunkConfig,
    counter: &dyn TokenCounter,
) -> Vec<Chunk> {
    let max_tokens = config.max_tokens.max(1);
    let mut packer = Packer {
        blocks: &document.blocks,
        max_tokens,
        overlap_tokens: config.overlap_tokens.min(max_tokens / 2),
        counter,
        headings: Vec::new(),
        chunks: Vec::new(),
        open: None,
        previous: None,
    };
    for (index, block) in document.blocks.iter().enumerate() {
        match block.kind {
            BlockKind::Heading(level) => packer.heading(level, block.text.trim()),
            _ => packer.block(index),
        }
    }
    packer.close();
    packer.chunks
}

/// A contiguous, trimmed part of one block's text.
#[derive(Debug, Clone)]
struct Piece {
    block: usize,
    range: Range<usize>,
    location: Location,
}

/// Where a chunk's text came from: `span` of the chunk text came from `location`.
#[derive(Debug, Clone)]
struct Part {
    span: Range<usize>,
    location: Location,
}

/// A chunk being filled, or the last one closed (to take the overlap from).
#[derive(Debug)]
struct Draft {
    text: String,
    parts: Vec<Part>,
    /// The block and end offset of the last piece, to join the next piece to it.
    last_block: usize,
    last_end: usize,
}

struct Packer<'a> {
    blocks: &'a [Block],
    max_tokens: usize,
    overlap_tokens: usize,
    counter: &'a dyn TokenCounter,
    /// Enclosing headings, outermost first: (level, title).
    headings: Vec<(u8, String)>,
    chunks: Vec<Chunk>,
    open: Option<Draft>,
    /// The last chunk closed in the current section.
    previous: Option<Draft>,
}

impl Packer<'_> {
    fn heading(&mut self, level: u8, title: &str) {
        self.close();
        self.previous = None;
        while self
            .headings
            .last()
            .is_some_and(|(open_level, _)| *open_level >= level)
        {
            self.headings.pop();
        }
        if !title.is_empty() {
            self.headings.push((level, title.to_string()));
        }
    }

    /// Adds a block whole when it fits in a chunk; otherwise line by line (code, tables)
    /// or sentence by sentence (prose).
    fn block(&mut self, index: usize) {
        let block = &self.blocks[index];
        let grain = grain_of(block.kind);
        let whole = trim(&block.text, 0..block.text.len(), grain);
        if whole.is_empty() {
            return;
        }
        if self.counter.count(&block.text[whole.clone()]) <= self.max_tokens {
            self.add(Piece {
                block: index,
                range: whole,
                location: block.location,
            });
            return;
        }
        let ranges = split_units(&block.text, grain, self.max_tokens, self.counter);
        let lines = SourceLines::of(block);
        for range in ranges {
            let location = lines
                .as_ref()
                .map_or(block.location, |lines| lines.location_of(&range));
            self.add(Piece {
                block: index,
                range,
                location,
            });
        }
    }

    fn add(&mut self, piece: Piece) {
        if let Some(open) = &mut self.open {
            let joiner = joiner(self.blocks, open.last_block, open.last_end, &piece);
            let candidate = format!("{}{joiner}{}", open.text, text_of(self.blocks, &piece));
            if self.counter.count(&candidate) <= self.max_tokens {
                let start = open.text.len() + joiner.len();
                open.parts.push(Part {
                    span: start..candidate.len(),
                    location: piece.location,
                });
                open.text = candidate;
                open.last_block = piece.block;
                open.last_end = piece.range.end;
                return;
            }
            self.close();
        }
        self.open = Some(self.start(piece));
    }

    /// A new chunk for `piece`, led by the tail of the previous chunk of the section
    /// when there is room for it.
    fn start(&mut self, piece: Piece) -> Draft {
        let text = text_of(self.blocks, &piece).to_string();
        let mut draft = Draft {
            parts: vec![Part {
                span: 0..text.len(),
                location: piece.location,
            }],
            text,
            last_block: piece.block,
            last_end: piece.range.end,
        };
        let Some(previous) = self.previous.take() else {
            return draft;
        };
        let room = self
            .max_tokens
            .saturating_sub(self.counter.count(&draft.text));
        let budget = self.overlap_tokens.min(room);
        let grain = grain_of(self.blocks[previous.last_block].kind);
        let Some(tail) = tail_start(&previous.text, grain, budget, self.counter) else {
            return draft;
        };
        let joiner = joiner(self.blocks, previous.last_block, previous.last_end, &piece);
        let candidate = format!("{}{joiner}{}", &previous.text[tail..], draft.text);
        if self.counter.count(&candidate) > self.max_tokens {
            return draft;
        }
        let tail_location = previous
            .parts
            .iter()
            .filter(|part| part.span.end > tail)
            .map(|part| part.location)
            .reduce(Location::merge);
        let piece_start = candidate.len() - draft.text.len();
        draft.parts = vec![
            Part {
                span: 0..piece_start - joiner.len(),
                location: tail_location.unwrap_or(piece.location),
            },
            Part {
                span: piece_start..candidate.len(),
                location: piece.location,
            },
        ];
        draft.text = candidate;
        draft
    }

    fn close(&mut self) {
        let Some(draft) = self.open.take() else {
            return;
        };
        if draft.text.trim().is_empty() {
            return;
        }
        let location = draft
            .parts
            .iter()
            .map(|part| part.location)
            .reduce(Location::merge)
            .expect("a draft has a part");
        self.chunks.push(Chunk {
            ordinal: u32::try_from(self.chunks.len()).unwrap_or(u32::MAX),
            text: draft.text.clone(),
            heading_path: self
                .headings
                .iter()
                .map(|(_, title)| title.clone())
                .collect(),
            location,
            tokens: u32::try_from(self.counter.count(&draft.text)).unwrap_or(u32::MAX),
        });
        self.previous = Some(draft);
    }
}

fn text_of<'b>(blocks: &'b [Block], piece: &Piece) -> &'b str {
    &blocks[piece.block].text[piece.range.clone()]
}

fn grain_of(kind: BlockKind) -> Grain {
    match kind {
        BlockKind::Code | BlockKind::Table => Grain::Lines,
        _ => Grain::Sentences,
    }
}

/// What goes between the text ending at `last_end` of block `last_block` and `piece`:
/// the original whitespace between two pieces of one block, a line break between list
/// items, a blank line between other blocks.
fn joiner<'b>(blocks: &'b [Block], last_block: usize, last_end: usize, piece: &Piece) -> &'b str {
    if last_block == piece.block && last_end <= piece.range.start {
        let gap = &blocks[piece.block].text[last_end..piece.range.start];
        if gap.trim().is_empty() {
            return gap;
        }
    }
    let both_items = blocks[last_block].kind == BlockKind::ListItem
        && blocks[piece.block].kind == BlockKind::ListItem;
    if both_items {
        "\n"
    } else {
        "\n\n"
    }
}

/// Line offsets of a block whose text is its source lines one for one (Markdown, plain
/// text), so that a piece of it can be cited by its own lines.
struct SourceLines {
    first_line: u32,
    /// Byte offsets where each line of the block text starts.
    starts: Vec<usize>,
}

impl SourceLines {
    fn of(block: &Block) -> Option<SourceLines> {
        let Location::Lines { start, end } = block.location else {
            return None;
        };
        let starts: Vec<usize> = std::iter::once(0)
            .chain(block.text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        (end.checked_sub(start).map(|span| span as usize + 1) == Some(starts.len())).then_some(
            SourceLines {
                first_line: start,
                starts,
            },
        )
    }

    fn location_of(&self, range: &Range<usize>) -> Location {
        let line = |offset: usize| {
            self.first_line
                + (self.starts.partition_point(|&s| s <= offset) as u32).saturating_sub(1)
        };
        Location::Lines {
            start: line(range.start),
            end: line(range.end.saturating_sub(1).max(range.start)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::split::tests::WordCounter;
    use super::*;

    fn block(kind: BlockKind, text: &str, location: Location) -> Block {
        Block {
            kind,
            text: text.to_string(),
            location,
        }
    }

    fn lines(start: u32, end: u32) -> Location {
        Location::Lines { start, end }
    }

    fn heading(level: u8, text: &str, line: u32) -> Block {
        block(BlockKind::Heading(level), text, lines(line, line))
    }

    fn paragraph(text: &str, line: u32) -> Block {
        block(BlockKind::Paragraph, text, lines(line, line))
    }

    fn chunk(blocks: Vec<Block>, max_tokens: usize, overlap_tokens: usize) -> Vec<Chunk> {
        let document = Document {
            title: None,
            blocks,
        };
        let chunks = chunk_document(
            &document,
            &ChunkConfig {
                max_tokens,
                overlap_tokens,
            },
            &WordCounter,
        );
        for (index, chunk) in chunks.iter().enumerate() {
            assert_eq!(chunk.ordinal as usize, index);
            assert!(!chunk.text.trim().is_empty(), "empty chunk {index}");
            assert_eq!(
                chunk.tokens as usize,
                WordCounter.count(&chunk.text),
                "chunk {index}"
            );
        }
        chunks
    }

    fn summary(chunks: &[Chunk]) -> Vec<(String, String, Location)> {
        chunks
            .iter()
            .map(|c| (c.heading_path.join(" > "), c.text.clone(), c.location))
            .collect()
    }

    #[test]
    fn heading_paths_follow_the_outline() {
        let chunks = chunk(
            vec![
                paragraph("Preamble.", 1),
                heading(1, "Ops", 2),
                paragraph("About ops.", 3),
                heading(2, "Disk", 4),
                paragraph("Disk text.", 5),
                heading(3, "Full", 6),
                paragraph("Full text.", 7),
                heading(2, "Network", 8),
                paragraph("Net text.", 9),
                heading(1, "Other", 10),
                heading(2, "Empty section", 11),
                heading(2, "Sub", 12),
                paragraph("Sub text.", 13),
            ],
            50,
            10,
        );
        let expected = [
            ("", "Preamble.", lines(1, 1)),
            ("Ops", "About ops.", lines(3, 3)),
            ("Ops > Disk", "Disk text.", lines(5, 5)),
            ("Ops > Disk > Full", "Full text.", lines(7, 7)),
            ("Ops > Network", "Net text.", lines(9, 9)),
            ("Other > Sub", "Sub text.", lines(13, 13)),
        ];
        let expected: Vec<_> = expected
            .iter()
            .map(|(path, text, location)| (path.to_string(), text.to_string(), *location))
            .collect();
        assert_eq!(summary(&chunks), expected);
    }

    #[test]
    fn small_blocks_of_a_section_are_packed() {
        let chunks = chunk(
            vec![
                paragraph("One two three.", 1),
                block(BlockKind::ListItem, "- four", lines(3, 3)),
                block(BlockKind::ListItem, "- five", lines(4, 4)),
                paragraph("Six seven eight nine ten.", 6),
                paragraph("Eleven twelve.", 8),
            ],
            10,
            0,
        );
        let got: Vec<_> = chunks
            .iter()
            .map(|c| (c.text.as_str(), c.location))
            .collect();
        assert_eq!(
            got,
            vec![
                ("One two three.\n\n- four\n- five", lines(1, 4)),
                ("Six seven eight nine ten.\n\nEleven twelve.", lines(6, 8))
            ]
        );
    }

    #[test]
    fn long_paragraphs_split_at_sentences_with_overlap_inside_the_section() {
        let sentences: Vec<String> = (1..=12)
            .map(|i| format!("Sentence {i} has five words."))
            .collect();
        let text = sentences.join(" ");
        let chunks = chunk(
            vec![
                heading(1, "A", 1),
                paragraph(&text, 2),
                heading(1, "B", 3),
                paragraph("Fresh start here.", 4),
            ],
            22,
            6,
        );
        assert!(chunks.len() >= 4, "{chunks:#?}");
        for chunk in &chunks {
            assert!(chunk.tokens <= 22, "{chunk:?}");
        }
        let in_a: Vec<&Chunk> = chunks.iter().filter(|c| c.heading_path == ["A"]).collect();
        for pair in in_a.windows(2) {
            let previous_last_sentence = pair[0]
                .text
                .rsplit_once(". ")
                .map_or(pair[0].text.as_str(), |(_, last)| last);
            assert!(
                pair[1].text.starts_with(previous_last_sentence),
                "no overlap between {:?} and {:?}",
                pair[0].text,
                pair[1].text
            );
        }
        let b = chunks.last().unwrap();
        assert_eq!(
            (b.heading_path.clone(), b.text.as_str()),
            (vec!["B".to_string()], "Fresh start here."),
            "no overlap across headings"
        );
        // Every sentence is in some chunk.
        for sentence in &sentences {
            assert!(
                chunks.iter().any(|c| c.text.contains(sentence.as_str())),
                "{sentence} lost"
            );
        }
    }

    #[test]
    fn code_and_tables_move_whole_to_the_next_chunk() {
        let code = "```\nlet a = 1;\nlet b = 2;\nlet c = 3;\n```";
        let table = "| a | b |\n|---|---|\n| 1 | 2 |";
        let chunks = chunk(
            vec![
                paragraph("Intro words one two three four five six seven eight.", 1),
                block(BlockKind::Code, code, lines(3, 7)),
                block(BlockKind::Table, table, lines(9, 11)),
            ],
            16,
            4,
        );
        assert!(chunks.iter().any(|c| c.text.contains(code)), "{chunks:#?}");
        assert!(chunks.iter().any(|c| c.text.contains(table)), "{chunks:#?}");
        assert!(chunks.iter().all(|c| c.tokens <= 16), "{chunks:#?}");
    }

    #[test]
    fn oversized_code_splits_at_lines_with_exact_line_ranges() {
        let code_lines: Vec<String> = (1..=30).map(|i| format!("    call step_{i} now")).collect();
        let code = format!("```\n{}\n```", code_lines.join("\n"));
        let chunks = chunk(vec![block(BlockKind::Code, &code, lines(10, 41))], 20, 0);
        assert!(chunks.len() > 1);
        let mut next_line = 10;
        for chunk in &chunks {
            assert!(chunk.tokens <= 20, "{chunk:?}");
            let Location::Lines { start, end } = chunk.location else {
                panic!()
            };
            assert_eq!(start, next_line, "chunks are contiguous");
            let source: Vec<&str> = code.lines().collect();
            let expected = source[(start - 10) as usize..=(end - 10) as usize].join("\n");
            assert_eq!(chunk.text, expected, "text is exactly lines {start}-{end}");
            next_line = end + 1;
        }
        assert_eq!(next_line, 42);
    }

    #[test]
    fn chinese_without_spaces_or_marks_splits_by_characters() {
        let text: String = "数据库连接池耗尽".repeat(10);
        let chunks = chunk(vec![paragraph(&text, 1)], 30, 0);
        let sizes: Vec<u32> = chunks.iter().map(|c| c.tokens).collect();
        assert_eq!(sizes, vec![30, 30, 20]);
        assert_eq!(
            chunks.iter().map(|c| c.text.as_str()).collect::<String>(),
            text
        );
    }

    #[test]
    fn chinese_with_marks_splits_at_sentences_and_overlaps() {
        let text = "第一句很短。第二句很短。第三句很短。第四句很短。第五句很短。";
        let chunks = chunk(vec![paragraph(text, 1)], 14, 6);
        let texts: Vec<&str> = chunks.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(
            texts,
            vec![
                "第一句很短。第二句很短。",
                "第二句很短。第三句很短。",
                "第三句很短。第四句很短。",
                "第四句很短。第五句很短。"
            ]
        );
    }

    #[test]
    fn pages_merge_and_blank_blocks_vanish() {
        let pages = |n| Location::Pages { start: n, end: n };
        let chunks = chunk(
            vec![
                block(BlockKind::Paragraph, "End of page one.", pages(1)),
                block(BlockKind::Paragraph, "  \n ", pages(2)),
                block(BlockKind::Paragraph, "Top of page two.", pages(2)),
            ],
            50,
            10,
        );
        assert_eq!(
            summary(&chunks),
            vec![(
                String::new(),
                "End of page one.\n\nTop of page two.".to_string(),
                Location::Pages { start: 1, end: 2 }
            )]
        );
        assert!(chunk(vec![heading(1, "Only", 1)], 50, 10).is_empty());
    }

    #[test]
    fn extracted_markdown_chunks_end_to_end() {
        let markdown = "# 运维手册\n\n## 磁盘满\n\n先执行 `df -h` 查看。然后清理日志。\n\n```bash\nrm -rf /var/log/old\n```\n\n## Network\n\nCheck the links.\n";
        let document =
            crate::retrieval::extract::extract("a.md", markdown.as_bytes(), &Default::default())
                .unwrap();
        let chunks = chunk_document(&document, &ChunkConfig::default(), &WordCounter);
        let got: Vec<_> = summary(&chunks);
        assert_eq!(
            got,
            vec![
                (
                    "运维手册 > 磁盘满".to_string(),
                    "先执行 `df -h` 查看。然后清理日志。\n\n```bash\nrm -rf /var/log/old\n```"
                        .to_string(),
                    lines(5, 9)
                ),
                (
                    "运维手册 > Network".to_string(),
                    "Check the links.".to_string(),
                    lines(13, 13)
                ),
            ]
        );
    }
}
