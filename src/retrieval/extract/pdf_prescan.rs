//! Reads a PDF's raw bytes, before `lopdf` parses them, for the streams the parser inflates
//! while loading: object streams, whatever stream a cross-reference offset points at
//! (`lopdf` inflates those whatever their `/Type` says), and any stream whose dictionary
//! cannot be read with confidence. Their decoded sizes together must stay within the
//! inflate budget, else the file is refused before the parser allocates anything.
//!
//! The scan does not trust a single reading of the file: for every `stream` keyword it
//! tries each nearby `N G obj` as the start of the dictionary, keeps every reading that
//! ends exactly at that keyword, and takes the most expensive one; with none, the stream
//! is assumed to be Flate-compressed and loaded. Streams that are inflated only when a
//! page is read are left to `pdf_budget`. An encrypted file's object streams can only be
//! decoded after decryption, so an encrypted file with any is refused.

use std::collections::HashSet;
use std::time::Instant;

use super::pdf_budget::{decoded_len, Exceeded};

/// `obj` keywords tried as the start of one stream's dictionary.
const MAX_CANDIDATES: usize = 16;
/// Farthest an `obj` keyword may be before its `stream` keyword.
const MAX_DICTIONARY_BYTES: usize = 256 << 10;
/// Nesting of dictionaries and arrays followed inside a stream dictionary.
const MAX_NESTING: usize = 64;

/// Why a PDF is refused before it is parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum PrescanError {
    /// The streams inflated while loading exceed the budget.
    OverBudget,
    /// Encrypted, with object streams that cannot be checked before decryption.
    EncryptedObjectStreams,
    /// The per-file time budget ran out (checked between streams).
    TimedOut,
}

/// Checks every stream the parser would inflate while loading `bytes`.
pub(super) fn check_before_load(
    bytes: &[u8],
    limit: u64,
    deadline: Option<Instant>,
) -> Result<(), PrescanError> {
    let objects = object_keywords(bytes);
    let targets = xref_targets(bytes);
    let encrypted = has_name(bytes, b"Encrypt");
    let mut spent: u64 = 0;
    for (keyword, data_start) in stream_keywords(bytes) {
        if deadline.is_some_and(|d| Instant::now() > d) {
            return Err(PrescanError::TimedOut);
        }
        let readings = readings_of(bytes, &objects, keyword);
        let loaded = readings.is_empty()
            || readings.iter().any(|r| {
                r.is_type(b"ObjStm") || r.is_type(b"XRef") || targets.contains(&r.object_start)
            });
        if !loaded {
            continue;
        }
        let hidden = readings.is_empty() || readings.iter().any(|r| r.is_type(b"ObjStm"));
        if encrypted && hidden {
            return Err(PrescanError::EncryptedObjectStreams);
        }
        let remaining = limit.saturating_sub(spent);
        let size = loaded_size(bytes, data_start, &readings, remaining)
            .map_err(|Exceeded| PrescanError::OverBudget)?;
        spent = spent.saturating_add(size);
    }
    Ok(())
}

/// One reading of a stream's dictionary.
#[derive(Debug, Default)]
struct Reading {
    /// Where `N G obj` begins.
    object_start: usize,
    kind: Option<Vec<u8>>,
    filters: Vec<Vec<u8>>,
    lzw_early_change: bool,
    length: Option<usize>,
}

impl Reading {
    fn is_type(&self, name: &[u8]) -> bool {
        self.kind.as_deref() == Some(name)
    }
}

/// The largest decoded size among the readings (Flate-compressed when there is none).
fn loaded_size(
    bytes: &[u8],
    data_start: usize,
    readings: &[Reading],
    limit: u64,
) -> Result<u64, Exceeded> {
    // Decoders stop at the end of their own data, so they get the rest of the file: never
    // less than the parser will give them, whatever `/Length` says.
    let rest = &bytes[data_start.min(bytes.len())..];
    if readings.is_empty() {
        return decoded_len(rest, &[b"FlateDecode".as_slice()], true, limit);
    }
    let mut largest = 0;
    for reading in readings {
        let size = if reading.filters.is_empty() {
            // Past the budget, the exact end does not matter.
            let window = usize::try_from(limit.saturating_add(1)).unwrap_or(usize::MAX);
            let searched = &bytes[..data_start.saturating_add(window).min(bytes.len())];
            let end = reading
                .length
                .map(|l| data_start.saturating_add(l))
                .or_else(|| find(searched, b"endstream", data_start))
                .unwrap_or(searched.len())
                .min(bytes.len());
            let size = end.saturating_sub(data_start) as u64;
            if size > limit {
                return Err(Exceeded);
            }
            size
        } else {
            let filters: Vec<&[u8]> = reading.filters.iter().map(Vec::as_slice).collect();
            decoded_len(rest, &filters, reading.lzw_early_change, limit)?
        };
        largest = largest.max(size);
    }
    Ok(largest)
}

