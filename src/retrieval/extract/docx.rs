//! DOCX as blocks: the paragraphs and tables of `word/document.xml`, with headings from
//! paragraph styles (resolved through `word/styles.xml`, so localised style ids work)
//! and list items from numbering. Locations count `w:p` elements from 1, in document
//! order, table paragraphs included, since a DOCX has no lines or pages of its own.
//!
//! The archive is checked before anything is inflated: the number of entries, every
//! entry's declared size, their total and their compression ratio. Declared sizes can
//! lie, so each read also goes through a byte budget.

use std::collections::HashMap;
use std::io::{Cursor, Read};

use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;
use zip::ZipArchive;

use super::{ExtractError, ExtractLimits};
use crate::retrieval::{Block, BlockKind, Document, Location};

const DOCUMENT_PART: &str = "word/document.xml";
const STYLES_PART: &str = "word/styles.xml";
const CORE_PROPERTIES_PART: &str = "docProps/core.xml";

/// Most entries an archive may list (a Word document has tens, a few hundred with media).
const MAX_ENTRIES: usize = 10_000;
/// Entries smaller than this are never called a bomb for their ratio alone: small XML
/// parts compress very well and are harmless.
const RATIO_CHECK_FLOOR_BYTES: u64 = 1 << 20;

type Archive<'a> = ZipArchive<Cursor<&'a [u8]>>;

pub(super) fn extract_docx(bytes: &[u8], limits: &ExtractLimits) -> Result<Document, ExtractError> {
    let mut archive = ZipArchive::new(Cursor::new(bytes))
        .map_err(|error| malformed(format!("not a zip archive ({error})")))?;
    check_declared_sizes(&mut archive, limits)?;
    let mut budget = limits.max_docx_uncompressed_bytes;
    let body = read_part(&mut archive, DOCUMENT_PART, limits, &mut budget)?
        .ok_or_else(|| malformed(format!("{DOCUMENT_PART} is missing (not a Word document?)")))?;
    let styles = read_part(&mut archive, STYLES_PART, limits, &mut budget)?
        .map(|xml| heading_styles(&xml))
        .unwrap_or_default();
    let title = read_part(&mut archive, CORE_PROPERTIES_PART, limits, &mut budget)?
        .and_then(|xml| core_title(&xml));
    let blocks = BodyReader::new(&styles).read(&body)?;
    Ok(Document { title, blocks })
}

fn malformed(reason: String) -> ExtractError {
    ExtractError::Malformed {
        format: "DOCX",
        reason,
    }
}

fn zip_bomb(reason: String) -> ExtractError {
    ExtractError::ZipBomb { reason }
}

/// Refuses the archive on what its directory declares, before inflating anything.
fn check_declared_sizes(archive: &mut Archive, limits: &ExtractLimits) -> Result<(), ExtractError> {
    if archive.len() > MAX_ENTRIES {
        return Err(zip_bomb(format!(
            "the archive lists {} entries, more than {MAX_ENTRIES}",
            archive.len()
        )));
    }
    let limit = limits.max_docx_uncompressed_bytes;
    let mut total: u64 = 0;
    for index in 0..archive.len() {
        let entry = archive
            .by_index_raw(index)
            .map_err(|error| malformed(format!("unreadable archive entry ({error})")))?;
        let name = entry
            .name()
            .map(|n| n.into_owned())
            .unwrap_or_else(|_| format!("entry {index}"));
        let size = entry.size();
        if size > limit {
            return Err(zip_bomb(format!(
                "{name} declares {size} bytes uncompressed, above the {limit}-byte limit"
            )));
        }
        total = total.saturating_add(size);
        if total > limit {
            return Err(zip_bomb(format!(
                "the entries declare more than {limit} bytes uncompressed in all"
            )));
        }
        check_ratio(&name, size, entry.compressed_size(), limits)?;
    }
    Ok(())
}

