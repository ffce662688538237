//! BM25 statistics of only the knowledge bases a search may read. Tantivy scores with
//! document counts, token counts and term frequencies of the whole index, so a document in
//! a knowledge base the caller may not read would still change every allowed hit's score
//! (and so its rank). A `Scope` maps each live document of the committed snapshot to its
//! knowledge base and keeps per-knowledge-base totals; `ScopedStatistics` answers tantivy's
//! statistics questions counting allowed documents only, so a filtered search scores
//! exactly as an index holding only the allowed knowledge bases would.

use std::collections::HashMap;

use tantivy::query::Bm25StatisticsProvider;
use tantivy::schema::{Field, IndexRecordOption};
use tantivy::{DocSet, Searcher, Term, TERMINATED};

use super::Fields;

/// A document with no knowledge base (or deleted).
const NONE: u16 = u16::MAX;

#[derive(Debug, Clone, Copy, Default)]
struct Totals {
    docs: u64,
    text_tokens: u64,
    title_tokens: u64,
}

/// Which knowledge base each live document of one committed snapshot belongs to.
pub(super) struct Scope {
    ordinal: HashMap<String, u16>,
    totals: Vec<Totals>,
    /// Per segment, in the searcher's order: each document's knowledge-base ordinal.
    kb_of_doc: Vec<Vec<u16>>,
}

impl Scope {
    pub(super) fn build(searcher: &Searcher, fields: &Fields) -> tantivy::Result<Scope> {
        let mut scope = Scope {
            ordinal: HashMap::new(),
            totals: Vec::new(),
            kb_of_doc: Vec::with_capacity(searcher.segment_readers().len()),
        };
        for segment in searcher.segment_readers() {
            let mut kb_of = vec![NONE; segment.max_doc() as usize];
            let inverted = segment.inverted_index(fields.kb)?;
            let mut terms = inverted.terms().stream()?;
            while terms.advance() {
                let name = String::from_utf8_lossy(terms.key()).into_owned();
                let next = scope.ordinal.len();
                // More knowledge bases than ordinals: the rest count as none (never read).
                if next >= NONE as usize && !scope.ordinal.contains_key(&name) {
                    continue;
                }
                let ordinal = *scope.ordinal.entry(name).or_insert(next as u16);
                if scope.totals.len() <= ordinal as usize {
                    scope.totals.push(Totals::default());
                }
                let mut postings = inverted
                    .read_postings_from_terminfo(terms.value(), IndexRecordOption::Basic)?;
                let mut doc = postings.doc();
                while doc != TERMINATED {
                    if !segment.is_deleted(doc) {
                        if let Some(slot) = kb_of.get_mut(doc as usize) {
                            *slot = ordinal;
                        }
                    }
                    doc = postings.advance();
                }
            }
            let fast = segment.fast_fields();
            let text_tokens = fast.u64(super::TEXT_TOKENS)?;
            let title_tokens = fast.u64(super::TITLE_TOKENS)?;
            for (doc, &ordinal) in kb_of.iter().enumerate() {
                if ordinal == NONE {
                    continue;
                }
                let totals = &mut scope.totals[ordinal as usize];
                totals.docs += 1;
                totals.text_tokens += text_tokens.first(doc as u32).unwrap_or(0);
                totals.title_tokens += title_tokens.first(doc as u32).unwrap_or(0);
            }
            scope.kb_of_doc.push(kb_of);
        }
        Ok(scope)
    }

    /// Every knowledge base with a live document.
    pub(super) fn knowledge_bases(&self) -> Vec<String> {
        self.ordinal.keys().cloned().collect()
    }

    /// Statistics over the knowledge bases named in `kbs`.
    pub(super) fn statistics<'a>(
        &'a self,
        searcher: &'a Searcher,
        fields: &Fields,
        kbs: &[String],
    ) -> ScopedStatistics<'a> {
        let mut allowed = vec![false; self.totals.len()];
        for kb in kbs {
            if let Some(&ordinal) = self.ordinal.get(kb) {
                allowed[ordinal as usize] = true;
            }
        }
        ScopedStatistics {
            scope: self,
            searcher,
            allowed,
            text: fields.text,
            title: fields.title,
        }
    }
}

/// Tantivy's BM25 statistics, counting only documents of allowed knowledge bases.
pub(super) struct ScopedStatistics<'a> {
    scope: &'a Scope,
    searcher: &'a Searcher,
    allowed: Vec<bool>,
    text: Field,
    title: Field,
}

impl ScopedStatistics<'_> {
    fn allowed_totals(&self) -> impl Iterator<Item = &Totals> {
        self.scope
            .totals
            .iter()
            .zip(&self.allowed)
            .filter(|(_, &allowed)| allowed)
            .map(|(totals, _)| totals)
    }

    fn is_allowed(&self, segment: usize, doc: u32) -> bool {
        self.scope
            .kb_of_doc
            .get(segment)
            .and_then(|docs| docs.get(doc as usize))
            .is_some_and(|&ordinal| ordinal != NONE && self.allowed[ordinal as usize])
    }
}

impl Bm25StatisticsProvider for ScopedStatistics<'_> {
    fn total_num_tokens(&self, field: Field) -> tantivy::Result<u64> {
        let of = |totals: &Totals| {
            if field == self.text {
                totals.text_tokens
            } else if field == self.title {
                totals.title_tokens
            } else {
                0
            }
        };
        Ok(self.allowed_totals().map(of).sum())
    }

    fn total_num_docs(&self) -> tantivy::Result<u64> {
        Ok(self.allowed_totals().map(|t| t.docs).sum())
    }

    fn doc_freq(&self, term: &Term) -> tantivy::Result<u64> {
        let mut count = 0;
        for (index, segment) in self.searcher.segment_readers().iter().enumerate() {
            let inverted = segment.inverted_index(term.field())?;
            let Some(mut postings) = inverted.read_postings(term, IndexRecordOption::Basic)? else {
                continue;
            };
            let mut doc = postings.doc();
            while doc != TERMINATED {
                if self.is_allowed(index, doc) {
                    count += 1;
                }
                doc = postings.advance();
            }
        }
        Ok(count)
    }
}
