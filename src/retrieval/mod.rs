//! Knowledge bases: folder ingestion, text extraction, structure-aware chunking, tantivy
//! BM25 with Chinese segmentation, HNSW vectors, Reciprocal Rank Fusion, and BEIR
//! evaluation. Reaches models only through the `Embedder` and `TokenCounter` traits;
//! never touches axum.

mod error;
mod library;
mod types;

pub mod beir;
pub mod bm25;
pub mod chunk;
pub mod cjk;
pub mod extract;
pub mod fusion;
pub mod source;
pub mod vector;

pub use error::RetrievalError;
pub use library::{
    Citation, Failed, InlineDocument, Library, Progress, RetrievalConfig, RetrieverRank, SearchHit,
    SearchMode, SyncReport,
};
pub use types::*;
