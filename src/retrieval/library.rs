//! The knowledge-base service: add, sync, remove, list and search knowledge bases. Owns the
//! BM25 and vector indexes and keeps them consistent with the SQLite catalogue: every sync
//! batch writes the indexes first, tagged with a new generation, and commits the catalogue
//! last; at open, an index whose generation differs from the catalogue's is rebuilt from
//! the catalogue (texts and embeddings are stored there), so a crash never leaves them
//! out of step. Folders are read through their pinned root (`safe_open`), one sync per
//! knowledge base at a time (`sync_control`), each file within its time budget.
//! Synchronous: callers run it on blocking threads.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use serde::Serialize;

use super::bm25::{Bm25Doc, Bm25Index};
use super::chunk::{chunk_document, ChunkConfig};
use super::extract::{check_deadline, extract_within, ExtractError, ExtractLimits};
use super::roots::{AddedBy, RootPolicy};
use super::safe_open::{FileIdentity, OpenRefusal, RootDir};
use super::source::{self, Skipped, SourceFile, MAX_FILE_BYTES};
use super::sync_control::{SyncRegistry, SyncTicket};
use super::sync_report::{FailKind, Failed, Progress, SyncReport};
use super::vector::VectorIndex;
use super::{Chunk, Document, Embedder, Location, RetrievalError, TokenCounter};
use crate::store::{CatalogChunk, ChunkRecord, DocumentChange, KbCatalog, KnowledgeBaseRecord};

/// Documents per index/catalogue commit: a crash loses at most one batch of work.
const DOCUMENTS_PER_BATCH: usize = 64;
/// Tombstoned share of the vector index that triggers a rebuild from the catalogue.
const MAX_TOMBSTONE_SHARE: f64 = 0.2;

/// How results are retrieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum SearchMode {
    Bm25,
    Vector,
    Hybrid,
}

/// Fusion and retrieval settings.
#[derive(Debug, Clone)]
pub struct RetrievalConfig {
    pub rrf_k: f64,
    pub bm25_weight: f64,
    pub vector_weight: f64,
    pub chunking: ChunkConfig,
    pub extract_limits: ExtractLimits,
    /// Most chunks one sync indexes; the files after that are reported and left for the
    /// next sync (which skips what this one indexed, so it goes on where this one stopped).
    pub max_chunks_per_sync: usize,
    /// Which folders may be added, by whom.
    pub roots: RootPolicy,
}

impl Default for RetrievalConfig {
    fn default() -> Self {
        Self {
            rrf_k: 60.0,
            bm25_weight: 1.0,
            vector_weight: 1.0,
            chunking: ChunkConfig::default(),
            extract_limits: ExtractLimits::default(),
            max_chunks_per_sync: 100_000,
            roots: RootPolicy::default(),
        }
    }
}

/// One retriever's view of a hit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RetrieverRank {
    pub rank: usize,
    pub score: f32,
}

/// Where a hit comes from, precisely enough to open the source at the right place.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Citation {
    pub kb: String,
    pub path: String,
    pub title: Option<String>,
    pub heading_path: Vec<String>,
    pub location: Option<Location>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchHit {
    pub chunk_id: u64,
    pub score: f64,
    pub text: String,
    pub citation: Citation,
    pub bm25: Option<RetrieverRank>,
    pub vector: Option<RetrieverRank>,
}

/// A document handed in directly (evaluation corpora), not read from a folder.
pub struct InlineDocument {
    pub path: String,
    pub document: Document,
}

pub struct Library {
    catalog: Arc<dyn KbCatalog + Send + Sync>,
    embedder: Arc<dyn Embedder>,
    counter: Arc<dyn TokenCounter>,
    config: RetrievalConfig,
    dir: PathBuf,
    indexes: RwLock<Indexes>,
    /// One index writer (sync or remove) at a time.
    writer: Mutex<()>,
    /// The syncs in progress: one per knowledge base, each cancellable.
    syncs: SyncRegistry,
}

struct Indexes {
    bm25: Bm25Index,
    vectors: VectorIndex,
    /// Which knowledge base each indexed chunk belongs to (vector filtering).
    chunk_kb: HashMap<u64, String>,
}

