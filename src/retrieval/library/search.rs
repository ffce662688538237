//! Hybrid search over the library: BM25 and vector candidates from the allowed knowledge
//! bases only, fused by Reciprocal Rank Fusion, returned with citations and each
//! retriever's rank and score; and which names a query asks about no allowed chunk mentions.

use std::collections::{HashMap, HashSet};

use super::super::fusion::{reciprocal_rank_fusion, FusedHit, RankedList};
use super::{Citation, Library, RetrieverRank, SearchHit, SearchMode};
use crate::retrieval::{words, RetrievalError};
use crate::store::CatalogChunk;

/// Candidates each retriever contributes before fusion.
const CANDIDATES: usize = 100;
/// Share of unknown tokens above which the embedding model cannot represent a query
/// (e.g. Chinese under an English-only model): the vector list is then left out.
const MAX_UNKNOWN_SHARE: f32 = 0.3;

impl Library {
    /// The words of `query` that could name a tool, product or setting (see
    /// [`words::name_candidates`]) and that no chunk of `kbs` (all when `None`) mentions:
    /// what the query asks about that these knowledge bases have never heard of.
    pub fn unmentioned_names(
        &self,
        query: &str,
        kbs: Option<&[String]>,
    ) -> Result<Vec<String>, RetrievalError> {
        let candidates = words::name_candidates(query);
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        let indexes = self.indexes.read().unwrap_or_else(|p| p.into_inner());
        Ok(indexes.bm25.unmentioned(&candidates, kbs)?)
    }

    /// Searches `kbs` (all when `None`).
    pub fn search(
        &self,
        query: &str,
        kbs: Option<&[String]>,
        mode: SearchMode,
        limit: usize,
    ) -> Result<Vec<SearchHit>, RetrievalError> {
        let query = query.trim();
        if query.is_empty() {
            return Err(RetrievalError::InvalidQuery("the query is empty".into()));
        }
        let indexes = self.indexes.read().unwrap_or_else(|p| p.into_inner());
        let candidates = CANDIDATES.max(limit);
        let mut lists: Vec<RankedList> = Vec::new();
        if mode != SearchMode::Vector {
            let hits = indexes.bm25.search(query, kbs, candidates)?;
            lists.push(RankedList {
                name: "bm25".into(),
                weight: self.config.bm25_weight,
                hits,
            });
        }
        let use_vectors = match mode {
            SearchMode::Bm25 => false,
            SearchMode::Vector => true,
            SearchMode::Hybrid => self.counter.unknown_share(query) <= MAX_UNKNOWN_SHARE,
        };
        if use_vectors {
            let vector = self
                .embedder
                .embed(vec![query.to_string()])?
                .into_iter()
                .next()
                .unwrap_or_default();
            let allowed: Option<HashSet<&str>> =
                kbs.map(|k| k.iter().map(String::as_str).collect());
            let allow = |id: u64| match (&allowed, indexes.chunk_kb.get(&id)) {
                (None, Some(_)) => true,
                (Some(set), Some(kb)) => set.contains(kb.as_str()),
                (_, None) => false,
            };
            let hits = indexes.vectors.search(&vector, candidates, &allow);
            lists.push(RankedList {
                name: "vector".into(),
                weight: self.config.vector_weight,
                hits,
            });
        }
        drop(indexes);
        let fused = reciprocal_rank_fusion(&lists, self.config.rrf_k, limit);
        let ids: Vec<u64> = fused.iter().map(|h| h.id).collect();
        let chunks: HashMap<u64, CatalogChunk> = self
            .catalog
            .chunks(&ids)?
            .into_iter()
            .map(|c| (c.id, c))
            .collect();
        let rank_of = |name: &str, hit: &FusedHit| {
            let index = lists.iter().position(|l| l.name == name)?;
            Some(RetrieverRank {
                rank: hit.ranks[index]?,
                score: hit.scores[index]?,
            })
        };
        Ok(fused
            .iter()
            .filter_map(|hit| {
                let chunk = chunks.get(&hit.id)?;
                Some(SearchHit {
                    chunk_id: hit.id,
                    score: hit.score,
                    text: chunk.text.clone(),
                    citation: citation(chunk),
                    bm25: rank_of("bm25", hit),
                    vector: rank_of("vector", hit),
                })
            })
            .collect())
    }
}

fn citation(chunk: &CatalogChunk) -> Citation {
    Citation {
        kb: chunk.kb.clone(),
        path: chunk.path.clone(),
        title: chunk.title.clone(),
        heading_path: serde_json::from_str(&chunk.heading_path).unwrap_or_default(),
        location: serde_json::from_str(&chunk.location).ok(),
    }
}
