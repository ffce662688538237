//! Incident diagnostics: an evidence-driven Plan-Execute-Replan graph run as a durable
//! `diagnostic` run. Data sources (scenario packs today, live systems later) sit behind
//! `DiagnosticSource`; ten read-only tools shape their records; playbooks declare the
//! candidate hypotheses and the fact rules that test them; the Fact Adapter, assessment,
//! Sufficiency Gate, Decision, validators and Policy Gate are code, and the model only
//! plans and checks under constraints. The scorer grades stored reports. Never touches
//! axum.

pub mod arguments;
pub mod assess;
pub mod decide;
pub mod driver;
pub mod facts;
pub mod faults;
pub mod graph;
pub mod live;
pub mod nginx_error;
pub mod pack;
pub mod planner;
pub mod playbooks;
pub mod report;
pub mod runner;
pub mod score;
pub mod source;
pub mod state;
pub mod tools;

pub use graph::GraphConfig;
pub use playbooks::Playbooks;
pub use runner::DiagnosticRunner;
pub use state::GRAPH_VERSION;
#[cfg(test)]
mod tests;