impl Library {
    /// Opens the indexes under `dir`, rebuilding any that lag behind the catalogue.
    pub fn open(
        dir: &Path,
        catalog: Arc<dyn KbCatalog + Send + Sync>,
        embedder: Arc<dyn Embedder>,
        counter: Arc<dyn TokenCounter>,
        config: RetrievalConfig,
    ) -> Result<Self, RetrievalError> {
        std::fs::create_dir_all(dir).map_err(|e| RetrievalError::Io {
            path: dir.to_path_buf(),
            source: e,
        })?;
        let generation = catalog.generation()?;
        let mut bm25 = Bm25Index::open(&dir.join("bm25"))?;
        let loaded = VectorIndex::load(&dir.join("vectors"))?;
        // A fresh folder (nothing saved, nothing catalogued) is current as it is.
        let vectors_current = match &loaded {
            // A different embedding model (other width) means every vector must be redone
            // from the catalogue: treat it like a stale index.
            Some((index, saved)) => {
                *saved == generation && index.dimensions() == embedder.dimensions()
            }
            None => generation == 0,
        };
        let mut vectors = match loaded {
            Some((index, _)) if vectors_current => index,
            _ => VectorIndex::new(embedder.dimensions()),
        };
        let bm25_current = bm25.generation().unwrap_or(0) == generation;
        let mut chunk_kb = HashMap::new();
        if !bm25_current {
            bm25.clear()?;
        }
        let mut batch: Vec<Bm25Doc> = Vec::new();
        catalog.for_each_chunk(&mut |chunk, embedding| {
            chunk_kb.insert(chunk.id, chunk.kb.clone());
            if !vectors_current {
                vectors
                    .insert(chunk.id, &embedding)
                    .map_err(|e| crate::store::StoreError::Corrupt(e.to_string()))?;
            }
            if !bm25_current {
                batch.push(bm25_doc(&chunk));
            }
            Ok(())
        })?;
        if !bm25_current {
            tracing::warn!(generation, "BM25 index behind the catalogue: rebuilt");
            bm25.add(&batch)?;
            bm25.commit(generation)?;
        }
        if !vectors_current {
            tracing::warn!(generation, "vector index behind the catalogue: rebuilt");
            vectors.save(&dir.join("vectors"), generation)?;
        }
        Ok(Self {
            catalog,
            embedder,
            counter,
            config,
            dir: dir.to_path_buf(),
            indexes: RwLock::new(Indexes {
                bm25,
                vectors,
                chunk_kb,
            }),
            writer: Mutex::new(()),
            syncs: SyncRegistry::default(),
        })
    }

    pub fn list(&self) -> Result<Vec<KnowledgeBaseRecord>, RetrievalError> {
        Ok(self.catalog.knowledge_bases()?)
    }

    /// Registers a folder as a knowledge base (it is then synced by the caller), if the
    /// root policy lets `who` add it, and pins it by device and inode.
    pub fn add(
        &self,
        name: &str,
        root: &Path,
        who: AddedBy,
    ) -> Result<KnowledgeBaseRecord, RetrievalError> {
        source::validate_name(name)?;
        let root = self.config.roots.check(root, who)?;
        let pinned = RootDir::open(&root)?;
        let record = self
            .catalog
            .create_kb(name, &root.to_string_lossy(), now())?;
        let FileIdentity { dev, ino } = pinned.identity();
        self.catalog.set_kb_root_identity(name, dev, ino)?;
        Ok(KnowledgeBaseRecord {
            root_identity: Some((dev, ino)),
            ..record
        })
    }

    /// A cheap fingerprint of a knowledge base's folder (see `source::fingerprint`).
    pub fn folder_fingerprint(&self, name: &str) -> Result<u64, RetrievalError> {
        let kb = self.catalog.knowledge_base(name)?;
        let root = self.open_root(&kb)?;
        Ok(source::fingerprint(&source::scan(
            &root,
            &super::extract::is_supported,
        )))
    }

    /// Checks that a knowledge base's folder is still the one that was added.
    pub fn check_root(&self, name: &str) -> Result<(), RetrievalError> {
        let kb = self.catalog.knowledge_base(name)?;
        self.open_root(&kb).map(drop)
    }

    /// Takes the right to sync `name`; `SyncInProgress` when a sync of it is running.
    pub fn begin_sync(&self, name: &str) -> Result<SyncTicket, RetrievalError> {
        self.syncs.begin(name)
    }

    /// Asks the running sync of `name` to stop; `false` when none is running.
    pub fn cancel_sync(&self, name: &str) -> bool {
        self.syncs.cancel(name)
    }

