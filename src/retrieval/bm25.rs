//! BM25 keyword search over chunks: one tantivy index per directory. Owns the tantivy
//! schema, the single writer and the manually reloaded reader, the commit payload that
//! records which catalogue generation the index reflects, and the translation of raw user
//! text into a term query that cannot fail to parse. Never touches the SQLite catalogue
//! (the source of truth) or vectors.

mod query;
mod scope;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tantivy::directory::MmapDirectory;
use tantivy::schema::{
    Field, IndexRecordOption, NumericOptions, Schema, TextFieldIndexing, TextOptions, STRING,
};
use tantivy::tokenizer::TextAnalyzer;
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, TantivyError, Term};

use super::cjk;

/// Memory the writer may use before it flushes a segment, shared by its threads.
pub const WRITER_MEMORY_BYTES: usize = 50_000_000;

/// How much a query term found in a chunk's title adds, against 1.0 for the text field.
/// The title is also indexed as part of the text, so this is only a small bonus. Tuned on
/// SciFact train (nDCG@10): title only in its own field, boost 1.0: 0.673, 0.5: 0.695;
/// title folded into the text, no title field: 0.698; folded plus title field at 0.2:
/// 0.702, at 0.5: 0.693, at 1.0: 0.668.
pub const TITLE_BOOST: f32 = 0.2;

const CHUNK_ID: &str = "chunk_id";
const KB: &str = "kb";
const TITLE: &str = "title";
const TEXT: &str = "text";
/// Tokens the analyzer makes of a chunk's text field and title field (scoped statistics).
const TEXT_TOKENS: &str = "text_tokens";
const TITLE_TOKENS: &str = "title_tokens";
const META_FILE: &str = "meta.json";

/// One chunk as the BM25 index sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bm25Doc {
    pub chunk_id: u64,
    /// The knowledge base the chunk belongs to (matched exactly when filtering).
    pub kb: String,
    /// Heading path and document title.
    pub title: String,
    pub text: String,
}

