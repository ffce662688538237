//! The vocabulary of knowledge-base retrieval: extracted documents, chunks with their
//! citations, and search hits. No I/O here.

use serde::{Deserialize, Serialize};

/// Where a piece of text sits in its source document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Location {
    /// 1-based inclusive line range (text formats: Markdown, plain text, HTML source lines).
    Lines { start: u32, end: u32 },
    /// 1-based inclusive page range (PDF).
    Pages { start: u32, end: u32 },
    /// 1-based inclusive paragraph range (DOCX, which has no lines or pages of its own).
    Paragraphs { start: u32, end: u32 },
}

impl Location {
    /// The smallest location covering both (same kind); `self` when kinds differ.
    pub fn merge(self, other: Location) -> Location {
        match (self, other) {
            (Location::Lines { start: a, end: b }, Location::Lines { start: c, end: d }) => {
                Location::Lines {
                    start: a.min(c),
                    end: b.max(d),
                }
            }
            (Location::Pages { start: a, end: b }, Location::Pages { start: c, end: d }) => {
                Location::Pages {
                    start: a.min(c),
                    end: b.max(d),
                }
            }
            (
                Location::Paragraphs { start: a, end: b },
                Location::Paragraphs { start: c, end: d },
            ) => Location::Paragraphs {
                start: a.min(c),
                end: b.max(d),
            },
            (first, _) => first,
        }
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (unit, start, end) = match *self {
            Location::Lines { start, end } => ("lines", start, end),
            Location::Pages { start, end } => ("pages", start, end),
            Location::Paragraphs { start, end } => ("paragraphs", start, end),
        };
        if start == end {
            write!(f, "{} {start}", unit.trim_end_matches('s'))
        } else {
            write!(f, "{unit} {start}-{end}")
        }
    }
}

/// The structural role of a block of text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockKind {
    /// A heading of level 1..=6.
    Heading(u8),
    Paragraph,
    ListItem,
    /// A fenced or indented code block: never split inside by the chunker if it fits.
    Code,
    /// A table: never split inside by the chunker if it fits.
    Table,
}

/// One structural unit of an extracted document, in reading order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Block {
    pub kind: BlockKind,
    pub text: String,
    pub location: Location,
}

/// A document as text blocks, whatever its source format.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Document {
    /// The document's title when the format has one (HTML <title>, DOCX core title).
    pub title: Option<String>,
    pub blocks: Vec<Block>,
}

/// A piece of a document sized for embedding, with what a citation needs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Chunk {
    /// Position of the chunk within its document, from 0.
    pub ordinal: u32,
    pub text: String,
    /// Headings above the chunk, outermost first.
    pub heading_path: Vec<String>,
    pub location: Location,
    /// Size in the embedding model's tokens.
    pub tokens: u32,
}

/// Counts tokens the way the embedding model will see them.
pub trait TokenCounter: Send + Sync {
    fn count(&self, text: &str) -> usize;

    /// Share (0..=1) of the text's tokens the embedding model does not know (`[UNK]`): high
    /// when the text is in a language the model was not trained on.
    fn unknown_share(&self, _text: &str) -> f32 {
        0.0
    }
}

/// Turns texts into unit vectors (the embedding model, behind whatever runs it).
pub trait Embedder: Send + Sync {
    fn embed(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, EmbedError>;
    fn dimensions(&self) -> usize;
}

/// The embedding model failed (busy, crashed, bad input).
#[derive(Debug, thiserror::Error)]
#[error("embedding failed: {0}")]
pub struct EmbedError(pub String);
