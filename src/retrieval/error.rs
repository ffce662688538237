//! The retrieval layer's error type.

use std::path::PathBuf;

use super::bm25::Bm25Error;
use super::source::SourceError;
use super::vector::VectorError;
use super::EmbedError;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum RetrievalError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Bm25(#[from] Bm25Error),
    #[error(transparent)]
    Vector(#[from] VectorError),
    #[error(transparent)]
    Embed(#[from] EmbedError),
    #[error("{0}")]
    InvalidQuery(String),
    #[error("cancelled")]
    Cancelled,
}