/// What went wrong, and in which index directory.
#[derive(Debug, thiserror::Error)]
pub enum Bm25Error {
    #[error("BM25 index {}: {operation}", dir.display())]
    Tantivy {
        dir: PathBuf,
        operation: &'static str,
        #[source]
        source: TantivyError,
    },
    /// Another process (usually a running `warden serve`) holds the index writer.
    #[error(
        "the knowledge-base index {} is in use by another Warden process (a running server?): \
         stop it, or use the server's /api/kb endpoints instead",
        dir.display()
    )]
    Busy { dir: PathBuf },
    #[error("BM25 index {}: {operation}", dir.display())]
    Io {
        dir: PathBuf,
        operation: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// A BM25 index of chunks with one open writer. Changes become visible to `search` and
/// durable only at [`Bm25Index::commit`].
pub struct Bm25Index {
    dir: PathBuf,
    writer: IndexWriter<TantivyDocument>,
    reader: IndexReader,
    fields: Fields,
    analyzer: TextAnalyzer,
    generation: Option<u64>,
    /// Knowledge-base membership of the committed snapshot, built at the first filtered
    /// search after a commit.
    scope: Mutex<Option<Arc<scope::Scope>>>,
}

impl Bm25Index {
    /// Opens the index in `dir`, creating the directory and an empty index if missing. An
    /// index that cannot be used (another schema, a corrupt meta file) is discarded and
    /// recreated empty, with no generation, so the caller rebuilds it from the catalogue.
    pub fn open(dir: &Path) -> Result<Self, Bm25Error> {
        match Self::open_or_create(dir) {
            Err(Bm25Error::Tantivy { source, .. })
                if is_unusable_index(&source) && dir.join(META_FILE).exists() =>
            {
                tracing::warn!(dir = %dir.display(), error = %source, "discarding unusable BM25 index; it will be rebuilt");
                std::fs::remove_dir_all(dir)
                    .map_err(io_error(dir, "removing the unusable index"))?;
                Self::open_or_create(dir)
            }
            result => result,
        }
    }

    /// Adds chunks, replacing any indexed chunk with the same id.
    pub fn add(&mut self, docs: &[Bm25Doc]) -> Result<(), Bm25Error> {
        for doc in docs {
            self.writer
                .delete_term(Term::from_field_u64(self.fields.chunk_id, doc.chunk_id));
            let mut document = TantivyDocument::default();
            document.add_u64(self.fields.chunk_id, doc.chunk_id);
            document.add_text(self.fields.kb, &doc.kb);
            document.add_text(self.fields.title, &doc.title);
            // Two values of one field are indexed as if concatenated, so the title's words
            // count in the text's BM25 too (with the text's length normalisation).
            document.add_text(self.fields.text, &doc.title);
            document.add_text(self.fields.text, &doc.text);
            let title_tokens = count_tokens(&mut self.analyzer, &doc.title);
            let text_tokens = title_tokens + count_tokens(&mut self.analyzer, &doc.text);
            document.add_u64(self.fields.text_tokens, text_tokens);
            document.add_u64(self.fields.title_tokens, title_tokens);
            self.writer
                .add_document(document)
                .map_err(self.tantivy_error("adding a document"))?;
        }
        Ok(())
    }

    /// Removes the chunks with these ids (unknown ids are ignored). Cannot fail today;
    /// the `Result` keeps callers ready for a writer that can.
    pub fn delete_chunks(&mut self, ids: &[u64]) -> Result<(), Bm25Error> {
        for &id in ids {
            self.writer
                .delete_term(Term::from_field_u64(self.fields.chunk_id, id));
        }
        Ok(())
    }

    /// Removes every chunk of one knowledge base. Cannot fail today, like `delete_chunks`.
    pub fn delete_kb(&mut self, kb: &str) -> Result<(), Bm25Error> {
        self.writer
            .delete_term(Term::from_field_text(self.fields.kb, kb));
        Ok(())
    }

    /// Removes every chunk.
    pub fn clear(&mut self) -> Result<(), Bm25Error> {
        self.writer
            .delete_all_documents()
            .map_err(self.tantivy_error("deleting all documents"))?;
        Ok(())
    }

    /// Makes the changes so far durable and visible, recording the catalogue `generation`
    /// they reflect. After an error the index should be reopened.
    pub fn commit(&mut self, generation: u64) -> Result<(), Bm25Error> {
        let payload = serde_json::to_string(&CommitPayload { generation })
            .expect("a struct of one u64 serializes");
        let mut prepared = self
            .writer
            .prepare_commit()
            .map_err(tantivy_error(&self.dir, "preparing a commit"))?;
        prepared.set_payload(&payload);
        prepared
            .commit()
            .map_err(tantivy_error(&self.dir, "committing"))?;
        self.reader
            .reload()
            .map_err(self.tantivy_error("reloading the reader"))?;
        *self.scope.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.generation = Some(generation);
        Ok(())
    }

    /// The catalogue generation of the last commit; `None` for an index never committed
    /// by Warden (new, recreated, or from an unknown writer).
    pub fn generation(&self) -> Option<u64> {
        self.generation
    }

    /// How many chunks the last commit holds.
    pub fn num_docs(&self) -> u64 {
        self.reader.searcher().num_docs()
    }

    fn open_or_create(dir: &Path) -> Result<Self, Bm25Error> {
        std::fs::create_dir_all(dir).map_err(io_error(dir, "creating the directory"))?;
        let directory = MmapDirectory::open(dir)
            .map_err(|e| tantivy_error(dir, "opening the directory")(e.into()))?;
        let index = Index::builder()
            .schema(schema())
            .open_or_create(directory)
            .map_err(tantivy_error(dir, "opening the index"))?;
        cjk::register(index.tokenizers());
        let fields = Fields::of(&index.schema());
        let generation = index
            .load_metas()
            .map_err(tantivy_error(dir, "reading the commit metadata"))?
            .payload
            .and_then(|payload| serde_json::from_str::<CommitPayload>(&payload).ok())
            .map(|payload| payload.generation);
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(tantivy_error(dir, "opening a reader"))?;
        let writer = index
            .writer(WRITER_MEMORY_BYTES)
            .map_err(|source| match source {
                TantivyError::LockFailure(..) => Bm25Error::Busy {
                    dir: dir.to_path_buf(),
                },
                other => tantivy_error(dir, "opening the writer")(other),
            })?;
        Ok(Bm25Index {
            dir: dir.to_path_buf(),
            writer,
            reader,
            fields,
            analyzer: cjk::text_analyzer(),
            generation,
            scope: Mutex::new(None),
        })
    }

    fn tantivy_error(
        &self,
        operation: &'static str,
    ) -> impl FnOnce(TantivyError) -> Bm25Error + '_ {
        tantivy_error(&self.dir, operation)
    }
}

