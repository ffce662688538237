//! Knowledge bases: folder ingestion that cannot be turned against the host (pinned roots,
//! no symlinks or special files, allowed roots, one cancellable sync per knowledge base),
//! text extraction within byte and time budgets, structure-aware chunking, tantivy BM25
//! with Chinese segmentation, HNSW vectors, Reciprocal Rank Fusion, and BEIR evaluation. Reaches models only through the `Embedder` and `TokenCounter` traits;
//! never touches axum.

mod error;
mod library;
mod sync_control;
mod sync_report;
mod types;

pub mod beir;
pub mod bm25;
pub mod chunk;
pub mod cjk;
pub mod extract;
pub mod fusion;
pub mod roots;
pub mod safe_open;
pub mod source;
pub mod vector;
pub mod words;

pub use error::RetrievalError;
pub use library::{
    Citation, InlineDocument, Library, RetrievalConfig, RetrieverRank, SearchHit, SearchMode,
};
pub use roots::{AddedBy, RootPolicy};
pub use sync_control::{SyncCanceller, SyncTicket};
pub use sync_report::{FailKind, Failed, KindCounts, Progress, SyncReport, SyncSummary};
pub use types::*;