    /// Indexes documents handed in directly into knowledge base `name` (created if
    /// missing, with `root` as its nominal folder). Used by evaluations.
    pub fn ingest_inline(
        &self,
        name: &str,
        root: &Path,
        documents: Vec<InlineDocument>,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<SyncReport, RetrievalError> {
        let _writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let started = Instant::now();
        source::validate_name(name)?;
        let kb = match self.catalog.knowledge_base(name) {
            Ok(kb) => kb,
            Err(_) => self
                .catalog
                .create_kb(name, &root.to_string_lossy(), now())?,
        };
        let total = documents.len();
        let mut report = SyncReport {
            kb: name.to_string(),
            ..SyncReport::default()
        };
        let mut done = 0;
        for batch in documents.chunks(DOCUMENTS_PER_BATCH * 4) {
            let refs: Vec<&Document> = batch.iter().map(|d| &d.document).collect();
            let chunked = self.chunk_and_embed(&refs)?;
            let mut changes = Vec::with_capacity(batch.len());
            for (document, chunks) in batch.iter().zip(chunked) {
                report.chunks_indexed += chunks.len();
                report.added += 1;
                let hash = content_hash(
                    serde_json::to_string(&document.document)
                        .unwrap_or_default()
                        .as_bytes(),
                );
                changes.push(DocumentChange::Upsert {
                    path: document.path.clone(),
                    content_hash: hash,
                    bytes: 0,
                    title: document.document.title.clone(),
                    chunks,
                });
            }
            let generation = self.commit_batch(&kb, changes)?;
            done += batch.len();
            progress(Progress::Committed {
                generation,
                files_done: done,
                files_total: total,
                chunks: report.chunks_indexed,
            });
        }
        report.finish_timing(started);
        Ok(report)
    }

    /// Removes a knowledge base, its catalogue rows and its index entries (indexes first,
    /// catalogue last, like a sync).
    pub fn remove(&self, name: &str) -> Result<(), RetrievalError> {
        let _writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        self.catalog.knowledge_base(name)?;
        let generation = self.catalog.generation()? + 1;
        let mut indexes = self.indexes.write().unwrap_or_else(|p| p.into_inner());
        let ids: Vec<u64> = indexes
            .chunk_kb
            .iter()
            .filter(|(_, kb)| kb.as_str() == name)
            .map(|(id, _)| *id)
            .collect();
        for id in &ids {
            indexes.vectors.remove(*id);
            indexes.chunk_kb.remove(id);
        }
        indexes
            .vectors
            .save(&self.dir.join("vectors"), generation)?;
        indexes.bm25.delete_kb(name)?;
        indexes.bm25.commit(generation)?;
        self.catalog.remove_kb(name, generation)?;
        self.compact_vectors(&mut indexes, generation)
    }

    /// Chunks each document and embeds all their chunks in one call (the embedding model
    /// batches them); returns the chunks per document, in order.
    fn chunk_and_embed(
        &self,
        documents: &[&Document],
    ) -> Result<Vec<Vec<ChunkRecord>>, RetrievalError> {
        let chunked: Vec<Vec<Chunk>> = documents
            .iter()
            .map(|d| chunk_document(d, &self.config.chunking, self.counter.as_ref()))
            .collect();
        self.embed_chunks(documents, chunked)
    }

    /// Opens a knowledge base's root, refusing one that is no longer the folder that was
    /// added. A knowledge base added before roots were pinned is pinned now.
    fn open_root(&self, kb: &KnowledgeBaseRecord) -> Result<RootDir, RetrievalError> {
        let path = Path::new(&kb.root);
        if let Some((dev, ino)) = kb.root_identity {
            return Ok(RootDir::open_pinned(path, FileIdentity { dev, ino })?);
        }
        let root = RootDir::open(path)?;
        let FileIdentity { dev, ino } = root.identity();
        self.catalog.set_kb_root_identity(&kb.name, dev, ino)?;
        Ok(root)
    }

    /// Embeds the chunks of each document in one call (the embedding model batches them);
    /// returns the chunk records per document, in order.
    fn embed_chunks(
        &self,
        documents: &[&Document],
        chunked: Vec<Vec<Chunk>>,
    ) -> Result<Vec<Vec<ChunkRecord>>, RetrievalError> {
        let inputs: Vec<String> = documents
            .iter()
            .zip(&chunked)
            .flat_map(|(document, chunks)| {
                chunks
                    .iter()
                    .map(|c| embedding_input(document.title.as_deref(), &c.heading_path, &c.text))
            })
            .collect();
        let mut embeddings = if inputs.is_empty() {
            Vec::new()
        } else {
            self.embedder.embed(inputs)?
        }
        .into_iter();
        let mut records = Vec::with_capacity(documents.len());
        for chunks in chunked {
            let mut document_records = Vec::with_capacity(chunks.len());
            for chunk in chunks {
                let embedding = embeddings
                    .next()
                    .ok_or_else(|| super::EmbedError("fewer vectors than inputs".into()))?;
                document_records.push(ChunkRecord {
                    id: 0,
                    ordinal: chunk.ordinal,
                    heading_path: serde_json::to_string(&chunk.heading_path)
                        .unwrap_or_else(|_| "[]".into()),
                    location: serde_json::to_string(&chunk.location)
                        .unwrap_or_else(|_| "null".into()),
                    text: chunk.text,
                    tokens: chunk.tokens,
                    embedding,
                });
            }
            records.push(document_records);
        }
        Ok(records)
    }

    /// Writes one batch: ids reserved, indexes updated and committed under a new
    /// generation, then the catalogue committed (last).
    fn commit_batch(
        &self,
        kb: &KnowledgeBaseRecord,
        mut changes: Vec<DocumentChange>,
    ) -> Result<u64, RetrievalError> {
        let generation = self.catalog.generation()? + 1;
        let replaced: Vec<String> = changes
            .iter()
            .map(|c| match c {
                DocumentChange::Upsert { path, .. } | DocumentChange::Delete { path } => {
                    path.clone()
                }
            })
            .collect();
        let old_ids = self.catalog.chunk_ids_of(kb.id, &replaced)?;
        let new_count: u64 = changes
            .iter()
            .map(|c| {
                if let DocumentChange::Upsert { chunks, .. } = c {
                    chunks.len() as u64
                } else {
                    0
                }
            })
            .sum();
        let mut next_id = if new_count > 0 {
            self.catalog.reserve_chunk_ids(new_count)?
        } else {
            0
        };
        let mut indexes = self.indexes.write().unwrap_or_else(|p| p.into_inner());
        indexes.bm25.delete_chunks(&old_ids)?;
        for id in &old_ids {
            indexes.vectors.remove(*id);
            indexes.chunk_kb.remove(id);
        }
        let mut docs = Vec::new();
        for change in &mut changes {
            let DocumentChange::Upsert {
                path,
                title,
                chunks,
                ..
            } = change
            else {
                continue;
            };
            for chunk in chunks.iter_mut() {
                chunk.id = next_id;
                next_id += 1;
                indexes.vectors.insert(chunk.id, &chunk.embedding)?;
                indexes.chunk_kb.insert(chunk.id, kb.name.clone());
                docs.push(Bm25Doc {
                    chunk_id: chunk.id,
                    kb: kb.name.clone(),
                    title: bm25_title(title.as_deref(), &chunk.heading_path),
                    text: chunk.text.clone(),
                });
            }
            let _ = path;
        }
        indexes.bm25.add(&docs)?;
        indexes.bm25.commit(generation)?;
        indexes
            .vectors
            .save(&self.dir.join("vectors"), generation)?;
        self.catalog
            .commit_sync(kb.id, &changes, generation, now())?;
        self.compact_vectors(&mut indexes, generation)?;
        Ok(generation)
    }

    /// Rebuilds the vector index from the catalogue when too much of it is tombstones.
    /// Runs after the catalogue commit, so the rebuilt index reflects `generation`.
    fn compact_vectors(
        &self,
        indexes: &mut Indexes,
        generation: u64,
    ) -> Result<(), RetrievalError> {
        let live = indexes.vectors.len().max(1) as f64;
        if (indexes.vectors.tombstones() as f64) / live <= MAX_TOMBSTONE_SHARE {
            return Ok(());
        }
        let mut rebuilt = VectorIndex::new(self.embedder.dimensions());
        self.catalog.for_each_chunk(&mut |chunk, embedding| {
            rebuilt
                .insert(chunk.id, &embedding)
                .map_err(|e| crate::store::StoreError::Corrupt(e.to_string()))
        })?;
        rebuilt.save(&self.dir.join("vectors"), generation)?;
        indexes.vectors = rebuilt;
        Ok(())
    }
}

fn bm25_doc(chunk: &CatalogChunk) -> Bm25Doc {
    Bm25Doc {
        chunk_id: chunk.id,
        kb: chunk.kb.clone(),
        title: bm25_title(chunk.title.as_deref(), &chunk.heading_path),
        text: chunk.text.clone(),
    }
}

/// Title field text: document title and heading path (stored as JSON).
fn bm25_title(title: Option<&str>, heading_path_json: &str) -> String {
    let headings: Vec<String> = serde_json::from_str(heading_path_json).unwrap_or_default();
    let mut parts: Vec<String> = title.into_iter().map(str::to_string).collect();
    parts.extend(headings);
    parts.join(" / ")
}

/// What is embedded for a chunk: its title and heading path give it context.
fn embedding_input(title: Option<&str>, heading_path: &[String], text: &str) -> String {
    let mut context: Vec<&str> = title.into_iter().collect();
    context.extend(heading_path.iter().map(String::as_str));
    if context.is_empty() {
        text.to_string()
    } else {
        format!("{}\n{text}", context.join(" / "))
    }
}

fn content_hash(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

mod search;
mod sync;
#[cfg(test)]
mod tests;
