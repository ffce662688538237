//! Warden: a self-hosted AI assistant for air-gapped networks, in one binary.
//!
//! Code map (each module owns one thing and never touches what is listed after it):
//! - `config`: flags and environment → one validated configuration (nobody else reads env).
//! - `engine`: candle models, tokenizers, chat templates, sampling, constrained decoding,
//!   inference worker threads. Never touches axum or SQLite.
//! - `model_files`: the model manifest, model references (paths, `hf://`), sha256 checks.
//! - `http`: axum router, OpenAI-compatible wire types, error → status mapping. Never
//!   touches tensors.
//! - `retrieval`: knowledge bases: folder ingestion, extraction, chunking, tantivy BM25,
//!   HNSW vectors, RRF fusion, BEIR evaluation. Reaches models only through its
//!   `Embedder` and `TokenCounter` traits; never touches axum.
//! - `store`: all SQL (SQLite): migrations, the knowledge-base catalogue.
//! - `knowledge`: wiring of retrieval to the store and the engine's embedding model.
//! - `cli`: the commands (`serve`, `ask`, `models`, `bench`, `kb`, `eval`).

pub mod cli;
pub mod config;
pub mod engine;
pub mod http;
pub mod knowledge;
pub mod model_files;
pub mod retrieval;
pub mod store;
