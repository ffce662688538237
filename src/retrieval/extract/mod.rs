//! Turns the bytes of one knowledge-base file into a `Document`: text blocks in reading
//! order, each with the location a citation needs. One submodule per format; this module
//! chooses the format from the file name, enforces the size limits and makes sure that no
//! input, however malformed, panics out of here, nor runs past its time budget by more than
//! one step (a PDF page, a parser pass), nor inflates a compressed PDF past its byte budget.
//! No file system access: the caller reads the bytes.

mod docx;
mod html;
mod markdown;
mod pdf;
mod pdf_budget;
mod pdf_prescan;
mod text;

use std::any::Any;
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;
use std::time::{Duration, Instant};

use super::{BlockKind, Document};

pub use text::decode_text;

/// Bounds on what one file may cost to extract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtractLimits {
    /// Largest file read at all, in bytes.
    pub max_file_bytes: u64,
    /// Largest total a DOCX may expand to, and largest single entry, in bytes.
    pub max_docx_uncompressed_bytes: u64,
    /// Compression ratio (uncompressed / compressed) above which a large DOCX entry is
    /// taken for a zip bomb.
    pub max_docx_ratio: u64,
    /// Most pages a PDF may have.
    pub max_pdf_pages: usize,
    /// Most decompressed stream bytes the PDF reader may hold at once: all the streams
    /// inflated while loading, and all those one page inflates (each use counted).
    pub max_pdf_inflated_bytes: u64,
    /// Longest one file may take to extract and chunk; checked between steps (PDF
    /// streams and pages, parser passes), so one step may run past it.
    pub max_time_per_file: Duration,
    /// Most characters of text one file may give: a small file that expands to far more
    /// text (PDF pages that all draw one stream) fails instead of flooding the index. PDF
    /// extraction stops as soon as it is passed.
    pub max_chars_per_file: usize,
    /// Most chunks one file may give.
    pub max_chunks_per_file: usize,
}

/// Default `max_pdf_inflated_bytes`.
pub const DEFAULT_MAX_PDF_INFLATED_BYTES: u64 = 64 << 20;
/// Default `max_time_per_file`.
pub const DEFAULT_MAX_TIME_PER_FILE: Duration = Duration::from_secs(60);

impl Default for ExtractLimits {
    fn default() -> Self {
        ExtractLimits {
            max_file_bytes: 32 << 20,
            max_docx_uncompressed_bytes: 64 << 20,
            max_docx_ratio: 100,
            max_pdf_pages: 2000,
            max_pdf_inflated_bytes: DEFAULT_MAX_PDF_INFLATED_BYTES,
            max_time_per_file: DEFAULT_MAX_TIME_PER_FILE,
            max_chars_per_file: 2_000_000,
            max_chunks_per_file: 5_000,
        }
    }
}

/// Why a file gave no document. The messages are shown to the admin as the reason a file
/// was skipped.
#[derive(Debug, thiserror::Error)]
pub enum ExtractError {
    #[error("{}", unsupported_message(extension))]
    Unsupported { extension: String },
    #[error("the file is {bytes} bytes, above the {limit}-byte limit")]
    TooLarge { bytes: u64, limit: u64 },
    #[error("the PDF has {pages} pages, above the {limit}-page limit")]
    TooManyPages { pages: usize, limit: usize },
    #[error("malformed {format} file: {reason}")]
    Malformed {
        format: &'static str,
        reason: String,
    },
    #[error("refused as a probable zip bomb: {reason}")]
    ZipBomb { reason: String },
    #[error(
        "refused as a probable decompression bomb: its compressed PDF streams inflate to more \
         than the {limit}-byte budget"
    )]
    InflateBudget { limit: u64 },
    #[error("took longer than the {seconds}-second budget per file to read")]
    TimedOut { seconds: u64 },
    #[error("gives more than {limit} characters of text, the limit per file")]
    TooMuchText { limit: usize },
    #[error("gives {chunks} chunks, above the {limit}-chunk limit per file")]
    TooManyChunks { chunks: usize, limit: usize },
    #[error("no text could be extracted (scanned PDFs and images would need OCR, which Warden does not do)")]
    Empty,
}

/// The formats Warden reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Markdown,
    PlainText,
    Html,
    Pdf,
    Docx,
}

/// The extensions each format is recognised by, lower case, without the dot.
const EXTENSIONS: &[(&str, Format)] = &[
    ("md", Format::Markdown),
    ("markdown", Format::Markdown),
    ("txt", Format::PlainText),
    ("text", Format::PlainText),
    ("log", Format::PlainText),
    ("rst", Format::PlainText),
    ("html", Format::Html),
    ("htm", Format::Html),
    ("pdf", Format::Pdf),
    ("docx", Format::Docx),
];

