//! Warden: a self-hosted AI assistant for air-gapped networks, in one binary.
//!
//! Code map (each module owns one thing and never touches what is listed after it):
//! - `config`: flags and environment → one validated configuration (nobody else reads env).
//! - `engine`: models (Warden's CPU decoder on its own quantized kernels in `engine::quant`,
//!   candle elsewhere), tokenizers, chat templates, sampling, constrained decoding,
//!   inference worker threads. Never touches axum or SQLite.
//! - `upstream`: chat models served by OpenAI-compatible engines the admin configured
//!   (vLLM, TGI, llama.cpp's server, Ollama, another Warden), as ordinary chat-model
//!   handles: streaming, timeouts, bounded concurrency, failover, circuit breakers, schema
//!   checks with one repair. Never touches axum or SQL.
//! - `model_files`: the model manifest, model references (paths, `hf://`), sha256 checks.
//! - `http`: axum router, auth (sessions, tokens, CSRF, roles), OpenAI-compatible wire
//!   types, conversations/runs/audit routes, SSE framing, the embedded UI, error → status
//!   mapping. Never touches tensors or SQL.
//! - `retrieval`: knowledge bases: folder ingestion (through pinned folder handles, under
//!   the root policy, one cancellable sync per knowledge base), extraction within byte and
//!   time budgets, chunking, tantivy BM25, HNSW vectors, RRF fusion, BEIR evaluation.
//!   Reaches models only through its `Embedder` and `TokenCounter` traits; never touches
//!   axum.
//! - `store`: all SQL (SQLite): migrations, the knowledge-base catalogue, accounts,
//!   sessions, conversations, runs with leases and gapless event logs, the audit log.
//! - `runs`: run lifecycle: worker threads claiming runs under a lease, crash resume from
//!   the event log, cancellation, the closed public event set and its bus. Never touches
//!   axum or model internals.
//! - `agent`: what a chat turn does: input safety, intent router, execution policy, tool
//!   registry and catalog, direct reads, pending actions, bounded structured ReAct with
//!   cited knowledge answers. Never touches axum, SQL or candle.
//! - `llm`: the chat-model seam (a trait over the engine's model thread) and one model call
//!   polled on a run worker's thread, free text or schema-constrained JSON; used by the
//!   agent and the diagnostic graph alike.
//! - `diagnostics`: incident diagnostics: scenario packs, data sources, the read-only
//!   diagnostic tools. Never touches axum.
//! - `build_info`: version and commit of the binary.
//! - `trace`: trace ids (from `traceparent` or generated) and the thread's current one,
//!   which the store records on runs and audit rows.
//! - `metrics`: the Prometheus registry every layer reports to, and its text exposition.
//! - `public_text`: messages for users who are not admins, without internal file paths.
//! - `timefmt`: RFC 3339 times to seconds since the epoch and back (UTC).
//! - `knowledge`: wiring of retrieval to the store and the engine's embedding model, and the
//!   knowledge-search seam the agent and the diagnostic graph read through.
//! - `cli`: the commands (`serve`, `ask`, `models`, `bench`, `kb`, `eval`).

// Input from users, files and the network is never unwrapped; tests may.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod agent;
pub mod build_info;
pub mod cli;
pub mod config;
pub mod diagnostics;
pub mod engine;
pub mod http;
pub mod knowledge;
pub mod llm;
pub mod metrics;
pub mod model_files;
pub mod policy;
pub mod public_text;
pub mod retrieval;
pub mod runs;
pub mod store;
pub mod timefmt;
pub mod trace;
pub mod upstream;