/// Every reading of the dictionary that ends right before the `stream` keyword at
/// `keyword`, one per nearby `obj` keyword.
fn readings_of(bytes: &[u8], objects: &[usize], keyword: usize) -> Vec<Reading> {
    let before = objects.partition_point(|&p| p < keyword);
    let mut readings = Vec::new();
    for &position in objects[..before].iter().rev().take(MAX_CANDIDATES) {
        if keyword - position > MAX_DICTIONARY_BYTES {
            break;
        }
        let Some(object_start) = object_start(bytes, position) else {
            continue;
        };
        let mut cursor = Cursor {
            bytes,
            pos: position + 3,
            end: keyword,
        };
        cursor.skip_space();
        let Some(Value::Dict(entries)) = cursor.value(0) else {
            continue;
        };
        cursor.skip_space();
        if cursor.pos == keyword {
            readings.push(reading(object_start, entries));
        }
    }
    readings
}

fn reading(object_start: usize, entries: Vec<(Vec<u8>, Value)>) -> Reading {
    let mut reading = Reading {
        object_start,
        lzw_early_change: true,
        ..Reading::default()
    };
    for (key, value) in entries {
        match (key.as_slice(), value) {
            (b"Type", Value::Name(name)) => reading.kind = Some(name),
            (b"Filter", Value::Name(name)) => reading.filters = vec![name],
            (b"Filter", Value::Array(items)) => {
                reading.filters = items
                    .into_iter()
                    .filter_map(|item| match item {
                        Value::Name(name) => Some(name),
                        _ => None,
                    })
                    .collect();
            }
            (b"Length", Value::Int(length)) => reading.length = usize::try_from(length).ok(),
            (b"DecodeParms", Value::Dict(parameters)) => {
                for (key, value) in parameters {
                    if let (b"EarlyChange", Value::Int(v)) = (key.as_slice(), value) {
                        reading.lzw_early_change = v != 0;
                    }
                }
            }
            _ => {}
        }
    }
    reading
}

/// Positions of `stream` keywords (not `endstream`) followed by an end of line, with the
/// position where each one's data begins.
fn stream_keywords(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(position) = find(bytes, b"stream", from) {
        from = position + 1;
        if position > 0 && is_regular(bytes[position - 1]) {
            continue;
        }
        let mut data = position + b"stream".len();
        while matches!(bytes.get(data), Some(b' ' | b'\t')) {
            data += 1;
        }
        match (bytes.get(data), bytes.get(data + 1)) {
            (Some(b'\r'), Some(b'\n')) => found.push((position, data + 2)),
            (Some(b'\n' | b'\r'), _) => found.push((position, data + 1)),
            _ => {}
        }
    }
    found
}

/// Positions of `obj` keywords that follow whitespace and end at a delimiter.
fn object_keywords(bytes: &[u8]) -> Vec<usize> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(position) = find(bytes, b"obj", from) {
        from = position + 1;
        let before = position.checked_sub(1).map(|i| bytes[i]);
        let after = bytes.get(position + 3).copied();
        if before.is_some_and(is_whitespace) && !after.is_some_and(is_regular) {
            found.push(position);
        }
    }
    found
}

/// Where the `N G` before the `obj` keyword at `position` begins.
fn object_start(bytes: &[u8], position: usize) -> Option<usize> {
    let mut i = position;
    let skip = |i: &mut usize, wanted: fn(u8) -> bool| {
        let start = *i;
        while *i > 0 && wanted(bytes[*i - 1]) {
            *i -= 1;
        }
        *i < start
    };
    let shape = skip(&mut i, is_whitespace)
        && skip(&mut i, |b| b.is_ascii_digit())
        && skip(&mut i, is_whitespace)
        && skip(&mut i, |b| b.is_ascii_digit());
    shape.then_some(i)
}

