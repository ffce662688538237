//! The retrieval layer's error type.

use std::path::PathBuf;

use super::bm25::Bm25Error;
use super::roots::PolicyError;
use super::safe_open::RootError;
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
    /// The knowledge base's folder is not the one that was added.
    #[error(transparent)]
    Root(#[from] RootError),
    /// The folder may not become a knowledge base (allowed roots, Warden's own folders).
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("a sync of knowledge base `{0}` is already running; wait for it or cancel it")]
    SyncInProgress(String),
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