/// What each commit records besides the documents.
#[derive(Serialize, Deserialize)]
struct CommitPayload {
    generation: u64,
}

#[derive(Debug, Clone, Copy)]
struct Fields {
    chunk_id: Field,
    kb: Field,
    title: Field,
    text: Field,
    text_tokens: Field,
    title_tokens: Field,
}

impl Fields {
    fn of(schema: &Schema) -> Fields {
        let field = |name| {
            schema
                .get_field(name)
                .expect("the index was opened with schema()")
        };
        Fields {
            chunk_id: field(CHUNK_ID),
            kb: field(KB),
            title: field(TITLE),
            text: field(TEXT),
            text_tokens: field(TEXT_TOKENS),
            title_tokens: field(TITLE_TOKENS),
        }
    }
}

/// The schema: the chunk id (to return and to delete by), the kb (to filter and delete
/// by), the analyzed title, and the analyzed title-and-text (neither stored: the catalogue
/// holds the text), and the token counts of both (for statistics scoped to some kbs).
fn schema() -> Schema {
    let mut builder = Schema::builder();
    builder.add_u64_field(
        CHUNK_ID,
        NumericOptions::default()
            .set_indexed()
            .set_fast()
            .set_stored(),
    );
    builder.add_text_field(KB, STRING);
    let analyzed = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(cjk::ANALYZER_NAME)
            .set_index_option(IndexRecordOption::WithFreqsAndPositions),
    );
    builder.add_text_field(TITLE, analyzed.clone());
    builder.add_text_field(TEXT, analyzed);
    for counts in [TEXT_TOKENS, TITLE_TOKENS] {
        builder.add_u64_field(counts, NumericOptions::default().set_fast());
    }
    builder.build()
}

/// Tokens the analyzer makes of `text`, as tantivy counts them for BM25.
fn count_tokens(analyzer: &mut TextAnalyzer, text: &str) -> u64 {
    let mut stream = analyzer.token_stream(text);
    let mut count = 0;
    while stream.advance() {
        count += 1;
    }
    count
}

/// Errors that mean the files are not an index this code can use, as opposed to errors
/// of the environment (permissions, a held lock, a full disk).
fn is_unusable_index(error: &TantivyError) -> bool {
    matches!(
        error,
        TantivyError::SchemaError(_)
            | TantivyError::DataCorruption(_)
            | TantivyError::IncompatibleIndex(_)
            | TantivyError::DeserializeError(_)
            | TantivyError::OpenReadError(_)
    )
}

fn tantivy_error<'a>(
    dir: &'a Path,
    operation: &'static str,
) -> impl FnOnce(TantivyError) -> Bm25Error + 'a {
    move |source| Bm25Error::Tantivy {
        dir: dir.to_path_buf(),
        operation,
        source,
    }
}

