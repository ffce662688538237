//! PDF as blocks: the text layer of each page through `pdf-extract`, cut into paragraphs
//! at blank lines, each located by its page. Scanned pages without a text layer give no
//! text (no OCR).
//!
//! `pdf-extract` panics on many malformed files; every call into it runs under
//! `catch_quietly`, page by page, so one bad page costs only that page. Two of its
//! recursions (inherited page attributes, form XObjects drawing form XObjects) would
//! overflow the stack on a looping file, which no `catch_unwind` can catch, so each page
//! is checked for loops first.
//!
//! Compressed streams are inflated under a byte budget (`pdf_prescan` before the file is
//! parsed, `pdf_budget` before each page is read): a decompression bomb fails the whole
//! file. The time budget is checked between pages.

use std::time::Instant;

use pdf_extract::{
    output_doc_page, Dictionary, Document as Pdf, Object, ObjectId, PlainTextOutput,
};

use super::pdf_budget::{
    resolve, resolve_with_id, strip_unread_streams, ChargeError, InflateAccount,
};
use super::pdf_prescan::{check_before_load, PrescanError};
use super::{catch_quietly, check_deadline, ExtractError, ExtractLimits};
use crate::retrieval::{Block, BlockKind, Document, Location};

/// Most `Parent` links followed from a page towards the root of the page tree.
const MAX_PAGE_TREE_DEPTH: usize = 64;
/// Deepest nesting of form XObjects drawn inside each other.
const MAX_FORM_DEPTH: usize = 16;
/// Most form XObjects drawn for one page (a file can draw each form twice, 30 deep).
const MAX_FORMS_PER_PAGE: usize = 10_000;

/// Why a page was not read: the whole file is refused (over the inflate budget), or only
/// this page is skipped.
enum PageError {
    OverBudget,
    Unreadable(String),
}

pub(super) fn extract_pdf(
    bytes: &[u8],
    limits: &ExtractLimits,
    deadline: Option<Instant>,
) -> Result<Document, ExtractError> {
    let budget = limits.max_pdf_inflated_bytes;
    check_before_load(bytes, budget, deadline).map_err(|error| match error {
        PrescanError::OverBudget => ExtractError::InflateBudget { limit: budget },
        PrescanError::TimedOut => ExtractError::TimedOut {
            seconds: limits.max_time_per_file.as_secs(),
        },
        PrescanError::EncryptedObjectStreams => malformed(
            "the PDF is encrypted and has compressed object streams, which cannot be checked \
             for decompression bombs before decryption"
                .into(),
        ),
    })?;
    let mut pdf = load(bytes)?;
    strip_unread_streams(&mut pdf);
    let pdf = pdf;
    let pages = pdf.get_pages();
    if pages.is_empty() {
        return Err(malformed("the PDF has no pages".into()));
    }
    if pages.len() > limits.max_pdf_pages {
        return Err(ExtractError::TooManyPages {
            pages: pages.len(),
            limit: limits.max_pdf_pages,
        });
    }
    let mut account = InflateAccount::new(&pdf, budget);
    let mut blocks = Vec::new();
    let mut first_failure = None;
    let mut failures = 0;
    let mut chars = 0usize;
    for (&number, &page_id) in &pages {
        check_deadline(deadline, limits)?;
        match page_text(&pdf, number, page_id, &mut account) {
            Ok(text) => {
                // Pages may all draw one stream: stop as soon as the text is too much.
                chars = chars.saturating_add(text.chars().count());
                if chars > limits.max_chars_per_file {
                    return Err(ExtractError::TooMuchText {
                        limit: limits.max_chars_per_file,
                    });
                }
                blocks.extend(paragraphs(&text, number));
            }
            Err(PageError::OverBudget) => {
                return Err(ExtractError::InflateBudget { limit: budget });
            }
            Err(PageError::Unreadable(reason)) => {
                tracing::warn!(page = number, %reason, "skipped an unreadable PDF page");
                failures += 1;
                first_failure.get_or_insert((number, reason));
            }
        }
    }
    if failures > 0 && failures == pages.len() {
        let (page, reason) = first_failure.unwrap_or_default();
        let reason = format!("no page could be read (page {page}: {reason})");
        return Err(malformed(reason));
    }
    Ok(Document {
        title: title(&pdf),
        blocks,
    })
}