/// Where the parser looks for cross-reference data, which it inflates whatever its type:
/// the offsets after `startxref`, `/Prev` and `/XRefStm` (from the file's start and from
/// the `%PDF-` header), moved past whitespace.
fn xref_targets(bytes: &[u8]) -> HashSet<usize> {
    let header = find(bytes, b"%PDF-", 0).unwrap_or(0);
    let mut offsets = Vec::new();
    let mut from = 0;
    while let Some(position) = find(bytes, b"startxref", from) {
        from = position + 1;
        offsets.extend(integer_after(bytes, position + b"startxref".len()));
    }
    for (name, end) in names(bytes) {
        if name == b"Prev" || name == b"XRefStm" {
            offsets.extend(integer_after(bytes, end));
        }
    }
    let mut targets = HashSet::new();
    for offset in offsets {
        for base in [0, header] {
            let mut position = base.saturating_add(offset);
            while bytes.get(position).copied().is_some_and(is_whitespace) {
                position += 1;
            }
            targets.insert(position);
        }
    }
    targets
}

fn integer_after(bytes: &[u8], mut position: usize) -> Option<usize> {
    while bytes.get(position).copied().is_some_and(is_whitespace) {
        position += 1;
    }
    let start = position;
    while bytes.get(position).is_some_and(u8::is_ascii_digit) {
        position += 1;
    }
    std::str::from_utf8(&bytes[start..position])
        .ok()?
        .parse()
        .ok()
}

/// Whether any name token in the file decodes to `wanted`.
fn has_name(bytes: &[u8], wanted: &[u8]) -> bool {
    names(bytes).any(|(name, _)| name == wanted)
}

/// Every name token (`/Name`, `#xx` escapes decoded) with the position after it.
fn names(bytes: &[u8]) -> impl Iterator<Item = (Vec<u8>, usize)> + '_ {
    let mut from = 0;
    std::iter::from_fn(move || {
        let slash = from + bytes.get(from..)?.iter().position(|&b| b == b'/')?;
        let mut cursor = Cursor {
            bytes,
            pos: slash,
            end: bytes.len(),
        };
        let name = cursor.name();
        from = cursor.pos.max(slash + 1);
        Some((name, cursor.pos))
    })
}

fn find(bytes: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    bytes
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|i| i + from)
}

fn is_whitespace(byte: u8) -> bool {
    matches!(byte, 0 | b'\t' | b'\n' | 0x0C | b'\r' | b' ')
}

fn is_delimiter(byte: u8) -> bool {
    matches!(
        byte,
        b'(' | b')' | b'<' | b'>' | b'[' | b']' | b'{' | b'}' | b'/' | b'%'
    )
}

fn is_regular(byte: u8) -> bool {
    !is_whitespace(byte) && !is_delimiter(byte)
}

/// A PDF value as far as the scan needs it.
#[derive(Debug)]
enum Value {
    Name(Vec<u8>),
    Int(i64),
    Dict(Vec<(Vec<u8>, Value)>),
    Array(Vec<Value>),
    Other,
}