fn io_error<'a>(
    dir: &'a Path,
    operation: &'static str,
) -> impl FnOnce(std::io::Error) -> Bm25Error + 'a {
    move |source| Bm25Error::Io {
        dir: dir.to_path_buf(),
        operation,
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(chunk_id: u64, kb: &str, title: &str, text: &str) -> Bm25Doc {
        Bm25Doc {
            chunk_id,
            kb: kb.to_owned(),
            title: title.to_owned(),
            text: text.to_owned(),
        }
    }

    fn sample_index(dir: &Path) -> Bm25Index {
        let mut index = Bm25Index::open(dir).unwrap();
        index
            .add(&[
                doc(
                    1,
                    "ops",
                    "PostgreSQL > Locks",
                    "Deadlocks are detected by PostgreSQL after deadlock_timeout.",
                ),
                doc(
                    2,
                    "ops",
                    "Backups",
                    "Nightly backups are written to the NAS.",
                ),
                doc(3, "dev", "数据库", "数据库死锁的排查方法：查看锁等待图。"),
                doc(4, "dev", "Rust", "The borrow checker rejects the program."),
            ])
            .unwrap();
        index.commit(7).unwrap();
        index
    }

    fn ids(hits: &[(u64, f32)]) -> Vec<u64> {
        hits.iter().map(|&(id, _)| id).collect()
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("warden-bm25-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn finds_english_by_stem_and_chinese_by_word() {
        let dir = temp_dir("find");
        let index = sample_index(&dir);
        assert_eq!(
            ids(&index.search("how to find a deadlock", None, 10).unwrap()),
            [1]
        );
        assert_eq!(ids(&index.search("死锁怎么排查", None, 10).unwrap()), [3]);
        assert_eq!(ids(&index.search("backup", None, 10).unwrap()), [2]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_word_is_unmentioned_when_no_readable_chunk_holds_it() {
        let dir = temp_dir("unmentioned");
        let mut index = sample_index(&dir);
        let words = |list: &[&str]| list.iter().map(|w| w.to_string()).collect::<Vec<_>>();
        let asked = words(&["deadlock_timeout", "borrow", "hostnamectl", "the"]);
        // By stem ("Deadlocks" holds "deadlock"), across knowledge bases when unscoped.
        assert_eq!(index.unmentioned(&asked, None).unwrap(), ["hostnamectl"]);
        // Scoped: what only another knowledge base says counts as unmentioned.
        assert_eq!(
            index
                .unmentioned(&asked, Some(&["ops".to_owned()]))
                .unwrap(),
            ["borrow", "hostnamectl"]
        );
        assert_eq!(
            index
                .unmentioned(&words(&["deadlocks"]), Some(&[]))
                .unwrap(),
            ["deadlocks"]
        );
        // Deleted chunks mention nothing.
        index.delete_chunks(&[4]).unwrap();
        index.commit(8).unwrap();
        assert_eq!(
            index.unmentioned(&words(&["borrow"]), None).unwrap(),
            ["borrow"]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn query_syntax_is_plain_text() {
        let dir = temp_dir("syntax");
        let index = sample_index(&dir);
        for query in [
            "foo:bar (",
            "\"",
            "text:deadlock",
            "AND OR NOT",
            "*",
            "-",
            "kb:ops",
            "[1 TO 2]",
            "^2",
        ] {
            index.search(query, None, 10).unwrap();
        }
        assert_eq!(
            ids(&index.search("text:deadlock (", None, 10).unwrap()),
            [1]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn empty_and_stop_word_queries_match_nothing() {
        let dir = temp_dir("empty");
        let index = sample_index(&dir);
        for query in ["", "   ", "the of and", "。，？"] {
            assert!(
                index.search(query, None, 10).unwrap().is_empty(),
                "{query:?}"
            );
        }
        assert!(index.search("deadlock", None, 0).unwrap().is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn kb_filter_restricts_and_never_adds_unmatched_chunks() {
        let dir = temp_dir("kb");
        let index = sample_index(&dir);
        let ops = ["ops".to_owned()];
        let both = ["ops".to_owned(), "dev".to_owned()];
        assert_eq!(
            ids(&index.search("deadlock 死锁", Some(&ops), 10).unwrap()),
            [1]
        );
        let mut found = ids(&index.search("deadlock 死锁", Some(&both), 10).unwrap());
        found.sort();
        assert_eq!(found, [1, 3]);
        assert!(index.search("deadlock", Some(&[]), 10).unwrap().is_empty());
        assert!(index
            .search("deadlock", Some(&["none".to_owned()]), 10)
            .unwrap()
            .is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_filtered_search_scores_as_if_only_the_allowed_kbs_existed() {
        let docs = |kb: &str, offset: u64| {
            vec![
                doc(
                    offset + 1,
                    kb,
                    "Locks",
                    "deadlock detection waits for deadlock_timeout",
                ),
                doc(
                    offset + 2,
                    kb,
                    "Backups",
                    "deadlock free backups run nightly",
                ),
                doc(
                    offset + 3,
                    kb,
                    "Pools",
                    "connection pool exhausted under load",
                ),
            ]
        };
        // The forbidden kb is full of the query's words: unscoped, it would lower their IDF.
        let forbidden: Vec<Bm25Doc> = (0..20)
            .map(|i| doc(100 + i, "secret", "Deadlock", "deadlock deadlock pool load"))
            .collect();
        let mixed_dir = temp_dir("scope-mixed");
        let mut mixed = Bm25Index::open(&mixed_dir).unwrap();
        mixed.add(&docs("ops", 0)).unwrap();
        mixed.add(&forbidden).unwrap();
        mixed
            .add(&[doc(9, "ops", "Gone", "deadlock pool")])
            .unwrap();
        mixed.commit(1).unwrap();
        mixed.delete_chunks(&[9]).unwrap();
        mixed.commit(2).unwrap();
        let alone_dir = temp_dir("scope-alone");
        let mut alone = Bm25Index::open(&alone_dir).unwrap();
        alone.add(&docs("ops", 0)).unwrap();
        alone.commit(1).unwrap();
        let ops = ["ops".to_owned()];
        for query in [
            "deadlock pool load",
            "backups",
            "connection deadlock_timeout",
        ] {
            let scoped = mixed.search(query, Some(&ops), 10).unwrap();
            let reference = alone.search(query, None, 10).unwrap();
            assert_eq!(scoped, reference, "{query}");
            assert!(!scoped.is_empty());
        }
        // The token totals match tantivy's own count.
        let searcher = alone.reader.searcher();
        let scope = scope::Scope::build(&searcher, &alone.fields).unwrap();
        let statistics = scope.statistics(&searcher, &alone.fields, &ops);
        use tantivy::query::Bm25StatisticsProvider;
        for field in [alone.fields.text, alone.fields.title] {
            assert_eq!(
                statistics.total_num_tokens(field).unwrap(),
                Bm25StatisticsProvider::total_num_tokens(&searcher, field).unwrap()
            );
        }
        std::fs::remove_dir_all(&mixed_dir).unwrap();
        std::fs::remove_dir_all(&alone_dir).unwrap();
    }

    #[test]
    fn title_matches_count() {
        let dir = temp_dir("title");
        let index = sample_index(&dir);
        assert_eq!(ids(&index.search("locks", None, 10).unwrap()), [1]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn deletes_and_replacements_show_after_commit() {
        let dir = temp_dir("delete");
        let mut index = sample_index(&dir);
        index.delete_chunks(&[1]).unwrap();
        assert_eq!(
            ids(&index.search("deadlock", None, 10).unwrap()),
            [1],
            "not committed yet"
        );
        index.commit(8).unwrap();
        assert!(index.search("deadlock", None, 10).unwrap().is_empty());
        index
            .add(&[doc(2, "ops", "Backups", "Backups moved to tape.")])
            .unwrap();
        index.commit(9).unwrap();
        assert_eq!(ids(&index.search("tape", None, 10).unwrap()), [2]);
        assert!(
            index.search("NAS", None, 10).unwrap().is_empty(),
            "replaced, not duplicated"
        );
        index.delete_kb("dev").unwrap();
        index.commit(10).unwrap();
        assert!(index.search("死锁", None, 10).unwrap().is_empty());
        assert_eq!(index.num_docs(), 1);
        index.clear().unwrap();
        index.commit(11).unwrap();
        assert_eq!(index.num_docs(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn generation_survives_reopen_and_uncommitted_changes_do_not() {
        let dir = temp_dir("generation");
        {
            let mut index = Bm25Index::open(&dir).unwrap();
            assert_eq!(index.generation(), None);
            index.add(&[doc(1, "ops", "", "committed text")]).unwrap();
            index.commit(41).unwrap();
            index.add(&[doc(2, "ops", "", "uncommitted text")]).unwrap();
        }
        let index = Bm25Index::open(&dir).unwrap();
        assert_eq!(index.generation(), Some(41));
        assert_eq!(ids(&index.search("text", None, 10).unwrap()), [1]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unusable_index_is_recreated_empty() {
        let dir = temp_dir("corrupt");
        drop(sample_index(&dir));
        std::fs::write(dir.join(META_FILE), b"{ not json").unwrap();
        let index = Bm25Index::open(&dir).unwrap();
        assert_eq!(index.generation(), None);
        assert_eq!(index.num_docs(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_index_can_be_shared_between_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Bm25Index>();
    }
}
