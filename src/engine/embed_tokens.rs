//! Counting tokens the way the embedding model sees them, without a model thread: the
//! chunker sizes chunks with it, and hybrid search asks it whether the model can represent
//! a query at all (share of unknown tokens).

use std::path::Path;

use tokenizers::Tokenizer;

use super::error::{EngineError, Result};

pub struct EmbeddingTokenizer {
    tokenizer: Tokenizer,
    unknown_id: Option<u32>,
}

impl EmbeddingTokenizer {
    /// Loads `tokenizer.json` from an embedding model folder.
    pub fn load(model_dir: &Path) -> Result<Self> {
        let path = model_dir.join("tokenizer.json");
        let mut tokenizer = Tokenizer::from_file(&path).map_err(|e| EngineError::BadModelFile {
            path: path.clone(),
            reason: format!("tokenizer.json does not parse: {e}"),
        })?;
        tokenizer
            .with_truncation(None)
            .map_err(|e| EngineError::BadModelFile {
                path: path.clone(),
                reason: e.to_string(),
            })?;
        tokenizer.with_padding(None);
        let unknown_id = ["[UNK]", "<unk>"]
            .iter()
            .find_map(|t| tokenizer.token_to_id(t));
        Ok(Self {
            tokenizer,
            unknown_id,
        })
    }

    /// Tokens of `text`, special tokens excluded.
    pub fn count(&self, text: &str) -> usize {
        self.tokenizer
            .encode_fast(text, false)
            .map(|e| e.len())
            .unwrap_or_else(|_| text.split_whitespace().count())
    }

    /// Share of `text`'s tokens that are the unknown token.
    pub fn unknown_share(&self, text: &str) -> f32 {
        let Some(unknown) = self.unknown_id else {
            return 0.0;
        };
        let Ok(encoding) = self.tokenizer.encode_fast(text, false) else {
            return 0.0;
        };
        let ids = encoding.get_ids();
        if ids.is_empty() {
            return 0.0;
        }
        ids.iter().filter(|&&id| id == unknown).count() as f32 / ids.len() as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chinese_is_mostly_unknown_to_the_english_model() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/all-MiniLM-L6-v2");
        assert!(
            dir.join("tokenizer.json").is_file(),
            "{} is missing: run models/fetch",
            dir.display()
        );
        let tokenizer = EmbeddingTokenizer::load(&dir).unwrap();
        assert!(tokenizer.unknown_share("数据库死锁如何排查") > 0.5);
        assert_eq!(tokenizer.unknown_share("database deadlock"), 0.0);
        assert_eq!(tokenizer.count("database deadlock"), 3);
    }
}
