//! The PDF inflate budget: no PDF makes the PDF reader hold more than
//! `ExtractLimits::max_pdf_inflated_bytes` of decompressed stream data at once, so a
//! decompression bomb is a failed file, never an out-of-memory.
//!
//! `lopdf` inflates streams without a bound, at three moments: while loading (object and
//! cross-reference streams; `pdf_prescan` checks those in the raw bytes first), and while
//! `pdf-extract` reads a page (its content streams, every form XObject each time it is
//! drawn, its fonts' files and CMaps). Before a page is read, `InflateAccount` decodes
//! each of those streams into a counting sink that stops at the budget and charges the
//! page for every use, repeats included. Streams the text layer never needs (images, ICC
//! profiles) are emptied first (`strip_unread_streams`), since `pdf-extract` would
//! otherwise inflate an image each time it is drawn and copy an ICC profile with every
//! saved graphics state.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};

use pdf_extract::{Dictionary, Document as Pdf, Object, ObjectId, Stream};

/// Most objects visited under one font dictionary when charging its streams.
const MAX_FONT_OBJECTS: usize = 4096;
/// Deepest nesting followed when looking for ICC profiles.
const MAX_NESTING: usize = 32;

/// The budget was exceeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Exceeded;

/// Why a page cannot be charged: over the budget, or too tangled to account for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ChargeError {
    Exceeded,
    TooComplex(String),
}

/// The length a stream's data decodes to through `filters`, decoded the way `lopdf`
/// does it (`FlateDecode` with its raw-deflate fallback, `LZWDecode`, `ASCII85Decode`;
/// decoding stops at the first filter it does not know), never holding or producing more
/// than `limit` bytes.
pub(super) fn decoded_len(
    data: &[u8],
    filters: &[&[u8]],
    lzw_early_change: bool,
    limit: u64,
) -> Result<u64, Exceeded> {
    let mut current: Option<Vec<u8>> = None;
    let mut length = data.len() as u64;
    for (index, filter) in filters.iter().enumerate() {
        let input = current.as_deref().unwrap_or(data);
        let keep = index + 1 < filters.len();
        let mut sink = CappedSink::new(limit, keep);
        match *filter {
            b"FlateDecode" => inflate(input, &mut sink)?,
            b"LZWDecode" => lzw(input, lzw_early_change, &mut sink)?,
            b"ASCII85Decode" => ascii85(input, &mut sink)?,
            _ => break,
        }
        length = sink.written;
        current = sink.kept;
    }
    if length > limit {
        return Err(Exceeded);
    }
    Ok(length)
}

/// Charges the streams a page makes the reader inflate against the budget. One account
/// per file (decoded sizes are remembered by object); `start_page` resets the charge.
pub(super) struct InflateAccount<'a> {
    pdf: &'a Pdf,
    limit: u64,
    sizes: HashMap<ObjectId, Result<u64, Exceeded>>,
    spent: u64,
    fonts_seen: HashSet<Vec<u8>>,
}

impl<'a> InflateAccount<'a> {
    pub(super) fn new(pdf: &'a Pdf, limit: u64) -> Self {
        InflateAccount {
            pdf,
            limit,
            sizes: HashMap::new(),
            spent: 0,
            fonts_seen: HashSet::new(),
        }
    }

    pub(super) fn start_page(&mut self) {
        self.spent = 0;
        self.fonts_seen.clear();
    }

    /// The page's content streams, each as often as the page lists it.
    pub(super) fn charge_contents(&mut self, page_id: ObjectId) -> Result<(), ChargeError> {
        for id in self.pdf.get_page_contents(page_id) {
            if let Ok(Object::Stream(stream)) = self.pdf.get_object(id) {
                self.charge_stream(Some(id), stream)?;
            }
        }
        Ok(())
    }

    /// One use of a stream (a content stream, a form being drawn).
    pub(super) fn charge_stream(
        &mut self,
        id: Option<ObjectId>,
        stream: &Stream,
    ) -> Result<(), ChargeError> {
        let size = match id {
            Some(id) => *self
                .sizes
                .entry(id)
                .or_insert_with(|| stream_len(stream, self.limit)),
            None => stream_len(stream, self.limit),
        }
        .map_err(|Exceeded| ChargeError::Exceeded)?;
        self.spent = self.spent.saturating_add(size);
        if self.spent > self.limit {
            return Err(ChargeError::Exceeded);
        }
        Ok(())
    }

