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
//! Known limit: compressed streams are inflated by `lopdf` without a size bound, so a
//! crafted PDF within `max_file_bytes` can still make it allocate a lot.

use pdf_extract::{
    output_doc_page, Dictionary, Document as Pdf, Object, ObjectId, PlainTextOutput,
};

use super::{catch_quietly, ExtractError, ExtractLimits};
use crate::retrieval::{Block, BlockKind, Document, Location};

/// Most `Parent` links followed from a page towards the root of the page tree.
const MAX_PAGE_TREE_DEPTH: usize = 64;
/// Deepest nesting of form XObjects drawn inside each other.
const MAX_FORM_DEPTH: usize = 16;
/// Most form XObjects drawn for one page (a file can draw each form twice, 30 deep).
const MAX_FORMS_PER_PAGE: usize = 10_000;
/// Most indirect references followed to reach one object.
const MAX_REFERENCE_HOPS: usize = 32;

pub(super) fn extract_pdf(bytes: &[u8], limits: &ExtractLimits) -> Result<Document, ExtractError> {
    let pdf = load(bytes)?;
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
    let mut blocks = Vec::new();
    let mut first_failure = None;
    let mut failures = 0;
    for (&number, &page_id) in &pages {
        match page_text(&pdf, number, page_id) {
            Ok(text) => blocks.extend(paragraphs(&text, number)),
            Err(reason) => {
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

/// The text layer of one page, or why it could not be read.
fn page_text(pdf: &Pdf, number: u32, page_id: ObjectId) -> Result<String, String> {
    check_page_loops(pdf, page_id)?;
    let extracted = catch_quietly(|| {
        let mut text = String::new();
        let outcome = output_doc_page(pdf, &mut PlainTextOutput::new(&mut text), number);
        outcome.map(|()| text)
    });
    match extracted {
        Ok(Ok(text)) => Ok(text),
        Ok(Err(error)) => Err(error.to_string()),
        Err(panic) => Err(format!("the PDF reader failed ({panic})")),
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
/// form XObjects that draw themselves (directly or not), too deeply or too often.
fn check_page_loops(pdf: &Pdf, page_id: ObjectId) -> Result<(), String> {
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
                let Ok(content) = pdf.get_page_content(page_id) else {
                    return Ok(());
                };
                let mut budget = MAX_FORMS_PER_PAGE;
                return check_forms(pdf, &content, resources, 0, &mut budget);
            }
        }
    }
    Err(format!(
        "the page tree is more than {MAX_PAGE_TREE_DEPTH} levels deep (a loop?)"
    ))
}

/// Follows every form XObject a content stream draws, the way `pdf-extract` will,
/// within the depth and count limits.
fn check_forms(
    pdf: &Pdf,
    content: &[u8],
    resources: &Dictionary,
    depth: usize,
    budget: &mut usize,
) -> Result<(), String> {
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
        let Some(Object::Stream(form)) = xobjects
            .and_then(|x| x.get(name).ok())
            .and_then(|f| resolve(pdf, f))
        else {
            continue;
        };
        if depth + 1 > MAX_FORM_DEPTH {
            return Err(format!(
                "form XObjects nest more than {MAX_FORM_DEPTH} deep (a loop?)"
            ));
        }
        *budget = budget.checked_sub(1).ok_or_else(|| {
            format!("the page draws more than {MAX_FORMS_PER_PAGE} form XObjects")
        })?;
        let inner_resources = form
            .dict
            .get(b"Resources")
            .ok()
            .and_then(|r| resolve(pdf, r))
            .and_then(|r| r.as_dict().ok())
            .unwrap_or(resources);
        let inner_content = if form.filters().is_ok() {
            form.decompressed_content()
                .unwrap_or_else(|_| form.content.clone())
        } else {
            form.content.clone()
        };
        check_forms(pdf, &inner_content, inner_resources, depth + 1, budget)?;
    }
    Ok(())
}

/// The object a (chain of) reference(s) points to.
fn resolve<'a>(pdf: &'a Pdf, mut object: &'a Object) -> Option<&'a Object> {
    for _ in 0..MAX_REFERENCE_HOPS {
        match object {
            Object::Reference(id) => object = pdf.get_object(*id).ok()?,
            other => return Some(other),
        }
    }
    None
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
        let document = extract_pdf(&pdf, &ExtractLimits::default()).unwrap();
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
            let error = extract_pdf(bytes, &ExtractLimits::default()).unwrap_err();
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
        let error = extract_pdf(&pdf, &ExtractLimits::default()).unwrap_err();
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
        let document = extract_pdf(&pdf, &ExtractLimits::default()).unwrap();
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
        let error = extract_pdf(&pdf, &ExtractLimits::default()).unwrap_err();
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
        let error = extract_pdf(&pdf, &limits).unwrap_err();
        assert!(
            matches!(error, ExtractError::TooManyPages { pages: 2, limit: 1 }),
            "{error:?}"
        );
    }
}