/// The format of a file, from its name's extension (case-insensitive). `file_name` may
/// be a whole path with `/` or `\` separators.
pub fn detect_format(file_name: &str) -> Result<Format, ExtractError> {
    let extension = extension_of(file_name);
    EXTENSIONS
        .iter()
        .find(|(known, _)| *known == extension)
        .map(|(_, format)| *format)
        .ok_or(ExtractError::Unsupported { extension })
}

/// Whether `extract` would try this file (used to list unsupported files as skipped
/// before reading them).
pub fn is_supported(file_name: &str) -> bool {
    detect_format(file_name).is_ok()
}

/// Extracts the text blocks of one file. Never panics: a panic inside a format parser
/// is logged and reported as `Malformed`. The time budget starts now.
pub fn extract(
    file_name: &str,
    bytes: &[u8],
    limits: &ExtractLimits,
) -> Result<Document, ExtractError> {
    let deadline = Instant::now().checked_add(limits.max_time_per_file);
    extract_within(file_name, bytes, limits, deadline)
}

/// `extract`, with the time budget ending at `deadline` (`None`: no time limit).
pub fn extract_within(
    file_name: &str,
    bytes: &[u8],
    limits: &ExtractLimits,
    deadline: Option<Instant>,
) -> Result<Document, ExtractError> {
    let document = extract_by(file_name, bytes, limits, deadline)?;
    check_deadline(deadline, limits)?;
    Ok(document)
}

/// `TimedOut` once `deadline` has passed.
pub fn check_deadline(
    deadline: Option<Instant>,
    limits: &ExtractLimits,
) -> Result<(), ExtractError> {
    if deadline.is_some_and(|d| Instant::now() > d) {
        return Err(ExtractError::TimedOut {
            seconds: limits.max_time_per_file.as_secs(),
        });
    }
    Ok(())
}

fn extract_by(
    file_name: &str,
    bytes: &[u8],
    limits: &ExtractLimits,
    deadline: Option<Instant>,
) -> Result<Document, ExtractError> {
    let format = detect_format(file_name)?;
    let size = bytes.len() as u64;
    if size > limits.max_file_bytes {
        return Err(ExtractError::TooLarge {
            bytes: size,
            limit: limits.max_file_bytes,
        });
    }
    let document = match catch_quietly(|| extract_format(format, bytes, limits, deadline)) {
        Ok(result) => result?,
        Err(message) => {
            tracing::warn!(file = file_name, panic = %message, "document parser panicked");
            return Err(ExtractError::Malformed {
                format: format.name(),
                reason: format!("the parser failed ({message})"),
            });
        }
    };
    if !has_body_text(&document) {
        return Err(ExtractError::Empty);
    }
    let chars: usize = document.blocks.iter().map(|b| b.text.chars().count()).sum();
    if chars > limits.max_chars_per_file {
        return Err(ExtractError::TooMuchText {
            limit: limits.max_chars_per_file,
        });
    }
    Ok(document)
}

impl Format {
    /// The name used in error messages.
    pub fn name(self) -> &'static str {
        match self {
            Format::Markdown => "Markdown",
            Format::PlainText => "text",
            Format::Html => "HTML",
            Format::Pdf => "PDF",
            Format::Docx => "DOCX",
        }
    }
}

fn extract_format(
    format: Format,
    bytes: &[u8],
    limits: &ExtractLimits,
    deadline: Option<Instant>,
) -> Result<Document, ExtractError> {
    match format {
        Format::Markdown => {
            let source = text::decode_checked(bytes, format)?;
            Ok(Document {
                title: None,
                blocks: markdown::parse_markdown(&source),
            })
        }
        Format::PlainText => {
            let source = text::decode_checked(bytes, format)?;
            Ok(Document {
                title: None,
                blocks: text::parse_plain_text(&source),
            })
        }
        Format::Html => {
            let source = text::decode_checked(bytes, format)?;
            html::parse_html(&source)
        }
        Format::Pdf => pdf::extract_pdf(bytes, limits, deadline),
        Format::Docx => docx::extract_docx(bytes, limits),
    }
}