fn check_ratio(
    name: &str,
    size: u64,
    compressed: u64,
    limits: &ExtractLimits,
) -> Result<(), ExtractError> {
    let ratio = size / compressed.max(1);
    if size > RATIO_CHECK_FLOOR_BYTES && ratio > limits.max_docx_ratio {
        return Err(zip_bomb(format!(
            "{name} is compressed {ratio}:1, above the {}:1 limit",
            limits.max_docx_ratio
        )));
    }
    Ok(())
}

/// Inflates one part as text, reading at most what is left of `budget` whatever the
/// entry declares. `None` when the archive has no such part.
fn read_part(
    archive: &mut Archive,
    name: &str,
    limits: &ExtractLimits,
    budget: &mut u64,
) -> Result<Option<String>, ExtractError> {
    let Some(index) = archive.index_for_name(name) else {
        return Ok(None);
    };
    let entry = archive
        .by_index(index)
        .map_err(|error| malformed(format!("cannot open {name} ({error})")))?;
    let compressed = entry.compressed_size();
    let mut bytes = Vec::new();
    entry
        .take(budget.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|error| malformed(format!("cannot inflate {name} ({error})")))?;
    let size = bytes.len() as u64;
    if size > *budget {
        return Err(zip_bomb(format!(
            "{name} inflates past the {}-byte limit",
            limits.max_docx_uncompressed_bytes
        )));
    }
    check_ratio(name, size, compressed, limits)?;
    *budget -= size;
    Ok(Some(String::from_utf8(bytes).unwrap_or_else(|error| {
        String::from_utf8_lossy(error.as_bytes()).into_owned()
    })))
}

/// The heading level a style name or id stands for: "Heading 1".."Heading 9" (any case
/// and spacing; levels past 6 count as 6) and "Title" (level 1).
fn heading_level_from_name(name: &str) -> Option<u8> {
    let compact: String = name
        .chars()
        .filter(|c| !matches!(c, ' ' | '_' | '-'))
        .flat_map(char::to_lowercase)
        .collect();
    if compact == "title" {
        return Some(1);
    }
    let number = compact
        .strip_prefix("heading")
        .or_else(|| compact.strip_prefix("标题"))?;
    let level: u8 = number.parse().ok().filter(|n| (1..=9).contains(n))?;
    Some(level.min(6))
}

/// A heading level from an outline level (0-based; 9 means body text).
fn heading_level_from_outline(value: &str) -> Option<u8> {
    let level: u8 = value.parse().ok().filter(|&n| n < 9)?;
    Some((level + 1).min(6))
}

/// The value of the `w:val` attribute (any prefix).
fn val_attribute(element: &BytesStart) -> Option<String> {
    element
        .attributes()
        .flatten()
        .find(|a| a.key.local_name().as_ref() == "val")
        .map(|a| a.value.into_owned())
}

/// Style id → heading level, for the styles whose name or outline level makes them
/// headings. A broken styles part only loses heading detection.
fn heading_styles(xml: &str) -> HashMap<String, u8> {
    let mut styles = HashMap::new();
    let mut reader = Reader::from_str(xml);
    let mut current: Option<(String, Option<u8>)> = None;
    loop {
        match reader.read_event() {
            Ok(Event::Start(element)) | Ok(Event::Empty(element)) => {
                match element.local_name().as_ref() {
                    "style" => {
                        let id = element
                            .attributes()
                            .flatten()
                            .find(|a| a.key.local_name().as_ref() == "styleId")
                            .map(|a| a.value.into_owned());
                        current = id.map(|id| (id, None));
                    }
                    "name" | "outlineLvl" => {
                        if let (Some((_, level)), Some(value)) =
                            (&mut current, val_attribute(&element))
                        {
                            let found = if element.local_name().as_ref() == "name" {
                                heading_level_from_name(&value)
                            } else {
                                heading_level_from_outline(&value)
                            };
                            *level = level.or(found);
                        }
                    }
                    _ => {}
                }
            }
            Ok(Event::End(element)) if element.local_name().as_ref() == "style" => {
                if let Some((id, Some(level))) = current.take() {
                    styles.insert(id, level);
                }
            }
            Ok(Event::Eof) | Err(_) => break,
            _ => {}
        }
    }
    styles
}