/// A bounded reader of PDF syntax over `bytes[..end]`.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    end: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        (self.pos < self.end).then(|| self.bytes[self.pos])
    }

    fn peek_at(&self, ahead: usize) -> Option<u8> {
        let at = self.pos + ahead;
        (at < self.end).then(|| self.bytes[at])
    }

    /// Whitespace and comments.
    fn skip_space(&mut self) {
        while let Some(byte) = self.peek() {
            if is_whitespace(byte) {
                self.pos += 1;
            } else if byte == b'%' {
                while self.peek().is_some_and(|b| b != b'\r' && b != b'\n') {
                    self.pos += 1;
                }
            } else {
                break;
            }
        }
    }

    fn value(&mut self, depth: usize) -> Option<Value> {
        if depth > MAX_NESTING {
            return None;
        }
        self.skip_space();
        match self.peek()? {
            b'/' => Some(Value::Name(self.name())),
            b'<' if self.peek_at(1) == Some(b'<') => self.dict(depth + 1).map(Value::Dict),
            b'<' => {
                while self.peek()? != b'>' {
                    self.pos += 1;
                }
                self.pos += 1;
                Some(Value::Other)
            }
            b'(' => self.literal_string(),
            b'[' => {
                self.pos += 1;
                let mut items = Vec::new();
                loop {
                    self.skip_space();
                    if self.peek()? == b']' {
                        self.pos += 1;
                        return Some(Value::Array(items));
                    }
                    items.push(self.value(depth + 1)?);
                }
            }
            byte if is_regular(byte) => Some(self.number_or_keyword()),
            _ => None,
        }
    }

    fn dict(&mut self, depth: usize) -> Option<Vec<(Vec<u8>, Value)>> {
        self.pos += 2;
        let mut entries = Vec::new();
        loop {
            self.skip_space();
            if self.peek()? == b'>' && self.peek_at(1) == Some(b'>') {
                self.pos += 2;
                return Some(entries);
            }
            if self.peek()? != b'/' {
                return None;
            }
            let key = self.name();
            let value = self.value(depth)?;
            entries.push((key, value));
        }
    }

    /// A name after its `/`, with `#xx` escapes decoded.
    fn name(&mut self) -> Vec<u8> {
        self.pos += 1;
        let mut name = Vec::new();
        while let Some(byte) = self.peek().filter(|&b| is_regular(b)) {
            let hex = (self.peek_at(1), self.peek_at(2));
            if let (b'#', (Some(high), Some(low))) = (byte, hex) {
                let digits = [high, low];
                let decoded = std::str::from_utf8(&digits)
                    .ok()
                    .and_then(|d| u8::from_str_radix(d, 16).ok());
                if let Some(decoded) = decoded {
                    name.push(decoded);
                    self.pos += 3;
                    continue;
                }
            }
            name.push(byte);
            self.pos += 1;
        }
        name
    }

    fn literal_string(&mut self) -> Option<Value> {
        let mut nesting = 0usize;
        loop {
            match self.peek()? {
                b'\\' => self.pos += 1,
                b'(' => nesting += 1,
                b')' => {
                    nesting -= 1;
                    if nesting == 0 {
                        self.pos += 1;
                        return Some(Value::Other);
                    }
                }
                _ => {}
            }
            self.pos += 1;
        }
    }

    /// A run of regular characters: an integer (or `N G R`, a reference) or anything else.
    fn number_or_keyword(&mut self) -> Value {
        let token = self.token();
        let Ok(number) = std::str::from_utf8(token).unwrap_or("").parse::<i64>() else {
            return Value::Other;
        };
        let after_number = self.pos;
        self.skip_space();
        let generation = self.token();
        let is_reference = !generation.is_empty() && generation.iter().all(u8::is_ascii_digit) && {
            self.skip_space();
            self.token() == b"R"
        };
        if is_reference {
            Value::Other
        } else {
            self.pos = after_number;
            Value::Int(number)
        }
    }

    fn token(&mut self) -> &'a [u8] {
        let start = self.pos;
        while self.peek().is_some_and(is_regular) {
            self.pos += 1;
        }
        &self.bytes[start..self.pos]
    }
}

#[cfg(test)]
mod tests {
    use super::super::pdf_budget::tests::{zlib, zlib_zeros};
    use super::*;

    const LIMIT: u64 = 1 << 20;

