//! The knowledge-base catalogue: knowledge bases, their documents (with content hashes for
//! incremental sync) and chunks (text, citation, embedding). The catalogue is committed
//! last in every sync, and records the index generation it reflects.

use rusqlite::{params, Connection, OptionalExtension, Transaction};

use super::{Result, Store, StoreError};

/// A knowledge base with its counts.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct KnowledgeBaseRecord {
    pub id: i64,
    pub name: String,
    pub root: String,
    pub created_at: i64,
    pub synced_at: Option<i64>,
    pub documents: i64,
    pub chunks: i64,
    /// Who may read it besides admins (`role:R`, `group:G`, `user:U`), sorted.
    pub readers: Vec<String>,
    /// Device and inode of the root folder when it was added (None before they were kept).
    #[serde(skip)]
    pub root_identity: Option<(u64, u64)>,
}

/// A document as last synced.
#[derive(Debug, Clone, PartialEq)]
pub struct CatalogDocument {
    pub id: i64,
    pub path: String,
    pub content_hash: String,
    pub bytes: i64,
}

/// A chunk to store. `heading_path` and `location` are JSON texts owned by retrieval.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkRecord {
    pub id: u64,
    pub ordinal: u32,
    pub text: String,
    pub heading_path: String,
    pub location: String,
    pub tokens: u32,
    pub embedding: Vec<f32>,
}

/// One document's change in a sync.
#[derive(Debug, Clone, PartialEq)]
pub enum DocumentChange {
    /// New or changed: replaces any previous version and its chunks.
    Upsert {
        path: String,
        content_hash: String,
        bytes: i64,
        title: Option<String>,
        chunks: Vec<ChunkRecord>,
    },
    /// The file is gone.
    Delete { path: String },
}

/// A stored chunk with what a search hit and an index rebuild need.
#[derive(Debug, Clone, PartialEq)]
pub struct CatalogChunk {
    pub id: u64,
    pub kb: String,
    pub path: String,
    pub title: Option<String>,
    pub ordinal: u32,
    pub text: String,
    pub heading_path: String,
    pub location: String,
    pub tokens: u32,
}

/// Catalogue operations on the store.
pub trait KbCatalog {
    fn create_kb(&self, name: &str, root: &str, now: i64) -> Result<KnowledgeBaseRecord>;
    fn knowledge_bases(&self) -> Result<Vec<KnowledgeBaseRecord>>;
    fn knowledge_base(&self, name: &str) -> Result<KnowledgeBaseRecord>;
    fn documents(&self, kb_id: i64) -> Result<Vec<CatalogDocument>>;
    /// Chunk ids of the named documents (to remove them from the indexes).
    fn chunk_ids_of(&self, kb_id: i64, paths: &[String]) -> Result<Vec<u64>>;
    /// Reserves `count` consecutive chunk ids; returns the first. Committed at once.
    fn reserve_chunk_ids(&self, count: u64) -> Result<u64>;
    /// The index generation the catalogue reflects.
    fn generation(&self) -> Result<u64>;
    /// Applies one sync's changes and records `generation`, in one transaction.
    fn commit_sync(
        &self,
        kb_id: i64,
        changes: &[DocumentChange],
        generation: u64,
        now: i64,
    ) -> Result<()>;
    /// Records the device and inode of a knowledge base's root folder.
    fn set_kb_root_identity(&self, name: &str, dev: u64, ino: u64) -> Result<()>;
    /// Deletes a knowledge base and records `generation`; returns its chunk ids.
    fn remove_kb(&self, name: &str, generation: u64) -> Result<Vec<u64>>;
    fn chunks(&self, ids: &[u64]) -> Result<Vec<CatalogChunk>>;
    /// The chunk and up to `radius` chunks either side of it in its document, in order;
    /// empty when there is no such chunk.
    fn chunks_around(&self, id: u64, radius: u32) -> Result<Vec<CatalogChunk>>;
    /// Visits every chunk with its embedding, in id order (index rebuilds).
    fn for_each_chunk(
        &self,
        visit: &mut dyn FnMut(CatalogChunk, Vec<f32>) -> Result<()>,
    ) -> Result<()>;
}

