//! Reading the committed BM25 index: a user's plain text as a query (never query syntax),
//! scored with the statistics of only the knowledge bases searched, and which words no
//! readable chunk mentions.

use std::collections::BTreeMap;
use std::sync::Arc;

use tantivy::collector::TopDocs;
use tantivy::query::{
    Bm25StatisticsProvider, BooleanQuery, BoostQuery, ConstScoreQuery, Occur, Query, TermQuery,
    TermSetQuery,
};
use tantivy::schema::IndexRecordOption;
use tantivy::Term;

use super::{cjk, scope, Bm25Error, Bm25Index, CHUNK_ID, TITLE_BOOST};

impl Bm25Index {
    /// The committed chunks best matching `query`, best first, as `(chunk_id, score)`.
    /// The query is plain text, never query syntax: it goes through the same analyzer as
    /// the documents and any chunk sharing a term matches. `kbs` restricts the search to
    /// those knowledge bases (`Some(&[])` matches nothing). A query with no terms left
    /// after analysis (empty, punctuation, stop words) matches nothing.
    pub fn search(
        &self,
        query: &str,
        kbs: Option<&[String]>,
        limit: usize,
    ) -> Result<Vec<(u64, f32)>, Bm25Error> {
        let Some(query) = self.build_query(query, kbs) else {
            return Ok(Vec::new());
        };
        if limit == 0 {
            return Ok(Vec::new());
        }
        let searcher = self.reader.searcher();
        let collector = TopDocs::with_limit(limit).order_by_score();
        let top = match kbs {
            // Scored as if the index held only these knowledge bases.
            Some(kbs) => {
                let scope = self.scope(&searcher)?;
                let statistics = scope.statistics(&searcher, &self.fields, kbs);
                searcher.search_with_statistics_provider(&query, &collector, &statistics)
            }
            None => searcher.search(&query, &collector),
        }
        .map_err(self.tantivy_error("searching"))?;
        let mut columns = BTreeMap::new();
        let mut hits = Vec::with_capacity(top.len());
        for (score, address) in top {
            let column = match columns.entry(address.segment_ord) {
                std::collections::btree_map::Entry::Occupied(entry) => entry.into_mut(),
                std::collections::btree_map::Entry::Vacant(entry) => {
                    let fast_fields = searcher.segment_reader(address.segment_ord).fast_fields();
                    entry.insert(
                        fast_fields
                            .u64(CHUNK_ID)
                            .map_err(self.tantivy_error("reading chunk ids"))?,
                    )
                }
            };
            if let Some(chunk_id) = column.first(address.doc_id) {
                hits.push((chunk_id, score));
            }
        }
        Ok(hits)
    }

    /// The words of `words` that no committed chunk of `kbs` (all when `None`) mentions:
    /// no term the analyzer makes of the word is in the text of such a chunk (titles are
    /// folded into the text). A word the analyzer drops (a stop word) is never reported.
    pub fn unmentioned(
        &self,
        words: &[String],
        kbs: Option<&[String]>,
    ) -> Result<Vec<String>, Bm25Error> {
        if words.is_empty() {
            return Ok(Vec::new());
        }
        let searcher = self.reader.searcher();
        let scope = self.scope(&searcher)?;
        let every_kb;
        let kbs = match kbs {
            Some(kbs) => kbs,
            None => {
                every_kb = scope.knowledge_bases();
                &every_kb
            }
        };
        let statistics = scope.statistics(&searcher, &self.fields, kbs);
        let mut analyzer = self.analyzer.clone();
        let mut unmentioned = Vec::new();
        for word in words {
            let terms = cjk::analyze(&mut analyzer, word);
            let mut mentioned = terms.is_empty();
            for term in terms {
                let term = Term::from_field_text(self.fields.text, &term);
                let docs = statistics
                    .doc_freq(&term)
                    .map_err(self.tantivy_error("counting the chunks that hold a term"))?;
                if docs > 0 {
                    mentioned = true;
                    break;
                }
            }
            if !mentioned {
                unmentioned.push(word.clone());
            }
        }
        Ok(unmentioned)
    }

    fn scope(&self, searcher: &tantivy::Searcher) -> Result<Arc<scope::Scope>, Bm25Error> {
        let mut cached = self.scope.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(scope) = cached.as_ref() {
            return Ok(scope.clone());
        }
        let scope = Arc::new(
            scope::Scope::build(searcher, &self.fields)
                .map_err(self.tantivy_error("reading knowledge-base membership"))?,
        );
        *cached = Some(scope.clone());
        Ok(scope)
    }

    /// The query for `text`: each distinct term is a should-clause on the text field and a
    /// lightly weighted one on the title field, weighted by how often the query repeats it; a kb
    /// filter, when given, must match and adds nothing to the score.
    fn build_query(&self, text: &str, kbs: Option<&[String]>) -> Option<Box<dyn Query>> {
        let mut counts: BTreeMap<String, f32> = BTreeMap::new();
        for term in cjk::analyze(&mut self.analyzer.clone(), text) {
            *counts.entry(term).or_default() += 1.0;
        }
        if counts.is_empty() || kbs.is_some_and(|kbs| kbs.is_empty()) {
            return None;
        }
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::with_capacity(counts.len() * 2);
        for (term, count) in &counts {
            for (field, boost) in [(self.fields.text, 1.0), (self.fields.title, TITLE_BOOST)] {
                let term_query = TermQuery::new(
                    Term::from_field_text(field, term),
                    IndexRecordOption::WithFreqs,
                );
                clauses.push((Occur::Should, boosted(Box::new(term_query), boost * count)));
            }
        }
        let terms: Box<dyn Query> = Box::new(BooleanQuery::new(clauses));
        let Some(kbs) = kbs else {
            return Some(terms);
        };
        let kb_terms = kbs
            .iter()
            .map(|kb| Term::from_field_text(self.fields.kb, kb));
        let kb_filter = ConstScoreQuery::new(Box::new(TermSetQuery::new(kb_terms)), 0.0);
        Some(Box::new(BooleanQuery::new(vec![
            (Occur::Must, terms),
            (Occur::Must, Box::new(kb_filter)),
        ])))
    }
}

fn boosted(query: Box<dyn Query>, boost: f32) -> Box<dyn Query> {
    if boost == 1.0 {
        query
    } else {
        Box::new(BoostQuery::new(query, boost))
    }
}