/// The `dc:title` of the core properties, when present and not blank.
fn core_title(xml: &str) -> Option<String> {
    let mut reader = Reader::from_str(xml);
    let mut in_title = false;
    let mut title = String::new();
    loop {
        match reader.read_event().ok()? {
            Event::Start(element) if element.local_name().as_ref() == "title" => in_title = true,
            Event::Text(text) if in_title => title.push_str(&text.xml10_content()),
            Event::GeneralRef(reference) if in_title => {
                title.push_str(&resolve_reference(&reference)?)
            }
            Event::End(element) if element.local_name().as_ref() == "title" => break,
            Event::Eof => break,
            _ => {}
        }
    }
    let title = title.trim();
    (!title.is_empty()).then(|| title.to_string())
}

/// The text of an entity or character reference (`amp`, `#x41`).
fn resolve_reference(reference: &str) -> Option<String> {
    if let Some(number) = reference.strip_prefix('#') {
        let code = match number.strip_prefix('x') {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => number.parse().ok()?,
        };
        return char::from_u32(code).map(String::from);
    }
    let text = match reference {
        "amp" => "&",
        "lt" => "<",
        "gt" => ">",
        "quot" => "\"",
        "apos" => "'",
        _ => return None,
    };
    Some(text.to_string())
}

/// The paragraph being read (the outermost one, when text boxes nest paragraphs).
struct Paragraph {
    number: u32,
    text: String,
    heading: Option<u8>,
    list_item: bool,
}

/// A table being read: rows of cells, and the number of its first paragraph.
struct Table {
    first_paragraph: u32,
    rows: Vec<Vec<String>>,
}

/// Reads `word/document.xml` as a stream of events, keeping only counters and the
/// paragraph and table in progress.
struct BodyReader<'s> {
    styles: &'s HashMap<String, u8>,
    blocks: Vec<Block>,
    paragraphs_seen: u32,
    paragraph: Option<Paragraph>,
    paragraph_depth: usize,
    properties_depth: usize,
    in_text: bool,
    /// Depth inside `mc:Fallback`, whose content repeats `mc:Choice`'s.
    skipped_depth: usize,
    table: Option<Table>,
    table_depth: usize,
}

impl<'s> BodyReader<'s> {
    fn new(styles: &'s HashMap<String, u8>) -> Self {
        BodyReader {
            styles,
            blocks: Vec::new(),
            paragraphs_seen: 0,
            paragraph: None,
            paragraph_depth: 0,
            properties_depth: 0,
            in_text: false,
            skipped_depth: 0,
            table: None,
            table_depth: 0,
        }
    }

    fn read(mut self, xml: &str) -> Result<Vec<Block>, ExtractError> {
        let mut reader = Reader::from_str(xml);
        loop {
            let event = reader.read_event().map_err(|error| {
                malformed(format!("{DOCUMENT_PART} is not well-formed XML ({error})"))
            })?;
            if self.skipped_depth > 0 {
                match event {
                    Event::Start(_) => self.skipped_depth += 1,
                    Event::End(_) => self.skipped_depth -= 1,
                    Event::Eof => break,
                    _ => {}
                }
                continue;
            }
            match event {
                Event::Start(element) => self.start(&element),
                Event::Empty(element) => {
                    self.start(&element);
                    self.end(element.local_name().as_ref());
                }
                Event::End(element) => self.end(element.local_name().as_ref()),
                Event::Text(text) if self.in_text => self.push_text(&text.xml10_content()),
                Event::CData(text) if self.in_text => self.push_text(&text.xml10_content()),
                Event::GeneralRef(reference) if self.in_text => {
                    self.push_text(&resolve_reference(&reference).unwrap_or_default())
                }
                Event::Eof => break,
                _ => {}
            }
        }
        Ok(self.blocks)
    }