    /// The fonts a resource dictionary names, each name once per page (the reader makes a
    /// font once per name and page): every stream reachable from the font dictionary.
    pub(super) fn charge_fonts(&mut self, resources: &'a Dictionary) -> Result<(), ChargeError> {
        let pdf = self.pdf;
        let Some(fonts) = resources
            .get(b"Font")
            .ok()
            .and_then(|f| resolve(pdf, f))
            .and_then(|f| f.as_dict().ok())
        else {
            return Ok(());
        };
        for (name, font) in fonts.iter() {
            if self.fonts_seen.insert(name.clone()) {
                self.charge_reachable(font)?;
            }
        }
        Ok(())
    }

    /// Every stream reachable from `start` (not through `Parent` links), once each.
    fn charge_reachable(&mut self, start: &'a Object) -> Result<(), ChargeError> {
        let pdf = self.pdf;
        let mut stack: Vec<&'a Object> = vec![start];
        let mut seen: HashSet<ObjectId> = HashSet::new();
        let mut visited = 0;
        while let Some(object) = stack.pop() {
            visited += 1;
            if visited > MAX_FONT_OBJECTS {
                return Err(ChargeError::TooComplex(format!(
                    "a font refers to more than {MAX_FONT_OBJECTS} objects"
                )));
            }
            match object {
                Object::Reference(id) if seen.insert(*id) => match pdf.get_object(*id) {
                    Ok(Object::Stream(stream)) => {
                        self.charge_stream(Some(*id), stream)?;
                        push_values(&stream.dict, &mut stack);
                    }
                    Ok(other) => stack.push(other),
                    Err(_) => {}
                },
                Object::Dictionary(dict) => push_values(dict, &mut stack),
                Object::Array(items) => stack.extend(items.iter()),
                Object::Stream(stream) => {
                    self.charge_stream(None, stream)?;
                    push_values(&stream.dict, &mut stack);
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// Empties the streams whose bytes the text layer never needs: image XObjects and ICC
/// colour profiles (`pdf-extract` would inflate an image each time it is drawn, and copy a
/// profile into every saved graphics state).
pub(super) fn strip_unread_streams(pdf: &mut Pdf) {
    let mut profiles = HashSet::new();
    for object in pdf.objects.values() {
        collect_icc_profiles(object, 0, &mut profiles);
    }
    for (id, object) in pdf.objects.iter_mut() {
        if let Object::Stream(stream) = object {
            let image = stream
                .dict
                .get(b"Subtype")
                .and_then(Object::as_name)
                .is_ok_and(|name| name == b"Image");
            if image || profiles.contains(id) {
                stream.set_plain_content(Vec::new());
            }
        }
    }
}

/// The object a (chain of) reference(s) points to.
pub(super) fn resolve<'p>(pdf: &'p Pdf, object: &'p Object) -> Option<&'p Object> {
    resolve_with_id(pdf, object).map(|(_, object)| object)
}

/// The object a (chain of) reference(s) points to, and the id it was found under.
pub(super) fn resolve_with_id<'p>(
    pdf: &'p Pdf,
    mut object: &'p Object,
) -> Option<(Option<ObjectId>, &'p Object)> {
    /// Most indirect references followed to reach one object.
    const MAX_REFERENCE_HOPS: usize = 32;
    let mut id = None;
    for _ in 0..MAX_REFERENCE_HOPS {
        match object {
            Object::Reference(next) => {
                id = Some(*next);
                object = pdf.get_object(*next).ok()?;
            }
            other => return Some((id, other)),
        }
    }
    None
}

fn push_values<'a>(dict: &'a Dictionary, stack: &mut Vec<&'a Object>) {
    for (key, value) in dict.iter() {
        if key.as_slice() != b"Parent" {
            stack.push(value);
        }
    }
}

fn stream_len(stream: &Stream, limit: u64) -> Result<u64, Exceeded> {
    let filters = stream.filters().unwrap_or_default();
    let early_change = stream
        .dict
        .get(b"DecodeParms")
        .and_then(Object::as_dict)
        .and_then(|p| p.get(b"EarlyChange"))
        .and_then(Object::as_i64)
        .map_or(true, |v| v != 0);
    decoded_len(&stream.content, &filters, early_change, limit)
}

fn collect_icc_profiles(object: &Object, depth: usize, found: &mut HashSet<ObjectId>) {
    if depth > MAX_NESTING {
        return;
    }
    match object {
        Object::Array(items) => {
            if let [Object::Name(name), Object::Reference(id), ..] = items.as_slice() {
                if name == b"ICCBased" {
                    found.insert(*id);
                }
            }
            for item in items {
                collect_icc_profiles(item, depth + 1, found);
            }
        }
        Object::Dictionary(dict) => {
            for (_, value) in dict.iter() {
                collect_icc_profiles(value, depth + 1, found);
            }
        }
        Object::Stream(stream) => {
            for (_, value) in stream.dict.iter() {
                collect_icc_profiles(value, depth + 1, found);
            }
        }
        _ => {}
    }
}

/// Counts what is written to it, keeps it when asked, and fails once past `limit`.
struct CappedSink {
    limit: u64,
    written: u64,
    kept: Option<Vec<u8>>,
    exceeded: bool,
}

impl CappedSink {
    fn new(limit: u64, keep: bool) -> Self {
        CappedSink {
            limit,
            written: 0,
            kept: keep.then(Vec::new),
            exceeded: false,
        }
    }

    /// After a decoder stopped with an error: over the budget, or just bad data (what was
    /// decoded so far counts, like the reader's partial output).
    fn finish(&self) -> Result<(), Exceeded> {
        if self.exceeded {
            Err(Exceeded)
        } else {
            Ok(())
        }
    }
}

impl Write for CappedSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let total = self.written.saturating_add(buf.len() as u64);
        if total > self.limit {
            self.exceeded = true;
            return Err(std::io::Error::other("inflate budget exceeded"));
        }
        self.written = total;
        if let Some(kept) = &mut self.kept {
            kept.extend_from_slice(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Zlib, falling back to raw deflate after the two-byte header when zlib yields nothing
/// (as `lopdf` does for streams with a bad checksum).
fn inflate(input: &[u8], sink: &mut CappedSink) -> Result<(), Exceeded> {
    if input.is_empty() {
        return Ok(());
    }
    if copy(flate2::read::ZlibDecoder::new(input), sink).is_ok() {
        return Ok(());
    }
    sink.finish()?;
    if sink.written == 0 && input.len() > 2 {
        let _ = copy(flate2::read::DeflateDecoder::new(&input[2..]), sink);
        sink.finish()?;
    }
    Ok(())
}

fn copy(mut reader: impl Read, sink: &mut CappedSink) -> std::io::Result<()> {
    let mut buffer = vec![0u8; 64 << 10];
    loop {
        let read = reader.read(&mut buffer)?;
        if read == 0 {
            return Ok(());
        }
        sink.write_all(&buffer[..read])?;
    }
}

fn lzw(input: &[u8], early_change: bool, sink: &mut CappedSink) -> Result<(), Exceeded> {
    use weezl::{decode::Decoder, BitOrder};
    let mut decoder = if early_change {
        Decoder::with_tiff_size_switch(BitOrder::Msb, 8)
    } else {
        Decoder::new(BitOrder::Msb, 8)
    };
    let _ = decoder.into_stream(&mut *sink).decode_all(input).status;
    sink.finish()
}

/// ASCII base-85, as `lopdf` decodes it (`z` for four zeros, stops at a character
/// outside `!`..=`u`).
fn ascii85(input: &[u8], sink: &mut CappedSink) -> Result<(), Exceeded> {
    let input = input.strip_suffix(b"~>").unwrap_or(input);
    let mut group: u32 = 0;
    let mut count = 0usize;
    let emit = |sink: &mut CappedSink, bytes: &[u8]| sink.write_all(bytes).map_err(|_| Exceeded);
    for &byte in input {
        if byte == b'z' {
            if count != 0 {
                return Ok(());
            }
            emit(sink, &[0; 4])?;
            continue;
        }
        if byte.is_ascii_whitespace() {
            continue;
        }
        if !(b'!'..=b'u').contains(&byte) {
            break;
        }
        let Some(next) = group
            .checked_mul(85)
            .and_then(|g| g.checked_add(u32::from(byte - b'!')))
        else {
            return Ok(());
        };
        group = next;
        count += 1;
        if count == 5 {
            emit(sink, &group.to_be_bytes())?;
            group = 0;
            count = 0;
        }
    }
    if count > 1 {
        for _ in count..5 {
            group = group.wrapping_mul(85).wrapping_add(84);
        }
        emit(sink, &group.to_be_bytes()[..count - 1])?;
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use std::io::Write as _;

    use super::*;

    const FLATE: &[u8] = b"FlateDecode";
    const LZW: &[u8] = b"LZWDecode";
    const A85: &[u8] = b"ASCII85Decode";

    /// `bytes` zeros, zlib-compressed (a zero run compresses about 1000 to 1).
    pub(crate) fn zlib_zeros(bytes: usize) -> Vec<u8> {
        let mut encoder =
            flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        let block = vec![0u8; 1 << 20];
        let mut left = bytes;
        while left > 0 {
            let n = left.min(block.len());
            encoder.write_all(&block[..n]).unwrap();
            left -= n;
        }
        encoder.finish().unwrap()
    }

    pub(crate) fn zlib(bytes: &[u8]) -> Vec<u8> {
        let mut encoder =
            flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    #[test]
    fn flate_is_counted_and_stops_at_the_budget() {
        let small = zlib_zeros(1000);
        assert_eq!(decoded_len(&small, &[FLATE], true, 4096), Ok(1000));
        let bomb = zlib_zeros(64 << 20);
        assert!(bomb.len() < 100_000, "{}", bomb.len());
        assert_eq!(decoded_len(&bomb, &[FLATE], true, 1 << 20), Err(Exceeded));
        // No filter: the raw bytes; an unknown filter stops decoding like the reader does.
        assert_eq!(decoded_len(b"abc", &[], true, 10), Ok(3));
        assert_eq!(
            decoded_len(&bomb, &[b"DCTDecode".as_slice()], true, 1 << 20),
            Ok(bomb.len() as u64)
        );
        // Corrupt zlib data counts what was decoded (here by the raw-deflate fallback),
        // without an error.
        let corrupt = decoded_len(b"\x78\x9cjunk", &[FLATE], true, 10);
        assert!(matches!(corrupt, Ok(n) if n < 10), "{corrupt:?}");
    }

    #[test]
    fn chained_filters_are_followed_to_the_end() {
        // A bomb compressed twice is small at every step but the last.
        let inner = zlib_zeros(16 << 20);
        let outer = zlib(&inner);
        assert!(outer.len() < inner.len() + 64);
        let chain: &[&[u8]] = &[FLATE, FLATE];
        assert_eq!(decoded_len(&outer, chain, true, 1 << 20), Err(Exceeded));
        assert_eq!(decoded_len(&outer, chain, true, 32 << 20), Ok(16 << 20));
    }

    #[test]
    fn ascii85_and_lzw_are_counted() {
        assert_eq!(
            decoded_len(b"87cURD]i,\"Ebo80~>", &[A85], true, 100),
            Ok(12)
        );
        assert_eq!(decoded_len(&[b'z'; 100], &[A85], true, 1000), Ok(400));
        assert_eq!(decoded_len(&[b'z'; 100], &[A85], true, 100), Err(Exceeded));
        let mut encoder = weezl::encode::Encoder::with_tiff_size_switch(weezl::BitOrder::Msb, 8);
        let zeros = vec![0u8; 4 << 20];
        let lzw = encoder.encode(&zeros).unwrap();
        assert!(lzw.len() < zeros.len() / 50, "{}", lzw.len());
        assert_eq!(decoded_len(&lzw, &[LZW], true, 8 << 20), Ok(4 << 20));
        assert_eq!(decoded_len(&lzw, &[LZW], true, 1 << 20), Err(Exceeded));
    }
}