impl KbCatalog for Store {
    fn create_kb(&self, name: &str, root: &str, now: i64) -> Result<KnowledgeBaseRecord> {
        self.write(|t| {
            let exists: Option<i64> = t
                .query_row(
                    "SELECT id FROM knowledge_bases WHERE name = ?1",
                    [name],
                    |r| r.get(0),
                )
                .optional()?;
            if exists.is_some() {
                return Err(StoreError::Conflict(format!(
                    "knowledge base `{name}` already exists"
                )));
            }
            t.execute(
                "INSERT INTO knowledge_bases (name, root, created_at) VALUES (?1, ?2, ?3)",
                params![name, root, now],
            )?;
            Ok(())
        })?;
        self.knowledge_base(name)
    }

    fn knowledge_bases(&self) -> Result<Vec<KnowledgeBaseRecord>> {
        self.read(|c| {
            let mut statement = c.prepare(&format!("{KB_SELECT} ORDER BY k.name"))?;
            let rows = statement.query_map([], kb_from_row)?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    fn knowledge_base(&self, name: &str) -> Result<KnowledgeBaseRecord> {
        self.read(|c| {
            c.query_row(
                &format!("{KB_SELECT} WHERE k.name = ?1"),
                [name],
                kb_from_row,
            )
            .optional()?
            .ok_or_else(|| StoreError::NotFound(format!("knowledge base `{name}`")))
        })
    }

    fn documents(&self, kb_id: i64) -> Result<Vec<CatalogDocument>> {
        self.read(|c| {
            let mut statement =
                c.prepare("SELECT id, path, content_hash, bytes FROM kb_documents WHERE kb_id = ?1 ORDER BY path")?;
            let rows = statement.query_map([kb_id], |r| {
                Ok(CatalogDocument { id: r.get(0)?, path: r.get(1)?, content_hash: r.get(2)?, bytes: r.get(3)? })
            })?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    fn chunk_ids_of(&self, kb_id: i64, paths: &[String]) -> Result<Vec<u64>> {
        self.read(|c| {
            let mut statement = c.prepare(
                "SELECT c.id FROM kb_chunks c JOIN kb_documents d ON d.id = c.document_id WHERE d.kb_id = ?1 AND d.path = ?2",
            )?;
            let mut ids = Vec::new();
            for path in paths {
                let rows = statement.query_map(params![kb_id, path], |r| r.get::<_, i64>(0))?;
                for id in rows {
                    ids.push(id? as u64);
                }
            }
            Ok(ids)
        })
    }

    fn reserve_chunk_ids(&self, count: u64) -> Result<u64> {
        self.write(|t| {
            let first: i64 = t.query_row(
                "SELECT next_chunk_id FROM kb_state WHERE singleton = 1",
                [],
                |r| r.get(0),
            )?;
            t.execute(
                "UPDATE kb_state SET next_chunk_id = ?1 WHERE singleton = 1",
                [first + count as i64],
            )?;
            Ok(first as u64)
        })
    }

    fn generation(&self) -> Result<u64> {
        self.read(|c| {
            Ok(c.query_row(
                "SELECT generation FROM kb_state WHERE singleton = 1",
                [],
                |r| r.get::<_, i64>(0),
            )? as u64)
        })
    }

    fn commit_sync(
        &self,
        kb_id: i64,
        changes: &[DocumentChange],
        generation: u64,
        now: i64,
    ) -> Result<()> {
        self.write(|t| {
            for change in changes {
                apply_change(t, kb_id, change)?;
            }
            t.execute(
                "UPDATE knowledge_bases SET synced_at = ?1 WHERE id = ?2",
                params![now, kb_id],
            )?;
            set_generation(t, generation)
        })
    }

    fn chunks_around(&self, id: u64, radius: u32) -> Result<Vec<CatalogChunk>> {
        self.read(|c| {
            let mut statement = c.prepare(&format!(
                "{CHUNK_SELECT} JOIN kb_chunks target ON target.document_id = c.document_id \
                 WHERE target.id = ?1 AND c.ordinal BETWEEN target.ordinal - ?2 AND target.ordinal + ?2 \
                 ORDER BY c.ordinal"
            ))?;
            let rows = statement.query_map(params![id as i64, radius], chunk_from_row)?;
            Ok(rows
                .map(|row| row.map(|(chunk, _)| chunk))
                .collect::<rusqlite::Result<_>>()?)
        })
    }

    fn set_kb_root_identity(&self, name: &str, dev: u64, ino: u64) -> Result<()> {
        self.write(|t| {
            let updated = t.execute(
                "UPDATE knowledge_bases SET root_dev = ?2, root_ino = ?3 WHERE name = ?1",
                params![name, dev as i64, ino as i64],
            )?;
            if updated == 0 {
                return Err(StoreError::NotFound(format!("knowledge base `{name}`")));
            }
            Ok(())
        })
    }

    fn remove_kb(&self, name: &str, generation: u64) -> Result<Vec<u64>> {
        self.write(|t| {
            let kb_id: i64 = t
                .query_row("SELECT id FROM knowledge_bases WHERE name = ?1", [name], |r| r.get(0))
                .optional()?
                .ok_or_else(|| StoreError::NotFound(format!("knowledge base `{name}`")))?;
            let mut statement =
                t.prepare("SELECT c.id FROM kb_chunks c JOIN kb_documents d ON d.id = c.document_id WHERE d.kb_id = ?1")?;
            let ids: Vec<u64> =
                statement.query_map([kb_id], |r| r.get::<_, i64>(0))?.map(|id| id.map(|i| i as u64)).collect::<rusqlite::Result<_>>()?;
            drop(statement);
            t.execute("DELETE FROM knowledge_bases WHERE id = ?1", [kb_id])?;
            set_generation(t, generation)?;
            Ok(ids)
        })
    }

    fn chunks(&self, ids: &[u64]) -> Result<Vec<CatalogChunk>> {
        self.read(|c| {
            let mut statement = c.prepare(&format!("{CHUNK_SELECT} WHERE c.id = ?1"))?;
            let mut chunks = Vec::with_capacity(ids.len());
            for id in ids {
                if let Some(chunk) = statement
                    .query_row([*id as i64], |r| chunk_from_row(r).map(|(chunk, _)| chunk))
                    .optional()?
                {
                    chunks.push(chunk);
                }
            }
            Ok(chunks)
        })
    }

    fn for_each_chunk(
        &self,
        visit: &mut dyn FnMut(CatalogChunk, Vec<f32>) -> Result<()>,
    ) -> Result<()> {
        self.read(|c| {
            let mut statement = c.prepare(&format!("{CHUNK_SELECT} ORDER BY c.id"))?;
            let mut rows = statement.query([])?;
            while let Some(row) = rows.next()? {
                let (chunk, embedding) = chunk_from_row(row)?;
                visit(chunk, embedding)?;
            }
            Ok(())
        })
    }
}

const KB_SELECT: &str = "SELECT k.id, k.name, k.root, k.created_at, k.synced_at, \
     (SELECT count(*) FROM kb_documents d WHERE d.kb_id = k.id), \
     (SELECT count(*) FROM kb_chunks c JOIN kb_documents d ON d.id = c.document_id WHERE d.kb_id = k.id), \
     (SELECT group_concat(reader, char(10)) FROM kb_readers r WHERE r.kb_id = k.id), \
     k.root_dev, k.root_ino \
     FROM knowledge_bases k";

const CHUNK_SELECT: &str = "SELECT c.id, k.name, d.path, d.title, c.ordinal, c.text, c.heading_path, c.location, c.tokens, c.embedding \
     FROM kb_chunks c JOIN kb_documents d ON d.id = c.document_id JOIN knowledge_bases k ON k.id = d.kb_id";

fn kb_from_row(r: &rusqlite::Row) -> rusqlite::Result<KnowledgeBaseRecord> {
    Ok(KnowledgeBaseRecord {
        id: r.get(0)?,
        name: r.get(1)?,
        root: r.get(2)?,
        created_at: r.get(3)?,
        synced_at: r.get(4)?,
        documents: r.get(5)?,
        chunks: r.get(6)?,
        readers: {
            let joined: Option<String> = r.get(7)?;
            let mut readers: Vec<String> = joined
                .map(|j| j.split('\n').map(str::to_owned).collect())
                .unwrap_or_default();
            readers.sort();
            readers
        },
        root_identity: match (r.get::<_, Option<i64>>(8)?, r.get::<_, Option<i64>>(9)?) {
            (Some(dev), Some(ino)) => Some((dev as u64, ino as u64)),
            _ => None,
        },
    })
}

fn chunk_from_row(r: &rusqlite::Row) -> rusqlite::Result<(CatalogChunk, Vec<f32>)> {
    let blob: Vec<u8> = r.get(9)?;
    let chunk = CatalogChunk {
        id: r.get::<_, i64>(0)? as u64,
        kb: r.get(1)?,
        path: r.get(2)?,
        title: r.get(3)?,
        ordinal: r.get(4)?,
        text: r.get(5)?,
        heading_path: r.get(6)?,
        location: r.get(7)?,
        tokens: r.get(8)?,
    };
    Ok((chunk, blob_to_vector(&blob)))
}

fn apply_change(t: &Transaction, kb_id: i64, change: &DocumentChange) -> Result<()> {
    match change {
        DocumentChange::Delete { path } => {
            t.execute(
                "DELETE FROM kb_documents WHERE kb_id = ?1 AND path = ?2",
                params![kb_id, path],
            )?;
        }
        DocumentChange::Upsert {
            path,
            content_hash,
            bytes,
            title,
            chunks,
        } => {
            t.execute(
                "DELETE FROM kb_documents WHERE kb_id = ?1 AND path = ?2",
                params![kb_id, path],
            )?;
            t.execute(
                "INSERT INTO kb_documents (kb_id, path, content_hash, bytes, title) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![kb_id, path, content_hash, bytes, title],
            )?;
            let document_id = t.last_insert_rowid();
            let mut insert = t.prepare_cached(
                "INSERT INTO kb_chunks (id, document_id, ordinal, text, heading_path, location, tokens, embedding) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?;
            for chunk in chunks {
                insert.execute(params![
                    chunk.id as i64,
                    document_id,
                    chunk.ordinal,
                    chunk.text,
                    chunk.heading_path,
                    chunk.location,
                    chunk.tokens,
                    vector_to_blob(&chunk.embedding)
                ])?;
            }
        }
    }
    Ok(())
}

fn set_generation(t: &Connection, generation: u64) -> Result<()> {
    t.execute(
        "UPDATE kb_state SET generation = ?1 WHERE singleton = 1",
        [generation as i64],
    )?;
    Ok(())
}

fn vector_to_blob(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn blob_to_vector(blob: &[u8]) -> Vec<f32> {
    blob.chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(id: u64) -> ChunkRecord {
        ChunkRecord {
            id,
            ordinal: 0,
            text: format!("chunk {id}"),
            heading_path: "[]".into(),
            location: r#"{"kind":"lines","start":1,"end":2}"#.into(),
            tokens: 2,
            embedding: vec![0.5, -1.0],
        }
    }

    #[test]
    fn sync_replaces_deletes_and_records_generation() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("w.db")).unwrap();
        let kb = store.create_kb("ops", "/srv/ops", 1).unwrap();
        assert!(matches!(
            store.create_kb("ops", "/x", 1),
            Err(StoreError::Conflict(_))
        ));
        let first = store.reserve_chunk_ids(3).unwrap();
        let upsert = |path: &str, ids: &[u64]| DocumentChange::Upsert {
            path: path.into(),
            content_hash: "h".into(),
            bytes: 10,
            title: None,
            chunks: ids.iter().map(|&i| chunk(i)).collect(),
        };
        store
            .commit_sync(
                kb.id,
                &[
                    upsert("a.md", &[first, first + 1]),
                    upsert("b.md", &[first + 2]),
                ],
                1,
                2,
            )
            .unwrap();
        assert_eq!(store.generation().unwrap(), 1);
        assert_eq!(store.knowledge_base("ops").unwrap().chunks, 3);
        assert_eq!(
            store.chunk_ids_of(kb.id, &["a.md".into()]).unwrap(),
            vec![first, first + 1]
        );
        let next = store.reserve_chunk_ids(1).unwrap();
        assert_eq!(next, first + 3);
        store
            .commit_sync(
                kb.id,
                &[
                    upsert("a.md", &[next]),
                    DocumentChange::Delete {
                        path: "b.md".into(),
                    },
                ],
                2,
                3,
            )
            .unwrap();
        let chunks = store.chunks(&[first, next]).unwrap();
        assert_eq!(chunks.len(), 1);
        assert_eq!(
            (chunks[0].id, chunks[0].kb.as_str(), chunks[0].path.as_str()),
            (next, "ops", "a.md")
        );
        let mut seen = Vec::new();
        store
            .for_each_chunk(&mut |c, e| {
                seen.push((c.id, e));
                Ok(())
            })
            .unwrap();
        assert_eq!(seen, vec![(next, vec![0.5, -1.0])]);
        assert_eq!(store.remove_kb("ops", 3).unwrap(), vec![next]);
        assert!(store.knowledge_bases().unwrap().is_empty());
        assert_eq!(store.generation().unwrap(), 3);
    }
}