    fn start(&mut self, element: &BytesStart) {
        match element.local_name().as_ref() {
            "Fallback" => self.skipped_depth = 1,
            "p" => self.open_paragraph(),
            "pPr" => self.properties_depth += 1,
            "t" => self.in_text = true,
            "tab" if self.properties_depth == 0 => self.push_text("\t"),
            "br" | "cr" => self.push_text("\n"),
            "noBreakHyphen" => self.push_text("-"),
            "pStyle" => self.set_heading(val_attribute(element).and_then(|id| {
                self.styles
                    .get(&id)
                    .copied()
                    .or_else(|| heading_level_from_name(&id))
            })),
            "outlineLvl" => self
                .set_heading(val_attribute(element).and_then(|v| heading_level_from_outline(&v))),
            "numPr" => self.with_properties(|paragraph| paragraph.list_item = true),
            "tbl" => self.open_table(),
            "tr" if self.table_depth == 1 => {
                self.table.iter_mut().for_each(|t| t.rows.push(Vec::new()))
            }
            "tc" if self.table_depth == 1 => self.push_cell(),
            _ => {}
        }
    }

    fn end(&mut self, name: &str) {
        match name {
            "Fallback" => self.skipped_depth = 0,
            "p" => self.close_paragraph(),
            "pPr" => self.properties_depth = self.properties_depth.saturating_sub(1),
            "t" => self.in_text = false,
            "tbl" => self.close_table(),
            _ => {}
        }
    }

    /// Applies a paragraph property read in the outermost paragraph's `w:pPr`.
    fn with_properties(&mut self, apply: impl FnOnce(&mut Paragraph)) {
        if self.properties_depth > 0 && self.paragraph_depth == 1 {
            if let Some(paragraph) = &mut self.paragraph {
                apply(paragraph);
            }
        }
    }

    fn set_heading(&mut self, level: Option<u8>) {
        if let Some(level) = level {
            self.with_properties(|paragraph| paragraph.heading = paragraph.heading.or(Some(level)));
        }
    }

    fn push_text(&mut self, text: &str) {
        if let Some(paragraph) = &mut self.paragraph {
            paragraph.text.push_str(text);
        }
    }

    fn open_paragraph(&mut self) {
        self.paragraphs_seen = self.paragraphs_seen.saturating_add(1);
        self.paragraph_depth += 1;
        match &mut self.paragraph {
            Some(outer) => outer.text.push('\n'),
            None => {
                self.paragraph = Some(Paragraph {
                    number: self.paragraphs_seen,
                    text: String::new(),
                    heading: None,
                    list_item: false,
                })
            }
        }
    }

    fn close_paragraph(&mut self) {
        self.paragraph_depth = self.paragraph_depth.saturating_sub(1);
        if self.paragraph_depth > 0 {
            // A paragraph of a text box ends; the outer paragraph goes on, on a new line.
            self.push_text("\n");
            return;
        }
        let Some(paragraph) = self.paragraph.take() else {
            return;
        };
        let text = paragraph.text.trim();
        if text.is_empty() {
            return;
        }
        if let Some(table) = &mut self.table {
            push_cell_text(table, text);
            return;
        }
        let (kind, text) = match (paragraph.heading, paragraph.list_item) {
            (Some(level), _) => (
                BlockKind::Heading(level),
                text.split_whitespace().collect::<Vec<_>>().join(" "),
            ),
            (None, true) => (BlockKind::ListItem, text.to_string()),
            (None, false) => (BlockKind::Paragraph, text.to_string()),
        };
        let location = Location::Paragraphs {
            start: paragraph.number,
            end: paragraph.number,
        };
        self.blocks.push(Block {
            kind,
            text,
            location,
        });
    }