fn malformed(reason: String) -> ExtractError {
    ExtractError::Malformed {
        format: "PDF",
        reason,
    }
}

fn load(bytes: &[u8]) -> Result<Pdf, ExtractError> {
    let mut pdf = catch_quietly(|| Pdf::load_mem(bytes))
        .map_err(malformed)?
        .map_err(|error| malformed(error.to_string()))?;
    if pdf.is_encrypted() {
        let decrypted = catch_quietly(|| pdf.decrypt("").is_ok()).unwrap_or(false);
        if !decrypted {
            return Err(malformed("the PDF is protected by a password".into()));
        }
    }
    Ok(pdf)
}

/// The text layer of one page, or why it could not be read. The streams the page makes
/// the reader inflate are charged first.
fn page_text<'a>(
    pdf: &'a Pdf,
    number: u32,
    page_id: ObjectId,
    account: &mut InflateAccount<'a>,
) -> Result<String, PageError> {
    account.start_page();
    account.charge_contents(page_id)?;
    check_page_loops(pdf, page_id, account)?;
    let extracted = catch_quietly(|| {
        let mut text = String::new();
        let outcome = output_doc_page(pdf, &mut PlainTextOutput::new(&mut text), number);
        outcome.map(|()| text)
    });
    match extracted {
        Ok(Ok(text)) => Ok(text),
        Ok(Err(error)) => Err(PageError::Unreadable(error.to_string())),
        Err(panic) => Err(PageError::Unreadable(format!(
            "the PDF reader failed ({panic})"
        ))),
    }
}

impl From<ChargeError> for PageError {
    fn from(error: ChargeError) -> Self {
        match error {
            ChargeError::Exceeded => PageError::OverBudget,
            ChargeError::TooComplex(reason) => PageError::Unreadable(reason),
        }
    }
}

impl From<String> for PageError {
    fn from(reason: String) -> Self {
        PageError::Unreadable(reason)
    }
}

/// The paragraphs of a page's text: runs of non-blank lines.
fn paragraphs(text: &str, page: u32) -> Vec<Block> {
    let location = Location::Pages {
        start: page,
        end: page,
    };
    let mut blocks = Vec::new();
    let mut lines: Vec<&str> = Vec::new();
    for line in text.lines().map(str::trim).chain(std::iter::once("")) {
        if !line.is_empty() {
            lines.push(line);
        } else if !lines.is_empty() {
            blocks.push(Block {
                kind: BlockKind::Paragraph,
                text: lines.join("\n"),
                location,
            });
            lines.clear();
        }
    }
    blocks
}

/// The document title from the Info dictionary, when there is one.
fn title(pdf: &Pdf) -> Option<String> {
    let info = resolve(pdf, pdf.trailer.get(b"Info").ok()?)?
        .as_dict()
        .ok()?;
    let title = pdf_extract::decode_text_string(resolve(pdf, info.get(b"Title").ok()?)?).ok()?;
    let title = title.trim();
    (!title.is_empty()).then(|| title.to_string())
}

/// Refuses a page whose reading would recurse without end: a looping page tree, or
/// form XObjects that draw themselves (directly or not), too deeply or too often. Charges
/// the page's fonts, and each form (with its fonts) every time it is drawn.
fn check_page_loops<'a>(
    pdf: &'a Pdf,
    page_id: ObjectId,
    account: &mut InflateAccount<'a>,
) -> Result<(), PageError> {
    let page = pdf.get_dictionary(page_id).map_err(|e| e.to_string())?;
    let mut resources = None;
    let mut node = page;
    for _ in 0..MAX_PAGE_TREE_DEPTH {
        if resources.is_none() {
            resources = node
                .get(b"Resources")
                .ok()
                .and_then(|r| resolve(pdf, r))
                .and_then(|r| r.as_dict().ok());
        }
        match node
            .get(b"Parent")
            .ok()
            .and_then(|p| resolve(pdf, p))
            .and_then(|p| p.as_dict().ok())
        {
            Some(parent) => node = parent,
            None => {
                let Some(resources) = resources else {
                    return Ok(());
                };
                account.charge_fonts(resources)?;
                let Ok(content) = pdf.get_page_content(page_id) else {
                    return Ok(());
                };
                let mut budget = MAX_FORMS_PER_PAGE;
                return check_forms(pdf, &content, resources, 0, &mut budget, account);
            }
        }
    }
    Err(PageError::Unreadable(format!(
        "the page tree is more than {MAX_PAGE_TREE_DEPTH} levels deep (a loop?)"
    )))
}

