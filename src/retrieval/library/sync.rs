//! Syncing a knowledge base with its folder: each listed file read through the pinned
//! root within its budget, extracted and chunked, embedded in batches, and committed batch
//! by batch (indexes first, catalogue last), reporting progress and stopping when cancelled.

use super::*;

impl Library {
    /// Brings a knowledge base in line with its folder (refused while another sync of it
    /// runs).
    pub fn sync(
        &self,
        name: &str,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<SyncReport, RetrievalError> {
        let ticket = self.begin_sync(name)?;
        self.run_sync(&ticket, progress)
    }

    /// Brings the ticket's knowledge base in line with its folder. Stops with `Cancelled`
    /// at the next file or batch once cancelled: batches already committed stay, and the
    /// next sync does the rest.
    pub fn run_sync(
        &self,
        ticket: &SyncTicket,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<SyncReport, RetrievalError> {
        let _writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let started = Instant::now();
        let name = ticket.name();
        let kb = self.catalog.knowledge_base(name)?;
        let root = self.open_root(&kb)?;
        let scan = source::scan(&root, &crate::retrieval::extract::is_supported);
        let known: HashMap<String, String> = self
            .catalog
            .documents(kb.id)?
            .into_iter()
            .map(|d| (d.path, d.content_hash))
            .collect();
        let mut report = SyncReport {
            kb: name.to_string(),
            skipped: scan.skipped.clone(),
            ..SyncReport::default()
        };
        let mut to_index: Vec<(SourceFile, String, Vec<u8>)> = Vec::new();
        for file in &scan.files {
            if ticket.is_cancelled() {
                return Err(RetrievalError::Cancelled);
            }
            let bytes = match read_listed(&root, &file.path) {
                Ok(bytes) => bytes,
                Err(NotRead::Skipped(skipped)) => {
                    report.skipped.push(skipped);
                    continue;
                }
                Err(NotRead::Failed(failed)) => {
                    report.failed.push(failed);
                    continue;
                }
            };
            let hash = content_hash(&bytes);
            match known.get(&file.path) {
                Some(old) if *old == hash => report.unchanged += 1,
                _ => to_index.push((file.clone(), hash, bytes)),
            }
        }
        // A file that could not be read this time is not taken for deleted.
        let present: HashSet<&str> = scan.files.iter().map(|f| f.path.as_str()).collect();
        let deleted: Vec<String> = known
            .keys()
            .filter(|p| !present.contains(p.as_str()))
            .cloned()
            .collect();
        report.deleted = deleted.len();
        progress(Progress::Scanned {
            files: scan.files.len(),
            skipped: report.skipped.len(),
            unchanged: report.unchanged,
            to_index: to_index.len(),
            to_delete: deleted.len(),
        });
        let total = to_index.len();
        let mut done = 0;
        let mut deletions: Vec<DocumentChange> = deleted
            .into_iter()
            .map(|path| DocumentChange::Delete { path })
            .collect();
        let budget = self.config.max_chunks_per_sync;
        let mut planned = 0usize;
        for batch in to_index.chunks(DOCUMENTS_PER_BATCH) {
            let mut prepared = Vec::with_capacity(batch.len());
            for (file, hash, bytes) in batch {
                if ticket.is_cancelled() {
                    return Err(RetrievalError::Cancelled);
                }
                if planned >= budget {
                    report.failed.push(left_for_next_sync(&file.path, budget));
                    continue;
                }
                match self.prepare(&file.path, bytes) {
                    // A file that would pass the budget waits for the next sync (unless it
                    // is the first: one file alone is bounded by the per-file limits).
                    Ok((_, chunks)) if planned + chunks.len() > budget && planned > 0 => {
                        planned = budget;
                        report.failed.push(left_for_next_sync(&file.path, budget));
                    }
                    Ok((document, chunks)) => {
                        planned += chunks.len();
                        prepared.push((file, hash, bytes.len(), document, chunks));
                    }
                    Err(err) => report.failed.push(Failed {
                        path: file.path.clone(),
                        kind: FailKind::from(&err),
                        error: err.to_string(),
                    }),
                }
            }
            let chunked: Vec<Vec<Chunk>> = prepared
                .iter_mut()
                .map(|p| std::mem::take(&mut p.4))
                .collect();
            let documents: Vec<&Document> = prepared.iter().map(|p| &p.3).collect();
            let embedded = self.embed_chunks(&documents, chunked)?;
            if ticket.is_cancelled() {
                return Err(RetrievalError::Cancelled);
            }
            let mut changes = std::mem::take(&mut deletions);
            let mut batch_chunks = 0;
            for ((file, hash, bytes, document, _), chunks) in prepared.into_iter().zip(embedded) {
                if known.contains_key(&file.path) {
                    report.updated += 1;
                } else {
                    report.added += 1;
                }
                batch_chunks += chunks.len();
                done += 1;
                progress(Progress::Indexed {
                    files_done: done,
                    files_total: total,
                    chunks: report.chunks_indexed + batch_chunks,
                    path: file.path.clone(),
                });
                changes.push(DocumentChange::Upsert {
                    path: file.path.clone(),
                    content_hash: hash.clone(),
                    bytes: bytes as i64,
                    title: document.title,
                    chunks,
                });
            }
            report.chunks_indexed += batch_chunks;
            let generation = self.commit_batch(&kb, changes)?;
            progress(Progress::Committed {
                generation,
                files_done: done,
                files_total: total,
                chunks: report.chunks_indexed,
            });
        }
        if ticket.is_cancelled() {
            return Err(RetrievalError::Cancelled);
        }
        if !deletions.is_empty() {
            let generation = self.commit_batch(&kb, deletions)?;
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

    /// Extracts and chunks one file within the per-file time budget.
    fn prepare(&self, path: &str, bytes: &[u8]) -> Result<(Document, Vec<Chunk>), ExtractError> {
        let limits = &self.config.extract_limits;
        let deadline = Instant::now().checked_add(limits.max_time_per_file);
        let document = extract_within(path, bytes, limits, deadline)?;
        let chunks = chunk_document(&document, &self.config.chunking, self.counter.as_ref());
        if chunks.len() > limits.max_chunks_per_file {
            return Err(ExtractError::TooManyChunks {
                chunks: chunks.len(),
                limit: limits.max_chunks_per_file,
            });
        }
        check_deadline(deadline, limits)?;
        Ok((document, chunks))
    }
}

/// Why a listed file was not read.
pub(super) enum NotRead {
    Skipped(Skipped),
    Failed(Failed),
}

/// Reads a listed file through the pinned root: never through a symlink, only a regular
/// file, and no more than `MAX_FILE_BYTES` (it may have grown since it was listed).
pub(super) fn read_listed(root: &RootDir, path: &str) -> Result<Vec<u8>, NotRead> {
    let failed = |kind: FailKind, error: String| {
        NotRead::Failed(Failed {
            path: path.to_string(),
            kind,
            error,
        })
    };
    let file = root.open_file(path).map_err(|refusal| match refusal {
        OpenRefusal::NotRegular(entry) => {
            let (kind, reason) = source::skip_for(entry);
            NotRead::Skipped(Skipped {
                path: path.to_string(),
                kind,
                reason: format!("{reason} (changed since it was listed)"),
            })
        }
        other => failed(FailKind::Unreadable, other.to_string()),
    })?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|err| failed(FailKind::Unreadable, format!("cannot read: {err}")))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        let error = format!("grew past the {MAX_FILE_BYTES}-byte limit while being read");
        return Err(failed(FailKind::TooLarge, error));
    }
    Ok(bytes)
}

/// A file this sync leaves because it has indexed `budget` chunks already.
fn left_for_next_sync(path: &str, budget: usize) -> Failed {
    Failed {
        path: path.to_owned(),
        kind: FailKind::SyncBudgetSpent,
        error: format!(
            "this sync indexed its limit of {budget} chunks; the next sync goes on with this file"
        ),
    }
}