    fn open_table(&mut self) {
        self.table_depth += 1;
        if self.table_depth == 1 {
            self.table = Some(Table {
                first_paragraph: self.paragraphs_seen + 1,
                rows: Vec::new(),
            });
        }
    }

    fn push_cell(&mut self) {
        if let Some(table) = &mut self.table {
            if table.rows.is_empty() {
                table.rows.push(Vec::new());
            }
            table
                .rows
                .last_mut()
                .expect("a row was just ensured")
                .push(String::new());
        }
    }

    fn close_table(&mut self) {
        self.table_depth = self.table_depth.saturating_sub(1);
        if self.table_depth > 0 {
            return;
        }
        let Some(table) = self.table.take() else {
            return;
        };
        let text = super::table_text(&table.rows);
        if text.is_empty() {
            return;
        }
        let location = Location::Paragraphs {
            start: table.first_paragraph,
            end: self.paragraphs_seen.max(table.first_paragraph),
        };
        self.blocks.push(Block {
            kind: BlockKind::Table,
            text,
            location,
        });
    }
}

/// Appends a paragraph's text to the last cell of the table (paragraphs of one cell, and
/// of tables nested in it, are separated by a space).
fn push_cell_text(table: &mut Table, text: &str) {
    if table.rows.is_empty() {
        table.rows.push(Vec::new());
    }
    let row = table.rows.last_mut().expect("a row was just ensured");
    if row.is_empty() {
        row.push(String::new());
    }
    let cell = row.last_mut().expect("a cell was just ensured");
    if !cell.is_empty() {
        cell.push(' ');
    }
    cell.push_str(text);
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use zip::write::SimpleFileOptions;
    use zip::{CompressionMethod, ZipWriter};

    use super::*;

    const W: &str = r#"xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main" xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006""#;

    fn deflated() -> SimpleFileOptions {
        SimpleFileOptions::default().compression_method(CompressionMethod::Deflated)
    }

    /// A DOCX archive with the given parts.
    fn build_docx(parts: &[(&str, &str)]) -> Vec<u8> {
        let mut writer = ZipWriter::new(Cursor::new(Vec::new()));
        for (name, content) in parts {
            writer.start_file(*name, deflated()).unwrap();
            writer.write_all(content.as_bytes()).unwrap();
        }
        writer.finish().unwrap().into_inner()
    }

    fn body(paragraphs: &str) -> String {
        format!(
            r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document {W}><w:body>{paragraphs}<w:sectPr/></w:body></w:document>"#
        )
    }

    fn paragraph(style: Option<&str>, text: &str) -> String {
        let properties = style
            .map(|s| format!(r#"<w:pPr><w:pStyle w:val="{s}"/></w:pPr>"#))
            .unwrap_or_default();
        format!(r#"<w:p>{properties}<w:r><w:t xml:space="preserve">{text}</w:t></w:r></w:p>"#)
    }

    fn cell(text: &str) -> String {
        format!("<w:tc><w:tcPr/>{}</w:tc>", paragraph(None, text))
    }

    fn blocks_of(parts: &[(&str, &str)]) -> Vec<(BlockKind, String, Location)> {
        let document = extract_docx(&build_docx(parts), &ExtractLimits::default()).unwrap();
        document
            .blocks
            .into_iter()
            .map(|b| (b.kind, b.text, b.location))
            .collect()
    }

    fn at(n: u32) -> Location {
        Location::Paragraphs { start: n, end: n }
    }

    #[test]
    fn headings_paragraphs_and_tables() {
        let table = format!(
            "<w:tbl><w:tblPr/><w:tr>{}{}</w:tr><w:tr>{}{}</w:tr></w:tbl>",
            cell("Name"),
            cell("Value"),
            cell("timeout"),
            cell("30 s")
        );
        let xml = body(&[
            paragraph(Some("Heading1"), "Restarting &amp; recovery"),
            r#"<w:p><w:r><w:t xml:space="preserve">Stop the </w:t><w:tab/><w:t>service.</w:t></w:r></w:p>"#.to_string(),
            "<w:p/>".to_string(),
            table,
            paragraph(Some("heading 2"), "数据库"),
            r#"<w:p><w:pPr><w:numPr><w:ilvl w:val="0"/><w:numId w:val="1"/></w:numPr><w:tabs><w:tab w:val="left" w:pos="720"/></w:tabs></w:pPr><w:r><w:t>check</w:t><w:br/><w:t>logs</w:t></w:r></w:p>"#.to_string(),
        ]
        .concat());
        assert_eq!(
            blocks_of(&[("word/document.xml", &xml)]),
            vec![
                (
                    BlockKind::Heading(1),
                    "Restarting & recovery".to_string(),
                    at(1)
                ),
                (
                    BlockKind::Paragraph,
                    "Stop the \tservice.".to_string(),
                    at(2)
                ),
                (
                    BlockKind::Table,
                    "Name | Value\ntimeout | 30 s".to_string(),
                    Location::Paragraphs { start: 4, end: 7 }
                ),
                (BlockKind::Heading(2), "数据库".to_string(), at(8)),
                (BlockKind::ListItem, "check\nlogs".to_string(), at(9)),
            ]
        );
    }

    #[test]
    fn localised_styles_title_and_fallback_content() {
        let styles = format!(
            r#"<w:styles {W}><w:style w:type="paragraph" w:styleId="1"><w:name w:val="heading 1"/></w:style><w:style w:type="paragraph" w:styleId="Custom"><w:name w:val="Big"/><w:pPr><w:outlineLvl w:val="1"/></w:pPr></w:style></w:styles>"#
        );
        let core = r#"<cp:coreProperties xmlns:cp="c" xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>Ops Guide</dc:title></cp:coreProperties>"#;
        let text_box = r#"<w:p><w:r><mc:AlternateContent><mc:Choice><w:txbxContent><w:p><w:r><w:t>boxed</w:t></w:r></w:p></w:txbxContent></mc:Choice><mc:Fallback><w:p><w:r><w:t>boxed</w:t></w:r></w:p></mc:Fallback></mc:AlternateContent></w:r><w:r><w:t>outer</w:t></w:r></w:p>"#;
        let xml = body(
            &[
                paragraph(Some("1"), "概述"),
                paragraph(Some("Custom"), "Level two"),
                text_box.to_string(),
                paragraph(None, "after"),
            ]
            .concat(),
        );
        let document = extract_docx(
            &build_docx(&[
                ("word/document.xml", &xml),
                ("word/styles.xml", &styles),
                ("docProps/core.xml", core),
            ]),
            &ExtractLimits::default(),
        )
        .unwrap();
        assert_eq!(document.title.as_deref(), Some("Ops Guide"));
        let got: Vec<_> = document
            .blocks
            .into_iter()
            .map(|b| (b.kind, b.text, b.location))
            .collect();
        assert_eq!(
            got,
            vec![
                (BlockKind::Heading(1), "概述".to_string(), at(1)),
                (BlockKind::Heading(2), "Level two".to_string(), at(2)),
                (BlockKind::Paragraph, "boxed\nouter".to_string(), at(3)),
                (BlockKind::Paragraph, "after".to_string(), at(5)),
            ]
        );
    }

    #[test]
    fn not_a_word_document() {
        for bytes in [
            b"not a zip".to_vec(),
            build_docx(&[("readme.txt", "hello")]),
        ] {
            let error = extract_docx(&bytes, &ExtractLimits::default()).unwrap_err();
            assert!(
                matches!(error, ExtractError::Malformed { format: "DOCX", .. }),
                "{error:?}"
            );
        }
        let broken = build_docx(&[("word/document.xml", "<w:document><w:body><w:p></w:body>")]);
        let error = extract_docx(&broken, &ExtractLimits::default()).unwrap_err();
        assert!(
            matches!(&error, ExtractError::Malformed { reason, .. } if reason.contains("well-formed")),
            "{error:?}"
        );
    }

    /// An archive whose `word/document.xml` is `size` zero bytes, deflated while being
    /// written so the test never holds them in memory.
    fn zeros_docx(size: usize) -> Vec<u8> {
        let mut writer = ZipWriter::new(Cursor::new(Vec::new()));
        writer.start_file("word/document.xml", deflated()).unwrap();
        let chunk = vec![0u8; 1 << 16];
        let mut written = 0;
        while written < size {
            let n = chunk.len().min(size - written);
            writer.write_all(&chunk[..n]).unwrap();
            written += n;
        }
        writer.finish().unwrap().into_inner()
    }

    #[test]
    fn declared_size_above_the_limit_is_a_bomb() {
        let bomb = zeros_docx(200 << 20);
        assert!(
            bomb.len() < 1 << 20,
            "the bomb itself is small: {}",
            bomb.len()
        );
        let error = extract_docx(&bomb, &ExtractLimits::default()).unwrap_err();
        assert!(
            matches!(&error, ExtractError::ZipBomb { reason } if reason.contains("declares")),
            "{error:?}"
        );
    }

    #[test]
    fn high_ratio_is_a_bomb() {
        let error = extract_docx(&zeros_docx(8 << 20), &ExtractLimits::default()).unwrap_err();
        assert!(
            matches!(&error, ExtractError::ZipBomb { reason } if reason.contains(":1")),
            "{error:?}"
        );
    }

    #[test]
    fn lying_declared_size_is_caught_while_reading() {
        let mut bomb = zeros_docx(4 << 20);
        // Declare 1000 bytes in the local header (offset 22) and the central directory
        // entry (offset 24), so that the declared sizes pass. The zip reader itself then
        // refuses to inflate past the declared size (Malformed); the read budget is the
        // second line of defence (tested below).
        let central = bomb.windows(4).rposition(|w| w == b"PK\x01\x02").unwrap();
        bomb[22..26].copy_from_slice(&1000u32.to_le_bytes());
        bomb[central + 24..central + 28].copy_from_slice(&1000u32.to_le_bytes());
        let limits = ExtractLimits {
            max_docx_uncompressed_bytes: 1 << 20,
            ..ExtractLimits::default()
        };
        let error = extract_docx(&bomb, &limits).unwrap_err();
        assert!(
            matches!(
                error,
                ExtractError::ZipBomb { .. } | ExtractError::Malformed { .. }
            ),
            "{error:?}"
        );
    }

    #[test]
    fn reads_stop_at_the_budget() {
        let xml = body(&paragraph(None, &"word ".repeat(1000)));
        let bytes = build_docx(&[("word/document.xml", &xml)]);
        let mut archive = ZipArchive::new(Cursor::new(&bytes[..])).unwrap();
        let mut budget = 100;
        let error = read_part(
            &mut archive,
            DOCUMENT_PART,
            &ExtractLimits::default(),
            &mut budget,
        )
        .unwrap_err();
        assert!(
            matches!(&error, ExtractError::ZipBomb { reason } if reason.contains("inflates past")),
            "{error:?}"
        );
        let mut budget = 1 << 20;
        let read = read_part(
            &mut archive,
            DOCUMENT_PART,
            &ExtractLimits::default(),
            &mut budget,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            budget,
            (1 << 20) - read.len() as u64,
            "the budget is shared by later reads"
        );
    }

    #[test]
    fn style_names_map_to_levels() {
        let cases = [
            ("Heading1", Some(1)),
            ("heading 3", Some(3)),
            ("Heading_9", Some(6)),
            ("Title", Some(1)),
            ("标题 2", Some(2)),
            ("Normal", None),
            ("Heading", None),
            ("Heading0", None),
        ];
        for (name, expected) in cases {
            assert_eq!(heading_level_from_name(name), expected, "{name}");
        }
    }
}