    /// A file of numbered objects with an xref table; `objects` are written as given.
    fn file(objects: &[Vec<u8>], trailer_extra: &str) -> Vec<u8> {
        let mut pdf = b"%PDF-1.5\n".to_vec();
        let mut offsets = Vec::new();
        for (index, object) in objects.iter().enumerate() {
            offsets.push(pdf.len());
            pdf.extend(format!("{} 0 obj\n", index + 1).bytes());
            pdf.extend(object);
            pdf.extend(b"\nendobj\n");
        }
        let xref = pdf.len();
        pdf.extend(format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).bytes());
        for offset in offsets {
            pdf.extend(format!("{offset:010} 00000 n \n").bytes());
        }
        pdf.extend(
            format!(
                "trailer\n<< /Size {} /Root 1 0 R{trailer_extra} >>\nstartxref\n{xref}\n%%EOF\n",
                objects.len() + 1
            )
            .bytes(),
        );
        pdf
    }

    fn stream(dict: &str, data: &[u8]) -> Vec<u8> {
        let mut object = format!("<< {dict} /Length {} >>\nstream\n", data.len()).into_bytes();
        object.extend(data);
        object.extend(b"\nendstream");
        object
    }

    fn catalog() -> Vec<u8> {
        b"<< /Type /Catalog >>".to_vec()
    }

    #[test]
    fn an_object_stream_bomb_is_refused_before_parsing() {
        let bomb = zlib_zeros(8 << 20);
        let pdf = file(
            &[
                catalog(),
                stream("/Type /ObjStm /N 1 /First 4 /Filter /FlateDecode", &bomb),
            ],
            "",
        );
        assert_eq!(
            check_before_load(&pdf, LIMIT, None),
            Err(PrescanError::OverBudget)
        );
        assert_eq!(check_before_load(&pdf, 16 << 20, None), Ok(()));
    }

    #[test]
    fn content_and_image_streams_are_left_to_page_reading() {
        let bomb = zlib_zeros(8 << 20);
        let pdf = file(
            &[
                catalog(),
                stream("/Filter /FlateDecode", &bomb),
                stream("/Subtype /Image /Filter /FlateDecode", &bomb),
            ],
            "",
        );
        assert_eq!(check_before_load(&pdf, LIMIT, None), Ok(()));
    }

    #[test]
    fn escaped_names_double_compression_and_xref_streams_are_seen() {
        let bomb = zlib_zeros(8 << 20);
        // `/Obj#53tm` is `/ObjStm`.
        let escaped = file(
            &[
                catalog(),
                stream("/Type /Obj#53tm /Filter /Fl#61teDecode", &bomb),
            ],
            "",
        );
        assert_eq!(
            check_before_load(&escaped, LIMIT, None),
            Err(PrescanError::OverBudget)
        );
        let twice = zlib(&bomb);
        let chained = file(
            &[
                catalog(),
                stream("/Type /ObjStm /Filter [/FlateDecode /FlateDecode]", &twice),
            ],
            "",
        );
        assert_eq!(
            check_before_load(&chained, LIMIT, None),
            Err(PrescanError::OverBudget)
        );
        // A stream that `startxref` points at is inflated as cross-reference data, even
        // when its dictionary claims to be an image.
        let mut pdf = b"%PDF-1.5\n".to_vec();
        let offset = pdf.len();
        pdf.extend(b"1 0 obj\n");
        pdf.extend(stream("/Subtype /Image /Filter /FlateDecode", &bomb));
        pdf.extend(format!("\nendobj\nstartxref\n{offset}\n%%EOF\n").bytes());
        assert_eq!(
            check_before_load(&pdf, LIMIT, None),
            Err(PrescanError::OverBudget)
        );
    }

    #[test]
    fn a_dictionary_that_cannot_be_read_counts_as_loaded() {
        let bomb = zlib_zeros(8 << 20);
        let mut pdf = b"%PDF-1.5\n<< /Filter /FlateDecode >>\nstream\n".to_vec();
        pdf.extend(&bomb);
        pdf.extend(b"\nendstream\n");
        assert_eq!(
            check_before_load(&pdf, LIMIT, None),
            Err(PrescanError::OverBudget)
        );
        // A string holding a fake `N G obj` does not hide the real dictionary.
        let trick = file(
            &[
                catalog(),
                stream(
                    "/Type /ObjStm /Filter /FlateDecode /X (2 0 obj << /Subtype /Image >>)",
                    &bomb,
                ),
            ],
            "",
        );
        assert_eq!(
            check_before_load(&trick, LIMIT, None),
            Err(PrescanError::OverBudget)
        );
    }

    #[test]
    fn encrypted_files_with_object_streams_are_refused() {
        let small = zlib(b"1 0 ");
        let objects = [
            catalog(),
            stream("/Type /ObjStm /N 1 /First 4 /Filter /FlateDecode", &small),
        ];
        assert_eq!(check_before_load(&file(&objects, ""), LIMIT, None), Ok(()));
        assert_eq!(
            check_before_load(&file(&objects, " /Encrypt 9 0 R"), LIMIT, None),
            Err(PrescanError::EncryptedObjectStreams)
        );
    }

    #[test]
    fn the_dictionary_reader_handles_pdf_syntax() {
        let text = b"<< /A [1 2 0 R (a (nested) \\) string) <414243> << /B /C#20D >>] % comment\n /Length 12 /Filter [/LZWDecode] /DecodeParms << /EarlyChange 0 >> >>";
        let mut cursor = Cursor {
            bytes: text,
            pos: 0,
            end: text.len(),
        };
        let Some(Value::Dict(entries)) = cursor.value(0) else {
            panic!("not a dictionary");
        };
        assert_eq!(cursor.pos, text.len());
        let reading = reading(0, entries);
        assert_eq!(reading.length, Some(12));
        assert_eq!(reading.filters, vec![b"LZWDecode".to_vec()]);
        assert!(!reading.lzw_early_change);
        for bad in [
            &b"<< /A"[..],
            b"<< /A (unclosed >>",
            b"<< 1 2 >>",
            b"<< /A [ >>",
        ] {
            let mut cursor = Cursor {
                bytes: bad,
                pos: 0,
                end: bad.len(),
            };
            assert!(
                cursor.value(0).is_none(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
