//! Standard base64 (RFC 4648, with padding) for `encoding_format: "base64"` embeddings:
//! small enough to write out rather than add a crate.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// The vector as little-endian `f32` bytes, base64-encoded (what OpenAI clients decode).
pub(crate) fn encode_f32_le(values: &[f32]) -> String {
    let bytes: Vec<u8> = values
        .iter()
        .flat_map(|value| value.to_le_bytes())
        .collect();
    encode(&bytes)
}

pub(crate) fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for group in bytes.chunks(3) {
        let b0 = group[0];
        let b1 = group.get(1).copied().unwrap_or(0);
        let b2 = group.get(2).copied().unwrap_or(0);
        let sextets = [
            b0 >> 2,
            ((b0 & 0x03) << 4) | (b1 >> 4),
            ((b1 & 0x0f) << 2) | (b2 >> 6),
            b2 & 0x3f,
        ];
        // A group of n bytes gives n + 1 characters; the rest is padding.
        for (position, sextet) in sextets.iter().enumerate() {
            if position <= group.len() {
                out.push(char::from(ALPHABET[usize::from(*sextet)]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4648_test_vectors() {
        let cases = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (input, expected) in cases {
            assert_eq!(encode(input.as_bytes()), expected, "{input:?}");
        }
        assert_eq!(encode(&[0xff, 0xfe, 0xfd]), "//79");
    }

    #[test]
    fn floats_are_little_endian() {
        // 1.0f32 is 0x3f800000: bytes 00 00 80 3f.
        assert_eq!(encode_f32_le(&[1.0]), encode(&[0x00, 0x00, 0x80, 0x3f]));
        assert_eq!(encode_f32_le(&[1.0, -2.0]).len(), 12);
    }
}