/// Follows every form XObject a content stream draws, the way `pdf-extract` will,
/// within the depth and count limits.
fn check_forms<'a>(
    pdf: &'a Pdf,
    content: &[u8],
    resources: &'a Dictionary,
    depth: usize,
    budget: &mut usize,
    account: &mut InflateAccount<'a>,
) -> Result<(), PageError> {
    let Ok(operations) = pdf_extract::content::Content::decode(content) else {
        return Ok(());
    };
    let xobjects = resources
        .get(b"XObject")
        .ok()
        .and_then(|x| resolve(pdf, x))
        .and_then(|x| x.as_dict().ok());
    for operation in operations
        .operations
        .iter()
        .filter(|op| op.operator == "Do")
    {
        let Some(name) = operation.operands.first().and_then(|n| n.as_name().ok()) else {
            continue;
        };
        let Some((id, Object::Stream(form))) = xobjects
            .and_then(|x| x.get(name).ok())
            .and_then(|f| resolve_with_id(pdf, f))
        else {
            continue;
        };
        if depth + 1 > MAX_FORM_DEPTH {
            return Err(PageError::Unreadable(format!(
                "form XObjects nest more than {MAX_FORM_DEPTH} deep (a loop?)"
            )));
        }
        *budget = budget.checked_sub(1).ok_or_else(|| {
            format!("the page draws more than {MAX_FORMS_PER_PAGE} form XObjects")
        })?;
        account.charge_stream(id, form)?;
        let inner_resources = form
            .dict
            .get(b"Resources")
            .ok()
            .and_then(|r| resolve(pdf, r))
            .and_then(|r| r.as_dict().ok())
            .unwrap_or(resources);
        account.charge_fonts(inner_resources)?;
        let inner_content = if form.filters().is_ok() {
            form.decompressed_content()
                .unwrap_or_else(|_| form.content.clone())
        } else {
            form.content.clone()
        };
        check_forms(
            pdf,
            &inner_content,
            inner_resources,
            depth + 1,
            budget,
            account,
        )?;
    }
    Ok(())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// One page of a test PDF: its content stream and whether it declares a MediaBox.
    pub(crate) struct TestPage<'a> {
        pub content: &'a str,
        pub media_box: bool,
        /// Extra page-dictionary entries, e.g. resources naming a form XObject.
        pub extra: &'a str,
    }

    /// A content stream that shows paragraphs of lines (Helvetica 12pt, 14pt leading,
    /// a 40pt gap between paragraphs).
    pub(crate) fn text_content(paragraphs: &[&[&str]]) -> String {
        let mut content = String::from("BT /F1 12 Tf 72 720 Td\n");
        for (index, lines) in paragraphs.iter().enumerate() {
            if index > 0 {
                content.push_str("0 -40 Td\n");
            }
            for (line_index, line) in lines.iter().enumerate() {
                if line_index > 0 {
                    content.push_str("0 -14 Td\n");
                }
                let escaped = line
                    .replace('\\', "\\\\")
                    .replace('(', "\\(")
                    .replace(')', "\\)");
                content.push_str(&format!("({escaped}) Tj\n"));
            }
        }
        content.push_str("ET");
        content
    }

    /// Writes a minimal PDF by hand (objects, cross-reference table with computed
    /// offsets, trailer). Objects 1-3 are the catalog, the page tree and the font; each
    /// page then takes two numbers (page, content); extra objects come after them.
    pub(crate) fn build_pdf(
        pages: &[TestPage],
        extra_objects: &[String],
        title: Option<&str>,
    ) -> Vec<u8> {
        let first_page_object = 4;
        let mut objects: Vec<String> = vec![
            "<< /Type /Catalog /Pages 2 0 R >>".into(),
            format!(
                "<< /Type /Pages /Count {} /Kids [{}] >>",
                pages.len(),
                (0..pages.len())
                    .map(|i| format!("{} 0 R", first_page_object + 2 * i))
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
            "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"
                .into(),
        ];
        for (index, page) in pages.iter().enumerate() {
            let media_box = if page.media_box {
                "/MediaBox [0 0 612 792]"
            } else {
                ""
            };
            objects.push(format!(
                "<< /Type /Page /Parent 2 0 R {media_box} /Resources << /Font << /F1 3 0 R >> {} >> /Contents {} 0 R >>",
                page.extra,
                first_page_object + 2 * index + 1
            ));
            objects.push(format!(
                "<< /Length {} >>\nstream\n{}\nendstream",
                page.content.len() + 1,
                page.content
            ));
        }
        objects.extend(extra_objects.iter().cloned());
        let info = title.map(|t| {
            objects.push(format!("<< /Title ({t}) >>"));
            objects.len()
        });

        let mut pdf = b"%PDF-1.4\n".to_vec();
        let mut offsets = Vec::new();
        for (index, object) in objects.iter().enumerate() {
            offsets.push(pdf.len());
            pdf.extend(format!("{} 0 obj\n{object}\nendobj\n", index + 1).bytes());
        }
        let xref = pdf.len();
        pdf.extend(format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).bytes());
        for offset in offsets {
            pdf.extend(format!("{offset:010} 00000 n \n").bytes());
        }
        let info = info.map(|n| format!(" /Info {n} 0 R")).unwrap_or_default();
        pdf.extend(
            format!(
                "trailer\n<< /Size {} /Root 1 0 R{info} >>\nstartxref\n{xref}\n%%EOF\n",
                objects.len() + 1
            )
            .bytes(),
        );
        pdf
    }

    fn page(content: &str) -> TestPage<'_> {
        TestPage {
            content,
            media_box: true,
            extra: "",
        }
    }

    fn texts(document: &Document) -> Vec<(String, Location)> {
        document
            .blocks
            .iter()
            .map(|b| (b.text.clone(), b.location))
            .collect()
    }

    #[test]
    fn text_layer_by_page_and_paragraph() {
        let first = text_content(&[
            &["Disk full on db-1."],
            &["Run the cleanup job,", "then check again."],
        ]);
        let second = text_content(&[&["Page two text."]]);
        let pdf = build_pdf(&[page(&first), page(&second)], &[], Some("Runbook"));
        let document = extract_pdf(&pdf, &ExtractLimits::default(), None).unwrap();
        assert_eq!(document.title.as_deref(), Some("Runbook"));
        let on_page = |n| Location::Pages { start: n, end: n };
        assert_eq!(
            texts(&document),
            vec![
                ("Disk full on db-1.".to_string(), on_page(1)),
                (
                    "Run the cleanup job,\nthen check again.".to_string(),
                    on_page(1)
                ),
                ("Page two text.".to_string(), on_page(2)),
            ]
        );
    }

    #[test]
    fn garbage_is_malformed() {
        for bytes in [
            &b""[..],
            b"%PDF-1.4\nnot really",
            b"%PDF-1.7\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF",
        ] {
            let error = extract_pdf(bytes, &ExtractLimits::default(), None).unwrap_err();
            assert!(
                matches!(error, ExtractError::Malformed { format: "PDF", .. }),
                "{error:?}"
            );
        }
    }

    #[test]
    fn a_page_that_panics_the_reader_is_caught() {
        // pdf-extract panics (`expect("MediaBox")`) on a page without a MediaBox.
        let content = text_content(&[&["hello"]]);
        let pdf = build_pdf(
            &[TestPage {
                content: &content,
                media_box: false,
                extra: "",
            }],
            &[],
            None,
        );
        let error = extract_pdf(&pdf, &ExtractLimits::default(), None).unwrap_err();
        assert!(
            matches!(&error, ExtractError::Malformed { reason, .. } if reason.contains("MediaBox")),
            "{error:?}"
        );
        // With a good page beside it, the good page's text survives.
        let pdf = build_pdf(
            &[
                TestPage {
                    content: &content,
                    media_box: false,
                    extra: "",
                },
                page(&content),
            ],
            &[],
            None,
        );
        let document = extract_pdf(&pdf, &ExtractLimits::default(), None).unwrap();
        assert_eq!(
            texts(&document),
            vec![("hello".to_string(), Location::Pages { start: 2, end: 2 })]
        );
    }

    #[test]
    fn a_form_that_draws_itself_is_refused_without_overflowing() {
        // Object 6 (after one page's two objects) is a form XObject whose resources name
        // itself and whose content draws itself.
        let form = "<< /Type /XObject /Subtype /Form /BBox [0 0 10 10] /Resources << /XObject << /Fm 6 0 R >> >> /Length 6 >>\nstream\n/Fm Do\nendstream".to_string();
        let content = "/Fm Do";
        let pdf = build_pdf(
            &[TestPage {
                content,
                media_box: true,
                extra: "/XObject << /Fm 6 0 R >>",
            }],
            &[form],
            None,
        );
        let error = extract_pdf(&pdf, &ExtractLimits::default(), None).unwrap_err();
        assert!(
            matches!(&error, ExtractError::Malformed { reason, .. } if reason.contains("nest")),
            "{error:?}"
        );
    }

    #[test]
    fn too_many_pages_is_refused() {
        let content = text_content(&[&["x"]]);
        let pdf = build_pdf(&[page(&content), page(&content)], &[], None);
        let limits = ExtractLimits {
            max_pdf_pages: 1,
            ..ExtractLimits::default()
        };
        let error = extract_pdf(&pdf, &limits, None).unwrap_err();
        assert!(
            matches!(error, ExtractError::TooManyPages { pages: 2, limit: 1 }),
            "{error:?}"
        );
    }

    /// One page of text that draws object 6, a Flate stream holding `compressed` with
    /// `dict`'s entries, `draws` times.
    fn with_flate_object(dict: &str, compressed: &[u8], draws: usize) -> Vec<u8> {
        // Object 6: a stream after one page's two objects; the page draws it as a form.
        let mut form = format!(
            "<< {dict} /Filter /FlateDecode /Length {} >>\nstream\n",
            compressed.len()
        )
        .into_bytes();
        form.extend(compressed);
        form.extend(b"\nendstream");
        let content = format!(
            "{}\n{}",
            text_content(&[&["visible text"]]),
            "/Fm Do\n".repeat(draws)
        );
        let mut pdf = build_pdf(
            &[TestPage {
                content: &content,
                media_box: true,
                extra: "/XObject << /Fm 6 0 R >>",
            }],
            &["PLACEHOLDER".to_string()],
            None,
        );
        // `build_pdf` takes text objects; splice the binary one in place of the marker,
        // shifting the xref offsets that follow it.
        let at = pdf.windows(11).position(|w| w == b"PLACEHOLDER").unwrap();
        let shift = form.len() as i64 - 11;
        pdf.splice(at..at + 11, form);
        let xref_at = pdf.windows(6).rposition(|w| w == b"\nxref\n").unwrap() + 1;
        let (body, tail) = pdf.split_at(xref_at);
        let tail = String::from_utf8(tail.to_vec()).unwrap();
        let mut fixed = Vec::new();
        for line in tail.split_inclusive('\n') {
            let number = line
                .strip_suffix(" 00000 n \n")
                .and_then(|n| n.parse::<i64>().ok());
            match number {
                Some(offset) if offset as usize > at => {
                    fixed.push(format!("{:010} 00000 n \n", offset + shift));
                }
                _ => fixed.push(line.to_string()),
            }
        }
        let fixed = fixed.concat();
        let start_at = fixed.rfind("startxref\n").unwrap() + "startxref\n".len();
        let end_at = start_at + fixed[start_at..].find('\n').unwrap();
        let fixed = format!("{}{}{}", &fixed[..start_at], xref_at, &fixed[end_at..]);
        let mut out = body.to_vec();
        out.extend(fixed.bytes());
        out
    }

    fn small_budget() -> ExtractLimits {
        ExtractLimits {
            max_pdf_inflated_bytes: 1 << 20,
            ..ExtractLimits::default()
        }
    }

    #[test]
    fn a_form_that_inflates_past_the_budget_fails_the_file() {
        use super::super::pdf_budget::tests::zlib_zeros;
        let bomb = zlib_zeros(8 << 20);
        let pdf = with_flate_object("/Type /XObject /Subtype /Form /BBox [0 0 10 10]", &bomb, 1);
        let error = extract_pdf(&pdf, &small_budget(), None).unwrap_err();
        assert!(
            matches!(error, ExtractError::InflateBudget { limit } if limit == 1 << 20),
            "{error:?}"
        );
        assert!(error.to_string().contains("decompression bomb"), "{error}");
        // Under a budget that holds it, the same file reads.
        let document = extract_pdf(&pdf, &ExtractLimits::default(), None).unwrap();
        assert_eq!(texts(&document)[0].0, "visible text");
    }

    #[test]
    fn a_small_form_drawn_many_times_is_charged_for_every_draw() {
        use super::super::pdf_budget::tests::zlib_zeros;
        let form = zlib_zeros(200 << 10);
        let dict = "/Type /XObject /Subtype /Form";
        let four = with_flate_object(dict, &form, 4);
        assert!(extract_pdf(&four, &small_budget(), None).is_ok());
        let eight = with_flate_object(dict, &form, 8);
        let error = extract_pdf(&eight, &small_budget(), None).unwrap_err();
        assert!(
            matches!(error, ExtractError::InflateBudget { .. }),
            "{error:?}"
        );
    }

    #[test]
    fn an_image_is_never_inflated() {
        use super::super::pdf_budget::tests::zlib_zeros;
        let image = zlib_zeros(8 << 20);
        let pdf = with_flate_object(
            "/Type /XObject /Subtype /Image /Width 4096 /Height 2048 /ColorSpace /DeviceGray /BitsPerComponent 8",
            &image,
            3,
        );
        let document = extract_pdf(&pdf, &small_budget(), None).unwrap();
        assert_eq!(texts(&document)[0].0, "visible text");
    }

    #[test]
    fn pages_that_amplify_one_stream_stop_at_the_text_limit() {
        let words: Vec<&str> = std::iter::repeat("amplified").take(200).collect();
        let content = text_content(&[&words]);
        let pages: Vec<TestPage> = (0..50).map(|_| page(&content)).collect();
        let pdf = build_pdf(&pages, &[], None);
        let limits = ExtractLimits {
            max_chars_per_file: 20_000,
            ..ExtractLimits::default()
        };
        let error = extract_pdf(&pdf, &limits, None).unwrap_err();
        assert!(
            matches!(error, ExtractError::TooMuchText { limit: 20_000 }),
            "{error:?}"
        );
        assert!(extract_pdf(&pdf, &ExtractLimits::default(), None).is_ok());
    }

    #[test]
    fn an_expired_time_budget_fails_the_file() {
        let content = text_content(&[&["x"]]);
        let pdf = build_pdf(&[page(&content), page(&content)], &[], None);
        let limits = ExtractLimits {
            max_time_per_file: std::time::Duration::ZERO,
            ..ExtractLimits::default()
        };
        let past = Instant::now().checked_sub(std::time::Duration::from_millis(5));
        let error = extract_pdf(&pdf, &limits, past).unwrap_err();
        assert!(
            matches!(error, ExtractError::TimedOut { seconds: 0 }),
            "{error:?}"
        );
        assert!(extract_pdf(&pdf, &limits, None).is_ok());
    }
}
