//! Text decoding shared by the text formats (UTF-8, UTF-16 with a byte-order mark,
//! GB18030/GBK), and the plain-text format: paragraphs separated by blank lines.

use std::borrow::Cow;

use encoding_rs::{GB18030, UTF_16BE, UTF_16LE};

use super::{ExtractError, Format};
use crate::retrieval::{Block, BlockKind, Location};

/// Decodes the bytes of a text file: UTF-8 (byte-order mark removed); else UTF-16 when a
/// byte-order mark says so; else GB18030 (a superset of GBK and GB2312) when the bytes
/// are valid GB18030; else UTF-8 with invalid sequences replaced.
pub fn decode_text(bytes: &[u8]) -> Cow<'_, str> {
    let without_bom = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    if let Ok(text) = std::str::from_utf8(without_bom) {
        return Cow::Borrowed(text);
    }
    if let Some(rest) = bytes.strip_prefix(b"\xFF\xFE") {
        return Cow::Owned(UTF_16LE.decode_without_bom_handling(rest).0.into_owned());
    }
    if let Some(rest) = bytes.strip_prefix(b"\xFE\xFF") {
        return Cow::Owned(UTF_16BE.decode_without_bom_handling(rest).0.into_owned());
    }
    if let Some(text) = GB18030.decode_without_bom_handling_and_without_replacement(bytes) {
        return Cow::Owned(text.into_owned());
    }
    String::from_utf8_lossy(without_bom)
}

/// Decodes a text format's bytes, refusing binary data (NUL characters) given a text
/// extension.
pub(super) fn decode_checked(bytes: &[u8], format: Format) -> Result<Cow<'_, str>, ExtractError> {
    let text = decode_text(bytes);
    if text.contains('\0') {
        return Err(ExtractError::Malformed {
            format: format.name(),
            reason: "the file holds binary data, not text".into(),
        });
    }
    Ok(text)
}

/// The lines of `text` without their `\n` or `\r\n` endings; line `i` of the result is
/// source line `i + 1`.
pub(super) fn source_lines(text: &str) -> Vec<&str> {
    text.split('\n')
        .map(|line| line.strip_suffix('\r').unwrap_or(line))
        .collect()
}

/// A 1-based inclusive line range from 0-based line indexes.
pub(super) fn line_range(first: usize, last: usize) -> Location {
    Location::Lines {
        start: line_number(first),
        end: line_number(last),
    }
}

fn line_number(index: usize) -> u32 {
    u32::try_from(index + 1).unwrap_or(u32::MAX)
}

/// Plain text: every run of non-blank lines is a paragraph.
pub(super) fn parse_plain_text(text: &str) -> Vec<Block> {
    let lines = source_lines(text);
    let mut blocks = Vec::new();
    let mut start = None;
    for (index, line) in lines.iter().enumerate() {
        match (line.trim().is_empty(), start) {
            (false, None) => start = Some(index),
            (true, Some(first)) => {
                blocks.push(paragraph(&lines, first, index - 1));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(first) = start {
        blocks.push(paragraph(&lines, first, lines.len() - 1));
    }
    blocks
}

fn paragraph(lines: &[&str], first: usize, last: usize) -> Block {
    Block {
        kind: BlockKind::Paragraph,
        text: lines[first..=last].join("\n"),
        location: line_range(first, last),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_with_and_without_bom() {
        assert_eq!(decode_text("héllo 你好".as_bytes()), "héllo 你好");
        assert_eq!(decode_text(b"\xEF\xBB\xBFabc"), "abc");
    }

    #[test]
    fn gbk_chinese_decodes() {
        let sentence = "数据库连接池耗尽时，先检查慢查询。";
        let (gbk, _, unmappable) = encoding_rs::GBK.encode(sentence);
        assert!(!unmappable);
        assert!(
            std::str::from_utf8(&gbk).is_err(),
            "the fixture must not be valid UTF-8"
        );
        assert_eq!(decode_text(&gbk), sentence);
    }

    #[test]
    fn utf16_with_bom_decodes() {
        let sentence = "Restart the 服务 now";
        let mut little = vec![0xFF, 0xFE];
        little.extend(sentence.encode_utf16().flat_map(u16::to_le_bytes));
        assert_eq!(decode_text(&little), sentence);
        let mut big = vec![0xFE, 0xFF];
        big.extend(sentence.encode_utf16().flat_map(u16::to_be_bytes));
        assert_eq!(decode_text(&big), sentence);
    }

    #[test]
    fn invalid_everything_falls_back_to_lossy_utf8() {
        // 0xFF is invalid in UTF-8 and in GB18030.
        assert_eq!(decode_text(b"ok \xFF"), "ok \u{FFFD}");
    }

    #[test]
    fn binary_data_is_refused() {
        let error = decode_checked(b"PK\x03\x04\0\0binary", Format::PlainText).unwrap_err();
        assert!(matches!(error, ExtractError::Malformed { .. }), "{error:?}");
    }

    #[test]
    fn plain_text_paragraphs_carry_line_ranges() {
        let text = "\nFirst line\nsecond line\n\n\r\n  \nThird 段落\r\nend";
        let blocks = parse_plain_text(text);
        let got: Vec<(&str, Location)> = blocks
            .iter()
            .map(|b| (b.text.as_str(), b.location))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "First line\nsecond line",
                    Location::Lines { start: 2, end: 3 }
                ),
                ("Third 段落\nend", Location::Lines { start: 7, end: 8 }),
            ]
        );
        assert!(blocks.iter().all(|b| b.kind == BlockKind::Paragraph));
    }
}
