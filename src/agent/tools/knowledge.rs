//! `knowledge_retrieval`: hybrid search over the knowledge bases the caller may read.
//! Returns passages with their citations and whether each looks relevant, and the names the
//! query asks about that the readable knowledge bases never mention; the answer numbers
//! the passages [n]. Passages are data, never instructions.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{Tool, ToolContext, ToolInfo, ToolResult};
use crate::policy::Capability;
use crate::retrieval::{Location, SearchHit};
use crate::store::SideEffect;

/// A vector similarity at or above this makes a hit relevant.
pub const RELEVANT_VECTOR_SCORE: f32 = 0.35;
/// A BM25 rank at or above this (1 = best) makes a hit relevant.
const RELEVANT_BM25_RANK: usize = 3;
/// Most characters of one passage returned (a whole chunk: chunks hold at most 220
/// embedding tokens); the answer call shows the model an excerpt of it.
const MAX_PASSAGE_CHARS: usize = 1_500;
/// Hits returned by default and at most.
const DEFAULT_HITS: u64 = 3;
const MAX_HITS: u64 = 5;

/// One retrieved passage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Passage {
    /// The catalogue chunk (opens the passage viewer); 0 in results stored before it.
    #[serde(default)]
    pub chunk_id: u64,
    pub kb: String,
    pub path: String,
    pub title: Option<String>,
    pub heading_path: Vec<String>,
    pub location: Option<Value>,
    pub text: String,
    pub relevant: bool,
}

/// The tool's name, in calls and in the tool ledger.
pub const TOOL_NAME: &str = "knowledge_retrieval";

pub struct KnowledgeRetrieval(ToolInfo);

impl KnowledgeRetrieval {
    pub fn new() -> Self {
        Self(ToolInfo {
            name: TOOL_NAME,
            description: "Search the knowledge bases (runbooks, playbooks) for passages about \
                a topic. Arguments: query (the topic, a few words), limit (1-5 passages). \
                Returns numbered passages with their sources; cite them as [n]. Errors: \
                no_knowledge_base when none is loaded.",
            parameters: json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "minLength": 1, "maxLength": 300},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_HITS}
                },
                "required": ["query"],
                "additionalProperties": false
            }),
            side_effect: SideEffect::Read,
            capability: Capability::ReadKnowledge,
            timeout: Duration::from_secs(20),
        })
    }
}

impl Tool for KnowledgeRetrieval {
    fn info(&self) -> &ToolInfo {
        &self.0
    }

    fn call(&self, context: &ToolContext<'_>, arguments: &Value) -> ToolResult {
        let Some(search) = context.search.clone() else {
            return ToolResult::error("no_knowledge_base", "no knowledge base is loaded");
        };
        let query = arguments["query"].as_str().unwrap_or_default().to_owned();
        let limit = arguments["limit"]
            .as_u64()
            .unwrap_or(DEFAULT_HITS)
            .clamp(1, MAX_HITS);
        let readable = context.readable_kbs.map(<[String]>::to_vec);
        // The search runs on its own thread so that the call answers by its deadline; a
        // search still running then is left to finish with nobody waiting for it.
        let (sender, receiver) = mpsc::sync_channel(1);
        let spawned = std::thread::Builder::new()
            .name("knowledge-search".into())
            .spawn(move || {
                let found = search
                    .search(&query, readable.as_deref(), limit as usize)
                    .and_then(|hits| {
                        let unmentioned = search.unmentioned_names(&query, readable.as_deref())?;
                        Ok((hits, unmentioned))
                    });
                let _ = sender.send(found);
            });
        if let Err(err) = spawned {
            return ToolResult::error("search_failed", format!("cannot start the search: {err}"));
        }
        let wait = context
            .call_deadline
            .saturating_duration_since(Instant::now());
        let found = match receiver.recv_timeout(wait) {
            Ok(found) => found,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                return ToolResult::error(
                    "timeout",
                    format!("the search took longer than {} s", self.0.timeout.as_secs()),
                )
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return ToolResult::error("search_failed", "the search stopped without a result")
            }
        };
        match found {
            Ok((hits, unmentioned)) => {
                let passages: Vec<Passage> = hits.iter().map(passage).collect();
                let relevant = passages.iter().filter(|p| p.relevant).count();
                let mut summary = format!("{} passages, {relevant} relevant", passages.len());
                if !unmentioned.is_empty() {
                    summary.push_str(&format!(
                        "; the knowledge bases never mention {}",
                        unmentioned.join(", ")
                    ));
                }
                ToolResult::Ok {
                    data: json!({ "passages": passages, "unmentioned": unmentioned }),
                    summary,
                }
            }
            Err(err) => ToolResult::error("search_failed", err),
        }
    }
}

/// A search hit as the answer sees it.
pub fn passage(hit: &SearchHit) -> Passage {
    // Either retriever can vouch for a hit: a close embedding, or a top BM25 rank (a
    // paraphrase can sit under the vector threshold while naming the exact terms, and
    // Chinese text under an English embedding model has BM25 only). The answer path then
    // asks that the passage holds the question's terms.
    let relevant = hit
        .vector
        .as_ref()
        .is_some_and(|vector| vector.score >= RELEVANT_VECTOR_SCORE)
        || hit
            .bm25
            .as_ref()
            .is_some_and(|bm25| bm25.rank <= RELEVANT_BM25_RANK);
    Passage {
        chunk_id: hit.chunk_id,
        kb: hit.citation.kb.clone(),
        path: hit.citation.path.clone(),
        title: hit.citation.title.clone(),
        heading_path: hit.citation.heading_path.clone(),
        location: hit.citation.location.map(location_json),
        text: hit.text.chars().take(MAX_PASSAGE_CHARS).collect(),
        relevant,
    }
}

fn location_json(location: Location) -> Value {
    match location {
        Location::Lines { start, end } => json!({"lines": [start, end]}),
        Location::Pages { start, end } => json!({"pages": [start, end]}),
        Location::Paragraphs { start, end } => json!({"paragraphs": [start, end]}),
    }
}
