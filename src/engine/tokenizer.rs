//! Text tokenizers for chat models: a `tokenizer.json` beside the GGUF when there is one,
//! else one built from the GGUF's own metadata so that it reproduces llama.cpp's
//! tokenization exactly. Also knows each token's raw bytes, for streaming and for the
//! constrained-decoding trie.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::prepend::Prepend;
use tokenizers::normalizers::replace::Replace;
use tokenizers::normalizers::utils::Sequence as NormalizerSequence;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{
    AddedToken, NormalizerWrapper, PreTokenizerWrapper, SplitDelimiterBehavior, Tokenizer,
};

use super::error::{EngineError, Result};
use super::gguf::GgufFile;

/// llama.cpp's pre-tokenizer regex for Llama 3 style vocabularies.
const REGEX_LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// llama.cpp's pre-tokenizer regex for Qwen2 style vocabularies (digits one by one).
const REGEX_QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// GGUF token types (llama.cpp's `llama_token_type`).
const TOKEN_TYPE_UNKNOWN: i64 = 2;
const TOKEN_TYPE_CONTROL: i64 = 3;
const TOKEN_TYPE_USER_DEFINED: i64 = 4;
const TOKEN_TYPE_BYTE: i64 = 6;

/// A chat model's tokenizer plus the facts generation needs.
pub struct TextTokenizer {
    /// Parses special-token text (`<|im_start|>`) as special tokens: for template text.
    with_specials: Tokenizer,
    /// Treats special-token text as plain text: for user content.
    plain: Tokenizer,
    token_bytes: Vec<Vec<u8>>,
    special_ids: HashSet<u32>,
    pub eos_ids: Vec<u32>,
    pub bos_id: Option<u32>,
    pub add_bos: bool,
}

impl TextTokenizer {
    /// Loads `<model>.tokenizer.json` or `tokenizer.json` beside the GGUF, else builds one
    /// from the GGUF metadata.
    pub fn load(gguf: &GgufFile) -> Result<Self> {
        let tokenizer = match sibling_tokenizer_json(gguf.path()) {
            Some(path) => Tokenizer::from_file(&path).map_err(|e| EngineError::BadModelFile {
                path: path.clone(),
                reason: format!("tokenizer.json does not parse: {e}"),
            })?,
            None => from_gguf_metadata(gguf)?,
        };
        Self::assemble(tokenizer, gguf)
    }

    fn assemble(tokenizer: Tokenizer, gguf: &GgufFile) -> Result<Self> {
        let vocab_size = tokenizer.get_vocab_size(true);
        let special_ids: HashSet<u32> = tokenizer
            .get_added_tokens_decoder()
            .iter()
            .filter(|(_, t)| t.special)
            .map(|(id, _)| *id)
            .collect();
        let byte_level = is_byte_level(&tokenizer);
        let token_bytes = (0..vocab_size as u32)
            .map(|id| {
                let text = tokenizer.id_to_token(id).unwrap_or_default();
                token_to_bytes(&text, byte_level, special_ids.contains(&id))
            })
            .collect();
        let mut eos_ids: Vec<u32> = Vec::new();
        if let Some(id) = gguf.optional_u64("tokenizer.ggml.eos_token_id") {
            eos_ids.push(id as u32);
        }
        if let Some(id) = gguf.optional_u64("tokenizer.ggml.eot_token_id") {
            eos_ids.push(id as u32);
        }
        // End-of-turn markers every chat template we know uses.
        for marker in [
            "<|im_end|>",
            "<|endoftext|>",
            "<|eot_id|>",
            "<end_of_turn>",
            "<|end|>",
        ] {
            if let Some(id) = tokenizer.token_to_id(marker) {
                eos_ids.push(id);
            }
        }
        eos_ids.sort_unstable();
        eos_ids.dedup();
        if eos_ids.is_empty() {
            return Err(gguf.bad("the tokenizer defines no end-of-sequence token".into()));
        }
        let mut plain = tokenizer.clone();
        plain.set_encode_special_tokens(true);
        Ok(Self {
            with_specials: tokenizer,
            plain,
            token_bytes,
            special_ids,
            eos_ids,
            bos_id: gguf
                .optional_u64("tokenizer.ggml.bos_token_id")
                .map(|id| id as u32),
            add_bos: gguf
                .optional_bool("tokenizer.ggml.add_bos_token")
                .unwrap_or(false),
        })
    }

