//! End-to-end tests through Warden's public interfaces (the CLI and the HTTP API) on the
//! real default models. One test binary; each module covers one capability.

mod util;

mod abuse;
mod agent;
mod answers;
mod authorization;
mod bad_model_files;
mod browser;
mod cli;
mod diagnostics;
mod incidents;
mod kb;
mod kb_access;
mod kb_hardening;
mod live_diagnostics;
mod live_metrics;
mod memory;
mod openai_client;
mod operability;
mod quotas;
mod runs;
mod serve;
mod sse;
mod tidy;
mod upstream;
