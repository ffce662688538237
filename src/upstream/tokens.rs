//! Counting an upstream model's tokens, which the context envelope needs before it sends a
//! prompt: with the model's own tokenizer when the admin configured its GGUF or
//! `tokenizer.json`, otherwise with a conservative estimate.
//!
//! The estimate: one token per 3 ASCII bytes (rounded up) plus one per other character.
//! Byte-pair vocabularies of 32k entries or more (Llama 3, Qwen 2.5, Mistral, GPT-style)
//! average 3.5–4.5 English characters per token and at most about one token per Chinese
//! character, so the estimate overcounts English by 15–50% and Chinese a little: the
//! envelope compacts early rather than overflowing the upstream's context.

use std::path::Path;

use crate::engine::GgufTokenCounter;

/// How one upstream model's tokens are counted.
pub enum TokenCounter {
    Gguf(GgufTokenCounter),
    TokenizerJson(Box<tokenizers::Tokenizer>),
    Estimate,
}

impl TokenCounter {
    pub fn gguf(path: &Path) -> Result<TokenCounter, String> {
        GgufTokenCounter::load(path)
            .map(TokenCounter::Gguf)
            .map_err(|err| format!("tokenizer {}: {err}", path.display()))
    }

    pub fn tokenizer_json(path: &Path) -> Result<TokenCounter, String> {
        tokenizers::Tokenizer::from_file(path)
            .map(|t| TokenCounter::TokenizerJson(Box::new(t)))
            .map_err(|err| format!("tokenizer {}: {err}", path.display()))
    }

    pub fn count(&self, text: &str) -> usize {
        match self {
            TokenCounter::Gguf(counter) => counter.count(text),
            TokenCounter::TokenizerJson(tokenizer) => match tokenizer.encode(text, false) {
                Ok(encoding) => encoding.len(),
                Err(_) => estimate(text),
            },
            TokenCounter::Estimate => estimate(text),
        }
    }
}

/// The conservative estimate described above.
pub fn estimate(text: &str) -> usize {
    let ascii = text.bytes().filter(u8::is_ascii).count();
    let other = text.chars().filter(|c| !c.is_ascii()).count();
    ascii.div_ceil(3) + other
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_overcounts_the_real_tokenizer() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/spm_vocab.gguf");
        let real = TokenCounter::gguf(&path).expect("the test vocabulary loads");
        for text in [
            "Restart the service after the configuration reload finished.",
            "磁盘满了怎么办？先看看哪个目录最大。",
            "SELECT pid, wait_event FROM pg_stat_activity WHERE state = 'active';",
        ] {
            assert!(estimate(text) >= real.count(text) * 3 / 4, "{text}");
        }
        assert_eq!(estimate(""), 0);
        assert_eq!(estimate("abcd"), 2);
        assert_eq!(estimate("磁盘"), 2);
    }
}