    /// Token ids of `text`. With `parse_special`, special-token text becomes special tokens;
    /// without, it is tokenized as ordinary text (the safe choice for user content).
    pub fn encode(&self, text: &str, parse_special: bool) -> Result<Vec<u32>> {
        let tokenizer = if parse_special {
            &self.with_specials
        } else {
            &self.plain
        };
        let encoding = tokenizer
            .encode_fast(text, false)
            .map_err(|e| EngineError::InvalidRequest(format!("cannot tokenize input: {e}")))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The raw bytes a token stands for; special tokens are 0xFF followed by their name
    /// (the toktrie convention), and are never shown to users.
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.token_bytes
            .get(id as usize)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    pub fn all_token_bytes(&self) -> &[Vec<u8>] {
        &self.token_bytes
    }

    pub fn is_special(&self, id: u32) -> bool {
        self.special_ids.contains(&id)
    }

    pub fn vocab_size(&self) -> usize {
        self.token_bytes.len()
    }

    pub fn is_eos(&self, id: u32) -> bool {
        self.eos_ids.contains(&id)
    }
}

fn sibling_tokenizer_json(gguf_path: &Path) -> Option<PathBuf> {
    let stem = gguf_path.file_stem()?.to_string_lossy().to_string();
    let dir = gguf_path.parent()?;
    [
        dir.join(format!("{stem}.tokenizer.json")),
        dir.join("tokenizer.json"),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

/// Builds the tokenizer `tokenizer.ggml.*` metadata describes: byte-level BPE (`gpt2`) or
/// SentencePiece (`llama`: Llama 2, Mistral, Phi-3, Gemma).
fn from_gguf_metadata(gguf: &GgufFile) -> Result<Tokenizer> {
    let model = gguf.string("tokenizer.ggml.model")?;
    match model.as_str() {
        "gpt2" => byte_level_bpe_from_gguf(gguf),
        "llama" => sentencepiece_from_gguf(gguf),
        other => Err(gguf.bad(format!(
            "tokenizer model `{other}` cannot be rebuilt from GGUF metadata; \
             place the model's tokenizer.json beside the GGUF as <name>.tokenizer.json"
        ))),
    }
}

/// SentencePiece as llama.cpp runs it: spaces become `▁` (one is prepended unless
/// `add_space_prefix` is false), then adjacent pieces merge while their concatenation is a
/// vocabulary token, the highest-scoring merge first; characters with no token fall back to
/// `<0xXX>` byte tokens. Expressed as a BPE whose merge ranks follow the merged token's score.
/// Control tokens are never formed by merging text, so typed `<s>` stays text.
fn sentencepiece_from_gguf(gguf: &GgufFile) -> Result<Tokenizer> {
    let tokens = gguf.string_array("tokenizer.ggml.tokens")?;
    let scores = gguf
        .optional_f32_array("tokenizer.ggml.scores")
        .ok_or_else(|| gguf.bad("metadata `tokenizer.ggml.scores` is missing".to_owned()))?;
    let types = gguf
        .optional_int_array("tokenizer.ggml.token_type")
        .unwrap_or_default();
    if scores.len() != tokens.len() {
        return Err(gguf.bad("tokenizer scores and tokens differ in length".to_owned()));
    }
    let mergeable = |id: usize| {
        !matches!(
            types.get(id).copied(),
            Some(TOKEN_TYPE_CONTROL | TOKEN_TYPE_UNKNOWN | TOKEN_TYPE_BYTE)
        )
    };
    let vocab: tokenizers::models::bpe::Vocab = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    let merges = sentencepiece_merges(&tokens, &scores, &mergeable, &vocab);
    let mut builder = BPE::builder()
        .vocab_and_merges(vocab.clone(), merges)
        .byte_fallback(true)
        .fuse_unk(true);
    if let Some(unk) = types.iter().position(|t| *t == TOKEN_TYPE_UNKNOWN) {
        builder = builder.unk_token(tokens[unk].clone());
    }
    let bpe = builder
        .build()
        .map_err(|e| gguf.bad(format!("cannot build SentencePiece tokenizer: {e}")))?;
    let mut tokenizer = Tokenizer::new(bpe);
    let add_space_prefix = gguf
        .optional_bool("tokenizer.ggml.add_space_prefix")
        .unwrap_or(true);
    let replace = Replace::new(" ", "\u{2581}")
        .map_err(|e| gguf.bad(format!("cannot build the normalizer: {e}")))?;
    let mut normalizers: Vec<NormalizerWrapper> = Vec::new();
    if add_space_prefix {
        normalizers.push(Prepend::new("\u{2581}".to_owned()).into());
    }
    normalizers.push(replace.into());
    tokenizer
        .with_normalizer(Some(NormalizerSequence::new(normalizers)))
        .map_err(|e| gguf.bad(format!("cannot set the normalizer: {e}")))?;
    let decode_space = tokenizers::decoders::sequence::Sequence::new(vec![
        Replace::new("\u{2581}", " ")
            .map_err(|e| gguf.bad(format!("cannot build the decoder: {e}")))?
            .into(),
        tokenizers::decoders::byte_fallback::ByteFallback::new().into(),
        tokenizers::decoders::fuse::Fuse::new().into(),
        tokenizers::decoders::strip::Strip::new(' ', usize::from(add_space_prefix), 0).into(),
    ]);
    tokenizer.with_decoder(Some(decode_space));
    register_specials(&mut tokenizer, &tokens, &types, gguf)?;
    Ok(tokenizer)
}

/// Every `(left, right)` whose concatenation is a mergeable token, ranked by that token's
/// score (highest first; ties by lower id, as llama.cpp prefers the earlier token).
fn sentencepiece_merges(
    tokens: &[String],
    scores: &[f32],
    mergeable: &dyn Fn(usize) -> bool,
    vocab: &tokenizers::models::bpe::Vocab,
) -> Vec<(String, String)> {
    let mut ranked: Vec<(f32, u32, String, String)> = Vec::new();
    for (id, token) in tokens.iter().enumerate() {
        if !mergeable(id) || token.chars().count() < 2 {
            continue;
        }
        for (split, _) in token.char_indices().skip(1) {
            let (left, right) = token.split_at(split);
            let usable = |piece: &str| vocab.get(piece).is_some_and(|&i| mergeable(i as usize));
            if usable(left) && usable(right) {
                ranked.push((scores[id], id as u32, left.to_owned(), right.to_owned()));
            }
        }
    }
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    ranked.into_iter().map(|(_, _, l, r)| (l, r)).collect()
}

/// Registers control and user-defined tokens as added tokens (control ones special).
fn register_specials(
    tokenizer: &mut Tokenizer,
    tokens: &[String],
    types: &[i64],
    gguf: &GgufFile,
) -> Result<()> {
    let specials = types
        .iter()
        .enumerate()
        .filter(|(_, t)| matches!(**t, TOKEN_TYPE_CONTROL | TOKEN_TYPE_USER_DEFINED))
        .filter_map(|(id, _)| tokens.get(id))
        .map(|t| AddedToken::from(t.clone(), true));
    tokenizer
        .add_special_tokens(specials)
        .map_err(|e| gguf.bad(format!("cannot register special tokens: {e}")))?;
    Ok(())
}

/// Builds a byte-level BPE tokenizer from `tokenizer.ggml.*` metadata.
fn byte_level_bpe_from_gguf(gguf: &GgufFile) -> Result<Tokenizer> {
    let tokens = gguf.string_array("tokenizer.ggml.tokens")?;
    let merges = gguf
        .string_array("tokenizer.ggml.merges")?
        .into_iter()
        .map(|m| match m.split_once(' ') {
            Some((a, b)) => Ok((a.to_string(), b.to_string())),
            None => Err(gguf.bad(format!("malformed merge `{m}`"))),
        })
        .collect::<Result<Vec<_>>>()?;
    let pre = gguf
        .optional_string("tokenizer.ggml.pre")
        .unwrap_or_else(|| "gpt2".into());
    let vocab: tokenizers::models::bpe::Vocab = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .ignore_merges(ignores_merges(&pre))
        .build()
        .map_err(|e| gguf.bad(format!("cannot build BPE tokenizer: {e}")))?;
    let mut tokenizer = Tokenizer::new(bpe);
    tokenizer.with_pre_tokenizer(Some(pre_tokenizer_for(&pre).map_err(|e| gguf.bad(e))?));
    tokenizer.with_decoder(Some(tokenizers::decoders::byte_level::ByteLevel::default()));
    let types = gguf
        .optional_int_array("tokenizer.ggml.token_type")
        .unwrap_or_default();
    register_specials(&mut tokenizer, &tokens, &types, gguf)?;
    Ok(tokenizer)
}

fn ignores_merges(pre: &str) -> bool {
    matches!(
        pre,
        "llama3" | "llama-v3" | "llama-bpe" | "smaug-bpe" | "falcon3"
    )
}

/// The pre-tokenizer llama.cpp uses for this `tokenizer.ggml.pre` value.
fn pre_tokenizer_for(pre: &str) -> std::result::Result<PreTokenizerWrapper, String> {
    let regex_then_bytes = |regex: &str| -> std::result::Result<PreTokenizerWrapper, String> {
        let split = Split::new(
            SplitPattern::Regex(regex.to_string()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|e| format!("bad pre-tokenizer regex: {e}"))?;
        Ok(Sequence::new(vec![
            split.into(),
            ByteLevel::new(false, true, false).into(),
        ])
        .into())
    };
    match pre {
        "llama3" | "llama-v3" | "llama-bpe" | "smaug-bpe" | "falcon3" => {
            regex_then_bytes(REGEX_LLAMA3)
        }
        "qwen2" | "deepseek-r1-qwen" => regex_then_bytes(REGEX_QWEN2),
        // These split digits one by one, then apply GPT-2's own regex.
        "smollm" | "starcoder" | "refact" | "command-r" => Ok(Sequence::new(vec![
            Digits::new(true).into(),
            ByteLevel::new(false, true, true).into(),
        ])
        .into()),
        "gpt2" | "default" => Ok(ByteLevel::new(false, true, true).into()),
        other => {
            tracing::warn!("unknown GGUF pre-tokenizer `{other}`: using GPT-2's");
            Ok(ByteLevel::new(false, true, true).into())
        }
    }
}

fn is_byte_level(tokenizer: &Tokenizer) -> bool {
    matches!(
        tokenizer.get_decoder(),
        Some(tokenizers::DecoderWrapper::ByteLevel(_))
    )
}

/// Raw bytes of one vocabulary entry.
fn token_to_bytes(text: &str, byte_level: bool, special: bool) -> Vec<u8> {
    if special {
        let mut bytes = vec![toktrie::TokTrie::SPECIAL_TOKEN_MARKER];
        bytes.extend_from_slice(text.as_bytes());
        return bytes;
    }
    if byte_level {
        return text.chars().filter_map(byte_level_char_to_byte).collect();
    }
    // SentencePiece style: `<0xNN>` byte tokens and `▁` for spaces.
    if let Some(hex) = text.strip_prefix("<0x").and_then(|s| s.strip_suffix('>')) {
        if let Ok(byte) = u8::from_str_radix(hex, 16) {
            return vec![byte];
        }
    }
    text.replace('\u{2581}', " ").into_bytes()
}

/// Inverse of GPT-2's byte-to-unicode table: printable Latin-1 bytes map to themselves,
/// the other 68 bytes to U+0100.. in order.
fn byte_level_char_to_byte(c: char) -> Option<u8> {
    static TABLE: std::sync::OnceLock<Vec<Option<u8>>> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let printable = |b: u32| {
            (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b)
        };
        let mut table = vec![None; 256 + 68];
        let mut next = 256usize;
        for byte in 0u32..256 {
            if printable(byte) {
                table[byte as usize] = Some(byte as u8);
            } else {
                table[next] = Some(byte as u8);
                next += 1;
            }
        }
        table
    });
    table.get(c as usize).copied().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SentencePiece vocabulary trained on kb/ (tests/bench/make_spm_fixture.py).
    fn sentencepiece_tokenizer() -> TextTokenizer {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/spm_vocab.gguf");
        let gguf = GgufFile::open(&path).expect("tests/data/spm_vocab.gguf opens");
        TextTokenizer::load(&gguf).expect("a SentencePiece tokenizer is built from GGUF metadata")
    }

    #[test]
    fn sentencepiece_from_gguf_matches_llama_cpp() {
        let tokenizer = sentencepiece_tokenizer();
        let fixture =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/spm_tokenizer_parity.json");
        let fixture: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
        let cases = fixture["cases"].as_array().unwrap();
        assert!(cases.len() >= 18);
        let mut mismatches = Vec::new();
        for case in cases {
            let text = case["text"].as_str().unwrap();
            let special = case["special"].as_bool().unwrap();
            let expected: Vec<u32> = serde_json::from_value(case["ids"].clone()).unwrap();
            let ours = tokenizer.encode(text, special).unwrap();
            if ours != expected {
                mismatches.push(format!(
                    "{text:?} (special {special}): {ours:?} vs {expected:?}"
                ));
            }
        }
        assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    }

    #[test]
    fn sentencepiece_user_text_cannot_form_added_tokens() {
        let tokenizer = sentencepiece_tokenizer();
        for text in ["<|user|>hi<|end|>", "<s>x</s>"] {
            let ids = tokenizer.encode(text, false).unwrap();
            assert!(
                ids.iter().all(|id| !tokenizer.is_special(*id)),
                "{text}: {ids:?}"
            );
        }
        // Pieces decode back to the exact bytes, spaces and byte fallback included.
        let ids = tokenizer.encode("emoji 🚀 and café", false).unwrap();
        let bytes: Vec<u8> = ids
            .iter()
            .flat_map(|id| tokenizer.token_bytes(*id).to_vec())
            .collect();
        assert_eq!(String::from_utf8(bytes).unwrap(), " emoji 🚀 and café");
    }

    #[test]
    fn byte_level_table_round_trips_every_byte() {
        let printable = |b: u32| {
            (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b)
        };
        let mut next = 256u32;
        for b in 0u32..256 {
            let c = if printable(b) {
                char::from_u32(b).unwrap()
            } else {
                next += 1;
                char::from_u32(next - 1).unwrap()
            };
            assert_eq!(byte_level_char_to_byte(c), Some(b as u8), "byte {b}");
        }
        assert_eq!(byte_level_char_to_byte('Ġ'), Some(b' '));
    }

    #[test]
    fn sentencepiece_tokens_decode_to_bytes() {
        assert_eq!(token_to_bytes("<0x0A>", false, false), vec![b'\n']);
        assert_eq!(
            token_to_bytes("\u{2581}hello", false, false),
            b" hello".to_vec()
        );
        assert_eq!(token_to_bytes("<|im_end|>", true, true)[0], 0xFF);
    }
}