/// A document is worth indexing when some block other than a heading has text.
/// A table as text: cells (whitespace collapsed) joined by " | ", one row per line;
/// empty cells and rows are dropped.
pub(crate) fn table_text(rows: &[Vec<String>]) -> String {
    rows.iter()
        .map(|cells| {
            cells
                .iter()
                .map(|cell| cell.split_whitespace().collect::<Vec<_>>().join(" "))
                .filter(|cell| !cell.is_empty())
                .collect::<Vec<_>>()
                .join(" | ")
        })
        .filter(|row| !row.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

fn has_body_text(document: &Document) -> bool {
    document
        .blocks
        .iter()
        .any(|block| !matches!(block.kind, BlockKind::Heading(_)) && !block.text.trim().is_empty())
}

/// The extension of the last path component, lower case; empty when there is none
/// (including dot files such as `.bashrc`).
fn extension_of(file_name: &str) -> String {
    let base = file_name.rsplit(['/', '\\']).next().unwrap_or(file_name);
    match base.rfind('.') {
        Some(dot) if dot > 0 => base[dot + 1..].to_ascii_lowercase(),
        _ => String::new(),
    }
}

fn unsupported_message(extension: &str) -> String {
    let supported = EXTENSIONS
        .iter()
        .map(|(e, _)| format!(".{e}"))
        .collect::<Vec<_>>()
        .join(", ");
    if extension.is_empty() {
        format!("files without an extension are not supported (supported: {supported})")
    } else {
        format!("unsupported file type .{extension} (supported: {supported})")
    }
}

thread_local! {
    /// Set while this thread runs a parser whose panics must not reach the panic hook.
    static QUIET_PANICS: Cell<bool> = const { Cell::new(false) };
}

static INSTALL_QUIET_HOOK: Once = Once::new();

/// Runs `f`, turning a panic into `Err(message)` without letting the panic hook print
/// it. The hook installed once here forwards every panic of other threads, or outside
/// this call, to the hook that was there before.
pub(crate) fn catch_quietly<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    INSTALL_QUIET_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET_PANICS.with(Cell::get) {
                previous(info);
            }
        }));
    });
    let was_quiet = QUIET_PANICS.with(|quiet| quiet.replace(true));
    let result = catch_unwind(AssertUnwindSafe(f));
    QUIET_PANICS.with(|quiet| quiet.set(was_quiet));
    result.map_err(|payload| panic_message(payload.as_ref()))
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(message) = payload.downcast_ref::<&str>() {
        (*message).to_string()
    } else if let Some(message) = payload.downcast_ref::<String>() {
        message.clone()
    } else {
        "panic with a non-text payload".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_come_from_the_extension() {
        let cases: &[(&str, Option<Format>)] = &[
            ("notes.md", Some(Format::Markdown)),
            ("dir/NOTES.MARKDOWN", Some(Format::Markdown)),
            ("a\\b\\readme.TXT", Some(Format::PlainText)),
            ("server.log", Some(Format::PlainText)),
            ("guide.rst", Some(Format::PlainText)),
            ("page.HTM", Some(Format::Html)),
            ("manual.pdf", Some(Format::Pdf)),
            ("spec.Docx", Some(Format::Docx)),
            ("image.png", None),
            ("Makefile", None),
            (".bashrc", None),
            ("archive.tar.gz", None),
            ("dir.md/file", None),
        ];
        for (name, expected) in cases {
            assert_eq!(detect_format(name).ok(), *expected, "{name}");
            assert_eq!(is_supported(name), expected.is_some(), "{name}");
        }
    }

    #[test]
    fn unsupported_names_the_extension() {
        let error = extract("photo.JPG", b"\xff\xd8", &ExtractLimits::default()).unwrap_err();
        assert!(matches!(&error, ExtractError::Unsupported { extension } if extension == "jpg"));
        assert!(error.to_string().contains(".jpg"), "{error}");
        let error = extract("LICENSE", b"text", &ExtractLimits::default()).unwrap_err();
        assert!(
            error.to_string().contains("without an extension"),
            "{error}"
        );
    }

    #[test]
    fn too_large_is_refused_before_parsing() {
        let limits = ExtractLimits {
            max_file_bytes: 10,
            ..ExtractLimits::default()
        };
        let error = extract("a.txt", b"hello world, this is long", &limits).unwrap_err();
        assert!(
            matches!(
                error,
                ExtractError::TooLarge {
                    bytes: 25,
                    limit: 10
                }
            ),
            "{error:?}"
        );
    }

    #[test]
    fn empty_and_heading_only_documents_are_empty() {
        let limits = ExtractLimits::default();
        for (name, bytes) in [
            ("a.txt", &b"  \n\n \n"[..]),
            ("a.md", b"# Only a heading\n\n## Another\n"),
            ("a.html", b"<html><body> </body></html>"),
        ] {
            let error = extract(name, bytes, &limits).unwrap_err();
            assert!(matches!(error, ExtractError::Empty), "{name}: {error:?}");
        }
    }

    #[test]
    fn catch_quietly_returns_the_panic_message() {
        let result: Result<(), String> = catch_quietly(|| panic!("boom {}", 42));
        assert_eq!(result.unwrap_err(), "boom 42");
        assert_eq!(catch_quietly(|| 7).unwrap(), 7);
        assert!(!QUIET_PANICS.with(Cell::get));
    }
}
